//! End-to-end latency of `execute_python` through a real MCP client (rmcp over stdio)
//! against the release binary, each figure beside the same run's unsandboxed
//! `python3 -c` baseline server and native in-process CPython (see `support`), as
//! ratios:
//!
//! - a warm call (`print(1+1)` in a session that has a worker);
//! - the first call of a new session, with the warm pool ready and with no pool;
//! - 64 sessions calling at once from one client, beside one session calling alone
//!   (per-call p50/p99 and calls per second);
//! - a warm call in a workspace of 10,000 files;
//! - a warm call with every cap set (`SANDBOX_MAX_*`, `SANDBOX_CLIENT_MAX_*`; none
//!   reached), interleaved with the same call on a server without caps;
//! - 1 MiB and 10 MiB printed, through `print` and in one raw `os.write` (latency, and
//!   the server's own CPU time per MiB);
//! - 10,000 session names used one after another with idle expiry on (latency, and the
//!   server's memory along the way);
//! - first-seen cells of about 20, 1,000 and 10,000 lines in a session with a worker,
//!   guard enforcing beside `CODEGUARD=off` (what the guard adds to a call, its check
//!   overlapping the worker's compile; `WARDEN_BENCH_COMPARE_BIN=path` also runs an
//!   earlier build's server), and the baseline server given the same cells.
//!
//! `cargo bench --bench latency`; `WARDEN_BENCH_QUICK=1` takes fewer samples (CI prints
//! the ratios and never fails on them); `WARDEN_BENCH_ONLY=new,output` runs some parts;
//! `WARDEN_BENCH_CHURN_NAMES=N` uses N names in the churn part instead of 10,000.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::cpython::exec_p50_ms;
use support::{Client, Stats, n, row, stats};

const PRINT: &str = "print(1+1)";
/// The idle time before a new session's first call (and before the warm call timed
/// after the same pause), beside the wait for the pool to refill.
const PAUSE: Duration = Duration::from_millis(50);

fn main() {
    support::bench_main(run);
}

async fn run() {
    println!(
        "warden end-to-end latency: release build, host backend, rmcp client over stdio, {} mode",
        if support::quick() { "quick" } else { "full" }
    );
    println!(
        "ratios: warden p50 / baseline p50 (python3 -c server) and / native p50 (in-process exec)"
    );
    let scratch = tempfile::tempdir().unwrap();
    let baseline = Client::baseline(scratch.path()).await;
    let mut base = Vec::new();
    for _ in 0..n(60, 15) {
        base.push(baseline.timed("b", PRINT, Some("2\n")).await);
    }
    let base = stats(&base);
    let native = exec_p50_ms(PRINT, 5000);
    row(
        "baseline: python3 -c server, print(1+1)",
        base,
        None,
        Some(native),
    );

    if wanted("new") {
        warm_and_new(base, native).await;
    }
    if wanted("concurrency") {
        concurrency(&baseline, native).await;
    }
    if wanted("files") {
        many_files(base, native).await;
    }
    if wanted("caps") {
        caps(base, native).await;
    }
    if wanted("output") {
        output(&baseline).await;
    }
    if wanted("churn") {
        churn(base, native).await;
    }
    if wanted("cell") {
        long_cell(&baseline).await;
    }
    baseline.stop().await;
}

/// `WARDEN_BENCH_ONLY=new,output` runs only those parts (`new`, `concurrency`, `files`,
/// `caps`, `output`, `churn`, `cell`); all by default.
fn wanted(part: &str) -> bool {
    std::env::var("WARDEN_BENCH_ONLY")
        .map_or(true, |only| only.split(',').any(|p| p.trim() == part))
}

