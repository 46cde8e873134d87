//! The Docker backend against the real engine: code runs in a hardened container per
//! session, the red-team corpus (guard off) and the benign corpus run through it, a
//! timeout removes the container, the pool and `SANDBOX_MAX_WORKERS` bound concurrency,
//! a killed server's containers are reaped by the next one, and an unreachable engine
//! degrades (or refuses) loudly. Judged from the host: `docker inspect`, the files on
//! disk, the containers that exist.
//!
//! These tests need a Docker engine and the image `tools/build-image.sh` builds. Without
//! them they say so and pass, except under `WARDEN_REQUIRE_DOCKER=1` (set by `.ci/run`),
//! where a Docker test that would skip fails instead.

use std::process::Command;

use serde_json::{Value, json};

use super::redteam::{breach, canary_env, cases, pwned_in_tmp, token};
use super::tls::{make_ca, make_cert, tls_engine};
use super::{As, Net, Server, containers_of, corpus, eventually, stdout};

pub fn image() -> String {
    std::env::var("WARDEN_TEST_IMAGE").unwrap_or_else(|_| "warden-sandbox:latest".into())
}

/// Whether the engine and the image are here; fails the test when they must be.
pub fn docker_ready() -> bool {
    let ok = Command::new("docker")
        .args(["image", "inspect", &image()])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("WARDEN_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "WARDEN_REQUIRE_DOCKER=1 but no Docker engine answers or the image {} is missing (tools/build-image.sh builds it)",
            image()
        );
        eprintln!("skipping: no Docker engine or no image {}", image());
    }
    ok
}

/// Settings for a Docker-backed server (guard off unless a test says otherwise).
pub fn docker_env<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, String)> {
    let mut env = vec![
        ("EXECUTION_BACKEND", "docker".to_string()),
        ("SANDBOX_IMAGE", image()),
        ("SANDBOX_POOL_SIZE", "0".to_string()),
    ];
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push((k, (*v).to_string()));
    }
    env
}

async fn start(extra: &[(&str, &str)]) -> Server {
    let env = docker_env(extra);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start(&pairs).await
}

fn inspect(id: &str) -> Value {
    let out = Command::new("docker")
        .args(["inspect", id])
        .output()
        .expect("docker inspect");
    let v: Value = serde_json::from_slice(&out.stdout).expect("inspect json");
    v[0].clone()
}

#[tokio::test]
async fn a_session_runs_in_a_hardened_container_of_its_own() {
    if !docker_ready() {
        return;
    }
    let server = start(&[]).await;
    let r = server
        .exec(json!({
            "session": "a",
            "code": "import os\nx = 41\nopen('made.txt', 'w').write(open('in.txt').read().upper())\nprint(os.getuid(), os.getgid(), os.getcwd())",
            "inputs": {"in.txt": "hello"}
        }))
        .await;
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["backend"], "docker");
    assert_eq!(r["configured_backend"], "docker");
    let seen: Vec<&str> = stdout(&r).split_whitespace().collect();
    let uid: u32 = seen[0].parse().unwrap();
    assert_eq!(seen, [seen[0], seen[0], "/workspace"], "{r}");
    assert!(uid >= 1_000_000_000, "a uid of the session's own: {r}");
    assert!(
        !r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("wall")),
        "every wall stands inside the container: {r}"
    );
    // Variables persist: one persistent worker, not a process per call.
    let r2 = server.run("a", "x + 1").await;
    assert_eq!(r2["result"], "42", "{r2}");
    // The workspace is the host directory.
    let made = super::find_files(server.data_dir.path(), "made.txt");
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(std::fs::read_to_string(&made[0]).unwrap(), "HELLO");
    // Another session: another container.
    server.run("b", "print(1)").await;
    let ids = containers_of(server.pid);
    assert_eq!(ids.len(), 2, "one container per session: {ids:?}");
    for id in &ids {
        let c = inspect(id);
        let h = &c["HostConfig"];
        assert_eq!(h["ReadonlyRootfs"], true);
        assert_eq!(h["Privileged"], false);
        assert_eq!(h["CapDrop"], json!(["ALL"]));
        assert!(h["CapAdd"].is_null() || h["CapAdd"] == json!([]));
        assert_eq!(h["NetworkMode"], "none");
        assert_eq!(h["Memory"], h["MemorySwap"]);
        assert_eq!(h["PidsLimit"], 256);
        assert_eq!(h["Init"], true);
        assert_eq!(h["LogConfig"]["Type"], "none");
        assert!(
            h["SecurityOpt"]
                .as_array()
                .unwrap()
                .contains(&json!("no-new-privileges"))
        );
        let user = c["Config"]["User"].as_str().unwrap();
        let (u, g) = user.split_once(':').unwrap();
        assert!(
            u == g && u.parse::<u32>().unwrap() >= 1_000_000_000,
            "{user}"
        );
        let binds: Vec<&Value> = c["Mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["Type"] == "bind")
            .collect();
        let sources: Vec<&str> = binds
            .iter()
            .map(|m| m["Source"].as_str().unwrap())
            .collect();
        assert_eq!(
            sources.len(),
            3,
            "the binary, the workspace and the package layer only: {sources:?}"
        );
        assert!(
            binds
                .iter()
                .any(|m| m["Destination"] == "/packages" && m["RW"] == false),
            "the package layer is read-only: {binds:?}"
        );
        assert!(!sources.iter().any(|s| s.contains("docker.sock")));
    }
    let pid = server.pid;
    server.stop().await;
    assert!(
        eventually(10, || containers_of(pid).is_empty()).await,
        "the server left containers behind"
    );
}

#[tokio::test]
async fn every_red_team_case_is_stopped_by_the_container() {
    if !docker_ready() {
        return;
    }
    red_team_through(As::Root, &[]).await;
}

/// Every red-team case, guard off, through containers started with `extra` settings by
/// a server running as `who` (whose own files are then canaries too): none breaches,
/// judged from the host, and no container of the server's remains on its engine (the
/// `DOCKER_HOST` of `extra`, else the local one).
pub async fn red_team_through(who: As, extra: &[(&str, &str)]) {
    let token = token();
    for stale in pwned_in_tmp() {
        let _ = std::fs::remove_file(stale);
    }
    let canary = std::path::Path::new("/tmp/redteam_canary.txt");
    std::fs::write(canary, "original").unwrap();
    let canaries = super::Canaries::plant(who);
    let mut settings = vec![("CODEGUARD", "off")];
    settings.extend_from_slice(extra);
    let mut env = docker_env(&settings);
    for (k, v) in canary_env(&token) {
        if !env.iter().any(|(name, _)| *name == k) {
            env.push((k, v));
        }
    }
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = start_reaching(who, Net::Isolated, &pairs, engine_of(extra).is_none()).await;
    let mut breaches = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        let before = pwned_in_tmp();
        let r = server
            .exec(json!({"session": format!("rt{i}"), "code": case.code, "timeout_s": 8}))
            .await;
        assert_eq!(r["backend"], "docker", "{r}");
        if let Some(why) = breach(case, &r, &token, server.data_dir.path(), &before) {
            breaches.push(format!("{}: {why}\n  result: {r}", case.name));
        }
        // Close the session: its container goes (SANDBOX_MAX_WORKERS bounds them).
        let _ = server
            .call("reset_session", json!({"session": format!("rt{i}")}))
            .await;
    }
    assert_eq!(std::fs::read_to_string(canary).unwrap(), "original");
    canaries.assert_untouched(&format!("{who:?}"));
    let pid = server.pid;
    server.stop().await;
    let engine = engine_of(extra);
    let label = format!("dev.warden.pid={pid}");
    assert!(
        eventually(10, || super::containers_labelled_on(engine, &label)
            .is_empty())
        .await
    );
    assert!(breaches.is_empty(), "BREACHES:\n{}", breaches.join("\n"));
}

