//! The change report of a session's workspace, kept up to date incrementally: one inotify
//! instance per server watches every tracked directory of every session, and after a call
//! only the names the kernel reported are looked at again, so a warm call costs the same
//! in a workspace of ten files or a hundred thousand. A full, bounded rescan happens when
//! the kernel's event queue overflowed, when the session's tracking is by scan (below), or
//! when the tracked area hit a limit and may have room again.
//!
//! Watches are the user's, not the server's: the kernel counts every inotify watch of a
//! uid against `fs.inotify.max_user_watches`, so the user's editor, file manager and
//! build tools draw on the same allowance as every session. A session's code decides how
//! many directories its workspace has, so the watches are bounded: at most
//! [`MAX_WATCHES_PER_SESSION`] per session and, for every session together, the server's
//! share of the allowance ([`server_share`]). A session past either (or one whose watch
//! the kernel refuses) gives all its watches back and is tracked by scan: every report
//! walks its workspace, and the result says so. It is watched again once its directories
//! fit with room to spare.
//!
//! What no event announces, and how it is still seen:
//! - a write through a shared `mmap` makes no event. A file that is open (an `IN_OPEN`
//!   without its `IN_CLOSE_*` yet, as a live mapping keeps it) is looked at again on every
//!   report, and its release after the last unmap is an `IN_CLOSE_WRITE`. What shows is
//!   what its stamp shows: the kernel moves the mtime on the first write to a page after
//!   it was cleaned (or, on tmpfs, first mapped writable), not on every store, so a store
//!   to a page already written since the last report changes nothing that can be seen
//!   without reading the file.
//! - a change through one hard link is announced for that name only: every other tracked
//!   name of the same inode is looked at with it (an index by inode of the files with more
//!   than one link).
//!
//! Honesty rules: a deletion is reported only when the name was looked up and is gone, or
//! when a rescan listed its whole directory without it; never because a walk stopped
//! early. What lies beyond the limits (entries past [`MAX_TRACKED`], directories deeper
//! than [`MAX_DEPTH`]) is not tracked, and the report says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use super::fsops::{self, Stamp};
use super::{Change, EntryKind, RawChange, Report};

/// Most entries (files, directories, links) tracked per workspace. The default disk quota
/// gives a workspace about 131,000 inodes, so the limit is reached only past it.
pub const MAX_TRACKED: usize = 200_000;
/// Deepest directory level tracked (the workspace itself is level 0).
pub const MAX_DEPTH: usize = 64;
/// More touched names than this in one call: a rescan is cheaper than looking at each.
const MAX_DIRTY: usize = 50_000;
/// Most directories one session's workspace has watched (one inotify watch each). A
/// constant rather than a setting: it protects the user's own allowance, which the
/// operator already sets (`fs.inotify.max_user_watches`, shared out by [`server_share`]),
/// and an analysis workspace rarely has a tenth of it; past it the session is only
/// slower to report (a bounded walk per call), never wrong.
pub const MAX_WATCHES_PER_SESSION: usize = 4096;
/// The allowance the kernel gives when `/proc` does not say (its smallest default).
const DEFAULT_MAX_USER_WATCHES: u64 = 8192;

/// The watches every session together may hold: a quarter of the user's allowance
/// (`fs.inotify.max_user_watches`, or the kernel's smallest default when unknown), at
/// least one session's worth of a small workspace. The other three quarters stay the
/// user's other programs'. Pure.
pub fn server_share(max_user_watches: Option<u64>) -> usize {
    let max = max_user_watches.unwrap_or(DEFAULT_MAX_USER_WATCHES);
    usize::try_from(max / 4).unwrap_or(usize::MAX).max(64)
}

/// Why a watch was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Every session together holds the server's share.
    Share(usize),
    /// The kernel refused (the user's allowance is used up by other programs, or no
    /// inotify here).
    Kernel(Errno),
}

/// No `DONT_FOLLOW`: the watch is added through `/proc/self/fd/N`, a magic link that must
/// be followed to reach the open directory (with it, every watch failed with `ENOTDIR`
/// and every report was a full rescan). Following it cannot be redirected: it leads to
/// the descriptor's own directory, whatever its path has become.
const WATCH: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::OPEN)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::CLOSE_NOWRITE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::EXCL_UNLINK)
    .union(WatchFlags::ONLYDIR);

