//! Start-up with a long audit log: the log is built with 1,000,000 records (through the
//! real append path, several segments), then the time to open it (what every server does
//! at start: key, lock, signed checkpoint, check what was not checked before) is measured
//! beside the same for a 1,000-record log, a full `audit-verify` of the long log (what
//! start-up used to cost), and the whole server's start to an answered MCP `initialize`
//! with each log. Run with `cargo bench --bench audit`; `WARDEN_BENCH_QUICK=1` uses
//! 20,000 records. Prints p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use warden::audit::{AuditEvent, AuditLog};

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let idx = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[idx].as_secs_f64() * 1000.0
}

fn report(name: &str, samples: &mut [Duration]) {
    println!(
        "{name:<52} n={:<4} p50={:>8.2} ms  p95={:>8.2} ms",
        samples.len(),
        percentile(samples, 0.50),
        percentile(samples, 0.95)
    );
}

/// A data directory whose audit log holds `n` records (plus the genesis note).
fn build(n: u64) -> tempfile::TempDir {
    let data = tempfile::Builder::new()
        .prefix("warden-bench-audit-")
        .tempdir()
        .unwrap();
    warden::os::set_mode(data.path(), 0o711).unwrap();
    let log = AuditLog::open(&data.path().join("audit"), "bench-writer");
    let started = Instant::now();
    for i in 0..n {
        log.record(AuditEvent {
            detail: format!("ZeroDivisionError: division by zero (call {i})"),
            args_sha256: Some(warden::audit::sha256_hex(&i.to_le_bytes())),
            duration_ms: Some(3),
            ..AuditEvent::now("default", "execute", "ok")
        })
        .unwrap();
    }
    drop(log);
    let bytes: u64 = std::fs::read_dir(data.path().join("audit"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    println!(
        "built a log of {n} records ({} MiB) in {:.1} s ({:.1} µs per append)",
        bytes >> 20,
        started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    data
}

fn open_times(data: &Path, runs: usize) -> Vec<Duration> {
    (0..runs)
        .map(|i| {
            let t = Instant::now();
            let log = AuditLog::open(&data.join("audit"), &format!("bench-{i}"));
            let took = t.elapsed();
            assert!(log.warnings().is_empty(), "{:?}", log.warnings());
            drop(log);
            took
        })
        .collect()
}

/// From spawning `warden serve` to its answer to `initialize`.
async fn server_start(data: &Path, runs: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for _ in 0..runs {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
        cmd.arg("serve")
            .env("SANDBOX_DATA_DIR", data)
            .env("SANDBOX_PYTHON", "/usr/bin/python3");
        let t = Instant::now();
        let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        out.push(t.elapsed());
        client.cancel().await.unwrap();
    }
    out
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let quick = std::env::var_os("WARDEN_BENCH_QUICK").is_some();
    let long = if quick { 20_000 } else { 1_000_000 };
    let big = build(long);
    let small = build(1_000);
    let runs = if quick { 10 } else { 50 };
    report(
        &format!("open the audit log: {long} records"),
        &mut open_times(big.path(), runs),
    );
    report(
        "open the audit log: 1000 records",
        &mut open_times(small.path(), runs),
    );
    let t = Instant::now();
    let full = warden::audit::verify_dir(&big.path().join("audit")).unwrap();
    assert!(full.clean());
    report(
        &format!("full check (audit-verify): {} records", full.records),
        &mut [t.elapsed()],
    );
    let runs = if quick { 3 } else { 10 };
    report(
        &format!("server start to initialize: {long} records"),
        &mut server_start(big.path(), runs).await,
    );
    report(
        "server start to initialize: 1000 records",
        &mut server_start(small.path(), runs).await,
    );
}
