//! The policy by name, then the compiled programs of both architectures run against the
//! same system calls (with the classic-BPF interpreter in `bpf`): the answers must be
//! the same on x86_64 and aarch64, whichever machine runs this.

use super::arch::{
    AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS, X32_SYSCALL_BIT,
};
use super::bpf::{SeccompData, run_stack};
use super::*;

const BOTH: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];
const ME: i32 = 4242;

fn plan(network: NetworkMode) -> SeccompPlan {
    SeccompPlan {
        network,
        self_pid: ME,
        wx_seal: false,
    }
}

fn count(policy: &BTreeMap<Sys, Vec<SeccompRule>>, sys: Sys) -> Option<usize> {
    policy.get(&sys).map(Vec::len)
}

#[test]
fn network_deny_blocks_every_socket_unconditionally() {
    let policy = deny_policy(plan(NetworkMode::Deny)).unwrap();
    for sys in [
        Sys::Socket,
        Sys::Connect,
        Sys::Bind,
        Sys::Listen,
        Sys::Accept,
        Sys::Accept4,
    ] {
        assert_eq!(count(&policy, sys), Some(0), "{}", sys.name());
    }
    // socketpair is conditional: only AF_UNIX stream survives.
    assert_eq!(count(&policy, Sys::Socketpair), Some(7));
}

#[test]
fn network_allow_still_denies_non_ip_families() {
    let policy = deny_policy(plan(NetworkMode::Allow)).unwrap();
    assert_eq!(count(&policy, Sys::Socket), Some(1));
    assert!(!policy.contains_key(&Sys::Connect));
}

#[test]
fn escalation_and_process_syscalls_are_unconditional_denies() {
    let policy = deny_policy(plan(NetworkMode::Deny)).unwrap();
    for sys in [
        Sys::Fork,
        Sys::Vfork,
        Sys::Ptrace,
        Sys::Mount,
        Sys::Unshare,
        Sys::Setns,
        Sys::Bpf,
        Sys::Keyctl,
        Sys::PerfEventOpen,
        Sys::Setsid,
        Sys::Execveat,
        Sys::Chmod,
        Sys::Fchmodat,
        Sys::Fchmodat2,
    ] {
        assert_eq!(count(&policy, sys), Some(0), "{}", sys.name());
    }
    assert!(!policy.contains_key(&Sys::Fchown) || count(&policy, Sys::Fchown) == Some(0));
    // No new processes, and no namespaces for new threads.
    assert_eq!(count(&policy, Sys::Clone), Some(8));
    assert_eq!(count(&policy, Sys::Kill), Some(1));
    assert!(
        !policy.contains_key(&Sys::Execve),
        "the helper needs execve"
    );
}

#[test]
fn limits_and_scheduling_only_for_the_worker_itself() {
    let policy = deny_policy(plan(NetworkMode::Deny)).unwrap();
    for sys in [
        Sys::Prlimit64,
        Sys::SchedSetscheduler,
        Sys::SchedSetparam,
        Sys::SchedSetaffinity,
        Sys::SchedSetattr,
    ] {
        // One rule: the pid is neither 0 nor the worker's own.
        assert_eq!(count(&policy, sys), Some(1), "{}", sys.name());
    }
    for sys in [Sys::Setpriority, Sys::IoprioSet] {
        // Two rules: a group or user target, or a process other than itself.
        assert_eq!(count(&policy, sys), Some(2), "{}", sys.name());
    }
}

#[test]
fn watches_are_denied_and_memfds_must_be_sealed_against_exec() {
    let policy = deny_policy(plan(NetworkMode::Deny)).unwrap();
    for sys in [
        Sys::InotifyInit,
        Sys::InotifyInit1,
        Sys::InotifyAddWatch,
        Sys::FanotifyInit,
        Sys::FanotifyMark,
    ] {
        assert_eq!(count(&policy, sys), Some(0), "{}", sys.name());
    }
    assert_eq!(count(&policy, Sys::MemfdCreate), Some(2));
}

