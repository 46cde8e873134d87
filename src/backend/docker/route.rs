//! Where a worker container's launcher comes from (`SANDBOX_LAUNCHER`), decided once at
//! start. Pure, unit-tested on every platform.
//!
//! - **bind**: this server's own binary, bind-mounted read-only at
//!   [`LAUNCHER_PATH`](super::config::LAUNCHER_PATH). Only a Linux server can do that
//!   (the binary runs inside a Linux container), and only with an engine on this machine
//!   (a remote engine would bind a path of *its* machine).
//! - **image**: the Linux warden the image carries at that same path
//!   (`tools/build-image.sh --launcher`), labelled with its launcher protocol and its
//!   version. The route for servers on macOS and Windows (Docker Desktop runs Linux
//!   containers in a VM) and for a remote `DOCKER_HOST`. A launcher that speaks another
//!   protocol than this server is refused, never tried.

use std::collections::HashMap;

use crate::backend::docker_settings::LauncherMode;

/// The hidden subcommand that runs the launcher inside a container.
pub const LAUNCHER_SUBCOMMAND: &str = "__container-worker";
/// The hidden subcommand that reports the image's interpreter as JSON.
pub const QUERY_SUBCOMMAND: &str = "__container-query";
/// The hidden subcommand that prints `<protocol> <version>` (what `tools/build-image.sh
/// --launcher` labels the image with).
pub const PROTOCOL_SUBCOMMAND: &str = "__launcher-protocol";

/// The protocol between the server and an in-container launcher: the frames on the
/// container's stdin and stdout ([`super::frames`]), the policy and request stream it
/// hands the sandbox helper, the helper's report and the worker's protocol. Bump it with
/// any change to one of them: an image's launcher of another number is refused.
pub const LAUNCHER_PROTOCOL: u32 = 2;

/// The image labels `tools/build-image.sh --launcher` writes.
pub const LABEL_LAUNCHER_PROTOCOL: &str = "dev.warden.launcher-protocol";
pub const LABEL_LAUNCHER_VERSION: &str = "dev.warden.launcher-version";

/// What `warden __launcher-protocol` prints.
pub fn protocol_line() -> String {
    format!("{LAUNCHER_PROTOCOL} {}", env!("CARGO_PKG_VERSION"))
}

/// The route taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Bind,
    Image,
}

/// Whether `DOCKER_HOST` names an engine on this machine: the default, a UNIX socket, a
/// named pipe, or TCP to a loopback address.
pub fn engine_is_local(host: Option<&str>) -> bool {
    let Some(host) = host else { return true };
    if host.starts_with("unix://") || host.starts_with("npipe://") {
        return true;
    }
    let Some(rest) = host.strip_prefix("tcp://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let name = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The route for `mode` on a server that is (or is not) Linux, with an engine that is
/// (or is not) on this machine. `bind` where it cannot work is refused with the reason.
pub fn choose(mode: LauncherMode, linux_server: bool, local_engine: bool) -> Result<Route, String> {
    match mode {
        LauncherMode::Image => Ok(Route::Image),
        LauncherMode::Auto if linux_server && local_engine => Ok(Route::Bind),
        LauncherMode::Auto => Ok(Route::Image),
        LauncherMode::Bind if !linux_server => Err(format!(
            "SANDBOX_LAUNCHER=bind: this server runs on {}, and a container can only run a Linux binary; use SANDBOX_LAUNCHER=image (or auto) with an image built by tools/build-image.sh --launcher <a Linux warden>",
            std::env::consts::OS
        )),
        LauncherMode::Bind => Ok(Route::Bind),
    }
}

/// The image's launcher, judged by its labels: its version when it speaks this server's
/// protocol; else why it cannot be used, and how to build one that can.
pub fn check_image_launcher(
    image: &str,
    labels: &HashMap<String, String>,
) -> Result<String, String> {
    let rebuild = format!(
        "build one with tools/build-image.sh --from {image} --launcher <a Linux warden {} binary>, or run the server on Linux next to the engine (SANDBOX_LAUNCHER=bind)",
        env!("CARGO_PKG_VERSION")
    );
    let Some(protocol) = labels.get(LABEL_LAUNCHER_PROTOCOL) else {
        return Err(format!(
            "the image {image} carries no warden launcher (no {LABEL_LAUNCHER_PROTOCOL} label); {rebuild}"
        ));
    };
    let version = labels
        .get(LABEL_LAUNCHER_VERSION)
        .cloned()
        .unwrap_or_else(|| "unknown".into());
    if protocol.trim() != LAUNCHER_PROTOCOL.to_string() {
        return Err(format!(
            "the image {image} carries a warden launcher of protocol {protocol} (warden {version}), and this server speaks protocol {LAUNCHER_PROTOCOL} (warden {}); {rebuild}",
            env!("CARGO_PKG_VERSION")
        ));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_engines_are_sockets_pipes_and_loopback() {
        for local in [
            None,
            Some("unix:///var/run/docker.sock"),
            Some("npipe:////./pipe/docker_engine"),
            Some("tcp://127.0.0.1:2376"),
            Some("tcp://127.9.9.9:2375"),
            Some("tcp://localhost:2375"),
            Some("tcp://[::1]:2376"),
        ] {
            assert!(engine_is_local(local), "{local:?}");
        }
        for remote in [
            "tcp://10.0.0.5:2376",
            "tcp://docker.example:2376",
            "tcp://[2001:db8::1]:2376",
            "tcp://localhost.example:2375",
        ] {
            assert!(!engine_is_local(Some(remote)), "{remote}");
        }
    }

    #[test]
    fn the_route_binds_only_a_linux_server_next_to_its_engine() {
        use LauncherMode::{Auto, Bind, Image};
        assert_eq!(choose(Auto, true, true), Ok(Route::Bind));
        assert_eq!(choose(Auto, true, false), Ok(Route::Image));
        assert_eq!(choose(Auto, false, true), Ok(Route::Image));
        assert_eq!(choose(Image, true, true), Ok(Route::Image));
        assert_eq!(choose(Bind, true, false), Ok(Route::Bind));
        let err = choose(Bind, false, true).unwrap_err();
        assert!(err.contains("SANDBOX_LAUNCHER=image"), "{err}");
    }

    #[test]
    fn an_image_launcher_of_another_protocol_is_refused_with_the_way_out() {
        let labels = |p: &str| {
            HashMap::from([
                (LABEL_LAUNCHER_PROTOCOL.to_string(), p.to_string()),
                (LABEL_LAUNCHER_VERSION.to_string(), "9.9.9".to_string()),
            ])
        };
        let ok = check_image_launcher("img", &labels(&LAUNCHER_PROTOCOL.to_string()));
        assert_eq!(ok.as_deref(), Ok("9.9.9"));
        let err = check_image_launcher("img", &labels("999")).unwrap_err();
        assert!(
            err.contains("protocol 999") && err.contains("--launcher"),
            "{err}"
        );
        let err = check_image_launcher("img", &HashMap::new()).unwrap_err();
        assert!(err.contains("no warden launcher"), "{err}");
        assert_eq!(
            protocol_line(),
            format!("{LAUNCHER_PROTOCOL} {}", env!("CARGO_PKG_VERSION"))
        );
    }
}
