//! A transactional call's journal: what its code was about to change in the workspace,
//! noted just before each change, and the rollback that puts those things back.
//!
//! Why a journal rather than a copy: a copy of the workspace before every transactional
//! call costs the workspace's size; the journal costs what the call changes. The server's
//! supervisor ([`crate::sandbox::linux::supervisor`]) stops every call that changes a
//! name, a content, a mode or times, resolves what it names in the worker's own world, and
//! hands it here before the kernel goes on:
//!
//! - [`Journal::before_write`]: a file about to be written in place (opened for writing,
//!   truncated) keeps a copy of its bytes, once per file; [`Journal::before_mode`] keeps
//!   its mode. Both are put back into the same inode, so its hard links stay as they were.
//! - [`Journal::before_entry`]: a name about to be created, replaced or removed keeps
//!   what it named: nothing, a hard link to its inode (so a removed file lives on), or
//!   its directory's identity and mode.
//! - [`Journal::before_rename`]: both names of a rename.
//!
//! The rollback walks the notes backwards, making each name what it was (moving renamed
//! entries back, relinking removed ones, removing created ones, recreating removed
//! directories), then puts the kept bytes and modes back. Each step checks what is there
//! first, so a note of a call that then failed in the kernel undoes nothing.
//!
//! A note names its directory by the path it had when the note was made: walking the
//! notes backwards, the tree is as it was right after each change when its note is
//! undone, so the path leads there again. A kept file is a hard link beside the
//! workspace, so the journal holds no descriptor per note. Everything it touches is on
//! the workspace's own file system, reached beneath the workspace without following
//! links, and its kept links and copies live beside the workspace on that file system,
//! where code never sees them.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::fsops;
use super::{Change, EntryKind, RawChange, Report};

/// Most names one transactional call may change (notes are kept in the server's memory).
pub const MAX_NOTES: usize = 1_000_000;

/// The session's journal while a transactional call runs (`None` between them); the
/// supervisor of whichever worker the session has writes into it.
pub type Shared = Arc<Mutex<Option<Journal>>>;

/// A file whose mode, and perhaps bytes, are kept: `link` is a hard link to it in the
/// journal's directory (the journal holds no descriptor per file).
struct Saved {
    link: CString,
    mode: u32,
    copy: Option<CString>,
    path: Vec<u8>,
}

/// What a name was before the call changed it.
enum Pre {
    Absent,
    /// A file, symlink or other non-directory: `aside` is a hard link to it.
    Entry {
        aside: CString,
        ino: u64,
    },
    /// A directory: its index in [`Journal::dirs`] (its inode, which a rollback that
    /// makes it anew updates) and mode.
    Dir {
        dir: usize,
        mode: u32,
    },
}

/// One name in one directory, and what it was. The directory is named by its path when
/// the note was made: the rollback walks the notes backwards, so when it reaches this
/// one the tree is as it was right after this change, and the path leads there again.
struct Slot {
    dir_path: Vec<u8>,
    name: CString,
    path: Vec<u8>,
    pre: Pre,
}

enum Note {
    Entry(Slot),
    Rename {
        from: Slot,
        to: Slot,
        exchange: bool,
    },
}

/// Why a note or a rollback failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct JournalError {
    what: String,
    source: Errno,
}

impl JournalError {
    pub fn new(what: impl Into<String>, source: Errno) -> JournalError {
        JournalError {
            what: what.into(),
            source,
        }
    }

    /// The errno a stopped system call is answered with when its note failed.
    pub fn errno(&self) -> Errno {
        self.source
    }
}

/// See the module documentation.
pub struct Journal {
    /// The workspace's file system.
    dev: u64,
    /// The workspace directory's own mode, put back by every rollback.
    root_mode: u32,
    ws: OwnedFd,
    /// Where kept links and copies are (on the workspace's file system).
    aside: OwnedFd,
    /// The owner of what the rollback creates anew (a root server's session uid).
    owner: Option<(u32, u32)>,
    next: u64,
    /// The inode of each directory a note says was there.
    dirs: Vec<u64>,
    dir_ids: HashMap<u64, usize>,
    saved: HashMap<u64, Saved>,
    notes: Vec<Note>,
    /// Open files of the worker taken in (see the supervisor).
    pub scanned: bool,
    /// [`MAX_NOTES`] (smaller in tests).
    max_notes: usize,
}