#[test]
fn the_wx_seal_refuses_writable_executable_maps_and_exec_gains_only_when_asked() {
    const ALLOW: u32 = 0x7FFF_0000;
    const DENIED: u32 = 0x0005_0000 | EPERM;
    let (r, w, x) = (0x1u64, PROT_WRITE, PROT_EXEC);
    for arch in BOTH {
        let sealed = SeccompPlan {
            wx_seal: true,
            ..plan(NetworkMode::Deny)
        };
        let programs = build_programs(sealed, arch).unwrap();
        let ask = |sys: Sys, prot: u64| {
            let mut args = [0u64; 6];
            args[2] = prot;
            let data = SeccompData {
                nr: sys.number(arch).unwrap() as i32,
                arch: arch.audit_arch(),
                args,
            };
            run_stack(&programs, &data).unwrap()
        };
        assert_eq!(ask(Sys::Mmap, r | w | x), DENIED, "{arch:?}");
        assert_eq!(ask(Sys::Mmap, w | x), DENIED);
        assert_eq!(
            ask(Sys::Mmap, r | x),
            ALLOW,
            "the loader maps code like this"
        );
        assert_eq!(ask(Sys::Mmap, r | w), ALLOW);
        for gain in [Sys::Mprotect, Sys::PkeyMprotect] {
            assert_eq!(ask(gain, r | x), DENIED, "{}", gain.name());
            assert_eq!(ask(gain, r), ALLOW, "RELRO makes pages read-only");
            assert_eq!(ask(gain, r | w), ALLOW);
        }
        // Without the seal (PR_SET_MDWE stands), the filter leaves memory alone.
        for (sys, prot) in [(Sys::Mmap, r | w | x), (Sys::Mprotect, r | x)] {
            let nr = sys.number(arch).unwrap();
            assert_eq!(answer(arch, NetworkMode::Deny, nr, &[0, 0, prot]), ALLOW);
        }
    }
}

#[test]
fn io_uring_and_clone3_answer_enosys() {
    let nosys = enosys_syscalls();
    for sys in [
        Sys::IoUringSetup,
        Sys::IoUringEnter,
        Sys::IoUringRegister,
        Sys::Clone3,
    ] {
        assert!(nosys.contains(&sys), "{}", sys.name());
    }
}

#[test]
fn a_call_missing_on_an_architecture_is_covered_by_its_generic_form() {
    let policy = deny_policy(plan(NetworkMode::Deny)).unwrap();
    for arch in BOTH {
        let numbered = eperm_rules(plan(NetworkMode::Deny), arch).unwrap();
        for (sys, rules) in &policy {
            match sys.number(arch) {
                Some(nr) => assert_eq!(numbered.get(&nr).map(Vec::len), Some(rules.len())),
                None => {
                    if let Some(generic) = sys.generic_form() {
                        assert!(policy.contains_key(&generic), "{}", sys.name());
                    } else {
                        assert_eq!(arch, Arch::Aarch64, "{} is x86-only", sys.name());
                    }
                }
            }
        }
    }
}

#[test]
fn all_three_filters_compile_for_both_architectures() {
    for arch in BOTH {
        for network in [NetworkMode::Deny, NetworkMode::Allow] {
            assert_eq!(build_programs(plan(network), arch).unwrap().len(), 3);
        }
    }
}

#[test]
fn guard_kills_foreign_abis_and_has_an_x32_branch_only_on_x86_64() {
    let x86 = arch::guard_program(Arch::X86_64);
    let arm = arch::guard_program(Arch::Aarch64);
    assert_eq!(x86[1].k, AUDIT_ARCH_X86_64);
    assert_eq!(arm[1].k, AUDIT_ARCH_AARCH64);
    for prog in [&x86, &arm] {
        assert_eq!(prog[2].k, SECCOMP_RET_KILL_PROCESS);
    }
    assert!(x86.iter().any(|i| i.k == X32_SYSCALL_BIT));
    assert!(!arm.iter().any(|i| i.k == X32_SYSCALL_BIT));
    for arch in BOTH {
        assert!(arch.max_reviewed_syscall() < X32_SYSCALL_BIT);
    }
}

// ---- The compiled programs, run. ----

