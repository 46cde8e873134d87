//! Starting one host worker: the warden binary re-executed as the sandbox helper
//! (`warden __sandbox-exec`), from one long-lived thread because the parent-death signal
//! follows the thread that forked, with the protocol on private pipes at fds 3 and 4.
//! The helper installs the walls and execs Python; [`HostProcess`] kills its whole
//! process group.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::process::Child;

use crate::backend::{StartError, Worker};
use crate::worker::handle::{
    BoxFuture, ExitWitness, Gauge, KillSwitch, ProcessHandle, Usage, UsageProbe, Witness,
};
use crate::worker::helper::{HELPER_SUBCOMMAND, REQUEST_FD, RESPONSE_FD};
use crate::worker::policy::WorkerPolicy;
use crate::worker::protocol::{Channel, DRAIN_TIMEOUT, WorkerProcess};

/// How long a new worker may take to install its walls and start Python.
const SPAWN_TIMEOUT: Duration = Duration::from_secs(15);

/// A running host worker: the helper's child process, a process-group leader.
pub struct HostProcess {
    child: Child,
    pid: i32,
}

impl WorkerProcess for HostProcess {
    /// SIGKILL to the worker's whole process group (the helper made it a group leader).
    fn kill(&mut self) {
        kill_group(self.pid);
        let _ = self.child.start_kill();
    }

    fn wait_exit(&mut self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            match tokio::time::timeout(DRAIN_TIMEOUT, self.child.wait()).await {
                Ok(Ok(status)) => describe_status(status),
                _ => "no exit status".to_string(),
            }
        })
    }

    /// SIGSTOP to the worker's process group: the helper waiting outside the worker's
    /// PID namespace and the interpreter inside it (PID 1 there, which SIGSTOP still
    /// reaches from this namespace). That is the whole worker: seccomp lets it make
    /// threads but never a process, a session or a group of its own, and SIGSTOP can be
    /// neither caught nor ignored.
    fn freeze(&mut self) {
        signal_group(self.pid, rustix::process::Signal::STOP);
    }

    fn thaw(&mut self) {
        signal_group(self.pid, rustix::process::Signal::CONT);
    }
}

impl ProcessHandle for HostProcess {
    fn kill_switch(&self) -> KillSwitch {
        let pid = self.pid;
        KillSwitch::new(move || kill_group(pid))
    }

    fn exit_witness(&self) -> ExitWitness {
        ExitWitness::new(HostPid(self.pid))
    }

    fn usage_probe(&self) -> UsageProbe {
        UsageProbe::new(HostPid(self.pid))
    }
}

/// A host worker's group leader, watched from outside.
struct HostPid(i32);

impl Witness for HostPid {
    /// No process `pid` exists any more, not even as a zombie (signal 0 says ESRCH).
    fn is_gone(&self) -> BoxFuture<'_, bool> {
        use rustix::process::{Pid, test_kill_process};
        let gone = Pid::from_raw(self.0)
            .is_none_or(|pid| test_kill_process(pid) == Err(rustix::io::Errno::SRCH));
        Box::pin(std::future::ready(gone))
    }

    fn describe(&self) -> String {
        format!("pid {}", self.0)
    }
}

impl Gauge for HostPid {
    fn read(&self) -> Option<Usage> {
        crate::worker::usage::of_tree(self.0)
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        kill_group(self.pid);
    }
}

/// SIGKILL to the process group led by `pid`, and to `pid` itself.
pub fn kill_group(pid: i32) {
    crate::os::kill_group(pid);
}

/// `signal` to the process group led by `pid` (never to group 0 or 1), and to `pid`
/// itself: on macOS that is the interpreter, which nothing stops from leaving the group.
fn signal_group(pid: i32, signal: rustix::process::Signal) {
    if pid > 1
        && let Some(pid) = rustix::process::Pid::from_raw(pid)
    {
        // ESRCH (already gone) is fine.
        let _ = rustix::process::kill_process_group(pid, signal);
        let _ = rustix::process::kill_process(pid, signal);
    }
}

type SpawnJob = Box<dyn FnOnce() + Send>;

