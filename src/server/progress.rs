//! Progress notifications for a running `execute_python` call whose request carried a
//! `progressToken`: the code's new stdout lines, as they are printed, at most one
//! notification per [`MIN_INTERVAL`]. The full output is still in the result; progress is
//! for watching a long run, so an oversized batch is shortened, never queued up.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use crate::backend::OutputTap;

/// Least time between two notifications of one call.
pub const MIN_INTERVAL: Duration = Duration::from_millis(200);
/// Most text in one notification's message.
const MAX_MESSAGE_BYTES: usize = 4096;

/// Starts forwarding; the returned tap goes to the worker. The task ends (after a last
/// notification with whatever is left) once the tap is dropped.
pub fn start(
    peer: Peer<RoleServer>,
    token: ProgressToken,
) -> (OutputTap, tokio::task::JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(forward(rx, peer, token));
    (tx, task)
}

async fn forward(mut rx: UnboundedReceiver<Vec<u8>>, peer: Peer<RoleServer>, token: ProgressToken) {
    let mut batcher = Batcher::default();
    let mut last_sent: Option<Instant> = None;
    loop {
        // With whole lines waiting, wake when they may be sent; else wait for output.
        let deadline = batcher
            .has_lines()
            .then(|| last_sent.map_or_else(Instant::now, |at| at + MIN_INTERVAL));
        let received = match deadline {
            Some(at) => tokio::time::timeout_at(at, rx.recv()).await.ok(),
            None => Some(rx.recv().await),
        };
        match received {
            Some(Some(chunk)) => batcher.push(&chunk),
            Some(None) => break,
            None => {}
        }
        let due = last_sent.is_none_or(|at| at.elapsed() >= MIN_INTERVAL);
        if due && let Some((count, text)) = batcher.take_lines(false) {
            send(&peer, &token, count, text).await;
            last_sent = Some(Instant::now());
        }
    }
    if let Some((count, text)) = batcher.take_lines(true) {
        send(&peer, &token, count, text).await;
    }
}

async fn send(peer: &Peer<RoleServer>, token: &ProgressToken, count: u64, text: String) {
    let param = ProgressNotificationParam::new(token.clone(), count as f64).with_message(text);
    if let Err(e) = peer.notify_progress(param).await {
        tracing::debug!(error = %e, "progress notification not delivered");
    }
}

/// Splits streamed bytes into whole lines and numbers them. Pure.
#[derive(Debug, Default)]
pub struct Batcher {
    pending: Vec<u8>,
    /// Lines handed out so far: the notification's `progress` (it only grows).
    lines: u64,
}

impl Batcher {
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    pub fn has_lines(&self) -> bool {
        self.pending.contains(&b'\n')
    }

    /// The complete lines so far (and, at the `end`, an unfinished last line), with the
    /// running line count; `None` when there is nothing to send.
    pub fn take_lines(&mut self, end: bool) -> Option<(u64, String)> {
        let cut = if end {
            self.pending.len()
        } else {
            self.pending.iter().rposition(|b| *b == b'\n')? + 1
        };
        if cut == 0 {
            return None;
        }
        let batch: Vec<u8> = self.pending.drain(..cut).collect();
        let text = String::from_utf8_lossy(&batch);
        let count = text.lines().count() as u64;
        self.lines += count.max(1);
        Some((self.lines, shorten(&text)))
    }
}

/// Keeps the last lines of an oversized batch (the newest output is what a watcher
/// wants), saying how many were left out. Pure.
fn shorten(text: &str) -> String {
    if text.len() <= MAX_MESSAGE_BYTES {
        return text.to_string();
    }
    let mut start = text.len() - MAX_MESSAGE_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let start = text[start..].find('\n').map_or(start, |n| start + n + 1);
    let skipped = text[..start].lines().count();
    format!(
        "[{skipped} earlier lines are in the result]\n{}",
        &text[start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_lines_go_until_the_end() {
        let mut b = Batcher::default();
        b.push(b"one\ntw");
        assert!(b.has_lines());
        assert_eq!(b.take_lines(false), Some((1, "one\n".into())));
        assert!(!b.has_lines());
        assert_eq!(b.take_lines(false), None);
        b.push(b"o\nthree");
        assert_eq!(b.take_lines(false), Some((2, "two\n".into())));
        assert_eq!(b.take_lines(true), Some((3, "three".into())));
        assert_eq!(b.take_lines(true), None);
    }

    #[test]
    fn big_batches_keep_their_newest_lines() {
        let text: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let short = shorten(&text);
        assert!(short.len() <= MAX_MESSAGE_BYTES + 64, "{}", short.len());
        assert!(short.ends_with("line 1999\n"));
        assert!(short.starts_with('['), "{}", &short[..40]);
    }
}
