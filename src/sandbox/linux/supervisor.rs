//! The server's end of the journal's filter ([`seccomp::journal`]): one thread per
//! worker that takes each stopped call, and, while the worker's session has a
//! transactional call running, notes in its [`Journal`] what the call is about to change
//! before letting it go on. Between transactional calls every stopped call goes on at
//! once.
//!
//! What a call names is resolved the way the kernel will resolve it for the worker: from
//! the worker's own root, working directory or descriptor (through `/proc/<tid>/root`,
//! `cwd` and `fd`), following symbolic links by reading them, never following them in the
//! server's own root. Only what is on the workspace's own file system is noted.
//!
//! The call goes on after the note (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): the kernel then
//! performs it with the worker's own rights and walls. A note that fails for want of room
//! answers the call ENOSPC instead, as the disk quota would. Code that races its own file
//! operations from several threads can change a name between the note and the call; its
//! rollback may then miss that change, and never reaches outside the workspace.
//!
//! [`seccomp::journal`]: crate::sandbox::linux::seccomp::journal
//! [`Journal`]: crate::workspace::journal::Journal

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::sandbox::linux::seccomp::Arch;
use crate::sandbox::linux::seccomp::journal::{O_CREAT, O_RDWR, O_TRUNC, O_WRONLY};
use crate::sandbox::linux::seccomp::syscalls::Sys;
use crate::workspace::journal::{Journal, Shared};

const O_EXCL: u64 = 0o200;
const O_NOFOLLOW: u64 = 0o400_000;
const AT_FDCWD: i32 = -100;
const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
const RENAME_EXCHANGE: u64 = 2;
/// Longest path the kernel takes.
const PATH_MAX: usize = 4096;
/// Most symbolic links followed in one resolution (the kernel's limit).
const MAX_LINKS: usize = 40;
/// How long a worker's start may leave it undecided whether its listener came.
const DECIDE_WITHIN: Duration = Duration::from_secs(10);

/// Whether the worker's listener arrived.
enum Listening {
    Waiting,
    Yes,
    No(String),
}

/// What a worker and its supervisor thread share.
pub struct Supervision {
    /// The worker's helper, set once it is forked.
    helper_pid: AtomicI32,
    /// The session's journal slot and its checkpoints' register of shared files.
    attached: Mutex<Option<(Shared, crate::workspace::cow::Slot)>>,
    /// A pidfd of the worker (PID 1 of its world): readable once it and everything in
    /// its PID namespace have exited.
    worker: Mutex<Option<OwnedFd>>,
    listening: Mutex<Listening>,
    decided: Condvar,
    /// The last stopped task's files, for its next call (most come from one thread).
    task: Mutex<Option<Task>>,
}

impl Supervision {
    /// Starts the supervisor of a worker whose helper sends its listener over `bridge`
    /// before its sandbox report (or closes it without one); it serves the worker from
    /// its first stopped call, while the worker still starts.
    ///
    /// # Errors
    /// The thread could not start.
    pub fn start(bridge: UnixStream) -> std::io::Result<Arc<Supervision>> {
        let me = Arc::new(Supervision {
            helper_pid: AtomicI32::new(0),
            attached: Mutex::new(None),
            worker: Mutex::new(None),
            listening: Mutex::new(Listening::Waiting),
            task: Mutex::new(None),
            decided: Condvar::new(),
        });
        let them = me.clone();
        std::thread::Builder::new()
            .name("warden-journal".into())
            .spawn(move || {
                let listener = receive(&bridge);
                drop(bridge);
                let listening = match &listener {
                    Ok(_) => Listening::Yes,
                    Err(why) => Listening::No(why.clone()),
                };
                *them
                    .listening
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = listening;
                them.decided.notify_all();
                if let Ok(listener) = listener {
                    them.serve(&listener);
                }
            })?;
        Ok(me)
    }

