//! A session's life. It opens at its name's first use, unless `SANDBOX_MAX_SESSIONS` are
//! open already, in a warm home from the pool when one fits (the worker is already
//! started and waits frozen) or else in a new home made off the table's lock and off the
//! async runtime. It closes by `reset_session`, by idle expiry (`SANDBOX_SESSION_IDLE_S`)
//! or at shutdown; its name is free again at once, and its workspace is removed, after a
//! copy is kept aside with `SANDBOX_KEEP_WORKSPACES` (logged and audited either way).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::workers::LiveWorker;
use super::{Session, SessionManager, SessionState};
use crate::backend::Home;
use crate::backend::pool::Warm;
use crate::execution::ErrorInfo;
use crate::owner::SessionKey;
use crate::workspace::Tracker;

/// How long a new session waits for a warm worker whose start is under way before it
/// starts one of its own (a start takes well under a second unless the machine is
/// swamped).
const WARM_WAIT: Duration = Duration::from_secs(5);

/// Why a session closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Closing {
    /// `reset_session` without `keep_files`: everything goes.
    Reset,
    /// Unused for `SANDBOX_SESSION_IDLE_S`.
    Expired,
    Shutdown,
}

/// What a new session starts with.
pub(super) enum Opened {
    /// A warm home with a frozen worker, from the pool.
    Warm(Box<Warm>),
    /// A new, empty home and its workspace's tracker; the worker starts at the first call.
    Fresh(Box<Home>, Box<Tracker>),
}

impl SessionManager {
    /// Starts what a serving server does in the background: filling the warm pool and
    /// expiring idle sessions. Not called for one-off runs (`warden run`, `selftest`).
    pub fn start_background(self: &Arc<Self>) {
        self.pool.start();
        if self.settings.session_idle_s > 0 {
            let idle = Duration::from_secs(self.settings.session_idle_s);
            tokio::spawn(expire_idle_sessions(Arc::downgrade(self), idle));
        }
    }

    /// The open session named `key`, if any.
    pub(super) fn lookup(&self, key: &SessionKey) -> Result<Option<Arc<Session>>, ErrorInfo> {
        let sessions = self
            .sessions
            .lock()
            .map_err(|_| ErrorInfo::new("InternalError", "session table poisoned"))?;
        Ok(sessions.get(key).cloned())
    }

    /// The data directory this server's instance lives in (its `sessions/INSTANCE`'s
    /// grandparent), when it has one.
    pub fn data_dir(&self) -> Option<std::path::PathBuf> {
        self.instance_dir()
            .parent()
            .and_then(std::path::Path::parent)
            .map(std::path::Path::to_path_buf)
    }

    /// Whether a session named `key` is open (closing it would delete something).
    pub fn is_open(&self, key: &SessionKey) -> bool {
        self.lookup(key).ok().flatten().is_some()
    }

    /// The session named `key`, opened if it does not exist: in a warm home when
    /// `warm_ok` and one is ready, else in a new home.
    pub(super) async fn open_session(
        &self,
        key: &SessionKey,
        warm_ok: bool,
    ) -> Result<Arc<Session>, ErrorInfo> {
        if let Some(session) = self.lookup(key)? {
            return Ok(session);
        }
        if self.shut.load(Ordering::Acquire) {
            return Err(ErrorInfo::new(
                "ShuttingDown",
                "the server is shutting down; no session can be opened",
            ));
        }
        // Checked before anything is made for it, and again when it is entered.
        self.room_for_a_session(self.session_count()?)?;
        if warm_ok
            && let Some(warm) = self
                .pool
                .take_or_wait(&self.approved_operator_grants(), WARM_WAIT)
                .await
        {
            return self.insert(key, Opened::Warm(Box::new(warm)));
        }
        let (home, tracker) = self.make_home(key).await?;
        self.insert(key, Opened::Fresh(Box::new(home), Box::new(tracker)))
    }

