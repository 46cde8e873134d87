//! Workspace bookkeeping seen from the host: which files a call created or changed.
//! The walk never follows symlinks (the code controls what is in the workspace) and is
//! bounded, so a workspace with a million files costs a bounded amount of time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

const MAX_ENTRIES: usize = 10_000;
const MAX_DEPTH: usize = 32;
/// Most files listed in one result.
pub const MAX_REPORTED: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    kind: EntryKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Created,
    Modified,
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileChange {
    /// Path relative to the workspace.
    pub path: String,
    pub change: Change,
    pub kind: EntryKind,
    /// Size in bytes after the call (0 when deleted).
    pub size: u64,
}

/// The state of a workspace at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    entries: BTreeMap<PathBuf, Stamp>,
    /// The walk stopped at its bound; changes beyond it are not reported.
    pub incomplete: bool,
}

impl Snapshot {
    /// Walks `root` through directory descriptors opened beneath it without following
    /// symlinks, so code that swaps a directory for a symlink mid-walk cannot make the
    /// server list anything outside the workspace.
    pub fn take(root: &Path) -> Snapshot {
        let mut snap = Snapshot::default();
        let Ok(root_dir) = beneath::open_root(root) else {
            return snap;
        };
        let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::new(), 0)];
        while let Some((rel_dir, depth)) = stack.pop() {
            // The descriptor's own listing: the directory that was opened, whatever the
            // path now points to.
            let Ok(entries) = beneath::list(&root_dir, &rel_dir) else {
                continue;
            };
            for (name, stamp) in entries {
                if snap.entries.len() >= MAX_ENTRIES {
                    snap.incomplete = true;
                    return snap;
                }
                let rel = rel_dir.join(&name);
                if stamp.kind == EntryKind::Dir {
                    if depth + 1 < MAX_DEPTH {
                        stack.push((rel.clone(), depth + 1));
                    } else {
                        snap.incomplete = true;
                    }
                }
                snap.entries.insert(rel, stamp);
            }
        }
        snap
    }

    /// Regular files, as (path relative to the workspace, size), in path order.
    pub fn files(&self) -> Vec<(String, u64)> {
        self.entries
            .iter()
            .filter(|(_, st)| st.kind == EntryKind::File)
            .map(|(p, st)| (p.to_string_lossy().into_owned(), st.size))
            .collect()
    }

    /// What changed from `self` to `after`: files and symlinks, not directories (a new
    /// directory shows through the files in it).
    pub fn changes_to(&self, after: &Snapshot) -> Vec<FileChange> {
        let mut out = Vec::new();
        for (path, stamp) in &after.entries {
            if stamp.kind == EntryKind::Dir {
                continue;
            }
            let change = match self.entries.get(path) {
                None => Change::Created,
                Some(old) if old != stamp => Change::Modified,
                Some(_) => continue,
            };
            out.push(FileChange {
                path: path.to_string_lossy().into_owned(),
                change,
                kind: stamp.kind,
                size: stamp.size,
            });
        }
        for (path, stamp) in &self.entries {
            if stamp.kind != EntryKind::Dir && !after.entries.contains_key(path) {
                out.push(FileChange {
                    path: path.to_string_lossy().into_owned(),
                    change: Change::Deleted,
                    kind: stamp.kind,
                    size: 0,
                });
            }
        }
        out.truncate(MAX_REPORTED);
        out
    }
}

/// Largest file the server reads back out of a workspace (resources, images).
pub const MAX_READ_BYTES: u64 = 10 << 20;

/// Reads `relative` inside `root` without ever leaving it: the kernel resolves the path
/// beneath `root`, refusing `..` escapes, symlinks (at any component) and magic links,
/// so code that swaps a file for a symlink after the fact gains nothing. Only regular
/// files up to `max` bytes are read.
pub fn read_beneath(root: &Path, relative: &str, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let invalid =
        |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
    if relative.is_empty() || relative.starts_with('/') || relative.contains('\0') {
        return Err(invalid("the path must be relative to the workspace"));
    }
    let file = beneath::open_file(root, Path::new(relative))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid("not a regular file"));
    }
    if meta.len() > max {
        return Err(invalid("file too large to return"));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(invalid("file too large to return"));
    }
    Ok(out)
}

