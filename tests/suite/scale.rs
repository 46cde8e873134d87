//! Sessions at scale (#12) and work that ends with its call (#8 item 5), judged from the
//! host where the host can see it: names are capped only by `SANDBOX_MAX_SESSIONS`, live
//! workers by `SANDBOX_MAX_WORKERS`; the least
//! recently used idle worker makes room and its session keeps its files; idle sessions
//! expire; the warm pool hands out fresh workers and refills; frozen workers use no CPU;
//! a thread's late output is never another call's.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use std::path::PathBuf;

use super::{
    As, Net, Server, WORKER_PROCESSES, both_modes, descendants, eventually, find_files, is_keeper,
    stdout, until_some, workers_of,
};

async fn start(who: As, env: &[(&str, &str)]) -> Server {
    Server::start_as(who, Net::Host, env).await
}

/// `/proc/<pid>/stat`'s state letter, utime + stime (ticks) and real uid of a process.
fn proc_info(pid: u32) -> Option<(char, u64, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((f.first()?.chars().next()?, ticks, uid))
}

/// The workspace keeper the server started, if workspaces are its tmpfs.
fn keeper(server: &Server) -> Option<u32> {
    descendants(server.pid)
        .iter()
        .map(|p| p.pid)
        .find(|p| is_keeper(*p))
}

/// CPU ticks used so far by every worker process.
fn workers_cpu(server: &Server) -> u64 {
    workers_of(server.pid)
        .iter()
        .filter_map(|p| proc_info(p.pid))
        .map(|(_, ticks, _)| ticks)
        .sum()
}

/// Where the host can see the sessions' workspaces: inside the keeper's mount namespace
/// (through its `/proc/<pid>/root`) when it holds them, else on the disk.
fn workspaces_root(server: &Server) -> PathBuf {
    let sessions = server.data_dir.path().join("sessions");
    match keeper(server) {
        Some(pid) => {
            PathBuf::from(format!("/proc/{pid}/root")).join(sessions.strip_prefix("/").unwrap())
        }
        None => sessions,
    }
}

/// Workspaces that exist now: the keeper's tmpfs mounts, one per workspace.
fn workspace_mounts(server: &Server) -> usize {
    let Some(pid) = keeper(server) else {
        return 0;
    };
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(4)
                .is_some_and(|m| m.contains("/ws/w"))
        })
        .count()
}

#[tokio::test]
async fn two_hundred_new_session_names_in_a_row_all_run() {
    let server = start(
        As::Root,
        &[
            ("SANDBOX_MAX_WORKERS", "16"),
            ("SANDBOX_MAX_SESSIONS", "200"),
            ("SANDBOX_DISK_LIMIT", "16m"),
        ],
    )
    .await;
    for i in 0..200 {
        let r = server
            .run(&format!("n{i}"), &format!("print('n{i}')"))
            .await;
        assert_eq!(r["status"], "ok", "session {i}: {r}");
        assert_eq!(stdout(&r), format!("n{i}\n"), "session {i}: {r}");
    }
    let doc = server.settings().await;
    assert_eq!(doc["workers"]["sessions_open"], 200, "{}", doc["workers"]);
    assert!(
        doc["workers"]["live"].as_u64().unwrap() <= 16,
        "{}",
        doc["workers"]
    );
    assert!(
        workers_of(server.pid).len() <= 16 * WORKER_PROCESSES,
        "{:?}",
        workers_of(server.pid)
    );
    server.stop().await;
}

#[tokio::test]
async fn least_recently_used_workers_make_room_and_their_sessions_keep_their_files() {
    let server = start(As::Root, &[("SANDBOX_MAX_WORKERS", "4")]).await;
    for i in 0..10 {
        let r = server
            .run(
                &format!("s{i}"),
                &format!("open('f.txt', 'w').write('file of s{i}')\nv = {i}"),
            )
            .await;
        assert_eq!(r["status"], "ok", "{r}");
    }
    let mut restarted = 0;
    for round in 0..3 {
        for i in 0..10 {
            let r = server
                .run(
                    &format!("s{i}"),
                    "print(open('f.txt').read(), globals().get('v'))",
                )
                .await;
            assert_eq!(r["status"], "ok", "round {round}, s{i}: {r}");
            let out = stdout(&r);
            assert!(out.starts_with(&format!("file of s{i} ")), "{r}");
            if r["worker_restarted"] == true {
                restarted += 1;
                assert_eq!(
                    out,
                    format!("file of s{i} None\n"),
                    "variables are gone: {r}"
                );
                assert!(
                    r["warnings"].to_string().contains("SANDBOX_MAX_WORKERS"),
                    "the result says why: {r}"
                );
            }
            let live = workers_of(server.pid).len();
            assert!(
                live <= 4 * WORKER_PROCESSES,
                "{live} worker processes under a cap of 4"
            );
        }
    }
    // Ten sessions in rotation through four workers: every call found its worker gone.
    assert_eq!(restarted, 30, "each rotation call restarted its worker");
    server.stop().await;
}

