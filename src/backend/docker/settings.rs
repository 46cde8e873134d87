//! The Docker backend's settings group: its rows of the settings registry, what they
//! parse to, and their rules. Read and documented in every build, the Docker backend's
//! or not, so a server without it still names the setting it cannot honour.

use std::path::PathBuf;

use serde::Serialize;

use crate::config::{ConfigError, Reader, SIZE_1M, Spec, computed, path, size_at_least, spec};

/// The group's rows, in the order the settings chapter shows them.
pub const SPECS: &[Spec] = &[
    spec(
        "SANDBOX_IMAGE",
        "warden-sandbox:latest",
        "the Docker backend's image (any Debian-based image with `python3`; build one \
         offline with `tools/build-image.sh`).",
    ),
    computed(
        "SANDBOX_POOL_SIZE",
        "the value of `SANDBOX_WARM_WORKERS` (2)",
        "the warm pool's size when the resolved backend is `docker`: containers started \
         ahead, each with its worker frozen and an empty workspace, so a new session does \
         not wait about half a second for one (0 to 64; never more than \
         `SANDBOX_MAX_WORKERS`). One pool serves both backends: when the host backend runs \
         (configured, or fallen back to), `SANDBOX_WARM_WORKERS` sizes it instead.",
    ),
    spec(
        "SANDBOX_WORKSPACE",
        "auto",
        "where a Docker session's workspace lives. `host`: a directory of this machine, \
         bound into the container (the engine must see this machine's files). \
         `in-container`: a size-capped tmpfs volume on the engine (`SANDBOX_DISK_LIMIT`), \
         which outlives a worker's restart; after each call the server copies it back \
         over the engine's API (an archive download, with the same caps and names \
         checked), so results, files and `warden://` resources read that copy; grants \
         of host paths and `install_packages` are refused there; a kept workspace \
         (`SANDBOX_KEEP_WORKSPACES`) is that copy. `auto`: `host` when the engine shows \
         its containers this machine's directories (the start-up check), else \
         `in-container` (a remote `DOCKER_HOST`), decided per engine.",
    ),
    spec(
        "SANDBOX_USER",
        "auto",
        "who the Docker backend's containers run as. `auto`: a server running as root \
         gives each session's container a uid and gid of its own, from a range of this \
         server far above login uids and every `/etc/subuid` range, never an account's, so \
         no host user and no other session owns a workspace; a server that is not root \
         runs them as its own uid and gid (a member of the `docker` group is root through \
         the engine anyway; the workspaces are its own mode-0700 directories); on Windows, \
         65534:65534. `UID:GID` (numeric, never 0) pins every container to that one \
         identity: every session's workspace is then owned by it, so any host process \
         running as that uid reaches them all (`selftest` and `warden://settings` say so).",
    ),
    spec(
        "SANDBOX_TMP_SIZE",
        "64m",
        "size of each container's `/tmp` (a tmpfs; at least `1m`).",
    ),
    spec(
        "SANDBOX_LAUNCHER",
        "auto",
        "the Docker backend's in-container launcher. `bind`: this server's own binary, \
         bind-mounted read-only (a Linux server and an engine on this machine). `image`: \
         the Linux warden the image carries (`tools/build-image.sh --launcher`), refused \
         unless its launcher protocol is this server's. `auto`: `bind` on a Linux server \
         whose engine is local (a UNIX socket or loopback TCP), else `image` (macOS and \
         Windows through Docker Desktop, a remote `DOCKER_HOST`).",
    ),
    computed(
        "SANDBOX_DOCKER_RUNTIME",
        "the engine's default runtime (`runc`)",
        "the OCI runtime the engine runs the containers with, by the name it is \
         registered under in the engine's `daemon.json`: `runsc` is gVisor, a user-space \
         kernel between the code and the host's (register it with `\"runtimeArgs\": \
         [\"--network=none\"]`). A name the engine does not know makes the Docker backend \
         unavailable: refused under `HOST_SANDBOX=require`, else the host backend runs with \
         a warning. Results, `selftest` and `warden://settings` show the configured and \
         resolved runtime.",
    ),
    computed(
        "DOCKER_HOST",
        "the local engine, `unix:///var/run/docker.sock`",
        "the Docker engine: `unix:///path`, `npipe:////./pipe/name` (Windows), \
         `tcp://host:port` (with `DOCKER_TLS_VERIFY=1`: TLS with `ca.pem`, `cert.pem`, \
         `key.pem` from `DOCKER_CERT_PATH`). Default: `unix:///var/run/docker.sock` \
         (macOS: else Docker Desktop's `~/.docker/run/docker.sock`; Windows: \
         `npipe:////./pipe/docker_engine`). Host workspaces need an engine that sees \
         this machine's paths (they are bind-mounted), which the backend checks at start; \
         see `SANDBOX_WORKSPACE`.",
    ),
    spec(
        "DOCKER_TLS_VERIFY",
        "0",
        "`1`: speak TLS to a `tcp://` `DOCKER_HOST`, verifying the engine with the CA.",
    ),
    computed(
        "DOCKER_CERT_PATH",
        "`~/.docker`",
        "directory with `ca.pem`, `cert.pem` and `key.pem` for `DOCKER_TLS_VERIFY=1`.",
    ),
    computed(
        "SANDBOX_DOCKER_HOSTS",
        "none: the one engine `DOCKER_HOST` names",
        "several engines for the Docker backend, comma-separated, each \
         `URL[;cert-dir=DIR][;capacity=N]`: `URL` as `DOCKER_HOST` spells it; `cert-dir` an \
         absolute directory with `ca.pem`, `cert.pem` and `key.pem` (TLS, verifying both \
         ends; only for `tcp://`); `capacity` the sessions it holds at once (1 to 1024; \
         default: no limit of its own). A new session goes to the healthy engine with the \
         most free capacity and stays there; an engine that stops answering ends its \
         sessions with an error naming it, and its containers are removed when it returns. \
         Each engine keeps `SANDBOX_POOL_SIZE` warm containers; `SANDBOX_MAX_WORKERS` \
         counts across all of them. Each engine's workspaces are host or in-container by `SANDBOX_WORKSPACE`. When set, \
         `DOCKER_HOST`, `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` are not read.",
    ),
];

