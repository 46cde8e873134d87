//! An origin server in a network namespace of its own, reached from the host's
//! namespace over a veth pair at a TEST-NET-3 address: what network tests fetch from,
//! with nothing routed anywhere else.

use std::process::Command;

/// An origin in a network namespace of its own, reached over a veth pair at a TEST-NET-3
/// address (RFC 5737: documentation, not private, so the proxy judges it as any public
/// address). Only that /30 is routed to the pair; nothing is sent anywhere else. Its
/// HTTP server is Python's, whose log (one line per request) is the judge.
pub struct NetOrigin {
    name: String,
    pub addr: String,
    server: std::process::Child,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// The next /30 of TEST-NET-3 (`203.0.113.4k/30`) for a veth pair of this test
/// process: every test that puts one in this machine's namespace takes it here, so no
/// two overlap.
pub fn subnet() -> u8 {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    assert!(k < 63, "out of TEST-NET-3 subnets");
    k
}

impl NetOrigin {
    /// Python's `http.server` on port 8080, serving a directory holding `data.csv`.
    pub fn start() -> NetOrigin {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.csv"), "a,b\n5,6\n").unwrap();
        NetOrigin::serving(dir, 8080, |addr| {
            [
                "/usr/bin/python3",
                "-u",
                "-m",
                "http.server",
                "8080",
                "--bind",
                addr,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        })
    }

    /// `program(addr)` run in the namespace from `dir`, listening on `port` of `addr`;
    /// its stderr is the log [`NetOrigin::requests`] reads.
    pub fn serving(
        dir: tempfile::TempDir,
        port: u16,
        program: impl Fn(&str) -> Vec<String>,
    ) -> NetOrigin {
        let k = subnet();
        let name = format!("wtn{}-{k}", std::process::id());
        let (host_if, ns_if) = (
            format!("wo{k}h{}", std::process::id() % 10000),
            format!("wo{k}n"),
        );
        let (ours, theirs) = (
            format!("203.0.113.{}", 4 * k + 1),
            format!("203.0.113.{}", 4 * k + 2),
        );
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ip(&["netns", "add", &name]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &name,
        ]);
        ip(&["addr", "add", &format!("{ours}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{theirs}/30"),
            "dev",
            &ns_if,
        ]);
        ip(&["-n", &name, "link", "set", &ns_if, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        let log = dir.path().join("requests.log");
        let server = Command::new("ip")
            .args(["netns", "exec", &name])
            .args(program(&theirs))
            .current_dir(dir.path())
            .stdout(std::fs::File::create(dir.path().join("stdout.log")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let origin = NetOrigin {
            name,
            addr: theirs,
            server,
            log,
            _dir: dir,
        };
        // Ready when it accepts a connection (from the host's side of the pair).
        let target: std::net::SocketAddr = format!("{}:{port}", origin.addr).parse().unwrap();
        let ready = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(25));
            std::net::TcpStream::connect_timeout(&target, std::time::Duration::from_millis(200))
                .is_ok()
        });
        assert!(ready, "the namespaced origin did not start");
        origin
    }

    /// The request lines the origin logged (Python's `"GET /x HTTP/1.1" 200 -`).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split('"').nth(1).map(str::to_string))
            .collect()
    }
}

impl Drop for NetOrigin {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
