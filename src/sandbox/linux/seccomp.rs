//! seccomp-bpf: the syscalls the worker loses. Three filters stack (the kernel takes the
//! strictest answer): an architecture/x32 guard that also answers ENOSYS for syscalls
//! newer than the ones reviewed here, a denylist answering EPERM, and a short list
//! answering ENOSYS so that libc falls back (clone3 → clone). The rule builders are pure
//! and unit-tested; [`install_filters_on_current_thread`] only compiles and applies them.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use crate::config::NetworkMode;

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp rule construction failed: {0}")]
    Backend(#[from] seccompiler::BackendError),
    #[error("seccomp filter installation failed: {0}")]
    Install(#[from] seccompiler::Error),
}

/// What the filters depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeccompPlan {
    pub network: NetworkMode,
    /// The helper's pid, which stays the worker's pid across execve: the only process the
    /// worker may signal.
    pub self_pid: i32,
}

/// The highest x86_64 syscall number reviewed for this filter (file_setattr, Linux 6.17).
/// Anything above it, and every x32 number (bit 30 set), answers ENOSYS.
pub const MAX_REVIEWED_SYSCALL: u32 = 469;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7FFF_0000;

// Syscalls newer than the libc crate's constants, by their x86_64 numbers.
/// fcntl command, missing from the libc crate for this target.
const F_SETOWN_EX: u64 = 15;
const SYS_STATMOUNT: i64 = 457;
const SYS_LISTMOUNT: i64 = 458;
const SYS_LSM_SET_SELF_ATTR: i64 = 460;
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;
const SYS_OPEN_TREE_ATTR: i64 = 467;
const SYS_FILE_SETATTR: i64 = 469;
const SYS_FCHMODAT2: i64 = 452;
/// memfd_create flags (linux/memfd.h), missing from the libc crate for this target.
pub const MFD_NOEXEC_SEAL: u64 = 0x0008;
pub const MFD_EXEC: u64 = 0x0010;
/// ioprio_set's "which" for a single process or thread (linux/ioprio.h).
const IOPRIO_WHO_PROCESS: u64 = 1;

