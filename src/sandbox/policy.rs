//! The worker policy: everything the sandbox helper needs to confine one session's
//! worker, as plain data. The server builds it (pure: [`WorkerPolicy::for_session`]),
//! sends it to the helper over the worker's private request pipe, and the helper turns it
//! into Landlock rules, seccomp filters and rlimits. Nothing here touches the system.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{NetworkMode, SandboxMode, Settings};
use crate::grants::{Access, Grant, PathKind};
use crate::sandbox::python::PythonRuntime;

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
    /// Tasks (processes and threads) of the worker's uid. Only meaningful when the worker
    /// has a uid of its own; `None` otherwise, since RLIMIT_NPROC counts every process of
    /// the uid system-wide.
    pub processes: Option<u64>,
}

/// Where one session lives on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPaths {
    /// The code's working directory and HOME: the only place user files live.
    pub workspace: PathBuf,
    /// TMPDIR, kept apart from the workspace so temp files do not show up as results.
    pub tmp: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPolicy {
    pub mode: SandboxMode,
    pub network: NetworkMode,
    /// The real interpreter binary (never a shim), the only program the worker may exec.
    pub python: PathBuf,
    /// The ELF interpreter (`PT_INTERP`) that the kernel opens to start `python`.
    pub elf_interpreter: Option<PathBuf>,
    /// Directory trees the worker may read (interpreter prefix, stdlib, site-packages,
    /// shared libraries).
    pub read_only_dirs: Vec<PathBuf>,
    /// Single files the worker may read (loader cache, time zone).
    pub read_only_files: Vec<PathBuf>,
    /// Directory trees the worker may read and write, but never execute from.
    pub writable_dirs: Vec<PathBuf>,
    /// Single files the worker may read and write (write grants on a file).
    #[serde(default)]
    pub writable_files: Vec<PathBuf>,
    pub workspace: PathBuf,
    pub run_as: Option<RunAs>,
    pub limits: Limits,
    /// The complete environment of the worker (an allowlist, see [`worker_env`]).
    pub env: Vec<(String, String)>,
    /// The server's pid: the helper exits if its parent is already gone.
    pub parent_pid: i32,
}

/// System trees every CPython needs at run time: libc, libpython, extension module
/// dependencies, time zones. Missing ones are skipped by the builder.
const SYSTEM_READ_DIRS: &[&str] = &[
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/share/zoneinfo",
    "/sys/devices/system/cpu",
];

/// Single system files the runtime reads; nothing else under /etc (no passwd, no hosts).
const SYSTEM_READ_FILES: &[&str] = &["/etc/ld.so.cache", "/etc/localtime", "/dev/urandom"];

impl WorkerPolicy {
    /// Builds the policy for one session's worker. Pure: paths are taken as given.
    pub fn for_session(
        settings: &Settings,
        runtime: &PythonRuntime,
        paths: &SessionPaths,
        run_as: Option<RunAs>,
        grants: &[Grant],
        parent_pid: i32,
        inherited_env: &dyn Fn(&str) -> Option<String>,
    ) -> WorkerPolicy {
        let mut read_only_dirs: Vec<PathBuf> = SYSTEM_READ_DIRS.iter().map(PathBuf::from).collect();
        for root in &runtime.read_roots {
            if !read_only_dirs.iter().any(|d| root.starts_with(d)) {
                read_only_dirs.push(root.clone());
            }
        }
        let mut read_only_files: Vec<PathBuf> =
            SYSTEM_READ_FILES.iter().map(PathBuf::from).collect();
        let mut writable_dirs = vec![paths.workspace.clone(), paths.tmp.clone()];
        let mut writable_files = Vec::new();
        for grant in grants {
            let list = match (grant.access, grant.kind) {
                (Access::Read, PathKind::Directory) => &mut read_only_dirs,
                (Access::Read, PathKind::File) => &mut read_only_files,
                (Access::Write, PathKind::Directory) => &mut writable_dirs,
                (Access::Write, PathKind::File) => &mut writable_files,
            };
            list.push(grant.path.clone());
        }
        WorkerPolicy {
            mode: settings.host_sandbox,
            network: settings.network,
            python: runtime.executable.clone(),
            elf_interpreter: runtime.elf_interpreter.clone(),
            read_only_dirs,
            read_only_files,
            writable_dirs,
            writable_files,
            workspace: paths.workspace.clone(),
            run_as,
            limits: Limits {
                address_space_bytes: settings.mem_limit_bytes,
                cpu_seconds: 3600,
                file_size_bytes: settings.file_size_limit_bytes,
                open_files: 256,
                processes: run_as.map(|_| settings.pids_limit),
            },
            env: worker_env(paths, &runtime.executable, inherited_env),
            parent_pid,
        }
    }
}

/// Variables that pass through from the server because they are not secrets and some
/// numeric libraries need them to run correctly on this CPU.
const PASS_THROUGH_ENV: &[&str] = &["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TZ"];

