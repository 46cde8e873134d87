//! The Docker backend: one hardened container per session, running the same persistent
//! worker protocol as a host worker (not `docker exec` per call).
//!
//! Four streams through one container: a Linux warden binary is the in-container
//! launcher ([`launcher`]), either this server's own, bind-mounted read-only, or the one
//! the image carries, for servers on macOS and Windows (Docker Desktop) and remote
//! engines ([`route`], `SANDBOX_LAUNCHER`); the container's stdin carries the policy,
//! the requests and the orders to freeze and thaw the worker between calls, its stdout
//! carries the worker's response pipe, fd 1 and fd 2, all as [`frames`]; the server
//! demultiplexes them into a protocol `Channel`. Chosen over a UNIX socket in the
//! session's directory because nothing of the host but the workspace (and the
//! read-only binary) is then mounted, no socket exists that the code could reach, and
//! the worker dies with its attach connection when the server dies.
//!
//! Containers started ahead come from the session layer's one warm pool
//! ([`crate::backend::pool`]): a warm container is a worker started in a home made
//! ahead, exactly as a session's; `SANDBOX_MAX_WORKERS` counts containers like any
//! worker. Sessions are placed on one of several engines ([`fleet`],
//! `SANDBOX_DOCKER_HOSTS`); each engine's state is one `Inner`.
//!
//! - [`config`]: the container configuration and `validate_container_config` (pure);
//! - [`engine`]: connecting (`DOCKER_HOST`, TLS, without Nagle), owner labels, reaping
//!   leftovers;
//! - [`fleet`]: placement over the engines, their health, a lost engine's sessions;
//! - [`volume`] and [`copyback`]: in-container workspaces (`SANDBOX_WORKSPACE`), their
//!   volume and keeper, and the server's copy of them;
//! - [`container`]: creating, attaching and starting one worker container;
//! - [`query`]: what the image and the engine are, asked once at start;
//! - [`quota`]: the size-capped tmpfs workspaces (`SANDBOX_DISK_LIMIT`);
//! - [`route`]: which launcher (`SANDBOX_LAUNCHER`), and the image launcher's protocol;
//! - [`users`]: who each container runs as (`SANDBOX_USER`: a uid per session as root).
//!
//! Each session's home (`<instance>/home-N`) is a directory of the server's, mode 0700,
//! holding the workspace its containers bind: the engine (root) reaches it to bind it,
//! no other host user can traverse to it, though a root server's workspace tmpfs mounts
//! are listed in every process's mount table. (Making them in a mount namespace of the
//! server's own would hide them there, and from the engine too, which must see them to
//! bind them: the container would get the empty directory beneath.)
//!
//! The server side builds for every platform; the launcher runs only inside a Linux
//! container. What only a Linux server next to its engine can do (the tmpfs quota) is
//! reported as a gap elsewhere.

pub mod config;
pub mod container;
pub mod copyback;
pub mod engine;
pub mod fleet;
pub mod frames;
#[cfg(target_os = "linux")]
pub mod launcher;
pub mod product;
pub mod query;
pub mod quota;
pub mod route;
pub mod runtime;
pub mod users;
pub mod volume;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bollard::Docker;

use crate::backend::docker_settings::EngineSpec;
use crate::backend::{Backend, BackendKind, Enforcement, StartError, Worker, WorkerSpec};
use crate::capability::Capability;
use crate::config::{SandboxMode, Settings};
use crate::grants::{Grant, PathKind};
use crate::worker::policy::{Limits, SessionPaths, WorkerPolicy, host_view, worker_env};
use crate::worker::python::PythonRuntime;
use crate::worker::report::{SandboxReport, WallStatus};
use config::{BoundGrant, ContainerPlan, Owner, WORKSPACE};
use fleet::{Fleet, Placed};
use quota::Quota;
use users::Users;

/// What the Docker backend keeps per session: its directory on this machine, whose
/// `workspace` (owned by the container user) is bind-mounted into its containers, or,
/// for an in-container workspace, is the server's copy of the session's volume; and the
/// uid and gid its containers run as.
#[derive(Debug)]
pub struct DockerSlot {
    dir: PathBuf,
    workspace: PathBuf,
    user: (u32, u32),
    /// The session's installed packages, bound read-only at [`crate::packages::MOUNT`]
    /// (`None` where layers cannot be made: a server that is not on Unix).
    layer: Option<crate::packages::layer::Layer>,
    /// The engine it was placed on, for its whole life, and that engine's URL.
    placed: Placed,
    engine: String,
    /// Its workspace volume on the engine, for an in-container workspace.
    volume: Option<String>,
    /// What the server's copy of its in-container workspace was made at.
    freshness: Arc<copyback::Freshness>,
    /// The container that holds its workspace volume mounted (a tmpfs volume lives only
    /// while mounted), which the workspace is copied back from.
    keeper: tokio::sync::Mutex<Option<String>>,
}

impl crate::backend::SlotState for DockerSlot {
    /// The session's package layer and the container user its installer runs as.
    fn package_layer(&self) -> Option<(&crate::packages::layer::Layer, Option<(u32, u32)>)> {
        self.layer.as_ref().map(|l| (l, Some(self.user)))
    }

    fn host_paths_unreachable(&self) -> Option<String> {
        self.volume.as_ref().map(|_| {
            format!(
                "the session's workspace lives in its container on the engine {} (SANDBOX_WORKSPACE), which cannot reach this machine's files",
                self.engine
            )
        })
    }

    fn place(&self) -> Option<String> {
        Some(self.engine.clone())
    }
}

/// Where an engine's sessions keep their workspace (`SANDBOX_WORKSPACE`, and what the
/// start-up query found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspacePlace {
    /// A directory of this machine, bound into the container.
    Host,
    /// A tmpfs volume on the engine, copied back after each call; why.
    InContainer(String),
}

/// One container to start: whose, with what, reaching what.
struct Run<'a> {
    /// "pool", "session" or "installer".
    role: &'a str,
    workspace: config::WorkspaceSource<'a>,
    user: (u32, u32),
    grants: &'a [Grant],
    network: crate::config::NetworkMode,
    /// The package layer to bind read-only.
    packages: Option<&'a Path>,
    tmp_bytes: u64,
    /// The proxy its endpoint is served by, when its network is proxied.
    egress: Option<&'a Arc<crate::egress::Egress>>,
    /// Where its launcher's workspace fingerprints go (an in-container workspace's
    /// worker).
    freshness: Option<&'a Arc<copyback::Freshness>>,
}