/// Runs every worker spawn on one thread that lives as long as the server, so that the
/// helper's PR_SET_PDEATHSIG fires when the server dies and not when some idle runtime
/// thread exits.
fn spawner() -> Result<&'static std::sync::mpsc::Sender<SpawnJob>, std::io::Error> {
    static SPAWNER: OnceLock<std::sync::mpsc::Sender<SpawnJob>> = OnceLock::new();
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx);
    }
    let handle = tokio::runtime::Handle::try_current()
        .map_err(|e| std::io::Error::other(format!("no tokio runtime: {e}")))?;
    let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
    std::thread::Builder::new()
        .name("worker-spawner".into())
        .spawn(move || {
            let _runtime = handle.enter();
            while let Ok(job) = rx.recv() {
                job();
            }
        })?;
    Ok(SPAWNER.get_or_init(|| tx))
}

/// Starts `cmd` from the spawner thread (so that a parent-death signal set by the child
/// fires when the server dies, not when some runtime thread exits) and waits for it.
///
/// # Errors
/// No runtime, no spawner thread, or the spawn itself failed.
pub fn spawn_std_from_spawner(
    mut cmd: std::process::Command,
) -> std::io::Result<std::process::Child> {
    let (tx, rx) = std::sync::mpsc::channel();
    let job: SpawnJob = Box::new(move || {
        let _ = tx.send(cmd.spawn());
    });
    spawner()?
        .send(job)
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawner thread dropped the request"))?
}

/// Most descriptors passed beyond the protocol pipes.
const MAX_INHERITED: usize = 8;

/// A pipe whose ends are closed on exec (std creates them with O_CLOEXEC).
fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = std::io::pipe()?;
    Ok((read.into(), write.into()))
}

/// How a process ended, in words a user can act on.
pub fn describe_status(status: ExitStatus) -> String {
    if let Some(sig) = status.signal() {
        let name = match sig {
            libc::SIGKILL => "SIGKILL (memory or CPU limit, or killed)",
            libc::SIGSEGV => "SIGSEGV (segmentation fault)",
            libc::SIGSYS => "SIGSYS (forbidden system call)",
            libc::SIGXCPU => "SIGXCPU (CPU time limit)",
            libc::SIGXFSZ => "SIGXFSZ (file size limit)",
            libc::SIGABRT => "SIGABRT (aborted)",
            libc::SIGBUS => "SIGBUS",
            libc::SIGFPE => "SIGFPE",
            libc::SIGILL => "SIGILL",
            _ => "",
        };
        if name.is_empty() {
            format!("killed by signal {sig}")
        } else {
            format!("killed by {name}")
        }
    } else {
        format!("exit status {}", status.code().unwrap_or(-1))
    }
}

