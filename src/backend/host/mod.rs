//! The host backend: one sandboxed, persistent Python worker process per session,
//! confined by the walls in [`crate::sandbox`] (Linux: a private world of its own,
//! Landlock, seccomp, rlimits, privilege drop; macOS: a Seatbelt profile, rlimits,
//! privilege drop). This module owns what only the host
//! needs: the resolved interpreter, the per-instance uid range (a uid of its own per
//! session when the server is root), the sessions' workspaces (a size-capped tmpfs each,
//! held by the workspace keeper: [`crate::sandbox::store`]), and the helper spawn
//! ([`spawn`]).

pub mod spawn;
pub mod usage;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{
    Backend, BackendError, BackendKind, Enforcement, StartError, Worker, WorkerSpec,
};
use crate::config::{SandboxMode, Settings};
use crate::sandbox::platform::{HostOs, host_capabilities};
use crate::sandbox::policy::{PolicyInputs, RunAs, SessionPaths, WorkerPolicy};
use crate::sandbox::python::{self, PythonRuntime};
use crate::sandbox::store::{Workspace, WorkspaceStore};
use crate::sandbox::uids::{UID_RANGE, pick_uid_range};
use crate::selftest::report::Capability;

/// What the host backend keeps for one session.
#[derive(Debug)]
pub struct HostSlot {
    /// The uid the session's worker runs as (the server is root), else `None`.
    pub run_as: Option<RunAs>,
    /// The session's workspace (and /tmp): what its worlds bind.
    pub workspace: Workspace,
}

pub struct HostBackend {
    settings: Arc<Settings>,
    runtime: PythonRuntime,
    /// First uid of this instance's range, when the server is root and sandboxed.
    uid_base: Option<u32>,
    next_uid: AtomicU32,
    /// Uids held by open sessions: never given to a second one.
    held: Mutex<HashSet<u32>>,
    /// Every session's workspace, and the keeper that holds them.
    store: WorkspaceStore,
    /// Why workspaces have no quota here, when they have none.
    store_warning: Option<String>,
    /// Where this instance records the processes it starts (for a later server to reap
    /// should this one die without killing them).
    instance_dir: PathBuf,
}

impl HostBackend {
    /// Resolves the interpreter; as root, checks that the unprivileged sandbox uids can
    /// reach `instance_dir` and picks this instance's uid range.
    pub fn new(settings: Arc<Settings>, instance_dir: &Path) -> Result<HostBackend, BackendError> {
        let root = crate::os::running_as_root();
        let sandboxed = settings.host_sandbox != SandboxMode::Off;
        let runtime =
            python::resolve(settings.python.as_deref(), root && sandboxed).map_err(|source| {
                BackendError::Python {
                    setting: settings.describe("SANDBOX_PYTHON"),
                    source,
                }
            })?;
        let uid_base = if root && sandboxed {
            python::traversable_by_others(instance_dir).map_err(|reason| {
                BackendError::DataDirUnreachable {
                    path: instance_dir.to_path_buf(),
                    reason,
                }
            })?;
            Some(pick_uid_range())
        } else {
            None
        };
        let (store, store_warning) =
            WorkspaceStore::open(&settings, instance_dir, spawn::spawn_std_from_spawner).map_err(
                |source| BackendError::Workspaces {
                    path: instance_dir.to_path_buf(),
                    source,
                },
            )?;
        if let Some(w) = &store_warning {
            tracing::warn!("{w}");
        }
        if let Some(pid) = store.keeper_pid() {
            crate::instances::record_process(instance_dir, pid);
        }
        tracing::info!(
            python = %runtime.executable.display(),
            version = %runtime.version,
            keeper = ?store.keeper_pid(),
            "host backend ready"
        );
        Ok(HostBackend {
            settings,
            runtime,
            uid_base,
            next_uid: AtomicU32::new(0),
            held: Mutex::new(HashSet::new()),
            store,
            store_warning,
            instance_dir: instance_dir.to_path_buf(),
        })
    }

    pub fn runtime(&self) -> &PythonRuntime {
        &self.runtime
    }

    fn policy_for(&self, slot: &HostSlot, grants: &[crate::grants::Grant]) -> WorkerPolicy {
        let (join, _) = self.store.join();
        WorkerPolicy::build(
            &PolicyInputs {
                settings: &self.settings,
                runtime: &self.runtime,
                host: self.store.host_layout(),
                source: &slot.workspace.source,
                run_as: slot.run_as,
                grants,
                parent_pid: std::process::id() as i32,
                root_mount: self.store.root_mount(),
                join,
            },
            &|name| std::env::var(name).ok(),
        )
    }

