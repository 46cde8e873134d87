//! The tools `checkpoint`, `restore` and `list_checkpoints`, seen from the session
//! table: which session, whether it may be touched now (no call running), the bound on
//! how many checkpoints it keeps (`SANDBOX_MAX_CHECKPOINTS`), the grants a checkpoint
//! was taken under, and the audit record. The copying is [`crate::workspace::checkpoint`]'s.
//!
//! A restore puts the files back, not the interpreter: variables keep what the calls
//! since the checkpoint gave them, and the result says so (`reset_session` with
//! `keep_files: true` clears them).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Session, SessionManager};
use crate::execution::ErrorInfo;
use crate::owner::{Owner, SessionKey};
pub use crate::workspace::CheckpointInfo;
use crate::workspace::FileChange;

#[cfg(target_os = "linux")]
use crate::workspace::checkpoint::{self as store, CheckpointError, Store};

/// `checkpoint` and `restore`: a session and a checkpoint's name.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointArgs {
    /// The session (default "default").
    #[serde(default)]
    pub session: Option<String>,
    /// The checkpoint's name: 1 to 64 letters, digits, '.', '_' and '-', not starting
    /// with '.'.
    pub name: String,
}

/// `list_checkpoints`: a session.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListCheckpointsArgs {
    /// The session (default "default").
    #[serde(default)]
    pub session: Option<String>,
}

/// What `checkpoint` did.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointResult {
    pub session: String,
    pub ok: bool,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointInfo>,
    /// Why nothing was done, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// What `restore` did.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RestoreResult {
    pub session: String,
    pub name: String,
    pub ok: bool,
    pub message: String,
    /// What the restore changed in the workspace, as a call's `files` shows it (the
    /// first 200, in path order).
    pub changes: Vec<FileChange>,
    /// How many changes in all.
    pub changes_total: u64,
    /// Always false: the interpreter's variables are not part of a checkpoint.
    pub memory_restored: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// What `list_checkpoints` shows.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointList {
    pub session: String,
    /// Oldest first.
    pub checkpoints: Vec<CheckpointInfo>,
    /// `SANDBOX_MAX_CHECKPOINTS`.
    pub max_checkpoints: usize,
    /// Why nothing is listed (no such open session, checkpoints not available here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

fn session_name(session: &Option<String>) -> String {
    session.clone().unwrap_or_else(|| "default".to_string())
}

#[cfg(target_os = "linux")]
pub(super) fn refused(e: CheckpointError) -> ErrorInfo {
    let kind = match &e {
        CheckpointError::Missing(_) => "NoSuchCheckpoint",
        CheckpointError::Full { .. } => "DiskQuotaExceeded",
        CheckpointError::TooLarge(_) => "CheckpointTooLarge",
        CheckpointError::Io { .. } => "InternalError",
    };
    ErrorInfo::new(kind, e.to_string())
}

#[cfg(target_os = "linux")]
impl SessionManager {
    /// The grants `session` holds now, as a checkpoint records them.
    fn grant_marks(&self, session: &Session) -> Vec<String> {
        let mut marks: Vec<String> = self
            .effective_grants(session)
            .iter()
            .map(|g| {
                let access = match g.access {
                    crate::grants::Access::Read => "read",
                    crate::grants::Access::Write => "write",
                };
                format!("{access} {}", g.path.display())
            })
            .collect();
        marks.extend(
            self.list_host_grants(&session.key.owner, Some(&session.name))
                .into_iter()
                .map(|(_, h)| format!("host {}:{}", h.host, h.port)),
        );
        marks.sort();
        marks.dedup();
        marks
    }
}

/// The tools' results, built from what the session layer did.
impl SessionManager {
    /// Records a checkpoint action in the audit log; a record that cannot be written is
    /// a warning in the message, not a lost action.
    fn audit_checkpoint(
        &self,
        owner: &Owner,
        session: &str,
        decision: &str,
        detail: String,
    ) -> Option<String> {
        let key = SessionKey::new(owner, session).to_string();
        let event = crate::audit::AuditEvent {
            detail,
            ..crate::audit::AuditEvent::now(&key, "checkpoint", decision)
        };
        self.audit
            .record(event)
            .err()
            .map(|e| format!("; the audit record could not be written: {e}"))
    }

