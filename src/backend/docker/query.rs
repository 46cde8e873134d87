//! What the image and the engine are, asked once at start by a one-off container (the
//! same hardened configuration as a worker's) running `warden __container-query`: where
//! the image's Python lives, and whether the engine sees the size-capped tmpfs the
//! server mounted as the container's workspace (the disk quota, see [`super::quota`]).

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::query_parameters::AttachContainerOptions;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::product::{self, LimitsHeld};
use super::quota::{self, Quota};
use super::{Inner, WorkspacePlace, config, container, engine, make_home, running_as_root, volume};
use crate::backend::docker_settings::WorkspaceMode;
use crate::worker::python::PythonRuntime;

/// The file the server leaves in the query's workspace, holding a nonce.
pub const MARKER: &str = ".warden-quota-probe";

/// What `warden __container-query` prints.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    pub runtime: PythonRuntime,
    pub workspace: WorkspaceSeen,
    /// The kernel release the container sees (`uname -r`; gVisor's Sentry says its own).
    /// Empty from an image launcher that does not say.
    #[serde(default)]
    pub kernel: String,
}

/// `/workspace` as the container sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceSeen {
    /// It is a tmpfs.
    pub tmpfs: bool,
    /// Its size.
    pub bytes: u64,
    /// The marker's content, if the marker is there.
    pub marker: Option<String>,
}

/// What the start-up query found.
pub(super) struct Found {
    pub runtime: PythonRuntime,
    pub quota: Quota,
    /// The kernel release the code sees.
    pub kernel: String,
    /// The memory and pids limits as the engine holds them for a container it made.
    pub limits: LimitsHeld,
    /// Where sessions on this engine keep their workspace.
    pub place: WorkspacePlace,
}

/// The image's interpreter, and how workspaces can be capped: the query's own workspace
/// holds a marker (a nonce), and the engine must show it to the container, or the
/// workspaces this server binds would not be what its containers see (a remote engine,
/// or a directory Docker Desktop does not share): then the backend is unavailable. As
/// root on Linux the workspace is also a tmpfs of `SANDBOX_DISK_LIMIT`, and the quota
/// stands only if the container saw exactly that.
pub(super) async fn query_image(inner: &Inner) -> Result<Found, String> {
    let user = inner
        .users
        .allocate()
        .map_err(|e| format!("no uid for the query container: {e}"))?;
    let home = inner.instance_dir.join(format!(".query-{}", inner.index));
    let answer = match inner.settings.docker.workspace {
        WorkspaceMode::Host => query_in(inner, &home, user).await,
        WorkspaceMode::InContainer => {
            query_in_volume(inner, user, "SANDBOX_WORKSPACE=in-container".into()).await
        }
        WorkspaceMode::Auto => match query_in(inner, &home, user).await {
            Ok(found) => Ok(found),
            Err(unseen) => {
                let why = format!("SANDBOX_WORKSPACE=auto, and {unseen}");
                query_in_volume(inner, user, why)
                    .await
                    .map_err(|e| format!("{unseen}; and with a workspace in the container: {e}"))
            }
        },
    };
    inner.users.release(user);
    answer
}

/// The query on a workspace volume of the engine's (an in-container workspace): what
/// the image is; the volume's tmpfs is the quota.
async fn query_in_volume(inner: &Inner, user: (u32, u32), why: String) -> Result<Found, String> {
    let name = volume::name(&inner.owner.instance, &format!("query-{}", inner.index));
    let bytes = inner.settings.disk_limit_bytes;
    volume::create(&inner.docker, &inner.owner, &name, bytes, user).await?;
    let cfg = query_config(inner, config::WorkspaceSource::Volume(&name), user);
    let result = run_to_end(inner, cfg).await;
    volume::remove(&inner.docker, &name).await;
    let (stdout, stderr, held) = result?;
    let answer = parse_answer(inner, &stdout, &stderr)?;
    if !answer.workspace.tmpfs {
        return Err("the engine's workspace volume is not a tmpfs".into());
    }
    Ok(Found {
        runtime: answer.runtime,
        quota: Quota::Volume { bytes },
        kernel: answer.kernel,
        limits: product::limits_held(&inner.engine, limits_asked(inner), held),
        place: WorkspacePlace::InContainer(why),
    })
}

/// The query container's configuration: a worker's on `workspace`, running the query.
fn query_config(
    inner: &Inner,
    workspace: config::WorkspaceSource<'_>,
    user: (u32, u32),
) -> bollard::models::ContainerCreateBody {
    let tmp_bytes = inner.settings.docker.tmp_size_bytes;
    let run = super::Run::bare("query", workspace, user, tmp_bytes);
    let empty_file = inner.instance_dir.join(super::EMPTY_FILE);
    let mut cfg = config::container_config(&inner.plan(&run, &[], &empty_file));
    cfg.cmd = Some(vec![super::route::QUERY_SUBCOMMAND.to_string()]);
    cfg.open_stdin = Some(false);
    cfg.stdin_once = Some(false);
    cfg.attach_stdin = Some(false);
    cfg
}

