//! What the private world (#8) costs: the first call of a new session (a worker started
//! from nothing, no warm pool) and a warm call, for this release binary beside an
//! earlier warden binary built without the world (`WARDEN_BENCH_BEFORE=/path/to/warden`:
//! Landlock, seccomp, network and IPC namespaces only), driven by the same rmcp client
//! over stdio in the same run; and, for this binary, the first call of a new session
//! when the warm pool (the default) has a worker ready.
//!
//! The two servers run side by side and their calls alternate, so a load change on a
//! shared machine falls on both alike. Without `WARDEN_BENCH_BEFORE` only this binary is
//! measured. `cargo bench --bench walls`; `WARDEN_BENCH_QUICK=1` takes fewer samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{Client, n, row, stats};

const PRINT: &str = "print(1+1)";

fn main() {
    support::bench_main(run);
}

async fn run() {
    let before = std::env::var_os("WARDEN_BENCH_BEFORE").map(PathBuf::from);
    println!(
        "cost of the walls: release build, host backend, rmcp client over stdio, no warm pool, {} mode",
        if support::quick() { "quick" } else { "full" }
    );
    let now = Path::new(env!("CARGO_BIN_EXE_warden"));
    let mut servers = vec![("this build", now.to_path_buf())];
    match before {
        Some(bin) => servers.insert(0, ("before (WARDEN_BENCH_BEFORE)", bin)),
        None => println!("WARDEN_BENCH_BEFORE is not set: this build only"),
    }
    let mut clients = Vec::new();
    for (_, bin) in &servers {
        clients.push(Client::warden_at(bin, &[("SANDBOX_WARM_WORKERS", "0")]).await);
    }

    let mut first: Vec<Vec<Duration>> = vec![Vec::new(); clients.len()];
    for i in 0..n(40, 10) {
        for (c, client) in clients.iter().enumerate() {
            first[c].push(client.timed(&format!("new{i}"), PRINT, Some("2\n")).await);
        }
    }
    for client in &clients {
        client.call("warm", PRINT).await;
    }
    let mut warm: Vec<Vec<Duration>> = vec![Vec::new(); clients.len()];
    for _ in 0..n(400, 80) {
        for (c, client) in clients.iter().enumerate() {
            warm[c].push(client.timed("warm", PRINT, Some("2\n")).await);
        }
    }
    for (c, (label, _)) in servers.iter().enumerate() {
        row(
            &format!("{label}: first call"),
            stats(&first[c]),
            None,
            None,
        );
        row(&format!("{label}: warm call"), stats(&warm[c]), None, None);
    }
    for client in clients {
        client.stop().await;
    }

    // What a new session pays by default now: a worker taken from the warm pool.
    let pooled_server = Client::warden(&[]).await;
    let mut pooled = Vec::new();
    for i in 0..n(40, 10) {
        pooled_server.wait_for_pool(2).await;
        pooled.push(
            pooled_server
                .timed(&format!("pooled{i}"), PRINT, Some("2\n"))
                .await,
        );
    }
    row(
        "this build: first call, warm pool ready",
        stats(&pooled),
        None,
        None,
    );
    pooled_server.stop().await;
}
