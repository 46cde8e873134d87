//! The change report where there is no inotify (macOS, Windows): the same interface as
//! the Linux tracker, kept by a bounded walk after every call, compared with the walk
//! before. The walk opens every directory beneath the workspace without following a
//! symlink (one component at a time with `O_NOFOLLOW` on other Unix systems; checked
//! component by component on Windows, where no host worker runs). It never recurses and
//! never invents a deletion: a name is called deleted only when its directory was listed
//! in full and the name was not in it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Change, EntryKind, RawChange, Report};

/// Most entries tracked in one workspace; past it the report says so.
pub const MAX_TRACKED: usize = 200_000;
/// Deepest directory level tracked.
pub const MAX_DEPTH: usize = 64;

/// Nothing to share without inotify: every tracker walks its own workspace.
#[derive(Debug, Default)]
pub struct Watcher;

impl Watcher {
    pub fn new() -> Arc<Watcher> {
        Arc::new(Watcher)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    kind: EntryKind,
}

/// One walk's result.
#[derive(Debug, Default)]
struct Walk {
    entries: BTreeMap<Vec<u8>, Stamp>,
    /// Directories listed in full ("" is the root).
    listed: BTreeSet<Vec<u8>>,
    limit: Option<String>,
}

/// One workspace's tracked state.
pub struct Tracker {
    root: PathBuf,
    last: Walk,
}

impl Tracker {
    pub fn new(root: &Path, _watcher: Arc<Watcher>) -> Tracker {
        Tracker {
            root: root.to_path_buf(),
            last: walk(root),
        }
    }

    /// Every tracked regular file with its size, in path order, from `after` (exclusive).
    pub fn files_after<'a>(
        &'a self,
        after: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], u64)> + 'a {
        use std::ops::Bound;
        let start = match after {
            Some(p) => Bound::Excluded(p.to_vec()),
            None => Bound::Unbounded,
        };
        self.last
            .entries
            .range((start, Bound::Unbounded))
            .filter(|(_, s)| s.kind == EntryKind::File)
            .map(|(p, s)| (p.as_slice(), s.size))
    }

    /// Why the tracked state may not be the whole workspace.
    pub fn limit(&self) -> Option<&str> {
        self.last.limit.as_deref()
    }

    /// What changed since the last report (or since tracking began).
    pub fn report(&mut self) -> Report {
        let now = walk(&self.root);
        let mut changes = Vec::new();
        for (path, stamp) in &now.entries {
            if stamp.kind == EntryKind::Dir {
                continue;
            }
            let change = match self.last.entries.get(path) {
                None => Change::Created,
                Some(old) if old != stamp => Change::Modified,
                Some(_) => continue,
            };
            changes.push(RawChange {
                path: path.clone(),
                change,
                kind: stamp.kind,
                size: stamp.size,
            });
        }
        for (path, stamp) in &self.last.entries {
            if stamp.kind == EntryKind::Dir || now.entries.contains_key(path) {
                continue;
            }
            // Gone only if its directory was listed in full this time, or is itself gone
            // from a directory listed in full.
            if gone(&now, path) {
                changes.push(RawChange {
                    path: path.clone(),
                    change: Change::Deleted,
                    kind: stamp.kind,
                    size: 0,
                });
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        let incomplete = now.limit.clone();
        self.last = now;
        Report {
            changes,
            incomplete,
            by_scan: None,
        }
    }
}

/// Whether `path`'s absence from `now` is known: the nearest ancestor that still exists
/// was listed in full.
fn gone(now: &Walk, path: &[u8]) -> bool {
    let mut cur = path;
    loop {
        let parent = match cur.iter().rposition(|b| *b == b'/') {
            Some(i) => &cur[..i],
            None => &[][..],
        };
        if parent.is_empty() || now.entries.contains_key(parent) {
            return now.listed.contains(parent);
        }
        cur = parent;
    }
}

fn name_bytes(name: &std::ffi::OsStr) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        name.as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        name.to_string_lossy().into_owned().into_bytes()
    }
}

