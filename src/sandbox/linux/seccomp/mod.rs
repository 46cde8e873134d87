//! seccomp-bpf: the syscalls the worker loses. Three filters stack (the kernel takes the
//! strictest answer): a guard per architecture ([`arch`]) that kills foreign ABIs and
//! answers ENOSYS for x32 and for syscalls newer than the ones reviewed, a denylist
//! answering EPERM, and a short list answering ENOSYS so that libc falls back
//! (clone3 → clone).
//!
//! The policy is written once, over named system calls ([`syscalls::Sys`]), and
//! numbered per architecture: x86_64 and aarch64 get the same policy (aarch64 simply
//! has no legacy forms such as `fork` or `chmod`; their generic forms are denied on
//! both). The builders are pure and unit-tested for both architectures on any machine,
//! down to running the compiled programs; [`install_filters_on_current_thread`] only
//! compiles the native ones and applies them.

pub mod arch;
#[cfg(test)]
mod bpf;
pub mod journal;
pub mod syscalls;

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

pub use arch::Arch;
use syscalls::Sys;

use crate::config::NetworkMode;

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp rule construction failed: {0}")]
    Backend(#[from] seccompiler::BackendError),
    #[error("seccomp filter installation failed: {0}")]
    Install(#[from] seccompiler::Error),
    #[error("no seccomp filter is written for this architecture ({0})")]
    UnsupportedArch(&'static str),
}

/// What the filters depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeccompPlan {
    pub network: NetworkMode,
    /// The helper's pid, which stays the worker's pid across execve: the only process the
    /// worker may signal.
    pub self_pid: i32,
    /// The kernel beneath has no `PR_SET_MDWE` (gVisor's Sentry, Linux before 6.3): the
    /// filter stands in for it, refusing a mapping both writable and executable and any
    /// mapping made executable after it was made.
    pub wx_seal: bool,
}

// Linux UAPI values the conditions compare with. They are the same on x86_64 and
// aarch64 (both use the generic fcntl, ioctl and socket numbering), so one policy
// serves both; they are spelled out here because the `libc` crate only has the build
// target's.
const AF_UNIX: u64 = 1;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const SOCK_DGRAM: u64 = 2;
const SOCK_RAW: u64 = 3;
const SOCK_RDM: u64 = 4;
const SOCK_SEQPACKET: u64 = 5;
const SOCK_DCCP: u64 = 6;
const SOCK_PACKET: u64 = 10;
const CLONE_THREAD: u64 = 0x0001_0000;
const CLONE_NEWNS: u64 = 0x0002_0000;
const CLONE_NEWCGROUP: u64 = 0x0200_0000;
const CLONE_NEWUTS: u64 = 0x0400_0000;
const CLONE_NEWIPC: u64 = 0x0800_0000;
const CLONE_NEWUSER: u64 = 0x1000_0000;
const CLONE_NEWPID: u64 = 0x2000_0000;
const CLONE_NEWNET: u64 = 0x4000_0000;
const F_SETOWN: u64 = 8;
const F_SETOWN_EX: u64 = 15;
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const PRIO_PROCESS: u64 = 0;
/// ioprio_set's "which" for a single process or thread (linux/ioprio.h).
const IOPRIO_WHO_PROCESS: u64 = 1;
/// memfd_create flags (linux/memfd.h), missing from the libc crate for this target.
pub const MFD_NOEXEC_SEAL: u64 = 0x0008;
pub const MFD_EXEC: u64 = 0x0010;
const EPERM: u32 = 1;
/// Memory protection bits (asm-generic/mman-common.h, the same on both architectures).
const PROT_WRITE: u64 = 0x2;
const PROT_EXEC: u64 = 0x4;

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    Ok(SeccompRule::new(conditions)?)
}

/// The EPERM policy (filter B), by name and the same on every architecture: every
/// listed syscall, under its conditions, answers EPERM. An empty rule list means
/// "always".
pub fn deny_policy(plan: SeccompPlan) -> Result<Rules, SeccompError> {
    let mut rules = Rules::new();
    network_rules(&plan, &mut rules)?;
    process_rules(&plan, &mut rules)?;
    file_and_memory_rules(&mut rules)?;
    if plan.wx_seal {
        wx_seal_rules(&mut rules)?;
    }
    introspection_rules(&mut rules)?;
    namespace_and_ipc_rules(&mut rules)?;
    ownership_rules(&mut rules)?;
    Ok(rules)
}

