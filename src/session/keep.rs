//! Keeping a closing session's workspace (`SANDBOX_KEEP_WORKSPACES`): a copy of it is
//! made under `<data dir>/kept/<instance>/` before the workspace itself is deleted (a
//! workspace may be a tmpfs that exists only in the workspace keeper's namespace, so it
//! cannot be moved).
//!
//! The copy lands on the data directory's real disk, which the audit log shares, so it
//! is written at its real size and only when it fits:
//! - files are copied by their data extents (`SEEK_DATA`/`SEEK_HOLE`): a sparse file
//!   stays sparse, so a file that cost the quota nothing costs the disk nothing;
//! - what is copied never passes the session's quota, whatever the code did (hard links
//!   to one big file count once per name here, and are cut off at the quota);
//! - the data directory's free space is checked first ([`space_needed`]): a workspace
//!   that would leave less than [`reserve_for`] free is not kept, and the log and the
//!   audit log say why. The reserve is the audit log's: its appends must never find the
//!   disk full. The space is looked at again as the copy goes, and a copy that would eat
//!   into the reserve (something else filled the disk meanwhile) is removed.
//!
//! The session's worker is already dead, so nothing changes the tree while it is copied.
//! It was still written by sandboxed code: the walk never follows a symbolic link
//! (links are copied as links), skips anything but directories, regular files and links
//! (a FIFO would block the copy), and is iterative and bounded in depth and entries, so
//! no tree can exhaust the server's stack or hold it forever.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Deepest directory copied.
const MAX_DEPTH: usize = 256;
/// Most entries copied.
const MAX_ENTRIES: usize = 100_000;
/// What the data directory's file system keeps free at least, for the audit log: two of
/// its segments.
pub const AUDIT_RESERVE: u64 = 2 * crate::audit::SEGMENT_BYTES;
/// What one entry costs on the destination besides its data (a block).
const ENTRY_COST: u64 = 4096;
/// How often (bytes copied) the free space is looked at again.
const RECHECK_EVERY: u64 = 16 << 20;

/// The most a kept copy leaves free for the audit log, however large the disk: the log
/// needs a few segments, and a big shared disk with a few GiB free must still keep a
/// small workspace.
const RESERVE_CAP: u64 = 1 << 30;

/// The free space a kept copy must leave on a file system of `total` bytes: the audit
/// log's reserve, or a twentieth of the file system when that is more (as ext4 keeps
/// for root), but never more than [`RESERVE_CAP`]. Pure.
pub fn reserve_for(total: u64) -> u64 {
    AUDIT_RESERVE.max((total / 20).min(RESERVE_CAP))
}

/// What a copy of `data` bytes in `entries` entries takes on the destination, at most
/// `quota` of data. Pure.
pub fn space_needed(data: u64, entries: u64, quota: u64) -> u64 {
    data.min(quota)
        .saturating_add(entries.saturating_mul(ENTRY_COST))
}

/// A kept copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub to: PathBuf,
    /// Data bytes written.
    pub bytes: u64,
    pub entries: usize,
    /// Entries that could not be read or lay past a bound.
    pub skipped: usize,
}

/// One entry of the tree, parents before children.
struct Entry {
    source: PathBuf,
    target: PathBuf,
    kind: Kind,
}

enum Kind {
    Dir,
    /// A regular file with this many bytes of data (allocated, not its apparent size).
    File(u64),
    Link,
}

