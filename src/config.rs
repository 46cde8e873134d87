//! Settings: one name each, read from the environment (DESIGN §7) and overridable by CLI
//! flags. Parsing is pure (`Settings::from_lookup`) so every rule is unit-tested without
//! touching the process environment; an invalid value is a startup error that names the
//! setting, never a silent default.

use std::path::PathBuf;

use serde::Serialize;

/// Hard ceiling for any per-call wall-clock limit, whatever the configuration says.
pub const TIMEOUT_CAP_S: u64 = 120;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{name}={value:?} is not valid: {expected}")]
    Invalid {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(
        "EXECUTION_BACKEND=docker is not available in this build yet; unset EXECUTION_BACKEND \
         or set it to \"host\" (the Linux Landlock + seccomp sandbox)"
    )]
    DockerNotAvailable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Host,
}

/// `HOST_SANDBOX`: how strictly the host sandbox's walls are required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No sandbox at all: development only, reported loudly in every result.
    Off,
    /// Apply every wall the kernel supports; report the ones that are missing.
    BestEffort,
    /// Refuse to run code unless every wall is in force.
    Require,
}

/// `HOST_SANDBOX_NETWORK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    Deny,
    Allow,
}

/// `CODEGUARD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuardMode {
    Enforce,
    Shadow,
    Off,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub backend: Backend,
    pub host_sandbox: SandboxMode,
    pub network: NetworkMode,
    pub mem_limit_bytes: u64,
    pub pids_limit: u64,
    pub file_size_limit_bytes: u64,
    pub timeout_s: u64,
    pub output_limit_bytes: usize,
    /// `None`: the platform default (see [`default_data_dir`]).
    pub data_dir: Option<PathBuf>,
    /// `None`: python3 on PATH, resolved to a real ELF binary.
    pub python: Option<PathBuf>,
    pub policy_file: Option<PathBuf>,
    pub codeguard: GuardMode,
    /// Where the selftest's connect probe aims (RFC 5737 TEST-NET-1 by default).
    pub probe_addr: String,
}

impl Settings {
    /// Reads every setting from the process environment.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads every setting through `lookup` (the environment in production, a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let backend = match get("EXECUTION_BACKEND").as_deref().map(str::trim) {
            None | Some("host") => Backend::Host,
            Some("docker") => return Err(ConfigError::DockerNotAvailable),
            Some(other) => return Err(invalid("EXECUTION_BACKEND", other, "host or docker")),
        };
        let host_sandbox = match get("HOST_SANDBOX").as_deref().map(str::trim) {
            None | Some("best-effort") => SandboxMode::BestEffort,
            Some("require") => SandboxMode::Require,
            Some("off") => SandboxMode::Off,
            Some(other) => {
                return Err(invalid(
                    "HOST_SANDBOX",
                    other,
                    "off, best-effort or require",
                ));
            }
        };
        let network = match get("HOST_SANDBOX_NETWORK").as_deref().map(str::trim) {
            None | Some("deny") => NetworkMode::Deny,
            Some("allow") => NetworkMode::Allow,
            Some(other) => return Err(invalid("HOST_SANDBOX_NETWORK", other, "deny or allow")),
        };
        let codeguard = match get("CODEGUARD").as_deref().map(str::trim) {
            None | Some("enforce") => GuardMode::Enforce,
            Some("shadow") => GuardMode::Shadow,
            Some("off") => GuardMode::Off,
            Some(other) => return Err(invalid("CODEGUARD", other, "enforce, shadow or off")),
        };
        let mem_limit_bytes = size_setting(&get, "SANDBOX_MEM_LIMIT", 2 << 30, 64 << 20)?;
        let file_size_limit_bytes =
            size_setting(&get, "SANDBOX_FILE_SIZE_LIMIT", 256 << 20, 1 << 20)?;
        let output_limit_bytes = size_setting(&get, "SANDBOX_OUTPUT_LIMIT", 64 << 10, 1 << 10)?;
        let output_limit_bytes = usize::try_from(output_limit_bytes).map_err(|_| {
            invalid(
                "SANDBOX_OUTPUT_LIMIT",
                &output_limit_bytes.to_string(),
                "a size this machine can address",
            )
        })?;
        let pids_limit = match get("SANDBOX_PIDS_LIMIT") {
            None => 256,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if (8..=1_000_000).contains(&n) => n,
                _ => return Err(invalid("SANDBOX_PIDS_LIMIT", &v, "a whole number from 8")),
            },
        };
        let timeout_s = match get("SANDBOX_TIMEOUT_S") {
            None => 10,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if n >= 1 => n.min(TIMEOUT_CAP_S),
                _ => {
                    return Err(invalid(
                        "SANDBOX_TIMEOUT_S",
                        &v,
                        "whole seconds, at least 1",
                    ));
                }
            },
        };
        let probe_addr = match get("SANDBOX_PROBE_ADDR") {
            None => "192.0.2.1".to_string(),
            Some(v) => match v.trim().parse::<std::net::Ipv4Addr>() {
                Ok(addr) => addr.to_string(),
                Err(_) => return Err(invalid("SANDBOX_PROBE_ADDR", &v, "an IPv4 address")),
            },
        };
        Ok(Settings {
            probe_addr,
            backend,
            host_sandbox,
            network,
            mem_limit_bytes,
            pids_limit,
            file_size_limit_bytes,
            timeout_s,
            output_limit_bytes,
            data_dir: get("SANDBOX_DATA_DIR").map(PathBuf::from),
            python: get("SANDBOX_PYTHON").map(PathBuf::from),
            policy_file: get("SANDBOX_POLICY").map(PathBuf::from),
            codeguard,
        })
    }

    /// The per-call wall clock: the caller's wish, else the default, never above the cap.
    pub fn effective_timeout_s(&self, requested: Option<u64>) -> u64 {
        requested.unwrap_or(self.timeout_s).clamp(1, TIMEOUT_CAP_S)
    }
}

