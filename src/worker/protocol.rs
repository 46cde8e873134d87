//! The worker protocol, independent of how the worker was started: JSON request lines on
//! a request stream, JSON response lines on a response stream, and the code's own fds 1
//! and 2 on two more streams, each call's output between a start and an end marker that
//! carry the request's nonce (see [`super::capture`]). Any backend that can hand over
//! those four streams (host pipes, a container's demultiplexed attach stream) reuses
//! [`Channel`] unchanged.
//!
//! Wall clock and output caps are enforced here; killing is the backend's, through
//! [`WorkerProcess`].

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::capture::{Markers, StreamCollector};
use crate::worker::report::{HelperMessage, SandboxReport};

/// Longest protocol line the server accepts from a worker, before the per-call part
/// (the result and traceback are capped at the output limit, and JSON's `\uXXXX`
/// escapes can grow each character sixfold).
pub const BASE_RESPONSE_LINE: u64 = 1 << 20;
/// How long to wait for the end-of-output markers once the result is in, and for the
/// streams to drain after a kill.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A stream the server reads from the worker.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The stream the server writes requests to.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The process (or container) behind a channel: the one thing the protocol cannot do
/// by itself is stop it.
pub trait WorkerProcess: Send {
    /// Kills the worker and everything it started, at once.
    fn kill(&mut self);
    /// Waits briefly for the worker to end and says how it ended.
    fn wait_exit(&mut self) -> super::handle::BoxFuture<'_, String>;
    /// Stops every thread of the worker until [`WorkerProcess::thaw`]: between calls a
    /// worker uses no CPU and writes nothing.
    fn freeze(&mut self);
    /// Lets a frozen worker run again.
    fn thaw(&mut self);
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
    /// The cap on each of fd 1 and fd 2: the worker drops what a call writes past it
    /// through `sys.stdout`/`sys.stderr` rather than piping it here (see `dropped`).
    stream_cap: usize,
    /// Sent before the guard's verdict: the worker compiles the code and waits for a
    /// [`VerdictLine`] before it runs or writes anything (see [`Gate`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    hold: bool,
}

/// Why a line could not be sent to the worker.
enum SendFailure {
    Encode(String),
    Dead,
    TimedOut,
}

/// The line that follows a held request: run it (`go`) or forget it (`drop`).
#[derive(Debug, Serialize)]
struct VerdictLine {
    #[serde(rename = "type")]
    kind: &'static str,
    id: u64,
}

/// What a held call waits for before it runs: the static guard's decision, as a future
/// that says whether the code may run. Sending the request first lets the worker
/// compile the code while the server's guard judges it, so a long cell's guard costs
/// no time of its own; nothing of the code runs, and no input file is written, before
/// the gate opens.
pub type Gate<'a> = std::pin::Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

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
    /// What threads started by earlier calls wrote through `sys.stdout`/`sys.stderr`
    /// since the previous response: set apart by the worker, never this call's output.
    #[serde(default)]
    pub late: WorkerLate,
    /// Bytes the call wrote through `sys.stdout`/`sys.stderr` past the stream cap, which
    /// the worker counted and never sent. Only ever bytes past the cap (the worker counts
    /// only what it wrote itself, never more than the stream holds), so a stream with
    /// any is cut. The code could understate it, but then it only hides that it cut its
    /// own output: the server's cap on what it reads stands either way.
    #[serde(default)]
    pub dropped: WorkerDropped,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub struct WorkerDropped {
    #[serde(default)]
    pub stdout: u64,
    #[serde(default)]
    pub stderr: u64,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct WorkerLate {
    pub bytes: u64,
    /// The first of those bytes, as text (the worker caps it).
    pub excerpt: String,
}

/// Output that did not belong to the call it arrived during, and so is not in its
/// stdout or stderr.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LateOutput {
    /// Bytes that reached fd 1 or 2 between calls (after the previous call's end marker,
    /// before this one's start marker), dropped by the server.
    pub between_calls: u64,
    /// Bytes threads of earlier calls wrote during this call, set apart by the worker.
    pub from_earlier_calls: u64,
    /// The first of the latter, as text.
    pub excerpt: String,
}

impl LateOutput {
    pub fn is_empty(&self) -> bool {
        self.between_calls == 0 && self.from_earlier_calls == 0
    }
}

/// What one stream (stdout or stderr) produced during a call.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    pub bytes: Vec<u8>,
    pub truncated: bool,
    /// The end-of-output marker was seen: everything the call printed is here.
    pub complete: bool,
}

