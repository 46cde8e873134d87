//! What a stopped call is about to do ([`decode`]), read from the stopped task
//! ([`Task`]: its memory, root, working directory and descriptors), and the names it
//! gives resolved the way the kernel will resolve them for the worker ([`resolve`]):
//! from the worker's own root, following symbolic links by reading them, never in the
//! server's own root.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::sandbox::linux::seccomp::Arch;
use crate::sandbox::linux::seccomp::journal::{O_CREAT, O_TRUNC, O_WRONLY};
use crate::sandbox::linux::seccomp::syscalls::Sys;

pub(super) const O_EXCL: u64 = 0o200;
pub(super) const O_NOFOLLOW: u64 = 0o400_000;
const AT_FDCWD: i32 = -100;
const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
const RENAME_EXCHANGE: u64 = 2;
/// Longest path the kernel takes.
const PATH_MAX: usize = 4096;
/// Most symbolic links followed in one resolution (the kernel's limit).
const MAX_LINKS: usize = 40;

/// A name as a call gives it: relative to a descriptor (or the working directory) unless
/// absolute, at an address in the task's memory.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    pub(super) dirfd: i32,
    pub(super) addr: u64,
}

/// What a stopped call is about to do, as the journal sees it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    /// An open (or creat, or truncate) with these flags.
    Open {
        at: At,
        flags: u64,
    },
    /// `openat2`: the flags are in memory.
    Open2 {
        at: At,
        how: u64,
    },
    Mode {
        fd: i32,
    },
    /// `utimensat`: a name, or the descriptor itself when the name is NULL.
    Times {
        at: At,
        nofollow: bool,
    },
    Entry {
        at: At,
    },
    Rename {
        from: At,
        to: At,
        exchange: bool,
    },
}

fn at(dirfd: u64, addr: u64) -> At {
    At {
        dirfd: dirfd as i32,
        addr,
    }
}

fn cwd(addr: u64) -> At {
    at(AT_FDCWD as u64, addr)
}

pub(super) fn decode(notif: &libc::seccomp_notif) -> Option<Op> {
    let arch = Arch::native()?;
    if notif.data.arch != arch.audit_arch() {
        return None;
    }
    let nr = i64::from(notif.data.nr);
    let sys = *Sys::ALL.iter().find(|s| s.number(arch) == Some(nr))?;
    let a = notif.data.args;
    Some(match sys {
        Sys::Open => Op::Open {
            at: cwd(a[0]),
            flags: a[1],
        },
        Sys::Openat => Op::Open {
            at: at(a[0], a[1]),
            flags: a[2],
        },
        Sys::Creat => Op::Open {
            at: cwd(a[0]),
            flags: O_CREAT | O_WRONLY | O_TRUNC,
        },
        Sys::Truncate => Op::Open {
            at: cwd(a[0]),
            flags: O_WRONLY | O_TRUNC,
        },
        Sys::Openat2 => Op::Open2 {
            at: at(a[0], a[1]),
            how: a[2],
        },
        Sys::Fchmod => Op::Mode { fd: a[0] as i32 },
        Sys::Utimensat => Op::Times {
            at: at(a[0], a[1]),
            nofollow: a[3] & AT_SYMLINK_NOFOLLOW != 0,
        },
        Sys::Unlink | Sys::Rmdir | Sys::Mkdir | Sys::Mknod => Op::Entry { at: cwd(a[0]) },
        Sys::Unlinkat | Sys::Mkdirat | Sys::Mknodat => Op::Entry { at: at(a[0], a[1]) },
        Sys::Symlink | Sys::Link => Op::Entry { at: cwd(a[1]) },
        Sys::Symlinkat => Op::Entry { at: at(a[1], a[2]) },
        Sys::Linkat => Op::Entry { at: at(a[2], a[3]) },
        Sys::Rename => Op::Rename {
            from: cwd(a[0]),
            to: cwd(a[1]),
            exchange: false,
        },
        Sys::Renameat => Op::Rename {
            from: at(a[0], a[1]),
            to: at(a[2], a[3]),
            exchange: false,
        },
        Sys::Renameat2 => Op::Rename {
            from: at(a[0], a[1]),
            to: at(a[2], a[3]),
            exchange: a[4] & RENAME_EXCHANGE != 0,
        },
        _ => return None,
    })
}

/// The stopped task's memory, root, and working directory, opened before its
/// notification is checked still valid.
pub(super) struct Task {
    pub(super) pid: i32,
    pub(super) mem: OwnedFd,
    pub(super) root: OwnedFd,
    /// The workspace's file system: nothing elsewhere is seen to.
    pub(super) dev: u64,
}

impl Task {
    pub(super) fn open(pid: i32, dev: u64) -> Result<Task, Errno> {
        let mem = rustix::fs::open(
            format!("/proc/{pid}/mem").as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let root = opath_dir(&format!("/proc/{pid}/root"))?;
        Ok(Task {
            pid,
            mem,
            root,
            dev,
        })
    }

    /// The NUL-terminated string at `addr`.
    pub(super) fn string(&self, addr: u64) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < PATH_MAX {
            // Up to the end of the page: the next one may not be mapped.
            let room = 4096 - (at % 4096) as usize;
            let mut buf = vec![0u8; room.min(PATH_MAX - out.len())];
            let n = rustix::io::pread(&self.mem, &mut buf, at)?;
            if n == 0 {
                return Err(Errno::FAULT);
            }
            if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
                out.extend_from_slice(&buf[..end]);
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
            at += n as u64;
        }
        Err(Errno::NAMETOOLONG)
    }

