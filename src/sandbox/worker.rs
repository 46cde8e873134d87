//! The server's side of one sandboxed worker: spawning it through the helper (from one
//! long-lived thread, because the parent-death signal follows the thread that forked),
//! speaking its protocol on private pipes, capturing fds 1 and 2 up to the end-of-output
//! marker, enforcing the wall clock, and killing the whole process group.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStderr, ChildStdout};

use crate::sandbox::linux::helper::{REQUEST_FD, RESPONSE_FD};
use crate::sandbox::policy::WorkerPolicy;
use crate::sandbox::report::{HelperMessage, SandboxReport};

/// The hidden subcommand that runs the sandbox helper.
pub const HELPER_SUBCOMMAND: &str = "__sandbox-exec";
/// Longest protocol line the server accepts from a worker, before the per-call part
/// (the result and traceback are capped at the output limit, and JSON's `\uXXXX`
/// escapes can grow each character sixfold).
const BASE_RESPONSE_LINE: u64 = 1 << 20;
/// How long a new worker may take to install its walls and start Python.
const SPAWN_TIMEOUT: Duration = Duration::from_secs(15);
/// How long to wait for the end-of-output markers once the result is in, and for the
/// pipes to drain after a kill.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("the sandbox refused to start the worker: wall '{wall}': {message}")]
    Refused { wall: String, message: String },
    #[error("the sandbox helper failed before starting Python ({status}){stderr}")]
    HelperDied { status: String, stderr: String },
    #[error("Python failed to start inside the sandbox ({status}){stderr}")]
    PythonDied { status: String, stderr: String },
    #[error("the worker did not start within {0:?}")]
    Timeout(Duration),
    #[error("could not start the sandbox helper: {0}")]
    Io(#[from] std::io::Error),
    #[error("the worker sent an unexpected first message: {0}")]
    Protocol(String),
}

/// One file the worker writes into the workspace before running the code.
#[derive(Debug, Clone, Serialize)]
pub struct InputFile {
    pub name: String,
    pub b64: String,
}

#[derive(Debug, Serialize)]
struct ExecRequest<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: u64,
    code: &'a str,
    nonce: &'a str,
    inputs: &'a [InputFile],
    result_cap: usize,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct WorkerError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub traceback: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct WorkerResponse {
    pub id: u64,
    pub status: String,
    pub result: Option<String>,
    #[serde(default)]
    pub result_truncated: bool,
    pub error: Option<WorkerError>,
}

/// What one stream (stdout or stderr) produced during a call.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    pub bytes: Vec<u8>,
    pub truncated: bool,
    /// The end-of-output marker was seen: everything the call printed is here.
    pub complete: bool,
}

#[derive(Debug)]
pub enum Outcome {
    Finished(WorkerResponse),
    TimedOut,
    /// The worker died during the call; the text says how.
    Died(String),
    /// The worker broke the protocol (or its output streams); it must be replaced.
    Broken(String),
}

#[derive(Debug)]
pub struct RunOutput {
    pub outcome: Outcome,
    pub stdout: Captured,
    pub stderr: Captured,
    /// The worker can serve another call (false after a timeout, death or breakage).
    pub reusable: bool,
}

/// Receives stdout bytes as the worker writes them (only what is kept under the output
/// cap), for progress notifications. Unbounded is safe: the cap bounds it.
pub type OutputTap = tokio::sync::mpsc::UnboundedSender<Vec<u8>>;

pub struct Worker {
    child: Child,
    pid: i32,
    requests: pipe::Sender,
    responses: BufReader<pipe::Receiver>,
    stdout: ChildStdout,
    stderr: ChildStderr,
    stdout_carry: Vec<u8>,
    stderr_carry: Vec<u8>,
    report: SandboxReport,
    next_id: u64,
    /// A call was started and never completed (its future was dropped: the client
    /// cancelled). The worker's protocol state is unknown, so it must not be reused.
    busy: bool,
    /// Where the next call's stdout is also sent as it arrives (taken by that call).
    stdout_tap: Option<OutputTap>,
}

