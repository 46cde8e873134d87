//! One worker container: validated, created, attached (stdin for requests and the
//! launcher's orders, stdout for the launcher's frames), started, handed its policy, and
//! handshaken exactly as a host worker; then spoken to through the same protocol
//! [`Channel`]. [`DockerProcess`] freezes and thaws the worker through the launcher and
//! kills it by removing the container.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{AttachContainerOptions, CreateContainerOptions};
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::config::validate_container_config;
use super::engine;
use super::frames::{self, Decoder, Stream};
use crate::backend::StartError;
use crate::worker::handle::{
    BoxFuture, ExitWitness, Gauge, KillSwitch, ProcessHandle, Usage, UsageProbe, Witness,
};
use crate::worker::protocol::{Channel, DRAIN_TIMEOUT, WorkerProcess};
use crate::worker::report::SandboxReport;

/// How long a new container may take to start its worker.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of each decoded stream buffered before the container is made to wait.
const STREAM_BUFFER: usize = 256 << 10;
/// Launcher diagnostics kept for error messages.
const DIAGNOSTICS_CAP: usize = 8 << 10;

/// Removes one worker container, from the call that holds it (a timeout) or from
/// outside (a cancelled call, shutdown). Fired from outside, the worker's streams end at
/// once (the demultiplexer stops), so the call waiting on them returns without waiting
/// for the engine, which removes the container in the background.
#[derive(Debug, Clone)]
pub struct Removal {
    docker: Docker,
    id: String,
    /// Tells the demultiplexer to end the worker's streams.
    cut: Arc<tokio::sync::Notify>,
    fired: Arc<std::sync::atomic::AtomicBool>,
}

impl Removal {
    /// From outside the call: removes the container and ends its streams now.
    pub fn fire(&self) {
        self.cut.notify_one();
        self.remove();
    }

    /// Removes the container; its streams end when the engine has removed it, so what
    /// the worker printed until then is still read (a timeout returns it).
    fn remove(&self) {
        if !self.fired.swap(true, std::sync::atomic::Ordering::AcqRel) {
            remove_soon(&self.docker, &self.id);
        }
    }

    fn fired(&self) -> bool {
        self.fired.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A running worker container.
pub struct DockerProcess {
    docker: Docker,
    id: String,
    removal: Removal,
    /// The container's stdin, in frames: the launcher's orders go here, in order with
    /// the requests the protocol [`Channel`] writes.
    input: UnboundedSender<Vec<u8>>,
    /// The container's init as this machine's `/proc` shows it; `None` when the engine
    /// runs elsewhere (its processes are not ours to read).
    host_pid: Option<i32>,
    /// What the launcher printed on the container's stderr (start-up failures).
    diagnostics: Arc<Mutex<Vec<u8>>>,
    /// Where the launcher's workspace fingerprints go (an in-container workspace).
    freshness: Option<Arc<super::copyback::Freshness>>,
}

impl DockerProcess {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container's init process on this machine, when the engine is local.
    pub fn host_pid(&self) -> Option<i32> {
        self.host_pid
    }

    fn diagnostics(&self) -> String {
        let text = self
            .diagnostics
            .lock()
            .map(|d| String::from_utf8_lossy(&d).trim().to_string())
            .unwrap_or_default();
        if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        }
    }

    /// Sends the launcher one order. A container whose stdin is gone has no worker to
    /// order: the next call finds it dead.
    fn order(&self, order: Stream) {
        let _ = self.input.send(frames::encode(order, b""));
    }
}

/// The request stream as the protocol [`Channel`] writes it, framed onto the container's
/// stdin queue. Writing only queues (the pump task sends), so a write never waits for
/// the engine; the queue holds at most one request, which the call's size caps bound.
struct FramedRequests(UnboundedSender<Vec<u8>>);

impl AsyncWrite for FramedRequests {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let n = buf.len().min(frames::MAX_FRAME);
        let sent = self.0.send(frames::encode(Stream::Requests, &buf[..n]));
        std::task::Poll::Ready(sent.map(|()| n).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the container's stdin is closed",
            )
        }))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Copies queued frames to the container's stdin until every sender is gone (the
