//! Server instances that share a data directory (Claude Desktop and Claude Code, both
//! running warden as one user): each instance holds an exclusive lock on a file in its
//! own directory for as long as it lives, and records the processes it starts there. A
//! server that starts later reaps the directories of instances whose lock is free (they
//! died without cleaning up: SIGKILL, a crash, a power cut), and first kills any process
//! those instances recorded that is still running (the exact process: pid and start
//! time), so nothing of a dead instance lingers.
//!
//! A root server's Docker workspaces are tmpfs mounts in the host's mount table, which
//! every server on the machine sees: a root server also reaps the dead instances of
//! other data directories whose mounts are still listed there (by the same lock), and a
//! server that is not root, which cannot detach them, reports them.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The lock file in each instance directory.
const LOCK: &str = "lock";
/// The processes an instance started, one `pid start-time` line each.
const PROCESSES: &str = "processes";
/// An instance directory without a lock file younger than this may be one being
/// created right now: left alone.
const GRACE: Duration = Duration::from_secs(600);
/// A free lock file younger than this, in the directory of a server that still runs, is
/// not judged by its lock: a starting instance creates the file and locks it in two
/// steps, and a reaper that came in between would take a live instance for a dead one.
const FRESH_LOCK: Duration = Duration::from_secs(30);

/// The exclusive lock an instance holds on its own directory for its whole life (the
/// kernel releases it when the process dies, however it dies).
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Creates and locks `<dir>/lock`.
    ///
    /// # Errors
    /// The file cannot be created or is already locked (another live instance).
    pub fn acquire(dir: &Path) -> std::io::Result<InstanceLock> {
        let file = crate::os::private_file(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false),
        )
        .open(dir.join(LOCK))?;
        // flock(LOCK_EX | LOCK_NB) on Unix, LockFileEx on Windows.
        file.try_lock().map_err(std::io::Error::from)?;
        Ok(InstanceLock { _file: file })
    }
}

/// A process's identity that survives pid reuse: its start time.
fn start_time(pid: u32) -> Option<u64> {
    crate::os::process_start_time(pid)
}

/// Notes that this instance started `pid`, so that a later server can kill it should
/// this one die without doing so.
pub fn record_process(instance_dir: &Path, pid: u32) {
    let Some(start) = start_time(pid) else {
        return;
    };
    let appended = crate::os::private_file(std::fs::OpenOptions::new().append(true).create(true))
        .open(instance_dir.join(PROCESSES))
        .and_then(|mut f| f.write_all(format!("{pid} {start}\n").as_bytes()));
    if let Err(e) = appended {
        tracing::warn!(pid, error = %e, "could not record a worker process");
    }
}

/// The `pid start-time` pairs of a processes file. Pure.
pub fn parse_processes(text: &str) -> Vec<(u32, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let pid = parts.next()?.parse().ok()?;
            let start = parts.next()?.parse().ok()?;
            Some((pid, start))
        })
        .filter(|(pid, _)| *pid > 1)
        .collect()
}

/// What happened to one dead instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub dir: PathBuf,
    /// Processes of it that were still running and were killed.
    pub killed: Vec<u32>,
}

/// Reaps every instance directory under `sessions` (but `own`) whose instance is dead,
/// then the dead instances elsewhere whose workspace mounts are still listed.
pub fn reap_dead(sessions: &Path, own: &Path) -> Vec<Reaped> {
    let mut out = reap_mounted_elsewhere(sessions);
    let Ok(entries) = std::fs::read_dir(sessions) else {
        return out;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if dir == own || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if let Some(reaped) = reap_if_dead(&dir) {
            out.push(reaped);
        }
    }
    out
}