impl Captured {
    /// The bytes as text, taken out of `self`: moved when they are UTF-8 (no copy of up
    /// to the output cap), else decoded lossily.
    pub fn take_text(&mut self) -> String {
        String::from_utf8(std::mem::take(&mut self.bytes))
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

#[derive(Debug)]
pub enum Outcome {
    Finished(WorkerResponse),
    TimedOut,
    /// The worker died during the call; the text says how.
    Died(String),
    /// The worker broke the protocol (or its output streams); it must be replaced.
    Broken(String),
    /// A held call whose gate stayed shut: the code never ran, and the worker is ready
    /// for the next call.
    Withheld,
}

#[derive(Debug)]
pub struct RunOutput {
    pub outcome: Outcome,
    pub stdout: Captured,
    pub stderr: Captured,
    /// The worker can serve another call (false after a timeout, death or breakage).
    pub reusable: bool,
    /// Output written outside its call, kept out of `stdout` and `stderr`.
    pub late: LateOutput,
}

impl RunOutput {
    /// What fd 1 produced, decoded lossily.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout.bytes).into_owned()
    }
}

/// Receives stdout bytes as the worker writes them (only what is kept under the output
/// cap), for progress notifications. Unbounded is safe: the cap bounds it.
pub type OutputTap = tokio::sync::mpsc::UnboundedSender<Vec<u8>>;

/// How the start-up handshake failed.
#[derive(Debug)]
pub enum Handshake {
    /// The sandbox helper refused: a required wall could not be installed.
    Refused {
        wall: String,
        message: String,
    },
    /// The response stream closed before the helper's report.
    HelperGone,
    /// The response stream closed after the report, before Python said it was ready.
    PythonGone,
    /// Something else came first.
    Unexpected(String),
    Io(std::io::Error),
}

/// The four streams of one worker and the protocol state that goes with them.
pub struct Channel {
    requests: Writer,
    responses: BufReader<Reader>,
    stdout: Reader,
    stderr: Reader,
    /// Bytes written after the previous call's end marker: reported with this call.
    late_carry: u64,
    next_id: u64,
    /// A call was started and never completed (its future was dropped: the client
    /// cancelled). The worker's protocol state is unknown, so it must not be reused.
    busy: bool,
    /// Where the next call's stdout is also sent as it arrives (taken by that call).
    stdout_tap: Option<OutputTap>,
}

impl Channel {
    pub fn new(requests: Writer, responses: Reader, stdout: Reader, stderr: Reader) -> Channel {
        Channel {
            requests,
            responses: BufReader::new(responses),
            stdout,
            stderr,
            late_carry: 0,
            next_id: 1,
            busy: false,
            stdout_tap: None,
        }
    }

    /// Streams the next call's stdout to `tap` as well, while it runs.
    pub fn tap_stdout(&mut self, tap: Option<OutputTap>) {
        self.stdout_tap = tap;
    }

    /// Sends the helper its framed policy (a little-endian length, then JSON).
    pub async fn send_policy(&mut self, policy_json: &[u8]) -> std::io::Result<()> {
        let mut framed = (policy_json.len() as u64).to_le_bytes().to_vec();
        framed.extend_from_slice(policy_json);
        self.requests.write_all(&framed).await?;
        self.requests.flush().await
    }

    /// Reads the helper's sandbox report, then Python's "ready" line.
    pub async fn handshake(&mut self) -> Result<SandboxReport, Handshake> {
        let report = match read_line(&mut self.responses, BASE_RESPONSE_LINE).await {
            Ok(Some(line)) => match serde_json::from_slice::<HelperMessage>(&line) {
                Ok(HelperMessage::Sandbox { report }) => report,
                Ok(HelperMessage::SandboxError { wall, message }) => {
                    return Err(Handshake::Refused { wall, message });
                }
                Err(e) => return Err(Handshake::Unexpected(e.to_string())),
            },
            Ok(None) => return Err(Handshake::HelperGone),
            Err(e) => return Err(Handshake::Io(e)),
        };
        match read_line(&mut self.responses, BASE_RESPONSE_LINE).await {
            Ok(Some(line)) if line.starts_with(b"{\"type\": \"ready\"") => Ok(report),
            Ok(Some(line)) => Err(Handshake::Unexpected(
                String::from_utf8_lossy(&line).trim().to_string(),
            )),
            Ok(None) => Err(Handshake::PythonGone),
            Err(e) => Err(Handshake::Io(e)),
        }
    }

    /// The worker's fd 2 so far (start-up diagnostics), waiting briefly for it.
    pub async fn stderr_tail(&mut self) -> String {
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(
            Duration::from_millis(500),
            (&mut self.stderr).take(16 << 10).read_to_end(&mut buf),
        )
        .await;
        let text = String::from_utf8_lossy(&buf).trim().to_string();
        if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        }
    }

