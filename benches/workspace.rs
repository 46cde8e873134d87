//! The workspace change report's cost on a warm call, through a real MCP client (rmcp
//! over stdio) against the release binary: `print(1+1)` in an empty workspace, in one of
//! 10,000 files, a call that rewrites one file of the 10,000 (the report must name
//! exactly it), and (full mode only) `print(1+1)` in one of 100,000 files. Run with `cargo bench --bench workspace`; `WARDEN_BENCH_QUICK=1` takes
//! fewer samples. Prints p50/p95 in milliseconds.
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
}
