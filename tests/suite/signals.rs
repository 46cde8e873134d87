//! Signals end the server within a second, even with a call in flight: its workers (and
//! the workspace keeper) are gone with it, and so are its workspaces. Signals that do
//! not end it, arriving throughout a shutdown, lose no workspace.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::{
    As, Net, ProcId, Server, WORKER_PROCESSES, both_modes, data_dir_for, descendants, is_alive,
    is_keeper, server_command_as, workers_of,
};

/// The server's own identity (pid and start time), so pid reuse cannot fool the test.
pub fn identity(pid: u32) -> ProcId {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let start = rest.split_whitespace().nth(19).unwrap().parse().unwrap();
    ProcId { pid, start }
}

async fn signal_with_a_call_in_flight(who: As, signal: i32) {
    let server = Server::start_as(who, Net::Host, &[]).await;
    let warm = server.run("idle", "x = 1").await;
    assert_eq!(warm["status"], "ok", "{warm}");
    let me = identity(server.pid);
    let Ok(serde_json::Value::Object(args)) = serde_json::to_value(json!({
        "session": "busy",
        "code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)",
        "timeout_s": 100,
    })) else {
        panic!()
    };
    let call = server
        .client
        .call_tool(CallToolRequestParams::new("execute_python").with_arguments(args));
    let check = async {
        // The call is running once its session has a worker beside the idle one.
        let until = Instant::now() + Duration::from_secs(20);
        while workers_of(server.pid).len() < 2 * WORKER_PROCESSES && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let family = descendants(server.pid);
        assert!(
            workers_of(server.pid).len() >= 2 * WORKER_PROCESSES,
            "{who:?}: two workers run: {family:?}"
        );
        let sent = signal_and_see_it_end(&server, me, signal, &format!("{who:?}")).await;
        // Its workers follow within the same second (they die by their parent-death
        // signal a moment after the server): judged at the second, not the instant.
        let mut left: Vec<ProcId> = family;
        loop {
            left.retain(|p| is_alive(*p));
            if left.is_empty() || sent.elapsed() >= Duration::from_secs(1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            left.is_empty(),
            "{who:?}: processes left a second after the signal: {left:?}"
        );
    };
    let (answer, ()) = tokio::join!(call, check);
    assert_nothing_left(&server, answer, &format!("{who:?}"));
}

/// Sends `signal` to the server and sees it end within a second; returns when it was
/// sent.
pub async fn signal_and_see_it_end(
    server: &Server,
    me: ProcId,
    signal: i32,
    context: &str,
) -> Instant {
    // SAFETY: a signal to the server this test started.
    assert_eq!(unsafe { libc::kill(server.pid as i32, signal) }, 0);
    let sent = Instant::now();
    while is_alive(me) && sent.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = sent.elapsed();
    assert!(!is_alive(me), "{context}: the server is still running");
    assert!(
        took < Duration::from_secs(1),
        "{context}: signal {signal} took {took:?} to end the server"
    );
    sent
}

/// After the signal: the call in flight ended with the connection, or with its worker
/// killed just before (never ran to its end), and no workspace of the server is left.
pub fn assert_nothing_left<E>(server: &Server, answer: Result<CallToolResult, E>, context: &str) {
    if let Ok(r) = answer {
        let r = r.structured_content.unwrap_or_default();
        assert_ne!(r["status"], "ok", "{context}: the call ran to its end: {r}");
    }
    let sessions = server.data_dir.path().join("sessions");
    let instances: Vec<_> = std::fs::read_dir(&sessions)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(instances.is_empty(), "{context}: left {instances:?}");
}

#[tokio::test]
async fn sigterm_with_a_call_in_flight_ends_the_server_and_its_workers_within_a_second() {
    for who in both_modes() {
        signal_with_a_call_in_flight(who, libc::SIGTERM).await;
    }
}

#[tokio::test]
async fn sigint_with_a_call_in_flight_ends_the_server_and_its_workers_within_a_second() {
    for who in both_modes() {
        signal_with_a_call_in_flight(who, libc::SIGINT).await;
    }
}

/// Signals that arrive during a shutdown (children ending, a terminal resized, urgent
/// data) interrupt whatever the server's threads are waiting in; every one of its
/// threads gets them, over and over, until the server has exited.
struct Storm {
    sent: Arc<AtomicU64>,
    /// Whether `pid` exited (false: it was still running after [`Storm::GIVE_UP`]).
    thread: std::thread::JoinHandle<bool>,
}

impl Storm {
    const SIGNALS: [i32; 3] = [libc::SIGCHLD, libc::SIGWINCH, libc::SIGURG];
    /// Not a verdict: only so that a server that never exits fails the test rather than
    /// hanging it.
    const GIVE_UP: Duration = Duration::from_secs(300);

    /// Starts signalling every thread of `pid`. It ends by itself once `pid` is a zombie
    /// (exited, not yet reaped: its pid cannot have been reused yet).
    fn start(pid: u32) -> Storm {
        let sent = Arc::new(AtomicU64::new(0));
        let sent2 = sent.clone();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            while started.elapsed() < Storm::GIVE_UP {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
                if stat[stat.rfind(')').unwrap() + 2..].starts_with('Z') {
                    return true;
                }
                let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
                for tid in tasks.flatten() {
                    let Ok(tid) = tid.file_name().to_string_lossy().parse::<i32>() else {
                        continue;
                    };
                    for signal in Storm::SIGNALS {
                        // SAFETY: a harmless signal to a thread of the server this test
                        // started, which has not been reaped (so the pid is still its).
                        let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
                        if r == 0 {
                            sent2.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            false
        });
        Storm { sent, thread }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// The tmpfs mounts beneath `dir` that process `pid` sees.
fn tmpfs_mounts_beneath(pid: &str, dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let mut fields = l.split(' ');
            let point = fields.nth(4).unwrap_or_default();
            point.starts_with(&dir)
                && l.split(" - ")
                    .nth(1)
                    .is_some_and(|t| t.starts_with("tmpfs "))
        })
        .map(str::to_string)
        .collect()
}

/// A stdio session with twenty live sessions ends (stdin closed) while signals keep
/// arriving at every thread of the server: every workspace is removed, none is reported
/// as lost, and nothing of them is left on the host. Judged by events: the server's exit
/// (seen as its zombie before it is reaped), the end of its stderr, the keeper's exit.
async fn shutdown_amid_signals(who: As) {
    const SESSIONS: usize = 20;
    let data = data_dir_for(who);
    let mut cmd = server_command_as(
        who,
        Net::Host,
        &[("SANDBOX_MAX_WORKERS", "8"), ("SANDBOX_DISK_LIMIT", "16m")],
        &[],
        data.path(),
    );
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let pid = child.id().unwrap();
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut text = String::new();
        stderr.read_to_string(&mut text).await.unwrap();
        text
    });
    let client = ().serve((stdout, stdin)).await.unwrap();
    for i in 0..SESSIONS {
        let Value::Object(args) = json!({
            "session": format!("s{i}"),
            "code": format!("open('kept.txt', 'w').write('{i}')"),
        }) else {
            panic!()
        };
        let r = client
            .call_tool(CallToolRequestParams::new("execute_python").with_arguments(args))
            .await
            .unwrap();
        let r = r.structured_content.unwrap();
        assert_eq!(r["status"], "ok", "{who:?} s{i}: {r}");
    }
    // Every session's workspace is a tmpfs in the keeper's namespace.
    let keeper = descendants(pid)
        .into_iter()
        .find(|p| is_keeper(p.pid))
        .unwrap_or_else(|| panic!("{who:?}: no workspace keeper"));
    let held = tmpfs_mounts_beneath(&keeper.pid.to_string(), data.path());
    assert!(held.len() > SESSIONS, "{who:?}: {held:#?}");

    let storm = Storm::start(pid);
    while storm.sent() < 1000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The end of the stdio session: stdin closes, the server shuts down in the storm.
    client.cancel().await.unwrap();
    let Storm { sent, thread } = storm;
    let exited = tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    assert!(
        exited,
        "{who:?}: the server did not exit when its stdin closed"
    );
    let status = child.wait().await.unwrap();
    let text = log.await.unwrap();
    assert!(status.success(), "{who:?}: {status}: {text}");
    assert!(
        sent.load(Ordering::Relaxed) > 1000,
        "{who:?}: the storm did not reach the server"
    );
    for lost in ["could not remove a workspace", "os error 4", "nterrupted"] {
        assert!(
            !text.contains(lost),
            "{who:?}: {lost:?} in the log:\n{text}"
        );
    }
    // Nothing left on the host: no instance directory, no mount beneath the data
    // directory, no keeper (it ends with the server; its stderr closing is that event).
    let sessions = data.path().join("sessions");
    let left: Vec<_> = std::fs::read_dir(&sessions)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{who:?}: left {left:?}");
    assert_eq!(
        tmpfs_mounts_beneath("self", data.path()),
        Vec::<String>::new()
    );
    assert!(!is_alive(keeper), "{who:?}: the keeper outlived its stderr");
}

#[tokio::test]
async fn a_shutdown_amid_signals_removes_every_workspace() {
    for who in both_modes() {
        shutdown_amid_signals(who).await;
    }
}
