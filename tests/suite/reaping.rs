//! Dead instances (#14): a server that died without cleaning up (SIGKILL) leaves its
//! instance directory; the next server on the same data directory reaps it, and kills
//! any process that instance recorded and that still runs. A live instance is never
//! touched. Judged on this test's own servers, directories and processes only.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{
    As, Net, ProcId, Server, both_modes, data_dir_for, descendants, eventually, is_alive,
    login_user, proc_id, server_command_as, stdout,
};

/// A server on an existing data directory (the test keeps the directory).
async fn start_on(who: As, data: &Path) -> Server {
    let cmd = server_command_as(who, Net::Host, &[("CODEGUARD", "off")], &[], data);
    // The Server's own directory is a placeholder; the data lives in `data`.
    Server::from_command(cmd, tempfile::tempdir().unwrap(), who).await
}

fn instances(data: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(data.join("sessions"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

fn owner(who: As) -> (u32, u32) {
    match who {
        As::Root => (0, 0),
        As::User => {
            let u = login_user().unwrap();
            (u.uid, u.gid)
        }
    }
}

#[tokio::test]
async fn a_killed_servers_instance_is_reaped_by_the_next_server() {
    for who in both_modes() {
        let data = data_dir_for(who);
        let a = start_on(who, data.path()).await;
        let r = a
            .run("s", "open('kept.txt', 'w').write('x'); print('ok')")
            .await;
        assert_eq!(stdout(&r), "ok\n", "{who:?}: {r}");
        // The server itself too: while it is still exiting its lock is already free
        // but it still runs, and the next server rightly takes a fresh lock of a
        // running server for one that is starting, and leaves its directory alone.
        let mut a_procs: Vec<ProcId> = descendants(a.pid);
        a_procs.extend(proc_id(a.pid));
        let dead = instances(data.path());
        assert_eq!(dead.len(), 1, "{who:?}: {dead:?}");
        // SAFETY: killing this test's own server.
        unsafe { libc::kill(a.pid as i32, libc::SIGKILL) };
        assert!(
            eventually(5, || a_procs.iter().all(|p| !is_alive(*p))).await,
            "{who:?}: the dead server's processes lived on"
        );
        drop(a);
        assert!(dead[0].is_dir(), "{who:?}: nothing left to reap?");
        // The next server reaps an instance whose lock is free: the lock goes with the
        // last open descriptor, which the kernel closes some time after SIGKILL (a child
        // caught between fork and exec holds a copy until it execs or dies). That
        // release is the event to wait for; a lock held for good is a leak.
        assert!(
            eventually(10, || lock_is_free(&dead[0])).await,
            "{who:?}: the dead server's instance lock is still held"
        );
        let b = start_on(who, data.path()).await;
        let r = b.run("s", "print('b works')").await;
        assert_eq!(stdout(&r), "b works\n", "{who:?}: {r}");
        let left = instances(data.path());
        assert!(!left.contains(&dead[0]), "{who:?}: {left:?}");
        assert_eq!(left.len(), 1, "{who:?}: only b's own: {left:?}");
        b.stop().await;
    }
}

#[tokio::test]
async fn leftover_processes_of_a_dead_instance_are_killed_and_live_ones_left_alone() {
    for who in both_modes() {
        let data = data_dir_for(who);
        let (uid, gid) = owner(who);
        // A dead instance as a crashed server leaves it: an unlocked lock file and the
        // processes it recorded, one of which still runs.
        let mut leftover = std::process::Command::new("setpriv")
            .args([
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".into(),
                "sleep".into(),
                "300".into(),
            ])
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let leftover_id = descendants(std::process::id())
            .into_iter()
            .find(|p| p.pid == leftover.id())
            .unwrap();
        let sessions = data.path().join("sessions");
        let dead = sessions.join("999999-deadbeef");
        std::fs::create_dir_all(dead.join("ws")).unwrap();
        std::fs::write(dead.join("lock"), "").unwrap();
        std::fs::write(
            dead.join("processes"),
            format!("{} {}\n", leftover_id.pid, leftover_id.start),
        )
        .unwrap();
        for p in [
            &sessions,
            &dead,
            &dead.join("ws"),
            &dead.join("lock"),
            &dead.join("processes"),
        ] {
            std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
        }
        let a = start_on(who, data.path()).await;
        assert!(
            eventually(5, || !is_alive(leftover_id)).await,
            "{who:?}: the dead instance's process still runs"
        );
        let _ = leftover.wait();
        assert!(
            !dead.exists(),
            "{who:?}: the dead instance's directory is left"
        );
        // A second server on the same data directory leaves the live first one alone.
        let live = instances(data.path());
        assert_eq!(live.len(), 1, "{who:?}: {live:?}");
        let b = start_on(who, data.path()).await;
        assert!(live[0].is_dir(), "{who:?}: a live instance was reaped");
        let r = a.run("s", "print('a still works')").await;
        assert_eq!(stdout(&r), "a still works\n", "{who:?}: {r}");
        let r = b.run("s", "print('b works')").await;
        assert_eq!(stdout(&r), "b works\n", "{who:?}: {r}");
        b.stop().await;
        a.stop().await;
    }
}

/// Whether an instance's lock can be taken (and is released again at once).
fn lock_is_free(instance: &Path) -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .open(instance.join("lock"))
        .is_ok_and(|f| f.try_lock().is_ok())
}
