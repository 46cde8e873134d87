//! The Docker backend beside the host backend, in the same run, through a real MCP
//! client (rmcp over stdio) against the release binary: warm `print(1+1)` and the first
//! call of a new session (for Docker, with the warm pool: the session takes over a
//! container started ahead; and, for scale, without the pool). Needs a Docker engine and the image of
//! `tools/build-image.sh` (`WARDEN_BENCH_IMAGE`, default `warden-sandbox:latest`).
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

async fn measure(label: &str, client: &Client, pause: Duration, sessions: usize) {
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
    row(
        &format!("{label}: first call of a new session"),
        stats(&new),
        None,
        None,
    );
    row(
        &format!("{label}: warm execute_python(\"print(1+1)\")"),
        stats(&warm),
        None,
        None,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let image =
        std::env::var("WARDEN_BENCH_IMAGE").unwrap_or_else(|_| "warden-sandbox:latest".into());
    println!("warden backends side by side (client to result, release build)");
    let host = Client::warden(&[("SANDBOX_WARM_WORKERS", "2")]).await;
    measure("host (pool of 2)", &host, REFILL, n(20, 5)).await;
    host.stop().await;
    let docker_with = |pool: &'static str| {
        [
            ("EXECUTION_BACKEND", "docker"),
            ("SANDBOX_IMAGE", image.as_str()),
            ("SANDBOX_POOL_SIZE", pool),
        ]
    };
    let docker = Client::warden(&docker_with("2")).await;
    assert_eq!(
        docker.call("probe", "1").await["backend"],
        "docker",
        "no Docker engine or image: this benchmark needs both"
    );
    measure("docker (pool of 2)", &docker, REFILL, n(20, 5)).await;
    docker.stop().await;
    // For scale: what the pool saves (each new session starts its own container).
    let cold = Client::warden(&docker_with("0")).await;
    measure("docker (no pool)", &cold, Duration::ZERO, n(10, 3)).await;
    cold.stop().await;
}