impl<'a> Run<'a> {
    /// A container with nothing but its workspace: no grants, no network, no packages
    /// (the start-up query, a workspace's keeper).
    fn bare(
        role: &'a str,
        workspace: config::WorkspaceSource<'a>,
        user: (u32, u32),
        tmp_bytes: u64,
    ) -> Run<'a> {
        Run {
            role,
            workspace,
            user,
            grants: &[],
            network: crate::config::NetworkMode::Deny,
            packages: None,
            tmp_bytes,
            egress: None,
            freshness: None,
        }
    }
}

/// The last component of `path`, as text (a home's or an instance's name).
fn dir_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default()
}

/// Why the Docker backend could not be used; the server falls back to the host backend
/// (or refuses under `HOST_SANDBOX=require`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

pub struct DockerBackend {
    fleet: Arc<Fleet>,
    /// Who containers run as, on every engine (a uid per session as root).
    users: Arc<Users>,
}

/// One engine's state: its client, what its image and runtime are, and how its
/// workspaces are capped.
pub(crate) struct Inner {
    settings: Arc<Settings>,
    docker: Docker,
    /// The engine's URL, as results and errors name it.
    host: String,
    /// Its place in the engine list (names its start-up query's home).
    index: usize,
    owner: Owner,
    /// The image's interpreter, as the launcher found it inside the image.
    runtime: PythonRuntime,
    /// The OCI runtime the engine runs the containers with, and the kernel they see.
    oci: crate::backend::ContainerRuntime,
    /// The engine serving the API (Docker or Podman), and whether it is rootless.
    engine: product::Engine,
    /// Whether the engine holds the memory and pids limits, as the start-up query found.
    limits: product::LimitsHeld,
    launcher: Launcher,
    instance_dir: PathBuf,
    /// Who containers run as (a uid per session as root), shared by every engine.
    users: Arc<Users>,
    /// How workspaces are capped (`SANDBOX_DISK_LIMIT`), as the start-up query found.
    quota: Quota,
    /// Where its sessions' workspaces live, as the start-up query found.
    place: WorkspacePlace,
    /// The server is shutting down: no container is created any more.
    closing: std::sync::atomic::AtomicBool,
    /// The egress proxy, when the network is proxied.
    egress: Option<Arc<crate::egress::Egress>>,
    /// Held around each container create when the engine cannot take them at once
    /// ([`product::Engine::creates_one_at_a_time`]).
    create_gate: Option<container::CreateGate>,
}

/// The launcher every container of this server runs (see [`route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// This server's binary, bound read-only.
    Bound(PathBuf),
    /// The image's, of this server's launcher protocol; its warden version.
    Image { version: String },
}

impl Launcher {
    fn describe(&self) -> String {
        match self {
            Launcher::Bound(_) => "this server's own binary, bound read-only".to_string(),
            Launcher::Image { version } => format!(
                "the image's (warden {version}, launcher protocol {})",
                route::LAUNCHER_PROTOCOL
            ),
        }
    }
}

fn running_as_root() -> bool {
    crate::os::running_as_root()
}

/// What decides who containers run as: the setting, and who this server is.
fn user_facts(configured: Option<(u32, u32)>) -> users::Facts {
    #[cfg(unix)]
    let own = Some((
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    ));
    #[cfg(not(unix))]
    let own = None;
    users::Facts {
        configured,
        root: running_as_root(),
        own,
    }
}

/// Why a uid per session cannot work with this engine: one that remaps user namespaces
/// (`userns-remap`) maps only its own range's uids, so a container of a uid outside it
/// would not start.
async fn remapped_engine(docker: &Docker, users: &Users) -> Result<(), Unavailable> {
    if !users.per_session() {
        return Ok(());
    }
    let info = docker.info().await.map_err(|e| {
        Unavailable(format!(
            "the engine did not describe itself ({})",
            causes(&e)
        ))
    })?;
    let remapped = info
        .security_options
        .unwrap_or_default()
        .iter()
        .any(|o| o.contains("name=userns"));
    if remapped {
        return Err(Unavailable(
            "the engine remaps user namespaces (userns-remap), so the uid of its own each session's container gets would not map; set SANDBOX_USER=UID:GID to one uid inside the engine's range (then every session shares it), or run the engine without userns-remap".into(),
        ));
    }
    Ok(())
}

/// An error with every cause beneath it ("client error (Connect): invalid peer
/// certificate: UnknownIssuer"): the reason a TLS engine refused is at the bottom.
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

impl DockerBackend {
    /// Sets up every engine (`SANDBOX_DOCKER_HOSTS`, or `DOCKER_HOST`'s), each as
    /// [`Inner::setup`] does; unavailable only when none could be.
    pub async fn new(
        settings: Arc<Settings>,
        instance_dir: &Path,
        egress: Option<Arc<crate::egress::Egress>>,
    ) -> Result<DockerBackend, Unavailable> {
        let users = Arc::new(Users::new(user_facts(settings.docker.user)));
        make_empty_file(instance_dir).map_err(|e| {
            Unavailable(format!(
                "cannot make {} in {}: {e}",
                EMPTY_FILE,
                instance_dir.display()
            ))
        })?;
        let instance = dir_name(instance_dir);
        let shared = Shared {
            settings: settings.clone(),
            instance_dir: instance_dir.to_path_buf(),
            egress,
            users: users.clone(),
        };
        let setup: fleet::Setup = Arc::new(move |index, spec| {
            let shared = shared.clone();
            Box::pin(async move {
                Inner::setup(shared, index, spec)
                    .await
                    .map_err(|Unavailable(why)| why)
            })
        });
        let specs = settings.docker.engines();
        let several = specs.len() > 1;
        let fleet = Fleet::start(specs, instance, setup)
            .await
            .map_err(|failures| {
                if several {
                    let each: Vec<String> = failures
                        .iter()
                        .map(|(url, why)| format!("{url}: {why}"))
                        .collect();
                    Unavailable(format!(
                        "no Docker engine could be used: {}",
                        each.join("; ")
                    ))
                } else {
                    Unavailable(failures.into_iter().map(|(_, why)| why).collect())
                }
            })?;
        Ok(DockerBackend { fleet, users })
    }
}

