//! The egress proxy's policy, as pure functions: the patterns an operator writes
//! (`SANDBOX_EGRESS_ALLOW`, `SANDBOX_EGRESS_DENY`, `SANDBOX_EGRESS_RESOLVE`), the
//! normalization every host from a request goes through before it is compared, the
//! verdict on a name and port, and the addresses a DNS answer may not lead to.
//!
//! Nothing here does I/O, so every decision the proxy makes can be tested on its own
//! and reviewed apart from the sockets that carry it out.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize, Serializer};

/// `policies/llm-hosts.toml`, compiled into the binary.
const LLM_HOSTS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/policies/llm-hosts.toml"
));

const ALLOW_VAR: &str = "SANDBOX_EGRESS_ALLOW";
const DENY_VAR: &str = "SANDBOX_EGRESS_DENY";

/// The longest piece of untrusted text an error quotes: a request can carry a host of
/// any length, and a refusal must stay one readable line.
const SHOWN_CHARS: usize = 80;

/// Why a pattern, host, authority or pinned address was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error(
        "egress pattern {text:?} is not valid: {reason}; write `host`, `*.suffix` or `*`, \
         each optionally followed by `:port`"
    )]
    Pattern { text: String, reason: String },
    #[error("host {text:?} is not valid: {reason}")]
    Host { text: String, reason: String },
    #[error(
        "authority {text:?} is not valid: {reason}; write `host`, `host:port` or `[ipv6]:port`"
    )]
    Authority { text: String, reason: String },
    #[error(
        "SANDBOX_EGRESS_RESOLVE entry {text:?} is not valid: {reason}; write `name=address`, \
         e.g. `origin.test=203.0.113.7` or `v6.test=[2001:db8::1]`"
    )]
    Resolve { text: String, reason: String },
    #[error("{list}: {error}")]
    InList {
        list: &'static str,
        error: Box<RuleError>,
    },
    #[error(
        "the LLM host list is not valid: {0}; compare policies/llm-hosts.toml with the one \
         in warden's sources"
    )]
    LlmHosts(String),
}

/// One entry of SANDBOX_EGRESS_ALLOW / SANDBOX_EGRESS_DENY: `host`, `*.suffix`, `*`
/// (any host), each optionally `:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Any,
    Exact(String),
    /// The names under this one (stored without the leading `*.`).
    Suffix(String),
}

impl HostPattern {
    /// Parses one pattern. The host part is normalized like a request's host, so the
    /// comparison in [`HostPattern::matches`] is plain equality.
    ///
    /// # Errors
    /// What is wrong with the pattern.
    pub fn parse(text: &str) -> Result<HostPattern, RuleError> {
        Self::parse_reason(text).map_err(|reason| RuleError::Pattern {
            text: shown(text),
            reason,
        })
    }

    fn parse_reason(text: &str) -> Result<HostPattern, String> {
        if text.is_empty() {
            return Err("it is empty (two commas in a row, or a trailing comma?)".into());
        }
        check_characters(text)?;
        let (host, port) = split_port(text)?;
        let host = match host {
            "*" => HostMatch::Any,
            _ => match host.strip_prefix("*.") {
                Some(suffix) => HostMatch::Suffix(parse_suffix(suffix)?),
                None if host.contains('*') => {
                    return Err("a wildcard may only be `*` alone or a leading `*.`".into());
                }
                None => HostMatch::Exact(normalize(host)?),
            },
        };
        Ok(HostPattern { host, port })
    }

    /// Whether `host` (already normalized) at `port` matches.
    /// Without a port in the pattern, only 80 and 443 match.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        let port_matches = match self.port {
            Some(p) => p == port,
            None => port == 80 || port == 443,
        };
        port_matches && self.matches_host(host)
    }

    /// Whether the host part alone matches. A suffix never matches an IP literal: a
    /// dotted quad's trailing octets are not a domain.
    fn matches_host(&self, host: &str) -> bool {
        match &self.host {
            HostMatch::Any => true,
            HostMatch::Exact(name) => name == host,
            HostMatch::Suffix(suffix) => {
                host.strip_suffix(suffix.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                    && host.parse::<IpAddr>().is_err()
            }
        }
    }

    /// Whether this deny pattern refuses `host` at `port`. A deny pattern without a
    /// port refuses every port: denying a name must not leave its other ports open to
    /// an allow pattern such as `*:8080`.
    fn denies(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.matches_host(host)
    }

    /// Whether this pattern names `host` itself, not through `*` or a suffix.
    fn names_exactly(&self, host: &str, port: u16) -> bool {
        matches!(&self.host, HostMatch::Exact(name) if name == host) && self.matches(host, port)
    }
}

/// The suffix of a `*.suffix` pattern: a domain name, not an address and not another
/// wildcard.
fn parse_suffix(suffix: &str) -> Result<String, String> {
    if suffix.is_empty() {
        return Err("`*.` needs a domain after it".into());
    }
    if suffix.contains('*') {
        return Err("a wildcard may only be `*` alone or a leading `*.`".into());
    }
    let name = normalize(suffix)?;
    if name.parse::<IpAddr>().is_ok() {
        return Err("the part after `*.` must be a domain name, not an address".into());
    }
    Ok(name)
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Any => f.write_str("*")?,
            HostMatch::Suffix(suffix) => write!(f, "*.{suffix}")?,
            HostMatch::Exact(name) => write!(f, "{}", bracketed(name))?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl Serialize for HostPattern {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One SANDBOX_EGRESS_RESOLVE entry: a name and the address the operator pinned it to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pin {
    name: String,
    addr: IpAddr,
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(addr) => write!(f, "{}={addr}", self.name),
            IpAddr::V6(addr) => write!(f, "{}=[{addr}]", self.name),
        }
    }
}

