//! Long-lived parse threads with a large, known stack. Parsing and walking
//! never run on the caller's stack (a tokio worker has 2 MiB). The threads
//! are kept rather than spawned per check because a fresh thread starts with
//! a cold allocator arena, which costs about as much as the parse itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Stack for each parse thread. Depth is already bounded by the pre-parse
/// scan; this is generous headroom (reserved, not committed, until used).
pub const STACK_BYTES: usize = 64 * 1024 * 1024;

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
            let _ = tx.send(f());
        });
        let sender = self.sender()?;
        sender
            .send(job)
            .map_err(|_| "the guard's parse threads have stopped".to_string())?;
        rx.recv()
            .map_err(|_| "the guard failed on this input".to_string())
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
    loop {
        let job = match rx.lock() {
            Ok(guard) => guard.recv(),
            Err(_) => return,
        };
        match job {
            // A panicking job drops its result sender, which the caller
            // reports; the thread itself lives on.
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
        assert!(err.contains("failed"));
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
