//! Grants: extra paths a session's sandbox may reach, approved by a human, never by the
//! model. A grant widens both walls at once (the guard's allowed roots and the worker's
//! Landlock rules). This module owns the grant record, the paths that can never be
//! granted, and canonicalisation; the consent dialogue lives in the server.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    File,
    Directory,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Grant {
    /// Canonical path (symlinks and `..` resolved).
    pub path: PathBuf,
    pub kind: PathKind,
    /// `write` includes read.
    pub access: Access,
    /// Seconds since the Unix epoch.
    pub granted_at: u64,
    /// Seconds since the Unix epoch; absent: until the server stops.
    pub expires_at: Option<u64>,
    /// Who approved it: "user via elicitation (client …)" or "operator (…)".
    pub approved_by: String,
    /// The agent's stated reason, as shown to the person.
    pub reason: String,
}

impl Grant {
    pub fn is_live(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|t| now < t)
    }

    /// Whether this grant already gives `access` to `path`.
    pub fn covers(&self, path: &Path, access: Access) -> bool {
        let within = match self.kind {
            PathKind::Directory => path.starts_with(&self.path),
            PathKind::File => path == self.path,
        };
        within && (self.access == Access::Write || access == Access::Read)
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    #[error("{path:?} is not an absolute path; give the full path, e.g. /data/export.csv")]
    NotAbsolute { path: String },
    #[error("{path:?} cannot be resolved ({reason}); it must exist before it can be granted")]
    Unresolvable { path: String, reason: String },
    #[error("{path} can never be granted, even with consent: {why}")]
    Forbidden { path: PathBuf, why: String },
}

/// The places that stay closed whatever anyone approves.
#[derive(Debug, Clone, Default)]
pub struct ForbiddenPaths {
    /// Exact paths that may not be granted (but their descendants may).
    pub exact: Vec<PathBuf>,
    /// Trees that may not be granted, nor any path inside them, nor any ancestor of them
    /// (granting an ancestor would expose them too).
    pub trees: Vec<(PathBuf, &'static str)>,
}

/// Directory names that hold credentials wherever they are.
const CREDENTIAL_DIRS: &[&str] = &[".ssh", ".aws", ".gnupg", ".config", ".kube", ".docker"];

impl ForbiddenPaths {
    /// The standard list for this server: system trees, the server user's credential
    /// directories, the Docker socket, and warden's own data and config directories
    /// (which hold every session's workspace).
    pub fn standard(home: Option<&Path>, warden_dirs: &[PathBuf]) -> ForbiddenPaths {
        let mut trees: Vec<(PathBuf, &'static str)> = vec![
            ("/etc".into(), "system configuration and password files"),
            (
                "/proc".into(),
                "other processes' memory, environment and files",
            ),
            ("/sys".into(), "kernel interfaces"),
            ("/dev".into(), "devices"),
            ("/boot".into(), "kernel images"),
            ("/root".into(), "the administrator's home"),
            (
                "/var/run/docker.sock".into(),
                "the Docker socket is root on the host",
            ),
            (
                "/run/docker.sock".into(),
                "the Docker socket is root on the host",
            ),
        ];
        if let Some(home) = home {
            for dir in CREDENTIAL_DIRS {
                trees.push((home.join(dir), "credentials"));
            }
        }
        for dir in warden_dirs {
            trees.push((
                dir.clone(),
                "warden's own data (every session's workspace) and configuration",
            ));
        }
        // Compare canonical forms, so that /var/run → /run style links cannot slip by.
        let trees = trees
            .into_iter()
            .map(|(p, why)| (std::fs::canonicalize(&p).unwrap_or(p), why))
            .collect();
        ForbiddenPaths {
            exact: vec![PathBuf::from("/")],
            trees,
        }
    }