impl Serialize for Pin {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The whole egress policy of one server, parsed from its settings.
#[derive(Debug, Clone, Serialize)]
pub struct EgressRules {
    allow: Vec<HostPattern>,
    deny: Vec<HostPattern>,
    resolve: Vec<Pin>,
    llm_hosts: Vec<HostPattern>,
}

/// The outcome of [`EgressRules::judge_name`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// One line saying why, fit to print as it is.
    Refused(String),
}

/// `policies/llm-hosts.toml`, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LlmHostsFile {
    hosts: Vec<String>,
}

impl EgressRules {
    /// allow/deny: comma-separated patterns (empty string = empty list); resolve:
    /// comma-separated `name=addr` (addr an IPv4 or IPv6 literal, IPv6 may be
    /// bracketed); llm_hosts: the patterns of policies/llm-hosts.toml.
    ///
    /// # Errors
    /// The first entry that is not valid, and the setting it is in.
    pub fn parse(
        allow: &str,
        deny: &str,
        resolve: &str,
        llm_hosts: &[String],
    ) -> Result<EgressRules, RuleError> {
        Ok(EgressRules {
            allow: parse_patterns(allow).map_err(|e| in_list(ALLOW_VAR, e))?,
            deny: parse_patterns(deny).map_err(|e| in_list(DENY_VAR, e))?,
            resolve: parse_pins(resolve)?,
            llm_hosts: llm_hosts
                .iter()
                .map(|entry| parse_llm_host(entry))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The built-in LLM host list (policies/llm-hosts.toml, key `hosts = [..]`).
    ///
    /// # Errors
    /// The file is not the TOML it should be (only a broken build can cause this).
    pub fn builtin_llm_hosts() -> Result<Vec<String>, RuleError> {
        toml::from_str::<LlmHostsFile>(LLM_HOSTS)
            .map(|file| file.hosts)
            .map_err(|e| RuleError::LlmHosts(e.to_string()))
    }

    /// Decides by name (host already normalized by [`normalize_host`]): the deny list
    /// wins (a deny pattern without a port refuses every port); then an LLM-API host is
    /// refused unless the allow list names it exactly (an exact-host pattern equal to
    /// it that matches the port, not `*` nor a suffix); then allowed iff some allow
    /// pattern matches.
    ///
    /// An IP literal host is judged as a name too: it passes only through a pattern
    /// that matches it literally (`*`, or exactly `203.0.113.5`). That does not vet the
    /// address: the proxy also calls [`judge_address`] on it before connecting.
    pub fn judge_name(&self, host: &str, port: u16) -> Verdict {
        self.judge_name_granted(host, port, &[])
    }

    /// [`Self::judge_name`] for a session whose person granted `granted` (exact host
    /// and port pairs): a granted pair passes, LLM API hosts included (the person named
    /// it exactly), but the deny list still wins.
    pub fn judge_name_granted(&self, host: &str, port: u16, granted: &[(String, u16)]) -> Verdict {
        if let Some(pattern) = self.deny.iter().find(|p| p.denies(host, port)) {
            return Verdict::Refused(format!(
                "{} is refused by {DENY_VAR} pattern {pattern}",
                authority(host, port)
            ));
        }
        if granted.iter().any(|(h, p)| h == host && *p == port) {
            return Verdict::Allowed;
        }
        if self.is_llm_host(host) && !self.allow.iter().any(|p| p.names_exactly(host, port)) {
            return Verdict::Refused(llm_refusal(host, port));
        }
        if self.allow.iter().any(|p| p.matches(host, port)) {
            return Verdict::Allowed;
        }
        Verdict::Refused(self.unmatched(host, port))
    }

    /// The operator's pinned address for `host` (SANDBOX_EGRESS_RESOLVE), if any.
    pub fn pinned(&self, host: &str) -> Option<IpAddr> {
        self.resolve
            .iter()
            .find(|pin| pin.name == host)
            .map(|pin| pin.addr)
    }

    /// Whether no allow pattern exists at all (the proxy then refuses everything).
    pub fn allows_nothing(&self) -> bool {
        self.allow.is_empty()
    }

    fn is_llm_host(&self, host: &str) -> bool {
        self.llm_hosts.iter().any(|p| p.matches_host(host))
    }

    fn unmatched(&self, host: &str, port: u16) -> String {
        let at = authority(host, port);
        let why = if self.allows_nothing() {
            format!("{at} is refused: {ALLOW_VAR} is empty, so nothing is allowed")
        } else if port == 80 || port == 443 {
            format!("{at} matches no {ALLOW_VAR} pattern")
        } else {
            format!(
                "{at} matches no {ALLOW_VAR} pattern (one without `:port` matches only ports 80 and 443)"
            )
        };
        format!("{why}; the agent can ask the user with request_grant(host=\"{at}\")")
    }

    /// These rules with `only` as the whole allow list (the package installer's proxy:
    /// the index's hosts); the deny list and the pinned names stay.
    ///
    /// # Errors
    /// A pattern that does not parse.
    pub fn allowing_only(&self, only: &[String]) -> Result<EgressRules, RuleError> {
        let mut out = self.clone();
        out.allow = only
            .iter()
            .map(|text| HostPattern::parse(text))
            .collect::<Result<_, _>>()?;
        Ok(out)
    }

    /// These rules with `extra` patterns added to the allow list (`--allow-host`).
    ///
    /// # Errors
    /// A pattern that does not parse.
    pub fn with_allowed(&self, extra: &[String]) -> Result<EgressRules, RuleError> {
        let mut out = self.clone();
        for text in extra {
            out.allow.push(HostPattern::parse(text)?);
        }
        Ok(out)
    }
}

fn llm_refusal(host: &str, port: u16) -> String {
    let line = format!("{host} is an LLM API host: refused unless {ALLOW_VAR} names it exactly");
    if port == 80 || port == 443 {
        line
    } else {
        format!("{line} with port {port}")
    }
}

fn in_list(list: &'static str, error: RuleError) -> RuleError {
    RuleError::InList {
        list,
        error: Box::new(error),
    }
}

/// The entries of a comma-separated setting; a blank setting is an empty list.
fn entries(text: &str) -> Vec<&str> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    text.split(',').map(str::trim).collect()
}

fn parse_patterns(text: &str) -> Result<Vec<HostPattern>, RuleError> {
    entries(text).into_iter().map(HostPattern::parse).collect()
}

/// An LLM host entry: a host or a suffix. `*` would refuse every host but those the
/// allow list names, and a port would leave the host's other ports open.
fn parse_llm_host(entry: &str) -> Result<HostPattern, RuleError> {
    let pattern = HostPattern::parse(entry).map_err(|e| RuleError::LlmHosts(e.to_string()))?;
    let problem = match (&pattern.host, pattern.port) {
        (HostMatch::Any, _) => "`*` is not an LLM host",
        (_, Some(_)) => "an LLM host entry names a host, not a port",
        _ => return Ok(pattern),
    };
    Err(RuleError::LlmHosts(format!("{entry:?}: {problem}")))
}

fn parse_pins(text: &str) -> Result<Vec<Pin>, RuleError> {
    let mut pins: Vec<Pin> = Vec::new();
    for entry in entries(text) {
        let pin = parse_pin(entry).map_err(|reason| RuleError::Resolve {
            text: shown(entry),
            reason,
        })?;
        if pins.iter().any(|p| p.name == pin.name) {
            return Err(RuleError::Resolve {
                text: shown(entry),
                reason: format!("{} is pinned more than once", pin.name),
            });
        }
        pins.push(pin);
    }
    Ok(pins)
}

fn parse_pin(entry: &str) -> Result<Pin, String> {
    let (name, addr) = entry.split_once('=').ok_or("it has no `=`")?;
    let name = normalize(name)?;
    if name.parse::<IpAddr>().is_ok() {
        return Err("the name is already an address".into());
    }
    Ok(Pin {
        name,
        addr: parse_pinned_addr(addr)?,
    })
}

/// A pinned address: strictly a literal (no `inet_aton` forms: the operator writes it).
fn parse_pinned_addr(text: &str) -> Result<IpAddr, String> {
    let parsed = match text.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .and_then(|v6| v6.parse::<Ipv6Addr>().ok())
            .map(IpAddr::V6),
        None => text.parse::<IpAddr>().ok(),
    };
    parsed.ok_or_else(|| format!("{:?} is not an IPv4 or IPv6 address", shown(text)))
}

/// Addresses refused when DNS returned them (pinned addresses are not judged):
/// loopback, unspecified, RFC 1918, 100.64/10 CGNAT, 169.254/16 link-local (metadata
/// 169.254.169.254), multicast, broadcast, 0.0.0.0/8, 192.0.0.0/24, 198.18/15
/// benchmarking, 240/4 reserved; IPv6: ::1, ::, fc00::/7 ULA, fe80::/10 link-local,
/// fec0::/10 site-local, ff00::/8 multicast, 100::/64 discard-only, Teredo 2001::/32,
/// local-use NAT64 64:ff9b:1::/48; IPv4-mapped, IPv4-translated, IPv4-compatible,
/// NAT64 64:ff9b::/96 and 6to4 2002::/16 are judged as the IPv4 address they carry.
///
/// The documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32)
/// are allowed: test origins are served on them.
///
/// # Errors
/// One line naming the class, e.g. "127.0.0.1 is a loopback address".
pub fn judge_address(ip: IpAddr) -> Result<(), String> {
    let class = match ip {
        IpAddr::V4(v4) => v4_class(v4).map(str::to_owned),
        IpAddr::V6(v6) => v6_class(v6),
    };
    match class {
        Some(class) => Err(format!("{ip} is {class}")),
        None => Ok(()),
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let class = match ip.octets() {
        [0, 0, 0, 0] => "an unspecified address",
        [0, ..] => "a this-network address (0.0.0.0/8)",
        [127, ..] => "a loopback address",
        [10, ..] | [192, 168, ..] => "a private address (RFC 1918)",
        [172, b, ..] if (16..=31).contains(&b) => "a private address (RFC 1918)",
        [100, b, ..] if (64..=127).contains(&b) => "a shared CGNAT address (100.64.0.0/10)",
        [169, 254, 169, 254] => "a link-local address (the cloud metadata service)",
        [169, 254, ..] => "a link-local address (169.254.0.0/16)",
        [192, 0, 0, _] => "an IETF protocol assignment address (192.0.0.0/24)",
        [198, 18 | 19, ..] => "a benchmarking address (198.18.0.0/15)",
        [255, 255, 255, 255] => "a broadcast address",
        [224..=239, ..] => "a multicast address",
        [240..=255, ..] => "a reserved address (240.0.0.0/4)",
        _ => return None,
    };
    Some(class)
}

fn v6_class(ip: Ipv6Addr) -> Option<String> {
    if let Some((form, v4)) = embedded_v4(ip) {
        return v4_class(v4).map(|class| format!("{form} for {v4}, which is {class}"));
    }
    v6_own_class(ip).map(str::to_owned)
}

/// The IPv4 address an IPv6 form stands for, when a connection to it reaches that
/// IPv4 host: such a form must not smuggle a refused IPv4 address past the judge.
fn embedded_v4(ip: Ipv6Addr) -> Option<(&'static str, Ipv4Addr)> {
    let s = ip.segments();
    let low = v4_of(s[6], s[7]);
    let form = match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => "an IPv4-mapped address",
        [0, 0, 0, 0, 0xffff, 0, _, _] => "an IPv4-translated address",
        // `::` and `::1` are IPv6's own; every other `::a.b.c.d` is IPv4-compatible.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => return None,
        [0, 0, 0, 0, 0, 0, _, _] => "an IPv4-compatible address",
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => "a NAT64 address",
        [0x2002, high, low, ..] => return Some(("a 6to4 address", v4_of(high, low))),
        _ => return None,
    };
    Some((form, low))
}

fn v4_of(high: u16, low: u16) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(high) << 16 | u32::from(low))
}

