//! The Docker backend against rootless Podman: the server runs as the login user and
//! reaches the Docker API that user's own `podman system service` serves, with no root
//! daemon anywhere. Judged from the host and through the engine: the containers' processes
//! are the login user's on the host, the limits the engine dropped are reported as a
//! missing wall (and refused under `HOST_SANDBOX=require`), every required probe is
//! blocked, the red-team corpus (guard off) is stopped, the benign corpus passes, a
//! service that is not running is answered with the command that starts it, a service
//! killed mid-call ends the call with an error and the next call runs once it is back,
//! and no container of a test's server remains on the engine.
//!
//! These need the login user's Podman service and the image in its storage (`.ci/run`
//! sets both up). Without them they say so and pass, except under
//! `WARDEN_REQUIRE_PODMAN=1`, where they fail.

use std::process::Command;

use serde_json::{Value, json};

use super::docker::{benign_through, docker_env, image, red_team_through, selftest_all_blocked};
use super::{As, LoginUser, Server, eventually, login_user, stdout};

/// The login user's Podman socket: `WARDEN_TEST_PODMAN_HOST`, else Podman's own in the
/// user's runtime directory.
fn podman_host(user: &LoginUser) -> String {
    std::env::var("WARDEN_TEST_PODMAN_HOST")
        .unwrap_or_else(|_| format!("unix:///run/user/{}/podman/podman.sock", user.uid))
}

/// `docker -H host ARGS`: the Docker CLI speaking to Podman's API, as root (root may
/// connect to the user's socket).
fn engine(host: &str, args: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(["-H", host])
        .args(args)
        .output()
        .expect("docker CLI")
}

/// The login user and its Podman socket, when the service answers, is Podman and has
/// the image; fails the test when they must be there.
fn podman_ready() -> Option<(LoginUser, String)> {
    let required = std::env::var("WARDEN_REQUIRE_PODMAN").as_deref() == Ok("1");
    let Some(user) = login_user() else {
        assert!(
            !required,
            "WARDEN_REQUIRE_PODMAN=1 but there is no login user"
        );
        return None;
    };
    let host = podman_host(&user);
    let version = engine(
        &host,
        &["version", "--format", "{{json .Server.Components}}"],
    );
    let is_podman = String::from_utf8_lossy(&version.stdout).contains("Podman Engine");
    let has_image = engine(&host, &["image", "inspect", &image()])
        .status
        .success();
    if !(is_podman && has_image) {
        assert!(
            !required,
            "WARDEN_REQUIRE_PODMAN=1 but {host} is not a Podman service with the image {} (.ci/run starts it and loads the image)",
            image()
        );
        eprintln!("skipping: no rootless Podman service with the image at {host}");
        return None;
    }
    Some((user, host))
}

/// A server running as the login user with the Docker backend on `host`.
async fn start(host: &str, extra: &[(&str, &str)]) -> Server {
    let mut settings = vec![("DOCKER_HOST", host)];
    settings.extend_from_slice(extra);
    let env = docker_env(&settings);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start_as(As::User, super::Net::Host, &pairs).await
}

/// Stops `server` and checks, through the engine at `host`, that none of its containers
/// remain.
async fn stop_leaving_nothing(server: Server, host: &str) {
    let pid = server.pid;
    server.stop().await;
    let left = || containers_on(host, pid).is_empty();
    assert!(eventually(20, left).await, "{:?}", containers_on(host, pid));
}

/// Ids of the containers of the server `pid` on the engine at `host`.
fn containers_on(host: &str, pid: u32) -> Vec<String> {
    super::containers_labelled_on(Some(host), &format!("dev.warden.pid={pid}"))
}