/// Forks the helper with the protocol pipes at fds 3 and 4 and `inherit` at 5, 6, …
/// (the workspace keeper's namespaces, which the policy names by those numbers);
/// returns the child and the server's ends (request writer, response reader).
async fn fork_helper(inherit: &[BorrowedFd<'_>]) -> Result<(Child, OwnedFd, OwnedFd), StartError> {
    let exe: PathBuf = std::env::current_exe()?;
    if inherit.len() > MAX_INHERITED {
        return Err(StartError::Io(std::io::Error::other(
            "too many descriptors to pass to the helper",
        )));
    }
    let (req_read, req_write) = cloexec_pipe()?;
    let (resp_read, resp_write) = cloexec_pipe()?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let child_req = req_read.as_raw_fd();
    let child_resp = resp_write.as_raw_fd();
    let extra: Vec<i32> = inherit.iter().map(AsRawFd::as_raw_fd).collect();
    let job: SpawnJob = Box::new(move || {
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg(HELPER_SUBCOMMAND)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec, no
        // allocation. Every descriptor is first moved above 64 so that dup2 onto 3, 4, 5, …
        // can never clobber another one; dup2 clears close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                let req = libc::fcntl(child_req, libc::F_DUPFD, 64);
                let resp = libc::fcntl(child_resp, libc::F_DUPFD, 64);
                if req < 0
                    || resp < 0
                    || libc::dup2(req, REQUEST_FD) < 0
                    || libc::dup2(resp, RESPONSE_FD) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                let mut high = [0i32; MAX_INHERITED];
                for (slot, fd) in high.iter_mut().zip(&extra) {
                    *slot = libc::fcntl(*fd, libc::F_DUPFD, 64);
                    if *slot < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                for (n, fd) in high.iter().take(extra.len()).enumerate() {
                    if libc::dup2(*fd, RESPONSE_FD + 1 + n as i32) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let _ = tx.send(cmd.spawn());
    });
    spawner()?
        .send(job)
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    let child = rx
        .await
        .map_err(|_| std::io::Error::other("the spawner thread dropped the request"))??;
    drop(req_read);
    drop(resp_write);
    Ok((child, req_write, resp_read))
}

/// Asks for an output pipe of [`PIPE_SIZE`] (root) or [`PIPE_SIZE_UNPRIVILEGED`], so
/// that a call printing a lot wakes the server once per full pipe rather than once per
/// 64 KiB (the default). Best effort: a pipe the kernel will not enlarge keeps the
/// default, which is only slower.
///
/// [`PIPE_SIZE`]: crate::worker::capture::PIPE_SIZE
/// [`PIPE_SIZE_UNPRIVILEGED`]: crate::worker::capture::PIPE_SIZE_UNPRIVILEGED
fn enlarge_pipe(pipe: &impl std::os::fd::AsFd) {
    #[cfg(target_os = "linux")]
    {
        use crate::worker::capture::{PIPE_SIZE, PIPE_SIZE_UNPRIVILEGED};
        let size = if rustix::process::geteuid().is_root() {
            PIPE_SIZE
        } else {
            PIPE_SIZE_UNPRIVILEGED
        };
        if let Err(e) = rustix::pipe::fcntl_setpipe_size(pipe, size) {
            tracing::debug!(error = %e, "an output pipe keeps its default size");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pipe;
}

/// Starts a sandboxed worker for `policy` and waits until Python is ready; `inherit`
/// are passed at descriptors 5, 6, … (see [`fork_helper`]). Returns the worker and its
/// group leader's pid.
pub async fn spawn(
    policy: &WorkerPolicy,
    inherit: &[BorrowedFd<'_>],
) -> Result<(Worker, i32), StartError> {
    let (mut child, req_write, resp_read) = fork_helper(inherit).await?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the helper exited before it started"))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        kill_group(pid);
        return Err(StartError::Io(std::io::Error::other("stdio pipes missing")));
    };
    enlarge_pipe(&stdout);
    enlarge_pipe(&stderr);
    let mut channel = Channel::new(
        Box::new(pipe::Sender::from_owned_fd(req_write)?),
        Box::new(pipe::Receiver::from_owned_fd(resp_read)?),
        Box::new(stdout),
        Box::new(stderr),
    );
    let mut process = HostProcess { child, pid };
    let startup = async {
        let policy_json =
            serde_json::to_vec(policy).map_err(|e| StartError::Protocol(format!("policy: {e}")))?;
        crate::worker::handle::handshake(&mut channel, &mut process, &policy_json).await
    };
    let report = match tokio::time::timeout(SPAWN_TIMEOUT, startup).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => {
            kill_group(pid);
            return Err(e);
        }
        Err(_) => {
            kill_group(pid);
            return Err(StartError::Timeout(SPAWN_TIMEOUT));
        }
    };
    Ok((Worker::new(channel, process, report), pid))
}

/// The descriptor number the helper finds the `n`th inherited descriptor at.
pub fn inherited_fd(n: usize) -> i32 {
    RESPONSE_FD + 1 + n as i32
}

/// The proxy endpoint a proxied world handed over before its sandbox report (so it is
/// already queued once the handshake is done), or `None` when the worker has no world
/// of its own (then its network is denied, and reported).
///
/// # Errors
/// A message on the bridge that is not one listening socket.
#[cfg(target_os = "linux")]
pub fn receive_endpoint(
    bridge: &std::os::unix::net::UnixStream,
) -> std::io::Result<Option<std::net::TcpListener>> {
    let Some((_, mut fds)) = crate::os::receive_descriptors(bridge, false)? else {
        return Ok(None);
    };
    match (fds.pop(), fds.is_empty()) {
        (Some(fd), true) => Ok(Some(std::net::TcpListener::from(fd))),
        _ => Err(std::io::Error::other(
            "the world's proxy endpoint did not arrive as one descriptor",
        )),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn receive_endpoint(
    _bridge: &std::os::unix::net::UnixStream,
) -> std::io::Result<Option<std::net::TcpListener>> {
    Ok(None)
}