fn v6_own_class(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let class = match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "an unspecified address",
        [0, 0, 0, 0, 0, 0, 0, 1] => "a loopback address",
        [0x2001, 0, ..] => "a Teredo address (2001::/32), whose real endpoint is hidden",
        [0x64, 0xff9b, 1, ..] => "a local-use NAT64 address (64:ff9b:1::/48)",
        [0x100, 0, 0, 0, ..] => "a discard-only address (100::/64)",
        [first, ..] if first & 0xfe00 == 0xfc00 => "a unique local address (fc00::/7)",
        [first, ..] if first & 0xffc0 == 0xfe80 => "a link-local address (fe80::/10)",
        [first, ..] if first & 0xffc0 == 0xfec0 => "a site-local address (fec0::/10)",
        [first, ..] if first & 0xff00 == 0xff00 => "a multicast address",
        _ => return None,
    };
    Some(class)
}

/// Normalizes a host from a request: ASCII only, no control characters, no whitespace,
/// no userinfo (`@`), lowercase, one trailing dot removed, IPv6 literal brackets
/// removed (and the address written canonically), length <= 253, labels 1..=63 of
/// `[a-z0-9-_]`. A host whose last label is a number is an IPv4 address in one of the
/// forms `inet_aton` accepts (`2130706433`, `0x7f.1`, `0177.0.0.1`): it comes back as
/// the dotted quad it stands for, so it is judged as the address a client library
/// would connect to.
///
/// # Errors
/// What is wrong with the host; a non-ASCII host is told to use its punycode form.
pub fn normalize_host(raw: &str) -> Result<String, RuleError> {
    normalize(raw).map_err(|reason| RuleError::Host {
        text: shown(raw),
        reason,
    })
}

