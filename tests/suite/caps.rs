//! Caps on a whole session and a whole client (`SANDBOX_MAX_*`,
//! `SANDBOX_CLIENT_MAX_*`): the call that would pass a cap is refused before it runs,
//! with the cap, its limit and its use; counters survive restarts and `reset_session`
//! with `keep_files`, end with the session, and are exact under concurrent calls; the
//! budget left is in every result, in `warden://settings` and in the session's
//! `budget` resource; refusals are in the audit log.

use serde_json::{Value, json};

use super::audit::records;
use super::{As, Net, Server, both_modes, stdout};

async fn start(who: As, env: &[(&str, &str)]) -> Server {
    Server::start_as(who, Net::Host, env).await
}

async fn budget_resource(server: &Server, session: &str) -> Result<Value, String> {
    super::json_resource(
        &server.client,
        &format!("warden://sessions/{session}/budget"),
    )
    .await
}

async fn reset(server: &Server, session: &str, keep_files: bool) {
    let r = server
        .call(
            "reset_session",
            json!({"session": session, "keep_files": keep_files}),
        )
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
}

#[tokio::test]
async fn the_call_past_a_session_cap_is_refused_and_nothing_runs() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_MAX_CALLS", "3")]).await;
        for left in [2, 1] {
            let r = server.run("s", "print('ran')").await;
            assert_eq!(stdout(&r), "ran\n", "{r}");
            assert_eq!(r["budget"]["session"]["calls"], left, "{r}");
            assert!(r["budget"].get("client").is_none(), "{r}");
        }
        // Restarting the interpreter keeps the count.
        reset(&server, "s", true).await;
        let r = server.run("s", "print('third')").await;
        assert_eq!(stdout(&r), "third\n", "{r}");
        assert_eq!(r["budget"]["session"]["calls"], 0, "{r}");
        let r = server
            .run(
                "s",
                "from pathlib import Path\nPath('made').write_text('x')",
            )
            .await;
        assert_eq!(r["error"]["type"], "CapExceeded", "{r}");
        let cap = &r["error"]["cap"];
        assert_eq!(cap["setting"], "SANDBOX_MAX_CALLS", "{r}");
        assert_eq!(cap["scope"], "session");
        assert_eq!(cap["cap"], "calls");
        assert_eq!(
            (cap["limit"].as_u64(), cap["used"].as_u64()),
            (Some(3), Some(3))
        );
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("made 3 of 3 calls")
        );
        assert_eq!(r["files"], json!([]), "{r}");
        assert_eq!(r["budget"]["session"]["calls"], 0, "{r}");
        let doc = budget_resource(&server, "s").await.unwrap();
        assert_eq!(doc["spent"]["calls"], 3, "{doc}");
        assert_eq!(doc["remaining"]["calls"], 0, "{doc}");
        let settings = server.settings().await;
        let row = &settings["sessions"][0];
        assert_eq!(
            (row["session"].as_str(), row["spent"]["calls"].as_u64()),
            (Some("s"), Some(3))
        );
        assert_eq!(settings["caps"]["session_limits"]["calls"], 3);
        // Another session has a count of its own.
        let r = server.run("other", "print('fresh')").await;
        assert_eq!(stdout(&r), "fresh\n", "{r}");
        // Closing the session ends its count; its name starts again.
        reset(&server, "s", false).await;
        assert!(budget_resource(&server, "s").await.is_err());
        let r = server.run("s", "print('new')").await;
        assert_eq!(stdout(&r), "new\n", "{r}");
        assert_eq!(r["budget"]["session"]["calls"], 2, "{r}");
        let data = server.stop().await;
        let refused: Vec<Value> = records(data.path())
            .into_iter()
            .filter(|r| r["rule"] == "SANDBOX_MAX_CALLS")
            .collect();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0]["detail"]
                .as_str()
                .unwrap()
                .starts_with("CapExceeded")
        );
    }
}

/// A session whose idle worker was stopped to make room keeps its count.
#[tokio::test]
async fn counts_survive_eviction_of_the_idle_worker() {
    for who in both_modes() {
        counts_survive_eviction(who).await;
    }
}

async fn counts_survive_eviction(who: As) {
    let server = start(
        who,
        &[("SANDBOX_MAX_CALLS", "2"), ("SANDBOX_MAX_WORKERS", "1")],
    )
    .await;
    let r = server.run("a", "x = 1").await;
    assert_eq!(r["status"], "ok", "{r}");
    let r = server.run("b", "print('b')").await;
    assert_eq!(stdout(&r), "b\n", "{r}");
    let r = server.run("a", "print('a again')").await;
    assert_eq!(stdout(&r), "a again\n", "{r}");
    assert_eq!(r["worker_restarted"], true, "{r}");
    assert_eq!(r["budget"]["session"]["calls"], 0, "{r}");
    let r = server.run("a", "print('once more')").await;
    assert_eq!(r["error"]["type"], "CapExceeded", "{r}");
    server.stop().await;
}

/// 1,000 calls over 8 sessions at once against a client cap of exactly 1,000: every one
/// runs, the next is refused, and each session counted its own.
#[tokio::test]
async fn counters_are_exact_after_a_thousand_calls_over_eight_sessions() {
    for who in both_modes() {
        a_thousand_calls_over_eight_sessions(who).await;
    }
}