const ENOSYS_ANSWER: u32 = SECCOMP_RET_ERRNO | arch::ENOSYS;
const EPERM_ANSWER: u32 = SECCOMP_RET_ERRNO | EPERM;
/// glibc's pthread_create flags.
const THREAD_FLAGS: u64 = 0x003d_0f00;
const SIGCHLD: u64 = 17;
const MFD_CLOEXEC: u64 = 1;
const AF_NETLINK: u64 = 16;
const SOCK_STREAM: u64 = 1;
const SOCK_CLOEXEC: u64 = 0o2000000;
/// Foreign ABIs each architecture's kernel also accepts: i386 and AArch32.
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_ARM: u32 = 0x4000_0028;

fn answer(arch: Arch, network: NetworkMode, nr: i64, args: &[u64]) -> u32 {
    let programs = build_programs(plan(network), arch).unwrap();
    let mut all = [0u64; 6];
    all[..args.len()].copy_from_slice(args);
    let data = SeccompData {
        nr: nr as i32,
        arch: arch.audit_arch(),
        args: all,
    };
    run_stack(&programs, &data).expect("the programs run")
}

/// What `sys(args)` gets on `arch`; a call the architecture lacks is made the way libc
/// makes it there (fork is clone(SIGCHLD), chmod is fchmodat(AT_FDCWD, …)).
fn call(arch: Arch, network: NetworkMode, sys: Sys, args: &[u64]) -> u32 {
    match sys.number(arch) {
        Some(nr) => answer(arch, network, nr, args),
        None => {
            let generic = sys.generic_form().expect("a generic form");
            let args: Vec<u64> = match sys {
                Sys::Fork | Sys::Vfork => vec![SIGCHLD],
                Sys::Chmod | Sys::Chown | Sys::Lchown => [&[(-100i64) as u64][..], args].concat(),
                _ => vec![0],
            };
            call(arch, network, generic, &args)
        }
    }
}