    /// A previous call was abandoned midway.
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// Runs one request with a wall-clock limit. On timeout the process is killed; the
    /// output printed until then is returned. `busy` stays set if this future is dropped
    /// before it completes.
    pub async fn execute<P: WorkerProcess + ?Sized>(
        &mut self,
        process: &mut P,
        code: &str,
        inputs: &[InputFile],
        timeout: Duration,
        output_cap: usize,
        gate: Option<Gate<'_>>,
    ) -> RunOutput {
        self.busy = true;
        let output = self
            .execute_inner(process, code, inputs, timeout, output_cap, gate)
            .await;
        self.busy = false;
        output
    }

    async fn execute_inner<P: WorkerProcess + ?Sized>(
        &mut self,
        process: &mut P,
        code: &str,
        inputs: &[InputFile],
        timeout: Duration,
        output_cap: usize,
        gate: Option<Gate<'_>>,
    ) -> RunOutput {
        let id = self.next_id;
        self.next_id += 1;
        let nonce_bytes: [u8; 16] = crate::random_bytes();
        let nonce: String = crate::hex(&nonce_bytes);
        let mut out = StreamCollector::new(output_cap, Markers::for_nonce(&nonce));
        out.tap = self.stdout_tap.take();
        let mut err = StreamCollector::new(output_cap, Markers::for_nonce(&nonce));

        let request = ExecRequest {
            kind: "exec",
            id,
            code,
            nonce: &nonce,
            inputs,
            result_cap: output_cap,
            stream_cap: output_cap,
            hold: gate.is_some(),
        };
        let mut deadline_tokio = tokio::time::Instant::now() + timeout;
        let line_limit = BASE_RESPONSE_LINE + 2 * 6 * output_cap as u64;
        if let Err(failure) = self.send_line(&request, "request", deadline_tokio).await {
            return self.fail_send(process, failure, out, err).await;
        }
        if let Some(gate) = gate {
            // The guard's time is not the code's: as for a call sent after its verdict,
            // the timeout runs from the moment the code may run. The gate itself has no
            // limit, as a verdict awaited before sending has none; a cancelled call
            // drops this future, and the worker with it.
            let go = gate.await;
            deadline_tokio = tokio::time::Instant::now() + timeout;
            let verdict = VerdictLine {
                kind: if go { "go" } else { "drop" },
                id,
            };
            if let Err(failure) = self
                .send_line(&verdict, "verdict line", deadline_tokio)
                .await
            {
                return self.fail_send(process, failure, out, err).await;
            }
            if !go {
                return withheld();
            }
        }

        let Channel {
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
                collect(stdout, &mut out, deadline_tokio, Some(soft_rx.clone())),
                collect(stderr, &mut err, deadline_tokio, Some(soft_rx)),
            );
            response
        })
        .await;
        let line = match result {
            Err(_) => return self.finish_timeout(process, out, err).await,
            Ok(Err(e)) => {
                let why = format!("unreadable response: {e}");
                return self.finish_broken(process, why, out, err).await;
            }
            Ok(Ok(None)) => return self.finish_dead(process, out, err).await,
            Ok(Ok(Some(line))) => line,
        };
        let response = match response_to(&line, id) {
            Ok(r) => r,
            Err(why) => return self.finish_broken(process, why, out, err).await,
        };
        let complete = out.complete() && err.complete();
        if !complete {
            // The code closed or redirected fd 1/2: this worker's output can no longer
            // be delimited, so it is replaced.
            process.kill();
        }
        self.output(Outcome::Finished(response), out, err, complete)
    }

    /// The call's result, with the late output of its streams counted.
    fn output(
        &mut self,
        outcome: Outcome,
        out: StreamCollector,
        err: StreamCollector,
        reusable: bool,
    ) -> RunOutput {
        let (mut stdout, out_before, out_after) = out.finish();
        let (mut stderr, err_before, err_after) = err.finish();
        if let Outcome::Finished(r) = &outcome {
            stdout.truncated |= r.dropped.stdout > 0;
            stderr.truncated |= r.dropped.stderr > 0;
        }
        let between_calls = self.late_carry + out_before + err_before;
        self.late_carry = out_after + err_after;
        let (from_earlier_calls, excerpt) = match &outcome {
            Outcome::Finished(r) => (r.late.bytes, r.late.excerpt.clone()),
            _ => (0, String::new()),
        };
        RunOutput {
            outcome,
            stdout,
            stderr,
            reusable,
            late: LateOutput {
                between_calls,
                from_earlier_calls,
                excerpt,
            },
        }
    }

    async fn drain_after_kill(&mut self, out: &mut StreamCollector, err: &mut StreamCollector) {
        let until = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        let Channel { stdout, stderr, .. } = self;
        tokio::join!(
            collect(stdout, out, until, None),
            collect(stderr, err, until, None)
        );
    }

    /// Writes one JSON line to the worker before `deadline`.
    async fn send_line<T: Serialize>(
        &mut self,
        message: &T,
        what: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), SendFailure> {
        let mut line = serde_json::to_vec(message)
            .map_err(|e| SendFailure::Encode(format!("could not encode the {what}: {e}")))?;
        line.push(b'\n');
        let write = tokio::time::timeout_at(deadline, async {
            self.requests.write_all(&line).await?;
            self.requests.flush().await
        })
        .await;
        match write {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(SendFailure::Dead),
            Err(_) => Err(SendFailure::TimedOut),
        }
    }

    async fn fail_send<P: WorkerProcess + ?Sized>(
        &mut self,
        process: &mut P,
        failure: SendFailure,
        out: StreamCollector,
        err: StreamCollector,
    ) -> RunOutput {
        match failure {
            SendFailure::Encode(why) => self.finish_broken(process, why, out, err).await,
            SendFailure::Dead => self.finish_dead(process, out, err).await,
            SendFailure::TimedOut => self.finish_timeout(process, out, err).await,
        }
    }

    async fn finish_timeout<P: WorkerProcess + ?Sized>(
        &mut self,
        process: &mut P,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        process.kill();
        self.drain_after_kill(&mut out, &mut err).await;
        let _ = process.wait_exit().await;
        self.output(Outcome::TimedOut, out, err, false)
    }

    async fn finish_dead<P: WorkerProcess + ?Sized>(
        &mut self,
        process: &mut P,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        self.drain_after_kill(&mut out, &mut err).await;
        // A host worker's helper exits as the worker did, a moment after the pipes
        // closed: let it, so that the status says how the worker really ended.
        let how = process.wait_exit().await;
        process.kill();
        self.output(Outcome::Died(how), out, err, false)
    }

    async fn finish_broken<P: WorkerProcess + ?Sized>(
        &mut self,
        process: &mut P,
        why: String,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        process.kill();
        self.drain_after_kill(&mut out, &mut err).await;
        self.output(Outcome::Broken(why), out, err, false)
    }
}

