//! What the host backend can enforce on each operating system, and why not where it
//! cannot: the static half of selftest's capability report. The live half is the list of
//! walls the sandbox helper reports for each worker it starts. Pure, so that every
//! platform's report is tested on whichever machine runs the tests.

use crate::capability::Capability;

/// The operating systems warden is built for, as the host sandbox sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOs {
    /// Landlock, seccomp, namespaces, rlimits, privilege drop (x86_64 and aarch64).
    Linux,
    /// Seatbelt (`sandbox-exec`), rlimits, a process group and a watchdog.
    MacOs,
    /// No host sandbox: the Docker backend is the route.
    Windows,
    /// Anything else this crate happens to compile for.
    Other,
}

impl HostOs {
    /// The system this build is for.
    pub const fn current() -> HostOs {
        if cfg!(target_os = "linux") {
            HostOs::Linux
        } else if cfg!(target_os = "macos") {
            HostOs::MacOs
        } else if cfg!(windows) {
            HostOs::Windows
        } else {
            HostOs::Other
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HostOs::Linux => "Linux",
            HostOs::MacOs => "macOS",
            HostOs::Windows => "Windows",
            HostOs::Other => std::env::consts::OS,
        }
    }

    /// The host backend can start a confined worker here.
    pub fn has_host_sandbox(self) -> bool {
        matches!(self, HostOs::Linux | HostOs::MacOs)
    }
}

/// Why the host backend runs nothing on `os`, and what to use instead.
pub fn host_unsupported_reason(os: HostOs) -> String {
    format!(
        "unsupported: the host backend has no sandbox for a process on {} (warden confines host workers with Landlock and seccomp on Linux and with Seatbelt on macOS), so it runs nothing here; use EXECUTION_BACKEND=docker with Docker Desktop and an image that carries a Linux warden launcher (tools/build-image.sh --launcher), or run warden on Linux",
        os.name()
    )
}

fn gap(mechanism: &str, reason: &str) -> Capability {
    Capability {
        mechanism: mechanism.into(),
        enforced: false,
        reason: reason.into(),
    }
}

/// The mechanisms `os` lacks, each with its reason. What a platform does enforce is not
/// listed here: its helper reports it, live, for every worker.
pub fn host_capabilities(os: HostOs) -> Vec<Capability> {
    match os {
        HostOs::Linux => Vec::new(),
        HostOs::MacOs => vec![
            gap(
                "landlock",
                "not on macOS (Linux only): the Seatbelt profile is the filesystem wall there (read-only runtime, read-write workspace, nothing else)",
            ),
            gap(
                "seccomp",
                "not on macOS: there is no system-call filter; the Seatbelt profile refuses new processes (process-fork), exec of anything but the interpreter, network connections, Mach services, and signals to or information about other processes, but every other system call stays reachable (the worker may, for one, leave its process group; the server still kills it by pid)",
            ),
            gap(
                "namespaces",
                "not on macOS: the worker shares the host's process table and file names; Seatbelt refuses to open, list, signal or inspect what the profile does not allow",
            ),
            gap(
                "no_new_privs",
                "not on macOS: no such flag; the profile lets only the interpreter be executed, so no setuid program can be started",
            ),
            gap(
                "w_xor_x",
                "not on macOS: the interpreter is not built with the hardened runtime, so it may create writable and executable memory; code cannot be mapped executable from the workspace (only the read-only runtime may be)",
            ),
        ],
        HostOs::Windows | HostOs::Other => vec![gap("host_sandbox", &host_unsupported_reason(os))],
    }
}

/// Why selftest's probe `id` tests nothing on `os` (its mechanism does not exist there),
/// or `None` where it applies. Such a probe still runs and is shown, but is not required.
/// Pure.
pub fn probe_not_applicable(os: HostOs, id: &str) -> Option<&'static str> {
    if os != HostOs::MacOs {
        return None;
    }
    Some(match id {
        "priv.no_new_privs" => "not applicable on macOS: there is no no_new_privs flag",
        "priv.capabilities" => "not applicable on macOS: there are no Linux capabilities",
        "fs.inotify" => "not applicable on macOS: there is no inotify",
        "proc.memfd_exec" => "not applicable on macOS: there is no memfd_create",
        "proc.enumerate" => {
            "not applicable on macOS: the probe lists /proc, which macOS does not have (the profile allows no sysctl of other processes)"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_only_probes_are_not_required_on_macos_and_say_why() {
        for id in [
            "priv.no_new_privs",
            "priv.capabilities",
            "fs.inotify",
            "proc.memfd_exec",
            "proc.enumerate",
        ] {
            let why = probe_not_applicable(HostOs::MacOs, id).unwrap();
            assert!(why.starts_with("not applicable on macOS"), "{why}");
            assert_eq!(probe_not_applicable(HostOs::Linux, id), None);
        }
        for id in [
            "fs.canary_read",
            "fs.write_outside",
            "net.loopback_listener",
            "proc.fork",
            "proc.signal_server",
            "priv.not_root",
        ] {
            assert_eq!(probe_not_applicable(HostOs::MacOs, id), None, "{id}");
        }
    }

    #[test]
    fn linux_lists_no_static_gap_its_helper_reports_every_wall() {
        assert!(host_capabilities(HostOs::Linux).is_empty());
        assert!(HostOs::Linux.has_host_sandbox());
    }

    #[test]
    fn macos_names_every_linux_wall_it_lacks_with_a_reason() {
        let caps = host_capabilities(HostOs::MacOs);
        for mechanism in [
            "landlock",
            "seccomp",
            "namespaces",
            "no_new_privs",
            "w_xor_x",
        ] {
            let cap = caps
                .iter()
                .find(|c| c.mechanism == mechanism)
                .unwrap_or_else(|| panic!("{mechanism} missing from {caps:?}"));
            assert!(!cap.enforced);
            assert!(cap.reason.starts_with("not on macOS"), "{}", cap.reason);
        }
        assert!(HostOs::MacOs.has_host_sandbox());
    }

    #[test]
    fn windows_is_unsupported_and_names_the_docker_route() {
        let caps = host_capabilities(HostOs::Windows);
        assert_eq!(caps.len(), 1);
        assert_eq!(caps[0].mechanism, "host_sandbox");
        assert!(!caps[0].enforced);
        assert!(
            caps[0].reason.starts_with("unsupported"),
            "{}",
            caps[0].reason
        );
        assert!(caps[0].reason.contains("EXECUTION_BACKEND=docker"));
        assert!(caps[0].reason.contains("Windows"));
        assert!(!HostOs::Windows.has_host_sandbox());
    }

    #[test]
    fn the_build_knows_its_own_system() {
        let os = HostOs::current();
        assert_eq!(
            os.has_host_sandbox(),
            cfg!(any(target_os = "linux", target_os = "macos"))
        );
    }
}
