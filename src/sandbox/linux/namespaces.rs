//! Namespaces for the worker's world, and the process split they need.
//!
//! The helper gets capabilities in a user namespace of its own (made with the caller's
//! ids; a desktop user's server first joins the workspace keeper's, the only way into the
//! keeper's mount namespace, and nests its own inside it), then unshares mount, PID, IPC,
//! UTS and network namespaces. A new PID namespace applies to children only, so the helper then
//! forks: the child is PID 1 of the new namespace and becomes the worker (when it exits,
//! the kernel kills everything else in the namespace); the parent stays outside as a
//! plain waiter whose exit mirrors the child's. Both die with the server: the parent by
//! its own parent-death signal, the child by one aimed at the parent plus a lifeline
//! pipe that closes the race where the parent dies before the child set it.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use rustix::thread::UnshareFlags;

/// Writes a one-to-one map of the caller's own uid and gid into its new user namespace
/// (the only map an unprivileged process may write). The process must be dumpable for
/// /proc/self to be its own after a uid change.
///
/// # Errors
/// Which file could not be written.
pub fn map_ids(uid: u32, gid: u32) -> Result<(), String> {
    let write = |file: &str, contents: String| {
        std::fs::write(format!("/proc/self/{file}"), contents)
            .map_err(|e| format!("writing /proc/self/{file}: {e}"))
    };
    // SAFETY: plain prctl.
    let was = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    let result = write("setgroups", "deny".into())
        .and_then(|()| write("uid_map", format!("{uid} {uid} 1")))
        .and_then(|()| write("gid_map", format!("{gid} {gid} 1")));
    // SAFETY: plain prctl.
    unsafe {
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            libc::c_ulong::from(was == 1),
            0,
            0,
            0,
        )
    };
    result
}

/// `unshare(2)` of namespaces only (never `CLONE_FILES`, the reason rustix marks it
/// unsafe: no descriptor table is ever split here).
pub fn unshare(flags: UnshareFlags) -> std::io::Result<()> {
    let flags = flags & !UnshareFlags::FILES;
    // SAFETY: without CLONE_FILES no thread can observe a descriptor table it does not
    // share; the callers are single-threaded anyway.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(std::io::Error::from)
}

/// Why the namespaces of the world could not be made.
#[derive(Debug)]
pub enum NamespaceError {
    /// The kernel or its configuration does not allow them (no unprivileged user
    /// namespaces, a seccomp profile forbidding unshare, AppArmor's restriction): the
    /// best-effort fallback applies.
    Unavailable(String),
    /// Something that should have worked failed: refuse.
    Failed(String),
}

/// Enters a user namespace that gives this process capabilities over what it unshares
/// next: joins the keeper's (when given) or makes its own with the caller's ids.
///
/// # Errors
/// [`NamespaceError::Unavailable`] when a new user namespace is refused.
pub fn enter_user_namespace(keeper_user: Option<BorrowedFd<'_>>) -> Result<(), NamespaceError> {
    if let Some(ns) = keeper_user {
        return rustix::thread::move_into_link_name_space(
            ns,
            Some(rustix::thread::LinkNameSpaceType::User),
        )
        .map_err(|e| NamespaceError::Failed(format!("joining the keeper's user namespace: {e}")));
    }
    let (uid, gid) = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    unshare(UnshareFlags::NEWUSER).map_err(|e| {
        NamespaceError::Unavailable(format!(
            "unprivileged user namespaces are unavailable ({e})"
        ))
    })?;
    map_ids(uid, gid).map_err(NamespaceError::Failed)
}

/// Joins the keeper's mount namespace (which holds the session's workspace tmpfs).
///
/// # Errors
/// The kernel's refusal.
pub fn join_mount_namespace(ns: BorrowedFd<'_>) -> Result<(), String> {
    rustix::thread::move_into_link_name_space(ns, Some(rustix::thread::LinkNameSpaceType::Mount))
        .map_err(|e| format!("joining the keeper's mount namespace: {e}"))
}

/// The namespaces unshared once capabilities are held. Pure. The network namespace is
/// always new: a denied network has no interface at all, a proxied one only its
/// loopback, where the egress proxy listens.
pub fn world_flags() -> UnshareFlags {
    UnshareFlags::NEWNS
        | UnshareFlags::NEWPID
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS
        | UnshareFlags::NEWNET
}

/// Unshares the world's namespaces.
///
/// # Errors
/// The kernel's refusal.
pub fn unshare_world() -> Result<(), String> {
    unshare(world_flags()).map_err(|e| format!("unshare: {e}"))
}

/// What `fork_into_pid_namespace` returns in the child: the worker-to-be.
pub struct Child {
    /// Read end of the lifeline: POLLHUP once the waiting parent is gone.
    lifeline: OwnedFd,
}

impl Child {
    /// Dies (SIGKILL) with the waiting parent, and checks that it is still there: the
    /// parent-death signal alone misses a parent that died before it was set.
    ///
    /// # Errors
    /// The parent is already gone.
    pub fn die_with_parent(self) -> Result<(), String> {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
            .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
        let mut poll = [libc::pollfd {
            fd: self.lifeline.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: poll reads and writes one pollfd of a live array.
        let n = unsafe { libc::poll(poll.as_mut_ptr(), 1, 0) };
        if n != 0 {
            return Err("the helper's waiting parent is already gone".into());
        }
        Ok(())
    }
}

/// Forks. In the child (PID 1 of the new PID namespace) returns the [`Child`]; the parent
/// never returns: it closes every descriptor but the lifeline (so the server sees EOF on
/// the worker's pipes exactly when the worker is gone), waits for the child and exits as
/// it did.
///
/// # Errors
/// fork or pipe failed (in the parent, before anything was started).
pub fn fork_into_pid_namespace() -> Result<Child, String> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just created and belong to nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the helper is single-threaded, so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(write);
        return Ok(Child { lifeline: read });
    }
    drop(read);
    let keep = write.as_raw_fd() as libc::c_uint;
    // SAFETY: closing every descriptor but the lifeline; the parent uses none of them.
    unsafe {
        libc::syscall(libc::SYS_close_range, 0, keep.saturating_sub(1), 0);
        libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0);
    }
    // Only waits from now on: no capability is left to it in any namespace.
    let _ = crate::sandbox::linux::privileges::clear_all_capabilities();
    let status = wait_for(pid);
    drop(write);
    exit_like(status)
}

fn wait_for(pid: libc::pid_t) -> libc::c_int {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status of our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return status;
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 0;
        }
    }
}

/// Exits with the child's exit code, or dies of the signal that killed it, so that the
/// server describes the worker's end as it really was.
fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: no core file for the mirrored signal; then restore its default action
        // and raise it on ourselves.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(128 + sig) }
    }
    // SAFETY: _exit never returns.
    unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_world_has_its_own_network_namespace() {
        for always in [
            UnshareFlags::NEWNS,
            UnshareFlags::NEWPID,
            UnshareFlags::NEWIPC,
            UnshareFlags::NEWUTS,
            UnshareFlags::NEWNET,
        ] {
            assert!(world_flags().contains(always));
        }
        assert!(!world_flags().contains(UnshareFlags::NEWUSER));
    }
}
