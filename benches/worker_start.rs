//! What a worker's start costs in Python, outside any sandbox, so that the variants can
//! be compared on their own: the interpreter with and without the `site` module (`-S`,
//! which skips `.pth` processing; the worker then gets its `sys.path` explicitly), and
//! the worker's imports eagerly (`ast`, `base64`, `traceback`, ...) or as it does now
//! (`_ast`, and the rest only when first needed). Whether numpy, pandas and matplotlib
//! still import under each variant is printed beside it: a variant that breaks packages
//! is not an option. The whole sandboxed start is in the latency bench ("new session,
//! no warm pool").
//!
//! `cargo bench --bench worker_start`; `WARDEN_BENCH_QUICK=1` takes fewer samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::{PYTHON, n, stats};

/// The worker's imports before lazy imports.
const EAGER: &str = "import ast, base64, builtins, json, linecache, os, sys, traceback, types";
/// What the worker imports at start now.
const LAZY: &str = "import _ast, _thread, builtins, io, json, linecache, os, sys, types";
const PACKAGES: &str = "import numpy, pandas, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot; from mpl_toolkits.mplot3d import Axes3D";

/// `sys.path` entries `site` would add for this interpreter (its site-packages and
/// dist-packages), asked without running `site.main()`.
fn site_dirs() -> Vec<String> {
    let out = std::process::Command::new(PYTHON)
        .args([
            "-I",
            "-S",
            "-c",
            "import site, json; print(json.dumps(site.getsitepackages()))",
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Wall time and CPU time (this process's children) of one start of `args`.
fn once(args: &[String]) -> (Duration, f64, bool) {
    let cpu_before = children_cpu_ms();
    let t = Instant::now();
    let status = std::process::Command::new(PYTHON)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    (
        t.elapsed(),
        children_cpu_ms() - cpu_before,
        status.success(),
    )
}

/// CPU time of the waited-for children (Windows: not measured, 0).
#[cfg(not(unix))]
fn children_cpu_ms() -> f64 {
    0.0
}

#[cfg(unix)]
fn children_cpu_ms() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN covers the waited-for children.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

fn main() {
    let runs = n(200, 20);
    let path = format!("import sys; sys.path.extend({:?})", site_dirs());
    let flags: [(&str, Vec<String>, String); 2] = [
        ("-I (site, .pth files)", vec!["-I".into()], String::new()),
        (
            "-I -S, sys.path given",
            vec!["-I".into(), "-S".into()],
            format!("{path}; "),
        ),
    ];
    let bodies = [
        ("nothing", "pass"),
        ("eager imports", EAGER),
        ("lazy imports", LAZY),
    ];
    let mut variants: Vec<(String, Vec<String>)> = Vec::new();
    for (flags_name, flags, prefix) in &flags {
        for (what, body) in bodies {
            let mut args = flags.clone();
            args.extend(["-B".into(), "-c".into(), format!("{prefix}{body}")]);
            variants.push((format!("{flags_name:<24} {what:<14}"), args));
        }
    }
    // Round-robin, so that a busy moment of a shared machine weighs on every variant alike.
    let mut walls = vec![Vec::new(); variants.len()];
    let mut cpus = vec![Vec::new(); variants.len()];
    let mut failed = vec![false; variants.len()];
    for _ in 0..runs {
        for (i, (_, args)) in variants.iter().enumerate() {
            let (wall, cpu, ok) = once(args);
            walls[i].push(wall);
            cpus[i].push(cpu);
            failed[i] |= !ok;
        }
    }
    println!(
        "Python start ({PYTHON}), {runs} runs each, interleaved: p50 wall / p50 CPU (user+system)"
    );
    for (i, (name, _)) in variants.iter().enumerate() {
        let mut cpu = cpus[i].clone();
        cpu.sort_by(f64::total_cmp);
        println!(
            "{name} p50={:>7.2} ms  cpu p50={:>6.2} ms{}",
            stats(&walls[i]).p50_ms,
            cpu[cpu.len() / 2],
            if failed[i] { "  (FAILED)" } else { "" }
        );
    }
    for (flags_name, flags, prefix) in &flags {
        let mut args = flags.clone();
        args.extend(["-B".into(), "-c".into(), format!("{prefix}{PACKAGES}")]);
        let (_, _, ok) = once(&args);
        println!(
            "{flags_name:<24} numpy, pandas, matplotlib (mpl_toolkits): {}",
            if ok { "import" } else { "FAIL to import" }
        );
    }
}
