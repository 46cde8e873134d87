//! The sandbox helper: a re-exec of the warden binary (`warden __sandbox-exec`) that is
//! single-threaded, so Landlock and seccomp (both per-thread) cover everything it execs.
//! It reads the [`WorkerPolicy`] from the private request pipe (fd 3), installs the walls
//! in a fixed order, checks them, reports them on the response pipe (fd 4) and execs the
//! interpreter. Every failure to install a required wall ends the helper with a message
//! naming the wall: nothing ever runs unconfined by accident.
//!
//! Order: new session → (root: join the keeper's mount namespace, then drop to the
//! session's uid) → parent-death signal (after the uid change, which clears it) → the
//! world: a user namespace of its own (not root: first the keeper's, to join the
//! keeper's mount namespace, then a new one nested in it), then mount, PID, IPC, UTS and
//! network namespaces, a fork (the child is PID 1 of the new PID namespace and becomes
//! the worker; the parent only waits), the minimal root and `pivot_root` → capabilities
//! dropped → rlimits → umask and working directory → close inherited fds → Landlock
//! (against the world's paths) → W^X → seccomp (last: it forbids the syscalls the steps
//! above need) → self-check → report → execve. Without user namespaces, `best-effort`
//! skips the world and confines by host paths (reported); `require` refuses.
//!
//! Why every worker's user namespace is its own, never the keeper's shared one: the
//! kernel counts tasks and queued signals per (user namespace, uid), so only then do
//! RLIMIT_NPROC and RLIMIT_SIGPENDING bound this one worker, for a desktop user's server
//! too (in the keeper's namespace they would count every worker of the server at once).

use std::convert::Infallible;
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use std::os::fd::BorrowedFd;

use crate::config::{NetworkMode, SandboxMode};
use crate::sandbox::linux::namespaces::{self, NamespaceError};
use crate::sandbox::linux::world::{FsView, HOSTNAME};
use crate::sandbox::linux::{egress, landlock, mounts, privileges, seccomp};
use crate::sandbox::platform::HostOs;
use crate::sandbox::rlimits;
use crate::worker::WORKER_SOURCE;
use crate::worker::helper::MAX_POLICY_BYTES;
use crate::worker::helper::{REFUSED_EXIT, REQUEST_FD, RESPONSE_FD};
use crate::worker::policy::{WorkerPolicy, World};
use crate::worker::report::{HelperMessage, SandboxReport, WallStatus};

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

    /// The wall `name` is reported and in force.
    fn standing(&self, name: &str) -> bool {
        self.list.iter().any(|w| w.name == name && w.enforced)
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
    let confined = policy.mode != SandboxMode::Off;
    let join = policy.world.as_ref().and_then(|w| w.join);
    // Decided before the uid change: a root server's keeper has no user namespace, and
    // its mount namespace can only be joined while still root.
    let root_server = running_as_root();
    if confined {
        if root_server && let Some(j) = join {
            // Root may join it only before giving up root.
            namespaces::join_mount_namespace(borrow(j.mount))
                .map_err(|e| refuse("namespaces", e))?;
        }
        drop_privileges(&policy, &mut walls)?;
    }
    // After the uid change, which clears the parent-death signal.
    die_with_parent(policy.parent_pid)?;
    walls.enforced(
        "process_group",
        "own session and process group; killed with the server",
    );
    let in_world = match (&policy.world, confined) {
        (Some(world), true) => enter_world(&policy, world, root_server, &mut walls)?,
        _ => false,
    };
    let (view, env) = match &policy.world {
        Some(world) if in_world => (&world.plan.view, &world.env),
        _ => (&policy.host_view, &policy.host_env),
    };
    confine_and_exec(&policy, view, env, in_world, walls)
}

fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A descriptor number the server placed for us at spawn.
fn borrow(fd: i32) -> BorrowedFd<'static> {
    // SAFETY: the server dup'ed this descriptor to exactly this number before exec, and
    // nothing closes it before close_inherited_fds, after its last use.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Builds the world and moves into it. Returns `true` in the worker-to-be (PID 1 of its
