//! Resource limits for the worker. [`rlimits_for`] is the pure builder, per operating
//! system (soft = hard, except CPU, whose soft limit sends SIGXCPU a little before the
//! hard kill); [`apply`] sets them on the helper, and execve carries them into the
//! interpreter.
//!
//! macOS gets fewer: it has no RLIMIT_MSGQUEUE, RTPRIO, NICE or SIGPENDING, and its
//! RLIMIT_AS cannot be set below the address space every process already maps (the
//! shared cache), so memory there is bounded by the helper's watchdog instead.
//!
//! Tasks and queued signals are counted by the kernel per user, not per process: since
//! Linux 5.14 per (user namespace, uid) and, for every namespace above, added to its
//! creator's count there. A worker in a user namespace of its own (every worker in a
//! world: [`crate::sandbox::linux::helper`]) is therefore counted alone, against its own
//! RLIMIT_NPROC and RLIMIT_SIGPENDING, whatever uid it runs as, and adds at most those
//! limits to its user's count outside ([`task_count`] says when RLIMIT_NPROC may be set).

use crate::sandbox::platform::HostOs;
use crate::worker::policy::Limits;

/// A limit, independent of the C library's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    AddressSpace,
    Cpu,
    FileSize,
    OpenFiles,
    Core,
    Memlock,
    Msgqueue,
    Rtprio,
    Nice,
    Stack,
    Processes,
    PendingSignals,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::AddressSpace => "RLIMIT_AS",
            Resource::Cpu => "RLIMIT_CPU",
            Resource::FileSize => "RLIMIT_FSIZE",
            Resource::OpenFiles => "RLIMIT_NOFILE",
            Resource::Core => "RLIMIT_CORE",
            Resource::Memlock => "RLIMIT_MEMLOCK",
            Resource::Msgqueue => "RLIMIT_MSGQUEUE",
            Resource::Rtprio => "RLIMIT_RTPRIO",
            Resource::Nice => "RLIMIT_NICE",
            Resource::Stack => "RLIMIT_STACK",
            Resource::Processes => "RLIMIT_NPROC",
            Resource::PendingSignals => "RLIMIT_SIGPENDING",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: Resource,
    pub soft: u64,
    pub hard: u64,
}

impl Rlimit {
    pub fn name(&self) -> &'static str {
        self.resource.name()
    }
}

/// Signals queued to a worker at once (RLIMIT_SIGPENDING). The kernel charges a queued
/// real-time signal, and every POSIX timer, to the receiver's user; without a limit of
/// its own a frozen worker could queue its user's whole allowance to itself and leave
/// every other process of that user unable to create a timer. Python needs a handful.
pub const PENDING_SIGNALS: u64 = 256;

/// Limits gVisor's Sentry does not let a process set (EPERM). What they bound, the
/// per-user accounting of queued signals, message queues and priorities, is the
/// sandbox's own kernel's there, not the host's, so a worker cannot exhaust its host
/// user's allowance through them.
pub const HELD_BY_SENTRY: &[Resource] = &[
    Resource::Msgqueue,
    Resource::Rtprio,
    Resource::Nice,
    Resource::PendingSignals,
];

/// How a worker's RLIMIT_NPROC counts its tasks, when it caps that worker alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskCount {
    /// The worker runs as a uid no other process has (a root server's session uid).
    OwnUid,
    /// The worker is in a user namespace of its own, and the kernel (5.14+) counts
    /// tasks per (user namespace, uid).
    OwnUserNamespace,
}

impl TaskCount {
    /// The mechanism, as selftest and the walls report say it.
    pub fn describe(self) -> &'static str {
        match self {
            TaskCount::OwnUid => "RLIMIT_NPROC on the session's own uid",
            TaskCount::OwnUserNamespace => {
                "RLIMIT_NPROC counted in the worker's own user namespace (Linux 5.14+ counts \
                 tasks per user namespace and uid), so it caps that worker alone whatever uid \
                 it runs as"
            }
        }
    }
}

