//! Shared harness: start a server with chosen settings, call tools, inspect the host.

pub mod args;
pub mod audit;
pub mod benign;
pub mod fail_closed;

pub mod grants;
pub mod guard_mcp;
pub mod lifecycle;
pub mod mcp;
pub mod redteam;
pub mod selftest;
pub mod settings;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_warden");

/// A running server and the temporary data directory it owns.
pub struct Server {
    pub client: RunningService<RoleClient, ()>,
    pub data_dir: tempfile::TempDir,
}

/// Where the server runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// The host's network namespace: only for loopback targets.
    Host,
    /// A network namespace made for the test: loopback plus a veth pair whose route to
    /// 192.0.2.0/24 leads nowhere, so nothing can leave this machine even if the sandbox
    /// under test is broken, and a failed block shows up as a timeout.
    Isolated,
}

/// A data directory the unprivileged sandbox uids can traverse.
pub fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("warden-test-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    dir
}

const NETNS_SETUP: &str = "set -e; ip link set lo up; \
ip link add wt0 type veth peer name wt1; \
ip addr add 198.51.100.1/24 dev wt0; ip link set wt0 up; ip link set wt1 up; \
ip route add 192.0.2.0/24 via 198.51.100.2 dev wt0; \
exec \"$0\" serve";

/// The server command line for a test: netns wrapper, settings, data dir.
pub fn server_command(
    net: Net,
    env: &[(&str, &str)],
    extra_args: &[&str],
    data_dir: &Path,
) -> tokio::process::Command {
    let mut cmd = match net {
        Net::Host => {
            let mut c = tokio::process::Command::new(BIN);
            c.arg("serve").args(extra_args);
            c
        }
        Net::Isolated => {
            let mut c = tokio::process::Command::new("unshare");
            c.args(["--net", "--", "sh", "-c", NETNS_SETUP, BIN]);
            c
        }
    };
    cmd.env("SANDBOX_DATA_DIR", data_dir)
        .env("WARDEN_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        // Debian's CPython by default, so that results do not depend on PATH; a test can
        // pass SANDBOX_PYTHON="" to exercise the default resolution.
        .env("SANDBOX_PYTHON", "/usr/bin/python3")
        // Sandbox tests exercise the OS layer with code the guard would stop first; the
        // guard's own suites (guard_mcp, benign) switch it back on.
        .env("CODEGUARD", "off");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

impl Server {
    pub async fn start(env: &[(&str, &str)]) -> Server {
        Server::start_in(Net::Host, env).await
    }

    pub async fn start_in(net: Net, env: &[(&str, &str)]) -> Server {
        let data_dir = data_dir();
        let cmd = server_command(net, env, &[], data_dir.path());
        let (transport, _stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn warden");
        let client = ().serve(transport).await.expect("MCP initialize");
        Server { client, data_dir }
    }

    /// Calls a tool; protocol errors are returned as Err.
    pub async fn call(&self, tool: &'static str, args: Value) -> Result<CallToolResult, String> {
        let Value::Object(map) = args else {
            panic!("arguments must be an object")
        };
        self.client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(map))
            .await
            .map_err(|e| e.to_string())
    }

    /// Runs code and returns the structured result.
    pub async fn exec(&self, args: Value) -> Value {
        let result = self.call("execute_python", args).await.expect("call");
        result
            .structured_content
            .clone()
            .expect("structuredContent")
    }

    pub async fn run(&self, session: &str, code: &str) -> Value {
        self.exec(json!({"session": session, "code": code})).await
    }

    /// Closes the connection and waits until the server has removed its workspaces,
    /// which it does last, after killing its workers.
    pub async fn stop(self) {
        let _ = self.client.cancel().await;
        let sessions = self.data_dir.path().join("sessions");
        let cleaned = eventually(10, || {
            std::fs::read_dir(&sessions)
                .map(|mut d| d.next().is_none())
                .unwrap_or(true)
        })
        .await;
        assert!(
            cleaned,
            "the server left workspaces in {}",
            sessions.display()
        );
    }
}

/// The stdout of a result.
pub fn stdout(v: &Value) -> &str {
    v["stdout"].as_str().unwrap_or_default()
}

/// Every file under `root` whose name starts with `prefix` (no symlinks followed).
pub fn find_files(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p.clone());
            }
            if e.file_name().to_string_lossy().starts_with(prefix) {
                found.push(p);
            }
        }
    }
    found
}

/// Pids of live processes whose real uid is `uid`.
pub fn processes_of_uid(uid: u64) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let state_zombie = status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'));
        let real_uid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|u| u.parse::<u64>().ok());
        if real_uid == Some(uid) && !state_zombie {
            pids.push(pid);
        }
    }
    pids
}

/// Waits up to `secs` for `cond`.
pub async fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if cond() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    cond()
}

/// Whether `python -c import <module>` works for the interpreter the sandbox uses.
pub fn sandbox_python_has(module: &str) -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-I", "-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The Python that runs test clients (the MCP SDK): `WARDEN_TEST_PYTHON` (a venv that
/// `.ci/run` makes, since Debian's pip refuses global installs), else `python3`.
pub fn test_python() -> std::ffi::OsString {
    std::env::var_os("WARDEN_TEST_PYTHON").unwrap_or_else(|| "python3".into())
}

pub fn corpus(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(kind)
}
