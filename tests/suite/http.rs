//! MCP over streamable HTTP against the real binary (`warden serve --http`), with a
//! plain HTTP/1.1 client written here so every header (token, Origin, Host, session id,
//! protocol version) is under the test's control. Only loopback is ever contacted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

/// A `warden serve --http` process and what it printed at start.
pub struct HttpServer {
    child: Child,
    /// `127.0.0.1:PORT`, where the test connects, or `unix:PATH`.
    pub addr: String,
    /// The token the server printed, when it generated one.
    pub printed_token: Option<String>,
    /// The token clients send: the printed one, or the configured one.
    pub token: Option<String>,
    pub data_dir: tempfile::TempDir,
    stderr: Arc<Mutex<String>>,
}

impl HttpServer {
    /// The server process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts on `bind` (port 0: any free port; or `unix:PATH`) with extra settings.
    pub fn start(bind: &str, env: &[(&str, &str)]) -> HttpServer {
        HttpServer::start_as(As::Root, bind, env)
    }

    /// The same, the server running as `who`.
    pub fn start_as(who: As, bind: &str, env: &[(&str, &str)]) -> HttpServer {
        let data_dir = data_dir_for(who);
        let mut cmd =
            server_command_as(who, Net::Host, env, &["--http", bind], data_dir.path()).into_std();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn warden serve --http");
        let stderr = child.stderr.take().unwrap();
        let seen = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[warden http] {line}");
                sink.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
        let mut addr = None;
        let mut printed_token = None;
        let deadline = Instant::now() + Duration::from_secs(20 * slowdown());
        while Instant::now() < deadline {
            let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
                continue;
            };
            if let Some(rest) = line.split("on the UNIX socket ").nth(1) {
                let path = rest.split(" (").next().unwrap();
                addr = Some(format!("unix:{path}"));
                break;
            }
            if let Some(rest) = line.split("http://").nth(1) {
                let bound = rest.trim_end_matches("/mcp").to_string();
                let port = bound.rsplit(':').next().unwrap().to_string();
                addr = Some(format!("127.0.0.1:{port}"));
            }
            if line.contains("bearer token (generated") {
                printed_token = line.rsplit(' ').next().map(str::to_string);
            }
            if line.contains("token") && addr.is_some() {
                break;
            }
        }
        let addr = addr.unwrap_or_else(|| panic!("no address printed: {}", seen.lock().unwrap()));
        let configured = env
            .iter()
            .find(|(k, _)| *k == "SANDBOX_HTTP_TOKEN")
            .map(|(_, v)| v.to_string());
        HttpServer {
            child,
            addr,
            token: printed_token.clone().or(configured),
            printed_token,
            data_dir,
            stderr: seen,
        }
    }

    /// A client with the server's token, if it has one.
    pub fn client(&self) -> McpHttp {
        let client = McpHttp::new(&self.addr);
        match &self.token {
            Some(t) => client.with_token(t),
            None => client,
        }
    }

    /// A client without any token.
    pub fn anonymous_client(&self) -> McpHttp {
        McpHttp::new(&self.addr)
    }

    /// SIGTERM, then the process must exit on its own, having killed its workers and
    /// removed its workspaces (and its socket). Returns the data directory.
    pub fn stop(mut self) -> tempfile::TempDir {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15 * slowdown());
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "exit {status}: {}",
                    self.stderr.lock().unwrap()
                );
                break;
            }
            assert!(Instant::now() < deadline, "warden did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
        let sessions = self.data_dir.path().join("sessions");
        let empty = std::fs::read_dir(&sessions)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true);
        assert!(empty, "workspaces left in {}", sessions.display());
        if let Some(path) = self.addr.strip_prefix("unix:") {
            assert!(!Path::new(path).exists(), "the socket {path} was left");
        }
        let dir = data_dir();
        std::mem::replace(&mut self.data_dir, dir)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP response: status, headers, and the JSON-RPC messages of its body (a JSON
/// body, or the `data:` events of an SSE stream) with the time each arrived.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub messages: Vec<(Instant, Value)>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The response to request `id`.
    pub fn response(&self, id: u64) -> &Value {
        self.messages
            .iter()
            .map(|(_, m)| m)
            .find(|m| m["id"] == id && (m.get("result").is_some() || m.get("error").is_some()))
            .unwrap_or_else(|| panic!("no response {id} in {self:?}"))
    }
}