    /// Why `canonical` may never be granted, if it may not. Pure.
    pub fn reason(&self, canonical: &Path) -> Option<String> {
        if self.exact.iter().any(|p| p == canonical) {
            return Some("the whole filesystem".to_string());
        }
        for (tree, why) in &self.trees {
            if canonical.starts_with(tree) {
                return Some(format!("it is inside {} ({why})", tree.display()));
            }
            if tree.starts_with(canonical) {
                return Some(format!(
                    "it contains {} ({why}), which a grant cannot exclude",
                    tree.display()
                ));
            }
        }
        if let Some(name) = canonical
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .find(|c| CREDENTIAL_DIRS.contains(c))
        {
            return Some(format!("{name} directories hold credentials"));
        }
        None
    }
}

/// Resolves a requested path (symlinks, `..`) and checks it against the forbidden list.
pub fn resolve(raw: &str, forbidden: &ForbiddenPaths) -> Result<(PathBuf, PathKind), GrantError> {
    if !raw.starts_with('/') {
        return Err(GrantError::NotAbsolute {
            path: raw.to_string(),
        });
    }
    let canonical = std::fs::canonicalize(raw).map_err(|e| GrantError::Unresolvable {
        path: raw.to_string(),
        reason: e.to_string(),
    })?;
    if let Some(why) = forbidden.reason(&canonical) {
        return Err(GrantError::Forbidden {
            path: canonical,
            why,
        });
    }
    let kind = if canonical.is_dir() {
        PathKind::Directory
    } else {
        PathKind::File
    };
    Ok((canonical, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> ForbiddenPaths {
        ForbiddenPaths::standard(
            Some(Path::new("/home/ana")),
            &[PathBuf::from("/var/lib/warden")],
        )
    }

    #[test]
    fn system_and_credential_paths_are_never_grantable() {
        let f = forbidden();
        for p in [
            "/",
            "/etc",
            "/etc/shadow",
            "/proc/1",
            "/sys",
            "/dev/sda",
            "/root",
            "/root/data",
            "/home/ana/.ssh",
            "/home/ana/.ssh/id_ed25519",
            "/home/ana/.aws",
            "/home/ana/.config",
            "/home/ana/.gnupg",
            "/var/lib/warden",
            "/var/lib/warden/sessions/1/other/workspace",
            "/home/bob/.ssh",
        ] {
            assert!(f.reason(Path::new(p)).is_some(), "{p} must be refused");
        }
    }

    #[test]
    fn ancestors_of_forbidden_trees_are_refused_too() {
        let f = forbidden();
        assert!(
            f.reason(Path::new("/home/ana")).is_some(),
            "contains ~/.ssh"
        );
        assert!(
            f.reason(Path::new("/var/lib")).is_some(),
            "contains warden's data"
        );
        assert!(f.reason(Path::new("/var")).is_some());
    }

    #[test]
    fn ordinary_data_paths_are_grantable() {
        let f = forbidden();
        for p in [
            "/data",
            "/data/export.parquet",
            "/home/ana/projects/report",
            "/srv/share",
        ] {
            assert_eq!(f.reason(Path::new(p)), None, "{p}");
        }
    }

    #[test]
    fn resolve_canonicalises_before_checking() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("innocent");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let err = resolve(link.to_str().unwrap(), &forbidden()).unwrap_err();
        assert!(matches!(err, GrantError::Forbidden { ref path, .. } if path == Path::new("/etc")));
        let dotted = format!("{}/../../etc", dir.path().display());
        assert!(matches!(
            resolve(&dotted, &forbidden()),
            Err(GrantError::Forbidden { .. })
        ));
        assert!(matches!(
            resolve("relative/x", &forbidden()),
            Err(GrantError::NotAbsolute { .. })
        ));
        assert!(matches!(
            resolve("/definitely/not/here", &forbidden()),
            Err(GrantError::Unresolvable { .. })
        ));
        let (p, kind) = resolve(dir.path().to_str().unwrap(), &forbidden()).unwrap();
        assert_eq!(kind, PathKind::Directory);
        assert_eq!(p, std::fs::canonicalize(dir.path()).unwrap());
    }

    #[test]
    fn coverage_and_expiry() {
        let g = Grant {
            path: "/data".into(),
            kind: PathKind::Directory,
            access: Access::Read,
            granted_at: 10,
            expires_at: Some(100),
            approved_by: "user".into(),
            reason: String::new(),
        };
        assert!(g.covers(Path::new("/data/x.csv"), Access::Read));
        assert!(!g.covers(Path::new("/data/x.csv"), Access::Write));
        assert!(!g.covers(Path::new("/database"), Access::Read));
        assert!(g.is_live(99));
        assert!(!g.is_live(100));
    }
}