/// Sockets, by network mode.
fn network_rules(plan: &SeccompPlan, rules: &mut Rules) -> Result<(), SeccompError> {
    use SeccompCmpOp::{MaskedEq, Ne};
    // Network. deny: no socket at all; only a private AF_UNIX stream socketpair (asyncio's
    // self-pipe). A datagram socketpair could sendto() any pathname socket.
    match plan.network {
        NetworkMode::Deny => {
            always(
                rules,
                &[
                    Sys::Socket,
                    Sys::Connect,
                    Sys::Bind,
                    Sys::Listen,
                    Sys::Accept,
                    Sys::Accept4,
                ],
            );
        }
        NetworkMode::Allow | NetworkMode::Proxy => {
            // IP only: never UNIX (docker.sock, session buses), netlink or packet. The
            // world's network namespace has only its loopback, where the proxy listens.
            rules.insert(
                Sys::Socket,
                vec![rule(vec![cond(0, Ne, AF_INET)?, cond(0, Ne, AF_INET6)?])?],
            );
        }
    }
    let mut pair_rules = vec![rule(vec![cond(0, Ne, AF_UNIX)?])?];
    for sock_type in [
        SOCK_DGRAM,
        SOCK_RAW,
        SOCK_RDM,
        SOCK_SEQPACKET,
        SOCK_DCCP,
        SOCK_PACKET,
    ] {
        pair_rules.push(rule(vec![cond(1, MaskedEq(0xf), sock_type)?])?);
    }
    rules.insert(Sys::Socketpair, pair_rules);
    Ok(())
}

/// Processes, signals, limits and scheduling: the worker itself only.
fn process_rules(plan: &SeccompPlan, rules: &mut Rules) -> Result<(), SeccompError> {
    use SeccompCmpOp::{MaskedEq, Ne};
    // Processes: threads yes, new processes no (no fork bombs, no subprocess, no escape
    // from the process group that the server kills). setsid/setpgid would leave it.
    always(
        rules,
        &[
            Sys::Fork,
            Sys::Vfork,
            Sys::Execveat,
            Sys::Setsid,
            Sys::Setpgid,
        ],
    );
    let mut clone_rules = vec![rule(vec![cond(0, MaskedEq(CLONE_THREAD), 0)?])?];
    // A thread may not take new namespaces either (the kernel would also want
    // capabilities, which are gone; this keeps the answer independent of that).
    for ns in [
        CLONE_NEWNS,
        CLONE_NEWUTS,
        CLONE_NEWIPC,
        CLONE_NEWUSER,
        CLONE_NEWPID,
        CLONE_NEWNET,
        CLONE_NEWCGROUP,
    ] {
        clone_rules.push(rule(vec![cond(0, MaskedEq(ns), ns)?])?);
    }
    rules.insert(Sys::Clone, clone_rules);

    // Signals: only to itself (Landlock's signal scope is the first wall on ABI >= 6).
    let me = plan.self_pid as u32 as u64;
    rules.insert(
        Sys::Kill,
        vec![rule(vec![cond(0, Ne, me)?, cond(0, Ne, 0)?])?],
    );
    for nr in [Sys::Tgkill, Sys::RtSigqueueinfo, Sys::RtTgsigqueueinfo] {
        rules.insert(nr, vec![rule(vec![cond(0, Ne, me)?])?]);
    }
    always(
        rules,
        &[
            Sys::Tkill,
            Sys::PidfdOpen,
            Sys::PidfdSendSignal,
            Sys::PidfdGetfd,
        ],
    );
    // Limits and scheduling of other processes: with the desktop user's own uid, a worker
    // could otherwise lower the server's RLIMIT_CPU (killing it), or renice and pin other
    // programs of the user. Only the worker itself (pid 0 or its own pid) may be named.
    for nr in [
        Sys::Prlimit64,
        Sys::SchedSetscheduler,
        Sys::SchedSetparam,
        Sys::SchedSetaffinity,
        Sys::SchedSetattr,
    ] {
        rules.insert(nr, vec![rule(vec![cond(0, Ne, 0)?, cond(0, Ne, me)?])?]);
    }
    // setpriority(which, who, prio) and ioprio_set(which, who, ioprio): process groups and
    // users are never allowed (they reach every process of the uid); a process only itself.
    for (nr, single) in [
        (Sys::Setpriority, PRIO_PROCESS),
        (Sys::IoprioSet, IOPRIO_WHO_PROCESS),
    ] {
        rules.insert(
            nr,
            vec![
                rule(vec![cond(0, Ne, single)?])?,
                rule(vec![cond(1, Ne, 0)?, cond(1, Ne, me)?])?,
            ],
        );
    }
    Ok(())
}

