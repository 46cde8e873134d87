//! Warm workers (`SANDBOX_WARM_WORKERS`): workers started ahead, each fully inside its
//! walls in a [`Home`] of its own with an empty workspace, frozen until a new session's
//! first call takes one. The pool refills in the background, up to one start per core
//! at once (a start is mostly one process's CPU: two cores finish two starts in the time
//! of one), and only while the live-worker [`Budget`] has room: a warm worker never
//! pushes out a session's worker; the session layer sheds warm workers first when it
//! needs room. A new session that finds the pool empty while a start is under way waits
//! for that start ([`WarmPool::take_or_wait`]) rather than beginning one of its own,
//! which would finish later and slow down the one under way: so when names come faster
//! than workers start (churn), each waits for the earliest start, not a whole start.
//!
//! Backend-generic: a warm worker is made with exactly the calls a session's worker is
//! made with ([`AnyBackend::open_home`], [`AnyBackend::start_worker`]), for the policy
//! every new session starts with (the operator's grants). A session that needs another
//! policy gets a fresh worker. A warm worker is handed out once and never comes back
//! after running code, so no session ever sees another's files or variables.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::budget::{Budget, Permit};
use super::{AnyBackend, Home, StartError, Worker, WorkerSpec};
use crate::grants::Grant;
use crate::workspace::{Tracker, Watcher};

/// Longest pause between failed starts (a sandbox that refuses to start is not retried
/// in a tight loop).
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a refill waits after a warm worker was taken, unless a new session is
/// waiting for a start: the call that took it, and the calls that follow it, run first
/// without a worker start competing for the CPU. (Starting as soon as that call was
/// answered was tried: the warm call right after it then took 3.4-3.6 ms p50, against
/// 0.4-0.6 ms, and 300-name churn was no faster.)
const AFTER_TAKE: Duration = Duration::from_millis(100);
/// Most starts under way at once, whatever the number of cores.
const MAX_PARALLEL: usize = 4;
/// How long shutdown waits for one start in progress.
const STOP_WAIT: Duration = Duration::from_secs(20);
/// How often a pool that is waiting for room looks again, besides being told.
const RECHECK: Duration = Duration::from_secs(1);

/// Names a directory for each new home (`<instance>/home-<n>`, unique for the server's
/// life), which a backend may use; the host keeps workspaces in its store instead.
#[derive(Debug)]
pub struct HomeDirs {
    root: PathBuf,
    next: AtomicU64,
}

impl HomeDirs {
    pub fn new(root: PathBuf) -> HomeDirs {
        HomeDirs {
            root,
            next: AtomicU64::new(1),
        }
    }

