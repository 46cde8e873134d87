//! The workspace change report's cost on a warm call, through a real MCP client (rmcp
//! over stdio) against the release binary: `print(1+1)` in an empty workspace, in one of
//! 10,000 files, a call that rewrites one file of the 10,000 (the report must name
//! exactly it), and (full mode only) `print(1+1)` in one of 100,000 files. Then what
//! undo costs: transactional calls beside the same calls made plainly (one file changed
//! in 10,000; 1,000 changed and rolled back), `checkpoint` of a 100 MiB workspace beside
//! `cp -a` of the same tree on a tmpfs, and `restore` after 1,000 changed files. Run with
//! `cargo bench --bench workspace`; `WARDEN_BENCH_QUICK=1` takes fewer samples. Prints
//! p50/p95 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, row, stats};

async fn call(client: &Client, session: &str, code: &str) -> Value {
    client
        .tool(
            "execute_python",
            json!({"code": code, "session": session, "timeout_s": 120}),
        )
        .await
}

async fn timed(
    client: &Client,
    session: &str,
    code: &str,
    runs: usize,
    check: impl Fn(&Value),
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let r = call(client, session, code).await;
        out.push(t.elapsed());
        check(&r);
    }
    out
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let runs = support::n(500, 50);
    let client = Client::warden(&[]).await;

    let ok = |r: &Value| assert_eq!(r["stdout"], "2\n", "{r}");
    call(&client, "empty", "print(1 + 1)").await;
    let empty = timed(&client, "empty", "print(1 + 1)", runs, ok).await;
    row(
        "warm print(1+1), empty workspace",
        stats(&empty),
        None,
        None,
    );

    let made = call(
        &client,
        "big",
        "from pathlib import Path\nfor d in range(100):\n    p = Path(f'd{d:02}')\n    p.mkdir()\n    for f in range(100):\n        (p / f'f{f:02}.csv').write_text('a,b\\n1,2\\n')\nprint('made')",
    )
    .await;
    assert_eq!(made["files_total"], 10_000, "{made}");
    let big = timed(&client, "big", "print(1 + 1)", runs, |r| {
        ok(r);
        assert_eq!(r["files_total"], 0, "{r}");
    })
    .await;
    row(
        "warm print(1+1), 10,000 files in the workspace",
        stats(&big),
        None,
        None,
    );
    let rewrite = timed(
        &client,
        "big",
        "from pathlib import Path\nPath('d42/f42.csv').write_text('x')",
        runs,
        |r| {
            assert_eq!(r["files_total"], 1, "{r}");
            assert_eq!(r["files"][0]["path"], "d42/f42.csv", "{r}");
        },
    )
    .await;
    row(
        "rewrite one file of 10,000 (reported exactly)",
        stats(&rewrite),
        None,
        None,
    );
    transactions(&client, runs).await;
    #[cfg(target_os = "linux")]
    rollback_alone();
    if !support::quick() {
        // Ten times more (empty files: inodes, no pages), to show the cost stays flat.
        let made = call(
            &client,
            "huge",
            "from pathlib import Path\nfor d in range(1000):\n    p = Path(f'd{d:03}')\n    p.mkdir()\n    for f in range(100):\n        (p / f'f{f:02}').touch()\nprint('made')",
        )
        .await;
        assert_eq!(made["files_total"], 100_000, "{made}");
        let huge = timed(&client, "huge", "print(1 + 1)", runs, |r| {
            ok(r);
            assert_eq!(r["files_total"], 0, "{r}");
        })
        .await;
        row(
            "warm print(1+1), 100,000 files in the workspace",
            stats(&huge),
            None,
            None,
        );
    }
    client.stop().await;
    checkpoints().await;
}

/// A call as `call` makes it, transactional or not.
async fn call_txn(client: &Client, session: &str, code: &str, transactional: bool) -> Value {
    client
        .tool(
            "execute_python",
            json!({"code": code, "session": session, "timeout_s": 120, "transactional": transactional}),
        )
        .await
}

