//! The backend seam: where a session's worker runs. A backend is an enum over one trait
//! ([`AnyBackend`] over [`Backend`]), so dispatch stays static, as ripgrep's
//! `PatternMatcher`. Sessions, the guard, grants, audit and the workspace diff never
//! name a backend; they hold a [`SessionSlot`] and a [`Worker`].
//!
//! - [`host`]: the host backend (the walls themselves live in [`crate::sandbox`]).
//! - [`budget`]: how many workers may be alive at once (`SANDBOX_MAX_WORKERS`).
//! - [`pool`]: warm workers started ahead in homes of their own (`SANDBOX_WARM_WORKERS`).
//!
//! A session lives in a [`Home`] (its workspace and backend slot). A started worker's
//! walls, mounts and uid are fixed to its home, so a warm pool cannot re-point one at an
//! existing session: it makes the home ahead too ([`AnyBackend::open_home`], callable
//! before any session is named) and hands both to a new session.

pub mod budget;
#[cfg(feature = "docker")]
pub mod docker;
/// The Docker backend's settings group, in its folder but in every build.
#[path = "docker/settings.rs"]
pub mod docker_settings;
#[cfg(unix)]
pub mod host;
/// Windows: the host backend reports itself unsupported; Docker is the route there.
#[cfg(not(unix))]
#[path = "host_unsupported.rs"]
pub mod host;
pub mod pool;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::capability::Capability;
use crate::config::Settings;
use crate::grants::Grant;
use crate::worker::policy::SessionPaths;

pub use crate::worker::handle::{ExitWitness, KillSwitch, Usage, UsageProbe, Worker};
pub use crate::worker::protocol::{
    Captured, Gate, InputFile, LateOutput, Outcome, OutputTap, RunOutput,
};

/// `EXECUTION_BACKEND`: which kind of backend runs the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// A sandboxed worker process on this machine.
    Host,
    /// A hardened container per session.
    Docker,
}

impl BackendKind {
    /// Every backend: its kind, the word `EXECUTION_BACKEND` spells it with, and whether
    /// this build has it (the Cargo feature that brings it).
    pub const ALL: &[(BackendKind, &'static str, bool)] = &[
        (BackendKind::Host, "host", true),
        (BackendKind::Docker, "docker", cfg!(feature = "docker")),
    ];

    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(k, _, _)| *k == self)
            .map_or("unknown", |(_, word, _)| word)
    }

    /// The backend `word` names, and whether this build has it.
    pub fn from_word(word: &str) -> Option<(BackendKind, bool)> {
        Self::ALL
            .iter()
            .find(|(_, w, _)| *w == word)
            .map(|(k, _, built)| (*k, *built))
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A backend could not be prepared at start-up.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{setting}: {source}")]
    Python {
        /// `SANDBOX_PYTHON=… (from …)`, the setting at fault.
        setting: String,
        #[source]
        source: crate::worker::python::PythonError,
    },
    #[error(
        "the workspaces directory {path} is not reachable by the unprivileged sandbox users ({reason}); set SANDBOX_DATA_DIR to a directory such as /var/lib/warden"
    )]
    DataDirUnreachable { path: PathBuf, reason: String },
    #[error("cannot prepare the workspaces in {path}: {source}")]
    Workspaces {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A worker could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the sandbox refused to start the worker: wall '{wall}': {message}")]
    Refused { wall: String, message: String },
    #[error("the sandbox helper failed before starting Python ({status}){stderr}")]
    HelperDied { status: String, stderr: String },
    #[error("Python failed to start inside the sandbox ({status}){stderr}")]
    PythonDied { status: String, stderr: String },
    #[error("the worker did not start within {0:?}")]
    Timeout(Duration),
    #[error("could not start the sandbox helper: {0}")]
    Io(#[from] std::io::Error),
    #[error("the worker sent an unexpected first message: {0}")]
    Protocol(String),
    #[error("the Docker engine refused: {0}")]
    Engine(String),
    #[error("{0}")]
    Busy(String),
    /// The engine the session was placed on is lost to it: the session ends.
    #[error("{0}")]
    EngineLost(String),
}

impl StartError {
    /// The error kind a result reports: a wall that could not stand, or a failed start.
    pub fn kind(&self) -> &'static str {
        match self {
            StartError::Refused { .. } => "SandboxRefused",
            StartError::Busy(_) => "WorkersBusy",
            StartError::EngineLost(_) => ENGINE_LOST,
            _ => "WorkerStartFailed",
        }
    }
}