/// Copies the tree at `from` to the new directory `to` (its parent is made, mode 0700),
/// at its real size and at most `quota` bytes of data, if the data directory can take
/// it with `reserve(size of its file system)` bytes to spare: [`reserve_for`] in the
/// server (tests pin it, so they do not depend on the machine's disk).
///
/// # Errors
/// Why nothing was kept, as a sentence (no room, or `to` could not be made); a copy
/// begun and then stopped is removed.
pub fn copy_workspace(
    from: &Path,
    to: &Path,
    quota: u64,
    reserve: fn(u64) -> u64,
) -> Result<Kept, String> {
    let parent = to.parent().unwrap_or(to);
    crate::os::create_dir(parent, 0o700, true)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let (entries, mut skipped) = list(from, to);
    let data: u64 = entries
        .iter()
        .map(|e| match e.kind {
            Kind::File(bytes) => bytes,
            _ => 0,
        })
        .sum();
    let need = space_needed(data, entries.len() as u64 + 1, quota);
    let (free, total) = free_space(parent)?;
    let reserve = reserve(total);
    if free < need.saturating_add(reserve) {
        return Err(format!(
            "not kept: its copy takes {} MiB and {} has {} MiB free, of which {} MiB stay \
             free for the audit log",
            need.div_ceil(1 << 20),
            parent.display(),
            free >> 20,
            reserve.div_ceil(1 << 20)
        ));
    }
    make_dir(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut copier = Copier {
        left: quota,
        since_check: 0,
        parent,
        reserve,
    };
    let mut done = 0usize;
    for entry in &entries {
        match copier.copy(entry) {
            Ok(()) => done += 1,
            Err(Stop::Skip) => skipped += 1,
            Err(Stop::Abort(why)) => {
                let _ = crate::workspace::remove_tree(to);
                return Err(format!("not kept: {why}; the partial copy was removed"));
            }
        }
    }
    Ok(Kept {
        to: to.to_path_buf(),
        bytes: quota - copier.left,
        entries: done,
        skipped,
    })
}

/// Every entry under `from` (bounded), with where it goes under `to`, and how many
/// were skipped.
fn list(from: &Path, to: &Path) -> (Vec<Entry>, usize) {
    let mut out = Vec::new();
    let mut skipped = 0usize;
    let mut stack: Vec<(PathBuf, PathBuf, usize)> = vec![(from.to_path_buf(), to.to_path_buf(), 0)];
    while let Some((src, dst, depth)) = stack.pop() {
        let Ok(dir) = std::fs::read_dir(&src) else {
            skipped += 1;
            continue;
        };
        for entry in dir.flatten() {
            let (source, target) = (entry.path(), dst.join(entry.file_name()));
            let Ok(meta) = std::fs::symlink_metadata(&source) else {
                skipped += 1;
                continue;
            };
            let kind = meta.file_type();
            let what = if out.len() >= MAX_ENTRIES {
                None
            } else if kind.is_dir() && depth < MAX_DEPTH {
                stack.push((source.clone(), target.clone(), depth + 1));
                Some(Kind::Dir)
            } else if kind.is_file() {
                Some(Kind::File(data_bytes(&meta)))
            } else if kind.is_symlink() {
                Some(Kind::Link)
            } else {
                None
            };
            match what {
                Some(kind) => out.push(Entry {
                    source,
                    target,
                    kind,
                }),
                None => skipped += 1,
            }
        }
    }
    (out, skipped)
}

/// The bytes of data a file really holds: its allocated blocks, never more than its size
/// rounded up to a block.
fn data_bytes(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.blocks()
            .saturating_mul(512)
            .min(meta.len().next_multiple_of(ENTRY_COST))
    }
    #[cfg(not(unix))]
    {
        meta.len()
    }
}

