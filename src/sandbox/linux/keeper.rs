//! The workspace keeper: one small process per server that holds a private mount
//! namespace in which every session's workspace is a size-capped tmpfs.
//!
//! Why: a quota enforced by the kernel as the code writes (ENOSPC inside Python), that
//! never touches the real disk, works unprivileged, and vanishes with the server: the
//! tmpfs mounts live only in the keeper's namespace, which dies with the keeper and the
//! descriptors that reference it. The cost is RAM (and swap) instead of disk, and only
//! for what a session really writes.
//!
//! How: the keeper (`warden __workspace-keeper`, single-threaded) makes a mount namespace
//! (inside a user namespace of its own when the server is not root), mounts a small
//! tmpfs "stage" over an empty directory of the instance, and answers requests on a
//! private `SOCK_SEQPACKET` pair: `create` mounts a tmpfs of the session's quota at
//! `stage/<id>` with `workspace/` inside and hands the server a descriptor of it (the
//! server reads workspaces only through descriptors beneath it); `remove` unmounts it.
//! Workers join the keeper's namespaces (the server passes them the namespace
//! descriptors the keeper sent at start) and bind `stage/<id>/workspace` into their
//! world.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use serde::{Deserialize, Serialize};

use crate::sandbox::linux::namespaces;
use crate::worker::policy::RunAs;

/// The hidden subcommand that runs the keeper.
pub const KEEPER_SUBCOMMAND: &str = "__workspace-keeper";
/// The keeper's end of the request socket.
const KEEPER_FD: i32 = 3;
/// Largest request or answer.
const MAX_MESSAGE: usize = 4096;
/// How long the server waits for the keeper to start or answer.
const KEEPER_TIMEOUT: Duration = Duration::from_secs(10);
/// The stage holds only the mount points of the workspaces.
const STAGE_OPTIONS: &str = "size=256k,nr_inodes=1024,mode=0711";

#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    #[error("the workspace keeper could not start: {0}")]
    Start(String),
    #[error("the workspace keeper failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the workspace keeper refused: {0}")]
    Refused(String),
    #[error("the workspace keeper sent something unexpected: {0}")]
    Protocol(String),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Start {
        stage: PathBuf,
        parent_pid: i32,
    },
    Create {
        seq: u64,
        id: String,
        owner: Option<RunAs>,
        size_bytes: u64,
        inodes: u64,
    },
    Remove {
        seq: u64,
        id: String,
    },
    /// Sets a workspace's size limit (a byte cap narrows it while a call runs).
    Resize {
        seq: u64,
        id: String,
        size_bytes: u64,
    },
}

