//! The backend seam: where a session's worker runs. A backend is an enum over one trait
//! ([`AnyBackend`] over [`Backend`]), so dispatch stays static, as ripgrep's
//! `PatternMatcher`. Sessions, the guard, grants, audit and the workspace diff never
//! name a backend; they hold a [`SessionSlot`] and a [`Worker`].
//!
//! - [`protocol`]: the worker protocol, spoken over any four streams.
//! - [`capture`]: one call's output from one stream, between its markers.
//! - [`host`]: the host backend (the walls themselves live in [`crate::sandbox`]).
//! - [`worker`]: a started worker, whatever backend started it.
//! - [`budget`]: how many workers may be alive at once (`SANDBOX_MAX_WORKERS`).
//! - [`pool`]: warm workers started ahead in homes of their own (`SANDBOX_WARM_WORKERS`).
//!
//! A session lives in a [`Home`] (its workspace and backend slot). A started worker's
//! walls, mounts and uid are fixed to its home, so a warm pool cannot re-point one at an
//! existing session: it makes the home ahead too ([`AnyBackend::open_home`], callable
//! before any session is named) and hands both to a new session.

pub mod budget;
pub mod capture;
#[cfg(feature = "docker")]
pub mod docker;
#[cfg(unix)]
pub mod host;
/// Windows: the host backend reports itself unsupported; Docker is the route there.
#[cfg(not(unix))]
#[path = "host_unsupported.rs"]
pub mod host;
pub mod pool;
pub mod protocol;
pub mod worker;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::capability::Capability;
use crate::config::Settings;
use crate::grants::Grant;
use crate::sandbox::policy::SessionPaths;

pub use protocol::{Captured, Gate, InputFile, LateOutput, Outcome, OutputTap, RunOutput};
pub use worker::{ExitWitness, KillSwitch, Usage, UsageProbe, Worker};

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
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Docker => "docker",
        }
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
        source: crate::sandbox::python::PythonError,
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
}

impl StartError {
    /// The error kind a result reports: a wall that could not stand, or a failed start.
    pub fn kind(&self) -> &'static str {
        match self {
            StartError::Refused { .. } => "SandboxRefused",
            StartError::Busy(_) => "WorkersBusy",
            _ => "WorkerStartFailed",
        }
    }
}

/// What a backend keeps for one open session.
#[derive(Debug)]
pub enum SessionSlot {
    Host(host::HostSlot),
    #[cfg(feature = "docker")]
    Docker(docker::DockerSlot),
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
    /// Mechanisms this backend or build cannot apply here, and why.
    pub gaps: Vec<Capability>,
    /// The world the code lives in; `None`: it sees the server's own paths.
    #[serde(skip)]
    pub world: Option<WorldPlaces>,
}

