//! HTTP clients besides the server's own token (`SANDBOX_HTTP_CLIENTS`): each has a
//! name, a bearer token of its own (the file holds only its SHA-256) and, optionally,
//! a guard policy of its own, so one server can serve a strict client and a
//! data-science one. Parsing is pure and every mistake names the entry; the auth layer
//! lets in each listed token, and the session layer checks each client's code with its
//! policy.

use std::path::Path;

use serde::Deserialize;

use crate::guard::PolicyChoice;

/// One listed client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedClient {
    /// Shown in `warden://settings` and the audit log.
    pub name: String,
    /// SHA-256 of its bearer token.
    pub digest: [u8; 32],
    /// Its guard policy; `None`: the server's (`SANDBOX_POLICY`).
    pub policy: Option<PolicyChoice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    client: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token_sha256: String,
    #[serde(default)]
    policy: Option<String>,
}

/// Most clients a file may list.
const MAX_CLIENTS: usize = 256;

/// Reads and checks the file.
///
/// # Errors
/// The file cannot be read, or what [`parse`] refuses.
pub fn load(path: &Path) -> Result<Vec<ListedClient>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The clients a file lists. Pure.
///
/// # Errors
/// Bad TOML, an unknown key, a name that is not 1 to 64 of `A-Z a-z 0-9 _ . -`, a
/// digest that is not 64 hex digits, a name or token listed twice, or a policy that is
/// neither a tier nor a path.
pub fn parse(text: &str) -> Result<Vec<ListedClient>, String> {
    let file: File = toml::from_str(text).map_err(|e| format!("not a clients file: {e}"))?;
    if file.client.len() > MAX_CLIENTS {
        return Err(format!("more than {MAX_CLIENTS} [[client]] entries"));
    }
    let mut out: Vec<ListedClient> = Vec::new();
    for (i, entry) in file.client.into_iter().enumerate() {
        let at = format!("[[client]] #{} ({:?})", i + 1, entry.name);
        let good_name = !entry.name.is_empty()
            && entry.name.len() <= 64
            && entry
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !good_name {
            return Err(format!("{at}: name must be 1 to 64 of A-Z a-z 0-9 _ . -"));
        }
        let digest = hex_digest(&entry.token_sha256).ok_or_else(|| {
            format!(
                "{at}: token_sha256 must be the token's SHA-256 as 64 hex digits \
                 (printf %s \"$TOKEN\" | sha256sum)"
            )
        })?;
        if out.iter().any(|c| c.name == entry.name) {
            return Err(format!("{at}: the name is listed twice"));
        }
        if out.iter().any(|c| c.digest == digest) {
            return Err(format!("{at}: the same token is listed twice"));
        }
        let policy = match entry.policy.as_deref() {
            None => None,
            Some(text) => Some(
                PolicyChoice::parse(text)
                    .ok_or_else(|| format!("{at}: policy must name a tier or a policy file"))?,
            ),
        };
        out.push(ListedClient {
            name: entry.name,
            digest,
            policy,
        });
    }
    Ok(out)
}

fn hex_digest(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const A: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    const B: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

    #[test]
    fn clients_with_and_without_a_policy() {
        let text = format!(
            "[[client]]\nname = \"ci\"\ntoken_sha256 = \"{A}\"\npolicy = \"strict\"\n\
             [[client]]\nname = \"lab.1\"\ntoken_sha256 = \"{B}\"\n"
        );
        let clients = parse(&text).unwrap();
        assert_eq!(clients.len(), 2);
        assert_eq!(clients[0].policy.as_ref().unwrap().to_string(), "strict");
        assert_eq!(clients[0].digest[0], 0x9f);
        assert_eq!(clients[1].policy, None);
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn every_mistake_names_its_entry() {
        let one = |name: &str, digest: &str, extra: &str| {
            format!("[[client]]\nname = \"{name}\"\ntoken_sha256 = \"{digest}\"\n{extra}")
        };
        for (text, says) in [
            (one("a b", A, ""), "name must be"),
            (one("", A, ""), "name must be"),
            (one("x", "abc", ""), "64 hex digits"),
            (one("x", &A.replace('9', "g"), ""), "64 hex digits"),
            (one("x", A, "policy = \"\""), "policy must"),
            (one("x", A, "token = \"plain\""), "unknown field"),
            (one("x", A, "") + &one("x", B, ""), "listed twice"),
            (one("x", A, "") + &one("y", A, ""), "same token"),
        ] {
            let err = parse(&text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
