//! The per-session disk quota (#14): each session's workspace is a tmpfs of
//! `SANDBOX_DISK_LIMIT` held by the workspace keeper (and /tmp a smaller private one), so
//! a session that fills it gets ENOSPC inside Python as it writes, while other sessions,
//! the audit log and the real disk never notice. The quota here is small (8 MiB):
//! nothing touches the real disk.

use super::{As, Net, Server, both_modes, find_files, stdout};

pub(super) const FILL: &str = r#"import errno, os
written = 0
try:
    with open("big.bin", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20))
            f.flush()
            written += 1
except OSError as e:
    print("ENOSPC" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "other %d" % e.errno, written)
"#;

async fn start(who: As) -> Server {
    Server::start_as(
        who,
        Net::Host,
        &[("CODEGUARD", "off"), ("SANDBOX_DISK_LIMIT", "8m")],
    )
    .await
}

#[tokio::test]
async fn a_full_session_gets_enospc_while_others_and_the_audit_log_keep_working() {
    for who in both_modes() {
        let server = start(who).await;
        let r = server.run("hog", FILL).await;
        let out = stdout(&r);
        let written: u64 = out
            .strip_prefix("ENOSPC ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{who:?}: no ENOSPC inside Python: {r}"));
        assert!((6..=8).contains(&written), "{who:?}: {written} MiB: {r}");
        // /tmp is a private tmpfs of its own, capped too (a quarter of the quota, at
        // least 16 MiB).
        let r = server
            .run("hog", "try:\n    open('/tmp/more', 'wb').write(b'y' * (17 << 20))\nexcept OSError as e:\n    print(e.errno)")
            .await;
        assert_eq!(stdout(&r), "28\n", "{who:?}: {r}");
        // Another session is untouched, and so is the server (its audit log too).
        let r = server
            .run(
                "other",
                "open('fine.bin', 'wb').write(b'z' * (2 << 20)); print('ok')",
            )
            .await;
        assert_eq!(stdout(&r), "ok\n", "{who:?}: {r}");
        assert_eq!(r["files"][0]["path"], "fine.bin", "{who:?}: {r}");
        let r = server
            .run("hog", "import os; os.remove('big.bin'); print('freed')")
            .await;
        assert_eq!(stdout(&r), "freed\n", "{who:?}: {r}");
        // The session's bytes never were in the data directory on the real disk.
        assert!(
            find_files(server.data_dir.path(), "big.bin").is_empty()
                && find_files(server.data_dir.path(), "fine.bin").is_empty(),
            "{who:?}: workspace files on the host's disk"
        );
        let data = server.stop().await;
        // The audit log took every record and is intact.
        let verify = std::process::Command::new(super::BIN)
            .arg("audit-verify")
            .env("SANDBOX_DATA_DIR", data.path())
            .output()
            .unwrap();
        let records = std::fs::read_dir(data.path().join("audit"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .map(|t| t.lines().count())
            .sum::<usize>();
        assert!(records >= 4, "{who:?}: {records} audit records for 4 calls");
        let said = String::from_utf8_lossy(&verify.stdout);
        assert!(said.contains("the chain is unbroken"), "{who:?}: {said}");
        assert!(
            verify.status.success(),
            "{who:?}: {}{}",
            String::from_utf8_lossy(&verify.stdout),
            String::from_utf8_lossy(&verify.stderr)
        );
    }
}

#[tokio::test]
async fn an_inode_bomb_ends_at_the_quota_and_the_session_recovers() {
    for who in both_modes() {
        let server = start(who).await;
        let r = server
            .run(
                "bomb",
                "import os\nn = 0\ntry:\n    while True:\n        open('f%d' % n, 'w').close()\n        n += 1\nexcept OSError as e:\n    print(e.errno, n < 5000)",
            )
            .await;
        assert_eq!(stdout(&r), "28 True\n", "{who:?}: {r}");
        let r = server
            .run("bomb", "print(len(__import__('os').listdir('.')))")
            .await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        server.stop().await;
    }
}
