//! The private world a worker lives in: the plan of its minimal root filesystem, as data.
//!
//! [`plan`] is pure: from the host's layout, the interpreter's read roots, the session's
//! workspace and its grants it returns every step (tmpfs root, read-only binds, the
//! workspace at [`WORKSPACE`], a private `/tmp`, a minimal `/dev`, a `/proc` of the
//! worker's own PID namespace, the grants at their own paths) and the view Landlock's
//! rules are written against. [`crate::sandbox::linux::mounts`] applies it, thinly.
//!
//! Nothing else exists in the world: no `/sys`, `/home`, `/root`, `/etc` beyond what the
//! loader, the time zone, matplotlib and TLS (the public CA certificates) read, no other
//! session. What is not in the world
//! cannot be stat'ed, watched, listed or reached through a symlink planted later (the
//! kernel resolves every path in the worker's own root).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::grants::{Access, Grant, PathKind};
use crate::worker::python::PythonRuntime;

/// Where the session's workspace is, inside every world: one fixed path, reported in
/// every result.
pub const WORKSPACE: &str = crate::workspace::IN_WORLD;
/// The worker's private temporary directory.
pub const TMP: &str = "/tmp";
/// The world's host name (its own UTS namespace): the host's name does not leak.
pub const HOSTNAME: &str = "warden";

/// Top-level entries of `/` that the runtime may need, besides `/usr`: merged-`/usr`
/// systems make them symlinks (`/lib -> usr/lib`), older ones real directories.
const TOP_LEVEL: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
/// What of `/etc` the runtime reads: the loader's cache, the time zone, Debian's
/// matplotlib defaults, and Debian's alternatives (symlinks into /usr through which
/// libraries such as BLAS are found), and the public CA certificates that TLS through
/// the egress proxy verifies origins against. None of it is secret.
const ETC_FILES: &[&str] = &["/etc/ld.so.cache", "/etc/localtime", "/etc/matplotlibrc"];
const ETC_DIRS: &[&str] = &["/etc/alternatives", "/etc/ssl/certs"];
/// Device nodes of the world's `/dev`, and whether the code may write to them.
const DEVICES: &[(&str, bool)] = &[
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/full", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
];

/// What a bind is for, which decides its mount flags (always `nosuid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BindMode {
    /// The runtime: read-only, programs and libraries may be mapped executable.
    Runtime,
    /// Read-only data: `noexec`, `nodev`.
    ReadOnly,
    /// The session's own places and write grants: read-write, `noexec`, `nodev`.
    ReadWrite,
    /// A device node: read-only mount (writes to a device are still allowed), `noexec`,
    /// and devices allowed.
    Device,
}
/// Size of the world's root and `/dev` tmpfs: they hold only mount points and links.
const SCAFFOLD_TMPFS: &str = "size=1m,nr_inodes=4096,mode=0755";

/// What one entry of `/` is on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopLevel {
    /// A symlink with this target, recreated as such in the world.
    Symlink(PathBuf),
    /// A real directory, bound read-only.
    Dir,
}

/// The host facts the plan depends on, probed once at start-up ([`HostLayout::probe`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLayout {
    /// The entries of [`TOP_LEVEL`] that exist.
    pub top_level: Vec<(PathBuf, TopLevel)>,
    /// The entries of [`ETC_FILES`] that exist.
    pub etc_files: Vec<PathBuf>,
    /// The entries of [`ETC_DIRS`] that exist.
    #[serde(default)]
    pub etc_dirs: Vec<PathBuf>,
}

impl HostLayout {
    /// Reads which top-level directories are symlinks and which `/etc` files exist.
    pub fn probe() -> HostLayout {
        let mut layout = HostLayout::default();
        for entry in TOP_LEVEL {
            let path = Path::new(entry);
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        layout
                            .top_level
                            .push((path.to_path_buf(), TopLevel::Symlink(target)));
                    }
                }
                Ok(m) if m.is_dir() => layout.top_level.push((path.to_path_buf(), TopLevel::Dir)),
                _ => {}
            }
        }
        layout.etc_files = ETC_FILES
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .collect();
        layout.etc_dirs = ETC_DIRS
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .collect();
        layout
    }
}

