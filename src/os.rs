//! The few operating-system facts the platform-neutral layers need, in one place so
//! that sessions, selftest, grants and the CLI carry no `cfg` of their own: whether the
//! server runs as root, directories created with a Unix mode (Windows has no modes; its
//! directories inherit the ACL of their parent), opening a path without following any
//! symlink where the system has no `openat2`, and what an open descriptor really is.

use std::path::Path;
#[cfg(unix)]
use std::path::PathBuf;

/// The server runs with root's effective uid (never on Windows, which has no uids).
pub fn running_as_root() -> bool {
    #[cfg(unix)]
    {
        rustix::process::geteuid().is_root()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Creates `dir` (and its parents when `recursive`) with `mode` on Unix.
pub fn create_dir(dir: &Path, mode: u32, recursive: bool) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(recursive);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, mode);
    #[cfg(not(unix))]
    let _ = mode;
    builder.create(dir)
}

/// Sets the Unix permission bits of `path` (nothing on Windows).
pub fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Options for a private file of the server's: created 0600, never through a symlink,
/// closed on exec (Windows: the defaults; the data directory's ACL is the user's).
pub fn private_file(options: &mut std::fs::OpenOptions) -> &mut std::fs::OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
    }
    #[cfg(not(unix))]
    {
        options
    }
}

/// Creates `path` holding `contents`, whole or not at all, and private from its first
/// byte: written aside (see [`private_file`]), synced, then linked into place, so no one
/// ever sees it partly written or with wider permissions. Returns `false`, writing
/// nothing, when `path` already exists (another process linked first: read theirs).
pub fn create_private_file(path: &Path, contents: &[u8]) -> std::io::Result<bool> {
    use std::io::Write;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no file", path.display())))?;
    let suffix: String = crate::hex(&crate::random_bytes::<6>());
    let tmp = path.with_file_name(format!(".{}.{suffix}", name.to_string_lossy()));
    let mut file =
        private_file(std::fs::OpenOptions::new().write(true).create_new(true)).open(&tmp)?;
    let linked = file
        .write_all(contents)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// When a running process started, in a unit of the system's (Linux: clock ticks since
/// boot, field 22 of `/proc/PID/stat`; macOS: microseconds since the epoch): with the
/// pid, an identity that survives pid reuse. `None` when there is no such process or the
/// system cannot tell (Windows).
pub fn process_start_time(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = stat.get(stat.rfind(')')? + 2..)?;
        rest.split_whitespace().nth(19)?.parse().ok()
    }
    #[cfg(target_os = "macos")]
    {
        let mut info = std::mem::MaybeUninit::<libc::proc_bsdinfo>::zeroed();
        let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
        // SAFETY: proc_pidinfo writes at most `size` bytes into the buffer.
        let n = unsafe {
            libc::proc_pidinfo(
                i32::try_from(pid).ok()?,
                libc::PROC_PIDTBSDINFO,
                0,
                info.as_mut_ptr().cast(),
                size,
            )
        };
        if n != size {
            return None;
        }
        // SAFETY: the call filled the whole struct.
        let info = unsafe { info.assume_init() };
        Some(info.pbi_start_tvsec * 1_000_000 + info.pbi_start_tvusec)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = pid;
        None
    }
}

/// The start time (see [`process_start_time`]) of a process that runs: `None` also for
/// a zombie, a process that died and was not yet waited for (a killed server whose
/// parent has not reaped it still has a `/proc` entry, but is gone).
pub fn running_start_time(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let state = stat.get(stat.rfind(')')? + 2..)?.chars().next()?;
        if state == 'Z' {
            return None;
        }
    }
    process_start_time(pid)
}

