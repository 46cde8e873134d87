//! The proxied network, end to end: code in a world reaches an origin server only
//! through the egress proxy, only for names the settings allow, never at a loopback,
//! private or metadata address DNS gave, and within the session's byte budget. Every
//! verdict is judged from outside: the origin's own log of what reached it, and the
//! audit log.
//!
//! The origin is a real HTTP server this test runs on the host's loopback. The proxy
//! would refuse a loopback address that DNS returned, so its name is pinned with
//! `SANDBOX_EGRESS_RESOLVE` (the operator's resolver override, like curl's `--resolve`).
//! No name is resolved through DNS: every other name is refused before resolution, is
//! `localhost` (the hosts file) or is an IP literal.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::netorigin::NetOrigin;
use super::{As, Net, Server, both_modes, stdout};

/// A real HTTP/1 origin: answers every request with `body`, and logs each request line
/// it received.
pub struct Origin {
    pub port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    pub fn start(body: Vec<u8>) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let body = Arc::new(body);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (log, body) = (log.clone(), body.clone());
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).to_string();
                    log.lock()
                        .unwrap()
                        .push(text.lines().next().unwrap_or("").to_string());
                    // `/redirect?to=URL` answers a redirect there.
                    if let Some(to) = text
                        .split_whitespace()
                        .nth(1)
                        .and_then(|t| t.strip_prefix("/redirect?to="))
                    {
                        let reply = format!(
                            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                        let _ = conn.write_all(reply.as_bytes());
                        return;
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes());
                    let _ = conn.write_all(&body);
                });
            }
        });
        Origin { port, seen }
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

pub fn egress_records(data: &Path) -> Vec<Value> {
    super::audit::records(data)
        .into_iter()
        .filter(|r| r["phase"] == "egress")
        .collect()
}

async fn proxied_server(who: As, network: &str, origin: &Origin, extra: &[(&str, &str)]) -> Server {
    let allow = format!(
        "origin.test:{0},other.test:{0},localhost:{0},127.0.0.1:{0}",
        origin.port
    );
    let mut env = vec![
        ("HOST_SANDBOX", "require"),
        ("HOST_SANDBOX_NETWORK", network),
        ("SANDBOX_EGRESS_RESOLVE", "origin.test=127.0.0.1"),
        ("SANDBOX_EGRESS_DENY", "other.test"),
        ("CODEGUARD", "enforce"),
    ];
    // `allow` adds every public host on 80 and 443; the origin's port is named.
    env.push(("SANDBOX_EGRESS_ALLOW", &allow));
    env.extend_from_slice(extra);
    Server::start_as(who, Net::Host, &env).await
}

/// Ordinary network code, guard on: what the settings allow is fetched through the proxy
/// (urllib and pandas), and everything else is refused with a 403 whose reason the code
/// can print, before any packet reaches the origin.
#[tokio::test]
async fn ordinary_code_fetches_allowed_hosts_and_nothing_else() {
    for who in both_modes() {
        for network in ["proxy", "allow"] {
            let context = format!("{who:?} HOST_SANDBOX_NETWORK={network}");
            let origin = Origin::start(b"a,b\n1,2\n3,4\n".to_vec());
            let server = proxied_server(who, network, &origin, &[]).await;
            let port = origin.port;
            let code = format!(
                r#"import urllib.request
import pandas as pd
print(urllib.request.urlopen("http://origin.test:{port}/data.csv").read().decode().splitlines()[1])
print(pd.read_csv("http://origin.test:{port}/data.csv")["b"].sum())
import http.client
tunnel = http.client.HTTPConnection("127.0.0.1", 3128, timeout=20)
tunnel.set_tunnel("origin.test", {port})
tunnel.request("GET", "/tunnel")
print(tunnel.getresponse().status)
for url in ["http://other.test:{port}/", "http://127.0.0.1:{port}/", "http://localhost:{port}/",
            "http://169.254.169.254/latest/meta-data/", "https://api.openai.com/v1/models",
            "http://origin.test:{other}/"]:
    try:
        urllib.request.urlopen(url, timeout=20)
        print("REACHED", url)
    except Exception as e:
        print(getattr(e, "code", None) or ("403" if "403" in str(e) else type(e).__name__))
"#,
                other = port + 1
            );
            let r = server.run("s", &code).await;
            assert_eq!(r["guard"]["decision"], "allowed", "{context}: {r}");
            assert_eq!(
                stdout(&r),
                "1,2\n6\n200\n403\n403\n403\n403\n403\n403\n",
                "{context}: {r}"
            );
            let warnings = r["warnings"].to_string();
            for reason in [
                "other.test",
                "127.0.0.1 is a loopback address",
                "localhost resolves to a refused address",
                "169.254.169.254",
                "api.openai.com is an LLM API host",
            ] {
                assert!(warnings.contains(reason), "{context}: {reason}: {r}");
            }
            // Judged from the origin: only the allowed fetches reached it, the last one
            // through a CONNECT tunnel.
            let mut expected = vec!["GET /data.csv HTTP/1.1".to_string(); 2];
            expected.push("GET /tunnel HTTP/1.1".to_string());
            assert_eq!(origin.seen(), expected, "{context}");
            // The caps' counters show what the call moved through the proxy.
            let settings = server.settings().await;
            let moved = &settings["sessions"][0]["spent"]["proxy_bytes"];
            assert!(moved.as_u64().unwrap() > 24, "{context}: {settings}");
            assert_eq!(&settings["caps"]["client_spent"]["proxy_bytes"], moved);
            let data = server.stop().await;
            let records = egress_records(data.path());
            let allowed: Vec<&Value> = records
                .iter()
                .filter(|r| r["decision"] == "allowed")
                .collect();
            let opened = records
                .iter()
                .filter(|r| r["decision"] == "connect")
                .count();
            assert_eq!(
                opened, 3,
                "{context}: every connection is on record before it is made"
            );
            assert_eq!(allowed.len(), 3, "{context}: {records:?}");
            for record in &allowed {
                let detail = record["detail"].as_str().unwrap();
                assert!(detail.contains("host=origin.test"), "{detail}");
                assert!(detail.contains("address=127.0.0.1"), "{detail}");
                assert!(!detail.contains("down=0"), "{detail}");
                assert_eq!(record["session"], "s", "{record}");
            }
            assert!(
                records
                    .iter()
                    .filter(|r| r["decision"] == "refused")
                    .count()
                    >= 5,
                "{context}: {records:?}"
            );
        }
    }
}

