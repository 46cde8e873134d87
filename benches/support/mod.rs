//! What the end-to-end benches share: percentiles, an MCP client for the release binary,
//! the unsandboxed baseline server, and reading a process's memory and CPU time from
//! `/proc`; the native in-process CPython timer is [`cpython`].
//!
//! Every figure is reported beside two references measured in the same run:
//!
//! - **baseline**: an MCP server that answers `execute_python` by running
//!   `python3 -c <code>` in a fresh, unsandboxed subprocess (what a naive MCP Python tool
//!   does), driven by the same rmcp client over stdio. It is this bench binary itself,
//!   re-executed with `WARDEN_BENCH_ROLE=baseline-server`.
//! - **native**: the same code compiled and executed in one long-running CPython, with
//!   stdout sent to a buffer: no IPC, no sandbox, no process start.
#![allow(dead_code)]

pub mod corpus;
pub mod cpython;

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult, ServerCapabilities, ServerConfig, Tool};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

pub use cpython::PYTHON;
/// The output cap both servers apply (warden's default `SANDBOX_OUTPUT_LIMIT`).
pub const OUTPUT_CAP: usize = 64 << 10;

/// `WARDEN_BENCH_QUICK=1` (CI): fewer samples, same measurements.
pub fn quick() -> bool {
    std::env::var_os("WARDEN_BENCH_QUICK").is_some_and(|v| v != "0")
}

/// `full` samples, or `quick` in quick mode.
pub fn n(full: usize, quick_n: usize) -> usize {
    if quick() { quick_n } else { full }
}

#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
}

pub fn stats(samples: &[Duration]) -> Stats {
    let mut s = samples.to_vec();
    s.sort();
    let at = |p: f64| {
        let idx = ((s.len() as f64 - 1.0) * p).round() as usize;
        s[idx].as_secs_f64() * 1000.0
    };
    Stats {
        n: s.len(),
        p50_ms: at(0.50),
        p95_ms: at(0.95),
        p99_ms: at(0.99),
    }
}

/// One line of the report: warden's figure and its ratios to the references.
pub fn row(name: &str, warden: Stats, baseline: Option<Stats>, native_ms: Option<f64>) {
    let ratio = |r: f64| {
        if r >= 100.0 {
            format!("{r:.0}×")
        } else {
            format!("{r:.2}×")
        }
    };
    let vs_base = baseline
        .map(|b| {
            format!(
                "{} baseline ({:.2} ms)",
                ratio(warden.p50_ms / b.p50_ms),
                b.p50_ms
            )
        })
        .unwrap_or_else(|| "-".into());
    let vs_native = native_ms
        .map(|n| format!("{} native ({:.4} ms)", ratio(warden.p50_ms / n), n))
        .unwrap_or_else(|| "-".into());
    println!(
        "{name:<46} n={:<5} p50={:>8.2} ms p95={:>8.2} ms p99={:>8.2} ms | {vs_base} | {vs_native}",
        warden.n, warden.p50_ms, warden.p95_ms, warden.p99_ms
    );
}

/// A data directory the unprivileged sandbox uids can traverse.
pub fn data_dir() -> tempfile::TempDir {
    let data = tempfile::Builder::new()
        .prefix("warden-bench-")
        .tempdir()
        .unwrap();
    warden::os::set_mode(data.path(), 0o711).unwrap();
    data
}

/// The release warden binary cargo built for the benches.
pub fn warden_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warden"))
}

/// `bin` with the settings every bench server shares: its data in `data`, Debian's
/// CPython, errors only on stderr. The caller adds the subcommand (`serve`, ...).
pub fn warden_command(bin: &Path, data: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env("SANDBOX_DATA_DIR", data)
        .env("SANDBOX_PYTHON", PYTHON)
        .env("WARDEN_LOG", "error");
    cmd
}

/// An MCP client connected to a server process.
pub struct Client {
    pub service: RunningService<RoleClient, ()>,
    pub pid: u32,
    _data: Option<tempfile::TempDir>,
    /// A copy of the binary another user can reach, kept while the server runs.
    _bin: Option<tempfile::TempDir>,
}

