//! The workspace change report's cost on a warm call, through a real MCP client (rmcp
//! over stdio) against the release binary: `print(1+1)` in an empty workspace, in one of
//! 10,000 files, and a call that rewrites one file of the 10,000 (the report must name
//! exactly it). Run with `cargo bench --bench workspace`; `WARDEN_BENCH_QUICK=1` takes
//! fewer samples. Prints p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

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

async fn call(client: &RunningService<rmcp::RoleClient, ()>, session: &str, code: &str) -> Value {
    let Value::Object(map) = json!({"code": code, "session": session, "timeout_s": 120}) else {
        unreachable!()
    };
    client
        .call_tool(CallToolRequestParams::new("execute_python").with_arguments(map))
        .await
        .unwrap()
        .structured_content
        .unwrap()
}

async fn timed(
    client: &RunningService<rmcp::RoleClient, ()>,
    session: &str,
    code: &str,
    runs: usize,
    check: impl Fn(&Value),
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let r = call(client, session, code).await;
        out.push(t.elapsed());
        check(&r);
    }
    out
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let runs = if std::env::var_os("WARDEN_BENCH_QUICK").is_some() {
        50
    } else {
        500
    };
    let data = tempfile::Builder::new()
        .prefix("warden-bench-")
        .tempdir()
        .unwrap();
    warden::os::set_mode(data.path(), 0o711).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("serve")
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3");
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();

    let ok = |r: &Value| assert_eq!(r["stdout"], "2\n", "{r}");
    call(&client, "empty", "print(1 + 1)").await;
    report(
        "warm print(1+1), empty workspace",
        &mut timed(&client, "empty", "print(1 + 1)", runs, ok).await,
    );

    let made = call(
        &client,
        "big",
        "from pathlib import Path\nfor d in range(100):\n    p = Path(f'd{d:02}')\n    p.mkdir()\n    for f in range(100):\n        (p / f'f{f:02}.csv').write_text('a,b\\n1,2\\n')\nprint('made')",
    )
    .await;
    assert_eq!(made["files_total"], 10_000, "{made}");
    report(
        "warm print(1+1), 10,000 files in the workspace",
        &mut timed(&client, "big", "print(1 + 1)", runs, |r| {
            ok(r);
            assert_eq!(r["files_total"], 0, "{r}");
        })
        .await,
    );
    report(
        "rewrite one file of 10,000 (reported exactly)",
        &mut timed(
            &client,
            "big",
            "from pathlib import Path\nPath('d42/f42.csv').write_text('x')",
            runs,
            |r| {
                assert_eq!(r["files_total"], 1, "{r}");
                assert_eq!(r["files"][0]["path"], "d42/f42.csv", "{r}");
            },
        )
        .await,
    );
    client.cancel().await.unwrap();
}
