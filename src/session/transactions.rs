//! Transactional calls (`execute_python` with `transactional: true`, or
//! `SANDBOX_TRANSACTIONS`): once the call's worker is ready and before its code runs, the
//! session opens a journal ([`crate::workspace::journal`]) that the worker's supervisor
//! notes every file change in before the kernel makes it; a call that succeeds drops the
//! notes, and one that fails in any way (raises, times out, trips a wire, passes a cap,
//! loses its worker) has them walked back. A worker that cannot show its changes first
//! (no world of its own) has the workspace copied beside it instead
//! ([`Store::snapshot`]) and put back by moving the copy's entries in
//! ([`Store::roll_back`]).
//!
//! A cancelled call's future is dropped wherever it was, so its journal (or copy) stays
//! open and is put back by whatever touches the session next (its next call, or a
//! checkpoint tool), before anything else and once the cancelled call's worker has
//! exited: the session's lock orders them. Every step holds the session's `txn_pending`
//! lock inside its blocking task, which runs to its end even when the call that started
//! it is gone, so a rollback is never interleaved with the next call.
//!
//! The interpreter's memory is not rolled back: it keeps what the failed call assigned
//! (a failure that cost the worker restarts it anyway), and the result says so.

use super::{Session, SessionManager};
use crate::execution::{ErrorInfo, ExecResult};

/// The copy's name in the session's checkpoint store (hidden by its leading `.`).
#[cfg(target_os = "linux")]
const COPY: &str = ".transaction";

