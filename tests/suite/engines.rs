//! Sessions over several engines (`SANDBOX_DOCKER_HOSTS`), against real engines: each
//! test makes its own `dockerd`s, each in a network namespace of its own with its own
//! data root and exec root, reached over TCP+TLS on a veth pair with TEST-NET-3
//! addresses (nothing leaves this machine), holding the small image
//! (`warden-sandbox:slim`, loaded from the local engine).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use super::tls::{make_ca, make_cert_for};
use super::{Server, containers_labelled_on, stdout};

/// The image the test engines hold (built by `.ci/run`: `tools/build-image.sh --tag
/// warden-sandbox:slim`).
const SLIM: &str = "warden-sandbox:slim";
/// The port each test engine serves TLS on.
const PORT: u16 = 2376;

/// Whether the local engine holds the slim image; fails the test when Docker is
/// required.
fn slim_ready() -> bool {
    let ok = Command::new("docker")
        .args(["image", "inspect", SLIM])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("WARDEN_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "WARDEN_REQUIRE_DOCKER=1 but the image {SLIM} is missing (tools/build-image.sh --tag {SLIM})"
        );
        eprintln!("skipping: no image {SLIM}");
    }
    ok
}

fn sh(script: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh")
}

fn must(script: &str) {
    let out = sh(script);
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What a test engine shares with this machine.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sees {
    /// Its paths: the engine binds the server's workspaces.
    Paths,
    /// Nothing of the server's: its own mount namespace, with an empty tmpfs over
    /// `/tmp` (where the server's data directory is) and another as its data root.
    Nothing,
}

/// One test engine: a `dockerd` in its own network namespace.
pub struct Engine {
    /// How the server reaches it: `tcp://203.0.113.x:2376`, TLS.
    pub url: String,
    /// How the test itself asks it (its UNIX socket, no TLS).
    pub sock: String,
    dir: PathBuf,
    netns: String,
    /// What starts its `dockerd` (`nsenter`, or `unshare` for an engine of its own
    /// mounts) and with what.
    command: String,
    args: Vec<String>,
    daemon: Option<std::process::Child>,
}

impl Engine {
    /// Makes the namespace, the veth pair and the engine's certificate, and starts it.
    fn new(root: &Path, pki: &Path, n: usize, sees: Sees) -> Engine {
        let tag = format!("wdf{}n{n}", std::process::id() % 100_000);
        let (host_ip, engine_ip) = (
            format!("203.0.113.{}", 4 * n + 1),
            format!("203.0.113.{}", 4 * n + 2),
        );
        // A veth left by a killed run of an earlier test process holds the address.
        let stale = sh(&format!("ip -o -4 addr show to {host_ip}/32"));
        for line in String::from_utf8_lossy(&stale.stdout).lines() {
            if let Some(name) = line.split_whitespace().nth(1) {
                let _ = sh(&format!("ip link del {name}"));
            }
        }
        must(&format!(
            "ip netns add {tag} && ip link add {tag}h type veth peer name {tag}p netns {tag} && \
             ip addr add {host_ip}/30 dev {tag}h && ip link set {tag}h up && \
             ip -n {tag} addr add {engine_ip}/30 dev {tag}p && ip -n {tag} link set {tag}p up && \
             ip -n {tag} link set lo up"
        ));
        // Loopback too: a test may put a forwarder on 127.0.0.1 in front of it.
        let names = format!("{engine_ip},127.0.0.1");
        make_cert_for(pki, "engine-ca", &tag, "serverAuth", &names);
        let dir = root.join(format!("e{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        let p = |f: &str| dir.join(f).display().to_string();
        let pem = |f: String| pki.join(f).display().to_string();
        let mut args = vec![
            format!("--net=/run/netns/{tag}"),
            "dockerd".into(),
            format!("--data-root={}", p("data")),
            format!("--exec-root={}", p("exec")),
            format!("--pidfile={}", p("dockerd.pid")),
            format!("--host=unix://{}", p("docker.sock")),
            format!("--host=tcp://{engine_ip}:{PORT}"),
            "--tlsverify".into(),
            format!("--tlscacert={}", pem("client-ca.pem".into())),
            format!("--tlscert={}", pem(format!("{tag}.pem"))),
            format!("--tlskey={}", pem(format!("{tag}-key.pem"))),
            "--bridge=none".into(),
            "--iptables=false".into(),
            "--ip6tables=false".into(),
            "--ip-forward=false".into(),
            "--ip-masq=false".into(),
            format!("--containerd-namespace={tag}"),
            format!("--containerd-plugins-namespace={tag}p"),
        ];
        let command = match sees {
            Sees::Paths => {
                // Containers outlive a killed dockerd, so only the server's reaper
                // removes them when it returns.
                args.push("--live-restore".into());
                "nsenter".to_string()
            }
            Sees::Nothing => {
                let data = p("data");
                std::fs::create_dir_all(&data).unwrap();
                let script = format!(
                    "mount -t tmpfs -o size=64m tmpfs /tmp && mount -t tmpfs -o size=2g tmpfs {data} && exec nsenter \"$@\""
                );
                let mut wrapped: Vec<String> = [
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    &script,
                    "sh",
                ]
                .map(str::to_string)
                .to_vec();
                wrapped.append(&mut args);
                args = wrapped;
                "unshare".to_string()
            }
        };
        let mut engine = Engine {
            url: format!("tcp://{engine_ip}:{PORT}"),
            sock: format!("unix://{}", p("docker.sock")),
            dir,
            netns: tag,
            command,
            args,
            daemon: None,
        };
        engine.start();
        engine
    }

    /// Starts its `dockerd` (again) and waits until it answers.
    pub fn start(&mut self) {
        let log = std::fs::File::create(self.dir.join("dockerd.log")).unwrap();
        let child = Command::new(&self.command)
            .args(&self.args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("nsenter dockerd");
        self.daemon = Some(child);
        let up = (0..1200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            self.docker(&["version"]).status.success()
        });
        assert!(
            up,
            "the test engine did not answer: {}",
            std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
        );
    }

    /// Kills its `dockerd` with SIGKILL and waits for it; then its containerd, which
    /// would otherwise linger (a zombie where nothing reaps orphans, which the next
    /// `dockerd` would wait for). The containers' shims go on (`--live-restore`).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let pidfile = self.dir.join("exec/containerd/containerd.pid");
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = std::fs::remove_file(pidfile);
    }

    /// The `docker` CLI asked of this engine.
    pub fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .args(["-H", &self.sock])
            .args(args)
            .output()
            .expect("docker")
    }

    /// The containers it holds with `label`.
    pub fn containers(&self, label: &str) -> Vec<String> {
        containers_labelled_on(Some(&self.sock), label)
    }
}

impl Drop for Engine {
    /// Every container it holds is removed through it, then it is stopped (SIGTERM, up to
    /// twenty seconds); what it started (its containerd, the containers' shims, found
    /// by its directory on their command lines) is killed; what it left mounted is
    /// detached and its namespace deleted. Each step by itself: `pkill -f` run inside a
    /// shell whose own command line holds the pattern would end that shell first.
    fn drop(&mut self) {
        let all = self.docker(&["ps", "-aq"]);
        for id in String::from_utf8_lossy(&all.stdout).split_whitespace() {
            let _ = self.docker(&["rm", "-f", "-v", id]);
        }
        if let Some(mut child) = self.daemon.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let ended = (0..400).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                child.try_wait().is_ok_and(|s| s.is_some())
            });
            if !ended {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let dir = self.dir.display().to_string();
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", &format!("{dir}/exec/containerd/")])
            .output();
        let _ = sh(&format!(
            "findmnt -rn -o TARGET | grep '^{dir}/' | sort -r | xargs -r umount -l"
        ));
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

/// Test engines and the client certificates that reach them.
pub struct Engines {
    pub engines: Vec<Engine>,
    /// `ca.pem`, `cert.pem`, `key.pem` that verify every engine.
    pub good: PathBuf,
    /// The same client, with a CA no engine's certificate comes from.
    pub wrong_ca: PathBuf,
    /// Holds the engines' directories and certificates (dropped after the engines).
    _root: tempfile::TempDir,
}

impl Engines {
    /// `n` engines that see this machine's paths, each holding the slim image.
    pub fn start(n: usize) -> Engines {
        Engines::start_with(n, SLIM, Sees::Paths)
    }

    /// `n` engines seeing `sees`, each holding `image` (of the local engine). Their
    /// files are outside `/tmp`, which an engine of its own mounts covers.
    pub fn start_with(n: usize, image: &str, sees: Sees) -> Engines {
        let root = tempfile::Builder::new()
            .prefix("wdf-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let pki = root.path().join("pki");
        std::fs::create_dir(&pki).unwrap();
        make_ca(&pki, "engine-ca");
        make_ca(&pki, "client-ca");
        make_ca(&pki, "rogue-ca");
        make_cert_for(&pki, "client-ca", "client", "clientAuth", "");
        let layout = |name: &str, ca: &str| {
            let d = root.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::copy(pki.join(format!("{ca}.pem")), d.join("ca.pem")).unwrap();
            std::fs::copy(pki.join("client.pem"), d.join("cert.pem")).unwrap();
            std::fs::copy(pki.join("client-key.pem"), d.join("key.pem")).unwrap();
            d
        };
        let good = layout("good", "engine-ca");
        let wrong_ca = layout("wrong-ca", "rogue-ca");
        let archive = root.path().join("image.tar");
        must(&format!("docker save -o {} {image}", archive.display()));
        let engines: Vec<Engine> = (0..n)
            .map(|_| Engine::new(root.path(), &pki, super::netorigin::subnet().into(), sees))
            .collect();
        for e in &engines {
            let out = e.docker(&["load", "-q", "-i", &archive.display().to_string()]);
            assert!(
                out.status.success(),
                "docker load: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Engines {
            engines,
            good,
            wrong_ca,
            _root: root,
        }
    }

    /// `SANDBOX_DOCKER_HOSTS` for these engines, each with `certs` (by index).
    pub fn hosts(&self, certs: &[&Path]) -> String {
        self.engines
            .iter()
            .zip(certs)
            .map(|(e, c)| format!("{};cert-dir={}", e.url, c.display()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the engine `url` names.
    pub fn index(&self, url: &str) -> usize {
        self.engines
            .iter()
            .position(|e| e.url == url)
            .unwrap_or_else(|| panic!("no test engine {url}"))
    }
}

/// A root server placing sessions on `hosts`.
async fn start(hosts: &str, extra: &[(&str, &str)]) -> Server {
    let mut env = vec![
        ("EXECUTION_BACKEND", "docker"),
        ("SANDBOX_DOCKER_HOSTS", hosts),
        ("SANDBOX_IMAGE", SLIM),
        // The engines are on this machine (they see its paths), reached over TCP.
        ("SANDBOX_LAUNCHER", "bind"),
        ("HOST_SANDBOX", "require"),
    ];
    env.extend_from_slice(extra);
    Server::start(&env).await
}

/// The engine each of the client's sessions runs on, by session.
async fn placement(server: &Server) -> std::collections::BTreeMap<String, String> {
    let settings = server.settings().await;
    settings["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            Some((
                s["session"].as_str()?.to_string(),
                s["engine"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// What `warden://settings` says of each engine.
async fn engines_status(server: &Server) -> Vec<Value> {
    server.settings().await["resolved"]["docker_engines"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The server's label on its containers.
fn label_of(server: &Server) -> String {
    format!("dev.warden.pid={}", server.pid)
}

/// Sessions spread over three engines; one engine's `dockerd` killed (SIGKILL) during a
/// call ends that call and every session on it with an error naming the engine, while
/// new sessions go to the other two; when it returns, the containers this server had
/// there are gone (judged through that engine) and it takes sessions again; then 64
/// sessions at once each get exactly their own output; no container of the server's
/// remains on any engine afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_spread_over_three_engines_and_outlive_losing_one() {
    if !slim_ready() {
        return;
    }
    let mut fleet = Engines::start(3);
    let good = fleet.good.clone();
    let hosts = fleet.hosts(&[&good, &good, &good]);
    let server = start(
        &hosts,
        &[
            ("SANDBOX_POOL_SIZE", "1"),
            ("SANDBOX_MAX_WORKERS", "80"),
            ("SANDBOX_MAX_SESSIONS", "100"),
        ],
    )
    .await;
    let label = label_of(&server);

    // Spread: six sessions, two per engine (each placed where most is free).
    for i in 0..6 {
        let r = server.run(&format!("s{i}"), &format!("print({i})")).await;
        assert_eq!(stdout(&r), format!("{i}\n"), "{r}");
    }
    let placed = placement(&server).await;
    let mut per_engine = vec![0; 3];
    for url in placed.values() {
        per_engine[fleet.index(url)] += 1;
    }
    assert_eq!(per_engine, vec![2, 2, 2], "{placed:?}");
    for e in &fleet.engines {
        assert!(e.containers(&label).len() >= 2, "{}", e.url);
    }

    // Loss: the engine of s0 is killed while s0 runs a call.
    let lost = fleet.index(&placed["s0"]);
    let lost_url = fleet.engines[lost].url.clone();
    let before: Vec<String> = fleet.engines[lost].containers(&label);
    let on_lost: Vec<&String> = placed
        .iter()
        .filter(|(_, url)| **url == lost_url)
        .map(|(s, _)| s)
        .collect();
    let call = server.exec(json!({
        "session": "s0",
        "code": "import time; print('start', flush=True); time.sleep(120)",
        "timeout_s": 300,
    }));
    let killer = async {
        // The call is under way once its first line is out.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        fleet.engines[lost].kill();
    };
    let (r, ()) = tokio::join!(call, killer);
    assert_eq!(r["error"]["type"], "EngineLost", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains(&lost_url),
        "{r}"
    );
    for s in &on_lost {
        let r = server.run(s, "print('again')").await;
        assert_eq!(r["error"]["type"], "EngineLost", "{s}: {r}");
        assert!(stdout(&r).is_empty(), "{r}");
    }
    let down = engines_status(&server).await;
    assert_eq!(down[lost]["up"], false, "{down:?}");
    for i in 0..6 {
        let name = format!("n{i}");
        let r = server.run(&name, "print('elsewhere')").await;
        assert_eq!(stdout(&r), "elsewhere\n", "{r}");
        assert_ne!(placement(&server).await[&name], lost_url);
    }
    // The sessions on the other engines never noticed.
    for (s, url) in &placed {
        if *url != lost_url {
            let r = server.run(s, "print('still')").await;
            assert_eq!(stdout(&r), "still\n", "{s}: {r}");
        }
    }

    // Return: the engine comes back; this server's containers there are removed, and it
    // takes sessions again.
    fleet.engines[lost].start();
    let mut back = false;
    for _ in 0..600 {
        if engines_status(&server).await[lost]["up"] == true {
            back = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(back, "{:?}", engines_status(&server).await);
    let after = fleet.engines[lost].containers(&label);
    for id in &before {
        assert!(!after.contains(id), "{id} outlived its engine's return");
    }
    let r = server.run("returned", "print('back')").await;
    assert_eq!(stdout(&r), "back\n", "{r}");
    assert_eq!(placement(&server).await["returned"], lost_url);

    // 64 sessions at once: each gets its own output, and every engine some of them.
    let calls = (0..64).map(|i| {
        let code = format!(
            "import sys\nfor k in range(50):\n    print('m{i}-' + str(k))\n    sys.stdout.flush()"
        );
        let server = &server;
        async move { (i, server.run(&format!("m{i}"), &code).await) }
    });
    let results = futures_util::future::join_all(calls).await;
    for (i, r) in &results {
        let want: String = (0..50).map(|k| format!("m{i}-{k}\n")).collect();
        assert_eq!(stdout(r), want, "session m{i}: {r}");
    }
    let placed = placement(&server).await;
    for (n, e) in fleet.engines.iter().enumerate() {
        let here = (0..64)
            .filter(|i| placed.get(&format!("m{i}")) == Some(&e.url))
            .count();
        assert!(here > 0, "no session of 64 went to engine {n}");
    }

    let data = server.stop().await;
    drop(data);
    for e in &fleet.engines {
        assert!(
            e.containers(&label).is_empty(),
            "containers of the server remain on {}",
            e.url
        );
    }
}

/// An engine whose certificate is not from the configured CA is left out, named with
/// the reason; every session goes to the engine that verifies; alone, it runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_behind_a_wrong_ca_is_left_out_and_named() {
    if !slim_ready() {
        return;
    }
    let fleet = Engines::start(2);
    let (good, wrong) = (fleet.good.clone(), fleet.wrong_ca.clone());
    let hosts = fleet.hosts(&[&good, &wrong]);
    let server = start(&hosts, &[("SANDBOX_POOL_SIZE", "0")]).await;
    let status = engines_status(&server).await;
    assert_eq!(status[0]["up"], true, "{status:?}");
    assert_eq!(status[1]["up"], false, "{status:?}");
    assert!(
        status[1]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("UnknownIssuer"),
        "{status:?}"
    );
    for i in 0..3 {
        let r = server.run(&format!("t{i}"), "print('verified')").await;
        assert_eq!(stdout(&r), "verified\n", "{r}");
    }
    let placed = placement(&server).await;
    assert!(
        placed.values().all(|url| *url == fleet.engines[0].url),
        "{placed:?}"
    );
    let label = label_of(&server);
    server.stop().await;
    assert!(fleet.engines[1].containers(&label).is_empty());

    let alone = fleet.hosts(&[&wrong]);
    let server = start(&alone, &[("SANDBOX_POOL_SIZE", "0")]).await;
    let r = server.run("t", "print('ran')").await;
    assert_eq!(r["error"]["type"], "SandboxRefused", "{r}");
    assert!(r.to_string().contains("UnknownIssuer"), "{r}");
    assert!(stdout(&r).is_empty(), "{r}");
    server.stop().await;
}

/// A forwarder on loopback in front of an engine which, once armed, cuts every
/// connection after it has carried [`CUT_AFTER`] bytes from the engine since then: a
/// transfer cut in the middle, as a lost link would cut it.
struct Cutter {
    addr: std::net::SocketAddr,
    armed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    cuts: std::sync::Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

/// Bytes from the engine an armed forwarder lets through per connection.
const CUT_AFTER: u64 = 1 << 20;

impl Cutter {
    async fn start(to: &str) -> Cutter {
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // 0: not armed; else the arming's number (each arming counts afresh).
        let armed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, c, to) = (armed.clone(), cuts.clone(), to.to_string());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (a, c, to) = (a.clone(), c.clone(), to.clone());
                tokio::spawn(async move {
                    if let Ok(engine) = tokio::net::TcpStream::connect(&to).await {
                        forward(client, engine, &a, &c).await;
                    }
                });
            }
        });
        Cutter {
            addr,
            armed,
            cuts,
            task,
        }
    }

    fn arm(&self, on: bool) {
        static ARMINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let value = if on {
            ARMINGS.fetch_add(1, Ordering::SeqCst)
        } else {
            0
        };
        self.armed.store(value, Ordering::SeqCst);
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies both ways until either side ends, or the armed limit cuts the connection.
async fn forward(
    client: tokio::net::TcpStream,
    engine: tokio::net::TcpStream,
    armed: &std::sync::atomic::AtomicU64,
    cuts: &AtomicUsize,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_read, mut client_write) = client.into_split();
    let (mut engine_read, mut engine_write) = engine.into_split();
    let up = tokio::io::copy(&mut client_read, &mut engine_write);
    let down = async {
        let (mut buf, mut since, mut arming) = (vec![0u8; 65536], 0u64, 0u64);
        loop {
            let n = match engine_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let now = armed.load(Ordering::SeqCst);
            if now != arming {
                (arming, since) = (now, 0);
            }
            if arming != 0 {
                since += n as u64;
                if since > CUT_AFTER {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        () = down => {}
    }
}

/// The server's copy of a session's workspace (the only home of the instance).
fn server_copy(data: &Path) -> PathBuf {
    let sessions = data.join("sessions");
    for instance in std::fs::read_dir(&sessions).unwrap() {
        for home in std::fs::read_dir(instance.unwrap().path()).unwrap() {
            let home = home.unwrap().path();
            if home
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("home-")
            {
                return home.join("workspace");
            }
        }
    }
    panic!("no home in {}", sessions.display())
}

/// An engine that cannot see this machine's files (its own mounts, with `/tmp`, where
/// the server's data is, covered; its own data root on a disk of its own; reached over
/// TCP+TLS through a forwarder): under `SANDBOX_WORKSPACE=auto` each session's workspace
/// is a tmpfs volume there, with no host path bound; files come back after each call
/// into the server's copy, which results and resources read; a transfer cut in the
/// middle leaves that copy as it was, with nothing half-written, and the next call
/// brings it whole; a worker's restart keeps the files; a grant of a host path and
/// `install_packages` are refused with the reason; the kept workspace is that copy;
/// nothing of the server's remains on the engine afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_lives_in_the_container_of_an_engine_that_cannot_see_this_machine() {
    if !slim_ready() {
        return;
    }
    let tag = format!("warden-test-launcher:{}", std::process::id());
    let _built =
        super::docker::build_image(tag.clone(), &["--from", SLIM, "--launcher", super::BIN]);
    let fleet = Engines::start_with(1, &tag, Sees::Nothing);
    let engine = &fleet.engines[0];
    let cutter = Cutter::start(engine.url.trim_start_matches("tcp://")).await;
    let hosts = format!("tcp://{};cert-dir={}", cutter.addr, fleet.good.display());
    let server = start(
        &hosts,
        &[
            ("SANDBOX_IMAGE", tag.as_str()),
            ("SANDBOX_LAUNCHER", "image"),
            ("SANDBOX_WORKSPACE", "auto"),
            ("SANDBOX_POOL_SIZE", "0"),
            ("SANDBOX_KEEP_WORKSPACES", "true"),
        ],
    )
    .await;
    let label = label_of(&server);
    let write = "import os\nopen('a.txt', 'w').write('alpha')\nos.makedirs('d', exist_ok=True)\nopen('d/b.bin', 'wb').write(os.urandom(2_000_000))\nos.symlink('/etc/passwd', 'link')\nprint('ok')";
    let r = server.run("w", write).await;
    assert_eq!(stdout(&r), "ok\n", "{r}");
    let files = super::file_paths(&r);
    assert!(
        files.contains(&"a.txt") && files.contains(&"d/b.bin"),
        "{r}"
    );
    assert!(r.to_string().contains("link (a symbolic link)"), "{r}");
    // The worker and the keeper that holds the volume mounted bind nothing of this
    // machine: their workspace is the volume.
    let ids = engine.containers(&label);
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in &ids {
        let out = engine.docker(&["inspect", id]);
        let inspect: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mounts = inspect[0]["Mounts"].as_array().unwrap();
        assert!(mounts.iter().all(|m| m["Type"] != "bind"), "{mounts:?}");
        assert!(
            mounts
                .iter()
                .any(|m| m["Type"] == "volume" && m["Destination"] == "/workspace"),
            "{mounts:?}"
        );
    }
    // Results and resources read the server's copy.
    let copy = server_copy(server.data_dir.path());
    assert_eq!(
        std::fs::read_to_string(copy.join("a.txt")).unwrap(),
        "alpha"
    );
    assert_eq!(
        std::fs::metadata(copy.join("d/b.bin")).unwrap().len(),
        2_000_000
    );
    let read = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "warden://sessions/w/files/a.txt",
        ))
        .await
        .unwrap();
    assert!(format!("{read:?}").contains("alpha"), "{read:?}");

    // A transfer cut in the middle: the copy stays as it was, nothing half-written.
    cutter.arm(true);
    let r = server
        .run(
            "w",
            "open('c.bin', 'wb').write(bytes(3_000_000))\nprint('c')",
        )
        .await;
    cutter.arm(false);
    assert_eq!(stdout(&r), "c\n", "{r}");
    assert!(
        cutter.cuts.load(Ordering::SeqCst) > 0,
        "nothing was cut: {r}"
    );
    assert!(r.to_string().contains("was not refreshed"), "{r}");
    assert!(
        !copy.join("c.bin").exists(),
        "a cut transfer reached the copy"
    );
    let home = copy.parent().unwrap();
    let leftovers: Vec<String> = std::fs::read_dir(home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("incoming"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let r = server.run("w", "print('after')").await;
    assert_eq!(stdout(&r), "after\n", "{r}");
    assert!(!r.to_string().contains("was not refreshed"), "{r}");
    assert_eq!(
        std::fs::metadata(copy.join("c.bin")).unwrap().len(),
        3_000_000
    );

    // The volume outlives a worker's restart; a removal comes back too.
    let r = server
        .exec(json!({"session": "w", "code": "import time; time.sleep(30)", "timeout_s": 1}))
        .await;
    assert_eq!(r["status"], "timeout", "{r}");
    let r = server
        .run(
            "w",
            "import os\nos.remove('a.txt')\nprint(sorted(os.listdir('.')))",
        )
        .await;
    assert_eq!(stdout(&r), "['c.bin', 'd', 'link']\n", "{r}");
    assert!(!copy.join("a.txt").exists());

    // What needs this machine's paths is refused, with the reason.
    let data = tempfile::tempdir_in("/var/tmp").unwrap();
    let granted = server
        .call(
            "request_grant",
            json!({"path": data.path(), "access": "read", "reason": "the task reads it", "session": "w"}),
        )
        .await
        .unwrap()
        .structured_content
        .unwrap();
    assert_eq!(granted["granted"], false, "{granted}");
    assert!(
        granted
            .to_string()
            .contains("cannot reach this machine's files"),
        "{granted}"
    );
    let installed = server
        .call(
            "install_packages",
            json!({"session": "w", "packages": ["six"]}),
        )
        .await
        .unwrap()
        .structured_content
        .unwrap();
    assert_eq!(
        installed["error"]["type"], "PackagesUnsupported",
        "{installed}"
    );

    // Kept at shutdown: the server's copy is what is kept.
    let data = server.stop().await;
    let kept: Vec<PathBuf> = std::fs::read_dir(data.path().join("kept"))
        .unwrap()
        .flat_map(|instance| std::fs::read_dir(instance.unwrap().path()).unwrap())
        .map(|k| k.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        std::fs::metadata(kept[0].join("c.bin")).unwrap().len(),
        3_000_000
    );
    assert!(kept[0].join("d/b.bin").is_file() && !kept[0].join("a.txt").exists());
    assert!(engine.containers(&label).is_empty());
    let out = engine.docker(&["volume", "ls", "-q", "--filter", &format!("label={label}")]);
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "volumes remain: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
