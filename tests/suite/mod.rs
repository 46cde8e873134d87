//! Shared harness: start a server with chosen settings, call tools, inspect the host.

pub mod args;
pub mod audit;
pub mod benign;
pub mod caps;
pub mod checkpoints;
pub mod clients;
pub mod consent;
pub mod docker;
pub mod egress;
pub mod engines;
pub mod examples;
pub mod exhaustion;
pub mod fail_closed;

pub mod grants;
pub mod guard_mcp;
pub mod gvisor;
pub mod http;
pub mod lifecycle;
pub mod mcp;
pub mod netorigin;
pub mod packages;
pub mod podman;
pub mod quota;
pub mod reaping;
pub mod redteam;
pub mod scale;
pub mod selftest;
pub mod settings;
pub mod signals;
pub mod tasks;
pub mod tls;
pub mod transactions;
pub mod unjudged;
pub mod walls;
pub mod workspace;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_warden");

/// A running server and the temporary data directory it owns.
pub struct Server {
    pub client: RunningService<RoleClient, ()>,
    pub data_dir: tempfile::TempDir,
    /// The server process itself (the MCP child; wrappers exec into it).
    pub pid: u32,
    /// Who it runs as.
    pub who: As,
    /// The server's process, killed if the test drops it; [`Server::stop`] waits for it.
    pub child: tokio::process::Child,
}

/// Who the server under test runs as. Every wall is tested both ways: a root server
/// gives each session an unprivileged uid of its own; a desktop user's server runs its
/// workers with that user's own uid, so the user's own files and processes are the
/// canaries there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum As {
    Root,
    /// The login user named by `WARDEN_TEST_USER` (`.ci/run` creates `warden-test`).
    User,
}

/// The login user the unprivileged mode runs as.
#[derive(Clone, Debug)]
pub struct LoginUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// `WARDEN_TEST_USER`, looked up in /etc/passwd. `None` (and a note) when it is not set
/// outside CI; in CI a missing user is a failure, never a skip.
pub fn login_user() -> Option<LoginUser> {
    let Some(name) = std::env::var("WARDEN_TEST_USER")
        .ok()
        .filter(|n| !n.is_empty())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set WARDEN_TEST_USER (.ci/run creates the login user warden-test)"
        );
        eprintln!("skipping the login-user half: WARDEN_TEST_USER is not set");
        return None;
    };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let fields: Vec<&str> = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 7 && f[0] == name)
        .unwrap_or_else(|| panic!("WARDEN_TEST_USER={name} is not in /etc/passwd"));
    Some(LoginUser {
        name: name.clone(),
        uid: fields[2].parse().unwrap(),
        gid: fields[3].parse().unwrap(),
        home: PathBuf::from(fields[5]),
    })
}

/// Polls an async `probe` every `every` until it answers `Some`, at most `tries` times:
/// a window to judge an event in, never a deadline asserted (for a plain condition, see
/// [`eventually`]). `None` when it never answered.
pub async fn until_some<T>(
    tries: u32,
    every: std::time::Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    for _ in 0..tries {
        if let Some(found) = probe().await {
            return Some(found);
        }
        tokio::time::sleep(every).await;
    }
    None
}

/// Both modes this machine can test: root always, the login user when configured.
pub fn both_modes() -> Vec<As> {
    let mut modes = vec![As::Root];
    if login_user().is_some() {
        modes.push(As::User);
    }
    modes
}

/// Whether a process with no special rights can reach and run `path`.
fn reachable_by_others(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    meta.permissions().mode() & 0o005 == 0o005
        && path
            .ancestors()
            .skip(1)
            .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// The warden binary as the login user can run it: the build directory itself when
/// others can reach it, else one copy per test process in a world-readable directory.
pub fn user_bin() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        if reachable_by_others(Path::new(BIN)) {
            return PathBuf::from(BIN);
        }
        let dir = tempfile::Builder::new()
            .prefix("warden-test-bin-")
            .tempdir()
            .unwrap()
            .keep();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.join("warden");
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    })
    .clone()
}