fn invalid(name: &'static str, value: &str, expected: &'static str) -> ConfigError {
    ConfigError::Invalid {
        name,
        value: value.to_string(),
        expected,
    }
}

fn size_setting(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: u64,
    minimum: u64,
) -> Result<u64, ConfigError> {
    let Some(value) = get(name) else {
        return Ok(default);
    };
    match parse_size(&value) {
        Some(n) if n >= minimum => Ok(n),
        _ => Err(invalid(
            name,
            &value,
            "a size such as 512m, 2g or 65536 (bytes), not below the minimum",
        )),
    }
}

/// Parses `123`, `64k`, `512m`, `2g` (also `KiB`/`MB`-style suffixes; all binary units).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(digits_end);
    let n: u64 = digits.parse().ok()?;
    let shift = match unit.trim() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// warden's configuration directory (the config file and nothing a worker can write).
pub fn config_dir() -> Option<PathBuf> {
    directories::ProjectDirs::from("dev", "warden", "warden").map(|d| d.config_dir().to_path_buf())
}

/// The config file: `WARDEN_CONFIG`, else `config.toml` in [`config_dir`].
pub fn config_file_path() -> Option<PathBuf> {
    match std::env::var_os("WARDEN_CONFIG") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => config_dir().map(|d| d.join("config.toml")),
    }
}

/// One `[[grants]]` entry of the config file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigGrant {
    pub path: String,
    pub access: crate::grants::Access,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    grants: Vec<ConfigGrant>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
}

/// Reads the pre-approved grants of the config file; a missing default file is no grants.
pub fn load_config_grants(
    path: &std::path::Path,
    explicit: bool,
) -> Result<Vec<ConfigGrant>, ConfigFileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigFileError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    parse_config_grants(&text).map_err(|message| ConfigFileError::Parse {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses the config file's text. Pure.
pub fn parse_config_grants(text: &str) -> Result<Vec<ConfigGrant>, String> {
    toml::from_str::<ConfigFile>(text)
        .map(|c| c.grants)
        .map_err(|e| e.to_string())
}

/// Where workspaces (and later the audit log) live when `SANDBOX_DATA_DIR` is unset.
///
/// As root the per-user data dir is under `/root`, which no unprivileged sandbox uid can
/// traverse, so root uses the system-service convention `/var/lib/warden` instead.
pub fn default_data_dir(running_as_root: bool) -> Option<PathBuf> {
    if running_as_root {
        return Some(PathBuf::from("/var/lib/warden"));
    }
    directories::ProjectDirs::from("dev", "warden", "warden").map(|d| d.data_dir().to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_match_the_design_card() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.backend, Backend::Host);
        assert_eq!(s.host_sandbox, SandboxMode::BestEffort);
        assert_eq!(s.network, NetworkMode::Deny);
        assert_eq!(s.mem_limit_bytes, 2 << 30);
        assert_eq!(s.pids_limit, 256);
        assert_eq!(s.timeout_s, 10);
        assert_eq!(s.output_limit_bytes, 64 << 10);
        assert_eq!(s.codeguard, GuardMode::Enforce);
    }

    #[test]
    fn timeout_is_capped_at_120_seconds() {
        let s = settings(&[("SANDBOX_TIMEOUT_S", "999")]).unwrap();
        assert_eq!(s.timeout_s, 120);
        assert_eq!(s.effective_timeout_s(Some(5000)), 120);
        assert_eq!(s.effective_timeout_s(Some(0)), 1);
        assert_eq!(s.effective_timeout_s(None), 120);
    }

    #[test]
    fn docker_is_refused_clearly_for_now() {
        assert_eq!(
            settings(&[("EXECUTION_BACKEND", "docker")]).unwrap_err(),
            ConfigError::DockerNotAvailable
        );
    }

    #[test]
    fn bad_values_name_the_setting() {
        let err = settings(&[("HOST_SANDBOX", "maybe")]).unwrap_err();
        assert!(err.to_string().contains("HOST_SANDBOX"), "{err}");
        let err = settings(&[("SANDBOX_MEM_LIMIT", "lots")]).unwrap_err();
        assert!(err.to_string().contains("SANDBOX_MEM_LIMIT"), "{err}");
        assert!(settings(&[("SANDBOX_MEM_LIMIT", "1k")]).is_err());
    }

    #[test]
    fn config_file_lists_pre_approved_grants() {
        let grants = parse_config_grants(
            "[[grants]]\npath = \"/data/in\"\naccess = \"read\"\n[[grants]]\npath = \"/data/out\"\naccess = \"write\"\n",
        )
        .unwrap();
        assert_eq!(grants.len(), 2);
        assert_eq!(grants[1].access, crate::grants::Access::Write);
        assert!(parse_config_grants("[[grants]]\npath = \"/x\"\naccess = \"all\"\n").is_err());
        assert!(parse_config_grants("grantz = 1\n").is_err());
        assert!(parse_config_grants("").unwrap().is_empty());
    }

    #[test]
    fn probe_address_must_be_ipv4() {
        assert_eq!(settings(&[]).unwrap().probe_addr, "192.0.2.1");
        assert_eq!(
            settings(&[("SANDBOX_PROBE_ADDR", "127.0.0.2")])
                .unwrap()
                .probe_addr,
            "127.0.0.2"
        );
        assert!(settings(&[("SANDBOX_PROBE_ADDR", "example.com")]).is_err());
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("64KiB"), Some(64 << 10));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999g"), None);
    }
}
