//! Checkpoints that share the workspace's files until the code changes them.
//!
//! Why: a checkpoint that copies every byte costs what `cp -a` costs. A checkpoint whose
//! files are hard links to the workspace's costs its entries, and stays right as long as
//! nothing changes a shared file in place. Everything that can change one passes the
//! supervisor first ([`crate::sandbox::linux::supervisor`]: opening it for writing,
//! truncating it, changing its mode or times), and the files the worker could already
//! write when the checkpoint was taken are copied, never linked. So before a shared file
//! is changed, [`Shared::before_change`] gives every checkpoint that links it a copy of
//! its own (bytes, mode, times), and only then lets the change go on. Replacing or
//! removing a workspace name never touches the inode, so it needs nothing.
//!
//! The register lives with the session, in memory: a checkpoint name it lists is checked
//! to still be that inode before it is replaced, so a checkpoint taken again under the
//! same name, or deleted, is never touched by a stale entry.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags, Timestamps};
use rustix::io::Errno;

use super::fsops;
use super::journal::JournalError;

/// The session's register (`None` until a checkpoint links a file).
pub type Slot = Arc<Mutex<Option<Shared>>>;

/// Which checkpoint names (relative to the checkpoint store) link which inode.
pub struct Shared {
    store: OwnedFd,
    /// The store's (and the workspace's) file system.
    dev: u64,
    links: HashMap<u64, Vec<CString>>,
    next: u64,
}

impl Shared {
    /// A register for the checkpoint store `store` (a directory on the workspace's
    /// file system).
    ///
    /// # Errors
    /// The store cannot be read.
    pub fn new(store: OwnedFd) -> Result<Shared, Errno> {
        let dev = rustix::fs::fstat(&store)?.st_dev;
        Ok(Shared {
            store,
            dev,
            links: HashMap::new(),
            next: 0,
        })
    }

    /// The file system of the store and the workspace.
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// `path` (relative to the store) links inode `ino` of the workspace.
    pub fn add(&mut self, ino: u64, path: CString) {
        self.links.entry(ino).or_default().push(path);
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// How many inodes are shared.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Before `file` (any descriptor of a workspace file) changes in place: every
    /// checkpoint that links it gets a copy of its own.
    ///
    /// # Errors
    /// The copy could not be made (no room: the change is answered ENOSPC and the
    /// checkpoints keep linking the file, unchanged).
    pub fn before_change(&mut self, file: BorrowedFd<'_>) -> Result<(), JournalError> {
        let st = rustix::fs::fstat(file).map_err(|e| JournalError::new("a shared file", e))?;
        let Some(paths) = self.links.remove(&st.st_ino) else {
            return Ok(());
        };
        let linked: Vec<&CString> = paths
            .iter()
            .filter(|p| {
                rustix::fs::statat(&self.store, p.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|s| s.st_ino == st.st_ino && s.st_dev == st.st_dev)
            })
            .collect();
        if linked.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.copy_for(file, &st, &linked) {
            self.links.insert(st.st_ino, paths);
            return Err(JournalError::new(
                "a checkpoint's copy of a changed file",
                e,
            ));
        }
        Ok(())
    }

    /// Copies `file` once and puts the copy in place of each of `linked`.
    fn copy_for(
        &mut self,
        file: BorrowedFd<'_>,
        st: &rustix::fs::Stat,
        linked: &[&CString],
    ) -> Result<(), Errno> {
        self.next += 1;
        let tmp = CString::new(format!(".cow-{}", self.next)).map_err(|_| Errno::INVAL)?;
        let done = self.fill(file, st, &tmp).and_then(|()| {
            for (n, path) in linked.iter().enumerate() {
                let step =
                    CString::new(format!(".cow-{}-{n}", self.next)).map_err(|_| Errno::INVAL)?;
                rustix::fs::linkat(&self.store, &tmp, &self.store, &step, AtFlags::empty())?;
                rustix::fs::renameat(&self.store, &step, &self.store, path.as_c_str())?;
            }
            Ok(())
        });
        let _ = rustix::fs::unlinkat(&self.store, &tmp, AtFlags::empty());
        done
    }

    /// A copy of `file` at `tmp` in the store: bytes, mode, owner and times.
    fn fill(
        &self,
        file: BorrowedFd<'_>,
        st: &rustix::fs::Stat,
        tmp: &CString,
    ) -> Result<(), Errno> {
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let from = match rustix::fs::open(
            path.as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Err(Errno::ACCESS) => {
                let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
                rustix::fs::chmod(path.as_str(), mode | Mode::RUSR)?;
                let from = rustix::fs::open(
                    path.as_str(),
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                );
                rustix::fs::chmod(path.as_str(), mode)?;
                from?
            }
            other => other?,
        };
        let to: OwnedFd = rustix::fs::openat(
            &self.store,
            tmp.as_c_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        fsops::copy_data(&from, &to)?;
        if rustix::process::geteuid().is_root() {
            rustix::fs::fchown(
                &to,
                Some(rustix::fs::Uid::from_raw(st.st_uid)),
                Some(rustix::fs::Gid::from_raw(st.st_gid)),
            )?;
        }
        rustix::fs::fchmod(&to, Mode::from_raw_mode(st.st_mode & 0o7777))?;
        let times = Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: st.st_atime as _,
                tv_nsec: st.st_atime_nsec as _,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: st.st_mtime as _,
                tv_nsec: st.st_mtime_nsec as _,
            },
        };
        rustix::fs::futimens(&to, &times)?;
        Ok(())
    }

