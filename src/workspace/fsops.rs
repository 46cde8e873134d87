//! File-system primitives for a workspace that hostile code controls: every path is
//! resolved beneath a directory descriptor (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`), names are raw bytes
//! (never assumed UTF-8), nothing recurses on the stack, and no walk holds a descriptor per
//! level, so a 100,000-deep nest costs neither the stack nor the descriptor table.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::EntryKind;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Longest relative path opened in one `openat2`; longer ones go a component at a time
/// (the kernel refuses paths past `PATH_MAX`).
const ONE_STEP: usize = 3072;

/// What the change report compares: a change in any of these is a modification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub kind: EntryKind,
    pub size: u64,
    pub mtime: (i64, i64),
    /// The inode change time: no `utime` can set it back, so a write hidden behind a
    /// restored mtime still shows.
    pub ctime: (i64, i64),
    pub ino: u64,
    /// Hard links: a change through one name is a change of every name.
    pub nlink: u64,
}

pub(super) fn kind_of(mode: u32) -> EntryKind {
    match FileType::from_raw_mode(mode) {
        FileType::Directory => EntryKind::Dir,
        FileType::RegularFile => EntryKind::File,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

// st_nlink is u64 on x86_64 and u32 on arm64.
#[allow(clippy::unnecessary_cast)]
fn stamp_of(st: &rustix::fs::Stat) -> Stamp {
    let kind = kind_of(st.st_mode);
    Stamp {
        kind,
        size: if kind == EntryKind::Dir {
            0
        } else {
            u64::try_from(st.st_size).unwrap_or(0)
        },
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        ino: st.st_ino,
        nlink: st.st_nlink as u64,
    }
}

/// `name` in `dir`, not following a symlink.
pub fn stat_at(dir: BorrowedFd<'_>, name: &[u8]) -> rustix::io::Result<Stamp> {
    let name = CString::new(name).map_err(|_| Errno::INVAL)?;
    rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW).map(|st| stamp_of(&st))
}

/// Opens `rel` (relative, `/`-separated raw bytes; empty for `dir` itself) beneath `dir`
/// without ever leaving it: `..`, symlinks at any component and magic links are refused.
pub fn open_beneath(dir: BorrowedFd<'_>, rel: &[u8], flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let flags = flags | OFlags::CLOEXEC | OFlags::NOCTTY;
    if rel.is_empty() {
        return rustix::fs::openat(dir, c".", flags, Mode::empty());
    }
    if rel.first() == Some(&b'/') || rel.contains(&0) {
        return Err(Errno::INVAL);
    }
    if rel.len() <= ONE_STEP {
        return rustix::fs::openat2(dir, OsStr::from_bytes(rel), flags, Mode::empty(), RESOLVE);
    }
    // Too long for one call: one component at a time, each beneath the last.
    let mut parts = rel
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .peekable();
    let mut cur = rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    while let Some(part) = parts.next() {
        let step = if parts.peek().is_some() {
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
        } else {
            flags
        };
        cur = rustix::fs::openat2(&cur, OsStr::from_bytes(part), step, Mode::empty(), RESOLVE)?;
    }
    Ok(cur)
}

/// Opens a directory beneath `dir` for listing.
pub fn open_dir(dir: BorrowedFd<'_>, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
    open_beneath(dir, rel, OFlags::RDONLY | OFlags::DIRECTORY)
}

/// The entries of an open directory (without `.` and `..`): raw names, and whether each
/// is a directory (from `d_type`, or `lstat` where the file system does not say).
pub fn list(dir: BorrowedFd<'_>) -> rustix::io::Result<Vec<(Vec<u8>, bool)>> {
    let mut out = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => stat_at(dir, name).is_ok_and(|s| s.kind == EntryKind::Dir),
            _ => false,
        };
        out.push((name.to_vec(), is_dir));
    }
    Ok(out)
}

#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("cannot remove {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} changed while it was being removed (a directory was moved); stopped rather than delete anything outside it"
    )]
    Moved { path: String },
}

/// One directory level of a removal: its name in its parent, its identity, and the
/// subdirectories still to empty.
struct Level {
    name: Option<Vec<u8>>,
    id: (u64, u64),
    pending: Vec<Vec<u8>>,
}

fn identity(fd: BorrowedFd<'_>) -> rustix::io::Result<(u64, u64)> {
    rustix::fs::fstat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// Unlinks every non-directory in `dir` and returns the subdirectories' names.
fn empty_files(dir: BorrowedFd<'_>) -> rustix::io::Result<Vec<Vec<u8>>> {
    let mut subdirs = Vec::new();
    for (name, is_dir) in list(dir)? {
        if is_dir {
            subdirs.push(name);
            continue;
        }
        let c = CString::new(name).map_err(|_| Errno::INVAL)?;
        match rustix::fs::unlinkat(dir, &c, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::ISDIR) => subdirs.push(c.into_bytes()),
            Err(e) => return Err(e),
        }
    }
    Ok(subdirs)
}