/// The error kind of a session whose engine is lost to it (the session has ended).
pub const ENGINE_LOST: &str = "EngineLost";

/// What a backend keeps for one open session, whatever the backend: its own slot type
/// ([`Backend::Slot`]), which only that backend reads back ([`SessionSlot::of`]).
#[derive(Debug)]
pub struct SessionSlot(Box<dyn SlotState>);

/// What the session layer may ask of any backend's slot.
pub trait SlotState: std::any::Any + std::fmt::Debug + Send + Sync {
    /// The session's package layer, and the uid its installer runs as (`None`: the
    /// server's own), when the backend installs packages.
    fn package_layer(&self) -> Option<(&crate::packages::layer::Layer, Option<(u32, u32)>)> {
        None
    }
    /// What every result of the session says about its home (a workspace quota smaller
    /// than `SANDBOX_DISK_LIMIT`), if anything.
    fn notice(&self) -> Option<String> {
        None
    }
    /// Where the session runs, when the backend has several places (a Docker engine's
    /// URL).
    fn place(&self) -> Option<String> {
        None
    }
    /// Why the session's code can never reach a path of this machine (its workspace
    /// lives in a container of an engine that cannot see them), if so.
    fn host_paths_unreachable(&self) -> Option<String> {
        None
    }
}

impl SessionSlot {
    pub fn new(state: impl SlotState) -> SessionSlot {
        SessionSlot(Box::new(state))
    }

    /// The backend's own slot; an error when the slot was made by another backend (a
    /// server holds one backend, so only a bug gets here).
    pub fn of<S: SlotState>(&self) -> Result<&S, StartError> {
        let any: &dyn std::any::Any = self.0.as_ref();
        any.downcast_ref::<S>()
            .ok_or_else(|| StartError::Protocol("a session slot of another backend".into()))
    }

    pub fn package_layer(&self) -> Option<(&crate::packages::layer::Layer, Option<(u32, u32)>)> {
        self.0.package_layer()
    }

    pub fn notice(&self) -> Option<String> {
        self.0.notice()
    }

    pub fn place(&self) -> Option<String> {
        self.0.place()
    }

    pub fn host_paths_unreachable(&self) -> Option<String> {
        self.0.host_paths_unreachable()
    }
}

/// Where a session lives: its workspace as the server reads it, and what the backend
/// keeps for it (on the host: its uid and its workspace tmpfs). Made before the session
/// is named when a warm worker waits in it.
#[derive(Debug)]
pub struct Home {
    pub paths: SessionPaths,
    pub slot: SessionSlot,
}

/// Everything a worker is started for: the session's slot and its live grants.
pub struct WorkerSpec<'a> {
    pub slot: &'a SessionSlot,
    pub grants: &'a [Grant],
}

/// Everything a session's package installer is started for.
pub struct InstallerSpec<'a> {
    /// The install's stage on the server's disk: the installer's workspace.
    pub stage: &'a Path,
    /// What it reads besides the runtime (the wheelhouse, the index's CA file), bound
    /// read-only at their own paths.
    pub grants: &'a [Grant],
    /// Its own proxy, reaching the index alone; `None`: no network at all.
    pub egress: Option<Arc<crate::egress::Egress>>,
    /// The size of its /tmp, where pip installs before the tree is copied out.
    pub tmp_bytes: u64,
}

/// How a backend's world shows a session to its code, for the layers that speak of
/// paths as the code sees them (the guard) or keep grants off the world's own places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldPlaces {
    /// The workspace as the code sees it.
    pub workspace: &'static str,
    /// The world's own trees, with what each is.
    pub trees: &'static [(&'static str, &'static str)],
    /// Directories reserved themselves, not below.
    pub dirs: &'static [&'static str],
}

impl WorldPlaces {
    /// The places of the world the Linux host backend builds, which containers share:
    /// its own trees (a grant landing in one would hide it or be hidden by it), and
    /// its own directories, reserved themselves but not below.
    pub const LINUX: WorldPlaces = WorldPlaces {
        workspace: crate::workspace::IN_WORLD,
        trees: &[
            (crate::workspace::IN_WORLD, "the workspace"),
            ("/proc", "the worker's /proc"),
            ("/dev", "the worker's /dev"),
            ("/usr", "the read-only runtime"),
            (crate::packages::MOUNT, "the installed packages"),
        ],
        dirs: &["/", "/tmp"],
    };