/// A byte stream to the server: TCP, or a UNIX socket.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A fresh connection to `addr` (`IP:PORT` or `unix:PATH`), reads bounded at 60 s.
pub fn connect(addr: &str) -> std::io::Result<Box<dyn Stream>> {
    if let Some(path) = addr.strip_prefix("unix:") {
        let s = std::os::unix::net::UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        return Ok(Box::new(s));
    }
    let s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok(Box::new(s))
}

/// The `Host` header for `addr`.
fn host_of(addr: &str) -> &str {
    if addr.starts_with("unix:") {
        "localhost"
    } else {
        addr
    }
}

/// POSTs `body` to `/mcp` over a fresh connection and reads the whole reply; `on_event`
/// sees each SSE message as it arrives (e.g. to cancel the call midway).
pub fn post(
    addr: &str,
    headers: &[(&str, String)],
    body: &Value,
    mut on_event: impl FnMut(&Value),
) -> Reply {
    let mut stream = connect(addr).expect("connect");
    let payload = serde_json::to_vec(body).unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        payload.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {}\r\n", host_of(addr)));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(&payload).unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let sse = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v.contains("event-stream"));
    let mut body = String::new();
    let mut messages = Vec::new();
    let mut pending = String::new();
    let mut feed = |bytes: &[u8], body: &mut String, messages: &mut Vec<(Instant, Value)>| {
        let text = String::from_utf8_lossy(bytes);
        body.push_str(&text);
        if !sse {
            return;
        }
        pending.push_str(&text);
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Some(data) = line.trim_end().strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<Value>(data.trim())
            {
                on_event(&v);
                messages.push((Instant::now(), v));
            }
        }
    };
    if chunked {
        loop {
            let mut size_line = String::new();
            if reader.read_line(&mut size_line).unwrap_or(0) == 0 {
                break;
            }
            let size = usize::from_str_radix(size_line.trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            let mut chunk = vec![0u8; size + 2];
            if reader.read_exact(&mut chunk).is_err() {
                // The server went away mid-stream (shutdown): what arrived is the reply.
                break;
            }
            feed(&chunk[..size], &mut body, &mut messages);
        }
    } else {
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
        feed(&rest, &mut body, &mut messages);
    }
    if !sse && let Ok(v) = serde_json::from_str::<Value>(&body) {
        messages.push((Instant::now(), v));
    }
    Reply {
        status,
        headers,
        body,
        messages,
    }
}

/// A minimal MCP client over HTTP: a 2025-11-25 session, or stateless 2026-07-28.
pub struct McpHttp {
    pub addr: String,
    pub session: Option<String>,
    pub token: Option<String>,
    pub stateless: bool,
    /// An `Mcp-Session-Id` a stateless client sends anyway (someone else's).
    pub named_session: Option<String>,
    next_id: u64,
}

impl McpHttp {
    pub fn new(addr: &str) -> McpHttp {
        McpHttp {
            addr: addr.to_string(),
            session: None,
            token: None,
            stateless: false,
            named_session: None,
            next_id: 1,
        }
    }

    pub fn with_token(mut self, token: &str) -> McpHttp {
        self.token = Some(token.to_string());
        self
    }

