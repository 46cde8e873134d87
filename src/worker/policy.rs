//! The worker policy: everything the sandbox helper needs to confine one session's
//! worker, as plain data. The server builds it (pure: [`WorkerPolicy::build`]), sends
//! it to the helper over the worker's private request pipe, and the helper turns it into
//! a private world (namespaces and mounts), Landlock rules, seccomp filters and rlimits.
//! Nothing here touches the system.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{NetworkMode, SandboxMode, Settings};
use crate::grants::{Access, Grant, PathKind};
use crate::sandbox::linux::world::{
    FsView, HostLayout, ObjectId, WorkspaceSource, WorldPlan, WorldSpec,
};
use crate::worker::python::PythonRuntime;

/// A numeric identity the worker runs as when the server is root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// Resource ceilings applied as rlimits (soft = hard, except CPU).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub address_space_bytes: u64,
    /// Cumulative over the worker's life (a persistent interpreter); per-call time is the
    /// server's wall clock.
    pub cpu_seconds: u64,
    pub file_size_bytes: u64,
    pub open_files: u64,
    /// Tasks (processes and threads) per worker, as RLIMIT_NPROC. The helper sets it only
    /// where the kernel counts that worker's tasks alone (a user namespace of its own, or
    /// a uid of its own: [`crate::sandbox::rlimits::task_count`]); elsewhere it would
    /// count every process of the desktop user's uid. `None`: no such limit wanted.
    pub processes: Option<u64>,
}

/// Where the server finds one session's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPaths {
    /// Where the server reads the workspace: a host directory, or `/proc/self/fd/N` of
    /// the descriptor the workspace keeper handed over (its tmpfs exists only in the
    /// keeper's mount namespace).
    pub workspace: PathBuf,
}

/// Descriptor numbers at which the helper finds the keeper's namespaces (the server
/// passes them there at spawn, right after the two protocol pipes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinFds {
    /// The keeper's user namespace (a server that is not root).
    pub user: Option<i32>,
    pub mount: i32,
}

/// The worker's private world (see [`crate::sandbox::linux::world`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct World {
    pub plan: WorldPlan,
    /// An empty directory of the instance on which the world's root tmpfs is mounted.
    pub root_mount: PathBuf,
    /// The keeper's namespaces to join first, when the workspace is the keeper's tmpfs.
    pub join: Option<JoinFds>,
    /// The worker's environment inside the world.
    pub env: Vec<(String, String)>,
    /// The size of the session's workspace tmpfs, when the keeper holds it.
    pub quota_bytes: Option<u64>,
    /// What bounds the workspace's writes instead of a tmpfs quota (the package
    /// installer's stage), said as the enforced `disk_quota` wall.
    #[serde(default)]
    pub bounded_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPolicy {
    pub mode: SandboxMode,
    pub network: NetworkMode,
    /// The interpreter as it is executed (a venv's `bin/python`, never a shim); the
    /// same path inside the world.
    pub python: PathBuf,
    /// What the worker may touch, by host paths: Landlock's rules when there is no world
    /// (no user namespaces here, or the sandbox is off).
    pub host_view: FsView,
    /// The worker's environment when there is no world.
    pub host_env: Vec<(String, String)>,
    /// The private world; `None` only with `HOST_SANDBOX=off`.
    pub world: Option<World>,
    pub run_as: Option<RunAs>,
    pub limits: Limits,
    /// The server's pid: the helper exits if its parent is already gone.
    pub parent_pid: i32,
    /// The descriptor of the socket pair over which the world hands its proxy endpoint
    /// to the server (proxied network); `None` when the network is denied.
    pub egress_fd: Option<i32>,
    /// The descriptor of the socket pair over which the helper hands the server the
    /// listener of the journal's filter (file changes, for transactional calls); `None`:
    /// no journal.
    #[serde(default)]
    pub journal_fd: Option<i32>,
    /// The proxy's endpoint is made from outside, in the namespace the helper already
    /// runs in (a container's): the helper keeps the proxied walls without a world.
    #[serde(default)]
    pub egress_outside: bool,
    /// The kernel beneath the helper is a user-space one (gVisor's Sentry), which
    /// counts the resources of the sandbox apart from the host's and does not let some
    /// of them be set ([`crate::sandbox::rlimits::HELD_BY_SENTRY`]).
    #[serde(default)]
    pub user_space_kernel: bool,
    /// The helper already runs in a user namespace of its own that the engine made (a
    /// rootless Podman's `keep-id` container), so RLIMIT_NPROC counts this worker alone
    /// on a kernel that counts tasks per user namespace.
    #[serde(default)]
    pub own_user_namespace: bool,
}

