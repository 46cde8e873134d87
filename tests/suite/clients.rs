//! Real MCP clients from npm against the real binary: the MCP Inspector CLI lists and
//! calls every tool over stdio and over HTTP with the bearer token (arguments given as
//! `--tool-arg` strings, which it converts by the schema's types), and gets nowhere
//! without it; Claude Code's `claude mcp list` health check reports warden connected,
//! over HTTP with the token as a header. No schema warnings from either. The MCP Bundle
//! is packed, unpacked and started the way a desktop client starts it.
//!
//! The clients come from `.ci/run` (pinned in tests/clients/package.json, installed into
//! target/ci-npm), which exports `WARDEN_TEST_NPM_BIN`. Under CI=true a missing client is
//! a failure; elsewhere these tests say they were skipped.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

use super::http::HttpServer;
use super::*;

/// The npm clients' bin directory, or `None` (skipped) outside CI.
fn npm_bin() -> Option<PathBuf> {
    match std::env::var_os("WARDEN_TEST_NPM_BIN") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("CI").is_some() => {
            panic!("CI=true but WARDEN_TEST_NPM_BIN is not set: .ci/run installs the npm clients")
        }
        None => {
            eprintln!("skipped: WARDEN_TEST_NPM_BIN is not set (run .ci/run for the npm clients)");
            None
        }
    }
}

