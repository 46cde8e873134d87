//! The proxy server: one accept loop per proxied worker, on the listening socket its
//! world handed over. It speaks just enough HTTP/1 for clients that honour
//! `HTTP_PROXY`: `CONNECT host:port` (TLS passes through untouched) and absolute-form
//! requests for plain `http://`. Each connection is judged by name, resolved here (the
//! world has no DNS), judged by address unless the operator pinned it, connected to
//! exactly the address judged, metered against the session's byte budget and recorded.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Egress;
use super::rules::{Verdict, judge_address, normalize_host, split_authority};

/// Longest request head (request line and headers) a client may send.
pub const MAX_HEAD: usize = 32 << 10;
/// How long a client has to send its whole head: a slow-drip client is cut then.
const HEAD_WINDOW: Duration = Duration::from_secs(30);
/// How long the proxy tries to reach an origin.
const CONNECT_WINDOW: Duration = Duration::from_secs(15);
/// Connections one worker may hold open through the proxy at once.
pub const MAX_CONNECTIONS: usize = 64;

/// What one worker's connections share: whose they are, and what was refused since the
/// session last asked (for the result's warnings).
#[derive(Debug, Default)]
pub struct Owner {
    session: Mutex<String>,
    refused: Mutex<Vec<String>>,
    open: AtomicU64,
}

impl Owner {
    pub fn session(&self) -> String {
        self.session.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn set_session(&self, session: &str) {
        if let Ok(mut s) = self.session.lock() {
            *s = session.to_string();
        }
    }

    /// The refusals since the last call, each one line naming the host.
    pub fn take_refused(&self) -> Vec<String> {
        self.refused
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    fn note_refused(&self, line: String) {
        if let Ok(mut r) = self.refused.lock()
            && r.len() < 32
        {
            r.push(line);
        }
    }
}

/// Why a connection ended without reaching an origin, as the client is told.
struct Refusal {
    status: u16,
    reason: String,
}

fn refusal(status: u16, reason: impl Into<String>) -> Refusal {
    Refusal {
        status,
        reason: reason.into(),
    }
}

/// What the client asked for.
struct Request {
    host: String,
    port: u16,
    /// `None` for CONNECT; else the head to send the origin (origin-form).
    forward_head: Option<Vec<u8>>,
    /// Bytes the client sent after its head (already part of the tunnel).
    rest: Vec<u8>,
}

/// What one connection did, for the audit record.
#[derive(Default)]
struct Account {
    host: String,
    port: u16,
    address: Option<SocketAddr>,
    up: u64,
    down: u64,
    /// The tunnel is open: a refusal now is a cut, with nothing more to say in HTTP.
    tunnel: bool,
}

/// Accepts connections until the worker's link is dropped.
pub async fn accept_loop(
    egress: Arc<Egress>,
    owner: Arc<Owner>,
    listener: tokio::net::TcpListener,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if owner.open.load(Ordering::Relaxed) >= MAX_CONNECTIONS as u64 {
            // Dropping the stream closes it: the worker holds too many already.
            owner.note_refused(format!(
                "a connection was refused: {MAX_CONNECTIONS} are already open through the proxy"
            ));
            continue;
        }
        owner.open.fetch_add(1, Ordering::Relaxed);
        let (egress, owner) = (egress.clone(), owner.clone());
        tokio::spawn(async move {
            serve(&egress, &owner, client).await;
            owner.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// One client connection, start to end, and its audit record. A refusal is recorded
/// and noted before the client hears of it, so a call's result and the log already name
/// it when the code sees the 403.
async fn serve(egress: &Egress, owner: &Owner, mut client: TcpStream) {
    let started = Instant::now();
    let mut account = Account::default();
    let outcome = relay(egress, owner, &mut client, &mut account).await;
    let refused = outcome.as_ref().err();
    let verb = match (refused, account.tunnel) {
        (None, _) => "allowed",
        (Some(_), true) => "cut",
        (Some(_), false) => "refused",
    };
    if let Some(r) = refused {
        let who = if account.host.is_empty() {
            "a request".to_string()
        } else {
            format!("{}:{}", account.host, account.port)
        };
        owner.note_refused(format!("egress {verb} {who}: {}", r.reason));
    }
    let mut event = crate::audit::AuditEvent::now(&owner.session(), "egress", verb);
    event.rule = refused.map(|r| r.reason.clone());
    event.detail = format!(
        "host={} port={} address={} up={} down={}",
        account.host,
        account.port,
        account
            .address
            .map(|a| a.ip().to_string())
            .unwrap_or_else(|| "-".to_string()),
        account.up,
        account.down
    );
    event.duration_ms = Some(started.elapsed().as_millis() as u64);
    egress.record(event);
    if let Some(r) = refused
        && !account.tunnel
    {
        let _ = client.write_all(refusal_reply(r).as_bytes()).await;
    }
    let _ = client.shutdown().await;
}

/// The HTTP answer to a refused request: the status and a one-line reason the code
/// can print.
fn refusal_reply(r: &Refusal) -> String {
    let body = format!("warden egress proxy: {}\n", r.reason);
    format!(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        r.status,
        status_text(r.status),
        body.len()
    )
}

fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        _ => "Connection Cut",
    }
}

async fn relay(
    egress: &Egress,
    owner: &Owner,
    client: &mut TcpStream,
    account: &mut Account,
) -> Result<(), Refusal> {
    let head = tokio::time::timeout(HEAD_WINDOW, read_head(client))
        .await
        .map_err(|_| refusal(408, "the request head did not arrive in time"))??;
    let request = parse_request(&head.0, head.1)?;
    account.host = request.host.clone();
    account.port = request.port;
    let session = owner.session();
    // A spent budget refuses before anything is resolved or connected.
    egress.charge(&session, 0)?;
    let address = judge(egress, &session, &request.host, request.port).await?;
    account.address = Some(address);
    // No connection leaves unaudited: its opening is on record before it is made.
    let mut opening = crate::audit::AuditEvent::now(&session, "egress", "connect");
    opening.detail = format!(
        "host={} port={} address={}",
        request.host,
        request.port,
        address.ip()
    );
    egress
        .audit
        .record(opening)
        .map_err(|e| refusal(502, format!("the connection cannot be audited: {e}")))?;
    let mut origin = tokio::time::timeout(CONNECT_WINDOW, TcpStream::connect(address))
        .await
        .map_err(|_| refusal(502, format!("{address} did not answer in time")))?
        .map_err(|e| refusal(502, format!("connecting to {address}: {e}")))?;
    match &request.forward_head {
        None => client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .map_err(|e| refusal(499, format!("the client went away: {e}")))?,
        Some(forward) => origin
            .write_all(forward)
            .await
            .map_err(|e| refusal(502, format!("writing to {address}: {e}")))?,
    }
    origin
        .write_all(&request.rest)
        .await
        .map_err(|e| refusal(502, format!("writing to {address}: {e}")))?;
    account.tunnel = true;
    account.up = request.rest.len() as u64;
    egress.charge(&session, account.up)?;
    pump(egress, &session, client, &mut origin, account).await
}

/// Reads until the blank line that ends the head; returns the head and what followed it.
async fn read_head(client: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), Refusal> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| refusal(400, format!("reading the request: {e}")))?;
        if n == 0 {
            return Err(refusal(
                400,
                "the client closed before a whole request head",
            ));
        }
        let scan_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_blank_line(&buf[scan_from..]) {
            let end = scan_from + end;
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(refusal(
                431,
                format!("the request head is over {} KiB", MAX_HEAD >> 10),
            ));
        }
    }
}

