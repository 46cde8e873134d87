//! The Docker backend: one hardened container per session, running the same persistent
//! worker protocol as a host worker (not `docker exec` per call).
//!
//! Four streams through one container: a Linux warden binary is the in-container
//! launcher ([`launcher`]), either this server's own, bind-mounted read-only, or the one
//! the image carries, for servers on macOS and Windows (Docker Desktop) and remote
//! engines ([`route`], `SANDBOX_LAUNCHER`); the container's stdin carries the policy,
//! the requests and the orders to freeze and thaw the worker between calls, its stdout
//! carries the worker's response pipe, fd 1 and fd 2, all as [`frames`]; the server
//! demultiplexes them into a protocol `Channel`. Chosen over a UNIX socket in the
//! session's directory because nothing of the host but the workspace (and the
//! read-only binary) is then mounted, no socket exists that the code could reach, and
//! the worker dies with its attach connection when the server dies.
//!
//! Containers started ahead come from the session layer's one warm pool
//! ([`crate::backend::pool`]): a warm container is a worker started in a home made
//! ahead, exactly as a session's; `SANDBOX_MAX_WORKERS` counts containers like any
//! worker.
//!
//! - [`config`]: the container configuration and `validate_container_config` (pure);
//! - [`engine`]: connecting (`DOCKER_HOST`, TLS), owner labels, reaping leftovers;
//! - [`container`]: creating, attaching and starting one worker container;
//! - [`query`]: what the image and the engine are, asked once at start;
//! - [`quota`]: the size-capped tmpfs workspaces (`SANDBOX_DISK_LIMIT`);
//! - [`route`]: which launcher (`SANDBOX_LAUNCHER`), and the image launcher's protocol.
//!
//! The server side builds for every platform; the launcher runs only inside a Linux
//! container. What only a Linux server next to its engine can do (the tmpfs quota) is
//! reported as a gap elsewhere.

pub mod config;
pub mod container;
pub mod engine;
pub mod frames;
#[cfg(target_os = "linux")]
pub mod launcher;
pub mod query;
pub mod quota;
pub mod route;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bollard::Docker;

use crate::backend::{
    Backend, BackendKind, Enforcement, StartError, Worker, WorkerProcessKind, WorkerSpec,
};
use crate::config::{SandboxMode, Settings};
use crate::grants::{Grant, PathKind};
use crate::sandbox::policy::{Limits, SessionPaths, WorkerPolicy, host_view, worker_env};
use crate::sandbox::python::PythonRuntime;
use crate::sandbox::report::{SandboxReport, WallStatus};
use crate::selftest::report::Capability;
use config::{BoundGrant, ContainerPlan, Owner, WORKSPACE};
use quota::Quota;

/// What the Docker backend keeps per session: its directory on this machine, whose
/// `workspace` (owned by the container user) is bind-mounted into its containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerSlot {
    dir: PathBuf,
    workspace: PathBuf,
}

/// Why the Docker backend could not be used; the server falls back to the host backend
/// (or refuses under `HOST_SANDBOX=require`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

pub struct DockerBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    settings: Arc<Settings>,
    docker: Docker,
    owner: Owner,
    /// The image's interpreter, as the launcher found it inside the image.
    runtime: PythonRuntime,
    launcher: Launcher,
    instance_dir: PathBuf,
    user: (u32, u32),
    /// How workspaces are capped (`SANDBOX_DISK_LIMIT`), as the start-up query found.
    quota: Quota,
    /// The server is shutting down: no container is created any more.
    closing: std::sync::atomic::AtomicBool,
}

/// The launcher every container of this server runs (see [`route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// This server's binary, bound read-only.
    Bound(PathBuf),
    /// The image's, of this server's launcher protocol; its warden version.
    Image { version: String },
}

impl Launcher {
    fn describe(&self) -> String {
        match self {
            Launcher::Bound(_) => "this server's own binary, bound read-only".to_string(),
            Launcher::Image { version } => format!(
                "the image's (warden {version}, launcher protocol {})",
                route::LAUNCHER_PROTOCOL
            ),
        }
    }
}

fn running_as_root() -> bool {
    crate::os::running_as_root()
}

