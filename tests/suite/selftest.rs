//! selftest: on this machine every probe is blocked; with HOST_SANDBOX=off the same
//! probes truthfully come back allowed (proof the probes can fail); a probe that cannot
//! decide says inconclusive.

use serde_json::Value;

use super::{As, BIN, Net, Server, both_modes};

fn probe<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("probe {id} missing from {report}"))
}

/// Every probe, each judged from the host, with the server as root and as the login user.
#[tokio::test]
async fn every_probe_is_blocked_on_this_machine() {
    for who in both_modes() {
        every_probe_blocked(who).await;
    }
}

async fn every_probe_blocked(who: As) {
    let server = Server::start_as(who, Net::Host, &[]).await;
    let raw = server
        .call("selftest", serde_json::json!({}))
        .await
        .unwrap();
    assert_ne!(raw.is_error, Some(true));
    let report = raw.structured_content.unwrap();
    assert_eq!(
        report["failing_required"],
        serde_json::json!([]),
        "{who:?}: {report}"
    );
    assert_eq!(
        report["filesystem_isolation"]["status"], "blocked",
        "{report}"
    );
    assert_eq!(report["network_isolation"]["status"], "blocked", "{report}");
    assert_eq!(report["memory_limit_enforced"], true);
    assert_eq!(report["backend"], "host");
    assert_eq!(report["resolved_backend"], "host");
    assert!(report["landlock_abi"].as_i64().unwrap() >= 6, "{report}");
    for id in [
        "fs.canary_read",
        "fs.write_outside",
        "fs.etc_shadow",
        "fs.symlink_escape",
        "net.af_inet_socket",
        "net.test_net_connect",
        "net.loopback_listener",
        "net.unix_listener",
        "proc.exec_shell",
        "proc.fork",
        "proc.signal_server",
        "res.memory_limit",
        "res.file_size_limit",
        "res.timeout_kill",
        "priv.no_new_privs",
        "priv.capabilities",
        "priv.not_root",
        "res.cpu_after_return",
        "proc.late_output",
        "fs.stat_outside",
        "fs.inotify",
        "proc.enumerate",
        "proc.other_rlimit",
        "proc.other_priority",
        "proc.memfd_exec",
        "mem.rwx",
    ] {
        assert_eq!(
            probe(&report, id)["status"],
            "blocked",
            "{who:?} {id}: {report}"
        );
    }
    for wall in ["namespaces", "world", "disk_quota", "w_xor_x"] {
        assert!(
            report["walls"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w["name"] == wall && w["enforced"] == true),
            "{who:?} {wall}: {report}"
        );
    }
    // What this machine enforces, from the helper's walls; every gap has its reason.
    let caps = report["capabilities"].as_array().unwrap();
    for mechanism in ["seccomp", "landlock", "namespaces"] {
        assert!(
            caps.iter()
                .any(|c| c["mechanism"] == mechanism && c["enforced"] == true),
            "{mechanism}: {caps:?}"
        );
    }
    assert!(
        caps.iter()
            .all(|c| c["enforced"] == true || !c["reason"].as_str().unwrap_or_default().is_empty()),
        "{caps:?}"
    );
    // The guard's blind spots are listed in every result, never as enforced.
    let blind = caps
        .iter()
        .find(|c| c["mechanism"] == "guard_blind_spots")
        .unwrap_or_else(|| panic!("no guard_blind_spots: {caps:?}"));
    assert_eq!(blind["enforced"], false, "{blind}");
    assert!(
        blind["reason"].as_str().is_some_and(
            |r| r.contains("__array_interface__") && r.contains("templates read from files")
        ),
        "{blind}"
    );
    server.stop().await;
}

#[tokio::test]
async fn with_the_sandbox_off_the_probes_say_allowed() {
    // Connects really happen here: only inside the test's own network namespace.
    let server = Server::start_in(Net::Isolated, &[("HOST_SANDBOX", "off")]).await;
    let report = server
        .call("selftest", serde_json::json!({}))
        .await
        .unwrap()
        .structured_content
        .unwrap();
    for id in [
        "fs.canary_read",
        "fs.write_outside",
        "fs.symlink_escape",
        "net.af_inet_socket",
        "net.loopback_listener",
        "net.unix_listener",
        "proc.exec_shell",
        "proc.fork",
        "proc.signal_server",
        "res.memory_limit",
        "res.file_size_limit",
        "priv.no_new_privs",
        "priv.capabilities",
        "priv.not_root",
        "fs.stat_outside",
        "fs.inotify",
        "proc.enumerate",
        "proc.other_rlimit",
        "proc.other_priority",
        "proc.memfd_exec",
        "mem.rwx",
        // Without seccomp a process of its own in a session of its own escapes the
        // freeze of the worker's group, and the host sees its CPU.
        "res.cpu_after_return",
    ] {
        assert_eq!(probe(&report, id)["status"], "allowed", "{id}: {report}");
    }
    // The packet to TEST-NET-1 dies in the test's namespace: a timeout, never a pass.
    assert_eq!(
        probe(&report, "net.test_net_connect")["status"],
        "inconclusive"
    );
    assert_eq!(report["filesystem_isolation"]["status"], "allowed");
    assert_eq!(report["network_isolation"]["status"], "allowed");
    assert!(!report["failing_required"].as_array().unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn settings_resource_shows_configured_and_resolved() {
    let server = Server::start(&[("SANDBOX_TIMEOUT_S", "7"), ("CODEGUARD", "enforce")]).await;
    let resources = server.client.list_all_resources().await.unwrap();
    assert!(resources.iter().any(|r| r.uri == "warden://settings"));
    let read = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "warden://settings",
        ))
        .await
        .unwrap();
    let text = match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    };
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["configured"]["timeout_s"], 7);
    assert_eq!(doc["configured"]["host_sandbox"], "best-effort");
    assert_eq!(doc["resolved"]["backend"], "host");
    assert_eq!(
        doc["resolved"]["workspace_quota_bytes"],
        1u64 << 30,
        "{doc}"
    );
    assert!(doc["resolved"]["python"].as_str().unwrap().starts_with('/'));
    // The guard's policy, with at least the seed's counts.
    let policy = &doc["resolved"]["guard_policy"];
    assert!(policy["modules"].as_u64().unwrap() >= 31, "{policy}");
    assert!(policy["builtins"].as_u64().unwrap() >= 11, "{policy}");
    assert!(policy["tripwires"].as_u64().unwrap() >= 21, "{policy}");
    server.stop().await;
}

