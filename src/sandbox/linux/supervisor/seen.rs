//! Who must see a change before the kernel makes it, and what each keeps: the session's
//! open journal (names, bytes, modes) and its checkpoints' register of shared files
//! (a copy of a shared file before it changes in place).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;

use super::calls::{
    At, O_EXCL, O_NOFOLLOW, Op, Target, Task, in_workspace, opath, opath_at, resolve,
};
use crate::sandbox::linux::seccomp::journal::{O_CREAT, O_RDWR, O_TRUNC, O_WRONLY};
use crate::workspace::journal::Journal;

/// Who must see a change first: the open journal, and the checkpoints that share files.
pub(super) struct Seen<'a> {
    pub(super) journal: Option<&'a mut Journal>,
    pub(super) cow: Option<&'a mut crate::workspace::cow::Shared>,
}

type Noted = Result<(), crate::workspace::journal::JournalError>;

fn io(e: Errno) -> crate::workspace::journal::JournalError {
    crate::workspace::journal::JournalError::new("resolving a name", e)
}

impl Seen<'_> {
    /// Shows each what `op` is about to change.
    pub(super) fn note(&mut self, task: &Task, op: Op) -> Noted {
        match op {
            // Names matter to the journal alone.
            Op::Entry { .. } | Op::Rename { .. } if self.journal.is_none() => Ok(()),
            Op::Open2 { at, how } => {
                let flags = task.u64_at(how).map_err(io)?;
                self.note(task, Op::Open { at, flags })
            }
            Op::Open { at, flags } => self.open(task, at, flags),
            Op::Mode { fd } => {
                let Ok(file) = opath(&format!("/proc/{}/fd/{fd}", task.pid)) else {
                    return Ok(());
                };
                if !task.covers(file.as_fd()) {
                    return Ok(());
                }
                let path = in_workspace(file.as_fd());
                self.in_place(file, &path, true)
            }
            Op::Times { at, nofollow } => {
                let file = if at.addr == 0 {
                    opath(&format!("/proc/{}/fd/{}", task.pid, at.dirfd)).ok()
                } else {
                    resolve(task, at, !nofollow)
                        .map_err(io)?
                        .and_then(|t| opath_at(t.dir.as_fd(), &t.name, false).ok())
                };
                match (file, self.cow.as_deref_mut()) {
                    (Some(file), Some(cow)) if task.covers(file.as_fd()) => {
                        cow.before_change(file.as_fd())
                    }
                    _ => Ok(()),
                }
            }
            Op::Entry { at } => match resolve(task, at, false).map_err(io)? {
                Some(t) => self.entry(t),
                None => Ok(()),
            },
            Op::Rename { from, to, exchange } => {
                let (Some(a), Some(b)) = (
                    resolve(task, from, false).map_err(io)?,
                    resolve(task, to, false).map_err(io)?,
                ) else {
                    return Ok(());
                };
                let Some(journal) = self.journal.as_deref_mut() else {
                    return Ok(());
                };
                let (Some(da), Some(db)) = (
                    journal.reopen(a.dir.as_fd(), &a.dir_path),
                    journal.reopen(b.dir.as_fd(), &b.dir_path),
                ) else {
                    return Ok(());
                };
                journal.before_rename(
                    (da, &a.dir_path, &a.name),
                    (db, &b.dir_path, &b.name),
                    exchange,
                )
            }
        }
    }

    fn open(&mut self, task: &Task, at: At, flags: u64) -> Noted {
        let creates = flags & O_CREAT != 0;
        let writes = flags & (O_WRONLY | O_RDWR | O_TRUNC) != 0;
        let follow = flags & O_NOFOLLOW == 0 && !(creates && flags & O_EXCL != 0);
        let Some(t) = resolve(task, at, follow).map_err(io)? else {
            return Ok(());
        };
        let name = std::ffi::OsStr::from_bytes(&t.name);
        match rustix::fs::statat(&t.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && writes => {
                let file = opath_at(t.dir.as_fd(), &t.name, false).map_err(io)?;
                let path = match t.dir_path.is_empty() {
                    true => t.name.clone(),
                    false => [t.dir_path.as_slice(), b"/", t.name.as_slice()].concat(),
                };
                self.in_place(file, &path, false)
            }
            Err(Errno::NOENT) if creates => self.entry(t),
            _ => Ok(()),
        }
    }

    /// A file about to change in place: its bytes (or only its mode) are kept.
    fn in_place(&mut self, file: OwnedFd, path: &[u8], mode_only: bool) -> Noted {
        if let Some(cow) = self.cow.as_deref_mut() {
            cow.before_change(file.as_fd())?;
        }
        let Some(journal) = self.journal.as_deref_mut() else {
            return Ok(());
        };
        if mode_only {
            journal.before_mode(file.as_fd(), path)
        } else {
            journal.before_write(file.as_fd(), path)
        }
    }

    /// A name about to be created, replaced or removed: the journal's alone.
    fn entry(&mut self, t: Target) -> Noted {
        let Some(journal) = self.journal.as_deref_mut() else {
            return Ok(());
        };
        match journal.reopen(t.dir.as_fd(), &t.dir_path) {
            Some(dir) => journal.before_entry(dir, &t.dir_path, &t.name),
            None => Ok(()),
        }
    }
}