/// The worker's whole environment: an allowlist, so no secret of the server's
/// environment (tokens, keys, agent sockets) can reach the code.
pub fn worker_env(
    paths: &SessionPaths,
    python: &Path,
    inherited_env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let bin_dir = python
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/usr/bin".to_string());
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), format!("{bin_dir}:/usr/bin:/bin")),
        ("HOME".into(), paths.workspace.display().to_string()),
        ("TMPDIR".into(), paths.tmp.display().to_string()),
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
/// tree and one read-only file, a workspace and a temp directory.
#[cfg(test)]
pub(crate) fn example_policy(network: NetworkMode) -> WorkerPolicy {
    WorkerPolicy {
        mode: SandboxMode::Require,
        network,
        python: PathBuf::from("/usr/bin/python3.11"),
        elf_interpreter: Some(PathBuf::from("/usr/lib64/ld-linux-x86-64.so.2")),
        read_only_dirs: vec![PathBuf::from("/usr/lib")],
        read_only_files: vec![PathBuf::from("/etc/ld.so.cache")],
        writable_dirs: vec![PathBuf::from("/w/workspace"), PathBuf::from("/w/tmp")],
        writable_files: vec![],
        workspace: PathBuf::from("/w/workspace"),
        run_as: None,
        limits: Limits {
            address_space_bytes: 2 << 30,
            cpu_seconds: 10,
            file_size_bytes: 1 << 20,
            open_files: 64,
            processes: None,
        },
        env: vec![],
        parent_pid: 1,
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

    fn paths() -> SessionPaths {
        SessionPaths {
            workspace: PathBuf::from("/data/s/a/workspace"),
            tmp: PathBuf::from("/data/s/a/tmp"),
        }
    }

    #[test]
    fn env_is_an_allowlist_that_drops_secrets() {
        let inherited = |name: &str| match name {
            "AWS_SECRET_ACCESS_KEY" | "GITHUB_TOKEN" | "SSH_AUTH_SOCK" => Some("x".to_string()),
            "OPENBLAS_CORETYPE" => Some("Haswell".to_string()),
            _ => None,
        };
        let env = worker_env(&paths(), Path::new("/usr/bin/python3.11"), &inherited);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(!names.contains(&"AWS_SECRET_ACCESS_KEY"));
        assert!(!names.contains(&"GITHUB_TOKEN"));
        assert!(!names.contains(&"SSH_AUTH_SOCK"));
        assert!(names.contains(&"OPENBLAS_CORETYPE"));
        assert!(env.contains(&("HOME".into(), "/data/s/a/workspace".into())));
        assert!(env.contains(&("TMPDIR".into(), "/data/s/a/tmp".into())));
    }

    #[test]
    fn policy_grants_write_only_to_the_session_and_reads_the_runtime() {
        let settings = Settings::from_lookup(|_| None).unwrap();
        let policy = WorkerPolicy::for_session(
            &settings,
            &runtime(),
            &paths(),
            Some(RunAs {
                uid: 7000,
                gid: 7000,
            }),
            &[],
            42,
            &|_| None,
        );
        assert_eq!(
            policy.writable_dirs,
            vec![
                PathBuf::from("/data/s/a/workspace"),
                PathBuf::from("/data/s/a/tmp")
            ]
        );
        // Already covered by /usr/lib, so not repeated; the venv is added.
        assert!(
            !policy
                .read_only_dirs
                .contains(&PathBuf::from("/usr/lib/python3.11"))
        );
        assert!(
            policy
                .read_only_dirs
                .contains(&PathBuf::from("/opt/venv/lib/python3.11/site-packages"))
        );
        assert!(!policy.read_only_dirs.iter().any(|d| d.starts_with("/etc")));
        assert!(!policy.read_only_dirs.iter().any(|d| d.starts_with("/home")));
        assert_eq!(policy.limits.processes, Some(256));
        assert_eq!(policy.limits.address_space_bytes, 2 << 30);
    }

    #[test]
    fn process_limit_is_only_set_for_a_dedicated_uid() {
        let settings = Settings::from_lookup(|_| None).unwrap();
        let policy =
            WorkerPolicy::for_session(&settings, &runtime(), &paths(), None, &[], 1, &|_| None);
        assert_eq!(policy.limits.processes, None);
    }

    #[test]
    fn grants_widen_exactly_the_granted_paths() {
        let settings = Settings::from_lookup(|_| None).unwrap();
        let grant = |path: &str, kind, access| Grant {
            path: PathBuf::from(path),
            kind,
            access,
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
        let p =
            WorkerPolicy::for_session(&settings, &runtime(), &paths(), None, &grants, 1, &|_| None);
        assert!(p.read_only_dirs.contains(&PathBuf::from("/data/in")));
        assert!(!p.writable_dirs.contains(&PathBuf::from("/data/in")));
        assert!(p.writable_dirs.contains(&PathBuf::from("/data/out")));
        assert!(
            p.read_only_files
                .contains(&PathBuf::from("/data/x.parquet"))
        );
        assert_eq!(p.writable_files, vec![PathBuf::from("/data/log.txt")]);
    }
}