fn cstr(name: &[u8]) -> Result<CString, Errno> {
    CString::new(name).map_err(|_| Errno::INVAL)
}

fn kind_of(st: &rustix::fs::Stat) -> EntryKind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

fn mode_of(st: &rustix::fs::Stat) -> u32 {
    st.st_mode & 0o7777
}

/// The path of an open descriptor through `/proc/self/fd`, for calls that take a path.
fn proc_path(fd: BorrowedFd<'_>) -> CString {
    use std::os::fd::AsRawFd;
    // A decimal number has no NUL.
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

fn chmod_at(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<(), Errno> {
    rustix::fs::chmodat(dir, name, Mode::from_raw_mode(mode), AtFlags::empty())
}

/// `path`'s directory and last component.
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b""[..], path),
    }
}

fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    rustix::fs::chmod(proc_path(fd).as_c_str(), Mode::from_raw_mode(mode))
}

impl Journal {
    /// A journal for the workspace `ws`, keeping what it needs in `aside` (an empty
    /// directory on the workspace's file system that code cannot see).
    ///
    /// # Errors
    /// `aside` is not on the workspace's file system, or either cannot be read.
    pub fn new(
        ws: OwnedFd,
        aside: OwnedFd,
        owner: Option<(u32, u32)>,
    ) -> Result<Journal, JournalError> {
        let st = rustix::fs::fstat(&ws).map_err(|e| JournalError::new("the workspace", e))?;
        let at = rustix::fs::fstat(&aside).map_err(|e| JournalError::new("the journal", e))?;
        if st.st_dev != at.st_dev {
            return Err(JournalError::new(
                "the journal is not on the workspace's file system",
                Errno::XDEV,
            ));
        }
        Ok(Journal {
            dev: st.st_dev,
            root_mode: mode_of(&st),
            ws,
            aside,
            owner,
            next: 0,
            dirs: Vec::new(),
            dir_ids: HashMap::new(),
            saved: HashMap::new(),
            notes: Vec::new(),
            scanned: false,
            max_notes: MAX_NOTES,
        })
    }

    /// The workspace's file system.
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// Whether `fd` is on the workspace's file system (what the journal notes).
    pub fn covers(&self, fd: BorrowedFd<'_>) -> bool {
        rustix::fs::fstat(fd).is_ok_and(|st| st.st_dev == self.dev)
    }

