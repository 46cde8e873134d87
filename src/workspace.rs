//! Workspace bookkeeping seen from the host: which files a call created or changed.
//! The walk never follows symlinks (the code controls what is in the workspace) and is
//! bounded, so a workspace with a million files costs a bounded amount of time.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
        let Ok(root_dir) = std::fs::File::open(root) else {
            return snap;
        };
        let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::new(), 0)];
        while let Some((rel_dir, depth)) = stack.pop() {
            let dir = if rel_dir.as_os_str().is_empty() {
                root_dir.try_clone()
            } else {
                open_beneath(&root_dir, &rel_dir.to_string_lossy(), libc::O_DIRECTORY)
            };
            let Ok(dir) = dir else {
                continue;
            };
            // The descriptor's own listing: the directory that was opened, whatever the
            // path now points to.
            let Ok(read) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
                continue;
            };
            for entry in read.flatten() {
                if snap.entries.len() >= MAX_ENTRIES {
                    snap.incomplete = true;
                    return snap;
                }
                let name = entry.file_name();
                let Some(meta) = stat_nofollow(&dir, &name) else {
                    continue;
                };
                let kind = match meta.st_mode & libc::S_IFMT {
                    libc::S_IFLNK => EntryKind::Symlink,
                    libc::S_IFDIR => EntryKind::Dir,
                    libc::S_IFREG => EntryKind::File,
                    _ => EntryKind::Other,
                };
                let stamp = Stamp {
                    size: if kind == EntryKind::Dir {
                        0
                    } else {
                        u64::try_from(meta.st_size).unwrap_or(0)
                    },
                    mtime_ns: i128::from(meta.st_mtime) * 1_000_000_000
                        + i128::from(meta.st_mtime_nsec),
                    kind,
                };
                let rel = rel_dir.join(&name);
                if kind == EntryKind::Dir {
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

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_XDEV: u64 = 0x01;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

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
    let dir = std::fs::File::open(root)?;
    let file = open_beneath(&dir, relative, libc::O_NONBLOCK | libc::O_NOCTTY)?;
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

/// Opens `relative` beneath the directory `dir` for reading with `openat2`, refusing
/// `..` escapes, symlinks at any component and magic links.
fn open_beneath(
    dir: &std::fs::File,
    relative: &str,
    extra_flags: i32,
) -> std::io::Result<std::fs::File> {
    let path = std::ffi::CString::new(relative).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path".to_string())
    })?;
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | extra_flags) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    // SAFETY: openat2 reads the path and the open_how struct, both alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(std::fs::File::from(unsafe {
        OwnedFd::from_raw_fd(fd as i32)
    }))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
fn stat_nofollow(dir: &std::fs::File, name: &std::ffi::OsStr) -> Option<libc::stat> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(name.as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstatat writes one stat struct into `st`; the name is NUL-terminated.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: fstatat succeeded, so it initialised the struct.
    (rc == 0).then(|| unsafe { st.assume_init() })
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

#[cfg(test)]
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
