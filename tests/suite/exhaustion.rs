//! What one session can make the server and the user's account hold is bounded, and the
//! user's other processes keep working: threads and queued signals per worker (counted
//! by the kernel in the worker's own user namespace), inotify watches per session, live
//! sessions, the sessions' tmpfs quotas together, and kept workspaces on the data dir's
//! disk. Each is judged from the host: what the worker holds is read in `/proc`, and a
//! bystander process of the server's own user (root, or the login user) still creates
//! threads, timers and inotify watches afterwards. The guard is off: the OS walls are
//! what is under test.

use std::process::Command;

use serde_json::Value;

use super::{As, Net, Server, both_modes, login_user, stdout, workers_of};

/// No warm workers: the session's worker is the only one the host finds.
async fn start(who: As, env: &[(&str, &str)]) -> Server {
    let mut all = vec![("CODEGUARD", "off"), ("SANDBOX_WARM_WORKERS", "0")];
    all.extend_from_slice(env);
    Server::start_as(who, Net::Host, &all).await
}

/// Runs `python3 -c code` on the host as the server's own user: the bystander whose
/// account the sessions share.
fn bystander(who: As, code: &str) -> String {
    let mut cmd = match who {
        As::Root => Command::new("/usr/bin/python3"),
        As::User => {
            let user = login_user().expect("login user");
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={}", user.uid),
                &format!("--regid={}", user.gid),
                "--clear-groups",
                "--",
                "/usr/bin/python3",
            ]);
            c
        }
    };
    let out = cmd
        .args(["-I", "-c", code])
        .current_dir("/")
        .output()
        .expect("run the bystander");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `/proc/PID/status` of every live worker's interpreter, as the host sees it (a
/// worker's other process is the helper's waiting parent).
fn interpreters(server: &Server) -> Vec<String> {
    workers_of(server.pid)
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{}/status", p.pid)).ok())
        .filter(|s| s.lines().any(|l| l == "Name:\tpython3"))
        .collect()
}

/// The first number of a `/proc/PID/status` field (`SigQ:\t3/256` gives 3).
fn status_field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().split('/').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The number after `word` in the code's output.
fn number_after(r: &Value, word: &str) -> u64 {
    stdout(r)
        .split_whitespace()
        .skip_while(|w| *w != word)
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {word:?} in {r}"))
}

const PIDS_LIMIT: u64 = 64;

/// Starts threads (small stacks, so that memory is not what stops them) and keeps them.
const THREAD_BOMB: &str = r#"import threading
threading.stack_size(64 << 10)
hold = threading.Event()
started = 0
try:
    for _ in range(1000):
        threading.Thread(target=hold.wait, daemon=True).start()
        started += 1
except RuntimeError:
    pass
print("started", started)
"#;

/// The bystander's threads.
const BYSTANDER_THREADS: &str = "import threading\nts = [threading.Thread(target=lambda: None) for _ in range(32)]\nfor t in ts: t.start()\nfor t in ts: t.join()\nprint('threads ok')";

#[tokio::test]
async fn a_thread_bomb_stops_at_the_pids_limit_and_the_users_other_processes_start_threads() {
    for who in both_modes() {
        let limit = PIDS_LIMIT.to_string();
        let server = start(who, &[("SANDBOX_PIDS_LIMIT", &limit)]).await;
        // Two sessions, one after the other: each worker is counted alone (a limit the
        // server's workers shared would leave the second almost nothing).
        for session in ["threads-a", "threads-b"] {
            let r = server.run(session, THREAD_BOMB).await;
            let started = number_after(&r, "started");
            assert!(
                (PIDS_LIMIT - 8..PIDS_LIMIT).contains(&started),
                "{who:?}: {started} threads started in {session}: {r}"
            );
        }
        // Frozen between calls, the workers still hold them: the host counts each one's
        // tasks (the interpreter's threads and the helper's waiting parent).
        let statuses = interpreters(&server);
        assert_eq!(statuses.len(), 2, "{who:?}: {statuses:?}");
        for status in &statuses {
            let threads = status_field(status, "Threads:");
            assert!(
                (PIDS_LIMIT - 8..PIDS_LIMIT).contains(&threads),
                "{who:?}: an interpreter has {threads} threads:\n{status}"
            );
        }
        assert_eq!(
            bystander(who, BYSTANDER_THREADS).trim(),
            "threads ok",
            "{who:?}"
        );
        let selftest = server
            .call("selftest", serde_json::json!({}))
            .await
            .unwrap();
        let report = selftest.structured_content.unwrap();
        assert_eq!(
            report["limits"]["processes"], PIDS_LIMIT,
            "{who:?}: {report}"
        );
        let how = report["limits"]["processes_counted_by"].as_str().unwrap();
        assert!(how.contains("own user namespace"), "{who:?}: {how}");
        let r = server.run("threads-a", "print('alive')").await;
        assert_eq!(stdout(&r), "alive\n", "{who:?}: {r}");
        server.stop().await;
    }
}

