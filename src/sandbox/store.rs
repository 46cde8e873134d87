//! Where sessions' workspaces live, and what a worker needs to reach them: the workspace
//! keeper's size-capped tmpfs (the normal case), or plain host directories when the
//! keeper cannot run here (no user namespaces) or the sandbox is off.
//!
//! A workspace is not tied to a session name: [`WorkspaceStore::create`] makes an empty
//! one that a session (or, later, a pre-started worker waiting for one) adopts. Each
//! keeper workspace's quota is admitted by the [`TmpfsBudget`] first
//! (`SANDBOX_DISK_TOTAL`), and given back when the workspace is removed.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::{SandboxMode, Settings};
#[cfg(target_os = "linux")]
use crate::sandbox::linux::keeper::Keeper;
use crate::sandbox::linux::world::{HostLayout, WorkspaceSource};
use crate::sandbox::tmpfs_budget::{Admission, TmpfsBudget};
use crate::worker::helper::RESPONSE_FD;
use crate::worker::policy::{JoinFds, RunAs, SessionPaths};
#[cfg(not(target_os = "linux"))]
use no_keeper::Keeper;

/// Every workspace of one server instance.
pub struct WorkspaceStore {
    keeper: Option<Keeper>,
    /// `<instance>/ws`: the keeper's stage, or the parent of host workspaces.
    base: PathBuf,
    /// `<instance>/root`: the empty directory each world's root is mounted on.
    root_mount: PathBuf,
    disk_limit_bytes: u64,
    /// What the keeper's workspaces may commit together.
    budget: TmpfsBudget,
    host: HostLayout,
}

/// Why a workspace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The sessions' tmpfs quotas together would pass `SANDBOX_DISK_TOTAL`.
    #[error("{0}")]
    Budget(String),
    /// The keeper or the file system refused.
    #[error("{0}")]
    Failed(String),
}

/// One workspace, owned by the session that adopted it.
#[derive(Debug)]
pub struct Workspace {
    pub id: String,
    /// Where the server reads it.
    pub paths: SessionPaths,
    /// What the worker's world binds.
    pub source: WorkspaceSource,
    /// The keeper's descriptor of the tmpfs's `workspace/` (the server reads through it;
    /// `paths.workspace` is `/proc/self/fd/N` of it).
    _dir: Option<OwnedFd>,
    /// Its tmpfs quota, when the keeper holds it (`SANDBOX_DISK_LIMIT`, or less when the
    /// budget was short).
    pub quota_bytes: Option<u64>,
    /// What every result of its session says about it (a quota smaller than asked).
    pub notice: Option<String>,
}