async fn warm_and_new(base: Stats, native: f64) {
    let server = Client::warden(&[]).await;
    let idle_rss = support::rss_kib(server.pid);
    server.call("warm", PRINT).await;
    let mut warm = Vec::new();
    for _ in 0..n(500, 100) {
        warm.push(server.timed("warm", PRINT, Some("2\n")).await);
    }
    row("warm call", stats(&warm), Some(base), Some(native));

    // Each new session's first call is followed by a warm call and a second call of that
    // session: on a shared machine a busy moment then weighs on all three alike. A new
    // session's first call comes after a pause (the pool refilling), and on a loaded
    // machine any call after a pause waits longer for a CPU than one right after another
    // call: so each round also times a warm call after the same pause.
    let mut pooled = Vec::new();
    let mut beside = Vec::new();
    let mut second = Vec::new();
    let mut paused = Vec::new();
    for i in 0..n(40, 10) {
        server.wait_for_pool(2).await;
        tokio::time::sleep(PAUSE).await;
        paused.push(server.timed("warm", PRINT, Some("2\n")).await);
        tokio::time::sleep(PAUSE).await;
        let name = format!("new{i}");
        pooled.push(server.timed(&name, PRINT, Some("2\n")).await);
        beside.push(server.timed("warm", PRINT, Some("2\n")).await);
        second.push(server.timed(&name, PRINT, Some("2\n")).await);
    }
    let pooled = stats(&pooled);
    row(
        "new session, warm pool ready",
        pooled,
        Some(base),
        Some(native),
    );
    let beside = stats(&beside);
    row("  warm call, interleaved", beside, Some(base), Some(native));
    row(
        "  that session's second call",
        stats(&second),
        Some(base),
        Some(native),
    );
    let paused = stats(&paused);
    row(
        "  warm call after the same pause",
        paused,
        Some(base),
        Some(native),
    );
    println!(
        "  new session / interleaved warm call: {:.2}×; / warm call after the same pause: {:.2}× (p50)",
        pooled.p50_ms / beside.p50_ms,
        pooled.p50_ms / paused.p50_ms
    );
    println!("  server RSS idle: {:.1} MB", idle_rss as f64 / 1024.0);
    server.stop().await;

    let server = Client::warden(&[("SANDBOX_WARM_WORKERS", "0")]).await;
    let mut cold = Vec::new();
    for i in 0..n(40, 10) {
        cold.push(server.timed(&format!("cold{i}"), PRINT, Some("2\n")).await);
    }
    row(
        "new session, no warm pool (worker start)",
        stats(&cold),
        Some(base),
        Some(native),
    );
    server.stop().await;
}

/// 64 sessions at once from one client, beside one session alone.
async fn concurrency(baseline: &Client, native: f64) {
    const SESSIONS: usize = 64;
    let server = Client::warden(&[("SANDBOX_MAX_WORKERS", "64")]).await;
    for i in 0..SESSIONS {
        server.call(&format!("c{i}"), PRINT).await;
    }
    let calls = n(300, 60);
    let started = Instant::now();
    let mut alone = Vec::new();
    for _ in 0..calls {
        alone.push(server.timed("c0", PRINT, Some("2\n")).await);
    }
    let alone_rate = calls as f64 / started.elapsed().as_secs_f64();

    let rounds = n(10, 3);
    let (at_once, rate, errors) = burst(&server, SESSIONS, rounds).await;
    row(
        "one session alone, each call",
        stats(&alone),
        None,
        Some(native),
    );
    row(
        "64 sessions at once, each call",
        stats(&at_once),
        None,
        Some(native),
    );
    let (base_at_once, base_rate, _) = burst(baseline, SESSIONS, n(3, 1)).await;
    row(
        "baseline: 64 python3 -c at once, each call",
        stats(&base_at_once),
        None,
        None,
    );
    println!(
        "  throughput: alone {alone_rate:.0} calls/s; 64 at once {rate:.0} calls/s ({errors} errors or mixed outputs); baseline 64 at once {base_rate:.0} calls/s ({:.2}× baseline)",
        rate / base_rate
    );
    server.stop().await;
}

