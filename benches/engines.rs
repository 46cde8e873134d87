//! Past one engine, in one run, each figure beside its baseline:
//!
//! - **placement**: picking the engine of a new session among three
//!   (`warden::backend::docker::fleet::place`), beside picking among one;
//! - **a TLS engine**: a warm call and a new session's first call through TCP+TLS (a
//!   TLS endpoint on loopback in front of the local engine, certificates made for the
//!   run), beside the same engine over its UNIX socket;
//! - **files over the engine's API**: a warm call of a session whose in-container
//!   workspace holds 1 MB (`SANDBOX_WORKSPACE=in-container`: the workspace is copied back
//!   after every call), beside the same call with an empty in-container workspace and
//!   with a host workspace.
//!
//! Needs a Docker engine and the image of `tools/build-image.sh` (`WARDEN_BENCH_IMAGE`).
//! Run with `cargo bench --bench engines`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;
#[cfg(target_os = "linux")]
#[path = "../tests/suite/tls.rs"]
mod tls;

use std::time::Instant;

use support::{Client, n, row, stats};
use warden::backend::docker::fleet::{Load, place};

const PRINT: &str = "print(1+1)";

fn main() {
    support::bench_main(bench);
}

async fn bench() {
    placement();
    let image =
        std::env::var("WARDEN_BENCH_IMAGE").unwrap_or_else(|_| "warden-sandbox:latest".into());
    let ready = std::process::Command::new("docker")
        .args(["image", "inspect", &image])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        println!("engines: no Docker engine or no image {image}; skipped the engine figures");
        return;
    }
    tls_engine(&image).await;
    files_over_the_api(&image).await;
}

/// Nanoseconds per call of `place` over `loads`, the best of five rounds.
fn per_place(loads: &[Load], rounds: usize) -> f64 {
    (0..5)
        .map(|_| {
            let started = Instant::now();
            for i in 0..rounds {
                let mut l = loads.to_vec();
                l[0].placed = i % 7;
                std::hint::black_box(place(std::hint::black_box(&l)));
            }
            started.elapsed().as_nanos() as f64 / rounds as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn placement() {
    let engine = |placed| Load {
        up: true,
        capacity: 64,
        placed,
    };
    let rounds = n(1_000_000, 200_000);
    let one = per_place(&[engine(3)], rounds);
    let three = per_place(&[engine(3), engine(5), engine(1)], rounds);
    println!("engines: placement");
    println!(
        "  pick an engine for a new session, 3 engines: {:.1} ns ({:.2}× one engine's {:.1} ns); target ≤ 0.2 ms",
        three,
        three / one,
        one
    );
}

/// Warm call and new session of the server `env` configures.
#[cfg(target_os = "linux")]
async fn figures(env: &[(&str, &str)]) -> (support::Stats, support::Stats) {
    let client = Client::warden(env).await;
    let mut new = Vec::new();
    for i in 0..n(10, 4) {
        let name = format!("new{i}");
        new.push(client.timed(&name, PRINT, Some("2\n")).await);
        client
            .tool("reset_session", serde_json::json!({"session": name}))
            .await;
    }
    client.call("warm", PRINT).await;
    let mut warm = Vec::new();
    for _ in 0..n(300, 50) {
        warm.push(client.timed("warm", PRINT, Some("2\n")).await);
    }
    client.stop().await;
    (stats(&warm), stats(&new))
}

/// The TLS endpoint of the run is the tests' (rustls, a Linux dev-dependency).
#[cfg(not(target_os = "linux"))]
async fn tls_engine(_image: &str) {
    println!("engines: the TLS engine figures are taken on Linux");
}

#[cfg(target_os = "linux")]
async fn tls_engine(image: &str) {
    let pki = tempfile::tempdir().unwrap();
    let dir = pki.path();
    tls::make_ca(dir, "engine-ca");
    tls::make_ca(dir, "client-ca");
    tls::make_cert(dir, "engine-ca", "engine", "serverAuth");
    tls::make_cert(dir, "client-ca", "client", "clientAuth");
    let certs = dir.join("certs");
    std::fs::create_dir(&certs).unwrap();
    for (from, to) in [
        ("engine-ca.pem", "ca.pem"),
        ("client.pem", "cert.pem"),
        ("client-key.pem", "key.pem"),
    ] {
        std::fs::copy(dir.join(from), certs.join(to)).unwrap();
    }
    let (addr, _, task) = tls::tls_engine(dir, "engine", "client-ca").await;
    let hosts = format!("tcp://{addr};cert-dir={}", certs.display());
    let base = [
        ("EXECUTION_BACKEND", "docker"),
        ("SANDBOX_IMAGE", image),
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_LAUNCHER", "bind"),
    ];
    let (local_warm, local_new) = figures(&base).await;
    let mut over_tls = base.to_vec();
    over_tls.push(("SANDBOX_DOCKER_HOSTS", &hosts));
    let (tls_warm, tls_new) = figures(&over_tls).await;
    task.abort();
    println!("engines: a TCP+TLS engine beside the local socket (same dockerd, no warm pool)");
    row(
        "TLS engine: warm print(1+1)",
        tls_warm,
        Some(local_warm),
        None,
    );
    row(
        "TLS engine: first call of a new session",
        tls_new,
        Some(local_new),
        None,
    );
}

/// Warm calls of a session whose workspace holds `bytes`, under `env`.
async fn warm_with(env: &[(&str, &str)], bytes: usize) -> support::Stats {
    let client = Client::warden(env).await;
    let fill = format!("open('data.bin', 'wb').write(bytes({bytes}))");
    client.call("w", &fill).await;
    let mut warm = Vec::new();
    for _ in 0..n(100, 30) {
        warm.push(client.timed("w", PRINT, Some("2\n")).await);
    }
    client.stop().await;
    stats(&warm)
}

async fn files_over_the_api(image: &str) {
    let env = |place: &'static str| {
        [
            ("EXECUTION_BACKEND", "docker"),
            ("SANDBOX_IMAGE", image),
            ("SANDBOX_POOL_SIZE", "0"),
            ("SANDBOX_WORKSPACE", place),
        ]
    };
    let host = warm_with(&env("host"), 1 << 20).await;
    let empty = warm_with(&env("in-container"), 0).await;
    let full = warm_with(&env("in-container"), 1 << 20).await;
    println!("engines: an in-container workspace, copied back after every call");
    row(
        "in-container, 1 MB workspace: warm print(1+1)",
        full,
        Some(host),
        None,
    );
    row(
        "in-container, empty workspace: warm print(1+1)",
        empty,
        Some(host),
        None,
    );
    let extra = full.p50_ms - empty.p50_ms;
    println!(
        "  1 MB out of an in-container workspace: {extra:.2} ms (p50, over an empty one); target ≤ 20 ms"
    );
}