/// What a transaction adds: the rewrite of one file of the 10,000 in session `big`,
/// transactional and not; then a call that changes 1,000 files and raises,
/// rolled back and not.
async fn transactions(client: &Client, runs: usize) {
    let rewrite = "from pathlib import Path\nPath('d42/f42.csv').write_text('x')";
    // In blocks, not in turns: what a transactional call cleans up after its result goes
    // out would otherwise land on a plain call made right after it.
    let (mut plain, mut txn) = (Vec::new(), Vec::new());
    for (transactional, into) in [(false, &mut plain), (true, &mut txn)] {
        for _ in 0..runs / 2 {
            let t = Instant::now();
            let r = call_txn(client, "big", rewrite, transactional).await;
            into.push(t.elapsed());
            assert_eq!(r["status"], "ok", "{r}");
        }
    }
    let (plain, txn) = (stats(&plain), stats(&txn));
    row(
        "rewrite one file of 10,000, transactional (vs the same call not)",
        txn,
        Some(plain),
        None,
    );
    println!(
        "  added by a transaction, 1 file changed in 10,000: {:.2} ms (p50); target ≤ 1 ms",
        txn.p50_ms - plain.p50_ms
    );
    let made = call(
        client,
        "rb",
        "from pathlib import Path\nfor i in range(1000):\n    Path(f'f{i:04}.csv').write_text('a,b\\n1,2\\n')\nprint('made')",
    )
    .await;
    assert_eq!(made["stdout"], "made\n", "{made}");
    // The transactional call changes every file and is rolled back; the plain one
    // writes the same bytes as are there (as much writing, nothing to undo later).
    let fail = "from pathlib import Path\nfor i in range(1000):\n    Path(f'f{i:04}.csv').write_text('changed')\nraise ValueError('no')";
    let same = "from pathlib import Path\nfor i in range(1000):\n    Path(f'f{i:04}.csv').write_text('a,b\\n1,2\\n')\nraise ValueError('no')";
    let (mut plain, mut txn) = (Vec::new(), Vec::new());
    for _ in 0..support::n(20, 5) {
        let t = Instant::now();
        let r = call_txn(client, "rb", fail, true).await;
        txn.push(t.elapsed());
        assert_eq!(r["undone_total"], 1000, "{r}");
        let t = Instant::now();
        let r = call_txn(client, "rb", same, false).await;
        plain.push(t.elapsed());
        assert_eq!(r["files_total"], 1000, "{r}");
    }
    let (plain, txn) = (stats(&plain), stats(&txn));
    row(
        "a call that changes 1,000 files and raises, rolled back (vs not)",
        txn,
        Some(plain),
        None,
    );
    println!(
        "  journaling and rollback of 1,000 changed files, end to end: {:.1} ms added (p50)",
        txn.p50_ms - plain.p50_ms
    );
}