/// Blocks the real-time signals and queues them to itself until the kernel refuses.
const SIGNAL_FLOOD: &str = r#"import signal, threading
rt = range(signal.SIGRTMIN, signal.SIGRTMAX + 1)
signal.pthread_sigmask(signal.SIG_BLOCK, rt)
me = threading.get_ident()
queued = 0
refused = None
try:
    for i in range(200000):
        signal.pthread_kill(me, signal.SIGRTMIN + i % 8)
        queued += 1
except OSError as e:
    refused = e.errno
print("queued", queued, "refused", refused)
"#;

/// The bystander creates POSIX timers (each takes a queued signal of its user's).
const BYSTANDER_TIMERS: &str = r#"import ctypes
libc = ctypes.CDLL(None, use_errno=True)
timer = ctypes.c_void_p()
made = 0
for _ in range(16):
    if libc.timer_create(1, None, ctypes.byref(timer)) != 0:
        print("timer_create failed", ctypes.get_errno())
        break
    made += 1
print("timers", made)
"#;

#[tokio::test]
async fn queued_signals_stop_at_the_workers_limit_and_the_users_other_processes_make_timers() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        let r = server.run("signals", SIGNAL_FLOOD).await;
        let queued = number_after(&r, "queued");
        assert!(
            stdout(&r).ends_with("refused 11\n"),
            "{who:?}: not refused with EAGAIN: {r}"
        );
        assert!(
            (32..=256).contains(&queued),
            "{who:?}: {queued} signals queued: {r}"
        );
        // Frozen, the worker still has them pending: the host reads its queue. The kernel
        // queues a non-real-time signal past the limit (the freeze's own SIGSTOP), at most
        // one per signal number.
        let statuses = interpreters(&server);
        assert_eq!(statuses.len(), 1, "{who:?}: {statuses:?}");
        let status = &statuses[0];
        let pending = status_field(status, "SigQ:");
        assert!(
            (queued..=256 + 31).contains(&pending),
            "{who:?}: {pending} signals pending:\n{status}"
        );
        let made = bystander(who, BYSTANDER_TIMERS);
        assert_eq!(made.trim(), "timers 16", "{who:?}");
        let r = server.run("signals", "print('alive')").await;
        assert_eq!(stdout(&r), "alive\n", "{who:?}: {r}");
        server.stop().await;
    }
}

/// The inotify watches a process holds, as the host reads them in `/proc/PID/fdinfo`.
fn inotify_watches(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:inotify")
        })
        .filter_map(|fd| {
            std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .ok()
        })
        .map(|info| {
            info.lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count()
        })
        .sum()
}

/// The bystander watches a directory with inotify.
const BYSTANDER_WATCH: &str = r#"import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_CLOEXEC)
wd = libc.inotify_add_watch(fd, b"/", 0x100) if fd >= 0 else -1
print("watch", "ok" if wd >= 0 else "failed %d" % ctypes.get_errno())
"#;