/// System trees every CPython needs at run time when there is no world: libc,
/// libpython, extension module dependencies, time zones, matplotlib's data. Missing ones
/// are skipped by the builder.
const SYSTEM_READ_DIRS: &[&str] = &[
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/share/zoneinfo",
    "/usr/share/matplotlib",
    "/sys/devices/system/cpu",
];

/// Single system files the runtime reads; nothing else under /etc (no passwd, no hosts).
/// Debian's matplotlib reads its defaults from `/etc/matplotlibrc` and fails to import
/// without them (the host world binds the same file). `mimetypes` reads
/// `/etc/mime.types` when it exists, and fails on a file it sees but may not read (a
/// container has it; the host world does not).
const SYSTEM_READ_FILES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/matplotlibrc",
    "/etc/mime.types",
    "/dev/urandom",
];

/// Everything a worker's policy is built from.
#[derive(Clone, Copy)]
pub struct PolicyInputs<'a> {
    pub settings: &'a Settings,
    pub runtime: &'a PythonRuntime,
    pub host: &'a HostLayout,
    /// What the worker's world binds as its workspace and /tmp.
    pub source: &'a WorkspaceSource,
    /// The workspace tmpfs's own quota, when the keeper holds it (`SANDBOX_DISK_LIMIT`,
    /// or less when `SANDBOX_DISK_TOTAL` was short): /tmp is sized from it.
    pub quota_bytes: Option<u64>,
    pub run_as: Option<RunAs>,
    pub grants: &'a [Grant],
    pub parent_pid: i32,
    /// The instance's empty directory for the world's root.
    pub root_mount: &'a Path,
    pub join: Option<JoinFds>,
    /// The network the worker gets (the settings', or the package installer's own).
    pub network: NetworkMode,
    /// The session's package layer, bound read-only at [`crate::packages::MOUNT`].
    pub packages: Option<&'a Path>,
    /// The size of the world's /tmp, when not derived from the workspace quota (the
    /// package installer's: the package limit).
    pub tmp_bytes: Option<u64>,
}

impl WorkerPolicy {
    /// Builds the policy for one session's worker. Pure: paths are taken as given.
    pub fn build(
        inputs: &PolicyInputs<'_>,
        inherited_env: &dyn Fn(&str) -> Option<String>,
    ) -> WorkerPolicy {
        let settings = inputs.settings;
        let (host_workspace, host_tmp) = match inputs.source {
            WorkspaceSource::Keeper { dir } => (dir.join("workspace"), dir.join("tmp")),
            WorkspaceSource::HostDirs { workspace, tmp, .. } => (workspace.clone(), tmp.clone()),
        };
        let host_view = FsView {
            unmasked_grants: true,
            ..host_view(inputs.runtime, &host_workspace, &host_tmp, inputs.grants)
        };
        let mut host_env = worker_env(
            &host_workspace,
            &host_tmp,
            &inputs.runtime.executable,
            inherited_env,
        );
        let mut host_view = host_view;
        if let Some(layer) = inputs.packages {
            host_view.read_dirs.push(layer.to_path_buf());
            host_env.push(packages_env(layer));
        }
        let world = (settings.host_sandbox != SandboxMode::Off).then(|| {
            let plan = crate::sandbox::linux::world::plan(WorldSpec {
                host: inputs.host,
                runtime: inputs.runtime,
                workspace: inputs.source,
                grants: inputs.grants,
                packages: inputs.packages,
                tmp_bytes: inputs.tmp_bytes.unwrap_or_else(|| {
                    crate::sandbox::linux::world::tmp_bytes_for(
                        inputs.quota_bytes.unwrap_or(settings.disk_limit_bytes),
                    )
                }),
            });
            let mut env = worker_env(
                &plan.view.workspace,
                &plan.view.tmp,
                &inputs.runtime.executable,
                inherited_env,
            );
            if inputs.network.proxied() {
                env.extend(crate::egress::proxy_env());
            }
            if inputs.packages.is_some() {
                env.push(packages_env(Path::new(crate::packages::MOUNT)));
            }
            let quota_bytes = match inputs.source {
                WorkspaceSource::Keeper { .. } => {
                    Some(inputs.quota_bytes.unwrap_or(settings.disk_limit_bytes))
                }
                WorkspaceSource::HostDirs { .. } => None,
            };
            World {
                plan,
                root_mount: inputs.root_mount.to_path_buf(),
                join: inputs.join,
                env,
                quota_bytes,
                bounded_by: None,
            }
        });
        WorkerPolicy {
            mode: settings.host_sandbox,
            network: inputs.network,
            python: inputs.runtime.executable.clone(),
            host_view,
            host_env,
            world,
            run_as: inputs.run_as,
            limits: Limits {
                address_space_bytes: settings.mem_limit_bytes,
                cpu_seconds: 3600,
                file_size_bytes: settings.file_size_limit_bytes,
                open_files: 256,
                processes: Some(settings.pids_limit),
            },
            parent_pid: inputs.parent_pid,
            egress_fd: None,
            journal_fd: None,
            egress_outside: false,
            user_space_kernel: false,
            own_user_namespace: false,
        }
    }
}

