//! The host backend where this build has no sandbox for a host process (Windows): it
//! starts, reports itself `unsupported` with the reason and the route (the Docker
//! backend), and refuses every worker. Nothing ever runs unconfined on the host.

use std::path::Path;
use std::sync::Arc;

use crate::backend::{
    Backend, BackendError, BackendKind, Enforcement, StartError, Worker, WorkerSpec,
};
use crate::config::Settings;
use crate::sandbox::platform::{self, HostOs};
use crate::worker::policy::SessionPaths;

/// What the host backend keeps for one session: its directory (no worker can start).
#[derive(Debug)]
pub struct HostSlot {
    dir: std::path::PathBuf,
}

impl crate::backend::SlotState for HostSlot {}

pub struct HostBackend {
    settings: Arc<Settings>,
}

impl HostBackend {
    pub fn new(
        settings: Arc<Settings>,
        _instance_dir: &Path,
        _egress: Option<Arc<crate::egress::Egress>>,
    ) -> Result<HostBackend, BackendError> {
        tracing::warn!("{}", platform::host_unsupported_reason(HostOs::current()));
        Ok(HostBackend { settings })
    }
}

impl Backend for HostBackend {
    type Slot = HostSlot;

    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }

    /// A directory for the session's files, though no worker will ever use it.
    fn open_session(&self, dir: &Path) -> std::io::Result<(HostSlot, SessionPaths)> {
        let workspace = dir.join("workspace");
        crate::os::create_dir(&workspace, 0o700, true)?;
        Ok((
            HostSlot {
                dir: dir.to_path_buf(),
            },
            SessionPaths { workspace },
        ))
    }

    async fn start_worker(
        &self,
        _slot: &HostSlot,
        _spec: &WorkerSpec<'_>,
    ) -> Result<Worker, StartError> {
        Err(StartError::Refused {
            wall: "host_sandbox".into(),
            message: platform::host_unsupported_reason(HostOs::current()),
        })
    }

    /// Nothing runs here, the package installer neither.
    ///
    /// # Errors
    /// Always: the host backend is unsupported on this platform.
    async fn start_installer(
        &self,
        _slot: &HostSlot,
        _spec: &crate::backend::InstallerSpec<'_>,
    ) -> Result<Worker, StartError> {
        Err(StartError::Refused {
            wall: "host_sandbox".into(),
            message: platform::host_unsupported_reason(HostOs::current()),
        })
    }

    fn close_session(&self, slot: &HostSlot) -> Result<(), String> {
        std::fs::remove_dir_all(&slot.dir)
            .map_err(|e| format!("cannot remove {}: {e}", slot.dir.display()))
    }

    async fn shutdown(&self) {}

    fn enforcement(&self) -> Enforcement {
        Enforcement {
            kind: BackendKind::Host,
            python: self
                .settings
                .python
                .as_ref()
                .map_or("none (no host worker on this platform)".to_string(), |p| {
                    p.display().to_string()
                }),
            python_version: "unknown".into(),
            dedicated_uid_per_session: false,
            workspace_quota_bytes: None,
            protected_paths: Vec::new(),
            processes_limit: None,
            processes_counted_by: "no host worker on this platform".into(),
            grant_walls: crate::grants::GrantWalls::PathsOnly,
            launcher: None,
            container_runtime: None,
            world: None,
            gaps: platform::host_capabilities(HostOs::current()),
            engines: Vec::new(),
        }
    }
}
