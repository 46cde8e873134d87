//! The guard in front of execute_python: a blocked call runs nothing; syntax errors are
//! retryable; shadow runs and reports; off says so; a tripwire kills the session.

use serde_json::json;

use super::{BIN, Server, corpus, stdout};

/// Red-team files whose INDEX row says the guard should stop them.
fn guard_cases() -> Vec<(String, String)> {
    let index = std::fs::read_to_string(corpus("redteam").join("INDEX.md")).unwrap();
    let mut out = Vec::new();
    for line in index
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains(".py`"))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let file = cells[2].trim_matches('`').to_string();
        let layer = cells[6];
        if layer == "guard" || layer == "both" {
            let code = std::fs::read_to_string(corpus("redteam").join(&file)).unwrap();
            out.push((file, code));
        }
    }
    assert!(
        out.len() >= 25,
        "INDEX parse found {} guard cases",
        out.len()
    );
    out
}

#[tokio::test]
async fn guard_cases_are_blocked_before_any_worker_runs() {
    let server = Server::start(&[("CODEGUARD", "enforce")]).await;
    for (i, (file, code)) in guard_cases().into_iter().enumerate() {
        let r = server
            .exec(json!({"session": format!("g{i}"), "code": code}))
            .await;
        assert_eq!(r["error"]["type"], "GuardBlocked", "{file}: {r}");
        assert_eq!(r["guard"]["decision"], "blocked", "{file}");
        assert_eq!(r["stdout"], "", "{file} ran: {r}");
        assert!(
            !r["guard"]["findings"][0]["rule"]
                .as_str()
                .unwrap()
                .is_empty()
        );
    }
    // Blocking is all or nothing: the harmless first line did not run either.
    let r = server
        .run(
            "whole",
            "open('made_before.txt', 'w').write('x')\nimport subprocess",
        )
        .await;
    assert_eq!(r["error"]["type"], "GuardBlocked");
    let made = super::find_files(server.data_dir.path(), "made_before");
    assert!(made.is_empty(), "{made:?}");
    server.stop().await;
}

/// A session with a live worker is sent its code before the verdict (the worker compiles
/// while the guard judges): a refused call still runs nothing, writes no input file,
/// and leaves the worker in step for the next call. Judged from the host, with the
/// server as root and as the login user (whose home is the canary's place).
#[tokio::test]
async fn a_live_worker_holds_refused_code_and_runs_none_of_it() {
    for who in super::both_modes() {
        let server = Server::start_as(who, super::Net::Host, &[("CODEGUARD", "enforce")]).await;
        held_refusals_run_nothing(&server).await;
        server.stop().await;
    }
}

async fn held_refusals_run_nothing(server: &Server) {
    let home = match server.who {
        super::As::User => super::login_user().unwrap().home,
        super::As::Root => std::path::PathBuf::from(std::env::var("HOME").unwrap()),
    };
    let r = server.run("live", "x = 41").await;
    assert_eq!(r["status"], "ok", "{r}");
    for (file, code) in guard_cases() {
        let r = server.run("live", &code).await;
        assert_eq!(r["error"]["type"], "GuardBlocked", "{file}: {r}");
        assert_eq!(r["stdout"], "", "{file} ran: {r}");
        assert_eq!(r["stderr"], "", "{file} ran: {r}");
    }
    let escape = home.join(format!("held_escape_{}", std::process::id()));
    let code = format!(
        "open('held_made.txt', 'w').write('x')\nopen({:?}, 'w').write('x')\nimport subprocess",
        escape.display().to_string()
    );
    let r = server
        .exec(json!({
            "session": "live",
            "code": code,
            "inputs": {"held_input.txt": "x"},
        }))
        .await;
    assert_eq!(r["error"]["type"], "GuardBlocked", "{r}");
    for prefix in ["held_made", "held_input"] {
        let made = super::find_files(server.data_dir.path(), prefix);
        assert!(made.is_empty(), "{prefix}: {made:?}");
    }
    assert!(!escape.exists(), "{} was written", escape.display());
    // The same worker, in step: the variable of the first call is still there.
    let r = server.run("live", "x + 1").await;
    assert_eq!(r["result"], "42", "{r}");
    assert_eq!(r["worker_restarted"], false, "{r}");
    // What the compiler warns about while the code is held is this call's stderr.
    let r = server.run("live", "y = 1\nprint(y is 1)").await;
    assert_eq!(stdout(&r), "True\n", "{r}");
    let err = r["stderr"].as_str().unwrap_or_default();
    assert_eq!(err.matches("SyntaxWarning").count(), 1, "{r}");
    assert!(!r["warnings"].to_string().contains("set apart"), "{r}");
}