#[cfg(target_os = "linux")]
impl SessionManager {
    /// Runs `step` on the session's checkpoint store in a blocking task that holds the
    /// session's `txn_pending` lock; the task finishes even if this future is dropped.
    async fn on_copy<T: Send + 'static>(
        &self,
        session: &Session,
        step: impl FnOnce(
            &crate::workspace::checkpoint::Store,
            &std::os::fd::OwnedFd,
            &std::path::Path,
            &mut bool,
        ) -> Result<T, crate::workspace::checkpoint::CheckpointError>
        + Send
        + 'static,
    ) -> Result<T, ErrorInfo> {
        let pending = session.txn_pending.clone();
        let ws = session.home.paths.workspace.clone();
        tokio::task::spawn_blocking(move || {
            let mut pending = pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let store = crate::workspace::checkpoint::Store::open(&ws)?;
            let fd = super::checkpoints::open_workspace(&ws)?;
            step(&store, &fd, &ws, &mut pending)
        })
        .await
        .map_err(|e| ErrorInfo::new("InternalError", format!("the transaction task failed: {e}")))?
        .map_err(super::checkpoints::refused)
    }

    /// Refuses a transactional call where the backend cannot roll one back, before
    /// anything runs.
    pub(super) fn transactions_supported(&self) -> Result<(), ErrorInfo> {
        if self.backend.kind() != crate::backend::BackendKind::Host {
            return Err(ErrorInfo::new(
                "Unsupported",
                "transactional calls need the host backend (EXECUTION_BACKEND=host); nothing ran",
            ));
        }
        Ok(())
    }

    /// Before a transactional call, once its worker is ready: a journal that the worker's
    /// supervisor notes the call's file changes in, or, for a worker without one, a copy
    /// of the workspace.
    ///
    /// # Errors
    /// Neither could be made (the copy does not fit in what the quota leaves); nothing
    /// ran.
    pub(super) async fn begin_transaction(
        &self,
        session: &Session,
        link: crate::worker::handle::JournalLink,
    ) -> Result<(), ErrorInfo> {
        self.transactions_supported()?;
        let shared = session.journal.clone();
        let opened = self
            .on_copy(session, move |store, fd, _, _| {
                use crate::workspace::checkpoint::CheckpointError;
                store.remove_retired();
                let aside = store.journal_dir()?;
                let ws = rustix::io::fcntl_dupfd_cloexec(fd, 0)
                    .map_err(|e| CheckpointError::io("the workspace", e))?;
                let journal = crate::workspace::journal::Journal::new(ws, aside, owner_of(fd)?)
                    .map_err(|e| CheckpointError::io(e.to_string(), e.errno()))?;
                *lock(&shared) = Some(journal);
                Ok(())
            })
            .await;
        let why = match opened {
            Ok(()) => {
                let (shared, cow) = (session.journal.clone(), session.cow.clone());
                let attached = tokio::task::spawn_blocking(move || match link {
                    Some(supervision) => supervision.attach(&shared, &cow),
                    None => Err("the worker has no journal (no private world of its own)".into()),
                })
                .await
                .unwrap_or_else(|e| Err(format!("the journal task failed: {e}")));
                match attached {
                    Ok(()) => return Ok(()),
                    Err(why) => why,
                }
            }
            Err(e) => e.message,
        };
        tracing::debug!(%why, "a transactional call copies the workspace instead of journaling");
        let shared = session.journal.clone();
        let _ = self
            .on_copy(session, move |store, _, _, _| {
                if let Some(journal) = lock(&shared).take() {
                    journal.clear();
                }
                store.remove_journal_dir();
                Ok(())
            })
            .await;
        self.copy_workspace(session).await
    }

    /// The copy a transactional call of a worker without a journal is put back from.
    async fn copy_workspace(&self, session: &Session) -> Result<(), ErrorInfo> {
        self.on_copy(session, |store, fd, _, pending| {
            use std::os::fd::AsFd;
            // Copies of earlier calls not yet deleted would take the room this one needs.
            store.remove_retired();
            store.snapshot(fd.as_fd(), COPY, owner_of(fd)?)?;
            *pending = true;
            Ok(())
        })
        .await
        .map_err(|e| {
            ErrorInfo::new(
                &e.kind,
                format!(
                    "a transactional call first copies the workspace, and that failed: {}; \
                     nothing ran",
                    e.message
                ),
            )
        })
    }

    /// After a transactional call: the copy dropped (success) or put back (failure),
    /// said in `result`.
    pub(super) async fn end_transaction(&self, session: &Session, result: &mut ExecResult) {
        let failed = result.status != crate::execution::ExecStatus::Ok;
        let shared = session.journal.clone();
        let done = self
            .on_copy(session, move |store, fd, ws, pending| {
                use std::os::fd::AsFd;
                if let Some(journal) = lock(&shared).take() {
                    let report = match failed {
                        true => Some((journal.roll_back().map_err(journal_error)?, true)),
                        false => {
                            journal.clear();
                            None
                        }
                    };
                    store.remove_journal_dir();
                    return Ok((report, None));
                }
                if !*pending {
                    return Ok((None, None));
                }
                let done = if failed {
                    (Some((store.roll_back(fd.as_fd(), ws, COPY)?, false)), None)
                } else {
                    store.retire(COPY);
                    (None, store.try_clone())
                };
                *pending = false;
                Ok(done)
            })
            .await;
        let done = match done {
            Ok((report, Some(store))) => {
                // The copy is deleted after the result goes out, under the lock the next
                // transactional call takes first (which deletes it itself if it gets
                // there before).
                let pending = session.txn_pending.clone();
                tokio::task::spawn_blocking(move || {
                    let _held = pending
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    store.remove_retired();
                });
                Ok(report)
            }
            Ok((report, None)) => Ok(report),
            Err(e) => Err(e),
        };
        match done {
            Ok(Some(report)) => {
                let summary = self.absorb(session, report);
                result.rolled_back = true;
                result.undone_total = summary.total;
                result.undone = summary.files;
                result.warnings.push(format!(
                    "the call failed, so its workspace changes were rolled back ({} undone; \
                     `undone` lists them); the interpreter's variables were not rolled back \
                     (reset_session with keep_files: true clears them)",
                    result.undone_total
                ));
            }
            Ok(None) => {}
            Err(e) => result.warnings.push(format!(
                "the call failed but its workspace changes could not be rolled back: {}: {}",
                e.kind, e.message
            )),
        }
    }

    /// Waits for the worker of a cancelled call to be gone, then puts back the changes of
    /// a transactional call that was cancelled, if any wait; the warning that says so.
    pub(super) async fn settle_transaction(
        &self,
        session: &Session,
        state: &mut super::SessionState,
    ) -> Option<String> {
        self.reap_cancelled(session, state).await;
        if let Ok(pending) = session.txn_pending.try_lock()
            && !*pending
            && lock(&session.journal).is_none()
        {
            return None;
        }
        let shared = session.journal.clone();
        let done = self
            .on_copy(session, move |store, fd, ws, pending| {
                use std::os::fd::AsFd;
                if let Some(journal) = lock(&shared).take() {
                    let report = journal.roll_back().map_err(journal_error)?;
                    store.remove_journal_dir();
                    return Ok(Some((report, true)));
                }
                if !*pending {
                    return Ok(None);
                }
                let report = store.roll_back(fd.as_fd(), ws, COPY)?;
                *pending = false;
                Ok(Some((report, false)))
            })
            .await;
        match done {
            Ok(Some(report)) => {
                let summary = self.absorb(session, report);
                Some(format!(
                    "the previous transactional call of this session was cancelled; its \
                     workspace changes were rolled back ({} undone)",
                    summary.total
                ))
            }
            Ok(None) => None,
            Err(e) => Some(format!(
                "the previous transactional call of this session was cancelled, and its \
                 workspace changes could not be rolled back: {}: {}",
                e.kind, e.message
            )),
        }
    }

    /// A rollback's report as a result shows it; the tracker takes the rollback in, so
    /// the next call's `files` does not repeat it. After a journal's rollback the tracker
    /// says best what changed (every name of a file written through one of its hard
    /// links), unless it cannot say all.
    fn absorb(
        &self,
        session: &Session,
        (report, journaled): (crate::workspace::Report, bool),
    ) -> crate::workspace::Summary {
        let tracked = session
            .tracker
            .lock()
            .ok()
            .map(|mut tracker| tracker.report());
        match tracked {
            Some(tracked) if journaled && tracked.incomplete.is_none() => {
                crate::workspace::Summary::from(tracked)
            }
            _ => crate::workspace::Summary::from(report),
        }
    }
}