    /// Names the worker's helper, once the worker is ready (the helper's one child is
    /// the worker).
    pub fn set_helper(&self, pid: i32) {
        self.helper_pid.store(pid, Ordering::Relaxed);
        let child = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw);
        let pidfd = child.and_then(|c| {
            rustix::process::pidfd_open(c, rustix::process::PidfdFlags::empty()).ok()
        });
        *self.worker.lock().unwrap_or_else(PoisonError::into_inner) = pidfd;
    }

    /// Waits (at most `within`) until the worker has exited, with every process of its
    /// world: then no file change of it is still under way. Returns whether it has.
    pub fn wait_exit(&self, within: Duration) -> bool {
        let worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(pidfd) = worker.as_ref() else {
            return false;
        };
        let mut poll = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(within.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut poll, 1, ms) > 0 }
    }

    /// Ties the worker to its session's journal and its checkpoints' register of shared
    /// files (it consults both before every change) and, when a journal is open and has
    /// not yet seen this worker's open files, hands them to it.
    ///
    /// # Errors
    /// The worker has no listener: its file changes cannot be seen first (why).
    pub fn attach(&self, shared: &Shared, cow: &crate::workspace::cow::Slot) -> Result<(), String> {
        self.listening()?;
        *self.attached.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((shared.clone(), cow.clone()));
        let mut journal = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(journal) = journal.as_mut()
            && !journal.scanned
        {
            journal.scanned = true;
            open_files::take_in(self.helper_pid.load(Ordering::Relaxed), journal);
        }
        Ok(())
    }

    /// Whether the worker's listener came (waiting for the worker's start to say).
    fn listening(&self) -> Result<(), String> {
        let listening = self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (listening, _) = self
            .decided
            .wait_timeout_while(listening, DECIDE_WITHIN, |l| {
                matches!(l, Listening::Waiting)
            })
            .unwrap_or_else(PoisonError::into_inner);
        match &*listening {
            Listening::Yes => Ok(()),
            Listening::No(why) => Err(why.clone()),
            Listening::Waiting => Err("the worker sent no listener".into()),
        }
    }

    /// The files (device, inode) the worker can write now, through a descriptor or a
    /// shared mapping: a checkpoint copies them rather than share them.
    ///
    /// # Errors
    /// The worker has no listener, so its later changes could not be seen first.
    pub fn writable_files(&self) -> Result<std::collections::HashSet<(u64, u64)>, String> {
        self.listening()?;
        Ok(open_files::writable(
            self.helper_pid.load(Ordering::Relaxed),
        ))
    }

    fn serve(&self, listener: &OwnedFd) {
        loop {
            let mut poll = libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut poll, 1, -1) } < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            if poll.revents & libc::POLLIN == 0 {
                // No task is left to stop (HUP), or the listener broke.
                return;
            }
            // SAFETY: a zeroed seccomp_notif is what the kernel requires to fill.
            let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
            // SAFETY: `notif` is a valid seccomp_notif for the kernel to write.
            let rc = unsafe {
                libc::ioctl(
                    listener.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_RECV,
                    &mut notif,
                )
            };
            if rc < 0 {
                match Errno::from_raw_os_error(
                    std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
                ) {
                    // The stopped task died before it was taken.
                    Errno::NOENT | Errno::INTR => continue,
                    _ => return,
                }
            }
            let answer = self.answer(listener.as_fd(), &notif);
            respond(listener.as_fd(), notif.id, answer);
        }
    }

    /// What a stopped call is answered: go on (`Ok`), or fail with an errno.
    fn answer(&self, listener: BorrowedFd<'_>, notif: &libc::seccomp_notif) -> Result<(), Errno> {
        let attached = self
            .attached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some((journal, cow)) = attached else {
            return Ok(());
        };
        let mut cow = cow.lock().unwrap_or_else(PoisonError::into_inner);
        let mut journal = journal.lock().unwrap_or_else(PoisonError::into_inner);
        if cow
            .as_ref()
            .is_some_and(crate::workspace::cow::Shared::is_empty)
        {
            *cow = None;
        }
        let dev = match (journal.as_ref(), cow.as_ref()) {
            (Some(j), _) => j.dev(),
            (None, Some(c)) => c.dev(),
            (None, None) => return Ok(()),
        };
        let Some(op) = decode(notif) else {
            return Ok(());
        };
        let pid = notif.pid as i32;
        let mut cached = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        let reused = cached.take().filter(|t| t.pid == pid && t.dev == dev);
        let was_cached = reused.is_some();
        let Some(mut task) = reused.or_else(|| Task::open(pid, dev).ok()) else {
            return Ok(());
        };
        // The task's files were opened before this check: they are the stopped task's
        // (or, kept from an earlier call of the same pid, fail to read and are opened
        // again below).
        if !id_valid(listener, notif.id) {
            return Ok(());
        }
        let mut seen = Seen {
            journal: journal.as_mut(),
            cow: cow.as_mut(),
        };
        let mut noted = seen.note(&task, op);
        if noted.is_err()
            && was_cached
            && let Ok(fresh) = Task::open(pid, dev)
            && id_valid(listener, notif.id)
        {
            task = fresh;
            noted = seen.note(&task, op);
        }
        *cached = Some(task);
        match noted {
            Ok(()) => Ok(()),
            Err(e) if e.errno() == Errno::NOSPC || e.errno() == Errno::DQUOT => Err(Errno::NOSPC),
            Err(e) => {
                tracing::warn!(error = %e, "a file change could not be seen first");
                Err(e.errno())
            }
        }
    }
}