    /// A new, empty home and its workspace's tracker, made on a blocking thread:
    /// creating directories (and handing them to the session's uid) must hold up neither
    /// the session table nor the runtime's threads.
    async fn make_home(&self, key: &SessionKey) -> Result<(Home, Tracker), ErrorInfo> {
        let dir = self.homes.next_dir();
        let backend = self.backend.clone();
        let watcher = self.watcher.clone();
        tokio::task::spawn_blocking(move || {
            let home = backend.open_home(&dir)?;
            let tracker = Tracker::new(&home.paths.workspace, watcher);
            Ok::<_, std::io::Error>((home, tracker))
        })
        .await
        .map_err(|e| ErrorInfo::new("InternalError", format!("the home task failed: {e}")))?
        .map_err(|e| {
            // The sessions' tmpfs quotas together are at SANDBOX_DISK_TOTAL: the message
            // says what to do.
            if e.kind() == std::io::ErrorKind::QuotaExceeded {
                return ErrorInfo::new("DiskTotalReached", e.to_string());
            }
            // Every engine is down or full (SANDBOX_DOCKER_HOSTS): the message names each.
            if e.kind() == std::io::ErrorKind::HostUnreachable {
                return ErrorInfo::new("NoEngine", e.to_string());
            }
            ErrorInfo::new(
                "InternalError",
                format!(
                    "cannot create the workspace for session {:?}: {e}",
                    key.name
                ),
            )
        })
    }

    /// Enters a new session in the table, unless a concurrent first call entered the
    /// same name first: then that one is used and what was prepared is given back.
    fn insert(&self, key: &SessionKey, opened: Opened) -> Result<Arc<Session>, ErrorInfo> {
        let mut sessions = self
            .sessions
            .lock()
            .map_err(|_| ErrorInfo::new("InternalError", "session table poisoned"))?;
        // Past SANDBOX_MAX_SESSIONS nothing is entered; either way what was prepared is
        // given back.
        let settled = match sessions.get(key).cloned() {
            Some(existing) => Some(Ok(existing)),
            None => self.room_for_a_session(sessions.len()).err().map(Err),
        };
        if let Some(outcome) = settled {
            drop(sessions);
            match opened {
                Opened::Warm(warm) => self.pool.put_back(*warm),
                Opened::Fresh(home, _) => self.close_home_later(*home),
            }
            return outcome;
        }
        // The tracker saw the workspace as it is before any call: empty.
        let (home, live, tracker) = match opened {
            Opened::Warm(warm) => {
                let Warm {
                    home,
                    worker,
                    permit,
                    tracker,
                } = *warm;
                (home, Some(LiveWorker::new(worker, permit)), tracker)
            }
            Opened::Fresh(home, tracker) => (*home, None, *tracker),
        };
        let session = Arc::new(Session::new(key, home, self.now_ms(), tracker));
        if let Some(live) = live
            && let Ok(mut state) = session.state.try_lock()
        {
            session.set_worker(&mut state, live);
        }
        sessions.insert(key.clone(), session.clone());
        Ok(session)
    }

    /// Live sessions now.
    fn session_count(&self) -> Result<usize, ErrorInfo> {
        self.sessions
            .lock()
            .map(|s| s.len())
            .map_err(|_| ErrorInfo::new("InternalError", "session table poisoned"))
    }

    /// Refuses one more session when `live` are open already (`SANDBOX_MAX_SESSIONS`).
    fn room_for_a_session(&self, live: usize) -> Result<(), ErrorInfo> {
        let max = self.settings.max_sessions;
        if live < max {
            return Ok(());
        }
        Err(ErrorInfo::new(
            "TooManySessions",
            format!(
                "this server already holds {live} live sessions, the most {} allows; nothing \
                 was started. Close a session you no longer need (reset_session with \
                 keep_files: false) or wait for idle ones to expire (SANDBOX_SESSION_IDLE_S), \
                 then call again",
                self.settings.describe("SANDBOX_MAX_SESSIONS")
            ),
        ))
    }