/// The rollback step alone: the journal of a call that rewrote 1,000 files of a tmpfs
/// directory (what the supervisor notes before each write), put back; beside the
/// baseline of writing those files once.
#[cfg(target_os = "linux")]
fn rollback_alone() {
    use std::os::fd::AsFd;
    use warden::workspace::journal::Journal;
    let dir = |p: &std::path::Path| {
        rustix::fs::open(
            p,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap()
    };
    let shm = tempfile::Builder::new()
        .prefix("warden-bench-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let (ws, aside) = (shm.path().join("ws"), shm.path().join("aside"));
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&aside).unwrap();
    let names: Vec<String> = (0..1000).map(|i| format!("f{i:04}.csv")).collect();
    let (mut back, mut write) = (Vec::new(), Vec::new());
    for _ in 0..support::n(20, 5) {
        let t = Instant::now();
        for n in &names {
            std::fs::write(ws.join(n), "a,b\n1,2\n").unwrap();
        }
        write.push(t.elapsed());
        let mut journal = Journal::new(dir(&ws), dir(&aside), None).unwrap();
        for n in &names {
            let file = rustix::fs::open(
                ws.join(n).as_path(),
                rustix::fs::OFlags::PATH,
                rustix::fs::Mode::empty(),
            )
            .unwrap();
            journal.before_write(file.as_fd(), n.as_bytes()).unwrap();
            std::fs::write(ws.join(n), "changed").unwrap();
        }
        let t = Instant::now();
        let report = journal.roll_back().unwrap();
        back.push(t.elapsed());
        assert_eq!(report.changes.len(), 1000);
    }
    let (back, write) = (stats(&back), stats(&write));
    row(
        "rollback alone of 1,000 rewritten files (vs writing them)",
        back,
        Some(write),
        None,
    );
    println!(
        "  rollback of 1,000 changed files: {:.1} ms (p50); target ≤ 50 ms",
        back.p50_ms
    );
}

/// The same 100 files of 1 MiB, written by the code in the workspace and here in `dir`.
const HUNDRED_MIB: &str = "import random\nfor i in range(100):\n    open(f'part{i:03}.bin', 'wb').write(random.randbytes(1 << 20))\nprint('made')";

fn hundred_mib(dir: &std::path::Path) {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..100 {
        let data: Vec<u8> = (0..(1usize << 20))
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        std::fs::write(dir.join(format!("part{i:03}.bin")), data).unwrap();
    }
}

/// `checkpoint` of a 100 MiB workspace, interleaved with `cp -a` of the same tree from
/// one tmpfs directory to another; and `restore` after 1,000 of 1,000 small files changed.
async fn checkpoints() {
    let client = Client::warden(&[
        ("SANDBOX_DISK_LIMIT", "2g"),
        ("SANDBOX_MAX_CHECKPOINTS", "64"),
    ])
    .await;
    let made = call(&client, "cp", HUNDRED_MIB).await;
    assert_eq!(made["stdout"], "made\n", "{made}");
    let shm = tempfile::Builder::new()
        .prefix("warden-bench-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let src = shm.path().join("src");
    std::fs::create_dir(&src).unwrap();
    hundred_mib(&src);
    let (mut ours, mut cp) = (Vec::new(), Vec::new());
    for i in 0..support::n(7, 3) {
        let t = Instant::now();
        let r = client
            .tool(
                "checkpoint",
                json!({"session": "cp", "name": format!("c{i}")}),
            )
            .await;
        ours.push(t.elapsed());
        assert_eq!(r["checkpoint"]["bytes"], 100 << 20, "{r}");
        let dst = shm.path().join(format!("dst{i}"));
        let t = Instant::now();
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(&dst)
            .status()
            .unwrap();
        cp.push(t.elapsed());
        assert!(status.success());
        std::fs::remove_dir_all(&dst).unwrap();
    }
    let (ours, cp) = (stats(&ours), stats(&cp));
    row(
        "checkpoint of a 100 MiB workspace (100 files) vs cp -a on tmpfs",
        ours,
        Some(cp),
        None,
    );
    println!(
        "  checkpoint of 100 MiB: {:.2}× cp -a of it (p50); target ≤ 0.2×",
        ours.p50_ms / cp.p50_ms
    );
    let made = call(
        &client,
        "rb",
        "from pathlib import Path\nfor i in range(1000):\n    Path(f'f{i:04}.csv').write_text('a,b\\n1,2\\n')\nprint('made')",
    )
    .await;
    assert_eq!(made["stdout"], "made\n", "{made}");
    let r = client
        .tool("checkpoint", json!({"session": "rb", "name": "base"}))
        .await;
    assert_eq!(r["ok"], true, "{r}");
    let mut restores = Vec::new();
    for _ in 0..support::n(20, 5) {
        let changed = call(
            &client,
            "rb",
            "from pathlib import Path\nfor i in range(1000):\n    Path(f'f{i:04}.csv').write_text('changed')",
        )
        .await;
        assert_eq!(changed["files_total"], 1000, "{changed}");
        let t = Instant::now();
        let r = client
            .tool("restore", json!({"session": "rb", "name": "base"}))
            .await;
        restores.push(t.elapsed());
        assert_eq!(r["changes_total"], 1000, "{r}");
    }
    let restores = stats(&restores);
    row(
        "restore after 1,000 of 1,000 files changed",
        restores,
        None,
        None,
    );
    println!(
        "  restore of 1,000 changed files: {:.1} ms (p50); target ≤ 50 ms",
        restores.p50_ms
    );
    client.stop().await;
}
