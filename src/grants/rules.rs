//! The never-grant rules as data: `policies/never-grant.toml`, embedded at build time,
//! parsed here, and expanded into absolute paths for one server ([`expand_tree`],
//! [`login_homes`]). The list lives in the data file so that it can be reviewed
//! without reading Rust and shown as it is in `warden://settings`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The rules compiled into the binary.
pub const NEVER_GRANT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/policies/never-grant.toml"
));

/// `policies/never-grant.toml`, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeverGrant {
    #[serde(rename = "tree")]
    pub trees: Vec<TreeRule>,
    #[serde(rename = "name")]
    pub names: Vec<NameRule>,
    pub repository: Why,
    pub computed: Computed,
}

/// A path (absolute, or `~/` for every login home), what is inside it and what holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeRule {
    pub path: String,
    pub why: String,
}

/// A file or directory name that matters wherever it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameRule {
    pub name: String,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Why {
    pub why: String,
}

/// Reasons for the paths each server finds at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Computed {
    pub config_file: String,
    pub config_dir: String,
    pub data_dir: String,
    pub runtime: String,
    pub program: String,
}

#[derive(Debug, thiserror::Error)]
#[error("policies/never-grant.toml is not valid: {0}; compare it with the one in warden's sources")]
pub struct RulesError(String);

impl NeverGrant {
    /// Parses a rules file. Names are single path components; tree paths are absolute or
    /// start with `~/`.
    ///
    /// # Errors
    /// What is wrong, and where.
    pub fn parse(text: &str) -> Result<NeverGrant, RulesError> {
        let rules: NeverGrant = toml::from_str(text).map_err(|e| RulesError(e.to_string()))?;
        for tree in &rules.trees {
            if !(tree.path.starts_with('/') || tree.path.starts_with("~/")) {
                return Err(RulesError(format!(
                    "tree {:?} is neither absolute nor under ~/",
                    tree.path
                )));
            }
        }
        for name in &rules.names {
            if name.name.is_empty() || name.name.contains('/') || name.name == ".." {
                return Err(RulesError(format!(
                    "name {:?} is not one path component",
                    name.name
                )));
            }
        }
        Ok(rules)
    }

    /// The embedded rules.
    ///
    /// # Errors
    /// Only if the file compiled in is broken (a unit test keeps it valid).
    pub fn embedded() -> Result<NeverGrant, RulesError> {
        NeverGrant::parse(NEVER_GRANT)
    }

    /// Why a file or directory of this name may never be granted, if it may not.
    pub fn name_reason(&self, name: &std::ffi::OsStr) -> Option<&str> {
        self.names
            .iter()
            .find(|n| std::ffi::OsStr::new(&n.name) == name)
            .map(|n| n.why.as_str())
    }
}

/// The absolute paths a tree rule stands for: itself, or `~/…` in each of `homes`. Pure.
pub fn expand_tree(path: &str, homes: &[PathBuf]) -> Vec<PathBuf> {
    match path.strip_prefix("~/") {
        Some(rest) => homes.iter().map(|h| h.join(rest)).collect(),
        None => vec![PathBuf::from(path)],
    }
}

/// Shells that cannot log in: their users' start-up files never run.
const NO_LOGIN: &[&str] = &["nologin", "false", "sync", "halt", "shutdown"];

/// The home directories of the users in a password database (`/etc/passwd` text) who
/// can log in: a shell that is not nologin or false, a home that is an absolute path
/// other than `/`. Pure.
pub fn login_homes(passwd: &str) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = Vec::new();
    for line in passwd.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 7 || line.starts_with('#') {
            continue;
        }
        let (home, shell) = (fields[5], fields[6].trim());
        let shell_name = Path::new(shell)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if shell.is_empty() || NO_LOGIN.contains(&shell_name) {
            continue;
        }
        let home = PathBuf::from(home);
        if home.is_absolute() && home != Path::new("/") && !homes.contains(&home) {
            homes.push(home);
        }
    }
    homes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_rules_parse_and_name_what_the_design_requires() {
        let rules = NeverGrant::embedded().unwrap();
        let trees: Vec<&str> = rules.trees.iter().map(|t| t.path.as_str()).collect();
        for needed in [
            "/etc",
            "/proc",
            "/var/spool/cron",
            "~/.ssh",
            "~/.config/autostart",
            "~/.config/systemd",
            "~/.local/share/systemd",
            "~/.bashrc",
            "~/.bash_profile",
            "~/.profile",
            "~/.zshrc",
            "~/.zshenv",
            "~/.config/fish",
        ] {
            assert!(trees.contains(&needed), "{needed}");
        }
        for name in [".git", ".ssh", ".bashrc", ".profile", ".zshrc", ".config"] {
            assert!(rules.name_reason(name.as_ref()).is_some(), "{name}");
        }
        assert!(rules.trees.iter().all(|t| !t.why.is_empty()));
        assert!(rules.names.iter().all(|n| !n.why.is_empty()));
    }

    #[test]
    fn a_broken_rules_file_is_refused_with_what_is_wrong() {
        let base = "[repository]\nwhy = \"r\"\n[computed]\nconfig_file = \"a\"\nconfig_dir = \"b\"\ndata_dir = \"c\"\nruntime = \"d\"\nprogram = \"e\"\n";
        let ok = format!(
            "{base}[[tree]]\npath = \"/x\"\nwhy = \"y\"\n[[name]]\nname = \".n\"\nwhy = \"w\"\n"
        );
        assert!(NeverGrant::parse(&ok).is_ok());
        let relative = format!(
            "{base}[[tree]]\npath = \"x\"\nwhy = \"y\"\n[[name]]\nname = \".n\"\nwhy = \"w\"\n"
        );
        assert!(
            NeverGrant::parse(&relative)
                .unwrap_err()
                .to_string()
                .contains("\"x\"")
        );
        let nested = format!(
            "{base}[[tree]]\npath = \"/x\"\nwhy = \"y\"\n[[name]]\nname = \"a/b\"\nwhy = \"w\"\n"
        );
        assert!(
            NeverGrant::parse(&nested)
                .unwrap_err()
                .to_string()
                .contains("a/b")
        );
        assert!(NeverGrant::parse("[[tree]]\npath = 1\n").is_err());
    }

    #[test]
    fn home_rules_stand_for_every_login_home() {
        let homes = vec![PathBuf::from("/home/ana"), PathBuf::from("/var/lib/pg")];
        assert_eq!(
            expand_tree("~/.ssh", &homes),
            [PathBuf::from("/home/ana/.ssh"), "/var/lib/pg/.ssh".into()]
        );
        assert_eq!(expand_tree("/etc", &homes), [PathBuf::from("/etc")]);
        assert!(expand_tree("~/.ssh", &[]).is_empty());
    }

    #[test]
    fn login_homes_are_those_with_a_login_shell() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
                      sync:x:4:65534:sync:/bin:/bin/sync\n\
                      net:x:100:102::/:/bin/sh\n\
                      ana:x:1000:1000:Ana,,,:/home/ana:/usr/bin/zsh\n\
                      nohome:x:1001:1001::relative:/bin/bash\n\
                      noshell:x:1002:1002::/home/noshell:\n\
                      pg:x:110:118::/var/lib/postgresql:/bin/bash\n\
                      # a comment:x:1:1::/home/c:/bin/sh\n\
                      short:x:1\n\
                      ana2:x:1000:1000::/home/ana:/bin/bash\n";
        assert_eq!(
            login_homes(passwd),
            [
                PathBuf::from("/root"),
                "/home/ana".into(),
                "/var/lib/postgresql".into()
            ]
        );
    }
}
