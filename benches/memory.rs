//! What an idle session costs in memory: proportional set size (PSS, shared pages split
//! between the processes mapping them) of everything a warden server started for its
//! sessions, divided by the number of sessions, for 1, 20 and 200 sessions that each ran
//! one `pass` and then sat idle. Beside it, in the same run, the PSS of as many bare
//! `python3 -I` interpreters waiting on stdin (the least an interpreter per session can
//! cost), as a ratio.
//!
//! Counted: every descendant of the server (helpers and workers), not the server itself,
//! whose own RSS is printed on its own line. The warm pool is off so that no
//! session-less worker is counted; workers are not capped below the session count, so
//! every session keeps its worker. PSS needs read access to `smaps_rollup`, so the bench
//! reports only when it runs as root.
//!
//! `cargo bench --bench memory`; `WARDEN_BENCH_QUICK=1` changes nothing (the three sizes
//! are the measurement).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};

use support::{Client, PYTHON};

const SIZES: [usize; 3] = [1, 20, 200];

fn main() {
    support::bench_main(run);
}

async fn run() {
    println!(
        "warden memory per idle session: release build, host backend, PSS of the server's descendants / sessions"
    );
    if !running_as_root() {
        println!("skipped: PSS of workers under other uids needs root (and Linux's /proc)");
        return;
    }
    for sessions in SIZES {
        let baseline = bare_interpreters(sessions);
        let (pss, processes, server_rss) = warden_sessions(sessions).await;
        println!(
            "{sessions:>3} sessions: {:>6.2} MiB PSS per session ({:.2} processes each) | {:.2}× bare python3 -I ({:.2} MiB) | server RSS {:.1} MiB",
            mib(pss) / sessions as f64,
            processes as f64 / sessions as f64,
            pss as f64 / baseline as f64,
            mib(baseline) / sessions as f64,
            server_rss as f64 / 1024.0,
        );
    }
}

/// Whether the effective uid is 0, read from `/proc` so the bench builds on every target
/// (elsewhere there is no `/proc`, and the bench reports itself skipped).
fn running_as_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

/// PSS (bytes) of the server's descendants with `sessions` idle sessions, how many
/// processes they are, and the server's own RSS (KiB).
async fn warden_sessions(sessions: usize) -> (u64, usize, u64) {
    let cap = (sessions + 8).to_string();
    let server = Client::warden(&[
        ("SANDBOX_WARM_WORKERS", "0"),
        ("SANDBOX_MAX_SESSIONS", &cap),
        ("SANDBOX_MAX_WORKERS", &cap),
        ("SANDBOX_DISK_LIMIT", "16m"),
    ])
    .await;
    for i in 0..sessions {
        let r = server.call(&format!("s{i}"), "pass").await;
        assert_eq!(r["status"], "ok", "session s{i}: {r}");
    }
    let pids = descendants(server.pid);
    let pss = pids.iter().map(|&p| pss_bytes(p)).sum();
    let mut by_name: HashMap<String, (u64, usize)> = HashMap::new();
    for &p in &pids {
        let name = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        let e = by_name.entry(name.trim().to_string()).or_default();
        e.0 += pss_bytes(p);
        e.1 += 1;
    }
    let mut parts: Vec<_> = by_name.into_iter().collect();
    parts.sort();
    for (name, (bytes, count)) in parts {
        println!(
            "     of which {name}: {count} processes, {:.2} MiB PSS each",
            mib(bytes) / count as f64
        );
    }
    let rss = support::rss_kib(server.pid);
    server.stop().await;
    (pss, pids.len(), rss)
}

/// PSS (bytes) of `count` bare interpreters started at once and waiting on stdin.
fn bare_interpreters(count: usize) -> u64 {
    let mut children: Vec<Child> = (0..count)
        .map(|_| {
            Command::new(PYTHON)
                .args([
                    "-I",
                    "-c",
                    "import sys; print(1, flush=True); sys.stdin.read()",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        // The interpreter printed once it finished starting: it is idle from here on.
        let mut one = [0u8; 2];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut one).unwrap();
    }
    let pss = children.iter().map(|c| pss_bytes(c.id())).sum();
    for mut child in children {
        drop(child.stdin.take());
        child.wait().unwrap();
    }
    pss
}

/// Every live descendant of `root` (not `root` itself), from `/proc/*/stat`.
fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: fields follow the last ')'.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        children.entry(ppid).or_default().push(pid);
    }
    let mut seen = HashSet::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            if seen.insert(c) {
                stack.push(c);
            }
        }
    }
    seen.into_iter().collect()
}

/// A process's PSS in bytes (0 when it is gone or unreadable).
fn pss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
