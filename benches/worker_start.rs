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

/// Wall time and CPU time (this process's children) of `runs` starts of `args`.
fn measure(args: &[String], runs: usize) -> (Vec<Duration>, f64, bool) {
    let mut walls = Vec::new();
    let cpu_before = children_cpu_ms();
    let mut ok = true;
    for _ in 0..runs {
        let t = Instant::now();
        let status = std::process::Command::new(PYTHON)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        walls.push(t.elapsed());
        ok &= status.success();
    }
    let cpu = (children_cpu_ms() - cpu_before) / runs as f64;
    (walls, cpu, ok)
}

fn children_cpu_ms() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN covers the waited-for children.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

fn main() {
    let runs = n(60, 15);
    let path = format!("import sys; sys.path.extend({:?})", site_dirs());
    let variants: Vec<(&str, Vec<String>, String)> = vec![
        ("-I (site, .pth files)", vec!["-I".into()], String::new()),
        (
            "-I -S, sys.path given",
            vec!["-I".into(), "-S".into()],
            format!("{path}; "),
        ),
    ];
    println!(
        "Python start ({PYTHON}), {runs} runs each: p50 wall / mean CPU; packages = numpy, pandas, matplotlib import"
    );
    for (flags_name, flags, prefix) in &variants {
        for (what, body) in [
            ("nothing", "pass"),
            ("eager imports", EAGER),
            ("lazy imports", LAZY),
        ] {
            let mut args = flags.clone();
            args.push("-B".into());
            args.push("-c".into());
            args.push(format!("{prefix}{body}"));
            let (walls, cpu, ok) = measure(&args, runs);
            let s = stats(&walls);
            println!(
                "{flags_name:<24} {what:<14} p50={:>7.2} ms  cpu={cpu:>6.2} ms{}",
                s.p50_ms,
                if ok { "" } else { "  (FAILED)" }
            );
        }
        let mut args = flags.clone();
        args.extend(["-B".into(), "-c".into(), format!("{prefix}{PACKAGES}")]);
        let (_, _, ok) = measure(&args, 1);
        println!(
            "{flags_name:<24} packages       {}",
            if ok { "import" } else { "FAIL to import" }
        );
    }
}