/// channel and the process both dropped), then closes it: the launcher kills its worker.
async fn pump(
    mut queue: UnboundedReceiver<Vec<u8>>,
    mut stdin: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
) {
    while let Some(bytes) = queue.recv().await {
        if stdin.write_all(&bytes).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Removes a container in the background (from sync code: kill, drop).
pub fn remove_soon(docker: &Docker, id: &str) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let (docker, id) = (docker.clone(), id.to_string());
        handle.spawn(async move {
            engine::remove(&docker, &id).await;
        });
    }
}

impl WorkerProcess for DockerProcess {
    /// Removes the container (SIGKILL to everything in it first).
    fn kill(&mut self) {
        self.removal.remove();
    }

    /// The launcher stops the worker's process group (SIGSTOP: the worker can neither
    /// fork nor leave its group). Sent on the container's stdin, in order with the
    /// requests, so it costs no round trip to the engine.
    fn freeze(&mut self) {
        self.order(Stream::Freeze);
    }

    /// SIGCONT to the group, ahead of the next request on the same stream.
    fn thaw(&mut self) {
        self.order(Stream::Thaw);
    }

    fn wait_exit(&mut self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            if self.removal.fired() {
                // Its removal is under way: nothing to wait for, and a shutdown cannot wait.
                return format!("the container was removed{}", self.diagnostics());
            }
            let inspect = async {
                for _ in 0..20 {
                    match self.docker.inspect_container(&self.id, None).await {
                        Ok(info) => {
                            let state = info.state.unwrap_or_default();
                            if state.running == Some(true) {
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                continue;
                            }
                            if state.oom_killed == Some(true) {
                                return "killed by the container's memory limit (OOM)".to_string();
                            }
                            return format!(
                                "the container exited with status {}",
                                state.exit_code.unwrap_or(-1)
                            );
                        }
                        Err(_) => return "the container was removed".to_string(),
                    }
                }
                "the container is still running".to_string()
            };
            let how = tokio::time::timeout(DRAIN_TIMEOUT, inspect)
                .await
                .unwrap_or_else(|_| "no exit status".to_string());
            format!("{how}{}", self.diagnostics())
        })
    }
}

impl ProcessHandle for DockerProcess {
    fn kill_switch(&self) -> KillSwitch {
        let removal = self.removal.clone();
        KillSwitch::new(move || removal.fire())
    }

    fn exit_witness(&self) -> ExitWitness {
        ExitWitness::new(self.watched())
    }

    fn usage_probe(&self) -> UsageProbe {
        UsageProbe::new(self.watched())
    }
}

impl DockerProcess {
    fn watched(&self) -> Watched {
        Watched {
            docker: self.docker.clone(),
            id: self.id.clone(),
            pid: self.host_pid,
        }
    }
}

/// A container's worker seen from outside: its processes in this machine's `/proc` (a
/// local engine: `pid` is the container's init), else the engine's own view.
struct Watched {
    docker: Docker,
    id: String,
    pid: Option<i32>,
}

impl Witness for Watched {
    fn is_gone(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            // Removal runs in the background: give it a moment.
            for _ in 0..50 {
                let running = self
                    .docker
                    .inspect_container(&self.id, None)
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
        })
    }

    fn describe(&self) -> String {
        format!("container {}", self.id)
    }
}

impl Gauge for Watched {
    fn read(&self) -> Option<Usage> {
        local_usage(&self.id, self.pid?)
    }

    fn sample(&self) -> BoxFuture<'_, Option<Usage>> {
        Box::pin(async move {
            if self.pid.is_some() {
                return self.read();
            }
            engine_usage(&self.docker, &self.id).await
        })
    }
}

impl Drop for DockerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Container creates one at a time, for an engine that cannot take them at once
/// ([`super::product::Engine::creates_one_at_a_time`]): within this server a mutex, and
/// across every server of the user a lock on a file beside the engine's socket (a
/// rootless Podman's runtime directory is the user's own).
pub struct CreateGate {
    local: tokio::sync::Mutex<()>,
    file: Option<std::path::PathBuf>,
}

/// A create's turn; it ends when dropped.
pub struct Turn<'a> {
    _local: tokio::sync::MutexGuard<'a, ()>,
    _file: Option<std::fs::File>,
}