#[tokio::test]
async fn a_session_with_many_directories_is_tracked_by_scan_and_the_user_keeps_watching() {
    let cap = warden::workspace::MAX_WATCHES_PER_SESSION;
    for who in both_modes() {
        let server = start(who, &[]).await;
        let r = server
            .run("small", "import os; os.mkdir('a'); print('ok')")
            .await;
        assert!(
            !r["warnings"].to_string().contains("by scan"),
            "{who:?}: {r}"
        );
        let code = format!(
            "import os\nfor i in range({}):\n    os.makedirs('tree/%d/%d' % (i // 100, i))\nprint('made')",
            cap + 400
        );
        let r = server.run("dirs", &code).await;
        assert_eq!(stdout(&r), "made\n", "{who:?}: {r}");
        let warnings = r["warnings"].to_string();
        assert!(
            warnings.contains(&format!(
                "tracking for this session is by scan (each call's changes are found by walking its workspace, not from inotify) because it has more than {cap} directories"
            )),
            "{who:?}: {warnings}"
        );
        // The host sees the server hold a handful of watches (the small session's), not
        // one per directory of the big one.
        let held = inotify_watches(server.pid);
        assert!(
            (1..100).contains(&held),
            "{who:?}: the server holds {held} watches"
        );
        assert_eq!(
            bystander(who, BYSTANDER_WATCH).trim(),
            "watch ok",
            "{who:?}"
        );
        // By scan, its changes are still reported, and said to be found so.
        let r = server
            .run("dirs", "open('tree/3/333/new.csv', 'w').write('x'); import shutil; shutil.rmtree('tree/0')")
            .await;
        assert_eq!(r["files"][0]["path"], "tree/3/333/new.csv", "{who:?}: {r}");
        assert_eq!(r["files_total"], 1, "{who:?}: {r}");
        assert!(
            r["warnings"].to_string().contains("by scan"),
            "{who:?}: {r}"
        );
        let r = server.run("small", "open('a/b.txt', 'w').write('y')").await;
        assert_eq!(r["files"][0]["path"], "a/b.txt", "{who:?}: {r}");
        assert!(
            !r["warnings"].to_string().contains("by scan"),
            "{who:?}: {r}"
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn past_the_session_cap_a_new_session_is_refused_naming_the_setting_and_starts_nothing() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_MAX_SESSIONS", "2")]).await;
        for name in ["a", "b"] {
            let r = server.run(name, "print('in')").await;
            assert_eq!(stdout(&r), "in\n", "{who:?}: {r}");
        }
        let workers = workers_of(server.pid).len();
        let r = server.run("c", "print('in')").await;
        assert_eq!(r["status"], "error", "{who:?}: {r}");
        assert_eq!(r["error"]["type"], "TooManySessions", "{who:?}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("SANDBOX_MAX_SESSIONS=2") && message.contains("reset_session"),
            "{who:?}: {message}"
        );
        assert_eq!(stdout(&r), "", "{who:?}: {r}");
        assert_eq!(
            workers_of(server.pid).len(),
            workers,
            "{who:?}: a worker started"
        );
        let doc = server.settings().await;
        assert_eq!(
            doc["workers"]["sessions_open"], 2,
            "{who:?}: {}",
            doc["workers"]
        );
        // Closing one makes room.
        let closed = server
            .call(
                "reset_session",
                serde_json::json!({"session": "b", "keep_files": false}),
            )
            .await
            .unwrap();
        assert_ne!(closed.is_error, Some(true), "{who:?}: {closed:?}");
        let r = server.run("c", "print('in')").await;
        assert_eq!(stdout(&r), "in\n", "{who:?}: {r}");
        let data = server.stop().await;
        let refused: Vec<Value> = super::audit::records(data.path())
            .into_iter()
            .filter(|l| {
                l["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("TooManySessions"))
            })
            .collect();
        assert_eq!(refused.len(), 1, "{who:?}: the refusal is audited once");
        assert_eq!(refused[0]["session"], "c", "{who:?}: {refused:?}");
    }
}

/// The workspace keeper's tmpfs mounts (one per workspace) and their sizes, as the host
/// reads them in its mountinfo.
fn workspace_tmpfs_sizes(server: &Server) -> Vec<u64> {
    let keeper = super::descendants(server.pid)
        .into_iter()
        .find(|p| super::is_keeper(p.pid))
        .expect("a workspace keeper");
    std::fs::read_to_string(format!("/proc/{}/mountinfo", keeper.pid))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(4)
                .is_some_and(|m| m.contains("/ws/w"))
        })
        .filter_map(|l| {
            let kib = l
                .split(" - ")
                .nth(1)?
                .split(',')
                .find_map(|o| o.strip_prefix("size="))?;
            kib.strip_suffix('k')?.parse::<u64>().ok().map(|k| k << 10)
        })
        .collect()
}

/// The workspace's size as the code sees it, then whether 20 MiB fit in it.
const QUOTA_SEEN: &str = r#"import os, errno
st = os.statvfs('/workspace')
print('quota', st.f_blocks * st.f_frsize >> 20)
try:
    with open('fill.bin', 'wb') as f:
        f.write(b'x' * (20 << 20))
    print('fits')