fn normalize(raw: &str) -> Result<String, String> {
    check_characters(raw)?;
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or("an IPv6 literal's `[` has no closing `]`")?;
        return ipv6_literal(inner);
    }
    if raw.contains(':') {
        return ipv6_literal(raw);
    }
    let lower = raw.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    check_labels(name)?;
    if ends_in_number(name) {
        return inet_aton(name).map(|v4| v4.to_string()).ok_or_else(|| {
            "it ends in a number but is not an IPv4 address; write an address as four \
             decimal numbers, e.g. 203.0.113.5"
                .into()
        });
    }
    Ok(name.to_owned())
}

/// The characters no host may contain, whatever its form.
fn check_characters(raw: &str) -> Result<(), String> {
    if !raw.is_ascii() {
        return Err(
            "it is not ASCII; write an internationalized name in its punycode \
                    `xn--` form (a lookalike letter makes a different host)"
                .into(),
        );
    }
    if let Some(c) = raw.chars().find(char::is_ascii_control) {
        return Err(format!("it contains the control character {c:?}"));
    }
    if raw.contains(' ') {
        return Err("it contains a space".into());
    }
    if raw.contains('@') {
        return Err("it contains `@`: userinfo (user:password@) is not accepted".into());
    }
    Ok(())
}

fn ipv6_literal(text: &str) -> Result<String, String> {
    text.parse::<Ipv6Addr>()
        .map(|v6| v6.to_string())
        .map_err(|_| "it is not a valid IPv6 address (an IPv6 literal goes in brackets)".into())
}

fn check_labels(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".into());
    }
    if name.len() > 253 {
        return Err(format!(
            "it is {} characters long; the limit is 253",
            name.len()
        ));
    }
    name.split('.').try_for_each(check_label)
}

fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("it has an empty label (two dots in a row, or a leading dot)".into());
    }
    if label.len() > 63 {
        return Err(format!(
            "a label is {} characters long; the limit is 63",
            label.len()
        ));
    }
    match label
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        Some(c) => Err(format!("the character {c:?} is not allowed in a host name")),
        None => Ok(()),
    }
}

/// Whether the last label is a number (decimal, or `0x` hex): no top-level domain is,
/// so such a host is an IPv4 address or nothing.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    match last.strip_prefix("0x") {
        Some(hex) => hex.chars().all(|c| c.is_ascii_hexdigit()),
        None => last.chars().all(|c| c.is_ascii_digit()),
    }
}

/// An IPv4 address as `inet_aton` reads it: one to four parts, each decimal, `0x` hex
/// or `0`-led octal; the last part fills the bytes the others leave.
fn inet_aton(name: &str) -> Option<Ipv4Addr> {
    let parts = name
        .split('.')
        .map(aton_part)
        .collect::<Option<Vec<u32>>>()?;
    let (last, leading) = parts.split_last()?;
    if leading.len() > 3 || leading.iter().any(|&part| part > 255) {
        return None;
    }
    let last_bits = 32 - 8 * leading.len() as u32;
    if u64::from(*last) >= 1u64 << last_bits {
        return None;
    }
    let value = leading
        .iter()
        .enumerate()
        .fold(*last, |acc, (i, &part)| acc | part << (24 - 8 * i as u32));
    Some(Ipv4Addr::from(value))
}