    pub fn next_dir(&self) -> PathBuf {
        self.root.join(format!(
            "home-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ))
    }
}

/// A home with a started, frozen worker in it, the worker's place in the budget, and the
/// tracker of its (empty) workspace, made ahead too: none of it is left to do on the
/// request path of the session that takes it.
pub struct Warm {
    pub home: Home,
    pub worker: Worker,
    pub permit: Permit,
    pub tracker: Tracker,
}

/// What the pool holds now, for `warden://settings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub target: usize,
    pub ready: usize,
    pub starting: usize,
}

#[derive(Default)]
struct State {
    ready: VecDeque<Warm>,
    starting: usize,
    /// New sessions waiting for a start under way (each counts on one of them).
    claimed: usize,
    /// The pause after the last failed start (doubles while starts keep failing; zero
    /// after a success).
    backoff: Duration,
    /// A pause the refill still has to take before its next start.
    pause: Duration,
    closed: bool,
}

pub struct WarmPool {
    backend: Arc<AnyBackend>,
    budget: Arc<Budget>,
    homes: Arc<HomeDirs>,
    target: usize,
    /// Starts under way at once at most: one per core, up to `target`.
    parallel: usize,
    /// The grants every new session's worker starts with.
    grants: Vec<Grant>,
    /// Watches the warm homes' workspaces (the sessions' watcher).
    watcher: Arc<Watcher>,
    state: Mutex<State>,
    /// Wakes the refill task: a worker was taken, room was freed, the pool closed.
    wake: Notify,
    /// Wakes callers waiting for a start in progress to end.
    settled: Notify,
}

impl WarmPool {
    pub fn new(
        backend: Arc<AnyBackend>,
        budget: Arc<Budget>,
        homes: Arc<HomeDirs>,
        target: usize,
        grants: Vec<Grant>,
        watcher: Arc<Watcher>,
    ) -> Arc<WarmPool> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Arc::new(WarmPool {
            backend,
            budget,
            homes,
            target,
            parallel: cores.clamp(1, MAX_PARALLEL).min(target.max(1)),
            grants,
            watcher,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            settled: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts filling the pool in the background (needs a tokio runtime).
    pub fn start(self: &Arc<Self>) {
        if self.target > 0 {
            tokio::spawn(refill(self.clone()));
        }
    }

    pub fn stats(&self) -> PoolStats {
        let state = self.state();
        PoolStats {
            target: self.target_now(),
            ready: state.ready.len(),
            starting: state.starting,
        }
    }

    /// A warm worker for a new session whose worker needs exactly `grants`. When none is
    /// ready and a start is under way that no other new session counts on yet, waits
    /// for it (at most `limit`): it finishes sooner than a start begun now. `None`: the
    /// session needs another policy, or none came; it starts a worker of its own.
    pub async fn take_or_wait(&self, grants: &[Grant], limit: Duration) -> Option<Warm> {
        if grants != self.grants.as_slice() {
            return None;
        }
        let settled = {
            let mut state = self.state();
            if let Some(warm) = self.pop_best(&mut state) {
                drop(state);
                self.wake.notify_one();
                return Some(warm);
            }
            if state.closed || state.starting <= state.claimed {
                return None;
            }
            state.claimed += 1;
            // Registered before the lock is released: a start that ends in between
            // still wakes this waiter.
            let settled = self.settled.notified();
            drop(state);
            settled
        };
        self.wake.notify_one();
        let _ = tokio::time::timeout(limit, settled).await;
        let warm = {
            let mut state = self.state();
            state.claimed -= 1;
            self.pop_best(&mut state)
        };
        if warm.is_some() {
            self.wake.notify_one();
        }
        warm
    }

    /// The ready worker the backend prefers, when it is where a new session would go
    /// anyway (where it runs has as much room as anywhere; the oldest on a tie). Warm
    /// workers whose place is lost (an engine that stopped answering) are discarded on
    /// the way.
    fn pop_best(&self, state: &mut State) -> Option<Warm> {
        let mut best: Option<(usize, i64)> = None;
        let mut i = 0;
        while i < state.ready.len() {
            let Some(rank) = self.backend.home_rank(&state.ready[i].home.slot) else {
                if let Some(lost) = state.ready.remove(i) {
                    self.discard(lost);
                }
                continue;
            };
            if rank >= 0 && best.is_none_or(|(_, top)| rank > top) {
                best = Some((i, rank));
            }
            i += 1;
        }
        best.and_then(|(i, _)| state.ready.remove(i))
    }

    /// The warm workers wanted now: the target for each place that keeps its own (each
    /// engine that answers), never more than the worker cap.
    fn target_now(&self) -> usize {
        (self.target * self.backend.warm_places().max(1)).min(self.budget.cap())
    }

    /// Returns a warm worker that was taken but never used (a race lost to another
    /// call creating the same session).
    pub fn put_back(&self, warm: Warm) {
        let mut state = self.state();
        if state.closed {
            drop(state);
            self.discard(warm);
        } else {
            state.ready.push_front(warm);
        }
    }

    /// Stops one warm worker to make room in the budget and hands over its place.
    pub fn shed_one(&self) -> Option<Permit> {
        let warm = self.state().ready.pop_back()?;
        let Warm {
            home,
            mut worker,
            permit,
            ..
        } = warm;
        worker.kill();
        self.close_home_later(home);
        Some(permit)
    }

    /// Waits (up to `limit`) for a start in progress to end, so that a caller at the cap
    /// can take or shed the worker it yields. False when none is in progress.
    pub async fn wait_for_start(&self, limit: Duration) -> bool {
        let settled = self.settled.notified();
        if self.state().starting == 0 {
            return false;
        }
        tokio::time::timeout(limit, settled).await.is_ok()
    }

    /// Stops every warm worker and releases its home; nothing is started afterwards.
    pub async fn shutdown(&self) {
        self.state().closed = true;
        self.wake.notify_one();
        // A start in progress ends first (it is discarded), so that nothing is started
        // in a home that shutdown is about to remove.
        while self.wait_for_start(STOP_WAIT).await {}
        let drained: Vec<Warm> = self.state().ready.drain(..).collect();
        for warm in drained {
            let Warm {
                home,
                mut worker,
                permit,
                ..
            } = warm;
            worker.kill();
            drop(permit);
            let backend = self.backend.clone();
            let closed =
                tokio::task::spawn_blocking(move || backend.close_session(&home.slot)).await;
            if let Ok(Err(e)) = closed {
                tracing::warn!(error = %e, "could not remove a warm worker's workspace");
            }
        }
    }

    fn discard(&self, warm: Warm) {
        let Warm {
            home, mut worker, ..
        } = warm;
        worker.kill();
        self.close_home_later(home);
    }

    fn close_home_later(&self, home: Home) {
        let backend = self.backend.clone();
        let closing = move || {
            if let Err(e) = backend.close_session(&home.slot) {
                tracing::warn!(error = %e, "could not remove a warm worker's workspace");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(closing);
            }
            Err(_) => closing(),
        }
    }

    /// Whether the pool should start another worker now: below its target (counting
    /// the new sessions waiting for a start as takers), and below one start per core.
    fn wants_more(&self) -> bool {
        let state = self.state();
        let wanted = self.target_now() + state.claimed;
        !state.closed
            && state.starting < self.parallel
            && state.ready.len() + state.starting < wanted
    }

    /// New sessions are waiting for a start.
    fn awaited(&self) -> bool {
        self.state().claimed > 0
    }

    /// Makes a home (and its workspace's tracker) and starts a frozen worker in it.
    async fn start_one(&self, permit: Permit) -> Result<Warm, String> {
        let dir = self.homes.next_dir();
        let backend = self.backend.clone();
        let watcher = self.watcher.clone();
        let (home, tracker) = tokio::task::spawn_blocking(move || {
            let home = backend.open_home(&dir)?;
            let tracker = Tracker::new(&home.paths.workspace, watcher);
            Ok::<_, std::io::Error>((home, tracker))
        })
        .await
        .map_err(|e| format!("the home task failed: {e}"))?
        .map_err(|e| format!("cannot create a warm worker's home: {e}"))?;
        let spec = WorkerSpec {
            slot: &home.slot,
            grants: &self.grants,
        };
        match self.backend.start_worker(&spec).await {
            Ok(mut worker) => {
                worker.freeze();
                Ok(Warm {
                    home,
                    worker,
                    permit,
                    tracker,
                })
            }
            Err(e) => {
                self.close_home_later(home);
                Err(describe(&e))
            }
        }
    }
}

fn describe(e: &StartError) -> String {
    format!("{}: {e}", e.kind())
}

/// The refill loop: keeps `target` warm workers while the budget has room, up to
/// `parallel` starts at once, pausing after failures. Ends when the pool is shut down.
async fn refill(pool: Arc<WarmPool>) {
    loop {
        let woken = pool.wake.notified();
        let backoff = {
            let mut state = pool.state();
            if state.closed {
                return;
            }
            std::mem::take(&mut state.pause)
        };
        if !backoff.is_zero() {
            tokio::time::sleep(backoff).await;
            continue;
        }
        if !pool.wants_more() {
            woken.await;
            if !pool.awaited() {
                tokio::time::sleep(AFTER_TAKE).await;
            }
            continue;
        }
        let Some(permit) = pool.budget.try_acquire() else {
            // At the cap: wait for a worker to go (or to be told), never evict.
            let _ = tokio::time::timeout(RECHECK, woken).await;
            continue;
        };
        drop(woken);
        pool.state().starting += 1;
        tokio::spawn(start_and_keep(pool.clone(), permit));
    }
}

/// One start of the refill: the worker joins the ready queue (or is discarded if the
/// pool closed meanwhile); a failure sets the pause before the next start.
async fn start_and_keep(pool: Arc<WarmPool>, permit: Permit) {
    let started = pool.start_one(permit).await;
    let discard = {
        let mut state = pool.state();
        state.starting -= 1;
        match started {
            Ok(warm) if state.closed => Some(warm),
            Ok(warm) => {
                state.ready.push_back(warm);
                state.backoff = Duration::ZERO;
                None
            }
            Err(why) if state.closed => {
                tracing::debug!(error = %why, "a warm worker's start ended by shutdown");
                None
            }
            Err(why) => {
                let backoff = (state.backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                state.backoff = backoff;
                state.pause = backoff;
                tracing::warn!(error = %why, retry_in = ?backoff, "a warm worker did not start");
                None
            }
        }
    };
    if let Some(warm) = discard {
        pool.discard(warm);
    }
    pool.settled.notify_waiters();
    pool.wake.notify_one();
}
