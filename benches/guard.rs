//! Guard speed: a typical 20-line cell, 1,000 and 10,000 lines of ordinary
//! analysis code (the benign corpus, repeated), each as a cache miss (source
//! never seen: decode, depth scan, parse, walk, insert, up to the verdict: the
//! server frees the tree after it has passed the verdict on) and as a cache hit
//! (the same source again), plus ruff's parser alone on the same text: the
//! floor a miss cannot go below. Prints p50/p95 per check, of the wall clock
//! and of the thread's CPU time (shallow code is checked on the calling
//! thread; deep code goes to a parse thread, whose CPU time is not counted).
//! Target (DESIGN §9, #12): <= 1 ms per 1,000 lines.
//!
//! The reference is native CPython in process (`support/cpython.rs`), timed in
//! the same run on the same text: `ast.parse`, and `compile()`, which the
//! worker runs on every cell before any of it runs. A miss is reported as a
//! ratio to each, which says more than a time on a machine whose speed drifts.
//!
//! Run with `cargo bench --bench guard`; `WARDEN_BENCH_QUICK=1` runs a tenth
//! of the iterations. `cargo bench --bench guard -- --profile-miss N` only
//! checks N never-seen variants of the 1,000 lines and prints nothing: a
//! fixed amount of work for `valgrind --tool=callgrind`, whose instruction
//! counts do not depend on the machine's load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use warden::guard::{CheckContext, Decision, Guard, VerdictCache};

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/cpython.rs"]
mod cpython;

fn corpus_lines(n: usize) -> String {
    corpus::benign_lines(n, "")
}

/// The first complete statements of the corpus, about `n` lines.
fn cell(n: usize) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/benign/35_pandas_groupby.py"),
    )
    .unwrap();
    let mut out = String::new();
    for line in text
        .lines()
        .chain(std::iter::repeat("total = sum(range(10))"))
    {
        out.push_str(line);
        out.push('\n');
        if out.lines().count() >= n {
            break;
        }
    }
    out
}

struct Stats {
    p50: Duration,
    p95: Duration,
    /// The same for the CPU time of this thread: on a machine shared with
    /// other work the wall clock counts the time the thread waited for a
    /// core, the thread's CPU time does not.
    cpu_p50: Duration,
    cpu_p95: Duration,
}

/// CPU time this thread has used (other systems: not measured, 0).
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn thread_cpu() -> Duration {
    Duration::ZERO
}

/// CPU time this thread has used.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // every Linux kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `f` a tenth of `iterations` to warm up, then `iterations` timed
/// runs; `f` gets a counter that never repeats over both. What `f` returns
/// is dropped after its run is timed (a miss's syntax tree, which the server
/// frees after it has passed the verdict on).
fn measure<R>(iterations: usize, mut f: impl FnMut(usize) -> R) -> Stats {
    let warm = iterations.div_ceil(10);
    for i in 0..warm {
        f(i);
    }
    let mut runs = Vec::with_capacity(iterations);
    for i in warm..warm + iterations {
        let c = thread_cpu();
        let t = Instant::now();
        let left = f(i);
        runs.push((t.elapsed(), thread_cpu().saturating_sub(c)));
        drop(left);
    }
    stats(runs)
}

/// Two functions measured as [`measure`] does, their calls alternated.
fn measure_pair<R>(
    iterations: usize,
    mut a: impl FnMut(usize) -> R,
    mut b: impl FnMut(usize) -> R,
) -> (Stats, Stats) {
    let mut runs: [Vec<(Duration, Duration)>; 2] = [Vec::new(), Vec::new()];
    let warm = iterations.div_ceil(10);
    for i in 0..warm + iterations {
        for (which, runs) in runs.iter_mut().enumerate() {
            let c = thread_cpu();
            let t = Instant::now();
            let left = if which == 0 { a(i) } else { b(i) };
            if i >= warm {
                runs.push((t.elapsed(), thread_cpu().saturating_sub(c)));
            }
            drop(left);
        }
    }
    let [ra, rb] = runs;
    (stats(ra), stats(rb))
}

fn stats(runs: Vec<(Duration, Duration)>) -> Stats {
    let (mut times, mut cpu): (Vec<Duration>, Vec<Duration>) = runs.into_iter().unzip();
    times.sort();
    cpu.sort();
    let at = |v: &[Duration], p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    Stats {
        p50: at(&times, 0.50),
        p95: at(&times, 0.95),
        cpu_p50: at(&cpu, 0.50),
        cpu_p95: at(&cpu, 0.95),
    }
}

