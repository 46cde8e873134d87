//! The sandbox helper: a re-exec of the warden binary (`warden __sandbox-exec`) that is
//! single-threaded, so Landlock and seccomp (both per-thread) cover everything it execs.
//! It reads the [`WorkerPolicy`] from the private request pipe (fd 3), installs the walls
//! in a fixed order, checks them, reports them on the response pipe (fd 4) and execs the
//! interpreter. Every failure to install a required wall ends the helper with a message
//! naming the wall: nothing ever runs unconfined by accident.
//!
//! Order: new session and parent-death signal → drop to the sandbox uid (when root) →
//! user/net/ipc namespaces → rlimits → umask and working directory → close inherited
//! fds → Landlock → seccomp (last: it forbids the syscalls the steps above need) →
//! self-check → report → execve.

use std::convert::Infallible;
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::config::{NetworkMode, SandboxMode};
use crate::sandbox::WORKER_SOURCE;
use crate::sandbox::linux::{landlock, rlimits, seccomp};
use crate::sandbox::policy::WorkerPolicy;
use crate::sandbox::report::{HelperMessage, SandboxReport, WallStatus};

/// The worker's request pipe (server → worker); the policy arrives on it first.
pub const REQUEST_FD: i32 = 3;
/// The worker's response pipe (worker → server); the helper's report goes there first.
pub const RESPONSE_FD: i32 = 4;
/// The largest policy the helper accepts.
const MAX_POLICY_BYTES: usize = 1 << 20;
/// Exit status of a helper that refused to start the worker.
pub const REFUSED_EXIT: i32 = 71;

struct Refusal {
    wall: &'static str,
    message: String,
}

fn refuse(wall: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        wall,
        message: message.into(),
    }
}

/// Entry point of `warden __sandbox-exec`. Never returns: it either execs the
/// interpreter or exits with [`REFUSED_EXIT`] after reporting why.
pub fn run_helper_main() -> ! {
    let refusal = match run() {
        Ok(never) => match never {},
        Err(refusal) => refusal,
    };
    let message = HelperMessage::SandboxError {
        wall: refusal.wall.to_string(),
        message: refusal.message,
    };
    send(&message);
    // SAFETY: _exit skips atexit handlers, which a half-confined helper must not run.
    unsafe { libc::_exit(REFUSED_EXIT) }
}

fn send(message: &HelperMessage) {
    if let Ok(mut line) = serde_json::to_vec(message) {
        line.push(b'\n');
        write_all(RESPONSE_FD, &line);
    }
}

fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

