//! Talking to the engine: connecting as `DOCKER_HOST` says (local socket, TCP, TCP+TLS),
//! who this server is on a shared engine (labels), and reaping the containers of warden
//! instances that are gone.

use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};

use super::config::{LABEL_BOOT, LABEL_HOST, LABEL_INSTANCE, LABEL_PID, LABEL_PID_START, Owner};
use crate::config::DockerSettings;

/// Seconds an API request may take.
const API_TIMEOUT_S: u64 = 30;
const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// Connects as `DOCKER_HOST` (or the local socket) says. Nothing is sent yet.
pub fn connect(settings: &DockerSettings) -> Result<Docker, String> {
    let host = settings
        .host
        .clone()
        .unwrap_or_else(|| format!("unix://{DEFAULT_SOCKET}"));
    let version = bollard::API_DEFAULT_VERSION;
    if let Some(path) = host.strip_prefix("unix://") {
        return Docker::connect_with_unix(path, API_TIMEOUT_S, version)
            .map_err(|e| format!("DOCKER_HOST={host}: {e}"));
    }
    if settings.tls_verify {
        let dir = settings
            .cert_path
            .clone()
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))
            .ok_or("DOCKER_TLS_VERIFY=1 needs DOCKER_CERT_PATH")?;
        for file in ["key.pem", "cert.pem", "ca.pem"] {
            if !dir.join(file).is_file() {
                return Err(format!(
                    "DOCKER_TLS_VERIFY=1: {} is missing (DOCKER_CERT_PATH={})",
                    dir.join(file).display(),
                    dir.display()
                ));
            }
        }
        return Docker::connect_with_ssl(
            &host,
            &dir.join("key.pem"),
            &dir.join("cert.pem"),
            &dir.join("ca.pem"),
            API_TIMEOUT_S,
            version,
        )
        .map_err(|e| format!("DOCKER_HOST={host} (TLS): {e}"));
    }
    Docker::connect_with_http(&host, API_TIMEOUT_S, version)
        .map_err(|e| format!("DOCKER_HOST={host}: {e}"))
}

/// The start time of a live `pid` (clock ticks since boot), from `/proc/<pid>/stat`;
/// `None` for no such process or a zombie.
pub fn pid_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields 3 (state) and 22 (start time), counted after the command name's ")".
    let after = &stat[stat.rfind(')')? + 2..];
    let mut fields = after.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This server, as its containers' labels name it.
pub fn this_owner(instance: &str) -> Owner {
    let pid = std::process::id();
    Owner {
        instance: instance.to_string(),
        pid,
        pid_start: pid_start(pid).unwrap_or(0),
        host: read_trimmed("/proc/sys/kernel/hostname"),
        boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
    }
}

/// Whether the owner named by a container's labels is certainly gone: same machine, and
/// either another boot or no process with that pid and start time. Containers of other
/// machines are never judged.
pub fn owner_is_gone(labels: &std::collections::HashMap<String, String>, me: &Owner) -> bool {
    let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or_default();
    if get(LABEL_HOST) != me.host || me.host.is_empty() {
        return false;
    }
    if get(LABEL_BOOT) != me.boot_id {
        return true;
    }
    let Ok(pid) = get(LABEL_PID).parse::<u32>() else {
        return false;
    };
    let Ok(start) = get(LABEL_PID_START).parse::<u64>() else {
        return false;
    };
    pid_start(pid) != Some(start)
}

/// Removes every warden container whose server is gone; returns how many.
pub async fn reap_leftovers(docker: &Docker, me: &Owner) -> usize {
    let options = ListContainersOptions {
        all: true,
        filters: Some(std::collections::HashMap::from([(
            "label".to_string(),
            vec![LABEL_INSTANCE.to_string()],
        )])),
        ..Default::default()
    };
    let Ok(list) = docker.list_containers(Some(options)).await else {
        return 0;
    };
    let mut reaped = 0;
    for c in list {
        let (Some(id), Some(labels)) = (c.id, c.labels) else {
            continue;
        };
        if !owner_is_gone(&labels, me) {
            continue;
        }
        if remove(docker, &id).await {
            reaped += 1;
            tracing::info!(container = %id, instance = %labels.get(LABEL_INSTANCE).cloned().unwrap_or_default(), "reaped a container of a dead warden instance");
        }
    }
    reaped
}

/// Removes every container of this instance (shutdown).
pub async fn remove_instance(docker: &Docker, instance: &str) {
    let options = ListContainersOptions {
        all: true,
        filters: Some(std::collections::HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_INSTANCE}={instance}")],
        )])),
        ..Default::default()
    };
    if let Ok(list) = docker.list_containers(Some(options)).await {
        // All at once: a signal gives the whole shutdown less than a second.
        let removals = list.into_iter().filter_map(|c| c.id).map(|id| async move {
            remove(docker, &id).await;
        });
        futures_util::future::join_all(removals).await;
    }
}

/// Kills and removes one container; true when it is gone.
pub async fn remove(docker: &Docker, id: &str) -> bool {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => true,
        // Gone already, or its removal is under way.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404 | 409,
            ..
        }) => true,
        Err(e) => {
            tracing::warn!(container = %id, error = %e, "could not remove a container");
            false
        }
    }
}

/// Whether `path` is a socket on this machine (for [`super::config::validate_container_config`]).
pub fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner {
            instance: "1-aa".into(),
            pid: std::process::id(),
            pid_start: pid_start(std::process::id()).unwrap(),
            host: "h".into(),
            boot_id: "b".into(),
        }
    }

    #[test]
    fn only_dead_owners_of_this_machine_are_reaped() {
        let me = me();
        let live = me.labels("session");
        assert!(!owner_is_gone(&live, &me));
        let mut reused_pid = live.clone();
        reused_pid.insert(LABEL_PID_START.into(), "1".into());
        assert!(owner_is_gone(&reused_pid, &me));
        let mut rebooted = live.clone();
        rebooted.insert(LABEL_BOOT.into(), "other".into());
        assert!(owner_is_gone(&rebooted, &me));
        let mut elsewhere = rebooted.clone();
        elsewhere.insert(LABEL_HOST.into(), "another-machine".into());
        assert!(!owner_is_gone(&elsewhere, &me));
    }
}
