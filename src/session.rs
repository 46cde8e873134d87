//! Sessions: shared server state keyed by (owner, session name) — see [`crate::owner`] —
//! not by connection, each with its own workspace directory, its own uid when the server is root, and at most one
//! persistent sandboxed worker. Calls in one session are serialised; calls in different
//! sessions run in parallel. All workspaces of this server instance are removed at
//! shutdown.

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{GuardMode, Settings};
use crate::execution::{
    ErrorInfo, ExecResult, ExecStatus, ExecuteArgs, MAX_CODE_BYTES, prepare_inputs,
    validate_session_name,
};
use crate::grants::{Access, ForbiddenPaths, Grant, GrantError, PathKind};
use crate::guard::{CheckContext, Decision, Guard, Verdict};
use crate::owner::{Owner, SessionKey};
use crate::sandbox::policy::{RunAs, SessionPaths, WorkerPolicy};
use crate::sandbox::python::{self, PythonRuntime};
use crate::sandbox::worker::{Outcome, OutputTap, SpawnError, Worker};
use crate::workspace::Snapshot;

/// Most sessions alive at once (each holds a Python process).
pub const MAX_SESSIONS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "cannot create the data directory {path}: {source}; set SANDBOX_DATA_DIR to a writable directory"
    )]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the data directory {path} is not reachable by the unprivileged sandbox users ({reason}); set SANDBOX_DATA_DIR to a directory such as /var/lib/warden"
    )]
    DataDirUnreachable { path: PathBuf, reason: String },
    #[error("no data directory could be determined; set SANDBOX_DATA_DIR")]
    NoDataDir,
    #[error("{setting}: {source}")]
    Python {
        /// `SANDBOX_PYTHON=… (from …)`, the setting at fault.
        setting: String,
        #[source]
        source: python::PythonError,
    },
    #[error("{setting}: {source}")]
    Guard {
        /// `SANDBOX_POLICY=… (from …)`, the setting at fault.
        setting: String,
        #[source]
        source: crate::guard::GuardError,
    },
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error("pre-approved grant from {origin}: {error}")]
    PreApproval { origin: String, error: GrantError },
}

pub struct SessionManager {
    settings: Arc<Settings>,
    runtime: PythonRuntime,
    /// `<data dir>/sessions/<instance>`: removed at shutdown.
    instance_dir: PathBuf,
    /// First uid of this instance's range, when the server is root.
    uid_base: Option<u32>,
    next_uid: AtomicU32,
    sessions: Mutex<HashMap<SessionKey, Arc<Session>>>,
    /// The static guard; `None` when CODEGUARD=off.
    guard: Option<Guard>,
    /// Set when code must not run at all, with the reason.
    gate: Mutex<Option<String>>,
    /// Paths no grant may ever reach.
    forbidden: ForbiddenPaths,
    /// Grants the operator approved at start (CLI flags, config file): every session.
    operator_grants: Vec<Grant>,
    audit: crate::audit::AuditLog,
}

/// A path the operator approved before start-up.
#[derive(Debug, Clone)]
pub struct PreApproval {
    pub path: String,
    pub access: Access,
    /// Where it came from, e.g. "--allow-read" or "config file /etc/warden.toml".
    pub source: String,
}

pub struct Session {
    /// The name the client gave (what results and tools show).
    name: String,
    /// Owner and name: the table key, the directory name, the audit log's name.
    key: SessionKey,
    paths: SessionPaths,
    run_as: Option<RunAs>,
    /// Grants a person approved for this session.
    grants: Mutex<Vec<Grant>>,
    state: tokio::sync::Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    worker: Option<Worker>,
    /// Why the previous worker was lost, reported by the next call.
    lost_worker: Option<String>,
    /// A tripwire fired: every later call is refused with this reason.
    killed: Option<String>,
}