/// Removes `path` and everything beneath it: iteratively (no recursion, whatever the
/// depth), with at most two descriptors open at once (it climbs back through `..`,
/// checking each parent is the directory it came from), never following a symlink. A
/// missing `path` is not an error.
pub fn remove_tree(path: &Path) -> Result<(), RemoveError> {
    let shown = path.display().to_string();
    let io = |e: Errno| RemoveError::Io {
        path: shown.clone(),
        source: e.into(),
    };
    let mut cur = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(Errno::NOTDIR) | Err(Errno::LOOP) => {
            return std::fs::remove_file(path).map_err(|source| RemoveError::Io {
                path: shown.clone(),
                source,
            });
        }
        Err(e) => return Err(io(e)),
    };
    let mut levels = vec![Level {
        name: None,
        id: identity(cur.as_fd()).map_err(io)?,
        pending: empty_files(cur.as_fd()).map_err(io)?,
    }];
    while let Some(top) = levels.last_mut() {
        if let Some(child) = top.pending.pop() {
            let c = CString::new(child.clone()).map_err(|_| io(Errno::INVAL))?;
            match rustix::fs::openat(
                &cur,
                &c,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => {
                    let pending = empty_files(fd.as_fd()).map_err(io)?;
                    levels.push(Level {
                        name: Some(child),
                        id: identity(fd.as_fd()).map_err(io)?,
                        pending,
                    });
                    cur = fd;
                }
                Err(Errno::NOENT) => {}
                // It is no longer a directory: unlink whatever it is now.
                Err(Errno::NOTDIR) | Err(Errno::LOOP) => {
                    match rustix::fs::unlinkat(&cur, &c, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(io(e)),
                    }
                }
                Err(e) => return Err(io(e)),
            }
            continue;
        }
        let done = levels.pop();
        let Some(Level {
            name: Some(name), ..
        }) = done
        else {
            break; // the top directory is empty
        };
        let parent = rustix::fs::openat(
            &cur,
            c"..",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        let expected = levels.last().map(|l| l.id);
        if Some(identity(parent.as_fd()).map_err(io)?) != expected {
            return Err(RemoveError::Moved { path: shown });
        }
        let c = CString::new(name).map_err(|_| io(Errno::INVAL))?;
        match rustix::fs::unlinkat(&parent, &c, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io(e)),
        }
        cur = parent;
    }
    drop(cur);
    match std::fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RemoveError::Io {
            path: shown,
            source,
        }),
    }
}

/// Builders the workspace's unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use std::ffi::CStr;
    use std::path::Path;

    use rustix::fs::{Mode, OFlags};

    /// A nest `depth` levels deep of directories named `d` under `root`, with the file
    /// `leaf` at the bottom; made iteratively, one descriptor at a time.
    pub(crate) fn nest(root: &Path, depth: usize, leaf: &CStr) {
        let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut cur = rustix::fs::open(root, dir, Mode::empty()).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&cur, c"d", Mode::from_raw_mode(0o755)).unwrap();
            cur = rustix::fs::openat(&cur, c"d", dir, Mode::empty()).unwrap();
        }
        let file = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC;
        rustix::fs::openat(&cur, leaf, file, Mode::from_raw_mode(0o644)).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deeper than `std::fs::remove_dir_all` survives (it overflowed the stack at about
    /// 18,000; the 100,000-deep case runs in the integration tests, on a tmpfs).
    #[test]
    fn removes_a_deep_nest_without_recursion() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        test_support::nest(&root, 25_000, c"leaf\xff");
        remove_tree(&root).unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn removal_never_follows_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/link")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/b/link2")).unwrap();
        std::fs::write(root.join("a/b/f"), "x").unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "keep"
        );
        remove_tree(&root).unwrap(); // missing: fine
    }

    #[test]
    fn wide_trees_are_removed_in_one_pass() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        for i in 0..300 {
            let d = root.join(format!("d{i}"));
            std::fs::create_dir_all(d.join("inner")).unwrap();
            std::fs::write(d.join("inner/f"), "x").unwrap();
        }
        remove_tree(&root).unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn long_paths_open_a_component_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        let name = "n".repeat(200);
        let mut rel = Vec::new();
        let mut cur = tmp.path().to_path_buf();
        for _ in 0..30 {
            cur = cur.join(&name);
            rel.extend_from_slice(name.as_bytes());
            rel.push(b'/');
        }
        std::fs::create_dir_all(&cur).unwrap_or_else(|_| {
            // create_dir_all may hit PATH_MAX itself; build it relatively instead.
            let mut fd = rustix::fs::open(
                tmp.path(),
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
            for _ in 0..30 {
                let c = CString::new(name.clone()).unwrap();
                let _ = rustix::fs::mkdirat(&fd, &c, Mode::from_raw_mode(0o755));
                fd = rustix::fs::openat(&fd, &c, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
                    .unwrap();
            }
        });
        rel.pop();
        let root = rustix::fs::open(
            tmp.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        assert!(rel.len() > 4096);
        open_dir(root.as_fd(), &rel).unwrap();
        assert!(open_dir(root.as_fd(), b"../etc").is_err());
        remove_tree(&tmp.path().join(&name)).unwrap();
    }
}

/// Every byte of `from` into `to`: in the kernel where it can, else read and write.
pub fn copy_data(from: &OwnedFd, to: &OwnedFd) -> rustix::io::Result<()> {
    loop {
        match rustix::fs::copy_file_range(from, None, to, None, 1 << 30) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(Errno::XDEV | Errno::NOSYS | Errno::INVAL | Errno::OPNOTSUPP) => break,
            Err(e) => return Err(e),
        }
    }
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = rustix::io::read(from, &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let mut done = 0;
        while done < n {
            done += rustix::io::write(to, &buf[done..n])?;
        }
    }
}