#[tokio::test]
async fn a_call_is_refused_as_busy_only_when_every_worker_is_in_a_call() {
    let server = start(
        As::Root,
        &[("SANDBOX_MAX_WORKERS", "2"), ("SANDBOX_WARM_WORKERS", "0")],
    )
    .await;
    server.run("a", "x = 'a'").await;
    server.run("b", "x = 'b'").await;
    let sleep = |s: &'static str| {
        server.exec(json!({"session": s, "code": "import time; time.sleep(3); print('slept')"}))
    };
    let third = async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        server.run("c", "print('c')").await
    };
    let (a, b, c) = tokio::join!(sleep("a"), sleep("b"), third);
    assert_eq!(stdout(&a), "slept\n", "{a}");
    assert_eq!(stdout(&b), "slept\n", "{b}");
    assert_eq!(c["status"], "error", "{c}");
    assert_eq!(c["error"]["type"], "WorkersBusy", "{c}");
    assert_eq!(c["error"]["retryable"], true, "{c}");
    assert!(
        c["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOX_MAX_WORKERS=2"),
        "{c}"
    );
    // Once a worker is idle again it makes room: one of the two lost its variables.
    let c = server.run("c", "print('c')").await;
    assert_eq!(stdout(&c), "c\n", "{c}");
    let mut lost = 0;
    for s in ["a", "b"] {
        let r = server.run(s, "print(globals().get('x'))").await;
        if r["worker_restarted"] == true {
            lost += 1;
            assert_eq!(stdout(&r), "None\n", "{r}");
        } else {
            assert_eq!(stdout(&r), format!("{s}\n"), "{r}");
        }
    }
    assert!(
        lost >= 1,
        "the third session's worker took the place of one of them"
    );
    server.stop().await;
}

#[tokio::test]
async fn idle_sessions_expire_and_their_names_are_free_again() {
    let server = start(As::Root, &[("SANDBOX_SESSION_IDLE_S", "2")]).await;
    let r = server
        .run("e", "open('expiry-mark.txt', 'w').write('x')\nv = 1")
        .await;
    assert_eq!(r["status"], "ok", "{r}");
    let sessions = workspaces_root(&server);
    assert_eq!(
        find_files(&sessions, "expiry-mark").len(),
        1,
        "{}",
        sessions.display()
    );
    // A call longer than the idle time is not idleness.
    let r = server
        .run("busy", "import time\nw = 'kept'\ntime.sleep(3)")
        .await;
    assert_eq!(r["status"], "ok", "{r}");
    let r = server.run("busy", "print(w)").await;
    assert_eq!(stdout(&r), "kept\n", "{r}");

    assert!(
        eventually(10, || find_files(&sessions, "expiry-mark").is_empty()).await,
        "the expired session's workspace was removed"
    );
    let doc = server.settings().await;
    let names: Vec<&str> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"e"), "{names:?}");
    let r = server
        .run("e", "import os\nprint(os.listdir('.'), globals().get('v'))")
        .await;
    assert_eq!(
        stdout(&r),
        "[] None\n",
        "a new session under the old name: {r}"
    );
    assert_eq!(r["worker_restarted"], false, "{r}");
    server.stop().await;
}

#[tokio::test]
async fn kept_workspaces_survive_expiry_and_shutdown() {
    let server = start(
        As::Root,
        &[
            ("SANDBOX_SESSION_IDLE_S", "1"),
            ("SANDBOX_KEEP_WORKSPACES", "true"),
        ],
    )
    .await;
    server
        .run("k", "open('kept-mark.txt', 'w').write('expired')")
        .await;
    let kept = server.data_dir.path().join("kept");
    assert!(
        eventually(10, || find_files(&kept, "kept-mark").len() == 1).await,
        "the expired workspace is under kept/"
    );
    server
        .run("live", "open('kept-live.txt', 'w').write('at shutdown')")
        .await;
    let Server {
        client, data_dir, ..
    } = server;
    let _ = client.cancel().await;
    let kept = data_dir.path().join("kept");
    assert!(
        eventually(10, || find_files(&kept, "kept-live").len() == 1).await,
        "the live session's workspace is kept at shutdown"
    );
    let file = &find_files(&kept, "kept-mark")[0];
    assert_eq!(std::fs::read_to_string(file).unwrap(), "expired");
    let sessions = data_dir.path().join("sessions");
    assert!(
        eventually(10, || std::fs::read_dir(&sessions)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true))
        .await,
        "the instance directory itself is gone"
    );
}