fn running_as_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl SessionManager {
    /// Resolves the interpreter and creates this instance's directory.
    pub fn new(
        settings: Arc<Settings>,
        pre_approved: &[PreApproval],
    ) -> Result<SessionManager, SessionError> {
        let guard = match (settings.codeguard, &settings.policy_file) {
            (GuardMode::Off, _) => None,
            (_, Some(path)) => Some(Guard::from_policy_file(path)),
            (_, None) => Some(Guard::with_default_policy()),
        }
        .transpose()
        .map_err(|source| SessionError::Guard {
            setting: settings.describe("SANDBOX_POLICY"),
            source,
        })?;
        let root = running_as_root();
        let sandboxed = settings.host_sandbox != crate::config::SandboxMode::Off;
        let runtime =
            python::resolve(settings.python.as_deref(), root && sandboxed).map_err(|source| {
                SessionError::Python {
                    setting: settings.describe("SANDBOX_PYTHON"),
                    source,
                }
            })?;
        let data_dir = match &settings.data_dir {
            Some(d) => d.clone(),
            None => crate::config::default_data_dir(root).ok_or(SessionError::NoDataDir)?,
        };
        let suffix: [u8; 4] = crate::random_bytes();
        let instance = format!(
            "{}-{}",
            std::process::id(),
            suffix
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let instance_dir = data_dir.join("sessions").join(instance);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&instance_dir)
            .map_err(|source| SessionError::DataDir {
                path: instance_dir.clone(),
                source,
            })?;
        let uid_base = if root && sandboxed {
            python::traversable_by_others(&instance_dir).map_err(|reason| {
                SessionError::DataDirUnreachable {
                    path: data_dir.clone(),
                    reason,
                }
            })?;
            Some(crate::sandbox::uids::pick_uid_range())
        } else {
            None
        };
        let audit = crate::audit::AuditLog::open(&data_dir.join("audit.jsonl"))?;
        let mut warden_dirs = vec![data_dir.clone()];
        if let Some(config) = crate::config::config_dir() {
            warden_dirs.push(config);
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let forbidden = ForbiddenPaths::standard(home.as_deref(), &warden_dirs);
        let mut operator_grants = Vec::new();
        for pre in pre_approved {
            let (path, kind) = crate::grants::resolve(&pre.path, &forbidden).map_err(|error| {
                SessionError::PreApproval {
                    origin: pre.source.clone(),
                    error,
                }
            })?;
            tracing::info!(path = %path.display(), access = ?pre.access, source = %pre.source, "pre-approved grant");
            operator_grants.push(Grant {
                path,
                kind,
                access: pre.access,
                granted_at: crate::grants::now_secs(),
                expires_at: None,
                approved_by: format!("operator ({})", pre.source),
                reason: "pre-approved at start-up".into(),
            });
        }
        tracing::info!(
            python = %runtime.executable.display(),
            version = %runtime.version,
            workspaces = %instance_dir.display(),
            "session manager ready"
        );
        Ok(SessionManager {
            settings,
            runtime,
            instance_dir,
            uid_base,
            next_uid: AtomicU32::new(0),
            sessions: Mutex::new(HashMap::new()),
            guard,
            gate: Mutex::new(None),
            forbidden,
            operator_grants,
            audit,
        })
    }

    pub fn runtime(&self) -> &PythonRuntime {
        &self.runtime
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn session(&self, key: &SessionKey) -> Result<Arc<Session>, ErrorInfo> {
        let name = key.name.as_str();
        let mut sessions = self
            .sessions
            .lock()
            .map_err(|_| ErrorInfo::new("InternalError", "session table poisoned"))?;
        if let Some(s) = sessions.get(key) {
            return Ok(s.clone());
        }
        if sessions.len() >= MAX_SESSIONS {
            return Err(ErrorInfo::new(
                "TooManySessions",
                format!("{MAX_SESSIONS} sessions are open; reuse one of them"),
            ));
        }
        let run_as = self.allocate_uid(&sessions);
        let dir = self.instance_dir.join(key.dir_name());
        let paths = SessionPaths {
            workspace: dir.join("workspace"),
            tmp: dir.join("tmp"),
        };
        create_session_dirs(&dir, &paths, run_as).map_err(|e| {
            ErrorInfo::new(
                "InternalError",
                format!("cannot create the workspace for session {name:?}: {e}"),
            )
        })?;
        let session = Arc::new(Session {
            name: name.to_string(),
            key: key.clone(),
            paths,
            run_as,
            grants: Mutex::new(Vec::new()),
            state: tokio::sync::Mutex::new(SessionState::default()),
        });
        sessions.insert(key.clone(), session.clone());
        Ok(session)
    }

    /// The name and workspace directory of every open session of `owner`, by name.
    pub fn workspaces(&self, owner: &Owner) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| &s.key.owner == owner)
                .map(|s| (s.name.clone(), s.paths.workspace.clone()))
                .collect(),
            Err(_) => Vec::new(),
        };
        out.sort();
        out
    }

    /// The workspace directory of a session of `owner`, if it exists.
    pub fn workspace_of(&self, owner: &Owner, name: &str) -> Option<PathBuf> {
        let sessions = self.sessions.lock().ok()?;
        sessions
            .get(&SessionKey::new(owner, name))
            .map(|s| s.paths.workspace.clone())
    }

    /// Runs one `execute_python` call for `owner` and records it in the audit log.
    pub async fn execute(&self, owner: &Owner, args: &ExecuteArgs) -> ExecResult {
        self.execute_streaming(owner, args, None).await
    }

    /// Like [`SessionManager::execute`], and the code's stdout also goes to `tap` as it
    /// is printed (progress notifications).
    pub async fn execute_streaming(
        &self,
        owner: &Owner,
        args: &ExecuteArgs,
        tap: Option<OutputTap>,
    ) -> ExecResult {
        let result = self.execute_unaudited(owner, args, tap).await;
        let key = SessionKey::new(owner, &result.session);
        self.audit_execution(&key.to_string(), &args.code, &result);
        result
    }

    async fn execute_unaudited(
        &self,
        owner: &Owner,
        args: &ExecuteArgs,
        tap: Option<OutputTap>,
    ) -> ExecResult {
        let name = args.session.as_deref().unwrap_or("default");
        if let Some(reason) = self.gate_reason() {
            return ExecResult::refused(name, ErrorInfo::new("SandboxRefused", reason), Vec::new());
        }
        if let Err(e) = validate_session_name(name) {
            return ExecResult::refused(name, e, Vec::new());
        }
        if args.code.len() > MAX_CODE_BYTES {
            return ExecResult::refused(
                name,
                ErrorInfo::new(
                    "InputTooLarge",
                    format!(
                        "code is {} bytes; the limit is {} bytes (put data in `inputs` or generate it)",
                        args.code.len(),
                        MAX_CODE_BYTES
                    ),
                ),
                Vec::new(),
            );
        }
        let inputs = match prepare_inputs(args.inputs.as_ref()) {
            Ok(i) => i,
            Err(e) => return ExecResult::refused(name, e, Vec::new()),
        };
        let session = match self.session(&SessionKey::new(owner, name)) {
            Ok(s) => s,
            Err(e) => return ExecResult::refused(name, e, Vec::new()),
        };
        let timeout = self.settings.effective_timeout(args.timeout_s);
        session
            .execute(self, &args.code, &inputs, timeout, tap)
            .await
    }

    /// Restarts a session's interpreter (`keep_files`), or closes the session: its
    /// worker, workspace and grants are gone and its slot is free. Returns whether a
    /// running worker was killed.
    pub async fn reset(
        &self,
        owner: &Owner,
        name: &str,
        keep_files: bool,
    ) -> Result<bool, ErrorInfo> {
        validate_session_name(name)?;
        let key = SessionKey::new(owner, name);
        let session = self
            .sessions
            .lock()
            .map_err(|_| ErrorInfo::new("InternalError", "session table poisoned"))?
            .get(&key)
            .cloned()
            .ok_or_else(|| ErrorInfo::new("NoSuchSession", format!("no session {name:?}")))?;
        let mut state = session.state.lock().await;
        if keep_files && let Some(reason) = &state.killed {
            return Err(ErrorInfo::new(
                "SessionKilled",
                format!("{reason}; a killed session can only be closed (keep_files: false)"),
            ));
        }
        let killed_worker = match state.worker.take() {
            Some(mut worker) => {
                worker.kill();
                true
            }
            None => false,
        };
        state.lost_worker = None;
        if keep_files {
            return Ok(killed_worker);
        }
        if let Ok(mut map) = self.sessions.lock() {
            map.remove(&key);
        }
        let dir = self.instance_dir.join(key.dir_name());
        std::fs::remove_dir_all(&dir).map_err(|e| {
            ErrorInfo::new(
                "InternalError",
                format!(
                    "the session was closed but {} could not be removed: {e}",
                    dir.display()
                ),
            )
        })?;
        Ok(killed_worker)
    }

    /// Closes every session of `owner` (its MCP session ended, so no one can name them
    /// any more): workers killed, workspaces and grants removed.
    pub async fn close_owner(&self, owner: &Owner) {
        let names: Vec<String> = match self.sessions.lock() {
            Ok(map) => map
                .keys()
                .filter(|k| &k.owner == owner)
                .map(|k| k.name.clone())
                .collect(),
            Err(_) => Vec::new(),
        };
        for name in names {
            if let Err(e) = self.reset(owner, &name, false).await {
                tracing::warn!(%owner, session = %name, error = %e.message, "could not close a session");
            }
        }
    }

    /// Kills every worker and removes every workspace of this instance.
    pub async fn shutdown(&self) {
        let sessions: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(mut map) => map.drain().map(|(_, s)| s).collect(),
            Err(_) => Vec::new(),
        };
        for session in sessions {
            let mut state = session.state.lock().await;
            if let Some(mut worker) = state.worker.take() {
                worker.kill();
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.instance_dir) {
            tracing::warn!(dir = %self.instance_dir.display(), error = %e, "could not remove workspaces");
        }
    }

    fn policy_for(
        &self,
        paths: &SessionPaths,
        run_as: Option<RunAs>,
        grants: &[Grant],
    ) -> WorkerPolicy {
        WorkerPolicy::for_session(
            &self.settings,
            &self.runtime,
            paths,
            run_as,
            grants,
            std::process::id() as i32,
            &|name| std::env::var(name).ok(),
        )
    }

    /// The next uid of this instance's range that no live session holds (the range
    /// wraps, so uids of finished selftests are reused).
    fn allocate_uid(&self, live: &HashMap<SessionKey, Arc<Session>>) -> Option<RunAs> {
        let base = self.uid_base?;
        let held = |uid: u32| {
            live.values()
                .any(|s| s.run_as.is_some_and(|r| r.uid == uid))
        };
        let mut uid = base;
        for _ in 0..crate::sandbox::uids::UID_RANGE {
            uid = base
                + self.next_uid.fetch_add(1, Ordering::Relaxed) % crate::sandbox::uids::UID_RANGE;
            if !held(uid) {
                break;
            }
        }
        Some(RunAs { uid, gid: uid })
    }

    /// This instance's directory (workspaces, probe fixtures).
    pub fn instance_dir(&self) -> &Path {
        &self.instance_dir
    }

    /// Each session's worker runs as a uid of its own (the server is root).
    pub fn runs_as_dedicated_uids(&self) -> bool {
        self.uid_base.is_some()
    }

    /// A throwaway session (own directory, own uid) and the policy its worker gets:
    /// exactly what a real session's worker gets. Removed when dropped.
    pub fn ephemeral(&self, label: &str) -> Result<Ephemeral, ErrorInfo> {
        let name: String = format!(
            "{label}-{}",
            crate::random_bytes::<6>()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let dir = self.instance_dir.join(&name);
        let paths = SessionPaths {
            workspace: dir.join("workspace"),
            tmp: dir.join("tmp"),
        };
        let run_as = match self.sessions.lock() {
            Ok(live) => self.allocate_uid(&live),
            Err(_) => return Err(ErrorInfo::new("InternalError", "session table poisoned")),
        };
        create_session_dirs(&dir, &paths, run_as).map_err(|e| {
            ErrorInfo::new(
                "InternalError",
                format!("cannot create {}: {e}", dir.display()),
            )
        })?;
        let policy = self.policy_for(&paths, run_as, &[]);
        Ok(Ephemeral { dir, policy })
    }

    /// Refuses every later execution with `reason` (HOST_SANDBOX=require when the startup
    /// probes failed).
    pub fn close_gate(&self, reason: String) {
        if let Ok(mut gate) = self.gate.lock() {
            *gate = Some(reason);
        }
    }

    fn gate_reason(&self) -> Option<String> {
        self.gate.lock().ok().and_then(|g| g.clone())
    }
}