/// The listener the helper sent, or why there is none.
fn receive(bridge: &UnixStream) -> Result<OwnedFd, String> {
    let got = crate::os::receive_descriptors(bridge, true)
        .map_err(|e| format!("the journal's bridge failed: {e}"))?;
    match got {
        Some((Some(b'L'), mut fds)) if fds.len() == 1 => fds
            .pop()
            .ok_or_else(|| "the worker's helper sent no listener".to_string()),
        Some((Some(b'N'), _)) => Err("the kernel refused the journal's filter".into()),
        _ => Err("the worker's helper sent no listener".into()),
    }
}

fn id_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &id as *const u64,
        ) == 0
    }
}

fn respond(listener: BorrowedFd<'_>, id: u64, answer: Result<(), Errno>) {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: 0,
        flags: 0,
    };
    match answer {
        Ok(()) => resp.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        Err(e) => resp.error = -e.raw_os_error(),
    }
    // SAFETY: `resp` is a valid seccomp_notif_resp; a task that died meanwhile makes the
    // ioctl fail with ENOENT, which changes nothing.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &mut resp,
        );
    }
}

/// A name as a call gives it: relative to a descriptor (or the working directory) unless
/// absolute, at an address in the task's memory.
#[derive(Debug, Clone, Copy)]
struct At {
    dirfd: i32,
    addr: u64,
}