fn inspect_on(host: &str, id: &str) -> Value {
    let out = engine(host, &["inspect", id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap()[0].clone()
}

/// Whether the engine drops the memory and pids limits it is asked for, as its own
/// inspection of a container made with them shows (a rootless engine on cgroup v1).
fn engine_drops_limits(host: &str) -> bool {
    let made = engine(
        host,
        &[
            "create",
            "--memory",
            "64m",
            "--pids-limit",
            "32",
            &image(),
            "true",
        ],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let id = String::from_utf8_lossy(&made.stdout).trim().to_string();
    let c = inspect_on(host, &id);
    engine(host, &["rm", "-f", &id]);
    c["HostConfig"]["Memory"].as_i64().unwrap_or(0) == 0
}

/// The host uid of process `pid` (its real uid, as the host's /proc says).
fn host_uid(pid: u64) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

const INSIDE: &str = r#"
import os, threading
open("mine.txt", "w").write("written inside")
print("uid", os.getuid())
gate = threading.Event()
started = 0
try:
    for _ in range(600):
        t = threading.Thread(target=gate.wait)
        t.start()
        started += 1
except RuntimeError:
    pass
gate.set()
print("threads", started)
"#;

/// A session under rootless Podman: its container runs as the login user on the host
/// (Podman's keep-id user namespace), its file in the workspace is that user's, threads
/// stop at the task limit, and every result, selftest and the settings name the engine;
/// the limits the engine dropped (as its own inspection shows) are a missing wall.
#[tokio::test]
async fn a_rootless_podman_session_runs_as_the_login_user_and_names_the_engine() {
    let Some((user, host)) = podman_ready() else {
        return;
    };
    let server = start(&host, &[]).await;
    let r = server.run("p", INSIDE).await;
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["backend"], "docker");
    let out = stdout(&r);
    assert!(out.contains(&format!("uid {}", user.uid)), "{out}");
    let threads: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("threads "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(threads < 600, "no task limit stopped {threads} threads");
    let runtime = &r["container_runtime"];
    let version = engine(&host, &["version", "--format", "{{.Server.Version}}"]);
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    assert_eq!(runtime["engine"], "podman", "{r}");
    assert_eq!(runtime["engine_version"], version.as_str());
    assert_eq!(runtime["rootless"], true);

    let ids = containers_on(&host, server.pid);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let c = inspect_on(&host, &ids[0]);
    let pid = c["State"]["Pid"].as_u64().unwrap();
    assert_eq!(host_uid(pid), user.uid, "the container's init on the host");
    use std::os::unix::fs::MetadataExt;
    let files = super::find_files(server.data_dir.path(), "mine.txt");
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::metadata(&files[0]).unwrap().uid(), user.uid);

    let said = r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|w| w.starts_with("sandbox wall 'cgroup_limits' is not enforced"));
    let dropped = c["HostConfig"]["Memory"].as_i64().unwrap_or(0) == 0;
    match said {
        Some(w) => {
            assert!(dropped, "the engine holds the limits, yet: {w}");
            assert!(w.contains("RLIMIT_NPROC"), "{w}");
        }
        None => assert!(!dropped, "the engine dropped the limits unsaid: {r}"),
    }
    let st = selftest_all_blocked(&server).await;
    assert_eq!(st["container_runtime"]["engine"], "podman");
    let doc = server.settings().await;
    let said = &doc["resolved"]["container_runtime"];
    assert_eq!(
        (said["engine"].as_str(), said["rootless"].as_bool()),
        (Some("podman"), Some(true))
    );
    stop_leaving_nothing(server, &host).await;
}

/// Under `HOST_SANDBOX=require`, limits the engine dropped refuse every call, naming the
/// wall and what fixes it beside every other missing wall.
#[tokio::test]
async fn under_require_limits_the_engine_dropped_refuse_the_call() {
    let Some((_, host)) = podman_ready() else {
        return;
    };
    let server = start(&host, &[("HOST_SANDBOX", "require")]).await;
    let r = server.run("p", "print('ran')").await;
    // A server that is not root has no disk quota either: both walls are named.
    assert_eq!(r["error"]["type"], "SandboxRefused", "{r}");
    assert!(stdout(&r).is_empty());
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("disk_quota: "), "{r}");
    if engine_drops_limits(&host) {
        assert!(
            msg.contains("cgroup_limits: the engine dropped the memory"),
            "{r}"
        );
        assert!(msg.contains("cgroup v2"), "{r}");
    } else {
        assert!(!msg.contains("cgroup_limits"), "{r}");
    }
    stop_leaving_nothing(server, &host).await;
}

#[tokio::test]
async fn every_red_team_case_is_stopped_under_rootless_podman() {
    let Some((_, host)) = podman_ready() else {
        return;
    };
    red_team_through(As::User, &[("DOCKER_HOST", host.as_str())]).await;
}

#[tokio::test]
async fn every_benign_snippet_passes_under_rootless_podman() {
    let Some((_, host)) = podman_ready() else {
        return;
    };
    benign_through(As::User, &[("DOCKER_HOST", host.as_str())]).await;
}