except OSError as e:
    print('full', e.errno == errno.ENOSPC)
"#;

#[tokio::test]
async fn the_sessions_tmpfs_quotas_together_stay_within_the_budget_even_with_workers_evicted() {
    const MIB: u64 = 1 << 20;
    for who in both_modes() {
        let server = start(
            who,
            &[
                ("SANDBOX_DISK_LIMIT", "64m"),
                ("SANDBOX_DISK_TOTAL", "160m"),
                ("SANDBOX_MAX_SESSIONS", "8"),
                ("SANDBOX_MAX_WORKERS", "1"),
            ],
        )
        .await;
        // The first gets its quota (64 MiB and 16 MiB of /tmp fit beside the floors held
        // back for the sessions that may follow).
        let r = server.run("s1", QUOTA_SEEN).await;
        assert_eq!(stdout(&r), "quota 64\nfits\n", "{who:?}: {r}");
        assert!(
            !r["warnings"].to_string().contains("quota is"),
            "{who:?}: {r}"
        );
        // The next ones get the floor, and say so in every result.
        for name in ["s2", "s3"] {
            let r = server.run(name, QUOTA_SEEN).await;
            assert_eq!(stdout(&r), "quota 16\nfull True\n", "{who:?} {name}: {r}");
            let warnings = r["warnings"].to_string();
            assert!(
                warnings.contains("workspace quota is 16 MiB, not SANDBOX_DISK_LIMIT (64 MiB)")
                    && warnings.contains("SANDBOX_DISK_TOTAL (160 MiB)"),
                "{who:?} {name}: {warnings}"
            );
        }
        let r = server.run("s2", "print('again')").await;
        assert!(
            r["warnings"].to_string().contains("quota is 16 MiB"),
            "{who:?}: {r}"
        );
        // One worker lives (SANDBOX_MAX_WORKERS=1): the others were stopped, and their
        // sessions' tmpfs still count. The host sees three, 160 MiB with their /tmp.
        assert_eq!(
            workers_of(server.pid).len(),
            super::WORKER_PROCESSES,
            "{who:?}"
        );
        let mut sorted = workspace_tmpfs_sizes(&server);
        sorted.sort();
        assert_eq!(sorted, [16 * MIB, 16 * MIB, 64 * MIB], "{who:?}");
        // A fourth would pass the budget: refused, naming it, and nothing is started.
        let r = server.run("s4", "print('in')").await;
        assert_eq!(r["error"]["type"], "DiskTotalReached", "{who:?}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("SANDBOX_DISK_TOTAL (160 MiB)") && message.contains("reset_session"),
            "{who:?}: {message}"
        );
        assert_eq!(workspace_tmpfs_sizes(&server).len(), 3, "{who:?}");
        // Closing a session gives its share back.
        server
            .call(
                "reset_session",
                serde_json::json!({"session": "s2", "keep_files": false}),
            )
            .await
            .unwrap();
        let r = server.run("s4", QUOTA_SEEN).await;
        assert_eq!(stdout(&r), "quota 16\nfull True\n", "{who:?}: {r}");
        server.stop().await;
    }
}

