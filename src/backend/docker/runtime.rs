//! Which OCI runtime the engine runs this server's containers with
//! (`SANDBOX_DOCKER_RUNTIME`): the engine's default, or a runtime registered with it by
//! name, such as gVisor's `runsc`, which puts a user-space kernel (the Sentry) between
//! the code and the host's. Asked of the engine once at start; a name the engine does not
//! know makes the backend unavailable, with the command that registers it.

use bollard::Docker;

use crate::backend::ContainerRuntime;

/// The runtimes an engine knows, as its `/info` lists them: name and program path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub runtimes: Vec<(String, String)>,
    /// The engine's default runtime, when it says.
    pub default: Option<String>,
}

/// Program names of gVisor's runtime.
const GVISOR: &[&str] = &["runsc"];

/// The runtime `configured` names (else the engine's default), checked against what
/// the engine knows. Pure. The kernel is filled in later, by the image query, and the
/// engine by [`super::product`].
///
/// # Errors
/// A runtime the engine does not know, with the way to register it.
pub fn pick(configured: Option<&str>, known: &Known) -> Result<ContainerRuntime, String> {
    let name = match configured {
        Some(name) => name.to_string(),
        None => known.default.clone().unwrap_or_else(|| "runc".into()),
    };
    let path = known
        .runtimes
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, path)| path.clone());
    let path = match (path, configured) {
        (Some(path), _) => path,
        // An engine that lists no runtimes still runs its default.
        (None, None) => name.clone(),
        (None, Some(_)) => return Err(unknown(&name, known)),
    };
    let program = path.rsplit('/').next().unwrap_or(&path);
    Ok(ContainerRuntime {
        configured: configured.map(str::to_string),
        resolved: name,
        user_space_kernel: GVISOR.contains(&program),
        kernel: String::new(),
        engine: String::new(),
        engine_version: String::new(),
        rootless: false,
    })
}

/// Why `name` cannot be used, and how to register it.
fn unknown(name: &str, known: &Known) -> String {
    let mut names: Vec<&str> = known.runtimes.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let how = if name == "runsc" {
        "install gVisor (Debian: `apt-get install runsc`), add \
         {\"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--network=none\"]}}} \
         to /etc/docker/daemon.json, then reload the engine (`kill -HUP $(pidof dockerd)` or \
         `systemctl reload docker`)"
            .to_string()
    } else {
        format!(
            "register it under \"runtimes\" in the engine's daemon.json and reload the engine, \
             or set SANDBOX_DOCKER_RUNTIME to one of: {}",
            names.join(", ")
        )
    };
    format!(
        "SANDBOX_DOCKER_RUNTIME={name}: the Docker engine has no runtime of that name (it has: {}); {how}",
        names.join(", ")
    )
}

/// What the engine knows, asked once.
///
/// # Errors
/// The engine did not answer `/info`.
pub async fn known(docker: &Docker) -> Result<Known, String> {
    let info = docker
        .info()
        .await
        .map_err(|e| format!("the engine did not describe itself ({e})"))?;
    let runtimes = info
        .runtimes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, r)| {
            let path = r.path.unwrap_or_else(|| name.clone());
            (name, path)
        })
        .collect();
    Ok(Known {
        runtimes,
        default: info.default_runtime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Known {
        Known {
            runtimes: vec![
                ("runc".into(), "runc".into()),
                ("gvisor".into(), "/usr/bin/runsc".into()),
            ],
            default: Some("runc".into()),
        }
    }

    #[test]
    fn the_default_is_the_engines_own() {
        let r = pick(None, &engine()).unwrap();
        assert_eq!((r.configured, r.resolved.as_str()), (None, "runc"));
        assert!(!r.user_space_kernel);
        let bare = Known {
            runtimes: Vec::new(),
            default: None,
        };
        assert_eq!(pick(None, &bare).unwrap().resolved, "runc");
    }

    #[test]
    fn gvisor_is_known_by_its_program_whatever_its_name() {
        let r = pick(Some("gvisor"), &engine()).unwrap();
        assert_eq!(r.configured.as_deref(), Some("gvisor"));
        assert_eq!(r.resolved, "gvisor");
        assert!(r.user_space_kernel);
    }

    #[test]
    fn an_unknown_runtime_is_refused_with_the_fix() {
        let err = pick(Some("runsc"), &engine()).unwrap_err();
        assert!(err.contains("SANDBOX_DOCKER_RUNTIME=runsc"), "{err}");
        assert!(err.contains("gvisor, runc"), "{err}");
        assert!(err.contains("apt-get install runsc"), "{err}");
        assert!(err.contains("--network=none"), "{err}");
        let err = pick(Some("kata"), &engine()).unwrap_err();
        assert!(err.contains("one of: gvisor, runc"), "{err}");
    }
}
