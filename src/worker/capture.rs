//! Capturing one call's output from one of the worker's output streams (fd 1 or fd 2).
//!
//! The worker writes a start marker (`\0WARDEN-START:<nonce>\0`) before it runs a call
//! and an end marker (`\0WARDEN-END:<nonce>\0`) after it, both carrying that call's
//! random nonce. What lies between them is the call's output; what comes before the start
//! marker was written between calls (by a thread an earlier call left running, in the
//! moment before the worker was frozen) and is never shown as this call's output: it is
//! dropped and counted. Markers split across reads are found all the same.
//!
//! Cost per byte is one `memchr::memmem` scan and, under the output cap only, one copy:
//! the stream is read straight into the collector's buffer, and past the cap bytes are
//! only scanned for the end marker and counted. Cost per read (a wake-up of the runtime,
//! a system call) is paid once per [`READ_CHUNK`]: the host backend makes its output
//! pipes that large ([`PIPE_SIZE`]), so a writer fills a whole chunk before the reader
//! is woken, and one read takes it all. The read buffers are large, so they are kept
//! for the next call ([`SpareBuffers`]) rather than allocated (and faulted in) anew.

use std::sync::Mutex;

use memchr::memmem::Finder;

use super::protocol::{Captured, OutputTap};

/// What the host backend asks the kernel for as the size of a worker's stdout and
/// stderr pipes (`F_SETPIPE_SZ`; `/proc/sys/fs/pipe-max-size` is 1 MiB by default) when
/// the server is root.
pub const PIPE_SIZE: usize = 1 << 20;
/// The same when the server is not root: the kernel counts every pipe's size against its
/// user (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default), and past that limit
/// gives *every* new pipe of that user, the user's other programs' too, one or two
/// pages. At this size 128 workers stay under half the default limit.
pub const PIPE_SIZE_UNPRIVILEGED: usize = 256 << 10;
/// Bytes read from the stream at a time: a full pipe in one read.
pub const READ_CHUNK: usize = PIPE_SIZE;
/// Read buffers kept for later calls; calls in flight beyond that allocate their own.
const SPARE_BUFFERS: usize = 4;

/// Read buffers of finished calls, handed to the next ones: a fresh buffer of this
/// size is a fresh mapping, whose pages fault in on every call.
pub struct SpareBuffers {
    spare: Mutex<Vec<Vec<u8>>>,
}

/// The buffers every channel of this server shares.
pub static SPARE: SpareBuffers = SpareBuffers {
    spare: Mutex::new(Vec::new()),
};

impl SpareBuffers {
    /// A buffer of `len` bytes (contents unspecified).
    fn take(&self, len: usize) -> Vec<u8> {
        let reused = self.spare.lock().ok().and_then(|mut s| s.pop());
        match reused {
            Some(mut buf) => {
                buf.resize(len, 0);
                buf
            }
            None => vec![0u8; len],
        }
    }

    /// Keeps `buf` for a later call, unless enough are kept already.
    fn give(&self, buf: Vec<u8>) {
        if let Ok(mut spare) = self.spare.lock()
            && spare.len() < SPARE_BUFFERS
        {
            spare.push(buf);
        }
    }
}

/// The two markers of one call.
pub struct Markers {
    start: Finder<'static>,
    end: Finder<'static>,
}

impl Markers {
    /// The markers carrying `nonce` (the worker writes the same bytes).
    pub fn for_nonce(nonce: &str) -> Markers {
        Markers {
            start: Finder::new(format!("\0WARDEN-START:{nonce}\0").as_bytes()).into_owned(),
            end: Finder::new(format!("\0WARDEN-END:{nonce}\0").as_bytes()).into_owned(),
        }
    }

    fn longest(&self) -> usize {
        self.start.needle().len().max(self.end.needle().len())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the start marker: bytes here are late output of earlier calls.
    Start,
    /// Between the markers: the call's own output.
    Output,
    /// After the end marker: late output again (counted for the next call).
    Done,
}

/// Keeps the first `cap` bytes of a call's output on one stream.
pub struct StreamCollector {
    markers: Markers,
    phase: Phase,
    /// Read buffer; its first `held` bytes are a tail of the previous read that could
    /// begin a marker split across reads.
    buf: Vec<u8>,
    held: usize,
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
    /// Bytes before the start marker (written between calls), dropped.
    pub late_before: u64,
    /// Bytes after the end marker (written after the call ended), dropped.
    pub late_after: u64,
    /// Also receives every kept byte as it is kept (progress notifications).
    pub tap: Option<OutputTap>,
}

impl StreamCollector {
    pub fn new(cap: usize, markers: Markers) -> StreamCollector {
        let buf = SPARE.take(READ_CHUNK + markers.longest());
        StreamCollector {
            markers,
            phase: Phase::Start,
            buf,
            held: 0,
            kept: Vec::new(),
            cap,
            truncated: false,
            late_before: 0,
            late_after: 0,
            tap: None,
        }
    }

    /// Where the next read goes.
    pub fn space(&mut self) -> &mut [u8] {
        let held = self.held;
        &mut self.buf[held..]
    }

