//! The sandbox helper on macOS (`warden __sandbox-exec`): the thin glue that applies
//! [`crate::sandbox::macos`]'s builders. It reads the policy from the request pipe, makes
//! itself a session and process-group leader, drops to the session's uid (root server),
//! sets the rlimits, enters the workspace, closes every other descriptor, forks the
//! watchdog, reports the walls and execs `/usr/bin/sandbox-exec`, which applies the
//! deny-default profile to itself and then execs the interpreter. The interpreter keeps
//! the helper's pid, so the server's kill reaches it by pid even if it left the group.
//!
//! macOS has no parent-death signal: the watchdog, a child outside the profile running
//! only this file's loop, polls the server (by pid and start time) and kills the group
//! and the worker when the server is gone; it exits when the worker does.
//!
//! Not run in this project's CI (no Mac): see the README's platform table.

use std::convert::Infallible;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::config::SandboxMode;
use crate::sandbox::macos;
use crate::sandbox::platform::HostOs;
use crate::sandbox::rlimits;
use crate::worker::WORKER_SOURCE;
use crate::worker::helper::{self, REQUEST_FD, RESPONSE_FD, Refusal, refuse};
use crate::worker::policy::WorkerPolicy;
use crate::worker::report::{HelperMessage, SandboxReport};

/// How often the watchdog looks for the server.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// Entry point of `warden __sandbox-exec` on macOS. Never returns: it execs, or exits
/// with [`helper::REFUSED_EXIT`] after reporting which wall could not stand.
pub fn run_helper_main() -> ! {
    match run() {
        Ok(never) => match never {},
        Err(refusal) => helper::exit_refused(refusal),
    }
}

fn run() -> Result<Infallible, Refusal> {
    let policy = helper::read_policy()?;
    rustix::process::setsid().map_err(|e| refuse("process_group", format!("setsid: {e}")))?;
    let confined = policy.mode != SandboxMode::Off;
    if confined {
        if let Some(run_as) = policy.run_as {
            become_user(run_as.uid, run_as.gid)?;
        }
        let limits = rlimits::rlimits_for(&worker_limits(&policy), HostOs::MacOs);
        rlimits::apply(&limits).map_err(|e| refuse("rlimits", e))?;
    }
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0o077) };
    let workspace = &policy.host_view.workspace;
    std::env::set_current_dir(workspace).map_err(|e| {
        refuse(
            "workspace",
            format!("cannot enter {}: {e}", workspace.display()),
        )
    })?;
    close_inherited_fds();
    start_watchdog(policy.parent_pid)?;
    if confined {
        exec_confined(&policy)
    } else {
        exec_unconfined(&policy)
    }
}

/// The worker's limits: RLIMIT_NPROC only on a uid of its own (macOS counts it per uid,
/// so on the desktop user's uid it would count every process of that user).
fn worker_limits(policy: &WorkerPolicy) -> crate::worker::policy::Limits {
    let tasks = rlimits::task_count(policy.run_as.is_some(), false, "");
    rlimits::for_worker(&policy.limits, tasks)
}

/// The profile, the report, then `sandbox-exec`.
fn exec_confined(policy: &WorkerPolicy) -> Result<Infallible, Refusal> {
    if !Path::new(macos::SANDBOX_EXEC).is_file() {
        return Err(refuse(
            "seatbelt",
            format!(
                "{} is missing: it is part of macOS, and the only filesystem and network wall warden has there; nothing runs without it",
                macos::SANDBOX_EXEC
            ),
        ));
    }
    let view = macos::resolve_view(&policy.host_view, &|p| std::fs::canonicalize(p).ok());
    let real = std::fs::canonicalize(&policy.python).unwrap_or_else(|_| policy.python.clone());
    let mut names = macos::interpreter_names(&policy.python, &real);
    names.extend(view.executables.iter().cloned());
    let profile = macos::profile(&view, &names, policy.network);
    let limits = rlimits::rlimits_for(&worker_limits(policy), HostOs::MacOs);
    let walls = macos::walls(
        &profile,
        policy.network,
        policy.run_as.map(|r| r.uid),
        rlimits::describe(&limits),
        policy.host_env.len(),
    );
    report(policy, walls);
    let argv = macos::sandbox_exec_argv(&profile, &policy.python);
    let err = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(policy.host_env.iter().map(|(k, v)| (k, v)))
        .exec();
    Err(refuse(
        "seatbelt",
        format!("could not exec {}: {err}", macos::SANDBOX_EXEC),
    ))
}