/// Where the session's workspace comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkspaceSource {
    /// A size-capped tmpfs the workspace keeper mounted: `dir` (a path in the keeper's
    /// mount namespace, which the worker joins) holds `workspace/`.
    Keeper { dir: PathBuf },
    /// Host directories (no keeper: namespaces are unavailable, or the sandbox is off);
    /// `tmp` is the TMPDIR of the fallback without a world.
    HostDirs { workspace: PathBuf, tmp: PathBuf },
}

/// The identity of the object a person approved: a grant is bound only if the object at
/// its path is still this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectId {
    pub dev: u64,
    pub ino: u64,
}

/// Whether a bind is a directory or a single file (its mount point differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Dir,
    File,
}

/// One step of building the world. Targets are absolute paths inside the world.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MountStep {
    /// A tmpfs with these mount options (the root itself when `target` is `/`).
    Tmpfs { target: PathBuf, options: String },
    /// A directory created in the world (parents too).
    Dir { target: PathBuf },
    /// A symlink `target -> link`.
    Symlink { target: PathBuf, link: PathBuf },
    /// A recursive bind of the host's `source` (resolved as the kernel resolves it,
    /// symlinks included: every source here is the runtime's, owned by its installer,
    /// or a directory of warden's own).
    Bind {
        source: PathBuf,
        target: PathBuf,
        kind: Kind,
        mode: BindMode,
    },
    /// A grant: `source` is opened without following any symlink, must still be the
    /// object the person approved, and exactly that object is bound, not recursively
    /// (no other file system mounted inside it comes along); inside a directory, what
    /// the never-grant rules name is covered by empty read-only mounts.
    BindGrant {
        source: PathBuf,
        kind: Kind,
        writable: bool,
        approved: ObjectId,
    },
    /// A proc filesystem of the worker's own PID namespace (`subset=pid`: processes
    /// only, none of the host's kernel tunables).
    Proc { target: PathBuf },
    /// Moves into the new root; the host's tree is detached and gone.
    PivotRoot,
    /// The root becomes read-only once everything is in place.
    RemountRootReadOnly,
}

/// What the worker may touch, as paths it sees: Landlock's rules are built from this in
/// the world and, in the fallback without namespaces, from the host's paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsView {
    /// The only programs that may be executed: the interpreter, its real binary, and the
    /// ELF loader.
    pub executables: Vec<PathBuf>,
    pub read_dirs: Vec<PathBuf>,
    pub read_files: Vec<PathBuf>,
    pub write_dirs: Vec<PathBuf>,
    pub write_files: Vec<PathBuf>,
    /// The working directory and HOME.
    pub workspace: PathBuf,
    /// TMPDIR.
    pub tmp: PathBuf,
    /// Paths that must be opened without following symlinks and still be these objects
    /// (grants, when Landlock's rules are the only wall: in the world the bind already
    /// checked them).
    #[serde(default)]
    pub checked: Vec<(PathBuf, ObjectId)>,
    /// The grants in `checked` are reached by host paths with nothing hidden in them or
    /// left out of them (the host's fallback without a world): a granted directory that
    /// holds another mount, or an entry the never-grant rules name, is not granted.
    /// (Inside a container, its mounts did both.)
    #[serde(default)]
    pub unmasked_grants: bool,
}

/// The world of one worker: how to build it, and what the code sees in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorldPlan {
    pub steps: Vec<MountStep>,
    pub view: FsView,
}

