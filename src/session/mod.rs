//! Sessions: shared server state keyed by (owner, session name) — see [`crate::owner`] —
//! not by connection. A session is cheap: a name, a home (workspace and backend slot)
//! and a record. Its persistent worker is the expensive part, and live workers are capped
//! tightly (`SANDBOX_MAX_WORKERS`); sessions themselves hold what the server keeps for
//! them (a workspace tmpfs, watches), so they are capped too (`SANDBOX_MAX_SESSIONS`).
//! Calls in one session are serialised;
//! calls in different sessions run in parallel. All workspaces of this server instance
//! are removed at shutdown.
//!
//! - this file: the session table, the entry points, resetting and shutdown;
//! - [`lifecycle`]: opening a session (a warm home from the pool, or a new one made off
//!   the table's lock and off the runtime), closing it, idle expiry;
//! - [`keep`]: copying a closing session's workspace aside (`SANDBOX_KEEP_WORKSPACES`);
//! - [`workers`]: a session's worker, the live-worker cap and least-recently-used
//!   eviction, what each worker uses;
//! - [`run`]: one session's execution (guard, worker, workspace diff, result);
//! - [`grants`]: grants per session and the operator's;
//! - [`guard`]: the call into the static guard;
//! - [`audit`]: the audit records of executions.

mod audit;
mod budget;
mod checkpoints;
mod clients;
mod grants;
mod guard;
mod keep;
mod lifecycle;
mod packages;
mod run;
mod transactions;
mod workers;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::backend::budget::Budget;
use crate::backend::pool::{HomeDirs, WarmPool};
use crate::backend::{
    AnyBackend, Enforcement, Home, OutputTap, SessionSlot, StartError, UsageProbe, Worker,
    WorkerSpec,
};
use crate::config::{GuardMode, Settings};
use crate::execution::{
    ErrorInfo, ExecResult, ExecuteArgs, MAX_CODE_BYTES, prepare_inputs, validate_session_name,
};
use crate::grants::{Access, ForbiddenPaths, Grant, GrantError};
use crate::guard::{Guard, VerdictCache};
use crate::owner::{Owner, SessionKey};
use crate::worker::policy::SessionPaths;

pub use checkpoints::{
    CheckpointArgs, CheckpointInfo, CheckpointList, CheckpointResult, ListCheckpointsArgs,
    RestoreResult,
};
pub use guard::GuardOutcome;
pub use workers::{SessionReport, WorkersReport};

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
    #[error("no data directory could be determined; set SANDBOX_DATA_DIR")]
    NoDataDir,
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    #[error("{setting}: {source}")]
    Guard {
        /// `SANDBOX_POLICY=… (from …)`, the setting at fault.
        setting: String,
        #[source]
        source: crate::guard::GuardError,
    },
    #[error("pre-approved grant from {origin}: {error}")]
    PreApproval { origin: String, error: GrantError },
    #[error(transparent)]
    NeverGrant(#[from] crate::grants::rules::RulesError),
    #[error("{setting}: {error}")]
    Packages { setting: String, error: GrantError },
    #[error("{setting}: {error}")]
    Clients { setting: String, error: String },
}

