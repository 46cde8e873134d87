//! Consent comes from the person, by construction: nobody else can approve a grant
//! through a warden server. Each attempt is the real one (tests/python/self_grant.py:
//! open an MCP session that declares elicitation, ask for write access to the owner's
//! `~/.bashrc`, answer its own prompt "approve"; then the stateless route), made by
//! another local user (`nobody`) against a loopback TCP server and a UNIX socket, and by
//! code inside a session in every network mode. Each is judged from the host side: the
//! refusal, no grant in the audit log, the refusal recorded there, the canaries intact.
//! Every server runs as root and as the login user.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::audit::records;
use super::http::HttpServer;
use super::*;

const NOBODY: u32 = 65534;

/// The attempt's source text.
fn script() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/self_grant.py"),
    )
    .unwrap()
}

/// Runs the attempt as `uid` (its own group, no others), or as root; returns its report.
fn attempt_as(uid: Option<u32>, args: &Value) -> Value {
    let mut cmd = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={uid}"),
                format!("--regid={}", gid_of(uid)),
                "--clear-groups".to_string(),
                "--".to_string(),
                "/usr/bin/python3".to_string(),
            ]);
            c
        }
        None => Command::new("/usr/bin/python3"),
    };
    let out = cmd
        .args(["-I", "-c", &script(), &args.to_string()])
        .current_dir("/")
        .env_clear()
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn gid_of(uid: u32) -> u32 {
    match login_user() {
        Some(user) if user.uid == uid => user.gid,
        _ => uid,
    }
}

/// The uid a server of `who` runs as.
fn uid_of(who: As) -> u32 {
    match who {
        As::Root => 0,
        As::User => login_user().unwrap().uid,
    }
}

/// A directory of `who`'s that others may traverse (mode 0711).
fn own_dir(who: As) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("warden-consent-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let uid = uid_of(who);
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid_of(uid))).unwrap();
    dir
}

/// Audit records of grants that name `path`.
fn grant_records(data: &Path, path: &Path) -> Vec<Value> {
    let name = path.display().to_string();
    records(data)
        .into_iter()
        .filter(|r| r["phase"] == "grant" && r["detail"].as_str().unwrap_or("").contains(&name))
        .collect()
}

/// Audit records of refused clients of kind `rule`.
fn refusals(data: &Path, rule: &str) -> Vec<Value> {
    records(data)
        .into_iter()
        .filter(|r| r["phase"] == "auth" && r["decision"] == "refused" && r["rule"] == rule)
        .collect()
}

/// The egress proxy's refusals (each recorded before the code hears its 403).
fn egress_refusals(data: &Path) -> Vec<Value> {
    records(data)
        .into_iter()
        .filter(|r| r["phase"] == "egress" && r["decision"] == "refused")
        .collect()
}

/// An exception's text, not an HTTP status: the step never reached the server.
fn stopped_before_http(step: &Value) -> bool {
    step.is_string()
}