impl Client {
    /// The release warden binary, `serve` over stdio, with `env` settings.
    pub async fn warden(env: &[(&str, &str)]) -> Client {
        Client::warden_at(warden_bin(), env).await
    }

    /// Another warden binary (an earlier build, to compare), `serve` over stdio, with a
    /// data directory of its own.
    pub async fn warden_at(bin: &Path, env: &[(&str, &str)]) -> Client {
        let data = data_dir();
        let path = data.path().to_path_buf();
        Client::serve(bin, &path, env, Some(data)).await
    }

    /// The release warden binary, `serve` over stdio, on an existing data directory.
    pub async fn warden_in(data: &Path, env: &[(&str, &str)]) -> Client {
        Client::serve(warden_bin(), data, env, None).await
    }

    async fn serve(
        bin: &Path,
        data: &Path,
        env: &[(&str, &str)],
        owned: Option<tempfile::TempDir>,
    ) -> Client {
        let mut cmd = warden_command(bin, data);
        cmd.arg("serve").envs(env.iter().copied());
        Client::connect(cmd.into(), owned).await
    }

    /// The release warden binary run as the login user `user` (uid, gid and home from
    /// the account database), `serve` over stdio, with a data directory of that user's
    /// and a copy of the binary it can reach; `None` when there is no such user.
    #[cfg(unix)]
    pub async fn warden_as_user(user: &str, env: &[(&str, &str)]) -> Option<Client> {
        let (uid, gid, home) = account(user)?;
        let data = tempfile::Builder::new()
            .prefix("warden-bench-user-")
            .tempdir()
            .unwrap();
        std::os::unix::fs::chown(data.path(), Some(uid), Some(gid)).unwrap();
        warden::os::set_mode(data.path(), 0o700).unwrap();
        let bin_dir = tempfile::Builder::new()
            .prefix("warden-bench-bin-")
            .tempdir()
            .unwrap();
        warden::os::set_mode(bin_dir.path(), 0o755).unwrap();
        let bin = bin_dir.path().join("warden");
        std::fs::copy(warden_bin(), &bin).unwrap();
        let mut cmd = tokio::process::Command::new("setpriv");
        cmd.args([
            format!("--reuid={uid}"),
            format!("--regid={gid}"),
            "--clear-groups".into(),
            "--".into(),
        ])
        .arg(&bin)
        .arg("serve")
        .env("HOME", home)
        .env("USER", user)
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_PYTHON", PYTHON)
        .env("WARDEN_LOG", "error")
        .envs(env.iter().copied());
        let mut client = Client::connect(cmd, Some(data)).await;
        client._bin = Some(bin_dir);
        Some(client)
    }

    /// The unsandboxed `python3 -c` baseline server, working in `cwd`.
    pub async fn baseline(cwd: &Path) -> Client {
        let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
        cmd.env("WARDEN_BENCH_ROLE", "baseline-server")
            .current_dir(cwd);
        Client::connect(cmd, None).await
    }

    async fn connect(cmd: tokio::process::Command, data: Option<tempfile::TempDir>) -> Client {
        let transport = TokioChildProcess::new(cmd).unwrap();
        let pid = transport.id().unwrap();
        let service = ().serve(transport).await.unwrap();
        Client {
            service,
            pid,
            _data: data,
            _bin: None,
        }
    }

