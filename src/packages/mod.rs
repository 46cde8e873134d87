//! Packages the agent can install (`install_packages`): a layer of installed
//! distributions per session that its workers see read-only at [`MOUNT`] (executable, so
//! C extensions load under W^X; not writable, so the code cannot rewrite them), built by
//! a separate installer behind the same walls.
//!
//! - [`requirements`]: the requirement strings accepted (names from the index, nothing
//!   else), and the session's list after an install;
//! - [`pip`]: what the installer runs (pip's two steps: wheels only, downloaded through
//!   an egress proxy that reaches the index alone, installed offline), as data;
//! - [`layer`]: the layer on disk, its generations and the atomic switch to a new one.
//!
//! Every install builds a new generation from the session's whole requirement list, so
//! the layer is always one set pip resolved together, and it changes all or nothing.

pub mod layer;
pub mod pip;
pub mod requirements;

pub use requirements::Requirement;

use serde::Serialize;

/// Where a worker's world shows its session's layer (the generation in use is
/// `MOUNT/current`).
pub const MOUNT: &str = "/packages";
/// The variable naming the layer's directory to the worker's interpreter, which puts it
/// on `sys.path` ahead of site-packages (never ahead of the standard library).
pub const ENV: &str = "WARDEN_PACKAGES";
/// PyPI's index, whose files live on another host.
const PYPI: (&str, &str) = ("pypi.org", "files.pythonhosted.org");

/// `SANDBOX_PACKAGE_INDEX`, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexUrl {
    /// As pip is given it, ending in `/`.
    pub url: String,
    pub https: bool,
    /// Normalized (lowercase, no trailing dot).
    pub host: String,
    pub port: u16,
}

impl IndexUrl {
    /// Parses an `http://` or `https://` URL with no userinfo, query or fragment.
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn parse(text: &str) -> Result<IndexUrl, String> {
        let (rest, https) = if let Some(rest) = text.strip_prefix("https://") {
            (rest, true)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (rest, false)
        } else {
            return Err("the index URL must start with https:// or http://".into());
        };
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err("the index URL has a space or control character".into());
        }
        if text.contains(['?', '#']) {
            return Err("the index URL may not have a query or fragment".into());
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') {
            return Err("the index URL may not carry a user or password".into());
        }
        let (raw_host, port) =
            crate::egress::rules::split_authority(authority, if https { 443 } else { 80 })
                .map_err(|e| e.to_string())?;
        let host = crate::egress::rules::normalize_host(&raw_host).map_err(|e| e.to_string())?;
        let path = if path.is_empty() { "/" } else { path };
        let slash = if path.ends_with('/') { "" } else { "/" };
        Ok(IndexUrl {
            url: format!(
                "{}://{authority}{path}{slash}",
                if https { "https" } else { "http" }
            ),
            https,
            host,
            port,
        })
    }

    /// The allow list of the installer's proxy: the index's host and port, and PyPI's
    /// file host for PyPI.
    pub fn hosts(&self) -> Vec<String> {
        let mut out = vec![crate::egress::grants::authority(&self.host, self.port)];
        if self.host == PYPI.0 {
            out.push(format!("{}:443", PYPI.1));
        }
        out
    }
}

/// One installed distribution, as the result and the audit log show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Installed {
    /// Normalized (PEP 503).
    pub name: String,
    pub version: String,
    /// Of the wheel file installed, computed by the server.
    pub sha256: String,
    pub wheel: String,
}

/// `install_packages`'s arguments.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallArgs {
    /// PEP 508 requirement strings naming distributions of the index: `"pandas"`,
    /// `"scikit-learn>=1.4"`, `"requests[socks]==2.31.0"`. No URLs, markers or options.
    pub packages: Vec<String>,
    /// The session whose code will import them (default "default").
    #[serde(default)]
    pub session: Option<String>,
}

/// `install_packages`'s result.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct InstallResult {
    pub session: String,
    /// The layer changed: every distribution in `installed` can be imported now.
    pub ok: bool,
    /// Every distribution in the session's layer now (dependencies included), with the
    /// SHA-256 of the wheel it came from. Empty when `ok` is false.
    pub installed: Vec<Installed>,
    /// The session's requirements the layer was built from (earlier installs' included).
    pub requirements: Vec<String>,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::execution::ErrorInfo>,
    pub warnings: Vec<String>,
    pub duration_ms: u64,
    /// The client's model's verdict, when it was asked (`SANDBOX_JUDGE=advisory`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge: Option<crate::judge::Judgement>,
}

impl InstallResult {
    /// A refusal: nothing changed.
    pub fn refused(session: &str, error: crate::execution::ErrorInfo) -> InstallResult {
        InstallResult {
            session: session.to_string(),
            message: format!("nothing was installed: {}", error.message),
            error: Some(error),
            ..InstallResult::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_urls_are_http_or_https_without_userinfo() {
        let pypi = IndexUrl::parse("https://pypi.org/simple").unwrap();
        assert_eq!(pypi.url, "https://pypi.org/simple/");
        assert_eq!((pypi.host.as_str(), pypi.port), ("pypi.org", 443));
        assert_eq!(pypi.hosts(), ["pypi.org:443", "files.pythonhosted.org:443"]);
        let mirror = IndexUrl::parse("http://Mirror.test:8080/pypi/simple/").unwrap();
        assert_eq!(mirror.hosts(), ["mirror.test:8080"]);
        assert!(!mirror.https);
        for bad in [
            "ftp://x/simple",
            "https://user:pw@x/simple",
            "https://x/simple?a=1",
            "https://x /simple",
            "https://x:99999/simple",
            "https://",
            "pypi.org/simple",
        ] {
            assert!(IndexUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