/// The container user when none is configured: a non-root server's own ids (its
/// workspaces are its own files), where the platform has them.
fn default_user(configured: (u32, u32)) -> (u32, u32) {
    #[cfg(unix)]
    if !running_as_root() {
        return (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        );
    }
    configured
}

/// An error with every cause beneath it ("client error (Connect): invalid peer
/// certificate: UnknownIssuer"): the reason a TLS engine refused is at the bottom.
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

impl DockerBackend {
    /// Connects to the engine, checks the image, asks it where its Python is, reaps the
    /// containers of dead warden instances and starts the warm pool.
    pub async fn new(
        settings: Arc<Settings>,
        instance_dir: &Path,
    ) -> Result<DockerBackend, Unavailable> {
        let d = &settings.docker;
        let docker = engine::connect(d).map_err(Unavailable)?;
        docker
            .ping()
            .await
            .map_err(|e| Unavailable(format!("no Docker engine answers ({})", causes(&e))))?;
        let image = docker.inspect_image(&d.image).await.map_err(|e| {
            Unavailable(format!(
                "the image {} is not available ({e}); build it offline with tools/build-image.sh or set SANDBOX_IMAGE",
                d.image
            ))
        })?;
        let labels = image.config.and_then(|c| c.labels).unwrap_or_default();
        let launcher = choose_launcher(&settings, &labels).map_err(Unavailable)?;
        let instance = instance_dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let owner = engine::this_owner(&instance);
        let reaped = engine::reap_leftovers(&docker, &owner).await;
        if reaped > 0 {
            tracing::warn!(
                reaped,
                "removed containers left by warden instances that are gone"
            );
        }
        let user = if d.user_is_default {
            default_user(d.user)
        } else {
            d.user
        };
        let mut inner = Inner {
            settings: settings.clone(),
            docker,
            owner,
            runtime: PythonRuntime {
                executable: PathBuf::new(),
                binary: PathBuf::new(),
                elf_interpreter: None,
                version: String::new(),
                read_roots: Vec::new(),
            },
            launcher,
            instance_dir: instance_dir.to_path_buf(),
            user,
            quota: Quota::Unavailable(String::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
        };
        make_empty_file(instance_dir).map_err(|e| {
            Unavailable(format!(
                "cannot make {} in {}: {e}",
                EMPTY_FILE,
                instance_dir.display()
            ))
        })?;
        let (runtime, quota) = query::query_image(&inner).await.map_err(Unavailable)?;
        if let Quota::Unavailable(why) = &quota {
            tracing::warn!(reason = %why, "no per-session disk quota in the Docker backend");
        }
        inner.runtime = runtime;
        inner.quota = quota;
        tracing::info!(image = %d.image, python = %inner.runtime.executable.display(), launcher = %inner.launcher.describe(), "docker backend ready");
        Ok(DockerBackend {
            inner: Arc::new(inner),
        })
    }

    /// Shutdown begins: no container is created from now on, and every container of
    /// this instance is removed, all at once (a signal gives the server a second).
    pub async fn kill_all(&self) {
        let inner = &self.inner;
        inner
            .closing
            .store(true, std::sync::atomic::Ordering::Release);
        engine::remove_instance(&inner.docker, &inner.owner.instance).await;
    }
}

/// The launcher route `SANDBOX_LAUNCHER` and this platform allow, and for the image's
/// launcher, its protocol checked against this server's.
fn choose_launcher(
    settings: &Settings,
    labels: &std::collections::HashMap<String, String>,
) -> Result<Launcher, String> {
    let d = &settings.docker;
    let local = route::engine_is_local(d.host.as_deref());
    match route::choose(d.launcher, cfg!(target_os = "linux"), local)? {
        route::Route::Bind => container::launcher_on_this_machine().map(Launcher::Bound),
        route::Route::Image => {
            route::check_image_launcher(&d.image, labels).map(|version| Launcher::Image { version })
        }
    }
}

impl Inner {
    /// The policy the in-container helper installs: no world of its own (the container
    /// is the world), Landlock and seccomp by the container's paths, the grants at their
    /// own paths. Always best-effort inside: the container's own walls stand whatever the
    /// kernel lets the helper add.
    fn policy(&self, grants: &[Grant]) -> WorkerPolicy {
        let (workspace, tmp) = (Path::new(WORKSPACE), Path::new("/tmp"));
        let s = &self.settings;
        WorkerPolicy {
            mode: SandboxMode::BestEffort,
            network: s.network,
            python: self.runtime.executable.clone(),
            host_view: host_view(&self.runtime, workspace, tmp, grants),
            host_env: worker_env(workspace, tmp, &self.runtime.executable, &|_| None),
            world: None,
            run_as: None,
            limits: Limits {
                address_space_bytes: s.mem_limit_bytes,
                cpu_seconds: 3600,
                file_size_bytes: s.file_size_limit_bytes,
                open_files: 256,
                processes: None,
            },
            parent_pid: 0,
        }
    }