/// The Docker backend's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DockerSettings {
    pub image: String,
    /// `SANDBOX_POOL_SIZE`; `None`: `SANDBOX_WARM_WORKERS` sizes the pool.
    pub pool_size: Option<usize>,
    /// `SANDBOX_USER`: one identity for every container; `None` (`auto`): a uid per
    /// session when the server is root, else the server's own.
    pub user: Option<(u32, u32)>,
    pub tmp_size_bytes: u64,
    /// `SANDBOX_LAUNCHER`.
    pub launcher: LauncherMode,
    /// `SANDBOX_WORKSPACE`.
    pub workspace: WorkspaceMode,
    /// `SANDBOX_DOCKER_RUNTIME`; `None`: the engine's default.
    pub runtime: Option<String>,
    /// `DOCKER_HOST`; `None`: the local engine's socket.
    pub host: Option<String>,
    pub tls_verify: bool,
    pub cert_path: Option<PathBuf>,
    /// `SANDBOX_DOCKER_HOSTS`; empty: the one engine of `DOCKER_HOST`.
    pub hosts: Vec<EngineSpec>,
}

/// One engine the Docker backend places sessions on: an entry of
/// `SANDBOX_DOCKER_HOSTS`, or the one `DOCKER_HOST` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineSpec {
    /// As `DOCKER_HOST` spells it; `None`: the local engine's usual socket.
    pub url: Option<String>,
    /// TLS, verifying both ends with `ca.pem`, `cert.pem` and `key.pem` from `cert_dir`
    /// (`None`: `~/.docker`).
    pub tls: bool,
    pub cert_dir: Option<PathBuf>,
    /// Sessions it holds at once; `None`: no limit of its own.
    pub capacity: Option<usize>,
}