/// A redirect is a new request through the proxy, judged like the first: an allowed
/// origin that redirects to a loopback or metadata address gets the code a 403, and
/// only the redirecting requests reach the origin.
#[tokio::test]
async fn redirects_to_private_addresses_are_refused() {
    for who in both_modes() {
        let context = format!("{who:?}");
        let origin = Origin::start(b"secret".to_vec());
        let server = proxied_server(who, "allow", &origin, &[]).await;
        let port = origin.port;
        let code = format!(
            r#"import urllib.request
for to in ["http://127.0.0.1:{port}/secret", "http://localhost:{port}/secret", "http://169.254.169.254/latest/", "http://[::ffff:127.0.0.1]:{port}/secret"]:
    try:
        print(urllib.request.urlopen("http://origin.test:{port}/redirect?to=" + to, timeout=20).read())
    except Exception as e:
        print(getattr(e, "code", None) or type(e).__name__)
"#
        );
        let r = server.run("r", &code).await;
        assert_eq!(stdout(&r), "403\n403\n403\n403\n", "{context}: {r}");
        let seen = origin.seen();
        assert_eq!(seen.len(), 4, "{context}: {seen:?}");
        assert!(
            seen.iter().all(|l| l.starts_with("GET /redirect?to=")),
            "{context}: {seen:?}"
        );
        server.stop().await;
    }
}

/// With the guard off, raw sockets reach nothing but the proxy: a direct connect to the
/// origin, another port, DNS and a bind are refused by the walls, judged by the origin's
/// log; UNIX, netlink and packet sockets stay denied.
#[tokio::test]
async fn raw_sockets_reach_only_the_proxy() {
    for who in both_modes() {
        let context = format!("{who:?}");
        let origin = Origin::start(b"x".to_vec());
        let server = proxied_server(who, "allow", &origin, &[("CODEGUARD", "off")]).await;
        let code = format!(
            r#"import socket
def attempt(what, f):
    try:
        f(); print(what, "OPEN")
    except OSError as e:
        print(what, "refused")
def connect(addr):
    s = socket.socket(); s.settimeout(5); s.connect(addr); s.close()
attempt("origin", lambda: connect(("127.0.0.1", {port})))
attempt("test-net", lambda: connect(("192.0.2.1", 80)))
attempt("dns", lambda: socket.getaddrinfo("origin.test", 80))
attempt("bind", lambda: socket.socket().bind(("127.0.0.1", 8000)))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 53)))
attempt("proxy", lambda: connect(("127.0.0.1", 3128)))
for fam, typ in [(socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW)]:
    attempt(int(fam), lambda: socket.socket(fam, typ))
"#,
            port = origin.port
        );
        let r = server.run("raw", &code).await;
        assert_eq!(
            stdout(&r),
            "origin refused\ntest-net refused\ndns refused\nbind refused\nudp refused\nproxy OPEN\n1 refused\n16 refused\n17 refused\n",
            "{context}: {r}"
        );
        assert!(origin.seen().is_empty(), "{context}: {:?}", origin.seen());
        server.stop().await;
    }
}

