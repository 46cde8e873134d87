//! Settings that change behaviour, each exercised end to end.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::{Net, Server, stdout};

/// SANDBOX_PIDS_LIMIT bounds threads too (RLIMIT_NPROC on the session's own uid).
#[tokio::test]
async fn pids_limit_bounds_a_thread_bomb() {
    let server = Server::start(&[("SANDBOX_PIDS_LIMIT", "16")]).await;
    let code = r#"import threading
stop = threading.Event()
started = 0
try:
    for _ in range(200):
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError as e:
    print("stopped at", started, e)
stop.set()
"#;
    let r = server.run("p", code).await;
    let out = stdout(&r);
    assert!(out.starts_with("stopped at"), "{r}");
    let n: usize = out.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(n < 16, "{out}");
    let r = server.run("p", "print('alive')").await;
    assert_eq!(stdout(&r), "alive\n");
    server.stop().await;
}

/// SANDBOX_POLICY: a policy author turns a rule into a warning; the code runs and the
/// result says what the guard found.
#[tokio::test]
async fn a_custom_policy_file_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let policy = warden::guard::DEFAULT_POLICY
        .replace("blocked_module = \"block\"", "blocked_module = \"warn\"");
    assert_ne!(
        policy,
        warden::guard::DEFAULT_POLICY,
        "the action line moved"
    );
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, policy).unwrap();
    let server = Server::start(&[
        ("CODEGUARD", "enforce"),
        ("SANDBOX_POLICY", path.to_str().unwrap()),
    ])
    .await;
    let r = server.run("c", "import sys\nprint('ran')").await;
    assert_eq!(stdout(&r), "ran\n", "{r}");
    assert_eq!(r["guard"]["decision"], "restricted");
    assert!(r["warnings"].to_string().contains("blocked_module"), "{r}");
    server.stop().await;
}

/// SANDBOX_POLICY names a tier: `strict` refuses a third-party import before anything
/// runs, `data-science` runs single names of `os`, and warden://settings says which
/// is in force; as root and as the login user.
#[tokio::test]
async fn a_policy_tier_is_chosen_by_name() {
    for who in super::both_modes() {
        let env = [("CODEGUARD", "enforce"), ("SANDBOX_POLICY", "strict")];
        let server = Server::start_as(who, Net::Host, &env).await;
        let r = server.run("s", "import numpy\nprint('ran')").await;
        assert_eq!(r["error"]["type"], "GuardBlocked", "{r}");
        assert_eq!(r["stdout"], "", "{r}");
        assert!(r.to_string().contains("allow_only"), "{r}");
        let r = server.run("s", "import math\nprint(math.floor(2.5))").await;
        assert_eq!(stdout(&r), "2\n", "{r}");
        assert_eq!(server.settings().await["configured"]["policy"], "strict");
        server.stop().await;

        let env = [("CODEGUARD", "enforce"), ("SANDBOX_POLICY", "data-science")];
        let server = Server::start_as(who, Net::Host, &env).await;
        let code = "from os import getcwd, makedirs\nfrom pathlib import Path\n\
                    makedirs('out/deep', exist_ok=True)\n\
                    print(Path('out/deep').is_dir(), getcwd() == str(Path.cwd()))";
        let r = server.run("d", code).await;
        assert_eq!(stdout(&r), "True True\n", "{r}");
        let r = server.run("d", "import os").await;
        assert_eq!(r["error"]["type"], "GuardBlocked", "{r}");
        server.stop().await;
    }
}

/// The config file's [[grants]] are pre-approved for every session.
#[tokio::test]
async fn config_file_grants_are_pre_approved() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Apart from the config file: its directory is never grantable.
    let data = tempfile::tempdir().unwrap();
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = data.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(shared.join("in.txt"), "from-config-grant").unwrap();
    std::fs::set_permissions(
        shared.join("in.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[grants]]\npath = {:?}\naccess = \"read\"\n",
            shared.display().to_string()
        ),
    )
    .unwrap();
    let server = Server::start(&[("WARDEN_CONFIG", config.to_str().unwrap())]).await;
    let r = server
        .run(
            "g",
            &format!(
                "print(open({:?}).read())",
                shared.join("in.txt").display().to_string()
            ),
        )
        .await;
    assert_eq!(stdout(&r), "from-config-grant\n", "{r}");
    let list = server
        .call("list_grants", json!({}))
        .await
        .unwrap()
        .structured_content
        .unwrap();
    assert!(
        list["grants"][0]["grant"]["approved_by"]
            .as_str()
            .unwrap()
            .contains("config file"),
        "{list}"
    );
    server.stop().await;
}

/// Runs `warden serve` with stdin closed and returns (exit status, stderr, data dir).
fn serve_without_client(
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String, tempfile::TempDir) {
    let data = super::data_dir();
    let mut cmd = std::process::Command::new(super::BIN);
    cmd.arg("serve")
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3")
        .env("RUST_BACKTRACE", "1")
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        data,
    )
}

/// A clients file with a mistake stops the server before it serves, naming the setting
/// and the entry.
#[test]
fn a_bad_clients_file_is_a_clear_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clients.toml");
    std::fs::write(
        &file,
        "[[client]]\nname = \"bot\"\ntoken_sha256 = \"abc\"\n",
    )
    .unwrap();
    let (status, stderr, _) =
        serve_without_client(&[("SANDBOX_HTTP_CLIENTS", file.to_str().unwrap())]);
    assert!(!status.success());
    assert!(stderr.contains("SANDBOX_HTTP_CLIENTS"), "{stderr}");
    assert!(
        stderr.contains("\"bot\"") && stderr.contains("64 hex digits"),
        "{stderr}"
    );
}