/// `rounds` rounds of `sessions` calls at once; each session prints its own name.
async fn burst(client: &Client, sessions: usize, rounds: usize) -> (Vec<Duration>, f64, usize) {
    let started = Instant::now();
    let mut all = Vec::new();
    let mut errors = 0;
    for _ in 0..rounds {
        let calls = (0..sessions).map(|i| async move {
            let name = format!("c{i}");
            let t = Instant::now();
            let r = client.call(&name, &format!("print('{name}')")).await;
            (t.elapsed(), r["stdout"] == format!("{name}\n"))
        });
        for (took, ok) in futures::future::join_all(calls).await {
            all.push(took);
            errors += usize::from(!ok);
        }
    }
    let rate = all.len() as f64 / started.elapsed().as_secs_f64();
    (all, rate, errors)
}

/// What the caps add to a warm call: the same call on a server with every cap set, far
/// from reached (the counters are checked and charged, the worker's CPU is read twice,
/// and the byte cap narrows the workspace tmpfs before the call and restores it after),
/// interleaved with one on a server without caps.
async fn caps(base: Stats, native: f64) {
    let plain = Client::warden(&[]).await;
    let big = "1000000";
    let capped = Client::warden(&[
        ("SANDBOX_MAX_CALLS", big),
        ("SANDBOX_MAX_CPU_S", big),
        ("SANDBOX_MAX_WALL_S", big),
        ("SANDBOX_MAX_BYTES_WRITTEN", "1g"),
        ("SANDBOX_CLIENT_MAX_CALLS", big),
        ("SANDBOX_CLIENT_MAX_CPU_S", big),
        ("SANDBOX_CLIENT_MAX_WALL_S", big),
        ("SANDBOX_CLIENT_MAX_BYTES_WRITTEN", "1g"),
    ])
    .await;
    plain.call("w", PRINT).await;
    capped.call("w", PRINT).await;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..n(300, 60) {
        without.push(plain.timed("w", PRINT, Some("2\n")).await);
        with.push(capped.timed("w", PRINT, Some("2\n")).await);
    }
    let (without, with) = (stats(&without), stats(&with));
    row(
        "warm call, no cap (interleaved)",
        without,
        Some(base),
        Some(native),
    );
    row("warm call, every cap set", with, Some(base), Some(native));
    println!(
        "  every cap set / no cap: {:.2}× (p50), {:+.3} ms",
        with.p50_ms / without.p50_ms,
        with.p50_ms - without.p50_ms
    );
    plain.stop().await;
    capped.stop().await;
}

/// A warm call in a workspace of 10,000 files (the baseline runs in such a directory).
async fn many_files(base: Stats, native: f64) {
    let server = Client::warden(&[]).await;
    let r = server
        .call(
            "files",
            "from pathlib import Path\nfor i in range(10000):\n    Path('f%05d' % i).touch()\nprint(len(list(Path('.').iterdir())))",
        )
        .await;
    assert_eq!(r["stdout"], "10000\n", "{r}");
    let mut warm = Vec::new();
    for _ in 0..n(200, 40) {
        warm.push(server.timed("files", PRINT, Some("2\n")).await);
    }
    let dir = tempfile::tempdir().unwrap();
    for i in 0..10_000 {
        std::fs::write(dir.path().join(format!("f{i:05}")), b"").unwrap();
    }
    let baseline = Client::baseline(dir.path()).await;
    let mut b = Vec::new();
    for _ in 0..n(40, 10) {
        b.push(baseline.timed("b", PRINT, Some("2\n")).await);
    }
    row(
        "warm call, 10,000-file workspace",
        stats(&warm),
        Some(stats(&b)),
        Some(native),
    );
    let _ = base;
    baseline.stop().await;
    server.stop().await;
}

