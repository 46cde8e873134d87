//! A started worker, whatever backend started it: the protocol [`Channel`] plus the
//! process behind it, which only its backend knows how to kill.

use std::time::Duration;

use crate::backend::StartError;
use crate::backend::host::spawn::{HostProcess, kill_group};
use crate::backend::protocol::{
    Channel, Gate, Handshake, InputFile, OutputTap, RunOutput, WorkerProcess,
};
use crate::sandbox::report::SandboxReport;

/// Hands a new worker its policy and waits for its handshake, whatever backend started
/// it; each way the start can fail becomes the [`StartError`] a user reads, with how the
/// process ended and the tail of its stderr when it died.
pub async fn handshake(
    channel: &mut Channel,
    process: &mut impl WorkerProcess,
    policy_json: &[u8],
) -> Result<SandboxReport, StartError> {
    channel.send_policy(policy_json).await?;
    match channel.handshake().await {
        Ok(report) => Ok(report),
        Err(Handshake::Refused { wall, message }) => Err(StartError::Refused { wall, message }),
        Err(Handshake::HelperGone) => Err(StartError::HelperDied {
            status: process.wait_exit().await,
            stderr: channel.stderr_tail().await,
        }),
        Err(Handshake::PythonGone) => Err(StartError::PythonDied {
            status: process.wait_exit().await,
            stderr: channel.stderr_tail().await,
        }),
        Err(Handshake::Unexpected(what)) => Err(StartError::Protocol(what)),
        Err(Handshake::Io(e)) => Err(StartError::Io(e)),
    }
}

/// The process behind a worker, per backend (static dispatch). (On Windows the host
/// variant is uninhabited, hence the size difference.)
#[allow(clippy::large_enum_variant)]
pub enum WorkerProcessKind {
    Host(HostProcess),
    #[cfg(feature = "docker")]
    Docker(crate::backend::docker::container::DockerProcess),
}

impl WorkerProcess for WorkerProcessKind {
    fn kill(&mut self) {
        match self {
            WorkerProcessKind::Host(p) => p.kill(),
            #[cfg(feature = "docker")]
            WorkerProcessKind::Docker(p) => p.kill(),
        }
    }

    async fn wait_exit(&mut self) -> String {
        match self {
            WorkerProcessKind::Host(p) => p.wait_exit().await,
            #[cfg(feature = "docker")]
            WorkerProcessKind::Docker(p) => p.wait_exit().await,
        }
    }

    fn freeze(&mut self) {
        match self {
            WorkerProcessKind::Host(p) => p.freeze(),
            #[cfg(feature = "docker")]
            WorkerProcessKind::Docker(p) => p.freeze(),
        }
    }

    fn thaw(&mut self) {
        match self {
            WorkerProcessKind::Host(p) => p.thaw(),
            #[cfg(feature = "docker")]
            WorkerProcessKind::Docker(p) => p.thaw(),
        }
    }
}

/// Kills the worker if a call is abandoned midway (its future dropped), so cancelled
/// code cannot keep running unseen.
struct KillOnDrop {
    target: KillTarget,
    armed: bool,
}

#[derive(Debug, Clone)]
enum KillTarget {
    HostGroup(i32),
    #[cfg(feature = "docker")]
    Container(crate::backend::docker::container::Removal),
}

impl KillTarget {
    fn fire(&self) {
        match self {
            KillTarget::HostGroup(pid) => kill_group(*pid),
            #[cfg(feature = "docker")]
            KillTarget::Container(removal) => removal.fire(),
        }
    }
}

/// Kills a worker from outside the call that holds it (at shutdown, while a call runs).
/// Only valid while the worker it came from is alive: take it when a call starts and
/// drop it when the call returns.
#[derive(Debug, Clone)]
pub struct KillSwitch(KillTarget);

impl KillSwitch {
    pub fn fire(&self) {
        self.0.fire();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.target.fire();
        }
    }
}

/// Something that can later tell whether the worker is really gone.
#[derive(Debug, Clone)]
pub enum ExitWitness {
    HostPid(i32),
    #[cfg(feature = "docker")]
    Container(bollard::Docker, String),
}