fn parse_answer(inner: &Inner, stdout: &[u8], stderr: &[u8]) -> Result<Answer, String> {
    serde_json::from_slice::<Answer>(stdout.trim_ascii()).map_err(|e| {
        format!(
            "the image {} has no usable python3 or launcher ({e}): {}",
            inner.settings.docker.image,
            String::from_utf8_lossy(stderr).trim()
        )
    })
}

fn limits_asked(inner: &Inner) -> (i64, i64) {
    (
        cfg_limit(inner.settings.mem_limit_bytes),
        cfg_limit(inner.settings.pids_limit),
    )
}

/// The query, run in `home` as `user`.
async fn query_in(
    inner: &Inner,
    home: &std::path::Path,
    user: (u32, u32),
) -> Result<Found, String> {
    let dir = make_home(home, user, None).map_err(|e| format!("{}: {e}", home.display()))?;
    let bytes = inner.settings.disk_limit_bytes;
    let nonce: String = crate::hex(&crate::random_bytes::<12>());
    let mounted = if let Some(why) = quota::platform_gap() {
        Err(why)
    } else if running_as_root() {
        quota::mount(&dir, bytes, user)
            .map_err(|e| format!("cannot mount a size-capped tmpfs on {}: {e}", dir.display()))
    } else {
        Err("the server is not root: only root can mount a size-capped tmpfs that the engine sees, so workspaces are plain host directories (run the server as root for a per-session disk quota)".to_string())
    };
    let marked = std::fs::write(dir.join(MARKER), &nonce);
    let cfg = query_config(inner, config::WorkspaceSource::Host(&dir), user);
    let result = match marked {
        Ok(()) => run_to_end(inner, cfg).await,
        Err(e) => Err(format!("{}: {e}", dir.join(MARKER).display())),
    };
    if mounted.is_ok() {
        let _ = quota::unmount(&dir);
    }
    let _ = std::fs::remove_dir_all(home);
    let (stdout, stderr, held) = result?;
    let answer = parse_answer(inner, &stdout, &stderr)?;
    shared(&nonce, &answer.workspace, &inner.instance_dir)?;
    let quota = match mounted.and_then(|()| {
        quota::judge(
            &nonce,
            bytes,
            &answer.workspace,
            inner.oci.user_space_kernel,
        )
    }) {
        Ok(q) => q,
        Err(why) => Quota::Unavailable(why),
    };
    Ok(Found {
        runtime: answer.runtime,
        quota,
        kernel: answer.kernel,
        limits: product::limits_held(&inner.engine, limits_asked(inner), held),
        place: WorkspacePlace::Host,
    })
}

/// A limit as the engine's API states it.
fn cfg_limit(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The container saw the marker this server wrote in the directory it bound: the
/// engine shares this machine's directories. Else no workspace would reach the code.
fn shared(nonce: &str, seen: &WorkspaceSeen, dir: &std::path::Path) -> Result<(), String> {
    if seen.marker.as_deref() == Some(nonce) {
        return Ok(());
    }
    Err(format!(
        "the engine does not show its containers this machine's directories (a container bound {} and did not find the file the server wrote there): a remote DOCKER_HOST cannot bind this machine's workspaces, Docker Desktop must share that directory (Settings > Resources > File sharing), and a rootless Docker maps a container's uid into the user's subordinate range, where the server's own mode-0700 workspaces are out of reach (rootless Podman is supported: its containers keep the user's uid)",
        dir.display()
    ))
}

/// The query container's output, and the memory and pids limits the engine holds for it
/// (as its inspection reports them).
type Output = (Vec<u8>, Vec<u8>, (Option<i64>, Option<i64>));

async fn run_to_end(
    inner: &Inner,
    cfg: bollard::models::ContainerCreateBody,
) -> Result<Output, String> {
    config::validate_container_config(&cfg, &engine::is_socket).map_err(|e| e.to_string())?;
    let name = container::container_name(&inner.owner.instance, "query");
    let docker = &inner.docker;
    let one_at_a_time = match &inner.create_gate {
        Some(gate) => Some(gate.turn().await),
        None => None,
    };
    let id = docker
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(name),
                ..Default::default()
            }),
            cfg,
        )
        .await
        .map_err(|e| format!("cannot create a container from the image: {e}"))?
        .id;
    drop(one_at_a_time);
    let out = async {
        let held = docker
            .inspect_container(&id, None)
            .await
            .map_err(|e| format!("cannot inspect the query container: {e}"))?
            .host_config
            .map(|hc| (hc.memory, hc.pids_limit))
            .unwrap_or_default();
        let mut attached = docker
            .attach_container(
                &id,
                Some(AttachContainerOptions {
                    stream: true,
                    stdout: true,
                    stderr: true,
                    ..Default::default()
                }),
            )
            .await
            .map_err(|e| format!("cannot attach: {e}"))?;
        docker
            .start_container(&id, None)
            .await
            .map_err(|e| format!("cannot start a container from the image: {e}"))?;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(Ok(item)) = attached.output.next().await {
            match item {
                LogOutput::StdOut { message } => stdout.extend_from_slice(&message),
                LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                _ => {}
            }
        }
        Ok((stdout, stderr, held))
    };
    let result = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .unwrap_or_else(|_| Err("the image's interpreter query took over 30 s".to_string()));
    engine::remove(docker, &id).await;
    result
}