    fn plan<'a>(
        &'a self,
        role: &'a str,
        workspace: &'a Path,
        grants: &'a [BoundGrant],
        empty_file: &'a Path,
    ) -> ContainerPlan<'a> {
        ContainerPlan {
            image: &self.settings.docker.image,
            user: self.user,
            owner: &self.owner,
            role,
            launcher: match &self.launcher {
                Launcher::Bound(path) => Some(path.as_path()),
                Launcher::Image { .. } => None,
            },
            workspace,
            grants,
            empty_file,
            memory_bytes: self.settings.mem_limit_bytes,
            pids_limit: self.settings.pids_limit,
            tmp_bytes: self.settings.docker.tmp_size_bytes,
            network: self.settings.network,
        }
    }

    /// Starts one worker container bound to `workspace` with `grants`.
    async fn start_container(
        &self,
        role: &str,
        workspace: &Path,
        grants: &[Grant],
    ) -> Result<Worker, StartError> {
        let closing = || self.closing.load(std::sync::atomic::Ordering::Acquire);
        let shutting_down = || StartError::Engine("the server is shutting down".into());
        if closing() {
            return Err(shutting_down());
        }
        let empty_file = self.instance_dir.join(EMPTY_FILE);
        let bound = bind_grants(grants, &empty_file)?;
        let config = config::container_config(&self.plan(role, workspace, &bound, &empty_file));
        let policy = serde_json::to_vec(&self.policy(grants))
            .map_err(|e| StartError::Protocol(format!("policy: {e}")))?;
        let name = container::container_name(&self.owner.instance, role);
        let (channel, process, report) =
            container::start(&self.docker, config, &name, &policy).await?;
        if closing() {
            // Created while shutdown swept: dropping `process` removes it.
            return Err(shutting_down());
        }
        let report = self.judge_report(report, &process)?;
        Ok(Worker::new(
            channel,
            WorkerProcessKind::Docker(process),
            report,
        ))
    }

    /// The container's walls join the helper's report; the helper's own namespaces are
    /// replaced by the container's. Under `HOST_SANDBOX=require` any other missing wall
    /// refuses the worker.
    fn judge_report(
        &self,
        mut report: SandboxReport,
        process: &container::DockerProcess,
    ) -> Result<SandboxReport, StartError> {
        report.walls.retain(|w| w.name != "namespaces");
        report.walls.insert(0, WallStatus {
            name: "container".into(),
            enforced: true,
            detail: format!(
                "container {} of image {}: read-only root, user {}:{}, cap_drop ALL, no-new-privileges, network {}, memory {} MiB (swap equal), pids {}, /tmp tmpfs {} MiB, init, log driver none, its own mount/PID/IPC/UTS{} namespaces; launcher: {}",
                &process.id()[..12.min(process.id().len())],
                self.settings.docker.image,
                self.user.0,
                self.user.1,
                match self.settings.network {
                    crate::config::NetworkMode::Deny => "none",
                    crate::config::NetworkMode::Allow => "bridge",
                },
                self.settings.mem_limit_bytes >> 20,
                self.settings.pids_limit,
                self.settings.docker.tmp_size_bytes >> 20,
                match self.settings.network {
                    crate::config::NetworkMode::Deny => "/network",
                    crate::config::NetworkMode::Allow => "",
                },
                self.launcher.describe(),
            ),
        });
        report.walls.insert(1, self.quota_wall());
        if self.settings.host_sandbox == SandboxMode::Require
            && let Some(w) = report.walls.iter().find(|w| !w.enforced)
        {
            return Err(StartError::Refused {
                wall: w.name.clone(),
                message: format!(
                    "HOST_SANDBOX=require and this wall cannot be installed inside the container: {}",
                    w.detail
                ),
            });
        }
        report.mode = self.settings.host_sandbox.word().to_string();
        Ok(report)
    }
}