    pub fn headers(&self, method: &str, name: Option<&str>) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let Some(t) = &self.token {
            h.push(("Authorization", format!("Bearer {t}")));
        }
        if let Some(s) = &self.session {
            h.push(("Mcp-Session-Id", s.clone()));
            h.push(("MCP-Protocol-Version", "2025-11-25".to_string()));
        }
        if let Some(s) = &self.named_session {
            h.push(("Mcp-Session-Id", s.clone()));
        }
        if self.stateless {
            h.push(("MCP-Protocol-Version", "2026-07-28".to_string()));
            h.push(("Mcp-Method", method.to_string()));
            if let Some(n) = name {
                h.push(("Mcp-Name", n.to_string()));
            }
        }
        h
    }

    /// Opens a 2025-11-25 session (`capabilities` as the client declares them).
    pub fn initialize(&mut self, capabilities: Value) -> Reply {
        let id = self.take_id();
        let reply = post(
            &self.addr,
            &self.headers("initialize", None),
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": {"name": "warden-http-test", "version": "1"}
            }}),
            |_| {},
        );
        assert_eq!(reply.status, 200, "{reply:?}");
        self.session = reply.header("mcp-session-id").map(str::to_string);
        assert!(self.session.is_some(), "no Mcp-Session-Id: {reply:?}");
        let note = post(
            &self.addr,
            &self.headers("notifications/initialized", None),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            |_| {},
        );
        assert!(note.status < 300, "{note:?}");
        reply
    }

    /// Uses the stateless 2026-07-28 protocol from now on (no session, per-request
    /// metadata).
    pub fn stateless(mut self) -> McpHttp {
        self.stateless = true;
        self
    }

    pub fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends a request and returns the reply and its id.
    pub fn request_with(
        &mut self,
        method: &str,
        mut params: Value,
        on_event: impl FnMut(&Value),
    ) -> (u64, Reply) {
        let id = self.take_id();
        if self.stateless {
            let meta = params
                .as_object_mut()
                .unwrap()
                .entry("_meta")
                .or_insert(json!({}));
            meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
            meta.as_object_mut()
                .unwrap()
                .entry("io.modelcontextprotocol/clientCapabilities")
                .or_insert(json!({}));
        }
        let name = params["name"]
            .as_str()
            .or(params["uri"].as_str())
            .or(params["taskId"].as_str())
            .map(str::to_string);
        let reply = post(
            &self.addr,
            &self.headers(method, name.as_deref()),
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            on_event,
        );
        (id, reply)
    }

    /// The `result` of a request (panics on an HTTP or JSON-RPC error).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let (id, reply) = self.request_with(method, params, |_| {});
        assert_eq!(reply.status, 200, "{method}: {reply:?}");
        let response = reply.response(id);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// `execute_python`'s structured result.
    pub fn run(&mut self, session: &str, code: &str) -> Value {
        let r = self.call("execute_python", json!({"session": session, "code": code}));
        r["structuredContent"].clone()
    }
}

#[test]
fn two_clients_with_the_same_session_name_see_different_workspaces() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let mut a = server.client();
    a.initialize(json!({}));
    let mut b = server.client();
    b.initialize(json!({}));
    let mut stateless = server.client().stateless();

    let r = a.run(
        "default",
        "secret = 'A only'\nopen('a.txt', 'w').write('from A')",
    );
    assert_eq!(r["status"], "ok", "{r}");
    let r = b.run("default", "print(open('a.txt').read())");
    assert_eq!(r["error"]["type"], "FileNotFoundError", "{r}");
    let r = b.run("default", "secret");
    assert_eq!(r["error"]["type"], "NameError", "{r}");
    let r = stateless.run("default", "secret");
    assert_eq!(r["error"]["type"], "NameError", "{r}");
    let r = a.run("default", "secret");
    assert_eq!(r["result"], "'A only'", "{r}");

    // A's file is among A's resources, not B's, and B cannot read it by its URI.
    let uri = "warden://sessions/default/files/a.txt";
    let listed = |c: &mut McpHttp| {
        c.request("resources/list", json!({}))["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["uri"] == uri)
    };
    assert!(listed(&mut a));
    assert!(!listed(&mut b));
    let (id, reply) = b.request_with("resources/read", json!({"uri": uri}), |_| {});
    assert!(reply.response(id).get("error").is_some(), "{reply:?}");
    let read = a.request("resources/read", json!({"uri": uri}));
    // A text file comes back inside provenance delimiters (see README).
    assert_eq!(
        read["contents"][0]["text"],
        format!(
            "<provenance type=\"workspace_file\" source=\"{uri}\" trust=\"untrusted\">\nfrom A\n</provenance>"
        )
    );

    // B's reset of its own "default" leaves A's alone.
    let r = b.call("reset_session", json!({"session": "default"}));
    assert_eq!(r["structuredContent"]["ok"], true, "{r}");
    let r = a.run("default", "secret");
    assert_eq!(r["result"], "'A only'", "{r}");

    // Each workspace is a tmpfs held by the workspace keeper: never on the host's disk.
    let found = find_files(server.data_dir.path(), "a.txt");
    assert!(found.is_empty(), "{found:?}");
    server.stop();
}