/// Filter A: kill foreign architectures (i386 `int 0x80`), ENOSYS for x32 and unknown
/// numbers. Hand-written because seccompiler has no x32 check (rust-vmm/seccompiler#74).
pub fn arch_guard_program() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGT_K: u16 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(LD_W_ABS, 0, 0, 4),              // A = seccomp_data.arch
        ins(JEQ_K, 1, 0, AUDIT_ARCH_X86_64), // native? skip the kill
        ins(RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        ins(LD_W_ABS, 0, 0, 0),                 // A = seccomp_data.nr
        ins(JGT_K, 0, 1, MAX_REVIEWED_SYSCALL), // x32 (bit 30) and unknown are greater
        ins(RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        ins(RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
}

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

/// Filter B's rules: every listed syscall (under its conditions) answers EPERM.
/// An empty rule list means "always".
pub fn eperm_rules(plan: SeccompPlan) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always = |rules: &mut BTreeMap<i64, Vec<SeccompRule>>, nrs: &[i64]| {
        for nr in nrs {
            rules.insert(*nr, Vec::new());
        }
    };

    // Network. deny: no socket at all; only a private AF_UNIX stream socketpair (asyncio's
    // self-pipe). A datagram socketpair could sendto() any pathname socket.
    match plan.network {
        NetworkMode::Deny => {
            always(
                &mut rules,
                &[
                    libc::SYS_socket,
                    libc::SYS_connect,
                    libc::SYS_bind,
                    libc::SYS_listen,
                    libc::SYS_accept,
                    libc::SYS_accept4,
                ],
            );
        }
        NetworkMode::Allow => {
            // Outbound IP only: never UNIX (docker.sock, session buses), netlink or packet.
            rules.insert(
                libc::SYS_socket,
                vec![rule(vec![
                    cond(0, Ne, libc::AF_INET as u64)?,
                    cond(0, Ne, libc::AF_INET6 as u64)?,
                ])?],
            );
        }
    }
    let mut pair_rules = vec![rule(vec![cond(0, Ne, libc::AF_UNIX as u64)?])?];
    for sock_type in [
        libc::SOCK_DGRAM,
        libc::SOCK_RAW,
        libc::SOCK_RDM,
        libc::SOCK_SEQPACKET,
        6,  // SOCK_DCCP
        10, // SOCK_PACKET
    ] {
        pair_rules.push(rule(vec![cond(1, MaskedEq(0xf), sock_type as u64)?])?);
    }
    rules.insert(libc::SYS_socketpair, pair_rules);

    // Processes: threads yes, new processes no (no fork bombs, no subprocess, no escape
    // from the process group that the server kills). setsid/setpgid would leave it.
    always(
        &mut rules,
        &[
            libc::SYS_fork,
            libc::SYS_vfork,
            libc::SYS_execveat,
            libc::SYS_setsid,
            libc::SYS_setpgid,
        ],
    );
    let mut clone_rules = vec![rule(vec![cond(
        0,
        MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )?])?];
    // A thread may not take new namespaces either (the kernel would also want
    // capabilities, which are gone; this keeps the answer independent of that).
    for ns in [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWCGROUP,
    ] {
        clone_rules.push(rule(vec![cond(0, MaskedEq(ns as u64), ns as u64)?])?);
    }
    rules.insert(libc::SYS_clone, clone_rules);

    // Signals: only to itself (Landlock's signal scope is the first wall on ABI >= 6).
    let me = plan.self_pid as u32 as u64;
    rules.insert(
        libc::SYS_kill,
        vec![rule(vec![cond(0, Ne, me)?, cond(0, Ne, 0)?])?],
    );
    for nr in [
        libc::SYS_tgkill,
        libc::SYS_rt_sigqueueinfo,
        libc::SYS_rt_tgsigqueueinfo,
    ] {
        rules.insert(nr, vec![rule(vec![cond(0, Ne, me)?])?]);
    }
    always(
        &mut rules,
        &[
            libc::SYS_tkill,
            libc::SYS_pidfd_open,
            libc::SYS_pidfd_send_signal,
            libc::SYS_pidfd_getfd,
        ],
    );
    // Limits and scheduling of other processes: with the desktop user's own uid, a worker
    // could otherwise lower the server's RLIMIT_CPU (killing it), or renice and pin other
    // programs of the user. Only the worker itself (pid 0 or its own pid) may be named.
    for nr in [
        libc::SYS_prlimit64,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setattr,
    ] {
        rules.insert(nr, vec![rule(vec![cond(0, Ne, 0)?, cond(0, Ne, me)?])?]);
    }
    // setpriority(which, who, prio) and ioprio_set(which, who, ioprio): process groups and
    // users are never allowed (they reach every process of the uid); a process only itself.
    for (nr, single) in [
        (libc::SYS_setpriority, libc::PRIO_PROCESS as u64),
        (libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS),
    ] {
        rules.insert(
            nr,
            vec![
                rule(vec![cond(0, Ne, single)?])?,
                rule(vec![cond(1, Ne, 0)?, cond(1, Ne, me)?])?,
            ],
        );
    }
    // File-system watches report names and events from outside every other wall (Landlock
    // has no right for them): /tmp, /home, other sessions' workspaces.
    always(
        &mut rules,
        &[
            libc::SYS_inotify_init,
            libc::SYS_inotify_init1,
            libc::SYS_inotify_add_watch,
            libc::SYS_inotify_rm_watch,
            libc::SYS_fanotify_init,
            libc::SYS_fanotify_mark,
        ],
    );
    // A memfd is executable through /proc/self/fd/N, and Landlock's execute right covers
    // paths, not memfds: only sealed, never-executable memfds may be created (Linux 6.3+;
    // older kernels reject the flag, so memfds are unavailable there).
    rules.insert(
        libc::SYS_memfd_create,
        vec![
            rule(vec![cond(1, MaskedEq(MFD_NOEXEC_SEAL), 0)?])?,
            rule(vec![cond(1, MaskedEq(MFD_EXEC), MFD_EXEC)?])?,
        ],
    );
    // SIGIO to a foreign process.
    rules.insert(
        libc::SYS_fcntl,
        vec![
            rule(vec![cond(1, Eq, libc::F_SETOWN as u64)?])?,
            rule(vec![cond(1, Eq, F_SETOWN_EX)?])?,
        ],
    );

    // Debugging and introspection of other processes; eBPF; perf.
    always(
        &mut rules,
        &[
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_kcmp,
            libc::SYS_perf_event_open,
            libc::SYS_bpf,
            libc::SYS_userfaultfd,
        ],
    );

    // Kernel attack surface (Flatpak and Docker default denials). open_by_handle_at was
    // the "shocker" container breakout.
    always(
        &mut rules,
        &[
            libc::SYS_syslog,
            libc::SYS_acct,
            libc::SYS_quotactl,
            libc::SYS_quotactl_fd,
            libc::SYS_uselib,
            libc::SYS_modify_ldt,
            libc::SYS_lookup_dcookie,
            libc::SYS_vhangup,
            libc::SYS_personality,
            libc::SYS_kexec_load,
            libc::SYS_kexec_file_load,
            libc::SYS_init_module,
            libc::SYS_finit_module,
            libc::SYS_delete_module,
            libc::SYS_reboot,
            libc::SYS_swapon,
            libc::SYS_swapoff,
            libc::SYS_iopl,
            libc::SYS_ioperm,
            libc::SYS_sethostname,
            libc::SYS_setdomainname,
            libc::SYS_settimeofday,
            libc::SYS_clock_settime,
            libc::SYS_clock_adjtime,
            libc::SYS_adjtimex,
            libc::SYS_name_to_handle_at,
            libc::SYS_open_by_handle_at,
            SYS_STATMOUNT,
            SYS_LISTMOUNT,
            SYS_LSM_SET_SELF_ATTR,
        ],
    );
    // Kernel keyrings.
    always(
        &mut rules,
        &[libc::SYS_add_key, libc::SYS_keyctl, libc::SYS_request_key],
    );
    // NUMA memory policy ("scary VM ops" in Flatpak).
    always(
        &mut rules,
        &[
            libc::SYS_move_pages,
            libc::SYS_mbind,
            libc::SYS_migrate_pages,
            libc::SYS_set_mempolicy,
            libc::SYS_get_mempolicy,
        ],
    );
    // Namespaces and mounts: user namespaces widen the kernel attack surface.
    always(
        &mut rules,
        &[
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_chroot,
        ],
    );
    // Terminal input injection (CVE-2017-5226).
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, Eq, libc::TIOCSTI)?])?,
            rule(vec![cond(1, Eq, libc::TIOCLINUX)?])?,
        ],
    );
    // SysV and POSIX IPC: segments of other programs of the same uid.
    always(
        &mut rules,
        &[
            libc::SYS_shmget,
            libc::SYS_shmat,
            libc::SYS_shmctl,
            libc::SYS_shmdt,
            libc::SYS_msgget,
            libc::SYS_msgsnd,
            libc::SYS_msgrcv,
            libc::SYS_msgctl,
            libc::SYS_semget,
            libc::SYS_semop,
            libc::SYS_semtimedop,
            libc::SYS_semctl,
            libc::SYS_mq_open,
            libc::SYS_mq_unlink,
            libc::SYS_mq_timedsend,
            libc::SYS_mq_timedreceive,
            libc::SYS_mq_notify,
            libc::SYS_mq_getsetattr,
        ],
    );
    // Ownership, modes and extended attributes, which Landlock cannot restrict: a worker
    // running as the desktop user's own uid could otherwise chmod that user's files
    // anywhere (say ~/.ssh). fchmod stays: its fd comes from an open Landlock allowed.
    always(
        &mut rules,
        &[
            libc::SYS_chmod,
            libc::SYS_fchmodat,
            SYS_FCHMODAT2,
            libc::SYS_chown,
            libc::SYS_fchown,
            libc::SYS_lchown,
            libc::SYS_fchownat,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            SYS_SETXATTRAT,
            SYS_REMOVEXATTRAT,
            SYS_FILE_SETATTR,
        ],
    );
    Ok(rules)
}

