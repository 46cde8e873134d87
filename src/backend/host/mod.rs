//! The host backend: one sandboxed, persistent Python worker process per session,
//! confined by the walls in [`crate::sandbox`] (Linux: a private world of its own,
//! Landlock, seccomp, rlimits, privilege drop; macOS: a Seatbelt profile, rlimits,
//! privilege drop). This module owns what only the host
//! needs: the resolved interpreter, the per-instance uid range (a uid of its own per
//! session when the server is root), the sessions' workspaces (a size-capped tmpfs each,
//! held by the workspace keeper: [`crate::sandbox::store`]), and the helper spawn
//! ([`spawn`]).

pub mod spawn;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::{
    Backend, BackendError, BackendKind, Enforcement, InstallerSpec, StartError, Worker, WorkerSpec,
};
use crate::capability::Capability;
use crate::config::{SandboxMode, Settings};
use crate::sandbox::platform::{HostOs, host_capabilities};
use crate::sandbox::store::{Workspace, WorkspaceStore};
use crate::sandbox::uids::UidPool;
use crate::worker::policy::{PolicyInputs, RunAs, SessionPaths, WorkerPolicy};
use crate::worker::python::{self, PythonRuntime};

/// What the host backend keeps for one session.
#[derive(Debug)]
pub struct HostSlot {
    /// The uid the session's worker runs as (the server is root), else `None`.
    pub run_as: Option<RunAs>,
    /// The session's workspace (and /tmp): what its worlds bind.
    pub workspace: Workspace,
    /// The session's installed packages, bound read-only into its worlds.
    pub layer: crate::packages::layer::Layer,
}

impl crate::backend::SlotState for HostSlot {
    /// The session's package layer, and the uid its installer runs as (a root server's).
    fn package_layer(&self) -> Option<(&crate::packages::layer::Layer, Option<(u32, u32)>)> {
        Some((&self.layer, self.run_as.map(|r| (r.uid, r.gid))))
    }

    /// What the session's results say about its workspace (a smaller quota).
    fn notice(&self) -> Option<String> {
        self.workspace.notice.clone()
    }
}

pub struct HostBackend {
    settings: Arc<Settings>,
    runtime: PythonRuntime,
    /// This instance's uid range, when the server is root and sandboxed.
    uids: Option<UidPool>,
    /// Every session's workspace, and the keeper that holds them.
    store: WorkspaceStore,
    /// Why workspaces have no quota here, when they have none.
    store_warning: Option<String>,
    /// Where this instance records the processes it starts (for a later server to reap
    /// should this one die without killing them).
    instance_dir: PathBuf,
    /// The egress proxy, when the network is proxied.
    egress: Option<Arc<crate::egress::Egress>>,
}

