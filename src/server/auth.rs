//! Who may talk to `warden serve --http`: every request is authenticated, on every
//! transport, before MCP sees it; what authenticated it travels with the request
//! ([`HttpClient`]) so that consent can insist on it.
//!
//! - **TCP** (loopback included): the bearer token, compared in constant time. Unless
//!   `SANDBOX_HTTP_TOKEN` sets one, it is the token in the data directory's
//!   [`TOKEN_FILE`], generated at the first start, printed once, saved mode 0600 (the
//!   data directory is never inside a sandbox's world, so code in a session cannot read
//!   it, whatever the network mode).
//! - **A UNIX socket** (`--http unix:PATH`): bound mode 0600 from its first instant, in a
//!   directory no one else can write; every connection's peer uid (`SO_PEERCRED`) must be
//!   the server's own, else it is closed before a byte is read. No token is needed there
//!   unless one is configured.
//! - Anything else gets `401`, and refusals are recorded in the audit log, at most one
//!   record per kind of refusal per [`RECORD_EVERY`] carrying the count of the others,
//!   so a flood of bad requests cannot fill the disk.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use sha2::Digest;

use crate::owner::Owner;
use crate::session::SessionManager;

/// The generated token's file in the data directory.
pub const TOKEN_FILE: &str = "http-token";
/// At most one audit record per kind of refusal this often.
pub const RECORD_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read or create the HTTP token file {path}: {source}")]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Socket { path: PathBuf, reason: String },
}

/// What authenticated a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The server's bearer token (by its SHA-256).
    Token([u8; 32]),
    /// A UNIX-socket peer of the server's own uid.
    PeerUid(u32),
}

impl Credential {
    /// A name for it that holds no secret.
    fn id(&self) -> String {
        match self {
            Credential::Token(digest) => format!("token:{}", crate::audit::sha256_hex(digest)),
            Credential::PeerUid(uid) => format!("uid:{uid}"),
        }
    }

    /// How the person reached the server, for the grant's `approved_by`.
    pub fn route(&self) -> String {
        match self {
            Credential::Token(_) => "over HTTP with the bearer token".to_string(),
            Credential::PeerUid(uid) => format!("over the UNIX socket as uid {uid}"),
        }
    }
}

/// The auth layer's mark on a request it let in.
#[derive(Debug, Clone)]
pub struct HttpClient {
    pub credential: Credential,
    /// The `SANDBOX_HTTP_CLIENTS` entry whose token it sent, by name.
    pub listed: Option<String>,
}

impl HttpClient {
    /// The scope of its requests without an MCP session: one per credential.
    pub fn stateless_owner(&self) -> Owner {
        Owner::client_from_secret("stateless", &self.credential.id())
    }

    /// The scope of an MCP session this client opens: its credential's and a random id
    /// of the session's own, so no header a request carries can name it.
    pub fn session_owner(&self) -> Owner {
        let nonce: String = crate::hex(&crate::random_bytes::<16>());
        Owner::client_from_secret("session", &format!("{}\0{nonce}", self.credential.id()))
    }
}

/// The other end of a connection, as the listener saw it.
#[derive(Debug, Clone)]
pub enum Peer {
    Tcp(SocketAddr),
    /// Credentials the kernel took at `connect` (`SO_PEERCRED`).
    Unix {
        uid: u32,
        pid: Option<i32>,
    },
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix {
                uid,
                pid: Some(pid),
            } => write!(f, "uid {uid} (pid {pid})"),
            Peer::Unix { uid, pid: None } => write!(f, "uid {uid}"),
        }
    }
}

impl Connected<IncomingStream<'_, tokio::net::TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, tokio::net::TcpListener>) -> Peer {
        Peer::Tcp(*stream.remote_addr())
    }
}

#[cfg(unix)]
impl Connected<IncomingStream<'_, PeerListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, PeerListener>) -> Peer {
        stream.remote_addr().clone()
    }
}