impl Request {
    /// The number the keeper echoes in its answer (0 for `start`, which is answered
    /// before any other request is sent).
    fn seq(&self) -> u64 {
        match self {
            Request::Start { .. } => 0,
            Request::Create { seq, .. }
            | Request::Remove { seq, .. }
            | Request::Resize { seq, .. } => *seq,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    error: String,
    /// The request's `seq`: an answer that arrives after its request timed out is told
    /// from the answer to the next request, never taken for it.
    #[serde(default)]
    seq: u64,
}

/// The tmpfs options of one workspace. Pure.
pub fn workspace_options(owner: Option<RunAs>, size_bytes: u64, inodes: u64) -> String {
    let mut options = format!("size={size_bytes},nr_inodes={inodes},mode=0700");
    if let Some(o) = owner {
        options.push_str(&format!(",uid={},gid={}", o.uid, o.gid));
    }
    options
}

/// How many inodes a workspace of `size_bytes` gets: one per 8 KiB, at least 1024.
/// Inodes cost RAM outside the size limit (about a kilobyte each), so they are capped
/// with it. Pure.
pub fn inodes_for(size_bytes: u64) -> u64 {
    (size_bytes / 8192).max(1024)
}

/// The server's handle on its keeper.
pub struct Keeper {
    socket: Mutex<Channel>,
    child: Mutex<std::process::Child>,
    pid: u32,
    /// The keeper's user namespace (only when the server is not root).
    user_ns: Option<OwnedFd>,
    mount_ns: OwnedFd,
}

/// The server's end of the request socket, with the numbering of its requests.
struct Channel {
    fd: OwnedFd,
    /// The last request's number.
    seq: u64,
    /// Workspaces whose `create` timed out, by request number: if the keeper made one
    /// after all, it is removed when its late answer shows up.
    abandoned: Vec<(u64, String)>,
}

/// Namespaces a worker joins before it builds its world.
pub struct JoinNamespaces<'a> {
    pub user: Option<BorrowedFd<'a>>,
    pub mount: BorrowedFd<'a>,
}

impl Keeper {
    /// Starts the keeper with `stage` (an empty directory) as its mount point. `spawn`
    /// starts the process (from the thread whose death must kill it).
    ///
    /// # Errors
    /// When namespaces cannot be made here, or the keeper does not answer.
    pub fn start(
        stage: &Path,
        spawn: impl FnOnce(std::process::Command) -> std::io::Result<std::process::Child>,
    ) -> Result<Keeper, KeeperError> {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(std::io::Error::from)?;
        let exe = std::env::current_exe()?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg(KEEPER_SUBCOMMAND)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        let child_fd = theirs.as_raw_fd();
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec; the
        // descriptor is moved above 10 first so dup2 onto 3 cannot clobber it.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                let high = libc::fcntl(child_fd, libc::F_DUPFD, 10);
                if high < 0 || libc::dup2(high, KEEPER_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = spawn(cmd)?;
        drop(theirs);
        let pid = child.id();
        set_timeout(&ours)?;
        let start = Request::Start {
            stage: stage.to_path_buf(),
            parent_pid: std::process::id() as i32,
        };
        send(&ours, &start, &[])?;
        let (answer, mut fds) = match recv::<Answer>(&ours) {
            Ok(got) => got,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(KeeperError::Start(format!("{e} (keeper exit: {status:?})")));
            }
        };
        if !answer.ok {
            let _ = child.kill();
            let _ = child.wait();
            return Err(KeeperError::Start(answer.error));
        }
        let mount_ns = fds
            .pop()
            .ok_or_else(|| KeeperError::Protocol("no mount namespace".into()))?;
        let user_ns = fds.pop();
        Ok(Keeper {
            socket: Mutex::new(Channel {
                fd: ours,
                seq: 0,
                abandoned: Vec::new(),
            }),
            child: Mutex::new(child),
            pid,
            user_ns,
            mount_ns,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kills the keeper and reaps it; its namespace and every workspace in it go once
    /// no worker and no descriptor holds them any more.
    pub fn stop(&self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn namespaces(&self) -> JoinNamespaces<'_> {
        JoinNamespaces {
            user: self.user_ns.as_ref().map(AsFd::as_fd),
            mount: self.mount_ns.as_fd(),
        }
    }

    /// Mounts a new workspace and returns a descriptor of its `workspace/` directory.
    ///
    /// # Errors
    /// A bad id, a refused mount, or a keeper that does not answer.
    pub fn create(
        &self,
        id: &str,
        owner: Option<RunAs>,
        size_bytes: u64,
    ) -> Result<OwnedFd, KeeperError> {
        let request = |seq| Request::Create {
            seq,
            id: id.to_string(),
            owner,
            size_bytes,
            inodes: inodes_for(size_bytes),
        };
        let mut fds = self.call(request)?;
        fds.pop()
            .ok_or_else(|| KeeperError::Protocol("no workspace descriptor".into()))
    }

    /// Unmounts a workspace (its memory is freed once no worker and no descriptor holds
    /// it any more).
    ///
    /// # Errors
    /// As [`Keeper::create`].
    pub fn remove(&self, id: &str) -> Result<(), KeeperError> {
        let id = id.to_string();
        self.call(|seq| Request::Remove { seq, id }).map(|_| ())
    }

    /// Sets a workspace's size limit; the kernel refuses one below what it holds.
    ///
    /// # Errors
    /// As [`Keeper::create`].
    pub fn resize(&self, id: &str, size_bytes: u64) -> Result<(), KeeperError> {
        let id = id.to_string();
        self.call(|seq| Request::Resize {
            seq,
            id,
            size_bytes,
        })
        .map(|_| ())
    }

    /// Sends the request made by `make` with the next number and waits for its answer.
    /// Answers to earlier requests that timed out are dropped on the way (with their
    /// descriptors); a workspace made for one of those is removed.
    fn call(&self, make: impl FnOnce(u64) -> Request) -> Result<Vec<OwnedFd>, KeeperError> {
        let mut channel = self
            .socket
            .lock()
            .map_err(|_| KeeperError::Protocol("keeper socket poisoned".into()))?;
        channel.seq += 1;
        let request = make(channel.seq);
        send(&channel.fd, &request, &[])?;
        let mut orphans = Vec::new();
        let answer = loop {
            let (answer, fds) = match recv::<Answer>(&channel.fd) {
                Ok(got) => got,
                Err(e) => {
                    if let Request::Create { seq, id, .. } = &request {
                        channel.abandoned.push((*seq, id.clone()));
                    }
                    return Err(e.into());
                }
            };
            if answer.seq == request.seq() {
                break (answer, fds);
            }
            if answer.seq > request.seq() {
                return Err(KeeperError::Protocol(format!(
                    "an answer to request {} while waiting for {}",
                    answer.seq,
                    request.seq()
                )));
            }
            tracing::warn!(
                seq = answer.seq,
                "a late answer of the workspace keeper dropped"
            );
            if let Some(at) = channel.abandoned.iter().position(|(s, _)| *s == answer.seq) {
                let (_, id) = channel.abandoned.swap_remove(at);
                if answer.ok {
                    orphans.push(id);
                }
            }
        };
        let (answer, fds) = answer;
        for id in orphans {
            let seq = channel.seq + 1;
            channel.seq = seq;
            let removed = send(&channel.fd, &Request::Remove { seq, id }, &[])
                .and_then(|()| recv::<Answer>(&channel.fd));
            if let Err(e) = removed {
                tracing::warn!("removing an abandoned workspace: {e}");
            }
        }
        if !answer.ok {
            return Err(KeeperError::Refused(answer.error));
        }
        Ok(fds)
    }
}

fn set_timeout(fd: &OwnedFd) -> std::io::Result<()> {
    rustix::net::sockopt::set_socket_timeout(
        fd,
        rustix::net::sockopt::Timeout::Recv,
        Some(KEEPER_TIMEOUT),
    )?;
    rustix::net::sockopt::set_socket_timeout(
        fd,
        rustix::net::sockopt::Timeout::Send,
        Some(KEEPER_TIMEOUT),
    )?;
    Ok(())
}

fn send<T: Serialize>(fd: impl AsFd, message: &T, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many descriptors"));
    }
    let fd = fd.as_fd();
    let ios = [IoSlice::new(&bytes)];
    retry_interrupted(|| rustix::net::sendmsg(fd, &ios, &mut control, SendFlags::NOSIGNAL))?;
    Ok(())
}

/// Runs `op` again when a signal interrupted it: the kernel never restarts a call on a
/// socket with a timeout, whatever `SA_RESTART` says, and the server handles signals
/// (SIGCHLD for its children, SIGTERM, SIGINT) at any time, shutdown included. Retried
/// until [`KEEPER_TIMEOUT`] has passed since the first try, so that a stream of signals
/// cannot make a silent keeper wait for ever; then it has timed out.
fn retry_interrupted<T>(mut op: impl FnMut() -> rustix::io::Result<T>) -> std::io::Result<T> {
    let first = std::time::Instant::now();
    loop {
        match op() {
            Err(rustix::io::Errno::INTR) if first.elapsed() < KEEPER_TIMEOUT => {}
            Err(rustix::io::Errno::INTR) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer within {} s (interrupted by signals throughout)",
                        KEEPER_TIMEOUT.as_secs()
                    ),
                ));
            }
            other => return other.map_err(std::io::Error::from),
        }
    }
}

