//! MCP over streamable HTTP (`warden serve --http`), at `/mcp`, on rmcp's server:
//! SSE streams and `Mcp-Session-Id` sessions for 2025-11-25 clients, and the stateless
//! 2026-07-28 protocol, for which rmcp builds a handler per request (Python sessions
//! live in the shared [`SessionManager`](crate::session::SessionManager), so they
//! survive).
//!
//! The walls here, in order: the listener binds loopback unless told otherwise; a bearer
//! token is checked (constant time) whenever the address is not loopback or a token is
//! configured; rmcp refuses a `Host` or `Origin` not on the allow lists (DNS
//! rebinding); and each client is a scope of its own ([`owner_of`]): an MCP session,
//! else its token, so clients never see each other's Python sessions, grants or files.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

use super::WardenServer;
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
    pub addr: SocketAddr,
    /// The bearer token clients must send (`None`: none required, loopback only).
    pub token: Option<String>,
    /// `Host` values accepted besides loopback names and the bound address.
    pub extra_hosts: Vec<String>,
    /// `Origin` values accepted besides loopback origins.
    pub extra_origins: Vec<String>,
}

/// The token rule: a configured token is always required; off loopback one is
/// generated when none is configured. Returns the token and whether it was generated.
pub fn token_for(addr: &SocketAddr, configured: Option<String>) -> (Option<String>, bool) {
    match configured.filter(|t| !t.trim().is_empty()) {
        Some(t) => (Some(t.trim().to_string()), false),
        None if addr.ip().is_loopback() => (None, false),
        None => {
            let bytes: [u8; 32] = crate::random_bytes();
            (
                Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
                true,
            )
        }
    }
}

/// What the auth layer knows of a request's client; handlers read it through
/// [`owner_of`].
#[derive(Debug, Clone)]
pub struct HttpClient {
    /// The scope of a request without an MCP session: its token's, or the shared
    /// scope of token-less loopback clients.
    pub stateless_owner: Owner,
}

struct Auth {
    /// SHA-256 of the token: compared digest to digest, so the comparison's time
    /// depends on neither the token's length nor where a guess first differs.
    token_digest: Option<[u8; 32]>,
}

fn digest(text: &str) -> [u8; 32] {
    sha2::Sha256::digest(text.as_bytes()).into()
}

/// Constant-time equality of two digests.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The bearer token of a request, if it sent one. Pure.
pub fn bearer(value: Option<&HeaderValue>) -> Option<&str> {
    let text = value?.to_str().ok()?.trim();
    let (scheme, token) = text.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

async fn authenticate(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let given = bearer(req.headers().get(header::AUTHORIZATION));
    let stateless_owner = match (&auth.token_digest, given) {
        (None, _) => Owner::client_from_secret("loopback", ""),
        (Some(expected), Some(token)) if same_digest(expected, &digest(token)) => {
            Owner::client_from_secret("token", token)
        }
        (Some(_), given) => {
            tracing::warn!(
                sent_token = given.is_some(),
                "HTTP request refused: missing or wrong bearer token"
            );
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "Unauthorized: send the server's token as `Authorization: Bearer <token>` \
                 (SANDBOX_HTTP_TOKEN, or the token warden printed at start)",
            )
                .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"warden\""),
            );
            return response;
        }
    };
    req.extensions_mut().insert(HttpClient { stateless_owner });
    next.run(req).await
}