/// Free bytes (for unprivileged writers) and total bytes of the file system of `path`.
fn free_space(path: &Path) -> Result<(u64, u64), String> {
    #[cfg(unix)]
    {
        let st = rustix::fs::statvfs(path)
            .map_err(|e| format!("not kept: statvfs {}: {e}", path.display()))?;
        Ok((
            st.f_bavail.saturating_mul(st.f_frsize),
            st.f_blocks.saturating_mul(st.f_frsize),
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok((u64::MAX, u64::MAX))
    }
}

/// Why one entry was not copied.
enum Stop {
    /// Unreadable, or past the quota: skipped and counted.
    Skip,
    /// The data directory is about to run into the reserve.
    Abort(String),
}

struct Copier<'a> {
    /// Data bytes the quota still allows.
    left: u64,
    since_check: u64,
    parent: &'a Path,
    reserve: u64,
}

impl Copier<'_> {
    fn copy(&mut self, entry: &Entry) -> Result<(), Stop> {
        match entry.kind {
            Kind::Dir => make_dir(&entry.target).map_err(|_| Stop::Skip),
            Kind::Link => std::fs::read_link(&entry.source)
                .and_then(|link| copy_link(&link, &entry.target))
                .map_err(|_| Stop::Skip),
            Kind::File(_) => self.copy_file(&entry.source, &entry.target),
        }
    }

    /// Copies the data extents of `source` into a new file `target` of the same length
    /// (the holes stay holes).
    fn copy_file(&mut self, source: &Path, target: &Path) -> Result<(), Stop> {
        let mut from = File::open(source).map_err(|_| Stop::Skip)?;
        let len = from.metadata().map_err(|_| Stop::Skip)?.len();
        let mut to = create_file(target).map_err(|_| Stop::Skip)?;
        let mut at = 0u64;
        while at < len {
            let Some((start, end)) = next_extent(&from, at, len) else {
                break;
            };
            let size = end - start;
            if size > self.left {
                drop(to);
                let _ = std::fs::remove_file(target);
                return Err(Stop::Skip);
            }
            self.check_space(size)?;
            from.seek(SeekFrom::Start(start)).map_err(|_| Stop::Skip)?;
            to.seek(SeekFrom::Start(start)).map_err(|_| Stop::Skip)?;
            let copied = std::io::copy(&mut (&mut from).take(size), &mut to)
                .map_err(|e| Stop::Abort(format!("writing {}: {e}", target.display())))?;
            self.left -= copied;
            at = end;
        }
        to.set_len(len)
            .and_then(|()| to.flush())
            .map_err(|e| Stop::Abort(format!("writing {}: {e}", target.display())))
    }

    /// Before writing `size` more bytes: every [`RECHECK_EVERY`], the data directory
    /// must still have them and the reserve free.
    fn check_space(&mut self, size: u64) -> Result<(), Stop> {
        self.since_check += size;
        if self.since_check < RECHECK_EVERY {
            return Ok(());
        }
        self.since_check = 0;
        let (free, _) = free_space(self.parent).map_err(Stop::Abort)?;
        if free
            < size
                .saturating_add(RECHECK_EVERY)
                .saturating_add(self.reserve)
        {
            return Err(Stop::Abort(format!(
                "{} has {} MiB free, and {} MiB stay free for the audit log",
                self.parent.display(),
                free >> 20,
                self.reserve >> 20
            )));
        }
        Ok(())
    }
}

/// The next data extent of `file` at or after `at` (`[start, end)`), or `None` past the
/// last one. Where the file system cannot say, the rest of the file is one extent.
fn next_extent(file: &File, at: u64, len: u64) -> Option<(u64, u64)> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::{SeekFrom as Whence, seek};
        let start = match seek(file, Whence::Data(at)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => return None,
            Err(_) => at,
        };
        let end = seek(file, Whence::Hole(start)).unwrap_or(len).min(len);
        (start < end).then_some((start, end))
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = file;
        (at < len).then_some((at, len))
    }
}

fn create_file(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    crate::os::create_dir(path, 0o700, false)?;
    crate::os::set_mode(path, 0o700)
}

