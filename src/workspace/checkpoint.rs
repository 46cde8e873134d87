//! Named checkpoints of a workspace: a copy of its tree, taken between calls and put back
//! on request, with the report of what the restore changed.
//!
//! A checkpoint lives beside the workspace, in its session's home (`<home>/checkpoints/
//! <name>/tree`, with `meta.json`): on the workspace keeper's tmpfs that is the same
//! size-capped file system, so a checkpoint's bytes count against the session's disk
//! quota and go with the session; the worker's world binds `<home>/workspace` alone, so
//! code never sees them.
//!
//! The tree was written by sandboxed code, so every walk here resolves names beneath a
//! directory descriptor without following a symbolic link (links are copied as links),
//! keeps to directories, regular files and links (anything else is counted and left
//! out), and is iterative and bounded in depth and entries. The worker is frozen between
//! calls and the session's lock is held, so nothing changes the tree while it is copied.
//!
//! What is kept: names, contents, modes (without set-user-ID and set-group-ID), symbolic
//! links, empty directories, hard links (names of one inode stay one inode) and file
//! modification times. A checkpoint is written under a temporary name and renamed into
//! place, so a checkpoint is whole or absent; one taken again under the same name
//! replaces the old one in a single exchange.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, Timestamps};
use rustix::io::Errno;

use super::fsops::{self, open_beneath};
use super::{Change, EntryKind, RawChange, Report};

/// Longest checkpoint name, in bytes.
pub const MAX_NAME: usize = 64;
/// Most entries one checkpoint holds (the workspace tracker's own bound).
pub const MAX_ENTRIES: usize = super::MAX_TRACKED;
/// Deepest directory a checkpoint copies.
pub const MAX_DEPTH: usize = 128;
/// The directory of a session's home that holds its checkpoints.
const STORE: &str = "checkpoints";

/// Why a checkpoint could not be taken, restored or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// No checkpoint of that name.
    #[error("no checkpoint named {0:?}")]
    Missing(String),
    /// The copy does not fit in what the quota leaves.
    #[error(
        "this needs {need} bytes and the workspace's file system has {free} free \
         (checkpoints count against the session's disk quota); nothing was changed: delete \
         files, or reuse a checkpoint's name (taking it again replaces it)"
    )]
    Full { need: u64, free: u64 },
    /// The tree passes a bound.
    #[error("{0}")]
    TooLarge(String),
    /// The file system refused.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl CheckpointError {
    pub(crate) fn io(what: impl Into<String>, e: Errno) -> CheckpointError {
        if e == Errno::NOSPC || e == Errno::DQUOT {
            return CheckpointError::Full { need: 0, free: 0 };
        }
        CheckpointError::Io {
            what: what.into(),
            source: e.into(),
        }
    }
}

/// The journal's directory in the store.
const JOURNAL: &std::ffi::CStr = c".journal";

/// Whether `name` may name a checkpoint: 1 to [`MAX_NAME`] letters, digits, `.`, `_`
/// and `-`, not starting with `.` (so never `..`, a path or a hidden file). Pure.
///
/// # Errors
/// What is wrong with it, as a sentence.
pub fn check_name(name: &str) -> Result<(), String> {
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "a checkpoint name has 1 to {MAX_NAME} characters; this one has {}",
            name.len()
        ));
    }
    if name.starts_with('.') || !name.chars().all(fine) {
        return Err(
            "a checkpoint name is letters, digits, '.', '_' and '-', and does not start with \
             '.' (no '/', '..' or control characters)"
                .to_string(),
        );
    }
    Ok(())
}

/// One entry of a tree, as a checkpoint copies it and a restore compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Relative to the tree's root, `/`-separated raw bytes; empty for the root.
    pub path: Vec<u8>,
    pub kind: EntryKind,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    pub size: u64,
    /// A link's target.
    pub target: Vec<u8>,
    /// Device and inode: names of one inode are hard links.
    pub id: (u64, u64),
    pub nlink: u64,
    pub mtime: (i64, i64),
}

/// What a checkpoint records beside its tree.
pub use super::CheckpointInfo as Meta;

