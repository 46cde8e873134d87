//! Long-lived parse threads with a large, known stack, for code too deep to
//! check on the caller's stack. The threads are kept rather than spawned per
//! check because a fresh thread starts with a cold allocator arena, which
//! costs about as much as the parse itself.
//!
//! ruff's parser calls `stacker::maybe_grow`: when fewer than 100 KiB of
//! stack are left (or the thread's stack bounds are unknown) it maps a fresh
//! 1 MiB stack, and a failed `mmap` is an assertion, i.e. a panic. That is
//! the one way a check could fail for a reason outside its input (a machine
//! short of memory or of mappings). So parsing only ever runs where stacker
//! knows the bounds and the room is there ([`room_to_check_inline`], the
//! 64 MiB parse threads), and a panic's message is carried into the error.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Stack for each parse thread. Depth is already bounded by the pre-parse
/// scan; this is generous headroom (reserved, not committed, until used).
pub const STACK_BYTES: usize = 64 * 1024 * 1024;

/// Stack a caller must have left for shallow code to be checked on its own
/// thread: the deepest shallow shapes need less than 256 KiB in a debug
/// build (`guard::tests`), and the parser's own red zone is 100 KiB, so with
/// this much left it never maps a stack of its own.
pub const INLINE_STACK_BYTES: usize = 384 * 1024;

/// Whether the calling thread has [`INLINE_STACK_BYTES`] left, as stacker
/// measures it (unknown bounds count as no room).
pub fn room_to_check_inline() -> bool {
    stacker::remaining_stack().is_some_and(|left| left >= INLINE_STACK_BYTES)
}

/// What a caught panic says, for the error the caller reports.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let said = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string());
    format!("the guard failed on this input ({said})")
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A small fixed set of parse threads, started on first use.
#[derive(Debug)]
pub struct Pool {
    sender: Mutex<Option<Sender<Job>>>,
    threads: usize,
}

impl Pool {
    pub fn new() -> Pool {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4));
        Pool {
            sender: Mutex::new(None),
            threads,
        }
    }

    /// Runs `f` on a parse thread and returns its result; `Err` says why the
    /// job could not run or did not finish (the thread panicked).
    pub fn run<T, F>(&self, f: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move || {
            let outcome = catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(&*p));
            let _ = tx.send(outcome);
        });
        let sender = self.sender()?;
        sender
            .send(job)
            .map_err(|_| "the guard's parse threads have stopped".to_string())?;
        rx.recv()
            .map_err(|_| "the guard's parse thread dropped the check".to_string())?
    }

    fn sender(&self) -> Result<Sender<Job>, String> {
        let mut slot = self
            .sender
            .lock()
            .map_err(|_| "the guard's thread pool is poisoned".to_string())?;
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..self.threads {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("warden-guard-{i}"))
                .stack_size(STACK_BYTES)
                .spawn(move || worker(&rx))
                .map_err(|e| format!("the guard could not start its parse threads: {e}"))?;
        }
        *slot = Some(tx.clone());
        Ok(tx)
    }
}

fn worker(rx: &Mutex<Receiver<Job>>) {
    // stacker learns this thread's bounds once (pthread_getattr_np); without
    // them the parser would map a stack of its own at every deep call.
    if stacker::remaining_stack().is_none() {
        tracing::warn!(
            "a guard parse thread cannot tell its stack bounds; deep code may need more memory"
        );
    }
    loop {
        let job = match rx.lock() {
            Ok(guard) => guard.recv(),
            Err(_) => return,
        };
        match job {
            // A job catches its own panic and sends it as an error; this
            // catch only keeps the thread alive should the send itself fail.
            Ok(job) => {
                let _ = catch_unwind(AssertUnwindSafe(job));
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn runs_jobs_and_survives_panics() {
        let pool = Pool::new();
        assert_eq!(pool.run(|| 2 + 2), Ok(4));
        let err = pool.run(|| -> u8 { panic!("boom") }).unwrap_err();
        assert!(err.contains("failed") && err.contains("boom"), "{err}");
        assert_eq!(pool.run(|| "still alive"), Ok("still alive"));
    }

    #[test]
    fn jobs_get_the_large_stack() {
        fn depth(n: u32) -> u32 {
            let pad = std::hint::black_box([0u8; 512]);
            if n == 0 {
                u32::from(pad[0])
            } else {
                depth(n - 1) + 1
            }
        }
        // ~20 MiB of frames: far beyond a default 2 MiB thread stack.
        assert_eq!(Pool::new().run(|| depth(40_000)), Ok(40_000));
    }
}