/// A data directory for a server running as `who`: the login user's own when it runs as
/// that user.
pub fn data_dir_for(who: As) -> tempfile::TempDir {
    let dir = data_dir();
    if who == As::User {
        let user = login_user().expect("login user");
        std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    dir
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
exec \"$@\"";

/// The server command line for a test: netns wrapper, settings, data dir.
pub fn server_command(
    net: Net,
    env: &[(&str, &str)],
    extra_args: &[&str],
    data_dir: &Path,
) -> tokio::process::Command {
    server_command_as(As::Root, net, env, extra_args, data_dir)
}

/// The same, running the server as `who`. As the login user, the server gets that user's
/// identity and home (HOME, USER), no supplementary groups, and the binary by a path the
/// user can reach.
pub fn server_command_as(
    who: As,
    net: Net,
    env: &[(&str, &str)],
    extra_args: &[&str],
    data_dir: &Path,
) -> tokio::process::Command {
    // The argv that finally runs warden (every wrapper execs, so its pid is the server's).
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    let user = (who == As::User).then(|| login_user().expect("login user"));
    if let Some(user) = &user {
        argv.extend(
            [
                "setpriv".to_string(),
                format!("--reuid={}", user.uid),
                format!("--regid={}", user.gid),
                "--clear-groups".to_string(),
                "--".to_string(),
            ]
            .map(Into::into),
        );
        argv.push(user_bin().into());
    } else {
        argv.push(BIN.into());
    }
    argv.push("serve".into());
    argv.extend(extra_args.iter().map(Into::into));
    let mut cmd = match net {
        Net::Host => {
            let mut c = tokio::process::Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
        Net::Isolated => {
            let mut c = tokio::process::Command::new("unshare");
            c.args(["--net", "--", "sh", "-c", NETNS_SETUP, "sh"]);
            c.args(&argv);
            c
        }
    };
    if let Some(user) = &user {
        cmd.env("HOME", &user.home)
            .env("USER", &user.name)
            .env("LOGNAME", &user.name)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME");
    }
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
        Server::start_as(As::Root, net, env).await
    }

    /// Starts a server as `who` (root, or the login user of `WARDEN_TEST_USER`).
    pub async fn start_as(who: As, net: Net, env: &[(&str, &str)]) -> Server {
        let data_dir = data_dir_for(who);
        let cmd = server_command_as(who, net, env, &[], data_dir.path());
        Server::from_command(cmd, data_dir, who).await
    }

    /// Starts the server a test built itself (see [`server_command_as`]).
    pub async fn from_command(
        cmd: tokio::process::Command,
        data_dir: tempfile::TempDir,
        who: As,
    ) -> Server {
        Server::from_command_logged(cmd, data_dir, who, Stdio::inherit()).await
    }

    /// The same, with the server's log going to `stderr`.
    pub async fn from_command_logged(
        cmd: tokio::process::Command,
        data_dir: tempfile::TempDir,
        who: As,
        stderr: Stdio,
    ) -> Server {
        let (client, child) = connect((), cmd, stderr).await;
        let pid = child.id().expect("server pid");
        Server {
            client,
            data_dir,
            pid,
            who,
            child,
        }
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

    /// The `warden://settings` document.
    pub async fn settings(&self) -> Value {
        json_resource(&self.client, "warden://settings")
            .await
            .expect("read warden://settings")
    }

    pub async fn run(&self, session: &str, code: &str) -> Value {
        self.exec(json!({"session": session, "code": code})).await
    }

    /// Closes the connection and waits until the server has exited, and then until its
    /// workspaces are gone (it removes them last, after killing its workers). Returns the
    /// data directory, for tests that look at what the server left (the audit log).
    ///
    /// The server is given all the time it takes to exit on its own: a client library's
    /// SIGTERM a few seconds after closing stdin (what rmcp's child transport does) would
    /// cut short a clean-up that a loaded machine makes slow, and the test would judge
    /// the machine's load rather than the server.
    pub async fn stop(mut self) -> tempfile::TempDir {
        let _ = self.client.cancel().await;
        let exited =
            tokio::time::timeout(std::time::Duration::from_secs(300), self.child.wait()).await;
        assert!(
            exited.is_ok(),
            "the server ({:?}) had not exited 300 s after its stdin closed",
            self.who
        );
        let sessions = self.data_dir.path().join("sessions");
        let cleaned = eventually(10, || {
            std::fs::read_dir(&sessions)
                .map(|mut d| d.next().is_none())
                .unwrap_or(true)
        })
        .await;
        assert!(
            cleaned,
            "the server ({:?}) left workspaces in {}",
            self.who,
            sessions.display()
        );
        self.data_dir
    }
}

/// A JSON resource read through `client`; the server's error as text.
pub async fn json_resource<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    uri: &str,
) -> Result<Value, String> {
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .map_err(|e| e.to_string())?;
    match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => {
            serde_json::from_str(text).map_err(|e| format!("{uri}: {e}"))
        }
        other => Err(format!("{uri}: not text: {other:?}")),
    }
}

/// Spawns the MCP server `cmd` and connects `handler` to it over its stdin and stdout.
/// The child is killed if dropped; closing the client closes its stdin, and the caller
/// waits for it to exit (see [`Server::stop`]).
pub async fn connect<H: rmcp::ClientHandler>(
    handler: H,
    mut cmd: tokio::process::Command,
    stderr: Stdio,
) -> (RunningService<RoleClient, H>, tokio::process::Child) {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn warden");
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        panic!("the server's stdio was not piped")
    };
    let client = handler
        .serve((stdout, stdin))
        .await
        .expect("MCP initialize");
    (client, child)
}

