//! The architectures the seccomp filters are written for, and filter A: the guard that
//! runs before every other filter and refuses what the policy was not written for. A
//! foreign ABI is killed outright (i386 `int 0x80` from an x86_64 process; AArch32
//! compat tasks on aarch64), an x32 call (x86_64 only) and any number above the last
//! one reviewed for the architecture answer ENOSYS, so a syscall added by a newer kernel
//! is refused until someone has read what it does.

use seccompiler::{BpfProgram, TargetArch, sock_filter};

/// An architecture with a reviewed filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
}

/// `AUDIT_ARCH_X86_64` (EM_X86_64 | 64-bit | little endian).
pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// `AUDIT_ARCH_AARCH64` (EM_AARCH64 | 64-bit | little endian).
pub const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
/// `__X32_SYSCALL_BIT`: x32 calls carry the x86_64 audit arch with this bit set.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

pub const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
pub const SECCOMP_RET_ALLOW: u32 = 0x7FFF_0000;
/// ENOSYS, the same number on every Linux architecture.
pub const ENOSYS: u32 = 38;

impl Arch {
    /// The architecture this build runs on, when the filters are written for it.
    pub const fn native() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    pub const fn audit_arch(self) -> u32 {
        match self {
            Arch::X86_64 => AUDIT_ARCH_X86_64,
            Arch::Aarch64 => AUDIT_ARCH_AARCH64,
        }
    }

    pub fn target(self) -> TargetArch {
        match self {
            Arch::X86_64 => TargetArch::x86_64,
            Arch::Aarch64 => TargetArch::aarch64,
        }
    }

    /// The highest syscall number reviewed for this architecture; everything above it
    /// answers ENOSYS. Both are `file_setattr` (Linux 6.17): since Linux 5.1 every
    /// architecture numbers new calls alike. Bump each one deliberately, after reading
    /// what the new calls do and adding them to [`super::syscalls`] where they matter.
    pub const fn max_reviewed_syscall(self) -> u32 {
        match self {
            Arch::X86_64 => 469,
            Arch::Aarch64 => 469,
        }
    }
}

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGT_K: u16 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Filter A for `arch`. Hand-written because seccompiler has no x32 check
/// (rust-vmm/seccompiler#74) and no notion of a reviewed maximum.
pub fn guard_program(arch: Arch) -> BpfProgram {
    let enosys = SECCOMP_RET_ERRNO | ENOSYS;
    let mut prog = vec![
        ins(LD_W_ABS, 0, 0, ARCH),
        ins(JEQ_K, 1, 0, arch.audit_arch()), // native: skip the kill
        ins(RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        ins(LD_W_ABS, 0, 0, NR),
    ];
    if arch == Arch::X86_64 {
        // x32 shares the x86_64 audit arch; its numbers carry bit 30.
        prog.push(ins(JSET_K, 2, 0, X32_SYSCALL_BIT));
    }
    prog.extend([
        ins(JGT_K, 1, 0, arch.max_reviewed_syscall()),
        ins(RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ins(RET_K, 0, 0, enosys),
    ]);
    prog
}
