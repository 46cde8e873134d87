//! Transactional calls (`execute_python` with `transactional: true`, or
//! `SANDBOX_TRANSACTIONS`): before the code runs, the workspace is copied beside it
//! ([`Store::snapshot`]); a call that succeeds drops the copy, and one that fails in any
//! way (raises, times out, trips a wire, passes a cap, loses its worker) has its
//! workspace put back from it by moving the copy's entries in ([`Store::roll_back`]).
//!
//! A cancelled call's future is dropped wherever it was, so its copy is marked pending
//! before the code runs and put back by whatever touches the session next (its next
//! call, or a checkpoint tool), before anything else: the session's lock orders them.
//! Every step on the copy holds the session's `txn_pending` lock inside its blocking
//! task, which runs to its end even when the call that started it is gone, so a rollback
//! is never interleaved with the next call.
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

    /// Before a transactional call: the copy it would be put back from.
    ///
    /// # Errors
    /// The copy could not be made (it does not fit in what the quota leaves); nothing ran.
    pub(super) async fn begin_transaction(&self, session: &Session) -> Result<(), ErrorInfo> {
        if self.backend.kind() != crate::backend::BackendKind::Host {
            return Err(ErrorInfo::new(
                "Unsupported",
                "transactional calls need the host backend (EXECUTION_BACKEND=host); nothing ran",
            ));
        }
        self.on_copy(session, |store, fd, _, pending| {
            use std::os::fd::AsFd;
            let st = rustix::fs::fstat(fd).map_err(|e| {
                crate::workspace::checkpoint::CheckpointError::Io {
                    what: "the workspace".into(),
                    source: e.into(),
                }
            })?;
            let owner = rustix::process::geteuid()
                .is_root()
                .then_some((st.st_uid, st.st_gid));
            // Copies of earlier calls not yet deleted would take the room this one needs.
            store.remove_retired();
            store.snapshot(fd.as_fd(), COPY, owner)?;
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
        let done = self
            .on_copy(session, move |store, fd, ws, pending| {
                use std::os::fd::AsFd;
                if !*pending {
                    return Ok((None, None));
                }
                let done = if failed {
                    (Some(store.roll_back(fd.as_fd(), ws, COPY)?), None)
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

    /// Puts back the copy of a transactional call that was cancelled, if one waits;
    /// the warning that says so.
    pub(super) async fn settle_transaction(&self, session: &Session) -> Option<String> {
        if let Ok(pending) = session.txn_pending.try_lock()
            && !*pending
        {
            return None;
        }
        let done = self
            .on_copy(session, |store, fd, ws, pending| {
                use std::os::fd::AsFd;
                if !*pending {
                    return Ok(None);
                }
                let report = store.roll_back(fd.as_fd(), ws, COPY)?;
                *pending = false;
                Ok(Some(report))
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
    /// the next call's `files` does not repeat it.
    fn absorb(
        &self,
        session: &Session,
        report: crate::workspace::Report,
    ) -> crate::workspace::Summary {
        if let Ok(mut tracker) = session.tracker.lock() {
            let _ = tracker.report();
        }
        crate::workspace::Summary::from(report)
    }
}

#[cfg(not(target_os = "linux"))]
impl SessionManager {
    pub(super) async fn begin_transaction(&self, _: &Session) -> Result<(), ErrorInfo> {
        Err(ErrorInfo::new(
            "Unsupported",
            "transactional calls need Linux; nothing ran",
        ))
    }
    pub(super) async fn end_transaction(&self, _: &Session, _: &mut ExecResult) {}
    pub(super) async fn settle_transaction(&self, _: &Session) -> Option<String> {
        None
    }
}