/// A data directory on a tmpfs of `size` of its own (never the real disk), owned as a
/// server running as `who` needs it. The tmpfs is unmounted when the second value drops.
fn small_data_dir(who: As, size: &str) -> (tempfile::TempDir, super::Tmpfs) {
    use std::os::unix::fs::PermissionsExt;
    let dir = super::data_dir_for(who);
    let tmpfs = super::Tmpfs::mount_on(dir.path(), size);
    if who == As::User {
        let user = login_user().expect("login user");
        std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    (dir, tmpfs)
}

/// A server keeping the workspaces of sessions idle for a second, on `data`.
async fn keeping_server(who: As, data: tempfile::TempDir) -> Server {
    let env = [
        ("CODEGUARD", "off"),
        ("SANDBOX_WARM_WORKERS", "0"),
        ("SANDBOX_KEEP_WORKSPACES", "true"),
        ("SANDBOX_SESSION_IDLE_S", "1"),
        ("SANDBOX_DISK_LIMIT", "64m"),
    ];
    let cmd = super::server_command_as(who, Net::Host, &env, &[], data.path());
    Server::from_command(cmd, data, who).await
}

/// Free bytes of the file system at `path`.
fn free_bytes(path: &std::path::Path) -> u64 {
    let st = rustix::fs::statvfs(path).unwrap();
    st.f_bavail * st.f_frsize
}

/// Waits for the audit record of what became of a closing session's workspace.
async fn keep_record(server: &Server) -> Value {
    let data = server.data_dir.path().to_path_buf();
    let found = super::eventually(20, || {
        super::audit::records(&data)
            .iter()
            .any(|l| l["phase"] == "keep")
    })
    .await;
    assert!(found, "no keep record in the audit log");
    super::audit::records(&data)
        .into_iter()
        .find(|l| l["phase"] == "keep")
        .unwrap()
}

#[tokio::test]
async fn a_kept_workspace_is_written_at_its_real_size_and_a_sparse_file_stays_sparse() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    for who in both_modes() {
        let (data, _tmpfs) = small_data_dir(who, "96m");
        let server = keeping_server(who, data).await;
        let code = "f = open('sparse.bin', 'wb')\nf.truncate(200 << 20)\nf.seek(100 << 20)\nf.write(b'middle')\nf.close()\nopen('plain.txt', 'w').write('plain')";
        let r = server.run("sparse", code).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let record = keep_record(&server).await;
        assert_eq!(record["decision"], "kept", "{who:?}: {record}");
        let kept = server.data_dir.path().join("kept");
        let copy = &super::find_files(&kept, "sparse.bin")[0];
        let meta = std::fs::metadata(copy).unwrap();
        assert_eq!(meta.len(), 200 << 20, "{who:?}: its length is kept");
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "{who:?}: the copy takes {} blocks",
            meta.blocks()
        );
        let mut middle = [0u8; 6];
        std::fs::File::open(copy)
            .unwrap()
            .read_exact_at(&mut middle, 100 << 20)
            .unwrap();
        assert_eq!(&middle, b"middle", "{who:?}");
        let plain = &super::find_files(&kept, "plain.txt")[0];
        assert_eq!(std::fs::read_to_string(plain).unwrap(), "plain", "{who:?}");
        server.stop().await;
    }
}

#[tokio::test]
async fn a_workspace_that_would_fill_the_data_dir_is_not_kept_and_the_audit_log_keeps_working() {
    for who in both_modes() {
        let (data, _tmpfs) = small_data_dir(who, "96m");
        let server = keeping_server(who, data).await;
        let r = server
            .run(
                "big",
                "open('data.bin', 'wb').write(b'x' * (24 << 20)); print('written')",
            )
            .await;
        assert_eq!(stdout(&r), "written\n", "{who:?}: {r}");
        // Something else fills the data directory's disk to 40 MiB free: the 24 MiB copy
        // and the audit log's 32 MiB reserve no longer fit.
        let dir = server.data_dir.path().to_path_buf();
        let filler = dir.join("filler.bin");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![7u8; 1 << 20];
        while free_bytes(&dir) > 41 << 20 {
            std::io::Write::write_all(&mut f, &chunk).unwrap();
        }
        drop(f);
        let record = keep_record(&server).await;
        assert_eq!(record["decision"], "refused", "{who:?}: {record}");
        let why = record["detail"].as_str().unwrap();
        assert!(
            why.starts_with("not kept: its copy takes 25 MiB")
                && why.contains("stay free for the audit log"),
            "{who:?}: {why}"
        );
        assert!(
            super::find_files(&dir.join("kept"), "data.bin").is_empty(),
            "{who:?}: a copy was written"
        );
        assert!(
            free_bytes(&dir) > 32 << 20,
            "{who:?}: the reserve is still free"
        );
        // The audit log takes every later record.
        let r = server.run("after", "print('after')").await;
        assert_eq!(stdout(&r), "after\n", "{who:?}: {r}");
        let data = server.stop().await;
        let verify = Command::new(super::BIN)
            .arg("audit-verify")
            .env("SANDBOX_DATA_DIR", data.path())
            .output()
            .unwrap();
        assert!(
            verify.status.success(),
            "{who:?}: {}{}",
            String::from_utf8_lossy(&verify.stdout),
            String::from_utf8_lossy(&verify.stderr)
        );
    }
}
