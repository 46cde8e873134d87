//! Latency of a warm `execute_python("print(1+1)")` over streamable HTTP against the
//! release binary (`warden serve --http` on loopback, every request with the bearer
//! token it generated): a stateless 2026-07-28 client
//! (one POST, one fresh connection per call), and a 2025-11-25 session (SSE reply).
//! Run with `cargo bench --bench http`; prints p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CALLS: usize = 300;

/// One POST; returns the response headers and body.
fn post(addr: &str, headers: &[(&str, String)], body: &Value) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let payload = serde_json::to_vec(body).unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        payload.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(&payload).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    (head.to_string(), body.to_string())
}

fn call(code: &str, id: u64, stateless: bool) -> Value {
    let mut params = json!({"name": "execute_python", "arguments": {"code": code}});
    if stateless {
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {}});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

fn measure(addr: &str, headers: &[(&str, String)], stateless: bool, name: &str) {
    let mut samples = Vec::with_capacity(CALLS);
    for i in 0..CALLS + 10 {
        let started = Instant::now();
        let (_, body) = post(addr, headers, &call("print(1+1)", i as u64 + 10, stateless));
        let took = started.elapsed();
        assert!(body.contains(r#"\"stdout\": \"2\\n\""#), "{body}");
        if i >= 10 {
            samples.push(took);
        }
    }
    support::row(name, support::stats(&samples), None, None);
}

fn main() {
    let data = support::data_dir();
    let mut child = support::warden_command(support::warden_bin(), data.path())
        .args(["serve", "--http", "127.0.0.1:0"])
        .env("WARDEN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split("http://")
                .nth(1)
                .map(|r| r.trim_end_matches("/mcp").to_string())
        })
        .expect("address printed");
    // The token it generated in the fresh data directory (the last word of its line).
    let token = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("bearer token (generated"))
        .and_then(|l| l.rsplit(' ').next().map(str::to_string))
        .expect("token printed");
    let auth = ("Authorization", format!("Bearer {token}"));
    std::thread::spawn(move || lines.for_each(drop));

    let stateless = [
        auth.clone(),
        ("MCP-Protocol-Version", "2026-07-28".to_string()),
        ("Mcp-Method", "tools/call".to_string()),
        ("Mcp-Name", "execute_python".to_string()),
    ];
    measure(
        &addr,
        &stateless,
        true,
        "HTTP stateless (2026-07-28), warm print(1+1)",
    );

    let (head, _) = post(
        &addr,
        std::slice::from_ref(&auth),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}),
    );
    let session = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_string())
        })
        .expect("session id");
    let with_session = [
        auth,
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", "2025-11-25".to_string()),
    ];
    post(
        &addr,
        &with_session,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    measure(
        &addr,
        &with_session,
        false,
        "HTTP session (2025-11-25, SSE), warm print(1+1)",
    );

    stop(&mut child);
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(100));
}

/// Asks the server to stop as a service manager would (SIGTERM; Windows: kill).
fn stop(child: &mut std::process::Child) {
    #[cfg(unix)]
    // SAFETY: SIGTERM to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM)
    };
    #[cfg(not(unix))]
    let _ = child.kill();
}