/// Most engines `SANDBOX_DOCKER_HOSTS` may list.
pub const MAX_ENGINES: usize = 16;
/// Most sessions one engine's capacity may state.
const MAX_CAPACITY: usize = 1024;
/// The URL schemes an engine may be reached by.
const SCHEMES: [&str; 3] = ["unix://", "tcp://", "npipe://"];

impl DockerSettings {
    /// The engines sessions are placed on: `SANDBOX_DOCKER_HOSTS`, else `DOCKER_HOST`'s.
    pub fn engines(&self) -> Vec<EngineSpec> {
        if !self.hosts.is_empty() {
            return self.hosts.clone();
        }
        vec![EngineSpec {
            url: self.host.clone(),
            tls: self.tls_verify,
            cert_dir: self.cert_path.clone(),
            capacity: None,
        }]
    }
}

/// `SANDBOX_DOCKER_HOSTS`: `URL[;cert-dir=DIR][;capacity=N]`, comma-separated; `None`
/// when any entry is malformed, an option is unknown or repeated, `cert-dir` is given
/// for an engine that is not `tcp://`, or an engine is listed twice. Pure.
pub fn parse_hosts(text: &str) -> Option<Vec<EngineSpec>> {
    let mut engines: Vec<EngineSpec> = Vec::new();
    for entry in text.split(',').map(str::trim) {
        let mut parts = entry.split(';').map(str::trim);
        let url = parts.next().filter(|u| {
            SCHEMES
                .iter()
                .any(|s| u.starts_with(s) && u.len() > s.len())
        })?;
        let mut spec = EngineSpec {
            url: Some(url.to_string()),
            tls: false,
            cert_dir: None,
            capacity: None,
        };
        for option in parts {
            match option.split_once('=')? {
                ("cert-dir", dir) if spec.cert_dir.is_none() && url.starts_with("tcp://") => {
                    let dir = PathBuf::from(dir);
                    spec.cert_dir = Some(dir.is_absolute().then_some(dir)?);
                    spec.tls = true;
                }
                ("capacity", n) if spec.capacity.is_none() => {
                    spec.capacity =
                        Some(n.parse().ok().filter(|n| (1..=MAX_CAPACITY).contains(n))?);
                }
                _ => return None,
            }
        }
        if engines.iter().any(|e| e.url == spec.url) {
            return None;
        }
        engines.push(spec);
    }
    (engines.len() <= MAX_ENGINES).then_some(engines)
}

/// `SANDBOX_LAUNCHER`: where a Docker worker container's launcher comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LauncherMode {
    /// `bind` where it can work, else `image`.
    Auto,
    /// This server's own binary, bind-mounted read-only.
    Bind,
    /// The Linux warden the image carries.
    Image,
}

/// `SANDBOX_WORKSPACE`: where a Docker session's workspace lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceMode {
    /// `host` where the engine sees this machine's directories, else `in-container`.
    Auto,
    /// A directory of this machine, bound into the container.
    Host,
    /// A tmpfs volume on the engine, copied back over its API after each call.
    InContainer,
}

/// `UID:GID`, numeric, never root.
fn uid_gid(t: &str) -> Option<(u32, u32)> {
    let (u, g) = t.split_once(':')?;
    let (u, g) = (u.parse::<u32>().ok()?, g.parse::<u32>().ok()?);
    (u != 0 && g != 0).then_some((u, g))
}