/// The inputs of [`plan`].
#[derive(Debug, Clone, Copy)]
pub struct WorldSpec<'a> {
    pub host: &'a HostLayout,
    pub runtime: &'a PythonRuntime,
    pub workspace: &'a WorkspaceSource,
    pub grants: &'a [Grant],
    /// The session's package layer, bound read-only (and executable) at
    /// [`crate::packages::MOUNT`].
    pub packages: Option<&'a Path>,
    /// The size of the worker's private /tmp.
    pub tmp_bytes: u64,
}

/// A private /tmp: a tmpfs of `bytes`, with inodes in proportion. Pure.
pub fn tmp_options(bytes: u64) -> String {
    format!(
        "size={bytes},nr_inodes={},mode=0700",
        (bytes / 8192).clamp(1024, 1 << 20)
    )
}

/// How big a worker's private /tmp is for a session quota of `disk_limit`: a quarter of
/// it, at least 16 MiB (it is RAM, lost when the worker restarts). Pure.
pub fn tmp_bytes_for(disk_limit: u64) -> u64 {
    (disk_limit / 4).max(16 << 20)
}

/// Builds the world's plan. Pure.
pub fn plan(spec: WorldSpec<'_>) -> WorldPlan {
    let steps = vec![MountStep::Tmpfs {
        target: "/".into(),
        options: SCAFFOLD_TMPFS.into(),
    }];
    let view = FsView {
        workspace: WORKSPACE.into(),
        tmp: TMP.into(),
        ..FsView::default()
    };
    let mut w = WorldPlan { steps, view };
    add_session(&mut w, &spec);
    add_runtime(&mut w, &spec);
    add_etc_and_packages(&mut w, &spec);
    add_dev(&mut w);
    add_grants(&mut w, spec.grants);
    w.steps.push(MountStep::Proc {
        target: "/proc".into(),
    });
    w.view.read_dirs.push("/proc".into());
    w.steps.push(MountStep::PivotRoot);
    w.steps.push(MountStep::RemountRootReadOnly);
    w
}

/// The session's workspace and its private /tmp.
fn add_session(w: &mut WorldPlan, spec: &WorldSpec<'_>) {
    // The session first: its workspace at one fixed path, and a private /tmp, fresh for
    // every worker (so that a runtime or a grant that lives under /tmp gets its mount
    // point in a file system nothing of the code's exists in yet, never in a directory
    // the code could have filled with symlinks).
    let workspace = match spec.workspace {
        WorkspaceSource::Keeper { dir } => dir.join("workspace"),
        WorkspaceSource::HostDirs { workspace, .. } => workspace.clone(),
    };
    w.steps.push(read_write(&workspace, WORKSPACE));
    w.steps.push(MountStep::Tmpfs {
        target: TMP.into(),
        options: tmp_options(spec.tmp_bytes),
    });
    w.view.write_dirs.push(WORKSPACE.into());
    w.view.write_dirs.push(TMP.into());
}

/// The interpreter's runtime, read-only and executable.
fn add_runtime(w: &mut WorldPlan, spec: &WorldSpec<'_>) {
    // The runtime, read-only: /usr whole, the top-level links into it, and whatever of
    // the interpreter lives elsewhere (a venv, a pyenv prefix).
    let mut bound: Vec<PathBuf> = vec!["/usr".into()];
    w.steps.push(runtime("/usr", Kind::Dir));
    w.view.read_dirs.push("/usr".into());
    for (path, what) in &spec.host.top_level {
        match what {
            TopLevel::Symlink(link) => w.steps.push(MountStep::Symlink {
                target: path.clone(),
                link: link.clone(),
            }),
            TopLevel::Dir => {
                w.steps.push(runtime(path, Kind::Dir));
                w.view.read_dirs.push(path.clone());
                bound.push(path.clone());
            }
        }
    }
    for root in &spec.runtime.read_roots {
        if !covered(&bound, root) {
            w.steps.push(runtime(root, Kind::Dir));
            w.view.read_dirs.push(root.clone());
            bound.push(root.clone());
        }
    }
    for exe in [&spec.runtime.executable, &spec.runtime.binary] {
        if !covered(&bound, exe) {
            w.steps.push(runtime(exe, Kind::File));
            bound.push(exe.clone());
        }
        if !w.view.executables.contains(exe) {
            w.view.executables.push(exe.clone());
        }
    }
    if let Some(loader) = &spec.runtime.elf_interpreter {
        w.view.executables.push(loader.clone());
    }
}