    /// The open session `name` of `owner`, when checkpoints can be used on it now.
    fn checkpointable(&self, owner: &Owner, name: &str) -> Result<Arc<Session>, ErrorInfo> {
        crate::execution::validate_session_name(name)?;
        if self.backend.kind() != crate::backend::BackendKind::Host {
            return Err(ErrorInfo::new(
                "Unsupported",
                "checkpoints need the host backend (EXECUTION_BACKEND=host); this server's \
                 workspaces live where the container engine mounts them",
            ));
        }
        if self.settings.max_checkpoints == 0 {
            return Err(ErrorInfo::new(
                "Unsupported",
                "checkpoints are off on this server (SANDBOX_MAX_CHECKPOINTS=0)",
            ));
        }
        let key = SessionKey::new(owner, name);
        self.lookup(&key)?.ok_or_else(|| {
            ErrorInfo::new(
                "NoSuchSession",
                format!("no open session {name:?}: run code in it first"),
            )
        })
    }

    /// `checkpoint`: copies the session's workspace into checkpoint `args.name`.
    pub async fn checkpoint(&self, owner: &Owner, args: &CheckpointArgs) -> CheckpointResult {
        let session_name = session_name(&args.session);
        let done = self.take_checkpoint(owner, &session_name, &args.name).await;
        // Every outcome is on the record, a refusal too.
        let (decision, detail) = match &done {
            Ok(info) => (
                "taken",
                format!("{} entries, {} bytes", info.entries, info.bytes),
            ),
            Err(e) => ("refused", format!("{}: {}", e.kind, e.message)),
        };
        let unaudited = self.audit_checkpoint(
            owner,
            &session_name,
            decision,
            format!("checkpoint {:?}: {detail}", args.name),
        );
        match done {
            Ok(info) => CheckpointResult {
                session: session_name,
                ok: true,
                message: format!(
                    "checkpoint {:?} holds {} entries ({} bytes){}",
                    info.name,
                    info.entries,
                    info.bytes,
                    unaudited.unwrap_or_default()
                ),
                checkpoint: Some(info),
                error: None,
            },
            Err(e) => CheckpointResult {
                session: session_name,
                ok: false,
                message: format!("{}: {}{}", e.kind, e.message, unaudited.unwrap_or_default()),
                checkpoint: None,
                error: Some(e),
            },
        }
    }

    /// `restore`: puts checkpoint `args.name` back into the session's workspace.
    pub async fn restore(&self, owner: &Owner, args: &CheckpointArgs) -> RestoreResult {
        let session = session_name(&args.session);
        let mut result = RestoreResult {
            session: session.clone(),
            name: args.name.clone(),
            ok: false,
            message: String::new(),
            changes: Vec::new(),
            changes_total: 0,
            memory_restored: false,
            error: None,
        };
        let done = self.put_back(owner, &session, &args.name).await;
        let (decision, detail) = match &done {
            Ok(summary) => ("restored", format!("{} changes", summary.total)),
            Err(e) => ("refused", format!("{}: {}", e.kind, e.message)),
        };
        let unaudited = self.audit_checkpoint(
            owner,
            &session,
            decision,
            format!("restore {:?}: {detail}", args.name),
        );
        match done {
            Ok(summary) => {
                result.ok = true;
                result.message = format!(
                    "the workspace is as it was at checkpoint {:?} ({} changes undone); the \
                     interpreter's variables are not restored: reset_session with keep_files \
                     true clears them{}",
                    args.name,
                    summary.total,
                    unaudited.unwrap_or_default()
                );
                result.changes = summary.files;
                result.changes_total = summary.total;
            }
            Err(e) => {
                result.message =
                    format!("{}: {}{}", e.kind, e.message, unaudited.unwrap_or_default());
                result.error = Some(e);
            }
        }
        result
    }

    /// `list_checkpoints` (and the resource `warden://sessions/{session}/checkpoints`).
    ///
    /// # Errors
    /// No such open session, or checkpoints are not available here.
    pub fn list_checkpoints(&self, owner: &Owner, name: &str) -> Result<CheckpointList, ErrorInfo> {
        let session = self.checkpointable(owner, name)?;
        Ok(CheckpointList {
            session: name.to_string(),
            checkpoints: self.stored(&session)?,
            max_checkpoints: self.settings.max_checkpoints,
            error: None,
        })
    }
}

#[cfg(target_os = "linux")]
impl SessionManager {
    fn store_of(session: &Session) -> Result<Store, ErrorInfo> {
        Store::open(&session.home.paths.workspace).map_err(refused)
    }

    fn stored(&self, session: &Session) -> Result<Vec<CheckpointInfo>, ErrorInfo> {
        Ok(Self::store_of(session)?.list())
    }

