//! Who owns a session. Over stdio there is one client, the local one, and session names
//! are used as they are. Over HTTP every client (a bearer token, or an MCP session)
//! gets a scope of its own: two clients that both say `session: "default"` get two
//! sessions, and neither can see, reset, grant into or read the files of the other's.
//!
//! The session layer keys its table by [`SessionKey`] (owner, name); everything a client
//! can name is looked up through that key, so the scoping has one place to hold.

use std::fmt;

/// The owner of a session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// The one local client (stdio), and in-process users such as `warden run`.
    Local,
    /// One HTTP client, by an opaque id (hex of a hash; never the token itself).
    Client(String),
}

impl Owner {
    /// An HTTP client's owner from a secret that identifies it (a bearer token or an
    /// `Mcp-Session-Id`). Only a hash prefix is kept: ids appear in directory names,
    /// logs and the audit log, the secret never does.
    pub fn client_from_secret(kind: &str, secret: &str) -> Owner {
        use sha2::Digest;
        let mut hasher = sha2::Sha256::new();
        hasher.update(kind.as_bytes());
        hasher.update([0u8]);
        hasher.update(secret.as_bytes());
        let digest = hasher.finalize();
        let hex: String = crate::hex(&digest[..8]);
        Owner::Client(hex)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Local => f.write_str("local"),
            Owner::Client(id) => write!(f, "client {id}"),
        }
    }
}

/// A session as the session table knows it: its owner and the name the client gave.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    pub owner: Owner,
    pub name: String,
}

impl SessionKey {
    pub fn new(owner: &Owner, name: &str) -> SessionKey {
        SessionKey {
            owner: owner.clone(),
            name: name.to_string(),
        }
    }

    pub fn local(name: &str) -> SessionKey {
        SessionKey::new(&Owner::Local, name)
    }

    /// The directory name under the instance directory. A local session keeps its own
    /// name; a client's is `<client id>~<name>`. `~` never occurs in a valid session
    /// name, so the two can never collide. Pure.
    pub fn dir_name(&self) -> String {
        match &self.owner {
            Owner::Local => self.name.clone(),
            Owner::Client(id) => format!("{id}~{}", self.name),
        }
    }
}

impl fmt::Display for SessionKey {
    /// How the audit log and the server's own logs name the session.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dir_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_hide_the_secret_and_differ_by_kind() {
        let a = Owner::client_from_secret("token", "s3cret-token-value");
        let b = Owner::client_from_secret("session", "s3cret-token-value");
        assert_ne!(a, b);
        let Owner::Client(id) = &a else {
            panic!("not a client")
        };
        assert_eq!(id.len(), 16);
        assert!(!id.contains("s3cret"));
        assert_eq!(a, Owner::client_from_secret("token", "s3cret-token-value"));
    }

    #[test]
    fn directory_names_never_collide_between_owners() {
        let local = SessionKey::local("default");
        let client = SessionKey::new(&Owner::Client("00ff".into()), "default");
        assert_eq!(local.dir_name(), "default");
        assert_eq!(client.dir_name(), "00ff~default");
        assert_ne!(local.dir_name(), client.dir_name());
        // A local session cannot be named like a client's directory.
        assert!(crate::execution::validate_session_name("00ff~default").is_err());
    }
}
