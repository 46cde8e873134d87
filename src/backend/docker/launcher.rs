//! The in-container launcher: the warden binary, bind-mounted read-only into every
//! container, run as `warden __container-worker` under the container's init. It is what
//! lets one container carry the same four-stream worker protocol as a host worker:
//!
//! - its stdin (the container's, attached by the server) carries [`frames`]: the request
//!   stream (the worker policy, then the request lines), copied to the worker's request
//!   pipe (fd 3), and the server's orders to freeze and thaw the worker between calls
//!   (SIGSTOP/SIGCONT to its process group, which the worker cannot leave);
//! - the worker's response pipe (fd 4), fd 1 and fd 2 are pipes to the launcher, which
//!   multiplexes them as frames on its own stdout.
//!
//! The worker itself is started through the same sandbox helper as on the host
//! (`warden __sandbox-exec`: Landlock, seccomp, rlimits inside the container's walls),
//! so the code never holds the launcher's stdout and cannot forge a frame. When the
//! server goes away (stdin closes), the launcher kills the worker's process group and
//! exits, which stops the container.
//!
//! `warden __container-query` answers where the image's Python lives (the same query
//! the host backend runs on the host's interpreter) and what `/workspace` is.
//!
//! Linux only: it runs inside a Linux container, whatever the server's platform (a
//! server that cannot bind its own binary uses the one the image carries, see
//! [`super::route`]).
//!
//! [`frames`]: super::frames

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use super::frames::{self, Decoder, Frame, Stream};
use super::query::{Answer, WorkspaceSeen};
use crate::worker::helper::HELPER_SUBCOMMAND;
use crate::worker::helper::{REQUEST_FD, RESPONSE_FD};
use crate::worker::policy::WorkerPolicy;

pub use super::route::{LAUNCHER_SUBCOMMAND, QUERY_SUBCOMMAND};

/// Exit status when the launcher could not start the worker.
const LAUNCH_FAILED: i32 = 72;

/// Entry point of `warden __container-query`: the image's `python3`, resolved inside
/// the container, and what `/workspace` is, as one JSON line on stdout.
pub fn run_query_main() -> ! {
    let runtime = match crate::worker::python::resolve(None, false) {
        Ok(runtime) => runtime,
        Err(e) => fail(&format!("no usable python3 in this image: {e}")),
    };
    let answer = Answer {
        runtime,
        workspace: look_at_workspace(),
        kernel: crate::sandbox::rlimits::kernel_release(),
    };
    match serde_json::to_string(&answer) {
        Ok(line) => {
            println!("{line}");
            std::process::exit(0)
        }
        Err(e) => fail(&format!("cannot encode the answer: {e}")),
    }
}

/// What `/workspace` is inside the container: the file system, its size, and the marker
/// the server left in the directory it bound there.
fn look_at_workspace() -> WorkspaceSeen {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    let dir = std::path::Path::new(super::config::WORKSPACE);
    // The statfs fields' widths differ between targets (u32 on some 32-bit ones).
    #[allow(clippy::unnecessary_cast)]
    let (tmpfs, bytes) = rustix::fs::statfs(dir)
        .map(|s| {
            let f_type = s.f_type as u64;
            (
                f_type == TMPFS_MAGIC,
                (s.f_blocks as u64).saturating_mul(s.f_bsize as u64),
            )
        })
        .unwrap_or((false, 0));
    let marker = std::fs::read_to_string(dir.join(super::query::MARKER))
        .ok()
        .map(|m| m.chars().take(64).collect());
    WorkspaceSeen {
        tmpfs,
        bytes,
        marker,
    }
}

fn fail(message: &str) -> ! {
    eprintln!("warden launcher: {message}");
    std::process::exit(LAUNCH_FAILED)
}

/// Entry point of `warden __container-worker`. Never returns.
pub fn run_launcher_main() -> ! {
    // The code runs as the same uid: nothing of the launcher may be read or traced.
    // SAFETY: plain prctl on this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let mut input = Input {
        stdin: std::io::stdin(),
        decoder: Decoder::default(),
        ready: std::collections::VecDeque::new(),
    };
    let (policy, rest) = match read_policy(&mut input) {
        Ok(p) => p,
        Err(e) => fail(&e),
    };
    match launch(&policy, &rest, input) {
        Ok(()) => std::process::exit(0),
        Err(e) => fail(&e),
    }
}

/// The server's frames on stdin.
struct Input {
    stdin: std::io::Stdin,
    decoder: Decoder,
    ready: std::collections::VecDeque<Frame>,
}

impl Input {
    /// The next frame; `None` at end of input, or when the input is not the server's
    /// framing (then the worker must go too).
    fn next(&mut self) -> Option<Frame> {
        let mut buf = vec![0u8; frames::MAX_FRAME];
        while self.ready.is_empty() {
            let n = match self.stdin.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => return None,
                Ok(n) => n,
            };
            let frames = self.decoder.feed(&buf[..n]).ok()?;
            if frames.iter().any(|f| f.stream.from_launcher()) {
                return None;
            }
            self.ready.extend(frames);
        }
        self.ready.pop_front()
    }
}