#[tokio::test]
async fn the_warm_pool_hands_out_frozen_workers_and_refills_after_a_burst() {
    let server = start(As::Root, &[("SANDBOX_WARM_WORKERS", "2")]).await;
    let ready = |doc: &Value| doc["workers"]["warm"]["ready"].as_u64().unwrap_or(0);
    let full = async || (ready(&server.settings().await) == 2).then_some(());
    let filled = until_some(100, Duration::from_millis(100), full).await;
    assert!(filled.is_some(), "the pool filled");
    // The warm workers wait frozen inside their walls, each with its own uid.
    let info = || -> Vec<(char, u64, u32)> {
        workers_of(server.pid)
            .iter()
            .filter_map(|p| proc_info(p.pid))
            .collect()
    };
    assert!(
        eventually(5, || info().iter().all(|(state, _, _)| *state == 'T')).await,
        "{:?}",
        info()
    );
    let warm = info();
    assert_eq!(warm.len(), 2 * WORKER_PROCESSES, "{warm:?}");
    let warm_uids: BTreeSet<u32> = warm.iter().map(|(_, _, uid)| *uid).collect();
    assert_eq!(warm_uids.len(), 2, "a uid of its own each: {warm:?}");
    assert!(!warm_uids.contains(&0));
    let cpu = workers_cpu(&server);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(workers_cpu(&server), cpu, "frozen warm workers use no CPU");

    let burst = (0..5).map(|i| {
        let server = &server;
        async move {
            server
                .run(&format!("b{i}"), "import os\nprint(os.getuid())")
                .await
        }
    });
    let results = futures::future::join_all(burst).await;
    let uids: Vec<u32> = results
        .iter()
        .map(|r| stdout(r).trim().parse().unwrap_or_else(|_| panic!("{r}")))
        .collect();
    let from_pool = uids.iter().filter(|u| warm_uids.contains(u)).count();
    assert_eq!(
        from_pool, 2,
        "two of the burst got the warm workers: {uids:?}"
    );
    let full = async || (ready(&server.settings().await) == 2).then_some(());
    let refilled = until_some(300, Duration::from_millis(100), full).await;
    assert!(refilled.is_some(), "the pool refilled after the burst");
    server.stop().await;
}

#[tokio::test]
async fn a_pooled_worker_shows_none_of_another_sessions_files_or_variables() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_WARM_WORKERS", "2")]).await;
        let look = "import os as _os\nprint(sorted(_os.listdir('.')), sorted(_os.listdir(_os.environ['TMPDIR'])), sorted(k for k in globals() if not k.startswith('_')))";
        let r = server
            .run(
                "owner",
                "import os\nsecret = 42\nopen('secret.txt', 'w').write('s')\nopen(os.path.join(os.environ['TMPDIR'], 't'), 'w').write('t')",
            )
            .await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        for i in 0..4 {
            let r = server.run(&format!("fresh{i}"), look).await;
            assert_eq!(stdout(&r), "[] [] []\n", "{who:?}: {r}");
        }
        let closed = server
            .call("reset_session", json!({"session": "owner"}))
            .await
            .unwrap();
        assert_eq!(closed.structured_content.unwrap()["ok"], true);
        let r = server.run("owner", look).await;
        assert_eq!(
            stdout(&r),
            "[] [] []\n",
            "{who:?}: the name reopened empty: {r}"
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn between_calls_a_worker_is_frozen_and_its_threads_use_no_cpu() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_WARM_WORKERS", "0")]).await;
        let r = server
            .run(
                "spin",
                "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin, daemon=True).start()\n'started'",
            )
            .await;
        assert_eq!(r["result"], "'started'", "{who:?}: {r}");
        let procs = workers_of(server.pid);
        assert!(!procs.is_empty(), "{who:?}");
        // The stop is sent before the result; each thread stops as soon as the kernel
        // next schedules it (at once, unless the machine is busy).
        let stopped = || {
            procs
                .iter()
                .filter_map(|p| proc_info(p.pid))
                .all(|(s, _, _)| s == 'T')
        };
        assert!(
            eventually(5, stopped).await,
            "{who:?}: the worker was not stopped"
        );
        let before = workers_cpu(&server);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let used = workers_cpu(&server) - before;
        assert!(used <= 2, "{who:?}: {used} ticks used between calls");
        // The session still works (its spinning thread runs again during its calls).
        let r = server.run("spin", "print('next')").await;
        assert_eq!(stdout(&r), "next\n", "{who:?}: {r}");
        server.stop().await;
    }
}