/// A server running as `who` that reaches its engine: a login user reaches the local
/// engine as a member of the `docker` group (as a desktop user does), and an engine of
/// its own (`DOCKER_HOST`, such as its rootless Podman) as itself.
/// `local`: the engine is the machine's own (no `DOCKER_HOST` of the test's).
async fn start_reaching(who: As, net: Net, env: &[(&str, &str)], local: bool) -> Server {
    match (who, docker_gid()) {
        (As::User, Some(gid)) if local => {
            let data = super::data_dir_for(who);
            let cmd = super::server_command_as(who, net, env, &[], data.path());
            Server::from_command(with_docker_group(&cmd, gid), data, who).await
        }
        _ => Server::start_as(who, net, env).await,
    }
}

/// The engine `extra` names (`DOCKER_HOST`), if any.
fn engine_of<'a>(extra: &[(&str, &'a str)]) -> Option<&'a str> {
    extra
        .iter()
        .find(|(k, _)| *k == "DOCKER_HOST")
        .map(|(_, v)| *v)
}

/// The same with the server running as a login user in the `docker` group, whose own
/// files are canaries too.
#[tokio::test]
async fn every_red_team_case_is_stopped_by_the_container_of_a_login_users_server() {
    if !docker_ready() || super::login_user().is_none() {
        return;
    }
    if docker_gid().is_none() {
        eprintln!("not applicable: no docker group, so no login user reaches the engine");
        return;
    }
    red_team_through(As::User, &[]).await;
}

#[tokio::test]
async fn every_benign_snippet_passes_through_the_container() {
    if !docker_ready() {
        return;
    }
    benign_through(As::Root, &[]).await;
}

/// Every benign snippet, guard on, through containers started with `extra` settings by
/// a server running as `who`: each prints exactly what it expects.
pub async fn benign_through(who: As, extra: &[(&str, &str)]) {
    let mut settings = vec![("CODEGUARD", "enforce"), ("SANDBOX_POOL_SIZE", "2")];
    settings.extend_from_slice(extra);
    let env = docker_env(&settings);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = start_reaching(who, Net::Host, &pairs, engine_of(extra).is_none()).await;
    let mut files: Vec<_> = std::fs::read_dir(corpus("benign"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    let mut failures = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let code = std::fs::read_to_string(path).unwrap();
        let expected = code
            .lines()
            .next()
            .unwrap()
            .strip_prefix("# expect: ")
            .unwrap();
        let r = server.run(&format!("benign{i}"), &code).await;
        if r["status"] != "ok" || stdout(&r).trim_end() != expected || r["backend"] != "docker" {
            failures.push(format!(
                "{}: expected {expected:?}, got {r}",
                path.display()
            ));
        }
        // A finished snippet's session is closed: its container goes.
        let _ = server
            .call("reset_session", json!({"session": format!("benign{i}")}))
            .await;
    }
    server.stop().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_timeout_removes_the_container_and_the_next_call_gets_a_fresh_one() {
    if !docker_ready() {
        return;
    }
    let server = start(&[]).await;
    server.run("t", "x = 1").await;
    let first = containers_of(server.pid);
    assert_eq!(first.len(), 1);
    let r = server
        .exec(json!({"session": "t", "code": "while True:\n    pass", "timeout_s": 1}))
        .await;
    assert_eq!(r["status"], "timeout", "{r}");
    assert!(
        eventually(10, || !containers_of(server.pid).contains(&first[0])).await,
        "the timed-out container still exists"
    );
    let r = server.run("t", "print(globals().get('x'))").await;
    assert_eq!(r["worker_restarted"], true, "{r}");
    assert_eq!(stdout(&r).trim(), "None", "a fresh interpreter: {r}");
    assert!(
        r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("timed out")),
        "{r}"
    );
    let now = containers_of(server.pid);
    assert_eq!(now.len(), 1);
    assert_ne!(now[0], first[0], "never reused");
    server.stop().await;
}

#[tokio::test]
async fn the_pool_and_the_worker_cap_bound_concurrency_with_a_busy_error() {
    if !docker_ready() {
        return;
    }
    let server = start(&[("SANDBOX_POOL_SIZE", "1"), ("SANDBOX_MAX_WORKERS", "2")]).await;
    // The one warm pool (the session layer's) keeps one container started ahead, its
    // worker frozen; a new session takes it over instead of starting one.
    assert!(eventually(30, || containers_of(server.pid).len() == 1).await);
    let warm = containers_of(server.pid);
    let a = server.run("a", "x = 'a'; print('a')").await;
    assert_eq!(stdout(&a), "a\n", "{a}");
    assert!(
        containers_of(server.pid).contains(&warm[0]),
        "session a runs in the warm container"
    );
    let b = server.run("b", "x = 'b'; print('b')").await;
    assert_eq!(stdout(&b), "b\n", "{b}");
    // Warm containers count against SANDBOX_MAX_WORKERS like any worker.
    assert!(eventually(10, || containers_of(server.pid).len() <= 2).await);
    // Both workers in a call: a third session is refused, busy and retryable.
    let sleep = |s: &'static str| {
        server.exec(json!({"session": s, "code": "import time; time.sleep(4); print('slept')"}))
    };
    let third = async {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let c = server.run("c", "print('c')").await;
        (c, containers_of(server.pid).len())
    };
    let (ra, rb, (c, during)) = tokio::join!(sleep("a"), sleep("b"), third);
    assert_eq!(stdout(&ra), "slept\n", "{ra}");
    assert_eq!(stdout(&rb), "slept\n", "{rb}");
    assert_eq!(c["status"], "error", "{c}");
    assert_eq!(c["error"]["type"], "WorkersBusy", "{c}");
    assert_eq!(c["error"]["retryable"], true, "{c}");
    assert!(
        c["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOX_MAX_WORKERS=2"),
        "{c}"
    );
    assert!(during <= 2, "{during} containers under a cap of 2");
    // Once a worker is idle it makes room: the least recently used idle session's
    // container is removed (never reused) and that session learns it.
    let before = containers_of(server.pid);
    let c = server.run("c", "print('c')").await;
    assert_eq!(stdout(&c), "c\n", "{c}");
    assert!(containers_of(server.pid).len() <= 2);
    let gone: Vec<&String> = before
        .iter()
        .filter(|id| !containers_of(server.pid).contains(id))
        .collect();
    assert_eq!(gone.len(), 1, "one container made room: {before:?}");
    // A session that ends takes its container with it; its next call gets a new one.
    let of_c: Vec<String> = containers_of(server.pid)
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert_eq!(of_c.len(), 1, "session c's own container");
    server
        .call("reset_session", json!({"session": "c"}))
        .await
        .unwrap();
    assert!(
        eventually(20, || !containers_of(server.pid).contains(&of_c[0])).await,
        "reset_session left its container"
    );
    let r = server.run("c", "print(globals().get('x'))").await;
    assert_eq!(stdout(&r), "None\n", "{r}");
    assert!(
        !containers_of(server.pid).contains(&of_c[0]),
        "never reused"
    );
    server.stop().await;
}