/// Filter C's syscalls: answered ENOSYS so that libc and runtimes fall back. clone3's
/// flags live in memory seccomp cannot read; io_uring performs socket and file operations
/// that never pass through the syscalls above; the new mount API.
pub fn enosys_syscalls() -> Vec<i64> {
    vec![
        libc::SYS_clone3,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        SYS_OPEN_TREE_ATTR,
    ]
}

/// Compiles all three filters. Pure (no syscalls).
pub fn build_programs(plan: SeccompPlan) -> Result<Vec<BpfProgram>, SeccompError> {
    let deny = SeccompFilter::new(
        eperm_rules(plan)?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )?;
    let nosys = SeccompFilter::new(
        enosys_syscalls()
            .into_iter()
            .map(|nr| (nr, Vec::new()))
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        TargetArch::x86_64,
    )?;
    Ok(vec![
        arch_guard_program(),
        deny.try_into()?,
        nosys.try_into()?,
    ])
}

/// Installs every filter on the calling thread; they survive execve. Sets no_new_privs.
///
/// # Errors
/// When a filter cannot be compiled or the kernel refuses it.
pub fn install_filters_on_current_thread(plan: SeccompPlan) -> Result<usize, SeccompError> {
    let programs = build_programs(plan)?;
    for program in &programs {
        seccompiler::apply_filter(program)?;
    }
    Ok(programs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(network: NetworkMode) -> SeccompPlan {
        SeccompPlan {
            network,
            self_pid: 4242,
        }
    }

    #[test]
    fn network_deny_blocks_every_socket_unconditionally() {
        let rules = eperm_rules(plan(NetworkMode::Deny)).unwrap();
        for nr in [
            libc::SYS_socket,
            libc::SYS_connect,
            libc::SYS_bind,
            libc::SYS_listen,
            libc::SYS_accept,
            libc::SYS_accept4,
        ] {
            assert_eq!(rules.get(&nr).map(Vec::len), Some(0), "syscall {nr}");
        }
        // socketpair is conditional: only AF_UNIX stream survives.
        assert_eq!(rules.get(&libc::SYS_socketpair).map(Vec::len), Some(7));
    }

    #[test]
    fn network_allow_still_denies_non_ip_families() {
        let rules = eperm_rules(plan(NetworkMode::Allow)).unwrap();
        assert_eq!(rules.get(&libc::SYS_socket).map(Vec::len), Some(1));
        assert!(!rules.contains_key(&libc::SYS_connect));
    }

    #[test]
    fn escalation_and_process_syscalls_are_unconditional_denies() {
        let rules = eperm_rules(plan(NetworkMode::Deny)).unwrap();
        for nr in [
            libc::SYS_fork,
            libc::SYS_vfork,
            libc::SYS_ptrace,
            libc::SYS_mount,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_bpf,
            libc::SYS_keyctl,
            libc::SYS_perf_event_open,
            libc::SYS_setsid,
            libc::SYS_execveat,
            libc::SYS_chmod,
            libc::SYS_fchmodat,
            SYS_FCHMODAT2,
        ] {
            assert_eq!(rules.get(&nr).map(Vec::len), Some(0), "syscall {nr}");
        }
        assert!(
            !rules.contains_key(&libc::SYS_fchmod),
            "fd-based chmod stays"
        );
        // No new processes, and no namespaces for new threads.
        assert_eq!(rules.get(&libc::SYS_clone).map(Vec::len), Some(8));
        assert_eq!(rules.get(&libc::SYS_kill).map(Vec::len), Some(1));
        assert!(
            !rules.contains_key(&libc::SYS_execve),
            "the helper needs execve"
        );
    }

    #[test]
    fn limits_and_scheduling_only_for_the_worker_itself() {
        let rules = eperm_rules(plan(NetworkMode::Deny)).unwrap();
        for nr in [
            libc::SYS_prlimit64,
            libc::SYS_sched_setscheduler,
            libc::SYS_sched_setparam,
            libc::SYS_sched_setaffinity,
            libc::SYS_sched_setattr,
        ] {
            // One rule: the pid is neither 0 nor the worker's own.
            assert_eq!(rules.get(&nr).map(Vec::len), Some(1), "syscall {nr}");
        }
        for nr in [libc::SYS_setpriority, libc::SYS_ioprio_set] {
            // Two rules: a group or user target, or a process other than itself.
            assert_eq!(rules.get(&nr).map(Vec::len), Some(2), "syscall {nr}");
        }
        assert!(
            !rules.contains_key(&libc::SYS_setrlimit),
            "setrlimit only ever acts on the caller"
        );
    }

    #[test]
    fn watches_are_denied_and_memfds_must_be_sealed_against_exec() {
        let rules = eperm_rules(plan(NetworkMode::Deny)).unwrap();
        for nr in [
            libc::SYS_inotify_init,
            libc::SYS_inotify_init1,
            libc::SYS_inotify_add_watch,
            libc::SYS_fanotify_init,
            libc::SYS_fanotify_mark,
        ] {
            assert_eq!(rules.get(&nr).map(Vec::len), Some(0), "syscall {nr}");
        }
        assert_eq!(rules.get(&libc::SYS_memfd_create).map(Vec::len), Some(2));
    }

    #[test]
    fn io_uring_and_clone3_answer_enosys() {
        let nosys = enosys_syscalls();
        for nr in [
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
            libc::SYS_clone3,
        ] {
            assert!(nosys.contains(&nr), "syscall {nr}");
        }
    }

    #[test]
    fn arch_guard_kills_foreign_arch_and_refuses_x32() {
        let prog = arch_guard_program();
        assert_eq!(prog[1].k, AUDIT_ARCH_X86_64);
        assert_eq!(prog[2].k, SECCOMP_RET_KILL_PROCESS);
        assert_eq!(prog[4].k, MAX_REVIEWED_SYSCALL);
        const { assert!(0x4000_0000 > MAX_REVIEWED_SYSCALL) };
        assert_eq!(prog[5].k, SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    }

    #[test]
    fn all_three_filters_compile() {
        assert_eq!(build_programs(plan(NetworkMode::Deny)).unwrap().len(), 3);
        assert_eq!(build_programs(plan(NetworkMode::Allow)).unwrap().len(), 3);
    }
}