/// The MIME type for a workspace file, by extension.
pub fn mime_for(path: &str) -> &'static str {
    let ext = path.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "csv" => "text/csv",
        "json" => "application/json",
        "txt" | "log" | "md" | "py" | "tsv" | "yaml" | "yml" | "toml" | "html" | "xml" => {
            "text/plain"
        }
        _ => "application/octet-stream",
    }
}

/// Opening and listing beneath a workspace without ever following a symlink, per
/// platform. Linux resolves with `openat2` (the kernel refuses `..`, symlinks at any
/// component, magic links and mount crossings); other Unix systems open one component at
/// a time with `O_NOFOLLOW` and refuse `..` and mount crossings themselves; Windows
/// checks each component before opening it (no host worker runs there, so only a
/// container's bind mount could race it).
mod beneath {
    #[cfg(unix)]
    pub use self::unix::{list, open_file, open_root};
    #[cfg(not(unix))]
    pub use self::windows::{list, open_file, open_root};

    /// The names of a plain relative path: no root, no prefix, no `..`.
    #[cfg(not(all(unix, not(target_os = "linux"))))]
    fn plain_components(rel: &std::path::Path) -> std::io::Result<Vec<&std::ffi::OsStr>> {
        use std::path::Component;
        let mut names = Vec::new();
        for component in rel.components() {
            match component {
                Component::Normal(name) => names.push(name),
                Component::CurDir => {}
                _ => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "the path must stay inside the workspace",
                    ));
                }
            }
        }
        Ok(names)
    }

    #[cfg(unix)]
    mod unix {
        use std::ffi::{OsStr, OsString};
        use std::os::fd::{AsFd, OwnedFd};
        use std::os::unix::ffi::OsStrExt;
        use std::path::Path;

        use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};

        use crate::workspace::{EntryKind, Stamp};

        pub fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            Ok(rustix::fs::open(root, flags, Mode::empty())?)
        }

        /// The entries of the directory `rel` beneath `root`, each stat'ed without
        /// following it.
        pub fn list(root: &OwnedFd, rel: &Path) -> std::io::Result<Vec<(OsString, Stamp)>> {
            let opened;
            let dir = if rel.as_os_str().is_empty() {
                root.as_fd()
            } else {
                opened = open_beneath(root, rel, OFlags::DIRECTORY)?;
                opened.as_fd()
            };
            let mut out = Vec::new();
            for entry in Dir::read_from(dir)? {
                let entry = entry?;
                let name = entry.file_name();
                if name == c"." || name == c".." {
                    continue;
                }
                if let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    out.push((OsStr::from_bytes(name.to_bytes()).to_owned(), stamp_of(&st)));
                }
            }
            Ok(out)
        }

        /// Opens the file `rel` beneath `root` for reading (never blocking on a FIFO).
        pub fn open_file(root: &Path, rel: &Path) -> std::io::Result<std::fs::File> {
            let root = open_root(root)?;
            let fd = open_beneath(&root, rel, OFlags::NONBLOCK | OFlags::NOCTTY)?;
            Ok(std::fs::File::from(fd))
        }

        // mode_t is u16 on macOS and u32 on Linux.
        #[allow(clippy::unnecessary_cast)]
        fn stamp_of(st: &Stat) -> Stamp {
            let kind = match FileType::from_raw_mode(st.st_mode as _) {
                FileType::Symlink => EntryKind::Symlink,
                FileType::Directory => EntryKind::Dir,
                FileType::RegularFile => EntryKind::File,
                _ => EntryKind::Other,
            };
            Stamp {
                size: if kind == EntryKind::Dir {
                    0
                } else {
                    u64::try_from(st.st_size).unwrap_or(0)
                },
                mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
                kind,
            }
        }

        /// `openat2` with RESOLVE_BENEATH, NO_SYMLINKS, NO_MAGICLINKS and NO_XDEV.
        #[cfg(target_os = "linux")]
        fn open_beneath(root: &OwnedFd, rel: &Path, extra: OFlags) -> std::io::Result<OwnedFd> {
            use rustix::fs::ResolveFlags;
            super::plain_components(rel)?;
            let resolve = ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV;
            let flags = OFlags::RDONLY | OFlags::CLOEXEC | extra;
            Ok(rustix::fs::openat2(
                root,
                rel,
                flags,
                Mode::empty(),
                resolve,
            )?)
        }

        /// Elsewhere: one component at a time, on the workspace's own file system.
        #[cfg(not(target_os = "linux"))]
        fn open_beneath(root: &OwnedFd, rel: &Path, extra: OFlags) -> std::io::Result<OwnedFd> {
            crate::os::open_by_components(root.as_fd(), rel, extra, true)
        }
    }

    #[cfg(not(unix))]
    mod windows {
        use std::ffi::OsString;
        use std::path::{Path, PathBuf};

        use crate::workspace::{EntryKind, Stamp};

        pub fn open_root(root: &Path) -> std::io::Result<PathBuf> {
            if std::fs::symlink_metadata(root)?.is_dir() {
                Ok(root.to_path_buf())
            } else {
                Err(std::io::Error::other("the workspace is not a directory"))
            }
        }

        /// `rel` beneath `root`, refused if any component is a symlink or junction.
        fn checked(root: &Path, rel: &Path) -> std::io::Result<PathBuf> {
            let mut path = root.to_path_buf();
            for name in super::plain_components(rel)? {
                path.push(name);
                if std::fs::symlink_metadata(&path)?.file_type().is_symlink() {
                    return Err(std::io::Error::other("a component is a symlink"));
                }
            }
            Ok(path)
        }

        pub fn list(root: &Path, rel: &Path) -> std::io::Result<Vec<(OsString, Stamp)>> {
            let mut out = Vec::new();
            for entry in std::fs::read_dir(checked(root, rel)?)? {
                let entry = entry?;
                if let Ok(meta) = std::fs::symlink_metadata(entry.path()) {
                    out.push((entry.file_name(), stamp_of(&meta)));
                }
            }
            Ok(out)
        }

        pub fn open_file(root: &Path, rel: &Path) -> std::io::Result<std::fs::File> {
            std::fs::File::open(checked(root, rel)?)
        }

        fn stamp_of(meta: &std::fs::Metadata) -> Stamp {
            let kind = if meta.file_type().is_symlink() {
                EntryKind::Symlink
            } else if meta.is_dir() {
                EntryKind::Dir
            } else if meta.is_file() {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            Stamp {
                size: if kind == EntryKind::Dir {
                    0
                } else {
                    meta.len()
                },
                mtime_ns,
                kind,
            }
        }
    }
}