#[test]
fn both_architectures_answer_every_call_the_same() {
    use NetworkMode::{Allow, Deny};
    let me = ME as u64;
    let cases: &[(NetworkMode, Sys, &[u64], u32)] = &[
        (Deny, Sys::Socket, &[AF_INET, SOCK_STREAM], EPERM_ANSWER),
        (Deny, Sys::Socket, &[AF_UNIX, SOCK_STREAM], EPERM_ANSWER),
        (Deny, Sys::Connect, &[3, 0, 16], EPERM_ANSWER),
        (
            Allow,
            Sys::Socket,
            &[AF_INET, SOCK_STREAM],
            SECCOMP_RET_ALLOW,
        ),
        (
            Allow,
            Sys::Socket,
            &[AF_INET6, SOCK_STREAM],
            SECCOMP_RET_ALLOW,
        ),
        (Allow, Sys::Socket, &[AF_UNIX, SOCK_STREAM], EPERM_ANSWER),
        (Allow, Sys::Socket, &[AF_NETLINK, SOCK_RAW], EPERM_ANSWER),
        (
            Deny,
            Sys::Socketpair,
            &[AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC],
            SECCOMP_RET_ALLOW,
        ),
        (Deny, Sys::Socketpair, &[AF_UNIX, SOCK_DGRAM], EPERM_ANSWER),
        (
            Deny,
            Sys::Socketpair,
            &[AF_UNIX, SOCK_SEQPACKET],
            EPERM_ANSWER,
        ),
        (Deny, Sys::Socketpair, &[AF_INET, SOCK_STREAM], EPERM_ANSWER),
        (Deny, Sys::Clone, &[THREAD_FLAGS], SECCOMP_RET_ALLOW),
        (Deny, Sys::Clone, &[SIGCHLD], EPERM_ANSWER),
        (
            Deny,
            Sys::Clone,
            &[THREAD_FLAGS | CLONE_NEWUSER],
            EPERM_ANSWER,
        ),
        (Deny, Sys::Fork, &[], EPERM_ANSWER),
        (Deny, Sys::Vfork, &[], EPERM_ANSWER),
        (Deny, Sys::Clone3, &[0, 88], ENOSYS_ANSWER),
        (Deny, Sys::IoUringSetup, &[8, 0], ENOSYS_ANSWER),
        (Deny, Sys::Fsopen, &[0, 0], ENOSYS_ANSWER),
        (Deny, Sys::Execve, &[0, 0, 0], SECCOMP_RET_ALLOW),
        (Deny, Sys::Execveat, &[0, 0, 0, 0, 0], EPERM_ANSWER),
        (Deny, Sys::Getpid, &[], SECCOMP_RET_ALLOW),
        (Deny, Sys::Kill, &[me, 9], SECCOMP_RET_ALLOW),
        (Deny, Sys::Kill, &[0, 9], SECCOMP_RET_ALLOW),
        (Deny, Sys::Kill, &[1, 9], EPERM_ANSWER),
        (Deny, Sys::Kill, &[u64::MAX, 9], EPERM_ANSWER),
        (Deny, Sys::Tgkill, &[me, me, 9], SECCOMP_RET_ALLOW),
        (Deny, Sys::Tgkill, &[1, 1, 9], EPERM_ANSWER),
        (Deny, Sys::Tkill, &[me, 9], EPERM_ANSWER),
        (Deny, Sys::Prlimit64, &[0, 7, 0, 0], SECCOMP_RET_ALLOW),
        (Deny, Sys::Prlimit64, &[me, 7, 0, 0], SECCOMP_RET_ALLOW),
        (Deny, Sys::Prlimit64, &[1, 7, 0, 0], EPERM_ANSWER),
        (
            Deny,
            Sys::Setpriority,
            &[PRIO_PROCESS, 0, 10],
            SECCOMP_RET_ALLOW,
        ),
        (Deny, Sys::Setpriority, &[1, 0, 10], EPERM_ANSWER),
        (Deny, Sys::Setpriority, &[PRIO_PROCESS, 1, 10], EPERM_ANSWER),
        (
            Deny,
            Sys::MemfdCreate,
            &[0, MFD_CLOEXEC | MFD_NOEXEC_SEAL],
            SECCOMP_RET_ALLOW,
        ),
        (Deny, Sys::MemfdCreate, &[0, MFD_CLOEXEC], EPERM_ANSWER),
        (
            Deny,
            Sys::MemfdCreate,
            &[0, MFD_NOEXEC_SEAL | MFD_EXEC],
            EPERM_ANSWER,
        ),
        (Deny, Sys::Fcntl, &[3, F_SETOWN, 1], EPERM_ANSWER),
        (Deny, Sys::Fcntl, &[3, 3], SECCOMP_RET_ALLOW),
        (Deny, Sys::Ioctl, &[0, TIOCSTI, 0], EPERM_ANSWER),
        (Deny, Sys::Ioctl, &[0, 0x541B, 0], SECCOMP_RET_ALLOW),
        (Deny, Sys::Ptrace, &[16, 1], EPERM_ANSWER),
        (Deny, Sys::Mount, &[0, 0, 0, 0, 0], EPERM_ANSWER),
        (Deny, Sys::Unshare, &[CLONE_NEWUSER], EPERM_ANSWER),
        (Deny, Sys::Setns, &[3, 0], EPERM_ANSWER),
        (Deny, Sys::Bpf, &[0, 0, 0], EPERM_ANSWER),
        (Deny, Sys::Keyctl, &[0], EPERM_ANSWER),
        (Deny, Sys::PerfEventOpen, &[0], EPERM_ANSWER),
        (Deny, Sys::InotifyInit, &[], EPERM_ANSWER),
        (Deny, Sys::Chmod, &[0, 0o777], EPERM_ANSWER),
        (Deny, Sys::Chown, &[0, 0, 0], EPERM_ANSWER),
        (Deny, Sys::Fchmodat, &[0, 0, 0o777], EPERM_ANSWER),
        (Deny, Sys::FileSetattr, &[0], EPERM_ANSWER),
        (Deny, Sys::Shmget, &[0, 4096, 0], EPERM_ANSWER),
    ];
    for arch in BOTH {
        for (network, sys, args, expected) in cases {
            let got = call(arch, *network, *sys, args);
            assert_eq!(
                got,
                *expected,
                "{arch:?} {network:?} {}({args:?}): {got:#x}",
                sys.name()
            );
        }
    }
}

