//! Signals end the server within a second, even with a call in flight: its workers (and
//! the workspace keeper) are gone with it, and so are its workspaces.

use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::json;

use super::{
    As, Net, ProcId, Server, WORKER_PROCESSES, both_modes, descendants, is_alive, workers_of,
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
