//! The egress proxy: the only way out of a world whose network is `proxy` (or `allow`).
//! [`rules`] is the pure policy (which names, ports and addresses pass); [`proxy`] serves
//! HTTP `CONNECT` and absolute-form requests on a listening socket made inside the
//! worker's own network namespace, resolves names itself and connects only to the
//! address it judged.

pub mod rules;

/// The proxy's port on the world's loopback (`HTTP_PROXY=http://127.0.0.1:3128`); every
/// world has a network namespace of its own, so every world uses the same port.
pub const PROXY_PORT: u16 = 3128;

/// The worker's proxy variables: every client library (urllib, requests, httpx, pip,
/// pandas' URL readers) reads one spelling or the other; `NO_PROXY` is empty so that no
/// name bypasses the proxy (nothing else is reachable anyway).
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut out = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        out.push((name.to_string(), url.clone()));
        out.push((name.to_ascii_lowercase(), url.clone()));
    }
    out.push(("NO_PROXY".to_string(), String::new()));
    out.push(("no_proxy".to_string(), String::new()));
    out
}

pub mod grants;
pub mod proxy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::Settings;
use rules::EgressRules;

/// The server's egress proxy: the rules in force, every session's bytes so far, and the
/// audit log every connection is recorded in.
pub struct Egress {
    rules: EgressRules,
    limit_bytes: u64,
    /// The setting `limit_bytes` comes from, as refusals name it.
    limit_name: &'static str,
    used: Mutex<HashMap<String, u64>>,
    /// Hosts each session's person granted, by session (the audit log's name for it).
    granted: Mutex<HashMap<String, Vec<grants::HostGrant>>>,
    audit: Arc<crate::audit::AuditLog>,
}

/// One worker's tie to the proxy: its accept loop runs while the link lives.
pub struct Link {
    owner: Arc<proxy::Owner>,
    task: tokio::task::AbortHandle,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Link {
    /// Names the session whose connections these are (a warm worker gets one late).
    pub fn set_session(&self, session: &str) {
        self.owner.set_session(session);
    }

    /// The refusals and cuts since the last call, one line each, naming the host.
    pub fn take_refused(&self) -> Vec<String> {
        self.owner.take_refused()
    }
}

impl Egress {
    /// The proxy for `settings`, or `None` when the network is denied.
    pub fn for_settings(
        settings: &Settings,
        audit: Arc<crate::audit::AuditLog>,
    ) -> Option<Arc<Egress>> {
        settings.network.proxied().then(|| {
            Arc::new(Egress {
                rules: settings.egress.rules.clone(),
                limit_bytes: settings.egress.limit_bytes,
                limit_name: "SANDBOX_EGRESS_LIMIT",
                used: Mutex::new(HashMap::new()),
                granted: Mutex::new(HashMap::new()),
                audit,
            })
        })
    }

    /// The proxy of one package install: `rules` (the index's hosts), `limit_bytes`
    /// for the whole install, recorded in `audit` like a session's connections.
    pub fn for_installer(
        rules: EgressRules,
        limit_bytes: u64,
        audit: Arc<crate::audit::AuditLog>,
    ) -> Arc<Egress> {
        Arc::new(Egress {
            rules,
            limit_bytes,
            limit_name: "SANDBOX_PACKAGE_LIMIT",
            used: Mutex::new(HashMap::new()),
            granted: Mutex::new(HashMap::new()),
            audit,
        })
    }

    /// Serves a world's endpoint until the returned link is dropped.
    ///
    /// # Errors
    /// The listener cannot be registered with the runtime.
    pub fn serve(self: &Arc<Self>, listener: std::net::TcpListener) -> std::io::Result<Link> {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let owner = Arc::new(proxy::Owner::default());
        let task = tokio::spawn(proxy::accept_loop(self.clone(), owner.clone(), listener));
        Ok(Link {
            owner,
            task: task.abort_handle(),
        })
    }

    /// The bytes `session` has moved through the proxy so far.
    pub fn used(&self, session: &str) -> u64 {
        self.used
            .lock()
            .ok()
            .and_then(|u| u.get(session).copied())
            .unwrap_or(0)
    }

    /// Forgets a closed session's byte count and host grants.
    pub fn forget(&self, session: &str) {
        if let Ok(mut used) = self.used.lock() {
            used.remove(session);
        }
        if let Ok(mut granted) = self.granted.lock() {
            granted.remove(session);
        }
    }

    /// The rules in force (the operator's lists).
    pub fn rules(&self) -> &EgressRules {
        &self.rules
    }

    /// Adds a host the session's person granted (replacing an earlier grant of it).
    pub fn grant_host(&self, session: &str, grant: grants::HostGrant) {
        if let Ok(mut granted) = self.granted.lock() {
            let list = granted.entry(session.to_string()).or_default();
            list.retain(|g| (g.host.as_str(), g.port) != (grant.host.as_str(), grant.port));
            list.push(grant);
        }
    }

    /// The session's live host grants.
    pub fn host_grants(&self, session: &str) -> Vec<grants::HostGrant> {
        let now = crate::grants::now_secs();
        self.granted
            .lock()
            .ok()
            .and_then(|g| g.get(session).cloned())
            .unwrap_or_default()
            .into_iter()
            .filter(|g| g.is_live(now))
            .collect()
    }

    fn record(&self, event: crate::audit::AuditEvent) {
        if let Err(e) = self.audit.record(event) {
            tracing::warn!(error = %e, "an egress connection could not be audited");
        }
    }
}