/// What every engine's state is made with.
#[derive(Clone)]
struct Shared {
    settings: Arc<Settings>,
    instance_dir: PathBuf,
    egress: Option<Arc<crate::egress::Egress>>,
    users: Arc<Users>,
}

impl Inner {
    /// Connects to one engine, checks the image, asks it where its Python is and reaps
    /// the containers of dead warden instances there.
    async fn setup(shared: Shared, index: usize, spec: EngineSpec) -> Result<Inner, Unavailable> {
        let Shared {
            settings,
            instance_dir,
            egress,
            users,
        } = shared;
        let d = &settings.docker;
        let host = engine::url_of(&spec);
        let docker =
            engine::connect(&spec).map_err(|e| Unavailable(product::unanswered(&host, &e)))?;
        docker
            .ping()
            .await
            .map_err(|e| Unavailable(product::unanswered(&host, &causes(&e))))?;
        let image = docker.inspect_image(&d.image).await.map_err(|e| {
            Unavailable(format!(
                "the image {} is not available on {host} ({e}); build it offline with tools/build-image.sh or set SANDBOX_IMAGE",
                d.image
            ))
        })?;
        let serving = product::ask(&docker, &host).await.map_err(Unavailable)?;
        let known = runtime::known(&docker).await.map_err(Unavailable)?;
        let mut oci = runtime::pick(d.runtime.as_deref(), &known).map_err(Unavailable)?;
        oci.engine.clone_from(&serving.name);
        oci.engine_version.clone_from(&serving.version);
        oci.rootless = serving.rootless;
        let labels = image.config.and_then(|c| c.labels).unwrap_or_default();
        let launcher = choose_launcher(&settings, &spec, &labels).map_err(Unavailable)?;
        let instance = dir_name(&instance_dir);
        let owner = engine::this_owner(&instance);
        let reaped = engine::reap_leftovers(&docker, &owner).await
            + volume::reap_leftovers(&docker, &owner).await;
        if reaped > 0 {
            tracing::warn!(
                reaped,
                engine = %host,
                "removed containers left by warden instances that are gone"
            );
        }
        remapped_engine(&docker, &users).await?;
        let create_gate = serving
            .creates_one_at_a_time()
            .then(|| container::CreateGate::new(&host));
        let mut inner = Inner {
            settings: settings.clone(),
            docker,
            host,
            index,
            owner,
            runtime: PythonRuntime {
                executable: PathBuf::new(),
                binary: PathBuf::new(),
                elf_interpreter: None,
                version: String::new(),
                read_roots: Vec::new(),
            },
            oci,
            engine: serving,
            limits: product::LimitsHeld::Held,
            launcher,
            instance_dir,
            users,
            quota: Quota::Unavailable(String::new()),
            place: WorkspacePlace::Host,
            closing: std::sync::atomic::AtomicBool::new(false),
            egress,
            create_gate,
        };
        let found = query::query_image(&inner).await.map_err(Unavailable)?;
        inner.oci.kernel = found.kernel;
        if let Quota::Unavailable(why) = &found.quota {
            tracing::warn!(reason = %why, engine = %inner.host, "no per-session disk quota in the Docker backend");
        }
        if let product::LimitsHeld::Dropped(why) = &found.limits {
            tracing::warn!(reason = %why, engine = %inner.host, "no cgroup memory and pids limits in the Docker backend");
        }
        inner.runtime = found.runtime;
        inner.quota = found.quota;
        inner.limits = found.limits;
        inner.place = found.place;
        tracing::info!(image = %d.image, engine = %inner.host, python = %inner.runtime.executable.display(), launcher = %inner.launcher.describe(), "docker engine ready");
        Ok(inner)
    }

    /// The server is shutting down: no container is created any more.
    fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// The launcher route `SANDBOX_LAUNCHER` and this platform allow, and for the image's
/// launcher, its protocol checked against this server's.
fn choose_launcher(
    settings: &Settings,
    spec: &EngineSpec,
    labels: &std::collections::HashMap<String, String>,
) -> Result<Launcher, String> {
    let d = &settings.docker;
    let local = route::engine_is_local(spec.url.as_deref());
    match route::choose(d.launcher, cfg!(target_os = "linux"), local)? {
        route::Route::Bind => container::launcher_on_this_machine().map(Launcher::Bound),
        route::Route::Image => {
            route::check_image_launcher(&d.image, labels).map(|version| Launcher::Image { version })
        }
    }
}

impl Inner {
    /// The policy the in-container helper installs: no world of its own (the container
    /// is the world), Landlock and seccomp by the container's paths, the grants at their
    /// own paths. Always best-effort inside: the container's own walls stand whatever the
    /// kernel lets the helper add.
    fn policy(&self, run: &Run<'_>) -> WorkerPolicy {
        let (workspace, tmp) = (Path::new(WORKSPACE), Path::new("/tmp"));
        let s = &self.settings;
        let own_userns = self.engine.userns_mode().is_some();
        let mut env = worker_env(workspace, tmp, &self.runtime.executable, &|_| None);
        if run.network.proxied() {
            env.extend(crate::egress::proxy_env());
        }
        let mut view = host_view(&self.runtime, workspace, tmp, run.grants);
        if run.packages.is_some() {
            view.read_dirs.push(crate::packages::MOUNT.into());
            env.push((
                crate::packages::ENV.to_string(),
                format!("{}/current", crate::packages::MOUNT),
            ));
        }
        WorkerPolicy {
            mode: SandboxMode::BestEffort,
            network: run.network,
            python: self.runtime.executable.clone(),
            host_view: view,
            host_env: env,
            world: None,
            run_as: None,
            limits: Limits {
                address_space_bytes: s.mem_limit_bytes,
                cpu_seconds: 3600,
                file_size_bytes: s.file_size_limit_bytes,
                open_files: 256,
                // Only where it counts this container alone: in a user namespace of its
                // own (the pids cgroup bounds it otherwise, and a rootless engine on
                // cgroup v1 drops that).
                processes: own_userns.then_some(s.pids_limit),
            },
            parent_pid: 0,
            egress_fd: None,
            journal_fd: None,
            // The server makes the endpoint in the container's namespace.
            egress_outside: run.network.proxied(),
            user_space_kernel: self.oci.user_space_kernel,
            own_user_namespace: own_userns,
        }
    }

