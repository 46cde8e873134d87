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

/// Warm calls of `code` in a session whose workspace holds 1 MB, under `env`.
async fn warm_with(env: &[(&str, &str)], code: &str) -> support::Stats {
    let client = Client::warden(env).await;
    client.call("w", FILL).await;
    let mut warm = Vec::new();
    for _ in 0..n(100, 30) {
        warm.push(client.timed("w", code, Some("2\n")).await);
    }
    client.stop().await;
    stats(&warm)
}

/// Writes 1 MB into the workspace.
const FILL: &str = "open('data.bin', 'wb').write(bytes(1 << 20))";

async fn files_over_the_api(image: &str) {
    let env = |place: &'static str| {
        [
            ("EXECUTION_BACKEND", "docker"),
            ("SANDBOX_IMAGE", image),
            ("SANDBOX_POOL_SIZE", "0"),
            ("SANDBOX_WORKSPACE", place),
        ]
    };
    let rewrite = format!("{FILL}\n{PRINT}");
    let host_same = warm_with(&env("host"), PRINT).await;
    let host_rewrite = warm_with(&env("host"), &rewrite).await;
    let same = warm_with(&env("in-container"), PRINT).await;
    let rewritten = warm_with(&env("in-container"), &rewrite).await;
    println!("engines: an in-container workspace of 1 MB, beside a host workspace");
    row(
        "in-container: warm call, workspace unchanged",
        same,
        Some(host_same),
        None,
    );
    row(
        "in-container: warm call rewriting 1 MB (copied back)",
        rewritten,
        Some(host_rewrite),
        None,
    );
    let out = rewritten.p50_ms - host_rewrite.p50_ms;
    println!(
        "  1 MB out of an in-container workspace: {out:.2} ms (p50, over the same call with a host workspace); target ≤ 20 ms"
    );
    if let Some(floor) = archive_floor(image) {
        row(
            "the engine's archive endpoint alone, 1 MB",
            floor,
            None,
            None,
        );
        println!(
            "  of which the engine's archive endpoint: {:.2} ms (p50), warden's own part {:.2} ms",
            floor.p50_ms,
            out - floor.p50_ms
        );
    }
}

/// The engine's own time to serve a running container's 1 MB `/workspace` as an archive
/// (`GET /containers/ID/archive` on the local socket, read to the end): what no copy
/// through that endpoint can go below.
#[cfg(unix)]
fn archive_floor(image: &str) -> Option<support::Stats> {
    use std::io::{Read, Write};
    let run = std::process::Command::new("docker")
        .args([
            "run",
            "-d",
            "--network",
            "none",
            // A tmpfs volume, as a session's (the endpoint does not show `--tmpfs`).
            "--mount",
            "type=volume,dst=/workspace,volume-driver=local,volume-opt=type=tmpfs,volume-opt=device=tmpfs,volume-opt=o=size=4m",
        ])
        .args([
            image,
            "sh",
            "-c",
            "head -c 1048576 /dev/zero > /workspace/data.bin; exec sleep 300",
        ])
        .output()
        .ok()?;
    let id = String::from_utf8_lossy(&run.stdout).trim().to_string();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut samples = Vec::new();
    for _ in 0..n(50, 20) {
        let started = Instant::now();
        let mut sock = std::os::unix::net::UnixStream::connect("/var/run/docker.sock").ok()?;
        let request = format!(
            "GET /containers/{id}/archive?path=/workspace HTTP/1.0\r\nHost: docker\r\n\r\n"
        );
        sock.write_all(request.as_bytes()).ok()?;
        let mut body = Vec::new();
        sock.read_to_end(&mut body).ok()?;
        samples.push(started.elapsed());
        assert!(
            body.len() > 1 << 20,
            "the archive did not arrive: {} bytes",
            body.len()
        );
    }
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", "-v", &id])
        .output();
    Some(stats(&samples))
}

#[cfg(not(unix))]
fn archive_floor(_image: &str) -> Option<support::Stats> {
    None
}