    /// Takes in `n` bytes just read into [`StreamCollector::space`]; true once the end
    /// marker has been seen.
    pub fn filled(&mut self, n: usize) -> bool {
        let len = self.held + n;
        let mut at = 0;
        loop {
            let data = &self.buf[at..len];
            match self.phase {
                Phase::Done => {
                    self.late_after += data.len() as u64;
                    self.held = 0;
                    return true;
                }
                Phase::Start => match self.markers.start.find(data) {
                    Some(p) => {
                        self.late_before += p as u64;
                        at += p + self.markers.start.needle().len();
                        self.phase = Phase::Output;
                    }
                    None => {
                        let hold = marker_prefix_at_end(data, self.markers.start.needle());
                        self.late_before += (data.len() - hold) as u64;
                        self.hold_tail(len, hold);
                        return false;
                    }
                },
                Phase::Output => match self.markers.end.find(data) {
                    Some(p) => {
                        self.emit(at, at + p);
                        at += p + self.markers.end.needle().len();
                        self.phase = Phase::Done;
                    }
                    None => {
                        let hold = marker_prefix_at_end(data, self.markers.end.needle());
                        self.emit(at, len - hold);
                        self.hold_tail(len, hold);
                        return false;
                    }
                },
            }
        }
    }

    /// The end marker was seen: everything the call printed is here.
    pub fn complete(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Keeps `buf[from..to]` under the cap, counting the rest as cut.
    fn emit(&mut self, from: usize, to: usize) {
        let bytes = &self.buf[from..to];
        let room = self.cap.saturating_sub(self.kept.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        let kept = &bytes[..bytes.len().min(room)];
        if kept.is_empty() {
            return;
        }
        if let Some(tap) = &self.tap
            && tap.send(kept.to_vec()).is_err()
        {
            self.tap = None;
        }
        self.kept.extend_from_slice(kept);
    }

    /// Moves the last `hold` bytes of `buf[..len]` to the front for the next read.
    fn hold_tail(&mut self, len: usize, hold: usize) {
        self.buf.copy_within(len - hold..len, 0);
        self.held = hold;
    }

    /// The stream ended (or the wait did) without an end marker: held-back bytes are
    /// output after all, or late output if the call never started.
    pub fn finish(mut self) -> (Captured, u64, u64) {
        if self.held > 0 {
            match self.phase {
                Phase::Output => self.emit(0, self.held),
                Phase::Start => self.late_before += self.held as u64,
                Phase::Done => {}
            }
            self.held = 0;
        }
        SPARE.give(std::mem::take(&mut self.buf));
        let captured = Captured {
            bytes: std::mem::take(&mut self.kept),
            truncated: self.truncated,
            complete: self.phase == Phase::Done,
        };
        (captured, self.late_before, self.late_after)
    }
}

/// The length of the longest tail of `data` that is a proper prefix of `marker` (a
/// marker that may continue in the next read). Pure.
fn marker_prefix_at_end(data: &[u8], marker: &[u8]) -> usize {
    let longest = marker.len().saturating_sub(1).min(data.len());
    (1..=longest)
        .rev()
        .find(|&k| marker.starts_with(&data[data.len() - k..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` as successive reads; returns whether the end marker was seen.
    fn feed(c: &mut StreamCollector, pieces: &[&[u8]]) -> bool {
        let mut done = false;
        for piece in pieces {
            c.space()[..piece.len()].copy_from_slice(piece);
            done = c.filled(piece.len());
        }
        done
    }

    const S: &[u8] = b"\0WARDEN-START:abc\0";
    const E: &[u8] = b"\0WARDEN-END:abc\0";

    fn collector(cap: usize) -> StreamCollector {
        StreamCollector::new(cap, Markers::for_nonce("abc"))
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn output_between_the_markers_is_the_calls_own() {
        let mut c = collector(1024);
        let all = cat(&[b"late!", S, b"hello ", E, b"after"]);
        assert!(feed(&mut c, &[&all]));
        let (captured, before, after) = c.finish();
        assert_eq!(captured.bytes, b"hello ");
        assert!(captured.complete && !captured.truncated);
        assert_eq!((before, after), (5, 5));
    }

    #[test]
    fn markers_split_at_every_offset_are_found() {
        let all = cat(&[b"x", S, b"body", E, b"tail"]);
        for i in 0..all.len() {
            for j in i..all.len() {
                let mut c = collector(1024);
                let done = feed(&mut c, &[&all[..i], &all[i..j], &all[j..]]);
                assert!(done, "split at {i}, {j}");
                let (captured, before, after) = c.finish();
                assert_eq!(captured.bytes, b"body", "split at {i}, {j}");
                assert_eq!((before, after), (1, 4), "split at {i}, {j}");
            }
        }
    }

    #[test]
    fn output_streams_on_at_once_unless_it_may_start_a_marker() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut c = collector(1 << 20);
        c.tap = Some(tx);
        assert!(!feed(&mut c, &[S, b"line 0\n"]));
        assert_eq!(rx.try_recv().unwrap(), b"line 0\n");
        assert!(!feed(&mut c, &[b"x\0WARD"]));
        assert_eq!(rx.try_recv().unwrap(), b"x");
        assert!(feed(&mut c, &[b"EN-END:abc\0"]));
        assert!(rx.try_recv().is_err());
        assert_eq!(c.finish().0.bytes, b"line 0\nx");
    }

    #[test]
    fn output_past_the_cap_is_counted_not_kept() {
        let mut c = collector(4);
        let body = vec![b'y'; 3 * READ_CHUNK];
        let mut pieces: Vec<&[u8]> = vec![S];
        pieces.extend(body.chunks(READ_CHUNK));
        pieces.push(E);
        assert!(feed(&mut c, &pieces));
        let (captured, _, _) = c.finish();
        assert_eq!(captured.bytes, b"yyyy");
        assert!(captured.truncated && captured.complete);
    }

    #[test]
    fn an_end_marker_split_across_full_reads_is_found_at_every_offset() {
        // Reads as large as the pipe, with the end marker straddling the boundary
        // between two of them at each possible offset.
        for k in 0..=E.len() {
            let body = vec![b'y'; 2 * READ_CHUNK - S.len() - k];
            let all = cat(&[S, &body, E, b"tail"]);
            let mut c = collector(64 << 10);
            let pieces: Vec<&[u8]> = all.chunks(READ_CHUNK).collect();
            assert!(feed(&mut c, &pieces), "split {k} bytes into the marker");
            let (captured, before, after) = c.finish();
            assert_eq!(captured.bytes.len(), 64 << 10, "split {k}");
            assert!(captured.bytes.iter().all(|&b| b == b'y'), "split {k}");
            assert!(captured.truncated && captured.complete, "split {k}");
            assert_eq!((before, after), (0, 4), "split {k}");
        }
    }

    #[test]
    fn a_start_marker_split_across_full_reads_is_found() {
        for k in 1..S.len() {
            let late = vec![b'l'; READ_CHUNK - k];
            let all = cat(&[&late, S, b"own", E]);
            let mut c = collector(1024);
            let pieces: Vec<&[u8]> = all.chunks(READ_CHUNK).collect();
            assert!(feed(&mut c, &pieces), "split {k}");
            let (captured, before, _) = c.finish();
            assert_eq!(captured.bytes, b"own", "split {k}");
            assert_eq!(before, late.len() as u64, "split {k}");
        }
    }

    #[test]
    fn a_reused_read_buffer_shows_nothing_of_the_call_before() {
        let mut first = collector(1 << 20);
        let secret = cat(&[S, &vec![b's'; READ_CHUNK - S.len()]]);
        assert!(!feed(&mut first, &[&secret]));
        drop(first.finish());
        // Later collectors get the buffers back, contents and all: only what they read
        // is ever looked at.
        for _ in 0..=SPARE_BUFFERS {
            let mut c = collector(1 << 20);
            assert!(feed(&mut c, &[S, b"x", E]));
            assert_eq!(c.finish().0.bytes, b"x");
        }
    }

    #[test]
    fn a_missing_end_marker_keeps_everything_read() {
        let mut c = collector(64);
        assert!(!feed(&mut c, &[S, b"partial\0WARD"]));
        let (captured, _, _) = c.finish();
        assert_eq!(captured.bytes, b"partial\0WARD");
        assert!(!captured.complete);
    }

    #[test]
    fn another_calls_markers_are_output_not_boundaries() {
        let mut c = collector(1024);
        let all = cat(&[S, b"a\0WARDEN-END:zzz\0b", E]);
        assert!(feed(&mut c, &[&all]));
        assert_eq!(c.finish().0.bytes, b"a\0WARDEN-END:zzz\0b");
    }

    #[test]
    fn captured_text_is_moved_when_utf8_and_decoded_lossily_otherwise() {
        let mut valid = Captured {
            bytes: "héllo\n".as_bytes().to_vec(),
            ..Captured::default()
        };
        let at = valid.bytes.as_ptr();
        let text = valid.take_text();
        assert_eq!(text, "héllo\n");
        assert_eq!(text.as_ptr(), at, "valid UTF-8 is moved, not copied");
        assert!(valid.bytes.is_empty());
        // A character cut by the output cap, and bytes that are not UTF-8 at all.
        let mut cut = Captured {
            bytes: b"ab\xc3".to_vec(),
            ..Captured::default()
        };
        assert_eq!(cut.take_text(), "ab\u{FFFD}");
        let mut binary = Captured {
            bytes: b"\xff\x00z".to_vec(),
            ..Captured::default()
        };
        assert_eq!(binary.take_text(), "\u{FFFD}\u{0}z");
    }

    #[test]
    fn the_longest_marker_prefix_at_the_end_is_held() {
        assert_eq!(marker_prefix_at_end(b"abc\0WAR", E), 4);
        assert_eq!(marker_prefix_at_end(b"abc", E), 0);
        assert_eq!(marker_prefix_at_end(b"\0", E), 1);
        assert_eq!(marker_prefix_at_end(b"abc\0", E), 1);
    }
}