/// Whether RLIMIT_NPROC would cap one worker alone, and how: on a uid of its own, or in
/// a user namespace of its own on a kernel (`release`, as `uname -r` says it) that
/// counts tasks per namespace. `None`: it would count every process of a uid the worker
/// shares (the desktop user's), so it is not set. Pure.
pub fn task_count(own_uid: bool, own_user_namespace: bool, release: &str) -> Option<TaskCount> {
    if own_user_namespace && counts_per_user_namespace(release) {
        Some(TaskCount::OwnUserNamespace)
    } else if own_uid {
        Some(TaskCount::OwnUid)
    } else {
        None
    }
}

/// `limits` as a worker applies them: RLIMIT_NPROC only where it counts that worker alone
/// (`tasks`, from [`task_count`]). Pure.
pub fn for_worker(limits: &Limits, tasks: Option<TaskCount>) -> Limits {
    Limits {
        processes: limits.processes.filter(|_| tasks.is_some()),
        ..limits.clone()
    }
}

/// Whether the kernel `release` (`6.18.4-arch1`) counts RLIMIT_NPROC and
/// RLIMIT_SIGPENDING per user namespace (Linux 5.14+). Pure.
pub fn counts_per_user_namespace(release: &str) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (5, 14),
        _ => false,
    }
}

/// This kernel's release (`uname -r`).
#[cfg(unix)]
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes into a valid struct.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return String::new();
    }
    // SAFETY: the kernel NUL-terminates every field.
    unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn same(resource: Resource, value: u64) -> Rlimit {
    Rlimit {
        resource,
        soft: value,
        hard: value,
    }
}

/// The full list of rlimits for a worker on `os`. Pure.
pub fn rlimits_for(limits: &Limits, os: HostOs) -> Vec<Rlimit> {
    let cpu = Rlimit {
        resource: Resource::Cpu,
        soft: limits.cpu_seconds,
        hard: limits.cpu_seconds + 5,
    };
    let mut out = match os {
        HostOs::MacOs => vec![
            cpu,
            same(Resource::FileSize, limits.file_size_bytes),
            same(Resource::OpenFiles, limits.open_files),
            same(Resource::Core, 0),
        ],
        _ => vec![
            same(Resource::AddressSpace, limits.address_space_bytes),
            cpu,
            same(Resource::FileSize, limits.file_size_bytes),
            same(Resource::OpenFiles, limits.open_files),
            same(Resource::Core, 0),
            same(Resource::Memlock, 64 << 10),
            same(Resource::Msgqueue, 0),
            same(Resource::Rtprio, 0),
            same(Resource::Nice, 0),
            same(Resource::Stack, 8 << 20),
            same(Resource::PendingSignals, PENDING_SIGNALS),
        ],
    };
    if let Some(tasks) = limits.processes {
        out.push(same(Resource::Processes, tasks));
    }
    out
}

/// The C library's resource for `r`, where this system has it.
#[cfg(unix)]
fn native(r: Resource) -> Option<rustix::process::Resource> {
    use rustix::process::Resource as R;
    Some(match r {
        Resource::AddressSpace => R::As,
        Resource::Cpu => R::Cpu,
        Resource::FileSize => R::Fsize,
        Resource::OpenFiles => R::Nofile,
        Resource::Core => R::Core,
        Resource::Memlock => R::Memlock,
        Resource::Stack => R::Stack,
        Resource::Processes => R::Nproc,
        #[cfg(target_os = "linux")]
        Resource::Msgqueue => R::Msgqueue,
        #[cfg(target_os = "linux")]
        Resource::Rtprio => R::Rtprio,
        #[cfg(target_os = "linux")]
        Resource::Nice => R::Nice,
        #[cfg(target_os = "linux")]
        Resource::PendingSignals => R::Sigpending,
        #[cfg(not(target_os = "linux"))]
        Resource::Msgqueue | Resource::Rtprio | Resource::Nice | Resource::PendingSignals => {
            return None;
        }
    })
}

/// Sets every limit on the calling process.
///
/// # Errors
/// The name of the first limit the system refused or does not have, with the reason.
#[cfg(unix)]
pub fn apply(limits: &[Rlimit]) -> Result<(), String> {
    for limit in limits {
        let resource = native(limit.resource)
            .ok_or_else(|| format!("{} does not exist on this system", limit.name()))?;
        let value = rustix::process::Rlimit {
            current: Some(limit.soft),
            maximum: Some(limit.hard),
        };
        rustix::process::setrlimit(resource, value)
            .map_err(|e| format!("setrlimit({}) failed: {e}", limit.name()))?;
    }
    Ok(())
}