fn recv<T: for<'de> Deserialize<'de>>(fd: impl AsFd) -> std::io::Result<(T, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let fd = fd.as_fd();
    let got = retry_interrupted(|| {
        rustix::net::recvmsg(
            fd,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
    })?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.bytes == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the other side closed",
        ));
    }
    let message = serde_json::from_slice(&buf[..got.bytes]).map_err(std::io::Error::other)?;
    Ok((message, fds))
}

/// Entry point of `warden __workspace-keeper`. Never returns.
pub fn run_keeper_main() -> ! {
    // SAFETY: fd 3 is the socket the server set up for us before exec.
    let socket = unsafe { OwnedFd::from_raw_fd(KEEPER_FD) };
    let code = match serve(&socket) {
        Ok(()) => 0,
        Err(e) => {
            let _ = send(
                &socket,
                &Answer {
                    ok: false,
                    error: e,
                    seq: 0,
                },
                &[],
            );
            71
        }
    };
    // SAFETY: _exit skips atexit handlers; nothing is left to flush.
    unsafe { libc::_exit(code) }
}

fn serve(socket: &OwnedFd) -> Result<(), String> {
    let (start, _) = recv::<Request>(socket).map_err(|e| format!("no start request: {e}"))?;
    let Request::Start { stage, parent_pid } = start else {
        return Err("the first request was not start".into());
    };
    enter_namespace(parent_pid)?;
    rustix::mount::mount(
        "tmpfs",
        &stage,
        "tmpfs",
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOEXEC,
        Some(c_string(STAGE_OPTIONS)?.as_c_str()),
    )
    .map_err(|e| format!("mounting the stage on {}: {e}", stage.display()))?;
    let user = std::fs::File::open("/proc/self/ns/user").map_err(|e| e.to_string())?;
    let mount = std::fs::File::open("/proc/self/ns/mnt").map_err(|e| e.to_string())?;
    let fds: Vec<BorrowedFd<'_>> = if running_as_root() {
        vec![mount.as_fd()]
    } else {
        vec![user.as_fd(), mount.as_fd()]
    };
    send(
        socket,
        &Answer {
            ok: true,
            error: String::new(),
            seq: 0,
        },
        &fds,
    )
    .map_err(|e| e.to_string())?;
    drop((user, mount));
    loop {
        let request = match recv::<Request>(socket) {
            Ok((r, _)) => r,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading a request: {e}")),
        };
        let seq = request.seq();
        let (answer, fd) = match handle(&stage, request) {
            Ok(fd) => (
                Answer {
                    ok: true,
                    error: String::new(),
                    seq,
                },
                fd,
            ),
            Err(error) => (
                Answer {
                    ok: false,
                    error,
                    seq,
                },
                None,
            ),
        };
        let fds: Vec<BorrowedFd<'_>> = fd.iter().map(AsFd::as_fd).collect();
        send(socket, &answer, &fds).map_err(|e| format!("answering: {e}"))?;
    }
}

fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn c_string(s: &str) -> Result<std::ffi::CString, String> {
    std::ffi::CString::new(s).map_err(|e| e.to_string())
}

/// Dies with the server; a mount namespace of its own (in a user namespace of its own
/// when not root) that sees the host's later mounts but never shows its own to it.
fn enter_namespace(parent_pid: i32) -> Result<(), String> {
    use rustix::thread::UnshareFlags;
    rustix::process::setsid().map_err(|e| format!("setsid: {e}"))?;
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent_pid) {
        return Err("the server is already gone".into());
    }
    if running_as_root() {
        namespaces::unshare(UnshareFlags::NEWNS).map_err(|e| format!("unshare: {e}"))?;
    } else {
        let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
        namespaces::unshare(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)
            .map_err(|e| format!("unshare: {e}"))?;
        namespaces::map_ids(uid.as_raw(), gid.as_raw())?;
    }
    rustix::mount::mount_change(
        "/",
        rustix::mount::MountPropagationFlags::DOWNSTREAM
            | rustix::mount::MountPropagationFlags::REC,
    )
    .map_err(|e| format!("making / a slave mount: {e}"))?;
    Ok(())
}

/// One request. Ids come from the server, but are checked anyway: they name a directory.
fn handle(stage: &Path, request: Request) -> Result<Option<OwnedFd>, String> {
    match request {
        Request::Start { .. } => Err("already started".into()),
        Request::Create {
            id,
            owner,
            size_bytes,
            inodes,
            ..
        } => {
            let dir = stage.join(valid_id(&id)?);
            create_workspace(&dir, owner, size_bytes, inodes).map(Some)
        }
        Request::Remove { id, .. } => {
            let dir = stage.join(valid_id(&id)?);
            rustix::mount::unmount(&dir, rustix::mount::UnmountFlags::DETACH)
                .map_err(|e| format!("unmounting {}: {e}", dir.display()))?;
            std::fs::remove_dir(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
            Ok(None)
        }
        Request::Resize { id, size_bytes, .. } => {
            let dir = stage.join(valid_id(&id)?);
            let options = format!("size={size_bytes}");
            rustix::mount::mount_remount(&dir, WORKSPACE_FLAGS, c_string(&options)?.as_c_str())
                .map_err(|e| format!("resizing {} to {size_bytes} bytes: {e}", dir.display()))?;
            Ok(None)
        }
    }
}

/// Every workspace tmpfs's mount flags (a remount must give them again).
const WORKSPACE_FLAGS: rustix::mount::MountFlags = rustix::mount::MountFlags::NOSUID
    .union(rustix::mount::MountFlags::NODEV)
    .union(rustix::mount::MountFlags::NOEXEC);

fn valid_id(id: &str) -> Result<&str, String> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(id)
    } else {
        Err(format!("invalid workspace id {id:?}"))
    }
}