    /// What a granted path would land on inside the world (and hide, or be hidden by),
    /// if anything. Pure.
    pub fn reserved(&self, path: &Path) -> Option<&'static str> {
        if let Some((_, what)) = self.trees.iter().find(|(t, _)| path.starts_with(t)) {
            return Some(what);
        }
        self.dirs
            .iter()
            .any(|d| path == Path::new(d))
            .then_some("the world's own directories")
    }
}

/// The OCI runtime a container backend runs its containers with
/// (`SANDBOX_DOCKER_RUNTIME`), as configured and as the engine resolved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContainerRuntime {
    /// The runtime configured by name; `None`: the engine's default.
    pub configured: Option<String>,
    /// The runtime the engine runs the containers with.
    pub resolved: String,
    /// It is gVisor's `runsc`: a user-space kernel (the Sentry) serves the code's system
    /// calls and `/proc`, between the code and the host's kernel.
    pub user_space_kernel: bool,
    /// The kernel release the code sees (gVisor's Sentry reports its own).
    pub kernel: String,
    /// The engine serving the API: `docker` or `podman`.
    pub engine: String,
    /// The engine's own version.
    pub engine_version: String,
    /// The engine runs as an ordinary user, with no root daemon (rootless Podman).
    pub rootless: bool,
}

/// What the resolved backend can enforce, for `selftest` and `warden://settings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enforcement {
    pub kind: BackendKind,
    /// The interpreter workers run.
    pub python: String,
    pub python_version: String,
    /// Each session's worker runs as a uid of its own.
    pub dedicated_uid_per_session: bool,
    /// What one session may store (`SANDBOX_DISK_LIMIT`), when that quota is enforced.
    pub workspace_quota_bytes: Option<u64>,
    /// What a grant may never cover: the interpreter's prefix and read roots, the
    /// programs the sandbox runs (a grant there could change what later workers load).
    #[serde(skip)]
    pub protected_paths: Vec<PathBuf>,
    /// Processes (tasks) per worker, when a limit is in force.
    pub processes_limit: Option<u64>,
    /// What holds that limit (an rlimit in the worker's own user namespace, a uid of its
    /// own, a container's pids cgroup), or why there is none.
    pub processes_counted_by: String,
    /// What this backend's sandbox can hide in, or leave out of, a granted directory.
    #[serde(skip)]
    pub grant_walls: crate::grants::GrantWalls,
    /// The Docker backend's in-container launcher, as resolved (`SANDBOX_LAUNCHER`):
    /// this server's binary bound read-only, or the image's, with its version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    /// The container runtime, for a container backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<ContainerRuntime>,
    /// Mechanisms this backend or build cannot apply here, and why.
    pub gaps: Vec<Capability>,
    /// The world the code lives in; `None`: it sees the server's own paths.
    #[serde(skip)]
    pub world: Option<WorldPlaces>,
    /// The engines sessions are placed on, for a backend of several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<EngineStatus>,
}

#[cfg(feature = "docker")]
pub use docker::fleet::EngineStatus;

/// Engines exist only in builds with the Docker backend.
#[cfg(not(feature = "docker"))]
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub enum EngineStatus {}

