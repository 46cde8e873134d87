//! Which engine serves the Docker API (Docker's `dockerd` or Podman's `podman system
//! service`), its version, and whether it runs rootless: asked once at start, shown in
//! every result, `selftest` and `warden://settings`, and the one place that decides what
//! differs between them.
//!
//! What differs, and how it is handled:
//! - **User namespace.** A rootless Podman maps the container's uid 0 to the user and
//!   every other uid into the user's subordinate range, so a container running as the
//!   server's uid would be a stranger to the server's own mode-0700 workspaces. Its
//!   containers get Podman's `keep-id` user namespace: the server's uid is the same
//!   uid inside, and nothing runs as root.
//! - **Limits.** A rootless engine on a cgroup v1 host cannot be delegated cgroups, and
//!   Podman then drops the memory and pids limits it was asked for without an error.
//!   The start-up query reads back what the engine holds ([`LimitsHeld`]), and a limit
//!   dropped is a missing wall, said in every result (and refused under
//!   `HOST_SANDBOX=require`).
//!
//! Docker's `/info` does not say whether Podman is rootless; Podman's own API does
//! (`/libpod/info`), asked over the same local socket.

use bollard::Docker;
use serde::Serialize;

/// The engine behind the Docker API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Engine {
    /// `docker` or `podman`.
    pub name: String,
    /// The engine's own version.
    pub version: String,
    /// It runs as an ordinary user (no root daemon).
    pub rootless: bool,
}

impl Engine {
    /// What an engine that has not described itself is taken for.
    pub fn unknown() -> Engine {
        Engine {
            name: "docker".into(),
            version: String::new(),
            rootless: false,
        }
    }

    /// The user namespace its containers need so that the server's uid is the same uid
    /// inside (Podman's `keep-id`, only for a rootless Podman).
    pub fn userns_mode(&self) -> Option<&'static str> {
        (self.name == "podman" && self.rootless).then_some("keep-id")
    }

    /// Whether container creates must go one at a time: a rootless Podman service
    /// reads the user's subordinate ids through libsubid for every `keep-id` create,
    /// and concurrent reads crash the whole service (SIGSEGV in
    /// `subid_get_uid_ranges`, seen with Podman 4.3 and reported up to 4.9).
    pub fn creates_one_at_a_time(&self) -> bool {
        self.userns_mode().is_some()
    }
}

/// The engine, from its `/version` components (name, version) and, for Podman, its own
/// `rootless` flag; Docker's rootless mode shows as `name=rootless` in `/info`'s
/// security options. Pure.
pub fn identify(
    components: &[(String, String)],
    server_version: Option<&str>,
    podman_rootless: Option<bool>,
    security_options: &[String],
) -> Engine {
    let podman = components
        .iter()
        .find(|(name, _)| name.to_ascii_lowercase().starts_with("podman"));
    match podman {
        Some((_, version)) => Engine {
            name: "podman".into(),
            version: version.clone(),
            rootless: podman_rootless.unwrap_or(false),
        },
        None => Engine {
            name: "docker".into(),
            version: components
                .iter()
                .find(|(name, _)| name == "Engine")
                .map(|(_, v)| v.clone())
                .or_else(|| server_version.map(str::to_string))
                .unwrap_or_default(),
            rootless: security_options.iter().any(|o| o.contains("name=rootless")),
        },
    }
}

/// Asks the engine what it is.
///
/// # Errors
/// The engine did not answer `/version` or `/info`.
pub async fn ask(docker: &Docker, host: &str) -> Result<Engine, String> {
    let version = docker
        .version()
        .await
        .map_err(|e| format!("the engine did not say its version ({e})"))?;
    let info = docker
        .info()
        .await
        .map_err(|e| format!("the engine did not describe itself ({e})"))?;
    let components: Vec<(String, String)> = version
        .components
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name, c.version))
        .collect();
    let is_podman = components
        .iter()
        .any(|(n, _)| n.to_ascii_lowercase().starts_with("podman"));
    let podman_rootless = if is_podman {
        let version = components
            .iter()
            .find(|(n, _)| n.to_ascii_lowercase().starts_with("podman"))
            .map(|(_, v)| v.as_str())
            .unwrap_or("4.0.0");
        Some(podman_rootless(host, version).await?)
    } else {
        None
    };
    Ok(identify(
        &components,
        version.version.as_deref(),
        podman_rootless,
        &info.security_options.unwrap_or_default(),
    ))
}

/// Podman's own answer to "rootless?" (`/v{version}/libpod/info`,
/// `host.security.rootless`; its own API is served only under a version), over its local
/// socket. A Podman reached otherwise is remote, which the workspace check refuses
/// anyway; it is taken as rootful.
#[cfg(unix)]
async fn podman_rootless(host: &str, version: &str) -> Result<bool, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(path) = host.strip_prefix("unix://") else {
        return Ok(false);
    };
    let ask = async {
        let mut stream = tokio::net::UnixStream::connect(path).await?;
        // HTTP/1.0: the answer is the body up to the end of the stream, never chunked.
        let request = format!("GET /v{version}/libpod/info HTTP/1.0\r\nHost: podman\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.take(1 << 20).read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), ask)
        .await
        .map_err(|_| format!("Podman at {host} did not answer /libpod/info within 10 s"))?
        .map_err(|e| format!("Podman at {host}: /libpod/info: {e}"))?;
    rootless_in(&answer).ok_or_else(|| {
        format!("Podman at {host} did not say whether it is rootless (/libpod/info)")
    })
}

#[cfg(not(unix))]
async fn podman_rootless(_host: &str, _version: &str) -> Result<bool, String> {
    Ok(false)
}

/// `host.security.rootless` in an HTTP answer to `/libpod/info`. Pure.
#[cfg(any(unix, test))]
fn rootless_in(answer: &[u8]) -> Option<bool> {
    let start = answer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let status = answer.split(|b| *b == b'\n').next()?;
    if !status.windows(5).any(|w| w == b" 200 ") {
        return None;
    }
    let info: serde_json::Value = serde_json::from_slice(&answer[start..]).ok()?;
    info["host"]["security"]["rootless"].as_bool()
}

/// Why no engine answered at `host`, with the way to start it when it is Podman's
/// socket (its service runs only when started). Pure.
pub fn unanswered(host: &str, cause: &str) -> String {
    let start = if host.contains("podman") {
        format!(
            "; Podman serves the Docker API only while its service runs: start it as the user who owns the socket, `podman system service --time=0 {host}` (or `systemctl --user enable --now podman.socket`)"
        )
    } else {
        String::new()
    };
    format!("no Docker engine answers at {host} ({cause}){start}")
}

/// Whether the engine holds the memory and pids limits it was asked for, as it reports
/// them back for a container it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsHeld {
    Held,
    /// Which limits it dropped, and why that happens.
    Dropped(String),
}