    /// Calls `tool` with `args` (a JSON object); returns the structured result.
    pub async fn tool(&self, tool: &str, args: Value) -> Value {
        let Value::Object(map) = args else {
            panic!("tool arguments must be a JSON object: {args}")
        };
        let r = self
            .service
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(map))
            .await
            .unwrap();
        r.structured_content.unwrap_or(Value::Null)
    }

    /// `execute_python` of `code` in `session`.
    pub async fn call(&self, session: &str, code: &str) -> Value {
        self.tool("execute_python", json!({"code": code, "session": session}))
            .await
    }

    /// Times one call, checking that it printed `expect` (when given).
    pub async fn timed(&self, session: &str, code: &str, expect: Option<&str>) -> Duration {
        let t = Instant::now();
        let r = self.call(session, code).await;
        let took = t.elapsed();
        if let Some(expect) = expect {
            assert_eq!(r["stdout"], expect, "{r}");
        }
        took
    }

    /// The `warden://settings` document.
    pub async fn settings(&self) -> Value {
        let read = self
            .service
            .read_resource(rmcp::model::ReadResourceRequestParams::new(
                "warden://settings",
            ))
            .await
            .unwrap();
        match &read.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => {
                serde_json::from_str(text).unwrap()
            }
            _ => Value::Null,
        }
    }

    /// Waits until the warm pool holds `ready` workers.
    pub async fn wait_for_pool(&self, ready: u64) {
        for _ in 0..600 {
            if self.settings().await["workers"]["warm"]["ready"].as_u64() == Some(ready) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the warm pool never held {ready} workers");
    }

    pub async fn stop(self) {
        let _ = self.service.cancel().await;
    }
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time a process has used so far (every thread), in nanoseconds.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// A bench's `main`: serves as the baseline server when this process was started as one,
/// else runs `bench` on a two-thread runtime (two cores here).
pub fn bench_main<F: std::future::Future<Output = ()>>(bench: impl FnOnce() -> F) {
    if serve_baseline_if_asked() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench());
}

/// Runs as the baseline server when `WARDEN_BENCH_ROLE=baseline-server`; returns false
/// otherwise.
pub fn serve_baseline_if_asked() -> bool {
    if std::env::var("WARDEN_BENCH_ROLE").as_deref() != Ok("baseline-server") {
        return false;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let running = Baseline.serve(rmcp::transport::stdio()).await.unwrap();
        let _ = running.waiting().await;
    });
    true
}

/// The largest code passed as `-c <code>`: the kernel refuses a longer single argument
/// (`MAX_ARG_STRLEN`, 128 KiB, the terminating NUL included).
const ARG_MAX_CODE: usize = (128 << 10) - 1;

/// `python3 -c <code>`, or for code too long for one argument `python3 -` with the code on
/// stdin (the same fresh interpreter compiling and running the same text).
async fn python_c(code: &str) -> std::io::Result<std::process::Output> {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(PYTHON);
    if code.len() <= ARG_MAX_CODE {
        return cmd.args(["-c", code]).output().await;
    }
    let mut child = cmd
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // Python reads its script whole before it runs a line of it.
        stdin.write_all(code.as_bytes()).await?;
    }
    child.wait_with_output().await
}

/// `execute_python` as `python3 -c <code>` in a fresh, unsandboxed subprocess.
#[derive(Clone)]
struct Baseline;

impl rmcp::ServerHandler for Baseline {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = serde_json::from_value(json!({"type": "object"})).unwrap();
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            Tool::new(
                "execute_python",
                "python3 -c, unsandboxed",
                std::sync::Arc::new(schema),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let code = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("code"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let out = python_c(&code)
            .await
            .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))?;
        let cut = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(OUTPUT_CAP)]).into_owned();
        let value = json!({
            "status": if out.status.success() { "ok" } else { "error" },
            "stdout": cut(&out.stdout),
            "stderr": cut(&out.stderr),
        });
        Ok(CallToolResult::structured(value).into())
    }
}

/// `user`'s uid, gid and home from the account database; `None` when there is no such
/// user.
#[cfg(unix)]
pub fn account(user: &str) -> Option<(u32, u32, String)> {
    let entry = std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .find(|l| l.split(':').next() == Some(user))?
        .to_string();
    let fields: Vec<&str> = entry.split(':').collect();
    let home = fields.get(5)?.to_string();
    Some((
        fields.get(2)?.parse().ok()?,
        fields.get(3)?.parse().ok()?,
        home,
    ))
}