/// The few host files of /etc the runtime reads, and the session's packages.
fn add_etc_and_packages(w: &mut WorldPlan, spec: &WorldSpec<'_>) {
    for file in &spec.host.etc_files {
        w.steps.push(MountStep::Bind {
            source: file.clone(),
            target: file.clone(),
            kind: Kind::File,
            mode: BindMode::ReadOnly,
        });
        w.view.read_files.push(file.clone());
    }
    for dir in &spec.host.etc_dirs {
        w.steps.push(MountStep::Bind {
            source: dir.clone(),
            target: dir.clone(),
            kind: Kind::Dir,
            mode: BindMode::ReadOnly,
        });
        w.view.read_dirs.push(dir.clone());
    }
    // The session's installed packages: read-only, executable (C extensions are mapped
    // from there), a directory of warden's own.
    if let Some(layer) = spec.packages {
        w.steps.push(MountStep::Bind {
            source: layer.to_path_buf(),
            target: crate::packages::MOUNT.into(),
            kind: Kind::Dir,
            mode: BindMode::Runtime,
        });
        w.view.read_dirs.push(crate::packages::MOUNT.into());
    }
}

/// A minimal /dev.
fn add_dev(w: &mut WorldPlan) {
    // A minimal /dev: the host's own nodes bound onto files of a small tmpfs (a user
    // namespace cannot mknod), and the usual links to /proc/self/fd.
    w.steps.push(MountStep::Tmpfs {
        target: "/dev".into(),
        options: SCAFFOLD_TMPFS.into(),
    });
    for (dev, writable) in DEVICES {
        w.steps.push(MountStep::Bind {
            source: dev.into(),
            target: dev.into(),
            kind: Kind::File,
            mode: BindMode::Device,
        });
        if *writable {
            w.view.write_files.push(dev.into());
        } else {
            w.view.read_files.push(dev.into());
        }
    }
    for (name, link) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        w.steps.push(MountStep::Symlink {
            target: Path::new("/dev").join(name),
            link: link.into(),
        });
    }
}

/// The session's grants.
fn add_grants(w: &mut WorldPlan, grants: &[Grant]) {
    // Grants, at the paths the person was shown, parents before children so that a
    // grant inside another one lands on top of it.
    let mut grants: Vec<&Grant> = grants.iter().collect();
    grants.sort_by_key(|g| g.path.components().count());
    for grant in grants {
        let writable = grant.access == Access::Write;
        let kind = match grant.kind {
            PathKind::Directory => Kind::Dir,
            PathKind::File => Kind::File,
        };
        w.steps.push(MountStep::BindGrant {
            source: grant.path.clone(),
            kind,
            writable,
            approved: ObjectId {
                dev: grant.object.dev,
                ino: grant.object.ino,
            },
        });
        let list = match (writable, kind) {
            (false, Kind::Dir) => &mut w.view.read_dirs,
            (false, Kind::File) => &mut w.view.read_files,
            (true, Kind::Dir) => &mut w.view.write_dirs,
            (true, Kind::File) => &mut w.view.write_files,
        };
        list.push(grant.path.clone());
    }
}

fn runtime(path: impl Into<PathBuf>, kind: Kind) -> MountStep {
    let path = path.into();
    MountStep::Bind {
        source: path.clone(),
        target: path,
        kind,
        mode: BindMode::Runtime,
    }
}

fn read_write(source: &Path, target: &str) -> MountStep {
    MountStep::Bind {
        source: source.to_path_buf(),
        target: target.into(),
        kind: Kind::Dir,
        mode: BindMode::ReadWrite,
    }
}