    /// Gives every checkpoint its own copy of every file it links (for a worker whose
    /// changes cannot be seen first).
    ///
    /// # Errors
    /// A copy could not be made.
    pub fn unshare_all(&mut self) -> Result<(), JournalError> {
        let inodes: Vec<u64> = self.links.keys().copied().collect();
        for ino in inodes {
            self.unshare(ino)?;
        }
        Ok(())
    }

    /// Gives every checkpoint that links inode `ino` its own copy of it.
    ///
    /// # Errors
    /// The copy could not be made.
    pub fn unshare(&mut self, ino: u64) -> Result<(), JournalError> {
        let Some(path) = self.links.get(&ino).and_then(|p| p.first()).cloned() else {
            return Ok(());
        };
        // Any name of the inode will do: a checkpoint's own.
        let file = rustix::fs::openat(
            &self.store,
            path.as_c_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        match file {
            Ok(file) => self.before_change(file.as_fd()),
            Err(_) => {
                self.links.remove(&ino);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::workspace::checkpoint::tests::dir_fd;

    fn opath(path: &std::path::Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap()
    }

    #[test]
    fn a_shared_file_gives_each_checkpoint_name_its_own_copy_before_it_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let (ws, store) = (tmp.path().join("ws"), tmp.path().join("store"));
        std::fs::create_dir_all(store.join("c/tree")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("f"), "before").unwrap();
        std::fs::hard_link(ws.join("f"), store.join("c/tree/f")).unwrap();
        std::fs::hard_link(ws.join("f"), store.join("c/tree/g")).unwrap();
        let ino = std::fs::metadata(ws.join("f")).unwrap().ino();
        let mut shared = Shared::new(dir_fd(&store)).unwrap();
        shared.add(ino, CString::new("c/tree/f").unwrap());
        shared.add(ino, CString::new("c/tree/g").unwrap());
        shared.before_change(opath(&ws.join("f")).as_fd()).unwrap();
        std::fs::write(ws.join("f"), "after").unwrap();
        assert_eq!(
            std::fs::read_to_string(store.join("c/tree/f")).unwrap(),
            "before"
        );
        // The checkpoint's two names are still one file, and the workspace's its own.
        let (f, g) = (
            std::fs::metadata(store.join("c/tree/f")).unwrap(),
            std::fs::metadata(store.join("c/tree/g")).unwrap(),
        );
        assert_eq!((f.ino(), f.nlink()), (g.ino(), 2));
        assert_eq!(std::fs::metadata(ws.join("f")).unwrap().nlink(), 1);
        assert!(shared.is_empty());
        let leftovers: Vec<_> = std::fs::read_dir(&store).unwrap().flatten().collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    }

    #[test]
    fn a_stale_entry_never_touches_a_name_that_is_another_file_now() {
        let tmp = tempfile::tempdir().unwrap();
        let (ws, store) = (tmp.path().join("ws"), tmp.path().join("store"));
        std::fs::create_dir_all(store.join("c/tree")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("f"), "workspace").unwrap();
        // The checkpoint was taken again: its `f` is another file now.
        std::fs::write(store.join("c/tree/f"), "newer checkpoint").unwrap();
        let ino = std::fs::metadata(ws.join("f")).unwrap().ino();
        let mut shared = Shared::new(dir_fd(&store)).unwrap();
        shared.add(ino, CString::new("c/tree/f").unwrap());
        shared.before_change(opath(&ws.join("f")).as_fd()).unwrap();
        assert_eq!(
            std::fs::read_to_string(store.join("c/tree/f")).unwrap(),
            "newer checkpoint"
        );
    }
}