/// File-system watches, executable memfds and SIGIO to others.
fn file_and_memory_rules(rules: &mut Rules) -> Result<(), SeccompError> {
    use SeccompCmpOp::{Eq, MaskedEq};
    // File-system watches report names and events from outside every other wall (Landlock
    // has no right for them): /tmp, /home, other sessions' workspaces.
    always(
        rules,
        &[
            Sys::InotifyInit,
            Sys::InotifyInit1,
            Sys::InotifyAddWatch,
            Sys::InotifyRmWatch,
            Sys::FanotifyInit,
            Sys::FanotifyMark,
        ],
    );
    // A memfd is executable through /proc/self/fd/N, and Landlock's execute right covers
    // paths, not memfds: only sealed, never-executable memfds may be created (Linux 6.3+;
    // older kernels reject the flag, so memfds are unavailable there).
    rules.insert(
        Sys::MemfdCreate,
        vec![
            rule(vec![cond(1, MaskedEq(MFD_NOEXEC_SEAL), 0)?])?,
            rule(vec![cond(1, MaskedEq(MFD_EXEC), MFD_EXEC)?])?,
        ],
    );
    // SIGIO to a foreign process.
    rules.insert(
        Sys::Fcntl,
        vec![
            rule(vec![cond(1, Eq, F_SETOWN)?])?,
            rule(vec![cond(1, Eq, F_SETOWN_EX)?])?,
        ],
    );
    Ok(())
}

/// W^X where the kernel has no `PR_SET_MDWE`: no mapping is made writable and executable
/// at once, and none gains execute later (`mprotect`, `pkey_mprotect`), so code written
/// into memory can never run. Executable mappings of files (the interpreter and its
/// libraries, as the loader maps them) are made executable at once and stay allowed.
fn wx_seal_rules(rules: &mut Rules) -> Result<(), SeccompError> {
    use SeccompCmpOp::MaskedEq;
    let both = PROT_WRITE | PROT_EXEC;
    rules.insert(Sys::Mmap, vec![rule(vec![cond(2, MaskedEq(both), both)?])?]);
    for sys in [Sys::Mprotect, Sys::PkeyMprotect] {
        rules.insert(
            sys,
            vec![rule(vec![cond(2, MaskedEq(PROT_EXEC), PROT_EXEC)?])?],
        );
    }
    Ok(())
}

/// Other processes' insides, eBPF, perf, and the kernel's riskier surface.
fn introspection_rules(rules: &mut Rules) -> Result<(), SeccompError> {
    // Debugging and introspection of other processes; eBPF; perf.
    always(
        rules,
        &[
            Sys::Ptrace,
            Sys::ProcessVmReadv,
            Sys::ProcessVmWritev,
            Sys::Kcmp,
            Sys::PerfEventOpen,
            Sys::Bpf,
            Sys::Userfaultfd,
        ],
    );

    // Kernel attack surface (Flatpak and Docker default denials). open_by_handle_at was
    // the "shocker" container breakout.
    always(
        rules,
        &[
            Sys::Syslog,
            Sys::Acct,
            Sys::Quotactl,
            Sys::QuotactlFd,
            Sys::Uselib,
            Sys::ModifyLdt,
            Sys::LookupDcookie,
            Sys::Vhangup,
            Sys::Personality,
            Sys::KexecLoad,
            Sys::KexecFileLoad,
            Sys::InitModule,
            Sys::FinitModule,
            Sys::DeleteModule,
            Sys::Reboot,
            Sys::Swapon,
            Sys::Swapoff,
            Sys::Iopl,
            Sys::Ioperm,
            Sys::Sethostname,
            Sys::Setdomainname,
            Sys::Settimeofday,
            Sys::ClockSettime,
            Sys::ClockAdjtime,
            Sys::Adjtimex,
            Sys::NameToHandleAt,
            Sys::OpenByHandleAt,
            Sys::Statmount,
            Sys::Listmount,
            Sys::LsmSetSelfAttr,
        ],
    );
    // Kernel keyrings.
    always(rules, &[Sys::AddKey, Sys::Keyctl, Sys::RequestKey]);
    // NUMA memory policy ("scary VM ops" in Flatpak).
    always(
        rules,
        &[
            Sys::MovePages,
            Sys::Mbind,
            Sys::MigratePages,
            Sys::SetMempolicy,
            Sys::GetMempolicy,
        ],
    );
    Ok(())
}

/// Namespaces, mounts, terminal injection and IPC with other programs.
fn namespace_and_ipc_rules(rules: &mut Rules) -> Result<(), SeccompError> {
    use SeccompCmpOp::Eq;
    // Namespaces and mounts: user namespaces widen the kernel attack surface.
    always(
        rules,
        &[
            Sys::Unshare,
            Sys::Setns,
            Sys::Mount,
            Sys::Umount2,
            Sys::PivotRoot,
            Sys::Chroot,
        ],
    );
    // Terminal input injection (CVE-2017-5226).
    rules.insert(
        Sys::Ioctl,
        vec![
            rule(vec![cond(1, Eq, TIOCSTI)?])?,
            rule(vec![cond(1, Eq, TIOCLINUX)?])?,
        ],
    );
    // SysV and POSIX IPC: segments of other programs of the same uid.
    always(
        rules,
        &[
            Sys::Shmget,
            Sys::Shmat,
            Sys::Shmctl,
            Sys::Shmdt,
            Sys::Msgget,
            Sys::Msgsnd,
            Sys::Msgrcv,
            Sys::Msgctl,
            Sys::Semget,
            Sys::Semop,
            Sys::Semtimedop,
            Sys::Semctl,
            Sys::MqOpen,
            Sys::MqUnlink,
            Sys::MqTimedsend,
            Sys::MqTimedreceive,
            Sys::MqNotify,
            Sys::MqGetsetattr,
        ],
    );
    Ok(())
}