#[tokio::test]
async fn a_threads_late_output_is_never_shown_as_another_calls() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        let r = server
            .run(
                "late",
                "import threading, time\ndef chatter():\n    time.sleep(0.3)\n    for i in range(40):\n        print('late', i, flush=True)\n        time.sleep(0.02)\nthreading.Thread(target=chatter, daemon=True).start()\nprint('first')",
            )
            .await;
        assert_eq!(stdout(&r), "first\n", "{who:?}: {r}");
        tokio::time::sleep(Duration::from_millis(600)).await;
        let r = server
            .run("late", "import time\ntime.sleep(1.5)\nprint('second')")
            .await;
        assert_eq!(stdout(&r), "second\n", "{who:?}: {r}");
        let warnings = r["warnings"].to_string();
        assert!(
            warnings.contains("threads started by earlier calls") && warnings.contains("late 0"),
            "{who:?}: the late output is reported apart: {r}"
        );
        let r = server.run("late", "print('third')").await;
        assert_eq!(stdout(&r), "third\n", "{who:?}: {r}");
        server.stop().await;
    }
}

#[tokio::test]
async fn sixty_four_sessions_calling_at_once_get_their_own_output() {
    // Quotas that fit 64 sessions in the default SANDBOX_DISK_TOTAL whatever order they
    // open in: this test is about output, not about sharing the disk total.
    let server = start(
        As::Root,
        &[("SANDBOX_MAX_WORKERS", "64"), ("SANDBOX_DISK_LIMIT", "64m")],
    )
    .await;
    let calls = (0..64).map(|i| {
        let server = &server;
        async move {
            let r = server
                .exec(json!({
                    "session": format!("c{i}"),
                    "timeout_s": 100,
                    "code": format!("import time\nfor j in range(50):\n    print('c{i}', j)\n    time.sleep(0.002)"),
                }))
                .await;
            (i, r)
        }
    });
    for (i, r) in futures::future::join_all(calls).await {
        assert_eq!(r["status"], "ok", "c{i}: {r}");
        let expected: String = (0..50).map(|j| format!("c{i} {j}\n")).collect();
        assert_eq!(stdout(&r), expected, "c{i}: {r}");
    }
    server.stop().await;
}

#[tokio::test]
async fn settings_show_each_sessions_worker_memory() {
    let server = start(As::Root, &[]).await;
    server.run("big", "blob = bytearray(64 << 20)").await;
    server.run("small", "x = 1").await;
    let doc = server.settings().await;
    let sessions = doc["sessions"].as_array().unwrap();
    let big = sessions.iter().find(|s| s["session"] == "big").unwrap();
    let small = sessions.iter().find(|s| s["session"] == "small").unwrap();
    assert_eq!(big["worker"], "frozen", "{big}");
    let rss = |s: &Value| s["rss_bytes"].as_u64().unwrap();
    let pss = |s: &Value| s["pss_bytes"].as_u64().unwrap();
    assert!(rss(big) >= 64 << 20, "{big}");
    assert!(rss(small) < rss(big), "{small} {big}");
    assert!(pss(big) >= 64 << 20 && pss(big) <= rss(big), "{big}");
    assert!(
        doc["workers"]["max"].as_u64().unwrap() >= 2,
        "{}",
        doc["workers"]
    );
    server.stop().await;
}

#[tokio::test]
async fn one_new_name_called_at_once_opens_one_session() {
    let server = start(As::Root, &[]).await;
    let calls = (0..8).map(|_| {
        let server = &server;
        async move {
            server
                .run("same", "n = globals().get('n', 0) + 1\nprint(n)")
                .await
        }
    });
    let mut counts: Vec<u64> = futures::future::join_all(calls)
        .await
        .iter()
        .map(|r| stdout(r).trim().parse().unwrap_or_else(|_| panic!("{r}")))
        .collect();
    counts.sort();
    assert_eq!(
        counts,
        (1..=8).collect::<Vec<u64>>(),
        "one interpreter served all"
    );
    let doc = server.settings().await;
    assert_eq!(doc["workers"]["sessions_open"], 1, "{}", doc["workers"]);
    // Every workspace the keeper holds belongs to the session or to a warm worker.
    let held = async || {
        let w = server.settings().await["workers"]["warm"].clone();
        let expected = 1 + w["ready"].as_u64().unwrap() + w["starting"].as_u64().unwrap();
        (workspace_mounts(&server) as u64 == expected).then_some(())
    };
    let settled = until_some(100, Duration::from_millis(100), held).await;
    assert!(
        settled.is_some(),
        "workspaces held by the keeper: {}",
        workspace_mounts(&server)
    );
    server.stop().await;
}