    fn close_home_later(&self, home: Home) {
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = backend.close_session(&home.slot) {
                tracing::warn!(error = %e, "could not remove an unused workspace");
            }
        });
    }

    /// Closes a session whose state the caller holds: out of the table (its name is
    /// free), worker stopped, home released and its workspace deleted, after a copy is
    /// kept aside when `SANDBOX_KEEP_WORKSPACES` is set (never on `Reset`).
    pub(super) async fn close(
        &self,
        session: &Arc<Session>,
        state: &mut SessionState,
        why: Closing,
    ) -> Result<(), String> {
        state.closed = true;
        if let Ok(mut sessions) = self.sessions.lock()
            && sessions
                .get(&session.key)
                .is_some_and(|s| Arc::ptr_eq(s, session))
        {
            sessions.remove(&session.key);
        }
        session.drop_worker(state);
        if why != Closing::Reset
            && let Some(egress) = &self.egress
        {
            egress.forget(&session.key.to_string());
        }
        let keep = (why != Closing::Reset && self.settings.keep_workspaces).then(|| {
            let suffix: String = crate::hex(&crate::random_bytes::<4>());
            self.kept_dir
                .join(format!("{}-{suffix}", session.key.dir_name()))
        });
        let backend = self.backend.clone();
        let closing = session.clone();
        let (quota, package_limit) = (
            self.settings.disk_limit_bytes,
            self.settings.packages.limit_bytes,
        );
        let (kept, packages, removed) = tokio::task::spawn_blocking(move || {
            let kept = keep.as_ref().map(|to| {
                super::keep::copy_workspace(
                    &closing.home.paths.workspace,
                    to,
                    quota,
                    super::keep::reserve_for,
                )
            });
            // The installed packages stay with the kept workspace, beside it.
            let layer = closing.home.slot.package_layer().map(|(l, _)| l);
            let packages = match (&kept, keep.clone(), layer) {
                (Some(Ok(_)), Some(to), Some(layer)) if layer.current() > 0 => {
                    let mut beside = to.into_os_string();
                    beside.push("-packages");
                    let beside = std::path::PathBuf::from(beside);
                    Some(super::keep::copy_workspace(
                        &layer.current_dir(),
                        &beside,
                        package_limit,
                        super::keep::reserve_for,
                    ))
                }
                _ => None,
            };
            // So do its named checkpoints (they live beside the workspace, in its home;
            // a transactional call's copies, named with a leading `.`, are not kept).
            let checkpoints: Vec<Result<super::keep::Kept, String>> = match (&kept, keep) {
                (Some(Ok(_)), Some(to)) => {
                    let store = closing.home.paths.workspace.join("../checkpoints");
                    let mut beside = to.into_os_string();
                    beside.push("-checkpoints");
                    let beside = std::path::PathBuf::from(beside);
                    std::fs::read_dir(&store)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
                        .map(|e| {
                            super::keep::copy_workspace(
                                &e.path(),
                                &beside.join(e.file_name()),
                                quota,
                                super::keep::reserve_for,
                            )
                        })
                        .collect()
                }
                _ => Vec::new(),
            };
            (
                kept,
                packages.into_iter().chain(checkpoints).collect::<Vec<_>>(),
                backend.close_session(&closing.home.slot),
            )
        })
        .await
        .map_err(|e| format!("the closing task failed: {e}"))?;
        if why == Closing::Expired {
            tracing::info!(session = %session.key, "session expired");
        }
        if let Some(kept) = kept {
            self.record_keep(session, kept);
        }
        for beside in packages {
            self.record_keep(session, beside);
        }
        removed
    }

    /// Logs and audits what became of a closing session's workspace copy
    /// (`SANDBOX_KEEP_WORKSPACES`).
    fn record_keep(&self, session: &Session, kept: Result<super::keep::Kept, String>) {
        let event = |decision: &str, detail: String| crate::audit::AuditEvent {
            detail,
            ..crate::audit::AuditEvent::now(&session.key.to_string(), "keep", decision)
        };
        let recorded = match kept {
            Ok(k) => {
                tracing::info!(
                    session = %session.key, kept = %k.to.display(), bytes = k.bytes,
                    skipped = k.skipped, "a copy of the workspace was kept"
                );
                self.audit.record(event(
                    "kept",
                    format!(
                        "{} bytes in {} entries at {} ({} skipped)",
                        k.bytes,
                        k.entries,
                        k.to.display(),
                        k.skipped
                    ),
                ))
            }
            Err(why) => {
                tracing::warn!(session = %session.key, reason = %why, "the workspace was not kept");
                self.audit.record(event("refused", why))
            }
        };
        if let Err(e) = recorded {
            tracing::warn!(session = %session.key, error = %e, "the keep record could not be written");
        }
    }

    /// Closes every session unused for `idle` that is not in a call.
    async fn expire_idle(&self, idle: Duration) {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        let stale: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| now.saturating_sub(s.last_used()) >= idle_ms)
                .cloned()
                .collect(),
            Err(_) => return,
        };
        for session in stale {
            // A session in a call is not idle; its call's end counts as a use.
            let Ok(mut state) = session.state.try_lock() else {
                continue;
            };
            if state.closed || self.now_ms().saturating_sub(session.last_used()) < idle_ms {
                continue;
            }
            if let Err(e) = self.close(&session, &mut state, Closing::Expired).await {
                tracing::warn!(session = %session.key, error = %e, "could not remove an expired session's workspace");
            }
        }
    }

    /// Milliseconds since this manager started.
    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Looks for idle sessions a few times per idle period, until the manager is gone.
async fn expire_idle_sessions(manager: Weak<SessionManager>, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
    loop {
        tokio::time::sleep(tick).await;
        let Some(manager) = manager.upgrade() else {
            return;
        };
        if manager.shut.load(Ordering::Acquire) {
            return;
        }
        manager.expire_idle(idle).await;
    }
}