/// 1 MiB and 10 MiB printed: latency, and the server's CPU time per MiB beyond a
/// `print(1+1)` call's. Through `print` (sys.stdout: the worker drops what lies past the
/// cap and says so), and in one raw write to fd 1, which only the server's own cap
/// catches: every byte then crosses the pipe and is scanned for the end marker. The
/// guard refuses raw descriptors (`os`, `open(1)`), so those rows run on a server with
/// `CODEGUARD=off`, whose `print(1+1)` is measured on its own.
async fn output(baseline: &Client) {
    let print = [
        (1usize, "print('x' * (1 << 20), end='')"),
        (10, "print('x' * (10 << 20), end='')"),
    ];
    let raw = [
        (1usize, "import os\nos.write(1, b'x' * (1 << 20))"),
        (10, "import os\nos.write(1, b'x' * (10 << 20))"),
    ];
    output_rows(baseline, &[], "print", &print).await;
    output_rows(baseline, &[("CODEGUARD", "off")], "os.write", &raw).await;
}

async fn output_rows(baseline: &Client, env: &[(&str, &str)], how: &str, cases: &[(usize, &str)]) {
    let server = Client::warden(env).await;
    server.call("out", PRINT).await;
    let per_call = |samples: &[u64]| {
        let mut s = samples.to_vec();
        s.sort();
        s[s.len() / 2] as f64 / 1e6
    };
    let mut quiet = Vec::new();
    for _ in 0..n(100, 30) {
        let before = support::cpu_ns(server.pid);
        server.call("out", PRINT).await;
        quiet.push(support::cpu_ns(server.pid) - before);
    }
    let quiet_ms = per_call(&quiet);
    for &(mib, code) in cases {
        let code = code.to_string();
        let mut took = Vec::new();
        let mut cpu = Vec::new();
        // Each large call paired with a print(1+1) just before it: on a shared machine
        // the load moves between two separate runs of samples by as much as what is
        // measured, and within a pair it mostly cancels.
        let mut paired = Vec::new();
        for _ in 0..n(30, 6) {
            let before = support::cpu_ns(server.pid);
            server.call("out", PRINT).await;
            let small = support::cpu_ns(server.pid) - before;
            let before = support::cpu_ns(server.pid);
            let t = Instant::now();
            let r = server.call("out", &code).await;
            took.push(t.elapsed());
            let large = support::cpu_ns(server.pid) - before;
            cpu.push(large);
            paired.push(large as i64 - small as i64);
            assert_eq!(r["truncated"], true, "{r}");
        }
        let mut b = Vec::new();
        for _ in 0..n(20, 5) {
            b.push(baseline.timed("b", &code, None).await);
        }
        // (The native reference sends stdout to a buffer, which a raw os.write bypasses.)
        let native = (how == "print").then(|| exec_p50_ms(&code, n(50, 10)));
        row(
            &format!("{mib} MiB by {how} (capped at 64 KiB)"),
            stats(&took),
            Some(stats(&b)),
            native,
        );
        let cpu_ms = per_call(&cpu);
        println!(
            "  server CPU per call {cpu_ms:.2} ms ({quiet_ms:.2} ms for print(1+1)): {:.3} ms per MiB of output",
            (cpu_ms - quiet_ms).max(0.0) / mib as f64
        );
        paired.sort();
        let extra_ms = paired[paired.len() / 2] as f64 / 1e6;
        println!(
            "  paired with a print(1+1) just before each: {extra_ms:.2} ms more per call (p50), {:.3} ms per MiB of output",
            extra_ms.max(0.0) / mib as f64
        );
    }
    server.stop().await;
}