#[tokio::test]
async fn containers_of_a_killed_server_are_reaped_by_the_next_one() {
    if !docker_ready() {
        return;
    }
    let first = start(&[("SANDBOX_POOL_SIZE", "1")]).await;
    first.run("s", "print(1)").await;
    assert!(eventually(30, || containers_of(first.pid).len() == 2).await);
    let dead = first.pid;
    // SIGKILL: no shutdown, nothing cleaned up by the server itself.
    super::sigkill_and_wait(dead).await;
    // Not asserted here that they are still there: any server starting meanwhile (other
    // tests run at once) reaps them just the same, which is what is being proved.
    let second = start(&[]).await;
    second.run("s", "print(2)").await;
    assert!(
        containers_of(dead).is_empty(),
        "the dead server's containers were not reaped: {:?}",
        containers_of(dead)
    );
    second.stop().await;
    drop(first);
}

#[tokio::test]
async fn an_unreachable_engine_degrades_with_a_warning_or_refuses_under_require() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = format!("unix://{}/no-engine.sock", dir.path().display());
    let env = [
        ("EXECUTION_BACKEND", "docker"),
        ("DOCKER_HOST", nowhere.as_str()),
    ];
    let server = Server::start(&env).await;
    for _ in 0..2 {
        let r = server.run("d", "print('ran')").await;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["backend"], "host");
        assert_eq!(r["configured_backend"], "docker");
        let w = r["warnings"][0].as_str().unwrap_or_default();
        assert!(
            w.contains("EXECUTION_BACKEND=docker could not be used"),
            "{r}"
        );
    }
    let st = server.call("selftest", json!({})).await.unwrap();
    let st = st.structured_content.unwrap();
    assert_eq!(st["configured_backend"], "docker");
    assert_eq!(st["resolved_backend"], "host");
    server.stop().await;

    let strict = [
        ("EXECUTION_BACKEND", "docker"),
        ("DOCKER_HOST", nowhere.as_str()),
        ("HOST_SANDBOX", "require"),
    ];
    let server = Server::start(&strict).await;
    let r = server.run("d", "print('ran')").await;
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["error"]["type"], "SandboxRefused");
    assert!(stdout(&r).is_empty());
    server.stop().await;

    // An engine without the image degrades the same way.
    if docker_ready() {
        let env = [
            ("EXECUTION_BACKEND", "docker"),
            ("SANDBOX_IMAGE", "warden-no-such-image:none"),
        ];
        let server = Server::start(&env).await;
        let r = server.run("d", "print('ran')").await;
        assert_eq!(r["backend"], "host");
        assert!(
            r["warnings"][0]
                .as_str()
                .unwrap()
                .contains("warden-no-such-image")
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn selftest_runs_its_probes_in_a_container_and_all_are_blocked() {
    if !docker_ready() {
        return;
    }
    let server = start(&[]).await;
    let st = selftest_all_blocked(&server).await;
    assert_eq!(st["resolved_backend"], "docker", "{st}");
    assert_eq!(st["configured_backend"], "docker");
    server.stop().await;
}

/// The server's `selftest` report, after checking that every required probe is blocked.
pub async fn selftest_all_blocked(server: &Server) -> Value {
    let st = server.call("selftest", json!({})).await.unwrap();
    let st = st.structured_content.unwrap();
    assert_eq!(st["failing_required"], json!([]), "{st:#}");
    for p in st["probes"].as_array().unwrap() {
        if p["required"] == true {
            assert_eq!(p["status"], "blocked", "{p}");
        }
    }
    st
}

#[tokio::test]
async fn a_grant_binds_exactly_the_approved_object_into_the_container() {
    if !docker_ready() {
        return;
    }
    let shared = tempfile::Builder::new()
        .prefix("warden-grant-")
        .tempdir()
        .unwrap();
    let read_dir = shared.path().join("in");
    let write_file = shared.path().join("out.txt");
    std::fs::create_dir(&read_dir).unwrap();
    std::fs::write(read_dir.join("data.csv"), "a,b\n1,2\n").unwrap();
    std::fs::write(shared.path().join("secret.txt"), "not granted").unwrap();
    std::fs::write(&write_file, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [shared.path(), read_dir.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(
        read_dir.join("data.csv"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(&write_file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let data = super::data_dir_for(As::Root);
    let env = docker_env(&[]);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (rd, wf) = (
        read_dir.display().to_string(),
        write_file.display().to_string(),
    );
    let cmd = super::server_command_as(
        As::Root,
        Net::Host,
        &pairs,
        &["--allow-read", &rd, "--allow-write", &wf],
        data.path(),
    );
    let server = Server::from_command(cmd, data, As::Root).await;
    let code = format!(
        "print(open({:?}).read().splitlines()[1])\nopen({:?}, 'w').write('written')\n\
         import os\nfor p in ({:?}, {:?}):\n    try:\n        open(p, 'w').write('x')\n        print('WROTE', p)\n    except OSError as e:\n        print('denied', e.errno)\n\
         try:\n    print(open({:?}).read())\nexcept OSError as e:\n    print('hidden', e.errno)",
        read_dir.join("data.csv"),
        write_file,
        read_dir.join("new.txt"),
        read_dir.join("data.csv"),
        shared.path().join("secret.txt"),
    );
    let r = server.run("g", &code).await;
    assert_eq!(r["status"], "ok", "{r}");
    let out = stdout(&r);
    assert!(out.starts_with("1,2\n"), "{r}");
    assert!(!out.contains("WROTE"), "a read grant was writable: {r}");
    assert!(
        out.contains("hidden"),
        "an ungranted sibling was visible: {r}"
    );
    assert!(!out.contains("not granted"));
    assert_eq!(std::fs::read_to_string(&write_file).unwrap(), "written");
    assert!(!read_dir.join("new.txt").exists());
    let id = &containers_of(server.pid)[0];
    let mounts = inspect(id)["Mounts"].clone();
    let granted: Vec<(String, bool)> = mounts
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["Source"]
                .as_str()
                .unwrap()
                .starts_with(shared.path().to_str().unwrap())
        })
        .map(|m| {
            (
                m["Source"].as_str().unwrap().to_string(),
                m["RW"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(granted.len(), 2, "{mounts}");
    assert!(granted.contains(&(rd.clone(), false)));
    assert!(granted.contains(&(wf.clone(), true)));
    server.stop().await;
}

/// `DOCKER_HOST=tcp://…` reaches the engine over TCP: here through a forwarder on
/// loopback to the local engine's socket (TLS needs an engine listening with
/// certificates, which this machine's shared engine does not).
#[tokio::test]
async fn docker_host_over_tcp_reaches_the_engine() {
    if !docker_ready() {
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let forwarder = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect("/var/run/docker.sock").await
                {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    let host = format!("tcp://{addr}");
    let server = start(&[("DOCKER_HOST", host.as_str())]).await;
    let r = server.run("tcp", "print('over tcp')").await;
    assert_eq!(r["backend"], "docker", "{r}");
    assert_eq!(stdout(&r), "over tcp\n");
    server.stop().await;
    forwarder.abort();
}

/// Mount points beneath `dir` in this machine's mount table.
fn mounts_beneath(dir: &std::path::Path) -> Vec<String> {
    let dir = dir.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&dir))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_full_container_workspace_gets_enospc_and_never_the_hosts_disk() {
    if !docker_ready() {
        return;
    }
    // The server runs as root here, so /workspace is a tmpfs of SANDBOX_DISK_LIMIT that
    // the server mounted on the session's directory and bound into the container.
    let server = start(&[("SANDBOX_DISK_LIMIT", "8m")]).await;
    let r = server.run("hog", super::quota::FILL).await;
    let written: u64 = stdout(&r)
        .strip_prefix("ENOSPC ")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ENOSPC inside Python: {r}"));
    assert!((6..=8).contains(&written), "{written} MiB: {r}");
    let st = server.call("selftest", json!({})).await.unwrap();
    let st = st.structured_content.unwrap();
    let walls = st.to_string();
    assert!(
        walls.contains("disk_quota") && walls.contains("8388608 bytes"),
        "selftest names the quota: {st:#}"
    );
    // Another session is untouched, and an inode bomb ends at the quota too.
    let r = server
        .run(
            "other",
            "open('fine.bin', 'wb').write(b'z' * (2 << 20)); print('ok')",
        )
        .await;
    assert_eq!(stdout(&r), "ok\n", "{r}");
    assert_eq!(r["files"][0]["path"], "fine.bin", "{r}");
    let r = server
        .run(
            "bomb",
            "import os\nn = 0\ntry:\n    while True:\n        open('f%d' % n, 'w').close()\n        n += 1\nexcept OSError as e:\n    print(e.errno, n < 5000)",
        )
        .await;
    assert_eq!(stdout(&r), "28 True\n", "{r}");
    // The workspaces are tmpfs mounts on the host while their sessions live...
    let data = server.data_dir.path().to_path_buf();
    assert!(
        mounts_beneath(&data).len() >= 3,
        "{:?}",
        mounts_beneath(&data)
    );
    server
        .call("reset_session", json!({"session": "hog"}))
        .await
        .unwrap();
    let data = server.stop().await;
    // ...and none is left when the server is gone; the bytes never were on the disk.
    assert_eq!(mounts_beneath(data.path()), Vec::<String>::new());
    assert!(super::find_files(data.path(), "big.bin").is_empty());
    assert!(super::find_files(data.path(), "fine.bin").is_empty());
}

/// A byte cap narrows the container's workspace tmpfs while a call runs: past what is
/// left a write fails inside Python, as at the quota, and the next session is not
/// narrowed.
#[tokio::test]
async fn a_byte_cap_narrows_the_container_workspace_while_a_call_runs() {
    if !docker_ready() {
        return;
    }
    let server = start(&[("SANDBOX_MAX_BYTES_WRITTEN", "1m")]).await;
    let write = "from pathlib import Path\nPath('a').write_bytes(b'x' * 600_000)\nprint('ok')";
    let r = server.run("b", write).await;
    assert_eq!(stdout(&r), "ok\n", "{r}");
    assert!(!r["warnings"].to_string().contains("not enforced"), "{r}");
    let past = "from pathlib import Path\ntry:\n    Path('c').write_bytes(b'x' * 600_000)\n\
                except OSError as e:\n    print('errno', e.errno)";
    let r = server.run("b", past).await;
    assert_eq!(stdout(&r), "errno 28\n", "{r}");
    let r = server.run("other", write).await;
    assert_eq!(stdout(&r), "ok\n", "{r}");
    server.stop().await;
}

/// Checkpoints and transactional calls need the host backend: under Docker the tools
/// answer `Unsupported`, and a transactional call is refused before anything runs.
#[tokio::test]
async fn checkpoints_and_transactions_are_refused_under_docker_and_nothing_runs() {
    if !docker_ready() {
        return;
    }
    let server = start(&[]).await;
    let r = server.run("u", "open('a', 'w').write('1')").await;
    assert_eq!(r["status"], "ok", "{r}");
    let r = server
        .call(
            "checkpoint",
            serde_json::json!({"session": "u", "name": "c"}),
        )
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let r = r.structured_content.unwrap();
    assert_eq!(r["error"]["type"], "Unsupported", "{r}");
    let r = server
        .exec(serde_json::json!({"session": "u", "transactional": true, "code": "open('a', 'w').write('2')"}))
        .await;
    assert_eq!(r["error"]["type"], "Unsupported", "{r}");
    let r = server.run("u", "print(open('a').read())").await;
    assert_eq!(stdout(&r), "1\n", "the refused call ran: {r}");
    server.stop().await;
}

/// `DOCKER_HOST=tcp://…` with `DOCKER_TLS_VERIFY=1` speaks TLS with the certificates in
/// `DOCKER_CERT_PATH`: the engine (here a TLS endpoint on loopback in front of the local
/// engine, certificates made for this test) sees the client certificate, and the server
/// checks the engine's against `ca.pem`. A wrong CA or a client certificate the engine
/// does not trust reaches no engine: under `HOST_SANDBOX=require` nothing runs.
#[tokio::test]
async fn docker_host_over_tls_verifies_both_ends() {
    if !docker_ready() {
        return;
    }
    let pki = tempfile::tempdir().unwrap();
    let dir = pki.path();
    make_ca(dir, "engine-ca");
    make_ca(dir, "client-ca");
    make_ca(dir, "rogue-ca");
    make_cert(dir, "engine-ca", "engine", "serverAuth");
    make_cert(dir, "client-ca", "client", "clientAuth");
    make_cert(dir, "rogue-ca", "rogue", "clientAuth");
    // DOCKER_CERT_PATH layouts: ca.pem, cert.pem, key.pem.
    let layout = |name: &str, ca: &str, client: &str| {
        let d = dir.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::copy(dir.join(format!("{ca}.pem")), d.join("ca.pem")).unwrap();
        std::fs::copy(dir.join(format!("{client}.pem")), d.join("cert.pem")).unwrap();
        std::fs::copy(dir.join(format!("{client}-key.pem")), d.join("key.pem")).unwrap();
        d.display().to_string()
    };
    let good = layout("good", "engine-ca", "client");
    let wrong_ca = layout("wrong-ca", "rogue-ca", "client");
    let rogue_client = layout("rogue-client", "engine-ca", "rogue");
    let (addr, handshakes, task) = tls_engine(dir, "engine", "client-ca").await;
    let host = format!("tcp://{addr}");

    let server = start(&[
        ("DOCKER_HOST", host.as_str()),
        ("DOCKER_TLS_VERIFY", "1"),
        ("DOCKER_CERT_PATH", good.as_str()),
        ("HOST_SANDBOX", "require"),
    ])
    .await;
    let r = server.run("tls", "print('over tls')").await;
    assert_eq!(r["backend"], "docker", "{r}");
    assert_eq!(stdout(&r), "over tls\n", "{r}");
    assert_eq!(containers_of(server.pid).len(), 1, "{r}");
    server.stop().await;
    let verified = handshakes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(verified > 0, "no TLS handshake reached the engine");

    // A client certificate is judged after the client's side of a TLS 1.3 handshake is
    // done: the engine's alert (UnknownCA) may reach the client, or the connection may
    // be gone before the first request is sent. Either way no engine answered.
    for (certs, why, said) in [
        (
            &wrong_ca,
            "the engine's certificate is not from ca.pem",
            &["UnknownIssuer"][..],
        ),
        (
            &rogue_client,
            "the engine does not trust cert.pem",
            &["UnknownCA", "connection was not ready", "connection closed"][..],
        ),
    ] {
        let server = start(&[
            ("DOCKER_HOST", host.as_str()),
            ("DOCKER_TLS_VERIFY", "1"),
            ("DOCKER_CERT_PATH", certs.as_str()),
            ("HOST_SANDBOX", "require"),
        ])
        .await;
        let r = server.run("tls", "print('ran')").await;
        assert_eq!(r["status"], "error", "{why}: {r}");
        assert_eq!(r["error"]["type"], "SandboxRefused", "{why}: {r}");
        assert!(stdout(&r).is_empty(), "{why}: {r}");
        let text = r.to_string();
        assert!(said.iter().any(|s| text.contains(s)), "{why}: {r}");
        assert!(containers_of(server.pid).is_empty(), "{why}");
        server.stop().await;
    }
    assert_eq!(
        handshakes.load(std::sync::atomic::Ordering::SeqCst),
        verified,
        "a refused certificate completed a handshake"
    );
    task.abort();
}

/// SIGTERM or SIGINT to a Docker-backed server with warm containers and a call in
/// flight: the server ends within a second, and so does every container of its instance
/// (judged by the instance's label, through the engine). The engine gets the same grace
/// the host test gives the worker processes: until one second after the signal.
async fn a_signal_ends_the_server_and_its_containers_within_a_second(signal: i32) {
    use std::time::Duration;
    if !docker_ready() {
        return;
    }
    let server = start(&[("SANDBOX_POOL_SIZE", "2")]).await;
    let me = super::signals::identity(server.pid);
    let idle = server.run("idle", "x = 1").await;
    assert_eq!(idle["status"], "ok", "{idle}");
    let instance =
        inspect(&containers_of(server.pid)[0])["Config"]["Labels"]["dev.warden.instance"]
            .as_str()
            .expect("instance label")
            .to_string();
    let label = format!("dev.warden.instance={instance}");
    let call = server.call(
        "execute_python",
        json!({
            "session": "busy",
            "code": "import time\nopen('/workspace/started-call', 'w').close()\ntime.sleep(60)",
            "timeout_s": 100,
        }),
    );
    let check = async {
        let data = server.data_dir.path();
        assert!(
            eventually(30, || !super::find_files(data, "started-call").is_empty()).await,
            "the call never started"
        );
        // The pool refills behind the session that took a warm container.
        assert!(
            eventually(30, || super::containers_labelled(&label).len() >= 4).await,
            "idle, busy and two warm containers: {:?}",
            super::containers_labelled(&label)
        );
        let context = format!("signal {signal}");
        let sent = super::signals::signal_and_see_it_end(&server, me, signal, &context).await;
        let mut left = super::containers_labelled(&label);
        while !left.is_empty() && sent.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = super::containers_labelled(&label);
        }
        assert!(
            left.is_empty(),
            "signal {signal}: containers of instance {instance} left a second after it: {left:?}"
        );
    };
    let (answer, ()) = tokio::join!(call, check);
    super::signals::assert_nothing_left(&server, answer, &format!("signal {signal}"));
}

#[tokio::test]
async fn sigterm_with_a_call_in_flight_ends_the_server_and_its_containers_within_a_second() {
    a_signal_ends_the_server_and_its_containers_within_a_second(libc::SIGTERM).await;
}

#[tokio::test]
async fn sigint_with_a_call_in_flight_ends_the_server_and_its_containers_within_a_second() {
    a_signal_ends_the_server_and_its_containers_within_a_second(libc::SIGINT).await;
}

/// An image this test built, removed when the test ends (whatever happens).
pub struct BuiltImage(String);

impl Drop for BuiltImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// Writes a pure-Python wheel (a zip with the package, `METADATA`, `WHEEL` and a
/// `RECORD` of hashes) into `dir`, with Python's zipfile: nothing is fetched.
fn make_wheel(dir: &std::path::Path) {
    const SCRIPT: &str = r#"
import base64, hashlib, sys, zipfile
files = {
    "wardenwheel/__init__.py": "def greet():\n    return 'hello from a wheel'\n",
    "wardenwheel-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: wardenwheel\nVersion: 0.1\n",
    "wardenwheel-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: warden-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, text in files.items():
    data = text.encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append("wardenwheel-0.1.dist-info/RECORD,,")
files["wardenwheel-0.1.dist-info/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(sys.argv[1] + "/wardenwheel-0.1-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
"#;
    let out = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .arg(dir)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the image `tag` with `tools/build-image.sh --tag tag` and the given arguments
/// (from the repository's root); it is removed when the result is dropped.
pub fn build_image(tag: String, args: &[&str]) -> BuiltImage {
    let built = BuiltImage(tag);
    let out = Command::new("bash")
        .arg("tools/build-image.sh")
        .args(["--tag", &built.0])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("tools/build-image.sh");
    assert!(
        out.status.success(),
        "build-image: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    built
}

/// The image's wheel route, for real: a wheel made here offline, added by
/// `tools/build-image.sh --requirements --wheels` as one layer on the base image
/// (`--from`, seconds instead of a second debootstrap), and imported through the Docker
/// backend over MCP.
#[tokio::test]
async fn a_package_from_a_local_wheel_directory_is_importable_in_the_container() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let wheels = dir.path().join("wheels");
    std::fs::create_dir(&wheels).unwrap();
    make_wheel(&wheels);
    let requirements = dir.path().join("requirements.txt");
    std::fs::write(&requirements, "wardenwheel==0.1\n").unwrap();
    let tag = format!("warden-test-wheel:{}", std::process::id());
    let _built = build_image(
        tag.clone(),
        &[
            "--from",
            &image(),
            "--requirements",
            requirements.to_str().unwrap(),
            "--wheels",
            wheels.to_str().unwrap(),
        ],
    );
    let server = start(&[("SANDBOX_IMAGE", tag.as_str())]).await;
    let r = server
        .run(
            "w",
            "import wardenwheel\nprint(wardenwheel.greet())\nprint(wardenwheel.__file__)",
        )
        .await;
    assert_eq!(r["status"], "ok", "{r}");
    let lines: Vec<&str> = stdout(&r).lines().collect();
    assert_eq!(lines.first(), Some(&"hello from a wheel"), "{r}");
    assert!(
        lines
            .get(1)
            .is_some_and(|f| f.starts_with("/usr/local/lib/python3")
                && f.ends_with("/dist-packages/wardenwheel/__init__.py")),
        "installed where the image's Python finds it: {r}"
    );
    // Not in the base image: the package came with the wheel layer.
    let base = start(&[]).await;
    let r = base.run("w", "import wardenwheel").await;
    assert_eq!(r["status"], "error", "{r}");
    assert!(r.to_string().contains("ModuleNotFoundError"), "{r}");
    base.stop().await;
    server.stop().await;
}

/// The image-launcher route, run on this Linux machine (`SANDBOX_LAUNCHER=image` forces
/// it; a server on macOS or Windows, or with a remote engine, takes it by itself): an
/// image carrying this build's warden as its launcher (`--launcher`, one layer on the
/// base image), containers that bind nothing of this machine but the workspace and the
/// read-only package layer, and the
/// same walls and freezing as with the bound binary (`selftest`: every probe blocked).
#[tokio::test]
async fn with_the_images_launcher_only_the_workspace_and_the_packages_are_bound() {
    if !docker_ready() {
        return;
    }
    let tag = format!("warden-test-launcher:{}", std::process::id());
    let warden = env!("CARGO_BIN_EXE_warden");
    let _built = build_image(tag.clone(), &["--from", &image(), "--launcher", warden]);
    let server = start(&[
        ("SANDBOX_IMAGE", tag.as_str()),
        ("SANDBOX_LAUNCHER", "image"),
    ])
    .await;
    let r = server.run("l", "x = 6 * 7\nprint(x)").await;
    assert_eq!(r["backend"], "docker", "{r}");
    assert_eq!(stdout(&r), "42\n", "{r}");
    let r = server.run("l", "print(x + 1)").await;
    assert_eq!(
        stdout(&r),
        "43\n",
        "the same worker, frozen and thawed: {r}"
    );
    let ids = containers_of(server.pid);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let mounts = inspect(&ids[0])["Mounts"].as_array().unwrap().clone();
    assert_eq!(
        mounts.len(),
        2,
        "the workspace and the package layer only: {mounts:?}"
    );
    // The engine lists mounts in no fixed order.
    let at = |dest: &str| {
        mounts
            .iter()
            .find(|m| m["Destination"] == dest)
            .unwrap_or_else(|| panic!("nothing at {dest}: {mounts:?}"))
    };
    assert_eq!(at("/workspace")["RW"], true, "{mounts:?}");
    assert_eq!(at("/packages")["RW"], false, "{mounts:?}");
    let settings = server.settings().await;
    let launcher = settings["resolved"]["docker_launcher"]
        .as_str()
        .unwrap_or_default();
    assert!(
        launcher.starts_with("the image's (warden ") && launcher.contains("launcher protocol"),
        "{settings:#}"
    );
    let st = server.call("selftest", json!({})).await.unwrap();
    let st = st.structured_content.unwrap();
    assert_eq!(st["resolved_backend"], "docker", "{st}");
    assert_eq!(st["failing_required"], json!([]), "{st:#}");
    server.stop().await;
}

/// An image whose launcher speaks another protocol, or that has none, is never tried:
/// the server degrades to the host backend saying why, or refuses under `require`.
#[tokio::test]
async fn an_image_launcher_of_another_protocol_or_none_is_refused_with_the_way_out() {
    if !docker_ready() {
        return;
    }
    let tag = format!("warden-test-old-launcher:{}", std::process::id());
    let built = BuiltImage(tag.clone());
    let base = image();
    // The base image with a launcher label of another protocol (no binary is needed:
    // nothing may start before the label is judged).
    let container = Command::new("docker")
        .args(["create", &base])
        .output()
        .unwrap();
    let container = String::from_utf8_lossy(&container.stdout)
        .trim()
        .to_string();
    let commit = Command::new("docker")
        .args([
            "commit",
            "--change",
            "LABEL dev.warden.launcher-protocol=999 dev.warden.launcher-version=0.0.1",
            &container,
            &built.0,
        ])
        .output()
        .unwrap();
    let _ = Command::new("docker")
        .args(["rm", "-f", &container])
        .output();
    assert!(commit.status.success(), "{commit:?}");
    for (img, why) in [
        (tag.as_str(), "protocol 999"),
        (base.as_str(), "carries no warden launcher"),
    ] {
        let env = [("SANDBOX_IMAGE", img), ("SANDBOX_LAUNCHER", "image")];
        let server = start(&env).await;
        let r = server.run("o", "print('ran')").await;
        assert_eq!(r["backend"], "host", "{r}");
        let w = r["warnings"][0].as_str().unwrap_or_default();
        assert!(w.contains(why) && w.contains("--launcher"), "{img}: {r}");
        assert!(containers_of(server.pid).is_empty(), "nothing was started");
        server.stop().await;
        let strict = [
            ("SANDBOX_IMAGE", img),
            ("SANDBOX_LAUNCHER", "image"),
            ("HOST_SANDBOX", "require"),
        ];
        let server = start(&strict).await;
        let r = server.run("o", "print('ran')").await;
        assert_eq!(r["status"], "error", "{img}: {r}");
        assert!(r.to_string().contains(why), "{img}: {r}");
        assert!(stdout(&r).is_empty());
        server.stop().await;
    }
}

/// Runs `script` with `sh -c` as `uid:gid` with no supplementary groups; whether it
/// succeeded, and what it printed.
fn sh_as(uid: u32, script: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "--",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// One container of a server, as this machine sees it: its init's pid on the host, the
/// real uid that process runs as, and the user the engine was told.
#[derive(Debug)]
struct Seen {
    pid: i32,
    uid: u32,
    user: String,
}

fn containers_seen(server_pid: u32) -> Vec<Seen> {
    containers_of(server_pid)
        .iter()
        .map(|id| {
            let c = inspect(id);
            let pid = c["State"]["Pid"].as_i64().unwrap() as i32;
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let uid = status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .unwrap()
                .parse()
                .unwrap();
            Seen {
                pid,
                uid,
                user: c["Config"]["User"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

/// Every way a host process running as `uid` might reach the workspace `ws` (holding
/// `file`) of the container whose init is `pid`: listing, reading and writing it
/// directly, and through that process's root and working directory in `/proc`. Returns
/// the attempts that worked, with what they printed.
fn intrusions(uid: u32, ws: &std::path::Path, file: &str, pid: i32) -> Vec<String> {
    let ws = ws.display();
    let planted = format!("planted-by-{uid}");
    [
        format!("ls -a {ws}"),
        format!("cat {ws}/{file}"),
        format!("echo x > {ws}/{planted}"),
        format!("ls -a /proc/{pid}/root/workspace"),
        format!("cat /proc/{pid}/root/workspace/{file}"),
        format!("echo x > /proc/{pid}/root/workspace/{planted}"),
        format!("cat /proc/{pid}/cwd/{file}"),
    ]
    .into_iter()
    .filter_map(|script| {
        let (ok, said) = sh_as(uid, &script);
        ok.then(|| format!("{script}: {said}"))
    })
    .collect()
}

/// Whether `id` is an account's uid or gid, or inside a user's subordinate range.
fn someones_id(id: u32) -> bool {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let account = |text: String| {
        text.lines()
            .any(|l| l.split(':').nth(2) == Some(id.to_string().as_str()))
    };
    let subordinate = |text: String| {
        text.lines().any(|l| {
            let f: Vec<u64> = l
                .split(':')
                .skip(1)
                .filter_map(|n| n.parse().ok())
                .collect();
            f.len() == 2 && (f[0]..f[0] + f[1]).contains(&u64::from(id))
        })
    };
    account(read("/etc/passwd"))
        || account(read("/etc/group"))
        || subordinate(read("/etc/subuid"))
        || subordinate(read("/etc/subgid"))
}

/// Two sessions' workspaces and the secrets their code wrote there; each session's
/// code also looks for the other's workspace (it must not exist for it).
async fn two_sessions(server: &Server) -> [(u32, std::path::PathBuf); 2] {
    let mut out = Vec::new();
    for name in ["a", "b"] {
        let r = server
            .run(
                name,
                &format!(
                    "import os\nopen('secret-{name}.txt', 'w').write('secret of {name}')\nprint(os.getuid(), sorted(os.listdir('/workspace')))"
                ),
            )
            .await;
        assert_eq!(r["status"], "ok", "{r}");
        let uid: u32 = stdout(&r)
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let file = super::find_files(server.data_dir.path(), &format!("secret-{name}"));
        assert_eq!(file.len(), 1, "{file:?}");
        out.push((uid, file[0].parent().unwrap().to_path_buf()));
    }
    // Neither session's code sees the other's workspace, at its host path or anywhere.
    let other = out[1].1.display().to_string();
    let r = server
        .run(
            "a",
            &format!("import os\nprint(os.path.exists({other:?}), os.path.exists('/workspace/secret-b.txt'))"),
        )
        .await;
    assert_eq!(stdout(&r), "False False\n", "{r}");
    [out[0].clone(), out[1].clone()]
}

/// The container of `uid` among `seen` (exactly one).
fn container_of_uid(seen: &[Seen], uid: u32) -> &Seen {
    let mine: Vec<&Seen> = seen.iter().filter(|s| s.uid == uid).collect();
    assert_eq!(mine.len(), 1, "{seen:?}");
    mine[0]
}

/// A root server gives each session's container a uid of its own (never an account's,
/// never in a subordinate range, never 65534; warm containers too), its workspace is
/// owned by it in a home only root can enter, and a host process running as `nobody`,
/// or as another session's uid, can neither list, read nor write it, directly or through
/// the container's processes in `/proc` (the same attempts as root show each route
/// leads to the file). The tmpfs mount is listed in every process's mount table; what
/// it holds is out of reach.
#[tokio::test]
async fn docker_workspaces_are_private_to_their_session_with_a_root_server() {
    if !docker_ready() {
        return;
    }
    let server = start(&[("SANDBOX_POOL_SIZE", "1")]).await;
    let [(uid_a, ws_a), (uid_b, ws_b)] = two_sessions(&server).await;
    assert_ne!(uid_a, uid_b, "two sessions, two uids");
    for uid in [uid_a, uid_b] {
        assert!(uid != 65534 && uid >= 1_000_000_000, "{uid}");
        assert!(
            !someones_id(uid),
            "{uid} belongs to someone on this machine"
        );
    }
    // The engine was told each container's own uid, and its processes run as it: every
    // container (the warm one included) has a uid no other has.
    assert!(eventually(30, || containers_seen(server.pid).len() == 3).await);
    let seen = containers_seen(server.pid);
    let mut uids: Vec<u32> = seen.iter().map(|s| s.uid).collect();
    uids.sort();
    uids.dedup();
    assert_eq!(uids.len(), seen.len(), "{seen:?}");
    for s in &seen {
        assert_eq!(s.user, format!("{0}:{0}", s.uid), "{s:?}");
    }
    let a = container_of_uid(&seen, uid_a);
    let home = ws_a.parent().unwrap();
    let meta = std::fs::metadata(home).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700), "{home:?}");
    assert_eq!(std::fs::metadata(&ws_a).unwrap().uid(), uid_a);
    assert!(
        mounts_beneath(&ws_a).contains(&ws_a.display().to_string()),
        "the workspace is a tmpfs the server mounted"
    );
    // Every route leads to the file for root...
    for path in [
        ws_a.join("secret-a.txt"),
        format!("/proc/{}/root/workspace/secret-a.txt", a.pid).into(),
    ] {
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret of a");
    }
    // ...and none for nobody, nor for the other session's uid.
    for intruder in [65534, uid_b] {
        let got = intrusions(intruder, &ws_a, "secret-a.txt", a.pid);
        assert!(
            got.is_empty(),
            "uid {intruder} reached session a's workspace: {got:#?}"
        );
    }
    let b = container_of_uid(&seen, uid_b);
    let got = intrusions(65534, &ws_b, "secret-b.txt", b.pid);
    assert!(
        got.is_empty(),
        "nobody reached session b's workspace: {got:#?}"
    );
    assert!(super::find_files(server.data_dir.path(), "planted-by").is_empty());
    assert_eq!(
        std::fs::read_to_string(ws_a.join("secret-a.txt")).unwrap(),
        "secret of a"
    );
    let doc = server.settings().await;
    assert_eq!(
        doc["resolved"]["dedicated_uid_per_session"], true,
        "{doc:#}"
    );
    assert!(
        !doc["resolved"]["gaps"]
            .to_string()
            .contains("uid_per_session")
    );
    server.stop().await;
}

/// `SANDBOX_USER=UID:GID` pins every container to one identity, and says what that
/// costs: `selftest` and `warden://settings` report that the workspaces are shared with
/// that uid, and a host process running as it does reach a session's workspace through
/// the container's process, exactly as they say (nobody still does not).
#[tokio::test]
async fn a_pinned_sandbox_user_runs_every_container_and_says_the_workspaces_are_shared() {
    if !docker_ready() {
        return;
    }
    let server = start(&[("SANDBOX_USER", "4242:4242")]).await;
    let [(uid_a, ws_a), (uid_b, _)] = two_sessions(&server).await;
    assert_eq!((uid_a, uid_b), (4242, 4242));
    let seen = containers_seen(server.pid);
    assert!(
        seen.iter().all(|s| s.uid == 4242 && s.user == "4242:4242"),
        "{seen:?}"
    );
    let doc = server.settings().await;
    assert_eq!(doc["resolved"]["dedicated_uid_per_session"], false);
    let gaps = doc["resolved"]["gaps"].to_string();
    assert!(
        gaps.contains("uid_per_session") && gaps.contains("any host process running as uid 4242"),
        "{doc:#}"
    );
    let st = server.call("selftest", json!({})).await.unwrap();
    let caps = st.structured_content.unwrap()["capabilities"].to_string();
    assert!(
        caps.contains("SANDBOX_USER=4242:4242 pins every container"),
        "{caps}"
    );
    let pid = seen[0].pid;
    let via_proc = format!("cat /proc/{pid}/root/workspace/secret-*.txt");
    let (shared, said) = sh_as(4242, &via_proc);
    assert!(shared && said.contains("secret of"), "{said}");
    assert!(intrusions(65534, &ws_a, "secret-a.txt", pid).is_empty());
    server.stop().await;
}

/// The `docker` group's gid, when this machine has that group.
pub fn docker_gid() -> Option<u32> {
    std::fs::read_to_string("/etc/group")
        .ok()?
        .lines()
        .find(|l| l.starts_with("docker:"))
        .and_then(|l| l.split(':').nth(2))
        .and_then(|g| g.parse::<u32>().ok())
}

/// `command` (a login user's server, made with `--clear-groups`) with the `docker` group
/// instead: the user as a member of that group, as a desktop user reaches the engine.
fn with_docker_group(command: &tokio::process::Command, gid: u32) -> tokio::process::Command {
    let std = command.as_std();
    let mut out = tokio::process::Command::new(std.get_program());
    for arg in std.get_args() {
        if arg == "--clear-groups" {
            out.arg(format!("--groups={gid}"));
        } else {
            out.arg(arg);
        }
    }
    for (k, v) in std.get_envs() {
        match v {
            Some(v) => out.env(k, v),
            None => out.env_remove(k),
        };
    }
    out
}

/// The login user's half: a server that is not root, reaching the engine as a member of
/// the `docker` group (which makes it root on this machine through the engine anyway),
/// runs its containers as its own uid and gid; every workspace is its own mode-0700
/// directory, which a host process running as `nobody` cannot list, read or write,
/// directly or through the containers' processes, and the settings and `selftest` say
/// that sessions do not get a uid each, and why. Not applicable without a login user or
/// a `docker` group on this machine (said, never passed silently).
#[tokio::test]
async fn docker_workspaces_of_a_docker_group_users_server_are_its_own() {
    if !docker_ready() {
        return;
    }
    let Some(user) = super::login_user() else {
        return;
    };
    let Some(gid) = docker_gid() else {
        eprintln!(
            "not applicable: no docker group on this machine, so no login user reaches the engine"
        );
        return;
    };
    let data = super::data_dir_for(As::User);
    let env = docker_env(&[]);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cmd = super::server_command_as(As::User, Net::Host, &pairs, &[], data.path());
    let server = Server::from_command(with_docker_group(&cmd, gid), data, As::User).await;
    let [(uid_a, ws_a), (uid_b, ws_b)] = two_sessions(&server).await;
    assert_eq!((uid_a, uid_b), (user.uid, user.uid), "the server's own uid");
    let seen = containers_seen(server.pid);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for s in &seen {
        assert_eq!(
            (s.uid, s.user.clone()),
            (user.uid, format!("{}:{}", user.uid, user.gid))
        );
    }
    use std::os::unix::fs::MetadataExt;
    for ws in [&ws_a, &ws_b] {
        let home = std::fs::metadata(ws.parent().unwrap()).unwrap();
        assert_eq!((home.uid(), home.mode() & 0o777), (user.uid, 0o700));
    }
    let got = intrusions(65534, &ws_a, "secret-a.txt", seen[0].pid);
    assert!(got.is_empty(), "nobody reached a workspace: {got:#?}");
    assert!(super::find_files(server.data_dir.path(), "planted-by").is_empty());
    let doc = server.settings().await;
    assert_eq!(doc["resolved"]["dedicated_uid_per_session"], false);
    let st = server.call("selftest", json!({})).await.unwrap();
    let caps = st.structured_content.unwrap()["capabilities"].to_string();
    assert!(
        caps.contains("uid_per_session") && caps.contains("the server is not root"),
        "{caps}"
    );
    server.stop().await;
}

/// Kills `server` with SIGKILL (nothing cleaned up by the server itself) and waits until
/// it is gone; returns its data directory.
async fn kill_hard(server: Server) -> tempfile::TempDir {
    let Server {
        client,
        data_dir,
        pid,
        ..
    } = server;
    super::sigkill_and_wait(pid).await;
    drop(client);
    data_dir
}

/// The workspace tmpfs mounts of SIGKILLed root servers stay in the host's mount table
/// until a later server starts: one on the same data directory detaches them, and so
/// does one on any other, as root, for every instance whose lock is free; a server that
/// is not root (here the login user's, on the host backend) cannot detach them and says
/// so in its log, leaving them for root.
#[tokio::test]
async fn workspace_mounts_of_a_killed_server_are_removed_by_the_next_one_on_any_data_dir() {
    if !docker_ready() {
        return;
    }
    let first = start(&[("SANDBOX_POOL_SIZE", "1")]).await;
    first.run("s", "open('kept.txt', 'w').write('x')").await;
    let other = start(&[]).await;
    other.run("s", "print(1)").await;
    assert!(eventually(30, || containers_of(first.pid).len() == 2).await);
    let (first_pid, other_pid) = (first.pid, other.pid);
    let same = kill_hard(first).await;
    let elsewhere = kill_hard(other).await;
    let instances = |d: &tempfile::TempDir| {
        std::fs::read_dir(d.path().join("sessions"))
            .unwrap()
            .count()
    };
    let dead: Vec<std::path::PathBuf> = [&same, &elsewhere]
        .iter()
        .flat_map(|d| std::fs::read_dir(d.path().join("sessions")).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    // Any root server starting meanwhile (other tests run at once) would reap these
    // instances; the test holds their locks, as a reaper does, until its own root server
    // is to reap them. A server that is not root reports them by pid, not by lock.
    // (A killed server's last threads may still be letting go of its lock.)
    let mut held: Vec<std::fs::File> = Vec::new();
    for d in &dead {
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("lock"))
            .unwrap();
        assert!(
            eventually(10, || lock.try_lock().is_ok()).await,
            "{} stays locked",
            d.display()
        );
        held.push(lock);
    }
    assert!(
        mounts_beneath(same.path()).len() >= 2,
        "nothing left to remove"
    );
    assert_eq!(mounts_beneath(elsewhere.path()).len(), 1);
    assert_eq!((instances(&same), instances(&elsewhere)), (1, 1));
    if super::login_user().is_some() {
        let log = tempfile::NamedTempFile::new().unwrap();
        let data = super::data_dir_for(As::User);
        let cmd = super::server_command_as(As::User, Net::Host, &[], &[], data.path());
        let stderr = std::process::Stdio::from(log.reopen().unwrap());
        let user_server = Server::from_command_logged(cmd, data, As::User, stderr).await;
        // It reaps before it answers the client: the log is written by now.
        let said = std::fs::read_to_string(log.path()).unwrap();
        for dir in &dead {
            let dir = dir.display().to_string();
            assert!(
                said.lines()
                    .any(|l| l.contains("only root can detach them") && l.contains(&dir)),
                "the login user's server did not report {dir}: {said}"
            );
        }
        user_server.stop().await;
        assert!(
            mounts_beneath(same.path()).len() >= 2,
            "detached without root?"
        );
    }
    // A root server on the first data directory: both dead instances' mounts go, with
    // their directories, and their containers (another root server starting now may get
    // to some of them first: what is judged is that they go).
    drop(held);
    let env = docker_env(&[]);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cmd = super::server_command(Net::Host, &pairs, &[], same.path());
    let next = Server::from_command(cmd, same, As::Root).await;
    let left = || -> Vec<String> {
        [next.data_dir.path(), elsewhere.path()]
            .iter()
            .flat_map(|d| mounts_beneath(d))
            .filter(|m| dead.iter().any(|d| m.starts_with(&d.display().to_string())))
            .collect()
    };
    assert!(
        eventually(10, || left().is_empty() && dead.iter().all(|d| !d.exists())).await,
        "mounts of the dead instances remain: {:?}",
        left()
    );
    next.run("s", "print(2)").await;
    for pid in [first_pid, other_pid] {
        assert_eq!(containers_of(pid), Vec::<String>::new());
    }
    next.stop().await;
}

/// A proxied network in a container: the container has no route (network `none`); its
/// one endpoint is the egress proxy, made by the server inside the container's own
/// namespace. An allowed origin is fetched; a loopback address, the metadata address and
/// a direct socket are refused, judged from the origin's log.
#[tokio::test]
async fn a_container_reaches_out_only_through_the_egress_proxy() {
    if !docker_ready() {
        return;
    }
    for network in ["proxy", "allow"] {
        let origin = super::egress::Origin::start(b"a,b\n1,2\n".to_vec());
        let port = origin.port.to_string();
        let allow = format!("origin.test:{port}");
        let server = start(&[
            ("HOST_SANDBOX_NETWORK", network),
            ("SANDBOX_EGRESS_ALLOW", &allow),
            ("SANDBOX_EGRESS_RESOLVE", "origin.test=127.0.0.1"),
        ])
        .await;
        let code = format!(
            r#"import socket, urllib.request
print(urllib.request.urlopen("http://origin.test:{port}/d.csv", timeout=20).read().decode().splitlines()[1])
for url in ["http://127.0.0.1:{port}/", "http://169.254.169.254/"]:
    try:
        urllib.request.urlopen(url, timeout=20); print("REACHED")
    except Exception as e:
        print(getattr(e, "code", None) or type(e).__name__)
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5); print("DIRECT")
except OSError as e:
    print("direct refused")
"#
        );
        let r = server.run("net", &code).await;
        assert_eq!(
            stdout(&r),
            "1,2\n403\n403\ndirect refused\n",
            "{network}: {r}"
        );
        assert_eq!(
            origin.seen(),
            vec!["GET /d.csv HTTP/1.1".to_string()],
            "{network}"
        );
        server.stop().await;
    }
}