async fn a_thousand_calls_over_eight_sessions(who: As) {
    let server = start(
        who,
        &[
            ("SANDBOX_CLIENT_MAX_CALLS", "1000"),
            ("SANDBOX_MAX_CALLS", "125"),
            ("SANDBOX_MAX_WORKERS", "8"),
        ],
    )
    .await;
    let runs = (0..8).map(|i| {
        let server = &server;
        async move {
            let name = format!("s{i}");
            let mut ran = 0;
            for n in 0..125 {
                let r = server.run(&name, &format!("print({n})")).await;
                assert_eq!(stdout(&r), format!("{n}\n"), "{r}");
                ran += 1;
            }
            ran
        }
    });
    let ran: u32 = futures::future::join_all(runs).await.into_iter().sum();
    assert_eq!(ran, 1000);
    let r = server.run("s0", "print('one more')").await;
    assert_eq!(r["error"]["type"], "CapExceeded", "{r}");
    let r = server.run("s8", "print('one more')").await;
    assert_eq!(r["error"]["type"], "CapExceeded", "{r}");
    assert_eq!(r["error"]["cap"]["scope"], "client", "{r}");
    assert_eq!(r["error"]["cap"]["used"], 1000, "{r}");
    let settings = server.settings().await;
    assert_eq!(settings["caps"]["client_spent"]["calls"], 1000);
    for row in settings["sessions"].as_array().unwrap() {
        let expected = if row["session"] == "s8" { 0 } else { 125 };
        assert_eq!(row["spent"]["calls"], expected, "{row}");
    }
    server.stop().await;
}

/// Wall seconds: a call's time limit is cut to what is left, and once it is used up the
/// next call is refused; CPU seconds are counted from the worker and refuse the next
/// call once spent; bytes written count what a call created or changed.
#[tokio::test]
async fn time_and_bytes_caps_count_what_calls_spend() {
    for who in both_modes() {
        // A generous time limit and no other cap: a loaded machine may take long to give
        // the loop its 1.2 CPU seconds, and the cap under test is the CPU one.
        let server = start(
            who,
            &[
                ("SANDBOX_CLIENT_MAX_CPU_S", "1"),
                ("SANDBOX_TIMEOUT_S", "120"),
            ],
        )
        .await;
        let burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass\nprint('burnt')";
        let r = server.run("cpu", burn).await;
        assert_eq!(stdout(&r), "burnt\n", "{r}");
        let r = server.run("cpu", "print('after')").await;
        assert_eq!(
            r["error"]["cap"]["setting"], "SANDBOX_CLIENT_MAX_CPU_S",
            "{r}"
        );
        server.stop().await;

        // The call's own limit (120 s) outlasts its 30 s sleep: only the cut to the 3 s
        // left of the wall cap makes it time out.
        let server = start(
            who,
            &[("SANDBOX_MAX_WALL_S", "3"), ("SANDBOX_TIMEOUT_S", "120")],
        )
        .await;
        let r = server.run("wall", "import time\ntime.sleep(30)").await;
        assert_eq!(r["timed_out"], true, "{r}");
        assert!(
            r["warnings"].to_string().contains("time limit was cut"),
            "{r}"
        );
        let r = server.run("wall", "print('after')").await;
        assert_eq!(r["error"]["cap"]["setting"], "SANDBOX_MAX_WALL_S", "{r}");
        server.stop().await;

        let server = start(who, &[("SANDBOX_MAX_BYTES_WRITTEN", "1m")]).await;
        let write =
            "from pathlib import Path\nPath('f{}').write_bytes(b'x' * 600_000)\nprint('ok')";
        let r = server.run("bytes", &write.replace("{}", "1")).await;
        assert_eq!(stdout(&r), "ok\n", "{r}");
        assert_eq!(
            r["budget"]["session"]["bytes_written"],
            1_048_576 - 600_000,
            "{r}"
        );
        let r = server.run("bytes", "print('reads are free')").await;
        assert_eq!(
            r["budget"]["session"]["bytes_written"],
            1_048_576 - 600_000,
            "{r}"
        );
        // Past what is left, the write fails inside Python, as at the disk quota.
        let past = "from pathlib import Path\ntry:\n    Path('f2').write_bytes(b'x' * 600_000)\n\
                    except OSError as e:\n    print('errno', e.errno)";
        let r = server.run("bytes", past).await;
        assert_eq!(stdout(&r), "errno 28\n", "{r}");
        let left = r["budget"]["session"]["bytes_written"].as_u64().unwrap();
        assert!(left < 16_384, "{r}");
        // Another session is not narrowed.
        let r = server.run("roomy", &write.replace("{}", "3")).await;
        assert_eq!(stdout(&r), "ok\n", "{r}");
        server.stop().await;
    }
}

/// A cap set to a negative number, a fraction or 2^70 stops the server before it
/// starts, naming the setting.
#[test]
fn bad_cap_values_are_clear_errors() {
    for (name, value) in [
        ("SANDBOX_MAX_CALLS", "-1"),
        ("SANDBOX_MAX_CPU_S", "1.5"),
        ("SANDBOX_CLIENT_MAX_CALLS", "1180591620717411303424"),
        ("SANDBOX_MAX_BYTES_WRITTEN", "2000000000000000000000"),
        ("SANDBOX_CLIENT_MAX_WALL_S", "18446744073709552"),
    ] {
        let out = std::process::Command::new(super::BIN)
            .arg("settings")
            .env(name, value)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{name}={value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{name}=\"{value}\"")), "{err}");
        assert!(
            err.contains("a whole number") || err.contains("a size"),
            "{err}"
        );
    }
}