/// Session names used once each, one after another, with a short idle expiry: per-call
/// latency, and the server's memory as the names pile up.
async fn churn(base: Stats, native: f64) {
    let names = std::env::var("WARDEN_BENCH_CHURN_NAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n(10_000, 300));
    // Names arrive faster than they expire: the session cap is raised so that what is
    // measured is the churn, not `TooManySessions`; small quotas keep the disk total out
    // of it too.
    let server = Client::warden(&[
        ("SANDBOX_SESSION_IDLE_S", "2"),
        ("SANDBOX_MAX_SESSIONS", "4096"),
        ("SANDBOX_DISK_LIMIT", "16m"),
    ])
    .await;
    server.call("first", PRINT).await;
    let rss0 = support::rss_kib(server.pid);
    let mut took = Vec::new();
    let mut marks = Vec::new();
    let started = Instant::now();
    for i in 0..names {
        took.push(server.timed(&format!("n{i}"), PRINT, Some("2\n")).await);
        if (i + 1) % (names / 5) == 0 {
            let w = server.settings().await["workers"].clone();
            marks.push(format!(
                "{}: RSS {:.1} MB, {} sessions open, {} workers",
                i + 1,
                support::rss_kib(server.pid) as f64 / 1024.0,
                w["sessions_open"],
                w["live"]
            ));
        }
    }
    row(
        &format!("{names} new names in a row, each call"),
        stats(&took),
        Some(base),
        Some(native),
    );
    println!(
        "  {names} names in {:.1} s; server RSS at start {:.1} MB; {}",
        started.elapsed().as_secs_f64(),
        rss0 as f64 / 1024.0,
        marks.join("; ")
    );
    server.stop().await;
}

/// About 1,000 lines of the benign corpus (repeated) as the body of a function that is defined and
/// never called: the guard judges and CPython compiles every line, and running the cell
/// costs next to nothing, so the difference between servers is the guard's.
fn long_cell_source(lines: usize) -> String {
    let body = support::corpus::benign_lines(lines, "    ");
    format!("def _cell():\n{body}    pass\nprint('ok')\n")
}

/// First-seen cells of about 20, 1,000 and 10,000 lines (each call unique, so every one
/// is a cache miss) in a session whose worker is live: guard enforcing, and
/// `CODEGUARD=off` as the reference; the baseline server gets the same cells in the same
/// alternation (a fresh interpreter compiling and running each), and native CPython
/// compiles and runs the cell in process.
async fn long_cell(baseline: &Client) {
    let mut servers = vec![
        ("enforce", Client::warden(&[("CODEGUARD", "enforce")]).await),
        (
            "CODEGUARD=off",
            Client::warden(&[("CODEGUARD", "off")]).await,
        ),
    ];
    if let Some(bin) = std::env::var_os("WARDEN_BENCH_COMPARE_BIN") {
        let bin = std::path::PathBuf::from(bin);
        servers.push((
            "enforce, WARDEN_BENCH_COMPARE_BIN",
            Client::warden_at(&bin, &[("CODEGUARD", "enforce")]).await,
        ));
    }
    for (size, runs) in [(20, n(400, 60)), (1000, n(200, 30)), (10_000, n(40, 10))] {
        let cell = long_cell_source(size);
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); servers.len()];
        let mut base = Vec::new();
        for (_, server) in &servers {
            let r = server.call("cell", &format!("{cell}# warm-up\n")).await;
            assert_eq!(r["stdout"], "ok\n", "{r}");
        }
        // Alternated call by call, so that load moving over the run falls on every server.
        for i in 0..runs {
            let code = format!("{cell}# run {i}\n");
            for (k, (_, server)) in servers.iter().enumerate() {
                times[k].push(server.timed("cell", &code, Some("ok\n")).await);
            }
            base.push(baseline.timed("b", &code, Some("ok\n")).await);
        }
        let native = exec_p50_ms(&cell, runs);
        let lines = cell.lines().count();
        let base = stats(&base);
        for ((name, _), t) in servers.iter().zip(&times) {
            row(
                &format!("{lines}-line cell, first seen, {name}"),
                stats(t),
                Some(base),
                Some(native),
            );
        }
        row(
            &format!("{lines}-line cell, baseline python3 -c server"),
            base,
            None,
            Some(native),
        );
    }
    for (_, server) in servers {
        server.stop().await;
    }
}