/// `NAME=hard …`, for the walls report.
pub fn describe(limits: &[Rlimit]) -> String {
    limits
        .iter()
        .map(|l| format!("{}={}", l.name(), l.hard))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(processes: Option<u64>) -> Limits {
        Limits {
            address_space_bytes: 2 << 30,
            cpu_seconds: 3600,
            file_size_bytes: 256 << 20,
            open_files: 256,
            processes,
        }
    }

    #[test]
    fn every_exhaustion_vector_is_bounded_on_linux() {
        let list = rlimits_for(&limits(Some(256)), HostOs::Linux);
        let find = |r| list.iter().find(|l| l.resource == r).copied().unwrap();
        assert_eq!(find(Resource::AddressSpace).hard, 2 << 30);
        assert_eq!(find(Resource::OpenFiles).soft, 256);
        assert_eq!(find(Resource::Core).hard, 0);
        assert_eq!(find(Resource::Processes).hard, 256);
        assert_eq!(find(Resource::FileSize).hard, 256 << 20);
        assert_eq!(find(Resource::PendingSignals).hard, PENDING_SIGNALS);
        assert_eq!(find(Resource::Msgqueue).hard, 0);
        let cpu = find(Resource::Cpu);
        assert!(cpu.soft < cpu.hard);
        assert!(list.iter().all(|l| l.soft <= l.hard));
    }

    #[test]
    fn tasks_are_capped_per_worker_only_where_they_are_counted_per_worker() {
        for release in ["5.14.0", "6.18.44-fc-v1272", "10.0"] {
            assert_eq!(
                task_count(false, true, release),
                Some(TaskCount::OwnUserNamespace),
                "{release}"
            );
            assert_eq!(
                task_count(true, true, release),
                Some(TaskCount::OwnUserNamespace)
            );
        }
        // Before 5.14 a user namespace counts nothing of its own: only a uid of its own.
        for release in ["5.13.19", "4.19.0-25-amd64", "3.10", "garbage", ""] {
            assert_eq!(task_count(false, true, release), None, "{release}");
            assert_eq!(task_count(true, true, release), Some(TaskCount::OwnUid));
        }
        assert_eq!(task_count(false, false, "6.18.0"), None);
        assert_eq!(task_count(true, false, "6.18.0"), Some(TaskCount::OwnUid));
        // macOS counts per uid only: its helper asks with no user namespace.
        assert_eq!(task_count(false, false, ""), None);
        let wanted = limits(Some(64));
        assert_eq!(for_worker(&wanted, None).processes, None);
        assert_eq!(
            for_worker(&wanted, Some(TaskCount::OwnUid)).processes,
            Some(64)
        );
        assert_eq!(for_worker(&wanted, None).open_files, wanted.open_files);
    }

    #[test]
    fn no_process_limit_without_a_dedicated_uid() {
        for os in [HostOs::Linux, HostOs::MacOs] {
            assert!(
                !rlimits_for(&limits(None), os)
                    .iter()
                    .any(|l| l.resource == Resource::Processes)
            );
        }
    }

    #[test]
    fn macos_gets_only_limits_it_has_and_can_lower() {
        let list = rlimits_for(&limits(None), HostOs::MacOs);
        let names: Vec<&str> = list.iter().map(Rlimit::name).collect();
        assert_eq!(
            names,
            ["RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE"]
        );
        assert!(!list.iter().any(|l| l.resource == Resource::PendingSignals));
        assert!(describe(&list).contains("RLIMIT_FSIZE=268435456"));
    }

    /// Every limit of this system's list exists in its C library.
    #[cfg(unix)]
    #[test]
    fn this_systems_limits_all_exist_here() {
        for limit in rlimits_for(&limits(Some(8)), HostOs::current()) {
            assert!(native(limit.resource).is_some(), "{}", limit.name());
        }
    }
}