#[test]
fn another_local_user_cannot_approve_a_grant_over_loopback_tcp() {
    for who in both_modes() {
        let canaries = Canaries::plant(who);
        let server = HttpServer::start_as(who, "127.0.0.1:0", &[]);
        let data = server.data_dir.path().to_path_buf();
        let token_file = data.join("http-token");
        let meta = std::fs::metadata(&token_file).unwrap();
        assert_eq!(meta.uid(), uid_of(who), "{who:?}");
        assert_eq!(meta.mode() & 0o777, 0o600, "{who:?}");

        let args = json!({"tcp": server.addr, "token_file": token_file,
                          "target": canaries.bashrc});
        let report = attempt_as(Some(NOBODY), &args);
        assert!(
            report["token_file"]
                .as_str()
                .unwrap()
                .starts_with("PermissionError"),
            "{who:?}: {report}"
        );
        assert_eq!(report["session"], 401, "{who:?}: {report}");
        assert_eq!(report["stateless"], 401, "{who:?}: {report}");
        assert!(grant_records(&data, &canaries.bashrc).is_empty(), "{who:?}");
        let refused = refusals(&data, "no_token");
        assert!(!refused.is_empty(), "{who:?}: no refusal recorded");

        // The same attempt with the token is the person's own client, and works: the
        // refusal above is the token's doing.
        let target = own_dir(who);
        let args = json!({"tcp": server.addr, "token_file": "/nonexistent",
                          "token": server.token, "target": target.path()});
        let report = attempt_as(None, &args);
        assert_eq!(
            report["session"],
            json!({"status": 200, "granted": true}),
            "{who:?}: {report}"
        );
        // Its session's approval, and its stateless request's refusal.
        let decisions: Vec<Value> = grant_records(&data, target.path())
            .iter()
            .map(|r| r["decision"].clone())
            .collect();
        assert_eq!(
            decisions,
            ["requested", "approved", "requested", "refused"],
            "{who:?}"
        );
        server.stop();
        canaries.assert_untouched(&format!("{who:?}"));
    }
}

#[test]
fn another_local_user_cannot_use_a_unix_socket_server() {
    for who in both_modes() {
        let canaries = Canaries::plant(who);
        let run = own_dir(who);
        let socket = run.path().join("warden.sock");
        let server = HttpServer::start_as(who, &format!("unix:{}", socket.display()), &[]);
        let data = server.data_dir.path().to_path_buf();
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        assert_eq!(meta.uid(), uid_of(who), "{who:?}");
        assert_eq!(meta.mode() & 0o777, 0o600, "{who:?}");
        assert!(
            !data.join("http-token").exists(),
            "no token on a UNIX socket"
        );

        let args = json!({"unix": socket, "token_file": data.join("http-token"),
                          "target": canaries.bashrc});
        // Mode 0600: nobody cannot even connect.
        let report = attempt_as(Some(NOBODY), &args);
        let session = report["session"].as_str().unwrap_or_default();
        assert!(session.starts_with("PermissionError"), "{who:?}: {report}");
        // Widened by mistake: the peer's uid still keeps it out, and is recorded.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        let report = attempt_as(Some(NOBODY), &args);
        assert!(stopped_before_http(&report["session"]), "{who:?}: {report}");
        assert!(
            stopped_before_http(&report["stateless"]),
            "{who:?}: {report}"
        );
        let refused = refusals(&data, "peer_uid");
        assert!(
            refused
                .iter()
                .any(|r| r["detail"].as_str().unwrap().contains("uid 65534")),
            "{who:?}: {refused:?}"
        );
        if who == As::User {
            // Root is another uid too.
            let report = attempt_as(None, &args);
            assert!(stopped_before_http(&report["session"]), "{report}");
        }
        assert!(grant_records(&data, &canaries.bashrc).is_empty(), "{who:?}");

        // The owner's own uid gets in without a token, and its client can be asked.
        let target = own_dir(who);
        let args = json!({"unix": socket, "token_file": "/nonexistent",
                          "target": target.path()});
        let owner = (who == As::User).then(|| uid_of(who));
        let report = attempt_as(owner, &args);
        assert_eq!(
            report["session"],
            json!({"status": 200, "granted": true}),
            "{who:?}: {report}"
        );
        server.stop();
        canaries.assert_untouched(&format!("{who:?}"));
    }
}