    fn plan<'a>(
        &'a self,
        run: &Run<'a>,
        grants: &'a [BoundGrant],
        empty_file: &'a Path,
    ) -> ContainerPlan<'a> {
        ContainerPlan {
            image: &self.settings.docker.image,
            user: run.user,
            owner: &self.owner,
            role: run.role,
            launcher: match &self.launcher {
                Launcher::Bound(path) => Some(path.as_path()),
                Launcher::Image { .. } => None,
            },
            workspace: run.workspace,
            grants,
            empty_file,
            memory_bytes: self.settings.mem_limit_bytes,
            pids_limit: self.settings.pids_limit,
            tmp_bytes: run.tmp_bytes,
            network: run.network,
            packages: run.packages,
            runtime: self.oci.configured.as_deref(),
            mask_accounts: self.oci.user_space_kernel,
            userns: self.engine.userns_mode(),
        }
    }

    /// A session's worker container: its workspace, grants, network and packages.
    fn session_run<'a>(
        &'a self,
        role: &'a str,
        slot: &'a DockerSlot,
        grants: &'a [Grant],
    ) -> Run<'a> {
        Run {
            role,
            workspace: match &slot.volume {
                Some(name) => config::WorkspaceSource::Volume(name),
                None => config::WorkspaceSource::Host(&slot.workspace),
            },
            user: slot.user,
            grants,
            network: self.settings.network,
            packages: slot.layer.as_ref().map(|l| l.root()),
            tmp_bytes: self.settings.docker.tmp_size_bytes,
            egress: self.egress.as_ref(),
            freshness: slot.volume.as_ref().map(|_| &slot.freshness),
        }
    }

    /// Starts one worker container as `run` describes; the worker and its container's id.
    async fn start_container(&self, run: &Run<'_>) -> Result<(Worker, String), StartError> {
        let closing = || self.closing.load(std::sync::atomic::Ordering::Acquire);
        let shutting_down = || StartError::Engine("the server is shutting down".into());
        if closing() {
            return Err(shutting_down());
        }
        let empty_file = self.instance_dir.join(EMPTY_FILE);
        let bound = bind_grants(run.grants, &empty_file)?;
        let config = config::container_config(&self.plan(run, &bound, &empty_file));
        let policy = serde_json::to_vec(&self.policy(run))
            .map_err(|e| StartError::Protocol(format!("policy: {e}")))?;
        let name = container::container_name(&self.owner.instance, run.role);
        let (channel, process, report) = container::start(
            &self.docker,
            config,
            &name,
            &policy,
            self.create_gate.as_ref(),
            run.freshness.cloned(),
        )
        .await?;
        if closing() {
            // Created while shutdown swept: dropping `process` removes it.
            return Err(shutting_down());
        }
        let mut report = self.judge_report(report, &process, run.user)?;
        let egress = run.egress.filter(|_| run.network.proxied());
        let link = self.bridge_egress(egress, &process, &mut report).await?;
        let id = process.id().to_string();
        let mut worker = Worker::new(channel, process, report);
        if let Some(link) = link {
            worker.attach_egress(link);
        }
        Ok((worker, id))
    }

    /// A proxied network's one endpoint: a listener the server makes inside the
    /// container's network namespace (which has only its loopback), served by the proxy.
    /// A container the proxy cannot reach is refused (dropping it removes it).
    async fn bridge_egress(
        &self,
        egress: Option<&Arc<crate::egress::Egress>>,
        process: &container::DockerProcess,
        report: &mut SandboxReport,
    ) -> Result<Option<crate::egress::Link>, StartError> {
        let Some(egress) = egress else {
            return Ok(None);
        };
        let refuse = |message: String| StartError::Refused {
            wall: "egress".into(),
            message: format!(
                "the egress proxy cannot be bridged into the container: {message} (a server that \
                 is not root cannot enter a container's network namespace; use \
                 HOST_SANDBOX_NETWORK=deny, or the host backend)"
            ),
        };
        if self.oci.user_space_kernel {
            return Err(refuse(format!(
                "under {} (gVisor) the code's network stack is the Sentry's own, which a \
                 listener made in the container's namespace never reaches",
                self.oci.resolved
            )));
        }
        let pid = process
            .host_pid()
            .ok_or_else(|| refuse("the engine did not say the container's pid".into()))?;
        let listener = bridge_listener(pid).await.map_err(refuse)?;
        let link = egress
            .serve(listener)
            .map_err(|e| refuse(format!("serving the endpoint: {e}")))?;
        report.walls.push(WallStatus {
            name: "egress".into(),
            enforced: true,
            detail: format!(
                "the container's only endpoint is the server's egress proxy at 127.0.0.1:{}",
                crate::egress::PROXY_PORT
            ),
        });
        Ok(Some(link))
    }

    /// The container's walls join the helper's report; the helper's own namespaces are
    /// replaced by the container's. Under `HOST_SANDBOX=require` any other missing wall
    /// refuses the worker.
    fn judge_report(
        &self,
        mut report: SandboxReport,
        process: &container::DockerProcess,
        user: (u32, u32),
    ) -> Result<SandboxReport, StartError> {
        report.walls.retain(|w| w.name != "namespaces");
        report.walls.insert(0, WallStatus {
            name: "container".into(),
            enforced: true,
            detail: format!(
                "container {} of image {} on {} ({} {}{}): read-only root, {}, cap_drop ALL, no-new-privileges, network {}, {}, /tmp tmpfs {} MiB, init, log driver none, its own mount/PID/IPC/UTS/network{} namespaces; launcher: {}",
                &process.id()[..12.min(process.id().len())],
                self.settings.docker.image,
                self.host,
                self.engine.name,
                self.engine.version,
                if self.engine.rootless { ", rootless" } else { "" },
                self.users.describe(user),
                if self.settings.network.proxied() {
                    "none but the egress proxy"
                } else {
                    "none"
                },
                match self.limits {
                    product::LimitsHeld::Held => format!(
                        "memory {} MiB (swap equal), pids {}",
                        self.settings.mem_limit_bytes >> 20,
                        self.settings.pids_limit
                    ),
                    product::LimitsHeld::Dropped(_) =>
                        "no memory or pids cgroup limit (dropped by the engine: see cgroup_limits)".into(),
                },
                self.settings.docker.tmp_size_bytes >> 20,
                match self.engine.userns_mode() {
                    Some(mode) => format!("/user ({mode})"),
                    None => String::new(),
                },
                self.launcher.describe(),
            ),
        });
        report.walls.insert(1, self.quota_wall());
        if let Some(wall) = self.limits_wall() {
            report.walls.insert(2, wall);
        }
        if self.oci.user_space_kernel {
            sentry_notes(&mut report.walls, &self.oci);
        }
        let missing: Vec<&WallStatus> = report.walls.iter().filter(|w| !w.enforced).collect();
        if self.settings.host_sandbox == SandboxMode::Require && !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|w| w.name.as_str()).collect();
            let details: Vec<String> = missing
                .iter()
                .map(|w| format!("{}: {}", w.name, w.detail))
                .collect();
            return Err(StartError::Refused {
                wall: names.join(", "),
                message: format!(
                    "HOST_SANDBOX=require and {} cannot be installed inside the container: {}",
                    if missing.len() == 1 {
                        "this wall"
                    } else {
                        "these walls"
                    },
                    details.join("; ")
                ),
            });
        }
        report.mode = self.settings.host_sandbox.word().to_string();
        Ok(report)
    }
}

