//! Transactional calls (`transactional: true`, `SANDBOX_TRANSACTIONS`): whatever way a
//! call fails (it raises, times out, is cancelled, trips a wire, passes a cap, runs out
//! of memory or loses its worker), the workspace afterwards hashes the same as before
//! it, and the result says `rolled_back: true` with what was undone; a call that
//! succeeds keeps its changes.

use serde_json::{Value, json};

use super::checkpoints::{FINGERPRINT, SETUP, tool};
use super::{As, Net, Server, both_modes, stdout};

async fn start(who: As, env: &[(&str, &str)]) -> Server {
    Server::start_as(who, Net::Host, env).await
}

/// Changes of every kind, made before the call goes wrong.
const DAMAGE: &str = "import os, shutil\nshutil.rmtree('data')\nos.rename('big.bin', 'moved.bin')\nopen('notes-link.txt', 'w').write('HELLO')\nos.remove('latest')\nos.symlink('/etc/passwd', 'latest')\nopen('new.txt', 'w').write('new')\nos.rmdir('empty')\n";

async fn fingerprint(server: &Server, session: &str) -> String {
    let r = server
        .exec(json!({"session": session, "code": FINGERPRINT, "transactional": false}))
        .await;
    assert_eq!(r["status"], "ok", "{r}");
    stdout(&r).to_string()
}

async fn transactional(server: &Server, session: &str, code: &str, timeout_s: f64) -> Value {
    server
        .exec(json!({"session": session, "code": code, "transactional": true, "timeout_s": timeout_s}))
        .await
}

/// A session with the sample tree in it, and its fingerprint.
async fn prepared(server: &Server, session: &str) -> String {
    let r = server.run(session, SETUP).await;
    assert_eq!(r["status"], "ok", "{r}");
    fingerprint(server, session).await
}

#[tokio::test]
async fn every_way_a_call_can_fail_leaves_the_workspace_as_it_was() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_MEM_LIMIT", "512m")]).await;
        let before = prepared(&server, "t").await;
        // Only the timeout's limit is short: the other calls get all the time a loaded
        // machine may need, so that each fails the way it is meant to.
        let failures: [(&str, String, &str, f64); 4] = [
            (
                "raise",
                format!("{DAMAGE}raise ValueError('no')"),
                "error",
                100.0,
            ),
            (
                "timeout",
                format!("{DAMAGE}import time\ntime.sleep(600)"),
                "timeout",
                3.0,
            ),
            (
                "memory",
                format!("{DAMAGE}b = bytearray(1 << 30)"),
                "error",
                100.0,
            ),
            (
                "worker lost",
                format!("{DAMAGE}os._exit(3)"),
                "killed",
                100.0,
            ),
        ];
        for (how, code, status, limit) in failures {
            let r = transactional(&server, "t", &code, limit).await;
            assert_eq!(r["status"], status, "{who:?} {how}: {r}");
            assert_eq!(r["rolled_back"], true, "{who:?} {how}: {r}");
            assert_eq!(r["transactional"], true, "{who:?} {how}: {r}");
            // The rollback undoes exactly what the call changed.
            assert_eq!(r["undone_total"], r["files_total"], "{who:?} {how}: {r}");
            assert!(r["undone_total"].as_u64() >= Some(7), "{who:?} {how}: {r}");
            let undone: Vec<&str> = r["undone"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["path"].as_str().unwrap())
                .collect();
            assert!(
                undone.contains(&"data/raw/a.csv") && undone.contains(&"new.txt"),
                "{r}"
            );
            assert_eq!(fingerprint(&server, "t").await, before, "{who:?} {how}");
        }
        // What came back belongs to the code as before.
        let r = server
            .exec(json!({"session": "t", "code": "open('notes.txt', 'a').write('!')\nimport shutil\nshutil.rmtree('data')\n1/0", "transactional": true}))
            .await;
        assert_eq!(r["error"]["type"], "ZeroDivisionError", "{who:?}: {r}");
        assert_eq!(fingerprint(&server, "t").await, before, "{who:?}");
        // What the code assigned before it failed stays (memory is not rolled back).
        let r = transactional(
            &server,
            "t",
            "kept = 1\nopen('x', 'w').write('x')\n1/0",
            100.0,
        )
        .await;
        assert_eq!(r["rolled_back"], true, "{r}");
        assert!(
            r["warnings"]
                .to_string()
                .contains("variables were not rolled back"),
            "{r}"
        );
        let r = server.run("t", "print(kept)").await;
        assert_eq!(stdout(&r), "1\n", "{who:?}: {r}");
        // A call that succeeds keeps its changes, and says nothing was rolled back.
        let r = transactional(&server, "t", "open('made.txt', 'w').write('ok')", 100.0).await;
        assert_eq!(
            (r["status"].as_str(), r.get("rolled_back")),
            (Some("ok"), None),
            "{r}"
        );
        assert_ne!(fingerprint(&server, "t").await, before, "{who:?}");
        server.stop().await;
    }
}

