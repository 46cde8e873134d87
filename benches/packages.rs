//! What the sandboxed installer costs: the same 30 MB wheel installed from the same
//! local PEP 503 index (plain HTTP on loopback, its name pinned for warden's proxy),
//! once by `install_packages` (the installer's world, its proxy, pip's download and
//! offline install, the copy into the stage, the server's hashing and the switch of the
//! layer) and once by an unsandboxed `python3 -m pip install --target` straight from the
//! index, in the same run. Each side is timed from outside, one install per sample, and
//! the ratio printed. `cargo bench --bench packages`; `WARDEN_BENCH_QUICK=1` takes fewer
//! samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Client, n, row, stats};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/wheel_index.py");
const WHEEL_MB: &str = "30";

fn main() {
    support::bench_main(run);
}

/// The index with its 30 MB wheel, served on loopback; the port it listens on.
fn index(dir: &std::path::Path) -> (std::process::Child, u16) {
    let built = std::process::Command::new(support::PYTHON)
        .args([SCRIPT, "build"])
        .arg(dir.join("index"))
        .args(["--large-mb", WHEEL_MB])
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = std::process::Command::new(support::PYTHON)
        .args([SCRIPT, "serve"])
        .arg(dir.join("index"))
        .args(["127.0.0.1", &port.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "the index did not start");
    (server, port)
}

/// One unsandboxed `pip install --target` of the wheel from the index.
fn direct(port: u16, target: &std::path::Path) -> Duration {
    let _ = std::fs::remove_dir_all(target);
    let t = Instant::now();
    let out = std::process::Command::new(support::PYTHON)
        .args([
            "-m",
            "pip",
            "install",
            "--isolated",
            "--quiet",
            "--no-cache-dir",
        ])
        .args(["--disable-pip-version-check", "--only-binary", ":all:"])
        .args(["--index-url", &format!("http://127.0.0.1:{port}/simple/")])
        .arg("--target")
        .arg(target)
        .arg("wlarge")
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, port) = index(dir.path());
    println!(
        "install_packages: release build, host backend, a {WHEEL_MB} MB wheel from a PEP 503 index on loopback, {} mode",
        if support::quick() { "quick" } else { "full" }
    );
    let url = format!("http://index.test:{port}/simple");
    let client = Client::warden(&[
        ("SANDBOX_PACKAGE_INDEX", &url),
        ("SANDBOX_EGRESS_RESOLVE", "index.test=127.0.0.1"),
    ])
    .await;
    let count = n(5, 2);
    let mut sandboxed = Vec::new();
    let mut baseline = Vec::new();
    for i in 0..count {
        let t = Instant::now();
        let r = client
            .tool(
                "install_packages",
                json!({"packages": ["wlarge"], "session": format!("p{i}")}),
            )
            .await;
        sandboxed.push(t.elapsed());
        assert_eq!(r["ok"], true, "{r}");
        baseline.push(direct(port, &dir.path().join("direct")));
    }
    let (s, b) = (stats(&sandboxed), stats(&baseline));
    row("install a 30 MB wheel", s, Some(b), None);
    println!(
        "  {:.2}× an unsandboxed pip install --target; target ≤ 1.3×",
        s.p50_ms / b.p50_ms
    );
    client.stop().await;
    let _ = server.kill();
    let _ = server.wait();
}