/// What the walls mean under gVisor, said in their details: the code's system calls and
/// /proc are the Sentry's (a user-space kernel), whose own seccomp filter stands between
/// it and the host's kernel.
fn sentry_notes(walls: &mut [WallStatus], oci: &crate::backend::ContainerRuntime) {
    for w in walls.iter_mut() {
        let note = match w.name.as_str() {
            "container" => format!(
                "runtime {}: gVisor, a user-space kernel (reports {}) between the code and the host's",
                oci.resolved, oci.kernel
            ),
            "landlock" => "gVisor's Sentry does not implement Landlock; the exec seal and the \
                 container's mounts stand in for its execute and path rules"
                .into(),
            "w_xor_x" => "gVisor's Sentry has no PR_SET_MDWE; the Sentry runs the seccomp \
                 filter that stands in for it"
                .into(),
            "seccomp" => "these filters run in the Sentry, which serves the code's system \
                 calls itself; the host's kernel sees only the Sentry's, under runsc's own filter"
                .into(),
            _ => continue,
        };
        w.detail = format!("{} ({note})", w.detail);
    }
}

impl Inner {
    /// The cgroup limits the engine dropped (a rootless engine on cgroup v1), as a
    /// missing wall beside what still bounds the worker; `None` when they are held.
    fn limits_wall(&self) -> Option<WallStatus> {
        let product::LimitsHeld::Dropped(why) = &self.limits else {
            return None;
        };
        Some(WallStatus {
            name: LIMITS_WALL.into(),
            enforced: false,
            detail: format!(
                "{why}; the worker's RLIMIT_AS still caps each process's memory, the seccomp filter refuses new processes{}",
                if self.engine.userns_mode().is_some() {
                    " and RLIMIT_NPROC, counted in the container's own user namespace, caps its threads"
                } else {
                    ""
                }
            ),
        })
    }

    fn quota_wall(&self) -> WallStatus {
        match &self.quota {
            Quota::Tmpfs { bytes } => WallStatus {
                name: "disk_quota".into(),
                enforced: true,
                detail: format!(
                    "/workspace is a tmpfs of {bytes} bytes (SANDBOX_DISK_LIMIT) that the server mounted on the session's directory; /tmp a tmpfs of {} bytes (SANDBOX_TMP_SIZE)",
                    self.settings.docker.tmp_size_bytes
                ),
            },
            Quota::Volume { bytes } => WallStatus {
                name: "disk_quota".into(),
                enforced: true,
                detail: format!(
                    "/workspace lives in the container: a tmpfs volume of {bytes} bytes (SANDBOX_DISK_LIMIT) on the engine {}, copied back to the server over the engine's API after each call ({}); /tmp a tmpfs of {} bytes (SANDBOX_TMP_SIZE)",
                    self.host,
                    match &self.place {
                        WorkspacePlace::InContainer(why) => why.as_str(),
                        WorkspacePlace::Host => "",
                    },
                    self.settings.docker.tmp_size_bytes
                ),
            },
            Quota::Unavailable(why) => WallStatus {
                name: "disk_quota".into(),
                enforced: false,
                detail: format!(
                    "no per-session quota on /workspace: {why}; /tmp is a tmpfs of {} bytes and SANDBOX_FILE_SIZE_LIMIT caps each file",
                    self.settings.docker.tmp_size_bytes
                ),
            },
        }
    }
}

/// The wall of the container's memory and pids cgroup limits, named where the engine
/// dropped them.
const LIMITS_WALL: &str = "cgroup_limits";

/// The empty read-only file of the instance that covers each file a grant hides.
const EMPTY_FILE: &str = "hidden-empty";

/// Makes the instance's [`EMPTY_FILE`] (read-only for everyone: the container user
/// reads it as nothing).
fn make_empty_file(instance_dir: &Path) -> std::io::Result<()> {
    let path = instance_dir.join(EMPTY_FILE);
    std::fs::File::create(&path)?;
    crate::os::set_mode(&path, 0o444)
}

/// What a granted directory holds that the container must not reach, found again just
/// before the container is made: each entry the never-grant rules name, not walking
/// into the other file systems mounted inside it (the bind leaves them out).
#[cfg(unix)]
fn hidden_in(dir: &Path) -> Result<Vec<(PathBuf, crate::grants::MaskKind)>, String> {
    use std::os::fd::AsFd;
    let rules = crate::grants::NeverGrant::embedded().map_err(|e| e.to_string())?;
    let table = crate::grants::mountinfo::read_self()?;
    let skip: Vec<PathBuf> = crate::grants::mountinfo::beneath(&table, dir)
        .iter()
        .filter_map(|m| m.mount_point.strip_prefix(dir).ok().map(Path::to_path_buf))
        .collect();
    let fd = crate::grants::open_no_symlinks(dir).map_err(|e| e.to_string())?;
    let masks = crate::grants::scan::scan(fd.as_fd(), &rules, &skip, &crate::grants::scan::LIMITS)
        .map_err(|e| e.to_string())?;
    Ok(masks
        .into_iter()
        .map(|m| (dir.join(m.rel), m.kind))
        .collect())
}