/// What the worker may touch by host paths, for the fallback without a world. Grants
/// are listed with the identity they must still have. Pure.
pub fn host_view(
    runtime: &PythonRuntime,
    workspace: &Path,
    tmp: &Path,
    grants: &[Grant],
) -> FsView {
    let mut view = FsView {
        executables: vec![runtime.executable.clone()],
        read_dirs: SYSTEM_READ_DIRS.iter().map(PathBuf::from).collect(),
        read_files: SYSTEM_READ_FILES.iter().map(PathBuf::from).collect(),
        write_dirs: vec![workspace.to_path_buf(), tmp.to_path_buf()],
        write_files: vec![PathBuf::from("/dev/null")],
        workspace: workspace.to_path_buf(),
        tmp: tmp.to_path_buf(),
        checked: Vec::new(),
        unmasked_grants: false,
    };
    if let Some(loader) = &runtime.elf_interpreter {
        view.executables.push(loader.clone());
    }
    for root in &runtime.read_roots {
        if !view.read_dirs.iter().any(|d| root.starts_with(d)) {
            view.read_dirs.push(root.clone());
        }
    }
    for grant in grants {
        let list = match (grant.access, grant.kind) {
            (Access::Read, PathKind::Directory) => &mut view.read_dirs,
            (Access::Read, PathKind::File) => &mut view.read_files,
            (Access::Write, PathKind::Directory) => &mut view.write_dirs,
            (Access::Write, PathKind::File) => &mut view.write_files,
        };
        list.push(grant.path.clone());
        view.checked.push((
            grant.path.clone(),
            ObjectId {
                dev: grant.object.dev,
                ino: grant.object.ino,
            },
        ));
    }
    view
}

/// The variable that puts a package layer (its `current` generation) on the worker's
/// `sys.path`.
fn packages_env(layer: &Path) -> (String, String) {
    (
        crate::packages::ENV.to_string(),
        layer.join("current").display().to_string(),
    )
}

/// Variables that pass through from the server because they are not secrets and some
/// numeric libraries need them to run correctly on this CPU.
const PASS_THROUGH_ENV: &[&str] = &["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TZ"];

/// The worker's whole environment: an allowlist, so no secret of the server's
/// environment (tokens, keys, agent sockets) can reach the code. Caches of libraries
/// (matplotlib's font list) go to the temporary directory, not into the workspace.
pub fn worker_env(
    workspace: &Path,
    tmp: &Path,
    python: &Path,
    inherited_env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let bin_dir = python
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/usr/bin".to_string());
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), format!("{bin_dir}:/usr/bin:/bin")),
        ("HOME".into(), workspace.display().to_string()),
        ("TMPDIR".into(), tmp.display().to_string()),
        (
            "MPLCONFIGDIR".into(),
            tmp.join("matplotlib").display().to_string(),
        ),
        (
            "XDG_CACHE_HOME".into(),
            tmp.join("cache").display().to_string(),
        ),
        ("LANG".into(), "C.UTF-8".into()),
        ("LC_ALL".into(), "C.UTF-8".into()),
        ("PYTHONIOENCODING".into(), "utf-8".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("MPLBACKEND".into(), "Agg".into()),
        ("OPENBLAS_NUM_THREADS".into(), "1".into()),
        ("OMP_NUM_THREADS".into(), "1".into()),
        ("MKL_NUM_THREADS".into(), "1".into()),
        ("NUMEXPR_NUM_THREADS".into(), "1".into()),
        ("MALLOC_ARENA_MAX".into(), "2".into()),
    ];
    for name in PASS_THROUGH_ENV {
        if let Some(value) = inherited_env(name) {
            env.push(((*name).to_string(), value));
        }
    }
    env
}

