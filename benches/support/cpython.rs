//! Native in-process CPython, the reference every bench reports beside warden's figure:
//! one long-running interpreter timing the same work on itself, with no IPC, no sandbox
//! and no process start. The code goes to it on stdin, never as an argument: a 10,000-line
//! cell is larger than the kernel takes as one argument (`MAX_ARG_STRLEN`, 128 KiB).
// Each bench that includes this module uses part of it.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

pub const PYTHON: &str = "/usr/bin/python3";

/// Runs `script` in [`PYTHON`] with `stdin` as its standard input and `args` after it,
/// and returns what it printed as JSON.
fn run_json(script: &str, args: &[String], stdin: &str) -> Value {
    let mut child = Command::new(PYTHON)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Written whole before the output is read: the scripts read all of stdin first. A
    // failed write is reported after the child's own error, which says why.
    let written = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    written.unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// p50 in ms of `code` compiled and executed `n` times in one interpreter, stdout sent to
/// a buffer, into one namespace kept across runs (a session's cells share one).
pub fn exec_p50_ms(code: &str, n: usize) -> f64 {
    let script = r#"
import contextlib, io, json, sys, time
code, n = sys.stdin.read(), int(sys.argv[1])
ns, samples = {}, []
for _ in range(n):
    buf = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<cell>", "exec"), ns)
    samples.append(time.perf_counter() - t)
samples.sort()
print(json.dumps(samples[len(samples) // 2] * 1000))
"#;
    run_json(script, &[n.to_string()], code).as_f64().unwrap()
}

/// CPython's own front end on one source, in ms, wall clock and the thread's CPU time.
#[derive(Debug, Clone, Copy)]
pub struct FrontEnd {
    /// `ast.parse`: CPython's parser, and its tree made into Python objects.
    pub parse: Percentiles,
    /// `compile(src, "<cell>", "exec")`: parser, compiler and optimiser to a code object,
    /// what the worker does with every cell before it runs a line of it.
    pub compile: Percentiles,
}

#[derive(Debug, Clone, Copy)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub cpu_p50_ms: f64,
    pub cpu_p95_ms: f64,
}

/// Times `ast.parse` and `compile` of `src`, `n` times each (after a tenth as many to
/// warm up), the two alternated so that a shared machine's load falls on both alike.
pub fn front_end(src: &str, n: usize) -> FrontEnd {
    let script = r#"
import ast, json, sys, time
src, n = sys.stdin.read(), int(sys.argv[1])
steps = {"parse": lambda: ast.parse(src), "compile": lambda: compile(src, "<cell>", "exec")}
runs = {k: [] for k in steps}
for i in range(n + (n + 9) // 10):
    for k, step in steps.items():
        c, t = time.thread_time_ns(), time.perf_counter_ns()
        step()
        wall, cpu = time.perf_counter_ns() - t, time.thread_time_ns() - c
        if i >= (n + 9) // 10:
            runs[k].append((wall, cpu))
def pct(v, p):
    v = sorted(v)
    return v[round((len(v) - 1) * p)] / 1e6
out = {}
for k, r in runs.items():
    wall, cpu = [w for w, _ in r], [c for _, c in r]
    out[k] = [pct(wall, .5), pct(wall, .95), pct(cpu, .5), pct(cpu, .95)]
print(json.dumps(out))
"#;
    let v = run_json(script, &[n.to_string()], src);
    let get = |k: &str| {
        let f = |i: usize| v[k][i].as_f64().unwrap();
        Percentiles {
            p50_ms: f(0),
            p95_ms: f(1),
            cpu_p50_ms: f(2),
            cpu_p95_ms: f(3),
        }
    };
    FrontEnd {
        parse: get("parse"),
        compile: get("compile"),
    }
}