/// Ends an MCP session (`DELETE /mcp`); returns the HTTP status.
fn delete_session(client: &McpHttp) -> u16 {
    let addr = &client.addr;
    let mut stream = connect(addr).expect("connect");
    let mut request = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {}\r\nMcp-Session-Id: {}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n",
        host_of(addr),
        client.session.as_deref().unwrap()
    );
    if let Some(t) = &client.token {
        request.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn ending_an_mcp_session_closes_its_python_sessions() {
    // No warm workers: every worker process the host sees is then a session's.
    let server = HttpServer::start("127.0.0.1:0", &[("SANDBOX_WARM_WORKERS", "0")]);
    let mut a = server.client();
    a.initialize(json!({}));
    let mut b = server.client();
    b.initialize(json!({}));
    // Seen from the host: A's worker processes, then B's.
    let r = a.run("work", "open('kept.txt', 'w').write('x')");
    assert_eq!(r["status"], "ok", "{r}");
    let a_workers = super::workers_of(server.pid());
    assert!(!a_workers.is_empty(), "no worker for A");
    let r = b.run("work", "open('kept.txt', 'w').write('y')");
    assert_eq!(r["status"], "ok", "{r}");
    let b_workers: Vec<_> = super::workers_of(server.pid())
        .into_iter()
        .filter(|p| !a_workers.contains(p))
        .collect();
    assert!(!b_workers.is_empty(), "no worker for B");

    let status = delete_session(&a);
    assert!(status < 300, "DELETE answered {status}");
    // A's interpreter is killed; B's lives on and still has its file.
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        a_workers.iter().all(|p| !super::is_alive(*p))
    });
    assert!(gone, "A's workers outlived its MCP session: {a_workers:?}");
    assert!(
        b_workers.iter().all(|p| super::is_alive(*p)),
        "{b_workers:?}"
    );
    let r = b.run("work", "print(open('kept.txt').read())");
    assert_eq!(stdout(&r), "y\n", "{r}");
    assert_eq!(r["worker_restarted"], false, "{r}");
    server.stop();
}

#[test]
fn sigterm_during_a_run_ends_streams_and_workers() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let server_pid = server.pid();
    let mut c = server.client();
    c.initialize(json!({}));
    let (tx, rx) = std::sync::mpsc::channel();
    let caller = std::thread::spawn(move || {
        let started = Instant::now();
        let (_, reply) = c.request_with(
            "tools/call",
            json!({"name": "execute_python",
                   "arguments": {"code": "import time\nprint('up', flush=True)\ntime.sleep(60)",
                                 "timeout_s": 90},
                   "_meta": {"progressToken": 1}}),
            |event| {
                if event["method"] == "notifications/progress" {
                    let _ = tx.send(());
                }
            },
        );
        (started.elapsed(), reply)
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the run started");
    let workers = super::workers_of(server_pid);
    assert!(!workers.is_empty());
    server.stop();
    assert!(workers.iter().all(|p| !super::is_alive(*p)), "{workers:?}");
    let (took, reply) = caller.join().unwrap();
    assert!(
        took < Duration::from_secs(30),
        "the stream outlived the server: {reply:?}"
    );
}

#[test]
fn a_stateless_client_keeps_its_python_variables_across_requests() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let mut c = server.client().stateless();
    let tools = c.request("tools/list", json!({}));
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "execute_python"),
        "{tools}"
    );
    let r = c.run("s1", "counter = 41");
    assert_eq!(r["status"], "ok", "{r}");
    for want in ["42", "43"] {
        let r = c.run("s1", "counter += 1\ncounter");
        assert_eq!(r["result"], want, "{r}");
    }
    server.stop();
}

