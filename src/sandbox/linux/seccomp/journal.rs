//! The journal's filter: the system calls that change names, contents, modes or times in
//! a file system stop and wait while the server notes what they are about to change (seccomp
//! user notification, [`crate::sandbox::linux::supervisor`]), then go on unchanged. Every
//! other call, and an `open` that only reads, never waits.
//!
//! The filter decides nothing: a call the other filters deny is denied before it would
//! wait (the kernel takes the strictest answer), and a call that waits is continued as it
//! was asked. It exists so that a transactional call's rollback costs what the call
//! changed, not the size of the workspace.
//!
//! seccompiler has no user-notification action, so the program is compiled with a
//! marked trace action and the marked returns are rewritten ([`journal_program`]).

use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd};

use seccompiler::{BpfProgram, SeccompAction, SeccompCmpOp, SeccompFilter, SeccompRule};

use super::arch::Arch;
use super::syscalls::Sys;
use super::{SeccompError, cond, numbered, rule};

/// `open` flags that may change a file (asm-generic/fcntl.h, the same on x86_64 and
/// aarch64): write access, creation, truncation.
pub const O_WRONLY: u64 = 0o1;
pub const O_RDWR: u64 = 0o2;
pub const O_CREAT: u64 = 0o100;
pub const O_TRUNC: u64 = 0o1000;
/// What the kernel returns for a call that waits for the listener.
pub const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SECCOMP_RET_TRACE: u32 = 0x7ff0_0000;
/// The trace data that marks a return to rewrite (no tracer ever sees it).
const MARK: u32 = 0x5741;

/// The calls that wait, with their conditions (an empty list: always). `open`-like calls
/// wait only when their flags (argument `flags_arg`) may change a file; `openat2` keeps
/// its flags in memory, so it always waits.
pub fn journal_policy() -> Result<BTreeMap<Sys, Vec<SeccompRule>>, SeccompError> {
    let mut rules = BTreeMap::new();
    for (sys, flags_arg) in [(Sys::Open, 1u8), (Sys::Openat, 2)] {
        let mut any = Vec::new();
        for bit in [O_WRONLY, O_RDWR, O_CREAT, O_TRUNC] {
            any.push(rule(vec![cond(
                flags_arg,
                SeccompCmpOp::MaskedEq(bit),
                bit,
            )?])?);
        }
        rules.insert(sys, any);
    }
    for sys in [
        Sys::Creat,
        Sys::Openat2,
        Sys::Truncate,
        Sys::Fchmod,
        Sys::Unlink,
        Sys::Unlinkat,
        Sys::Rmdir,
        Sys::Rename,
        Sys::Renameat,
        Sys::Renameat2,
        Sys::Mkdir,
        Sys::Mkdirat,
        Sys::Mknod,
        Sys::Mknodat,
        Sys::Symlink,
        Sys::Symlinkat,
        Sys::Link,
        Sys::Linkat,
        Sys::Utimensat,
    ] {
        rules.insert(sys, Vec::new());
    }
    Ok(rules)
}

/// The journal's program for `arch`: the calls of [`journal_policy`] wait for the
/// listener, everything else is allowed (by this filter).
///
/// # Errors
/// The policy does not compile.
pub fn journal_program(arch: Arch) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(
        numbered(journal_policy()?, arch),
        SeccompAction::Allow,
        SeccompAction::Trace(MARK),
        arch.target(),
    )?;
    let mut program: BpfProgram = filter.try_into()?;
    let marked = SECCOMP_RET_TRACE | MARK;
    for ins in &mut program {
        // BPF_RET | BPF_K
        if ins.code == 0x06 && ins.k == marked {
            ins.k = SECCOMP_RET_USER_NOTIF;
        }
    }
    Ok(program)
}

/// Installs the journal's filter on the calling thread and returns its listener (close
/// on exec). no_new_privs must already be set (the other filters set it).
///
/// # Errors
/// No filter is written for this architecture, or the kernel refused it (before Linux
/// 5.0 there is no user notification; a filter stack may have one listener only).
pub fn install_journal_filter() -> Result<OwnedFd, SeccompError> {
    let arch = Arch::native().ok_or(SeccompError::UnsupportedArch(std::env::consts::ARCH))?;
    let program = journal_program(arch)?;
    let prog = libc::sock_fprog {
        len: u16::try_from(program.len()).unwrap_or(u16::MAX),
        // seccompiler's sock_filter is the kernel's struct, field for field.
        filter: program.as_ptr().cast_mut().cast::<libc::sock_filter>(),
    };
    // SAFETY: `prog` points at `program`, alive for the call; the kernel copies it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(SeccompError::Install(seccompiler::Error::Seccomp(
            std::io::Error::last_os_error(),
        )));
    }
    // SAFETY: the kernel just returned this descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