/// One way of running workers. Implemented by each backend; dispatched by [`AnyBackend`].
pub trait Backend: Send + Sync {
    /// What it keeps per open session.
    type Slot: SlotState;
    fn kind(&self) -> BackendKind;
    /// Prepares a session's workspace (`dir` is a directory of the instance it may use)
    /// and says where the server reads it.
    fn open_session(&self, dir: &Path) -> std::io::Result<(Self::Slot, SessionPaths)>;
    /// A worker ready for the session's first call: the one call a warm pool satisfies.
    fn start_worker(
        &self,
        slot: &Self::Slot,
        spec: &WorkerSpec<'_>,
    ) -> impl Future<Output = Result<Worker, StartError>> + Send;
    /// The package installer of the session in `slot`: a worker under the same walls
    /// whose only way out is `spec.egress`.
    fn start_installer(
        &self,
        slot: &Self::Slot,
        spec: &InstallerSpec<'_>,
    ) -> impl Future<Output = Result<Worker, StartError>> + Send;
    /// Releases what the session held and deletes its workspace (its workers are
    /// already killed).
    ///
    /// # Errors
    /// What could not be removed, as a sentence.
    fn close_session(&self, slot: &Self::Slot) -> Result<(), String>;
    /// Lets the session's workspace grow by at most `bytes_left` while a call runs
    /// (`None`: its whole quota again). `Ok(false)` where the backend cannot.
    fn limit_growth(&self, _slot: &Self::Slot, _bytes_left: Option<u64>) -> Result<bool, String> {
        Ok(false)
    }
    /// Kills every worker of this server at once, the first thing a shutdown does, where
    /// the backend holds them all in one place (a host worker is a process group, which
    /// the session layer kills directly).
    fn kill_all(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// Releases everything at server exit.
    fn shutdown(&self) -> impl Future<Output = ()> + Send;
    fn enforcement(&self) -> Enforcement;
    /// The container runtime, for a backend that runs containers.
    fn container_runtime(&self) -> Option<ContainerRuntime> {
        None
    }
    /// Why the session in `slot` has lost the place its workers run (its engine stopped
    /// answering), which ends it; asked when a worker died or did not start.
    fn engine_lost(&self, _slot: &Self::Slot) -> impl Future<Output = Option<String>> + Send {
        async { None }
    }
    /// How a warm home compares with where a new home would go now: 0 or more, as
    /// good (higher is better); below 0, worse (a new session starts its own rather
    /// than take it); `None`: it cannot be used any more.
    fn home_rank(&self, _slot: &Self::Slot) -> Option<i64> {
        Some(0)
    }
    /// How many places keep warm workers of their own (the warm pool's size is per
    /// place).
    fn warm_places(&self) -> usize {
        1
    }
    /// After a call: brings the server's view of the session's workspace up to date
    /// where the workspace lives elsewhere (in the container); a warning when it could
    /// not, or when something was left out.
    /// `finished`: the call's worker answered (else it died, and reported nothing of
    /// what the code did).
    fn settle(
        &self,
        _slot: &Self::Slot,
        _finished: bool,
    ) -> impl Future<Output = Option<String>> + Send {
        async { None }
    }
}

/// Runs `$body` with `$b` bound to the resolved backend, whichever it is: the one
/// place that lists every backend's arm.
macro_rules! dispatch {
    ($any:expr, $b:ident => $body:expr) => {
        match $any {
            AnyBackend::Host($b) => $body,
            #[cfg(feature = "docker")]
            AnyBackend::Docker($b) => $body,
        }
    };
}

/// The backend this server resolved to (one per server: the size difference between
/// the variants costs nothing).
#[allow(clippy::large_enum_variant)]
pub enum AnyBackend {
    Host(host::HostBackend),
    #[cfg(feature = "docker")]
    Docker(docker::DockerBackend),
}

/// The backend that runs code, and why it is not the configured one (if it is not).
pub struct Resolution {
    pub backend: AnyBackend,
    /// Set when `EXECUTION_BACKEND=docker` could not be honoured and the host backend
    /// runs instead: the reason, shown in every result.
    pub fallback: Option<String>,
}

impl AnyBackend {
    /// The backend the settings ask for; Docker degrades to the host backend (never to
    /// anything less contained) with the reason.
    pub async fn resolve(
        settings: Arc<Settings>,
        instance_dir: &Path,
        egress: Option<Arc<crate::egress::Egress>>,
    ) -> Result<Resolution, BackendError> {
        #[cfg(feature = "docker")]
        if settings.backend == BackendKind::Docker {
            match docker::DockerBackend::new(settings.clone(), instance_dir, egress.clone()).await {
                Ok(b) => {
                    return Ok(Resolution {
                        backend: AnyBackend::Docker(b),
                        fallback: None,
                    });
                }
                Err(e) => {
                    tracing::warn!(reason = %e, "EXECUTION_BACKEND=docker is unavailable; the host backend runs instead");
                    let backend =
                        AnyBackend::Host(host::HostBackend::new(settings, instance_dir, egress)?);
                    return Ok(Resolution {
                        backend,
                        fallback: Some(e.to_string()),
                    });
                }
            }
        }
        Ok(Resolution {
            backend: AnyBackend::Host(host::HostBackend::new(settings, instance_dir, egress)?),
            fallback: None,
        })
    }

    pub fn kind(&self) -> BackendKind {
        dispatch!(self, b => b.kind())
    }

