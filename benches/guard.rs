//! Guard speed on 1,000 lines of ordinary analysis code (the benign corpus,
//! repeated). Prints p50/p95/max per check. Target (DESIGN §9): <= 1 ms.
//! Run with `cargo bench --bench guard`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use warden::guard::{CheckContext, Decision, Guard};

fn corpus_1000_lines() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/benign");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    let texts: Vec<String> = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut out = String::new();
    let mut lines = 0;
    'outer: loop {
        for t in &texts {
            for line in t.lines() {
                out.push_str(line);
                out.push('\n');
                lines += 1;
            }
            if lines >= 1000 {
                break 'outer;
            }
        }
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn main() {
    let guard = Guard::with_default_policy().unwrap();
    let ctx = CheckContext {
        workspace: PathBuf::from("/var/lib/warden/sessions/bench"),
        allowed_roots: vec![],
    };
    let src = corpus_1000_lines();
    let lines = src.lines().count();
    let verdict = guard.check(src.as_bytes(), &ctx);
    assert_eq!(verdict.decision, Decision::Allowed, "{verdict:#?}");

    for _ in 0..20 {
        let _ = guard.check(src.as_bytes(), &ctx);
    }
    let iterations = 300;
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        let v = guard.check(src.as_bytes(), &ctx);
        times.push(t.elapsed());
        std::hint::black_box(v);
    }
    times.sort();
    println!(
        "guard check, {lines} lines / {} bytes, {iterations} runs: p50 {:?}  p95 {:?}  max {:?}",
        src.len(),
        percentile(&times, 0.50),
        percentile(&times, 0.95),
        times[times.len() - 1],
    );

    // Baseline: rustpython-parser alone on the same text (the guard's floor).
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        let parsed =
            <rustpython_parser::ast::Suite as rustpython_parser::Parse>::parse(&src, "<bench>");
        std::hint::black_box(&parsed);
        drop(parsed);
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "parser alone (rustpython-parser 0.4), same text: p50 {:?}  p95 {:?}",
        percentile(&times, 0.50),
        percentile(&times, 0.95)
    );

    // Same for one typical 30-line submission.
    let small: String = src.lines().take(30).map(|l| format!("{l}\n")).collect();
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        std::hint::black_box(guard.check(small.as_bytes(), &ctx));
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "guard check, 30 lines: p50 {:?}  p95 {:?}",
        percentile(&times, 0.50),
        percentile(&times, 0.95)
    );
}