impl SessionManager {
    /// Canonicalises a requested path and refuses the ones that can never be granted.
    pub fn resolve_grant_path(&self, raw: &str) -> Result<(PathBuf, PathKind), GrantError> {
        crate::grants::resolve(raw, &self.forbidden)
    }

    /// Live grants for a session: the operator's and the session's own.
    pub fn effective_grants(&self, session: &Session) -> Vec<Grant> {
        let now = crate::grants::now_secs();
        let mut all: Vec<Grant> = self.operator_grants.clone();
        if let Ok(own) = session.grants.lock() {
            all.extend(own.iter().filter(|g| g.is_live(now)).cloned());
        }
        all
    }

    /// An existing live grant that already gives `access` to `path` in `session`.
    pub fn covering_grant(
        &self,
        session: &SessionKey,
        path: &Path,
        access: Access,
    ) -> Option<Grant> {
        let session = self.session(session).ok()?;
        self.effective_grants(&session)
            .into_iter()
            .find(|g| g.covers(path, access))
    }

    /// Records an approved grant and restarts the session's worker, since a sealed
    /// Landlock ruleset cannot be widened. Returns whether a running worker (and so its
    /// variables) was discarded.
    pub async fn add_grant(&self, session: &SessionKey, grant: Grant) -> Result<bool, ErrorInfo> {
        let session = self.session(session)?;
        let mut state = session.state.lock().await;
        session
            .grants
            .lock()
            .map_err(|_| ErrorInfo::new("InternalError", "grant table poisoned"))?
            .push(grant.clone());
        let restarted = if let Some(mut worker) = state.worker.take() {
            worker.kill();
            state.lost_worker = Some(format!(
                "the sandbox was widened by a grant for {}",
                grant.path.display()
            ));
            true
        } else {
            false
        };
        Ok(restarted)
    }

