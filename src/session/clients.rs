//! The HTTP clients of `SANDBOX_HTTP_CLIENTS` as the session layer sees them: each
//! one's guard (its own policy, or the server's), and which owner (an MCP session or a
//! stateless credential) speaks for which client. The server binds an owner to its
//! client when a request of it arrives; the guard of that owner's calls follows.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;

use super::{SessionError, SessionManager, guard_with};
use crate::clients::ListedClient;
use crate::config::Settings;
use crate::guard::Guard;
use crate::owner::Owner;

/// The listed clients and their guards.
#[derive(Default)]
pub(super) struct Clients {
    listed: Vec<ListedClient>,
    /// By client name: the guard of a client with a policy of its own.
    guards: HashMap<String, Guard>,
    /// Which client each owner is.
    owners: Mutex<HashMap<Owner, String>>,
}

/// One listed client in `warden://settings` (never its token's digest).
#[derive(Debug, Clone, Serialize)]
pub struct ClientReport {
    pub name: String,
    /// Its policy: a tier's name or a file; `null`: the server's.
    pub policy: Option<String>,
}

impl Clients {
    /// Which owner is which client, even after a panic elsewhere held the lock: a lost
    /// binding would check a strict client's code with the server's policy.
    fn owners(&self) -> MutexGuard<'_, HashMap<Owner, String>> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads `SANDBOX_HTTP_CLIENTS` and compiles each client's policy.
    pub(super) fn load(settings: &Settings) -> Result<Clients, SessionError> {
        let Some(path) = &settings.http_clients else {
            return Ok(Clients::default());
        };
        let setting = || settings.describe("SANDBOX_HTTP_CLIENTS");
        let listed = crate::clients::load(path).map_err(|error| SessionError::Clients {
            setting: setting(),
            error,
        })?;
        let mut guards = HashMap::new();
        for client in &listed {
            let Some(policy) = &client.policy else {
                continue;
            };
            let guard = guard_with(settings, policy).map_err(|e| SessionError::Clients {
                setting: setting(),
                error: format!("client {:?}, policy `{policy}`: {e}", client.name),
            })?;
            if let Some(guard) = guard {
                guards.insert(client.name.clone(), guard);
            }
        }
        Ok(Clients {
            listed,
            guards,
            owners: Mutex::new(HashMap::new()),
        })
    }
}

impl SessionManager {
    /// The clients `SANDBOX_HTTP_CLIENTS` lists (the auth layer lets their tokens in).
    pub fn listed_clients(&self) -> &[ListedClient] {
        &self.clients.listed
    }

    /// Records that `owner` speaks for the listed client `name`.
    pub fn bind_client(&self, owner: &Owner, name: &str) {
        let mut owners = self.clients.owners();
        if owners.get(owner).is_none_or(|n| n != name) {
            owners.insert(owner.clone(), name.to_string());
        }
    }

    /// Forgets an owner that is gone (its MCP session ended).
    pub(super) fn unbind_client(&self, owner: &Owner) {
        self.clients.owners().remove(owner);
    }

    /// The guard for `owner`'s code: its client's own, else the server's.
    pub(super) fn guard_of(&self, owner: &Owner) -> Option<Guard> {
        let name = self.clients.owners().get(owner).cloned();
        name.and_then(|n| self.clients.guards.get(&n).cloned())
            .or_else(|| self.guard.clone())
    }

    /// The listed clients and their policies, for `warden://settings`.
    pub fn clients_report(&self) -> Vec<ClientReport> {
        self.clients
            .listed
            .iter()
            .map(|c| ClientReport {
                name: c.name.clone(),
                policy: c.policy.as_ref().map(ToString::to_string),
            })
            .collect()
    }
}