/// Whether `path` is inside one of `trees`.
fn covered(trees: &[PathBuf], path: &Path) -> bool {
    trees.iter().any(|t| path.starts_with(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> PythonRuntime {
        PythonRuntime {
            executable: "/opt/venv/bin/python".into(),
            binary: "/usr/bin/python3.11".into(),
            elf_interpreter: Some("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2".into()),
            version: "3.11.2".into(),
            read_roots: vec![
                "/usr/lib/python3.11".into(),
                "/usr/lib/python3/dist-packages".into(),
                "/opt/venv".into(),
            ],
        }
    }

    fn merged_usr() -> HostLayout {
        HostLayout {
            top_level: vec![
                ("/bin".into(), TopLevel::Symlink("usr/bin".into())),
                ("/lib".into(), TopLevel::Symlink("usr/lib".into())),
                ("/lib64".into(), TopLevel::Symlink("usr/lib64".into())),
            ],
            etc_files: vec!["/etc/ld.so.cache".into(), "/etc/localtime".into()],
            etc_dirs: vec!["/etc/alternatives".into()],
        }
    }

    fn grant(path: &str, kind: PathKind, access: Access) -> Grant {
        Grant {
            path: path.into(),
            kind,
            access,
            object: crate::grants::ObjectKey { dev: 8, ino: 42 },
            pin: crate::grants::Pin::default(),
            granted_at: 0,
            expires_at: None,
            approved_by: "user".into(),
            reason: String::new(),
        }
    }

    fn targets(plan: &WorldPlan) -> Vec<String> {
        plan.steps
            .iter()
            .filter_map(|s| match s {
                MountStep::Bind { target, .. } => Some(target.display().to_string()),
                MountStep::BindGrant { source, .. } => Some(source.display().to_string()),
                MountStep::Tmpfs { target, .. } | MountStep::Proc { target } => {
                    Some(target.display().to_string())
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_world_holds_the_runtime_the_session_and_nothing_else() {
        let ws = WorkspaceSource::Keeper {
            dir: "/var/lib/warden/sessions/1-ab/ws/w3".into(),
        };
        let plan = plan(WorldSpec {
            host: &merged_usr(),
            runtime: &runtime(),
            workspace: &ws,
            grants: &[],
            packages: None,
            tmp_bytes: 1 << 20,
        });
        assert_eq!(
            targets(&plan),
            [
                "/",
                "/workspace",
                "/tmp",
                "/usr",
                "/opt/venv",
                "/etc/ld.so.cache",
                "/etc/localtime",
                "/etc/alternatives",
                "/dev",
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/random",
                "/dev/urandom",
                "/proc",
            ]
        );
        assert!(plan.steps.contains(&MountStep::Symlink {
            target: "/lib".into(),
            link: "usr/lib".into()
        }));
        assert!(plan.steps.contains(&MountStep::Bind {
            source: "/var/lib/warden/sessions/1-ab/ws/w3/workspace".into(),
            target: "/workspace".into(),
            kind: Kind::Dir,
            mode: BindMode::ReadWrite,
        }));
        assert!(plan.steps.contains(&MountStep::Bind {
            source: "/dev/null".into(),
            target: "/dev/null".into(),
            kind: Kind::File,
            mode: BindMode::Device,
        }));
        assert_eq!(
            plan.steps[plan.steps.len() - 2..],
            [MountStep::PivotRoot, MountStep::RemountRootReadOnly]
        );
        // Nothing of the host's private places is ever bound.
        for step in &plan.steps {
            if let MountStep::Bind { source, .. } = step {
                for private in ["/home", "/root", "/sys", "/etc/passwd", "/etc/shadow"] {
                    assert!(!source.starts_with(private), "{}", source.display());
                }
            }
        }
        assert_eq!(
            plan.view.write_dirs,
            vec![PathBuf::from("/workspace"), "/tmp".into()]
        );
        assert_eq!(
            plan.view.executables,
            vec![
                PathBuf::from("/opt/venv/bin/python"),
                "/usr/bin/python3.11".into(),
                "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2".into()
            ]
        );
        assert!(plan.view.read_dirs.contains(&"/proc".into()));
    }

    #[test]
    fn tmp_is_always_a_fresh_capped_tmpfs() {
        for ws in [
            WorkspaceSource::HostDirs {
                workspace: "/data/s/w".into(),
                tmp: "/data/s/t".into(),
            },
            WorkspaceSource::Keeper { dir: "/k/w".into() },
        ] {
            let plan = plan(WorldSpec {
                host: &merged_usr(),
                runtime: &runtime(),
                workspace: &ws,
                grants: &[],
                packages: None,
                tmp_bytes: 64 << 20,
            });
            assert!(plan.steps.contains(&MountStep::Tmpfs {
                target: "/tmp".into(),
                options: format!("size={},nr_inodes=8192,mode=0700", 64 << 20),
            }));
        }
        assert_eq!(tmp_bytes_for(1 << 30), 256 << 20);
        assert_eq!(tmp_bytes_for(8 << 20), 16 << 20);
    }

    #[test]
    fn grants_are_bound_by_identity_parents_first() {
        let ws = WorkspaceSource::Keeper { dir: "/k/w".into() };
        let grants = [
            grant("/data/in/sub", PathKind::Directory, Access::Write),
            grant("/data/in", PathKind::Directory, Access::Read),
            grant("/srv/x.csv", PathKind::File, Access::Read),
        ];
        let plan = plan(WorldSpec {
            host: &merged_usr(),
            runtime: &runtime(),
            workspace: &ws,
            grants: &grants,
            packages: None,
            tmp_bytes: 1 << 20,
        });
        let binds: Vec<(String, bool)> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                MountStep::BindGrant {
                    source, writable, ..
                } => Some((source.display().to_string(), *writable)),
                _ => None,
            })
            .collect();
        assert_eq!(
            binds,
            [
                ("/data/in".to_string(), false),
                ("/srv/x.csv".to_string(), false),
                ("/data/in/sub".to_string(), true)
            ]
        );
        assert!(plan.view.read_files.contains(&"/srv/x.csv".into()));
        assert!(plan.view.write_dirs.contains(&"/data/in/sub".into()));
    }

    #[test]
    fn a_non_merged_usr_binds_the_top_level_directories() {
        let host = HostLayout {
            top_level: vec![("/lib".into(), TopLevel::Dir)],
            etc_files: vec![],
            etc_dirs: vec![],
        };
        let runtime = PythonRuntime {
            executable: "/home/ana/.pyenv/versions/3.12.1/bin/python3.12".into(),
            binary: "/home/ana/.pyenv/versions/3.12.1/bin/python3.12".into(),
            elf_interpreter: None,
            version: "3.12.1".into(),
            read_roots: vec!["/home/ana/.pyenv/versions/3.12.1/lib".into()],
        };
        let ws = WorkspaceSource::Keeper { dir: "/k/w".into() };
        let plan = plan(WorldSpec {
            host: &host,
            runtime: &runtime,
            workspace: &ws,
            grants: &[],
            packages: None,
            tmp_bytes: 1 << 20,
        });
        let t = targets(&plan);
        assert!(t.contains(&"/lib".to_string()));
        assert!(t.contains(&"/home/ana/.pyenv/versions/3.12.1/lib".to_string()));
        // The binary is outside every bound tree: bound as a single file.
        assert!(plan.steps.contains(&MountStep::Bind {
            source: "/home/ana/.pyenv/versions/3.12.1/bin/python3.12".into(),
            target: "/home/ana/.pyenv/versions/3.12.1/bin/python3.12".into(),
            kind: Kind::File,
            mode: BindMode::Runtime,
        }));
        assert!(!t.iter().any(|p| p == "/home" || p == "/home/ana"));
    }
}