impl WorkspaceStore {
    /// Prepares the store under `instance_dir` and starts the keeper unless the sandbox
    /// is off. A keeper that cannot start (no user namespaces) leaves host directories,
    /// and the returned warning says why; every worker reports the missing quota.
    pub fn open(
        settings: &Settings,
        instance_dir: &Path,
        spawn: impl FnOnce(std::process::Command) -> std::io::Result<std::process::Child>,
    ) -> std::io::Result<(WorkspaceStore, Option<String>)> {
        let base = instance_dir.join("ws");
        let root_mount = instance_dir.join("root");
        for (dir, mode) in [(&base, 0o711), (&root_mount, 0o755)] {
            std::fs::DirBuilder::new().mode(mode).create(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
        }
        let (keeper, warning) = if settings.host_sandbox == SandboxMode::Off {
            (None, None)
        } else {
            match Keeper::start(&base, spawn) {
                Ok(k) => (Some(k), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "{e}; workspaces are directories on the host's disk, without a quota"
                    )),
                ),
            }
        };
        Ok((
            WorkspaceStore {
                keeper,
                base,
                root_mount,
                disk_limit_bytes: settings.disk_limit_bytes,
                // Warm workers hold workspaces too, and the pool refills as sessions
                // take them: the floor is held back for both.
                budget: TmpfsBudget::new(
                    settings.disk_total_bytes,
                    settings.max_sessions.saturating_add(settings.warm_workers),
                ),
                host: HostLayout::probe(),
            },
            warning,
        ))
    }

    pub fn host_layout(&self) -> &HostLayout {
        &self.host
    }

    pub fn root_mount(&self) -> &Path {
        &self.root_mount
    }

    /// Whether workspaces are the keeper's size-capped tmpfs.
    pub fn has_quota(&self) -> bool {
        self.keeper.is_some()
    }

    /// The keeper's process id, when one runs.
    pub fn keeper_pid(&self) -> Option<u32> {
        self.keeper.as_ref().map(Keeper::pid)
    }

    /// A new, empty workspace owned by `run_as` (or the server's own uid).
    ///
    /// # Errors
    /// [`StoreError::Budget`] when not even the smallest quota fits in
    /// `SANDBOX_DISK_TOTAL`; else the keeper's or the file system's refusal.
    pub fn create(&self, run_as: Option<RunAs>) -> Result<Workspace, StoreError> {
        let id = format!("w{}", crate::hex(&crate::random_bytes::<6>()));
        let dir = self.base.join(&id);
        if let Some(keeper) = &self.keeper {
            let (quota, notice) = self.admit()?;
            let fd = keeper.create(&id, run_as, quota).map_err(|e| {
                self.budget.release(quota);
                StoreError::Failed(e.to_string())
            })?;
            return Ok(Workspace {
                paths: SessionPaths {
                    workspace: PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
                },
                source: WorkspaceSource::Keeper { dir },
                id,
                _dir: Some(fd),
                quota_bytes: Some(quota),
                notice,
            });
        }
        let (workspace, tmp) = (dir.join("workspace"), dir.join("tmp"));
        create_host_dirs(&dir, &[&workspace, &tmp], run_as)
            .map_err(|e| StoreError::Failed(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Workspace {
            paths: SessionPaths {
                workspace: workspace.clone(),
            },
            source: WorkspaceSource::HostDirs { workspace, tmp },
            id,
            _dir: None,
            quota_bytes: None,
            notice: None,
        })
    }

    /// The quota a new keeper workspace gets from the budget, and what its session's
    /// results say when it is smaller than `SANDBOX_DISK_LIMIT`.
    fn admit(&self) -> Result<(u64, Option<String>), StoreError> {
        let mib = |b: u64| b >> 20;
        let (committed, held) = self.budget.committed();
        match self.budget.reserve(self.disk_limit_bytes) {
            Admission::Full(q) => Ok((q, None)),
            Admission::Shrunk(q) => Ok((
                q,
                Some(format!(
                    "this session's workspace quota is {} MiB, not SANDBOX_DISK_LIMIT ({} \
                     MiB): when it opened, {held} open workspaces had committed {} MiB of \
                     SANDBOX_DISK_TOTAL ({} MiB) to their tmpfs quotas (RAM), with room held \
                     back for the sessions SANDBOX_MAX_SESSIONS still allows",
                    mib(q),
                    mib(self.disk_limit_bytes),
                    mib(committed),
                    mib(self.budget.total())
                )),
            )),
            Admission::Refused { room } => Err(StoreError::Budget(format!(
                "the {held} open workspaces have committed {} MiB of SANDBOX_DISK_TOTAL ({} \
                 MiB) to their workspace and /tmp tmpfs quotas (RAM, held while a session is \
                 open, even after its worker stopped); the {} MiB left are less than the \
                 smallest workspace with its /tmp ({} MiB). Nothing was started. Close \
                 sessions you no longer need (reset_session with keep_files: false), or \
                 lower SANDBOX_DISK_LIMIT, or raise SANDBOX_DISK_TOTAL if this machine has \
                 the memory",
                mib(committed),
                mib(self.budget.total()),
                mib(room),
                mib(crate::sandbox::tmpfs_budget::commitment(
                    self.disk_limit_bytes
                        .min(crate::sandbox::tmpfs_budget::MIN_WORKSPACE)
                ))
            ))),
        }
    }

    /// Lets `workspace` grow by at most `bytes_left` from what it holds now (`None`: back
    /// to its quota). `false` when its size cannot be set (host directories).
    ///
    /// # Errors
    /// The workspace's usage could not be read, or the keeper refused.
    pub fn limit_growth(
        &self,
        workspace: &Workspace,
        bytes_left: Option<u64>,
    ) -> Result<bool, String> {
        let (Some(keeper), Some(quota)) = (&self.keeper, workspace.quota_bytes) else {
            return Ok(false);
        };
        let size = match bytes_left {
            None => quota,
            Some(left) => {
                let used = crate::caps::used_bytes(&workspace.paths.workspace)
                    .map_err(|e| format!("reading the workspace's usage: {e}"))?;
                crate::caps::narrowed_size(quota, used, left)
            }
        };
        keeper
            .resize(&workspace.id, size)
            .map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// Deletes a workspace and everything in it (the keeper's tmpfs is detached at
    /// once; its memory is freed when the last descriptor and worker holding it are gone).
    ///
    /// # Errors
    /// As [`WorkspaceStore::create`].
    pub fn remove(&self, workspace: &Workspace) -> Result<(), String> {
        match &self.keeper {
            Some(keeper) => {
                keeper.remove(&workspace.id).map_err(|e| e.to_string())?;
                // Unmounted (detached): its memory goes once the last worker holding it
                // is gone, which a removed session's is.
                if let Some(quota) = workspace.quota_bytes {
                    self.budget.release(quota);
                }
                Ok(())
            }
            None => {
                // Iterative and bounded: a 100,000-deep nest the code left must not
                // overflow the server's stack or run it out of descriptors.
                let dir = self.base.join(&workspace.id);
                crate::workspace::remove_tree(&dir).map_err(|e| e.to_string())
            }
        }
    }

    /// Stops the keeper: every workspace tmpfs goes with its namespace.
    pub fn shutdown(&self) {
        if let Some(keeper) = &self.keeper {
            keeper.stop();
        }
    }

    /// The keeper's namespaces, at the descriptor numbers a worker finds them, and the
    /// descriptors to pass there.
    pub fn join(&self) -> (Option<JoinFds>, Vec<BorrowedFd<'_>>) {
        let Some(keeper) = &self.keeper else {
            return (None, Vec::new());
        };
        let ns = keeper.namespaces();
        let first = RESPONSE_FD + 1;
        let mut fds = Vec::new();
        let user = ns.user.map(|fd| {
            fds.push(fd);
            first
        });
        fds.push(ns.mount);
        let mount = first + i32::from(user.is_some());
        (Some(JoinFds { user, mount }), fds)
    }
}

fn create_host_dirs(dir: &Path, subs: &[&Path], run_as: Option<RunAs>) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(0o711).create(dir)?;
    for sub in subs {
        std::fs::DirBuilder::new().mode(0o700).create(sub)?;
        if let Some(run_as) = run_as {
            std::os::unix::fs::chown(sub, Some(run_as.uid), Some(run_as.gid))?;
        }
        std::fs::set_permissions(sub, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Outside Linux there is no workspace keeper (it needs mount namespaces): the store
/// keeps host directories, and this type, which has no values, stands in for it.
#[cfg(not(target_os = "linux"))]
mod no_keeper {
    use std::os::fd::{BorrowedFd, OwnedFd};
    use std::path::Path;

    use crate::worker::policy::RunAs;

    pub enum Keeper {}

    pub struct JoinNamespaces<'a> {
        pub user: Option<BorrowedFd<'a>>,
        pub mount: BorrowedFd<'a>,
    }

    impl Keeper {
        pub fn start(
            _stage: &Path,
            _spawn: impl FnOnce(std::process::Command) -> std::io::Result<std::process::Child>,
        ) -> Result<Keeper, String> {
            Err(format!(
                "{} has no mount namespaces for the workspace keeper",
                std::env::consts::OS
            ))
        }

        pub fn pid(&self) -> u32 {
            match *self {}
        }

        pub fn stop(&self) {
            match *self {}
        }

        pub fn namespaces(&self) -> JoinNamespaces<'_> {
            match *self {}
        }

        pub fn create(
            &self,
            _id: &str,
            _owner: Option<RunAs>,
            _size: u64,
        ) -> Result<OwnedFd, String> {
            match *self {}
        }

        pub fn remove(&self, _id: &str) -> Result<(), String> {
            match *self {}
        }

        pub fn resize(&self, _id: &str, _size: u64) -> Result<(), String> {
            match *self {}
        }
    }
}
