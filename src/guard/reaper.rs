//! Frees parsed trees off the request path. Dropping a syntax tree walks
//! and frees every node, about a tenth of a cache miss on ordinary code; the
//! verdict does not wait for it. One background thread, started on first
//! use, frees what it is handed, with the parse threads' stack (a deep tree
//! frees recursively; its depth is bounded by the nesting scan).
//!
//! The queue is short and never blocks: when it is full, or the thread could
//! not be started, the caller frees the tree itself, so memory held for
//! freeing stays bounded and nothing waits on this thread.

use std::sync::OnceLock;
use std::sync::mpsc::{self, SyncSender, TrySendError};

use super::pool::STACK_BYTES;

/// Sources shorter than this have their tree freed by the caller: a small
/// tree frees in less time than the hand-off costs (waking this thread, and
/// its frees contending for the allocator's lock with the caller's next
/// parse); measured with `cargo bench --bench guard`, 20-line cells.
pub const INLINE_FREE_BYTES: usize = 4096;

/// Trees waiting to be freed at most.
const QUEUE: usize = 4;

type Garbage = Box<dyn Send>;

static REAPER: OnceLock<Option<SyncSender<Garbage>>> = OnceLock::new();

/// Frees `value` on the background thread, or here when it cannot take it.
pub fn free_later<T: Send + 'static>(value: T) {
    let Some(tx) = REAPER.get_or_init(start) else {
        return;
    };
    match tx.try_send(Box::new(value)) {
        Ok(()) => {}
        Err(TrySendError::Full(v) | TrySendError::Disconnected(v)) => drop(v),
    }
}

fn start() -> Option<SyncSender<Garbage>> {
    let (tx, rx) = mpsc::sync_channel::<Garbage>(QUEUE);
    std::thread::Builder::new()
        .name("warden-guard-free".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            for garbage in rx {
                drop(garbage);
            }
        })
        .ok()?;
    Some(tx)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn everything_handed_over_is_freed() {
        let freed = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            free_later(Counted(Arc::clone(&freed)));
        }
        let until = Instant::now() + Duration::from_secs(30);
        while freed.load(Ordering::SeqCst) < 100 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(freed.load(Ordering::SeqCst), 100);
    }
}