fn read_exact(fd: i32, buf: &mut [u8]) -> Result<(), String> {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled part of a live buffer.
        let n = unsafe { libc::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return Err(format!(
                "the policy pipe closed after {filled} of {} bytes",
                buf.len()
            ));
        }
        filled += n as usize;
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// The policy is length-prefixed (8 bytes, little endian) so that the helper reads
/// exactly its own bytes and leaves the rest of the pipe to the interpreter.
fn read_policy() -> Result<WorkerPolicy, Refusal> {
    let mut len = [0u8; 8];
    read_exact(REQUEST_FD, &mut len).map_err(|e| refuse("policy", e))?;
    let len = u64::from_le_bytes(len);
    let len = usize::try_from(len)
        .ok()
        .filter(|n| *n <= MAX_POLICY_BYTES)
        .ok_or_else(|| refuse("policy", format!("policy of {len} bytes is too large")))?;
    let mut buf = vec![0u8; len];
    read_exact(REQUEST_FD, &mut buf).map_err(|e| refuse("policy", e))?;
    serde_json::from_slice(&buf).map_err(|e| refuse("policy", format!("malformed policy: {e}")))
}

struct Walls {
    mode: SandboxMode,
    list: Vec<WallStatus>,
}

impl Walls {
    fn enforced(&mut self, name: &str, detail: impl Into<String>) {
        self.list.push(WallStatus {
            name: name.to_string(),
            enforced: true,
            detail: detail.into(),
        });
    }

    /// A wall this kernel cannot provide: fatal under `require`, reported otherwise.
    fn missing(&mut self, name: &'static str, detail: String) -> Result<(), Refusal> {
        if self.mode == SandboxMode::Require {
            return Err(refuse(
                name,
                format!("HOST_SANDBOX=require and this wall cannot be installed: {detail}"),
            ));
        }
        self.list.push(WallStatus {
            name: name.to_string(),
            enforced: false,
            detail,
        });
        Ok(())
    }
}

fn run() -> Result<Infallible, Refusal> {
    let policy = read_policy()?;
    let mut walls = Walls {
        mode: policy.mode,
        list: Vec::new(),
    };

    enter_new_session()?;
    if policy.mode != SandboxMode::Off {
        drop_privileges(&policy, &mut walls)?;
    }
    // After the uid change, which clears the parent-death signal.
    die_with_parent(policy.parent_pid)?;
    walls.enforced(
        "process_group",
        "own session and process group; killed with the server",
    );

    if policy.mode != SandboxMode::Off {
        enter_namespaces(&policy, &mut walls)?;
        let limits = rlimits::rlimits_for(&policy.limits);
        rlimits::apply(&limits).map_err(|e| refuse("rlimits", e))?;
        walls.enforced(
            "rlimits",
            limits
                .iter()
                .map(|l| format!("{}={}", l.name, l.hard))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }

    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0o077) };
    std::env::set_current_dir(&policy.workspace).map_err(|e| {
        refuse(
            "workspace",
            format!("cannot enter {}: {e}", policy.workspace.display()),
        )
    })?;
    close_inherited_fds()?;
    walls.enforced(
        "inherited_fds",
        "only stdin, stdout, stderr and the two protocol pipes remain",
    );
    walls.enforced(
        "environment",
        format!(
            "allowlist of {} variables; nothing inherited from the server",
            policy.env.len()
        ),
    );

    let mut landlock_abi = None;
    if policy.mode != SandboxMode::Off {
        match landlock::restrict_current_thread(&policy) {
            Ok(outcome) => {
                landlock_abi = outcome.kernel_abi;
                if outcome.fully_enforced {
                    walls.enforced("landlock", outcome.detail);
                } else {
                    walls.missing("landlock", outcome.detail)?;
                }
            }
            Err(landlock::LandlockError::Unavailable(why)) => {
                walls.missing("landlock", format!("not available on this kernel: {why}"))?;
            }
            Err(e) => return Err(refuse("landlock", e.to_string())),
        }
        forbid_writable_executable_memory(&mut walls)?;
        install_seccomp(&policy, &mut walls)?;
        verify_no_new_privs(&mut walls)?;
        self_check(&policy, &walls)?;
    }

    let report = SandboxReport {
        mode: mode_name(policy.mode).to_string(),
        walls: walls.list,
        landlock_abi,
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
    };
    send(&HelperMessage::Sandbox { report });

    let err = Command::new(&policy.python)
        .arg0("python3")
        .args(["-I", "-B", "-u", "-c", WORKER_SOURCE])
        .env_clear()
        .envs(policy.env.iter().map(|(k, v)| (k, v)))
        .exec();
    Err(refuse(
        "exec",
        format!("could not exec {}: {err}", policy.python.display()),
    ))
}

fn mode_name(mode: SandboxMode) -> &'static str {
    match mode {
        SandboxMode::Off => "off",
        SandboxMode::BestEffort => "best-effort",
        SandboxMode::Require => "require",
    }
}

fn enter_new_session() -> Result<(), Refusal> {
    // SAFETY: plain syscall without pointers.
    if unsafe { libc::setsid() } < 0 {
        return Err(refuse("process_group", os_error("setsid")));
    }
    Ok(())
}

/// The kernel clears the parent-death signal whenever the credentials change (setresuid,
/// setresgid), so it is set only after the last change, then the parent is checked.
fn die_with_parent(parent_pid: i32) -> Result<(), Refusal> {
    // SAFETY: plain syscalls without pointers.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(refuse("process_group", os_error("PR_SET_PDEATHSIG")));
        }
        // The server may have died between fork and prctl: then nobody would kill us.
        if libc::getppid() != parent_pid {
            libc::_exit(REFUSED_EXIT);
        }
    }
    Ok(())
}

const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn read_caps() -> Result<[CapData; 2], String> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two CapData structs for version 3, which `data` holds.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(os_error("capget"));
    }
    Ok(data)
}

fn clear_all_capabilities() -> Result<(), String> {
    for cap in 0..64 {
        // SAFETY: plain prctl; EINVAL past the last capability and EPERM without
        // CAP_SETPCAP are expected and harmless (NNP stops file capabilities anyway).
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
    // SAFETY: plain prctl.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads two CapData structs for version 3.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if rc != 0 {
        return Err(os_error("capset"));
    }
    let caps = read_caps()?;
    if caps.iter().any(|c| c.effective != 0 || c.permitted != 0) {
        return Err("capabilities are still held after capset".to_string());
    }
    Ok(())
}