/// The tests make symlinks, which need privileges on Windows.
#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn snapshot_never_descends_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("etcdir")).unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/x.txt"), "x").unwrap();
        let files = Snapshot::take(dir.path()).files();
        assert_eq!(files, vec![("real/x.txt".to_string(), 1)]);
    }

    #[test]
    fn read_beneath_refuses_every_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("ok.txt"), "inside").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/deep.csv"), "a,b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etcdir")).unwrap();
        std::os::unix::fs::symlink("ok.txt", root.join("inner_link")).unwrap();
        assert_eq!(read_beneath(root, "ok.txt", 100).unwrap(), b"inside");
        assert_eq!(read_beneath(root, "sub/deep.csv", 100).unwrap(), b"a,b");
        for bad in [
            "link.txt",
            "etcdir/passwd",
            "inner_link",
            "../../../../etc/passwd",
            "/etc/passwd",
            "sub",
            "",
        ] {
            assert!(read_beneath(root, bad, 100).is_err(), "{bad:?} was read");
        }
        assert!(read_beneath(root, "ok.txt", 3).is_err(), "size cap");
    }

    #[test]
    fn reports_created_modified_and_deleted_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "a").unwrap();
        std::fs::write(dir.path().join("gone.txt"), "a").unwrap();
        std::fs::write(dir.path().join("edit.txt"), "a").unwrap();
        let before = Snapshot::take(dir.path());
        std::fs::remove_file(dir.path().join("gone.txt")).unwrap();
        std::fs::write(dir.path().join("edit.txt"), "abc").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/new.csv"), "x,y").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let after = Snapshot::take(dir.path());
        let mut changes = before.changes_to(&after);
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        let summary: Vec<(String, Change)> =
            changes.iter().map(|c| (c.path.clone(), c.change)).collect();
        assert_eq!(
            summary,
            vec![
                ("edit.txt".to_string(), Change::Modified),
                ("gone.txt".to_string(), Change::Deleted),
                ("link".to_string(), Change::Created),
                ("sub/new.csv".to_string(), Change::Created),
            ]
        );
        let link = changes.iter().find(|c| c.path == "link").unwrap();
        assert_eq!(link.kind, EntryKind::Symlink);
    }
}