/// Grants exist only on Unix servers (they are pinned by descriptor at consent).
#[cfg(not(unix))]
fn hidden_in(_dir: &Path) -> Result<Vec<(PathBuf, crate::grants::MaskKind)>, String> {
    Ok(Vec::new())
}

/// Each grant, re-checked just before it is bound: it must still resolve to itself (no
/// symlink put in its place since consent) and be the same kind of object; what a
/// directory holds that must be hidden is found again.
fn bind_grants(grants: &[Grant], empty_file: &Path) -> Result<Vec<BoundGrant>, StartError> {
    grants
        .iter()
        .map(|g| {
            let now = std::fs::canonicalize(&g.path).ok();
            let kind_ok = std::fs::symlink_metadata(&g.path).is_ok_and(|m| match g.kind {
                PathKind::Directory => m.is_dir(),
                PathKind::File => m.is_file(),
            });
            if now.as_deref() != Some(g.path.as_path()) || !kind_ok {
                return Err(StartError::Refused {
                    wall: "grants".into(),
                    message: format!(
                        "{} is no longer the object that was approved; ask for it again",
                        g.path.display()
                    ),
                });
            }
            let hidden = match g.kind {
                PathKind::Directory => hidden_in(&g.path).map_err(|e| StartError::Refused {
                    wall: "grants".into(),
                    message: format!("{}: {e}; it is not bound", g.path.display()),
                })?,
                PathKind::File => Vec::new(),
            };
            if hidden
                .iter()
                .any(|(_, k)| *k == crate::grants::MaskKind::File)
                && !empty_file.is_file()
            {
                return Err(StartError::Refused {
                    wall: "grants".into(),
                    message: format!(
                        "{}: {} is missing, so what the grant hides cannot be covered",
                        g.path.display(),
                        empty_file.display()
                    ),
                });
            }
            Ok(BoundGrant {
                path: g.path.clone(),
                access: g.access,
                hidden,
            })
        })
        .collect()
}

/// Makes a home: `dir`, the server's own with mode 0700 (only the server and the engine
/// reach what is inside), and in it `workspace`, owned by `user` and, when the quota
/// stands, a tmpfs of `quota` bytes. Undone on failure.
pub(crate) fn make_home(
    dir: &Path,
    user: (u32, u32),
    quota: Option<u64>,
) -> std::io::Result<PathBuf> {
    crate::os::create_dir(dir, 0o700, false)?;
    let workspace = dir.join("workspace");
    let made = crate::os::set_mode(dir, 0o700)
        .and_then(|()| make_workspace(&workspace, user))
        .and_then(|()| match quota {
            Some(bytes) => quota::mount(&workspace, bytes, user),
            None => Ok(()),
        });
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(dir);
        return Err(e);
    }
    Ok(workspace)
}

/// Creates `dir` for a container's workspace, owned by the container user (Unix; on
/// Windows Docker Desktop maps ownership itself).
fn make_workspace(dir: &Path, user: (u32, u32)) -> std::io::Result<()> {
    crate::os::create_dir(dir, 0o700, false)?;
    #[cfg(unix)]
    if running_as_root() {
        std::os::unix::fs::chown(dir, Some(user.0), Some(user.1))?;
    }
    #[cfg(not(unix))]
    let _ = user;
    crate::os::set_mode(dir, 0o700)
}

impl DockerBackend {
    /// The state of the engine `slot` was placed on, while that engine has it; else
    /// the error that ends the session.
    fn engine_of(&self, slot: &DockerSlot) -> Result<Arc<Inner>, StartError> {
        if let Some(why) = self.fleet.lost_now(slot.placed) {
            return Err(StartError::EngineLost(why));
        }
        self.fleet
            .inner(slot.placed.engine)
            .ok_or_else(|| StartError::EngineLost(format!("{} is not set up", slot.engine)))
    }

    /// The engine whose facts the backend reports: the first that answers, else the
    /// first set up.
    fn reporting(&self) -> Arc<Inner> {
        let status = self.fleet.status();
        (0..status.len())
            .find(|i| status[*i].up)
            .and_then(|i| self.fleet.inner(i))
            .unwrap_or_else(|| self.fleet.first.clone())
    }
}

impl Backend for DockerBackend {
    type Slot = DockerSlot;

    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// Places the session on an engine, and makes its home (mode 0700, the server's)
    /// with the workspace its containers bind: owned by the session's uid (its own, as
    /// root) and, when that engine's quota stands, a tmpfs of `SANDBOX_DISK_LIMIT`.
    fn open_session(&self, dir: &Path) -> std::io::Result<(DockerSlot, SessionPaths)> {
        let (placed, inner) = self
            .fleet
            .place()
            .map_err(|why| std::io::Error::new(std::io::ErrorKind::HostUnreachable, why))?;
        let made = self.make_home_on(&inner, dir, placed);
        if made.is_err() {
            self.fleet.release(placed);
        }
        made
    }

    /// A new container bound to the session's workspace and grants, on its engine.
    /// (Warm containers are started through here too, by the session layer's pool, in
    /// homes made ahead.)
    async fn start_worker(
        &self,
        slot: &DockerSlot,
        spec: &WorkerSpec<'_>,
    ) -> Result<Worker, StartError> {
        let inner = self.engine_of(slot)?;
        if let Some(volume) = &slot.volume {
            if let Some(g) = spec.grants.first() {
                return Err(StartError::Refused {
                    wall: "grants".into(),
                    message: inner
                        .no_host_paths(&format!("{} cannot be granted", g.path.display())),
                });
            }
            inner.hold_workspace(slot, volume).await?;
        }
        let (worker, _) = inner
            .start_container(&inner.session_run("session", slot, spec.grants))
            .await?;
        Ok(worker)
    }