// st_nlink is u64 on x86_64 and u32 on arm64; st_mode is u32 or u16.
#[allow(clippy::unnecessary_cast)]
fn node_of(path: Vec<u8>, st: &rustix::fs::Stat) -> Node {
    let kind = fsops::kind_of(st.st_mode as u32);
    Node {
        path,
        kind,
        mode: st.st_mode as u32 & 0o7777,
        size: if kind == EntryKind::Dir {
            0
        } else {
            u64::try_from(st.st_size).unwrap_or(0)
        },
        target: Vec::new(),
        id: (st.st_dev as u64, st.st_ino as u64),
        nlink: st.st_nlink as u64,
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
    }
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    if parent.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(parent.len() + 1 + name.len());
    p.extend_from_slice(parent);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// The parent's relative path and the last name of `path`.
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn cstr(name: &[u8]) -> Result<CString, CheckpointError> {
    CString::new(name).map_err(|_| CheckpointError::io("a name with a NUL byte", Errno::INVAL))
}

fn shown(path: &[u8]) -> String {
    super::shown_path(path).0
}

/// Every entry of the tree at `root` (the root itself first, with an empty path), in
/// path order, and how many entries were left out (FIFOs, sockets, devices).
///
/// # Errors
/// The tree passes [`MAX_ENTRIES`] or [`MAX_DEPTH`], or could not be read.
pub fn scan(root: BorrowedFd<'_>) -> Result<(Vec<Node>, u64), CheckpointError> {
    let st = rustix::fs::fstat(root).map_err(|e| CheckpointError::io("the workspace", e))?;
    let mut out = vec![node_of(Vec::new(), &st)];
    let mut skipped = 0u64;
    let mut stack: Vec<(Vec<u8>, usize)> = vec![(Vec::new(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let fd = fsops::open_dir(root, &dir).map_err(|e| CheckpointError::io(shown(&dir), e))?;
        for (name, _) in fsops::list(fd.as_fd()).map_err(|e| CheckpointError::io(shown(&dir), e))? {
            let c = cstr(&name)?;
            let st = match rustix::fs::statat(&fd, &c, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(CheckpointError::io(shown(&join(&dir, &name)), e)),
            };
            let mut node = node_of(join(&dir, &name), &st);
            match node.kind {
                EntryKind::Other => {
                    skipped += 1;
                    continue;
                }
                EntryKind::Dir if depth + 1 >= MAX_DEPTH => {
                    return Err(CheckpointError::TooLarge(format!(
                        "the workspace nests directories deeper than {MAX_DEPTH} levels \
                         ({}); a checkpoint copies at most that deep",
                        shown(&node.path)
                    )));
                }
                EntryKind::Dir => stack.push((node.path.clone(), depth + 1)),
                EntryKind::Symlink => {
                    node.target = rustix::fs::readlinkat(&fd, &c, Vec::new())
                        .map_err(|e| CheckpointError::io(shown(&node.path), e))?
                        .into_bytes();
                }
                EntryKind::File => {}
            }
            out.push(node);
            if out.len() > MAX_ENTRIES {
                return Err(CheckpointError::TooLarge(format!(
                    "the workspace holds more than {MAX_ENTRIES} entries; a checkpoint \
                     copies at most that many"
                )));
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((out, skipped))
}

/// Bytes of file data in `nodes`, each inode once. Pure.
pub fn data_bytes(nodes: &[Node]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    nodes
        .iter()
        .filter(|n| n.kind == EntryKind::File && seen.insert(n.id))
        .fold(0u64, |sum, n| sum.saturating_add(n.size))
}

/// The directory of the entry before, kept open: entries come in path order, so
/// siblings reuse it instead of resolving their parent again.
#[derive(Default)]
struct Parent {
    path: Vec<u8>,
    fd: Option<OwnedFd>,
}

impl Parent {
    /// The directory `path` beneath `root`, resolved as [`fsops::open_dir`] does.
    fn of(&mut self, root: BorrowedFd<'_>, path: &[u8]) -> rustix::io::Result<BorrowedFd<'_>> {
        if self.fd.is_none() || self.path != path {
            self.fd = Some(fsops::open_dir(root, path)?);
            self.path = path.to_vec();
        }
        self.fd.as_ref().map(AsFd::as_fd).ok_or(Errno::BADF)
    }
}

/// Who the copied entries belong to: `Some` makes them the workspace owner's (a root
/// server writes them as root).
pub type Owner = Option<(u32, u32)>;

/// Copies `nodes` (a [`scan`] of `src`) into the empty directory `dst`: directories,
/// files with their data, modes and modification times, links as links, hard links as
/// hard links; owned by `owner` when given. The root's mode is set last.
///
/// # Errors
/// The first entry that could not be made (a full file system is [`CheckpointError::Full`]).
pub fn copy_tree(
    src: BorrowedFd<'_>,
    nodes: &[Node],
    dst: BorrowedFd<'_>,
    owner: Owner,
    link: Option<&HashSet<(u64, u64)>>,
) -> Result<(), CheckpointError> {
    let mut first_name: HashMap<(u64, u64), &[u8]> = HashMap::new();
    let (mut from_dir, mut to_dir) = (Parent::default(), Parent::default());
    for node in nodes.iter().filter(|n| !n.path.is_empty()) {
        let (parent, name) = split(&node.path);
        let what = || shown(&node.path);
        let pfd = to_dir
            .of(dst, parent)
            .map_err(|e| CheckpointError::io(what(), e))?;
        let c = cstr(name)?;
        match node.kind {
            EntryKind::Dir => rustix::fs::mkdirat(pfd, &c, Mode::from_raw_mode(0o700))
                .map_err(|e| CheckpointError::io(what(), e))?,
            EntryKind::Symlink => {
                let target = cstr(&node.target)?;
                rustix::fs::symlinkat(&target, pfd, &c)
                    .map_err(|e| CheckpointError::io(what(), e))?;
            }
            EntryKind::File if node.nlink > 1 && first_name.contains_key(&node.id) => {
                let first = cstr(first_name[&node.id])?;
                rustix::fs::linkat(dst, &first, pfd, &c, AtFlags::empty())
                    .map_err(|e| CheckpointError::io(what(), e))?;
                continue;
            }
            // Shared with the workspace, but for the inodes in `link` (open for writing).
            EntryKind::File if link.is_some_and(|skip| !skip.contains(&node.id)) => {
                let sfd = from_dir
                    .of(src, parent)
                    .map_err(|e| CheckpointError::io(what(), e))?;
                rustix::fs::linkat(sfd, &c, pfd, &c, AtFlags::empty())
                    .map_err(|e| CheckpointError::io(what(), e))?;
                first_name.insert(node.id, &node.path);
                continue;
            }
            EntryKind::File => {
                let sfd = from_dir
                    .of(src, parent)
                    .map_err(|e| CheckpointError::io(what(), e))?;
                copy_file(sfd, node, pfd, &c)?;
                first_name.insert(node.id, &node.path);
            }
            EntryKind::Other => continue,
        }
        if let Some((uid, gid)) = owner {
            rustix::fs::chownat(
                pfd,
                &c,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| CheckpointError::io(what(), e))?;
        }
    }
    // Directory modes last, deepest first: a directory without write permission must
    // still take its entries.
    for node in nodes.iter().rev().filter(|n| n.kind == EntryKind::Dir) {
        let fd = fsops::open_dir(dst, &node.path)
            .map_err(|e| CheckpointError::io(shown(&node.path), e))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(node.mode & 0o1777))
            .map_err(|e| CheckpointError::io(shown(&node.path), e))?;
        if node.path.is_empty()
            && let Some((uid, gid)) = owner
        {
            rustix::fs::fchown(
                &fd,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )
            .map_err(|e| CheckpointError::io("the workspace", e))?;
        }
    }
    Ok(())
}

/// Copies the regular file `name` of the directory `from` (`node`) to the new file
/// `name` in `dir`.
fn copy_file(
    from: BorrowedFd<'_>,
    node: &Node,
    dir: BorrowedFd<'_>,
    name: &CString,
) -> Result<(), CheckpointError> {
    let what = || shown(&node.path);
    let from = rustix::fs::openat(
        from,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| CheckpointError::io(what(), e))?;
    let to = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| CheckpointError::io(what(), e))?;
    fsops::copy_data(&from, &to).map_err(|e| CheckpointError::io(what(), e))?;
    rustix::fs::fchmod(&to, Mode::from_raw_mode(node.mode & 0o1777))
        .map_err(|e| CheckpointError::io(what(), e))?;
    let at = rustix::fs::Timespec {
        tv_sec: node.mtime.0,
        tv_nsec: node.mtime.1 as _,
    };
    rustix::fs::futimens(
        &to,
        &Timestamps {
            last_access: at,
            last_modification: at,
        },
    )
    .map_err(|e| CheckpointError::io(what(), e))
}

/// Whether the files `a` (beneath `a_root`) and `b` (beneath `b_root`) hold the same
/// bytes. Unreadable counts as different.
fn same_bytes(a_root: BorrowedFd<'_>, a: &[u8], b_root: BorrowedFd<'_>, b: &[u8]) -> bool {
    let open = |root, path| open_beneath(root, path, OFlags::RDONLY | OFlags::NOFOLLOW);
    let (Ok(fa), Ok(fb)) = (open(a_root, a), open(b_root, b)) else {
        return false;
    };
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let (Ok(na), Ok(nb)) = (read_full(&fa, &mut ba), read_full(&fb, &mut bb)) else {
            return false;
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> rustix::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = rustix::io::read(fd, &mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// What a restore of `saved` over `now` changes, as the change report of a call shows
/// it (files, links and others; a directory only when it is empty on one side), in path
/// order. `same_data` says whether two same-sized files hold the same bytes; hard-link
/// groups that differ count as modified. Pure but for `same_data`.
pub fn diff(
    now: &[Node],
    saved: &[Node],
    mut same_data: impl FnMut(&Node, &Node) -> bool,
) -> Vec<RawChange> {
    let groups = |nodes: &[Node]| {
        let mut g: HashMap<(u64, u64), Vec<Vec<u8>>> = HashMap::new();
        for n in nodes
            .iter()
            .filter(|n| n.kind == EntryKind::File && n.nlink > 1)
        {
            g.entry(n.id).or_default().push(n.path.clone());
        }
        g
    };
    let (gn, gs) = (groups(now), groups(saved));
    let links = |g: &HashMap<(u64, u64), Vec<Vec<u8>>>, n: &Node| {
        g.get(&n.id)
            .cloned()
            .unwrap_or_else(|| vec![n.path.clone()])
    };
    let by_path = |nodes: &[Node]| -> HashMap<Vec<u8>, Node> {
        nodes.iter().map(|n| (n.path.clone(), n.clone())).collect()
    };
    let (mn, ms) = (by_path(now), by_path(saved));
    // A directory shows only while empty: otherwise what is in it shows.
    let parents = |nodes: &[Node]| -> std::collections::HashSet<Vec<u8>> {
        nodes
            .iter()
            .filter(|n| !n.path.is_empty())
            .map(|n| split(&n.path).0.to_vec())
            .collect()
    };
    let (pn, ps) = (parents(now), parents(saved));
    let shows = |n: &Node, parents: &std::collections::HashSet<Vec<u8>>| {
        n.kind != EntryKind::Dir || !parents.contains(&n.path)
    };
    let mut out = Vec::new();
    for s in saved.iter().filter(|n| !n.path.is_empty()) {
        let change = match mn.get(&s.path) {
            None => Some(Change::Created),
            Some(n) if n.kind != s.kind || n.mode != s.mode || n.target != s.target => {
                Some(Change::Modified)
            }
            Some(n) if n.kind == EntryKind::File => {
                let differs =
                    n.size != s.size || links(&gn, n) != links(&gs, s) || !same_data(n, s);
                differs.then_some(Change::Modified)
            }
            Some(_) => None,
        };
        if let Some(change) = change
            && (change != Change::Created || shows(s, &ps))
        {
            out.push(RawChange {
                path: s.path.clone(),
                change,
                kind: s.kind,
                size: s.size,
            });
        }
    }
    for n in now
        .iter()
        .filter(|n| !n.path.is_empty() && !ms.contains_key(&n.path))
    {
        if shows(n, &pn) {
            out.push(RawChange {
                path: n.path.clone(),
                change: Change::Deleted,
                kind: n.kind,
                size: 0,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The checkpoints of one session's workspace.
pub struct Store {
    /// `<home>/checkpoints`.
    dir: OwnedFd,
}

fn random_name(prefix: &str) -> CString {
    let name = format!("{prefix}{}", crate::hex(&crate::random_bytes::<6>()));
    CString::new(name).unwrap_or_default()
}

impl Store {
    /// The store of the workspace at `workspace` (a directory, or `/proc/self/fd/N` of
    /// one): its home's `checkpoints` directory, made (mode 0700) when missing.
    ///
    /// # Errors
    /// The home could not be reached or the directory made.
    pub fn open(workspace: &Path) -> Result<Store, CheckpointError> {
        let io = |e: Errno| CheckpointError::io("the checkpoint store", e);
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let home = rustix::fs::open(workspace.join(".."), dir_flags, Mode::empty()).map_err(io)?;
        match rustix::fs::mkdirat(&home, STORE, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io(e)),
        }
        let dir = rustix::fs::openat(&home, STORE, dir_flags | OFlags::NOFOLLOW, Mode::empty())
            .map_err(io)?;
        Ok(Store { dir })
    }

    /// Every checkpoint, oldest first.
    pub fn list(&self) -> Vec<Meta> {
        let mut out: Vec<Meta> = fsops::list(self.dir.as_fd())
            .unwrap_or_default()
            .into_iter()
            .filter(|(name, is_dir)| *is_dir && name.first() != Some(&b'.'))
            .filter_map(|(name, _)| self.meta(&String::from_utf8_lossy(&name)).ok())
            .collect();
        out.sort_by(|a, b| (a.taken_at, &a.name).cmp(&(b.taken_at, &b.name)));
        out
    }

    /// The record of checkpoint `name`.
    ///
    /// # Errors
    /// [`CheckpointError::Missing`] when there is none.
    pub fn meta(&self, name: &str) -> Result<Meta, CheckpointError> {
        let rel = format!("{name}/meta.json");
        let fd = open_beneath(self.dir.as_fd(), rel.as_bytes(), OFlags::RDONLY)
            .map_err(|_| CheckpointError::Missing(name.to_string()))?;
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = rustix::io::read(&fd, &mut buf) {
            if n == 0 || text.len() > 1 << 20 {
                break;
            }
            text.extend_from_slice(&buf[..n]);
        }
        serde_json::from_slice(&text).map_err(|_| CheckpointError::Missing(name.to_string()))
    }

    /// Copies the workspace `ws` into checkpoint `meta.name` (replacing one of that
    /// name), filling in its size. Nothing is left of a copy that failed.
    ///
    /// # Errors
    /// The copy does not fit ([`CheckpointError::Full`]), the tree passes a bound, or the
    /// file system refused.
    pub fn take(&self, ws: BorrowedFd<'_>, meta: Meta) -> Result<Meta, CheckpointError> {
        self.copy_in(ws, meta, None, None).map(|(meta, _)| meta)
    }

    /// As [`Store::take`], but the checkpoint's files are hard links to the workspace's,
    /// except the inodes in `copied` (what the worker can write now), which are copied.
    /// Returns also each linked inode and its name in the store, for the register that
    /// copies them before they change ([`crate::workspace::cow`]).
    ///
    /// # Errors
    /// As [`Store::take`].
    pub fn take_linked(
        &self,
        ws: BorrowedFd<'_>,
        meta: Meta,
        copied: &HashSet<(u64, u64)>,
    ) -> Result<(Meta, Vec<(u64, CString)>), CheckpointError> {
        self.copy_in(ws, meta, None, Some(copied))
    }

    /// A transactional call's copy of the workspace, named `name` (hidden from
    /// [`Store::list`] by its leading `.`), its entries owned by `owner` already so that
    /// [`Store::roll_back`] can move them back as they are.
    ///
    /// # Errors
    /// As [`Store::take`].
    pub fn snapshot(
        &self,
        ws: BorrowedFd<'_>,
        name: &str,
        owner: Owner,
    ) -> Result<(), CheckpointError> {
        let meta = Meta {
            name: name.to_string(),
            taken_at: 0,
            bytes: 0,
            entries: 0,
            skipped: 0,
            grants: Vec::new(),
        };
        self.copy_in(ws, meta, owner, None).map(|_| ())
    }

    fn copy_in(
        &self,
        ws: BorrowedFd<'_>,
        mut meta: Meta,
        owner: Owner,
        link: Option<&HashSet<(u64, u64)>>,
    ) -> Result<(Meta, Vec<(u64, CString)>), CheckpointError> {
        let (nodes, skipped) = scan(ws)?;
        meta.bytes = data_bytes(&nodes);
        meta.entries = nodes.len().saturating_sub(1) as u64;
        meta.skipped = skipped;
        let linked: Vec<&Node> = match link {
            Some(copied) => nodes
                .iter()
                .filter(|n| n.kind == EntryKind::File && !copied.contains(&n.id))
                .collect(),
            None => Vec::new(),
        };
        let shared: u64 = linked.iter().map(|n| n.size).sum::<u64>();
        let need =
            (meta.bytes - shared.min(meta.bytes)).saturating_add(meta.entries.saturating_mul(512));
        let free = free_bytes(self.dir.as_fd());
        if need > free {
            return Err(CheckpointError::Full { need, free });
        }
        let tmp = random_name(".new-");
        let made = self.write(ws, &nodes, &tmp, &meta, (owner, link));
        let placed = made.and_then(|()| self.place(&tmp, &meta.name));
        if let Err(e) = placed {
            self.remove_entry(&tmp);
            return Err(match e {
                CheckpointError::Full { .. } => CheckpointError::Full {
                    need,
                    free: free_bytes(self.dir.as_fd()),
                },
                other => other,
            });
        }
        let mut names = Vec::new();
        for node in linked {
            let mut path = format!("{}/tree/", meta.name).into_bytes();
            path.extend_from_slice(&node.path);
            names.push((node.id.1, cstr(&path)?));
        }
        Ok((meta, names))
    }

    fn write(
        &self,
        ws: BorrowedFd<'_>,
        nodes: &[Node],
        tmp: &CString,
        meta: &Meta,
        (owner, link): (Owner, Option<&HashSet<(u64, u64)>>),
    ) -> Result<(), CheckpointError> {
        let io = |e: Errno| CheckpointError::io("the checkpoint store", e);
        rustix::fs::mkdirat(&self.dir, tmp, Mode::from_raw_mode(0o700)).map_err(io)?;
        let at = rustix::fs::openat(
            &self.dir,
            tmp,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        rustix::fs::mkdirat(&at, "tree", Mode::from_raw_mode(0o700)).map_err(io)?;
        let tree = fsops::open_dir(at.as_fd(), b"tree").map_err(io)?;
        copy_tree(ws, nodes, tree.as_fd(), owner, link)?;
        let text = serde_json::to_vec(meta).unwrap_or_default();
        let f = rustix::fs::openat(
            &at,
            "meta.json",
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io)?;
        let mut done = 0;
        while done < text.len() {
            done += rustix::io::write(&f, &text[done..]).map_err(io)?;
        }
        Ok(())
    }

    /// Renames the finished `tmp` to `name`, exchanging it with an older one of that name.
    fn place(&self, tmp: &CString, name: &str) -> Result<(), CheckpointError> {
        let io = |e: Errno| CheckpointError::io("the checkpoint store", e);
        let target = cstr(name.as_bytes())?;
        match rustix::fs::renameat_with(&self.dir, tmp, &self.dir, &target, RenameFlags::NOREPLACE)
        {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => {
                rustix::fs::renameat_with(
                    &self.dir,
                    tmp,
                    &self.dir,
                    &target,
                    RenameFlags::EXCHANGE,
                )
                .map_err(io)?;
                // `tmp` now names the old checkpoint.
                self.remove_entry(tmp);
                Ok(())
            }
            Err(e) => Err(io(e)),
        }
    }

    fn remove_entry(&self, name: &CString) {
        let path = Path::new("/proc/self/fd")
            .join(rustix::fd::AsRawFd::as_raw_fd(&self.dir).to_string())
            .join(std::ffi::OsStr::new(name.to_str().unwrap_or_default()));
        if let Err(e) = super::remove_tree(&path) {
            tracing::warn!(error = %e, "could not remove a checkpoint's copy");
        }
    }

    /// Deletes checkpoint `name`.
    ///
    /// # Errors
    /// [`CheckpointError::Missing`] when there is none.
    pub fn delete(&self, name: &str) -> Result<(), CheckpointError> {
        self.meta(name)?;
        self.remove_entry(&cstr(name.as_bytes())?);
        Ok(())
    }

    /// Removes the copy `name` if there is one (a transactional call that succeeded).
    pub fn discard(&self, name: &str) {
        if let Ok(c) = cstr(name.as_bytes()) {
            self.remove_entry(&c);
        }
    }

    /// Renames the copy `name` out of the way (a transactional call that succeeded) and
    /// leaves it for [`Store::remove_retired`]: the rename is instant, the deletion costs
    /// the copy's entries.
    pub fn retire(&self, name: &str) {
        if let Ok(from) = cstr(name.as_bytes()) {
            let _ = rustix::fs::renameat(&self.dir, &from, &self.dir, random_name(".old-"));
        }
    }

    /// An empty directory for a transactional call's journal (`.journal`, beside the
    /// checkpoints and as hidden), what an earlier one left removed first.
    ///
    /// # Errors
    /// The file system refused.
    pub fn journal_dir(&self) -> Result<OwnedFd, CheckpointError> {
        let io = |e: Errno| CheckpointError::io("the journal", e);
        self.remove_journal_dir();
        rustix::fs::mkdirat(&self.dir, JOURNAL, Mode::from_raw_mode(0o700)).map_err(io)?;
        rustix::fs::openat(
            &self.dir,
            JOURNAL,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)
    }

    /// Removes the journal's directory.
    pub fn remove_journal_dir(&self) {
        match rustix::fs::unlinkat(&self.dir, JOURNAL, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(_) => self.remove_entry(&JOURNAL.to_owned()),
        }
    }

    /// A descriptor of the store's directory.
    ///
    /// # Errors
    /// Out of descriptors.
    pub fn dir_fd(&self) -> Result<OwnedFd, CheckpointError> {
        rustix::io::fcntl_dupfd_cloexec(&self.dir, 0)
            .map_err(|e| CheckpointError::io("the checkpoint store", e))
    }

    /// Another handle on the same store (its own descriptor), for work done later.
    pub fn try_clone(&self) -> Option<Store> {
        let dir = rustix::io::fcntl_dupfd_cloexec(&self.dir, 0).ok()?;
        Some(Store { dir })
    }

    /// Deletes every copy [`Store::retire`] left.
    pub fn remove_retired(&self) {
        for (name, _) in fsops::list(self.dir.as_fd()).unwrap_or_default() {
            if name.starts_with(b".old-")
                && let Ok(c) = cstr(&name)
            {
                self.remove_entry(&c);
            }
        }
    }

    /// Puts the copy [`Store::snapshot`] made back into the workspace `ws` (at
    /// `ws_path`) by moving its entries, so the cost is the workspace's entries, not its
    /// bytes, and no room is needed; the copy is gone afterwards. Returns what changed.
    ///
    /// # Errors
    /// No such copy, or the file system refused.
    pub fn roll_back(
        &self,
        ws: BorrowedFd<'_>,
        ws_path: &Path,
        name: &str,
    ) -> Result<Report, CheckpointError> {
        let tree_rel = format!("{name}/tree");
        let tree = fsops::open_dir(self.dir.as_fd(), tree_rel.as_bytes())
            .map_err(|_| CheckpointError::Missing(name.to_string()))?;
        let (saved, _) = scan(tree.as_fd())?;
        let (now, _) = scan(ws)?;
        let changes = diff(&now, &saved, |a, b| {
            same_bytes(ws, &a.path, tree.as_fd(), &b.path)
        });
        empty(ws, ws_path)?;
        for (entry, _) in
            fsops::list(tree.as_fd()).map_err(|e| CheckpointError::io("the copy", e))?
        {
            let c = cstr(&entry)?;
            rustix::fs::renameat(&tree, &c, ws, &c)
                .map_err(|e| CheckpointError::io(format!("moving {} back", shown(&entry)), e))?;
        }
        if let Some(root) = saved.first() {
            rustix::fs::fchmod(ws, Mode::from_raw_mode(root.mode & 0o1777))
                .map_err(|e| CheckpointError::io("the workspace", e))?;
        }
        self.discard(name);
        Ok(Report {
            changes,
            incomplete: None,
            by_scan: None,
        })
    }

    /// Puts checkpoint `name` back into the workspace `ws` (at `ws_path`, the same
    /// directory): everything in it is replaced by the checkpoint's tree, owned by the
    /// workspace's owner. Returns what changed.
    ///
    /// # Errors
    /// No such checkpoint, or the file system refused (the workspace may then hold part
    /// of the checkpoint; the error says so).
    pub fn restore(
        &self,
        ws: BorrowedFd<'_>,
        ws_path: &Path,
        name: &str,
    ) -> Result<Report, CheckpointError> {
        self.meta(name)?;
        let tree_rel = format!("{name}/tree");
        let tree = fsops::open_dir(self.dir.as_fd(), tree_rel.as_bytes())
            .map_err(|_| CheckpointError::Missing(name.to_string()))?;
        let (saved, _) = scan(tree.as_fd())?;
        let (now, _) = scan(ws)?;
        let need = data_bytes(&saved).saturating_add((saved.len() as u64).saturating_mul(512));
        let free = free_bytes(ws).saturating_add(data_bytes(&now));
        if need > free {
            return Err(CheckpointError::Full { need, free });
        }
        let changes = diff(&now, &saved, |a, b| {
            same_bytes(ws, &a.path, tree.as_fd(), &b.path)
        });
        let st = rustix::fs::fstat(ws).map_err(|e| CheckpointError::io("the workspace", e))?;
        let owner = (rustix::process::geteuid().is_root()).then_some((st.st_uid, st.st_gid));
        empty(ws, ws_path)?;
        copy_tree(tree.as_fd(), &saved, ws, owner, None).map_err(|e| match e {
            CheckpointError::Io { what, source } => CheckpointError::Io {
                what: format!(
                    "restoring {what} (the workspace holds part of the checkpoint; restore again)"
                ),
                source,
            },
            // Room taken by something else since the check above.
            CheckpointError::Full { .. } => CheckpointError::Io {
                what: "restoring: the workspace's file system filled up (the workspace holds \
                       part of the checkpoint; free room and restore again)"
                    .into(),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            },
            other => other,
        })?;
        Ok(Report {
            changes,
            incomplete: None,
            by_scan: None,
        })
    }
}

/// Removes everything inside the workspace `ws` (at `path`), keeping the directory.
fn empty(ws: BorrowedFd<'_>, path: &Path) -> Result<(), CheckpointError> {
    use std::os::unix::ffi::OsStrExt;
    let io = |e: Errno| CheckpointError::io("emptying the workspace", e);
    for (name, is_dir) in fsops::list(ws).map_err(io)? {
        if is_dir {
            super::remove_tree(&path.join(std::ffi::OsStr::from_bytes(&name))).map_err(|e| {
                CheckpointError::Io {
                    what: "emptying the workspace".into(),
                    source: std::io::Error::other(e.to_string()),
                }
            })?;
        } else {
            match rustix::fs::unlinkat(ws, &cstr(&name)?, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(io(e)),
            }
        }
    }
    Ok(())
}

/// Bytes an unprivileged writer may still add to the file system of `dir`.
fn free_bytes(dir: BorrowedFd<'_>) -> u64 {
    rustix::fs::fstatvfs(dir)
        .map(|st| st.f_bavail.saturating_mul(st.f_frsize))
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
pub(crate) mod tests;