/// SIGKILL to the process group led by `pid`, then to `pid` itself (nothing on
/// Windows, where no host worker runs).
pub fn kill_group(pid: i32) {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process, kill_process_group};
        if pid > 1
            && let Some(pid) = Pid::from_raw(pid)
        {
            // ESRCH (already gone) is fine.
            let _ = kill_process_group(pid, Signal::KILL);
            let _ = kill_process(pid, Signal::KILL);
        }
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Reads exactly `buf.len()` bytes at `offset` without moving the file's position
/// (`pread` on Unix, `ReadFile` with an offset on Windows).
///
/// # Errors
/// The read's error, or `UnexpectedEof` when the file is shorter.
pub fn read_exact_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match file.seek_read(&mut buf[done..], offset + done as u64) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The Unix permission bits of a file (`None` on Windows, which has none).
pub fn permission_bits(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(meta.permissions().mode())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Device and inode number of a file: its identity, whatever its name. Windows' stable
/// std has neither (volume serial and file index are unstable), so there its creation
/// time stands in for the inode: enough to notice a file replaced under the same name.
pub fn file_identity(meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        (0, meta.creation_time())
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = meta;
        (0, 0)
    }
}

/// Opens `rel` beneath the directory `start`, one component at a time, each with
/// `O_NOFOLLOW` relative to the previous one's descriptor: no `..`, no absolute path, no
/// symlink at any component, and with `same_device` no mount crossing. What `openat2`
/// with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` does in one call on Linux; `last` adds
/// flags for the final component (directories get `O_DIRECTORY`).
///
/// # Errors
/// A path that is empty or leaves `start`, a symlink (`ELOOP`), a mount crossing
/// (`EXDEV`), or the system's refusal.
#[cfg(unix)]
pub fn open_by_components(
    start: std::os::fd::BorrowedFd<'_>,
    rel: &Path,
    last: rustix::fs::OFlags,
    same_device: bool,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    use std::path::Component;
    let invalid =
        |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
    let mut names = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            _ => return Err(invalid("the path must stay beneath its directory")),
        }
    }
    let device = rustix::fs::fstat(start)?.st_dev;
    let mut current: Option<std::os::fd::OwnedFd> = None;
    for (i, name) in names.iter().enumerate() {
        let flags = OFlags::RDONLY
            | OFlags::CLOEXEC
            | OFlags::NOFOLLOW
            | if i + 1 == names.len() {
                last
            } else {
                OFlags::DIRECTORY
            };
        let at = current.as_ref().map_or(start, |fd| fd.as_fd());
        let fd = rustix::fs::openat(at, *name, flags, Mode::empty())?;
        if same_device && rustix::fs::fstat(&fd)?.st_dev != device {
            return Err(rustix::io::Errno::XDEV.into());
        }
        current = Some(fd);
    }
    current.ok_or_else(|| invalid("empty path"))
}

/// The path the system gives for an open descriptor (Linux: `/proc/self/fd/N`; macOS:
/// `F_GETPATH`): what was really opened, whatever happened to the path since.
///
/// # Errors
/// When the system cannot tell.
#[cfg(unix)]
pub fn fd_path(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        use std::os::unix::ffi::OsStringExt;
        let path = rustix::fs::getpath(fd)?;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(
            path.into_bytes(),
        )))
    }
}

/// Sets glibc's allocator to keep freed memory for reuse rather than hand it back to the
/// kernel at once: blocks up to 1 MiB come from the heap rather than a mapping of their
/// own, and a heap keeps up to 4 MiB free at its top. A call with a large output builds
/// buffers of a few hundred KiB (the result's JSON, its text, the message); with glibc's
/// defaults each was a fresh mapping, or trimmed away after the call, and every page of
/// it faulted in and was zeroed again on the next call (about 50 page faults a call).
/// What is kept is bounded by the largest calls the server has served, not by their
/// number. Returns whether glibc took both settings (elsewhere: nothing to do, true).
/// On Linux the server's own (Rust) allocations go to mimalloc (`src/lib.rs`), which
/// keeps freed memory of its own accord; this setting still holds for what C code
/// allocates through glibc.
pub fn keep_freed_memory_for_reuse() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets allocator parameters; called before any thread.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, 4 << 20) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        true
    }
}

/// What stdout's pipe is grown to when the server serves MCP over it: a whole message
/// with the output cap's worth of stdout and stderr in its text and its structured
/// content (about 2 × 2 × 64 KiB at the default cap) fits at once.
pub const STDOUT_PIPE_SIZE: usize = 1 << 20;

