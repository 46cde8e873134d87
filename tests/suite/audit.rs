//! The audit log: every execution, guard block, grant and selftest is recorded in a keyed
//! chain under the data directory, shared by every server of one user; `warden
//! audit-verify` checks it and names the first bad record; a broken log never stops a
//! server; a call whose record cannot be written is refused.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use serde_json::{Value, json};

use super::{BIN, Net, Server, Tmpfs, server_command};

/// The live segments' records, in order.
pub fn records(data: &Path) -> Vec<Value> {
    let dir = data.join("audit");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.ends_with(".jsonl") && !n.contains("broken")
        })
        .collect();
    names.sort();
    names
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn audit_verify(path: &Path) -> (bool, String) {
    let out = std::process::Command::new(BIN)
        .args(["audit-verify", path.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn executions_and_blocks_are_recorded_in_a_verifiable_chain() {
    let server = Server::start(&[("CODEGUARD", "enforce")]).await;
    server.run("a", "print('hello')").await;
    server.run("a", "import subprocess").await;
    server
        .call("selftest", serde_json::json!({}))
        .await
        .unwrap();
    let lines = records(server.data_dir.path());
    let phases: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["phase"].as_str().unwrap(),
                l["decision"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        phases,
        [
            ("audit", "start"),
            ("execute", "start"),
            ("execute", "ok"),
            ("execute", "start"),
            ("guard", "blocked"),
            ("execute", "error"),
            ("selftest", "passed")
        ],
        "{lines:?}"
    );
    assert_eq!(lines[4]["rule"], "blocked_module");
    let text = serde_json::to_string(&lines).unwrap();
    assert!(
        !text.contains("print('hello')"),
        "code is hashed, not stored"
    );
    for pair in lines.windows(2) {
        assert_eq!(pair[1]["prev"], pair[0]["mac"]);
        assert_eq!(
            pair[1]["seq"].as_u64(),
            pair[0]["seq"].as_u64().map(|s| s + 1)
        );
    }
    let dir = server.data_dir.path().join("audit");
    let (ok, out) = audit_verify(&dir);
    assert!(ok, "{out}");
    assert!(out.contains("7 records"), "{out}");
    server.stop().await;
}

/// A server sharing `dir` with others, as Claude Desktop and Claude Code each start one.
struct Peer {
    client: RunningService<RoleClient, ()>,
    child: tokio::process::Child,
}

impl Peer {
    async fn start(dir: &Path, env: &[(&str, &str)]) -> Peer {
        let cmd = server_command(Net::Host, env, &[], dir);
        Peer::from_command(cmd, Stdio::inherit()).await
    }

    async fn from_command(cmd: tokio::process::Command, stderr: Stdio) -> Peer {
        let (client, child) = super::connect((), cmd, stderr).await;
        Peer { client, child }
    }

    async fn run(&self, session: &str, code: &str) -> Value {
        let args = json!({"session": session, "code": code});
        let Value::Object(map) = args else { panic!() };
        self.client
            .call_tool(CallToolRequestParams::new("execute_python").with_arguments(map))
            .await
            .unwrap()
            .structured_content
            .unwrap()
    }

    /// Closes stdin and waits for the server to exit on its own (it checkpoints the log
    /// last), however long a loaded machine makes that.
    async fn stop(mut self) {
        let _ = self.client.cancel().await;
        let _ = self.child.wait().await;
    }
}

async fn servers_share_one_log(n: usize) {
    let data = super::data_dir();
    let peers = futures::future::join_all((0..n).map(|_| Peer::start(data.path(), &[]))).await;
    let calls = peers.iter().enumerate().flat_map(|(i, p)| {
        (0..3).map(move |s| async move {
            for c in 0..4 {
                let r = p
                    .run(&format!("s{s}"), &format!("print({i} * 100 + {c})"))
                    .await;
                assert_eq!(r["stdout"], format!("{}\n", i * 100 + c), "{r}");
                assert!(!r["warnings"].to_string().contains("audit"), "{r}");
            }
        })
    });
    futures::future::join_all(calls).await;
    futures::future::join_all(peers.into_iter().map(Peer::stop)).await;
    // A fresh server starts on the shared log without a warning.
    let fresh = Peer::start(data.path(), &[]).await;
    let r = fresh.run("after", "print('fresh')").await;
    assert_eq!(r["stdout"], "fresh\n");
    assert!(!r["warnings"].to_string().contains("audit"), "{r}");
    fresh.stop().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (ok, out) = audit_verify(&data.path().join("audit"));
    assert!(ok, "{out}");
    // The genesis note, then a start and an outcome record per call.
    let expected = 1 + 2 * (n * 3 * 4 + 1);
    assert!(out.contains(&format!("{expected} records")), "{out}");
    let lines = records(data.path());
    let instances: std::collections::BTreeSet<&str> = lines
        .iter()
        .map(|l| l["instance"].as_str().unwrap())
        .collect();
    assert_eq!(instances.len(), n + 1, "every server wrote its own records");
}

#[tokio::test]
async fn two_servers_share_one_log() {
    servers_share_one_log(2).await;
}

#[tokio::test]
async fn four_servers_share_one_log() {
    servers_share_one_log(4).await;
}

/// A record removed and the chain recomputed with plain SHA-256 (what someone without
/// the key can do): detected; the server still starts, warns in every result and in
/// warden://settings, and audit-verify names the first bad record.
#[tokio::test]
async fn a_hand_edited_log_is_detected_and_the_server_still_starts() {
    let data = super::data_dir();
    let first = Peer::start(data.path(), &[]).await;
    for i in 0..3 {
        first.run("a", &format!("print({i})")).await;
    }
    first.stop().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let segment = data.path().join("audit/00000001.jsonl");
    let text = std::fs::read_to_string(&segment).unwrap();
    let mut prev = "0".repeat(64);
    let mut forged = String::new();
    for (i, line) in text.lines().enumerate() {
        if i == 3 {
            continue; // one record removed
        }
        let mut v: Value = serde_json::from_str(line).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.remove("mac");
        obj.insert("prev".into(), prev.clone().into());
        let body = serde_json::to_string(&v).unwrap();
        prev = warden::audit::sha256_hex(body.as_bytes());
        forged.push_str(&format!(
            "{},\"mac\":\"{prev}\"}}\n",
            &body[..body.len() - 1]
        ));
    }
    std::fs::write(&segment, forged).unwrap();

    let server = Peer::start(data.path(), &[]).await;
    let r = server.run("b", "print('still runs')").await;
    assert_eq!(r["stdout"], "still runs\n", "{r}");
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains("found broken") && warnings.contains("00000001.broken.jsonl"),
        "{r}"
    );
    let r = server.run("b", "print('again')").await;
    assert!(
        r["warnings"].to_string().contains("found broken"),
        "every result warns: {r}"
    );
    let read = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "warden://settings",
        ))
        .await
        .unwrap();
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("text resource expected")
    };
    let doc: Value = serde_json::from_str(text).unwrap();
    assert!(
        doc["warnings"].to_string().contains("found broken"),
        "{doc}"
    );
    server.stop().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let (ok, out) = audit_verify(&data.path().join("audit"));
    assert!(!ok, "{out}");
    assert!(
        out.contains("set aside: 00000001.broken.jsonl: first bad record: line 1:")
            && out.contains("MAC"),
        "{out}"
    );
    assert!(out.contains("recorded break"), "{out}");
    // The set-aside file checked on its own names the same record.
    let (ok, out) = audit_verify(&data.path().join("audit/00000001.broken.jsonl"));
    assert!(!ok && out.contains("BROKEN at line 1:"), "{out}");
}