impl HostBackend {
    /// Resolves the interpreter; as root, checks that the unprivileged sandbox uids can
    /// reach `instance_dir` and picks this instance's uid range.
    pub fn new(
        settings: Arc<Settings>,
        instance_dir: &Path,
        egress: Option<Arc<crate::egress::Egress>>,
    ) -> Result<HostBackend, BackendError> {
        let root = crate::os::running_as_root();
        let sandboxed = settings.host_sandbox != SandboxMode::Off;
        let runtime =
            python::resolve(settings.python.as_deref(), root && sandboxed).map_err(|source| {
                BackendError::Python {
                    setting: settings.describe("SANDBOX_PYTHON"),
                    source,
                }
            })?;
        let uids = if root && sandboxed {
            python::traversable_by_others(instance_dir).map_err(|reason| {
                BackendError::DataDirUnreachable {
                    path: instance_dir.to_path_buf(),
                    reason,
                }
            })?;
            Some(UidPool::pick())
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
            uids,
            store,
            store_warning,
            instance_dir: instance_dir.to_path_buf(),
            egress,
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
                quota_bytes: slot.workspace.quota_bytes,
                run_as: slot.run_as,
                grants,
                parent_pid: std::process::id() as i32,
                root_mount: self.store.root_mount(),
                join,
                network: self.settings.network,
                packages: Some(slot.layer.root()),
                tmp_bytes: None,
            },
            &|name| std::env::var(name).ok(),
        )
    }

    /// The package installer's policy: the stage as its workspace, the installer's
    /// read-only inputs as grants, its own network (the index through its own proxy, or
    /// none), a /tmp of the package limit; no keeper namespaces to join.
    fn installer_policy(&self, slot: &HostSlot, spec: &InstallerSpec<'_>) -> WorkerPolicy {
        let source = crate::sandbox::linux::world::WorkspaceSource::HostDirs {
            workspace: spec.stage.to_path_buf(),
            tmp: spec.stage.join(".tmp"),
        };
        WorkerPolicy::build(
            &PolicyInputs {
                settings: &self.settings,
                runtime: &self.runtime,
                host: self.store.host_layout(),
                source: &source,
                quota_bytes: None,
                run_as: slot.run_as,
                grants: spec.grants,
                parent_pid: std::process::id() as i32,
                root_mount: self.store.root_mount(),
                join: None,
                network: if spec.egress.is_some() {
                    crate::config::NetworkMode::Proxy
                } else {
                    crate::config::NetworkMode::Deny
                },
                packages: None,
                tmp_bytes: Some(spec.tmp_bytes),
            },
            &|name| std::env::var(name).ok(),
        )
    }

    /// Spawns a worker for `policy` and, with an egress proxy and a world, serves the
    /// endpoint the world hands over.
    async fn spawn_with_egress(
        &self,
        policy: &mut WorkerPolicy,
        mut fds: Vec<std::os::fd::BorrowedFd<'_>>,
        egress: Option<&Arc<crate::egress::Egress>>,
    ) -> Result<Worker, StartError> {
        let bridge = match (egress, &policy.world) {
            (Some(_), Some(_)) => Some(std::os::unix::net::UnixStream::pair()?),
            _ => None,
        };
        if let Some((_, theirs)) = &bridge {
            policy.egress_fd = Some(spawn::inherited_fd(fds.len()));
            fds.push(std::os::fd::AsFd::as_fd(theirs));
        }
        let journal = journal_bridge(policy, fds.len())?;
        #[cfg(target_os = "linux")]
        if let Some((_, theirs)) = &journal {
            fds.push(std::os::fd::AsFd::as_fd(theirs));
        }
        let (mut worker, pid) = spawn::spawn(policy, &fds).await?;
        drop(fds);
        #[cfg(target_os = "linux")]
        if let Some((supervision, theirs)) = journal {
            drop(theirs);
            supervision.set_helper(pid);
            worker.attach_journal(supervision);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = journal;
        if let (Some(egress), Some((ours, theirs))) = (egress, bridge) {
            drop(theirs);
            if let Some(listener) = spawn::receive_endpoint(&ours)? {
                worker.attach_egress(egress.serve(listener)?);
            }
        }
        if let Ok(pid) = u32::try_from(pid) {
            crate::instances::record_process(&self.instance_dir, pid);
        }
        Ok(worker)
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

    /// A uid of this instance's range that no open session holds, when the server is
    /// root.
    fn allocate_uid(&self) -> std::io::Result<Option<RunAs>> {
        self.uids.as_ref().map(UidPool::allocate).transpose()
    }

    fn release(&self, run_as: Option<RunAs>) {
        if let (Some(uids), Some(r)) = (&self.uids, run_as) {
            uids.release(r);
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
                let root = self.instance_dir.join("pkg").join(&workspace.id);
                let layer = match crate::packages::layer::Layer::create(&root) {
                    Ok(layer) => layer,
                    Err(e) => {
                        let _ = self.store.remove(&workspace);
                        self.release(run_as);
                        return Err(std::io::Error::new(
                            e.kind(),
                            format!("the session's package layer {}: {e}", root.display()),
                        ));
                    }
                };
                let paths = workspace.paths.clone();
                Ok((
                    HostSlot {
                        run_as,
                        workspace,
                        layer,
                    },
                    paths,
                ))
            }
            Err(e) => {
                self.release(run_as);
                let kind = match e {
                    crate::sandbox::store::StoreError::Budget(_) => {
                        std::io::ErrorKind::QuotaExceeded
                    }
                    crate::sandbox::store::StoreError::Failed(_) => std::io::ErrorKind::Other,
                };
                Err(std::io::Error::new(kind, e.to_string()))
            }
        }
    }

    /// Deletes the session's workspace and frees its uid for a later session.
    fn close_session(&self, slot: &HostSlot) -> Result<(), String> {
        self.release(slot.run_as);
        let layer = slot.layer.remove();
        self.store.remove(&slot.workspace).and(layer)
    }

    /// The keeper's tmpfs is resized; host directories cannot be.
    fn limit_growth(&self, slot: &HostSlot, bytes_left: Option<u64>) -> Result<bool, String> {
        self.store.limit_growth(&slot.workspace, bytes_left)
    }

    /// Starts a worker confined to the session's paths and grants.
    async fn start_installer(
        &self,
        slot: &HostSlot,
        spec: &InstallerSpec<'_>,
    ) -> Result<Worker, StartError> {
        let mut policy = self.installer_policy(slot, spec);
        if let Some(world) = &mut policy.world {
            world.bounded_by = Some(format!(
                "the installer downloads at most SANDBOX_PACKAGE_LIMIT through its proxy (or copies the operator's wheelhouse), and \
                 pip installs into a /tmp of {} bytes",
                spec.tmp_bytes
            ));
        }
        let fds = Vec::new();
        self.spawn_with_egress(&mut policy, fds, spec.egress.as_ref())
            .await
    }

    async fn start_worker(
        &self,
        slot: &HostSlot,
        spec: &WorkerSpec<'_>,
    ) -> Result<Worker, StartError> {
        let (_, fds) = self.store.join();
        let mut policy = self.policy_for(slot, spec.grants);
        self.spawn_with_egress(&mut policy, fds, self.egress.as_ref())
            .await
    }

    fn enforcement(&self) -> Enforcement {
        Enforcement {
            kind: BackendKind::Host,
            python: self.runtime.executable.display().to_string(),
            python_version: self.runtime.version.clone(),
            dedicated_uid_per_session: self.uids.is_some(),
            workspace_quota_bytes: self
                .store
                .has_quota()
                .then_some(self.settings.disk_limit_bytes),
            protected_paths: self.protected_paths(),
            processes_limit: self.task_count().map(|_| self.settings.pids_limit),
            processes_counted_by: self
                .task_count()
                .map_or_else(|| self.no_task_limit(), |how| how.describe().to_string()),
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
            container_runtime: None,
            gaps: self.gaps(),
            // Only Linux builds a world of its own (mount namespaces); elsewhere the
            // code sees its workspace at the server's path.
            world: (cfg!(target_os = "linux") && self.settings.host_sandbox != SandboxMode::Off)
                .then_some(super::WorldPlaces::LINUX),
            engines: Vec::new(),
        }
    }

    /// Stops the workspace keeper (each session's worker was killed with its session).
    async fn shutdown(&self) {
        self.store.shutdown();
    }
}