impl Inner {
    fn quota_wall(&self) -> WallStatus {
        match &self.quota {
            Quota::Tmpfs { bytes } => WallStatus {
                name: "disk_quota".into(),
                enforced: true,
                detail: format!(
                    "/workspace is a tmpfs of {bytes} bytes (SANDBOX_DISK_LIMIT) that the server mounted on the session's directory; /tmp a tmpfs of {} bytes (SANDBOX_TMP_SIZE)",
                    self.settings.docker.tmp_size_bytes
                ),
            },
            Quota::Unavailable(why) => WallStatus {
                name: "disk_quota".into(),
                enforced: false,
                detail: format!(
                    "no per-session quota on /workspace: {why}; /tmp is a tmpfs of {} bytes and SANDBOX_FILE_SIZE_LIMIT caps each file",
                    self.settings.docker.tmp_size_bytes
                ),
            },
        }
    }
}

/// The empty read-only file of the instance that covers each file a grant hides.
const EMPTY_FILE: &str = "hidden-empty";

/// Makes the instance's [`EMPTY_FILE`] (read-only for everyone: the container user
/// reads it as nothing).
fn make_empty_file(instance_dir: &Path) -> std::io::Result<()> {
    let path = instance_dir.join(EMPTY_FILE);
    std::fs::File::create(&path)?;
    crate::os::set_mode(&path, 0o444)
}

/// What a granted directory holds that the container must not reach, found again just
/// before the container is made: each entry the never-grant rules name, not walking
/// into the other file systems mounted inside it (the bind leaves them out).
#[cfg(unix)]
fn hidden_in(dir: &Path) -> Result<Vec<(PathBuf, crate::grants::MaskKind)>, String> {
    use std::os::fd::AsFd;
    let rules = crate::grants::NeverGrant::embedded().map_err(|e| e.to_string())?;
    let table = crate::grants::mountinfo::read_self()?;
    let skip: Vec<PathBuf> = crate::grants::mountinfo::beneath(&table, dir)
        .iter()
        .filter_map(|m| m.mount_point.strip_prefix(dir).ok().map(Path::to_path_buf))
        .collect();
    let fd = crate::grants::open_no_symlinks(dir).map_err(|e| e.to_string())?;
    let masks = crate::grants::scan::scan(fd.as_fd(), &rules, &skip, &crate::grants::scan::LIMITS)
        .map_err(|e| e.to_string())?;
    Ok(masks
        .into_iter()
        .map(|m| (dir.join(m.rel), m.kind))
        .collect())
}

/// Grants exist only on Unix servers (they are pinned by descriptor at consent).
#[cfg(not(unix))]
fn hidden_in(_dir: &Path) -> Result<Vec<(PathBuf, crate::grants::MaskKind)>, String> {
    Ok(Vec::new())
}

/// Each grant, re-checked just before it is bound: it must still resolve to itself (no
/// symlink put in its place since consent) and be the same kind of object; what a
/// directory holds that must be hidden is found again.
fn bind_grants(grants: &[Grant], empty_file: &Path) -> Result<Vec<BoundGrant>, StartError> {
    grants
        .iter()
        .map(|g| {
            let now = std::fs::canonicalize(&g.path).ok();
            let kind_ok = std::fs::symlink_metadata(&g.path).is_ok_and(|m| match g.kind {
                PathKind::Directory => m.is_dir(),
                PathKind::File => m.is_file(),
            });
            if now.as_deref() != Some(g.path.as_path()) || !kind_ok {
                return Err(StartError::Refused {
                    wall: "grants".into(),
                    message: format!(
                        "{} is no longer the object that was approved; ask for it again",
                        g.path.display()
                    ),
                });
            }
            let hidden = match g.kind {
                PathKind::Directory => hidden_in(&g.path).map_err(|e| StartError::Refused {
                    wall: "grants".into(),
                    message: format!("{}: {e}; it is not bound", g.path.display()),
                })?,
                PathKind::File => Vec::new(),
            };
            if hidden
                .iter()
                .any(|(_, k)| *k == crate::grants::MaskKind::File)
                && !empty_file.is_file()
            {
                return Err(StartError::Refused {
                    wall: "grants".into(),
                    message: format!(
                        "{}: {} is missing, so what the grant hides cannot be covered",
                        g.path.display(),
                        empty_file.display()
                    ),
                });
            }
            Ok(BoundGrant {
                path: g.path.clone(),
                access: g.access,
                hidden,
            })
        })
        .collect()
}

