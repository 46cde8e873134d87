//! A session's worker and the cap on live workers (`SANDBOX_MAX_WORKERS`). A session
//! without a worker gets one when a call needs it: a place in the budget if there is
//! room; else a warm worker is shed; else the least recently used idle session's worker
//! is stopped (that session keeps its files and reports `worker_restarted: true` on its
//! next call); else the call is refused as `WorkersBusy`, retryable, because then every
//! worker is in a call. Also what each session's worker uses, for `warden://settings`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use super::{Session, SessionManager, SessionState};
use crate::backend::budget::Permit;
use crate::backend::pool::PoolStats;
use crate::backend::{Home, Worker, WorkerSpec};
use crate::execution::ErrorInfo;
use crate::owner::{Owner, SessionKey};

/// How long a call at the cap waits for a warm worker that is being started.
const START_WAIT: Duration = Duration::from_secs(15);
/// Rounds of making room before a call is refused as busy (others may take the room
/// made between two rounds).
const ROOM_ROUNDS: usize = 8;

/// A session's running worker and its place in the budget.
pub(super) struct LiveWorker {
    pub(super) worker: Worker,
    permit: Permit,
}

impl LiveWorker {
    pub(super) fn new(worker: Worker, permit: Permit) -> LiveWorker {
        LiveWorker { worker, permit }
    }
}

/// One session as `warden://settings` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionReport {
    pub session: String,
    /// `none` (stopped or never started), `frozen` (idle between calls) or `in_call`.
    pub worker: &'static str,
    /// Seconds since a call last began or ended.
    pub idle_s: u64,
    pub rss_bytes: Option<u64>,
    /// Proportional set size: shared pages (the interpreter, libraries) split between
    /// the processes sharing them.
    pub pss_bytes: Option<u64>,
    pub cpu_ms: Option<u64>,
    /// Top-level modules nobody judged (neither the stdlib nor an audited package)
    /// that this session's code imported, refused ones included; at most
    /// [`UNJUDGED_SHOWN`](super::guard::UNJUDGED_SHOWN), sorted.
    pub unjudged_modules: Vec<String>,
    /// Imports of further such modules, not listed once the list was full.
    pub unjudged_modules_omitted: u64,
    /// What its calls have spent, against `SANDBOX_MAX_*`.
    pub spent: crate::caps::Spent,
    /// What is left of its caps (absent when none is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::caps::Remaining>,
    /// The engine it runs on, for a backend of several (`SANDBOX_DOCKER_HOSTS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// The live-worker budget as `warden://settings` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkersReport {
    /// `SANDBOX_MAX_WORKERS`.
    pub max: usize,
    /// Workers alive now, warm ones included.
    pub live: usize,
    pub warm: PoolStats,
    /// Sessions open now (every owner).
    pub sessions_open: usize,
    /// `SANDBOX_SESSION_IDLE_S` (0: never).
    pub idle_expiry_s: u64,
}

impl Session {
    pub(super) fn new(
        key: &SessionKey,
        home: Home,
        now_ms: u64,
        tracker: crate::workspace::Tracker,
    ) -> Session {
        Session {
            name: key.name.clone(),
            key: key.clone(),
            home,
            grants: std::sync::Mutex::new(Vec::new()),
            state: tokio::sync::Mutex::new(SessionState::default()),
            last_used: std::sync::atomic::AtomicU64::new(now_ms),
            probe: std::sync::Mutex::new(None),
            running: std::sync::Mutex::new(None),
            tracker: std::sync::Mutex::new(tracker),
            unjudged: std::sync::Mutex::new(super::guard::UnjudgedSeen::default()),
            packages: std::sync::Mutex::new(Vec::new()),
            spent: crate::caps::SessionCounter::default(),
            txn_pending: Arc::default(),
            #[cfg(target_os = "linux")]
            journal: Arc::default(),
            #[cfg(target_os = "linux")]
            cow: Arc::default(),
        }
    }