fn aton_part(part: &str) -> Option<u32> {
    let (digits, radix) = match part.strip_prefix("0x") {
        Some("") => return Some(0),
        Some(hex) => (hex, 16),
        None if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
        None => (part, 10),
    };
    // from_str_radix accepts a leading `+`, which inet_aton does not.
    if !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

/// Splits an authority `host:port` / `[v6]:port` / `host` (default_port when no port);
/// port 1..=65535 else error. The host comes back as written, IPv6 brackets included:
/// pass it to [`normalize_host`].
///
/// # Errors
/// What is wrong with the authority.
pub fn split_authority(authority: &str, default_port: u16) -> Result<(String, u16), RuleError> {
    let split = |text: &str| -> Result<(String, u16), String> {
        if text.is_empty() {
            return Err("it is empty".into());
        }
        check_characters(text)?;
        let (host, port) = split_port(text)?;
        if host.is_empty() {
            return Err("the host is empty".into());
        }
        Ok((host.to_owned(), port.unwrap_or(default_port)))
    };
    split(authority).map_err(|reason| RuleError::Authority {
        text: shown(authority),
        reason,
    })
}

/// Splits `host[:port]` or `[v6][:port]`, the brackets kept with the host.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    if text.starts_with('[') {
        let close = text
            .find(']')
            .ok_or("an IPv6 literal's `[` has no closing `]`")?;
        let (host, rest) = text.split_at(close + 1);
        if host == "[]" {
            return Err("the IPv6 literal's brackets are empty".into());
        }
        return match rest.strip_prefix(':') {
            Some(port) => Ok((host, Some(parse_port(port)?))),
            None if rest.is_empty() => Ok((host, None)),
            None => Err(format!(
                "{rest:?} follows an IPv6 literal; only `:port` may"
            )),
        };
    }
    match text.split_once(':') {
        None => Ok((text, None)),
        Some((_, port)) if port.contains(':') => {
            Err("an IPv6 literal must be written in brackets, e.g. [2001:db8::1]:443".into())
        }
        Some((host, port)) => Ok((host, Some(parse_port(port)?))),
    }
}

fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() {
        return Err("the port after `:` is empty".into());
    }
    if !text.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("port {:?} is not a number", shown(text)));
    }
    match text.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("port {} is outside 1 to 65535", shown(text))),
    }
}