impl CreateGate {
    /// A gate for the engine at `host` (`unix://PATH`: the lock file is beside it).
    pub fn new(host: &str) -> CreateGate {
        let file = host.strip_prefix("unix://").and_then(|p| {
            std::path::Path::new(p)
                .parent()
                .map(|d| d.join(".warden-create.lock"))
        });
        CreateGate {
            local: tokio::sync::Mutex::new(()),
            file,
        }
    }

    /// Waits for this create's turn. A lock file that cannot be made or locked leaves
    /// the servers of the user unordered among themselves (logged), never stops a create.
    pub async fn turn(&self) -> Turn<'_> {
        let local = self.local.lock().await;
        let file = match self.file.clone() {
            Some(path) => tokio::task::spawn_blocking(move || lock_file(&path))
                .await
                .ok()
                .flatten(),
            None => None,
        };
        Turn {
            _local: local,
            _file: file,
        }
    }
}

#[cfg(unix)]
fn lock_file(path: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .inspect_err(|e| tracing::debug!(error = %e, path = %path.display(), "no create lock"))
        .ok()?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .inspect_err(|e| tracing::debug!(error = %e, "the create lock could not be taken"))
        .ok()?;
    Some(file)
}

#[cfg(not(unix))]
fn lock_file(_: &std::path::Path) -> Option<std::fs::File> {
    None
}

/// Creates a container for `config`, validated first: a refused one never reaches the
/// engine. Its id.
async fn create(
    docker: &Docker,
    config: ContainerCreateBody,
    name: &str,
    gate: Option<&CreateGate>,
) -> Result<String, StartError> {
    validate_container_config(&config, &engine::is_socket).map_err(|e| StartError::Refused {
        wall: "container".into(),
        message: e.to_string(),
    })?;
    let one_at_a_time = match gate {
        Some(gate) => Some(gate.turn().await),
        None => None,
    };
    let created = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.to_string()),
                ..Default::default()
            }),
            config,
        )
        .await
        .map_err(|e| StartError::Engine(format!("cannot create the container: {e}")))?;
    drop(one_at_a_time);
    Ok(created.id)
}

/// Creates and starts a container that runs on its own, nothing attached (a
/// workspace's keeper); its id. Removed again when it does not start.
pub async fn run_detached(
    docker: &Docker,
    config: ContainerCreateBody,
    name: &str,
    gate: Option<&CreateGate>,
) -> Result<String, String> {
    let id = create(docker, config, name, gate)
        .await
        .map_err(|e| e.to_string())?;
    if let Err(e) = docker.start_container(&id, None).await {
        engine::remove(docker, &id).await;
        return Err(format!("cannot start the container: {e}"));
    }
    Ok(id)
}

/// Creates and starts a container for `config` and waits until its worker is ready.
/// The configuration is validated first: a refused one never reaches the engine.
pub async fn start(
    docker: &Docker,
    config: ContainerCreateBody,
    name: &str,
    policy_json: &[u8],
    gate: Option<&CreateGate>,
    freshness: Option<Arc<super::copyback::Freshness>>,
) -> Result<(Channel, DockerProcess, SandboxReport), StartError> {
    let created_id = create(docker, config, name, gate).await?;
    let (input, queue) = unbounded_channel();
    let mut process = DockerProcess {
        docker: docker.clone(),
        id: created_id.clone(),
        removal: Removal {
            docker: docker.clone(),
            id: created_id,
            cut: Arc::default(),
            fired: Arc::default(),
        },
        input,
        host_pid: None,
        diagnostics: Arc::new(Mutex::new(Vec::new())),
        freshness,
    };
    let mut channel = attach_and_start(&process, queue).await?;
    process.host_pid = local_pid(docker, &process.id).await;
    let handshake = crate::worker::handle::handshake(&mut channel, &mut process, policy_json);
    match tokio::time::timeout(START_TIMEOUT, handshake).await {
        Ok(Ok(report)) => Ok((channel, process, report)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StartError::Timeout(START_TIMEOUT)),
    }
    // On error `process` is dropped here, which removes the container.
}

/// The container's init on this machine: its pid as the engine reports it, if this
/// machine's `/proc` shows that pid in the container's own cgroup (a remote engine's
/// pids are not ours).
async fn local_pid(docker: &Docker, id: &str) -> Option<i32> {
    let pid = docker
        .inspect_container(id, None)
        .await
        .ok()?
        .state?
        .pid
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 0)?;
    local_usage(id, pid).map(|_| pid)
}