/// A client command with Node 22 first on PATH, a throwaway HOME, and no traffic of its
/// own (no update checks, no telemetry).
fn client(bin: &std::path::Path, program: &str, home: &std::path::Path) -> Command {
    let mut cmd = Command::new(bin.join(program));
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("PATH", path)
        .env("HOME", home)
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DO_NOT_TRACK", "1")
        .env("NO_COLOR", "1")
        .current_dir(home);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run an npm client");
    eprintln!(
        "{cmd:?}\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The server part of an Inspector command line: a stdio command, or an HTTP URL.
enum Target<'a> {
    Stdio(&'a std::path::Path),
    /// The URL, and the bearer token.
    Http(&'a str, &'a str),
}

fn inspector(
    bin: &std::path::Path,
    home: &std::path::Path,
    target: &Target,
    args: &[&str],
) -> Output {
    let mut cmd = client(bin, "inspector", home);
    cmd.arg("--cli");
    match target {
        Target::Stdio(data) => {
            cmd.args(["-e", &format!("SANDBOX_DATA_DIR={}", data.display())])
                .args(["-e", "SANDBOX_PYTHON=/usr/bin/python3"])
                .args([BIN, "serve"]);
        }
        Target::Http(url, token) => {
            cmd.arg(url)
                .args(["--header", &format!("Authorization: Bearer {token}")]);
        }
    }
    cmd.args(args);
    run(&mut cmd)
}

/// Calls a tool through the Inspector; returns the CallToolResult JSON.
fn call(
    bin: &std::path::Path,
    home: &std::path::Path,
    target: &Target,
    tool: &str,
    args: &[&str],
) -> Value {
    let mut all = vec!["--method", "tools/call", "--tool-name", tool];
    if !args.is_empty() {
        all.push("--tool-arg");
        all.extend_from_slice(args);
    }
    let out = inspector(bin, home, target, &all);
    let result: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{tool}: not JSON: {e}"));
    // The Inspector exits non-zero exactly for a tool result with isError.
    assert_eq!(
        out.status.success(),
        result["isError"] != true,
        "{tool}: exit {} for {result}",
        out.status
    );
    result
}

fn every_tool_through_the_inspector(bin: &std::path::Path, target: &Target) {
    let home = tempfile::tempdir().unwrap();
    let out = inspector(
        bin,
        home.path(),
        target,
        &["--method", "tools/list", "--strict"],
    );
    assert!(
        out.status.success(),
        "tools/list --strict failed (exit 6: a schema error)"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.to_lowercase().contains("warning"),
        "schema warnings: {stderr}"
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in [
        "execute_python",
        "request_grant",
        "reset_session",
        "list_grants",
        "selftest",
    ] {
        assert!(names.contains(&tool), "{tool} not in {names:?}");
    }

    // Strings on the command line become a number (`timeout_s`) and an object (`inputs`)
    // because the schema says so.
    let r = call(
        bin,
        home.path(),
        target,
        "execute_python",
        &[
            "code=print(open('in.txt').read() * 2)",
            "session=cli",
            "timeout_s=2.5",
            r#"inputs={"in.txt": "ab"}"#,
        ],
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["stdout"], "abab\n", "{r}");
    let r = call(
        bin,
        home.path(),
        target,
        "execute_python",
        &["code=print(1)", "timeout_s=0"],
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(r.to_string().contains("`timeout_s`"), "{r}");

    let r = call(bin, home.path(), target, "list_grants", &["session=cli"]);
    assert_eq!(r["isError"], false, "{r}");
    assert!(r["structuredContent"]["grants"].is_array(), "{r}");
    let r = call(
        bin,
        home.path(),
        target,
        "reset_session",
        &["session=cli", "keep_files=true"],
    );
    assert!(r["structuredContent"]["ok"].is_boolean(), "{r}");
    let r = call(
        bin,
        home.path(),
        target,
        "request_grant",
        &[
            "path=/nonexistent-warden-test",
            "access=read",
            "reason=testing",
        ],
    );
    // Refused (no such path; nothing granted), as a result the model can read.
    assert_eq!(r["structuredContent"]["granted"], false, "{r}");
    let r = call(bin, home.path(), target, "selftest", &[]);
    assert!(r["structuredContent"].is_object(), "{r}");
}

#[test]
fn the_inspector_cli_lists_and_calls_every_tool_over_stdio_and_http() {
    let Some(bin) = npm_bin() else { return };
    let data = data_dir();
    every_tool_through_the_inspector(&bin, &Target::Stdio(data.path()));
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let url = format!("http://{}/mcp", server.addr);
    let token = server.token.clone().unwrap();
    every_tool_through_the_inspector(&bin, &Target::Http(&url, &token));
    // Without the token it gets nowhere.
    let home = tempfile::tempdir().unwrap();
    let mut cmd = client(&bin, "inspector", home.path());
    let out = run(cmd.args(["--cli", &url, "--method", "tools/list"]));
    assert!(
        !out.status.success(),
        "tools/list without the token succeeded"
    );
    server.stop();
}

#[test]
fn claude_code_reports_warden_connected_over_stdio_and_http() {
    let Some(bin) = npm_bin() else { return };
    let home = tempfile::tempdir().unwrap();
    let data = data_dir();
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let url = format!("http://{}/mcp", server.addr);
    let out = run(client(&bin, "claude", home.path()).args([
        "mcp",
        "add",
        "warden",
        "-e",
        &format!("SANDBOX_DATA_DIR={}", data.path().display()),
        "-e",
        "SANDBOX_PYTHON=/usr/bin/python3",
        "--",
        BIN,
        "serve",
    ]));
    assert!(out.status.success());
    let header = format!("Authorization: Bearer {}", server.token.clone().unwrap());
    let out = run(client(&bin, "claude", home.path()).args([
        "mcp",
        "add",
        "--transport",
        "http",
        "warden-http",
        &url,
        "--header",
        &header,
    ]));
    assert!(out.status.success());
    let out = run(client(&bin, "claude", home.path()).args(["mcp", "list"]));
    assert!(out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["warden:", "warden-http:"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} not listed: {text}"));
        assert!(line.contains("Connected"), "{line}");
    }
    assert!(!text.to_lowercase().contains("warn"), "{text}");
    assert!(!text.contains("uint64"), "{text}");
    server.stop();
}

/// The MCP Bundle, end to end: `tools/bundle.sh` validates the manifest and packs the
/// binary under test with the pinned mcpb; the bundle is unpacked and its launch
/// configuration computed by mcpb's own code (what a desktop client does, the user's
/// settings at their defaults); the Inspector starts warden exactly so and `selftest`
/// passes through it.
#[test]
fn the_mcp_bundle_validates_packs_and_starts_warden() {
    let Some(bin) = npm_bin() else { return };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("warden.mcpb");
    let out = run(Command::new(root.join("tools/bundle.sh"))
        .arg(BIN)
        .arg(&bundle)
        .env("MCPB_BIN", &bin));
    assert!(out.status.success(), "tools/bundle.sh failed");
    registry_entry_names(&bundle);
    let unpacked = work.path().join("unpacked");
    let modules = bin.parent().unwrap();
    let out = run(client(&bin, "node", work.path())
        .arg(root.join("tests/clients/bundle-config.mjs"))
        .arg(modules)
        .arg(&bundle)
        .arg(&unpacked));
    assert!(out.status.success(), "bundle-config.mjs failed");
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(config["version"], env!("CARGO_PKG_VERSION"), "{config}");
    let command = config["command"].as_str().unwrap();
    assert_eq!(
        std::path::Path::new(command),
        unpacked.join("server/warden"),
        "{config}"
    );
    let data = data_dir();
    let mut cmd = client(&bin, "inspector", work.path());
    cmd.arg("--cli")
        .args(["-e", &format!("SANDBOX_DATA_DIR={}", data.path().display())])
        .args(["-e", "SANDBOX_PYTHON=/usr/bin/python3"]);
    for (k, v) in config["env"].as_object().unwrap() {
        // The Inspector takes no empty value; for warden an empty setting is its default.
        let v = v.as_str().unwrap();
        if !v.is_empty() {
            cmd.args(["-e", &format!("{k}={v}")]);
        }
    }
    cmd.arg(command);
    for arg in config["args"].as_array().unwrap() {
        cmd.arg(arg.as_str().unwrap());
    }
    let out = run(cmd.args(["--method", "tools/call", "--tool-name", "selftest"]));
    assert!(out.status.success(), "selftest through the bundle failed");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        result["structuredContent"]["failing_required"],
        serde_json::json!([]),
        "{result}"
    );
}

/// The MCP Registry entry written beside the bundle holds to the registry's schema
/// (2025-09-29: a reverse-DNS name, a description of at most 100 characters, a pinned
/// version) and names this bundle by its SHA-256.
fn registry_entry_names(bundle: &std::path::Path) {
    use sha2::Digest;
    let text = std::fs::read_to_string(bundle.with_extension("server.json")).unwrap();
    let entry: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        entry["$schema"],
        "https://static.modelcontextprotocol.io/schemas/2025-09-29/server.schema.json"
    );
    let name = entry["name"].as_str().unwrap();
    assert!(
        regex::Regex::new(r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$")
            .unwrap()
            .is_match(name),
        "{name}"
    );
    let description = entry["description"].as_str().unwrap();
    assert!(
        (1..=100).contains(&description.chars().count()),
        "{description}"
    );
    assert_eq!(entry["version"], env!("CARGO_PKG_VERSION"));
    let package = &entry["packages"][0];
    assert_eq!(package["registryType"], "mcpb");
    assert_eq!(package["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(package["transport"]["type"], "stdio");
    let sha: String = sha2::Sha256::digest(std::fs::read(bundle).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(package["fileSha256"], sha.as_str());
}
