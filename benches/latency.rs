//! End-to-end latency through a real MCP client (rmcp over stdio) against the release
//! binary: first call of a new session (spawning the sandboxed worker), warm
//! `print(1+1)`, and beside them a plain unsandboxed `python3 -c` subprocess.
//! Run with `cargo bench --bench latency`; prints p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

const WARM_CALLS: usize = 500;
/// With the 32 concurrent ones and the warm one, within the server's 64-session cap.
const COLD_SESSIONS: usize = 30;
const PLAIN_RUNS: usize = 40;
const CONCURRENT: usize = 32;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let idx = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[idx].as_secs_f64() * 1000.0
}

fn report(name: &str, samples: &mut [Duration]) {
    println!(
        "{name:<44} n={:<4} p50={:>7.2} ms  p95={:>7.2} ms",
        samples.len(),
        percentile(samples, 0.50),
        percentile(samples, 0.95)
    );
}

fn args(code: &str, session: &str) -> CallToolRequestParams {
    let serde_json::Value::Object(map) = json!({"code": code, "session": session}) else {
        unreachable!()
    };
    CallToolRequestParams::new("execute_python").with_arguments(map)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let data = tempfile::Builder::new()
        .prefix("warden-bench-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("serve")
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3");
    let transport = TokioChildProcess::new(cmd).unwrap();
    let server_pid = transport.id().unwrap();
    let client = ().serve(transport).await.unwrap();
    let idle_rss_kib = rss_kib(server_pid);

    // 32 sessions at once on this machine's cores: every call must come back right.
    let started = Instant::now();
    let calls = (0..CONCURRENT).map(|i| {
        let client = &client;
        async move {
            let t = Instant::now();
            let r = client
                .call_tool(args("print(sum(range(1000)))", &format!("conc{i}")))
                .await
                .unwrap();
            (
                t.elapsed(),
                r.structured_content.unwrap()["stdout"] == "499500\n",
            )
        }
    });
    let results = futures::future::join_all(calls).await;
    let wall = started.elapsed();
    let lost = results.iter().filter(|(_, ok)| !ok).count();
    let mut concurrent: Vec<Duration> = results.into_iter().map(|(d, _)| d).collect();

    let mut cold = Vec::new();
    for i in 0..COLD_SESSIONS {
        let t = Instant::now();
        let r = client
            .call_tool(args("print(1+1)", &format!("cold{i}")))
            .await
            .unwrap();
        cold.push(t.elapsed());
        assert_eq!(r.structured_content.unwrap()["stdout"], "2\n");
    }

    client.call_tool(args("print(1+1)", "warm")).await.unwrap();
    let mut warm = Vec::new();
    for _ in 0..WARM_CALLS {
        let t = Instant::now();
        let r = client.call_tool(args("print(1+1)", "warm")).await.unwrap();
        warm.push(t.elapsed());
        assert_eq!(r.structured_content.unwrap()["stdout"], "2\n");
    }

    let mut plain = Vec::new();
    for _ in 0..PLAIN_RUNS {
        let t = Instant::now();
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-c", "print(1+1)"])
            .output()
            .unwrap();
        plain.push(t.elapsed());
        assert_eq!(out.stdout, b"2\n");
    }

    println!("warden latency (client to result, host backend, release build)");
    report("first call of a new session (spawn worker)", &mut cold);
    report("warm execute_python(\"print(1+1)\")", &mut warm);
    report("plain python3 -c subprocess (no sandbox)", &mut plain);
    report("32 new sessions at once, each call", &mut concurrent);
    println!(
        "32 concurrent sessions: all done in {:.0} ms, {lost} lost; server idle RSS {:.1} MB",
        wall.as_secs_f64() * 1000.0,
        idle_rss_kib as f64 / 1024.0
    );
    client.cancel().await.unwrap();
}