/// The guard's time is not the code's: a held cell's timeout runs from the moment the code
/// may run, as an unheld cell's runs from after its verdict. The cell below takes this
/// debug build's guard longer than its 0.4 s timeout (0.7 s here, 750 KB), and the worker
/// compiles it meanwhile (in half that time), so once it may run it finishes at once.
#[tokio::test]
async fn a_held_cell_is_not_timed_while_the_guard_judges_it() {
    let server = Server::start(&[("CODEGUARD", "enforce")]).await;
    let r = server.run("slow", "x = 1").await;
    assert_eq!(r["status"], "ok", "{r}");
    let mut cell = String::from("def _cell():\n");
    for i in 0..60_000 {
        cell.push_str(&format!(" t{i}=f(v)\n"));
    }
    cell.push_str("print('ok', x)\n");
    let r = server
        .exec(json!({"session": "slow", "code": cell, "timeout_s": 0.4}))
        .await;
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(stdout(&r), "ok 1\n", "{r}");
    assert_eq!(r["timed_out"], false, "{r}");
    server.stop().await;
}

#[tokio::test]
async fn syntax_errors_are_retryable_with_a_position() {
    let server = Server::start(&[("CODEGUARD", "enforce")]).await;
    let raw = server
        .call("execute_python", json!({"code": "x = 1\ny = (2 +\n"}))
        .await
        .unwrap();
    assert_eq!(raw.is_error, Some(true));
    let r = raw.structured_content.unwrap();
    assert_eq!(r["error"]["type"], "SyntaxError", "{r}");
    assert_eq!(r["guard"]["retryable_error"], true);
    assert_eq!(r["guard"]["findings"][0]["rule"], "syntax_error");
    assert!(
        r["guard"]["findings"][0]["line"].as_u64().unwrap() >= 2,
        "{r}"
    );
    server.stop().await;
}