    /// Records a use (a call beginning or ending): idle expiry and eviction count from it.
    pub(super) fn touch(&self, now_ms: u64) {
        self.last_used.store(now_ms, Ordering::Release);
    }

    pub(super) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Acquire)
    }

    pub(super) fn set_worker(&self, state: &mut SessionState, live: LiveWorker) {
        if let Ok(mut probe) = self.probe.lock() {
            *probe = Some(live.worker.usage_probe());
        }
        live.worker.set_egress_session(&self.key.to_string());
        state.worker = Some(live);
    }

    /// Kills the session's worker, if it has one, and hands back its place in the budget.
    pub(super) fn drop_worker(&self, state: &mut SessionState) -> Option<Permit> {
        let mut live = state.worker.take()?;
        if let Ok(mut probe) = self.probe.lock() {
            *probe = None;
        }
        live.worker.kill();
        Some(live.permit)
    }

    fn has_worker(&self) -> bool {
        self.probe.lock().is_ok_and(|p| p.is_some())
    }
}

impl SessionManager {
    /// The worker of a call that was cancelled midway (killed when the call was
    /// dropped): gone, and every file change it had under way landed, before anything
    /// else touches the workspace; the next call says the worker was lost.
    pub(super) async fn reap_cancelled(&self, session: &Session, state: &mut SessionState) {
        if state.worker.as_ref().is_some_and(|l| l.worker.is_busy()) {
            self.end_worker(session, state).await;
            state.lost_worker = Some("the previous call was cancelled while it ran".to_string());
        }
    }

    /// Drops the session's worker and, when it journals file changes, waits until it
    /// and its whole world have exited: a change it had under way can then no longer
    /// land after a rollback.
    pub(super) async fn end_worker(&self, session: &Session, state: &mut SessionState) {
        let link = state.worker.as_ref().map(|l| l.worker.journal_link());
        session.drop_worker(state);
        #[cfg(target_os = "linux")]
        if let Some(Some(supervision)) = link {
            let _ = tokio::task::spawn_blocking(move || {
                supervision.wait_exit(std::time::Duration::from_secs(10))
            })
            .await;
        }
        #[cfg(not(target_os = "linux"))]
        let _ = link;
    }
}