/// namespace; the parent waits inside and never returns), `false` when user namespaces
/// are unavailable and `best-effort` falls back to host paths.
fn enter_world(
    policy: &WorkerPolicy,
    world: &World,
    root_server: bool,
    walls: &mut Walls,
) -> Result<bool, Refusal> {
    let join = world.join;
    let keeper_user = if root_server {
        None
    } else {
        join.and_then(|j| j.user).map(borrow)
    };
    match namespaces::enter_user_namespace(keeper_user) {
        Ok(()) => {}
        Err(NamespaceError::Unavailable(why)) if join.is_none() => {
            walls.missing(
                "namespaces",
                format!("{why}; Landlock and seccomp still confine the worker, by host paths"),
            )?;
            walls.missing(
                "world",
                "no private world: the host's file tree is visible to stat and inotify-free \
                 probing, and other processes to /proc (Landlock still keeps their contents)"
                    .to_string(),
            )?;
            walls.missing(
                "disk_quota",
                "no per-session quota: the workspace is a directory on the host's disk".to_string(),
            )?;
            return Ok(false);
        }
        Err(NamespaceError::Unavailable(why) | NamespaceError::Failed(why)) => {
            return Err(refuse("namespaces", why));
        }
    }
    if !root_server && let Some(j) = join {
        namespaces::join_mount_namespace(borrow(j.mount)).map_err(|e| refuse("namespaces", e))?;
        // The keeper's user namespace is every worker's way into its mount namespace;
        // the worker's tasks and signals are counted in one of its own.
        namespaces::enter_user_namespace(None).map_err(|e| {
            let (NamespaceError::Unavailable(why) | NamespaceError::Failed(why)) = e;
            refuse(
                "namespaces",
                format!("a user namespace of the worker's own inside the keeper's: {why}"),
            )
        })?;
    }
    namespaces::unshare_world().map_err(|e| refuse("namespaces", e))?;
    // Only the worker-to-be returns; its parent waits and exits as it does.
    let child = namespaces::fork_into_pid_namespace().map_err(|e| refuse("namespaces", e))?;
    child
        .die_with_parent()
        .map_err(|e| refuse("process_group", e))?;
    mounts::enter_world(&world.plan, &world.root_mount).map_err(|e| refuse("world", e))?;
    // SAFETY: sethostname reads `len` bytes of a live buffer (its own UTS namespace).
    unsafe { libc::sethostname(HOSTNAME.as_ptr().cast(), HOSTNAME.len()) };
    let net = open_egress(policy, walls)?;
    privileges::clear_all_capabilities().map_err(|e| refuse("privileges", e))?;
    walls.enforced(
        "namespaces",
        format!(
            "own user, mount, PID, network ({net}), IPC and UTS namespaces; the worker is PID 1 of its own"
        ),
    );
    walls.enforced(
        "world",
        "a minimal root of its own: the read-only runtime, /workspace, a private /tmp, a \
         minimal /dev and its own /proc; nothing else of the host exists",
    );
    match world.quota_bytes {
        _ if world.bounded_by.is_some() => walls.enforced(
            "disk_quota",
            world.bounded_by.clone().unwrap_or_default(),
        ),
        Some(bytes) => walls.enforced(
            "disk_quota",
            format!(
                "/workspace is a tmpfs of {bytes} bytes (this session's quota); /tmp a private one of {} bytes",
                crate::sandbox::linux::world::tmp_bytes_for(bytes)
            ),
        ),
        None => walls.missing(
            "disk_quota",
            "no per-session quota: the workspace is a directory on the host's disk \
             (the workspace keeper could not start)"
                .to_string(),
        )?,
    }
    Ok(true)
}