/// A port no one listens on now, for a server whose address a setting must name first.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn code_in_a_session_cannot_approve_its_own_grant_in_any_network_mode() {
    for who in both_modes() {
        for network in ["deny", "proxy", "allow"] {
            let context = format!("{who:?} HOST_SANDBOX_NETWORK={network}");
            let canaries = Canaries::plant(who);
            let addr = format!("127.0.0.1:{}", free_port());
            // Even a proxy told to let the server's own name and port through refuses
            // it: DNS (here, the literal) gives a loopback address.
            let allow = format!("{addr},localhost:{}", &addr[10..]);
            let server = HttpServer::start_as(
                who,
                &addr,
                &[
                    ("HOST_SANDBOX_NETWORK", network),
                    ("SANDBOX_EGRESS_ALLOW", &allow),
                ],
            );
            let data = server.data_dir.path().to_path_buf();
            let mut owner = server.client();
            owner.initialize(json!({"elicitation": {"form": {}}}));
            let mut routes = vec![
                json!({"tcp": server.addr, "token_file": data.join("http-token"),
                                         "target": canaries.bashrc}),
            ];
            if network != "deny" {
                for host in [server.addr.clone(), format!("localhost:{}", &addr[10..])] {
                    routes.push(json!({"tcp": host, "token_file": data.join("http-token"),
                                       "target": canaries.bashrc, "proxy": "127.0.0.1:3128"}));
                }
            }
            for args in routes {
                let code = format!("ARGS = {args}\n{}", script());
                let r = owner.run("s", &code);
                assert_eq!(r["status"], "ok", "{context}: {r}");
                let report: Value = serde_json::from_str(stdout(&r).trim())
                    .unwrap_or_else(|e| panic!("{context}: {e}: {r}"));
                // The token file is not in the world; no route reaches the server.
                assert_ne!(report["token_file"], "read", "{context}: {report}");
                assert!(
                    stopped_before_http(&report["session"]),
                    "{context}: {report}"
                );
                assert!(
                    stopped_before_http(&report["stateless"]),
                    "{context}: {report}"
                );
                if args.get("proxy").is_some() {
                    let text = report["session"].as_str().unwrap();
                    assert!(text.contains("403"), "{context}: {report}");
                    let warnings = r["warnings"].to_string();
                    assert!(warnings.contains("loopback address"), "{context}: {r}");
                }
            }
            assert!(refusals(&data, "no_token").is_empty(), "{context}");
            if network != "deny" {
                let refused = egress_refusals(&data);
                assert!(
                    refused.iter().any(|e| e["rule"]
                        .as_str()
                        .is_some_and(|r| r.contains("127.0.0.1 is a loopback address"))),
                    "{context}: {refused:?}"
                );
            }
            let grants = owner.call("list_grants", json!({}));
            let listed = grants["structuredContent"]["grants"].as_array().unwrap();
            assert!(listed.is_empty(), "{context}: {grants}");
            assert!(
                grant_records(&data, &canaries.bashrc).is_empty(),
                "{context}"
            );
            server.stop();
            canaries.assert_untouched(&context);
        }
    }
}

#[test]
fn refused_clients_are_recorded_at_a_bounded_rate() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let data: PathBuf = server.data_dir.path().to_path_buf();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let started = std::time::Instant::now();
    // The first refusal is on record before its 401 is answered.
    let reply = super::http::post(&server.addr, &[], &init, |_| {});
    assert_eq!(reply.status, 401);
    assert_eq!(refusals(&data, "no_token").len(), 1);
    for _ in 0..40 {
        let reply = super::http::post(&server.addr, &[], &init, |_| {});
        assert_eq!(reply.status, 401);
        let wrong = [("Authorization", "Bearer 0123456789abcdef0123".to_string())];
        let reply = super::http::post(&server.addr, &wrong, &init, |_| {});
        assert_eq!(reply.status, 401);
    }
    // One record per kind per minute at most, however many requests were refused.
    let periods = 1 + started.elapsed().as_secs() as usize / 60;
    let no_token = refusals(&data, "no_token");
    let wrong = refusals(&data, "wrong_token");
    assert!((1..=periods).contains(&no_token.len()), "{no_token:?}");
    assert!((1..=periods).contains(&wrong.len()), "{wrong:?}");
    assert!(wrong[0]["detail"].as_str().unwrap().contains("127.0.0.1"));
    server.stop();
}