/// `host:port`, with an IPv6 host in brackets so the port stays readable.
fn authority(host: &str, port: u16) -> String {
    format!("{}:{port}", bracketed(host))
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Untrusted text cut to a length an error line can carry.
fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &str, deny: &str) -> EgressRules {
        let llm = EgressRules::builtin_llm_hosts().unwrap();
        EgressRules::parse(allow, deny, "", &llm).unwrap()
    }

    fn pattern(text: &str) -> HostPattern {
        HostPattern::parse(text).unwrap()
    }

    fn refused(verdict: Verdict) -> String {
        match verdict {
            Verdict::Refused(reason) => reason,
            Verdict::Allowed => panic!("expected a refusal"),
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn good_patterns_parse_and_print_as_written() {
        for text in [
            "example.com",
            "example.com:8080",
            "*.example.com",
            "*.example.com:8443",
            "*",
            "*:8080",
            "203.0.113.5",
            "203.0.113.5:8080",
            "[2001:db8::1]",
            "[2001:db8::1]:8443",
            "under_score.test",
        ] {
            assert_eq!(pattern(text).to_string(), text);
        }
        assert_eq!(pattern("Example.COM.").to_string(), "example.com");
    }

    #[test]
    fn bad_patterns_are_refused() {
        for text in [
            "",
            "*.",
            "a..b",
            "example.com:0",
            "example.com:70000",
            "example.com:",
            "example.com:http",
            "*.*.x",
            "a*.example.com",
            "exa mple.com",
            " example.com",
            "user@example.com",
            "user:pw@example.com",
            "*.0.0.1",
            "2001:db8::1",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "[1.2.3.4]",
            "example.com/path",
        ] {
            let error = HostPattern::parse(text).unwrap_err();
            assert!(
                matches!(error, RuleError::Pattern { .. }),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn pattern_errors_say_what_to_write() {
        let error = HostPattern::parse("*.").unwrap_err().to_string();
        assert!(error.contains("\"*.\""), "{error}");
        assert!(error.contains("`*.suffix`"), "{error}");
    }

    #[test]
    fn a_pattern_without_port_matches_80_and_443_only() {
        let p = pattern("example.com");
        assert!(p.matches("example.com", 80));
        assert!(p.matches("example.com", 443));
        assert!(!p.matches("example.com", 8080));
        assert!(!p.matches("example.com", 22));
        let any = pattern("*");
        assert!(any.matches("anything.test", 443));
        assert!(!any.matches("anything.test", 25));
    }

    #[test]
    fn a_pattern_with_port_matches_that_port_only() {
        let p = pattern("example.com:8080");
        assert!(p.matches("example.com", 8080));
        assert!(!p.matches("example.com", 443));
        assert!(!p.matches("example.com", 80));
        assert!(pattern("*:8080").matches("x.test", 8080));
    }

    #[test]
    fn a_suffix_matches_subdomains_only() {
        let p = pattern("*.example.com");
        assert!(p.matches("a.example.com", 443));
        assert!(p.matches("a.b.example.com", 443));
        assert!(!p.matches("example.com", 443));
        assert!(!p.matches("badexample.com", 443));
        assert!(!p.matches("example.com.evil.test", 443));
        assert!(!p.matches(".example.com", 443));
    }

    #[test]
    fn exact_patterns_match_only_their_host() {
        let p = pattern("example.com");
        assert!(!p.matches("a.example.com", 443));
        assert!(!p.matches("example.co", 443));
        assert!(pattern("[2001:DB8::1]").matches("2001:db8::1", 443));
    }

    #[test]
    fn patterns_serialize_as_text() {
        let json = serde_json::to_string(&pattern("*.Example.com:8443")).unwrap();
        assert_eq!(json, "\"*.example.com:8443\"");
    }

    #[test]
    fn deny_wins_over_allow() {
        let r = rules("*, *.example.com, example.com", "bad.example.com");
        assert_eq!(r.judge_name("good.example.com", 443), Verdict::Allowed);
        let reason = refused(r.judge_name("bad.example.com", 443));
        assert!(reason.contains("SANDBOX_EGRESS_DENY"), "{reason}");
        assert!(reason.contains("bad.example.com"), "{reason}");
    }

    #[test]
    fn a_deny_pattern_without_port_refuses_every_port() {
        let r = rules("*:8080, *", "bad.test");
        assert_eq!(r.judge_name("good.test", 8080), Verdict::Allowed);
        refused(r.judge_name("bad.test", 8080));
        refused(r.judge_name("bad.test", 443));
        let only_one_port = rules("*:8080, *", "bad.test:8080");
        assert_eq!(only_one_port.judge_name("bad.test", 443), Verdict::Allowed);
        refused(only_one_port.judge_name("bad.test", 8080));
    }

    #[test]
    fn an_llm_host_is_refused_under_a_wildcard_allow() {
        let r = rules("*", "");
        let reason = refused(r.judge_name("api.openai.com", 443));
        assert_eq!(
            reason,
            "api.openai.com is an LLM API host: refused unless SANDBOX_EGRESS_ALLOW names it exactly"
        );
        refused(r.judge_name("myres.openai.azure.com", 443));
        refused(rules("*.anthropic.com", "").judge_name("api.anthropic.com", 443));
        assert_eq!(r.judge_name("pypi.org", 443), Verdict::Allowed);
    }

    #[test]
    fn an_llm_host_named_exactly_is_allowed() {
        let r = rules("*, api.openai.com, myres.openai.azure.com", "");
        assert_eq!(r.judge_name("api.openai.com", 443), Verdict::Allowed);
        assert_eq!(
            r.judge_name("myres.openai.azure.com", 443),
            Verdict::Allowed
        );
        refused(r.judge_name("api.anthropic.com", 443));
    }

    #[test]
    fn an_llm_host_named_exactly_at_another_port_stays_refused() {
        let r = rules("*, api.openai.com:8443", "");
        assert_eq!(r.judge_name("api.openai.com", 8443), Verdict::Allowed);
        refused(r.judge_name("api.openai.com", 443));
        let reason =
            refused(rules("*:9000, api.openai.com", "").judge_name("api.openai.com", 9000));
        assert!(reason.ends_with("with port 9000"), "{reason}");
    }

    #[test]
    fn nothing_is_allowed_without_allow_patterns() {
        let r = rules("", "");
        assert!(r.allows_nothing());
        let reason = refused(r.judge_name("example.com", 443));
        assert!(reason.contains("SANDBOX_EGRESS_ALLOW is empty"), "{reason}");
        assert!(!rules("example.com", "").allows_nothing());
    }

    #[test]
    fn an_unmatched_port_is_explained() {
        let r = rules("example.com", "");
        let reason = refused(r.judge_name("example.com", 8080));
        assert!(reason.contains("only ports 80 and 443"), "{reason}");
        let reason = refused(r.judge_name("other.test", 443));
        assert_eq!(
            reason,
            "other.test:443 matches no SANDBOX_EGRESS_ALLOW pattern; the agent can ask the user with request_grant(host=\"other.test:443\")"
        );
    }

    #[test]
    fn ip_literal_hosts_are_judged_as_names() {
        let r = rules("203.0.113.5, [2001:db8::1]:8443", "");
        assert_eq!(r.judge_name("203.0.113.5", 443), Verdict::Allowed);
        assert_eq!(r.judge_name("2001:db8::1", 8443), Verdict::Allowed);
        refused(r.judge_name("203.0.113.6", 443));
        let reason = refused(r.judge_name("2001:db8::2", 8443));
        assert!(reason.starts_with("[2001:db8::2]:8443"), "{reason}");
        assert!(HostPattern::parse("*.113.5").is_err());
    }

    #[test]
    fn lists_tolerate_spaces_around_commas_but_not_empty_entries() {
        let r = rules(" a.test , b.test ", "");
        assert_eq!(r.judge_name("b.test", 443), Verdict::Allowed);
        let llm = EgressRules::builtin_llm_hosts().unwrap();
        let error = EgressRules::parse("a.test,,b.test", "", "", &llm).unwrap_err();
        assert!(
            error.to_string().starts_with("SANDBOX_EGRESS_ALLOW: "),
            "{error}"
        );
        let error = EgressRules::parse("", "a.test,", "", &llm).unwrap_err();
        assert!(
            error.to_string().starts_with("SANDBOX_EGRESS_DENY: "),
            "{error}"
        );
    }

    #[test]
    fn resolve_entries_pin_addresses() {
        let r = EgressRules::parse(
            "*",
            "",
            "origin.test=203.0.113.7, v6.test=[2001:db8::1], Plain6.test=2001:db8::2",
            &[],
        )
        .unwrap();
        assert_eq!(r.pinned("origin.test"), Some(ip("203.0.113.7")));
        assert_eq!(r.pinned("v6.test"), Some(ip("2001:db8::1")));
        assert_eq!(r.pinned("plain6.test"), Some(ip("2001:db8::2")));
        assert_eq!(r.pinned("other.test"), None);
        assert_eq!(
            EgressRules::parse("", "", "  ", &[]).unwrap().pinned("x"),
            None
        );
    }

    #[test]
    fn bad_resolve_entries_are_refused() {
        for text in [
            "origin.test",
            "origin.test=",
            "=203.0.113.7",
            "origin.test=not-an-address",
            "origin.test=0177.0.0.1",
            "origin.test=2130706433",
            "origin.test=[203.0.113.7]",
            "origin.test=[2001:db8::1",
            "origin.test=203.0.113.7:80",
            "203.0.113.8=203.0.113.7",
            "a.test=203.0.113.7,a.test=203.0.113.8",
            "a.test=203.0.113.7,,b.test=203.0.113.8",
            "bad name=203.0.113.7",
        ] {
            let error = EgressRules::parse("", "", text, &[]).unwrap_err();
            assert!(
                matches!(error, RuleError::Resolve { .. }),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn rules_serialize_their_lists_as_strings() {
        let r = EgressRules::parse(
            "*.example.com:8443",
            "bad.test",
            "v6.test=2001:db8::1",
            &["api.openai.com".into()],
        )
        .unwrap();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "allow": ["*.example.com:8443"],
                "deny": ["bad.test"],
                "resolve": ["v6.test=[2001:db8::1]"],
                "llm_hosts": ["api.openai.com"],
            })
        );
    }

    #[test]
    fn the_builtin_llm_hosts_are_valid_patterns() {
        let hosts = EgressRules::builtin_llm_hosts().unwrap();
        assert!(hosts.len() >= 10);
        for entry in &hosts {
            let p = HostPattern::parse(entry).unwrap();
            assert_eq!(&p.to_string(), entry, "entries are written normalized");
            assert!(p.port.is_none() && p.host != HostMatch::Any, "{entry}");
        }
        for host in [
            "api.anthropic.com",
            "api.openai.com",
            "generativelanguage.googleapis.com",
        ] {
            assert!(hosts.iter().any(|h| h == host), "{host}");
        }
        EgressRules::parse("", "", "", &hosts).unwrap();
    }

    #[test]
    fn llm_hosts_may_not_be_a_wildcard_or_carry_a_port() {
        for entry in ["*", "*:443", "api.openai.com:443", "*.", "a..b"] {
            let error = EgressRules::parse("", "", "", &[entry.into()]).unwrap_err();
            assert!(
                matches!(error, RuleError::LlmHosts(_)),
                "{entry:?}: {error}"
            );
        }
    }

    fn assert_refused(text: &str, class: &str) {
        let reason = judge_address(ip(text)).unwrap_err();
        assert!(reason.starts_with(&ip(text).to_string()), "{reason}");
        assert!(reason.contains(class), "{text}: {reason}");
    }

    #[test]
    fn refused_ipv4_classes() {
        assert_eq!(
            judge_address(ip("127.0.0.1")).unwrap_err(),
            "127.0.0.1 is a loopback address"
        );
        for (text, class) in [
            ("127.1.2.3", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "this-network"),
            ("10.0.0.1", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.255", "CGNAT"),
            ("169.254.169.254", "metadata"),
            ("169.254.1.1", "link-local"),
            ("192.0.0.8", "IETF"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("254.1.1.1", "reserved"),
        ] {
            assert_refused(text, class);
        }
    }

    #[test]
    fn allowed_ipv4_addresses_include_test_nets() {
        for text in [
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.5",
            "8.8.8.8",
            "172.15.0.1",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "198.17.0.1",
            "198.20.0.1",
            "192.0.1.1",
            "223.255.255.255",
        ] {
            assert_eq!(judge_address(ip(text)), Ok(()), "{text}");
        }
    }

    #[test]
    fn refused_ipv6_classes() {
        for (text, class) in [
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("2001::1", "Teredo"),
            ("2001:0:4136:e378::1", "Teredo"),
            ("100::1", "discard-only"),
            ("64:ff9b:1::1", "local-use NAT64"),
        ] {
            assert_refused(text, class);
        }
    }

    #[test]
    fn ipv6_forms_of_ipv4_are_judged_as_their_ipv4() {
        for (text, class) in [
            (
                "::ffff:127.0.0.1",
                "IPv4-mapped address for 127.0.0.1, which is a loopback",
            ),
            ("::ffff:169.254.169.254", "metadata"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:0:192.168.0.1", "IPv4-translated"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::2", "this-network"),
            ("64:ff9b::10.0.0.1", "NAT64"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:7f00:1::1", "6to4 address for 127.0.0.1"),
            ("2002:a9fe:a9fe::", "metadata"),
        ] {
            assert_refused(text, class);
        }
        for text in [
            "::ffff:203.0.113.5",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "2001:db8::1",
            "2606:4700:4700::1111",
        ] {
            assert_eq!(judge_address(ip(text)), Ok(()), "{text}");
        }
    }

    fn normalized(raw: &str) -> String {
        normalize_host(raw).unwrap()
    }

    #[test]
    fn hosts_are_lowercased_and_lose_one_trailing_dot() {
        assert_eq!(normalized("Example.COM"), "example.com");
        assert_eq!(normalized("example.com."), "example.com");
        assert_eq!(normalized("xn--80ak6aa92e.com"), "xn--80ak6aa92e.com");
        assert_eq!(normalized("_dmarc.Example-1.com"), "_dmarc.example-1.com");
        assert!(normalize_host("example.com..").is_err());
        assert!(normalize_host(".").is_err());
    }

    #[test]
    fn ipv6_literals_lose_their_brackets_and_are_canonical() {
        assert_eq!(normalized("[2001:DB8:0:0::1]"), "2001:db8::1");
        assert_eq!(normalized("2001:db8::1"), "2001:db8::1");
        assert_eq!(normalized("[::FFFF:127.0.0.1]"), "::ffff:127.0.0.1");
        for raw in [
            "[2001:db8::1",
            "[]",
            "[1.2.3.4]",
            "[fe80::1%eth0]",
            "[example.com]",
            "a:b",
        ] {
            assert!(normalize_host(raw).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn a_non_ascii_lookalike_is_refused_with_the_punycode_hint() {
        // The first two letters are Cyrillic.
        let error = normalize_host("раypal.com").unwrap_err().to_string();
        assert!(error.contains("xn--"), "{error}");
        assert!(normalize_host("ｅxample.com").is_err());
    }

    #[test]
    fn control_characters_spaces_and_userinfo_are_refused() {
        for raw in [
            "exa\u{0}mple.com",
            "example.com\r\nX: y",
            "example.com\t",
            "exa mple.com",
            "user@example.com",
            "user:pw@example.com",
            "",
            "exa/mple.com",
            "exa%2emple.com",
            "*.example.com",
        ] {
            assert!(normalize_host(raw).is_err(), "{raw:?}");
        }
        let error = normalize_host("user@example.com").unwrap_err().to_string();
        assert!(error.contains("userinfo"), "{error}");
    }

    #[test]
    fn hosts_too_long_are_refused() {
        let label = "a".repeat(63);
        let name = [label.as_str(); 4].join(".");
        assert_eq!(name.len(), 255);
        assert!(normalize_host(&name).is_err());
        assert!(normalize_host(&name[2..]).is_ok());
        assert!(normalize_host(&format!("{}.com", "a".repeat(64))).is_err());
        let error = normalize_host(&"a".repeat(10_000)).unwrap_err().to_string();
        assert!(error.len() < 300, "{error}");
    }

    #[test]
    fn inet_aton_forms_become_dotted_quads() {
        for (raw, dotted) in [
            ("2130706433", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("127.0.1", "127.0.0.1"),
            ("0x7F.0.0.1", "127.0.0.1"),
            ("127.000.000.001", "127.0.0.1"),
            ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
            ("169.254.43518", "169.254.169.254"),
            ("0", "0.0.0.0"),
            ("0x", "0.0.0.0"),
            ("4294967295", "255.255.255.255"),
            ("203.0.113.5", "203.0.113.5"),
            ("203.0.113.5.", "203.0.113.5"),
        ] {
            assert_eq!(normalized(raw), dotted, "{raw}");
        }
    }

    #[test]
    fn numeric_hosts_that_are_no_address_are_refused() {
        for raw in [
            "4294967296",
            "1.2.3.4.5",
            "256.1.1.1",
            "1.2.3.256",
            "1.16777216",
            "08.0.0.1",
            "0x1g.1",
            "example.123",
            "example.0x1",
            "99999999999999999999",
        ] {
            let error = normalize_host(raw).unwrap_err().to_string();
            assert!(
                error.contains("IPv4") || error.contains("character"),
                "{raw}: {error}"
            );
        }
        assert_eq!(normalized("123.example.com"), "123.example.com");
        assert_eq!(normalized("0x1g"), "0x1g");
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        for (text, host, port) in [
            ("example.com", "example.com", 443),
            ("example.com:8080", "example.com", 8080),
            ("example.com:00080", "example.com", 80),
            ("[2001:db8::1]", "[2001:db8::1]", 443),
            ("[2001:db8::1]:8443", "[2001:db8::1]", 8443),
            ("203.0.113.5:1", "203.0.113.5", 1),
            ("example.com:65535", "example.com", 65535),
        ] {
            assert_eq!(
                split_authority(text, 443).unwrap(),
                (host.to_owned(), port),
                "{text}"
            );
        }
        assert_eq!(split_authority("example.com", 80).unwrap().1, 80);
    }

    #[test]
    fn bad_authorities_are_refused() {
        for text in [
            "",
            ":443",
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:+80",
            "example.com:-1",
            "example.com:80:80",
            "2001:db8::1",
            "[2001:db8::1",
            "[2001:db8::1]:",
            "[2001:db8::1]8443",
            "[]:443",
            "user@example.com:443",
            "example.com :443",
        ] {
            let error = split_authority(text, 443);
            assert!(
                matches!(error, Err(RuleError::Authority { .. })),
                "{text:?}: {error:?}"
            );
        }
    }

    #[test]
    fn a_granted_host_passes_but_the_deny_list_still_wins() {
        let rules =
            EgressRules::parse("", "bad.test", "", &["api.openai.com".to_string()]).unwrap();
        let granted = vec![
            ("data.test".to_string(), 8443),
            ("api.openai.com".to_string(), 443),
            ("bad.test".to_string(), 443),
        ];
        assert_eq!(
            rules.judge_name_granted("data.test", 8443, &granted),
            Verdict::Allowed
        );
        assert!(matches!(
            rules.judge_name_granted("data.test", 443, &granted),
            Verdict::Refused(_)
        ));
        assert_eq!(
            rules.judge_name_granted("api.openai.com", 443, &granted),
            Verdict::Allowed
        );
        assert!(matches!(
            rules.judge_name_granted("bad.test", 443, &granted),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            rules.judge_name("data.test", 8443),
            Verdict::Refused(_)
        ));
    }
}