#[tokio::test]
async fn shadow_mode_runs_the_code_and_reports_what_it_would_block() {
    let server = Server::start(&[("CODEGUARD", "shadow")]).await;
    // The first call of a session is judged before it is sent unless it took a warm
    // worker; the second, to a live worker, is sent held and then let go.
    for (code, want) in [
        ("import os\nprint(os.getcwd() != '')", "True\n"),
        ("import os\nprint(os.getcwd() != '', 2)", "True 2\n"),
    ] {
        let r = server.run("s", code).await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(stdout(&r), want);
        assert_eq!(r["guard"]["decision"], "blocked");
        assert!(
            r["warnings"].to_string().contains("CODEGUARD=shadow"),
            "{r}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn guard_off_is_loud_in_every_result() {
    let server = Server::start(&[("CODEGUARD", "off")]).await;
    let r = server.run("o", "print(1)").await;
    assert!(r["warnings"].to_string().contains("CODEGUARD=off"), "{r}");
    assert!(r["guard"].is_null());
    server.stop().await;
}

#[tokio::test]
async fn a_tripwire_kills_the_session_and_only_that_session() {
    let server = Server::start(&[("CODEGUARD", "enforce")]).await;
    server.run("victim", "x = 1").await;
    let r = server
        .run("victim", "query = 'DROP TABLE customers'\nprint(query)")
        .await;
    assert_eq!(r["error"]["type"], "GuardBlocked", "{r}");
    assert!(
        r["guard"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["tripwire"] == true),
        "{r}"
    );
    let r = server.run("victim", "print('again')").await;
    assert_eq!(r["error"]["type"], "SessionKilled", "{r}");
    assert_eq!(r["stdout"], "");
    let r = server.run("bystander", "print('fine')").await;
    assert_eq!(stdout(&r), "fine\n");
    server.stop().await;
}

#[test]
fn check_cli_reports_and_exits_nonzero_on_blocked_code() {
    let bad = corpus("redteam").join("01_import_os_system.py");
    let good = corpus("benign").join("01_csv_parse_sum.py");
    let out = std::process::Command::new(BIN)
        .args(["check", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("ALLOWED"));
    let out = std::process::Command::new(BIN)
        .args([
            "check",
            "--json",
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["verdict"]["decision"], "allowed");
    assert_eq!(v[1]["verdict"]["decision"], "blocked");
    assert_eq!(v[1]["verdict"]["findings"][0]["rule"], "blocked_module");
}

/// `warden check --policy NAME` uses the tier's file; a name that is neither a tier nor
/// a readable file is a clear error.
#[test]
fn check_cli_takes_a_policy_tier() {
    let dir = tempfile::tempdir().unwrap();
    let cell = dir.path().join("cell.py");
    std::fs::write(
        &cell,
        "from os import getcwd\nimport numpy\nprint(getcwd())\n",
    )
    .unwrap();
    let check = |policy: &str| {
        std::process::Command::new(BIN)
            .args(["check", "--policy", policy, cell.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let out = check("data-science");
    assert!(out.status.success(), "{out:?}");
    for refused in ["default", "strict"] {
        let out = check(refused);
        assert_eq!(out.status.code(), Some(1), "{refused}: {out:?}");
    }
    let printed = String::from_utf8_lossy(&check("strict").stdout).into_owned();
    assert!(printed.contains("allow_only"), "{printed}");
    let out = check("no-such-tier");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-tier"), "{err}");
}

/// `warden check` on every bypass program of #13 prints BLOCKED with the rule the
/// program names, and exits 1.
#[test]
fn check_cli_blocks_every_bypass_with_its_rule() {
    let dir = corpus("bypass");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    assert!(files.len() >= 17, "{} bypass programs", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let rule = text
            .lines()
            .find_map(|l| l.strip_prefix("# rule: "))
            .unwrap_or_else(|| panic!("{} names no rule", file.display()))
            .trim()
            .to_string();
        let out = std::process::Command::new(BIN)
            .args(["check", file.to_str().unwrap()])
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{}: {printed}", file.display());
        assert!(
            printed.contains(": BLOCKED - "),
            "{}: {printed}",
            file.display()
        );
        assert!(
            printed.contains(&format!("[{rule}/")),
            "{}: expected [{rule}/...]: {printed}",
            file.display()
        );
    }
}

/// Where the guard stops, the OS layer stands: every bypass program of #13, each of which
/// runs a shell under plain CPython, runs through the server with the guard switched
/// off, and no shell runs (no marker in the workspace, by the server's own report or on
/// disk). A program that fails on an import proves nothing, so that is an error too.
#[tokio::test]
async fn with_the_guard_off_no_bypass_runs_a_shell() {
    let server = Server::start(&[("CODEGUARD", "off")]).await;
    let dir = corpus("bypass");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    for (i, file) in files.iter().enumerate() {
        let code = std::fs::read_to_string(file).unwrap();
        let marker = code
            .lines()
            .find_map(|l| l.strip_prefix("# marker: "))
            .unwrap()
            .trim()
            .to_string();
        let r = server.run(&format!("bypass{i}"), &code).await;
        let name = file.display();
        assert!(
            !r["error"]["type"]
                .as_str()
                .is_some_and(|t| t == "ModuleNotFoundError" || t == "ImportError"),
            "{name}: the sandbox lacks a package, so this proves nothing: {r}"
        );
        let reported = r["files"].as_array().is_some_and(|files| {
            files
                .iter()
                .any(|f| f["path"].as_str().is_some_and(|p| p.contains(&marker)))
        });
        assert!(!reported, "{name}: its shell ran in the sandbox: {r}");
        let planted = super::find_files(server.data_dir.path(), &marker);
        assert!(planted.is_empty(), "{name}: its shell ran: {planted:?}");
        let check = server
            .run(
                &format!("bypass{i}"),
                &format!("from pathlib import Path\nprint(Path('{marker}').exists())"),
            )
            .await;
        assert_eq!(stdout(&check), "False\n", "{name}: {check}");
    }
    server.stop().await;
}