/// A proxied world's one endpoint (see [`egress`]); says what the world's network has.
fn open_egress(policy: &WorkerPolicy, walls: &mut Walls) -> Result<&'static str, Refusal> {
    if !policy.network.proxied() {
        return Ok("no interfaces");
    }
    let fd = policy.egress_fd.ok_or_else(|| {
        refuse(
            "egress",
            "the network is proxied but the server passed no bridge for the proxy",
        )
    })?;
    egress::open_endpoint(borrow(fd)).map_err(|e| refuse("egress", e))?;
    walls.enforced(
        "egress",
        format!(
            "the only endpoint is the server's egress proxy at 127.0.0.1:{}; names are \
             resolved and judged there",
            crate::egress::PROXY_PORT
        ),
    );
    Ok("loopback only")
}

/// The network the walls after the world allow: a proxied network needs the world's
/// own namespace, so without one the worker gets none at all (reported).
fn effective_network(
    policy: &WorkerPolicy,
    in_world: bool,
    walls: &mut Walls,
) -> Result<NetworkMode, Refusal> {
    if in_world
        || policy.egress_outside
        || !policy.network.proxied()
        || policy.mode == SandboxMode::Off
    {
        return Ok(policy.network);
    }
    walls.missing(
        "egress",
        "no network namespace of its own, so the egress proxy cannot be its one endpoint: \
         the worker has no network at all"
            .to_string(),
    )?;
    Ok(NetworkMode::Deny)
}

/// Every wall after the world, then the interpreter.
fn confine_and_exec(
    policy: &WorkerPolicy,
    view: &FsView,
    env: &[(String, String)],
    in_world: bool,
    mut walls: Walls,
) -> Result<Infallible, Refusal> {
    let confined = policy.mode != SandboxMode::Off;
    let network = effective_network(policy, in_world, &mut walls)?;
    if confined {
        apply_rlimits(policy, in_world, &mut walls)?;
    }
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0o077) };
    std::env::set_current_dir(&view.workspace).map_err(|e| {
        refuse(
            "workspace",
            format!("cannot enter {}: {e}", view.workspace.display()),
        )
    })?;
    close_inherited_fds(policy.journal_fd)?;
    walls.enforced(
        "inherited_fds",
        "only stdin, stdout, stderr and the two protocol pipes remain",
    );
    walls.enforced(
        "environment",
        format!(
            "allowlist of {} variables; nothing inherited from the server",
            env.len()
        ),
    );
    let mut landlock_abi = None;
    let mut seal_exec = false;
    if confined {
        match landlock::restrict_current_thread(view, network) {
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
        seal_exec = !walls.standing("landlock");
        if seal_exec {
            walls.enforced(
                "exec_seal",
                "without Landlock's execute right the worker installs a seccomp filter of its \
                 own before any code runs, refusing execve and execveat (it does not start \
                 if it cannot)",
            );
        }
        let wx_seal = !forbid_writable_executable_memory(&mut walls)?;
        install_seccomp(network, wx_seal, &mut walls)?;
        verify_no_new_privs(&mut walls)?;
        self_check(network, &walls, in_world)?;
    }
    if let Some(fd) = policy.journal_fd {
        hand_over_journal(fd);
    }
    let report = SandboxReport {
        mode: mode_name(policy.mode).to_string(),
        walls: walls.list,
        landlock_abi,
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        workspace: view.workspace.display().to_string(),
    };
    send(&HelperMessage::Sandbox { report });
    let err = Command::new(&policy.python)
        .arg0("python3")
        .args(["-I", "-B", "-u", "-c", WORKER_SOURCE])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .envs(seal_exec.then_some(("WARDEN_SEAL_EXEC", "1")))
        .exec();
    Err(refuse(
        "exec",
        format!("could not exec {}: {err}", policy.python.display()),
    ))
}