/// Why a request or connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NoToken,
    WrongToken,
    /// A UNIX peer of another uid.
    PeerUid(u32),
    /// The kernel could not say who the peer is, or the request carries no peer at all.
    UnknownPeer,
}

impl Refusal {
    /// The audit record's `rule`.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::NoToken => "no_token",
            Refusal::WrongToken => "wrong_token",
            Refusal::PeerUid(_) => "peer_uid",
            Refusal::UnknownPeer => "unknown_peer",
        }
    }

    fn describe(&self, peer: Option<&Peer>) -> String {
        let from = peer.map_or_else(|| "an unknown peer".to_string(), |p| p.to_string());
        match self {
            Refusal::NoToken => format!("401: no bearer token, from {from}"),
            Refusal::WrongToken => format!("401: a wrong bearer token, from {from}"),
            Refusal::PeerUid(_) => {
                format!("connection closed: a UNIX socket peer of another uid: {from}")
            }
            Refusal::UnknownPeer => format!("refused: who the peer is is unknown ({from})"),
        }
    }
}

/// The token rule, for TCP: the configured one, else the token file's. Pure.
pub fn valid_token(text: &str) -> bool {
    crate::config::valid_http_token(text)
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

/// What a request must show.
#[derive(Debug, Clone)]
pub struct Rule {
    /// SHA-256 of the token; required whenever set.
    token_digest: Option<[u8; 32]>,
    /// The listed clients' token digests and names (`SANDBOX_HTTP_CLIENTS`): each is let
    /// in as well.
    listed: Vec<([u8; 32], String)>,
    /// The uid a UNIX peer must have (the server's own).
    own_uid: Option<u32>,
}

impl Rule {
    pub fn new(token: Option<&str>, own_uid: Option<u32>) -> Rule {
        Rule {
            token_digest: token.map(digest),
            listed: Vec::new(),
            own_uid,
        }
    }

    /// Lets in the listed clients' tokens too.
    pub fn with_listed(mut self, listed: &[crate::clients::ListedClient]) -> Rule {
        self.listed = listed.iter().map(|c| (c.digest, c.name.clone())).collect();
        self
    }

    /// The listed client a credential is, by name.
    pub fn listed_name(&self, credential: &Credential) -> Option<String> {
        let Credential::Token(d) = credential else {
            return None;
        };
        self.listed
            .iter()
            .find(|(listed, _)| listed == d)
            .map(|(_, name)| name.clone())
    }

    /// The listed digest `token` matches, comparing with every one (constant time in
    /// where it matches).
    fn listed_match(&self, token: &str) -> Option<[u8; 32]> {
        let given = digest(token);
        self.listed.iter().fold(None, |found, (listed, _)| {
            if same_digest(listed, &given) {
                Some(*listed)
            } else {
                found
            }
        })
    }

    /// Whether `peer`, sending `bearer`, is let in, and as what. A TCP peer needs the
    /// token (there is no TCP listener without one); a UNIX peer needs the server's uid,
    /// and the token too when one is set. Pure.
    pub fn check(&self, peer: Option<&Peer>, bearer: Option<&str>) -> Result<Credential, Refusal> {
        let peer = peer.ok_or(Refusal::UnknownPeer)?;
        if let Peer::Unix { uid, .. } = peer
            && self.own_uid != Some(*uid)
        {
            return Err(Refusal::PeerUid(*uid));
        }
        if let Some(listed) = bearer.and_then(|token| self.listed_match(token)) {
            return Ok(Credential::Token(listed));
        }
        match (&self.token_digest, bearer, peer) {
            (Some(expected), Some(token), _) if same_digest(expected, &digest(token)) => {
                Ok(Credential::Token(*expected))
            }
            (Some(_), Some(_), _) => Err(Refusal::WrongToken),
            (Some(_), None, _) | (None, _, Peer::Tcp(_)) => Err(Refusal::NoToken),
            (None, _, Peer::Unix { uid, .. }) => Ok(Credential::PeerUid(*uid)),
        }
    }
}

/// When a kind of refusal is next recorded: at most once per `every`, with the count of
/// those not recorded since. Pure.
#[derive(Debug)]
pub struct RateGate {
    every: Duration,
    last: HashMap<&'static str, (Instant, u64)>,
}

impl RateGate {
    pub fn new(every: Duration) -> RateGate {
        RateGate {
            every,
            last: HashMap::new(),
        }
    }

    /// `Some(n)`: record this one, saying `n` others went unrecorded since the last
    /// record of its kind; `None`: count it and record nothing.
    pub fn admit(&mut self, kind: &'static str, now: Instant) -> Option<u64> {
        match self.last.get_mut(kind) {
            Some((at, skipped)) if now.saturating_duration_since(*at) < self.every => {
                *skipped += 1;
                None
            }
            Some((at, skipped)) => {
                let n = *skipped;
                (*at, *skipped) = (now, 0);
                Some(n)
            }
            None => {
                self.last.insert(kind, (now, 0));
                Some(0)
            }
        }
    }
}

/// Refusals, logged and audited through the [`RateGate`].
pub(crate) struct Refusals {
    sessions: Arc<SessionManager>,
    gate: Mutex<RateGate>,
}

impl Refusals {
    pub(crate) fn new(sessions: Arc<SessionManager>) -> Refusals {
        Refusals {
            sessions,
            gate: Mutex::new(RateGate::new(RECORD_EVERY)),
        }
    }

    fn note(&self, refusal: &Refusal, peer: Option<&Peer>) {
        let admitted = match self.gate.lock() {
            Ok(mut gate) => gate.admit(refusal.kind(), Instant::now()),
            Err(_) => Some(0),
        };
        let Some(skipped) = admitted else { return };
        let mut detail = refusal.describe(peer);
        if skipped > 0 {
            detail.push_str(&format!(
                "; {skipped} more of this kind since the last record (one record per {} s)",
                RECORD_EVERY.as_secs()
            ));
        }
        tracing::warn!(rule = refusal.kind(), "HTTP client refused: {detail}");
        let event = crate::audit::AuditEvent {
            rule: Some(refusal.kind().to_string()),
            detail,
            ..crate::audit::AuditEvent::now("", "auth", "refused")
        };
        if let Err(e) = self.sessions.audit().record(event) {
            tracing::error!(error = %e, "the refusal could not be recorded in the audit log");
        }
    }
}

/// The auth layer's state.
pub(crate) struct Auth {
    pub(crate) rule: Rule,
    pub(crate) refusals: Arc<Refusals>,
}

/// The middleware in front of every route: lets in what [`Rule::check`] accepts, marked
/// with its [`HttpClient`]; anything else gets `401`.
pub(crate) async fn authenticate(
    State(auth): State<Arc<Auth>>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|c| c.0.clone());
    let given = bearer(req.headers().get(header::AUTHORIZATION));
    match auth.rule.check(peer.as_ref(), given) {
        Ok(credential) => {
            let listed = auth.rule.listed_name(&credential);
            req.extensions_mut()
                .insert(HttpClient { credential, listed });
            next.run(req).await
        }
        Err(refusal) => {
            auth.refusals.note(&refusal, peer.as_ref());
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "Unauthorized: send the server's token as `Authorization: Bearer <token>` \
                 (SANDBOX_HTTP_TOKEN, else the http-token file in warden's data directory)",
            )
                .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"warden\""),
            );
            response
        }
    }
}