/// `Host` values accepted: loopback names and the bound address, plus the configured
/// ones. Pure.
pub fn allowed_hosts(addr: &SocketAddr, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    if !addr.ip().is_unspecified() {
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

/// The scope of a request: stdio's is [`Owner::Local`]; over HTTP an MCP session's id,
/// else the token's (or loopback's shared) scope from the auth layer.
pub fn owner_of(ctx: &RequestContext<RoleServer>) -> Owner {
    let Some(parts) = ctx.extensions.get::<axum::http::request::Parts>() else {
        return Owner::Local;
    };
    if let Some(session) = mcp_session_id(parts) {
        return Owner::client_from_secret("session", session);
    }
    parts
        .extensions
        .get::<HttpClient>()
        .map(|c| c.stateless_owner.clone())
        // Parts without the auth layer's mark cannot happen (the layer wraps the whole
        // service); a scope no one else has is the safe answer if it ever does.
        .unwrap_or_else(|| Owner::client_from_secret("unmarked", ""))
}

fn mcp_session_id(parts: &axum::http::request::Parts) -> Option<&str> {
    parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty())
}

/// Whether the request came over HTTP, and whether it has an MCP session (and so can
/// carry server-to-client requests such as elicitation).
pub fn transport_of(ctx: &RequestContext<RoleServer>) -> Transport {
    match ctx.extensions.get::<axum::http::request::Parts>() {
        None => Transport::Stdio,
        Some(parts) if mcp_session_id(parts).is_some() => Transport::HttpSession,
        Some(_) => Transport::HttpStateless,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    HttpSession,
    HttpStateless,
}

/// Closes an MCP session's Python sessions when rmcp drops that session's handler
/// (DELETE, idle expiry, shutdown): no one can name them any more.
pub(crate) struct ScopeGuard {
    sessions: Arc<crate::session::SessionManager>,
    owner: OnceLock<Owner>,
}

impl ScopeGuard {
    pub(crate) fn new(sessions: Arc<crate::session::SessionManager>) -> ScopeGuard {
        ScopeGuard {
            sessions,
            owner: OnceLock::new(),
        }
    }

    /// Ties this handler to the MCP session of a request (the first one wins; a handler
    /// built per request for a stateless client is never tied).
    pub(crate) fn note(&self, ctx: &RequestContext<RoleServer>) {
        if transport_of(ctx) == Transport::HttpSession {
            let _ = self.owner.set(owner_of(ctx));
        }
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        let Some(owner) = self.owner.take() else {
            return;
        };
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
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ct = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts(&options.addr, &options.extra_hosts))
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
    let auth = Arc::new(Auth {
        token_digest: options.token.as_deref().map(digest),
    });
    let app = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(auth, authenticate));
    let stop = ct.clone();
    let graceful = async move {
        shutdown.await;
        stop.cancel();
    };
    let serving = axum::serve(listener, app).with_graceful_shutdown(graceful);
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
    fn a_token_is_needed_off_loopback_and_whenever_configured() {
        let lo: SocketAddr = "127.0.0.1:8765".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8765".parse().unwrap();
        assert_eq!(token_for(&lo, None), (None, false));
        assert_eq!(token_for(&lo, Some("  ".into())), (None, false));
        assert_eq!(
            token_for(&lo, Some("t1".into())),
            (Some("t1".into()), false)
        );
        let (token, generated) = token_for(&any, None);
        assert!(generated);
        assert_eq!(token.unwrap().len(), 64);
        assert_eq!(
            token_for(&any, Some("t2".into())),
            (Some("t2".into()), false)
        );
    }

    #[test]
    fn bearer_tokens_are_read_leniently_and_nothing_else_is() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(bearer(Some(&v("Bearer abc"))), Some("abc"));
        assert_eq!(bearer(Some(&v("bearer  abc "))), Some("abc"));
        assert_eq!(bearer(Some(&v("Basic abc"))), None);
        assert_eq!(bearer(Some(&v("Bearer "))), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn digests_compare_equal_only_when_equal() {
        assert!(same_digest(&digest("a"), &digest("a")));
        assert!(!same_digest(&digest("a"), &digest("b")));
        assert!(!same_digest(&digest("a"), &digest("a ")));
    }

    #[test]
    fn hosts_include_loopback_the_bound_address_and_extras() {
        let addr: SocketAddr = "10.1.2.3:80".parse().unwrap();
        let hosts = allowed_hosts(&addr, &["warden.lan".into(), " ".into()]);
        for h in ["localhost", "127.0.0.1", "::1", "10.1.2.3", "warden.lan"] {
            assert!(hosts.contains(&h.to_string()), "{h} in {hosts:?}");
        }
        assert!(!hosts.contains(&String::new()));
        let any: SocketAddr = "0.0.0.0:80".parse().unwrap();
        assert!(!allowed_hosts(&any, &[]).contains(&"0.0.0.0".to_string()));
        let origins = allowed_origins(&["https://app.example:443".into()]);
        assert!(origins.contains(&"http://localhost:*".to_string()));
        assert!(origins.contains(&"https://app.example:443".to_string()));
    }
}