/// A Podman socket nobody serves: the server degrades to the host backend and every
/// result carries the command that starts Podman's service; under require, refused.
#[tokio::test]
async fn a_podman_service_that_is_not_running_is_answered_with_the_command_that_starts_it() {
    let Some(user) = login_user() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
    let host = format!("unix://{}/podman/podman.sock", dir.path().display());
    let server = start(&host, &[]).await;
    let r = server.run("p", "print('ran')").await;
    assert_eq!(
        (r["status"].as_str(), r["backend"].as_str()),
        (Some("ok"), Some("host")),
        "{r}"
    );
    let w = r["warnings"][0].as_str().unwrap_or_default();
    let command = format!("podman system service --time=0 {host}");
    assert!(w.contains(&command), "{r}");
    server.stop().await;
    let server = start(&host, &[("HOST_SANDBOX", "require")]).await;
    let r = server.run("p", "print('ran')").await;
    assert_eq!(r["error"]["type"], "SandboxRefused", "{r}");
    assert!(stdout(&r).is_empty());
    server.stop().await;
}

/// A Podman service of the test's own, run as the login user on a socket of its own.
struct Service {
    child: std::process::Child,
}

impl Service {
    fn start(user: &LoginUser, host: &str) -> Service {
        let child = Command::new("setpriv")
            .args([
                &format!("--reuid={}", user.uid),
                &format!("--regid={}", user.gid),
                "--clear-groups",
                "--",
                "podman",
                "system",
                "service",
                "--time=0",
                host,
            ])
            .env("HOME", &user.home)
            .env("USER", &user.name)
            .env("XDG_RUNTIME_DIR", format!("/run/user/{}", user.uid))
            .current_dir(&user.home)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("podman system service");
        Service { child }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The service killed (SIGKILL) while a call runs: the call ends with an error instead
/// of hanging, and once the service is back a new session runs; no container of the
/// server's remains.
#[tokio::test]
async fn a_podman_service_killed_mid_call_ends_the_call_and_the_next_runs_when_it_is_back() {
    let Some((user, _)) = podman_ready() else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("warden-podman-")
        .tempdir_in(format!("/run/user/{}", user.uid))
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
    let host = format!("unix://{}/podman.sock", dir.path().display());
    let mut service = Service::start(&user, &host);
    let up = || engine(&host, &["version"]).status.success();
    assert!(
        eventually(30, up).await,
        "the test's Podman service did not answer"
    );
    let server = start(&host, &[]).await;
    let first = server.run("a", "print('before')").await;
    assert_eq!(first["status"], "ok", "{first}");
    let slow = server.exec(json!({"session": "a", "code": "import time; print('start', flush=True); time.sleep(60)", "timeout_s": 90}));
    let killer = async {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        service.kill();
    };
    let (r, ()) = tokio::join!(slow, killer);
    // The session ends with its engine, named.
    assert_eq!(r["error"]["type"], "EngineLost", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains(&host),
        "{r}"
    );
    let again = server.run("a", "print('again')").await;
    assert_eq!(again["error"]["type"], "EngineLost", "{again}");
    let mut service = Service::start(&user, &host);
    assert!(eventually(30, up).await, "the service did not come back");
    let r = server.run("b", "print('after')").await;
    assert_eq!(
        (r["status"].as_str(), stdout(&r).trim()),
        (Some("ok"), "after"),
        "{r}"
    );
    stop_leaving_nothing(server, &host).await;
    service.kill();
}

/// A login user's server killed with SIGKILL leaves its containers on the user's Podman;
/// the next server of that user reaps them by their labels.
#[tokio::test]
async fn containers_of_a_killed_server_are_reaped_from_podman_by_the_next_one() {
    let Some((_, host)) = podman_ready() else {
        return;
    };
    let first = start(&host, &[("SANDBOX_POOL_SIZE", "1")]).await;
    first.run("s", "print(1)").await;
    assert!(eventually(30, || containers_on(&host, first.pid).len() == 2).await);
    let dead = first.pid;
    // SIGKILL: no shutdown, nothing cleaned up by the server itself. A container the
    // engine was still creating for it may appear after it died: the next server starts
    // once the dead server's containers have stayed the same for two seconds.
    super::sigkill_and_wait(dead).await;
    let mut seen = containers_on(&host, dead);
    let mut since = std::time::Instant::now();
    while since.elapsed() < std::time::Duration::from_secs(2) {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let now = containers_on(&host, dead);
        if now != seen {
            (seen, since) = (now, std::time::Instant::now());
        }
    }
    // Not asserted here that they are still there: any server starting meanwhile (other
    // tests run at once) reaps them just the same, which is what is being proved.
    let second = start(&host, &[]).await;
    let r = second.run("s", "print(2)").await;
    assert_eq!(r["backend"], "docker", "{r}");
    assert!(
        containers_on(&host, dead).is_empty(),
        "the dead server's containers were not reaped: {:?}",
        containers_on(&host, dead)
    );
    stop_leaving_nothing(second, &host).await;
    drop(first);
}