    /// Every live grant of `owner`'s sessions, per session name ("*" for the
    /// operator's, which apply to all).
    pub fn list_grants(&self, owner: &Owner, only: Option<&str>) -> Vec<(String, Grant)> {
        let now = crate::grants::now_secs();
        let mut out: Vec<(String, Grant)> = self
            .operator_grants
            .iter()
            .map(|g| ("*".to_string(), g.clone()))
            .collect();
        let sessions: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| &s.key.owner == owner)
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        for s in sessions {
            if only.is_some_and(|o| o != s.name) {
                continue;
            }
            if let Ok(grants) = s.grants.lock() {
                out.extend(
                    grants
                        .iter()
                        .filter(|g| g.is_live(now))
                        .map(|g| (s.name.clone(), g.clone())),
                );
            }
        }
        out
    }

    /// When each session has its own uid, file permissions must let that uid reach a
    /// granted path too; says what is missing, if anything.
    pub fn permission_warning(
        &self,
        path: &Path,
        kind: PathKind,
        access: Access,
    ) -> Option<String> {
        if !self.runs_as_dedicated_uids() {
            return None;
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        let need = match (kind, access) {
            (PathKind::Directory, Access::Read) => 0o005,
            (PathKind::Directory, Access::Write) => 0o007,
            (PathKind::File, Access::Read) => 0o004,
            (PathKind::File, Access::Write) => 0o006,
        };
        let parent_ok = path
            .parent()
            .is_none_or(|p| python::traversable_by_others(p).is_ok());
        if mode & need == need && parent_ok {
            return None;
        }
        Some(format!(
            "the sandboxed code runs as its own unprivileged uid, and the file permissions of {} (mode {:o}) or of a directory above it do not let other users {}; the grant is recorded, but the operating system will still refuse until permissions allow it (e.g. chmod o+{})",
            path.display(),
            mode & 0o7777,
            if access == Access::Write {
                "read and write it"
            } else {
                "read it"
            },
            if access == Access::Write { "rwx" } else { "rx" },
        ))
    }

    /// How a person can pre-approve paths when their client cannot ask them.
    pub fn pre_approval_hint(&self) -> String {
        let config = self
            .settings
            .config_file
            .clone()
            .or_else(crate::config::config_file_path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "the file named by WARDEN_CONFIG".to_string());
        format!(
            "start warden with `warden serve --allow-read PATH` or `--allow-write PATH`, or add \
             [[grants]] entries (path = \"...\", access = \"read\" | \"write\") to {config}"
        )
    }
}