    /// What a grant may never cover: what the interpreter loads and the programs the
    /// sandbox runs.
    fn protected_paths(&self) -> Vec<PathBuf> {
        let mut out = self.runtime.read_roots.clone();
        out.push(self.runtime.executable.clone());
        out.push(self.runtime.binary.clone());
        out.extend(std::env::current_exe().ok());
        out
    }

    /// The next uid of this instance's range that no open session holds (the range
    /// wraps, so uids of finished sessions and selftests are reused). Two open sessions
    /// never share a uid: when every uid is held, the session is refused.
    fn allocate_uid(&self) -> std::io::Result<Option<RunAs>> {
        let Some(base) = self.uid_base else {
            return Ok(None);
        };
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() >= UID_RANGE as usize {
            return Err(std::io::Error::other(format!(
                "all {UID_RANGE} sandbox uids of this server are held by open sessions; close sessions (reset_session) or lower SANDBOX_SESSION_IDLE_S"
            )));
        }
        loop {
            let uid = base + self.next_uid.fetch_add(1, Ordering::Relaxed) % UID_RANGE;
            if held.insert(uid) {
                return Ok(Some(RunAs { uid, gid: uid }));
            }
        }
    }

    fn release(&self, run_as: Option<RunAs>) {
        if let Some(r) = run_as {
            self.held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&r.uid);
        }
    }
}

impl Backend for HostBackend {
    type Slot = HostSlot;

    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }

    /// Creates the session's workspace (the keeper's tmpfs, or host directories), owned
    /// by its own uid when it has one. `dir` is not used: workspaces live in the store.
    fn open_session(&self, _dir: &Path) -> std::io::Result<(HostSlot, SessionPaths)> {
        let run_as = self.allocate_uid()?;
        match self.store.create(run_as) {
            Ok(workspace) => {
                let paths = workspace.paths.clone();
                Ok((HostSlot { run_as, workspace }, paths))
            }
            Err(e) => {
                self.release(run_as);
                Err(std::io::Error::other(e))
            }
        }
    }

    /// Deletes the session's workspace and frees its uid for a later session.
    fn close_session(&self, slot: &HostSlot) -> Result<(), String> {
        self.release(slot.run_as);
        self.store.remove(&slot.workspace)
    }

    /// Starts a worker confined to the session's paths and grants.
    async fn start_worker(
        &self,
        slot: &HostSlot,
        spec: &WorkerSpec<'_>,
    ) -> Result<Worker, StartError> {
        let (_, fds) = self.store.join();
        let worker = spawn::spawn(&self.policy_for(slot, spec.grants), &fds).await?;
        #[allow(irrefutable_let_patterns)]
        if let crate::backend::ExitWitness::HostPid(pid) = worker.exit_witness()
            && let Ok(pid) = u32::try_from(pid)
        {
            crate::instances::record_process(&self.instance_dir, pid);
        }
        Ok(worker)
    }

    fn enforcement(&self) -> Enforcement {
        Enforcement {
            kind: BackendKind::Host,
            python: self.runtime.executable.display().to_string(),
            python_version: self.runtime.version.clone(),
            dedicated_uid_per_session: self.uid_base.is_some(),
            workspace_quota_bytes: self
                .store
                .has_quota()
                .then_some(self.settings.disk_limit_bytes),
            protected_paths: self.protected_paths(),
            processes_limit: self.uid_base.map(|_| self.settings.pids_limit),
            // A world is certain only where the workspace keeper runs (the helper joins
            // its namespaces or refuses); without it the helper may fall back to host
            // paths, where nothing can be hidden.
            grant_walls: if self.settings.host_sandbox != SandboxMode::Off && self.store.has_quota()
            {
                crate::grants::GrantWalls::World
            } else {
                crate::grants::GrantWalls::PathsOnly
            },
            launcher: None,
            gaps: self.gaps(),
        }
    }

    /// Stops the workspace keeper (each session's worker was killed with its session).
    async fn shutdown(&self) {
        self.store.shutdown();
    }
}

impl HostBackend {
    /// What this backend cannot apply here: the quota without a keeper, and the other
    /// platforms' sandboxes.
    fn gaps(&self) -> Vec<Capability> {
        let mut gaps = platform_gaps();
        if let Some(why) = &self.store_warning {
            gaps.insert(
                0,
                Capability {
                    mechanism: "disk_quota".into(),
                    enforced: false,
                    reason: why.clone(),
                },
            );
        }
        gaps
    }
}

/// What this platform's host sandbox lacks (see [`crate::sandbox::platform`]), and the
/// backends this build does not have.
fn platform_gaps() -> Vec<Capability> {
    let mut gaps = host_capabilities(HostOs::current());
    if !cfg!(feature = "docker") {
        gaps.push(Capability {
            mechanism: "docker".into(),
            enforced: false,
            reason: "unsupported in this build: it was built without the `docker` Cargo feature"
                .into(),
        });
    }
    gaps
}
