//! The host backend: one sandboxed, persistent Python worker process per session,
//! confined by the walls in [`crate::sandbox`] (Landlock, seccomp, namespaces, rlimits,
//! privilege drop). This module owns what only the host needs: the resolved interpreter,
//! the per-instance uid range (a uid of its own per session when the server is root),
//! session directories owned by that uid, and the helper spawn ([`spawn`]).

pub mod spawn;

use std::collections::HashSet;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{
    Backend, BackendError, BackendKind, Enforcement, StartError, Worker, WorkerSpec,
};
use crate::config::{SandboxMode, Settings};
use crate::sandbox::policy::{RunAs, SessionPaths, WorkerPolicy};
use crate::sandbox::python::{self, PythonRuntime};
use crate::sandbox::uids::{UID_RANGE, pick_uid_range};
use crate::selftest::report::Capability;

/// What the host backend keeps for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSlot {
    /// The uid the session's worker runs as (the server is root), else `None`.
    pub run_as: Option<RunAs>,
}

pub struct HostBackend {
    settings: Arc<Settings>,
    runtime: PythonRuntime,
    /// First uid of this instance's range, when the server is root and sandboxed.
    uid_base: Option<u32>,
    next_uid: AtomicU32,
    /// Uids held by open sessions: never given to a second one.
    held: Mutex<HashSet<u32>>,
}

fn running_as_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl HostBackend {
    /// Resolves the interpreter; as root, checks that the unprivileged sandbox uids can
    /// reach `instance_dir` and picks this instance's uid range.
    pub fn new(settings: Arc<Settings>, instance_dir: &Path) -> Result<HostBackend, BackendError> {
        let root = running_as_root();
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
        tracing::info!(
            python = %runtime.executable.display(),
            version = %runtime.version,
            "host backend ready"
        );
        Ok(HostBackend {
            settings,
            runtime,
            uid_base,
            next_uid: AtomicU32::new(0),
            held: Mutex::new(HashSet::new()),
        })
    }

    pub fn runtime(&self) -> &PythonRuntime {
        &self.runtime
    }

    fn policy_for(
        &self,
        paths: &SessionPaths,
        run_as: Option<RunAs>,
        grants: &[crate::grants::Grant],
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

    /// The next uid of this instance's range that no open session holds (the range
    /// wraps, so uids of finished sessions and selftests are reused).
    fn allocate_uid(&self) -> Option<RunAs> {
        let base = self.uid_base?;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut uid = base;
        for _ in 0..UID_RANGE {
            uid = base + self.next_uid.fetch_add(1, Ordering::Relaxed) % UID_RANGE;
            if !held.contains(&uid) {
                break;
            }
        }
        held.insert(uid);
        Some(RunAs { uid, gid: uid })
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

    /// Creates the session's directories, owned by its own uid when it has one.
    fn open_session(&self, dir: &Path, paths: &SessionPaths) -> std::io::Result<HostSlot> {
        let run_as = self.allocate_uid();
        if let Err(e) = create_session_dirs(dir, paths, run_as) {
            self.release(run_as);
            return Err(e);
        }
        Ok(HostSlot { run_as })
    }

    /// Frees the session's uid for a later session.
    fn close_session(&self, slot: &HostSlot) {
        self.release(slot.run_as);
    }

    /// Starts a worker confined to the session's paths and grants.
    async fn start_worker(
        &self,
        slot: &HostSlot,
        spec: &WorkerSpec<'_>,
    ) -> Result<Worker, StartError> {
        spawn::spawn(&self.policy_for(spec.paths, slot.run_as, spec.grants)).await
    }

    fn enforcement(&self) -> Enforcement {
        Enforcement {
            kind: BackendKind::Host,
            python: self.runtime.executable.display().to_string(),
            python_version: self.runtime.version.clone(),
            dedicated_uid_per_session: self.uid_base.is_some(),
            processes_limit: self.uid_base.map(|_| self.settings.pids_limit),
            gaps: platform_gaps(),
        }
    }

    /// Nothing to release: each session's worker was killed with its session.
    async fn shutdown(&self) {}
}

/// Platform sandboxes this build cannot apply on this machine.
fn platform_gaps() -> Vec<Capability> {
    vec![
        Capability {
            mechanism: "macos_sandbox_exec".into(),
            enforced: false,
            reason: format!(
                "unsupported: the SBPL deny-default profile (sandbox::macos) applies on macOS only (this is {})",
                std::env::consts::OS
            ),
        },
        Capability {
            mechanism: "windows_job_object".into(),
            enforced: false,
            reason: format!(
                "unsupported: the job object and low integrity plan (sandbox::windows) apply on Windows only, and network control there needs administrator rights (this is {})",
                std::env::consts::OS
            ),
        },
        Capability {
            mechanism: "docker".into(),
            enforced: false,
            reason: "unsupported in this build: the Docker backend is not implemented yet".into(),
        },
    ]
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
