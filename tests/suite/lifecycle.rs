//! Timeouts, crashes and limits: the call ends with a clear result, the session recovers
//! with a fresh worker, and the server and other sessions never notice.

use serde_json::json;

use super::{Server, eventually, processes_of_uid, stdout};

async fn uid_of(server: &Server, session: &str) -> u64 {
    let r = server.run(session, "import os; print(os.getuid())").await;
    stdout(&r).trim().parse().expect("uid")
}

#[tokio::test]
async fn timeout_kills_the_worker_and_the_next_call_gets_a_fresh_one() {
    let server = Server::start(&[]).await;
    server.run("t", "kept = 'value'").await;
    let uid = uid_of(&server, "t").await;
    let r = server
        .exec(json!({
            "session": "t",
            "timeout_s": 2,
            "code": "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nprint('spinning', flush=True)\nwhile True:\n    pass"
        }))
        .await;
    assert_eq!(r["status"], "timeout", "{r}");
    assert_eq!(r["timed_out"], true);
    assert_eq!(stdout(&r), "spinning\n", "output before the kill is kept");
    assert!(r["duration_ms"].as_u64().unwrap() < 6_000, "{r}");
    assert!(
        eventually(5, || processes_of_uid(uid).is_empty()).await,
        "the killed worker's processes are gone"
    );
    let r = server.run("t", "kept").await;
    assert_eq!(r["worker_restarted"], true, "{r}");
    assert_eq!(r["error"]["type"], "NameError", "variables were lost: {r}");
    assert!(
        r["warnings"]
            .to_string()
            .contains("variables from earlier calls are gone"),
        "{r}"
    );
    let r = server.run("t", "print('recovered')").await;
    assert_eq!(stdout(&r), "recovered\n");
    assert_eq!(r["worker_restarted"], false);
    server.stop().await;
}

#[tokio::test]
async fn a_crashing_worker_is_reported_and_replaced_while_other_sessions_keep_working() {
    let server = Server::start(&[]).await;
    server.run("other", "survivor = 7").await;
    for (code, expect) in [
        ("import ctypes\nctypes.string_at(0)", "SIGSEGV"),
        ("import os\nos._exit(3)", "exit status 3"),
    ] {
        let r = server.run("crash", code).await;
        assert_eq!(r["status"], "killed", "{r}");
        assert_eq!(r["error"]["type"], "WorkerDied");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(expect),
            "{r}"
        );
        let r = server.run("crash", "print('back')").await;
        assert_eq!(stdout(&r), "back\n");
        assert_eq!(r["worker_restarted"], true);
    }
    let r = server.run("other", "survivor").await;
    assert_eq!(r["result"], "7");
    assert_eq!(r["worker_restarted"], false);
    server.stop().await;
}

#[tokio::test]
async fn memory_file_size_and_fd_limits_are_enforced() {
    let server = Server::start(&[
        ("SANDBOX_MEM_LIMIT", "512m"),
        ("SANDBOX_FILE_SIZE_LIMIT", "1m"),
    ])
    .await;
    let r = server.run("m", "b = bytearray(1 << 30)").await;
    assert_eq!(r["error"]["type"], "MemoryError", "{r}");
    let r = server
        .run("m", "open('big', 'wb').write(b'x' * (2 << 20))")
        .await;
    assert_eq!(r["status"], "error", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("File too large"),
        "{r}"
    );
    let r = server
        .run("m", "fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError as e:\n    print(len(fs), e.errno)")
        .await;
    let out = stdout(&r);
    let n: usize = out.split_whitespace().next().unwrap().parse().unwrap();
    assert!(n < 256, "{out}");
    assert!(out.trim().ends_with(" 24"), "EMFILE: {out}");
    let r = server.run("m", "print('fine')").await;
    assert_eq!(stdout(&r), "fine\n");
    server.stop().await;
}