/// What the kernel said about one tracker since it last asked.
#[derive(Default)]
struct Pending {
    /// Relative paths of the names an event was about, and what the events said.
    dirty: BTreeMap<Vec<u8>, Seen>,
    /// Opens minus closes of files, by name, since the last report.
    opened: HashMap<Vec<u8>, i64>,
    overflow: bool,
}

/// What the kernel's events said about one name since the last report.
#[derive(Clone, Copy, Default)]
struct Seen {
    /// Created (or moved in) there.
    created: bool,
    /// Its content was written (`IN_MODIFY`). Needed beside the stamp: on a kernel
    /// without fine-grained timestamps (before 6.13) a write of the same size within
    /// one clock tick of the last look leaves size, mtime and ctime as they were.
    written: bool,
}

#[derive(Default)]
struct Table {
    /// Watch descriptor → (tracker, directory's relative path).
    by_wd: HashMap<i32, (u64, Vec<u8>)>,
    pending: HashMap<u64, Pending>,
    next_id: u64,
}

/// The server's one inotify instance, shared by every session's tracker (the per-user
/// limit on instances is small; on watches it is large, and shared: see the module doc).
pub struct Watcher {
    fd: Option<OwnedFd>,
    table: Mutex<Table>,
    /// The watches every tracker together may hold ([`server_share`]).
    share: usize,
}