/// A session directory for one-off workers (selftest), removed on drop.
pub struct Ephemeral {
    pub dir: PathBuf,
    pub policy: WorkerPolicy,
}

impl Drop for Ephemeral {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the guard said, or that it is off.
pub enum GuardOutcome {
    Off,
    Checked(Verdict),
}

impl SessionManager {
    /// Runs the guard on its own threads (the parser is recursive and needs a known,
    /// large stack), never on the async runtime's.
    pub async fn check_code(
        &self,
        code: &str,
        workspace: &Path,
        allowed_roots: Vec<PathBuf>,
    ) -> GuardOutcome {
        let Some(guard) = self.guard.clone() else {
            return GuardOutcome::Off;
        };
        let ctx = CheckContext {
            workspace: workspace.to_path_buf(),
            allowed_roots,
        };
        let source = code.as_bytes().to_vec();
        match tokio::task::spawn_blocking(move || guard.check(&source, &ctx)).await {
            Ok(v) => GuardOutcome::Checked(v),
            Err(e) => GuardOutcome::Checked(Verdict {
                decision: Decision::Blocked,
                retryable_error: false,
                findings: vec![crate::guard::Finding {
                    rule: "internal_error".into(),
                    category: "internal".into(),
                    message: format!("the guard failed: {e}"),
                    line: 1,
                    col: 1,
                    snippet: String::new(),
                    tripwire: false,
                }],
            }),
        }
    }