/// Ownership, modes and extended attributes.
fn ownership_rules(rules: &mut Rules) -> Result<(), SeccompError> {
    // Ownership, modes and extended attributes, which Landlock cannot restrict: a worker
    // running as the desktop user's own uid could otherwise chmod that user's files
    // anywhere (say ~/.ssh). fchmod stays: its fd comes from an open Landlock allowed.
    always(
        rules,
        &[
            Sys::Chmod,
            Sys::Fchmodat,
            Sys::Fchmodat2,
            Sys::Chown,
            Sys::Fchown,
            Sys::Lchown,
            Sys::Fchownat,
            Sys::Setxattr,
            Sys::Lsetxattr,
            Sys::Fsetxattr,
            Sys::Removexattr,
            Sys::Lremovexattr,
            Sys::Fremovexattr,
            Sys::Setxattrat,
            Sys::Removexattrat,
            Sys::FileSetattr,
        ],
    );
    Ok(())
}

/// A syscall's rules: EPERM under any of them; an empty list: always.
pub type Rules = BTreeMap<Sys, Vec<SeccompRule>>;

/// `calls` answer EPERM whatever their arguments.
fn always(rules: &mut Rules, calls: &[Sys]) {
    for sys in calls {
        rules.insert(*sys, Vec::new());
    }
}

/// Filter C's syscalls: answered ENOSYS so that libc and runtimes fall back. clone3's
/// flags live in memory seccomp cannot read; io_uring performs socket and file operations
/// that never pass through the syscalls above; the new mount API.
pub fn enosys_syscalls() -> Vec<Sys> {
    vec![
        Sys::Clone3,
        Sys::IoUringSetup,
        Sys::IoUringEnter,
        Sys::IoUringRegister,
        Sys::OpenTree,
        Sys::MoveMount,
        Sys::Fsopen,
        Sys::Fsconfig,
        Sys::Fsmount,
        Sys::Fspick,
        Sys::MountSetattr,
        Sys::OpenTreeAttr,
    ]
}

/// A named policy numbered for `arch`; calls `arch` does not have are left out (their
/// generic forms are in the policy too, see [`Sys::generic_form`]).
fn numbered<R>(policy: BTreeMap<Sys, R>, arch: Arch) -> BTreeMap<i64, R> {
    policy
        .into_iter()
        .filter_map(|(sys, rules)| Some((sys.number(arch)?, rules)))
        .collect()
}

/// Filter B's rules for `arch`.
pub fn eperm_rules(
    plan: SeccompPlan,
    arch: Arch,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    Ok(numbered(deny_policy(plan)?, arch))
}

/// Compiles all three filters for `arch`, in the order they are installed. Pure.
pub fn build_programs(plan: SeccompPlan, arch: Arch) -> Result<Vec<BpfProgram>, SeccompError> {
    let deny = SeccompFilter::new(
        eperm_rules(plan, arch)?,
        SeccompAction::Allow,
        SeccompAction::Errno(EPERM),
        arch.target(),
    )?;
    let enosys = enosys_syscalls()
        .into_iter()
        .map(|sys| (sys, Vec::new()))
        .collect();
    let nosys = SeccompFilter::new(
        numbered(enosys, arch),
        SeccompAction::Allow,
        SeccompAction::Errno(arch::ENOSYS),
        arch.target(),
    )?;
    Ok(vec![
        arch::guard_program(arch),
        deny.try_into()?,
        nosys.try_into()?,
    ])
}

/// Installs every filter for this machine's architecture on the calling thread; they
/// survive execve. Sets no_new_privs.
///
/// # Errors
/// When no filter is written for this architecture, a filter cannot be compiled, or the
/// kernel refuses it.
pub fn install_filters_on_current_thread(plan: SeccompPlan) -> Result<usize, SeccompError> {
    let arch = Arch::native().ok_or(SeccompError::UnsupportedArch(std::env::consts::ARCH))?;
    let programs = build_programs(plan, arch)?;
    for program in &programs {
        seccompiler::apply_filter(program)?;
    }
    Ok(programs.len())
}

#[cfg(test)]
mod tests;