fn drop_privileges(policy: &WorkerPolicy, walls: &mut Walls) -> Result<(), Refusal> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if let Some(run_as) = policy.run_as {
        if run_as.uid == 0 || run_as.gid == 0 {
            return Err(refuse(
                "privileges",
                "refusing to run the worker as uid or gid 0",
            ));
        }
        clear_bounding_set_best_effort();
        // SAFETY: plain syscalls without pointers (setgroups with an empty list).
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0 {
                return Err(refuse("privileges", os_error("setgroups")));
            }
            if libc::setresgid(run_as.gid, run_as.gid, run_as.gid) != 0 {
                return Err(refuse("privileges", os_error("setresgid")));
            }
            if libc::setresuid(run_as.uid, run_as.uid, run_as.uid) != 0 {
                return Err(refuse("privileges", os_error("setresuid")));
            }
        }
    } else if euid == 0 {
        return Err(refuse(
            "privileges",
            "the server runs as root but no unprivileged uid was assigned",
        ));
    }
    clear_all_capabilities().map_err(|e| refuse("privileges", e))?;
    // SAFETY: plain syscalls.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    if uid == 0 || euid == 0 {
        return Err(refuse(
            "privileges",
            "still uid 0 after dropping privileges",
        ));
    }
    walls.enforced(
        "privileges",
        format!("uid {uid}, no supplementary groups, every capability dropped"),
    );
    Ok(())
}

fn clear_bounding_set_best_effort() {
    for cap in 0..64 {
        // SAFETY: plain prctl; errors past the last capability are expected.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
}

fn write_proc_self(file: &str, contents: &str) -> Result<(), String> {
    std::fs::write(format!("/proc/self/{file}"), contents)
        .map_err(|e| format!("writing /proc/self/{file}: {e}"))
}

/// An extra wall where the kernel allows unprivileged user namespaces: an empty network
/// namespace (only a down loopback) and a private IPC namespace.
fn enter_namespaces(policy: &WorkerPolicy, walls: &mut Walls) -> Result<(), Refusal> {
    // SAFETY: plain syscalls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWIPC;
    if policy.network == NetworkMode::Deny {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: plain syscall.
    if unsafe { libc::unshare(flags) } != 0 {
        return walls.missing(
            "namespaces",
            format!(
                "unprivileged user namespaces are unavailable ({}); Landlock and seccomp still confine the worker",
                std::io::Error::last_os_error()
            ),
        );
    }
    // After setresuid the process is not dumpable, which makes /proc/self root-owned.
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    let mapped = write_proc_self("setgroups", "deny")
        .and_then(|()| write_proc_self("uid_map", &format!("{uid} {uid} 1")))
        .and_then(|()| write_proc_self("gid_map", &format!("{gid} {gid} 1")));
    if let Err(e) = mapped {
        return Err(refuse("namespaces", e));
    }
    // The creator of a user namespace holds every capability inside it: drop them.
    clear_all_capabilities().map_err(|e| refuse("namespaces", e))?;
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let net = if policy.network == NetworkMode::Deny {
        "network (no interfaces), "
    } else {
        ""
    };
    walls.enforced("namespaces", format!("private user, {net}IPC namespaces"));
    Ok(())
}

fn close_inherited_fds() -> Result<(), Refusal> {
    let first = (RESPONSE_FD + 1) as libc::c_uint;
    // SAFETY: close_range only closes descriptors.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
    if rc == 0 {
        return Ok(());
    }
    // Kernels before 5.9: close them one by one.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let max = limit.rlim_cur.min(1 << 20) as i32;
    for fd in (first as i32)..max {
        // SAFETY: closing an fd number we do not use is harmless.
        unsafe { libc::close(fd) };
    }
    Ok(())
}

fn install_seccomp(policy: &WorkerPolicy, walls: &mut Walls) -> Result<(), Refusal> {
    if !cfg!(target_arch = "x86_64") {
        return walls.missing(
            "seccomp",
            format!(
                "the seccomp filters are written for x86_64 only; this is {}",
                std::env::consts::ARCH
            ),
        );
    }
    let plan = seccomp::SeccompPlan {
        network: policy.network,
        // SAFETY: getpid cannot fail.
        self_pid: unsafe { libc::getpid() },
    };
    match seccomp::install_filters_on_current_thread(plan) {
        Ok(n) => {
            walls.enforced(
                "seccomp",
                format!(
                    "{n} filters: no sockets{}, no new processes, no ptrace/mount/namespaces/bpf/io_uring/keyctl/perf, signals only to itself, x32 and foreign ABIs refused",
                    if policy.network == NetworkMode::Allow {
                        " except outbound TCP/UDP"
                    } else {
                        ""
                    }
                ),
            );
            Ok(())
        }
        Err(seccomp::SeccompError::Install(e)) => {
            walls.missing("seccomp", format!("the kernel refused the filter: {e}"))
        }
        Err(e) => Err(refuse("seccomp", e.to_string())),
    }
}

/// W^X (Linux 6.3+): no mapping may become writable and executable, nor gain execute
/// later, so code cannot write machine code into memory and run it. Inherited across
/// execve. A kernel without it leaves the wall unenforced and says so; it is not a
/// refusal under `require` (the memfd and exec walls do not depend on it).
fn forbid_writable_executable_memory(walls: &mut Walls) -> Result<(), Refusal> {
    // SAFETY: plain prctl with integer arguments.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_MDWE,
            libc::PR_MDWE_REFUSE_EXEC_GAIN as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc == 0 {
        walls.enforced(
            "w_xor_x",
            "PR_SET_MDWE: no memory is ever writable and executable",
        );
        return Ok(());
    }
    if errno() == libc::EINVAL {
        walls.list.push(WallStatus {
            name: "w_xor_x".to_string(),
            enforced: false,
            detail: "this kernel has no PR_SET_MDWE (Linux 6.3+): native code could be written into memory and run; it still runs confined by every other wall".to_string(),
        });
        return Ok(());
    }
    Err(refuse("w_xor_x", os_error("PR_SET_MDWE")))
}

fn verify_no_new_privs(walls: &mut Walls) -> Result<(), Refusal> {
    // SAFETY: plain prctl.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    if nnp == 1 {
        walls.enforced(
            "no_new_privs",
            "set: setuid binaries and file capabilities grant nothing",
        );
        return Ok(());
    }
    // Neither Landlock nor seccomp set it (both unavailable): set it ourselves.
    // SAFETY: plain prctl.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(refuse("no_new_privs", os_error("PR_SET_NO_NEW_PRIVS")));
    }
    walls.enforced("no_new_privs", "set");
    Ok(())
}