/// The stdout of a result.
/// The paths of a result's `files`.
pub fn file_paths(v: &Value) -> Vec<&str> {
    v["files"]
        .as_array()
        .map(|files| files.iter().filter_map(|f| f["path"].as_str()).collect())
        .unwrap_or_default()
}

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

/// Processes one live worker is made of: the sandbox helper's waiting parent (outside
/// the worker's PID namespace) and the interpreter (PID 1 inside it).
pub const WORKER_PROCESSES: usize = 2;

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

/// How many times slower than this machine the one running the tests is:
/// `WARDEN_TEST_SLOWDOWN` (a whole number, default 1). Only `tools/arm64-vm.sh` sets it,
/// for the suite under full-system emulation (TCG), where the server's clean-up takes
/// more than the seconds a real machine is given.
pub fn slowdown() -> u64 {
    std::env::var("WARDEN_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// Waits up to `secs` (times [`slowdown`]) for `cond`.
pub async fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs * slowdown());
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

/// Files the sandboxed code must neither read, change nor see. As the login user they
/// are that user's own `~/.ssh/id_rsa` and `~/.bashrc` (created once with fixed content
/// when missing, never rewritten, so that concurrent test runs agree); as root, copies
/// in a world-readable scratch directory (only the sandbox, not file permissions, can
/// protect them).
pub struct Canaries {
    pub ssh_key: PathBuf,
    pub bashrc: PathBuf,
    pub secret: String,
    before: Vec<(PathBuf, Vec<u8>, u32)>,
    _scratch: Option<tempfile::TempDir>,
}

const KEY_CANARY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nwarden-test canary key\n-----END OPENSSH PRIVATE KEY-----\n";

impl Canaries {
    pub fn plant(who: As) -> Canaries {
        use std::os::unix::fs::MetadataExt;
        let (home, owner, scratch) = match who {
            As::User => {
                let user = login_user().expect("login user");
                (user.home.clone(), Some((user.uid, user.gid)), None)
            }
            As::Root => {
                let dir = tempfile::tempdir().unwrap();
                std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                    .unwrap();
                (dir.path().to_path_buf(), None, Some(dir))
            }
        };
        let ssh = home.join(".ssh");
        let key = ssh.join("id_rsa");
        let bashrc = home.join(".bashrc");
        let mode = if owner.is_some() {
            (0o700, 0o600)
        } else {
            (0o755, 0o644)
        };
        if !key.exists() {
            std::fs::create_dir_all(&ssh).unwrap();
            std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(mode.0)).unwrap();
            let tmp = ssh.join(format!(".id_rsa.{}", std::process::id()));
            std::fs::write(&tmp, KEY_CANARY).unwrap();
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode.1)).unwrap();
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&ssh, Some(uid), Some(gid)).unwrap();
                std::os::unix::fs::chown(&tmp, Some(uid), Some(gid)).unwrap();
            }
            // Atomic, so that a concurrent run never sees a half-written key.
            std::fs::rename(&tmp, &key).unwrap();
        }
        if !bashrc.exists() {
            std::fs::write(&bashrc, "# warden-test canary bashrc\n").unwrap();
            std::fs::set_permissions(&bashrc, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let secret = String::from_utf8_lossy(&std::fs::read(&key).unwrap()).into_owned();
        let before = [&key, &bashrc, &ssh]
            .iter()
            .map(|p| {
                let meta = std::fs::metadata(p).unwrap();
                let content = if meta.is_file() {
                    std::fs::read(p).unwrap()
                } else {
                    Vec::new()
                };
                ((*p).clone(), content, meta.mode())
            })
            .collect();
        Canaries {
            ssh_key: key,
            bashrc,
            secret,
            before,
            _scratch: scratch,
        }
    }

    /// Every canary has the content and mode it had.
    pub fn assert_untouched(&self, context: &str) {
        use std::os::unix::fs::MetadataExt;
        for (path, content, mode) in &self.before {
            let meta = std::fs::metadata(path)
                .unwrap_or_else(|e| panic!("{context}: {} is gone: {e}", path.display()));
            assert_eq!(
                meta.mode(),
                *mode,
                "{context}: mode of {} changed",
                path.display()
            );
            if meta.is_file() {
                assert_eq!(
                    &std::fs::read(path).unwrap(),
                    content,
                    "{context}: {} was changed",
                    path.display()
                );
            }
        }
    }
}