async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
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
/// Reads `reader` into `sink` until the end marker, EOF or the deadline; `soft` may bring
/// the deadline forward while reading (once the call's result has arrived). One timer
/// for the whole call, moved only when the deadline does: not one per read.
async fn collect<R: AsyncRead + Unpin>(
    reader: &mut R,
    sink: &mut StreamCollector,
    deadline: tokio::time::Instant,
    mut soft: Option<tokio::sync::watch::Receiver<Option<tokio::time::Instant>>>,
) {
    enum Step {
        Read(std::io::Result<usize>),
        SoftChanged(bool),
        Elapsed,
    }
    if sink.complete() {
        return;
    }
    let limit = |soft: &Option<tokio::sync::watch::Receiver<Option<tokio::time::Instant>>>| {
        soft.as_ref()
            .and_then(|s| *s.borrow())
            .map_or(deadline, |d| d.min(deadline))
    };
    let timer = tokio::time::sleep_until(limit(&soft));
    tokio::pin!(timer);
    loop {
        let step = tokio::select! {
            biased;
            r = reader.read(sink.space()) => Step::Read(r),
            alive = wait_for_change(&mut soft) => Step::SoftChanged(alive),
            () = &mut timer => Step::Elapsed,
        };
        match step {
            Step::SoftChanged(alive) => {
                if !alive {
                    soft = None;
                }
                timer.as_mut().reset(limit(&soft));
            }
            Step::Read(Ok(0) | Err(_)) | Step::Elapsed => return,
            Step::Read(Ok(n)) => {
                if sink.filled(n) {
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

/// A held call the guard refused: nothing ran, and the worker is as it was.
fn withheld() -> RunOutput {
    RunOutput {
        outcome: Outcome::Withheld,
        stdout: Captured::default(),
        stderr: Captured::default(),
        reusable: true,
        late: LateOutput::default(),
    }
}

/// The worker's response line to request `id`, or why it is not one.
fn response_to(line: &[u8], id: u64) -> Result<WorkerResponse, String> {
    match serde_json::from_slice::<WorkerResponse>(line) {
        Ok(r) if r.id == id => Ok(r),
        Ok(r) => Err(format!(
            "response for request {} while waiting for {id}",
            r.id
        )),
        Err(e) => Err(format!("malformed response: {e}")),
    }
}