#[tokio::test]
async fn a_byte_cap_and_a_full_quota_are_rolled_back_too() {
    for who in both_modes() {
        let server = start(
            who,
            &[
                ("SANDBOX_MAX_BYTES_WRITTEN", "8m"),
                ("SANDBOX_DISK_LIMIT", "32m"),
            ],
        )
        .await;
        prepared(&server, "c").await;
        let r = server
            .call("checkpoint", json!({"session": "c", "name": "before"}))
            .await;
        assert_ne!(r.unwrap().is_error, Some(true));
        // Past the byte cap, a write fails inside Python.
        let big = format!("{DAMAGE}open('more.bin', 'wb').write(b'x' * (9 << 20))");
        let r = transactional(&server, "c", &big, 100.0).await;
        assert_eq!(r["rolled_back"], true, "{who:?}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("No space left"),
            "{r}"
        );
        // What it wrote is spent (the cap now refuses calls), so the tree is compared by
        // a restore of the checkpoint taken before: it finds nothing to change.
        let r = server
            .call("restore", json!({"session": "c", "name": "before"}))
            .await;
        let r = r.unwrap().structured_content.unwrap();
        assert_eq!(
            (r["ok"].as_bool(), r["changes_total"].as_u64()),
            (Some(true), Some(0)),
            "{who:?}: {r}"
        );
        server.stop().await;
        // Code that fills the workspace's quota.
        let server = start(who, &[("SANDBOX_DISK_LIMIT", "32m")]).await;
        let before = prepared(&server, "q").await;
        let fill = format!(
            "{DAMAGE}f = open('fill.bin', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))"
        );
        let r = transactional(&server, "q", &fill, 100.0).await;
        assert_eq!(r["rolled_back"], true, "{who:?}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("No space left"),
            "{r}"
        );
        assert_eq!(fingerprint(&server, "q").await, before, "{who:?}");
        server.stop().await;
    }
}

/// The file `path` of `session`'s workspace, read through its resource.
async fn resource_text(server: &Server, session: &str, path: &str) -> Option<String> {
    let uri = format!("warden://sessions/{session}/files/{path}");
    let read = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .ok()?;
    match &read.contents[0] {
        // The text inside its provenance delimiters.
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => {
            text.lines().nth(1).map(str::to_string)
        }
        other => panic!("{other:?}"),
    }
}

/// A call refused before it runs (a tripwire in the guard's verdict, a cap on calls)
/// changes nothing, transactional or not.
#[tokio::test]
async fn a_tripwire_and_a_cap_on_calls_change_nothing() {
    for who in both_modes() {
        let server = start(who, &[("CODEGUARD", "enforce"), ("SANDBOX_MAX_CALLS", "2")]).await;
        server.run("w", "open('a.txt', 'w').write('v1')").await;
        let trip = "open('a.txt', 'w').write('v2')\nq = 'DROP TABLE customers'";
        let r = transactional(&server, "w", trip, 100.0).await;
        assert_eq!(r["error"]["type"], "GuardBlocked", "{who:?}: {r}");
        assert_eq!(
            resource_text(&server, "w", "a.txt").await.as_deref(),
            Some("v1"),
            "{who:?}"
        );
        server.run("o", "open('a.txt', 'w').write('v1')").await;
        server.run("o", "print(1)").await;
        let r = transactional(&server, "o", "open('a.txt', 'w').write('v2')", 100.0).await;
        assert_eq!(r["error"]["type"], "CapExceeded", "{who:?}: {r}");
        assert_eq!(
            resource_text(&server, "o", "a.txt").await.as_deref(),
            Some("v1"),
            "{who:?}"
        );
        server.stop().await;
    }
}

/// A cancelled transactional call's changes are rolled back before the session's next
/// call runs, which says so.
#[tokio::test]
async fn a_cancelled_call_is_rolled_back_before_the_next_one() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        let before = prepared(&server, "x").await;
        let Value::Object(args) = json!({
            "session": "x",
            "timeout_s": 100,
            "transactional": true,
            "code": format!("{DAMAGE}open('done.txt', 'w').write('done')\nimport time\ntime.sleep(100)"),
        }) else {
            unreachable!()
        };
        {
            let call = server.client.call_tool(
                rmcp::model::CallToolRequestParams::new("execute_python").with_arguments(args),
            );
            tokio::pin!(call);
            // Cancelled (its future dropped) once its changes are made, which the file
            // it writes last shows, and while it sleeps.
            let uri = "warden://sessions/x/files/done.txt";
            loop {
                tokio::select! {
                    done = &mut call => panic!("{who:?}: the long call ended: {done:?}"),
                    r = server.client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)) => {
                        if r.is_ok() {
                            break;
                        }
                    }
                }
            }
        }
        let r = server
            .exec(json!({"session": "x", "code": "print(1)", "transactional": false}))
            .await;
        assert!(
            r["warnings"]
                .to_string()
                .contains("was cancelled; its workspace changes were rolled back"),
            "{who:?}: {r}"
        );
        assert_eq!(fingerprint(&server, "x").await, before, "{who:?}");
        server.stop().await;
    }
}

