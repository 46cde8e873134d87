//! macOS: the worker policy as a deny-by-default SBPL profile for `sandbox-exec`.
//! A pure builder, unit-tested on every platform; the code that would launch the worker
//! under `sandbox-exec -p <profile>` is macOS platform glue that this build does not
//! contain yet, so `selftest` reports the mechanism as `unsupported` elsewhere.

use std::path::{Path, PathBuf};

use crate::config::NetworkMode;
use crate::sandbox::policy::WorkerPolicy;

/// Quotes a path as an SBPL string literal.
fn sbpl_string(path: &Path) -> String {
    let raw = path.to_string_lossy();
    let mut out = String::with_capacity(raw.len() + 2);
    out.push('"');
    for c in raw.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The SBPL profile for one worker. Pure.
pub fn sbpl_profile(policy: &WorkerPolicy) -> String {
    let mut p = String::from("(version 1)\n(deny default)\n");
    p.push_str(&format!(
        "(allow process-exec (literal {}))\n",
        sbpl_string(&policy.python)
    ));
    // No process-fork: no subprocesses, as on Linux.
    p.push_str("(allow signal (target self))\n(allow sysctl-read)\n");
    let mut allow = |rights: &str, filter: &str, paths: &[PathBuf]| {
        for path in paths {
            p.push_str(&format!(
                "(allow {rights} ({filter} {}))\n",
                sbpl_string(path)
            ));
        }
    };
    let view = &policy.host_view;
    allow("file-read*", "subpath", &view.read_dirs);
    allow("file-read*", "literal", &view.read_files);
    allow(
        "file-read*",
        "literal",
        std::slice::from_ref(&policy.python),
    );
    allow("file-read* file-write*", "subpath", &view.write_dirs);
    let files: Vec<PathBuf> = view
        .write_files
        .iter()
        .filter(|f| f.as_path() != Path::new("/dev/null"))
        .cloned()
        .collect();
    allow("file-read* file-write*", "literal", &files);
    p.push_str("(allow file-read* file-write-data (literal \"/dev/null\"))\n");
    match policy.network {
        NetworkMode::Deny => p.push_str("(deny network*)\n"),
        NetworkMode::Allow => p.push_str("(allow network-outbound (remote ip))\n"),
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn policy(network: NetworkMode) -> WorkerPolicy {
        let mut p = crate::sandbox::policy::example_policy(network);
        p.python = PathBuf::from("/opt/homebrew/bin/python3");
        p.host_view.read_dirs = vec![PathBuf::from("/opt/homebrew/lib/python3.12")];
        p.host_view.write_dirs = vec![PathBuf::from("/Users/a/Library/warden/s/\"odd\"/workspace")];
        p
    }

    #[test]
    fn profile_denies_by_default_and_grants_only_the_policy() {
        let profile = sbpl_profile(&policy(NetworkMode::Deny));
        assert!(profile.starts_with("(version 1)\n(deny default)\n"));
        assert!(profile.contains("(allow process-exec (literal \"/opt/homebrew/bin/python3\"))"));
        assert!(profile.contains("(allow file-read* (subpath \"/opt/homebrew/lib/python3.12\"))"));
        assert!(profile.contains("(deny network*)"));
        assert!(!profile.contains("process-fork"));
        assert!(!profile.contains("(subpath \"/\")"));
    }

    #[test]
    fn paths_are_escaped_so_they_cannot_inject_rules() {
        let profile = sbpl_profile(&policy(NetworkMode::Deny));
        assert!(profile.contains("(subpath \"/Users/a/Library/warden/s/\\\"odd\\\"/workspace\")"));
    }

    #[test]
    fn network_allow_opens_outbound_ip_only() {
        let profile = sbpl_profile(&policy(NetworkMode::Allow));
        assert!(profile.contains("(allow network-outbound (remote ip))"));
        assert!(!profile.contains("network-inbound"));
    }
}
