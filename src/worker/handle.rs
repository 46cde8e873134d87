//! A started worker, whatever backend started it: the protocol [`Channel`] plus the
//! process behind it, which only its backend knows how to kill.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::StartError;
use crate::worker::protocol::{
    Channel, Gate, Handshake, InputFile, OutputTap, RunOutput, WorkerProcess,
};
use crate::worker::report::SandboxReport;

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

/// A boxed future, for the handles a worker's backend hands out (they are called
/// through trait objects: the session layer never names a backend).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The process (or container) behind a worker, as its backend defines it: besides what
/// the protocol needs ([`WorkerProcess`]), the handles that reach it from outside a call.
pub trait ProcessHandle: WorkerProcess + 'static {
    /// Kills the worker from elsewhere (see [`KillSwitch`]).
    fn kill_switch(&self) -> KillSwitch;
    /// Tells later whether the worker is really gone.
    fn exit_witness(&self) -> ExitWitness;
    /// Reads the worker's usage without holding it.
    fn usage_probe(&self) -> UsageProbe;
}

/// Kills the worker if a call is abandoned midway (its future dropped), so cancelled
/// code cannot keep running unseen.
struct KillOnDrop {
    switch: KillSwitch,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.switch.fire();
        }
    }
}

/// Kills a worker from outside the call that holds it (at shutdown, while a call runs).
/// Only valid while the worker it came from is alive: take it when a call starts and
/// drop it when the call returns.
#[derive(Clone)]
pub struct KillSwitch(Arc<dyn Fn() + Send + Sync>);

impl KillSwitch {
    /// A switch that runs `kill` each time it is fired (killing twice must be harmless).
    pub fn new(kill: impl Fn() + Send + Sync + 'static) -> KillSwitch {
        KillSwitch(Arc::new(kill))
    }

    pub fn fire(&self) {
        (self.0)();
    }
}

impl std::fmt::Debug for KillSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KillSwitch")
    }
}

/// How a backend tells that one of its workers is gone.
pub trait Witness: Send + Sync {
    /// The worker (and, on the host, its group leader) no longer exists.
    fn is_gone(&self) -> BoxFuture<'_, bool>;
    /// The worker, for a message (`pid 42`, `container 3f…`).
    fn describe(&self) -> String;
}

/// Something that can later tell whether the worker is really gone.
#[derive(Clone)]
pub struct ExitWitness(Arc<dyn Witness>);

impl ExitWitness {
    pub fn new(witness: impl Witness + 'static) -> ExitWitness {
        ExitWitness(Arc::new(witness))
    }

    pub async fn is_gone(&self) -> bool {
        self.0.is_gone().await
    }

    pub fn describe(&self) -> String {
        self.0.describe()
    }
}

impl std::fmt::Debug for ExitWitness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExitWitness({})", self.describe())
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

/// How a backend reads one of its workers' usage from outside.
pub trait Gauge: Send + Sync {
    /// `None` once the worker is gone, or when only [`Gauge::sample`] can tell.
    fn read(&self) -> Option<Usage>;
    /// Like [`Gauge::read`], and may ask elsewhere (a remote engine) when it cannot.
    fn sample(&self) -> BoxFuture<'_, Option<Usage>> {
        Box::pin(async move { self.read() })
    }
}

/// Looks at a worker from outside (its memory and CPU) without holding it, so it can be
/// read while the worker is in a call.
#[derive(Clone)]
pub struct UsageProbe(Arc<dyn Gauge>);

impl UsageProbe {
    pub fn new(gauge: impl Gauge + 'static) -> UsageProbe {
        UsageProbe(Arc::new(gauge))
    }

    /// `None` once the worker is gone, or when it can only be asked of a remote engine
    /// (see [`UsageProbe::sample`]).
    pub fn read(&self) -> Option<Usage> {
        self.0.read()
    }

    /// Like [`UsageProbe::read`], and for a remote engine's container asks the engine.
    pub async fn sample(&self) -> Option<Usage> {
        self.0.sample().await
    }
}

impl std::fmt::Debug for UsageProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UsageProbe")
    }
}

/// A worker's journal supervisor (Linux; nothing elsewhere).
#[cfg(target_os = "linux")]
pub type JournalLink = Option<std::sync::Arc<crate::sandbox::linux::supervisor::Supervision>>;
#[cfg(not(target_os = "linux"))]
pub type JournalLink = Option<std::convert::Infallible>;

pub struct Worker {
    channel: Channel,
    process: Box<dyn ProcessHandle>,
    report: SandboxReport,
    /// The egress proxy serving this worker's world, when its network is proxied.
    egress: Option<crate::egress::Link>,
    /// The supervisor that journals this worker's file changes, when it has one.
    #[cfg(target_os = "linux")]
    journal: Option<std::sync::Arc<crate::sandbox::linux::supervisor::Supervision>>,
}

impl Worker {
    pub fn new(channel: Channel, process: impl ProcessHandle, report: SandboxReport) -> Worker {
        Worker {
            channel,
            process: Box::new(process),
            report,
            egress: None,
            #[cfg(target_os = "linux")]
            journal: None,
        }
    }

    /// Ties the worker to the supervisor of its journal's filter.
    #[cfg(target_os = "linux")]
    pub fn attach_journal(
        &mut self,
        supervision: std::sync::Arc<crate::sandbox::linux::supervisor::Supervision>,
    ) {
        self.journal = Some(supervision);
    }

    /// The supervisor that can journal this worker's file changes, if it has one.
    pub fn journal_link(&self) -> JournalLink {
        #[cfg(target_os = "linux")]
        return self.journal.clone();
        #[cfg(not(target_os = "linux"))]
        None
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
        self.process.usage_probe()
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
        self.process.kill_switch()
    }

    pub fn exit_witness(&self) -> ExitWitness {
        self.process.exit_witness()
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
            switch: self.kill_switch(),
            armed: true,
        };
        self.process.thaw();
        let output = self
            .channel
            .execute(&mut *self.process, code, inputs, timeout, output_cap, gate)
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