pub struct SessionManager {
    settings: Arc<Settings>,
    backend: Arc<AnyBackend>,
    /// Why the configured backend is not the one running code, if it is not.
    fallback: Option<String>,
    /// `<data dir>/sessions/<instance>`: removed at shutdown.
    instance_dir: PathBuf,
    /// Held for the instance's life: a later server reaps the directory only once the
    /// lock is free.
    _instance_lock: crate::instances::InstanceLock,
    /// Where `SANDBOX_KEEP_WORKSPACES` copies workspaces: `<data dir>/kept/<instance>`.
    kept_dir: PathBuf,
    /// Names the directories of new homes (for backends that use one).
    homes: Arc<HomeDirs>,
    sessions: Mutex<HashMap<SessionKey, Arc<Session>>>,
    /// Live workers, sessions' and warm ones alike (`SANDBOX_MAX_WORKERS`).
    budget: Arc<Budget>,
    pool: Arc<WarmPool>,
    /// Time zero of every session's `last_used`.
    epoch: Instant,
    /// Set at shutdown: background work stops, nothing new opens.
    shut: AtomicBool,
    /// The static guard; `None` when CODEGUARD=off.
    guard: Option<Guard>,
    /// Verdicts by (source, policy, workspace and grant roots): a cell sent
    /// again is not parsed again.
    verdicts: Arc<VerdictCache>,
    /// Set when code must not run at all, with the reason.
    gate: Mutex<Option<String>>,
    /// Paths no grant may ever reach.
    forbidden: ForbiddenPaths,
    /// What the backend can hide in, or leave out of, a granted directory.
    grant_walls: crate::grants::GrantWalls,
    /// The backend's world, as the code sees it (`None`: the server's own paths).
    world: Option<crate::backend::WorldPlaces>,
    /// Grants the operator approved at start (CLI flags, config file): every session.
    operator_grants: Vec<Grant>,
    /// Operator's grants left out at start: another one already gives them.
    dropped_grants: Vec<crate::grants::Dropped>,
    audit: Arc<crate::audit::AuditLog>,
    /// The egress proxy (proxied network): its byte counts end with their sessions.
    egress: Option<Arc<crate::egress::Egress>>,
    /// One inotify instance for every session's workspace tracker.
    watcher: Arc<crate::workspace::Watcher>,
    /// What the package installer reads besides the runtime (`SANDBOX_WHEELHOUSE`,
    /// `SANDBOX_PACKAGE_CA`), as read-only grants.
    package_grants: Vec<Grant>,
    /// Every client's spending and the caps (`SANDBOX_MAX_*`, `SANDBOX_CLIENT_MAX_*`).
    caps: crate::caps::Ledger,
    /// The HTTP clients `SANDBOX_HTTP_CLIENTS` lists, with the guards of those that have
    /// a policy of their own, and which owner is which client.
    clients: clients::Clients,
}

/// A page of workspace files: (session, raw path, size).
#[derive(Debug, Default)]
pub struct FilePage {
    pub files: Vec<(String, Vec<u8>, u64)>,
    /// More files follow the last one.
    pub more: bool,
    /// (session, why) for sessions whose listing is not the whole workspace.
    pub incomplete: Vec<(String, String)>,
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
    /// Owner and name: the table key and the audit log's name.
    key: SessionKey,
    /// Its workspace and backend slot (its uid and workspace on the host, for one).
    home: Home,
    /// Grants a person approved for this session.
    grants: Mutex<Vec<Grant>>,
    state: tokio::sync::Mutex<SessionState>,
    /// Milliseconds since the manager's epoch when a call last began or ended.
    last_used: AtomicU64,
    /// Its live worker, to look at from outside while a call holds the state.
    probe: Mutex<Option<UsageProbe>>,
    /// Kills the worker of the call running now, without the state lock that call holds
    /// (shutdown must not wait for a call to end).
    running: Mutex<Option<crate::backend::KillSwitch>>,
    /// What is in the workspace, kept up to date for the change report and the resource
    /// listing.
    tracker: Mutex<crate::workspace::Tracker>,
    /// Modules nobody judged that this session's code imported (`warden://settings`).
    unjudged: Mutex<guard::UnjudgedSeen>,
    /// What its package layer was last built from (`install_packages`).
    packages: Mutex<Vec<crate::packages::Requirement>>,
    /// What its calls have spent, against `SANDBOX_MAX_*`: kept over worker restarts
    /// and evictions, gone with the session.
    spent: crate::caps::SessionCounter,
    /// A transactional call's copy of the workspace is waiting to be put back (its call
    /// was cancelled before it could be); held while a copy is made or put back.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    txn_pending: Arc<Mutex<bool>>,
    /// A transactional call's journal while it runs (or, cancelled, until it is rolled
    /// back): whichever worker the session has notes its file changes there.
    #[cfg(target_os = "linux")]
    journal: crate::workspace::journal::Shared,
    /// Which of its checkpoints' files are still the workspace's own (hard links),
    /// copied before the code changes them.
    #[cfg(target_os = "linux")]
    cow: crate::workspace::cow::Slot,
}

#[derive(Default)]
struct SessionState {
    worker: Option<workers::LiveWorker>,
    /// Why the previous worker was lost, reported by the next call.
    lost_worker: Option<String>,
    /// A tripwire fired, or the session's engine was lost: every later call is refused
    /// with this reason.
    killed: Option<Ended>,
    /// The session was closed (reset, expired, shutdown): a call that waited for it
    /// must look its name up again.
    closed: bool,
}