    /// Starts a session's package installer: a container of the same image (so pip
    /// picks the wheels its interpreter loads), on the session's engine, on the
    /// install's stage, with the installer's own proxy or no network.
    ///
    /// # Errors
    /// As [`Backend::start_worker`].
    async fn start_installer(
        &self,
        slot: &DockerSlot,
        spec: &crate::backend::InstallerSpec<'_>,
    ) -> Result<Worker, StartError> {
        let inner = self.engine_of(slot)?;
        let run = Run {
            role: "installer",
            workspace: config::WorkspaceSource::Host(spec.stage),
            user: slot.user,
            grants: spec.grants,
            network: if spec.egress.is_some() {
                crate::config::NetworkMode::Proxy
            } else {
                crate::config::NetworkMode::Deny
            },
            packages: None,
            tmp_bytes: spec.tmp_bytes,
            egress: spec.egress.as_ref(),
            freshness: None,
        };
        if slot.volume.is_some() {
            return Err(StartError::Refused {
                wall: "packages".into(),
                message: inner.no_host_paths("install_packages cannot add a package layer"),
            });
        }
        inner.start_container(&run).await.map(|(worker, _)| worker)
    }

    /// Shutdown begins: no container is created from now on, and every container of
    /// this instance is removed from every engine, all at once (a signal gives the
    /// server a second).
    async fn kill_all(&self) {
        let inners = self.fleet.inners();
        for inner in &inners {
            inner
                .closing
                .store(true, std::sync::atomic::Ordering::Release);
        }
        remove_everywhere(&inners).await;
    }

    /// The workspace's own tmpfs is resized where the quota stands (a root server next
    /// to its engine); plain host directories cannot be.
    fn limit_growth(&self, slot: &DockerSlot, bytes_left: Option<u64>) -> Result<bool, String> {
        let Some(quota) = self
            .fleet
            .inner(slot.placed.engine)
            .and_then(|i| i.quota.host_tmpfs())
        else {
            return Ok(false);
        };
        quota::narrow(&slot.workspace, quota, bytes_left)
            .map(|()| true)
            .map_err(|e| format!("resizing the workspace tmpfs: {e}"))
    }

    /// Detaches the workspace's tmpfs, deletes the session's directory, frees its uid
    /// and its place on its engine (its containers are already removed; one still going
    /// holds the tmpfs only until it is).
    fn close_session(&self, slot: &DockerSlot) -> Result<(), String> {
        self.users.release(slot.user);
        if let (Some(name), Some(inner)) = (&slot.volume, self.fleet.inner(slot.placed.engine)) {
            // The keeper first, then the volume, once the session's containers are gone
            // (their removal may be under way).
            let name = name.clone();
            let keeper = slot.keeper.try_lock().ok().and_then(|k| k.clone());
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn(async move {
                    if let Some(id) = keeper {
                        engine::remove(&inner.docker, &id).await;
                    }
                    volume::remove(&inner.docker, &name).await
                })),
                Err(_) => {
                    tracing::warn!(volume = %name, "no runtime to remove a workspace volume; the next start reaps it")
                }
            }
        }
        self.fleet.release(slot.placed);
        // Only a quota's tmpfs is mounted (a server that may not unmount is told EPERM
        // even where nothing is).
        let quota = self
            .fleet
            .inner(slot.placed.engine)
            .and_then(|i| i.quota.host_tmpfs());
        if quota.is_some()
            && let Err(e) = quota::unmount(&slot.workspace)
        {
            return Err(format!(
                "the workspace tmpfs on {} could not be detached: {e}",
                slot.workspace.display()
            ));
        }
        match std::fs::remove_dir_all(&slot.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{} could not be removed: {e}", slot.dir.display())),
        }
    }

    /// Whether the session's engine is lost to it (asked again now: a worker there just
    /// died or did not start).
    async fn engine_lost(&self, slot: &DockerSlot) -> Option<String> {
        self.fleet.lost(slot.placed).await
    }

    /// A warm home's engine against the one a new home would go to (see
    /// [`Fleet::rank`]); `None` once its engine is lost to it.
    fn home_rank(&self, slot: &DockerSlot) -> Option<i64> {
        self.fleet.rank(slot.placed)
    }

    /// Copies an in-container workspace back to the server's copy, from the session's
    /// container now.
    async fn settle(&self, slot: &DockerSlot, finished: bool) -> Option<String> {
        slot.volume.as_ref()?;
        let at = slot.freshness.wanted(finished)?;
        let id = slot.keeper.lock().await.clone()?;
        let inner = self.fleet.inner(slot.placed.engine)?;
        let caps = copyback::Caps {
            total_bytes: inner.settings.disk_limit_bytes,
            file_bytes: inner.settings.file_size_limit_bytes,
            entries: copyback::MAX_ENTRIES,
        };
        match copyback::copy_back(&inner.docker, &id, &slot.dir, &slot.workspace, caps).await {
            Ok(left_out) => {
                slot.freshness.copied(at);
                copyback::left_out_warning(&left_out)
            }
            Err(e) => Some(format!(
                "the server's copy of the workspace was not refreshed from the container ({e}); files, results and resources show it as of an earlier call, and the next call's copy brings it up to date"
            )),
        }
    }

    /// Each engine that answers keeps its own warm containers.
    fn warm_places(&self) -> usize {
        self.fleet.up()
    }

    fn container_runtime(&self) -> Option<crate::backend::ContainerRuntime> {
        Some(self.reporting().oci.clone())
    }

    async fn shutdown(&self) {
        remove_everywhere(&self.fleet.inners()).await;
    }

    fn enforcement(&self) -> Enforcement {
        let mut e = self.reporting().enforcement();
        e.engines = self.fleet.status();
        e
    }
}

/// Removes every container of this instance from every engine, all at once, then its
/// workspace volumes.
async fn remove_everywhere(inners: &[Arc<Inner>]) {
    let removals = inners.iter().map(|i| async move {
        engine::remove_instance(&i.docker, &i.owner.instance).await;
        volume::remove_instance(&i.docker, &i.owner.instance).await;
    });
    futures_util::future::join_all(removals).await;
}