/// A session id is no credential: a stateless request that names another client's MCP
/// session runs in its own scope, sees nothing of that session's Python sessions, cannot
/// be asked for consent on its stream, and closes nothing when it ends.
#[test]
fn another_clients_session_id_on_the_stateless_route_reaches_none_of_its_sessions() {
    let server = HttpServer::start("127.0.0.1:0", &[("SANDBOX_WARM_WORKERS", "0")]);
    let mut a = server.client();
    a.initialize(json!({"elicitation": {"form": {}}}));
    let r = a.run(
        "default",
        "secret = 'A only'\nopen('a.txt', 'w').write('A')",
    );
    assert_eq!(r["status"], "ok", "{r}");
    let a_workers = super::workers_of(server.pid());
    assert!(!a_workers.is_empty(), "no worker for A");
    let a_session = a.session.clone().unwrap();

    // Without the token, A's id gets B nothing at all.
    let mut anonymous = server.anonymous_client().stateless();
    anonymous.named_session = Some(a_session.clone());
    let (_, reply) = anonymous.request_with("tools/list", json!({}), |_| {});
    assert_eq!(reply.status, 401, "{reply:?}");

    // With the token (one per server), on the stateless route, naming A's session.
    let mut b = server.client().stateless();
    b.named_session = Some(a_session.clone());
    let r = b.run("default", "secret");
    assert_eq!(r["error"]["type"], "NameError", "B saw A's variables: {r}");
    let r = b.run("default", "print(open('a.txt').read())");
    assert_eq!(
        r["error"]["type"], "FileNotFoundError",
        "B saw A's files: {r}"
    );
    let listed = b.request("resources/list", json!({}));
    assert!(!listed.to_string().contains("a.txt"), "{listed}");
    // A grant request there is a stateless one: refused at once, never put to A's
    // stream.
    let target = tempfile::tempdir().unwrap();
    let r = b.call(
        "request_grant",
        json!({"path": target.path(), "access": "read", "reason": "r"}),
    );
    let message = r["structuredContent"]["message"].as_str().unwrap();
    assert!(message.contains("stateless"), "{message}");

    // A's interpreter lived through all of it: same workers, same variables, same file.
    let r = a.run("default", "print(secret, open('a.txt').read())");
    assert_eq!(stdout(&r), "A only A\n", "{r}");
    assert_eq!(r["worker_restarted"], false, "{r}");
    assert!(
        a_workers.iter().all(|p| super::is_alive(*p)),
        "A's workers died: {a_workers:?}"
    );
    let listed = a.request("resources/list", json!({}));
    assert!(listed.to_string().contains("a.txt"), "{listed}");
    server.stop();
}

#[test]
fn a_missing_or_wrong_token_is_refused_on_loopback_and_off() {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    // Loopback, and every address (not loopback; the test still connects over loopback
    // only): a token is generated, printed, and saved 0600 in the data directory.
    for bind in ["127.0.0.1:0", "0.0.0.0:0"] {
        let server = HttpServer::start(bind, &[]);
        let token = server.printed_token.clone().expect("a generated token");
        assert_eq!(token.len(), 64);
        let file = server.data_dir.path().join("http-token");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{bind}");
        let wrong_same_length = "0".repeat(64);
        for auth in [
            None,
            Some("Bearer nope".to_string()),
            Some(format!("Bearer {wrong_same_length}")),
            Some(format!("Basic {token}")),
            Some(format!("Bearer {token}x")),
        ] {
            let headers: Vec<(&str, String)> =
                auth.iter().map(|a| ("Authorization", a.clone())).collect();
            let reply = post(&server.addr, &headers, &init, |_| {});
            assert_eq!(reply.status, 401, "{bind} {auth:?}: {reply:?}");
            assert!(reply.header("www-authenticate").is_some(), "{reply:?}");
            assert!(reply.body.contains("Authorization: Bearer"), "{reply:?}");
        }
        let mut c = server.client();
        c.initialize(json!({}));
        let r = c.run("default", "print('authorised')");
        assert_eq!(stdout(&r), "authorised\n", "{r}");
        server.stop();
    }

    // A configured token is the one required; none is generated.
    let configured = "a-configured-token-0123456789";
    let server = HttpServer::start("127.0.0.1:0", &[("SANDBOX_HTTP_TOKEN", configured)]);
    assert!(server.printed_token.is_none());
    assert!(!server.data_dir.path().join("http-token").exists());
    let reply = post(&server.addr, &[], &init, |_| {});
    assert_eq!(reply.status, 401, "{reply:?}");
    let mut c = server.client();
    c.initialize(json!({}));
    // The token never shows in the settings resource.
    let settings = c.request("resources/read", json!({"uri": "warden://settings"}));
    assert!(!settings.to_string().contains(configured), "{settings}");
    server.stop();
}