/// Why a session can only be closed now: a tripwire killed it, or the place its
/// workers ran (a Docker engine) was lost.
#[derive(Debug, Clone)]
struct Ended {
    kind: &'static str,
    reason: String,
}

impl Ended {
    fn tripwire(reason: String) -> Ended {
        Ended {
            kind: "SessionKilled",
            reason,
        }
    }

    fn engine_lost(reason: String) -> Ended {
        Ended {
            kind: crate::backend::ENGINE_LOST,
            reason,
        }
    }

    fn error(&self) -> ErrorInfo {
        ErrorInfo::new(self.kind, self.reason.clone())
    }

    /// The error of anything but closing it, with how to close it.
    fn only_closed(&self, how: &str) -> ErrorInfo {
        ErrorInfo::new(
            self.kind,
            format!("{}; the session can only be closed ({how})", self.reason),
        )
    }
}

/// `<pid>-<8 hex digits>`: unique per server instance.
fn instance_name() -> String {
    let suffix: [u8; 4] = crate::random_bytes();
    format!("{}-{}", std::process::id(), crate::hex(&suffix))
}

/// The static guard the settings ask for (`None`: CODEGUARD=off), with its policy.
fn guard_for(settings: &Settings) -> Result<Option<Guard>, SessionError> {
    guard_with(settings, &settings.policy).map_err(|source| SessionError::Guard {
        setting: settings.describe("SANDBOX_POLICY"),
        source,
    })
}

/// The guard of `policy` under these settings (`None`: CODEGUARD=off).
fn guard_with(
    settings: &Settings,
    policy: &crate::guard::PolicyChoice,
) -> Result<Option<Guard>, crate::guard::GuardError> {
    Ok(match settings.codeguard {
        GuardMode::Off => None,
        _ => Some(policy.guard()),
    }
    .transpose()?
    .map(|g| {
        if settings.network.proxied() {
            g.with_proxied_network()
        } else {
            g
        }
    }))
}

/// This instance's directory under the data directory, locked for its life, after
/// reaping the directories (and processes) of instances that died: the data directory,
/// the instance's name, its directory and the lock.
fn open_instance(
    settings: &Settings,
) -> Result<(PathBuf, String, PathBuf, crate::instances::InstanceLock), SessionError> {
    let data_dir = match &settings.data_dir {
        Some(d) => d.clone(),
        None => crate::config::default_data_dir(crate::os::running_as_root())
            .ok_or(SessionError::NoDataDir)?,
    };
    let instance = instance_name();
    let instance_dir = data_dir.join("sessions").join(&instance);
    crate::os::create_dir(&instance_dir, 0o711, true).map_err(|source| SessionError::DataDir {
        path: instance_dir.clone(),
        source,
    })?;
    let instance_lock =
        crate::instances::InstanceLock::acquire(&instance_dir).map_err(|source| {
            SessionError::DataDir {
                path: instance_dir.clone(),
                source,
            }
        })?;
    // Instances that died without cleaning up (killed, crashed) leave their
    // directory, and perhaps a process: reaped before this one starts working.
    for reaped in crate::instances::reap_dead(&data_dir.join("sessions"), &instance_dir) {
        tracing::warn!(
            dir = %reaped.dir.display(),
            killed = ?reaped.killed,
            "reaped a dead server instance"
        );
    }
    Ok((data_dir, instance, instance_dir, instance_lock))
}