/// A process's identity that survives pid reuse: (pid, start time in clock ticks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcId {
    pub pid: u32,
    pub start: u64,
}

/// Parent pid and start time of a live process (fields 4 and 22 of /proc/PID/stat).
fn stat_fields(pid: u32) -> Option<(u32, u64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    Some((
        fields.get(1)?.parse().ok()?,
        fields.get(19)?.parse().ok()?,
        state,
    ))
}

/// This exact process while it runs, for [`is_alive`] later.
pub fn proc_id(pid: u32) -> Option<ProcId> {
    stat_fields(pid).map(|(_, start, _)| ProcId { pid, start })
}

/// Whether this exact process (not a later one that reused its pid) is still running.
pub fn is_alive(p: ProcId) -> bool {
    stat_fields(p.pid).is_some_and(|(_, start, state)| start == p.start && state != 'Z')
}

/// Every live descendant of `pid` (children, grandchildren, ...), found through the
/// parent links in /proc: only processes this test's own server started.
pub fn descendants(pid: u32) -> Vec<ProcId> {
    let mut table: Vec<(u32, u32, u64)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some((ppid, start, state)) = stat_fields(p)
                && state != 'Z'
            {
                table.push((p, ppid, start));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(p, ppid, start) in &table {
            if ppid == parent {
                out.push(ProcId { pid: p, start });
                frontier.push(p);
            }
        }
    }
    out
}

/// Whether `pid` is a server's workspace keeper (which lives as long as the server).
pub fn is_keeper(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .any(|arg| arg == b"__workspace-keeper")
}

/// The live worker processes of a server on the host backend: its descendants but the
/// workspace keeper (a worker is [`WORKER_PROCESSES`] processes and cannot make more).
/// Its Docker workers are [`containers_of`] it.
pub fn workers_of(server_pid: u32) -> Vec<ProcId> {
    descendants(server_pid)
        .into_iter()
        .filter(|p| !is_keeper(p.pid))
        .collect()
}

/// The Docker workers of a server: the ids of the containers the engine holds with its
/// pid as their label, running or not. (Labels, not names: that is how the server itself
/// and the next one's reaper find them.)
pub fn containers_of(server_pid: u32) -> Vec<String> {
    containers_labelled(&format!("dev.warden.pid={server_pid}"))
}

/// Kills process `pid` with SIGKILL (nothing cleaned up by it) and waits until it is
/// gone or a zombie.
pub async fn sigkill_and_wait(pid: u32) {
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
            .unwrap_or(true)
    };
    assert!(eventually(5, gone).await, "process {pid} outlived SIGKILL");
}

/// Ids of every container, running or not, with the label `label` (`key=value`).
pub fn containers_labelled(label: &str) -> Vec<String> {
    containers_labelled_on(None, label)
}

/// The same, asked of the engine at `host` (a `DOCKER_HOST` URL; `None`: the local one).
pub fn containers_labelled_on(host: Option<&str>, label: &str) -> Vec<String> {
    let mut docker = std::process::Command::new("docker");
    if let Some(host) = host {
        docker.args(["-H", host]);
    }
    let out = docker
        .args([
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label={label}"),
        ])
        .output()
        .expect("docker ps");
    assert!(
        out.status.success(),
        "docker ps: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// A small tmpfs for a test (the tests run as root), unmounted when dropped: for tests
/// that fill a file system (never the real disk) or make huge trees (at memory speed).
pub struct Tmpfs {
    path: PathBuf,
    /// The mount point was made for it (and is removed with it).
    own_dir: bool,
}

impl Tmpfs {
    /// A tmpfs of `size` (`4m`, `1g`) on a new directory, mode 0711.
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("warden-tmpfs-")
            .tempdir()
            .unwrap()
            .keep();
        Tmpfs::mount_on_dir(dir, size, true)
    }

    /// A tmpfs of `size` over an existing directory (a test's data directory).
    pub fn mount_on(dir: &Path, size: &str) -> Tmpfs {
        Tmpfs::mount_on_dir(dir.to_path_buf(), size, false)
    }

    fn mount_on_dir(path: PathBuf, size: &str, own_dir: bool) -> Tmpfs {
        let status = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0711"),
                "tmpfs",
            ])
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs (the tests run as root)");
        Tmpfs { path, own_dir }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
        if self.own_dir {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}