/// The usage of a local engine's container: its processes in `/proc`, from its init,
/// as long as `pid` still is that container's (pids are reused).
fn local_usage(id: &str, pid: i32) -> Option<crate::backend::Usage> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    if !cgroup.contains(id) {
        return None;
    }
    crate::worker::usage::of_tree(pid)
}

/// The usage of a container as the engine reports it (one sample, not a stream): for an
/// engine on another machine, whose processes this one cannot see.
async fn engine_usage(docker: &Docker, id: &str) -> Option<crate::backend::Usage> {
    let options = bollard::query_parameters::StatsOptions {
        stream: false,
        one_shot: true,
    };
    let stats = docker.stats(id, Some(options)).next().await?.ok()?;
    let cpu_ns = stats.cpu_stats?.cpu_usage?.total_usage?;
    let rss = stats.memory_stats.and_then(|m| m.usage).unwrap_or(0);
    Some(crate::backend::Usage {
        cpu_ms: cpu_ns / 1_000_000,
        rss_bytes: rss,
        pss_bytes: None,
    })
}

async fn attach_and_start(
    process: &DockerProcess,
    queue: UnboundedReceiver<Vec<u8>>,
) -> Result<Channel, StartError> {
    let engine_error = |what: &str, e: bollard::errors::Error| {
        StartError::Engine(format!("cannot {what} the container: {e}"))
    };
    let attached = process
        .docker
        .attach_container(
            &process.id,
            Some(AttachContainerOptions {
                stream: true,
                stdin: true,
                stdout: true,
                stderr: true,
                ..Default::default()
            }),
        )
        .await
        .map_err(|e| engine_error("attach to", e))?;
    process
        .docker
        .start_container(&process.id, None)
        .await
        .map_err(|e| engine_error("start", e))?;
    let (resp_rx, resp_tx) = tokio::io::simplex(STREAM_BUFFER);
    let (out_rx, out_tx) = tokio::io::simplex(STREAM_BUFFER);
    let (err_rx, err_tx) = tokio::io::simplex(STREAM_BUFFER);
    tokio::spawn(demux(
        attached.output,
        [resp_tx, out_tx, err_tx],
        process.diagnostics.clone(),
        process.removal.cut.clone(),
        process.freshness.clone(),
    ));
    tokio::spawn(pump(queue, attached.input));
    Ok(Channel::new(
        Box::new(FramedRequests(process.input.clone())),
        Box::new(resp_rx),
        Box::new(out_rx),
        Box::new(err_rx),
    ))
}

type Output = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;
type Sink = tokio::io::WriteHalf<tokio::io::SimplexStream>;

/// Splits the container's stdout frames into the three worker streams; the container's
/// stderr is the launcher's own diagnostics. Ends (closing every stream, so the reader
/// sees end of file) when the container's output ends or breaks the framing, or when
/// `cut` is notified (the container is being removed).
async fn demux(
    mut output: Output,
    sinks: [Sink; 3],
    diagnostics: Arc<Mutex<Vec<u8>>>,
    cut: Arc<tokio::sync::Notify>,
    freshness: Option<Arc<super::copyback::Freshness>>,
) {
    let mut sinks: [Option<Sink>; 3] = sinks.map(Some);
    let mut decoder = Decoder::default();
    loop {
        let item = tokio::select! {
            item = output.next() => item,
            () = cut.notified() => break,
        };
        let bytes = match item {
            None => break,
            Some(Ok(LogOutput::StdOut { message })) => message,
            Some(Ok(LogOutput::StdErr { message })) => {
                if let Ok(mut d) = diagnostics.lock() {
                    let room = DIAGNOSTICS_CAP.saturating_sub(d.len());
                    d.extend_from_slice(&message[..message.len().min(room)]);
                }
                continue;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "container output ended");
                break;
            }
        };
        if !deliver(&mut decoder, &bytes, &mut sinks, freshness.as_deref()).await {
            break;
        }
    }
    for sink in &mut sinks {
        close(sink).await;
    }
}