/// Kills the worker's process group if a call is abandoned midway (its future dropped),
/// so cancelled code cannot keep running unseen.
struct KillOnDrop {
    pid: i32,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            kill_group(self.pid);
        }
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

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn describe_status(status: ExitStatus) -> String {
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

async fn read_stderr_tail(stderr: &mut ChildStderr) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_millis(500),
        (&mut *stderr).take(16 << 10).read_to_end(&mut buf),
    )
    .await;
    let text = String::from_utf8_lossy(&buf).trim().to_string();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

async fn read_line(
    reader: &mut BufReader<pipe::Receiver>,
    limit: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let n = (&mut *reader)
        .take(limit)
        .read_until(b'\n', &mut line)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(std::io::Error::other("protocol line too long or cut off"));
    }
    Ok(Some(line))
}

impl Worker {
    /// Starts a sandboxed worker for `policy` and waits until Python is ready.
    pub async fn spawn(policy: &WorkerPolicy) -> Result<Worker, SpawnError> {
        let exe: PathBuf = std::env::current_exe()?;
        let (req_read, req_write) = cloexec_pipe()?;
        let (resp_read, resp_write) = cloexec_pipe()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let child_req = req_read.as_raw_fd();
        let child_resp = resp_write.as_raw_fd();
        let job: SpawnJob = Box::new(move || {
            let mut cmd = tokio::process::Command::new(exe);
            cmd.arg(HELPER_SUBCOMMAND)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
            // The protocol pipes are first moved above 10 so that dup2 onto 3 and 4 can
            // never clobber one with the other; dup2 clears close-on-exec.
            unsafe {
                cmd.pre_exec(move || {
                    let req = libc::fcntl(child_req, libc::F_DUPFD, 10);
                    let resp = libc::fcntl(child_resp, libc::F_DUPFD, 10);
                    if req < 0
                        || resp < 0
                        || libc::dup2(req, REQUEST_FD) < 0
                        || libc::dup2(resp, RESPONSE_FD) < 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let _ = tx.send(cmd.spawn());
        });
        spawner()?
            .send(job)
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
        let mut child = rx
            .await
            .map_err(|_| std::io::Error::other("the spawner thread dropped the request"))??;
        drop(req_read);
        drop(resp_write);
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| std::io::Error::other("the helper exited before it started"))?;
        let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(SpawnError::Io(std::io::Error::other("stdio pipes missing")));
        };
        let mut requests = pipe::Sender::from_owned_fd(req_write)?;
        let mut responses = BufReader::new(pipe::Receiver::from_owned_fd(resp_read)?);

        let startup = async {
            let policy_json = serde_json::to_vec(policy)
                .map_err(|e| SpawnError::Protocol(format!("policy: {e}")))?;
            let mut framed = (policy_json.len() as u64).to_le_bytes().to_vec();
            framed.extend_from_slice(&policy_json);
            requests.write_all(&framed).await?;
            let report = match read_line(&mut responses, BASE_RESPONSE_LINE).await? {
                Some(line) => match serde_json::from_slice::<HelperMessage>(&line) {
                    Ok(HelperMessage::Sandbox { report }) => report,
                    Ok(HelperMessage::SandboxError { wall, message }) => {
                        return Err(SpawnError::Refused { wall, message });
                    }
                    Err(e) => return Err(SpawnError::Protocol(e.to_string())),
                },
                None => {
                    let status = child.wait().await?;
                    return Err(SpawnError::HelperDied {
                        status: describe_status(status),
                        stderr: read_stderr_tail(&mut stderr).await,
                    });
                }
            };
            match read_line(&mut responses, BASE_RESPONSE_LINE).await? {
                Some(line) if line.starts_with(b"{\"type\": \"ready\"") => Ok(report),
                Some(line) => Err(SpawnError::Protocol(
                    String::from_utf8_lossy(&line).trim().to_string(),
                )),
                None => {
                    let status = child.wait().await?;
                    Err(SpawnError::PythonDied {
                        status: describe_status(status),
                        stderr: read_stderr_tail(&mut stderr).await,
                    })
                }
            }
        };
        let report = match tokio::time::timeout(SPAWN_TIMEOUT, startup).await {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => {
                kill_group(pid);
                return Err(e);
            }
            Err(_) => {
                kill_group(pid);
                return Err(SpawnError::Timeout(SPAWN_TIMEOUT));
            }
        };
        Ok(Worker {
            child,
            pid,
            requests,
            responses,
            stdout,
            stderr,
            stdout_carry: Vec::new(),
            stderr_carry: Vec::new(),
            report,
            next_id: 1,
            busy: false,
            stdout_tap: None,
        })
    }

    /// A previous call on this worker was abandoned midway.
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Streams the next call's stdout to `tap` as well, while it runs.
    pub fn tap_stdout(&mut self, tap: Option<OutputTap>) {
        self.stdout_tap = tap;
    }

    /// Runs one request with a wall-clock limit. On timeout the whole process group is
    /// killed; the output printed until then is returned.
    pub async fn execute(
        &mut self,
        code: &str,
        inputs: &[InputFile],
        timeout: Duration,
        output_cap: usize,
    ) -> RunOutput {
        let deadline = Instant::now() + timeout;
        self.busy = true;
        let mut abandon_guard = KillOnDrop {
            pid: self.pid,
            armed: true,
        };
        let output = self.execute_inner(code, inputs, deadline, output_cap).await;
        abandon_guard.armed = false;
        self.busy = false;
        output
    }

    async fn execute_inner(
        &mut self,
        code: &str,
        inputs: &[InputFile],
        deadline: Instant,
        output_cap: usize,
    ) -> RunOutput {
        let id = self.next_id;
        self.next_id += 1;
        let nonce_bytes: [u8; 16] = crate::random_bytes();
        let nonce: String = nonce_bytes.iter().map(|b| format!("{b:02x}")).collect();
        let marker = format!("\0WARDEN-END:{nonce}\0").into_bytes();
        let mut out = StreamCollector::new(output_cap, std::mem::take(&mut self.stdout_carry));
        out.tap = self.stdout_tap.take();
        let mut err = StreamCollector::new(output_cap, std::mem::take(&mut self.stderr_carry));

        let request = ExecRequest {
            kind: "exec",
            id,
            code,
            nonce: &nonce,
            inputs,
            result_cap: output_cap,
        };
        let line = match serde_json::to_vec(&request) {
            Ok(mut line) => {
                line.push(b'\n');
                line
            }
            Err(e) => {
                return self
                    .finish_broken(format!("could not encode the request: {e}"), out, err)
                    .await;
            }
        };
        let deadline_tokio = tokio::time::Instant::from_std(deadline);
        let line_limit = BASE_RESPONSE_LINE + 2 * 6 * output_cap as u64;
        let write = tokio::time::timeout_at(deadline_tokio, self.requests.write_all(&line)).await;
        match write {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return self.finish_dead(out, err).await,
            Err(_) => return self.finish_timeout(out, err).await,
        }

        let Worker {
            responses,
            stdout,
            stderr,
            ..
        } = self;
        // Once the result is in (or the worker is gone), the markers must follow promptly.
        let (soft_tx, soft_rx) = tokio::sync::watch::channel(None);
        let result = tokio::time::timeout_at(deadline_tokio, async {
            let (response, (), ()) = tokio::join!(
                async {
                    let response = read_line(responses, line_limit).await;
                    let _ = soft_tx.send(Some(tokio::time::Instant::now() + DRAIN_TIMEOUT));
                    response
                },
                collect(
                    stdout,
                    &mut out,
                    &marker,
                    deadline_tokio,
                    Some(soft_rx.clone())
                ),
                collect(stderr, &mut err, &marker, deadline_tokio, Some(soft_rx)),
            );
            response
        })
        .await;
        match result {
            Err(_) => self.finish_timeout(out, err).await,
            Ok(Err(e)) => {
                self.finish_broken(format!("unreadable response: {e}"), out, err)
                    .await
            }
            Ok(Ok(None)) => self.finish_dead(out, err).await,
            Ok(Ok(Some(line))) => {
                let response = match serde_json::from_slice::<WorkerResponse>(&line) {
                    Ok(r) if r.id == id => r,
                    Ok(r) => {
                        return self
                            .finish_broken(
                                format!("response for request {} while waiting for {id}", r.id),
                                out,
                                err,
                            )
                            .await;
                    }
                    Err(e) => {
                        return self
                            .finish_broken(format!("malformed response: {e}"), out, err)
                            .await;
                    }
                };
                let complete = out.complete && err.complete;
                self.stdout_carry = std::mem::take(&mut out.leftover);
                self.stderr_carry = std::mem::take(&mut err.leftover);
                let (stdout, stderr) = (out.finish(), err.finish());
                if complete {
                    RunOutput {
                        outcome: Outcome::Finished(response),
                        stdout,
                        stderr,
                        reusable: true,
                    }
                } else {
                    // The code closed or redirected fd 1/2: this worker's output can no
                    // longer be delimited, so it is replaced.
                    self.kill();
                    RunOutput {
                        outcome: Outcome::Finished(response),
                        stdout,
                        stderr,
                        reusable: false,
                    }
                }
            }
        }
    }

    async fn drain_after_kill(&mut self, out: &mut StreamCollector, err: &mut StreamCollector) {
        let until = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        let never = b"\0never-a-marker\0".to_vec();
        let Worker { stdout, stderr, .. } = self;
        tokio::join!(
            collect(stdout, out, &never, until, None),
            collect(stderr, err, &never, until, None)
        );
    }

    async fn finish_timeout(
        &mut self,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        self.kill();
        self.drain_after_kill(&mut out, &mut err).await;
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, self.child.wait()).await;
        RunOutput {
            outcome: Outcome::TimedOut,
            stdout: out.finish(),
            stderr: err.finish(),
            reusable: false,
        }
    }

