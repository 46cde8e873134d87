//! The selftest report and the pure rules that turn a probe's attempt plus host-side
//! evidence into a verdict. A probe is `blocked` only when the attempt failed the way a
//! wall fails AND the host saw no effect; a timeout or an unexpected error is
//! `inconclusive`, never a pass.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::capability::Capability;
use crate::worker::report::WallStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// The forbidden operation failed and the host saw no effect.
    Blocked,
    /// The forbidden operation succeeded (or the host saw its effect).
    Allowed,
    /// The probe could not decide (timeout, unexpected error, target absent).
    Inconclusive,
    /// The mechanism does not exist on this platform.
    Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeResult {
    /// e.g. fs.canary_read, net.loopback_listener, proc.fork, res.memory_limit.
    pub id: String,
    /// filesystem, network, processes, resources or privileges.
    pub category: String,
    pub status: ProbeStatus,
    /// Which mechanism stopped it, or why it could not be judged.
    pub details: String,
    /// Must be `blocked` for HOST_SANDBOX=require to run code.
    pub required: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Isolation {
    pub status: ProbeStatus,
    pub details: String,
}

/// The `capabilities` entry that names what the static guard cannot see. No probe can
/// show these (the guard passes the code; what stops it is the OS layer the probes
/// test), so the entry is listed, never enforced, in every selftest result.
pub const GUARD_BLIND_SPOTS: &str = "guard_blind_spots";

/// What the static guard does not see, said in every selftest result so nobody reads
/// the guard as the wall; the OS walls listed beside it are what stands there.
pub fn guard_blind_spots() -> Capability {
    Capability {
        mechanism: GUARD_BLIND_SPOTS.into(),
        enforced: false,
        reason: "what the static guard cannot see; the OS walls above stand behind it: \
                 (1) C-level protocol lookups: numpy maps any address through an \
                 `__array_interface__` (or `__array_struct__`, `__array__`, a buffer) that a \
                 plain `__getattr__`/`__getattribute__` supplies, which gives allowed code raw \
                 memory access in the worker; such classes are not refused; \
                 (2) a library method called through its class on a foreign `self`; \
                 (3) templates read from files (a template engine renders what the code wrote \
                 to disk, which the guard never reads); \
                 (4) code in packages nobody judged: packages outside the audited set, and \
                 the audit's findings still waiting for a guard rule"
            .into(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LimitsInForce {
    pub memory_bytes: u64,
    pub file_size_bytes: u64,
    pub timeout_s: u64,
    pub timeout_cap_s: u64,
    pub output_bytes: u64,
    pub processes: Option<u64>,
    /// What holds `processes` (or why there is no such limit).
    pub processes_counted_by: String,
    /// Signals that may be queued to a worker at once (RLIMIT_SIGPENDING), where the
    /// worker is a host process.
    pub pending_signals: Option<u64>,
    pub open_files: u64,
    pub cpu_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SelftestReport {
    /// The backend that really runs code.
    pub backend: String,
    pub configured_backend: String,
    pub resolved_backend: String,
    /// The container runtime the probes ran under, configured and resolved (the Docker
    /// backend): under gVisor's `runsc` the Sentry serves their system calls and /proc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<crate::backend::ContainerRuntime>,
    /// HOST_SANDBOX as configured: off, best-effort or require.
    pub host_sandbox: String,
    /// HOST_SANDBOX_NETWORK: deny or allow.
    pub network_mode: String,
    pub filesystem_isolation: Isolation,
    pub network_isolation: Isolation,
    pub memory_limit_enforced: bool,
    /// CPUs the sandboxed code can see (it cannot use more at once).
    pub hardware_concurrency_ceiling: Option<u64>,
    pub landlock_abi: Option<i32>,
    pub seccomp: String,
    pub limits: LimitsInForce,
    /// The walls the sandbox helper installed (or could not), as it reported them.
    pub walls: Vec<WallStatus>,
    /// What this machine can enforce, with a reason for every gap.
    pub capabilities: Vec<Capability>,
    pub probes: Vec<ProbeResult>,
    /// Required probes that are not `blocked`.
    pub failing_required: Vec<String>,
    /// Set when no worker could be started at all.
    pub worker_error: Option<String>,
    pub python: String,
    pub platform: String,
    pub duration_ms: u64,
}

/// One probe's own account of its attempt (a JSON line printed inside the sandbox).
#[derive(Debug, Clone, Deserialize)]
pub struct Attempt {
    pub probe: String,
    /// The attempt succeeded.
    pub ok: bool,
    /// An errno, the string "timeout", or null.
    #[serde(default)]
    pub errno: serde_json::Value,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub data: Option<String>,
}

impl Attempt {
    fn errno(&self) -> Option<i32> {
        self.errno.as_i64().and_then(|n| i32::try_from(n).ok())
    }

    fn timed_out(&self) -> bool {
        self.errno.as_str() == Some("timeout")
    }
}

/// What the host saw while the probes ran.
#[derive(Debug, Clone, Default)]
pub struct HostEvidence {
    pub canary: String,
    /// The canary file (and its directory) exist on the host: a probe that finds no
    /// such file is looking at another world.
    pub canary_exists: bool,
    pub write_target_exists: bool,
    pub loopback_accepted: bool,
    pub unix_accepted: bool,
    pub ssh_dir_exists: bool,
    pub etc_shadow_exists: bool,
    pub network_denied: bool,
    /// The server's own pid (alive: it is the one judging).
    pub server_pid: u32,
    /// The server's RLIMIT_NOFILE or nice value changed while the probes ran.
    pub server_rlimit_changed: bool,
    pub server_priority_changed: bool,
    /// The helper reported W^X as enforced (the kernel has PR_SET_MDWE).
    pub w_xor_x_expected: bool,
}

pub fn category_of(id: &str) -> &'static str {
    match id.split('.').next() {
        Some("fs") => "filesystem",
        Some("net") => "network",
        Some("proc") => "processes",
        Some("res") => "resources",
        Some("priv") => "privileges",
        Some("mem") => "processes",
        _ => "other",
    }
}

fn denied(errno: Option<i32>) -> bool {
    matches!(
        errno,
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS)
    )
}

fn errno_name(errno: Option<i32>) -> String {
    match errno {
        Some(libc::EACCES) => "EACCES (Landlock)".into(),
        Some(libc::EPERM) => "EPERM (seccomp or missing privilege)".into(),
        Some(libc::EROFS) => "EROFS (read-only filesystem)".into(),
        Some(libc::ENETUNREACH) => "ENETUNREACH (empty network namespace)".into(),
        Some(libc::EAGAIN) => "EAGAIN (process limit)".into(),
        Some(n) => format!("errno {n}"),
        None => "no errno".into(),
    }
}

/// "No such file" for a path the host knows exists: the worker lives in another world.
fn absent_in_world(a: &Attempt, exists_on_host: bool, what: &str) -> Option<(ProbeStatus, String)> {
    (a.errno() == Some(libc::ENOENT) && exists_on_host).then(|| {
        (
            ProbeStatus::Blocked,
            format!(
                "{what}: the path does not exist inside the worker's private world (it does on the host)"
            ),
        )
    })
}

/// What a probe's attempt and the host's evidence add up to.
type Verdict = (ProbeStatus, String);

/// Judges one attempt. Pure.
pub fn judge(a: &Attempt, host: &HostEvidence) -> ProbeResult {
    // Probes that only mean something where the server's settings ask for the wall
    // (the network, W^X) or where their target exists are not required otherwise.
    let mut required = true;
    let (status, details) = match a.probe.split('.').next() {
        Some("fs") => judge_fs(a, host, &mut required),
        Some("net") => judge_net(a, host, &mut required),
        Some("proc") => judge_proc(a, host),
        Some("mem" | "priv") => judge_mem_priv(a, host, &mut required),
        _ => unknown_probe(a),
    };
    ProbeResult {
        id: a.probe.clone(),
        category: category_of(&a.probe).to_string(),
        status,
        details,
        required,
    }
}

/// A probe this build does not know: never a pass.
fn unknown_probe(a: &Attempt) -> Verdict {
    (
        ProbeStatus::Inconclusive,
        format!("unknown probe {}: {}", a.probe, a.detail),
    )
}

/// The usual reading of an attempt: success is allowed, a wall's errno blocked, a
/// timeout or anything else inconclusive.
fn standard(a: &Attempt, what: &str) -> Verdict {
    if a.ok {
        (ProbeStatus::Allowed, format!("{what} succeeded"))
    } else if a.timed_out() {
        (
            ProbeStatus::Inconclusive,
            format!("{what} timed out; a timeout never counts as blocked"),
        )
    } else if denied(a.errno()) {
        (
            ProbeStatus::Blocked,
            format!("{what} denied: {}", errno_name(a.errno())),
        )
    } else {
        (
            ProbeStatus::Inconclusive,
            format!("{what} failed unexpectedly: {}", a.detail),
        )
    }
}

/// The file-system probes.
fn judge_fs(a: &Attempt, host: &HostEvidence, required: &mut bool) -> Verdict {
    let leaked =
        !host.canary.is_empty() && a.data.as_deref().is_some_and(|d| d.contains(&host.canary));
    match a.probe.as_str() {
        "fs.canary_read" | "fs.symlink_escape" => {
            if leaked {
                (
                    ProbeStatus::Allowed,
                    "the canary's content came back to the host".to_string(),
                )
            } else {
                absent_in_world(a, host.canary_exists, "reading the host's canary file")
                    .unwrap_or_else(|| standard(a, "reading the host's canary file"))
            }
        }
        "fs.stat_outside" => {
            let what = "stat() of the host's canary file (size, owner, times)";
            absent_in_world(a, host.canary_exists, what).unwrap_or_else(|| standard(a, what))
        }
        "fs.inotify" => {
            let what = "an inotify watch on a host directory";
            absent_in_world(a, host.canary_exists, what).unwrap_or_else(|| standard(a, what))
        }
        "fs.write_outside" => {
            if host.write_target_exists {
                (
                    ProbeStatus::Allowed,
                    "the file appeared outside the workspace".to_string(),
                )
            } else {
                absent_in_world(a, host.canary_exists, "writing outside the workspace")
                    .unwrap_or_else(|| standard(a, "writing outside the workspace"))
            }
        }
        "fs.etc_shadow" => {
            if let Some(verdict) = absent_in_world(a, host.etc_shadow_exists, "reading /etc/shadow")
            {
                verdict
            } else if a.errno() == Some(libc::ENOENT) {
                *required = false;
                (ProbeStatus::Inconclusive, "no /etc/shadow here".to_string())
            } else {
                standard(a, "reading /etc/shadow")
            }
        }
        "fs.ssh_dir" => {
            if host.ssh_dir_exists {
                absent_in_world(a, true, "listing ~/.ssh")
                    .unwrap_or_else(|| standard(a, "listing ~/.ssh"))
            } else {
                *required = false;
                (
                ProbeStatus::Inconclusive,
                "the server's ~/.ssh does not exist, so nothing to judge (the canary probe covers reads outside the workspace)".to_string(),
            )
            }
        }
        _ => unknown_probe(a),
    }
}

/// The network probes: required only when the settings deny the network.
fn judge_net(a: &Attempt, host: &HostEvidence, required: &mut bool) -> Verdict {
    let verdict = match a.probe.as_str() {
        "net.af_inet_socket" => standard(a, "creating an AF_INET socket"),
        "net.test_net_connect" => {
            if a.ok {
                (
                    ProbeStatus::Allowed,
                    "connected to the TEST-NET probe address".to_string(),
                )
            } else if denied(a.errno()) {
                (
                    ProbeStatus::Blocked,
                    format!("denied before any packet: {}", errno_name(a.errno())),
                )
            } else {
                (
                    ProbeStatus::Inconclusive,
                    format!(
                        "the socket was created but the connect did not complete ({}); a SYN may have left, so this never counts as blocked",
                        if a.timed_out() {
                            "timeout".to_string()
                        } else {
                            a.detail.clone()
                        }
                    ),
                )
            }
        }
        "net.loopback_listener" | "net.unix_listener" => {
            let accepted = if a.probe == "net.loopback_listener" {
                host.loopback_accepted
            } else {
                host.unix_accepted
            };
            if a.ok || accepted {
                (
                    ProbeStatus::Allowed,
                    "the server's listener accepted a connection".to_string(),
                )
            } else if a.timed_out() || a.errno().is_none() {
                (
                    ProbeStatus::Inconclusive,
                    format!("connect did not finish: {}", a.detail),
                )
            } else {
                (
                    ProbeStatus::Blocked,
                    format!(
                        "the listener saw nothing; connect failed with {}",
                        errno_name(a.errno())
                    ),
                )
            }
        }
        _ => return unknown_probe(a),
    };
    *required = host.network_denied;
    verdict
}

/// The process probes.
fn judge_proc(a: &Attempt, host: &HostEvidence) -> Verdict {
    match a.probe.as_str() {
        "proc.fork" => {
            if a.ok {
                (ProbeStatus::Allowed, "fork succeeded".to_string())
            } else if denied(a.errno()) || a.errno() == Some(libc::EAGAIN) {
                (
                    ProbeStatus::Blocked,
                    format!("fork denied: {}", errno_name(a.errno())),
                )
            } else {
                (ProbeStatus::Inconclusive, a.detail.clone())
            }
        }
        "proc.signal_server" => {
            if a.errno() == Some(libc::ESRCH) && host.server_pid != 1 {
                (
                    ProbeStatus::Blocked,
                    "the server, alive, is not visible from the worker's PID namespace".to_string(),
                )
            } else {
                standard(a, "signalling the server")
            }
        }
        "proc.enumerate" => {
            let ours = host.server_pid.to_string();
            match a.data.as_deref() {
                _ if host.server_pid == 1 => (
                    ProbeStatus::Inconclusive,
                    "the server is PID 1 here, so its absence cannot be told apart".to_string(),
                ),
                Some(pids) if a.ok && pids.split_whitespace().any(|p| p == ours) => (
                    ProbeStatus::Allowed,
                    format!(
                        "/proc lists the server's pid {ours} among {} processes",
                        pids.split_whitespace().count()
                    ),
                ),
                Some(pids) if a.ok => (
                    ProbeStatus::Blocked,
                    format!("/proc lists only the worker's own namespace: {pids}"),
                ),
                _ => standard(a, "listing /proc"),
            }
        }
        "proc.other_rlimit" | "proc.other_priority" => {
            let changed = if a.probe == "proc.other_rlimit" {
                host.server_rlimit_changed
            } else {
                host.server_priority_changed
            };
            if changed || a.ok {
                (
                    ProbeStatus::Allowed,
                    "the server's own limit or priority changed".to_string(),
                )
            } else if a.errno() == Some(libc::ESRCH) && host.server_pid != 1 {
                (
                    ProbeStatus::Blocked,
                    "the server is not visible from the worker's PID namespace".to_string(),
                )
            } else {
                standard(a, "changing another process's limit or priority")
            }
        }
        _ => unknown_probe(a),
    }
}

/// Memory (W^X) and privilege probes.
fn judge_mem_priv(a: &Attempt, host: &HostEvidence, required: &mut bool) -> Verdict {
    match a.probe.as_str() {
        "mem.rwx" => {
            *required = host.w_xor_x_expected;
            if a.errno() == Some(libc::EACCES) {
                (
                    ProbeStatus::Blocked,
                    "mapping memory writable and executable refused: EACCES (W^X, PR_SET_MDWE)"
                        .to_string(),
                )
            } else {
                standard(a, "mapping memory writable and executable")
            }
        }
        "priv.no_new_privs" | "priv.capabilities" | "priv.not_root" => {
            if a.ok {
                (ProbeStatus::Allowed, a.detail.clone())
            } else if a.errno().is_some() {
                (ProbeStatus::Inconclusive, a.detail.clone())
            } else {
                (ProbeStatus::Blocked, a.detail.clone())
            }
        }
        _ => unknown_probe(a),
    }
}

/// Folds a category's probes into one status: any `allowed` wins; all required ones
/// `blocked` is `blocked`; otherwise `inconclusive`.
pub fn aggregate(probes: &[ProbeResult], category: &str) -> Isolation {
    let mine: Vec<&ProbeResult> = probes.iter().filter(|p| p.category == category).collect();
    if mine.is_empty() {
        return Isolation {
            status: ProbeStatus::Inconclusive,
            details: "no probe ran".to_string(),
        };
    }
    let summary = mine
        .iter()
        .map(|p| format!("{}: {}", p.id, status_word(p.status)))
        .collect::<Vec<_>>()
        .join(", ");
    let status = if mine.iter().any(|p| p.status == ProbeStatus::Allowed) {
        ProbeStatus::Allowed
    } else if mine
        .iter()
        .filter(|p| p.required)
        .all(|p| p.status == ProbeStatus::Blocked)
        && mine.iter().any(|p| p.status == ProbeStatus::Blocked)
    {
        ProbeStatus::Blocked
    } else {
        ProbeStatus::Inconclusive
    };
    Isolation {
        status,
        details: summary,
    }
}

pub fn status_word(s: ProbeStatus) -> &'static str {
    match s {
        ProbeStatus::Blocked => "blocked",
        ProbeStatus::Allowed => "allowed",
        ProbeStatus::Inconclusive => "inconclusive",
        ProbeStatus::Unsupported => "unsupported",
    }
}

/// Required probes that are not blocked, as "id (status)".
pub fn failing_required(probes: &[ProbeResult]) -> Vec<String> {
    probes
        .iter()
        .filter(|p| p.required && p.status != ProbeStatus::Blocked)
        .map(|p| format!("{} ({})", p.id, status_word(p.status)))
        .collect()
}

/// Why code must not run under HOST_SANDBOX=require, given the startup probes; `None`
/// when every required probe is blocked.
pub fn gate_reason(report: &SelftestReport) -> Option<String> {
    if let Some(e) = &report.worker_error {
        return Some(format!(
            "HOST_SANDBOX=require and the sandboxed worker could not start: {e}"
        ));
    }
    if report.failing_required.is_empty() {
        return None;
    }
    Some(format!(
        "HOST_SANDBOX=require and these startup probes were not blocked: {}; run `warden selftest --human` for details",
        report.failing_required.join(", ")
    ))
}

/// A readable table for `warden selftest --human`.
pub fn render_human(report: &SelftestReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "warden selftest: backend {} (configured {}), HOST_SANDBOX={}, network {}, {} on {}\n",
        report.resolved_backend,
        report.configured_backend,
        report.host_sandbox,
        report.network_mode,
        report.python,
        report.platform
    ));
    if let Some(r) = &report.container_runtime {
        out.push_str(&format!(
            "engine: {} {}{}; container runtime: {} (configured {}), kernel {}{}\n",
            r.engine,
            r.engine_version,
            if r.rootless { ", rootless" } else { "" },
            r.resolved,
            r.configured.as_deref().unwrap_or("the engine's default"),
            r.kernel,
            if r.user_space_kernel {
                ": gVisor's Sentry serves the probes' system calls and /proc"
            } else {
                ""
            }
        ));
    }
    out.push_str(&format!(
        "filesystem isolation: {}   network isolation: {}   memory limit enforced: {}   landlock ABI: {}\n",
        status_word(report.filesystem_isolation.status),
        status_word(report.network_isolation.status),
        report.memory_limit_enforced,
        report
            .landlock_abi
            .map_or("none".to_string(), |a| a.to_string())
    ));
    if let Some(e) = &report.worker_error {
        out.push_str(&format!("WORKER COULD NOT START: {e}\n"));
    }
    out.push_str("\nprobe                        status        details\n");
    for p in &report.probes {
        out.push_str(&format!(
            "{:<28} {:<13} {}\n",
            p.id,
            status_word(p.status),
            p.details
        ));
    }
    out.push_str("\nmechanism            enforced  reason\n");
    for c in &report.capabilities {
        out.push_str(&format!(
            "{:<20} {:<9} {}\n",
            c.mechanism,
            if c.enforced { "yes" } else { "no" },
            c.reason
        ));
    }
    if !report.failing_required.is_empty() {
        out.push_str(&format!(
            "\nREQUIRED PROBES NOT BLOCKED: {}\n",
            report.failing_required.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_guard_blind_spots_are_named_and_never_claimed_enforced() {
        let c = guard_blind_spots();
        assert_eq!(c.mechanism, GUARD_BLIND_SPOTS);
        assert!(!c.enforced);
        for gap in [
            "__array_interface__",
            "__getattr__",
            "foreign `self`",
            "templates read from files",
            "packages nobody judged",
            "OS walls",
        ] {
            assert!(c.reason.contains(gap), "{gap}: {}", c.reason);
        }
    }

    fn attempt(probe: &str, ok: bool, errno: serde_json::Value, data: Option<&str>) -> Attempt {
        Attempt {
            probe: probe.into(),
            ok,
            errno,
            detail: "d".into(),
            data: data.map(str::to_string),
        }
    }

    fn host() -> HostEvidence {
        HostEvidence {
            canary: "canary-123".into(),
            network_denied: true,
            ssh_dir_exists: true,
            ..HostEvidence::default()
        }
    }

    #[test]
    fn canary_read_is_judged_by_what_came_back() {
        let h = host();
        let r = judge(&attempt("fs.canary_read", false, json!(13), None), &h);
        assert_eq!(r.status, ProbeStatus::Blocked);
        let r = judge(
            &attempt("fs.canary_read", true, json!(null), Some("canary-123")),
            &h,
        );
        assert_eq!(r.status, ProbeStatus::Allowed);
        // Even a "failure" that leaks the content is a breach.
        let r = judge(
            &attempt("fs.canary_read", false, json!(13), Some("x canary-123")),
            &h,
        );
        assert_eq!(r.status, ProbeStatus::Allowed);
        let r = judge(&attempt("fs.canary_read", false, json!(2), None), &h);
        assert_eq!(r.status, ProbeStatus::Inconclusive);
    }

    #[test]
    fn a_missing_file_is_blocked_only_when_the_host_has_it() {
        let mut h = host();
        h.canary_exists = true;
        for probe in [
            "fs.canary_read",
            "fs.stat_outside",
            "fs.write_outside",
            "fs.inotify",
        ] {
            let r = judge(&attempt(probe, false, json!(2), None), &h);
            assert_eq!(r.status, ProbeStatus::Blocked, "{probe}");
        }
        h.canary_exists = false;
        let r = judge(&attempt("fs.stat_outside", false, json!(2), None), &h);
        assert_eq!(r.status, ProbeStatus::Inconclusive);
        let r = judge(
            &attempt("fs.stat_outside", true, json!(null), Some("size=3")),
            &h,
        );
        assert_eq!(r.status, ProbeStatus::Allowed);
    }

    #[test]
    fn proc_enumeration_is_judged_by_the_servers_own_pid() {
        let mut h = host();
        h.server_pid = 4321;
        let seen = judge(
            &attempt("proc.enumerate", true, json!(null), Some("1 77 4321")),
            &h,
        );
        assert_eq!(seen.status, ProbeStatus::Allowed);
        let own = judge(&attempt("proc.enumerate", true, json!(null), Some("1")), &h);
        assert_eq!(own.status, ProbeStatus::Blocked);
        h.server_rlimit_changed = true;
        let r = judge(&attempt("proc.other_rlimit", false, json!(3), None), &h);
        assert_eq!(r.status, ProbeStatus::Allowed, "host evidence wins");
        let r = judge(&attempt("proc.other_priority", false, json!(3), None), &h);
        assert_eq!(r.status, ProbeStatus::Blocked, "ESRCH: not visible");
    }

    #[test]
    fn a_timeout_is_never_blocked() {
        let h = host();
        for probe in [
            "net.test_net_connect",
            "net.loopback_listener",
            "fs.canary_read",
        ] {
            let r = judge(&attempt(probe, false, json!("timeout"), None), &h);
            assert_eq!(r.status, ProbeStatus::Inconclusive, "{probe}");
        }
    }

    #[test]
    fn host_evidence_overrides_the_probes_own_account() {
        let mut h = host();
        h.loopback_accepted = true;
        let r = judge(&attempt("net.loopback_listener", false, json!(1), None), &h);
        assert_eq!(r.status, ProbeStatus::Allowed);
        h.write_target_exists = true;
        let r = judge(&attempt("fs.write_outside", false, json!(13), None), &h);
        assert_eq!(r.status, ProbeStatus::Allowed);
    }

    #[test]
    fn network_probes_are_informational_when_network_is_allowed() {
        let mut h = host();
        h.network_denied = false;
        let r = judge(&attempt("net.af_inet_socket", true, json!(null), None), &h);
        assert_eq!(r.status, ProbeStatus::Allowed);
        assert!(!r.required);
        assert!(failing_required(&[r]).is_empty());
    }

    fn report_with(failing: Vec<String>, worker_error: Option<String>) -> SelftestReport {
        SelftestReport {
            backend: "host".into(),
            configured_backend: "host".into(),
            resolved_backend: "host".into(),
            container_runtime: None,
            host_sandbox: "require".into(),
            network_mode: "deny".into(),
            filesystem_isolation: Isolation {
                status: ProbeStatus::Blocked,
                details: String::new(),
            },
            network_isolation: Isolation {
                status: ProbeStatus::Blocked,
                details: String::new(),
            },
            memory_limit_enforced: true,
            hardware_concurrency_ceiling: Some(2),
            landlock_abi: Some(7),
            seccomp: "enforced".into(),
            limits: LimitsInForce {
                memory_bytes: 1,
                file_size_bytes: 1,
                timeout_s: 1,
                timeout_cap_s: 120,
                output_bytes: 1,
                processes: None,
                processes_counted_by: String::new(),
                pending_signals: None,
                open_files: 1,
                cpu_seconds: 1,
            },
            walls: vec![],
            capabilities: vec![],
            probes: vec![],
            failing_required: failing,
            worker_error,
            python: String::new(),
            platform: String::new(),
            duration_ms: 0,
        }
    }

    #[test]
    fn require_gate_names_the_failing_probes_or_the_missing_worker() {
        assert_eq!(gate_reason(&report_with(vec![], None)), None);
        let reason =
            gate_reason(&report_with(vec!["fs.canary_read (allowed)".into()], None)).unwrap();
        assert!(reason.contains("fs.canary_read (allowed)"), "{reason}");
        let reason = gate_reason(&report_with(
            vec![],
            Some("wall 'landlock': missing".into()),
        ))
        .unwrap();
        assert!(reason.contains("landlock"), "{reason}");
    }

    #[test]
    fn aggregation_prefers_allowed_then_requires_all_blocked() {
        let p = |id: &str, status, required| ProbeResult {
            id: id.into(),
            category: "filesystem".into(),
            status,
            details: String::new(),
            required,
        };
        let blocked = vec![
            p("a", ProbeStatus::Blocked, true),
            p("b", ProbeStatus::Inconclusive, false),
        ];
        assert_eq!(
            aggregate(&blocked, "filesystem").status,
            ProbeStatus::Blocked
        );
        let mixed = vec![
            p("a", ProbeStatus::Blocked, true),
            p("b", ProbeStatus::Inconclusive, true),
        ];
        assert_eq!(
            aggregate(&mixed, "filesystem").status,
            ProbeStatus::Inconclusive
        );
        let breach = vec![
            p("a", ProbeStatus::Allowed, true),
            p("b", ProbeStatus::Blocked, true),
        ];
        assert_eq!(
            aggregate(&breach, "filesystem").status,
            ProbeStatus::Allowed
        );
        assert_eq!(failing_required(&breach), vec!["a (allowed)".to_string()]);
    }
}