    /// The session's lock for a checkpoint operation: refused while a call runs.
    fn idle_state<'a>(
        session: &'a Session,
        what: &str,
    ) -> Result<tokio::sync::MutexGuard<'a, super::SessionState>, ErrorInfo> {
        let state = session.state.try_lock().map_err(|_| ErrorInfo {
            retryable: true,
            ..ErrorInfo::new(
                "CallRunning",
                format!(
                    "a call is running in session {:?}; {what} waits for no call: try \
                         again when it has ended",
                    session.name
                ),
            )
        })?;
        if state.closed {
            return Err(ErrorInfo::new(
                "NoSuchSession",
                format!("session {:?} was closed", session.name),
            ));
        }
        if let Some(ended) = &state.killed {
            return Err(ended.only_closed("reset_session"));
        }
        Ok(state)
    }

    async fn take_checkpoint(
        &self,
        owner: &Owner,
        name: &str,
        checkpoint: &str,
    ) -> Result<CheckpointInfo, ErrorInfo> {
        store::check_name(checkpoint).map_err(|e| ErrorInfo::new("InputError", e))?;
        let session = self.checkpointable(owner, name)?;
        let mut state = Self::idle_state(&session, "a checkpoint")?;
        let _ = self.settle_transaction(&session, &mut state).await;
        let store = Self::store_of(&session)?;
        let held = store.list();
        let max = self.settings.max_checkpoints;
        if held.len() >= max && !held.iter().any(|m| m.name == checkpoint) {
            return Err(ErrorInfo::new(
                "TooManyCheckpoints",
                format!(
                    "session {name:?} holds {} checkpoints, the most SANDBOX_MAX_CHECKPOINTS \
                     ({max}) allows; take one again under an existing name to replace it",
                    held.len()
                ),
            ));
        }
        let meta = CheckpointInfo {
            name: checkpoint.to_string(),
            taken_at: crate::grants::now_secs(),
            bytes: 0,
            entries: 0,
            skipped: 0,
            grants: self.grant_marks(&session),
        };
        let worker = state.worker.as_ref().map(|live| live.worker.journal_link());
        let may_share = self.backend.kind() == crate::backend::BackendKind::Host
            && self.backend.enforcement().world.is_some();
        let ws = session.home.paths.workspace.clone();
        let cow = session.cow.clone();
        let taken = tokio::task::spawn_blocking(move || {
            let fd = open_workspace(&ws)?;
            // A transactional call's copy still being deleted would take the room.
            store.remove_retired();
            // Held throughout: a thread the code left running waits to change a file
            // until the checkpoint is registered.
            let mut register = cow
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(copied) = may_share.then(|| files_in_use(worker.as_ref())).flatten() else {
                return store.take(std::os::fd::AsFd::as_fd(&fd), meta);
            };
            let (meta, linked) = store.take_linked(std::os::fd::AsFd::as_fd(&fd), meta, &copied)?;
            if register.is_none() {
                let dir = store.dir_fd()?;
                *register = Some(crate::workspace::cow::Shared::new(dir).map_err(|e| {
                    crate::workspace::checkpoint::CheckpointError::io("the checkpoint store", e)
                })?);
            }
            if let Some(register) = register.as_mut() {
                for (ino, path) in linked {
                    register.add(ino, path);
                }
                // What was opened for writing while the files were being linked.
                for (_, ino) in files_in_use(worker.as_ref()).unwrap_or_default() {
                    register.unshare(ino).map_err(|e| {
                        crate::workspace::checkpoint::CheckpointError::io(e.to_string(), e.errno())
                    })?;
                }
            }
            Ok(meta)
        })
        .await
        .map_err(|e| ErrorInfo::new("InternalError", format!("the checkpoint task failed: {e}")))?;
        taken.map_err(refused)
    }

    /// Before a call runs: a session whose checkpoints share files with its workspace
    /// has its worker show it every change first; a worker that cannot has the
    /// checkpoints copy what they share.
    ///
    /// # Errors
    /// The copies could not be made (no room); nothing ran.
    pub(super) async fn protect_checkpoints(
        &self,
        session: &Session,
        link: crate::worker::handle::JournalLink,
    ) -> Result<(), ErrorInfo> {
        let shared = session
            .cow
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|c| !c.is_empty());
        if !shared {
            return Ok(());
        }
        let (journal, cow) = (session.journal.clone(), session.cow.clone());
        let done = tokio::task::spawn_blocking(move || {
            let attached = match link {
                Some(supervision) => supervision.attach(&journal, &cow),
                None => Err("the worker has no journal".to_string()),
            };
            if attached.is_ok() {
                return Ok(());
            }
            let mut cow = cow
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match cow.as_mut() {
                Some(register) => register.unshare_all(),
                None => Ok(()),
            }
        })
        .await
        .map_err(|e| ErrorInfo::new("InternalError", format!("the checkpoint task failed: {e}")))?;
        done.map_err(|e| {
            ErrorInfo::new(
                "DiskQuotaExceeded",
                format!(
                    "this worker cannot show its file changes first, so the session's \
                     checkpoints must copy the files they share, and that failed: {e}; \
                     nothing ran: delete a checkpoint or files"
                ),
            )
        })
    }

    async fn put_back(
        &self,
        owner: &Owner,
        name: &str,
        checkpoint: &str,
    ) -> Result<crate::workspace::Summary, ErrorInfo> {
        store::check_name(checkpoint).map_err(|e| ErrorInfo::new("InputError", e))?;
        let session = self.checkpointable(owner, name)?;
        let mut state = Self::idle_state(&session, "a restore")?;
        let _ = self.settle_transaction(&session, &mut state).await;
        let store = Self::store_of(&session)?;
        let meta = store.meta(checkpoint).map_err(refused)?;
        let now = self.grant_marks(&session);
        let gone: Vec<&String> = meta
            .grants
            .iter()
            .filter(|g| !still_held(g, &now))
            .collect();
        if let Some(first) = gone.first() {
            let e = ErrorInfo::new(
                "GrantRevoked",
                format!(
                    "checkpoint {checkpoint:?} was taken while the session held the grant \
                     `{first}`, which it no longer holds (revoked or expired); its files may \
                     hold what that grant reached, so it is not restored. Ask for the grant \
                     again, or restore a checkpoint taken without it"
                ),
            );
            return Err(e);
        }
        let ws = session.home.paths.workspace.clone();
        let name_owned = checkpoint.to_string();
        let restored = tokio::task::spawn_blocking(move || {
            let fd = open_workspace(&ws)?;
            store.restore(std::os::fd::AsFd::as_fd(&fd), &ws, &name_owned)
        })
        .await
        .map_err(|e| ErrorInfo::new("InternalError", format!("the restore task failed: {e}")))?;
        // What the restore did is not the next call's doing: the tracker takes it in now.
        if let Ok(mut tracker) = session.tracker.lock() {
            let _ = tracker.report();
        }
        Ok(crate::workspace::Summary::from(restored.map_err(refused)?))
    }
}