impl SessionManager {
    /// The session's worker, started (in room made for it) if it has none.
    pub(super) async fn ensure_worker<'s>(
        &self,
        session: &Session,
        state: &'s mut SessionState,
        spec: &WorkerSpec<'_>,
    ) -> Result<&'s mut Worker, ErrorInfo> {
        if state.worker.is_none() {
            let permit = self.make_room(session).await?;
            let started = self.backend.start_worker(spec).await;
            let worker = match started {
                Ok(worker) => worker,
                Err(e) => {
                    let error = ErrorInfo::new(e.kind(), e.to_string());
                    return Err(self
                        .end_if_engine_lost(session, state)
                        .await
                        .unwrap_or(error));
                }
            };
            session.set_worker(state, LiveWorker::new(worker, permit));
        }
        state
            .worker
            .as_mut()
            .map(|live| &mut live.worker)
            .ok_or_else(|| ErrorInfo::new("InternalError", "worker missing after start"))
    }

    /// Ends the session when its worker died or did not start because the place it runs
    /// (its Docker engine) is lost to it; the error every later call gets.
    pub(super) async fn end_if_engine_lost(
        &self,
        session: &Session,
        state: &mut SessionState,
    ) -> Option<ErrorInfo> {
        let why = self.backend.engine_lost(&session.home.slot).await?;
        tracing::warn!(session = %session.key, reason = %why, "a session ended with its engine");
        let ended = super::Ended::engine_lost(why);
        let error = ended.error();
        state.killed = Some(ended);
        session.drop_worker(state);
        Some(error)
    }

    /// A place in the budget for one more worker: free room, else a shed warm worker's,
    /// else the least recently used idle session's.
    pub(super) async fn make_room(&self, session: &Session) -> Result<Permit, ErrorInfo> {
        for _ in 0..ROOM_ROUNDS {
            if let Some(permit) = self.budget.try_acquire() {
                return Ok(permit);
            }
            if let Some(permit) = self.pool.shed_one() {
                return Ok(permit);
            }
            if let Some(permit) = self.evict_least_recently_used(session) {
                return Ok(permit);
            }
            // Every place is held by a session in a call, or by a warm worker that is
            // still starting: wait for that start, then shed it.
            if !self.pool.wait_for_start(START_WAIT).await {
                break;
            }
        }
        let max = self.budget.cap();
        Err(ErrorInfo::new(
            "WorkersBusy",
            format!(
                "all {max} workers (SANDBOX_MAX_WORKERS={max}) are running calls right now; retry this call in a moment"
            ),
        )
        .retryable())
    }

    /// Stops the worker of the least recently used session that is not in a call (never
    /// `except`'s) and hands over its place. That session keeps its workspace and learns
    /// on its next call that its variables are gone.
    fn evict_least_recently_used(&self, except: &Session) -> Option<Permit> {
        let mut candidates: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| !std::ptr::eq(s.as_ref(), except) && s.has_worker())
                .cloned()
                .collect(),
            Err(_) => return None,
        };
        candidates.sort_by_key(|s| s.last_used());
        for candidate in candidates {
            // A session whose state is held is in a call (or being closed): not idle.
            let Ok(mut state) = candidate.state.try_lock() else {
                continue;
            };
            if state.closed {
                continue;
            }
            if let Some(permit) = candidate.drop_worker(&mut state) {
                let max = self.budget.cap();
                state.lost_worker = Some(format!(
                    "it was the least recently used idle worker when another session needed one, and at most {max} workers run at once (SANDBOX_MAX_WORKERS)"
                ));
                tracing::info!(session = %candidate.key, "stopped the least recently used idle worker to make room");
                return Some(permit);
            }
        }
        None
    }

    /// The live-worker budget and warm pool now.
    pub fn workers_report(&self) -> WorkersReport {
        WorkersReport {
            max: self.budget.cap(),
            live: self.budget.live(),
            warm: self.pool.stats(),
            sessions_open: self.sessions.lock().map(|m| m.len()).unwrap_or(0),
            idle_expiry_s: self.settings.session_idle_s,
        }
    }

    /// `owner`'s sessions with what their workers use, by name.
    pub fn sessions_report(&self, owner: &Owner) -> Vec<SessionReport> {
        let sessions: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| &s.key.owner == owner)
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        let now = self.now_ms();
        let mut out: Vec<SessionReport> = sessions
            .iter()
            .map(|s| {
                let probe = s.probe.lock().ok().and_then(|p| p.clone());
                let unjudged = s.unjudged_seen();
                let usage = probe.as_ref().and_then(|p| p.read());
                let worker = match (&probe, s.state.try_lock().is_err()) {
                    (None, _) => "none",
                    (Some(_), true) => "in_call",
                    (Some(_), false) => "frozen",
                };
                SessionReport {
                    session: s.name.clone(),
                    worker,
                    idle_s: now.saturating_sub(s.last_used()) / 1000,
                    rss_bytes: usage.map(|u| u.rss_bytes),
                    pss_bytes: usage.and_then(|u| u.pss_bytes),
                    cpu_ms: usage.map(|u| u.cpu_ms),
                    unjudged_modules: unjudged.modules.into_iter().collect(),
                    unjudged_modules_omitted: unjudged.omitted,
                    spent: s.spent.spent(),
                    budget: self.session_remaining(s),
                    engine: s.home.slot.place(),
                }
            })
            .collect();
        out.sort_by(|a, b| a.session.cmp(&b.session));
        out
    }
}