/// `HOST_SANDBOX=off`: the interpreter as it is (development only; reported as such).
fn exec_unconfined(policy: &WorkerPolicy) -> Result<Infallible, Refusal> {
    report(policy, Vec::new());
    let err = Command::new(&policy.python)
        .args(["-I", "-B", "-u", "-c", WORKER_SOURCE])
        .env_clear()
        .envs(policy.host_env.iter().map(|(k, v)| (k, v)))
        .exec();
    Err(refuse(
        "exec",
        format!("could not exec {}: {err}", policy.python.display()),
    ))
}

fn report(policy: &WorkerPolicy, walls: Vec<crate::worker::report::WallStatus>) {
    helper::send(&HelperMessage::Sandbox {
        report: SandboxReport {
            mode: match policy.mode {
                SandboxMode::Off => "off",
                SandboxMode::BestEffort => "best-effort",
                SandboxMode::Require => "require",
            }
            .to_string(),
            walls,
            landlock_abi: None,
            uid: rustix::process::getuid().as_raw(),
            workspace: policy.host_view.workspace.display().to_string(),
        },
    });
}

/// The session's own uid and gid, no supplementary groups; then proof that root is gone.
fn become_user(uid: u32, gid: u32) -> Result<(), Refusal> {
    let gid_t = gid as libc::gid_t;
    // SAFETY: setgroups reads one gid from a live local; setgid/setuid take plain values.
    let failed = unsafe {
        libc::setgroups(1, &gid_t) != 0
            || libc::setgid(gid_t) != 0
            || libc::setuid(uid as libc::uid_t) != 0
    };
    if failed {
        return Err(refuse(
            "privileges",
            format!(
                "cannot become uid {uid}: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    // SAFETY: as above; this must fail now.
    let regained = unsafe { libc::setuid(0) == 0 };
    if regained || rustix::process::geteuid().as_raw() != uid {
        return Err(refuse("privileges", "root could be regained after setuid"));
    }
    Ok(())
}

/// Closes every descriptor but stdin, stdout, stderr and the protocol pipes (listed from
/// `/dev/fd` first, then closed: the listing's own descriptor is among them).
fn close_inherited_fds() {
    let open: Vec<i32> = std::fs::read_dir("/dev/fd")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for fd in open.into_iter().filter(|fd| *fd > RESPONSE_FD) {
        // SAFETY: closing a number this process no longer uses; EBADF is harmless.
        unsafe { libc::close(fd) };
    }
}

/// Forks the watchdog; returns in the parent, which becomes the worker.
fn start_watchdog(server: i32) -> Result<(), Refusal> {
    let worker = rustix::process::getpid().as_raw_nonzero().get();
    let server_start = u32::try_from(server)
        .ok()
        .and_then(crate::os::process_start_time);
    // SAFETY: the helper is single-threaded (main dispatches it before any runtime), so
    // the child may run ordinary code.
    match unsafe { libc::fork() } {
        -1 => Err(refuse(
            "process_group",
            format!(
                "cannot start the watchdog: {}",
                std::io::Error::last_os_error()
            ),
        )),
        0 => watch(server, server_start, worker),
        _ => Ok(()),
    }
}

/// The watchdog's life: holds none of the worker's descriptors (so its pipes close when
/// it exits), exits when the worker is gone, kills it when the server is.
fn watch(server: i32, server_start: Option<u64>, worker: i32) -> ! {
    // SAFETY: plain descriptor calls on numbers this process owns.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..=2 {
            libc::dup2(null, fd);
        }
        for fd in [null, REQUEST_FD, RESPONSE_FD] {
            libc::close(fd);
        }
    }
    loop {
        if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(worker) {
            // SAFETY: _exit ends this process at once.
            unsafe { libc::_exit(0) }
        }
        if !server_alive(server, server_start) {
            crate::os::kill_group(worker);
            // SAFETY: as above.
            unsafe { libc::_exit(0) }
        }
        std::thread::sleep(WATCH_INTERVAL);
    }
}

/// The server is the process it was when the worker started (its pid and start time; the
/// pid alone when its start time cannot be read).
fn server_alive(server: i32, start: Option<u64>) -> bool {
    let Some(pid) = u32::try_from(server).ok() else {
        return false;
    };
    if let (Some(then), Some(now)) = (start, crate::os::process_start_time(pid)) {
        return then == now;
    }
    // Signal 0 only asks whether the process exists. EPERM: it does, another user's (a
    // root server seen from the session's uid); ESRCH: it is gone.
    match rustix::process::Pid::from_raw(server) {
        Some(pid) => match rustix::process::test_kill_process(pid) {
            Ok(()) => true,
            Err(e) => e == rustix::io::Errno::PERM,
        },
        None => false,
    }
}