pub(crate) fn read(r: &mut Reader<'_>) -> Result<DockerSettings, ConfigError> {
    let image = r.value(
        "SANDBOX_IMAGE",
        "an image name such as warden-sandbox:latest",
        |t| (!t.contains(char::is_whitespace)).then(|| t.to_string()),
    )?;
    let pool_size = r.optional("SANDBOX_POOL_SIZE", "a whole number from 0 to 64", |t| {
        t.parse::<usize>().ok().filter(|n| *n <= 64)
    })?;
    let workspace = r.choice(
        "SANDBOX_WORKSPACE",
        "auto, host or in-container",
        &[
            ("auto", WorkspaceMode::Auto),
            ("host", WorkspaceMode::Host),
            ("in-container", WorkspaceMode::InContainer),
        ],
    )?;
    let user = r.value("SANDBOX_USER", "auto, or UID:GID (numeric, not 0)", |t| {
        if t == "auto" {
            Some(None)
        } else {
            uid_gid(t).map(Some)
        }
    })?;
    let tmp_size_bytes = r.value("SANDBOX_TMP_SIZE", SIZE_1M, size_at_least(1 << 20))?;
    let launcher = r.choice(
        "SANDBOX_LAUNCHER",
        "auto, bind or image",
        &[
            ("auto", LauncherMode::Auto),
            ("bind", LauncherMode::Bind),
            ("image", LauncherMode::Image),
        ],
    )?;
    let runtime = r.optional(
        "SANDBOX_DOCKER_RUNTIME",
        "a runtime name such as runsc (letters, digits, '.', '_', '-')",
        |t| runtime_name(t).then(|| t.to_string()),
    )?;
    let host = r.optional(
        "DOCKER_HOST",
        "unix:///path/to/docker.sock, npipe:////./pipe/name or tcp://host:port",
        |t| {
            ["unix://", "tcp://", "npipe://"]
                .iter()
                .any(|p| t.starts_with(p))
                .then(|| t.to_string())
        },
    )?;
    let tls_verify = r.choice(
        "DOCKER_TLS_VERIFY",
        "0 or 1",
        &[("0", false), ("1", true), ("", false)],
    )?;
    let cert_path = r.optional("DOCKER_CERT_PATH", "a directory path", path)?;
    let hosts = r
        .optional(
            "SANDBOX_DOCKER_HOSTS",
            "engines, comma-separated, each URL[;cert-dir=/absolute/dir][;capacity=1..1024] with URL unix://, tcp:// or npipe://, each listed once, at most 16 (cert-dir only for tcp://)",
            parse_hosts,
        )?
        .unwrap_or_default();
    Ok(DockerSettings {
        image,
        pool_size,
        user,
        tmp_size_bytes,
        launcher,
        workspace,
        runtime,
        host,
        tls_verify,
        cert_path,
        hosts,
    })
}

