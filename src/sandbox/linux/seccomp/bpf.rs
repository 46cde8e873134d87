//! A classic-BPF interpreter for the instructions seccomp filters use, so that the
//! compiled programs of every architecture can be run against made-up system calls on
//! whichever machine runs the tests. Test-only: the kernel runs the real thing.

use seccompiler::{BpfProgram, sock_filter};

/// One system call as a filter sees it (`struct seccomp_data`).
#[derive(Debug, Clone, Copy)]
pub struct SeccompData {
    pub nr: i32,
    pub arch: u32,
    pub args: [u64; 6],
}

impl SeccompData {
    fn word_at(&self, offset: u32) -> Option<u32> {
        match offset {
            0 => Some(self.nr as u32),
            4 => Some(self.arch),
            8 | 12 => Some(0), // instruction pointer: no filter here reads it
            16..=63 if offset.is_multiple_of(4) => {
                let arg = self.args[((offset - 16) / 8) as usize];
                // Little endian: the low half first.
                Some(if (offset - 16).is_multiple_of(8) {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                })
            }
            _ => None,
        }
    }
}

/// Runs one program; `None` when it does something the kernel would have rejected at
/// load time (a bad opcode, offset or jump).
pub fn run(prog: &[sock_filter], data: &SeccompData) -> Option<u32> {
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    loop {
        let ins = prog.get(pc)?;
        pc += 1;
        let jump = |cond: bool| usize::from(if cond { ins.jt } else { ins.jf });
        match ins.code {
            0x20 => acc = data.word_at(ins.k)?,   // ld [k]
            0x54 => acc &= ins.k,                 // and #k
            0x05 => pc += ins.k as usize,         // ja +k
            0x15 => pc += jump(acc == ins.k),     // jeq
            0x25 => pc += jump(acc > ins.k),      // jgt
            0x35 => pc += jump(acc >= ins.k),     // jge
            0x45 => pc += jump(acc & ins.k != 0), // jset
            0x06 => return Some(ins.k),           // ret #k
            _ => return None,
        }
    }
}

/// What the kernel answers for a stack of filters: every program runs and the answer
/// with the highest precedence wins (the lowest action value; among equal actions, the
/// filter installed last).
pub fn run_stack(programs: &[BpfProgram], data: &SeccompData) -> Option<u32> {
    let mut answer: Option<u32> = None;
    for prog in programs.iter().rev() {
        let ret = run(prog, data)?;
        let action = |r: u32| (r & 0xFFFF_0000) as i32;
        if answer.is_none_or(|a| action(ret) < action(a)) {
            answer = Some(ret);
        }
    }
    answer
}