impl SessionManager {
    /// Creates this instance's directory and resolves the backend.
    pub async fn new(
        settings: Arc<Settings>,
        pre_approved: &[PreApproval],
    ) -> Result<SessionManager, SessionError> {
        let guard = guard_for(&settings)?;
        let clients = clients::Clients::load(&settings)?;
        let (data_dir, instance, instance_dir, instance_lock) = open_instance(&settings)?;
        let audit = Arc::new(crate::audit::AuditLog::open(
            &data_dir.join("audit"),
            &instance,
        ));
        let egress = crate::egress::Egress::for_settings(&settings, audit.clone());
        let resolution =
            match AnyBackend::resolve(settings.clone(), &instance_dir, egress.clone()).await {
                Ok(b) => b,
                Err(e) => {
                    let _ = std::fs::remove_dir(&instance_dir);
                    return Err(e.into());
                }
            };
        let enforcement = resolution.backend.enforcement();
        let mut forbidden = grants::forbidden_paths(&settings, &data_dir)?;
        forbidden.add_runtime(&enforcement.protected_paths, &[]);
        let (world, grant_walls) = (enforcement.world, enforcement.grant_walls);
        let (operator_grants, dropped_grants) =
            grants::operator_grants(pre_approved, &forbidden, world, grant_walls)?;
        let package_grants = packages::installer_grants(&settings, &forbidden, grant_walls)?;
        // One warm pool for every backend; its size depends on what a warm worker is
        // (SANDBOX_POOL_SIZE for containers when set, else SANDBOX_WARM_WORKERS).
        let warm_target = settings.warm_target(resolution.backend.kind());
        tracing::info!(
            backend = %resolution.backend.kind(),
            workspaces = %instance_dir.display(),
            max_workers = settings.max_workers,
            warm_workers = warm_target,
            "session manager ready"
        );
        let backend = Arc::new(resolution.backend);
        let homes = Arc::new(HomeDirs::new(instance_dir.clone()));
        let budget = Budget::new(settings.max_workers);
        let watcher = crate::workspace::Watcher::new();
        let pool = WarmPool::new(
            backend.clone(),
            budget.clone(),
            homes.clone(),
            warm_target,
            operator_grants.clone(),
            watcher.clone(),
        );
        let caps = crate::caps::Ledger::new(settings.caps);
        let manager = SessionManager {
            settings,
            backend,
            fallback: resolution.fallback,
            kept_dir: data_dir.join("kept").join(&instance),
            instance_dir,
            _instance_lock: instance_lock,
            homes,
            sessions: Mutex::new(HashMap::new()),
            budget,
            pool,
            epoch: Instant::now(),
            shut: AtomicBool::new(false),
            guard,
            verdicts: Arc::new(VerdictCache::default()),
            gate: Mutex::new(None),
            forbidden,
            grant_walls,
            world,
            operator_grants,
            dropped_grants,
            audit,
            egress,
            watcher,
            package_grants,
            caps,
            clients,
        };
        if let Some(why) = &manager.fallback
            && manager.settings.host_sandbox == crate::config::SandboxMode::Require
        {
            manager.close_gate(format!(
                "EXECUTION_BACKEND=docker cannot be used ({why}); HOST_SANDBOX=require refuses to fall back to the host backend"
            ));
        }
        Ok(manager)
    }

    /// The backend the settings asked for.
    pub fn configured_backend(&self) -> crate::backend::BackendKind {
        self.settings.backend
    }

    /// Why the configured backend is not the one that runs code, if it is not.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The warning every result carries while the configured backend is not running.
    fn fallback_warning(&self) -> Option<String> {
        self.fallback.as_ref().map(|why| {
            format!(
                "EXECUTION_BACKEND={} could not be used ({why}); this code ran on the {} backend instead",
                self.configured_backend(),
                self.backend.kind()
            )
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn backend(&self) -> &AnyBackend {
        &self.backend
    }

    /// What the resolved backend enforces.
    /// Says in `result` which backend (and container runtime) ran it, and which was
    /// configured.
    fn stamp(&self, result: &mut ExecResult) {
        result.backend = self.backend.kind();
        result.configured_backend = self.configured_backend();
        result.container_runtime = self.backend.container_runtime();
    }

    pub fn enforcement(&self) -> Enforcement {
        self.backend.enforcement()
    }

    /// The name and workspace directory of every open session of `owner`, by name.
    pub fn workspaces(&self, owner: &Owner) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| &s.key.owner == owner)
                .map(|s| (s.name.clone(), s.home.paths.workspace.clone()))
                .collect(),
            Err(_) => Vec::new(),
        };
        out.sort();
        out
    }