/// Writes the frames in `bytes` to their streams; false when the output must end (not
/// the launcher's framing).
async fn deliver(
    decoder: &mut Decoder,
    bytes: &[u8],
    sinks: &mut [Option<Sink>; 3],
    freshness: Option<&super::copyback::Freshness>,
) -> bool {
    let frames = match decoder.feed(bytes) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "container output is not framed; closing it");
            return false;
        }
    };
    for frame in frames {
        let slot = match frame.stream {
            Stream::Responses => 0,
            Stream::Stdout => 1,
            Stream::Stderr => 2,
            Stream::Workspace => {
                if let Some(f) = freshness {
                    f.report(
                        frame
                            .payload
                            .as_slice()
                            .try_into()
                            .ok()
                            .map(u64::from_le_bytes),
                    );
                }
                continue;
            }
            other => {
                tracing::warn!(stream = ?other, "the container sent a frame only the server sends; closing it");
                return false;
            }
        };
        if frame.payload.is_empty() {
            close(&mut sinks[slot]).await;
            continue;
        }
        if let Some(sink) = sinks[slot].as_mut()
            && sink.write_all(&frame.payload).await.is_err()
        {
            sinks[slot] = None;
        }
    }
    true
}

/// Ends one stream: its reader sees end of file once it has read what was written
/// (dropping a split simplex's write half alone would leave the reader waiting).
async fn close(sink: &mut Option<Sink>) {
    if let Some(mut sink) = sink.take() {
        let _ = sink.shutdown().await;
    }
}

/// A name for a new container: the instance and a random suffix.
pub fn container_name(instance: &str, role: &str) -> String {
    let suffix: String = crate::hex(&crate::random_bytes::<6>());
    format!("warden-{instance}-{role}-{suffix}")
}

/// The launcher path must exist on this machine (it is bind-mounted).
pub fn launcher_on_this_machine() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the warden binary: {e}"))?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    if !Path::new(&exe).is_file() {
        return Err(format!("{} is not a file", exe.display()));
    }
    Ok(exe)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::backend::docker::config::{BoundGrant, ContainerPlan, Owner, container_config};

    /// A configuration that mounts the Docker socket, or `/`, never reaches the engine:
    /// the "engine" here is a listener that counts connections.
    #[tokio::test]
    async fn refused_configurations_never_reach_the_engine() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("engine.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        listener.set_nonblocking(true).unwrap();
        let docker =
            Docker::connect_with_unix(sock.to_str().unwrap(), 5, bollard::API_DEFAULT_VERSION)
                .unwrap();
        let owner = Owner {
            instance: "1-aa".into(),
            pid: 1,
            pid_start: 1,
            host: "h".into(),
            boot_id: "b".into(),
        };
        for bad in ["/var/run/docker.sock", "/"] {
            let grants = [BoundGrant {
                path: bad.into(),
                access: crate::grants::Access::Read,
                hidden: Vec::new(),
            }];
            let cfg = container_config(&ContainerPlan {
                image: "warden-sandbox:latest",
                user: (65534, 65534),
                owner: &owner,
                role: "session",
                launcher: Some(Path::new("/usr/local/bin/warden")),
                workspace: crate::backend::docker::config::WorkspaceSource::Host(dir.path()),
                grants: &grants,
                empty_file: dir.path(),
                memory_bytes: 1 << 30,
                pids_limit: 64,
                tmp_bytes: 1 << 20,
                network: crate::config::NetworkMode::Deny,
                packages: None,
                runtime: None,
                mask_accounts: false,
                userns: None,
            });
            let Err(err) = start(&docker, cfg, "warden-test", b"{}", None, None).await else {
                panic!("{bad} was accepted")
            };
            assert!(matches!(err, StartError::Refused { .. }), "{bad}: {err}");
        }
        assert!(
            listener.accept().is_err(),
            "a refused configuration reached the engine"
        );
    }

    /// Two servers' gates on one engine socket take turns: the second create waits for
    /// the first to end, across gates (the lock file beside the socket).
    #[tokio::test]
    async fn creates_on_one_engine_take_turns_across_servers() {
        let dir = tempfile::tempdir().unwrap();
        let host = format!("unix://{}", dir.path().join("podman.sock").display());
        let (a, b) = (CreateGate::new(&host), CreateGate::new(&host));
        let first = a.turn().await;
        let second = tokio::spawn(async move {
            let _turn = b.turn().await;
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!second.is_finished(), "the second create did not wait");
        drop(first);
        second.await.unwrap();
        assert!(dir.path().join(".warden-create.lock").exists());
    }
}