/// A small, fixed policy for the builders' unit tests: the interpreter, one read-only
/// tree and one read-only file, a workspace and a temporary directory (Landlock's tests).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn example_policy(network: NetworkMode) -> WorkerPolicy {
    WorkerPolicy {
        mode: SandboxMode::Require,
        network,
        python: PathBuf::from("/usr/bin/python3.11"),
        host_view: FsView {
            executables: vec![
                PathBuf::from("/usr/bin/python3.11"),
                PathBuf::from("/usr/lib64/ld-linux-x86-64.so.2"),
            ],
            read_dirs: vec![PathBuf::from("/usr/lib")],
            read_files: vec![PathBuf::from("/etc/ld.so.cache")],
            write_dirs: vec![PathBuf::from("/w/workspace"), PathBuf::from("/w/tmp")],
            write_files: vec![PathBuf::from("/dev/null")],
            workspace: PathBuf::from("/w/workspace"),
            tmp: PathBuf::from("/w/tmp"),
            checked: vec![],
            unmasked_grants: false,
        },
        host_env: vec![],
        world: None,
        run_as: None,
        limits: Limits {
            address_space_bytes: 2 << 30,
            cpu_seconds: 10,
            file_size_bytes: 1 << 20,
            open_files: 64,
            processes: None,
        },
        parent_pid: 1,
        egress_fd: None,
        journal_fd: None,
        egress_outside: false,
        user_space_kernel: false,
        own_user_namespace: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> PythonRuntime {
        PythonRuntime {
            executable: PathBuf::from("/usr/bin/python3.11"),
            binary: PathBuf::from("/usr/bin/python3.11"),
            elf_interpreter: Some(PathBuf::from(
                "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            )),
            version: "3.11.2".into(),
            read_roots: vec![
                PathBuf::from("/usr/lib/python3.11"),
                PathBuf::from("/opt/venv/lib/python3.11/site-packages"),
            ],
        }
    }

    fn source() -> WorkspaceSource {
        WorkspaceSource::HostDirs {
            workspace: PathBuf::from("/data/s/a/workspace"),
            tmp: PathBuf::from("/data/s/a/tmp"),
        }
    }

    fn build(settings: &Settings, run_as: Option<RunAs>, grants: &[Grant]) -> WorkerPolicy {
        let source = source();
        let host = HostLayout::default();
        let runtime = runtime();
        WorkerPolicy::build(
            &PolicyInputs {
                settings,
                runtime: &runtime,
                host: &host,
                source: &source,
                quota_bytes: None,
                run_as,
                grants,
                parent_pid: 42,
                root_mount: Path::new("/data/root"),
                join: None,
                network: settings.network,
                packages: None,
                tmp_bytes: None,
            },
            &|_| None,
        )
    }

    #[test]
    fn env_is_an_allowlist_that_drops_secrets() {
        let inherited = |name: &str| match name {
            "AWS_SECRET_ACCESS_KEY" | "GITHUB_TOKEN" | "SSH_AUTH_SOCK" => Some("x".to_string()),
            "OPENBLAS_CORETYPE" => Some("Haswell".to_string()),
            _ => None,
        };
        let env = worker_env(
            Path::new("/workspace"),
            Path::new("/tmp"),
            Path::new("/usr/bin/python3.11"),
            &inherited,
        );
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(!names.contains(&"AWS_SECRET_ACCESS_KEY"));
        assert!(!names.contains(&"GITHUB_TOKEN"));
        assert!(!names.contains(&"SSH_AUTH_SOCK"));
        assert!(names.contains(&"OPENBLAS_CORETYPE"));
        assert!(env.contains(&("HOME".into(), "/workspace".into())));
        assert!(env.contains(&("TMPDIR".into(), "/tmp".into())));
        assert!(env.contains(&("MPLCONFIGDIR".into(), "/tmp/matplotlib".into())));
    }

    #[test]
    fn a_world_is_planned_unless_the_sandbox_is_off() {
        let settings = Settings::from_lookup(|_| None).unwrap();
        let policy = build(&settings, None, &[]);
        let world = policy.world.expect("a world");
        assert_eq!(world.plan.view.workspace, PathBuf::from("/workspace"));
        assert!(world.env.contains(&("HOME".into(), "/workspace".into())));
        assert!(
            policy
                .host_env
                .contains(&("HOME".into(), "/data/s/a/workspace".into()))
        );
        let off = Settings::from_lookup(|n| (n == "HOST_SANDBOX").then(|| "off".into())).unwrap();
        assert_eq!(build(&off, None, &[]).world, None);
    }

    #[test]
    fn the_fallback_view_writes_only_the_session_and_reads_the_runtime() {
        let settings = Settings::from_lookup(|_| None).unwrap();
        let policy = build(
            &settings,
            Some(RunAs {
                uid: 7000,
                gid: 7000,
            }),
            &[],
        );
        let view = &policy.host_view;
        assert_eq!(
            view.write_dirs,
            vec![
                PathBuf::from("/data/s/a/workspace"),
                PathBuf::from("/data/s/a/tmp")
            ]
        );
        // Already covered by /usr/lib, so not repeated; the venv is added.
        assert!(
            !view
                .read_dirs
                .contains(&PathBuf::from("/usr/lib/python3.11"))
        );
        assert!(
            view.read_dirs
                .contains(&PathBuf::from("/opt/venv/lib/python3.11/site-packages"))
        );
        assert!(
            view.read_dirs
                .contains(&PathBuf::from("/usr/share/matplotlib"))
        );
        assert!(!view.read_dirs.iter().any(|d| d.starts_with("/etc")));
        assert!(!view.read_dirs.iter().any(|d| d.starts_with("/home")));
        assert_eq!(policy.limits.processes, Some(256));
        assert_eq!(policy.limits.address_space_bytes, 2 << 30);
    }

    #[test]
    fn the_process_limit_is_asked_for_with_or_without_a_dedicated_uid() {
        // The helper decides where it holds (rlimits::task_count): in a world every
        // worker has a user namespace of its own, as root or not.
        let settings =
            Settings::from_lookup(|n| (n == "SANDBOX_PIDS_LIMIT").then(|| "64".into())).unwrap();
        assert_eq!(build(&settings, None, &[]).limits.processes, Some(64));
    }

    #[test]
    fn grants_widen_exactly_the_granted_paths_and_carry_their_identity() {
        let settings = Settings::from_lookup(|_| None).unwrap();
        let grant = |path: &str, kind, access| Grant {
            path: PathBuf::from(path),
            kind,
            access,
            object: crate::grants::ObjectKey { dev: 3, ino: 9 },
            pin: crate::grants::Pin::default(),
            granted_at: 0,
            expires_at: None,
            approved_by: "user".into(),
            reason: String::new(),
        };
        let grants = [
            grant("/data/in", PathKind::Directory, Access::Read),
            grant("/data/out", PathKind::Directory, Access::Write),
            grant("/data/x.parquet", PathKind::File, Access::Read),
            grant("/data/log.txt", PathKind::File, Access::Write),
        ];
        let p = build(&settings, None, &grants);
        let v = &p.host_view;
        assert!(v.read_dirs.contains(&PathBuf::from("/data/in")));
        assert!(!v.write_dirs.contains(&PathBuf::from("/data/in")));
        assert!(v.write_dirs.contains(&PathBuf::from("/data/out")));
        assert!(v.read_files.contains(&PathBuf::from("/data/x.parquet")));
        assert!(v.write_files.contains(&PathBuf::from("/data/log.txt")));
        assert_eq!(v.checked.len(), 4);
        assert_eq!(
            v.checked[0],
            (PathBuf::from("/data/in"), ObjectId { dev: 3, ino: 9 })
        );
        let world = p.world.unwrap();
        assert!(
            world
                .plan
                .view
                .write_dirs
                .contains(&PathBuf::from("/data/out"))
        );
    }
}