    /// The directory at `path` in the workspace, opened through the journal's own view
    /// of it, if it is `seen` (the same directory reached through the worker's world,
    /// whose mounts links and renames cannot cross). `None` when `path` no longer leads
    /// there.
    pub fn reopen(&self, seen: BorrowedFd<'_>, path: &[u8]) -> Option<OwnedFd> {
        use rustix::fs::ResolveFlags;
        let st = rustix::fs::fstat(seen).ok()?;
        let rel: &[u8] = if path.is_empty() { b"." } else { path };
        let fd = rustix::fs::openat2(
            &self.ws,
            std::ffi::OsStr::from_bytes(rel),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        let mine = rustix::fs::fstat(&fd).ok()?;
        (mine.st_dev == st.st_dev && mine.st_ino == st.st_ino).then_some(fd)
    }

    /// How many notes and kept files it holds.
    pub fn len(&self) -> usize {
        self.notes.len() + self.saved.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn aside_name(&mut self) -> CString {
        self.next += 1;
        // A decimal number has no NUL.
        CString::new(self.next.to_string()).unwrap_or_default()
    }

    fn dir_id(&mut self, ino: u64) -> usize {
        if let Some(id) = self.dir_ids.get(&ino) {
            return *id;
        }
        self.dirs.push(ino);
        self.dir_ids.insert(ino, self.dirs.len() - 1);
        self.dirs.len() - 1
    }

    /// The directory at `path` in the workspace (the journal's own view of it).
    fn open_path(&self, path: &[u8]) -> Result<OwnedFd, Errno> {
        use rustix::fs::ResolveFlags;
        let rel: &[u8] = if path.is_empty() { b"." } else { path };
        rustix::fs::openat2(
            &self.ws,
            std::ffi::OsStr::from_bytes(rel),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
    }

    /// A hard link in the journal's directory to the file `file` (any descriptor of it)
    /// found at `path` in the workspace; `None` when `path` does not lead to it (it was
    /// deleted, or moved since).
    fn link_aside(&mut self, file: BorrowedFd<'_>, path: &[u8]) -> Result<Option<CString>, Errno> {
        let st = rustix::fs::fstat(file)?;
        let (parent, name) = split(path);
        let Ok(dir) = self.open_path(parent) else {
            return Ok(None);
        };
        let name = cstr(name)?;
        match rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(at) if at.st_ino == st.st_ino && at.st_dev == st.st_dev => {}
            _ => return Ok(None),
        }
        let link = self.aside_name();
        rustix::fs::linkat(&dir, &name, &self.aside, &link, AtFlags::empty())?;
        Ok(Some(link))
    }

    /// The file `file` (any descriptor of it, `O_PATH` will do), at `path` in the
    /// workspace, is about to be written in place: its bytes and mode are kept, once.
    ///
    /// # Errors
    /// The copy failed (no room left: the call is answered ENOSPC).
    pub fn before_write(&mut self, file: BorrowedFd<'_>, path: &[u8]) -> Result<(), JournalError> {
        self.keep(file, path, true)
    }

    /// The mode of `file` (at `path`) is about to change: it is kept, once.
    ///
    /// # Errors
    /// The file could not be linked aside.
    pub fn before_mode(&mut self, file: BorrowedFd<'_>, path: &[u8]) -> Result<(), JournalError> {
        self.keep(file, path, false)
    }

    fn keep(&mut self, file: BorrowedFd<'_>, path: &[u8], bytes: bool) -> Result<(), JournalError> {
        let what = |e| JournalError::new(format!("keeping {}", shown(path)), e);
        let st = rustix::fs::fstat(file).map_err(what)?;
        if st.st_dev != self.dev {
            return Ok(());
        }
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            // A directory cannot be linked aside: its note says what it was, mode and all.
            let (parent, name) = split(path);
            return match self.open_path(parent) {
                Ok(dir) => self.before_entry(dir, parent, name),
                Err(_) => Ok(()),
            };
        }
        let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
        let have = self.saved.get(&st.st_ino);
        if have.is_some_and(|s| s.copy.is_some() || !bytes || !regular) {
            return Ok(());
        }
        let link = match have {
            Some(saved) => saved.link.clone(),
            None => match self.link_aside(file, path).map_err(what)? {
                Some(link) => link,
                None => return Ok(()),
            },
        };
        let copy = match bytes && regular {
            true => Some(self.copy_out(&link, mode_of(&st)).map_err(what)?),
            false => None,
        };
        self.saved.insert(
            st.st_ino,
            Saved {
                link,
                mode: mode_of(&st),
                copy,
                path: path.to_vec(),
            },
        );
        Ok(())
    }

    /// A copy of the bytes of the file linked aside at `link` (mode `mode`).
    fn copy_out(&mut self, link: &CStr, mode: u32) -> Result<CString, Errno> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let from = match rustix::fs::openat(&self.aside, link, flags, Mode::empty()) {
            Err(Errno::ACCESS) => {
                chmod_at(self.aside.as_fd(), link, mode | 0o600)?;
                let from = rustix::fs::openat(&self.aside, link, flags, Mode::empty());
                chmod_at(self.aside.as_fd(), link, mode)?;
                from?
            }
            other => other?,
        };
        let name = self.aside_name();
        let to = rustix::fs::openat(
            &self.aside,
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        if let Err(e) = fsops::copy_data(&from, &to) {
            let _ = rustix::fs::unlinkat(&self.aside, &name, AtFlags::empty());
            return Err(e);
        }
        Ok(name)
    }

    /// What `name` in `dir` is now, kept so that it can be made so again.
    fn slot(&mut self, dir: OwnedFd, dir_path: &[u8], name: &[u8]) -> Result<Slot, Errno> {
        let c = cstr(name)?;
        let pre = match rustix::fs::statat(&dir, &c, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Pre::Absent,
            Err(e) => return Err(e),
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Pre::Dir {
                dir: self.dir_id(st.st_ino),
                mode: mode_of(&st),
            },
            Ok(st) => {
                let aside = self.aside_name();
                rustix::fs::linkat(&dir, &c, &self.aside, &aside, AtFlags::empty())?;
                Pre::Entry {
                    aside,
                    ino: st.st_ino,
                }
            }
        };
        Ok(Slot {
            dir_path: dir_path.to_vec(),
            name: c,
            path: join(dir_path, name),
            pre,
        })
    }

    /// `name` in `dir` (at `dir_path` in the workspace) is about to be created,
    /// replaced or removed.
    ///
    /// # Errors
    /// What it names could not be kept.
    pub fn before_entry(
        &mut self,
        dir: OwnedFd,
        dir_path: &[u8],
        name: &[u8],
    ) -> Result<(), JournalError> {
        if !self.covers(dir.as_fd()) || name.is_empty() {
            return Ok(());
        }
        let slot = self.slot(dir, dir_path, name).map_err(|e| {
            JournalError::new(format!("keeping {}", shown(&join(dir_path, name))), e)
        })?;
        self.push(Note::Entry(slot))
    }

    /// `from` is about to be renamed to `to` (each a directory, its path and a name), or
    /// exchanged with it.
    ///
    /// # Errors
    /// What either names could not be kept.
    pub fn before_rename(
        &mut self,
        from: (OwnedFd, &[u8], &[u8]),
        to: (OwnedFd, &[u8], &[u8]),
        exchange: bool,
    ) -> Result<(), JournalError> {
        match (self.covers(from.0.as_fd()), self.covers(to.0.as_fd())) {
            (false, false) => return Ok(()),
            (true, true) => {}
            // Across file systems a rename fails (EXDEV); nothing changes.
            _ => return Ok(()),
        }
        let what = |e| JournalError::new(format!("keeping {}", shown(&join(from.1, from.2))), e);
        let from = self.slot(from.0, from.1, from.2).map_err(what)?;
        let to = self.slot(to.0, to.1, to.2).map_err(what)?;
        self.push(Note::Rename { from, to, exchange })
    }

    /// Adds a note; past [`MAX_NOTES`] the change is refused as a full disk would.
    fn push(&mut self, note: Note) -> Result<(), JournalError> {
        if self.notes.len() >= self.max_notes {
            return Err(JournalError::new(
                format!(
                    "a transactional call may change at most {} names",
                    self.max_notes
                ),
                Errno::NOSPC,
            ));
        }
        self.notes.push(note);
        Ok(())
    }

    fn identity(&self, pre: &Pre) -> Option<u64> {
        match pre {
            Pre::Absent => None,
            Pre::Entry { ino, .. } => Some(*ino),
            Pre::Dir { dir, .. } => self.dirs.get(*dir).copied(),
        }
    }

    fn ino_at(&self, slot: &Slot) -> Option<u64> {
        let dir = self.open_path(&slot.dir_path).ok()?;
        rustix::fs::statat(&dir, &slot.name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| st.st_ino)
    }

    /// Makes `slot`'s name what it was.
    fn put_back(&mut self, slot: &Slot) -> Result<(), Errno> {
        let dir = self.open_path(&slot.dir_path)?;
        let now = rustix::fs::statat(&dir, &slot.name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let same = now.as_ref().map(|st| st.st_ino) == self.identity(&slot.pre) && now.is_some();
        match &slot.pre {
            Pre::Absent => {
                if now.is_some() {
                    remove_at(dir.as_fd(), &slot.name)?;
                }
            }
            Pre::Entry { aside, .. } if !same => {
                if now.is_some() {
                    remove_at(dir.as_fd(), &slot.name)?;
                }
                writable(dir.as_fd(), || {
                    rustix::fs::linkat(&self.aside, aside, &dir, &slot.name, AtFlags::empty())
                })?;
            }
            Pre::Entry { .. } => {}
            Pre::Dir { dir: id, mode } => {
                if !same {
                    if now.is_some() {
                        remove_at(dir.as_fd(), &slot.name)?;
                    }
                    writable(dir.as_fd(), || {
                        rustix::fs::mkdirat(&dir, &slot.name, Mode::from_raw_mode(0o700))
                    })?;
                    if let Some((uid, gid)) = self.owner {
                        rustix::fs::chownat(
                            &dir,
                            &slot.name,
                            Some(rustix::fs::Uid::from_raw(uid)),
                            Some(rustix::fs::Gid::from_raw(gid)),
                            AtFlags::SYMLINK_NOFOLLOW,
                        )?;
                    }
                    let ino =
                        rustix::fs::statat(&dir, &slot.name, AtFlags::SYMLINK_NOFOLLOW)?.st_ino;
                    if let Some(d) = self.dirs.get_mut(*id) {
                        *d = ino;
                    }
                }
                chmod_at(dir.as_fd(), &slot.name, *mode)?;
            }
        }
        Ok(())
    }

    /// Undoes one rename (if it happened), then makes both names what they were.
    fn put_back_rename(&mut self, from: &Slot, to: &Slot, exchange: bool) -> Result<(), Errno> {
        let (was_from, was_to) = (self.identity(&from.pre), self.identity(&to.pre));
        let (now_from, now_to) = (self.ino_at(from), self.ino_at(to));
        let (fd_from, fd_to) = (
            self.open_path(&from.dir_path)?,
            self.open_path(&to.dir_path)?,
        );
        if exchange {
            if was_from.is_some() && was_to.is_some() && now_from == was_to && now_to == was_from {
                rustix::fs::renameat_with(
                    &fd_to,
                    &to.name,
                    &fd_from,
                    &from.name,
                    RenameFlags::EXCHANGE,
                )?;
            }
        } else if was_from.is_some() && now_to == was_from && now_from.is_none() {
            writable(fd_from.as_fd(), || {
                rustix::fs::renameat(&fd_to, &to.name, &fd_from, &from.name)
            })?;
        }
        self.put_back(to)?;
        self.put_back(from)
    }

    /// Puts back the kept bytes and modes, into the same inodes: through the file's name
    /// in the workspace when it still names it (so the workspace's tracker sees the
    /// change), else through the journal's link.
    fn put_back_files(&self) -> Result<(), JournalError> {
        for saved in self.saved.values() {
            let what = |e| JournalError::new(format!("putting back {}", shown(&saved.path)), e);
            let (dir, name) = self.name_of(saved).map_err(what)?;
            if let Some(copy) = &saved.copy {
                let from = rustix::fs::openat(
                    &self.aside,
                    copy,
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(what)?;
                let flags = OFlags::WRONLY | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let to = match rustix::fs::openat(&dir, &name, flags, Mode::empty()) {
                    Err(Errno::ACCESS) => {
                        chmod_at(dir.as_fd(), &name, 0o600).map_err(what)?;
                        rustix::fs::openat(&dir, &name, flags, Mode::empty())
                    }
                    other => other,
                }
                .map_err(what)?;
                fsops::copy_data(&from, &to).map_err(what)?;
            }
            chmod_at(dir.as_fd(), &name, saved.mode).map_err(what)?;
        }
        Ok(())
    }

    /// A directory and a name of the kept file: its path in the workspace if that still
    /// leads to it, else the journal's link.
    fn name_of(&self, saved: &Saved) -> Result<(OwnedFd, CString), Errno> {
        let ino = rustix::fs::statat(&self.aside, &saved.link, AtFlags::SYMLINK_NOFOLLOW)?.st_ino;
        let (parent, name) = split(&saved.path);
        if let (Ok(dir), Ok(name)) = (self.open_path(parent), cstr(name))
            && rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_ino == ino)
        {
            return Ok((dir, name));
        }
        Ok((
            rustix::io::fcntl_dupfd_cloexec(&self.aside, 0)?,
            saved.link.clone(),
        ))
    }

    /// The paths the notes touched and what is at each now (for the rollback's report).
    fn touched(&self) -> BTreeMap<Vec<u8>, Option<(EntryKind, u64, u64)>> {
        let mut paths = BTreeMap::new();
        let mut add = |path: &[u8]| {
            paths.insert(path.to_vec(), self.at_path(path));
        };
        for note in &self.notes {
            match note {
                Note::Entry(slot) => add(&slot.path),
                Note::Rename { from, to, .. } => {
                    add(&from.path);
                    add(&to.path);
                }
            }
        }
        for saved in self.saved.values() {
            add(&saved.path);
        }
        paths
    }

    /// Kind, inode and size of what is at `path` in the workspace.
    fn at_path(&self, path: &[u8]) -> Option<(EntryKind, u64, u64)> {
        let (parent, name) = split(path);
        let dir = self.open_path(parent).ok()?;
        let st = rustix::fs::statat(&dir, cstr(name).ok()?.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            .ok()?;
        Some((kind_of(&st), st.st_ino, st.st_size as u64))
    }

    /// Puts the workspace back as it was before the first note, and says what that
    /// changed. The journal's kept files are removed.
    ///
    /// # Errors
    /// The file system refused a step (the workspace may then be partly rolled back; the
    /// error names the step).
    pub fn roll_back(mut self) -> Result<Report, JournalError> {
        let before = self.touched();
        let notes = std::mem::take(&mut self.notes);
        for note in notes.iter().rev() {
            let done = match note {
                Note::Entry(slot) => self.put_back(slot).map_err(|e| (slot, e)),
                Note::Rename { from, to, exchange } => self
                    .put_back_rename(from, to, *exchange)
                    .map_err(|e| (from, e)),
            };
            if let Err((slot, e)) = done {
                return Err(JournalError::new(
                    format!("putting back {}", shown(&slot.path)),
                    e,
                ));
            }
        }
        self.notes = notes;
        self.put_back_files()?;
        chmod_fd(self.ws.as_fd(), self.root_mode)
            .map_err(|e| JournalError::new("putting back the workspace's mode", e))?;
        let after = self.touched();
        let restored: std::collections::HashSet<&[u8]> =
            self.saved.values().map(|s| s.path.as_slice()).collect();
        let mut changes = Vec::new();
        for (path, was) in before {
            let now = after.get(&path).copied().flatten();
            let change = match (was, now) {
                (None, None) => continue,
                (None, Some(_)) => Change::Created,
                (Some(_), None) => Change::Deleted,
                (Some(a), Some(b)) if a.1 != b.1 || restored.contains(path.as_slice()) => {
                    Change::Modified
                }
                _ => continue,
            };
            let Some((kind, _, size)) = now.or(was) else {
                continue;
            };
            if kind == EntryKind::Dir {
                continue;
            }
            changes.push(RawChange {
                path,
                change,
                kind,
                size,
            });
        }
        self.clear();
        Ok(Report {
            changes,
            incomplete: None,
            by_scan: None,
        })
    }

    /// Removes what the journal kept (after a call that succeeded, or a rollback).
    pub fn clear(&self) {
        if let Ok(entries) = fsops::list(self.aside.as_fd()) {
            for (name, _) in entries {
                if let Ok(c) = cstr(&name) {
                    let _ = rustix::fs::unlinkat(&self.aside, &c, AtFlags::empty());
                }
            }
        }
    }
}

/// Runs `op` in `dir`; refused for want of write permission on `dir` (code made it
/// read-only), it runs again with `dir` writable for the owner, whose mode is then
/// put back.
fn writable<T>(dir: BorrowedFd<'_>, op: impl Fn() -> Result<T, Errno>) -> Result<T, Errno> {
    match op() {
        Err(Errno::ACCESS) => {
            let mode = mode_of(&rustix::fs::fstat(dir)?);
            chmod_fd(dir, mode | 0o700)?;
            let done = op();
            chmod_fd(dir, mode)?;
            done
        }
        other => other,
    }
}

/// Removes `name` from `dir`, a directory with everything in it.
fn remove_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    match writable(dir, || rustix::fs::unlinkat(dir, name, AtFlags::empty())) {
        Err(Errno::ISDIR | Errno::PERM) => {}
        other => return other,
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let sub = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Err(Errno::ACCESS) => {
            let path = rustix::fs::openat(
                dir,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            chmod_fd(path.as_fd(), 0o700)?;
            rustix::fs::openat(dir, name, flags, Mode::empty())?
        }
        other => other?,
    };
    chmod_fd(sub.as_fd(), 0o700)?;
    for (entry, _) in fsops::list(sub.as_fd())? {
        remove_at(sub.as_fd(), cstr(&entry)?.as_c_str())?;
    }
    writable(dir, || rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR))
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    if parent.is_empty() {
        return name.to_vec();
    }
    let mut out = parent.to_vec();
    out.push(b'/');
    out.extend_from_slice(name);
    out
}

fn shown(path: &[u8]) -> String {
    crate::text::display_name(path)
}

#[cfg(test)]
mod tests;