#[tokio::test]
async fn concurrent_sessions_run_in_parallel() {
    // Judged by what the workers saw, not by a deadline: each prints when its call began
    // and ended (the realtime clock is the host's), and there must be an instant when all
    // four were running. A loaded machine may start them late, so each stays a while.
    let server = Server::start(&[]).await;
    let code = "import time\nt0 = time.time()\ntime.sleep(3)\nprint(t0, time.time())";
    let calls = (0..4).map(|i| {
        let s = format!("p{i}");
        let server = &server;
        async move { server.run(&s, code).await }
    });
    let results = futures::future::join_all(calls).await;
    let windows: Vec<(f64, f64)> = results
        .iter()
        .map(|r| {
            let text = stdout(r);
            let mut times = text.split_whitespace().map(|t| t.parse::<f64>().unwrap());
            match (times.next(), times.next()) {
                (Some(a), Some(b)) => (a, b),
                _ => panic!("no window: {r}"),
            }
        })
        .collect();
    let last_start = windows.iter().map(|w| w.0).fold(f64::MIN, f64::max);
    let first_end = windows.iter().map(|w| w.1).fold(f64::MAX, f64::min);
    assert!(
        last_start < first_end,
        "the four calls never all ran at once: {windows:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn require_mode_runs_when_every_wall_stands_and_reports_none_missing() {
    let server = Server::start(&[("HOST_SANDBOX", "require")]).await;
    let r = server.run("r", "print('ok')").await;
    assert_eq!(stdout(&r), "ok\n", "{r}");
    assert!(!r["warnings"].to_string().contains("sandbox wall"), "{r}");
    server.stop().await;
}

#[tokio::test]
async fn sandbox_off_says_so_loudly_in_every_result() {
    let server = Server::start(&[("HOST_SANDBOX", "off")]).await;
    for _ in 0..2 {
        let r = server.run("o", "print(1)").await;
        let warnings = r["warnings"].to_string();
        assert!(
            warnings.contains("WITHOUT any operating-system sandbox"),
            "{r}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn workers_die_with_the_server() {
    let server = Server::start(&[]).await;
    let uid = uid_of(&server, "w").await;
    assert_eq!(processes_of_uid(uid).len(), super::WORKER_PROCESSES);
    server.stop().await;
    assert!(
        eventually(5, || processes_of_uid(uid).is_empty()).await,
        "worker outlived the server"
    );
}

#[tokio::test]
async fn a_cancelled_call_kills_its_code_and_the_session_recovers() {
    let server = Server::start(&[]).await;
    let uid = uid_of(&server, "c").await;
    let serde_json::Value::Object(args) = json!({
        "session": "c",
        "timeout_s": 100,
        "code": "while True:\n    pass"
    }) else {
        unreachable!()
    };
    // Dropping the request future makes rmcp's client send notifications/cancelled.
    let call = server
        .client
        .call_tool(rmcp::model::CallToolRequestParams::new("execute_python").with_arguments(args));
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(800), call)
            .await
            .is_err()
    );
    assert!(
        eventually(5, || processes_of_uid(uid).is_empty()).await,
        "the cancelled code kept running"
    );
    let r = server.run("c", "print('after cancel')").await;
    assert_eq!(stdout(&r), "after cancel\n", "{r}");
    assert_eq!(r["worker_restarted"], true);
    assert!(r["warnings"].to_string().contains("cancelled"), "{r}");
    server.stop().await;
}

#[tokio::test]
async fn reset_restarts_or_closes_a_session() {
    let server = Server::start(&[]).await;
    server
        .run("r", "x = 5\nopen('keep.txt', 'w').write('kept')")
        .await;
    let uid = uid_of(&server, "r").await;
    let reset = server
        .call("reset_session", json!({"session": "r", "keep_files": true}))
        .await
        .unwrap()
        .structured_content
        .unwrap();
    assert_eq!(reset["ok"], true, "{reset}");
    assert_eq!(reset["worker_killed"], true);
    assert!(eventually(5, || processes_of_uid(uid).is_empty()).await);
    let r = server.run("r", "print(open('keep.txt').read())\nx").await;
    assert_eq!(stdout(&r), "kept\n", "{r}");
    assert_eq!(r["error"]["type"], "NameError", "variables cleared: {r}");

    let workspace = server.data_dir.path().join("sessions");
    let closed = server
        .call("reset_session", json!({"session": "r"}))
        .await
        .unwrap()
        .structured_content
        .unwrap();
    assert_eq!(closed["closed"], true, "{closed}");
    assert!(
        super::find_files(&workspace, "keep.txt").is_empty(),
        "files removed"
    );
    let r = server
        .run(
            "r",
            "from pathlib import Path\nprint(Path('keep.txt').exists())",
        )
        .await;
    assert_eq!(stdout(&r), "False\n", "a fresh session: {r}");
    let missing = server
        .call("reset_session", json!({"session": "never-opened"}))
        .await
        .unwrap();
    assert_eq!(missing.is_error, Some(true));
    server.stop().await;
}