impl HostBackend {
    /// How the workers' task limit holds: in a world (the keeper started, so user
    /// namespaces work here) each worker has a user namespace of its own; a root server
    /// also gives each session a uid of its own.
    fn task_count(&self) -> Option<crate::sandbox::rlimits::TaskCount> {
        if self.settings.host_sandbox == SandboxMode::Off {
            return None;
        }
        crate::sandbox::rlimits::task_count(
            self.uids.is_some(),
            self.store.has_quota(),
            &crate::sandbox::rlimits::kernel_release(),
        )
    }

    /// Why the workers have no task limit, when they have none.
    fn no_task_limit(&self) -> String {
        if self.settings.host_sandbox == SandboxMode::Off {
            return "no limit: HOST_SANDBOX=off".into();
        }
        if self.store.has_quota() {
            return format!(
                "no limit: this kernel ({}) counts RLIMIT_NPROC per uid, not per user \
                 namespace (Linux 5.14+), so on the server's own uid it would count every \
                 process of the user",
                crate::sandbox::rlimits::kernel_release()
            );
        }
        "no limit: without user namespaces (no workspace keeper could start) RLIMIT_NPROC \
         would count every process of the server's uid"
            .into()
    }

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

/// The supervisor of a worker's journal and the helper's end of its bridge, passed as the
/// `n`th inherited descriptor: every worker with a world of its own has one (Linux, an
/// architecture the filters are written for).
#[cfg(target_os = "linux")]
fn journal_bridge(
    policy: &mut WorkerPolicy,
    n: usize,
) -> std::io::Result<
    Option<(
        Arc<crate::sandbox::linux::supervisor::Supervision>,
        std::os::unix::net::UnixStream,
    )>,
> {
    if policy.world.is_none() || crate::sandbox::linux::seccomp::Arch::native().is_none() {
        return Ok(None);
    }
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    policy.journal_fd = Some(spawn::inherited_fd(n));
    Ok(Some((
        crate::sandbox::linux::supervisor::Supervision::start(ours)?,
        theirs,
    )))
}

#[cfg(not(target_os = "linux"))]
fn journal_bridge(
    _: &mut WorkerPolicy,
    _: usize,
) -> std::io::Result<Option<std::convert::Infallible>> {
    Ok(None)
}
