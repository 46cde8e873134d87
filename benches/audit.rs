//! Start-up with a long audit log: the log is built with 1,000,000 records (through the
//! real append path, several segments), then the time to open it (what every server does
//! at start: key, lock, signed checkpoint, check what was not checked before) is measured
//! beside the same for a 1,000-record log, a full `audit-verify` of the long log (what
//! start-up used to cost), and the whole server's start to an answered MCP `initialize`
//! with each log, beside the same run's references: the unsandboxed baseline server's
//! start and a bare `python3 -c pass` (see `support`). Run with `cargo bench --bench
//! audit`; `WARDEN_BENCH_QUICK=1` uses 20,000 records. Prints p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::{Client, Stats, row, stats};
use warden::audit::{AuditEvent, AuditLog};

/// A data directory whose audit log holds `n` records (plus the genesis note).
fn build(n: u64) -> tempfile::TempDir {
    let data = support::data_dir();
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
async fn server_start(data: &Path, runs: usize) -> Stats {
    let mut out = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let client = Client::warden_in(data, &[]).await;
        out.push(t.elapsed());
        client.stop().await;
    }
    stats(&out)
}

/// The references for a start: the unsandboxed baseline server's start to `initialize`,
/// and a bare interpreter's start (`python3 -c pass`, what the native reference pays to
/// exist), p50 in ms.
async fn reference_starts(runs: usize) -> (Stats, f64) {
    let scratch = tempfile::tempdir().unwrap();
    let mut base = Vec::new();
    let mut native = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let client = Client::baseline(scratch.path()).await;
        base.push(t.elapsed());
        client.stop().await;
        let t = Instant::now();
        let ok = std::process::Command::new(support::PYTHON)
            .args(["-c", "pass"])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        native.push(t.elapsed());
    }
    (stats(&base), stats(&native).p50_ms)
}

fn main() {
    support::bench_main(run);
}

async fn run() {
    let long = support::n(1_000_000, 20_000);
    let big = build(long as u64);
    let small = build(1_000);
    let runs = support::n(50, 10);
    row(
        &format!("open the audit log: {long} records"),
        stats(&open_times(big.path(), runs)),
        None,
        None,
    );
    row(
        "open the audit log: 1000 records",
        stats(&open_times(small.path(), runs)),
        None,
        None,
    );
    let t = Instant::now();
    let full = warden::audit::verify_dir(&big.path().join("audit")).unwrap();
    assert!(full.clean());
    row(
        &format!("full check (audit-verify): {} records", full.records),
        stats(&[t.elapsed()]),
        None,
        None,
    );
    let runs = support::n(10, 3);
    let (base, native) = reference_starts(runs).await;
    row(
        "baseline: python3 -c server start to initialize",
        base,
        None,
        Some(native),
    );
    row(
        &format!("server start to initialize: {long} records"),
        server_start(big.path(), runs).await,
        Some(base),
        Some(native),
    );
    row(
        "server start to initialize: 1000 records",
        server_start(small.path(), runs).await,
        Some(base),
        Some(native),
    );
}