fn create_workspace(
    dir: &Path,
    owner: Option<RunAs>,
    size_bytes: u64,
    inodes: u64,
) -> Result<OwnedFd, String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let options = workspace_options(owner, size_bytes, inodes);
    rustix::mount::mount(
        "tmpfs",
        dir,
        "tmpfs",
        WORKSPACE_FLAGS,
        Some(c_string(&options)?.as_c_str()),
    )
    .map_err(|e| format!("mounting a tmpfs ({options}) on {}: {e}", dir.display()))?;
    let path = dir.join("workspace");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    if let Some(o) = owner {
        std::os::unix::fs::chown(&path, Some(o.uid), Some(o.gid))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
    }
    let workspace =
        std::fs::File::open(&path).map_err(|e| format!("opening the workspace: {e}"))?;
    Ok(workspace.into())
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_carry_the_quota_and_the_owner() {
        assert_eq!(
            workspace_options(None, 1 << 30, inodes_for(1 << 30)),
            "size=1073741824,nr_inodes=131072,mode=0700"
        );
        assert_eq!(
            workspace_options(Some(RunAs { uid: 7, gid: 8 }), 1 << 20, inodes_for(1 << 20)),
            "size=1048576,nr_inodes=1024,mode=0700,uid=7,gid=8"
        );
    }

    #[test]
    fn ids_cannot_leave_the_stage() {
        for bad in ["", "..", "a/b", "../x", &"x".repeat(65)] {
            assert!(valid_id(bad).is_err(), "{bad:?}");
        }
        assert_eq!(valid_id("w-12_ab"), Ok("w-12_ab"));
    }
}
