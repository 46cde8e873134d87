//! What the egress proxy costs: the same Python fetches an origin on this machine's
//! loopback, once through warden (`HOST_SANDBOX_NETWORK=proxy`, so every connection goes
//! through the proxy: the world's endpoint, the name judged, the connection made and
//! the bytes metered) and once as plain `python3 -I` with no proxy, in the same run.
//! Two figures, each timed inside Python so that neither side pays for MCP:
//! connection set-up (a fresh connection and a tiny response, per request) and a bulk
//! download (100 MB, 20 MB in quick mode). Prints both sides and their ratios.
//! `cargo bench --bench egress`; `WARDEN_BENCH_QUICK=1` takes fewer samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use support::{Client, n, row, stats};

/// An origin on loopback: `/tiny` answers two bytes, `/bulk` `bulk` bytes.
fn origin(bulk: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let body = vec![b'x'; bulk];
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let line = String::from_utf8_lossy(&head).to_string();
            let payload: &[u8] = if line.contains("/bulk") { &body } else { b"ok" };
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                payload.len()
            );
            let _ = conn.write_all(reply.as_bytes());
            let _ = conn.write_all(payload);
        }
    });
    port
}

/// Python that fetches `url` `count` times and prints one duration (seconds) per line;
/// `direct` switches the proxy off (the baseline).
fn code(url: &str, count: usize, direct: bool) -> String {
    let opener = if direct {
        "urllib.request.build_opener(urllib.request.ProxyHandler({}))"
    } else {
        "urllib.request.build_opener()"
    };
    format!(
        "import time, urllib.request\nopener = {opener}\nfor _ in range({count}):\n    t = time.perf_counter()\n    n = len(opener.open({url:?}).read())\n    print(time.perf_counter() - t)\n"
    )
}

fn samples(text: &str) -> Vec<Duration> {
    text.lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .map(Duration::from_secs_f64)
        .collect()
}

fn direct(code: &str) -> Vec<Duration> {
    let out = std::process::Command::new(support::PYTHON)
        .args(["-I", "-c", code])
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    samples(&String::from_utf8_lossy(&out.stdout))
}

fn main() {
    support::bench_main(run);
}

async fn run() {
    let bulk = if support::quick() {
        20 << 20
    } else {
        100 << 20
    };
    let port = origin(bulk);
    println!(
        "egress proxy: release build, host backend, origin on loopback, urllib timed inside Python, {} mode",
        if support::quick() { "quick" } else { "full" }
    );
    let allow = format!("origin.test:{port}");
    let client = Client::warden(&[
        ("HOST_SANDBOX_NETWORK", "proxy"),
        ("SANDBOX_EGRESS_ALLOW", &allow),
        ("SANDBOX_EGRESS_RESOLVE", "origin.test=127.0.0.1"),
        ("SANDBOX_EGRESS_LIMIT", "100g"),
        ("SANDBOX_TIMEOUT_S", "600"),
    ])
    .await;
    for (name, path, count) in [
        ("connection set-up + tiny response", "tiny", n(400, 60)),
        ("bulk download", "bulk", n(5, 2)),
    ] {
        let proxied_code = code(&format!("http://origin.test:{port}/{path}"), count, false);
        let r = client.call("egress", &proxied_code).await;
        let proxied = samples(r["stdout"].as_str().unwrap_or_default());
        assert_eq!(proxied.len(), count, "{r}");
        let baseline = direct(&code(
            &format!("http://127.0.0.1:{port}/{path}"),
            count,
            true,
        ));
        let (p, b) = (stats(&proxied), stats(&baseline));
        row(&format!("through the proxy: {name}"), p, Some(b), None);
        if path == "tiny" {
            println!(
                "  added per connection: {:.3} ms (p50); target ≤ 1 ms",
                p.p50_ms - b.p50_ms
            );
        } else {
            println!(
                "  {} MB: {:.2}× the direct download; target ≤ 1.1×",
                bulk >> 20,
                p.p50_ms / b.p50_ms
            );
        }
    }
    client.stop().await;
}
