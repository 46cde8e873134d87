//! How many workers may be alive at once (`SANDBOX_MAX_WORKERS`): a counter and the
//! permits that hold it. Every live worker, a session's or a warm one, holds one
//! [`Permit`]; dropping the permit (with the worker) gives its place back. Only the
//! holders decide what to stop when the budget is spent (the session layer stops the
//! least recently used idle worker), so this module only counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The live-worker budget of one server.
#[derive(Debug)]
pub struct Budget {
    cap: usize,
    live: AtomicUsize,
}

/// One worker's place in the budget, given back when dropped.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<Budget>,
}

impl Budget {
    pub fn new(cap: usize) -> Arc<Budget> {
        Arc::new(Budget {
            cap: cap.max(1),
            live: AtomicUsize::new(0),
        })
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Workers holding a permit now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// A place for one more worker, if the cap allows it.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit {
                budget: self.clone(),
            })
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.live.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_stop_at_the_cap_and_come_back_when_dropped() {
        let budget = Budget::new(2);
        let a = budget.try_acquire().unwrap();
        let b = budget.try_acquire().unwrap();
        assert!(budget.try_acquire().is_none());
        assert_eq!(budget.live(), 2);
        drop(a);
        assert_eq!(budget.live(), 1);
        let c = budget.try_acquire().unwrap();
        assert!(budget.try_acquire().is_none());
        drop((b, c));
        assert_eq!(budget.live(), 0);
    }

    #[test]
    fn racing_threads_never_exceed_the_cap() {
        let budget = Budget::new(8);
        let held: Vec<Vec<Permit>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    let budget = budget.clone();
                    s.spawn(move || (0..4).filter_map(|_| budget.try_acquire()).collect())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(held.iter().map(Vec::len).sum::<usize>(), 8);
        assert_eq!(budget.live(), 8);
    }
}