/// One way of running workers. Implemented by each backend; dispatched by [`AnyBackend`].
pub trait Backend: Send + Sync {
    /// What it keeps per open session.
    type Slot;
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
    /// Releases what the session held and deletes its workspace (its workers are
    /// already killed).
    ///
    /// # Errors
    /// What could not be removed, as a sentence.
    fn close_session(&self, slot: &Self::Slot) -> Result<(), String>;
    /// Releases everything at server exit.
    fn shutdown(&self) -> impl Future<Output = ()> + Send;
    fn enforcement(&self) -> Enforcement;
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
        match self {
            AnyBackend::Host(b) => b.kind(),
            #[cfg(feature = "docker")]
            AnyBackend::Docker(b) => b.kind(),
        }
    }

    pub fn open_session(&self, dir: &Path) -> std::io::Result<(SessionSlot, SessionPaths)> {
        match self {
            AnyBackend::Host(b) => b
                .open_session(dir)
                .map(|(slot, paths)| (SessionSlot::Host(slot), paths)),
            #[cfg(feature = "docker")]
            AnyBackend::Docker(b) => b
                .open_session(dir)
                .map(|(slot, paths)| (SessionSlot::Docker(slot), paths)),
        }
    }

    /// A new home with an empty workspace; `dir` is a directory of the instance the
    /// backend may use. Blocking (it makes the workspace): call it off the async runtime.
    pub fn open_home(&self, dir: &Path) -> std::io::Result<Home> {
        let (slot, paths) = self.open_session(dir)?;
        Ok(Home { paths, slot })
    }

    pub async fn start_worker(&self, spec: &WorkerSpec<'_>) -> Result<Worker, StartError> {
        match (self, spec.slot) {
            (AnyBackend::Host(b), SessionSlot::Host(slot)) => b.start_worker(slot, spec).await,
            #[cfg(feature = "docker")]
            (AnyBackend::Docker(b), SessionSlot::Docker(slot)) => b.start_worker(slot, spec).await,
            #[cfg(feature = "docker")]
            _ => Err(StartError::Protocol(
                "a session slot of another backend".into(),
            )),
        }
    }

    /// Starts the package installer of the session in `slot`.
    ///
    /// # Errors
    /// As [`AnyBackend::start_worker`]; the Docker backend does not install packages.
    pub async fn start_installer(
        &self,
        slot: &SessionSlot,
        spec: &InstallerSpec<'_>,
    ) -> Result<Worker, StartError> {
        match (self, slot) {
            (AnyBackend::Host(b), SessionSlot::Host(slot)) => b.start_installer(slot, spec).await,
            #[cfg(feature = "docker")]
            (AnyBackend::Docker(b), SessionSlot::Docker(slot)) => {
                b.start_installer(slot, spec).await
            }
            #[cfg(feature = "docker")]
            _ => Err(StartError::Protocol(
                "a session slot of another backend".into(),
            )),
        }
    }

    /// The session's package layer, and the uid its installer runs as (a root server's).
    pub fn package_layer<'s>(
        &self,
        slot: &'s SessionSlot,
    ) -> Option<(&'s crate::packages::layer::Layer, Option<(u32, u32)>)> {
        match slot {
            SessionSlot::Host(slot) => slot.package_layer(),
            #[cfg(feature = "docker")]
            SessionSlot::Docker(slot) => slot.package_layer().map(|(l, user)| (l, Some(user))),
        }
    }

    /// What every result of the session in `slot` says about its home (a workspace quota
    /// smaller than `SANDBOX_DISK_LIMIT`), if anything.
    pub fn home_notice(&self, slot: &SessionSlot) -> Option<String> {
        match slot {
            SessionSlot::Host(slot) => slot.workspace_notice(),
            #[cfg(feature = "docker")]
            SessionSlot::Docker(_) => None,
        }
    }

    pub fn close_session(&self, slot: &SessionSlot) -> Result<(), String> {
        match (self, slot) {
            (AnyBackend::Host(b), SessionSlot::Host(slot)) => b.close_session(slot),
            #[cfg(feature = "docker")]
            (AnyBackend::Docker(b), SessionSlot::Docker(slot)) => b.close_session(slot),
            #[cfg(feature = "docker")]
            _ => Err("a session slot of another backend".into()),
        }
    }

    /// Kills every worker of this server at once, the first thing a shutdown does: for
    /// the Docker backend, removes every container of this instance (the host backend's
    /// workers are process groups, which the session layer kills directly).
    pub async fn kill_all(&self) {
        match self {
            AnyBackend::Host(_) => {}
            #[cfg(feature = "docker")]
            AnyBackend::Docker(b) => b.kill_all().await,
        }
    }

    pub async fn shutdown(&self) {
        match self {
            AnyBackend::Host(b) => b.shutdown().await,
            #[cfg(feature = "docker")]
            AnyBackend::Docker(b) => b.shutdown().await,
        }
    }

    pub fn enforcement(&self) -> Enforcement {
        match self {
            AnyBackend::Host(b) => b.enforcement(),
            #[cfg(feature = "docker")]
            AnyBackend::Docker(b) => b.enforcement(),
        }
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
        }
    }
}