/// Fills the filesystem holding `dir` (a small tmpfs, never the real disk).
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&[0u8; 512]).is_ok() {}
    path
}

/// When the audit record cannot be written (the disk is full), the call is refused
/// with a clear error and nothing runs; once there is space again, calls work.
#[tokio::test]
async fn a_call_whose_record_cannot_be_written_is_refused() {
    let tmpfs = Tmpfs::mount("4m");
    let server = Peer::start(tmpfs.path(), &[]).await;
    let r = server.run("a", "print('before')").await;
    assert_eq!(r["stdout"], "before\n", "{r}");
    let filler = fill(tmpfs.path());
    // The segment's last page may still hold a few records: call until it is full.
    let mut refused = None;
    for _ in 0..64 {
        let r = server.run("a", "print('ran')").await;
        if r["error"]["type"] == "AuditUnavailable" {
            refused = Some(r);
            break;
        }
    }
    let r = refused.expect("a call was refused once the disk was full");
    assert_eq!(r["status"], "error");
    assert_eq!(r["stdout"], "", "nothing ran: {r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("No space left on device") && message.contains("nothing ran"),
        "{message}"
    );
    std::fs::remove_file(filler).unwrap();
    let r = server.run("a", "print('after')").await;
    assert_eq!(r["stdout"], "after\n", "{r}");
    server.stop().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (ok, out) = audit_verify(&tmpfs.path().join("audit"));
    assert!(ok, "no half-written record stayed behind: {out}");
}

/// The same when the server's file size limit stops the log growing: the write fails
/// (the server is not killed by SIGXFSZ) and the call is refused.
/// Its stderr is a file already past that limit, so its own log lines cannot be written
/// either: they are lost, and no call is.
#[tokio::test]
async fn a_file_size_limit_refuses_calls_instead_of_killing_the_server() {
    let data = super::data_dir();
    let stderr_file = data.path().join("stderr.log");
    std::fs::write(&stderr_file, vec![b'.'; 32 << 10]).unwrap();
    let stderr = std::fs::OpenOptions::new()
        .append(true)
        .open(&stderr_file)
        .unwrap();
    let mut cmd = tokio::process::Command::new("prlimit");
    cmd.args(["--fsize=24576:unlimited", "--", BIN, "serve"])
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_PYTHON", "/usr/bin/python3")
        .env("CODEGUARD", "off");
    let server = Peer::from_command(cmd, Stdio::from(stderr)).await;
    let mut refused = None;
    for i in 0..100 {
        let r = server.run("a", &format!("print({i})")).await;
        if r["error"]["type"] == "AuditUnavailable" {
            refused = Some((i, r));
            break;
        }
        assert_eq!(r["stdout"], format!("{i}\n"), "{r}");
    }
    let (i, r) = refused.expect("the log reached the limit");
    assert!(i > 5, "calls ran until the limit: {i}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("File too large"),
        "{r}"
    );
    // Still alive and still refusing: nothing runs unaudited.
    let r = server.run("a", "print('x')").await;
    assert_eq!(r["error"]["type"], "AuditUnavailable", "{r}");
    server.stop().await;
    let (ok, out) = audit_verify(&data.path().join("audit"));
    assert!(ok, "{out}");
}
