//! `[modules] unjudged` end to end: a module nobody judged (neither the stdlib nor an
//! audited package) imported through a real server, for each value of the setting, with
//! the server as root and as the login user. The module is made by the test itself, in
//! a venv the server runs (`SANDBOX_PYTHON`), so the outcome never depends on what the
//! machine has installed; on import it writes a file into the workspace, so whether it
//! ran shows in the workspace changes the result reports.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{As, Net, Server, both_modes, stdout};

const MODULE: &str = "warden_unjudged_probe";

/// A venv over Debian's python whose site-packages holds [`MODULE`], in a directory
/// every uid can read (the login user's server and the sandbox uids run it).
fn venv_with_probe() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let venv = dir.path().join("venv");
    let status = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(status.success(), "python3 -m venv failed");
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages"))
        .find(|p| p.is_dir())
        .expect("the venv's site-packages");
    let probe = site.join(format!("{MODULE}.py"));
    std::fs::write(
        &probe,
        "open('probe-imported.txt', 'w').write('ran')\nVALUE = 'from-the-unjudged-module'\n",
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, venv.join("bin/python3"))
}

/// A policy that extends the default with `[modules] unjudged = value`.
fn policy(dir: &Path, value: &str) -> PathBuf {
    let path = dir.join(format!("unjudged-{value}.toml"));
    std::fs::write(
        &path,
        format!("extends = \"default\"\n[modules]\nunjudged = \"{value}\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

fn warnings_naming(r: &Value, module: &str) -> Vec<String> {
    r["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|w| w.contains(module))
        .map(str::to_string)
        .collect()
}

/// The session's entry in `warden://settings`.
async fn session_entry(server: &Server, name: &str) -> Value {
    let settings = server.settings().await;
    settings["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == name)
        .unwrap_or_else(|| panic!("no session {name} in {settings}"))
        .clone()
}

#[tokio::test]
async fn unjudged_imports_are_warned_allowed_or_refused_as_the_policy_says() {
    let (dir, python) = venv_with_probe();
    let python = python.to_str().unwrap();
    let code = format!("import {MODULE}\nprint({MODULE}.VALUE)");
    for who in both_modes() {
        // None: no policy file, the default (`warn`).
        for setting in [None, Some("allow"), Some("refuse")] {
            let what = format!("{who:?} unjudged={}", setting.unwrap_or("default"));
            let path = setting.map(|v| policy(dir.path(), v));
            let mut env = vec![("CODEGUARD", "enforce"), ("SANDBOX_PYTHON", python)];
            if let Some(p) = &path {
                env.push(("SANDBOX_POLICY", p.to_str().unwrap()));
            }
            let server = Server::start_as(who, Net::Host, &env).await;
            let r = server.run("u", &code).await;
            // The workspace change the server reports: the module's file, or nothing.
            let ran = r["files"]
                .as_array()
                .is_some_and(|f| f.iter().any(|c| c["path"] == "probe-imported.txt"));
            match setting {
                Some("refuse") => {
                    assert_eq!(r["error"]["type"], "GuardBlocked", "{what}: {r}");
                    let message = r["error"]["message"].as_str().unwrap();
                    assert!(
                        message.contains(MODULE)
                            && message.contains("[modules] unjudged = \"refuse\""),
                        "{what}: {r}"
                    );
                    assert_eq!(stdout(&r), "", "{what}: {r}");
                    assert!(!ran, "{what}: the refused module ran");
                }
                Some("allow") => {
                    assert_eq!(stdout(&r), "from-the-unjudged-module\n", "{what}: {r}");
                    assert_eq!(r["guard"]["decision"], "allowed", "{what}: {r}");
                    assert!(warnings_naming(&r, MODULE).is_empty(), "{what}: {r}");
                    assert!(ran, "{what}: the module did not run");
                }
                _ => {
                    assert_eq!(stdout(&r), "from-the-unjudged-module\n", "{what}: {r}");
                    assert_eq!(r["guard"]["decision"], "restricted", "{what}: {r}");
                    let warned = warnings_naming(&r, MODULE);
                    assert!(
                        warned.len() == 1 && warned[0].contains("unjudged"),
                        "{what}: {r}"
                    );
                    assert!(ran, "{what}: the module did not run");
                }
            }
            // A later call that imports only judged modules says nothing about it.
            let r = server.run("u", "import json\nprint(json.dumps([1]))").await;
            assert_eq!(stdout(&r), "[1]\n", "{what}: {r}");
            assert!(warnings_naming(&r, MODULE).is_empty(), "{what}: {r}");
            // The session lists what it imported that nobody judged, whatever the setting
            // made of it; the settings show the setting.
            let entry = session_entry(&server, "u").await;
            assert_eq!(
                entry["unjudged_modules"],
                serde_json::json!([MODULE]),
                "{what}: {entry}"
            );
            let settings = server.settings().await;
            assert_eq!(
                settings["resolved"]["guard_policy"]["unjudged"],
                setting.unwrap_or("warn"),
                "{what}"
            );
            server.stop().await;
        }
    }
    drop(dir);
}

/// The guard refuses the import, and the OS layer is untouched by the setting: with
/// `refuse`, a session that only uses judged modules runs as before.
#[tokio::test]
async fn refuse_leaves_judged_imports_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = policy(dir.path(), "refuse");
    let server = Server::start_as(
        As::Root,
        Net::Host,
        &[
            ("CODEGUARD", "enforce"),
            ("SANDBOX_POLICY", path.to_str().unwrap()),
        ],
    )
    .await;
    let r = server
        .run(
            "j",
            "import json, math\nfrom statistics import mean\nprint(json.dumps(math.floor(mean([2, 3]))))",
        )
        .await;
    assert_eq!(stdout(&r), "2\n", "{r}");
    assert_eq!(r["guard"]["decision"], "allowed", "{r}");
    let entry = session_entry(&server, "j").await;
    assert_eq!(entry["unjudged_modules"], serde_json::json!([]), "{entry}");
    server.stop().await;
}
