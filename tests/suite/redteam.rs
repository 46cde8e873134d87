//! Real escape attempts, judged from the host side: the file was not written, the canary
//! was not returned, the listener saw no connection, no process outlived the call. The
//! guard is switched off (CODEGUARD=off) so that the OS layer must stand alone.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use super::{As, Canaries, Net, Server, both_modes, corpus, eventually, find_files, stdout};

/// Secrets planted in the server's environment: none may reach the code.
pub(super) fn canary_env(token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("REDTEAM_CANARY_TOKEN", token.to_string()),
        ("AWS_SECRET_ACCESS_KEY", format!("aws-{token}")),
        ("GITHUB_TOKEN", format!("gh-{token}")),
        ("SSH_AUTH_SOCK", "/tmp/fake-agent.sock".to_string()),
        ("DOCKER_HOST", "unix:///var/run/docker.sock".to_string()),
    ]
}

pub(super) fn token() -> String {
    let bytes: [u8; 8] = warden::random_bytes();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn start(net: Net, token: &str, extra: &[(&str, &str)]) -> Server {
    start_as(As::Root, net, token, extra).await
}

async fn start_as(who: As, net: Net, token: &str, extra: &[(&str, &str)]) -> Server {
    let env = canary_env(token);
    let mut pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    pairs.push(("CODEGUARD", "off"));
    pairs.extend_from_slice(extra);
    Server::start_as(who, net, &pairs).await
}

pub(super) struct Case {
    pub(super) name: String,
    goal: String,
    pub(super) code: String,
}

pub(super) fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = std::fs::read_dir(corpus("redteam"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .map(|p| {
            let code = std::fs::read_to_string(&p).unwrap();
            let goal = code
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# goal: "))
                .and_then(|l| l.split_whitespace().next())
                .expect("goal line")
                .to_string();
            Case {
                name: p.file_name().unwrap().to_string_lossy().into_owned(),
                goal,
                code,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Judges one case from the host side and describes the breach, if any. `before` lists
/// the /tmp/pwned_* files that existed before the case ran, so that each case answers
/// only for what it wrote itself.
pub(super) fn breach(
    case: &Case,
    r: &Value,
    token: &str,
    data_dir: &std::path::Path,
    before: &[std::path::PathBuf],
) -> Option<String> {
    let out = format!("{}{}", stdout(r), r["stderr"].as_str().unwrap_or_default());
    let num = &case.name[..2];
    match case.goal.as_str() {
        "exec" => {
            // The marker lands in the workspace: on the host's disk without a world, in
            // the keeper's tmpfs with one (the server's own workspace report shows it).
            let planted = find_files(data_dir, &format!("pwned_exec_{num}"));
            if !planted.is_empty() {
                return Some(format!("exec marker written: {planted:?}"));
            }
            let reported = r["files"].as_array().is_some_and(|files| {
                files
                    .iter()
                    .any(|f| f["path"].as_str().is_some_and(|p| p.contains("pwned_exec")))
            });
            if reported {
                return Some(format!("exec marker written: {}", r["files"]));
            }
            if out.contains("uid=")
                || out.contains("EXEC_OK")
                || out.contains("NATIVE_CODE_EXECUTED")
            {
                return Some("a program ran".into());
            }
        }
        "fs_read" => {
            for marker in [
                "root:",
                "FS_READ_OK",
                "STAT_OK",
                "BEGIN OPENSSH",
                "ssh-rsa",
                "ssh-ed25519",
            ] {
                if out.contains(marker) {
                    return Some(format!("read outside the workspace ({marker})"));
                }
            }
        }
        "fs_write" => {
            let written: Vec<_> = pwned_in_tmp()
                .into_iter()
                .filter(|p| !before.contains(p))
                .collect();
            if !written.is_empty() {
                return Some(format!("wrote outside the workspace: {written:?}"));
            }
        }
        "net" => {
            for marker in [
                "NET_SOCKET_CREATED",
                "NET_CONNECTED",
                "UNIX_CONNECTED",
                "DNS_RESOLVED",
                "NETLINK_DUMP_BYTES",
            ] {
                if out.contains(marker) {
                    return Some(format!("network reached ({marker})"));
                }
            }
            if r["status"] == "timeout" || out.contains("timed out") {
                return Some("a connect timed out: the SYN left the sandbox".into());
            }
        }
        "env" => {
            if out.contains(token) {
                return Some("a planted secret reached the code".into());
            }
            for name in [
                "AWS_SECRET_ACCESS_KEY",
                "GITHUB_TOKEN",
                "SSH_AUTH_SOCK",
                "DOCKER_HOST",
            ] {
                if out.contains(name) {
                    return Some(format!("{name} reached the code"));
                }
            }
        }
        "resource" => match num {
            "91" if out.contains("RESOURCE_DONE total MiB: 4096") => {
                return Some("4 GiB allocated past the memory limit".into());
            }
            "93" if !out.contains("RESOURCE_FORKED 0") => {
                return Some(format!("processes were forked: {out}"));
            }
            "95" if out.contains("RESOURCE_OPEN_FDS 1000000") => {
                return Some("no file-descriptor limit".into());
            }
            "97" if r["status"] != "timeout" => {
                return Some("the spinning code was not killed at the deadline".into());
            }
            _ => {}
        },
        other => return Some(format!("unknown goal {other}")),
    }
    None
}

/// Files named pwned_* directly in /tmp, where the fs_write cases aim.
pub(super) fn pwned_in_tmp() -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/tmp")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("pwned_"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn every_red_team_case_is_stopped_by_the_os_layer_alone() {
    let token = token();
    for stale in pwned_in_tmp() {
        let _ = std::fs::remove_file(stale);
    }
    let canary = std::path::Path::new("/tmp/redteam_canary.txt");
    std::fs::write(canary, "original").unwrap();
    let mut breaches = Vec::new();
    for who in both_modes() {
        let canaries = Canaries::plant(who);
        // No warm workers: every worker process the host sees is then a case's.
        let server = start_as(who, Net::Isolated, &token, &[("SANDBOX_WARM_WORKERS", "0")]).await;
        for (i, case) in cases().iter().enumerate() {
            let session = format!("rt{i}");
            let before = pwned_in_tmp();
            let r = server
                .exec(json!({"session": session, "code": case.code, "timeout_s": 8}))
                .await;
            if let Some(why) = breach(case, &r, &token, server.data_dir.path(), &before) {
                breaches.push(format!("{who:?} {}: {why}\n  result: {r}", case.name));
            }
            // Nothing the case started may outlive its worker: close the session (its
            // worker is killed) and no process of the server's but the keeper remains.
            server
                .call("reset_session", json!({"session": session}))
                .await
                .expect("reset");
            let server_pid = server.pid;
            if !eventually(5, || super::workers_of(server_pid).is_empty()).await {
                breaches.push(format!(
                    "{who:?} {}: processes outlived the worker: {:?}",
                    case.name,
                    super::workers_of(server_pid)
                ));
            }
        }
        canaries.assert_untouched(&format!("{who:?}"));
        server.stop().await;
    }
    assert_eq!(std::fs::read_to_string(canary).unwrap(), "original");
    assert!(breaches.is_empty(), "BREACHES:\n{}", breaches.join("\n"));
}

/// The harness must be able to see a breach: with the sandbox off, the same cases do
/// reach their goals (inside the test's own network namespace, so nothing leaves).
#[tokio::test]
async fn the_judge_detects_breaches_when_the_sandbox_is_off() {
    let token = token();
    let server = start(Net::Isolated, &token, &[("HOST_SANDBOX", "off")]).await;
    let by_name = |n: &str| cases().into_iter().find(|c| c.name.starts_with(n)).unwrap();
    for num in ["60_", "70_", "93_"] {
        let case = by_name(num);
        let r = server
            .exec(json!({"session": format!("off{num}"), "code": case.code, "timeout_s": 8}))
            .await;
        assert!(
            breach(&case, &r, &token, server.data_dir.path(), &[]).is_some(),
            "{} was not detected as a breach with HOST_SANDBOX=off: {r}",
            case.name
        );
    }
    // The connect left the sandbox but not the test's namespace: it failed or timed out.
    let r = server.run("offnet", &by_name("60_").code).await;
    assert!(!stdout(&r).contains("NET_CONNECTED"), "{r}");
    server.stop().await;
}

#[tokio::test]
async fn loopback_and_unix_listeners_of_the_host_see_no_connection() {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock_path = dir.path().join("host.sock");
    let unix = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    unix.set_nonblocking(true).unwrap();
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let abstract_name = format!("warden-probe-{}", token());

    let token = token();
    let server = start(Net::Host, &token, &[]).await;
    let code = format!(
        r#"import socket
for label, make, addr in [
    ("tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM), ("127.0.0.1", {port})),
    ("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), {path:?}),
    ("abstract", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), "\0{abs}"),
]:
    try:
        s = make()
        s.settimeout(2)
        s.connect(addr)
        print(label, "CONNECTED")
    except OSError as e:
        print(label, "blocked", e.errno)
"#,
        path = sock_path.display().to_string(),
        abs = abstract_name,
    );
    let r = server.run("net", &code).await;
    assert_eq!(
        stdout(&r),
        "tcp blocked 1\nunix blocked 1\nabstract blocked 1\n",
        "{r}"
    );
    assert_eq!(
        tcp.accept().map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert_eq!(
        unix.accept().map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    server.stop().await;
}

#[tokio::test]
async fn host_files_outside_the_workspace_are_neither_read_nor_written() {
    // World-readable, so that only the sandbox (not file permissions) can stop the read.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let secret = dir.path().join("canary.txt");
    let content = format!("canary-{}", token());
    std::fs::write(&secret, &content).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o666)).unwrap();
    let target = dir.path().join("written.txt");

    let token = token();
    let server = start(Net::Host, &token, &[]).await;
    let code = format!(
        r#"import os
for p in [{secret:?}, "/etc/shadow", "/etc/passwd", "/root/.ssh/id_rsa", "/proc/{server}/environ", "/proc/{test}/environ"]:
    try:
        print(p, open(p, "rb").read()[:200])
    except OSError as e:
        print(p, "blocked", type(e).__name__)
for p in [{target:?}, {secret:?}]:
    try:
        open(p, "w").write("pwned")
        print(p, "WRITTEN")
    except OSError as e:
        print(p, "blocked", type(e).__name__)
# /tmp is the worker's own: writing there never reaches the host's /tmp.
open("/tmp/pwned_from_test", "w").write("private")
# PID 1 is the worker itself: its environment is the scrubbed one.
print("self", open("/proc/1/environ", "rb").read())
try:
    os.symlink({secret:?}, "link")
    print(open("link").read())
except OSError as e:
    print("link blocked", type(e).__name__)
"#,
        secret = secret.display().to_string(),
        target = target.display().to_string(),
        server = server.pid,
        test = std::process::id(),
    );
    let r = server.run("fs", &code).await;
    let out = stdout(&r);
    assert!(!out.contains(&content), "canary read: {out}");
    assert!(!out.contains("WRITTEN"), "{out}");
    assert!(!out.contains(&token), "server environment leaked: {out}");
    assert!(!out.contains("root:"), "{out}");
    assert_eq!(out.matches("blocked").count(), 9, "{out}");
    assert!(!target.exists());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), content);
    assert!(!std::path::Path::new("/tmp/pwned_from_test").exists());
    server.stop().await;
}

/// A syscall number the filter was not written for, by name and number: on x86_64 an
/// x32 call (x86_64's audit arch with bit 30 set); aarch64 has no second ABI under its
/// own audit arch, so there it is a number above the last one reviewed.
#[cfg(target_arch = "x86_64")]
const BEYOND_REVIEWED: (&str, libc::c_long) = ("x32_getpid", 0x4000_0000 | libc::SYS_getpid);
#[cfg(not(target_arch = "x86_64"))]
const BEYOND_REVIEWED: (&str, libc::c_long) = ("unreviewed_nr", 1000);

#[tokio::test]
async fn privileges_are_dropped_and_escalation_syscalls_refused() {
    let token = token();
    let server = start(Net::Host, &token, &[]).await;
    let code = format!(
        r#"import ctypes, os
SERVER = {server}
libc = ctypes.CDLL(None, use_errno=True)
print("uid", os.getuid(), os.geteuid(), os.getgroups())
print("nnp", libc.prctl(39, 0, 0, 0, 0))
def denied(name, rc):
    print(name, "denied" if rc == -1 else "ALLOWED", ctypes.get_errno())
denied("unshare", libc.unshare(0x10000000))
denied("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
denied("ptrace", libc.ptrace(16, SERVER, 0, 0))
denied("setsid", libc.setsid())
denied("kill_server", libc.kill(SERVER, 0))
denied("kill_test", libc.kill({test}, 0))
denied("io_uring", libc.syscall({io_uring_setup}, 8, ctypes.create_string_buffer(120)))
denied("bpf", libc.syscall({bpf}, 0, 0, 0))
denied("keyctl", libc.syscall({keyctl}, 0, 0, 0, 0, 0))
denied("perf_event_open", libc.syscall({perf_event_open}, 0, 0, -1, -1, 0))
denied("{beyond}", libc.syscall({beyond_nr}))
try:
    os.execv("/bin/sh", ["sh", "-c", "true"])
except OSError as e:
    print("exec denied", e.errno)
"#,
        server = server.pid,
        test = std::process::id(),
        io_uring_setup = libc::SYS_io_uring_setup,
        bpf = libc::SYS_bpf,
        keyctl = libc::SYS_keyctl,
        perf_event_open = libc::SYS_perf_event_open,
        beyond = BEYOND_REVIEWED.0,
        beyond_nr = BEYOND_REVIEWED.1,
    );
    let r = server.run("priv", &code).await;
    let out = stdout(&r);
    let uid_line = out.lines().next().unwrap();
    assert!(!uid_line.starts_with("uid 0 "), "{out}");
    assert!(uid_line.ends_with("[]"), "supplementary groups: {out}");
    assert!(out.contains("nnp 1"), "{out}");
    assert!(!out.contains("ALLOWED"), "{out}");
    assert_eq!(out.matches(" denied ").count(), 12, "{out}");
    assert!(out.contains("exec denied 13"), "{out}");
    server.stop().await;
}

/// The walls must not break what ordinary code needs (positive canaries): threads
/// (clone with CLONE_THREAD, clone3 falling back), asyncio and its self-pipe (a UNIX
/// stream socketpair), signals to itself, temp files, time zones.
#[tokio::test]
async fn ordinary_runtime_features_still_work_inside_the_walls() {
    let token = token();
    let server = start(Net::Host, &token, &[]).await;
    let code = r#"import asyncio, os, signal, socket, tempfile, threading, zoneinfo
out = []
t = threading.Thread(target=lambda: out.append("thread"))
t.start(); t.join()
async def main():
    await asyncio.sleep(0)
    return "asyncio"
out.append(asyncio.run(main()))
a, b = socket.socketpair()
a.sendall(b"pair"); out.append(b.recv(4).decode())
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append("signal"))
os.kill(os.getpid(), signal.SIGUSR1)
out.extend(got)
with tempfile.NamedTemporaryFile("w") as fh:
    fh.write("x"); out.append("tempfile")
out.append(str(zoneinfo.ZoneInfo("Europe/Paris").key))
print(" ".join(out))
"#;
    let r = server.run("canary", code).await;
    assert_eq!(
        stdout(&r),
        "thread asyncio pair signal tempfile Europe/Paris\n",
        "{r}"
    );
    server.stop().await;
}