/// A link copied as a link (Windows: links are not kept; they need privileges there).
fn copy_link(link: &Path, target: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(link, target)
    }
    #[cfg(not(unix))]
    {
        let _ = (link, target);
        Err(std::io::Error::other("links are not kept on this system"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// The copies here are small: they must not depend on how full the test machine's
    /// disk is.
    const NO_RESERVE: fn(u64) -> u64 = |_| 0;

    #[test]
    fn the_reserve_and_the_space_a_copy_needs() {
        assert_eq!(reserve_for(0), 32 * MIB);
        assert_eq!(reserve_for(100 * MIB), 32 * MIB);
        assert_eq!(
            reserve_for(3 << 30),
            (3 << 30) / 20,
            "a 3 GiB disk keeps 153 MiB"
        );
        assert_eq!(
            reserve_for(252 << 30),
            1 << 30,
            "a large disk keeps 1 GiB, not a twentieth"
        );
        assert_eq!(space_needed(10 * MIB, 3, 1 << 30), 10 * MIB + 3 * 4096);
        assert_eq!(
            space_needed(5 << 30, 1, 1 << 30),
            (1 << 30) + 4096,
            "never more than the quota"
        );
    }

    #[cfg(unix)]
    #[test]
    fn files_directories_and_links_are_copied_and_links_never_followed() {
        let src = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("a/b")).unwrap();
        std::fs::write(src.path().join("a/b/data.csv"), "x,y\n").unwrap();
        std::os::unix::fs::symlink("/etc", src.path().join("etc")).unwrap();
        let fifo =
            std::ffi::CString::new(src.path().join("pipe").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid, NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let to = out.path().join("kept/one");
        let kept = copy_workspace(src.path(), &to, 1 << 30, NO_RESERVE).unwrap();
        assert_eq!(kept.bytes, 4);
        assert_eq!(kept.skipped, 1, "the FIFO");
        assert_eq!(
            std::fs::read_to_string(to.join("a/b/data.csv")).unwrap(),
            "x,y\n"
        );
        let link = std::fs::symlink_metadata(to.join("etc")).unwrap();
        assert!(link.file_type().is_symlink(), "copied as a link");
        assert_eq!(
            std::fs::read_link(to.join("etc")).unwrap(),
            Path::new("/etc")
        );
        assert!(!to.join("pipe").exists(), "a FIFO is skipped, not read");
    }

    #[cfg(unix)]
    #[test]
    fn a_sparse_file_stays_sparse_and_keeps_its_length_and_data() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let src = tempfile::tempdir().unwrap();
        let f = File::create(src.path().join("sparse.bin")).unwrap();
        f.set_len(1 << 30).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"middle", 512 << 20).unwrap();
        f.write_all_at(b"tail", (1 << 30) - 4).unwrap();
        let out = tempfile::tempdir().unwrap();
        let to = out.path().join("k");
        let kept = copy_workspace(src.path(), &to, 64 * MIB, NO_RESERVE).unwrap();
        assert!(kept.bytes < MIB, "{} bytes copied", kept.bytes);
        let copy = File::open(to.join("sparse.bin")).unwrap();
        let meta = copy.metadata().unwrap();
        assert_eq!(meta.len(), 1 << 30);
        assert!(meta.blocks() * 512 < MIB, "{} blocks", meta.blocks());
        let mut buf = [0u8; 6];
        copy.read_exact_at(&mut buf, 512 << 20).unwrap();
        assert_eq!(&buf, b"middle");
        copy.read_exact_at(&mut buf[..4], (1 << 30) - 4).unwrap();
        assert_eq!(&buf[..4], b"tail");
        copy.read_exact_at(&mut buf[..4], 4096).unwrap();
        assert_eq!(&buf[..4], &[0; 4]);
    }

    #[cfg(unix)]
    #[test]
    fn never_more_data_than_the_quota_is_written() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.bin"), vec![1u8; 3 << 20]).unwrap();
        std::fs::write(src.path().join("b.bin"), vec![2u8; 3 << 20]).unwrap();
        let out = tempfile::tempdir().unwrap();
        let kept = copy_workspace(src.path(), &out.path().join("k"), 4 * MIB, NO_RESERVE).unwrap();
        assert_eq!(kept.bytes, 3 << 20, "one file fits, the other is skipped");
        assert_eq!(kept.skipped, 1);
    }

    #[test]
    fn a_copy_that_would_eat_into_the_reserve_is_refused_and_leaves_nothing() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.csv"), "x\n").unwrap();
        let out = tempfile::tempdir().unwrap();
        let to = out.path().join("k");
        let more_than_any_disk: fn(u64) -> u64 = |_| u64::MAX / 4;
        let why = copy_workspace(src.path(), &to, MIB, more_than_any_disk).unwrap_err();
        assert!(why.starts_with("not kept: its copy takes 1 MiB"), "{why}");
        assert!(why.contains("stay free for the audit log"), "{why}");
        assert!(!to.exists(), "nothing is left behind");
    }

    #[test]
    fn a_deep_tree_is_copied_to_the_bound_without_recursion() {
        let src = tempfile::tempdir().unwrap();
        let mut deep = src.path().to_path_buf();
        for _ in 0..(MAX_DEPTH + 20) {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let out = tempfile::tempdir().unwrap();
        let to = out.path().join("k");
        copy_workspace(src.path(), &to, 1 << 30, NO_RESERVE).unwrap();
        let mut copied = to.clone();
        for _ in 0..MAX_DEPTH {
            copied.push("d");
        }
        assert!(copied.is_dir());
        assert!(!copied.join("d").exists());
    }
}