    /// One page of the files in `owner`'s workspaces, in (session, path) order, starting
    /// after `after`: at most `limit`, from each session's tracked state (as of its last
    /// call). Sessions whose tracked state is not the whole workspace say why.
    pub fn workspace_files(
        &self,
        owner: &Owner,
        after: Option<(&str, &[u8])>,
        limit: usize,
    ) -> FilePage {
        let mut sessions: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| &s.key.owner == owner)
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        sessions.sort_by(|a, b| a.name.cmp(&b.name));
        let mut page = FilePage::default();
        for s in sessions {
            let start = match after {
                Some((name, _)) if s.name.as_str() < name => continue,
                Some((name, path)) if s.name == name => Some(path),
                _ => None,
            };
            let Ok(tracker) = s.tracker.lock() else {
                continue;
            };
            if let Some(why) = tracker.limit() {
                page.incomplete.push((s.name.clone(), why.to_string()));
            }
            for (path, size) in tracker.files_after(start) {
                if page.files.len() == limit {
                    page.more = true;
                    return page;
                }
                page.files.push((s.name.clone(), path.to_vec(), size));
            }
        }
        page
    }

    /// The workspace directory of a session of `owner`, if it exists.
    pub fn workspace_of(&self, owner: &Owner, name: &str) -> Option<PathBuf> {
        let sessions = self.sessions.lock().ok()?;
        sessions
            .get(&SessionKey::new(owner, name))
            .map(|s| s.home.paths.workspace.clone())
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
        let name = args.session.as_deref().unwrap_or("default");
        let key = SessionKey::new(owner, name);
        // No call runs unaudited: its record is written before anything runs, and a call
        // whose record cannot be written is refused.
        let start = crate::audit::AuditEvent {
            args_sha256: Some(crate::audit::sha256_hex(args.code.as_bytes())),
            ..crate::audit::AuditEvent::now(&key.to_string(), "execute", "start")
        };
        if let Err(e) = self.audit.record(start) {
            let mut refused = ExecResult::refused(
                name,
                ErrorInfo::new(
                    "AuditUnavailable",
                    format!(
                        "{e}; the call was refused and nothing ran (every call is recorded before it runs). Free space for the data directory or repair the log, then call again"
                    ),
                ),
                self.audit.warnings(),
            );
            self.stamp(&mut refused);
            return refused;
        }
        let mut result = self.execute_unaudited(owner, args, tap).await;
        self.stamp(&mut result);
        if let Some(w) = self.fallback_warning() {
            result.warnings.insert(0, w);
        }
        result.cap_text(self.settings.output_limit_bytes);
        if let Err(e) = self.audit_execution(&key.to_string(), &args.code, &result) {
            result.warnings.push(format!(
                "the call ran, but the audit record of its outcome could not be written: {e}"
            ));
        }
        result.warnings.extend(self.audit.warnings());
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
            let e = ErrorInfo::new(
                "InputTooLarge",
                format!(
                    "code is {} bytes; the limit is {} bytes (put data in `inputs` or generate it)",
                    args.code.len(),
                    MAX_CODE_BYTES
                ),
            );
            return ExecResult::refused(name, e, Vec::new());
        }
        let inputs = match prepare_inputs(args.inputs.as_ref()) {
            Ok(i) => i,
            Err(e) => return ExecResult::refused(name, e, Vec::new()),
        };
        let key = SessionKey::new(owner, name);
        let timeout = match args.task_limit {
            Some(limit) => args
                .timeout_s
                .map_or(limit, |s| std::time::Duration::from_secs_f64(s).min(limit)),
            None => self.settings.effective_timeout(args.timeout_s),
        };
        // A session closed (expired, reset) while this call waited for it: its name now
        // belongs to a new session, which the next lookup opens.
        for _ in 0..3 {
            let session = match self.open_session(&key, true).await {
                Ok(s) => s,
                Err(e) => return ExecResult::refused(name, e, Vec::new()),
            };
            let (transactional, overruled) = self.settings.transactions.decide(args.transactional);
            let call = run::Call {
                code: &args.code,
                inputs: &inputs,
                timeout,
                tap: tap.clone(),
                transactional,
                overruled,
            };
            if let Some(result) = self.run_call(&session, call).await {
                return result;
            }
        }
        let e = ErrorInfo::new(
            "InternalError",
            format!("session {name:?} was closed three times while this call waited; retry"),
        )
        .retryable();
        ExecResult::refused(name, e, Vec::new())
    }

    /// Restarts a session's interpreter (`keep_files`), or closes the session: its
    /// worker, workspace and grants are gone and its name is free. Returns whether a
    /// running worker was killed.
    pub async fn reset(
        &self,
        owner: &Owner,
        name: &str,
        keep_files: bool,
    ) -> Result<bool, ErrorInfo> {
        validate_session_name(name)?;
        let key = SessionKey::new(owner, name);
        let no_such = || ErrorInfo::new("NoSuchSession", format!("no session {name:?}"));
        let session = self.lookup(&key)?.ok_or_else(no_such)?;
        let mut state = session.state.lock().await;
        if state.closed {
            return Err(no_such());
        }
        if keep_files && let Some(ended) = &state.killed {
            return Err(ended.only_closed("keep_files: false"));
        }
        let killed_worker = session.drop_worker(&mut state).is_some();
        state.lost_worker = None;
        if keep_files {
            return Ok(killed_worker);
        }
        self.close(&session, &mut state, lifecycle::Closing::Reset)
            .await
            .map_err(|e| {
                ErrorInfo::new(
                    "InternalError",
                    format!("the session was closed but its workspace could not be removed: {e}"),
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
        self.unbind_client(owner);
    }

    /// Kills every worker, warm ones too, releases the backend and removes every
    /// workspace of this instance (copying them aside first with
    /// `SANDBOX_KEEP_WORKSPACES`).
    ///
    /// Never waits for a running call: its worker is killed first, so the call ends at
    /// once (a signal must end the server within a second).
    pub async fn shutdown(&self) {
        self.shut.store(true, Ordering::Release);
        self.close_gate("the server is shutting down".to_string());
        let sessions: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map.values().cloned().collect(),
            Err(_) => Vec::new(),
        };
        for session in &sessions {
            if let Some(switch) = session.running.lock().ok().and_then(|r| r.clone()) {
                switch.fire();
            }
        }
        // The backend removes what it holds (containers) while the pool and the sessions
        // close, not after them: a start the pool waits for must not hold that up.
        tokio::join!(self.backend.kill_all(), self.close_all(sessions));
        self.backend.shutdown().await;
        self.audit.checkpoint_now();
        if let Err(e) = crate::workspace::remove_tree(&self.instance_dir) {
            tracing::warn!(error = %e, "could not remove this instance's directory");
        }
    }

    /// Stops the warm pool and closes every session (shutdown).
    async fn close_all(&self, sessions: Vec<Arc<Session>>) {
        self.pool.shutdown().await;
        for session in sessions {
            let wait = std::time::Duration::from_millis(300);
            let Ok(mut state) = tokio::time::timeout(wait, session.state.lock()).await else {
                tracing::warn!(session = %session.key, "a call did not end when its worker was killed");
                continue;
            };
            if state.closed {
                continue;
            }
            if let Err(e) = self
                .close(&session, &mut state, lifecycle::Closing::Shutdown)
                .await
            {
                tracing::warn!(session = %session.key, error = %e, "could not remove a workspace");
            }
        }
    }

    /// This instance's directory (workspaces, probe fixtures).
    pub fn instance_dir(&self) -> &Path {
        &self.instance_dir
    }

    /// A throwaway session (own directory, own backend slot) whose workers get exactly
    /// what a real session's worker gets. Removed when dropped.
    pub fn ephemeral(&self, label: &str) -> Result<Ephemeral<'_>, ErrorInfo> {
        let name: String = format!("{label}-{}", crate::hex(&crate::random_bytes::<6>()));
        let dir = self.instance_dir.join(&name);
        let Home { paths, slot } = self.backend.open_home(&dir).map_err(|e| {
            ErrorInfo::new(
                "InternalError",
                format!("cannot create a workspace for {name}: {e}"),
            )
        })?;
        Ok(Ephemeral {
            backend: &self.backend,
            paths,
            slot,
        })
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

/// A session for one-off workers (selftest): its workspace is removed and its backend
/// slot released when dropped.
pub struct Ephemeral<'a> {
    backend: &'a AnyBackend,
    pub paths: SessionPaths,
    slot: SessionSlot,
}

impl Ephemeral<'_> {
    /// A worker for this session, from the backend, with no grants.
    pub async fn start_worker(&self) -> Result<Worker, StartError> {
        let spec = WorkerSpec {
            slot: &self.slot,
            grants: &[],
        };
        self.backend.start_worker(&spec).await
    }
}

impl Drop for Ephemeral<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.backend.close_session(&self.slot) {
            tracing::warn!(error = %e, "could not remove a selftest workspace");
        }
    }
}