    /// What the guard's policy holds, when the guard is on.
    pub fn guard_summary(&self) -> Option<crate::guard::PolicySummary> {
        self.guard.as_ref().map(Guard::policy_summary)
    }

    pub fn audit(&self) -> &crate::audit::AuditLog {
        &self.audit
    }

    /// One audit line for an `execute_python` call.
    fn audit_execution(&self, session: &str, code: &str, result: &ExecResult) {
        let enforce = self.settings.codeguard == GuardMode::Enforce;
        let blocked = result
            .guard
            .as_ref()
            .is_some_and(|v| v.decision == Decision::Blocked);
        let rule = result
            .guard
            .as_ref()
            .and_then(|v| v.findings.first())
            .map(|f| f.rule.clone());
        let kill_run = result.guard.as_ref().is_some_and(Verdict::tripwire) && enforce;
        let status = serde_json::to_value(result.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let detail = result
            .error
            .as_ref()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.kind,
                    e.message.chars().take(300).collect::<String>()
                )
            })
            .unwrap_or_default();
        let base = crate::audit::AuditEvent {
            rule,
            detail,
            args_sha256: Some(crate::audit::sha256_hex(code.as_bytes())),
            enforced: enforce,
            kill_run,
            ..crate::audit::AuditEvent::now(session, "execute", &status)
        };
        if blocked {
            self.audit.record(crate::audit::AuditEvent {
                phase: "guard".into(),
                decision: "blocked".into(),
                ..base.clone()
            });
        }
        self.audit.record(crate::audit::AuditEvent {
            duration_ms: Some(result.duration_ms),
            ..base
        });
    }
}