fn reap_if_dead(dir: &Path) -> Option<Reaped> {
    // Held until the directory is gone, so that two servers never reap one instance.
    let _lock = match lock_if_free(dir) {
        Ok(lock) => Some(lock),
        Err(Liveness::Alive) => return None,
        Err(Liveness::NoLock) => {
            // An older warden's directory, or one whose server died creating it: only
            // once its server (the pid it is named after) is gone and it is not new.
            let modified = std::fs::metadata(dir).and_then(|m| m.modified()).ok()?;
            if modified.elapsed().ok()? < GRACE || named_pid_alive(dir) {
                return None;
            }
            None
        }
    };
    let recorded = std::fs::read_to_string(dir.join(PROCESSES)).unwrap_or_default();
    let mut killed = Vec::new();
    for (pid, start) in parse_processes(&recorded) {
        if start_time(pid) == Some(start) {
            // A process this data directory's dead instance started, identified by pid
            // and start time; the group first (a worker leads one).
            crate::os::kill_group(pid as i32);
            killed.push(pid);
        }
    }
    detach_mounts_beneath(dir);
    // Iterative and bounded: the dead instance's workspaces may hold a nest of any depth.
    if let Err(e) = crate::workspace::remove_tree(dir) {
        tracing::warn!(error = %e, "could not remove a dead instance's directory");
    }
    Some(Reaped {
        dir: dir.to_path_buf(),
        killed,
    })
}

/// The pid an instance directory is named after (`<pid>-<random>`).
fn named_pid(dir: &Path) -> Option<u32> {
    dir.file_name()?.to_str()?.split('-').next()?.parse().ok()
}

/// Whether the process an instance directory is named after may run: a name without a
/// pid counts as alive (nothing proves it dead).
fn named_pid_alive(dir: &Path) -> bool {
    named_pid(dir).is_none_or(|pid| Path::new(&format!("/proc/{pid}")).exists())
}

/// Whether the server an instance directory is named after runs (a zombie, a server
/// killed and not yet waited for, does not).
fn named_pid_running(dir: &Path) -> bool {
    named_pid(dir).is_some_and(|pid| crate::os::running_start_time(pid).is_some())
}

/// A root server's Docker workspaces are tmpfs mounts on the host: detached before the
/// directory is removed, or it could not be and their memory would stay held.
#[cfg(target_os = "linux")]
fn detach_mounts_beneath(dir: &Path) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for mount in mounts_beneath(dir, &mountinfo) {
        match rustix::mount::unmount(&mount, rustix::mount::UnmountFlags::DETACH) {
            Ok(()) => {
                tracing::warn!(mount = %mount.display(), "detached a workspace mount of a dead server instance");
            }
            Err(e) => {
                tracing::warn!(mount = %mount.display(), error = %e, "could not detach a dead instance's mount");
            }
        }
    }
}

/// Only the Docker backend (Linux) mounts anything beneath an instance directory.
#[cfg(not(target_os = "linux"))]
fn detach_mounts_beneath(_dir: &Path) {}

/// The dead instances of other data directories (not under `sessions`) whose workspace
/// tmpfs mounts the mount table still lists: reaped as root (only an instance directory
/// with a lock file, judged by its lock); reported otherwise, since only root can detach
/// them.
#[cfg(target_os = "linux")]
fn reap_mounted_elsewhere(sessions: &Path) -> Vec<Reaped> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let root = crate::os::running_as_root();
    let mut out = Vec::new();
    for dir in mounted_instances(&mountinfo) {
        if dir.starts_with(sessions) {
            continue;
        }
        if !root {
            if !named_pid_running(&dir) {
                tracing::warn!(dir = %dir.display(), "workspace mounts of a warden instance that is gone remain in this machine's mount table; only root can detach them (a root warden server does when it starts)");
            }
            continue;
        }
        if dir.join(LOCK).is_file() {
            out.extend(reap_if_dead(&dir));
        }
    }
    out
}

/// No server on another platform mounts workspaces.
#[cfg(not(target_os = "linux"))]
fn reap_mounted_elsewhere(_sessions: &Path) -> Vec<Reaped> {
    Vec::new()
}

