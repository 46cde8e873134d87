//! Every client file in `examples/` works as written: for a client that launches warden
//! (Claude Desktop, Claude Code, VS Code, Cursor, the Inspector), the server is started
//! with exactly the file's command, arguments and environment (the binary under test in
//! place of the placeholder path); for one that connects over HTTP, with the file's URL
//! path and its `Authorization` header, the variable in it standing for the token. Each
//! then calls `selftest` through that server, and every required probe is blocked.

use std::path::Path;

use serde_json::{Value, json};

use super::http::HttpServer;
use super::{As, Server, data_dir};

/// The placeholder every stdio example uses for the binary.
const PLACEHOLDER: &str = "/path/to/warden/target/release/warden";

fn example(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The `warden` entry of a client file (`mcpServers` or VS Code's `servers`).
fn entry(file: &Value) -> &Value {
    let servers = file
        .get("mcpServers")
        .or_else(|| file.get("servers"))
        .expect("mcpServers or servers");
    &servers["warden"]
}

fn assert_selftest_passes(name: &str, report: &Value) {
    assert_eq!(report["resolved_backend"], "host", "{name}: {report}");
    assert_eq!(report["failing_required"], json!([]), "{name}: {report:#}");
}

#[tokio::test]
async fn every_stdio_example_starts_warden_and_selftest_passes() {
    for name in [
        "claude_desktop_config.json",
        "claude_code.mcp.json",
        "cursor/mcp.json",
        "inspector.json",
        "vscode/mcp.json",
    ] {
        let file = example(name);
        let warden = entry(&file);
        assert_eq!(warden["command"], PLACEHOLDER, "{name}");
        if let Some(kind) = warden.get("type") {
            assert_eq!(kind, "stdio", "{name}");
        }
        let args: Vec<&str> = warden["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let data = data_dir();
        let mut cmd = tokio::process::Command::new(super::BIN);
        cmd.args(&args)
            .env("SANDBOX_DATA_DIR", data.path())
            .env("SANDBOX_PYTHON", "/usr/bin/python3");
        for (k, v) in warden
            .get("env")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            cmd.env(k, v.as_str().unwrap());
        }
        let server = Server::from_command(cmd, data, As::Root).await;
        let r = server.call("selftest", json!({})).await.unwrap();
        assert_ne!(r.is_error, Some(true), "{name}");
        assert_selftest_passes(name, r.structured_content.as_ref().unwrap());
        server.stop().await;
    }
}

#[test]
fn every_http_example_reaches_warden_with_its_header_and_selftest_passes() {
    let token = "example-token-0123456789abcdef";
    let server = HttpServer::start("127.0.0.1:0", &[("SANDBOX_HTTP_TOKEN", token)]);
    for (name, variable) in [
        ("claude_code_http.mcp.json", "${WARDEN_TOKEN}"),
        ("claude_code_http_token.mcp.json", "${WARDEN_TOKEN}"),
        ("vscode/mcp_http.json", "${input:warden-token}"),
        ("vscode/mcp_http_token.json", "${input:warden-token}"),
    ] {
        let file = example(name);
        let warden = entry(&file);
        assert_eq!(warden["type"], "http", "{name}");
        let url = warden["url"].as_str().unwrap();
        assert!(url.ends_with("/mcp"), "{name}: {url}");
        let header = warden["headers"]["Authorization"].as_str().unwrap();
        assert_eq!(header, format!("Bearer {variable}"), "{name}");
        let mut client = server.client();
        client.token = Some(header.replace(variable, token)["Bearer ".len()..].to_string());
        client.initialize(json!({}));
        let r = client.call("selftest", json!({}));
        assert_ne!(r["isError"], true, "{name}: {r}");
        assert_selftest_passes(name, &r["structuredContent"]);
    }
    server.stop();
}