fn summarize(v: &Verdict) -> String {
    v.findings
        .iter()
        .take(5)
        .map(|f| format!("{} at line {}: {}", f.rule, f.line, f.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The error a blocked verdict becomes: a syntax error is the agent's to fix and retry;
/// a violation says which rule and where.
fn guard_error(v: &Verdict) -> ErrorInfo {
    let first = v.findings.first();
    let kind = match (v.retryable_error, first.map(|f| f.rule.as_str())) {
        (true, Some("syntax_error")) => "SyntaxError",
        (true, _) => "InputRejected",
        (false, _) => "GuardBlocked",
    };
    let message = if v.retryable_error {
        format!("{} (fix the code and call again)", summarize(v))
    } else {
        format!(
            "the static guard blocked this code before it ran: {}",
            summarize(v)
        )
    };
    ErrorInfo::new(kind, message)
}

fn create_session_dirs(
    dir: &Path,
    paths: &SessionPaths,
    run_as: Option<RunAs>,
) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(0o711).create(dir)?;
    for sub in [&paths.workspace, &paths.tmp] {
        std::fs::DirBuilder::new().mode(0o700).create(sub)?;
        if let Some(run_as) = run_as {
            std::os::unix::fs::chown(sub, Some(run_as.uid), Some(run_as.gid))?;
        }
        std::fs::set_permissions(sub, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

impl Session {
    async fn execute(
        &self,
        manager: &SessionManager,
        code: &str,
        inputs: &[crate::sandbox::worker::InputFile],
        timeout: Duration,
        tap: Option<OutputTap>,
    ) -> ExecResult {
        let started = Instant::now();
        let mut state = self.state.lock().await;
        if let Some(reason) = &state.killed {
            return ExecResult::refused(
                &self.name,
                ErrorInfo::new("SessionKilled", reason.clone()),
                Vec::new(),
            );
        }
        let mut warnings = Vec::new();
        // Expired grants narrow the sandbox again: the worker must be rebuilt without them.
        let expired: Vec<Grant> = match self.grants.lock() {
            Ok(mut grants) => {
                let now = crate::grants::now_secs();
                let (live, gone): (Vec<Grant>, Vec<Grant>) =
                    grants.drain(..).partition(|g| g.is_live(now));
                *grants = live;
                gone
            }
            Err(_) => Vec::new(),
        };
        if !expired.is_empty() {
            for g in &expired {
                tracing::info!(session = %self.key, path = %g.path.display(), "grant expired");
            }
            if let Some(mut worker) = state.worker.take() {
                worker.kill();
                state.lost_worker = Some(format!(
                    "grants expired ({})",
                    expired
                        .iter()
                        .map(|g| g.path.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        let grants = manager.effective_grants(self);
        let roots = grants.iter().map(|g| g.path.clone()).collect();
        let verdict = match manager.check_code(code, &self.paths.workspace, roots).await {
            GuardOutcome::Off => {
                warnings.push(
                    "CODEGUARD=off: the static guard is switched off; only the operating-system sandbox stands"
                        .to_string(),
                );
                None
            }
            GuardOutcome::Checked(v) => Some(v),
        };
        if let Some(v) = &verdict
            && v.decision == Decision::Blocked
        {
            if manager.settings.codeguard == GuardMode::Enforce {
                if v.tripwire() {
                    let reason = format!(
                        "session {:?} was killed by a tripwire ({}); open another session",
                        self.name,
                        v.findings
                            .iter()
                            .filter(|f| f.tripwire)
                            .map(|f| f.rule.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    tracing::warn!(session = %self.key, %reason, "tripwire");
                    state.killed = Some(reason);
                    if let Some(mut worker) = state.worker.take() {
                        worker.kill();
                    }
                }
                let mut result =
                    ExecResult::refused(&self.name, guard_error(v), std::mem::take(&mut warnings));
                result.guard = verdict;
                result.duration_ms =
                    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                return result;
            }
            warnings.push(format!(
                "CODEGUARD=shadow: the guard would have blocked this code ({}); it ran anyway",
                summarize(v)
            ));
        }
        if let Some(v) = &verdict
            && v.decision == Decision::Restricted
        {
            warnings.push(format!(
                "the guard allowed this code with warnings: {}",
                summarize(v)
            ));
        }
        let mut worker_restarted = false;
        if state.worker.as_ref().is_some_and(Worker::is_busy) {
            // The previous call was cancelled midway and its worker already killed.
            state.worker = None;
            state.lost_worker = Some("the previous call was cancelled while it ran".to_string());
        }
        if let Some(why) = state.lost_worker.take() {
            worker_restarted = true;
            warnings.push(format!(
                "the previous worker of this session was lost ({why}); a new one was started: variables from earlier calls are gone, workspace files are kept"
            ));
        }
        if state.worker.is_none() {
            match Worker::spawn(&manager.policy_for(&self.paths, self.run_as, &grants)).await {
                Ok(worker) => state.worker = Some(worker),
                Err(e) => {
                    let kind = match e {
                        SpawnError::Refused { .. } => "SandboxRefused",
                        _ => "WorkerStartFailed",
                    };
                    tracing::error!(session = %self.key, error = %e, "worker did not start");
                    let mut result = ExecResult::refused(
                        &self.name,
                        ErrorInfo::new(kind, e.to_string()),
                        warnings,
                    );
                    result.worker_restarted = worker_restarted;
                    return result;
                }
            }
        }
        let Some(worker) = state.worker.as_mut() else {
            return ExecResult::refused(
                &self.name,
                ErrorInfo::new("InternalError", "worker missing after start"),
                warnings,
            );
        };
        warnings.extend(worker.report().warnings());
        let before = Snapshot::take(&self.paths.workspace);
        let cap = manager.settings.output_limit_bytes;
        worker.tap_stdout(tap);
        let run = worker.execute(code, inputs, timeout, cap).await;
        let after = Snapshot::take(&self.paths.workspace);
        if !run.reusable {
            state.worker = None;
        }
        let mut result = ExecResult {
            status: ExecStatus::Ok,
            stdout: String::from_utf8_lossy(&run.stdout.bytes).into_owned(),
            stderr: String::from_utf8_lossy(&run.stderr.bytes).into_owned(),
            result: None,
            error: None,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            timed_out: false,
            truncated: run.stdout.truncated || run.stderr.truncated,
            backend: "host".to_string(),
            session: self.name.clone(),
            files: before.changes_to(&after),
            worker_restarted,
            warnings,
            guard: verdict,
        };
        match run.outcome {
            Outcome::Finished(response) => {
                result.result = response.result;
                result.truncated |= response.result_truncated;
                if let Some(e) = response.error {
                    result.status = ExecStatus::Error;
                    result.error = Some(ErrorInfo {
                        kind: e.kind,
                        message: e.message,
                        traceback: e.traceback,
                    });
                } else if response.status != "ok" {
                    result.status = ExecStatus::Error;
                }
                if !run.reusable {
                    state.lost_worker =
                        Some("the code closed or redirected its output streams".to_string());
                }
            }
            Outcome::TimedOut => {
                result.status = ExecStatus::Timeout;
                result.timed_out = true;
                result.error = Some(ErrorInfo::new(
                    "Timeout",
                    format!(
                        "the code ran longer than {} s and its whole process group was killed; the next call starts a fresh worker (variables are lost, files are kept)",
                        timeout.as_secs()
                    ),
                ));
                state.lost_worker = Some(format!("timed out after {} s", timeout.as_secs()));
            }
            Outcome::Died(how) => {
                result.status = ExecStatus::Killed;
                result.error = Some(ErrorInfo::new(
                    "WorkerDied",
                    format!(
                        "the Python worker died during the call ({how}); the next call starts a fresh worker (variables are lost, files are kept)"
                    ),
                ));
                state.lost_worker = Some(format!("the worker died: {how}"));
            }
            Outcome::Broken(why) => {
                result.status = ExecStatus::Killed;
                result.error = Some(ErrorInfo::new(
                    "WorkerProtocolError",
                    format!("the worker broke its protocol ({why}) and was killed"),
                ));
                state.lost_worker = Some(format!("protocol error: {why}"));
            }
        }
        result
    }
}