/// The bypasses a client library offers reach nothing: `NO_PROXY` (the code's own, `*`
/// or the name) sends urllib straight out of a world that has no route; IPv6 spellings
/// of loopback and IPv4-mapped addresses and a `CONNECT` to another port of an allowed
/// name are refused by the proxy; a client that drips its request head one byte at a
/// time holds nothing (another request is served meanwhile) and is cut when the head's
/// window ends. Judged by the origin's log.
#[tokio::test]
async fn client_side_bypasses_and_slow_clients_get_nowhere() {
    for who in both_modes() {
        let context = format!("{who:?}");
        let origin = Origin::start(b"secret".to_vec());
        let server = proxied_server(who, "allow", &origin, &[("CODEGUARD", "off")]).await;
        let port = origin.port;
        let code = format!(
            r#"import os, socket, threading, time, urllib.request
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except Exception as e:
        return str(getattr(e, "code", None) or type(e).__name__)
for bypass in ["*", "origin.test", "127.0.0.1"]:
    os.environ["no_proxy"] = os.environ["NO_PROXY"] = bypass
    print("no_proxy", bypass, fetch("http://origin.test:{port}/a") if bypass != "127.0.0.1" else fetch("http://127.0.0.1:{port}/a"))
os.environ["no_proxy"] = os.environ["NO_PROXY"] = ""
for host in ["[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]", "[::127.0.0.1]"]:
    print(host, fetch("http://%s:{port}/b" % host))
def tunnel(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    answer = s.recv(100).split(b" ")[1].decode()
    s.close()
    return answer
print("connect other port", tunnel("origin.test:22"))
drip = socket.create_connection(("127.0.0.1", 3128), timeout=60)
def slowly():
    try:
        for b in b"GET http://origin.test:{port}/drip HTTP/1.1\r\n":
            drip.send(bytes([b]))
            time.sleep(0.5)
    except OSError:
        pass
threading.Thread(target=slowly, daemon=True).start()
print("meanwhile", fetch("http://origin.test:{port}/c"))
try:
    answer = drip.recv(100)
except OSError as e:
    answer = type(e).__name__.encode()
print("drip cut", answer.split(b"\r\n")[0].decode())
"#
        );
        // The head's window (30 s) is the event awaited: the call may take that long.
        let r = server
            .exec(serde_json::json!({"session": "b", "code": code, "timeout_s": 90}))
            .await;
        let out = stdout(&r);
        for line in [
            "no_proxy * URLError",
            "no_proxy origin.test URLError",
            "no_proxy 127.0.0.1 URLError",
            "[::1] 403",
            "[::ffff:127.0.0.1] 403",
            "[::ffff:7f00:1] 403",
            "[0:0:0:0:0:ffff:127.0.0.1] 403",
            "[::127.0.0.1] 403",
            "connect other port 403",
            "meanwhile secret",
            "drip cut HTTP/1.1 408 Request Timeout",
        ] {
            assert!(
                out.lines().any(|l| l == line),
                "{context}: no {line:?} in {r}"
            );
        }
        let seen = origin.seen();
        assert_eq!(
            seen,
            ["GET /c HTTP/1.1"],
            "{context}: only the proxied fetch arrived"
        );
        server.stop().await;
    }
}

/// SANDBOX_EGRESS_LIMIT cuts the connection that passes it, and the result says so; a
/// request head over the proxy's limit gets 431.
#[tokio::test]
async fn the_byte_budget_cuts_and_oversized_heads_are_refused() {
    for who in both_modes() {
        let context = format!("{who:?}");
        let origin = Origin::start(vec![b'x'; 256 << 10]);
        let server =
            proxied_server(who, "proxy", &origin, &[("SANDBOX_EGRESS_LIMIT", "64k")]).await;
        let code = format!(
            r#"import urllib.request
try:
    data = urllib.request.urlopen("http://origin.test:{port}/big").read()
    print("GOT", len(data))
except Exception as e:
    print("cut")
try:
    req = urllib.request.Request("http://origin.test:{port}/", headers={{"X-Big": "y" * (1 << 20)}})
    urllib.request.urlopen(req)
except Exception as e:
    print(getattr(e, "code", None) or type(e).__name__)
"#,
            port = origin.port
        );
        let r = server.run("b", &code).await;
        let out = stdout(&r);
        assert!(out.starts_with("cut\n"), "{context}: {r}");
        assert!(
            r["warnings"].to_string().contains("SANDBOX_EGRESS_LIMIT"),
            "{context}: {r}"
        );
        // The caps' counters show what the call moved through the proxy, within the cut.
        let settings = server.settings().await;
        let moved = settings["sessions"][0]["spent"]["proxy_bytes"]
            .as_u64()
            .unwrap();
        assert!(moved <= 64 << 10, "{context}: {settings}");
        let data = server.stop().await;
        let records = egress_records(data.path());
        assert!(
            records.iter().any(|r| r["decision"] == "cut"),
            "{context}: {records:?}"
        );
        assert!(
            records.iter().any(|r| r["rule"]
                .as_str()
                .is_some_and(|rule| rule.contains("request head is over"))),
            "{context}: {records:?}"
        );
        // The oversized head never reached the origin: only the first request did.
        assert_eq!(
            origin.seen(),
            vec!["GET /big HTTP/1.1".to_string()],
            "{context}"
        );
    }
}

/// selftest with a proxied network: each refusal is judged from the proxy's own record,
/// DNS fails inside the world, and the operator's probe URL is fetched through the proxy
/// (the origin saw it).
#[tokio::test]
async fn selftest_proves_the_proxy_refuses_and_works() {
    for who in both_modes() {
        let context = format!("{who:?}");
        let origin = Origin::start(b"ok".to_vec());
        let url = format!("http://origin.test:{}/probe", origin.port);
        let server =
            proxied_server(who, "proxy", &origin, &[("SANDBOX_EGRESS_PROBE_URL", &url)]).await;
        let raw = server
            .call("selftest", serde_json::json!({}))
            .await
            .unwrap();
        let report = raw.structured_content.unwrap();
        assert_eq!(
            report["failing_required"],
            serde_json::json!([]),
            "{context}: {report}"
        );
        assert_eq!(
            report["network_isolation"]["status"], "blocked",
            "{context}: {report}"
        );
        let probes = report["probes"].as_array().unwrap();
        let status = |id: &str| {
            probes
                .iter()
                .find(|p| p["id"] == id)
                .map(|p| p["status"].as_str().unwrap().to_string())
                .unwrap_or_else(|| panic!("{context}: no probe {id}: {report}"))
        };
        for id in [
            "net.test_net_connect",
            "net.loopback_listener",
            "net.proxy_loopback_name",
            "net.proxy_metadata",
            "net.proxy_llm_host",
            "net.proxy_not_allowed",
            "net.world_dns",
        ] {
            assert_eq!(status(id), "blocked", "{context}: {id}: {report}");
        }
        assert_eq!(
            status("net.proxy_allowed"),
            "allowed",
            "{context}: {report}"
        );
        // HOST_SANDBOX=require ran the probes once at start as well.
        let seen = origin.seen();
        assert!(!seen.is_empty(), "{context}");
        assert!(
            seen.iter().all(|l| l == "GET /probe HTTP/1.1"),
            "{context}: {seen:?}"
        );
        server.stop().await;
    }
}

/// A public address DNS did not come into: an IP literal and a name pinned to an origin
/// at a TEST-NET-3 address in a namespace of its own are reached through the proxy,
/// judged as public addresses; an unlisted port of it is refused.
#[tokio::test]
async fn an_origin_at_a_public_address_in_its_own_namespace_is_reached() {
    let origin = NetOrigin::start();
    for who in both_modes() {
        let context = format!("{who:?}");
        let allow = format!("{0}:8080,data.test:8080,{0}:8081", origin.addr);
        let resolve = format!("data.test={}", origin.addr);
        let server = Server::start_as(
            who,
            Net::Host,
            &[
                ("HOST_SANDBOX", "require"),
                ("HOST_SANDBOX_NETWORK", "proxy"),
                ("SANDBOX_EGRESS_ALLOW", &allow),
                ("SANDBOX_EGRESS_RESOLVE", &resolve),
                ("CODEGUARD", "enforce"),
            ],
        )
        .await;
        let code = format!(
            r#"import urllib.request
import pandas as pd
print(urllib.request.urlopen("http://{0}:8080/data.csv", timeout=20).read().decode().splitlines()[1])
print(pd.read_csv("http://data.test:8080/data.csv")["b"].sum())
try:
    urllib.request.urlopen("http://{0}:9090/data.csv", timeout=20)
except Exception as e:
    print(getattr(e, "code", None) or type(e).__name__)
"#,
            origin.addr
        );
        let r = server.run("t", &code).await;
        assert_eq!(stdout(&r), "5,6\n6\n403\n", "{context}: {r}");
        server.stop().await;
    }
    let requests = origin.requests();
    assert_eq!(requests.len(), 2 * both_modes().len(), "{requests:?}");
    assert!(
        requests.iter().all(|l| l == "GET /data.csv HTTP/1.1"),
        "{requests:?}"
    );
}