/// Config errors say which setting is wrong, in one line without a backtrace.
#[test]
fn config_errors_name_their_setting() {
    let (status, stderr, _) = serve_without_client(&[("SANDBOX_PYTHON", "/nonexistent")]);
    assert!(!status.success());
    assert!(
        stderr.starts_with("warden: error:")
            && stderr.contains("SANDBOX_PYTHON=/nonexistent (from the environment)"),
        "{stderr}"
    );
    assert!(!stderr.contains("Stack backtrace"), "{stderr}");

    let (status, stderr, _) =
        serve_without_client(&[("WARDEN_CONFIG", "/nonexistent/warden.toml")]);
    assert!(!status.success());
    assert!(
        stderr.contains("WARDEN_CONFIG=/nonexistent/warden.toml"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[settings]\nSANDBOX_TIMEOUT_S = \"soon\"\n").unwrap();
    let (status, stderr, _) = serve_without_client(&[("WARDEN_CONFIG", bad.to_str().unwrap())]);
    assert!(!status.success());
    assert!(
        stderr.contains("SANDBOX_TIMEOUT_S=\"soon\" (from the config file)"),
        "{stderr}"
    );
    std::fs::write(&bad, "[settings]\nSANDBOX_TIMOUT_S = 5\n").unwrap();
    let (_, stderr, _) = serve_without_client(&[("WARDEN_CONFIG", bad.to_str().unwrap())]);
    assert!(
        stderr.contains("WARDEN_CONFIG=") && stderr.contains("SANDBOX_TIMOUT_S"),
        "{stderr}"
    );
    let (_, stderr, _) = serve_without_client(&[("HOST_SANDBOX", "sometimes")]);
    assert!(stderr.contains("HOST_SANDBOX=\"sometimes\""), "{stderr}");
}

/// A server whose client goes away before initialising leaves no instance directory.
#[test]
fn a_server_without_a_client_leaves_nothing_behind() {
    let (_, stderr, data) = serve_without_client(&[]);
    let sessions = data.path().join("sessions");
    let left: Vec<_> = std::fs::read_dir(&sessions)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?} ({stderr})");
}

/// `warden serve --help` lists every setting of the registry with its default.
#[test]
fn serve_help_lists_every_setting_with_its_default() {
    let out = std::process::Command::new(super::BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for spec in warden::config::REGISTRY {
        assert!(
            help.contains(&format!("  {}  [default: ", spec.name)),
            "{} missing:\n{help}",
            spec.name
        );
    }
    assert!(help.contains("SANDBOX_TIMEOUT_S  [default: 10]"), "{help}");
}

/// Settings come from the config file's [settings] and from --set, and
/// warden://settings says where each value came from.
#[tokio::test]
async fn settings_come_from_the_file_and_flags_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[settings]\nSANDBOX_TIMEOUT_S = 7\nSANDBOX_OUTPUT_LIMIT = \"2k\"\n",
    )
    .unwrap();
    let data = super::data_dir();
    let cmd = super::server_command(
        Net::Host,
        &[("WARDEN_CONFIG", config.to_str().unwrap())],
        &["--set", "SANDBOX_OUTPUT_LIMIT=4k"],
        data.path(),
    );
    let server = Server::from_command(cmd, data, super::As::Root).await;
    let read = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "warden://settings",
        ))
        .await
        .unwrap();
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("text resource expected")
    };
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    let row = |name: &str| {
        doc["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(row("SANDBOX_TIMEOUT_S")["value"], "7");
    assert_eq!(row("SANDBOX_TIMEOUT_S")["origin"], "config_file");
    assert_eq!(row("SANDBOX_OUTPUT_LIMIT")["value"], "4k");
    assert_eq!(row("SANDBOX_OUTPUT_LIMIT")["origin"], "flag");
    assert_eq!(row("HOST_SANDBOX")["origin"], "default");
    assert_eq!(row("SANDBOX_DATA_DIR")["origin"], "environment");
    assert_eq!(
        doc["settings"].as_array().unwrap().len(),
        warden::config::REGISTRY.len()
    );
    assert_eq!(doc["configured"]["timeout_s"], 7);
    let r = server.run("o", "print('x' * 5000)").await;
    assert_eq!(r["truncated"], true, "{r}");
    assert_eq!(stdout(&r).len(), 4096, "the flag's 4k, not the file's 2k");
    server.stop().await;
}

/// `--version` names the commit the binary was built from; shell completions and the
/// manual page come from the same command definitions, every subcommand in them.
#[test]
fn version_completions_and_the_manual_page() {
    let out = |args: &[&str]| {
        let o = std::process::Command::new(super::BIN)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let version = out(&["--version"]);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert!(
        version.starts_with(&format!("warden {} (", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    if let Some(head) = head {
        assert!(
            version.contains(&head),
            "{version} is not built from {head}"
        );
    }
    for shell in ["bash", "zsh", "fish"] {
        let script = out(&["completions", shell]);
        for sub in ["serve", "selftest", "audit-verify", "completions"] {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
    }
    let man = out(&["man"]);
    assert!(man.contains(".TH warden 1"), "{man}");
    assert!(man.contains("selftest"), "{man}");
}
