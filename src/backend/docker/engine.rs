//! Talking to the engine: connecting as `DOCKER_HOST` says (local socket, TCP, TCP+TLS),
//! who this server is on a shared engine (labels), and reaping the containers of warden
//! instances that are gone.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::config::{LABEL_BOOT, LABEL_HOST, LABEL_INSTANCE, LABEL_PID, LABEL_PID_START, Owner};
use crate::backend::docker_settings::EngineSpec;

/// Seconds an API request may take.
const API_TIMEOUT_S: u64 = 30;

/// The engine when `DOCKER_HOST` is not set: Docker Desktop's named pipe on Windows; on
/// Unix the usual socket, or on macOS Docker Desktop's per-user socket when the usual one
/// is not there (Desktop makes `/var/run/docker.sock` only when allowed to).
pub fn default_host() -> String {
    if cfg!(windows) {
        return "npipe:////./pipe/docker_engine".into();
    }
    let usual = "/var/run/docker.sock";
    let desktop =
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/run/docker.sock"));
    if cfg!(target_os = "macos")
        && !Path::new(usual).exists()
        && let Some(desktop) = desktop.filter(|d| d.exists())
    {
        return format!("unix://{}", desktop.display());
    }
    format!("unix://{usual}")
}

/// The engine's URL as the backend names it (the local engine's usual socket when none
/// is set).
pub fn url_of(spec: &EngineSpec) -> String {
    spec.url.clone().unwrap_or_else(default_host)
}

/// Connects to one engine as its spec says. Nothing is sent yet.
pub fn connect(spec: &EngineSpec) -> Result<Docker, String> {
    let host = url_of(spec);
    let version = bollard::API_DEFAULT_VERSION;
    if let Some(path) = host.strip_prefix("unix://") {
        #[cfg(unix)]
        return Docker::connect_with_unix(path, API_TIMEOUT_S, version)
            .map_err(|e| format!("DOCKER_HOST={host}: {e}"));
        #[cfg(not(unix))]
        return Err(format!(
            "DOCKER_HOST={host}: no UNIX sockets on this platform ({path}); use npipe:// or tcp://"
        ));
    }
    if host.starts_with("npipe://") {
        #[cfg(windows)]
        return Docker::connect_with_named_pipe(&host, API_TIMEOUT_S, version)
            .map_err(|e| format!("DOCKER_HOST={host}: {e}"));
        #[cfg(not(windows))]
        return Err(format!(
            "DOCKER_HOST={host}: named pipes exist only on Windows; use unix:// or tcp://"
        ));
    }
    if spec.tls {
        return connect_tls(spec, &host);
    }
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    over_tcp(tcp, &host, "http")
}

/// The connector's client as bollard's transport, reaching `host` (`tcp://…`) by
/// `scheme`. Built here rather than by bollard for one reason: bollard's TCP connector
/// leaves Nagle's algorithm on, and a call's frames (thaw, request, then freeze after
/// the answer) are small writes in turn, each of which would wait for the engine's
/// delayed acknowledgement: 40 ms a call.
fn over_tcp<C>(connector: C, host: &str, scheme: &str) -> Result<Docker, String>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let authority = host.strip_prefix("tcp://").unwrap_or(host);
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_max_idle_per_host(0);
    let client = Arc::new(builder.build(connector));
    let transport = move |request: bollard::BollardRequest| {
        let client = client.clone();
        async move {
            client
                .request(request)
                .await
                .map_err(bollard::errors::Error::from)
        }
    };
    Docker::connect_with_custom_transport(
        transport,
        Some(format!("{scheme}://{authority}")),
        API_TIMEOUT_S,
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| format!("{host}: {e}"))
}

