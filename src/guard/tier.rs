//! The policy tiers compiled into the binary, and what `SANDBOX_POLICY` and
//! `warden check --policy` name: a tier by its name, or a policy file by its path.
//!
//! - `strict` (policies/strict.toml): no third-party package and a smaller standard
//!   library, for deployments that run computation, not analysis stacks.
//! - `default` (policies/default.toml): the policy every other one is measured against.
//! - `data-science` (policies/data-science.toml): the default plus what analysis code
//!   needs and the default refuses for convenience rather than safety; each entry says
//!   why in the file.
//!
//! The two extra tiers are written as `extends = "default"`, so a fix to the default
//! reaches them; a deployment's own file may extend any of the three.

use std::fmt;
use std::path::{Path, PathBuf};

/// A policy shipped in the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Strict,
    Default,
    DataScience,
}

impl Tier {
    /// Every tier, strictest first.
    pub const ALL: [Tier; 3] = [Tier::Strict, Tier::Default, Tier::DataScience];

    /// The name `SANDBOX_POLICY`, `--policy` and `extends` use.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Strict => "strict",
            Tier::Default => "default",
            Tier::DataScience => "data-science",
        }
    }

    /// The tier a name means, if any.
    pub fn from_name(name: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The tier's TOML text, as compiled in.
    pub fn text(self) -> &'static str {
        match self {
            Tier::Strict => STRICT_POLICY,
            Tier::Default => super::DEFAULT_POLICY,
            Tier::DataScience => DATA_SCIENCE_POLICY,
        }
    }

    /// `strict, default, data-science`: for messages.
    pub fn names() -> String {
        Tier::ALL.map(Tier::name).join(", ")
    }
}

const STRICT_POLICY: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/policies/strict.toml"));

const DATA_SCIENCE_POLICY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/policies/data-science.toml"
));

/// The policy a server or a check uses: a tier, or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyChoice {
    Tier(Tier),
    File(PathBuf),
}

impl Default for PolicyChoice {
    fn default() -> PolicyChoice {
        PolicyChoice::Tier(Tier::Default)
    }
}

impl PolicyChoice {
    /// A tier's name, else a path. A file that happens to be called `strict` is named
    /// `./strict`. Empty text is neither.
    pub fn parse(text: &str) -> Option<PolicyChoice> {
        if text.is_empty() {
            return None;
        }
        Some(match Tier::from_name(text) {
            Some(tier) => PolicyChoice::Tier(tier),
            None => PolicyChoice::File(PathBuf::from(text)),
        })
    }

    /// The file, when the choice is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            PolicyChoice::Tier(_) => None,
            PolicyChoice::File(path) => Some(path),
        }
    }

    /// The guard this choice compiles to.
    pub fn guard(&self) -> Result<super::Guard, super::GuardError> {
        match self {
            PolicyChoice::Tier(tier) => super::Guard::from_policy_toml(tier.text()),
            PolicyChoice::File(path) => super::Guard::from_policy_file(path),
        }
    }
}

impl fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyChoice::Tier(tier) => f.write_str(tier.name()),
            PolicyChoice::File(path) => write!(f, "{}", path.display()),
        }
    }
}

impl serde::Serialize for PolicyChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn names_are_tiers_and_anything_else_is_a_path() {
        for tier in Tier::ALL {
            assert_eq!(
                PolicyChoice::parse(tier.name()),
                Some(PolicyChoice::Tier(tier))
            );
            assert_eq!(
                PolicyChoice::parse(tier.name()).unwrap().to_string(),
                tier.name()
            );
        }
        assert_eq!(
            PolicyChoice::parse("./strict"),
            Some(PolicyChoice::File("./strict".into()))
        );
        assert_eq!(
            PolicyChoice::parse("/etc/warden/policy.toml")
                .unwrap()
                .file(),
            Some(Path::new("/etc/warden/policy.toml"))
        );
        assert_eq!(
            PolicyChoice::parse("Strict"),
            Some(PolicyChoice::File("Strict".into()))
        );
        assert_eq!(PolicyChoice::parse(""), None);
    }

    #[test]
    fn every_tier_compiles() {
        for tier in Tier::ALL {
            let guard = PolicyChoice::Tier(tier).guard();
            assert!(guard.is_ok(), "{}: {:?}", tier.name(), guard.err());
        }
    }
}
