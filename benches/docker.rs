//! The Docker backend beside the host backend, in the same run, through a real MCP
//! client (rmcp over stdio) against the release binary: warm `print(1+1)` and the first
//! call of a new session (for Docker, with the warm pool: the session takes over a
//! container started ahead; and, for scale, without the pool), and a warm computing call;
//! then the same under gVisor (`SANDBOX_DOCKER_RUNTIME=runsc`) as ratios to runc, and on
//! rootless Podman (the server run as the login user `WARDEN_TEST_USER`, its engine that
//! user's `podman system service`) as ratios to Docker. Needs a Docker engine and the
//! image of `tools/build-image.sh` (`WARDEN_BENCH_IMAGE`, default `warden-sandbox:latest`).
//! Run with `cargo bench --bench docker`; prints p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::Duration;

use serde_json::json;
use support::{Client, n, row, stats};

const PRINT: &str = "print(1+1)";

/// Time the pool gets to start a replacement between two new sessions.
const REFILL: Duration = Duration::from_millis(1500);

/// A warm call that computes (gVisor's cost is in system calls, not in compute).
const COMPUTE: &str = "print(sum(i * i for i in range(10**6)))";

/// One backend's figures: first call of a new session, warm print, warm compute.
struct Figures {
    new: support::Stats,
    warm: support::Stats,
    compute: support::Stats,
}

async fn measure(client: &Client, pause: Duration, sessions: usize) -> Figures {
    let mut new = Vec::new();
    for i in 0..sessions {
        tokio::time::sleep(pause).await;
        let name = format!("new{i}");
        new.push(client.timed(&name, PRINT, Some("2\n")).await);
        client.tool("reset_session", json!({"session": name})).await;
    }
    client.call("warm", PRINT).await;
    let mut warm = Vec::new();
    for _ in 0..n(300, 50) {
        warm.push(client.timed("warm", PRINT, Some("2\n")).await);
    }
    let mut compute = Vec::new();
    for _ in 0..n(30, 5) {
        compute.push(client.timed("warm", COMPUTE, None).await);
    }
    Figures {
        new: stats(&new),
        warm: stats(&warm),
        compute: stats(&compute),
    }
}

/// Prints the warm call's and the new session's targets for `label` (a warm pool).
fn targets(label: &str, f: &Figures, warm_ms: f64, new_ms: f64) {
    println!(
        "  {label}: warm call {:.2} ms (p50); target ≤ {warm_ms} ms",
        f.warm.p50_ms
    );
    println!(
        "  {label}: new session with a warm pool {:.2} ms (p50); target ≤ {new_ms} ms",
        f.new.p50_ms
    );
}