/// The index just past the first `\r\n\r\n`.
fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

/// Parses the head into what to reach and what to send. Pure.
fn parse_request(head: &[u8], rest: Vec<u8>) -> Result<Request, Refusal> {
    let text =
        std::str::from_utf8(head).map_err(|_| refusal(400, "the request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(refusal(
            400,
            "the request line is not `METHOD TARGET VERSION`",
        ));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(refusal(400, format!("{version:.16} is not HTTP/1")));
    }
    if method == "CONNECT" {
        let (host, port) = authority(target, 443)?;
        return Ok(Request {
            host,
            port,
            forward_head: None,
            rest,
        });
    }
    let Some(after) = target.strip_prefix("http://") else {
        return Err(refusal(
            405,
            "only CONNECT (for https) and absolute http:// requests pass the proxy",
        ));
    };
    let (authority_text, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let (host, port) = authority(authority_text, 80)?;
    let mut forward = format!("{method} {path} {version}\r\n");
    for header in lines.filter(|h| !h.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        let hop = [
            "connection",
            "proxy-connection",
            "proxy-authorization",
            "keep-alive",
        ];
        if !hop.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            forward.push_str(header);
            forward.push_str("\r\n");
        }
    }
    // One request per connection: a second request on it cannot reach another host.
    forward.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        host,
        port,
        forward_head: Some(forward.into_bytes()),
        rest,
    })
}

fn authority(text: &str, default_port: u16) -> Result<(String, u16), Refusal> {
    let (host, port) =
        split_authority(text, default_port).map_err(|e| refusal(400, e.to_string()))?;
    let host = normalize_host(&host).map_err(|e| refusal(400, e.to_string()))?;
    Ok((host, port))
}