/// Live canaries after every wall is up: if a wall we think is standing does not block,
/// refuse rather than run.
fn self_check(policy: &WorkerPolicy, walls: &Walls) -> Result<(), Refusal> {
    let standing = |name: &str| walls.list.iter().any(|w| w.name == name && w.enforced);
    let caps = read_caps().map_err(|e| refuse("privileges", e))?;
    if caps.iter().any(|c| c.effective != 0 || c.permitted != 0) {
        return Err(refuse(
            "privileges",
            "self-check: capabilities are still held",
        ));
    }
    if standing("seccomp") {
        if policy.network == NetworkMode::Deny {
            // SAFETY: socket has no pointer arguments; a success is closed at once.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            if fd >= 0 {
                // SAFETY: closing the fd we just got.
                unsafe { libc::close(fd) };
                return Err(refuse(
                    "seccomp",
                    "self-check: socket(AF_INET) was not denied",
                ));
            }
        }
        // SAFETY: memfd_create reads a NUL-terminated name; a success is closed at once.
        let fd = unsafe { libc::memfd_create(c"selfcheck".as_ptr(), libc::MFD_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: closing the fd we just got.
            unsafe { libc::close(fd) };
            return Err(refuse(
                "seccomp",
                "self-check: an executable memfd could be created",
            ));
        }
        // SAFETY: an x32 getpid takes no arguments.
        let rc = unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) };
        if rc >= 0 {
            return Err(refuse(
                "seccomp",
                "self-check: an x32 syscall was not refused",
            ));
        }
    }
    if standing("landlock") {
        let probe = CString::new("/etc/passwd").map_err(|e| refuse("landlock", e.to_string()))?;
        // SAFETY: the path is a valid NUL-terminated string.
        let fd = unsafe { libc::open(probe.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: closing the fd we just got.
            unsafe { libc::close(fd) };
            return Err(refuse("landlock", "self-check: /etc/passwd was readable"));
        }
    }
    Ok(())
}