#[tokio::test]
async fn require_mode_runs_the_probes_at_start_and_runs_code_when_all_pass() {
    let server = Server::start(&[("HOST_SANDBOX", "require")]).await;
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
    let doc: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        doc["last_selftest"]["failing_required"],
        serde_json::json!([]),
        "{doc}"
    );
    let r = server.run("req", "print('ran')").await;
    assert_eq!(r["stdout"], "ran\n", "{r}");
    server.stop().await;
}

#[test]
fn cli_selftest_prints_json_and_a_table() {
    let dir = super::data_dir();
    let out = std::process::Command::new(BIN)
        .args(["selftest", "--human"])
        .env("SANDBOX_DATA_DIR", dir.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("fs.canary_read               blocked"),
        "{text}"
    );
    let out = std::process::Command::new(BIN)
        .arg("selftest")
        .env("SANDBOX_DATA_DIR", dir.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["filesystem_isolation"]["status"], "blocked");
}

/// Runs a copy of warden as uid 65534 (the build directory may not be reachable by other
/// users), in a world-writable scratch directory that the caller keeps alive.
fn run_as_nobody(
    dir: &std::path::Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
) -> std::process::Output {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bin = dir.join("warden");
    if !bin.exists() {
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(args)
        .env("SANDBOX_DATA_DIR", dir.join("data"))
        .env("SANDBOX_PYTHON", "/usr/bin/python3");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// A person's desktop client runs warden as an ordinary user: no uid switch, user
/// namespaces created unprivileged. Every wall must stand the same.
#[test]
fn an_unprivileged_server_confines_just_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_as_nobody(
        dir.path(),
        &["selftest".as_ref()],
        &[("HOME", dir.path().as_os_str())],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(out.status.success(), "{report}");
    assert_eq!(
        report["failing_required"],
        serde_json::json!([]),
        "{report}"
    );
    assert!(
        probe(&report, "priv.not_root")["details"]
            .as_str()
            .unwrap()
            .contains("uid=65534"),
        "{report}"
    );
    let walls = report["walls"].as_array().unwrap();
    for name in [
        "landlock",
        "seccomp",
        "namespaces",
        "rlimits",
        "no_new_privs",
    ] {
        assert!(
            walls
                .iter()
                .any(|w| w["name"] == name && w["enforced"] == true),
            "{name} missing: {report}"
        );
    }
}

/// The desktop threat model: warden runs as the user, so the worker has the uid that
/// owns the user's files and file permissions protect nothing. Landlock and seccomp
/// alone must keep the user's files (here owned by uid 65534) unread and unchanged.
#[test]
fn the_users_own_files_are_safe_from_a_worker_with_the_users_uid() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let ssh = home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = ssh.join("id_ed25519");
    std::fs::write(&key, "PRIVATE-KEY-CANARY").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    for p in [&home, &ssh, &key] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let code = format!(
        r#"import os
key = {key:?}
attempts = [
    ("read", lambda: open(key).read()),
    ("write", lambda: open(key, "w").write("x")),
    ("chmod", lambda: os.chmod(key, 0o666)),
    ("rename", lambda: os.rename(key, key + ".moved")),
    ("unlink", lambda: os.unlink(key)),
    ("truncate", lambda: os.truncate(key, 0)),
    ("symlink_out", lambda: os.symlink("/tmp", os.path.join(os.path.dirname(key), "l"))),
    ("listdir", lambda: os.listdir(os.path.dirname(key))),
]
for name, fn in attempts:
    try:
        r = fn()
        print(name, "DONE", r)
    except OSError as e:
        print(name, "denied", e.errno)
"#,
        key = key.display().to_string()
    );
    let script = dir.path().join("attack.py");
    std::fs::write(&script, code).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_as_nobody(
        dir.path(),
        &["run".as_ref(), script.as_os_str()],
        &[("HOME", home.as_os_str()), ("CODEGUARD", "off".as_ref())],
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stdout = result["stdout"].as_str().unwrap();
    assert!(!stdout.contains("DONE"), "{stdout}");
    assert!(!stdout.contains("PRIVATE-KEY-CANARY"), "{stdout}");
    assert_eq!(stdout.matches("denied").count(), 8, "{result}");
    let meta = std::fs::metadata(&key).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), 65534);
    assert_eq!(std::fs::read_to_string(&key).unwrap(), "PRIVATE-KEY-CANARY");
    assert_eq!(
        std::fs::read_dir(&ssh).unwrap().count(),
        1,
        "nothing created or moved"
    );
}