/// Prints `label`'s figures, beside `baseline`'s when given.
fn rows(label: &str, f: &Figures, baseline: Option<&Figures>) {
    row(
        &format!("{label}: first call of a new session"),
        f.new,
        baseline.map(|b| b.new),
        None,
    );
    row(
        &format!("{label}: warm execute_python(\"print(1+1)\")"),
        f.warm,
        baseline.map(|b| b.warm),
        None,
    );
    row(
        &format!("{label}: warm sum of 10^6 squares"),
        f.compute,
        baseline.map(|b| b.compute),
        None,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let image =
        std::env::var("WARDEN_BENCH_IMAGE").unwrap_or_else(|_| "warden-sandbox:latest".into());
    println!("warden backends side by side (client to result, release build)");
    let host = Client::warden(&[("SANDBOX_WARM_WORKERS", "2")]).await;
    rows(
        "host (pool of 2)",
        &measure(&host, REFILL, n(20, 5)).await,
        None,
    );
    host.stop().await;
    let docker_with = |pool: &'static str, runtime: &'static str| {
        let mut env = vec![
            ("EXECUTION_BACKEND", "docker"),
            ("SANDBOX_IMAGE", image.as_str()),
            ("SANDBOX_POOL_SIZE", pool),
        ];
        if !runtime.is_empty() {
            env.push(("SANDBOX_DOCKER_RUNTIME", runtime));
        }
        env
    };
    let docker = Client::warden(&docker_with("2", "")).await;
    assert_eq!(
        docker.call("probe", "1").await["backend"],
        "docker",
        "no Docker engine or image: this benchmark needs both"
    );
    let runc = measure(&docker, REFILL, n(20, 5)).await;
    rows("docker (pool of 2)", &runc, None);
    docker.stop().await;
    // For scale: what the pool saves (each new session starts its own container).
    let cold = Client::warden(&docker_with("0", "")).await;
    let runc_cold = measure(&cold, Duration::ZERO, n(10, 3)).await;
    rows("docker (no pool)", &runc_cold, None);
    cold.stop().await;
    podman(&image, &runc, &runc_cold).await;
    // gVisor beside runc (the baseline): needs runsc registered with the engine.
    let gvisor = Client::warden(&docker_with("2", "runsc")).await;
    if gvisor.call("probe", "1").await["container_runtime"]["resolved"] != "runsc" {
        println!("docker runsc: skipped, the engine has no runsc runtime");
        gvisor.stop().await;
        return;
    }
    let pooled = measure(&gvisor, REFILL, n(20, 5)).await;
    rows("docker runsc (pool of 2)", &pooled, Some(&runc));
    targets("docker runsc", &pooled, 3.0, 15.0);
    gvisor.stop().await;
    let cold = Client::warden(&docker_with("0", "runsc")).await;
    rows(
        "docker runsc (no pool)",
        &measure(&cold, Duration::ZERO, n(10, 3)).await,
        Some(&runc_cold),
    );
    cold.stop().await;
}

/// Rootless Podman exists only on Linux.
#[cfg(not(unix))]
async fn podman(_image: &str, _docker: &Figures, _docker_cold: &Figures) {
    println!("podman: skipped, rootless Podman runs on Linux");
}

/// Rootless Podman beside Docker (the baseline): the server runs as the login user and
/// reaches that user's Podman service, as `.ci/podman-user` sets it up.
#[cfg(unix)]
async fn podman(image: &str, docker: &Figures, docker_cold: &Figures) {
    let Some(user) = std::env::var("WARDEN_TEST_USER").ok() else {
        println!("podman: skipped, no login user (WARDEN_TEST_USER)");
        return;
    };
    let Some((uid, _, _)) = support::account(&user) else {
        println!("podman: skipped, {user} is not an account here");
        return;
    };
    let host = std::env::var("WARDEN_TEST_PODMAN_HOST")
        .unwrap_or_else(|_| format!("unix:///run/user/{uid}/podman/podman.sock"));
    let env = |pool: &'static str| {
        vec![
            ("EXECUTION_BACKEND", "docker"),
            ("SANDBOX_IMAGE", image),
            ("SANDBOX_POOL_SIZE", pool),
            ("DOCKER_HOST", host.as_str()),
        ]
    };
    let Some(warm) = Client::warden_as_user(&user, &env("2")).await else {
        println!("podman: skipped, {user} is not an account here");
        return;
    };
    if warm.call("probe", "1").await["container_runtime"]["engine"] != "podman" {
        println!("podman: skipped, no Podman service with the image at {host}");
        warm.stop().await;
        return;
    }
    let pooled = measure(&warm, REFILL, n(20, 5)).await;
    rows("podman rootless (pool of 2)", &pooled, Some(docker));
    targets("podman rootless", &pooled, 2.0, 10.0);
    warm.stop().await;
    if let Some(cold) = Client::warden_as_user(&user, &env("0")).await {
        rows(
            "podman rootless (no pool)",
            &measure(&cold, Duration::ZERO, n(10, 3)).await,
            Some(docker_cold),
        );
        cold.stop().await;
    }
}