    /// Whether `fd` is on the workspace's file system.
    pub(super) fn covers(&self, fd: BorrowedFd<'_>) -> bool {
        rustix::fs::fstat(fd).is_ok_and(|st| st.st_dev == self.dev)
    }

    pub(super) fn u64_at(&self, addr: u64) -> Result<u64, Errno> {
        let mut buf = [0u8; 8];
        if rustix::io::pread(&self.mem, &mut buf, addr)? != 8 {
            return Err(Errno::FAULT);
        }
        Ok(u64::from_ne_bytes(buf))
    }

    /// Where a relative name starts: the working directory or descriptor `dirfd`.
    pub(super) fn base(&self, dirfd: i32) -> Result<OwnedFd, Errno> {
        if dirfd == AT_FDCWD {
            opath_dir(&format!("/proc/{}/cwd", self.pid))
        } else {
            opath(&format!("/proc/{}/fd/{dirfd}", self.pid))
        }
    }
}

pub(super) fn opath(path: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
}

pub(super) fn opath_dir(path: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

pub(super) fn opath_at(
    dir: BorrowedFd<'_>,
    name: &[u8],
    directory: bool,
) -> Result<OwnedFd, Errno> {
    let mut flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    rustix::fs::openat(dir, std::ffi::OsStr::from_bytes(name), flags, Mode::empty())
}

/// A name resolved to its directory: the directory, its path in the workspace, and the
/// last component.
pub(super) struct Target {
    pub(super) dir: OwnedFd,
    pub(super) dir_path: Vec<u8>,
    pub(super) name: Vec<u8>,
}

/// Resolves the name at `at` as the kernel will for the task (following a final
/// symbolic link when `follow`); `None` when it does not resolve (the call will fail) or
/// is not in the workspace. Other errors (the server out of descriptors or memory) fail
/// the call: a change the journal could not see never happens.
pub(super) fn resolve(task: &Task, at: At, follow: bool) -> Result<Option<Target>, Errno> {
    match resolve_in_world(task, at, follow) {
        // What the kernel will refuse as well (a bad pointer, a name too long, a loop, a
        // missing or unreadable directory): the call goes on, to fail there with its own
        // error, never with one of the server's.
        Err(
            Errno::FAULT
            | Errno::NAMETOOLONG
            | Errno::LOOP
            | Errno::NOENT
            | Errno::NOTDIR
            | Errno::ACCESS
            | Errno::INVAL,
        ) => Ok(None),
        other => other,
    }
}

fn resolve_in_world(task: &Task, at: At, follow: bool) -> Result<Option<Target>, Errno> {
    let path = task.string(at.addr)?;
    let mut cur = if path.first() == Some(&b'/') {
        dup(&task.root)?
    } else {
        task.base(at.dirfd)?
    };
    let mut todo: VecDeque<Vec<u8>> = components(&path);
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        let last = todo.is_empty();
        if part == b"." || part == b".." {
            if last {
                return Ok(None);
            }
            if part == b".." {
                cur = opath_at(cur.as_fd(), b"..", true)?;
            }
            continue;
        }
        let st = match rustix::fs::statat(
            &cur,
            std::ffi::OsStr::from_bytes(&part),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) if last => None,
            Err(_) => return Ok(None),
        };
        let kind = st.map(|st| FileType::from_raw_mode(st.st_mode));
        if kind == Some(FileType::Symlink) && (follow || !last) {
            links += 1;
            if links > MAX_LINKS {
                return Ok(None);
            }
            let target =
                rustix::fs::readlinkat(&cur, std::ffi::OsStr::from_bytes(&part), Vec::new())?;
            let target = target.into_bytes();
            if target.first() == Some(&b'/') {
                cur = dup(&task.root)?;
            }
            for c in components(&target).into_iter().rev() {
                todo.push_front(c);
            }
            continue;
        }
        if last {
            if !task.covers(cur.as_fd()) {
                return Ok(None);
            }
            let dir_path = in_workspace(cur.as_fd());
            return Ok(Some(Target {
                dir: cur,
                dir_path,
                name: part,
            }));
        }
        if kind != Some(FileType::Directory) {
            return Ok(None);
        }
        cur = opath_at(cur.as_fd(), &part, true)?;
    }
    Ok(None)
}

fn components(path: &[u8]) -> VecDeque<Vec<u8>> {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
}

/// A directory's path in the workspace, for reports: the kernel names a descriptor
/// into the worker's world by its path there (`/workspace/…`).
pub(super) fn in_workspace(dir: BorrowedFd<'_>) -> Vec<u8> {
    let link = rustix::fs::readlink(
        format!("/proc/self/fd/{}", dir.as_raw_fd()).as_str(),
        Vec::new(),
    )
    .map(std::ffi::CString::into_bytes)
    .unwrap_or_default();
    let prefix = crate::workspace::IN_WORLD.as_bytes();
    match link.strip_prefix(prefix) {
        Some([b'/', rest @ ..]) => rest.to_vec(),
        _ => Vec::new(),
    }
}