    /// A new home with an empty workspace; `dir` is a directory of the instance the
    /// backend may use. Blocking (it makes the workspace): call it off the async runtime.
    pub fn open_home(&self, dir: &Path) -> std::io::Result<Home> {
        dispatch!(self, b => b.open_session(dir).map(|(slot, paths)| Home {
            paths,
            slot: SessionSlot::new(slot),
        }))
    }

    pub async fn start_worker(&self, spec: &WorkerSpec<'_>) -> Result<Worker, StartError> {
        dispatch!(self, b => b.start_worker(spec.slot.of()?, spec).await)
    }

    /// Starts the package installer of the session in `slot`.
    ///
    /// # Errors
    /// As [`AnyBackend::start_worker`].
    pub async fn start_installer(
        &self,
        slot: &SessionSlot,
        spec: &InstallerSpec<'_>,
    ) -> Result<Worker, StartError> {
        dispatch!(self, b => b.start_installer(slot.of()?, spec).await)
    }

    pub fn close_session(&self, slot: &SessionSlot) -> Result<(), String> {
        dispatch!(self, b => b.close_session(slot.of().map_err(|e| e.to_string())?))
    }

    /// See [`Backend::limit_growth`].
    pub fn limit_growth(
        &self,
        slot: &SessionSlot,
        bytes_left: Option<u64>,
    ) -> Result<bool, String> {
        dispatch!(self, b => b.limit_growth(slot.of().map_err(|e| e.to_string())?, bytes_left))
    }

    /// See [`Backend::kill_all`].
    pub async fn kill_all(&self) {
        dispatch!(self, b => b.kill_all().await)
    }

    pub async fn shutdown(&self) {
        dispatch!(self, b => b.shutdown().await)
    }

    pub fn enforcement(&self) -> Enforcement {
        dispatch!(self, b => b.enforcement())
    }

    pub fn container_runtime(&self) -> Option<ContainerRuntime> {
        dispatch!(self, b => b.container_runtime())
    }

    /// See [`Backend::engine_lost`].
    pub async fn engine_lost(&self, slot: &SessionSlot) -> Option<String> {
        dispatch!(self, b => match slot.of() {
            Ok(s) => b.engine_lost(s).await,
            Err(_) => None,
        })
    }

    /// See [`Backend::home_rank`].
    pub fn home_rank(&self, slot: &SessionSlot) -> Option<i64> {
        dispatch!(self, b => slot.of().ok().and_then(|s| b.home_rank(s)))
    }

    /// See [`Backend::settle`].
    pub async fn settle(&self, slot: &SessionSlot, finished: bool) -> Option<String> {
        dispatch!(self, b => match slot.of() {
            Ok(s) => b.settle(s, finished).await,
            Err(_) => None,
        })
    }

    /// See [`Backend::warm_places`].
    pub fn warm_places(&self) -> usize {
        dispatch!(self, b => b.warm_places())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worlds_own_places_cannot_be_granted() {
        let w = WorldPlaces::LINUX;
        assert_eq!(w.reserved(Path::new("/workspace/x")), Some("the workspace"));
        assert!(w.reserved(Path::new("/proc/1")).is_some());
        assert!(w.reserved(Path::new("/usr/share")).is_some());
        assert!(w.reserved(Path::new("/packages/numpy")).is_some());
        assert!(w.reserved(Path::new("/tmp")).is_some());
        assert!(w.reserved(Path::new("/")).is_some());
        assert_eq!(w.reserved(Path::new("/tmp/data")), None);
        assert_eq!(w.reserved(Path::new("/srv/data")), None);
    }

    #[test]
    fn kinds_serialise_as_the_setting_spells_them() {
        for (kind, word) in [(BackendKind::Host, "host"), (BackendKind::Docker, "docker")] {
            assert_eq!(serde_json::to_value(kind).unwrap(), word);
            assert_eq!(kind.to_string(), word);
            let back: BackendKind = serde_json::from_value(word.into()).unwrap();
            assert_eq!(back, kind);
            assert_eq!(BackendKind::from_word(word).map(|(k, _)| k), Some(kind));
        }
        assert_eq!(BackendKind::from_word("Docker"), None);
        assert_eq!(
            BackendKind::from_word("docker").map(|(_, built)| built),
            Some(cfg!(feature = "docker"))
        );
    }
}