impl DockerBackend {
    /// Makes a home on the engine `inner` is, for a home placed there.
    fn make_home_on(
        &self,
        inner: &Inner,
        dir: &Path,
        placed: Placed,
    ) -> std::io::Result<(DockerSlot, SessionPaths)> {
        let user = self.users.allocate()?;
        if let WorkspacePlace::InContainer(_) = inner.place {
            return self.make_copy_home(inner, dir, placed, user);
        }
        let workspace = match make_home(dir, user, inner.quota.host_tmpfs()) {
            Ok(w) => w,
            Err(e) => {
                self.users.release(user);
                return Err(e);
            }
        };
        let paths = SessionPaths {
            workspace: workspace.clone(),
        };
        let layer = match crate::packages::layer::Layer::create(&dir.join("packages")) {
            Ok(layer) => Some(layer),
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => None,
            Err(e) => {
                self.users.release(user);
                if inner.quota.host_tmpfs().is_some() {
                    let _ = quota::unmount(&workspace);
                }
                let _ = std::fs::remove_dir_all(dir);
                return Err(e);
            }
        };
        let slot = DockerSlot {
            dir: dir.to_path_buf(),
            workspace,
            user,
            layer,
            placed,
            engine: inner.host.clone(),
            volume: None,
            freshness: Arc::default(),
            keeper: tokio::sync::Mutex::new(None),
        };
        Ok((slot, paths))
    }

    /// A home for an in-container workspace: the server's own directory (mode 0700)
    /// holding its copy of the workspace, and the name of the session's volume, made on
    /// the engine before its first container.
    fn make_copy_home(
        &self,
        inner: &Inner,
        dir: &Path,
        placed: Placed,
        user: (u32, u32),
    ) -> std::io::Result<(DockerSlot, SessionPaths)> {
        let workspace = dir.join("workspace");
        let made = crate::os::create_dir(dir, 0o700, false)
            .and_then(|()| crate::os::create_dir(&workspace, 0o700, false));
        if let Err(e) = made {
            self.users.release(user);
            let _ = std::fs::remove_dir_all(dir);
            return Err(e);
        }
        let slot = DockerSlot {
            dir: dir.to_path_buf(),
            workspace: workspace.clone(),
            user,
            layer: None,
            placed,
            engine: inner.host.clone(),
            volume: Some(volume::name(&inner.owner.instance, &dir_name(dir))),
            freshness: Arc::default(),
            keeper: tokio::sync::Mutex::new(None),
        };
        Ok((slot, SessionPaths { workspace }))
    }
}

impl Inner {
    /// Makes the session's workspace volume and the container that holds it mounted,
    /// once per session.
    async fn hold_workspace(&self, slot: &DockerSlot, name: &str) -> Result<(), StartError> {
        let mut keeper = slot.keeper.lock().await;
        if keeper.is_some() {
            return Ok(());
        }
        let bytes = self.settings.disk_limit_bytes;
        volume::create(&self.docker, &self.owner, name, bytes, slot.user)
            .await
            .map_err(StartError::Engine)?;
        let run = Run::bare(
            "keeper",
            config::WorkspaceSource::Volume(name),
            slot.user,
            1 << 20,
        );
        let empty_file = self.instance_dir.join(EMPTY_FILE);
        let cfg =
            volume::keeper_config(config::container_config(&self.plan(&run, &[], &empty_file)));
        let name = container::container_name(&self.owner.instance, "keeper");
        let id = container::run_detached(&self.docker, cfg, &name, self.create_gate.as_ref())
            .await
            .map_err(StartError::Engine)?;
        *keeper = Some(id);
        Ok(())
    }

    /// Why something that needs this machine's paths cannot be had on this engine.
    fn no_host_paths(&self, what: &str) -> String {
        let why = match &self.place {
            WorkspacePlace::InContainer(why) => why.as_str(),
            WorkspacePlace::Host => "",
        };
        format!(
            "{what}: sessions on the engine {} keep their workspace in the container, and it cannot reach this machine's files ({why})",
            self.host
        )
    }
}

impl Inner {
    /// What this engine enforces.
    fn enforcement(&self) -> Enforcement {
        let mut gaps: Vec<Capability> = self.users.gap(self.engine.rootless).into_iter().collect();
        if let Quota::Unavailable(why) = &self.quota {
            gaps.push(Capability {
                mechanism: "disk_quota".into(),
                enforced: false,
                reason: format!(
                    "{why}; /tmp is a size-capped tmpfs and SANDBOX_FILE_SIZE_LIMIT caps each file"
                ),
            });
        }
        if let Some(wall) = self.limits_wall() {
            gaps.push(Capability {
                mechanism: wall.name,
                enforced: false,
                reason: wall.detail,
            });
        }
        let held = self.limits == product::LimitsHeld::Held;
        Enforcement {
            kind: BackendKind::Docker,
            python: self.runtime.executable.display().to_string(),
            python_version: self.runtime.version.clone(),
            dedicated_uid_per_session: self.users.per_session(),
            workspace_quota_bytes: self.quota.bytes(),
            protected_paths: match &self.launcher {
                Launcher::Bound(path) => vec![path.clone()],
                Launcher::Image { .. } => Vec::new(),
            },
            processes_limit: (held || self.engine.userns_mode().is_some())
                .then_some(self.settings.pids_limit),
            processes_counted_by: match (held, self.engine.userns_mode().is_some()) {
                (true, _) => "the container's pids cgroup (SANDBOX_PIDS_LIMIT)".into(),
                (false, true) => "RLIMIT_NPROC in the container's own user namespace (the engine dropped the pids cgroup limit)".into(),
                (false, false) => "nothing: the engine dropped the pids cgroup limit; the seccomp filter refuses new processes".into(),
            },
            grant_walls: crate::grants::GrantWalls::Container,
            launcher: Some(self.launcher.describe()),
            container_runtime: Some(self.oci.clone()),
            // The container is a world whatever HOST_SANDBOX says; its own places are
            // the host world's.
            world: Some(super::WorldPlaces::LINUX),
            gaps,
            engines: Vec::new(),
        }
    }
}

/// See [`crate::sandbox::linux::egress::listen_in_network_of`]; off the runtime's threads.
#[cfg(target_os = "linux")]
async fn bridge_listener(pid: i32) -> Result<std::net::TcpListener, String> {
    tokio::task::spawn_blocking(move || crate::sandbox::linux::egress::listen_in_network_of(pid))
        .await
        .map_err(|e| format!("the bridging task failed: {e}"))?
}

/// Only Linux can enter a container's network namespace (the engine runs there).
#[cfg(not(target_os = "linux"))]
async fn bridge_listener(_pid: i32) -> Result<std::net::TcpListener, String> {
    Err("a server on this platform cannot enter the engine's network namespaces".into())
}