/// The worker's rlimits, as many as the kernel beneath lets a process set, reported with
/// how its task limit is counted.
fn apply_rlimits(policy: &WorkerPolicy, in_world: bool, walls: &mut Walls) -> Result<(), Refusal> {
    let tasks = rlimits::task_count(
        policy.run_as.is_some(),
        in_world || policy.own_user_namespace,
        &rlimits::kernel_release(),
    );
    let mut limits =
        rlimits::rlimits_for(&rlimits::for_worker(&policy.limits, tasks), HostOs::Linux);
    let sentry = if policy.user_space_kernel {
        limits.retain(|l| !rlimits::HELD_BY_SENTRY.contains(&l.resource));
        "; RLIMIT_MSGQUEUE, RLIMIT_RTPRIO, RLIMIT_NICE and RLIMIT_SIGPENDING are gVisor's \
         Sentry's, which counts them for this sandbox alone, apart from the host's user"
    } else {
        ""
    };
    rlimits::apply(&limits).map_err(|e| refuse("rlimits", e))?;
    let counted = match (tasks, policy.limits.processes) {
        (Some(how), Some(_)) => format!("; {}", how.describe()),
        (None, Some(_)) => "; no RLIMIT_NPROC: without a user namespace or a uid of its \
             own it would count every process of the server's uid"
            .to_string(),
        (_, None) => String::new(),
    };
    walls.enforced(
        "rlimits",
        format!("{}{counted}{sentry}", rlimits::describe(&limits)),
    );
    Ok(())
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

fn drop_privileges(policy: &WorkerPolicy, walls: &mut Walls) -> Result<(), Refusal> {
    if let Some(run_as) = policy.run_as {
        privileges::become_user(run_as.uid, run_as.gid).map_err(|e| refuse("privileges", e))?;
    } else if running_as_root() {
        return Err(refuse(
            "privileges",
            "the server runs as root but no unprivileged uid was assigned",
        ));
    }
    privileges::clear_all_capabilities().map_err(|e| refuse("privileges", e))?;
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

/// Closes every descriptor above the protocol pipes but `keep` (the journal's bridge,
/// closed once used).
fn close_inherited_fds(keep: Option<i32>) -> Result<(), Refusal> {
    let first = RESPONSE_FD + 1;
    match keep.filter(|k| *k >= first) {
        Some(k) => {
            close_range(first, k - 1);
            close_range(k + 1, i32::MAX);
        }
        None => close_range(first, i32::MAX),
    }
    Ok(())
}

/// Closes the descriptors `first..=last`.
fn close_range(first: i32, last: i32) {
    if first > last {
        return;
    }
    // SAFETY: close_range only closes descriptors.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0,
        )
    };
    if rc == 0 {
        return;
    }
    // Kernels before 5.9: close them one by one.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let max = (limit.rlim_cur.min(1 << 20) as i32).min(last.saturating_add(1));
    for fd in first..max {
        // SAFETY: closing an fd number we do not use is harmless.
        unsafe { libc::close(fd) };
    }
}

/// Installs the journal's filter last (every wall is up and checked: nothing the helper
/// does after it changes a file) and hands its listener to the server over `bridge`,
/// with `L`; `N` says the kernel refused it. The worker keeps neither: a transactional
/// call without a journal is refused by the server, never run unjournaled.
fn hand_over_journal(bridge: i32) {
    let listener = seccomp::journal::install_journal_filter();
    let fds;
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let byte = match &listener {
        Ok(fd) => {
            fds = [std::os::fd::AsFd::as_fd(fd)];
            control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
            b"L"
        }
        Err(_) => b"N",
    };
    let _ = rustix::net::sendmsg(
        borrow(bridge),
        &[std::io::IoSlice::new(byte)],
        &mut control,
        rustix::net::SendFlags::empty(),
    );
    drop(listener);
    // SAFETY: the bridge is ours and used no more.
    unsafe { libc::close(bridge) };
}