impl Watcher {
    /// A watcher; without inotify (refused, or the limit on instances reached) every
    /// report is a bounded rescan instead.
    pub fn new() -> Arc<Watcher> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)
            .map_err(|e| tracing::warn!(error = %e, "no inotify: every workspace report rescans"))
            .ok();
        let allowance = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|t| t.trim().parse().ok());
        Arc::new(Watcher {
            fd,
            table: Mutex::new(Table::default()),
            share: server_share(allowance),
        })
    }

    /// A watcher without inotify (tests of the rescan path).
    #[cfg(test)]
    fn disabled() -> Arc<Watcher> {
        Arc::new(Watcher {
            fd: None,
            table: Mutex::new(Table::default()),
            share: 0,
        })
    }

    /// A watcher whose trackers together may hold `share` watches (tests of the share).
    #[cfg(test)]
    fn with_share(share: usize) -> Arc<Watcher> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok();
        Arc::new(Watcher {
            fd,
            table: Mutex::new(Table::default()),
            share,
        })
    }

    /// Watches held now by every tracker together.
    fn held(&self) -> usize {
        self.table.lock().map_or(usize::MAX, |t| t.by_wd.len())
    }

    /// Whether `more` watches would still fit in the server's share.
    fn has_room(&self, more: usize) -> bool {
        self.held().saturating_add(more) <= self.share
    }

    fn register(&self) -> u64 {
        let Ok(mut t) = self.table.lock() else {
            return u64::MAX;
        };
        t.next_id += 1;
        let id = t.next_id;
        t.pending.insert(id, Pending::default());
        id
    }

    /// Watches the open directory `dir` (by its descriptor, never by a path the code
    /// could redirect) as `rel` of tracker `id`.
    /// (A directory already watched under another name, after a rename, keeps its watch
    /// descriptor: the watch then belongs to the new name.)
    fn add(&self, id: u64, dir: BorrowedFd<'_>, rel: &[u8]) -> Result<i32, Refused> {
        let fd = self.fd.as_ref().ok_or(Refused::Kernel(Errno::NOSYS))?;
        let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let mut t = self
            .table
            .lock()
            .map_err(|_| Refused::Kernel(Errno::NOTRECOVERABLE))?;
        if t.by_wd.len() >= self.share {
            return Err(Refused::Share(self.share));
        }
        let wd = inotify::add_watch(fd, path, WATCH).map_err(Refused::Kernel)?;
        t.by_wd.insert(wd, (id, rel.to_vec()));
        Ok(wd)
    }

    /// Stops watching `wd` as `rel`; a watch that now belongs to another name (the
    /// directory was renamed and watched again under it) stays.
    fn remove(&self, wd: i32, rel: &[u8]) {
        let Ok(mut t) = self.table.lock() else { return };
        if t.by_wd.get(&wd).is_some_and(|(_, r)| r != rel) {
            return;
        }
        t.by_wd.remove(&wd);
        if let Some(fd) = &self.fd {
            let _ = inotify::remove_watch(fd, wd);
        }
    }

    fn unregister(&self, id: u64) {
        let wds: Vec<(i32, Vec<u8>)> = match self.table.lock() {
            Ok(mut t) => {
                t.pending.remove(&id);
                t.by_wd
                    .iter()
                    .filter(|(_, (owner, _))| *owner == id)
                    .map(|(wd, (_, rel))| (*wd, rel.clone()))
                    .collect()
            }
            Err(_) => return,
        };
        for (wd, rel) in wds {
            self.remove(wd, &rel);
        }
    }

    /// Reads every queued event and files it under its tracker.
    fn drain(&self) {
        let Some(fd) = &self.fd else { return };
        let Ok(mut t) = self.table.lock() else { return };
        let mut buf = [MaybeUninit::<u8>::uninit(); 16 << 10];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        loop {
            let event = match reader.next() {
                Ok(e) => e,
                Err(Errno::INTR) => continue,
                Err(_) => break, // WOULDBLOCK: nothing more for now
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                for p in t.pending.values_mut() {
                    p.overflow = true;
                }
                continue;
            }
            if flags.contains(ReadFlags::IGNORED) {
                t.by_wd.remove(&event.wd());
                continue;
            }
            let Some((id, dir)) = t.by_wd.get(&event.wd()).cloned() else {
                continue;
            };
            let path = match event.file_name() {
                Some(name) if !name.to_bytes().is_empty() => join(&dir, name.to_bytes()),
                _ if dir.is_empty() => continue, // the workspace itself
                _ => dir,
            };
            let created = flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO);
            let written = flags.contains(ReadFlags::MODIFY) && !flags.contains(ReadFlags::ISDIR);
            // Opens and closes of files (not of directories: listing one is no change).
            let opened = match flags {
                f if f.contains(ReadFlags::ISDIR) => 0,
                f if f.contains(ReadFlags::OPEN) => 1,
                f if f.intersects(ReadFlags::CLOSE_WRITE | ReadFlags::CLOSE_NOWRITE) => -1,
                _ => 0,
            };
            if let Some(p) = t.pending.get_mut(&id) {
                if p.dirty.len() + p.opened.len() >= MAX_DIRTY {
                    p.overflow = true;
                    continue;
                }
                if opened != 0 {
                    *p.opened.entry(path.clone()).or_default() += opened;
                }
                if flags.intersects(ReadFlags::OPEN | ReadFlags::CLOSE_NOWRITE) {
                    continue; // opening or reading a file changes nothing by itself
                }
                let seen = p.dirty.entry(path).or_default();
                seen.created |= created;
                seen.written |= written;
            }
        }
    }

    fn take(&self, id: u64) -> Pending {
        self.table
            .lock()
            .ok()
            .and_then(|mut t| t.pending.get_mut(&id).map(std::mem::take))
            .unwrap_or(Pending {
                overflow: true,
                ..Pending::default()
            })
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

fn parent_of(path: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memrchr(b'/', path) {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn depth_of(path: &[u8]) -> usize {
    if path.is_empty() {
        0
    } else {
        memchr::memchr_iter(b'/', path).count() + 1
    }
}

/// One workspace's tracked state.
pub struct Tracker {
    root: PathBuf,
    watcher: Arc<Watcher>,
    id: u64,
    entries: BTreeMap<Vec<u8>, Stamp>,
    /// Inode → its tracked names, for files with more than one link.
    links: HashMap<u64, BTreeSet<Vec<u8>>>,
    /// Files open now (opens minus closes the kernel reported): looked at on every
    /// report, since a write through a mapping of one makes no event.
    open: HashMap<Vec<u8>, i64>,
    /// Full rescans so far (tests check that a warm report makes none).
    rescans: u64,
    /// Directory → its watch.
    wds: HashMap<Vec<u8>, i32>,
    /// Directories whose every entry is tracked: only there can a name missing from a
    /// listing be called deleted, or a name not tracked before be called created.
    complete: BTreeSet<Vec<u8>>,
    /// No inotify, or the session's tracking is by scan: every report rescans.
    polling: bool,
    /// Why this session's tracking is by scan (it holds no watch then), as the result
    /// says it.
    by_scan: Option<String>,
    /// Directories the last full walk found (the workspace itself included): whether they
    /// fit in the watches again.
    dirs: usize,
    /// [`MAX_WATCHES_PER_SESSION`] (smaller in tests).
    max_watches: usize,
    /// Why the tracked state is not the whole workspace.
    limit: Option<String>,
    /// [`MAX_TRACKED`] and [`MAX_DEPTH`] (smaller in tests).
    max_tracked: usize,
    max_depth: usize,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.watcher.unregister(self.id);
    }
}

impl Tracker {
    /// Starts tracking the workspace at `root` (a directory, or `/proc/self/fd/N` of one)
    /// from what is in it now.
    pub fn new(root: &Path, watcher: Arc<Watcher>) -> Tracker {
        Tracker::with_limits(
            root,
            watcher,
            MAX_TRACKED,
            MAX_DEPTH,
            MAX_WATCHES_PER_SESSION,
        )
    }

    fn with_limits(
        root: &Path,
        watcher: Arc<Watcher>,
        max_tracked: usize,
        max_depth: usize,
        max_watches: usize,
    ) -> Tracker {
        let id = watcher.register();
        let mut t = Tracker {
            root: root.to_path_buf(),
            polling: watcher.fd.is_none(),
            by_scan: None,
            dirs: 0,
            max_watches,
            watcher,
            id,
            entries: BTreeMap::new(),
            links: HashMap::new(),
            open: HashMap::new(),
            rescans: 0,
            wds: HashMap::new(),
            complete: BTreeSet::new(),
            limit: None,
            max_tracked,
            max_depth,
        };
        let _ = t.rescan();
        t
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
        self.entries
            .range((start, Bound::Unbounded))
            .filter(|(_, s)| s.kind == EntryKind::File)
            .map(|(p, s)| (p.as_slice(), s.size))
    }

    /// Why the tracked state may not be the whole workspace.
    pub fn limit(&self) -> Option<&str> {
        self.limit.as_deref()
    }

    /// What changed since the last report (or since tracking began).
    pub fn report(&mut self) -> Report {
        let mut changes = Vec::new();
        let room_again = self.limit.as_deref().is_some_and(|l| {
            l.starts_with("more than") && self.entries.len() < self.max_tracked * 9 / 10
        });
        if self.polling || room_again {
            changes = self.rescan();
        } else {
            self.watcher.drain();
            let pending = self.watcher.take(self.id);
            if pending.overflow {
                changes = self.rescan();
            } else if let Some(root) = self.open_root() {
                self.look_again(root.as_fd(), pending, &mut changes);
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        changes.dedup_by(|a, b| a.path == b.path);
        Report {
            changes,
            incomplete: self.limit.clone(),
            by_scan: self.by_scan.clone(),
        }
    }

    /// Looks at every name the kernel reported, and at every file still open.
    fn look_again(&mut self, root: BorrowedFd<'_>, pending: Pending, out: &mut Vec<RawChange>) {
        let mut dirty = pending.dirty;
        for (path, delta) in pending.opened {
            *self.open.entry(path).or_default() += delta;
        }
        self.open.retain(|_, n| *n > 0);
        for path in self.open.keys() {
            dirty.entry(path.clone()).or_default();
        }
        let mut seen = BTreeSet::new();
        for (path, what) in &dirty {
            self.refresh_linked(root, path, *what, &mut seen, out);
        }
        // A name renamed or removed while open is closed under another name.
        let entries = &self.entries;
        self.open.retain(|p, _| entries.contains_key(p));
    }

    fn open_root(&mut self) -> Option<OwnedFd> {
        match rustix::fs::open(
            &self.root,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(fd) => Some(fd),
            Err(e) => {
                self.limit = Some(format!("the workspace could not be opened ({e})"));
                None
            }
        }
    }

    /// [`Tracker::refresh`], and then every other tracked name of a changed file with
    /// more than one link (each name once per report: `seen`). A write through one name
    /// is a write of every name of the inode.
    fn refresh_linked(
        &mut self,
        root: BorrowedFd<'_>,
        path: &[u8],
        what: Seen,
        seen: &mut BTreeSet<Vec<u8>>,
        out: &mut Vec<RawChange>,
    ) {
        let mut queue = vec![(path.to_vec(), what)];
        while let Some((path, what)) = queue.pop() {
            if !seen.insert(path.clone()) {
                continue;
            }
            let before = self.entries.get(&path).copied();
            self.refresh(root, &path, what, out);
            let after = self.entries.get(&path).copied();
            if before == after && !what.written {
                continue;
            }
            let link = Seen {
                created: false,
                written: what.written,
            };
            for stamp in [before, after].into_iter().flatten() {
                if let Some(names) = self.links.get(&stamp.ino) {
                    queue.extend(names.iter().map(|n| (n.clone(), link)));
                }
            }
            if let Some(now) = after.filter(|s| s.kind != EntryKind::Dir && s.nlink > 1) {
                queue.extend(self.unindexed_links(now).into_iter().map(|n| (n, link)));
            }
        }
    }

    /// The tracked names of `now`'s inode that the index does not hold yet: a file that
    /// had one link when it was last looked at and has just been given another. Found
    /// by a pass over the tracked entries, only when the link count says some are
    /// missing (so once per new link, not per call).
    fn unindexed_links(&self, now: Stamp) -> Vec<Vec<u8>> {
        let indexed = self.links.get(&now.ino).map_or(0, |n| n.len());
        if indexed as u64 >= now.nlink {
            return Vec::new();
        }
        self.entries
            .iter()
            .filter(|(_, s)| s.ino == now.ino && s.kind != EntryKind::Dir)
            .filter(|(p, _)| !self.links.get(&now.ino).is_some_and(|n| n.contains(*p)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Tracks `path` as `stamp` (keeping the index of hard links).
    fn put(&mut self, path: &[u8], stamp: Stamp) {
        if let Some(old) = self.entries.insert(path.to_vec(), stamp) {
            self.unlink_index(path, old);
        }
        if stamp.kind != EntryKind::Dir && stamp.nlink > 1 {
            self.links
                .entry(stamp.ino)
                .or_default()
                .insert(path.to_vec());
        }
    }

    /// Stops tracking `path`.
    fn drop_entry(&mut self, path: &[u8]) -> Option<Stamp> {
        let old = self.entries.remove(path)?;
        self.unlink_index(path, old);
        Some(old)
    }

    fn unlink_index(&mut self, path: &[u8], old: Stamp) {
        if let Some(names) = self.links.get_mut(&old.ino) {
            names.remove(path);
            if names.is_empty() {
                self.links.remove(&old.ino);
            }
        }
    }

    /// Looks at one name the kernel reported (`what` its events said), and brings the
    /// tracked state in line.
    fn refresh(&mut self, root: BorrowedFd<'_>, path: &[u8], what: Seen, out: &mut Vec<RawChange>) {
        let (parent, name) = parent_of(path);
        if depth_of(path) > self.max_depth {
            return;
        }
        if !parent.is_empty() && self.entries.get(parent).map(|s| s.kind) != Some(EntryKind::Dir) {
            return; // an ancestor is gone or untracked: its own event covers it
        }
        if !self.entries.contains_key(path) && !what.created && !self.complete.contains(parent) {
            return; // an entry that was never tracked: not known to be new
        }
        let Ok(dir) = fsops::open_dir(root, parent) else {
            return;
        };
        let now = match fsops::stat_at(dir.as_fd(), name) {
            Ok(s) => s,
            Err(Errno::NOENT) => {
                self.forget(path, out);
                return;
            }
            Err(_) => return,
        };
        let old = self.entries.get(path).copied();
        match (old, now.kind) {
            (Some(o), EntryKind::Dir) if o.kind == EntryKind::Dir && o.ino == now.ino => {
                self.put(path, now);
            }
            (old, EntryKind::Dir) => {
                if old.is_some() {
                    self.forget(path, out);
                }
                if depth_of(path) >= self.max_depth {
                    let why = self.too_deep();
                    self.limit.get_or_insert(why);
                    self.complete.remove(parent);
                    return;
                }
                if self.entries.len() >= self.max_tracked {
                    self.note_full();
                    self.complete.remove(parent);
                    return;
                }
                self.put(path, now);
                self.walk(root, path, Some(out));
            }
            (old, _) => {
                if old.is_some_and(|o| o.kind == EntryKind::Dir) {
                    self.forget(path, out);
                }
                let change = match self.entries.get(path) {
                    None => Change::Created,
                    Some(o) if *o != now || what.written => Change::Modified,
                    Some(_) => return,
                };
                if change == Change::Created && self.entries.len() >= self.max_tracked {
                    self.note_full();
                    self.complete.remove(parent);
                    return;
                }
                self.put(path, now);
                out.push(RawChange {
                    path: path.to_vec(),
                    change,
                    kind: now.kind,
                    size: now.size,
                });
            }
        }
    }

    /// Drops `path` and everything tracked beneath it, reporting the deletions.
    fn forget(&mut self, path: &[u8], out: &mut Vec<RawChange>) {
        let mut gone = Vec::new();
        if self.entries.contains_key(path) {
            gone.push(path.to_vec());
        }
        // Everything under `path/`: from `path/` up to `path0` ('0' is the byte after '/').
        let mut lo = path.to_vec();
        lo.push(b'/');
        let mut hi = path.to_vec();
        hi.push(b'0');
        gone.extend(self.entries.range(lo..hi).map(|(p, _)| p.clone()));
        for p in gone {
            if let Some(s) = self.drop_entry(&p) {
                if s.kind == EntryKind::Dir {
                    self.complete.remove(&p);
                    if let Some(wd) = self.wds.remove(&p) {
                        self.watcher.remove(wd, &p);
                    }
                } else {
                    out.push(RawChange {
                        path: p,
                        change: Change::Deleted,
                        kind: s.kind,
                        size: 0,
                    });
                }
            }
        }
    }

    fn note_full(&mut self) {
        self.limit = Some(format!(
            "more than {} entries: changes beyond them are not reported",
            self.max_tracked
        ));
    }

    fn too_deep(&self) -> String {
        format!(
            "deeper than {} levels: changes below are not reported",
            self.max_depth
        )
    }

    /// Watches the open directory `dir` (`rel`); past the session's cap or the server's
    /// share, or when the kernel refuses, the session's tracking is by scan instead.
    fn watch(&mut self, dir: BorrowedFd<'_>, rel: &[u8]) {
        if self.polling {
            return;
        }
        if self.wds.len() >= self.max_watches {
            self.scan_instead(format!(
                "it has more than {} directories (each watched directory takes one of the \
                 user's inotify watches)",
                self.max_watches
            ));
            return;
        }
        match self.watcher.add(self.id, dir, rel) {
            Ok(wd) => {
                self.wds.insert(rel.to_vec(), wd);
            }
            Err(Refused::Share(share)) => self.scan_instead(format!(
                "the sessions of this server already hold its share of the user's inotify \
                 watches ({share}, a quarter of fs.inotify.max_user_watches)"
            )),
            Err(Refused::Kernel(e)) => self.scan_instead(format!(
                "the kernel refused an inotify watch ({e}): the user's other programs may \
                 hold the rest of fs.inotify.max_user_watches"
            )),
        }
    }

    /// Gives back every watch of this session, which is tracked by scan from now on (each
    /// report walks the workspace) for `why`; the log says so once per switch.
    fn scan_instead(&mut self, why: String) {
        for (rel, wd) in std::mem::take(&mut self.wds) {
            self.watcher.remove(wd, &rel);
        }
        self.polling = true;
        if self.by_scan.is_none() {
            tracing::warn!(
                workspace = %self.root.display(),
                reason = %why,
                "a workspace is tracked by scan, not by inotify"
            );
        }
        self.by_scan = Some(why);
    }

    /// Lists the directory `start` (already tracked) and everything beneath it, breadth
    /// first, watching each directory before listing it. New non-directories are reported
    /// as created into `out`; directories listed in full are marked complete.
    fn walk(&mut self, root: BorrowedFd<'_>, start: &[u8], mut out: Option<&mut Vec<RawChange>>) {
        let mut queue = std::collections::VecDeque::from([start.to_vec()]);
        while let Some(rel) = queue.pop_front() {
            let Ok(dir) = fsops::open_dir(root, &rel) else {
                continue;
            };
            self.watch(dir.as_fd(), &rel);
            let Ok(names) = fsops::list(dir.as_fd()) else {
                continue;
            };
            let depth = depth_of(&rel) + 1;
            let mut whole = true;
            for (name, _) in names {
                if self.entries.len() >= self.max_tracked {
                    self.note_full();
                    return;
                }
                let Ok(stamp) = fsops::stat_at(dir.as_fd(), &name) else {
                    whole = false;
                    continue;
                };
                let path = join(&rel, &name);
                if stamp.kind == EntryKind::Dir {
                    if depth >= self.max_depth {
                        whole = false;
                        let why = self.too_deep();
                        self.limit.get_or_insert(why);
                        continue;
                    }
                    queue.push_back(path.clone());
                } else if let Some(out) = out.as_deref_mut()
                    && !self.entries.contains_key(&path)
                {
                    out.push(RawChange {
                        path: path.clone(),
                        change: Change::Created,
                        kind: stamp.kind,
                        size: stamp.size,
                    });
                }
                self.put(&path, stamp);
            }
            if whole {
                self.complete.insert(rel);
            }
        }
    }

    /// Walks the whole workspace again and reports the difference: a creation only where
    /// the directory was complete before (or is itself new), a deletion only where it is
    /// complete now (or is itself gone).
    fn rescan(&mut self) -> Vec<RawChange> {
        let Some(root) = self.open_root() else {
            return Vec::new();
        };
        self.rescans += 1;
        // Which files stay open is not known after events were dropped: none is assumed
        // (a file opened before is looked at again when it is closed).
        self.open.clear();
        let old = std::mem::take(&mut self.entries);
        self.links.clear();
        let old_complete = std::mem::take(&mut self.complete);
        for (rel, wd) in std::mem::take(&mut self.wds) {
            self.watcher.remove(wd, &rel);
        }
        // Events queued before the watches were dropped are about the old state.
        let _ = self.watcher.take(self.id);
        // A session tracked by scan is watched again once its directories fit, with a
        // tenth of its cap to spare (so that it does not switch back and forth).
        let fits = self.dirs < self.max_watches - self.max_watches / 10
            && self.watcher.has_room(self.dirs);
        self.polling = self.watcher.fd.is_none() || (self.by_scan.is_some() && !fits);
        if !self.polling {
            self.by_scan = None;
        }
        self.limit = None;
        self.walk(root.as_fd(), b"", None);
        self.dirs = 1 + self
            .entries
            .values()
            .filter(|s| s.kind == EntryKind::Dir)
            .count();
        let mut out = Vec::new();
        for (path, now) in &self.entries {
            if now.kind == EntryKind::Dir {
                continue;
            }
            let change = match old.get(path) {
                None if known_absent(path, &old, &old_complete) => Change::Created,
                None => continue,
                Some(o) if o.kind == EntryKind::Dir => Change::Created,
                Some(o) if o != now => Change::Modified,
                Some(_) => continue,
            };
            out.push(RawChange {
                path: path.clone(),
                change,
                kind: now.kind,
                size: now.size,
            });
        }
        for (path, was) in &old {
            if was.kind == EntryKind::Dir {
                continue;
            }
            let gone = match self.entries.get(path) {
                Some(now) => now.kind == EntryKind::Dir,
                None => {
                    known_absent(path, &self.entries, &self.complete)
                        || looked_up_gone(root.as_fd(), path)
                }
            };
            if gone {
                out.push(RawChange {
                    path: path.clone(),
                    change: Change::Deleted,
                    kind: was.kind,
                    size: 0,
                });
            }
        }
        out
    }
}

/// Whether a tracked path the walk did not reach (it stopped at a limit) is gone, by
/// looking it up.
fn looked_up_gone(root: BorrowedFd<'_>, path: &[u8]) -> bool {
    let (parent, name) = parent_of(path);
    match fsops::open_dir(root, parent) {
        Ok(dir) => matches!(fsops::stat_at(dir.as_fd(), name), Err(Errno::NOENT)),
        Err(e) => matches!(e, Errno::NOENT | Errno::NOTDIR | Errno::LOOP),
    }
}

/// Whether `path`, not in `entries`, is known to be absent from the workspace that state
/// describes: its directory is complete there, or that directory is itself known absent
/// (or not a directory). With the old state: known to be new; with the new: known gone.
fn known_absent(
    path: &[u8],
    entries: &BTreeMap<Vec<u8>, Stamp>,
    complete: &BTreeSet<Vec<u8>>,
) -> bool {
    let mut cur = path;
    loop {
        let (parent, _) = parent_of(cur);
        if complete.contains(parent) {
            return true;
        }
        if parent.is_empty() {
            return false;
        }
        match entries.get(parent) {
            Some(s) if s.kind == EntryKind::Dir => return false,
            Some(_) => return true,
            None => cur = parent,
        }
    }
}

#[cfg(test)]
mod tests;
