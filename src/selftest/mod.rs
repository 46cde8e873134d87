//! selftest: proves, by live probes, what the sandbox enforces on this machine. A real
//! worker is started by the resolved backend through exactly the call a session uses
//! (same policy, same walls, same interpreter) and attempts each forbidden operation; the server
//! judges each attempt with host-side evidence where it has some (the canary's content,
//! its own listeners, the file it checks for, the pid it watches).

mod egress;
pub mod report;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::backend::{Enforcement, Outcome, RunOutput, Worker};
use crate::config::{NetworkMode, SandboxMode, Settings, TIMEOUT_CAP_S};
use crate::sandbox::platform::{HostOs, probe_not_applicable};
use crate::session::{Ephemeral, SessionManager};
use crate::worker::report::WallStatus;

use crate::capability::Capability;
use report::{Attempt, HostEvidence, LimitsInForce, aggregate, judge};
pub use report::{ProbeResult, ProbeStatus, SelftestReport};

const PROBES_SOURCE: &str = include_str!("probes.py");
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT_S: u64 = 3;
/// The spinning probe's wall clock: short, so the selftest stays quick.
const SPIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Host-side fixtures the probes aim at; removed when dropped.
struct Fixtures {
    dir: std::path::PathBuf,
    canary_path: std::path::PathBuf,
    canary: String,
    write_target: std::path::PathBuf,
    tcp: std::net::TcpListener,
    /// A UNIX socket the probes try to connect to (Unix hosts only).
    #[cfg(unix)]
    unix: std::os::unix::net::UnixListener,
    unix_path: Option<std::path::PathBuf>,
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Fixtures {
    /// The UNIX listener saw a connection.
    fn unix_accepted(&self) -> bool {
        #[cfg(unix)]
        {
            self.unix.accept().is_ok()
        }
        #[cfg(not(unix))]
        {
            false
        }
    }
}

fn make_fixtures(base: &Path) -> std::io::Result<Fixtures> {
    let dir = base.join(format!(
        "selftest-fixtures-{}",
        crate::hex(&crate::random_bytes::<6>())
    ));
    crate::os::create_dir(&dir, 0o755, false)?;
    crate::os::set_mode(&dir, 0o755)?;
    // Readable and writable by anyone: only the sandbox, not file permissions, may stop
    // the probes.
    let canary = format!("warden-canary-{}", crate::hex(&crate::random_bytes::<16>()));
    let canary_path = dir.join("canary.txt");
    std::fs::write(&canary_path, &canary)?;
    crate::os::set_mode(&canary_path, 0o644)?;
    let writable = dir.join("writable");
    crate::os::create_dir(&writable, 0o777, false)?;
    crate::os::set_mode(&writable, 0o777)?;
    let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
    tcp.set_nonblocking(true)?;
    #[cfg(unix)]
    let (unix, unix_path) = {
        let unix_path = dir.join("probe.sock");
        let unix = std::os::unix::net::UnixListener::bind(&unix_path)?;
        unix.set_nonblocking(true)?;
        crate::os::set_mode(&unix_path, 0o777)?;
        (unix, Some(unix_path))
    };
    #[cfg(not(unix))]
    let unix_path = None;
    Ok(Fixtures {
        write_target: writable.join("written-by-probe.txt"),
        dir,
        canary_path,
        canary,
        tcp,
        #[cfg(unix)]
        unix,
        unix_path,
    })
}

fn stdout_text(run: &RunOutput) -> String {
    run.stdout_text()
}

/// Runs every probe and returns the report. Never panics; a worker that cannot start is
/// reported as such.
pub async fn run(manager: &SessionManager) -> SelftestReport {
    let started = Instant::now();
    let settings = manager.settings();
    let enforcement = manager.enforcement();
    let mut probes: Vec<ProbeResult> = Vec::new();
    let mut walls: Vec<WallStatus> = Vec::new();
    let mut landlock_abi = None;
    let mut cpu_count = None;
    let mut worker_error = None;
    let mut memory_enforced = false;

    match run_probes(manager, &mut probes, &mut cpu_count, &mut memory_enforced).await {
        Ok((w, abi)) => {
            walls = w;
            landlock_abi = abi;
        }
        Err(e) => worker_error = Some(e),
    }

    let seccomp =
        walls
            .iter()
            .find(|w| w.name == "seccomp")
            .map_or("not reported".to_string(), |w| {
                if w.enforced {
                    format!("enforced: {}", w.detail)
                } else {
                    format!("not enforced: {}", w.detail)
                }
            });
    let capabilities = capabilities_of(&walls, settings.host_sandbox, &enforcement);
    let failing = report::failing_required(&probes);
    SelftestReport {
        backend: enforcement.kind.to_string(),
        configured_backend: manager.configured_backend().to_string(),
        resolved_backend: enforcement.kind.to_string(),
        container_runtime: enforcement.container_runtime.clone(),
        host_sandbox: settings.host_sandbox.word().into(),
        network_mode: match settings.network {
            NetworkMode::Deny => "deny".into(),
            NetworkMode::Allow => "allow".into(),
            NetworkMode::Proxy => "proxy".into(),
        },
        filesystem_isolation: aggregate(&probes, "filesystem"),
        network_isolation: aggregate(&probes, "network"),
        memory_limit_enforced: memory_enforced,
        hardware_concurrency_ceiling: cpu_count,
        landlock_abi,
        seccomp,
        limits: LimitsInForce {
            memory_bytes: settings.mem_limit_bytes,
            file_size_bytes: settings.file_size_limit_bytes,
            timeout_s: settings.timeout_s,
            timeout_cap_s: TIMEOUT_CAP_S,
            output_bytes: settings.output_limit_bytes as u64,
            processes: enforcement.processes_limit,
            processes_counted_by: enforcement.processes_counted_by.clone(),
            pending_signals: pending_signals(&enforcement, settings.host_sandbox),
            open_files: 256,
            cpu_seconds: 3600,
        },
        walls,
        capabilities,
        failing_required: failing,
        probes,
        worker_error,
        python: format!(
            "Python {} ({})",
            enforcement.python_version, enforcement.python
        ),
        platform: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// RLIMIT_SIGPENDING of a worker: the Linux helper sets it, on the host unless the
/// sandbox is off, and inside every container.
fn pending_signals(enforcement: &Enforcement, mode: SandboxMode) -> Option<u64> {
    let helper_runs = match enforcement.kind {
        crate::backend::BackendKind::Docker => true,
        crate::backend::BackendKind::Host => mode != SandboxMode::Off && cfg!(target_os = "linux"),
    };
    helper_runs.then_some(crate::sandbox::rlimits::PENDING_SIGNALS)
}

/// A probe worker from the backend, started exactly as a session's would be.
async fn spawn(eph: &Ephemeral<'_>) -> Result<Worker, String> {
    let worker = eph.start_worker().await.map_err(|e| e.to_string())?;
    // The proxy's records of the probes' connections name them.
    worker.set_egress_session("selftest");
    Ok(worker)
}

/// One probe run's worker, replaced whenever a probe leaves it unusable.
struct Runner<'a> {
    eph: &'a Ephemeral<'a>,
    worker: Worker,
}

impl Runner<'_> {
    /// A fresh worker unless the last call left this one `reusable`.
    async fn renew_unless(&mut self, reusable: bool) -> Result<(), String> {
        if !reusable {
            self.worker = spawn(self.eph).await?;
        }
        Ok(())
    }

    /// Runs `code` and returns its stdout, renewing the worker when it is spent.
    async fn stdout_of(
        &mut self,
        code: &str,
        timeout: Duration,
    ) -> Result<(String, Outcome), String> {
        let run = self.worker.execute(code, &[], timeout, 4096).await;
        let text = stdout_text(&run);
        self.renew_unless(run.reusable).await?;
        Ok((text, run.outcome))
    }
}

async fn run_probes(
    manager: &SessionManager,
    probes: &mut Vec<ProbeResult>,
    cpu_count: &mut Option<u64>,
    memory_enforced: &mut bool,
) -> Result<(Vec<WallStatus>, Option<i32>), String> {
    let settings = manager.settings();
    let fixtures = make_fixtures(manager.instance_dir())
        .map_err(|e| format!("cannot prepare the probe fixtures: {e}"))?;
    let eph = manager
        .ephemeral("selftest")
        .map_err(|e| format!("cannot prepare the probe session: {}", e.message))?;
    let mut r = Runner {
        worker: spawn(&eph).await?,
        eph: &eph,
    };
    let walls = r.worker.report().walls.clone();
    let landlock_abi = r.worker.report().landlock_abi;
    let mut seen_canary = script_probes(&mut r, settings, &fixtures, probes, cpu_count).await?;
    let (found, reusable) = egress::probes(&mut r.worker, settings).await;
    probes.extend(found);
    r.renew_unless(reusable).await?;
    let (verdict, reusable) = memfd_probe(&mut r.worker, &eph).await;
    probes.push(verdict);
    r.renew_unless(reusable).await?;
    // Leaves threads running in this worker: it is not reused.
    probes.extend(work_after_return(&mut r.worker).await);
    r.renew_unless(false).await?;
    // exec: if it works, the worker is replaced by the shell, which exits.
    let (exec_text, exec) = r
        .stdout_of(
            "import os\ntry:\n    os.execv('/bin/sh', ['sh', '-c', 'exit 0'])\nexcept OSError as e:\n    print('ERRNO', e.errno)\n",
            Duration::from_secs(10),
        )
        .await?;
    probes.push(exec_verdict(&exec, &exec_text));
    limit_probes(&mut r, settings, probes, memory_enforced).await?;
    probes.push(timeout_probe(r.worker).await);
    seen_canary |= exec_text.contains(&fixtures.canary);
    if seen_canary && let Some(p) = probes.iter_mut().find(|p| p.id == "fs.canary_read") {
        p.status = ProbeStatus::Allowed;
        p.details = "the canary's content came back to the host".into();
    }
    Ok((walls, landlock_abi))
}

/// The probe script (probes.py): each attempt it prints, judged against what the host
/// saw. Returns whether the canary's content showed up anywhere in its output.
async fn script_probes(
    r: &mut Runner<'_>,
    settings: &Settings,
    fixtures: &Fixtures,
    probes: &mut Vec<ProbeResult>,
    cpu_count: &mut Option<u64>,
) -> Result<bool, String> {
    let ssh_dir = std::env::var_os("HOME")
        .map(|h| Path::new(&h).join(".ssh"))
        .unwrap_or_else(|| "/root/.ssh".into());
    let params = json!({
        "canary": fixtures.canary_path,
        "write_target": fixtures.write_target,
        "ssh_dir": ssh_dir,
        "probe_addr": settings.probe_addr,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "loopback_port": fixtures.tcp.local_addr().map(|a| a.port()).unwrap_or(9),
        "unix_socket": fixtures.unix_path,
        "server_pid": std::process::id(),
    });
    let code = format!(
        "{PROBES_SOURCE}\nimport json as _json\nmain(_json.loads({}))\n",
        serde_json::to_string(&params.to_string()).unwrap_or_default()
    );
    let (rlimit_before, nice_before) = (own_nofile_limit(), own_priority());
    let run = r.worker.execute(&code, &[], PROBE_TIMEOUT, 1 << 20).await;
    let walls = &r.worker.report().walls;
    let enforced = |name: &str| walls.iter().any(|w| w.name == name && w.enforced);
    let host = HostEvidence {
        canary: fixtures.canary.clone(),
        canary_exists: fixtures.canary_path.is_file(),
        write_target_exists: fixtures.write_target.exists(),
        loopback_accepted: fixtures.tcp.accept().is_ok(),
        unix_accepted: fixtures.unix_accepted(),
        ssh_dir_exists: ssh_dir.is_dir(),
        etc_shadow_exists: Path::new("/etc/shadow").exists(),
        // No direct connection either way when the proxy is the world's one endpoint.
        network_denied: settings.network == NetworkMode::Deny
            || (settings.network.proxied() && enforced("egress")),
        server_pid: std::process::id(),
        server_rlimit_changed: own_nofile_limit() != rlimit_before,
        server_priority_changed: own_priority() != nice_before,
        w_xor_x_expected: enforced("w_xor_x"),
    };
    let text = stdout_text(&run);
    for line in text.lines() {
        let Ok(attempt) = serde_json::from_str::<Attempt>(line) else {
            continue;
        };
        if attempt.probe == "info.cpu_count" {
            *cpu_count = attempt.data.as_deref().and_then(|d| d.parse().ok());
            continue;
        }
        // A proxied world needs IP sockets (for the proxy): not a finding.
        if attempt.probe == "net.af_inet_socket" && settings.network.proxied() {
            continue;
        }
        let mut result = judge(&attempt, &host);
        if let Some(why) = probe_not_applicable(HostOs::current(), &attempt.probe) {
            result.required = false;
            result.details = format!("{why} ({})", result.details);
        }
        probes.push(result);
    }
    if !matches!(run.outcome, Outcome::Finished(_)) {
        probes.push(ProbeResult {
            id: "probes.run".into(),
            category: "other".into(),
            status: ProbeStatus::Inconclusive,
            details: format!("the probe run did not finish: {:?}", run.outcome),
            required: true,
        });
    }
    r.renew_unless(run.reusable).await?;
    Ok(text.contains(&fixtures.canary))
}

/// The memory and file-size limits, each tried just past its setting.
async fn limit_probes(
    r: &mut Runner<'_>,
    settings: &Settings,
    probes: &mut Vec<ProbeResult>,
    memory_enforced: &mut bool,
) -> Result<(), String> {
    let (mem_text, _) = r
        .stdout_of(
            &format!(
                "try:\n    b = bytearray({} + (256 << 20))\n    del b\n    print('ALLOCATED')\nexcept MemoryError:\n    print('MEMORYERROR')\n",
                settings.mem_limit_bytes
            ),
            Duration::from_secs(20),
        )
        .await?;
    *memory_enforced = mem_text.contains("MEMORYERROR");
    probes.push(resource_verdict(
        "res.memory_limit",
        &mem_text,
        "MEMORYERROR",
        "ALLOCATED",
        &format!(
            "allocating {} MiB past the limit",
            (settings.mem_limit_bytes >> 20) + 256
        ),
    ));
    let (fsize_text, _) = r
        .stdout_of(
            &format!(
                "import os\nfd = os.open('selftest_fsize', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\ntry:\n    os.ftruncate(fd, {} + 1)\n    print('GREW')\nexcept OSError as e:\n    print('ERRNO', e.errno)\nfinally:\n    os.close(fd)\n    os.unlink('selftest_fsize')\n",
                settings.file_size_limit_bytes
            ),
            Duration::from_secs(20),
        )
        .await?;
    probes.push(resource_verdict(
        "res.file_size_limit",
        &fsize_text,
        &format!("ERRNO {}", libc::EFBIG),
        "GREW",
        "growing a file past the file-size limit",
    ));
    Ok(())
}

/// Code that ignores SIGTERM and spins must be gone, process group and all, at the
/// deadline. The worker is spent.
async fn timeout_probe(mut worker: Worker) -> ProbeResult {
    let witness = worker.exit_witness();
    let spin = worker
        .execute(
            "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
            &[],
            SPIN_TIMEOUT,
            4096,
        )
        .await;
    drop(worker);
    let gone = witness.is_gone().await;
    let (status, details) = match (&spin.outcome, gone) {
        (Outcome::TimedOut, true) => (
            ProbeStatus::Blocked,
            "a worker ignoring SIGTERM was killed (SIGKILL to its process group) at the deadline"
                .to_string(),
        ),
        (Outcome::TimedOut, false) => (
            ProbeStatus::Allowed,
            format!(
                "the call timed out but {} is still alive",
                witness.describe()
            ),
        ),
        (other, _) => (
            ProbeStatus::Allowed,
            format!("the spinning code was not stopped at the deadline: {other:?}"),
        ),
    };
    ProbeResult {
        id: "res.timeout_kill".into(),
        category: "resources".into(),
        status,
        details,
        required: true,
    }
}

/// The server's own soft RLIMIT_NOFILE: a probe that changes it from inside the
/// sandbox is caught here.
fn own_nofile_limit() -> u64 {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX)
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// The server's own nice value.
fn own_priority() -> i32 {
    #[cfg(unix)]
    {
        rustix::process::getpriority_process(None).unwrap_or(0)
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// One memfd attempt was refused by a wall: EPERM or EACCES; or, for the sealed memfd
/// alone, EINVAL from a kernel that does not know MFD_NOEXEC_SEAL (gVisor's Sentry),
/// which then made no memfd at all. Pure.
fn memfd_refused(a: &Attempt) -> bool {
    match a.errno.as_i64() {
        Some(1 | 13) => true,
        Some(22) => a.probe == "proc.memfd_exec.sealed",
        _ => false,
    }
}

/// A copy of the interpreter in a memfd, run through /proc/self/fd/N: blocked only if
/// every attempt was refused and the host finds no marker in the workspace.
async fn memfd_probe(
    worker: &mut Worker,
    eph: &crate::session::Ephemeral<'_>,
) -> (ProbeResult, bool) {
    let marker = format!("selftest-memfd-{}", crate::hex(&crate::random_bytes::<6>()));
    let code = format!("{PROBES_SOURCE}\nmemfd_exec({marker:?})\n");
    let run = worker.execute(&code, &[], PROBE_TIMEOUT, 1 << 16).await;
    let text = stdout_text(&run);
    let ran = eph.paths.workspace.join(&marker).exists();
    let refusals: Vec<Attempt> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Attempt>(l).ok())
        .collect();
    let all_refused = refusals.len() == 2 && refusals.iter().all(memfd_refused);
    let (status, details) = if ran {
        (
            ProbeStatus::Allowed,
            "a copy of the interpreter ran from a memfd (it wrote its marker)".to_string(),
        )
    } else if all_refused && matches!(run.outcome, Outcome::Finished(_)) {
        (
            ProbeStatus::Blocked,
            "memfd_create without MFD_NOEXEC_SEAL refused (seccomp); a sealed memfd cannot be executed".to_string(),
        )
    } else {
        (
            ProbeStatus::Inconclusive,
            format!("unexpected outcome {:?}: {}", run.outcome, text.trim()),
        )
    };
    let probe = ProbeResult {
        id: "proc.memfd_exec".into(),
        category: "processes".into(),
        status,
        details,
        required: true,
    };
    (probe, run.reusable)
}

/// Code that tries to keep working after its call returned: a spinning thread, a thread
/// that keeps printing, and (where a process can be made at all) a spinning child in a
/// session of its own, which no freeze of the worker's process group would reach. The
/// child stops by itself after a few seconds.
const AFTER_RETURN: &str = r#"import os, threading, time
def _spin():
    while True:
        pass
def _chatter():
    while True:
        print("LATE-FROM-AN-EARLIER-CALL", flush=True)
        time.sleep(0.005)
threading.Thread(target=_spin, daemon=True).start()
threading.Thread(target=_chatter, daemon=True).start()
try:
    _r, _w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        os.write(_w, b"x")
        _end = time.monotonic() + 3
        while time.monotonic() < _end:
            pass
        os._exit(0)
    os.read(_r, 1)
except OSError:
    pass
print("STARTED")
"#;
/// How long the host watches an idle worker's CPU time.
const IDLE_WATCH: Duration = Duration::from_millis(500);
/// CPU time an idle worker may show in [`IDLE_WATCH`] (accounting granularity).
const IDLE_CPU_ALLOWANCE_MS: u64 = 50;

/// `res.cpu_after_return` and `proc.late_output`: work ends with its call. Judged from
/// the host: the worker's CPU time while no call runs (its process and everything below
/// it, read from `/proc`), and what the next call's stdout holds.
async fn work_after_return(worker: &mut Worker) -> Vec<ProbeResult> {
    let started = worker
        .execute(AFTER_RETURN, &[], Duration::from_secs(10), 4096)
        .await;
    if !stdout_text(&started).contains("STARTED") || !started.reusable {
        let why = format!("the probe code did not start: {:?}", started.outcome);
        return vec![
            after_return_probe(
                "res.cpu_after_return",
                ProbeStatus::Inconclusive,
                why.clone(),
            ),
            after_return_probe("proc.late_output", ProbeStatus::Inconclusive, why),
        ];
    }
    let usage = worker.usage_probe();
    // The stop was sent before the call returned; give a busy scheduler a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = usage.sample().await;
    tokio::time::sleep(IDLE_WATCH).await;
    let after = usage.sample().await;
    let cpu = match (before, after) {
        (Some(b), Some(a)) => {
            let used = a.cpu_ms.saturating_sub(b.cpu_ms);
            let (status, verdict) = if used <= IDLE_CPU_ALLOWANCE_MS {
                (ProbeStatus::Blocked, "the worker is frozen between calls")
            } else {
                (
                    ProbeStatus::Allowed,
                    "work kept running after its call returned",
                )
            };
            after_return_probe(
                "res.cpu_after_return",
                status,
                format!(
                    "threads (and any process) left spinning used {used} ms of CPU in the {} ms after their call returned: {verdict}",
                    IDLE_WATCH.as_millis()
                ),
            )
        }
        _ => after_return_probe(
            "res.cpu_after_return",
            ProbeStatus::Inconclusive,
            "the worker's CPU time could not be read".into(),
        ),
    };
    let next = worker
        .execute(
            "import time\ntime.sleep(0.3)\nprint('NEXT-CALL')",
            &[],
            Duration::from_secs(10),
            1 << 16,
        )
        .await;
    let text = stdout_text(&next);
    let (status, details) = if text.contains("LATE-FROM-AN-EARLIER-CALL") {
        (
            ProbeStatus::Allowed,
            "a thread of an earlier call printed into the next call's stdout".to_string(),
        )
    } else if text == "NEXT-CALL\n" && next.late.from_earlier_calls > 0 {
        (
            ProbeStatus::Blocked,
            format!(
                "the next call's stdout held only its own output; {} bytes an earlier call's thread printed meanwhile were set apart",
                next.late.from_earlier_calls
            ),
        )
    } else {
        (
            ProbeStatus::Inconclusive,
            format!(
                "the next call printed {text:?} and {} late bytes were seen",
                next.late.from_earlier_calls
            ),
        )
    };
    vec![cpu, after_return_probe("proc.late_output", status, details)]
}

fn after_return_probe(id: &str, status: ProbeStatus, details: String) -> ProbeResult {
    let category = if id.starts_with("res.") {
        "resources"
    } else {
        "processes"
    };
    ProbeResult {
        id: id.into(),
        category: category.into(),
        status,
        details,
        required: true,
    }
}

fn exec_verdict(outcome: &Outcome, text: &str) -> ProbeResult {
    let (status, details) = match outcome {
        Outcome::Finished(_) if text.contains(&format!("ERRNO {}", libc::EACCES)) => (
            ProbeStatus::Blocked,
            "execve(/bin/sh) denied: EACCES (Landlock: only the interpreter may be executed)"
                .to_string(),
        ),
        Outcome::Finished(_) if text.contains(&format!("ERRNO {}", libc::EPERM)) => (
            ProbeStatus::Blocked,
            "execve(/bin/sh) denied: EPERM".to_string(),
        ),
        Outcome::Died(how) => (
            ProbeStatus::Allowed,
            format!("the worker was replaced by /bin/sh ({how})"),
        ),
        other => (
            ProbeStatus::Inconclusive,
            format!("unexpected outcome: {other:?} {}", text.trim()),
        ),
    };
    ProbeResult {
        id: "proc.exec_shell".into(),
        category: "processes".into(),
        status,
        details,
        required: true,
    }
}

fn resource_verdict(
    id: &str,
    text: &str,
    enforced: &str,
    breached: &str,
    what: &str,
) -> ProbeResult {
    let (status, details) = if text.contains(enforced) {
        (
            ProbeStatus::Blocked,
            format!("{what} failed: limit enforced"),
        )
    } else if text.contains(breached) {
        (ProbeStatus::Allowed, format!("{what} succeeded"))
    } else {
        (
            ProbeStatus::Inconclusive,
            format!("{what}: unexpected output {:?}", text.trim()),
        )
    };
    ProbeResult {
        id: id.into(),
        category: "resources".into(),
        status,
        details,
        required: true,
    }
}

/// What this machine can enforce, from the helper's report plus the backend's gaps,
/// and what the static guard cannot see (always listed, never enforced).
fn capabilities_of(
    walls: &[WallStatus],
    mode: SandboxMode,
    enforcement: &Enforcement,
) -> Vec<Capability> {
    let mut caps: Vec<Capability> = walls
        .iter()
        .map(|w| Capability {
            mechanism: w.name.clone(),
            enforced: w.enforced,
            reason: w.detail.clone(),
        })
        .collect();
    if mode == SandboxMode::Off {
        caps.push(Capability {
            mechanism: "host_sandbox".into(),
            enforced: false,
            reason: "HOST_SANDBOX=off: Landlock, seccomp, namespaces, privilege drop and rlimits are all switched off".into(),
        });
    }
    caps.extend(enforcement.gaps.iter().cloned());
    caps.push(report::guard_blind_spots());
    caps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sealed_memfd_may_be_refused_as_unknown() {
        let attempt = |probe: &str, errno: i64| Attempt {
            probe: probe.into(),
            ok: false,
            errno: errno.into(),
            detail: String::new(),
            data: None,
        };
        assert!(memfd_refused(&attempt("proc.memfd_exec.plain", 1)));
        assert!(memfd_refused(&attempt("proc.memfd_exec.sealed", 13)));
        assert!(memfd_refused(&attempt("proc.memfd_exec.sealed", 22)));
        assert!(!memfd_refused(&attempt("proc.memfd_exec.plain", 22)));
        assert!(!memfd_refused(&attempt("proc.memfd_exec.sealed", 12)));
    }
}
