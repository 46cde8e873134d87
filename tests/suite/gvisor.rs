//! The Docker backend under gVisor (`SANDBOX_DOCKER_RUNTIME=runsc`) against the real
//! engine: the containers run with the runtime asked for (judged by `docker inspect`),
//! the code sees the Sentry's kernel, the walls gVisor lacks are stood in for (exec is
//! sealed, the disk quota holds through the Sentry's file system), every required
//! selftest probe is blocked, the red-team corpus (guard off) is stopped and the benign
//! corpus passes; a runtime the engine does not know degrades with the fix, or refuses
//! under `HOST_SANDBOX=require`.
//!
//! These need `runsc` registered with the engine (`.ci/run` does it); without it they say
//! so and pass, except under `WARDEN_REQUIRE_DOCKER=1`, where they fail.

use serde_json::json;

use super::docker::{
    benign_through, docker_env, docker_ready, red_team_through, selftest_all_blocked,
};
use super::{As, Server, containers_of, stdout};

const RUNSC: (&str, &str) = ("SANDBOX_DOCKER_RUNTIME", "runsc");

/// Whether the engine has gVisor's runtime registered as `runsc`.
fn gvisor_ready() -> bool {
    if !docker_ready() {
        return false;
    }
    let out = std::process::Command::new("docker")
        .args(["info", "--format", "{{json .Runtimes}}"])
        .output()
        .expect("docker info");
    let ok = String::from_utf8_lossy(&out.stdout).contains("\"runsc\"");
    if !ok {
        assert!(
            std::env::var("WARDEN_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "WARDEN_REQUIRE_DOCKER=1 but the engine has no runsc runtime (.ci/run registers it)"
        );
        eprintln!("skipping: the engine has no runsc runtime");
    }
    ok
}

async fn start(extra: &[(&str, &str)]) -> Server {
    let mut settings = vec![RUNSC];
    settings.extend_from_slice(extra);
    let env = docker_env(&settings);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start(&pairs).await
}

const INSIDE: &str = r#"
import os
print(os.uname().release)
print(repr(open("/etc/passwd").read()))
try:
    with open("big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20))
    print("wrote 64 MiB")
except OSError as e:
    print("disk", e.errno)
os.remove("big")
try:
    os.execv("/bin/sh", ["sh", "-c", "echo shell"])
except OSError as e:
    print("exec", e.errno)
import ctypes, mmap
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    print("rwx mapped")
except OSError as e:
    print("rwx", e.errno)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
page = libc.mmap(None, 4096, 3, 0x22, -1, 0)
print("gain", libc.mprotect(ctypes.c_void_p(page), 4096, 5), ctypes.get_errno())
"#;

#[tokio::test]
async fn a_session_runs_under_gvisor_and_every_result_says_so() {
    if !gvisor_ready() {
        return;
    }
    let server = start(&[("CODEGUARD", "off"), ("SANDBOX_DISK_LIMIT", "16m")]).await;
    let r = server.run("g", INSIDE).await;
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["backend"], "docker");
    let runtime = &r["container_runtime"];
    assert_eq!(runtime["configured"], "runsc", "{r}");
    assert_eq!(runtime["resolved"], "runsc");
    assert_eq!(runtime["user_space_kernel"], true);
    let kernel = runtime["kernel"].as_str().unwrap();
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(
        kernel,
        host_kernel.trim(),
        "the Sentry reports its own kernel"
    );
    // The Sentry's kernel, the quota of the host tmpfs beneath, exec sealed (EPERM).
    // The image's account files are covered (no Landlock to hide them).
    assert_eq!(
        stdout(&r),
        format!("{kernel}\n''\ndisk 28\nexec 1\nrwx 1\ngain -1 1\n"),
        "{r}"
    );
    let warnings = r["warnings"].to_string();
    assert!(warnings.contains("Sentry"), "{warnings}");
    // Judged from the host: the session's container runs under runsc.
    let ids = containers_of(server.pid);
    assert!(!ids.is_empty());
    for id in &ids {
        let out = std::process::Command::new("docker")
            .args(["inspect", "--format", "{{.HostConfig.Runtime}}", id])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "runsc");
    }
    let doc = server.settings().await;
    assert_eq!(doc["resolved"]["container_runtime"], *runtime, "{doc:#}");
    let st = selftest_all_blocked(&server).await;
    assert_eq!(st["container_runtime"], *runtime);
    // W^X stands in the Sentry through the seccomp seal, so its probe is required.
    let rwx = st["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "mem.rwx")
        .unwrap();
    assert_eq!(
        (&rwx["status"], &rwx["required"]),
        (&json!("blocked"), &json!(true)),
        "{rwx}"
    );
    server.stop().await;
}

#[tokio::test]
async fn every_red_team_case_is_stopped_under_gvisor() {
    if !gvisor_ready() {
        return;
    }
    red_team_through(As::Root, &[RUNSC]).await;
}

/// The same with the server running as a login user in the `docker` group, whose own
/// files are canaries too.
#[tokio::test]
async fn every_red_team_case_is_stopped_under_gvisor_for_a_login_users_server() {
    if !gvisor_ready() || super::login_user().is_none() {
        return;
    }
    if super::docker::docker_gid().is_none() {
        eprintln!("not applicable: no docker group, so no login user reaches the engine");
        return;
    }
    red_team_through(As::User, &[RUNSC]).await;
}

#[tokio::test]
async fn every_benign_snippet_passes_under_gvisor() {
    if !gvisor_ready() {
        return;
    }
    benign_through(As::Root, &[RUNSC]).await;
}

#[tokio::test]
async fn a_runtime_the_engine_does_not_know_degrades_with_the_fix_or_refuses() {
    if !docker_ready() {
        return;
    }
    let unknown = ("SANDBOX_DOCKER_RUNTIME", "warden-no-such-runtime");
    let server = start(&[unknown]).await;
    let r = server.run("u", "print('ran')").await;
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(
        (r["backend"].as_str(), r["configured_backend"].as_str()),
        (Some("host"), Some("docker"))
    );
    let w = r["warnings"][0].as_str().unwrap_or_default();
    assert!(
        w.contains("SANDBOX_DOCKER_RUNTIME=warden-no-such-runtime") && w.contains("daemon.json"),
        "{r}"
    );
    server.stop().await;

    let server = start(&[unknown, ("HOST_SANDBOX", "require")]).await;
    let r = server.run("u", "print('ran')").await;
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["error"]["type"], "SandboxRefused");
    assert!(stdout(&r).is_empty());
    server.stop().await;
}