/// TCP+TLS with the `ca.pem`, `cert.pem` and `key.pem` of the engine's certificate
/// directory (`DOCKER_CERT_PATH`, or its `cert-dir`).
#[cfg(not(target_os = "macos"))]
fn connect_tls(spec: &EngineSpec, host: &str) -> Result<Docker, String> {
    let dir = spec
        .cert_dir
        .clone()
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))
        .ok_or("TLS needs a certificate directory (DOCKER_CERT_PATH, or cert-dir in SANDBOX_DOCKER_HOSTS)")?;
    for file in ["key.pem", "cert.pem", "ca.pem"] {
        if !dir.join(file).is_file() {
            return Err(format!(
                "{host} over TLS: {} is missing (certificate directory {})",
                dir.join(file).display(),
                dir.display()
            ));
        }
    }
    let config = tls_config(&dir).map_err(|e| format!("{host} over TLS: {e}"))?;
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let connector = hyper_rustls::HttpsConnector::from((tcp, config));
    over_tcp(connector, host, "https")
}

/// The client's TLS: the engine verified against `ca.pem`, this client known by
/// `cert.pem` and `key.pem`.
#[cfg(not(target_os = "macos"))]
fn tls_config(dir: &Path) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |file: &str| dir.join(file);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(read("ca.pem")).map_err(|e| format!("ca.pem: {e}"))? {
        roots
            .add(cert.map_err(|e| format!("ca.pem: {e}"))?)
            .map_err(|e| format!("ca.pem: {e}"))?;
    }
    let chain = CertificateDer::pem_file_iter(read("cert.pem"))
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cert.pem: {e}"))?;
    let key = PrivateKeyDer::from_pem_file(read("key.pem")).map_err(|e| format!("key.pem: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("cert.pem and key.pem: {e}"))
}

/// No TLS client in macOS builds (see Cargo.toml): said, never a plain connection.
#[cfg(target_os = "macos")]
fn connect_tls(_spec: &EngineSpec, host: &str) -> Result<Docker, String> {
    Err(format!(
        "DOCKER_HOST={host} with DOCKER_TLS_VERIFY=1: this macOS build has no TLS client for the engine; use Docker Desktop's socket (leave DOCKER_HOST unset) or run warden on Linux"
    ))
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This machine's name, where the server can read it (empty otherwise: then no
/// container is ever judged dead, see [`owner_is_gone`]).
fn host_name() -> String {
    if cfg!(target_os = "linux") {
        return read_trimmed("/proc/sys/kernel/hostname");
    }
    #[cfg(unix)]
    {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
        if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
            let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
            return String::from_utf8_lossy(&buf[..end]).into_owned();
        }
    }
    String::new()
}

/// This server, as its containers' labels name it. Where the system cannot say when a
/// process started (Windows), the host is left empty, so no other server's containers
/// are ever judged dead from there: the next server on Linux or macOS reaps them.
pub fn this_owner(instance: &str) -> Owner {
    let pid = std::process::id();
    let pid_start = crate::os::running_start_time(pid);
    Owner {
        instance: instance.to_string(),
        pid,
        pid_start: pid_start.unwrap_or(0),
        host: if pid_start.is_some() {
            host_name()
        } else {
            String::new()
        },
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
    crate::os::running_start_time(pid) != Some(start)
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

/// Kills and removes one container; true when it is gone. A removal the engine failed
/// (500) is tried again: Podman fails a forced removal of a container that stops while
/// it is being killed ("container state improper"), and the next one succeeds.
pub async fn remove(docker: &Docker, id: &str) -> bool {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        match docker.remove_container(id, Some(options.clone())).await {
            Ok(()) => return true,
            // Gone already, or its removal is under way.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => return true,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 500, ..
            }) if attempts < REMOVE_ATTEMPTS => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => {
                tracing::warn!(container = %id, error = %e, "could not remove a container");
                return false;
            }
        }
    }
}

/// How many times a failed removal is tried.
const REMOVE_ATTEMPTS: u32 = 4;

/// Whether `path` is a socket on this machine (for [`super::config::validate_container_config`]):
/// a UNIX socket, or on Windows a named pipe (`\\.\pipe\...`).
pub fn is_socket(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
    }
    #[cfg(not(unix))]
    {
        let text = path
            .to_string_lossy()
            .replace('/', "\\")
            .to_ascii_lowercase();
        text.starts_with("\\\\.\\pipe\\") || text.starts_with("\\\\?\\pipe\\")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner {
            instance: "1-aa".into(),
            pid: std::process::id(),
            pid_start: crate::os::running_start_time(std::process::id()).unwrap_or(1),
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