/// The size of the pipe open as `fd` in process `pid`, asked of the kernel through a
/// descriptor of our own (`/proc/PID/fd/N` opens the same pipe); `None` if it is not one.
fn pipe_size_of(pid: u32, fd: i32) -> Option<usize> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let pipe = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .ok()?;
    // SAFETY: F_GETPIPE_SZ on a descriptor we own; it reads nothing from memory.
    let size = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ) };
    usize::try_from(size).ok()
}

/// A worker's stdout and stderr pipes are enlarged, so that a call printing a lot wakes
/// the server once per full pipe: 1 MiB for a root server; 256 KiB for a login user's,
/// whose pipes the kernel counts against a per-user limit (past it, every new pipe of that
/// user would get one page).
#[tokio::test]
async fn a_workers_output_pipes_are_enlarged_within_the_users_pipe_limit() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        let r = server.run("pipes", "print('ok')").await;
        assert_eq!(stdout(&r), "ok\n", "{who:?}: {r}");
        let expected = match who {
            As::Root => 1 << 20,
            As::User => 256 << 10,
        };
        // No start under way (a worker being started gets its pipes enlarged a moment
        // after its fork).
        let idle = async || {
            let warm = server.settings().await["workers"]["warm"].clone();
            (warm["starting"] == 0 && warm["ready"] == warm["target"]).then_some(())
        };
        let settled = until_some(300, Duration::from_millis(100), idle).await;
        assert!(settled.is_some(), "{who:?}: the warm pool never settled");
        // Every pipe the host can open (a process of another uid may refuse
        // /proc/PID/fd) has the size asked for.
        let sizes: Vec<(u32, i32, usize)> = workers_of(server.pid)
            .iter()
            .flat_map(|p| [1, 2].map(|fd| (p.pid, fd, pipe_size_of(p.pid, fd))))
            .filter_map(|(pid, fd, size)| Some((pid, fd, size?)))
            .collect();
        assert!(sizes.len() >= 2, "{who:?}: no worker's pipes could be seen");
        for (pid, fd, size) in &sizes {
            assert_eq!(*size, expected, "{who:?}: pid {pid} fd {fd}: {sizes:?}");
        }
        server.stop().await;
    }
}

/// A keeper that answers after the server stopped waiting (stopped for longer than the
/// server's 10 s timeout, as a badly loaded machine can do) must not have its late
/// answer taken for the next request's: the next new session gets its own, fresh
/// workspace, and the workspace whose removal timed out does not linger as a second.
#[tokio::test]
async fn a_late_answer_of_the_workspace_keeper_is_never_taken_for_the_next_one() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_WARM_WORKERS", "0")]).await;
        let r = server.run("old", "open('old.txt', 'w').write('o')").await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let pid = keeper(&server).expect("the server runs a workspace keeper");
        let keeper_pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(keeper_pid, rustix::process::Signal::STOP).unwrap();
        let _ = server
            .call("reset_session", json!({"session": "old"}))
            .await;
        // Longer than the server waits for the keeper: the removal's answer comes late.
        tokio::time::sleep(Duration::from_secs(11)).await;
        rustix::process::kill_process(keeper_pid, rustix::process::Signal::CONT).unwrap();
        for name in ["new", "newer"] {
            let r = server
                .run(
                    name,
                    &format!("import os\nopen('{name}.txt', 'w').write('n')\nprint(sorted(os.listdir('.')))"),
                )
                .await;
            assert_eq!(r["status"], "ok", "{who:?}: {name}: {r}");
            assert_eq!(stdout(&r), format!("['{name}.txt']\n"), "{who:?}: {r}");
        }
        assert!(
            eventually(5, || workspace_mounts(&server) == 2).await,
            "{who:?}: {} workspaces, not the two sessions' own",
            workspace_mounts(&server)
        );
        server.stop().await;
    }
}
