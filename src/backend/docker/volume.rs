//! In-container workspaces (`SANDBOX_WORKSPACE=in-container`, or `auto` on an engine
//! that cannot see this machine's files): each session's `/workspace` is a volume of the
//! engine's, a size-capped tmpfs owned by the session's container user, made before its
//! first container and removed when the session closes. It outlives the session's
//! containers, so a worker's restart keeps its files, as a host workspace does.
//!
//! Volumes carry the owner labels containers carry, so the same reaping finds them:
//! this instance's at shutdown and when an engine returns, a dead instance's at start.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{ListVolumesOptions, RemoveVolumeOptions};

use super::config::{LABEL_INSTANCE, Owner, VOLUME_PREFIX};

/// How many times a removal refused because a container still holds the volume is
/// tried again (its container's removal is under way).
const REMOVE_ATTEMPTS: u32 = 50;

/// The name of a home's volume: this instance's, then the home's directory name.
pub fn name(instance: &str, home: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect()
    };
    format!("{VOLUME_PREFIX}{}-{}", clean(instance), clean(home))
}

/// The engine's options for a tmpfs of `bytes` owned by `user`, mode 0700. Pure.
pub fn tmpfs_options(bytes: u64, user: (u32, u32)) -> HashMap<String, String> {
    HashMap::from([
        ("type".to_string(), "tmpfs".to_string()),
        ("device".to_string(), "tmpfs".to_string()),
        (
            "o".to_string(),
            format!(
                "size={bytes},uid={},gid={},mode=0700,nosuid,nodev",
                user.0, user.1
            ),
        ),
    ])
}

/// A worker container's configuration turned into its workspace's keeper: it only
/// holds the volume mounted (`sleep`, which every Debian-based image has), with the
/// same walls, no input and no output. Pure.
pub fn keeper_config(
    mut cfg: bollard::models::ContainerCreateBody,
) -> bollard::models::ContainerCreateBody {
    cfg.entrypoint = Some(vec!["/bin/sleep".to_string()]);
    cfg.cmd = Some(vec!["infinity".to_string()]);
    cfg.attach_stdin = Some(false);
    cfg.attach_stdout = Some(false);
    cfg.attach_stderr = Some(false);
    cfg.open_stdin = Some(false);
    cfg.stdin_once = Some(false);
    cfg
}

/// Makes the volume (nothing when it exists: a second start of the same session).
pub async fn create(
    docker: &Docker,
    owner: &Owner,
    name: &str,
    bytes: u64,
    user: (u32, u32),
) -> Result<(), String> {
    let request = VolumeCreateRequest {
        name: Some(name.to_string()),
        driver: Some("local".to_string()),
        driver_opts: Some(tmpfs_options(bytes, user)),
        labels: Some(owner.labels("workspace")),
        ..Default::default()
    };
    docker
        .create_volume(request)
        .await
        .map(|_| ())
        .map_err(|e| format!("the engine did not make the workspace volume {name}: {e}"))
}

/// Removes a volume, waiting while a container that is being removed still holds it;
/// true when it is gone.
pub async fn remove(docker: &Docker, name: &str) -> bool {
    let options = RemoveVolumeOptions { force: true };
    for _ in 0..REMOVE_ATTEMPTS {
        match docker.remove_volume(name, Some(options.clone())).await {
            Ok(()) => return true,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return true,
            // In use: the container holding it is being removed.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            Err(e) => {
                tracing::warn!(volume = %name, error = %e, "could not remove a workspace volume");
                return false;
            }
        }
    }
    false
}

/// The names and labels of warden's volumes on the engine, whose labels match
/// `filter` (`key` or `key=value`).
async fn labelled(docker: &Docker, filter: &str) -> Vec<(String, HashMap<String, String>)> {
    let options = ListVolumesOptions {
        filters: Some(HashMap::from([(
            "label".to_string(),
            vec![filter.to_string()],
        )])),
    };
    match docker.list_volumes(Some(options)).await {
        Ok(list) => list
            .volumes
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v.name.starts_with(VOLUME_PREFIX))
            .map(|v| (v.name, v.labels))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Removes every workspace volume of `instance` (after its containers are gone).
pub async fn remove_instance(docker: &Docker, instance: &str) {
    let found = labelled(docker, &format!("{LABEL_INSTANCE}={instance}")).await;
    let removals = found.iter().map(|(name, _)| remove(docker, name));
    futures_util::future::join_all(removals).await;
}

/// Removes the workspace volumes of warden instances that are gone; how many.
pub async fn reap_leftovers(docker: &Docker, me: &Owner) -> usize {
    let mut reaped = 0;
    for (name, labels) in labelled(docker, LABEL_INSTANCE).await {
        if super::engine::owner_is_gone(&labels, me) && remove(docker, &name).await {
            reaped += 1;
        }
    }
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_is_named_for_its_instance_and_home_and_capped() {
        let n = name("123-ab", "home-7");
        assert_eq!(n, "warden-ws-123-ab-home-7");
        let o = tmpfs_options(1 << 20, (70000, 70001));
        assert_eq!(o["type"], "tmpfs");
        assert_eq!(
            o["o"],
            "size=1048576,uid=70000,gid=70001,mode=0700,nosuid,nodev"
        );
        assert_eq!(name("a/b", ".."), "warden-ws-a-b---");
    }
}
