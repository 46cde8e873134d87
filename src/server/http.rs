//! MCP over streamable HTTP (`warden serve --http`), at `/mcp`, on rmcp's server:
//! SSE streams and `Mcp-Session-Id` sessions for 2025-11-25 clients, and the stateless
//! 2026-07-28 protocol, for which rmcp builds a handler per request (Python sessions
//! live in the shared [`SessionManager`](crate::session::SessionManager), so they
//! survive).
//!
//! The walls here, in order: every request is authenticated ([`super::auth`]: the bearer
//! token over TCP, loopback included; the peer's uid on a UNIX socket); rmcp refuses a
//! `Host` or `Origin` not on the allow lists (DNS rebinding); and each client is a scope
//! of its own ([`owner_of`]): an MCP session's scope belongs to the handler rmcp made for
//! that session at `initialize` (its credential and a random id), never to a header, so
//! a request that names another session's id on the stateless route runs in its own
//! credential's scope and closes nothing.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::WardenServer;
use super::auth::{self, Auth, HttpClient, Peer, Rule};
use crate::owner::Owner;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";
/// How long an idle MCP session (and so its Python sessions) is kept.
const SESSION_IDLE: Duration = Duration::from_secs(60 * 60);
/// Largest request body (a call's `code` and `inputs` are capped below this).
const MAX_BODY: usize = 24 << 20;
/// How long open streams get to finish at shutdown before they are cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How `serve --http` was configured.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The TCP address bound; `None` on a UNIX socket.
    pub tcp: Option<SocketAddr>,
    /// The bearer token clients must send: always set over TCP; on a UNIX socket only
    /// when configured.
    pub token: Option<String>,
    /// `Host` values accepted besides loopback names and the bound address.
    pub extra_hosts: Vec<String>,
    /// `Origin` values accepted besides loopback origins.
    pub extra_origins: Vec<String>,
}

/// What `serve --http` listens on.
pub enum HttpListener {
    Tcp(tokio::net::TcpListener),
    /// Bound by [`auth::bind_private_socket`].
    #[cfg(unix)]
    Unix(tokio::net::UnixListener),
}

/// `Host` values accepted: loopback names and the bound address, plus the configured
/// ones. Pure.
pub fn allowed_hosts(addr: Option<&SocketAddr>, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    if let Some(addr) = addr.filter(|a| !a.ip().is_unspecified()) {
        hosts.push(addr.ip().to_string());
    }
    hosts.extend(
        extra
            .iter()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty()),
    );
    hosts.sort();
    hosts.dedup();
    hosts
}

/// `Origin` values accepted: pages served from this machine's loopback addresses, plus
/// the configured ones. A request without `Origin` (not a browser) passes. Pure.
pub fn allowed_origins(extra: &[String]) -> Vec<String> {
    let mut origins: Vec<String> = ["http", "https"]
        .iter()
        .flat_map(|scheme| {
            ["localhost", "127.0.0.1", "[::1]"]
                .iter()
                .map(move |host| format!("{scheme}://{host}:*"))
        })
        .collect();
    origins.extend(
        extra
            .iter()
            .map(|o| o.trim().to_string())
            .filter(|o| !o.is_empty()),
    );
    origins
}

/// The auth layer's mark on an HTTP request (`None` over stdio, or on a route the layer
/// does not cover).
pub fn http_client(ctx: &RequestContext<RoleServer>) -> Option<&HttpClient> {
    ctx.extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<HttpClient>()
}

fn over_http(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.extensions.get::<axum::http::request::Parts>().is_some()
}

/// The scope of a request: stdio's is [`Owner::Local`]; over HTTP the MCP session's
/// (fixed at its `initialize`), else the client's credential's. Headers never choose it.
pub(crate) fn owner_of(scope: Option<&ScopeGuard>, ctx: &RequestContext<RoleServer>) -> Owner {
    if !over_http(ctx) {
        return Owner::Local;
    }
    if let Some(owner) = scope.and_then(|s| s.owner.get()) {
        return owner.clone();
    }
    http_client(ctx)
        .map(HttpClient::stateless_owner)
        // A request without the auth layer's mark cannot happen (the layer wraps the
        // whole service); a scope no one else has is the safe answer if it ever does.
        .unwrap_or_else(|| Owner::client_from_secret("unmarked", ""))
}