/// Creates `dir` for a container's workspace, owned by the container user (Unix; on
/// Windows Docker Desktop maps ownership itself).
pub(crate) fn make_workspace(dir: &Path, user: (u32, u32)) -> std::io::Result<()> {
    crate::os::create_dir(dir, 0o700, false)?;
    #[cfg(unix)]
    if running_as_root() {
        std::os::unix::fs::chown(dir, Some(user.0), Some(user.1))?;
    }
    #[cfg(not(unix))]
    let _ = user;
    crate::os::set_mode(dir, 0o700)
}

impl Backend for DockerBackend {
    type Slot = DockerSlot;

    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// The session's directory, and in it the workspace its containers bind: owned by
    /// the container user and, when the quota stands, a tmpfs of `SANDBOX_DISK_LIMIT`.
    fn open_session(&self, dir: &Path) -> std::io::Result<(DockerSlot, SessionPaths)> {
        let inner = &self.inner;
        crate::os::create_dir(dir, 0o711, false)?;
        let paths = SessionPaths {
            workspace: dir.join("workspace"),
        };
        let made =
            make_workspace(&paths.workspace, inner.user).and_then(|()| match inner.quota.bytes() {
                Some(bytes) => quota::mount(&paths.workspace, bytes, inner.user),
                None => Ok(()),
            });
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(dir);
            return Err(e);
        }
        let slot = DockerSlot {
            dir: dir.to_path_buf(),
            workspace: paths.workspace.clone(),
        };
        Ok((slot, paths))
    }

    /// A new container bound to the session's workspace and grants. (Warm containers
    /// are started through here too, by the session layer's pool, in homes made ahead.)
    async fn start_worker(
        &self,
        slot: &DockerSlot,
        spec: &WorkerSpec<'_>,
    ) -> Result<Worker, StartError> {
        self.inner
            .start_container("session", &slot.workspace, spec.grants)
            .await
    }

    /// Detaches the workspace's tmpfs and deletes the session's directory (its
    /// containers are already removed; one still going holds the tmpfs only until it is).
    fn close_session(&self, slot: &DockerSlot) -> Result<(), String> {
        if let Err(e) = quota::unmount(&slot.workspace) {
            return Err(format!(
                "the workspace tmpfs on {} could not be detached: {e}",
                slot.workspace.display()
            ));
        }
        match std::fs::remove_dir_all(&slot.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{} could not be removed: {e}", slot.dir.display())),
        }
    }

    async fn shutdown(&self) {
        engine::remove_instance(&self.inner.docker, &self.inner.owner.instance).await;
    }

    fn enforcement(&self) -> Enforcement {
        let inner = &self.inner;
        let mut gaps = Vec::new();
        if let Quota::Unavailable(why) = &inner.quota {
            gaps.push(Capability {
                mechanism: "disk_quota".into(),
                enforced: false,
                reason: format!(
                    "{why}; /tmp is a size-capped tmpfs and SANDBOX_FILE_SIZE_LIMIT caps each file"
                ),
            });
        }
        Enforcement {
            kind: BackendKind::Docker,
            python: inner.runtime.executable.display().to_string(),
            python_version: inner.runtime.version.clone(),
            dedicated_uid_per_session: false,
            workspace_quota_bytes: inner.quota.bytes(),
            protected_paths: match &inner.launcher {
                Launcher::Bound(path) => vec![path.clone()],
                Launcher::Image { .. } => Vec::new(),
            },
            processes_limit: Some(inner.settings.pids_limit),
            grant_walls: crate::grants::GrantWalls::Container,
            launcher: Some(inner.launcher.describe()),
            gaps,
        }
    }
}