/// The limits asked for against the ones the engine reports for the container (`0` or
/// absent: none). Pure.
pub fn limits_held(
    engine: &Engine,
    asked: (i64, i64),
    held: (Option<i64>, Option<i64>),
) -> LimitsHeld {
    let mut dropped = Vec::new();
    if held.0.unwrap_or(0) != asked.0 {
        dropped.push("memory");
    }
    if held.1.unwrap_or(0) != asked.1 {
        dropped.push("pids");
    }
    if dropped.is_empty() {
        return LimitsHeld::Held;
    }
    let why = if engine.rootless {
        format!(
            "a rootless {} cannot be delegated cgroups on this host (cgroup v1, or v2 without the controllers delegated to the user)",
            engine.name
        )
    } else {
        format!("the {} engine did not apply them", engine.name)
    };
    LimitsHeld::Dropped(format!(
        "the engine dropped the {} limit{} it was asked for: {why}; use a cgroup v2 host whose systemd delegates the memory and pids controllers to the user",
        dropped.join(" and "),
        if dropped.len() > 1 { "s" } else { "" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comps(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| ((*n).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn podman_is_known_by_its_component_and_says_if_it_is_rootless() {
        let c = comps(&[("Podman Engine", "4.3.1"), ("Conmon", "2.1.6")]);
        let e = identify(&c, Some("4.3.1"), Some(true), &[]);
        assert_eq!(
            (e.name.as_str(), e.version.as_str(), e.rootless),
            ("podman", "4.3.1", true)
        );
        assert_eq!(e.userns_mode(), Some("keep-id"));
        let rootful = identify(&c, None, Some(false), &[]);
        assert_eq!(rootful.userns_mode(), None);
    }

    #[test]
    fn docker_is_the_rest_and_its_rootless_mode_shows_in_the_security_options() {
        let c = comps(&[("Engine", "26.1.5"), ("containerd", "1.7")]);
        let e = identify(
            &c,
            Some("26.1.5"),
            None,
            &["name=seccomp,profile=builtin".into()],
        );
        assert_eq!(
            (e.name.as_str(), e.version.as_str(), e.rootless),
            ("docker", "26.1.5", false)
        );
        let r = identify(&c, None, None, &["name=rootless".into()]);
        assert!(r.rootless);
        assert_eq!(r.userns_mode(), None, "Docker has no keep-id");
        assert_eq!(identify(&[], Some("20.10"), None, &[]).version, "20.10");
    }

    #[test]
    fn podmans_own_info_is_read_from_the_http_answer() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"host\":{\"security\":{\"rootless\":true}}}";
        assert_eq!(rootless_in(ok), Some(true));
        let no = b"HTTP/1.0 404 Not Found\r\n\r\n{\"host\":{\"security\":{\"rootless\":true}}}";
        assert_eq!(rootless_in(no), None);
        assert_eq!(rootless_in(b"HTTP/1.0 200 OK\r\n\r\nnot json"), None);
        assert_eq!(rootless_in(b"garbage"), None);
    }

    #[test]
    fn a_silent_podman_socket_is_answered_with_the_command_that_starts_it() {
        let sock = "unix:///run/user/1000/podman/podman.sock";
        let why = unanswered(sock, "No such file or directory");
        assert!(
            why.contains("podman system service --time=0 unix:///run/user/1000/podman/podman.sock"),
            "{why}"
        );
        let docker = unanswered("unix:///var/run/docker.sock", "refused");
        assert_eq!(
            docker,
            "no Docker engine answers at unix:///var/run/docker.sock (refused)"
        );
    }

    #[test]
    fn limits_the_engine_dropped_are_named_with_the_reason() {
        let podman = Engine {
            name: "podman".into(),
            version: "4.3.1".into(),
            rootless: true,
        };
        let asked = (1 << 30, 256);
        assert_eq!(
            limits_held(&podman, asked, (Some(1 << 30), Some(256))),
            LimitsHeld::Held
        );
        let LimitsHeld::Dropped(why) = limits_held(&podman, asked, (Some(0), None)) else {
            panic!("dropped")
        };
        assert!(why.contains("memory and pids limits"), "{why}");
        assert!(why.contains("rootless podman"), "{why}");
        assert!(why.contains("cgroup v2"), "{why}");
        let LimitsHeld::Dropped(why) =
            limits_held(&Engine::unknown(), asked, (Some(1 << 30), Some(0)))
        else {
            panic!("dropped")
        };
        assert!(
            why.starts_with("the engine dropped the pids limit it"),
            "{why}"
        );
    }
}
