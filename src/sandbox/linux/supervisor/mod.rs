//! The server's end of the journal's filter ([`seccomp::journal`]): one thread per
//! worker that takes each stopped call and shows what it is about to change to whoever
//! must see it first ([`seen`]): the session's [`Journal`] while a transactional call
//! runs, and its checkpoints' register of shared files ([`crate::workspace::cow`]).
//! With neither, every stopped call goes on at once.
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

mod calls;
mod open_files;
mod seen;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rustix::io::Errno;

use crate::workspace::journal::Shared;
use calls::{Task, decode};
use seen::Seen;
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