/// The framed policy at the head of the request stream, re-framed for the helper (whose
/// parent is now this launcher), and the request bytes that followed it.
fn read_policy(input: &mut Input) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut head = Vec::new();
    let len = loop {
        if head.len() >= 8 {
            let mut len = [0u8; 8];
            len.copy_from_slice(&head[..8]);
            let len = usize::try_from(u64::from_le_bytes(len))
                .ok()
                .filter(|n| *n <= 1 << 20)
                .ok_or("the policy is too large")?;
            if head.len() >= 8 + len {
                break len;
            }
        }
        match input.next() {
            Some(Frame {
                stream: Stream::Requests,
                payload,
            }) => head.extend_from_slice(&payload),
            // No worker yet: nothing to freeze or thaw.
            Some(_) => {}
            None => return Err("no policy on stdin".into()),
        }
    };
    let rest = head.split_off(8 + len);
    let mut policy: WorkerPolicy =
        serde_json::from_slice(&head[8..]).map_err(|e| format!("malformed policy: {e}"))?;
    policy.parent_pid = std::process::id() as i32;
    let json = serde_json::to_vec(&policy).map_err(|e| format!("policy: {e}"))?;
    let mut framed = (json.len() as u64).to_le_bytes().to_vec();
    framed.extend_from_slice(&json);
    Ok((framed, rest))
}

fn launch(framed_policy: &[u8], rest: &[u8], mut input: Input) -> Result<(), String> {
    let (req_r, mut req_w) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (resp_r, resp_w) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (out_r, out_w) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (err_r, err_w) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let (req_fd, resp_fd) = (req_r.as_raw_fd(), resp_w.as_raw_fd());
    let mut cmd = Command::new(exe);
    cmd.arg(HELPER_SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::from(OwnedFd::from(out_w)))
        .stderr(Stdio::from(OwnedFd::from(err_w)));
    // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec; the pipes
    // are moved above 10 first so dup2 onto 3 and 4 never clobbers one with the other.
    unsafe {
        cmd.pre_exec(move || {
            let req = libc::fcntl(req_fd, libc::F_DUPFD, 10);
            let resp = libc::fcntl(resp_fd, libc::F_DUPFD, 10);
            if req < 0
                || resp < 0
                || libc::dup2(req, REQUEST_FD) < 0
                || libc::dup2(resp, RESPONSE_FD) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the helper: {e}"))?;
    drop((req_r, resp_w, cmd));
    let pid = child.id() as i32;
    req_w
        .write_all(framed_policy)
        .and_then(|()| req_w.write_all(rest))
        .map_err(|e| format!("cannot hand the helper its policy: {e}"))?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let fingerprint = std::env::var_os(super::config::FINGERPRINT_ENV).is_some();
    let relays = [
        relay(resp_r, Stream::Responses, out.clone(), fingerprint),
        relay(out_r, Stream::Stdout, out.clone(), false),
        relay(err_r, Stream::Stderr, out, false),
    ];
    // The server's frames: requests to the worker's fd 3, orders to its process group
    // (the helper made the worker a group leader). When the server is gone, or sends
    // something that is not its framing, so is the worker.
    std::thread::spawn(move || {
        while let Some(frame) = input.next() {
            let delivered = match frame.stream {
                Stream::Requests => req_w.write_all(&frame.payload).is_ok(),
                Stream::Freeze => signal_group(pid, libc::SIGSTOP),
                Stream::Thaw => signal_group(pid, libc::SIGCONT),
                _ => false,
            };
            if !delivered {
                break;
            }
        }
        signal_group(pid, libc::SIGKILL);
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let _ = child.wait();
    for r in relays {
        let _ = r.join();
    }
    Ok(())
}

/// Signals the worker's process group; false when it is gone.
fn signal_group(pid: i32, signal: i32) -> bool {
    // SAFETY: plain syscall; `pid` is our child, which leads its own process group.
    unsafe { libc::killpg(pid, signal) == 0 }
}

/// Copies one worker stream into frames on the shared stdout, then its end-of-file frame;
/// with `fingerprint`, each chunk follows a [`Stream::Workspace`] frame of the
/// workspace as it is then (the worker writes its response once the code is done).
fn relay(
    mut from: std::io::PipeReader,
    stream: Stream,
    out: Arc<Mutex<std::io::Stdout>>,
    fingerprint: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; frames::MAX_FRAME];
        loop {
            let n = match from.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            };
            let mut frame = Vec::new();
            if fingerprint && n > 0 {
                let seen =
                    super::copyback::fingerprint(std::path::Path::new(super::config::WORKSPACE));
                let payload = seen.map(u64::to_le_bytes);
                frame = frames::encode(
                    Stream::Workspace,
                    payload.as_ref().map_or(&[][..], |p| &p[..]),
                );
            }
            frame.extend(frames::encode(stream, &buf[..n]));
            let Ok(mut out) = out.lock() else { return };
            if out.write_all(&frame).and_then(|()| out.flush()).is_err() || n == 0 {
                return;
            }
        }
    })
}