/// What a stopped call is about to do, as the journal sees it.
#[derive(Debug, Clone, Copy)]
enum Op {
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

fn decode(notif: &libc::seccomp_notif) -> Option<Op> {
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
struct Task {
    pid: i32,
    mem: OwnedFd,
    root: OwnedFd,
    /// The workspace's file system: nothing elsewhere is seen to.
    dev: u64,
}

impl Task {
    fn open(pid: i32, dev: u64) -> Result<Task, Errno> {
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
    fn string(&self, addr: u64) -> Result<Vec<u8>, Errno> {
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
    fn covers(&self, fd: BorrowedFd<'_>) -> bool {
        rustix::fs::fstat(fd).is_ok_and(|st| st.st_dev == self.dev)
    }

    fn u64_at(&self, addr: u64) -> Result<u64, Errno> {
        let mut buf = [0u8; 8];
        if rustix::io::pread(&self.mem, &mut buf, addr)? != 8 {
            return Err(Errno::FAULT);
        }
        Ok(u64::from_ne_bytes(buf))
    }

    /// Where a relative name starts: the working directory or descriptor `dirfd`.
    fn base(&self, dirfd: i32) -> Result<OwnedFd, Errno> {
        if dirfd == AT_FDCWD {
            opath_dir(&format!("/proc/{}/cwd", self.pid))
        } else {
            opath(&format!("/proc/{}/fd/{dirfd}", self.pid))
        }
    }
}

fn opath(path: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
}

fn opath_dir(path: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn opath_at(dir: BorrowedFd<'_>, name: &[u8], directory: bool) -> Result<OwnedFd, Errno> {
    let mut flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    rustix::fs::openat(dir, std::ffi::OsStr::from_bytes(name), flags, Mode::empty())
}

/// A name resolved to its directory: the directory, its path in the workspace, and the
/// last component.
struct Target {
    dir: OwnedFd,
    dir_path: Vec<u8>,
    name: Vec<u8>,
}

/// Resolves the name at `at` as the kernel will for the task (following a final
/// symbolic link when `follow`); `None` when it does not resolve (the call will fail) or
/// is not in the workspace. Other errors (the server out of descriptors or memory) fail
/// the call: a change the journal could not see never happens.
fn resolve(task: &Task, at: At, follow: bool) -> Result<Option<Target>, Errno> {
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
fn in_workspace(dir: BorrowedFd<'_>) -> Vec<u8> {
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

/// Who must see a change first: the open journal, and the checkpoints that share files.
struct Seen<'a> {
    journal: Option<&'a mut Journal>,
    cow: Option<&'a mut crate::workspace::cow::Shared>,
}

type Noted = Result<(), crate::workspace::journal::JournalError>;

fn io(e: Errno) -> crate::workspace::journal::JournalError {
    crate::workspace::journal::JournalError::new("resolving a name", e)
}

impl Seen<'_> {
    /// Shows each what `op` is about to change.
    fn note(&mut self, task: &Task, op: Op) -> Noted {
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

/// The files a worker holds open for writing (or maps shared and writable) when a
/// journal first sees it: written later through those descriptors, their bytes are
/// kept now.
mod open_files {
    use super::*;

    /// Every process of the worker's tree, from its helper down.
    fn tree(helper: i32) -> Vec<i32> {
        let mut out = vec![helper];
        let mut i = 0;
        while i < out.len() && out.len() < 4096 {
            let pid = out[i];
            i += 1;
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let children =
                    std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
                out.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                );
            }
        }
        out
    }

    /// Every file (device, inode) a process of the worker can write now.
    pub fn writable(helper: i32) -> std::collections::HashSet<(u64, u64)> {
        let mut out = std::collections::HashSet::new();
        for pid in tree(helper) {
            for file in writable_of(pid) {
                if let Ok(st) = rustix::fs::fstat(&file) {
                    out.insert((st.st_dev, st.st_ino));
                }
            }
        }
        out
    }

    /// The files `pid` holds open for writing or maps shared and writable.
    fn writable_of(pid: i32) -> Vec<OwnedFd> {
        let mut out = Vec::new();
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) {
            for fd in fds.flatten() {
                let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
                let flags = info
                    .lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| u64::from_str_radix(f.trim(), 8).ok())
                    .unwrap_or(0);
                if flags & (O_WRONLY | O_RDWR) == 0 {
                    continue;
                }
                let name = fd.file_name();
                if let Ok(file) = opath(&format!("/proc/{pid}/fd/{}", name.to_string_lossy())) {
                    out.push(file);
                }
            }
        }
        out.extend(shared_maps(pid));
        out
    }

    /// Hands `journal` every file on its file system that a process of the worker can
    /// still write.
    pub fn take_in(helper: i32, journal: &mut Journal) {
        for pid in tree(helper) {
            for file in writable_of(pid) {
                let path = in_workspace(file.as_fd());
                if let Err(e) = journal.before_write(file.as_fd(), &path) {
                    tracing::warn!(error = %e, "an open file could not be journaled");
                }
            }
        }
    }

    /// Files mapped shared and writable: written through memory, never through a call.
    fn shared_maps(pid: i32) -> Vec<OwnedFd> {
        let mut out = Vec::new();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        let Ok(root) = opath_dir(&format!("/proc/{pid}/root")) else {
            return out;
        };
        for line in maps.lines() {
            let fields: Vec<&str> = line.splitn(6, ' ').collect();
            let (Some(perms), Some(path)) = (fields.get(1), fields.get(5)) else {
                continue;
            };
            let path = path.trim_start();
            if !perms.contains('w') || !perms.ends_with('s') || !path.starts_with('/') {
                continue;
            }
            let resolve =
                rustix::fs::ResolveFlags::IN_ROOT | rustix::fs::ResolveFlags::NO_MAGICLINKS;
            if let Ok(file) = rustix::fs::openat2(
                &root,
                path,
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                resolve,
            ) {
                out.push(file);
            }
        }
        out
    }
}