/// The instance directories (`…/sessions/<pid>-<hex>`) that hold a tmpfs mount in a
/// `/proc/self/mountinfo` text, each once. Pure.
pub fn mounted_instances(mountinfo: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mountinfo
        .lines()
        .filter(|line| {
            line.split_once(" - ")
                .and_then(|(_, tail)| tail.split(' ').next())
                == Some("tmpfs")
        })
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter_map(|mount| instance_above(&mount))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The outermost directory above `mount` (never `mount` itself) named like an instance
/// (`<pid>-<hex>`) inside a directory named `sessions`.
fn instance_above(mount: &Path) -> Option<PathBuf> {
    let looks_like_instance = |p: &Path| {
        p.parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "sessions")
            && p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split_once('-'))
                .is_some_and(|(pid, hex)| {
                    !pid.is_empty()
                        && pid.bytes().all(|b| b.is_ascii_digit())
                        && !hex.is_empty()
                        && hex.bytes().all(|b| b.is_ascii_hexdigit())
                })
    };
    let ancestors: Vec<&Path> = mount.ancestors().skip(1).collect();
    ancestors
        .into_iter()
        .rev()
        .find(|p| looks_like_instance(p))
        .map(Path::to_path_buf)
}

/// The mount points strictly beneath `dir` in a `/proc/self/mountinfo` text, deepest
/// first (so that each is detached before the one it sits on). Pure.
pub fn mounts_beneath(dir: &Path, mountinfo: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(|p| p != dir && p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo writes space, tab, newline and backslash in paths as `\ooo` (octal).
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

enum Liveness {
    Alive,
    NoLock,
}

/// Takes the instance's lock if nobody holds it (the instance is dead).
fn lock_if_free(dir: &Path) -> Result<File, Liveness> {
    let file = match crate::os::private_file(std::fs::OpenOptions::new().read(true))
        .open(dir.join(LOCK))
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Liveness::NoLock),
        Err(_) => return Err(Liveness::Alive),
    };
    let fresh = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < FRESH_LOCK);
    if fresh && named_pid_running(dir) {
        return Err(Liveness::Alive);
    }
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(_) => Err(Liveness::Alive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_read_by_pid_and_start_time() {
        assert_eq!(
            parse_processes("12 345\n\ngarbage\n1 9\n77 88 extra\n"),
            vec![(12, 345), (77, 88)]
        );
    }

    #[test]
    fn mounts_beneath_a_dead_instance_are_found_deepest_first() {
        let info = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:50 / /var/lib/warden/sessions/7-aa/home-1/workspace rw - tmpfs tmpfs rw,size=1024k
91 22 0:51 / /var/lib/warden/sessions/7-aa/home\\0402/workspace rw - tmpfs tmpfs rw
92 90 0:52 / /var/lib/warden/sessions/7-aa/home-1/workspace/deeper rw - tmpfs tmpfs rw
93 22 0:53 / /var/lib/warden/sessions/7-aab/home-1/workspace rw - tmpfs tmpfs rw
";
        let dir = Path::new("/var/lib/warden/sessions/7-aa");
        assert_eq!(
            mounts_beneath(dir, info),
            vec![
                PathBuf::from("/var/lib/warden/sessions/7-aa/home-1/workspace/deeper"),
                PathBuf::from("/var/lib/warden/sessions/7-aa/home-1/workspace"),
                PathBuf::from("/var/lib/warden/sessions/7-aa/home 2/workspace"),
            ]
        );
    }

    #[test]
    fn instances_holding_tmpfs_mounts_are_found_in_any_data_directory() {
        let info = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:50 / /tmp/a/sessions/7-aa/home-1/workspace rw - tmpfs tmpfs rw,size=1024k
91 22 0:51 / /tmp/a/sessions/7-aa/.query/workspace rw - tmpfs tmpfs rw
92 22 0:52 / /var/lib/w\\0402/sessions/8-0b/home-3/workspace rw - tmpfs tmpfs rw
93 22 0:53 / /srv/sessions/9-zz/home-1/workspace rw - tmpfs tmpfs rw
94 22 0:54 / /srv/sessions/10-ab rw - tmpfs tmpfs rw
95 22 8:2 / /srv/x/sessions/11-ab/home-1/workspace rw - ext4 /dev/vdb rw
96 22 0:55 / /tmp/a/sessions/7-aa/home-2/workspace/sessions/12-cd/home-1/w rw - tmpfs tmpfs rw
";
        assert_eq!(
            mounted_instances(info),
            vec![
                PathBuf::from("/tmp/a/sessions/7-aa"),
                PathBuf::from("/var/lib/w 2/sessions/8-0b"),
            ]
        );
    }

    #[test]
    fn a_locked_instance_is_alive_and_a_free_one_is_reaped() {
        let sessions = tempfile::tempdir().unwrap();
        let live = sessions.path().join("1-live");
        let dead = sessions.path().join("2-dead");
        let own = sessions.path().join("3-own");
        for d in [&live, &dead, &own] {
            std::fs::create_dir(d).unwrap();
        }
        let _held = InstanceLock::acquire(&live).unwrap();
        drop(InstanceLock::acquire(&dead).unwrap());
        age(&dead.join(LOCK));
        std::fs::write(dead.join("processes"), "4000000 1\n").unwrap();
        // A second lock on a live instance fails.
        assert!(InstanceLock::acquire(&live).is_err());
        let reaped = reap_dead(sessions.path(), &own);
        assert_eq!(
            reaped,
            vec![Reaped {
                dir: dead.clone(),
                killed: vec![]
            }]
        );
        assert!(live.is_dir() && own.is_dir() && !dead.exists());
    }

    /// Makes a file look an hour old.
    fn age(path: &Path) {
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }

    #[test]
    fn an_instance_between_creating_and_locking_its_lock_file_is_not_reaped() {
        let sessions = tempfile::tempdir().unwrap();
        let (starting, dead, own) = (
            sessions
                .path()
                .join(format!("{}-starting", std::process::id())),
            sessions.path().join("4000000000-dead"),
            sessions.path().join("own"),
        );
        for d in [&starting, &dead, &own] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join(LOCK), "").unwrap();
        }
        // Both lock files are unlocked; the fresh one of a running server is left alone,
        // and a fresh one of a server that is gone is reaped at once.
        let gone_fresh = sessions.path().join("4000000001-killed");
        std::fs::create_dir(&gone_fresh).unwrap();
        std::fs::write(gone_fresh.join(LOCK), "").unwrap();
        age(&dead.join(LOCK));
        let reaped: Vec<PathBuf> = reap_dead(sessions.path(), &own)
            .into_iter()
            .map(|r| r.dir)
            .collect();
        assert_eq!(reaped.len(), 2, "{reaped:?}");
        assert!(reaped.contains(&dead) && reaped.contains(&gone_fresh));
        assert!(starting.is_dir() && !dead.exists() && !gone_fresh.exists());
        // And the starting instance then takes its lock as usual.
        assert!(InstanceLock::acquire(&starting).is_ok());
    }

    #[test]
    fn a_directory_without_a_lock_is_reaped_only_when_old_and_its_server_gone() {
        let sessions = tempfile::tempdir().unwrap();
        let own = sessions.path().join("own");
        let running = sessions.path().join(format!("{}-aa", std::process::id()));
        let gone = sessions.path().join("4000000000-bb");
        let fresh = sessions.path().join("4000000001-cc");
        for d in [&own, &running, &gone, &fresh] {
            std::fs::create_dir(d).unwrap();
        }
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        for d in [&running, &gone] {
            std::fs::File::open(d).unwrap().set_modified(old).unwrap();
        }
        let reaped: Vec<PathBuf> = reap_dead(sessions.path(), &own)
            .into_iter()
            .map(|r| r.dir)
            .collect();
        assert_eq!(reaped, vec![gone.clone()]);
        assert!(running.is_dir() && fresh.is_dir() && !gone.exists());
    }
}
