//! Settings that change behaviour, each exercised end to end.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::{Net, Server, stdout};

/// HOST_SANDBOX_NETWORK=allow: outbound IP works (aimed at a loopback listener only),
/// while UNIX, netlink and packet sockets stay denied.
#[tokio::test]
async fn network_allow_opens_ip_only() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = Server::start_in(Net::Host, &[("HOST_SANDBOX_NETWORK", "allow")]).await;
    let code = format!(
        r#"import socket
s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
s.sendall(b"hello-from-sandbox"); s.close()
print("tcp connected")
for fam, typ in [(socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ)
        print(fam, "OPENED")
    except OSError as e:
        print(int(fam), "denied", e.errno)
"#
    );
    let r = server.run("net", &code).await;
    assert_eq!(
        stdout(&r),
        format!("tcp connected\n1 denied 1\n16 denied 1\n17 denied 1\n"),
        "{r}"
    );
    let (mut conn, _) = listener.accept().unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut conn, &mut got).unwrap();
    assert_eq!(got, "hello-from-sandbox");
    server.stop().await;
}

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

/// The config file's [[grants]] are pre-approved for every session.
#[tokio::test]
async fn config_file_grants_are_pre_approved() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = dir.path().join("shared");
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