/// Grows fd 1 to [`STDOUT_PIPE_SIZE`] when it is a pipe smaller than that (what MCP
/// clients start a stdio server with; 64 KiB by default). A message larger than the pipe
/// is written in pieces, the server's writing thread put to sleep and woken again for
/// each while the client reads. Capacity only: nothing else about the pipe changes, and
/// the kernel allocates its pages as they are written. Best effort (a pipe the kernel
/// will not grow, or no pipe, is only slower); returns the pipe's size, if fd 1 is one.
pub fn enlarge_stdout_pipe() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsFd;
        let stdout = std::io::stdout();
        let fd = stdout.as_fd();
        let size = rustix::pipe::fcntl_getpipe_size(fd).ok()?;
        if size >= STDOUT_PIPE_SIZE {
            return Some(size);
        }
        Some(rustix::pipe::fcntl_setpipe_size(fd, STDOUT_PIPE_SIZE).unwrap_or(size))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// One message of one byte and the descriptors passed with it (`SCM_RIGHTS`) from a
/// UNIX stream (the byte is `None` when the peer closed it); `None` when nothing waits
/// (`wait: false`).
///
/// # Errors
/// The socket failed.
#[cfg(target_os = "linux")]
pub fn receive_descriptors(
    stream: &std::os::unix::net::UnixStream,
    wait: bool,
) -> std::io::Result<Option<(Option<u8>, Vec<std::os::fd::OwnedFd>)>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let flags = match wait {
        true => RecvFlags::CMSG_CLOEXEC,
        false => RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    };
    let got = match rustix::net::recvmsg(
        stream,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut control,
        flags,
    ) {
        Err(rustix::io::Errno::AGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
        Ok(got) => got,
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    Ok(Some(((got.bytes == 1).then_some(byte[0]), fds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_takes_the_reuse_settings() {
        assert!(keep_freed_memory_for_reuse());
    }

    #[test]
    fn directories_get_their_mode() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b");
        create_dir(&dir, 0o711, true).unwrap();
        set_mode(&dir, 0o700).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        assert!(create_dir(&dir, 0o711, false).is_err(), "exists already");
    }

    #[test]
    fn a_process_start_time_is_its_own() {
        let me = std::process::id();
        if cfg!(any(target_os = "linux", target_os = "macos")) {
            let t = process_start_time(me).unwrap();
            assert_eq!(process_start_time(me), Some(t));
        }
        assert_eq!(process_start_time(u32::MAX - 1), None);
    }

    /// A child that exited and was not waited for keeps its `/proc` entry (a zombie):
    /// it has a start time but does not run.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_zombie_has_a_start_time_but_does_not_run() {
        let me = std::process::id();
        assert_eq!(running_start_time(me), process_start_time(me));
        let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while running_start_time(pid).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "/bin/true never exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            process_start_time(pid).is_some(),
            "not waited for: still a zombie"
        );
        child.wait().unwrap();
        assert_eq!(running_start_time(pid), None);
    }

    #[cfg(unix)]
    #[test]
    fn the_component_walk_refuses_every_way_out() {
        use rustix::fs::OFlags;
        use std::io::Read;
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/deep.csv"), "a,b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etcdir")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("sublink")).unwrap();
        let start = std::fs::File::open(root).unwrap();
        let open =
            |rel: &str| open_by_components(start.as_fd(), Path::new(rel), OFlags::empty(), true);
        let mut text = String::new();
        let fd = open("sub/deep.csv").unwrap();
        assert_eq!(
            fd_path(fd.as_fd()).unwrap(),
            root.canonicalize().unwrap().join("sub/deep.csv")
        );
        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
        assert_eq!(text, "a,b");
        for bad in [
            "link.txt",
            "etcdir/passwd",
            "sublink/deep.csv",
            "../../../../etc/passwd",
            "sub/../../etc/passwd",
            "/etc/passwd",
            "",
        ] {
            assert!(open(bad).is_err(), "{bad:?} was opened");
        }
    }

    /// A mount crossing is refused only when asked (/proc is another file system).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_component_walk_can_stay_on_one_device() {
        use rustix::fs::OFlags;
        use std::os::fd::AsFd;
        let root = std::fs::File::open("/").unwrap();
        let proc = Path::new("proc");
        assert!(open_by_components(root.as_fd(), proc, OFlags::DIRECTORY, true).is_err());
        assert!(open_by_components(root.as_fd(), proc, OFlags::DIRECTORY, false).is_ok());
    }
}