impl ExitWitness {
    /// The worker (and, on the host, its group leader) no longer exists.
    pub async fn is_gone(&self) -> bool {
        match self {
            ExitWitness::HostPid(pid) => host_pid_gone(*pid),
            #[cfg(feature = "docker")]
            ExitWitness::Container(docker, id) => {
                // Removal runs in the background: give it a moment.
                for _ in 0..50 {
                    let running = docker
                        .inspect_container(id, None)
                        .await
                        .ok()
                        .and_then(|i| i.state)
                        .and_then(|s| s.running);
                    if running != Some(true) {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                false
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ExitWitness::HostPid(pid) => format!("pid {pid}"),
            #[cfg(feature = "docker")]
            ExitWitness::Container(_, id) => format!("container {id}"),
        }
    }
}

/// What a worker uses: CPU time over its life, resident and proportional memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub cpu_ms: u64,
    pub rss_bytes: u64,
    /// `None` where the kernel does not let the server read it.
    pub pss_bytes: Option<u64>,
}

/// Looks at a worker from outside (its memory and CPU) without holding it, so it can be
/// read while the worker is in a call.
#[derive(Debug, Clone)]
pub enum UsageProbe {
    HostPid(i32),
    /// A container's worker: the container's processes in this machine's `/proc` (a
    /// local engine: `pid` is the container's init), else the engine's statistics.
    #[cfg(feature = "docker")]
    Container {
        docker: bollard::Docker,
        id: String,
        pid: Option<i32>,
    },
}

impl UsageProbe {
    /// `None` once the worker is gone, or when it can only be asked of a remote engine
    /// (see [`UsageProbe::sample`]).
    pub fn read(&self) -> Option<Usage> {
        match self {
            UsageProbe::HostPid(pid) => crate::backend::host::usage::of_tree(*pid),
            #[cfg(feature = "docker")]
            UsageProbe::Container { id, pid, .. } => {
                crate::backend::docker::container::local_usage(id, (*pid)?)
            }
        }
    }

    /// Like [`UsageProbe::read`], and for a remote engine's container asks the engine.
    pub async fn sample(&self) -> Option<Usage> {
        match self {
            #[cfg(feature = "docker")]
            UsageProbe::Container {
                docker,
                id,
                pid: None,
            } => crate::backend::docker::container::engine_usage(docker, id).await,
            other => other.read(),
        }
    }
}

/// No process `pid` exists any more, not even as a zombie (signal 0 says ESRCH).
#[cfg(unix)]
fn host_pid_gone(pid: i32) -> bool {
    use rustix::process::{Pid, test_kill_process};
    Pid::from_raw(pid).is_none_or(|pid| test_kill_process(pid) == Err(rustix::io::Errno::SRCH))
}

#[cfg(not(unix))]
fn host_pid_gone(_pid: i32) -> bool {
    true
}

pub struct Worker {
    channel: Channel,
    process: WorkerProcessKind,
    report: SandboxReport,
    /// The egress proxy serving this worker's world, when its network is proxied.
    egress: Option<crate::egress::Link>,
}

impl Worker {
    pub fn new(channel: Channel, process: WorkerProcessKind, report: SandboxReport) -> Worker {
        Worker {
            channel,
            process,
            report,
            egress: None,
        }
    }

    /// Ties the worker to the proxy serving its world (the link ends with the worker).
    pub fn attach_egress(&mut self, link: crate::egress::Link) {
        self.egress = Some(link);
    }

    /// Names the session whose traffic this worker's proxy connections are.
    pub fn set_egress_session(&self, session: &str) {
        if let Some(link) = &self.egress {
            link.set_session(session);
        }
    }

    /// The proxy's refusals and cuts since the last call, one line each.
    pub fn take_egress_refusals(&self) -> Vec<String> {
        self.egress
            .as_ref()
            .map(crate::egress::Link::take_refused)
            .unwrap_or_default()
    }

    /// Stops the worker until its next call (warm workers wait frozen).
    pub fn freeze(&mut self) {
        self.process.freeze();
    }

    pub fn usage_probe(&self) -> UsageProbe {
        match &self.process {
            WorkerProcessKind::Host(p) => UsageProbe::HostPid(p.pid()),
            #[cfg(feature = "docker")]
            WorkerProcessKind::Docker(p) => UsageProbe::Container {
                docker: p.docker().clone(),
                id: p.id().to_string(),
                pid: p.host_pid(),
            },
        }
    }

    /// A previous call on this worker was abandoned midway.
    pub fn is_busy(&self) -> bool {
        self.channel.is_busy()
    }

    /// The walls standing around this worker, as its sandbox reported them.
    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    /// Streams the next call's stdout to `tap` as well, while it runs.
    pub fn tap_stdout(&mut self, tap: Option<OutputTap>) {
        self.channel.tap_stdout(tap);
    }

    /// A handle that kills this worker from elsewhere (see [`KillSwitch`]).
    pub fn kill_switch(&self) -> KillSwitch {
        KillSwitch(self.kill_target())
    }

    fn kill_target(&self) -> KillTarget {
        match &self.process {
            WorkerProcessKind::Host(p) => KillTarget::HostGroup(p.pid()),
            #[cfg(feature = "docker")]
            WorkerProcessKind::Docker(p) => KillTarget::Container(p.removal()),
        }
    }

    pub fn exit_witness(&self) -> ExitWitness {
        match &self.process {
            WorkerProcessKind::Host(p) => ExitWitness::HostPid(p.pid()),
            #[cfg(feature = "docker")]
            WorkerProcessKind::Docker(p) => {
                ExitWitness::Container(p.docker().clone(), p.id().to_string())
            }
        }
    }

    /// Runs one request with a wall-clock limit; on timeout the worker is killed and the
    /// output printed until then is returned. The worker is thawed for the call and frozen
    /// again once its output is complete, so nothing it started runs between calls.
    pub async fn execute(
        &mut self,
        code: &str,
        inputs: &[InputFile],
        timeout: Duration,
        output_cap: usize,
    ) -> RunOutput {
        self.execute_gated(code, inputs, timeout, output_cap, None)
            .await
    }

    /// [`Worker::execute`], the code held until `gate` says it may run (see
    /// [`super::protocol::Gate`]); `Outcome::Withheld` when it may not.
    pub async fn execute_gated(
        &mut self,
        code: &str,
        inputs: &[InputFile],
        timeout: Duration,
        output_cap: usize,
        gate: Option<Gate<'_>>,
    ) -> RunOutput {
        let mut abandon_guard = KillOnDrop {
            target: self.kill_target(),
            armed: true,
        };
        self.process.thaw();
        let output = self
            .channel
            .execute(&mut self.process, code, inputs, timeout, output_cap, gate)
            .await;
        abandon_guard.armed = false;
        if output.reusable {
            self.freeze();
        }
        output
    }

    /// Kills the worker at once.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}