#[cfg(target_os = "linux")]
/// Whether the grant `mark` (as [`SessionManager::grant_marks`] writes it) is among
/// `now`, or covered by one there (write access covers read). Pure.
fn still_held(mark: &str, now: &[String]) -> bool {
    now.iter().any(|m| m == mark)
        || mark
            .strip_prefix("read ")
            .is_some_and(|path| now.iter().any(|m| m.strip_prefix("write ") == Some(path)))
}

#[cfg(target_os = "linux")]
pub(super) fn open_workspace(
    path: &std::path::Path,
) -> Result<std::os::fd::OwnedFd, CheckpointError> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| CheckpointError::Io {
        what: "opening the workspace".into(),
        source: e.into(),
    })
}

#[cfg(not(target_os = "linux"))]
impl SessionManager {
    fn unsupported() -> ErrorInfo {
        ErrorInfo::new("Unsupported", "checkpoints need Linux")
    }
    fn stored(&self, _: &Session) -> Result<Vec<CheckpointInfo>, ErrorInfo> {
        Err(Self::unsupported())
    }
    async fn take_checkpoint(
        &self,
        _: &Owner,
        _: &str,
        _: &str,
    ) -> Result<CheckpointInfo, ErrorInfo> {
        Err(Self::unsupported())
    }
    async fn put_back(
        &self,
        _: &Owner,
        _: &str,
        _: &str,
    ) -> Result<crate::workspace::Summary, ErrorInfo> {
        Err(Self::unsupported())
    }
    pub(super) async fn protect_checkpoints(
        &self,
        _: &Session,
        _: crate::worker::handle::JournalLink,
    ) -> Result<(), ErrorInfo> {
        Ok(())
    }
}

/// Which files a checkpoint must copy although it may share the workspace's: those the
/// session's worker (`None`: it has none) can write now; `None` (copy everything) when
/// its worker cannot show its changes first.
#[cfg(target_os = "linux")]
fn files_in_use(
    worker: Option<&crate::worker::handle::JournalLink>,
) -> Option<std::collections::HashSet<(u64, u64)>> {
    match worker {
        None => Some(std::collections::HashSet::new()),
        Some(None) => None,
        Some(Some(supervision)) => supervision.writable_files().ok(),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::still_held;

    #[test]
    fn a_grant_is_still_held_when_it_or_a_wider_one_is() {
        let now = vec![
            "write /data".to_string(),
            "host example.org:443".to_string(),
        ];
        assert!(still_held("write /data", &now));
        assert!(still_held("read /data", &now));
        assert!(still_held("host example.org:443", &now));
        assert!(!still_held("read /other", &now));
        assert!(!still_held("write /data2", &["read /data2".to_string()]));
    }
}