    async fn finish_dead(
        &mut self,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        self.drain_after_kill(&mut out, &mut err).await;
        self.kill();
        let how = match tokio::time::timeout(DRAIN_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) => describe_status(status),
            _ => "no exit status".to_string(),
        };
        RunOutput {
            outcome: Outcome::Died(how),
            stdout: out.finish(),
            stderr: err.finish(),
            reusable: false,
        }
    }

    async fn finish_broken(
        &mut self,
        why: String,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        self.kill();
        self.drain_after_kill(&mut out, &mut err).await;
        RunOutput {
            outcome: Outcome::Broken(why),
            stdout: out.finish(),
            stderr: err.finish(),
            reusable: false,
        }
    }

    /// SIGKILL to the worker's whole process group (the helper made it a group leader).
    pub fn kill(&mut self) {
        kill_group(self.pid);
        let _ = self.child.start_kill();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        kill_group(self.pid);
    }
}

fn kill_group(pid: i32) {
    if pid > 1 {
        // SAFETY: plain syscalls; ESRCH (already gone) is fine.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Reads `reader` into `sink` until the marker, EOF or the deadline; `soft` may bring the
/// deadline forward while reading (once the call's result has arrived).
async fn collect<R: AsyncRead + Unpin>(
    reader: &mut R,
    sink: &mut StreamCollector,
    marker: &[u8],
    deadline: tokio::time::Instant,
    mut soft: Option<tokio::sync::watch::Receiver<Option<tokio::time::Instant>>>,
) {
    enum Step {
        Read(Result<std::io::Result<usize>, tokio::time::error::Elapsed>),
        SoftChanged(bool),
    }
    if sink.scan_carry(marker) {
        return;
    }
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let limit = soft
            .as_ref()
            .and_then(|s| *s.borrow())
            .map_or(deadline, |d| d.min(deadline));
        let step = tokio::select! {
            r = tokio::time::timeout_at(limit, reader.read(&mut chunk)) => Step::Read(r),
            alive = wait_for_change(&mut soft) => Step::SoftChanged(alive),
        };
        match step {
            Step::SoftChanged(true) => {}
            Step::SoftChanged(false) => soft = None,
            Step::Read(Ok(Ok(0)) | Ok(Err(_)) | Err(_)) => {
                sink.flush_scan();
                return;
            }
            Step::Read(Ok(Ok(n))) => {
                if sink.feed(&chunk[..n], marker) {
                    return;
                }
            }
        }
    }
}

async fn wait_for_change(
    soft: &mut Option<tokio::sync::watch::Receiver<Option<tokio::time::Instant>>>,
) -> bool {
    match soft {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Keeps the first `cap` bytes of a stream and finds the end-of-output marker even when
/// it is split across reads.
struct StreamCollector {
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
    complete: bool,
    scan: Vec<u8>,
    /// Bytes after the marker (printed by a background thread): the next call's output.
    leftover: Vec<u8>,
    /// Also receives every kept byte as it is kept.
    tap: Option<OutputTap>,
}

impl StreamCollector {
    fn new(cap: usize, carry: Vec<u8>) -> StreamCollector {
        StreamCollector {
            kept: Vec::new(),
            cap,
            truncated: false,
            complete: false,
            scan: carry,
            leftover: Vec::new(),
            tap: None,
        }
    }

    fn emit(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        let kept = &bytes[..bytes.len().min(room)];
        if let Some(tap) = &self.tap
            && !kept.is_empty()
            && tap.send(kept.to_vec()).is_err()
        {
            self.tap = None;
        }
        self.kept.extend_from_slice(kept);
    }

    /// Looks for the marker in what is already buffered (output carried over).
    fn scan_carry(&mut self, marker: &[u8]) -> bool {
        self.feed(&[], marker)
    }

    /// Returns true once the marker has been seen.
    fn feed(&mut self, chunk: &[u8], marker: &[u8]) -> bool {
        self.scan.extend_from_slice(chunk);
        if let Some(pos) = find(&self.scan, marker) {
            let scan = std::mem::take(&mut self.scan);
            self.emit(&scan[..pos]);
            self.leftover = scan[pos + marker.len()..].to_vec();
            self.complete = true;
            return true;
        }
        // Hold back only a tail that could be the start of a split marker, so output
        // streams on as it arrives (progress) instead of lagging a marker's length.
        let window = self
            .scan
            .len()
            .saturating_sub(marker.len().saturating_sub(1));
        let hold = (window..self.scan.len())
            .find(|&p| marker.starts_with(&self.scan[p..]))
            .unwrap_or(self.scan.len());
        if hold > 0 {
            let head: Vec<u8> = self.scan.drain(..hold).collect();
            self.emit(&head);
        }
        false
    }

    fn flush_scan(&mut self) {
        let scan = std::mem::take(&mut self.scan);
        self.emit(&scan);
    }

    fn finish(mut self) -> Captured {
        if !self.complete {
            self.flush_scan();
        }
        Captured {
            bytes: self.kept,
            truncated: self.truncated,
            complete: self.complete,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_split_across_reads_is_found() {
        let marker = b"\0WARDEN-END:abc\0";
        let mut c = StreamCollector::new(1024, Vec::new());
        assert!(!c.feed(b"hello \0WARD", marker));
        assert!(c.feed(b"EN-END:abc\0tail", marker));
        assert_eq!(c.leftover, b"tail");
        let captured = c.finish();
        assert_eq!(captured.bytes, b"hello ");
        assert!(captured.complete);
        assert!(!captured.truncated);
    }

    #[test]
    fn output_streams_on_at_once_unless_it_may_start_a_marker() {
        let marker = b"\0WARDEN-END:abc\0";
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut c = StreamCollector::new(1 << 20, Vec::new());
        c.tap = Some(tx);
        assert!(!c.feed(b"line 0\n", marker));
        assert_eq!(rx.try_recv().unwrap(), b"line 0\n");
        assert!(!c.feed(b"x\0WARD", marker));
        assert_eq!(rx.try_recv().unwrap(), b"x");
        assert!(c.feed(b"EN-END:abc\0", marker));
        assert!(rx.try_recv().is_err());
        assert_eq!(c.finish().bytes, b"line 0\nx");
    }

    #[test]
    fn output_past_the_cap_is_dropped_and_flagged() {
        let marker = b"\0M\0";
        let mut c = StreamCollector::new(4, Vec::new());
        assert!(c.feed(b"abcdefgh\0M\0", marker));
        let captured = c.finish();
        assert_eq!(captured.bytes, b"abcd");
        assert!(captured.truncated);
    }

    #[test]
    fn carried_output_is_scanned_first() {
        let marker = b"\0M\0";
        let mut c = StreamCollector::new(64, b"early\0M\0".to_vec());
        assert!(c.scan_carry(marker));
        assert_eq!(c.finish().bytes, b"early");
    }

    #[test]
    fn missing_marker_keeps_everything_read() {
        let mut c = StreamCollector::new(64, Vec::new());
        assert!(!c.feed(b"partial", b"\0MARKER\0"));
        let captured = c.finish();
        assert_eq!(captured.bytes, b"partial");
        assert!(!captured.complete);
    }
}
