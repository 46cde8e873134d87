//! What the server and every platform's sandbox helper (`warden __sandbox-exec`) agree
//! on: the worker's private protocol descriptors, the framing of the policy sent on the
//! first one, and the exit status of a helper that refused to start a worker.

/// The worker's request pipe (server → worker); the policy arrives on it first.
pub const REQUEST_FD: i32 = 3;
/// The worker's response pipe (worker → server); the helper's report goes there first.
pub const RESPONSE_FD: i32 = 4;
/// The largest policy a helper accepts.
pub const MAX_POLICY_BYTES: usize = 1 << 20;
/// Exit status of a helper that refused to start the worker.
pub const REFUSED_EXIT: i32 = 71;

use std::os::fd::BorrowedFd;

use crate::worker::policy::WorkerPolicy;

/// The hidden subcommand that runs the sandbox helper, on the host or in a container.
pub const HELPER_SUBCOMMAND: &str = "__sandbox-exec";
use crate::worker::report::HelperMessage;

/// Why a helper will not start the worker: the wall that could not stand, and why.
#[derive(Debug)]
pub struct Refusal {
    pub wall: &'static str,
    pub message: String,
}

pub fn refuse(wall: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        wall,
        message: message.into(),
    }
}

fn fd(raw: i32) -> BorrowedFd<'static> {
    // SAFETY: the protocol descriptors stay open for the helper's whole life (the server
    // put them there before exec; only execve hands them on).
    unsafe { BorrowedFd::borrow_raw(raw) }
}

/// One line on the response pipe (best effort: a server that is gone reads nothing).
pub fn send(message: &HelperMessage) {
    let Ok(mut line) = serde_json::to_vec(message) else {
        return;
    };
    line.push(b'\n');
    let mut rest = line.as_slice();
    while !rest.is_empty() {
        match rustix::io::write(fd(RESPONSE_FD), rest) {
            Ok(0) => return,
            Ok(n) => rest = &rest[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

/// Reports the refusal and exits with [`REFUSED_EXIT`], running no atexit handler (a
/// half-confined helper must run nothing more).
pub fn exit_refused(refusal: Refusal) -> ! {
    send(&HelperMessage::SandboxError {
        wall: refusal.wall.to_string(),
        message: refusal.message,
    });
    // SAFETY: _exit ends the process at once; nothing is left to clean up.
    unsafe { libc::_exit(REFUSED_EXIT) }
}

fn read_exact(buf: &mut [u8]) -> Result<(), String> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::io::read(fd(REQUEST_FD), &mut buf[filled..]) {
            Ok(0) => {
                return Err(format!(
                    "the policy pipe closed after {filled} of {} bytes",
                    buf.len()
                ));
            }
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("reading the policy: {e}")),
        }
    }
    Ok(())
}

/// The policy, length-prefixed (8 bytes, little endian) so that the helper reads exactly
/// its own bytes and leaves the rest of the pipe to the interpreter.
pub fn read_policy() -> Result<WorkerPolicy, Refusal> {
    let mut len = [0u8; 8];
    read_exact(&mut len).map_err(|e| refuse("policy", e))?;
    let len = u64::from_le_bytes(len);
    let len = usize::try_from(len)
        .ok()
        .filter(|n| *n <= MAX_POLICY_BYTES)
        .ok_or_else(|| refuse("policy", format!("policy of {len} bytes is too large")))?;
    let mut buf = vec![0u8; len];
    read_exact(&mut buf).map_err(|e| refuse("policy", e))?;
    serde_json::from_slice(&buf).map_err(|e| refuse("policy", format!("malformed policy: {e}")))
}