/// The address to connect to: by name first, then the operator's pin, an IP literal
/// judged as an address, or every address DNS returned judged (one bad one refuses the
/// name: a name that also points inward is not one to trust).
async fn judge(
    egress: &Egress,
    session: &str,
    host: &str,
    port: u16,
) -> Result<SocketAddr, Refusal> {
    let granted: Vec<(String, u16)> = egress
        .host_grants(session)
        .into_iter()
        .map(|g| (g.host, g.port))
        .collect();
    if let Verdict::Refused(why) = egress.rules.judge_name_granted(host, port, &granted) {
        return Err(refusal(403, why));
    }
    if let Some(ip) = egress.rules.pinned(host) {
        return Ok(SocketAddr::new(ip, port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        judge_address(ip).map_err(|why| refusal(403, why))?;
        return Ok(SocketAddr::new(ip, port));
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| refusal(502, format!("{host} does not resolve: {e}")))?
        .collect();
    for address in &found {
        judge_address(address.ip())
            .map_err(|why| refusal(403, format!("{host} resolves to a refused address: {why}")))?;
    }
    found
        .first()
        .copied()
        .ok_or_else(|| refusal(502, format!("{host} has no address")))
}

/// Copies both ways until both sides are done, charging every chunk to the session
/// first: the chunk that would pass its budget is not delivered and the connection is
/// cut.
async fn pump(
    egress: &Egress,
    session: &str,
    client: &mut TcpStream,
    origin: &mut TcpStream,
    account: &mut Account,
) -> Result<(), Refusal> {
    let (mut client_read, mut client_write) = client.split();
    let (mut origin_read, mut origin_write) = origin.split();
    let up = AtomicU64::new(account.up);
    let down = AtomicU64::new(0);
    let upstream = copy_charged(egress, session, &mut client_read, &mut origin_write, &up);
    let downstream = copy_charged(egress, session, &mut origin_read, &mut client_write, &down);
    let result = tokio::try_join!(upstream, downstream);
    account.up = up.load(Ordering::Relaxed);
    account.down = down.load(Ordering::Relaxed);
    result.map(|_| ())
}

async fn copy_charged<R, W>(
    egress: &Egress,
    session: &str,
    from: &mut R,
    to: &mut W,
    counter: &AtomicU64,
) -> Result<(), Refusal>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return Ok(());
            }
            Ok(n) => n,
        };
        egress.charge(session, n as u64)?;
        if to.write_all(&buf[..n]).await.is_err() {
            return Ok(());
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Egress {
    /// Adds `bytes` to the session's use, or refuses (status 499: the cut) when that
    /// would pass its limit (`SANDBOX_EGRESS_LIMIT`, or the installer's).
    fn charge(&self, session: &str, bytes: u64) -> Result<(), Refusal> {
        let Ok(mut used) = self.used.lock() else {
            return Err(refusal(499, "the byte counter is unavailable"));
        };
        let entry = used.entry(session.to_string()).or_insert(0);
        if *entry + bytes > self.limit_bytes || *entry >= self.limit_bytes {
            return Err(refusal(
                499,
                format!(
                    "{}: this session may move {} bytes through the proxy and has used {}",
                    self.limit_name, self.limit_bytes, *entry
                ),
            ));
        }
        *entry += bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_form_are_parsed_and_hop_headers_dropped() {
        let r = parse_request(
            b"CONNECT Example.com:8443 HTTP/1.1\r\nHost: x\r\n\r\n",
            vec![1],
        )
        .ok()
        .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("example.com", 8443));
        assert!(r.forward_head.is_none());
        assert_eq!(r.rest, vec![1]);
        let head = b"GET http://origin.test/data.csv?x=1 HTTP/1.1\r\nHost: origin.test\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let r = parse_request(head, vec![]).ok().unwrap();
        assert_eq!((r.host.as_str(), r.port), ("origin.test", 80));
        let forward = String::from_utf8(r.forward_head.unwrap()).unwrap();
        assert_eq!(
            forward,
            "GET /data.csv?x=1 HTTP/1.1\r\nHost: origin.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn other_forms_are_refused_with_a_reason() {
        for (head, status) in [
            (&b"GET /local HTTP/1.1\r\n\r\n"[..], 405),
            (b"GET https://x.test/ HTTP/1.1\r\n\r\n", 405),
            (b"CONNECT x.test:0 HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT x.test:99999 HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT user@x.test:443 HTTP/1.1\r\n\r\n", 400),
            (b"GET http://x.test/ HTTP/2\r\n\r\n", 400),
            (b"GET  http://x.test/ HTTP/1.1\r\n\r\n", 400),
            (b"\xff\xfe HTTP/1.1\r\n\r\n", 400),
        ] {
            match parse_request(head, vec![]) {
                Err(r) => assert_eq!(r.status, status, "{}", String::from_utf8_lossy(head)),
                Ok(_) => panic!("accepted {}", String::from_utf8_lossy(head)),
            }
        }
    }

    #[test]
    fn the_blank_line_is_found_across_reads() {
        assert_eq!(find_blank_line(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(find_blank_line(b"GET / HTTP/1.1\r\n"), None);
    }
}
