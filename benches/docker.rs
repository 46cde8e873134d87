//! The Docker backend beside the host backend, in the same run, through a real MCP
//! client (rmcp over stdio) against the release binary: warm `print(1+1)` and the first
//! call of a new session (for Docker, with the warm pool: the session takes over a
//! container started ahead; and, for scale, without the pool). Needs a Docker engine and the image of
//! `tools/build-image.sh` (`WARDEN_BENCH_IMAGE`, default `warden-sandbox:latest`).
//! Run with `cargo bench --bench docker`; prints p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

/// Samples per measurement: warm calls, new sessions with the pool, new sessions
/// without it (each starts a container: slow). `WARDEN_BENCH_QUICK=1` (CI) takes few.
fn samples() -> (usize, usize, usize) {
    if std::env::var_os("WARDEN_BENCH_QUICK").is_some() {
        (50, 5, 3)
    } else {
        (300, 20, 10)
    }
}
/// Time the pool gets to start a replacement between two new sessions.
const REFILL: Duration = Duration::from_millis(1500);

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let idx = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[idx].as_secs_f64() * 1000.0
}

fn report(name: &str, samples: &mut [Duration]) {
    println!(
        "{name:<52} n={:<4} p50={:>7.2} ms  p95={:>7.2} ms",
        samples.len(),
        percentile(samples, 0.50),
        percentile(samples, 0.95)
    );
}

fn call(tool: &str, args: serde_json::Value) -> CallToolRequestParams {
    let serde_json::Value::Object(map) = args else {
        unreachable!()
    };
    CallToolRequestParams::new(tool.to_string()).with_arguments(map)
}

async fn server(env: &[(&str, &str)], data: &std::path::Path) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("serve")
        .env("SANDBOX_DATA_DIR", data)
        .env("SANDBOX_PYTHON", "/usr/bin/python3");
    for (k, v) in env {
        cmd.env(k, v);
    }
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn run(client: &RunningService<RoleClient, ()>, session: &str) -> Duration {
    let t = Instant::now();
    let r = client
        .call_tool(call(
            "execute_python",
            json!({"code": "print(1+1)", "session": session}),
        ))
        .await
        .unwrap();
    let elapsed = t.elapsed();
    let out = r.structured_content.unwrap();
    assert_eq!(out["stdout"], "2\n", "{out}");
    elapsed
}

async fn measure(
    label: &str,
    client: &RunningService<RoleClient, ()>,
    pause: Duration,
    sessions: usize,
) {
    let mut new = Vec::new();
    for i in 0..sessions {
        tokio::time::sleep(pause).await;
        new.push(run(client, &format!("new{i}")).await);
        client
            .call_tool(call("reset_session", json!({"session": format!("new{i}")})))
            .await
            .unwrap();
    }
    run(client, "warm").await;
    let mut warm = Vec::new();
    for _ in 0..samples().0 {
        warm.push(run(client, "warm").await);
    }
    report(&format!("{label}: first call of a new session"), &mut new);
    report(
        &format!("{label}: warm execute_python(\"print(1+1)\")"),
        &mut warm,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let data = tempfile::Builder::new()
        .prefix("warden-bench-")
        .tempdir()
        .unwrap();
    warden::os::set_mode(data.path(), 0o711).unwrap();
    let image =
        std::env::var("WARDEN_BENCH_IMAGE").unwrap_or_else(|_| "warden-sandbox:latest".into());
    println!("warden backends side by side (client to result, release build)");
    let host = server(&[("SANDBOX_WARM_WORKERS", "2")], data.path()).await;
    measure("host (pool of 2)", &host, REFILL, samples().1).await;
    host.cancel().await.unwrap();
    let docker_with = |pool: &'static str| {
        [
            ("EXECUTION_BACKEND", "docker"),
            ("SANDBOX_IMAGE", image.as_str()),
            ("SANDBOX_POOL_SIZE", pool),
        ]
    };
    let docker = server(&docker_with("2"), data.path()).await;
    let probe = docker
        .call_tool(call(
            "execute_python",
            json!({"code": "1", "session": "probe"}),
        ))
        .await
        .unwrap();
    assert_eq!(
        probe.structured_content.unwrap()["backend"],
        "docker",
        "no Docker engine or image: this benchmark needs both"
    );
    measure("docker (pool of 2)", &docker, REFILL, samples().1).await;
    docker.cancel().await.unwrap();
    // For scale: what the pool saves (each new session starts its own container).
    let cold = server(&docker_with("0"), data.path()).await;
    measure("docker (no pool)", &cold, Duration::ZERO, samples().2).await;
    cold.cancel().await.unwrap();
}