/// An OCI runtime's name as an engine registers it. Pure.
pub fn runtime_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use crate::config::Settings;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::from_lookup(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn docker_settings_parse_and_refuse_root() {
        let s = settings(&[("EXECUTION_BACKEND", "docker")]).unwrap();
        assert_eq!(s.backend, BackendKind::Docker);
        assert_eq!(s.docker.image, "warden-sandbox:latest");
        assert_eq!(s.docker.pool_size, None);
        assert_eq!(
            s.warm_target(BackendKind::Docker),
            2,
            "SANDBOX_WARM_WORKERS by default"
        );
        assert_eq!(s.docker.user, None, "a uid per session by default");
        let s = settings(&[("SANDBOX_USER", "1000:1000"), ("SANDBOX_POOL_SIZE", "0")]).unwrap();
        assert_eq!(s.docker.user, Some((1000, 1000)));
        assert_eq!(s.docker.pool_size, Some(0));
        assert_eq!(s.warm_target(BackendKind::Docker), 0);
        assert_eq!(
            s.warm_target(BackendKind::Host),
            2,
            "the host pool keeps its own size"
        );
        let s = settings(&[("SANDBOX_POOL_SIZE", "9"), ("SANDBOX_MAX_WORKERS", "4")]).unwrap();
        assert_eq!(s.warm_target(BackendKind::Docker), 4, "never past the cap");
        for bad in ["0:0", "root", "1000", "0:1000", "1000:0", "Auto"] {
            let err = settings(&[("SANDBOX_USER", bad)]).unwrap_err();
            assert!(err.to_string().contains("SANDBOX_USER"), "{err}");
        }
        assert!(settings(&[("SANDBOX_POOL_SIZE", "65")]).is_err());
        assert!(settings(&[("DOCKER_HOST", "ssh://x")]).is_err());
        assert_eq!(s.docker.launcher, LauncherMode::Auto);
        assert_eq!(s.docker.workspace, WorkspaceMode::Auto);
        let s = settings(&[("SANDBOX_WORKSPACE", "in-container")]).unwrap();
        assert_eq!(s.docker.workspace, WorkspaceMode::InContainer);
        assert!(settings(&[("SANDBOX_WORKSPACE", "remote")]).is_err());
        let s = settings(&[("SANDBOX_LAUNCHER", "image")]).unwrap();
        assert_eq!(s.docker.launcher, LauncherMode::Image);
        let err = settings(&[("SANDBOX_LAUNCHER", "mine")]).unwrap_err();
        assert!(err.to_string().contains("SANDBOX_LAUNCHER"), "{err}");
        let s = settings(&[("DOCKER_HOST", "npipe:////./pipe/docker_engine")]).unwrap();
        assert_eq!(
            s.docker.host.as_deref(),
            Some("npipe:////./pipe/docker_engine")
        );
        let s = settings(&[
            ("DOCKER_HOST", "tcp://127.0.0.1:2376"),
            ("DOCKER_TLS_VERIFY", "1"),
        ])
        .unwrap();
        assert!(s.docker.tls_verify);
        assert_eq!(s.docker.runtime, None, "the engine's default runtime");
        let s = settings(&[("SANDBOX_DOCKER_RUNTIME", "runsc")]).unwrap();
        assert_eq!(s.docker.runtime.as_deref(), Some("runsc"));
        for bad in ["run sc", "runsc;rm", "a/b"] {
            let err = settings(&[("SANDBOX_DOCKER_RUNTIME", bad)]).unwrap_err();
            assert!(err.to_string().contains("SANDBOX_DOCKER_RUNTIME"), "{err}");
        }
    }

    #[test]
    fn several_engines_parse_with_their_tls_and_capacity() {
        let s = settings(&[("DOCKER_HOST", "tcp://127.0.0.1:2375")]).unwrap();
        let one = s.docker.engines();
        assert_eq!(one.len(), 1, "DOCKER_HOST's engine alone");
        assert_eq!(one[0].url.as_deref(), Some("tcp://127.0.0.1:2375"));
        assert_eq!((one[0].tls, one[0].capacity), (false, None));
        let s = settings(&[
            (
                "SANDBOX_DOCKER_HOSTS",
                "unix:///run/a.sock;capacity=3, tcp://192.0.2.2:2376;cert-dir=/etc/e2;capacity=8,tcp://e3:2375",
            ),
            ("DOCKER_HOST", "tcp://ignored:1"),
        ])
        .unwrap();
        let e = s.docker.engines();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].url.as_deref(), Some("unix:///run/a.sock"));
        assert_eq!((e[0].tls, e[0].capacity), (false, Some(3)));
        assert_eq!(
            e[1].cert_dir.as_deref(),
            Some(std::path::Path::new("/etc/e2"))
        );
        assert_eq!((e[1].tls, e[1].capacity), (true, Some(8)));
        assert_eq!((e[2].tls, e[2].capacity), (false, None));
        for bad in [
            "ssh://x",
            "tcp://",
            "tcp://a:1;capacity=0",
            "tcp://a:1;capacity=1025",
            "tcp://a:1;capacity=2;capacity=3",
            "tcp://a:1;cert-dir=relative",
            "unix:///a.sock;cert-dir=/etc/x",
            "tcp://a:1;colour=blue",
            "tcp://a:1,tcp://a:1",
            "tcp://a:1,,tcp://b:1",
        ] {
            let err = settings(&[("SANDBOX_DOCKER_HOSTS", bad)]).unwrap_err();
            assert!(
                err.to_string().contains("SANDBOX_DOCKER_HOSTS"),
                "{bad}: {err}"
            );
        }
        let many: Vec<String> = (0..17).map(|i| format!("tcp://e{i}:2375")).collect();
        assert!(settings(&[("SANDBOX_DOCKER_HOSTS", &many.join(","))]).is_err());
    }
}
