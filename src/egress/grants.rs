//! Hosts a person granted one session: what `request_grant` adds when it names a host
//! or URL, what the proxy lets that session reach besides the operator's lists, and what
//! `list_grants` shows. A host grant is an exact host and port, per session, and may
//! expire; it never widens the private-address rule or the deny list.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::{RuleError, normalize_host, split_authority};

/// One host a person granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HostGrant {
    /// The host, normalized (lowercase, no trailing dot), as the person was shown it.
    pub host: String,
    pub port: u16,
    /// Seconds since the Unix epoch.
    pub granted_at: u64,
    /// Seconds since the Unix epoch; absent: until the session closes or warden stops.
    pub expires_at: Option<u64>,
    /// Who approved it: "user via elicitation (client …)".
    pub approved_by: String,
    /// The agent's stated reason, as shown to the person.
    pub reason: String,
}

impl HostGrant {
    pub fn is_live(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|t| now < t)
    }

    /// `host:port`, IPv6 literals bracketed.
    pub fn authority(&self) -> String {
        authority(&self.host, self.port)
    }
}

pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The host and port a `request_grant` names: `host`, `host:port`, or an `http://` or
/// `https://` URL (its scheme's port unless one is given). Pure.
///
/// # Errors
/// Control characters, a userinfo part, a non-ASCII name, a port out of range, another
/// scheme, or a malformed authority, each with what to write instead.
pub fn parse_requested_host(raw: &str) -> Result<(String, u16), RuleError> {
    let raw = raw.trim();
    let (rest, default_port) = if let Some(rest) = raw.strip_prefix("https://") {
        (rest, 443)
    } else if let Some(rest) = raw.strip_prefix("http://") {
        (rest, 80)
    } else if raw.contains("://") {
        return Err(RuleError::Host {
            text: crate::text::one_line(raw, 80).0,
            reason: "only http:// and https:// URLs, or a bare host[:port], can be granted"
                .to_string(),
        });
    } else {
        (raw, 443)
    };
    let authority_text = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = split_authority(authority_text, default_port)?;
    Ok((normalize_host(&host)?, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_urls_name_one_host_and_port() {
        let ok = |raw: &str| parse_requested_host(raw).unwrap();
        assert_eq!(ok("data.example.org"), ("data.example.org".into(), 443));
        assert_eq!(
            ok("Data.Example.org.:8443"),
            ("data.example.org".into(), 8443)
        );
        assert_eq!(ok("https://x.test/a/b.csv?q=1"), ("x.test".into(), 443));
        assert_eq!(ok("http://x.test/a"), ("x.test".into(), 80));
        assert_eq!(ok("http://x.test:8080"), ("x.test".into(), 8080));
        assert_eq!(ok("[2001:db8::1]:443"), ("2001:db8::1".into(), 443));
    }

    #[test]
    fn bad_hosts_are_refused_with_a_reason() {
        for bad in [
            "",
            "x.test:0",
            "x.test:65536",
            "user:pw@x.test",
            "https://user@x.test/",
            "x.test\u{7}",
            "x.test\r\nHost: evil",
            "раypal.com",
            "ftp://x.test/",
            "file:///etc/passwd",
            "x test",
        ] {
            let e = parse_requested_host(bad);
            assert!(e.is_err(), "{bad:?} was accepted: {e:?}");
            assert!(!e.unwrap_err().to_string().is_empty());
        }
    }
}