/// The token a TCP server requires, and where it came from.
#[derive(Debug)]
pub struct StoredToken {
    pub token: String,
    pub path: PathBuf,
    /// Made now (print it once); otherwise read from an earlier start.
    pub created: bool,
    /// Why a file that was there could not be used and was replaced.
    pub replaced: Option<String>,
}

fn generate_token() -> String {
    crate::hex(&crate::random_bytes::<32>())
}

/// The token of `data_dir`'s [`TOKEN_FILE`], created when there is none. A file that is
/// not a private regular file of this uid holding a token (widened, replaced by a link,
/// someone else's) may have leaked: it is replaced by a new one.
pub fn load_or_create_token(data_dir: &Path) -> Result<StoredToken, AuthError> {
    let path = data_dir.join(TOKEN_FILE);
    let fail = |source| AuthError::TokenFile {
        path: path.clone(),
        source,
    };
    let mut replaced = None;
    for _ in 0..3 {
        match read_token(&path) {
            Ok(Ok(token)) => {
                return Ok(StoredToken {
                    token,
                    path,
                    created: false,
                    replaced,
                });
            }
            Ok(Err(why)) => {
                tracing::warn!(path = %path.display(), "{why}: replacing it with a new token");
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(fail(e)),
                }
                replaced = Some(why);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        let token = generate_token();
        if crate::os::create_private_file(&path, token.as_bytes()).map_err(fail)? {
            return Ok(StoredToken {
                token,
                path,
                created: true,
                replaced,
            });
        }
    }
    Err(fail(std::io::Error::other(
        "it kept changing while being read; is another warden replacing it?",
    )))
}

/// `Ok(Ok(token))`, `Ok(Err(why it cannot be used))`, or the error opening it.
fn read_token(path: &Path) -> std::io::Result<Result<String, String>> {
    use std::io::Read;
    let file = crate::os::private_file(std::fs::OpenOptions::new().read(true)).open(path);
    let file = match file {
        Ok(f) => f,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Ok(Err("it is a symbolic link".to_string()));
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Err("it is not a regular file".to_string()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Ok(Err(format!("it belongs to uid {}, not {me}", meta.uid())));
        }
    }
    if let Some(mode) = crate::os::permission_bits(&meta).filter(|m| m & 0o077 != 0) {
        return Ok(Err(format!("its mode {mode:o} lets others read it")));
    }
    let mut text = String::new();
    if file.take(512).read_to_string(&mut text).is_err() || !valid_token(text.trim()) {
        return Ok(Err("it does not hold a token".to_string()));
    }
    Ok(Ok(text.trim().to_string()))
}

/// A UNIX-socket listener that lets through only peers of one uid; any other connection
/// is closed at once, before a byte is read, and recorded.
#[cfg(unix)]
pub struct PeerListener {
    inner: tokio::net::UnixListener,
    uid: u32,
    refusals: Arc<Refusals>,
}

#[cfg(unix)]
impl PeerListener {
    pub(crate) fn new(
        inner: tokio::net::UnixListener,
        uid: u32,
        refusals: Arc<Refusals>,
    ) -> PeerListener {
        PeerListener {
            inner,
            uid,
            refusals,
        }
    }
}

#[cfg(unix)]
impl axum::serve::Listener for PeerListener {
    type Io = tokio::net::UnixStream;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let stream = match self.inner.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            };
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == self.uid => {
                    let peer = Peer::Unix {
                        uid: cred.uid(),
                        pid: cred.pid(),
                    };
                    return (stream, peer);
                }
                Ok(cred) => {
                    let peer = Peer::Unix {
                        uid: cred.uid(),
                        pid: cred.pid(),
                    };
                    self.refusals
                        .note(&Refusal::PeerUid(cred.uid()), Some(&peer));
                }
                Err(_) => self.refusals.note(&Refusal::UnknownPeer, None),
            }
            // Dropped: the connection closes unread.
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer::Unix {
            uid: self.uid,
            pid: None,
        })
    }
}