#[test]
fn foreign_abis_die_and_unreviewed_numbers_answer_enosys() {
    for (arch, foreign) in [
        (Arch::X86_64, AUDIT_ARCH_I386),
        (Arch::Aarch64, AUDIT_ARCH_ARM),
    ] {
        let programs = build_programs(plan(NetworkMode::Deny), arch).unwrap();
        let getpid = Sys::Getpid.number(arch).unwrap();
        let at = |nr: i64, audit_arch: u32| {
            let data = SeccompData {
                nr: nr as i32,
                arch: audit_arch,
                args: [0; 6],
            };
            run_stack(&programs, &data).unwrap()
        };
        // The same number from a compat task is killed, whatever it is.
        assert_eq!(at(getpid, foreign), SECCOMP_RET_KILL_PROCESS, "{arch:?}");
        // One past the reviewed maximum, and an x32 number.
        let max = i64::from(arch.max_reviewed_syscall());
        assert_eq!(at(max + 1, arch.audit_arch()), ENOSYS_ANSWER, "{arch:?}");
        assert_eq!(
            at(i64::from(X32_SYSCALL_BIT) | getpid, arch.audit_arch()),
            ENOSYS_ANSWER,
            "{arch:?}"
        );
        // The reviewed maximum itself is judged by the policy (file_setattr: denied).
        assert_eq!(at(max, arch.audit_arch()), EPERM_ANSWER, "{arch:?}");
    }
}

/// The other architecture's program must not work here: a filter built for aarch64
/// kills an x86_64 call outright, so a build that picked the wrong table fails closed.
#[test]
fn a_filter_for_the_other_architecture_kills_every_call() {
    let programs = build_programs(plan(NetworkMode::Deny), Arch::Aarch64).unwrap();
    let data = SeccompData {
        nr: Sys::Getpid.number(Arch::X86_64).unwrap() as i32,
        arch: AUDIT_ARCH_X86_64,
        args: [0; 6],
    };
    assert_eq!(run_stack(&programs, &data), Some(SECCOMP_RET_KILL_PROCESS));
}

#[test]
fn this_machine_has_a_filter_when_it_is_x86_64_or_aarch64() {
    assert_eq!(
        Arch::native().is_some(),
        cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
    );
}

#[test]
fn the_journal_stops_what_changes_files_and_lets_reads_through() {
    use super::journal::{O_CREAT, O_RDWR, O_TRUNC, O_WRONLY, SECCOMP_RET_USER_NOTIF};
    const O_RDONLY_CLOEXEC: u64 = 0o2_000_000;
    for arch in BOTH {
        let program = journal::journal_program(arch).unwrap();
        let answer = |sys: Sys, args: [u64; 6]| {
            let data = SeccompData {
                nr: sys.number(arch).unwrap() as i32,
                arch: arch.audit_arch(),
                args,
            };
            super::bpf::run(&program, &data).unwrap()
        };
        for flags in [O_WRONLY, O_RDWR, O_CREAT, O_TRUNC | O_RDONLY_CLOEXEC] {
            assert_eq!(
                answer(Sys::Openat, [0, 0, flags, 0, 0, 0]),
                SECCOMP_RET_USER_NOTIF,
                "{arch:?} openat {flags:o}"
            );
        }
        assert_eq!(
            answer(Sys::Openat, [0, 0, O_RDONLY_CLOEXEC, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        for sys in [
            Sys::Unlinkat,
            Sys::Renameat2,
            Sys::Mkdirat,
            Sys::Linkat,
            Sys::Symlinkat,
            Sys::Fchmod,
            Sys::Truncate,
            Sys::Openat2,
        ] {
            assert_eq!(
                answer(sys, [0; 6]),
                SECCOMP_RET_USER_NOTIF,
                "{arch:?} {sys:?}"
            );
        }
        for sys in [Sys::Socket, Sys::Clone, Sys::Fchown] {
            assert_eq!(answer(sys, [0; 6]), SECCOMP_RET_ALLOW, "{arch:?} {sys:?}");
        }
    }
}