/// The session's journal slot, whatever a panic left in it.
#[cfg(target_os = "linux")]
fn lock(
    shared: &crate::workspace::journal::Shared,
) -> std::sync::MutexGuard<'_, Option<crate::workspace::journal::Journal>> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(target_os = "linux")]
fn journal_error(
    e: crate::workspace::journal::JournalError,
) -> crate::workspace::checkpoint::CheckpointError {
    crate::workspace::checkpoint::CheckpointError::io(e.to_string(), e.errno())
}

/// Who owns what a copy or a rollback makes anew: a root server's session uid (the
/// workspace's owner); `None` for a server that is not root (it owns everything).
#[cfg(target_os = "linux")]
fn owner_of(
    fd: &std::os::fd::OwnedFd,
) -> Result<Option<(u32, u32)>, crate::workspace::checkpoint::CheckpointError> {
    let st = rustix::fs::fstat(fd)
        .map_err(|e| crate::workspace::checkpoint::CheckpointError::io("the workspace", e))?;
    Ok(rustix::process::geteuid()
        .is_root()
        .then_some((st.st_uid, st.st_gid)))
}

#[cfg(not(target_os = "linux"))]
impl SessionManager {
    pub(super) fn transactions_supported(&self) -> Result<(), ErrorInfo> {
        Err(ErrorInfo::new(
            "Unsupported",
            "transactional calls need Linux; nothing ran",
        ))
    }
    pub(super) async fn begin_transaction(
        &self,
        _: &Session,
        _: crate::worker::handle::JournalLink,
    ) -> Result<(), ErrorInfo> {
        Err(ErrorInfo::new(
            "Unsupported",
            "transactional calls need Linux; nothing ran",
        ))
    }
    pub(super) async fn end_transaction(&self, _: &Session, _: &mut ExecResult) {}
    pub(super) async fn settle_transaction(
        &self,
        session: &Session,
        state: &mut super::SessionState,
    ) -> Option<String> {
        self.reap_cancelled(session, state).await;
        None
    }
}
