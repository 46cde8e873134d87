//! The audit log: every execution, guard block and selftest is recorded in a hash
//! chain under the data directory; `warden audit-verify` checks it and catches edits.

use serde_json::Value;

use super::{BIN, Server};

#[tokio::test]
async fn executions_and_blocks_are_recorded_in_a_verifiable_chain() {
    let server = Server::start(&[("CODEGUARD", "enforce")]).await;
    server.run("a", "print('hello')").await;
    server.run("a", "import subprocess").await;
    server
        .call("selftest", serde_json::json!({}))
        .await
        .unwrap();
    let path = server.data_dir.path().join("audit.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
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
            ("execute", "ok"),
            ("guard", "blocked"),
            ("execute", "error"),
            ("selftest", "passed")
        ],
        "{text}"
    );
    assert_eq!(lines[1]["rule"], "blocked_module");
    assert!(
        !text.contains("print('hello')"),
        "code is hashed, not stored"
    );
    assert_eq!(lines[1]["prev"], lines[0]["hash"]);

    let verify = |p: &std::path::Path| {
        std::process::Command::new(BIN)
            .args(["audit-verify", p.to_str().unwrap()])
            .output()
            .unwrap()
    };
    assert!(verify(&path).status.success());
    let copy = server.data_dir.path().join("tampered.jsonl");
    std::fs::write(&copy, text.replacen("blocked_module", "allowed_module", 1)).unwrap();
    let out = verify(&copy);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
    server.stop().await;
}