#[test]
fn the_token_file_is_kept_across_restarts_and_printed_only_when_made() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let token = server.token.clone().unwrap();
    let data = server.stop();
    // The same data directory again: the same token, not printed this time.
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--http", "127.0.0.1:0"])
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let mut addr = None;
    for line in lines.by_ref().map_while(Result::ok) {
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split("http://").nth(1) {
            addr = Some(rest.trim_end_matches("/mcp").to_string());
        }
        if line.contains("saved in") {
            break;
        }
    }
    assert!(
        !seen.contains(&token),
        "the token was printed again: {seen}"
    );
    assert!(seen.contains("http-token"), "{seen}");
    let mut c = McpHttp::new(&addr.unwrap()).with_token(&token);
    c.initialize(json!({}));
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_bad_origin_or_host_is_refused() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let auth = (
        "Authorization",
        format!("Bearer {}", server.token.clone().unwrap()),
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    for (name, value) in [
        ("Origin", "http://evil.example"),
        ("Origin", "https://127.0.0.1.evil.example:443"),
        ("Origin", "null"),
        ("Host", "evil.example"),
        ("Host", "rebound.example:8765"),
    ] {
        let headers = [(name, value.to_string()), auth.clone()];
        let reply = post(&server.addr, &headers, &init, |_| {});
        assert_eq!(reply.status, 403, "{name}: {value}: {reply:?}");
    }
    // A page served from this machine's loopback, or no Origin at all (not a browser).
    let port = server.addr.rsplit(':').next().unwrap();
    for origin in [
        format!("http://localhost:{port}"),
        "http://127.0.0.1:3000".to_string(),
    ] {
        let headers = [("Origin", origin.clone()), auth.clone()];
        let reply = post(&server.addr, &headers, &init, |_| {});
        assert_eq!(reply.status, 200, "{origin}: {reply:?}");
    }
    server.stop();
}

#[test]
fn settings_show_an_http_client_no_host_paths() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let mut c = server.client();
    c.initialize(json!({}));
    let read = c.request("resources/read", json!({"uri": "warden://settings"}));
    let text = read["contents"][0]["text"].as_str().unwrap().to_string();
    let data_dir = server.data_dir.path().display().to_string();
    assert!(!text.contains(&data_dir), "{text}");
    assert!(!text.contains("/usr/bin/python3"), "{text}");
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["resolved"]["backend"], "host", "{doc}");
    assert!(doc["resolved"]["python_version"].is_string(), "{doc}");
    server.stop();
}

/// The pid a run printed first, from a progress message.
fn pid_in(event: &Value) -> Option<i32> {
    let message = event["params"]["message"].as_str()?;
    message
        .lines()
        .find_map(|l| l.strip_prefix("pid ")?.trim().parse().ok())
}