/// The seccomp filters; `wx_seal`: they also stand in for a missing `PR_SET_MDWE`.
fn install_seccomp(network: NetworkMode, wx_seal: bool, walls: &mut Walls) -> Result<(), Refusal> {
    if seccomp::Arch::native().is_none() {
        return walls.missing(
            "seccomp",
            format!(
                "the seccomp filters are written for x86_64 and aarch64; this is {}",
                std::env::consts::ARCH
            ),
        );
    }
    let plan = seccomp::SeccompPlan {
        network,
        // SAFETY: getpid cannot fail.
        self_pid: unsafe { libc::getpid() },
        wx_seal,
    };
    let installed = seccomp::install_filters_on_current_thread(plan);
    if wx_seal {
        walls.list.push(wx_seal_wall(installed.is_ok()));
    }
    match installed {
        Ok(n) => {
            walls.enforced(
                "seccomp",
                format!(
                    "{n} filters: no sockets{}, no new processes, no ptrace/mount/namespaces/bpf/io_uring/keyctl/perf, signals, limits and scheduling only of itself, no inotify/fanotify, only never-executable memfds, {}",
                    if network.proxied() {
                        " except TCP/UDP over IP (the world's loopback: the proxy)"
                    } else {
                        ""
                    },
                    if cfg!(target_arch = "x86_64") {
                        "x32 and foreign ABIs refused (x86_64)"
                    } else {
                        "AArch32 compat refused (aarch64)"
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

/// The W^X wall where the kernel has no `PR_SET_MDWE`: held by the seccomp filter when it
/// stands. Missing W^X is not a refusal under `require` (the memfd and exec walls do not
/// depend on it).
fn wx_seal_wall(sealed: bool) -> WallStatus {
    WallStatus {
        name: "w_xor_x".to_string(),
        enforced: sealed,
        detail: if sealed {
            "the kernel has no PR_SET_MDWE; the seccomp filter stands in for it: no mapping \
             is made writable and executable, and none is made executable later (mprotect, \
             pkey_mprotect)"
                .to_string()
        } else {
            "this kernel has no PR_SET_MDWE (Linux 6.3+) and no seccomp filter stands in for \
             it: native code could be written into memory and run; it still runs confined by \
             every other wall"
                .to_string()
        },
    }
}

/// W^X (Linux 6.3+): no mapping may become writable and executable, nor gain execute
/// later, so code cannot write machine code into memory and run it. Inherited across
/// execve. `false` when the kernel has no such flag (EINVAL, as under gVisor's Sentry):
/// the seccomp filter then stands in for it, and [`install_seccomp`] reports the wall.
fn forbid_writable_executable_memory(walls: &mut Walls) -> Result<bool, Refusal> {
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
        return Ok(true);
    }
    if errno() == libc::EINVAL {
        return Ok(false);
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
fn self_check(network: NetworkMode, walls: &Walls, in_world: bool) -> Result<(), Refusal> {
    let caps = privileges::read_caps().map_err(|e| refuse("privileges", e))?;
    if privileges::holds_capabilities(&caps) {
        return Err(refuse(
            "privileges",
            "self-check: capabilities are still held",
        ));
    }
    if in_world {
        // PID 1 of its own namespace, in a root where the host's home directories and
        // system configuration do not exist.
        if rustix::process::getpid().as_raw_nonzero().get() != 1 {
            return Err(refuse("namespaces", "self-check: the worker is not PID 1"));
        }
        for host_only in ["/home", "/root", "/etc/passwd", "/sys"] {
            if std::fs::symlink_metadata(host_only).is_ok() {
                return Err(refuse(
                    "world",
                    format!("self-check: {host_only} exists inside the world"),
                ));
            }
        }
    }
    if walls.standing("seccomp") {
        if network == NetworkMode::Deny {
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
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: an x32 getpid takes no arguments.
            let rc = unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) };
            if rc >= 0 {
                return Err(refuse(
                    "seccomp",
                    "self-check: an x32 syscall was not refused",
                ));
            }
        }
    }
    if walls.standing("landlock") {
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