fn row(what: &str, s: &Stats) {
    println!(
        "{what:<48} p50 {:>10.3?}  p95 {:>10.3?}   cpu p50 {:>10.3?}  p95 {:>10.3?}",
        s.p50, s.p95, s.cpu_p50, s.cpu_p95
    );
}

impl From<cpython::Percentiles> for Stats {
    fn from(p: cpython::Percentiles) -> Stats {
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        Stats {
            p50: ms(p.p50_ms),
            p95: ms(p.p95_ms),
            cpu_p50: ms(p.cpu_p50_ms),
            cpu_p95: ms(p.cpu_p95_ms),
        }
    }
}

/// The miss as a multiple of a native step, by wall-clock and by CPU p50.
fn ratio_row(what: &str, miss: &Stats, native: &Stats) {
    let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "{what:<48} {:.2}× wall p50, {:.2}× cpu p50",
        r(miss.p50, native.p50),
        r(miss.cpu_p50, native.cpu_p50)
    );
}

/// `--profile-miss N`: N cache misses on the 1,000 lines, nothing else.
fn profile_miss(guard: &Guard, ctx: &CheckContext) -> bool {
    let args: Vec<String> = std::env::args().collect();
    let Some(at) = args.iter().position(|a| a == "--profile-miss") else {
        return false;
    };
    let n: usize = args.get(at + 1).and_then(|n| n.parse().ok()).unwrap_or(10);
    let src = corpus_lines(1000);
    let cache = VerdictCache::default();
    for i in 0..n {
        let s = format!("{src}# run {i}\n");
        let v = cache.check(guard, s.as_bytes(), ctx);
        assert_eq!(v.decision, Decision::Allowed);
    }
    true
}

fn main() {
    let quick = std::env::var_os("WARDEN_BENCH_QUICK").is_some();
    let scale = |n: usize| if quick { n.div_ceil(10) } else { n };
    let guard = Guard::with_default_policy().unwrap();
    let ctx = CheckContext {
        workspace: PathBuf::from("/var/lib/warden/sessions/bench"),
        allowed_roots: vec![],
    };
    if profile_miss(&guard, &ctx) {
        return;
    }
    for (label, src, runs) in [
        ("20-line cell", cell(20), scale(3000)),
        ("1,000 lines", corpus_lines(1000), scale(400)),
        ("10,000 lines", corpus_lines(10_000), scale(60)),
    ] {
        let lines = src.lines().count();
        let v = guard.check(src.as_bytes(), &ctx);
        assert_eq!(v.decision, Decision::Allowed, "{v:#?}");
        println!("{label}: {lines} lines, {} bytes", src.len());

        // A miss: a source the cache has never seen (a comment makes each
        // one unique), checked and inserted as the session manager does.
        let cache = VerdictCache::default();
        let variants: Vec<String> = (0..runs + runs.div_ceil(10))
            .map(|i| format!("{src}# run {i}\n"))
            .collect();
        // Checks variant `i`, as the session manager does (the tree is
        // handed back, to be freed once the run is timed).
        let miss = |guard: &Guard, cache: &VerdictCache, i: usize| {
            std::hint::black_box(cache.check_deferring_free(guard, variants[i].as_bytes(), &ctx))
        };
        let stats = measure(runs, |i| miss(&guard, &cache, i));
        row("  guard, cache miss", &stats);
        if src.len() >= warden::guard::SPLIT_MIN_BYTES {
            // The same misses with the source parsed whole on one thread, and
            // again split, calls alternated so that a shared machine's load
            // falls on both alike.
            let whole_guard = guard.clone().split_large_sources(false);
            let (whole_cache, split_cache) = (VerdictCache::default(), VerdictCache::default());
            let (whole, split) = measure_pair(
                runs,
                |i| miss(&whole_guard, &whole_cache, i),
                |i| miss(&guard, &split_cache, i),
            );
            row("  guard, cache miss, parsed whole (alternated)", &whole);
            row("  guard, cache miss, in two parts (alternated)", &split);
        }

        let hit = measure(runs * 4, |_| {
            std::hint::black_box(cache.check(&guard, src.as_bytes(), &ctx));
        });
        row("  guard, cache hit", &hit);

        let parse = measure(runs, |_| {
            std::hint::black_box(ruff_python_parser::parse_module(&src))
        });
        row("  ruff parser alone (the floor of a miss)", &parse);

        let native = cpython::front_end(&src, runs);
        let (ast_parse, compile) = (Stats::from(native.parse), Stats::from(native.compile));
        row("  native CPython ast.parse, in process", &ast_parse);
        row("  native CPython compile(), in process", &compile);
        ratio_row("  cache miss / native ast.parse", &stats, &ast_parse);
        ratio_row("  cache miss / native compile()", &stats, &compile);
    }
}