#[test]
fn progress_streams_stdout_lines_over_http_before_the_result() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let mut c = server.client();
    c.initialize(json!({}));
    let code = "import time\nfor i in range(4):\n    print('line', i)\n    time.sleep(0.4)\n";
    let (id, reply) = c.request_with(
        "tools/call",
        json!({"name": "execute_python", "arguments": {"code": code},
               "_meta": {"progressToken": "tok-1"}}),
        |_| {},
    );
    let progress: Vec<&(Instant, Value)> = reply
        .messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{reply:?}");
    let text: String = progress
        .iter()
        .map(|(_, m)| m["params"]["message"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(text, "line 0\nline 1\nline 2\nline 3\n", "{reply:?}");
    let values: Vec<f64> = progress
        .iter()
        .map(|(_, m)| m["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert!(
        progress
            .iter()
            .all(|(_, m)| m["params"]["progressToken"] == "tok-1")
    );
    // Lines arrive while the code runs: the first long before the result.
    let (result_at, _) = reply
        .messages
        .iter()
        .find(|(_, m)| m["id"] == id)
        .expect("result");
    assert!(
        result_at.duration_since(progress[0].0) >= Duration::from_millis(800),
        "first progress only {:?} before the result",
        result_at.duration_since(progress[0].0)
    );
    server.stop();
}

#[test]
fn cancellation_over_http_kills_the_run() {
    // No warm workers: every worker process the host sees is then the session's.
    let server = HttpServer::start("127.0.0.1:0", &[("SANDBOX_WARM_WORKERS", "0")]);
    let mut c = server.client();
    c.initialize(json!({}));
    let addr = c.addr.clone();
    let headers = c.headers("notifications/cancelled", None);
    let next = c.take_id() + 1;
    let seen_pid = Arc::new(Mutex::new(None));
    let seen = seen_pid.clone();
    // The worker, as the host sees it: the server's descendants once the code runs (in
    // its own PID namespace the code is PID 1, which says nothing to the host).
    let server_pid = server.pid();
    let workers = Arc::new(Mutex::new(Vec::new()));
    let seen_workers = workers.clone();
    let started = Instant::now();
    let code = "import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(60)\n";
    let (_, reply) = c.request_with(
        "tools/call",
        json!({"name": "execute_python", "arguments": {"code": code, "timeout_s": 90},
               "_meta": {"progressToken": 7}}),
        move |event| {
            if let Some(pid) = pid_in(event) {
                *seen.lock().unwrap() = Some(pid);
                *seen_workers.lock().unwrap() = super::workers_of(server_pid);
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                    "params": {"requestId": next, "reason": "test"}});
                let r = post(&addr, &headers, &cancel, |_| {});
                assert!(r.status < 300, "{r:?}");
            }
        },
    );
    seen_pid.lock().unwrap().expect("the run printed its pid");
    let workers = workers.lock().unwrap().clone();
    assert!(!workers.is_empty(), "no worker process found");
    // The stream ends without a result well before the code's 60 s, and the process
    // is gone on the host.
    assert!(started.elapsed() < Duration::from_secs(30), "{reply:?}");
    assert!(
        !reply
            .messages
            .iter()
            .any(|(_, m)| m.get("result").is_some()),
        "{reply:?}"
    );
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        workers.iter().all(|p| !super::is_alive(*p))
    });
    assert!(gone, "{workers:?} still running after cancellation");
    // The session serves again (with a fresh interpreter).
    let r = c.run("default", "print('again')");
    assert_eq!(stdout(&r), "again\n", "{r}");
    server.stop();
}

#[test]
fn consent_over_http_elicits_from_a_session_and_refuses_a_stateless_client_at_once() {
    let server = HttpServer::start("127.0.0.1:0", &[]);
    let target = tempfile::tempdir().unwrap();
    let path = target.path().display().to_string();
    let grant = json!({"path": path, "access": "read", "reason": "read the data"});

    let mut stateless = server.client().stateless();
    let started = Instant::now();
    let r = stateless.call("request_grant", grant.clone());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(r["isError"], true, "{r}");
    let message = r["structuredContent"]["message"].as_str().unwrap();
    assert!(message.contains("stateless"), "{message}");
    assert!(message.contains("--allow-read"), "{message}");

    // A session whose client can elicit is asked; its answer decides.
    let mut c = server.client();
    c.initialize(json!({"elicitation": {"form": {}}}));
    let addr = c.addr.clone();
    let headers = c.headers("", None);
    let (id, reply) = c.request_with(
        "tools/call",
        json!({"name": "request_grant", "arguments": grant}),
        move |event| {
            if event["method"] == "elicitation/create" {
                let question = event["params"]["message"].as_str().unwrap_or_default();
                assert!(question.contains("READ"), "{question}");
                let answer = json!({"jsonrpc": "2.0", "id": event["id"], "result": {
                    "action": "accept", "content": {"approve": true, "expires_minutes": 0}}});
                let r = post(&addr, &headers, &answer, |_| {});
                assert!(r.status < 300, "{r:?}");
            }
        },
    );
    let result = &reply.response(id)["result"];
    assert_eq!(result["structuredContent"]["granted"], true, "{reply:?}");
    let listed = c.call("list_grants", json!({}));
    assert!(listed.to_string().contains(&path), "{listed}");
    // The stateless client's scope has no such grant.
    let listed = stateless.call("list_grants", json!({}));
    assert!(!listed.to_string().contains(&path), "{listed}");
    server.stop();
}