/// Walks `root` iteratively and bounded, through directories opened beneath it.
fn walk(root: &Path) -> Walk {
    let mut w = Walk::default();
    let Ok(root_dir) = beneath::open_root(root) else {
        return w;
    };
    let mut stack: Vec<(Vec<u8>, PathBuf, usize)> = vec![(Vec::new(), PathBuf::new(), 0)];
    while let Some((key, rel_dir, depth)) = stack.pop() {
        let Ok(entries) = beneath::list(&root_dir, &rel_dir) else {
            continue;
        };
        let mut whole = true;
        for (name, stamp) in entries {
            if w.entries.len() >= MAX_TRACKED {
                w.limit = Some(format!(
                    "more than {MAX_TRACKED} entries in the workspace: changes beyond them are not reported"
                ));
                return w;
            }
            let mut path = key.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name_bytes(&name));
            if stamp.kind == EntryKind::Dir {
                if depth + 1 < MAX_DEPTH {
                    stack.push((path.clone(), rel_dir.join(&name), depth + 1));
                } else {
                    w.limit = Some(format!(
                        "directories nested deeper than {MAX_DEPTH} levels: changes below them are not reported"
                    ));
                }
            }
            if w.entries.insert(path, stamp).is_some() {
                whole = false;
            }
        }
        if whole {
            w.listed.insert(key);
        }
    }
    w
}

#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("cannot remove {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Removes `path` and everything beneath it (the standard library's removal, which never
/// follows a symlink); a missing `path` is not an error.
pub fn remove_tree(path: &Path) -> Result<(), RemoveError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RemoveError::Io {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Opens the file `relative` (raw bytes, `/`-separated) beneath `root` for reading.
pub fn open_file(root: &Path, relative: &[u8]) -> std::io::Result<std::fs::File> {
    #[cfg(unix)]
    let rel = {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(relative))
    };
    #[cfg(not(unix))]
    let rel = PathBuf::from(
        std::str::from_utf8(relative)
            .map_err(|_| std::io::Error::other("the name is not valid Unicode"))?,
    );
    beneath::open_file(root, &rel)
}

/// Opening and listing beneath a workspace without ever following a symlink, per
/// platform: other Unix systems open one component at a time with `O_NOFOLLOW` and refuse
/// `..` and mount crossings; Windows checks each component before opening it (no host
/// worker runs there, so only a container's bind mount could race it).
mod beneath {
    use super::{EntryKind, OsString, Stamp};

    #[cfg(unix)]
    pub use self::unix::{list, open_file, open_root};
    #[cfg(not(unix))]
    pub use self::windows::{list, open_file, open_root};

    #[cfg(unix)]
    mod unix {
        use std::ffi::OsStr;
        use std::os::fd::{AsFd, OwnedFd};
        use std::os::unix::ffi::OsStrExt;
        use std::path::Path;

        use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};

        use super::{EntryKind, OsString, Stamp};

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
                opened = crate::os::open_by_components(root.as_fd(), rel, OFlags::DIRECTORY, true)?;
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
            let extra = OFlags::NONBLOCK | OFlags::NOCTTY;
            let fd = crate::os::open_by_components(root.as_fd(), rel, extra, true)?;
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
    }

    #[cfg(not(unix))]
    mod windows {
        use std::path::{Path, PathBuf};

        use super::{EntryKind, OsString, Stamp};

        pub fn open_root(root: &Path) -> std::io::Result<PathBuf> {
            if std::fs::symlink_metadata(root)?.is_dir() {
                Ok(root.to_path_buf())
            } else {
                Err(std::io::Error::other("the workspace is not a directory"))
            }
        }

        /// `rel` beneath `root`, refused if any component is a symlink or junction, a
        /// root, a prefix or `..`.
        fn checked(root: &Path, rel: &Path) -> std::io::Result<PathBuf> {
            use std::path::Component;
            let mut path = root.to_path_buf();
            for component in rel.components() {
                match component {
                    Component::Normal(name) => path.push(name),
                    Component::CurDir => continue,
                    _ => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            "the path must stay inside the workspace",
                        ));
                    }
                }
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
                .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
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
