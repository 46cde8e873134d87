//! The worker protocol, independent of how the worker was started: JSON request lines on
//! a request stream, JSON response lines on a response stream, and the code's own fds 1
//! and 2 on two more streams, each call's output ending with a marker that carries the
//! request's nonce. Any backend that can hand over those four streams (host pipes, a
//! container's demultiplexed attach stream) reuses [`Channel`] unchanged.
//!
//! Wall clock and output caps are enforced here; killing is the backend's, through
//! [`WorkerProcess`].

use std::future::Future;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::sandbox::report::{HelperMessage, SandboxReport};

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
    fn wait_exit(&mut self) -> impl Future<Output = String> + Send;
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
    stdout_carry: Vec<u8>,
    stderr_carry: Vec<u8>,
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
            stdout_carry: Vec::new(),
            stderr_carry: Vec::new(),
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
    pub async fn execute<P: WorkerProcess>(
        &mut self,
        process: &mut P,
        code: &str,
        inputs: &[InputFile],
        timeout: Duration,
        output_cap: usize,
    ) -> RunOutput {
        let deadline = Instant::now() + timeout;
        self.busy = true;
        let output = self
            .execute_inner(process, code, inputs, deadline, output_cap)
            .await;
        self.busy = false;
        output
    }

    async fn execute_inner<P: WorkerProcess>(
        &mut self,
        process: &mut P,
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
                let why = format!("could not encode the request: {e}");
                return self.finish_broken(process, why, out, err).await;
            }
        };
        let deadline_tokio = tokio::time::Instant::from_std(deadline);
        let line_limit = BASE_RESPONSE_LINE + 2 * 6 * output_cap as u64;
        let write = tokio::time::timeout_at(deadline_tokio, async {
            self.requests.write_all(&line).await?;
            self.requests.flush().await
        })
        .await;
        match write {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return self.finish_dead(process, out, err).await,
            Err(_) => return self.finish_timeout(process, out, err).await,
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
        let line = match result {
            Err(_) => return self.finish_timeout(process, out, err).await,
            Ok(Err(e)) => {
                let why = format!("unreadable response: {e}");
                return self.finish_broken(process, why, out, err).await;
            }
            Ok(Ok(None)) => return self.finish_dead(process, out, err).await,
            Ok(Ok(Some(line))) => line,
        };
        let response = match serde_json::from_slice::<WorkerResponse>(&line) {
            Ok(r) if r.id == id => r,
            Ok(r) => {
                let why = format!("response for request {} while waiting for {id}", r.id);
                return self.finish_broken(process, why, out, err).await;
            }
            Err(e) => {
                let why = format!("malformed response: {e}");
                return self.finish_broken(process, why, out, err).await;
            }
        };
        let complete = out.complete && err.complete;
        self.stdout_carry = std::mem::take(&mut out.leftover);
        self.stderr_carry = std::mem::take(&mut err.leftover);
        if !complete {
            // The code closed or redirected fd 1/2: this worker's output can no longer
            // be delimited, so it is replaced.
            process.kill();
        }
        RunOutput {
            outcome: Outcome::Finished(response),
            stdout: out.finish(),
            stderr: err.finish(),
            reusable: complete,
        }
    }

    async fn drain_after_kill(&mut self, out: &mut StreamCollector, err: &mut StreamCollector) {
        let until = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        let never = b"\0never-a-marker\0".to_vec();
        let Channel { stdout, stderr, .. } = self;
        tokio::join!(
            collect(stdout, out, &never, until, None),
            collect(stderr, err, &never, until, None)
        );
    }

    async fn finish_timeout<P: WorkerProcess>(
        &mut self,
        process: &mut P,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        process.kill();
        self.drain_after_kill(&mut out, &mut err).await;
        let _ = process.wait_exit().await;
        RunOutput {
            outcome: Outcome::TimedOut,
            stdout: out.finish(),
            stderr: err.finish(),
            reusable: false,
        }
    }

    async fn finish_dead<P: WorkerProcess>(
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
        RunOutput {
            outcome: Outcome::Died(how),
            stdout: out.finish(),
            stderr: err.finish(),
            reusable: false,
        }
    }

    async fn finish_broken<P: WorkerProcess>(
        &mut self,
        process: &mut P,
        why: String,
        mut out: StreamCollector,
        mut err: StreamCollector,
    ) -> RunOutput {
        process.kill();
        self.drain_after_kill(&mut out, &mut err).await;
        RunOutput {
            outcome: Outcome::Broken(why),
            stdout: out.finish(),
            stderr: err.finish(),
            reusable: false,
        }
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