#[tokio::test]
async fn the_servers_default_decides_and_always_overrules_an_opt_out() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_TRANSACTIONS", "on-failure")]).await;
        let before = prepared(&server, "d").await;
        let r = server.run("d", &format!("{DAMAGE}1/0")).await;
        assert_eq!(r["rolled_back"], true, "{who:?}: {r}");
        assert_eq!(fingerprint(&server, "d").await, before);
        let r = server
            .exec(json!({"session": "d", "code": format!("{DAMAGE}1/0"), "transactional": false}))
            .await;
        assert!(r.get("rolled_back").is_none(), "{r}");
        assert_ne!(fingerprint(&server, "d").await, before);
        server.stop().await;
        let server = start(who, &[("SANDBOX_TRANSACTIONS", "always")]).await;
        let before = prepared(&server, "a").await;
        let r = server
            .exec(json!({"session": "a", "code": format!("{DAMAGE}1/0"), "transactional": false}))
            .await;
        assert_eq!(r["rolled_back"], true, "{who:?}: {r}");
        assert!(
            r["warnings"]
                .to_string()
                .contains("SANDBOX_TRANSACTIONS=always"),
            "{r}"
        );
        server.stop().await;
        let _ = before;
    }
}

/// A transactional call costs what it changes, not the workspace: one that fills more
/// than half the quota runs (a copy of the workspace would not fit beside it), and what
/// it wrote through a file an earlier call left open, through a file it renamed into a
/// new directory, and through a directory it renamed, is put back too.
#[tokio::test]
async fn the_journal_puts_back_what_the_call_changed_however_it_reached_it() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_DISK_LIMIT", "16m")]).await;
        let setup = "import os\nos.makedirs('a/b')\nopen('a/b/deep.txt', 'w').write('deep')\nopen('big.bin', 'wb').write(b'x' * (10 << 20))\nlog = open('log.txt', 'w')\nlog.write('first\\n')\nlog.flush()";
        let r = server.run("j", setup).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let before = fingerprint(&server, "j").await;
        let code = "import os\n\
            log.write('second\\n'); log.flush()\n\
            os.rename('a', 'z')\n\
            open('z/b/deep.txt', 'a').write(' and changed')\n\
            os.mkdir('fresh')\n\
            os.rename('z/b/deep.txt', 'fresh/moved.txt')\n\
            with open('big.bin', 'r+b') as f:\n    f.seek(5 << 20); f.write(b'CHANGED')\n\
            os.symlink('fresh', 'link')\n\
            open('link/through-link.txt', 'w').write('x')\n\
            raise RuntimeError('undo all of it')";
        let r = transactional(&server, "j", code, 100.0).await;
        assert_eq!(r["status"], "error", "{who:?}: {r}");
        assert_eq!(r["rolled_back"], true, "{who:?}: {r}");
        assert_eq!(fingerprint(&server, "j").await, before, "{who:?}");
        // The file left open is the same file still (its bytes were put back into it);
        // its offset is the interpreter's, which is not rolled back.
        let r = server
            .run(
                "j",
                "import os\nprint(os.fstat(log.fileno()).st_ino == os.stat('log.txt').st_ino)",
            )
            .await;
        assert_eq!(stdout(&r), "True\n", "{who:?}: {r}");
        // A successful transactional call keeps its changes.
        let r = transactional(&server, "j", "open('kept.txt', 'w').write('kept')", 100.0).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        assert!(r.get("rolled_back").is_none(), "{r}");
        let r = server.run("j", "print(open('kept.txt').read())").await;
        assert_eq!(stdout(&r), "kept\n", "{who:?}: {r}");
        server.stop().await;
    }
}

/// A worker without a world of its own (`HOST_SANDBOX=off`) cannot show its changes
/// first: a transactional call copies the workspace instead, and a checkpoint copies
/// every file rather than share it; both still put back exactly what was.
#[tokio::test]
async fn without_a_world_transactions_and_checkpoints_copy() {
    for who in both_modes() {
        let server = start(who, &[("HOST_SANDBOX", "off")]).await;
        let before = prepared(&server, "o").await;
        let r = transactional(&server, "o", &format!("{DAMAGE}1/0"), 100.0).await;
        assert_eq!(r["rolled_back"], true, "{who:?}: {r}");
        assert_eq!(fingerprint(&server, "o").await, before, "{who:?}");
        let (err, r) = tool(&server, "checkpoint", json!({"session": "o", "name": "c"})).await;
        assert!(!err, "{who:?}: {r}");
        let r = server
            .run("o", "import os\nprint(os.stat('big.bin').st_nlink)")
            .await;
        assert_eq!(stdout(&r), "1\n", "{who:?}: {r}");
        let r = server.run("o", &format!("{DAMAGE}print('changed')")).await;
        assert_eq!(stdout(&r), "changed\n", "{who:?}: {r}");
        let (err, r) = tool(&server, "restore", json!({"session": "o", "name": "c"})).await;
        assert!(!err, "{who:?}: {r}");
        assert_eq!(fingerprint(&server, "o").await, before, "{who:?}");
        server.stop().await;
    }
}