/// What axum does with a failed `accept`: a connection that died in the queue is
/// skipped; anything else (out of descriptors) waits a second rather than spin.
#[cfg(unix)]
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection on the UNIX socket failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Why `dir` cannot hold the server's socket: it must be a directory of this uid or
/// root that no one else can write (or they could replace the socket). Pure.
pub fn socket_dir_problem(owner: u32, mode: u32, me: u32) -> Option<String> {
    if owner != me && owner != 0 {
        return Some(format!("belongs to uid {owner}, not to {me} or root"));
    }
    if mode & 0o022 != 0 {
        return Some(format!("is writable by others (mode {:o})", mode & 0o7777));
    }
    None
}

/// Binds a UNIX socket at `path` that only this uid can use: mode 0600 from its first
/// instant (bound inside a private directory, then renamed into place), in a directory
/// no one else can write. A stale socket (no one listening) is replaced; anything else
/// at `path` is left alone and refused.
#[cfg(unix)]
pub fn bind_private_socket(path: &Path) -> Result<std::os::unix::net::UnixListener, AuthError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let fail = |reason: String| AuthError::Socket {
        path: path.to_path_buf(),
        reason,
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = std::fs::metadata(&parent)
        .map_err(|e| fail(format!("its directory {}: {e}", parent.display())))?;
    let me = rustix::process::geteuid().as_raw();
    if !dir.is_dir() {
        return Err(fail(format!("{} is not a directory", parent.display())));
    }
    if let Some(problem) = socket_dir_problem(dir.uid(), dir.mode(), me) {
        return Err(fail(format!(
            "its directory {} {problem}; use a directory only you can write, such as \
             $XDG_RUNTIME_DIR",
            parent.display()
        )));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(fail("another server is listening on it".into()));
            }
            std::fs::remove_file(path).map_err(|e| fail(format!("a stale socket: {e}")))?;
        }
        Ok(_) => {
            return Err(fail(
                "it exists and is not a socket; not replacing it".into(),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e.to_string())),
    }
    let suffix: String = crate::hex(&crate::random_bytes::<6>());
    let private = parent.join(format!(".warden-socket-{suffix}"));
    crate::os::create_dir(&private, 0o700, false).map_err(|e| fail(e.to_string()))?;
    let staged = private.join("s");
    let bound = std::os::unix::net::UnixListener::bind(&staged)
        .and_then(|l| crate::os::set_mode(&staged, 0o600).map(|()| l))
        .and_then(|l| std::fs::rename(&staged, path).map(|()| l));
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&private);
    bound.map_err(|e| fail(format!("cannot bind: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp() -> Peer {
        Peer::Tcp("127.0.0.1:5000".parse().unwrap())
    }

    fn unix(uid: u32) -> Peer {
        Peer::Unix { uid, pid: Some(7) }
    }

    #[test]
    fn tcp_needs_the_token_and_nothing_else_will_do() {
        let rule = Rule::new(Some("the-token-0123456789"), Some(1000));
        let ok = rule.check(Some(&tcp()), Some("the-token-0123456789"));
        assert!(matches!(ok, Ok(Credential::Token(_))));
        assert_eq!(rule.check(Some(&tcp()), None), Err(Refusal::NoToken));
        assert_eq!(
            rule.check(Some(&tcp()), Some("the-token-0123456780")),
            Err(Refusal::WrongToken)
        );
        // A TCP listener without a token lets no one in.
        let none = Rule::new(None, Some(1000));
        assert_eq!(none.check(Some(&tcp()), None), Err(Refusal::NoToken));
        assert_eq!(
            none.check(Some(&tcp()), Some("anything-at-all-here")),
            Err(Refusal::NoToken)
        );
        assert_eq!(
            rule.check(None, Some("the-token-0123456789")),
            Err(Refusal::UnknownPeer)
        );
    }

    #[test]
    fn a_listed_clients_token_is_let_in_as_that_client() {
        let listed = crate::clients::ListedClient {
            name: "ci".into(),
            digest: digest("the-ci-token-0123456789"),
            policy: None,
        };
        let rule = Rule::new(Some("the-token-0123456789"), Some(1000)).with_listed(&[listed]);
        let ci = rule
            .check(Some(&tcp()), Some("the-ci-token-0123456789"))
            .unwrap();
        assert_eq!(rule.listed_name(&ci).as_deref(), Some("ci"));
        let own = rule
            .check(Some(&tcp()), Some("the-token-0123456789"))
            .unwrap();
        assert_eq!(rule.listed_name(&own), None);
        assert_ne!(ci, own);
        assert_eq!(
            rule.check(Some(&tcp()), Some("the-ci-token-012345678")),
            Err(Refusal::WrongToken)
        );
        // A listed token does not let in a UNIX peer of another uid.
        assert_eq!(
            rule.check(Some(&unix(65534)), Some("the-ci-token-0123456789")),
            Err(Refusal::PeerUid(65534))
        );
    }

    #[test]
    fn a_unix_peer_needs_the_servers_uid_and_a_configured_token() {
        let rule = Rule::new(None, Some(1000));
        assert_eq!(
            rule.check(Some(&unix(1000)), None),
            Ok(Credential::PeerUid(1000))
        );
        assert_eq!(
            rule.check(Some(&unix(65534)), None),
            Err(Refusal::PeerUid(65534))
        );
        assert_eq!(rule.check(Some(&unix(0)), None), Err(Refusal::PeerUid(0)));
        let with_token = Rule::new(Some("the-token-0123456789"), Some(1000));
        assert_eq!(
            with_token.check(Some(&unix(1000)), None),
            Err(Refusal::NoToken)
        );
        assert_eq!(
            with_token.check(Some(&unix(65534)), Some("the-token-0123456789")),
            Err(Refusal::PeerUid(65534))
        );
        assert!(matches!(
            with_token.check(Some(&unix(1000)), Some("the-token-0123456789")),
            Ok(Credential::Token(_))
        ));
    }

    #[test]
    fn scopes_differ_by_credential_and_every_session_has_its_own() {
        let a = HttpClient {
            credential: Credential::PeerUid(1000),
            listed: None,
        };
        let b = HttpClient {
            credential: Credential::Token(digest("t")),
            listed: None,
        };
        assert_ne!(a.stateless_owner(), b.stateless_owner());
        assert_eq!(a.stateless_owner(), a.clone().stateless_owner());
        assert_ne!(a.session_owner(), a.session_owner());
        assert_ne!(a.session_owner(), a.stateless_owner());
    }

    #[test]
    fn refusals_are_recorded_at_most_once_per_period_with_the_count() {
        let mut gate = RateGate::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(gate.admit("no_token", t0), Some(0));
        for i in 1..=5 {
            assert_eq!(gate.admit("no_token", t0 + Duration::from_secs(i)), None);
        }
        // Another kind has its own period.
        assert_eq!(gate.admit("peer_uid", t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(
            gate.admit("no_token", t0 + Duration::from_secs(60)),
            Some(5)
        );
        assert_eq!(gate.admit("no_token", t0 + Duration::from_secs(61)), None);
        assert_eq!(
            gate.admit("no_token", t0 + Duration::from_secs(200)),
            Some(1)
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
    fn the_socket_directory_must_be_ours_or_roots_and_closed_to_writers() {
        assert_eq!(socket_dir_problem(1000, 0o40700, 1000), None);
        assert_eq!(socket_dir_problem(0, 0o40755, 1000), None);
        assert!(socket_dir_problem(1001, 0o40700, 1000).is_some());
        assert!(socket_dir_problem(1000, 0o40770, 1000).is_some());
        assert!(socket_dir_problem(0, 0o41777, 1000).is_some());
    }

    #[cfg(unix)]
    #[test]
    fn the_token_file_is_made_once_private_and_replaced_when_widened() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_token(dir.path()).unwrap();
        assert!(first.created);
        assert_eq!(first.token.len(), 64);
        let meta = std::fs::metadata(&first.path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let again = load_or_create_token(dir.path()).unwrap();
        assert!(!again.created);
        assert_eq!(again.token, first.token);
        // Widened: it may have leaked, so a new one replaces it.
        std::fs::set_permissions(&first.path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let fresh = load_or_create_token(dir.path()).unwrap();
        assert!(fresh.created);
        assert_ne!(fresh.token, first.token);
        assert!(fresh.replaced.unwrap().contains("644"));
        // A link in its place is never followed.
        std::fs::remove_file(&fresh.path).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "x".repeat(64)).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &fresh.path).unwrap();
        let relinked = load_or_create_token(dir.path()).unwrap();
        assert!(relinked.created);
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "x".repeat(64));
        // Nothing but the token file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