/// Whether the request came over HTTP, and whether its handler serves an MCP session
/// (and so can carry server-to-client requests such as elicitation).
pub(crate) fn transport_of(
    scope: Option<&ScopeGuard>,
    ctx: &RequestContext<RoleServer>,
) -> Transport {
    match (over_http(ctx), scope.and_then(|s| s.owner.get())) {
        (false, _) => Transport::Stdio,
        (true, Some(_)) => Transport::HttpSession,
        (true, None) => Transport::HttpStateless,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    HttpSession,
    HttpStateless,
}

/// Whether the one answering a consent prompt on this request's transport can only be
/// the person: the stdio client that launched the server (`stdio`: the handler was made
/// for it), or an HTTP client the auth layer authenticated. Anything else (a route
/// without the auth layer, a handler no one marked) is refused, so no new route can
/// approve a grant by accident. Returns how the person reached the server.
pub fn consent_route(stdio: bool, ctx: &RequestContext<RoleServer>) -> Result<String, String> {
    route_of(stdio, over_http(ctx), http_client(ctx))
}

/// [`consent_route`]'s rule. Pure.
fn route_of(stdio: bool, over_http: bool, client: Option<&HttpClient>) -> Result<String, String> {
    match (over_http, client) {
        (false, _) if stdio => Ok("over stdio".to_string()),
        (false, _) => {
            Err("this request reached warden by no transport the person controls".to_string())
        }
        (true, Some(client)) => Ok(client.credential.route()),
        (true, None) => Err("this HTTP request was not authenticated".to_string()),
    }
}

/// One HTTP handler's scope: set at `initialize`, which rmcp sends only to the handler of
/// an MCP session (a stateless request's handler is never initialised, so it is never
/// tied to a session, whatever headers it carries). When rmcp drops a session's handler
/// (DELETE, idle expiry, shutdown) its Python sessions are closed: no one can name them
/// any more.
pub(crate) struct ScopeGuard {
    sessions: Arc<crate::session::SessionManager>,
    /// Its tasks go with it (their runs are in its Python sessions).
    tasks: Arc<super::tasks::Tasks>,
    owner: OnceLock<Owner>,
}

impl ScopeGuard {
    pub(super) fn new(
        sessions: Arc<crate::session::SessionManager>,
        tasks: Arc<super::tasks::Tasks>,
    ) -> ScopeGuard {
        ScopeGuard {
            sessions,
            tasks,
            owner: OnceLock::new(),
        }
    }

    /// Makes this handler an MCP session's, scoped to the credential that opened it.
    pub(crate) fn open_session(&self, ctx: &RequestContext<RoleServer>) {
        let owner = http_client(ctx)
            .map(HttpClient::session_owner)
            .unwrap_or_else(|| Owner::client_from_secret("unmarked", ""));
        let _ = self.owner.set(owner);
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        let Some(owner) = self.owner.take() else {
            return;
        };
        self.tasks.forget(&owner);
        let sessions = self.sessions.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { sessions.close_owner(&owner).await });
        }
    }
}

/// Serves MCP over HTTP until `shutdown` resolves; then ends every MCP session and
/// stream. The caller kills the workers afterwards.
pub async fn serve(
    server: WardenServer,
    options: HttpOptions,
    listener: HttpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if matches!(listener, HttpListener::Tcp(_)) && options.token.is_none() {
        return Err(std::io::Error::other(
            "a TCP listener needs a bearer token (SANDBOX_HTTP_TOKEN or the token file)",
        ));
    }
    let ct = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts(options.tcp.as_ref(), &options.extra_hosts))
        .with_allowed_origins(allowed_origins(&options.extra_origins))
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY)
        .with_cancellation_token(ct.child_token());
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(SESSION_IDLE);
    let factory_server = server.clone();
    let service = StreamableHttpService::new(
        move || Ok(factory_server.for_connection()),
        Arc::new(manager),
        config,
    );
    #[cfg(unix)]
    let own_uid = Some(rustix::process::geteuid().as_raw());
    #[cfg(not(unix))]
    let own_uid = None;
    let refusals = Arc::new(auth::Refusals::new(server.sessions.clone()));
    let auth = Arc::new(Auth {
        rule: Rule::new(options.token.as_deref(), own_uid)
            .with_listed(server.sessions.listed_clients()),
        refusals: refusals.clone(),
    });
    let app = axum::Router::new().nest_service(MCP_PATH, service).layer(
        axum::middleware::from_fn_with_state(auth, auth::authenticate),
    );
    match listener {
        HttpListener::Tcp(l) => run(l, app, ct, shutdown).await,
        #[cfg(unix)]
        HttpListener::Unix(l) => {
            let uid = rustix::process::geteuid().as_raw();
            run(auth::PeerListener::new(l, uid, refusals), app, ct, shutdown).await
        }
    }
}

/// Serves `app` on `listener`, each request carrying its [`Peer`], until `shutdown`.
async fn run<L>(
    listener: L,
    app: axum::Router,
    ct: CancellationToken,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener,
    L::Addr: std::fmt::Debug,
    Peer: for<'a> Connected<IncomingStream<'a, L>>,
{
    let stop = ct.clone();
    let graceful = async move {
        shutdown.await;
        stop.cancel();
    };
    let serving = axum::serve(listener, app.into_make_service_with_connect_info::<Peer>())
        .with_graceful_shutdown(graceful);
    tokio::select! {
        r = serving => r,
        // Streams that outlive the grace period (a client holding an SSE stream open)
        // do not keep the server alive.
        () = async { ct.cancelled().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stdio_and_authenticated_http_clients_can_be_asked_for_consent() {
        let client = HttpClient {
            credential: auth::Credential::PeerUid(1000),
            listed: None,
        };
        assert_eq!(route_of(true, false, None), Ok("over stdio".to_string()));
        assert!(route_of(false, false, None).is_err());
        assert!(
            route_of(false, true, Some(&client))
                .unwrap()
                .contains("uid 1000")
        );
        assert!(route_of(true, true, None).is_err());
        assert!(route_of(false, true, None).is_err());
    }

    #[test]
    fn hosts_include_loopback_the_bound_address_and_extras() {
        let addr: SocketAddr = "10.1.2.3:80".parse().unwrap();
        let hosts = allowed_hosts(Some(&addr), &["warden.lan".into(), " ".into()]);
        for h in ["localhost", "127.0.0.1", "::1", "10.1.2.3", "warden.lan"] {
            assert!(hosts.contains(&h.to_string()), "{h} in {hosts:?}");
        }
        assert!(!hosts.contains(&String::new()));
        let any: SocketAddr = "0.0.0.0:80".parse().unwrap();
        assert!(!allowed_hosts(Some(&any), &[]).contains(&"0.0.0.0".to_string()));
        assert_eq!(allowed_hosts(None, &[]), ["127.0.0.1", "::1", "localhost"]);
        let origins = allowed_origins(&["https://app.example:443".into()]);
        assert!(origins.contains(&"http://localhost:*".to_string()));
        assert!(origins.contains(&"https://app.example:443".to_string()));
    }
}