#[test]
fn progress_streams_stdout_lines_over_stdio_too() {
    let dir = data_dir();
    let mut child = Command::new(BIN)
        .arg("serve")
        .env("SANDBOX_DATA_DIR", dir.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3")
        .env("CODEGUARD", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = move |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}),
    );
    let _ = lines.next();
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "execute_python", "_meta": {"progressToken": "p"},
        "arguments": {"code": "import time\nprint('a')\ntime.sleep(0.5)\nprint('b')"}}}),
    );
    let mut progress = String::new();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["method"] == "notifications/progress" {
            assert_eq!(v["params"]["progressToken"], "p");
            progress.push_str(v["params"]["message"].as_str().unwrap());
        }
        if v["id"] == 2 {
            assert_eq!(v["result"]["structuredContent"]["stdout"], "a\nb\n", "{v}");
            break;
        }
    }
    assert_eq!(progress, "a\nb\n");
    drop(send);
    let _ = child.wait();
}

/// SANDBOX_HTTP_CLIENTS: a listed client's token is let in, and its code is checked with
/// its own policy (`strict` refuses numpy) over stateless requests and its MCP sessions
/// alike; a listed client without a policy, and the server's own token, keep the
/// server's; the settings name the clients, never their tokens.
#[test]
fn listed_clients_are_checked_with_their_own_policy() {
    use sha2::Digest;
    for who in both_modes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (strict, plain) = (
            "the-strict-client-token-0123",
            "the-plain-client-token-4567",
        );
        let hex = |t: &str| {
            sha2::Sha256::digest(t.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let file = dir.path().join("clients.toml");
        std::fs::write(
            &file,
            format!(
                "[[client]]\nname = \"strict-bot\"\ntoken_sha256 = \"{}\"\npolicy = \"strict\"\n\
                 [[client]]\nname = \"plain-bot\"\ntoken_sha256 = \"{}\"\n",
                hex(strict),
                hex(plain)
            ),
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let env = [
            ("CODEGUARD", "enforce"),
            ("SANDBOX_HTTP_CLIENTS", file.to_str().unwrap()),
        ];
        let server = HttpServer::start_as(who, "127.0.0.1:0", &env);
        let numpy = "import numpy\nprint('numpy')";
        let mut own = server.client().stateless();
        assert_eq!(own.run("s", numpy)["stdout"], "numpy\n");
        let mut plain_bot = McpHttp::new(&server.addr).with_token(plain).stateless();
        assert_eq!(plain_bot.run("s", numpy)["stdout"], "numpy\n");
        let mut bot = McpHttp::new(&server.addr).with_token(strict).stateless();
        let r = bot.run("s", numpy);
        assert_eq!(r["error"]["type"], "GuardBlocked", "{who:?}: {r}");
        assert!(r.to_string().contains("allow_only"), "{r}");
        assert_eq!(
            bot.run("s", "import math\nprint(math.pi > 3)")["stdout"],
            "True\n"
        );
        let mut session_bot = McpHttp::new(&server.addr).with_token(strict);
        session_bot.initialize(json!({}));
        let r = session_bot.run("t", numpy);
        assert_eq!(r["error"]["type"], "GuardBlocked", "{who:?}: {r}");
        let read = own.request("resources/read", json!({"uri": "warden://settings"}));
        let text = read["contents"][0]["text"].as_str().unwrap();
        let doc: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            doc["http_clients"],
            json!([{"name": "strict-bot", "policy": "strict"}, {"name": "plain-bot", "policy": null}])
        );
        assert!(!text.contains(&hex(strict)), "{text}");
        // Each client's settings show the policy that checks its own code.
        assert_eq!(doc["resolved"]["guard_policy"]["allow_only"], 0, "{doc}");
        let read = bot.request("resources/read", json!({"uri": "warden://settings"}));
        let doc: Value =
            serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
        assert!(
            doc["resolved"]["guard_policy"]["allow_only"]
                .as_u64()
                .unwrap()
                > 10,
            "{doc}"
        );
        assert_eq!(
            doc["resolved"]["guard_policy"]["unjudged"], "refuse",
            "{doc}"
        );
        server.stop();
    }
}
