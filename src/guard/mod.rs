//! CodeGuard, the static AST guard: the first of warden's two walls.
//!
//! This module owns the guard's public API ([`Guard`], [`CheckContext`],
//! [`Verdict`]) and the order of the checks:
//!
//! 1. size limit, then decoding exactly as CPython would (PEP 263, decode.rs);
//! 2. a pre-parse nesting scan that refuses hostile depth (depth.rs);
//! 3. parsing with ruff's parser and walking the tree (walk/) on a
//!    long-lived thread with a known, large stack (pool.rs), so that no
//!    input can overflow the caller's stack (tokio workers have only 2 MiB);
//! 4. positions and snippets for every finding (lines.rs).
//!
//! What is forbidden is data: the policy (policy.rs, `policies/default.toml`).
//! Path literals (paths.rs), tripwires (tripwire.rs) and string folding
//! (strings.rs) have their own modules. The guard is defence in depth: the
//! OS sandbox must stop whatever it misses.
//!
//! Outcomes: `allowed`; `restricted` (only warn-level findings); `blocked`.
//! Input the guard cannot judge - a syntax error, a non-UTF-8 encoding,
//! code over the size or nesting limits - is `blocked` with
//! `retryable_error: true` and one finding (rule `syntax_error`,
//! `source_encoding`, `source_too_large` or `nesting_too_deep`) that says
//! where and what to fix: it is not a violation, the agent should fix the
//! code and call again.

mod ast;
mod cache;
mod decode;
mod depth;
mod lines;
mod names;
mod paths;
mod policy;
mod pool;
mod render;
mod split;
mod strings;
mod tripwire;
mod walk;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use cache::{CacheStats, Key as CacheKey, VerdictCache};
pub use render::render_human;
pub use split::SPLIT_MIN_BYTES;

use ast::py;
use lines::LineIndex;
use policy::{Action, Policy};

/// The policy compiled into the binary.
pub const DEFAULT_POLICY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/policies/default.toml"
));

/// Re-exports computed from the runtime by tools/guard_reexports.py.
pub const REEXPORTS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/policies/reexports.toml"
));

/// A compiled policy, ready to check code. Cheap to clone and share.
#[derive(Debug, Clone)]
pub struct Guard {
    policy: Arc<Policy>,
    /// SHA-256 of the policy text: part of every cache key.
    digest: [u8; 32],
    pool: Arc<pool::Pool>,
    /// Whether large sources are parsed in two parts at once (split.rs);
    /// off only in tests that compare both ways.
    split: bool,
}

/// Where the checked code will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckContext {
    /// The code's working directory (relative paths are resolved against it).
    pub workspace: PathBuf,
    /// Directories the code may name besides the workspace (user grants).
    /// Runtime directories (interpreter, stdlib) are deliberately not here:
    /// ordinary code never names them, and the OS sandbox lets the runtime
    /// read them.
    pub allowed_roots: Vec<PathBuf>,
}

/// The guard's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Nothing forbidden was found.
    Allowed,
    /// The code may run; some findings are warnings (policy action "warn").
    Restricted,
    /// The code must not run.
    Blocked,
}

/// One thing the guard objects to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// Rule name, as used in the policy's `[actions]` (or a tripwire id).
    pub rule: String,
    /// Family of the rule: module, builtin, internals, reflection, path, ...
    pub category: String,
    /// What is wrong and what to do instead.
    pub message: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub col: u32,
    /// The source line, trimmed (shortened when long).
    pub snippet: String,
    /// A tripwire hit: the server kills the session.
    pub tripwire: bool,
}

/// The result of checking one piece of code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    pub decision: Decision,
    /// True when the code could not be judged (syntax error, encoding, size
    /// or nesting limits): not a violation; fix the code and call again.
    pub retryable_error: bool,
    pub findings: Vec<Finding>,
}

impl Verdict {
    /// True when any finding is a tripwire.
    pub fn tripwire(&self) -> bool {
        self.findings.iter().any(|f| f.tripwire)
    }
}

/// How big the loaded policy is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PolicySummary {
    /// Blocked modules.
    pub modules: usize,
    /// Blocked builtins.
    pub builtins: usize,
    /// Blocked attribute names (internals, module re-exports, dangerous APIs);
    /// every dunder outside `allowed_dunders` is blocked as well.
    pub attributes: usize,
    /// Dunder names that may be read.
    pub allowed_dunders: usize,
    /// Tripwire patterns in force.
    pub tripwires: usize,
    /// Largest accepted source, in bytes.
    pub max_source_bytes: usize,
    /// Deepest accepted bracket or block nesting.
    pub max_nesting_depth: usize,
}

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error(
        "cannot read guard policy {path}: {source}; check SANDBOX_POLICY points at a readable TOML file"
    )]
    ReadPolicy {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "guard policy is not valid TOML or misses a section: {reason}; compare it with policies/default.toml"
    )]
    PolicySyntax { reason: String },
    #[error("guard policy field `{field}` is invalid: {reason}")]
    InvalidPolicy { field: String, reason: String },
}

enum Outcome {
    Findings(Vec<walk::RawFinding>),
    Syntax { offset: usize, message: String },
}

impl Guard {
    /// The embedded policies/default.toml.
    pub fn with_default_policy() -> Result<Guard, GuardError> {
        Guard::from_policy_toml(DEFAULT_POLICY)
    }

    /// A policy given as TOML text.
    pub fn from_policy_toml(text: &str) -> Result<Guard, GuardError> {
        use sha2::Digest;
        Ok(Guard {
            policy: Arc::new(Policy::from_toml(text)?),
            digest: sha2::Sha256::digest(text.as_bytes()).into(),
            pool: Arc::new(pool::Pool::new()),
            split: true,
        })
    }

    /// A policy file on disk.
    pub fn from_policy_file(path: &Path) -> Result<Guard, GuardError> {
        let text = std::fs::read_to_string(path).map_err(|source| GuardError::ReadPolicy {
            path: path.to_path_buf(),
            source,
        })?;
        Guard::from_policy_toml(&text)
    }

    /// Whether sources of [`SPLIT_MIN_BYTES`] and more are parsed in two parts on two
    /// threads at once (the default; see split.rs). Off, every source is
    /// parsed whole: for benchmarks and tests that compare the two.
    pub fn split_large_sources(mut self, on: bool) -> Guard {
        self.split = on;
        self
    }

    /// SHA-256 of the policy text this guard enforces.
    pub fn policy_digest(&self) -> [u8; 32] {
        self.digest
    }

    /// Counts of what the policy forbids.
    pub fn policy_summary(&self) -> PolicySummary {
        let p = &self.policy;
        PolicySummary {
            modules: p.blocked_modules.len(),
            builtins: p.blocked_builtins.len(),
            attributes: p.internals.len() + p.module_reexports.len() + p.dangerous.len(),
            allowed_dunders: p.allowed_dunders.len(),
            tripwires: p.tripwires.len(),
            max_source_bytes: p.limits.max_source_bytes,
            max_nesting_depth: p.limits.max_nesting_depth,
        }
    }

    /// Checks `source`: raw bytes as the client sent them (the guard decodes
    /// like CPython). Never panics and never overflows the caller's stack.
    pub fn check(&self, source: &[u8], ctx: &CheckContext) -> Verdict {
        self.check_deferring_free(source, ctx).0
    }

    /// [`check`](Self::check), with the syntax tree handed back instead of
    /// freed: freeing a large tree node by node takes about a tenth of its
    /// check, and a caller can pass the verdict on before it drops the
    /// [`Leftovers`]. (A tree too deep for the caller's stack is freed where
    /// it was parsed, on a parse thread.)
    pub fn check_deferring_free(&self, source: &[u8], ctx: &CheckContext) -> (Verdict, Leftovers) {
        let mut left = Leftovers::default();
        let verdict = self.check_keeping(source, ctx, &mut left);
        (verdict, left)
    }

    fn check_keeping(&self, source: &[u8], ctx: &CheckContext, left: &mut Leftovers) -> Verdict {
        let limits = self.policy.limits;
        if source.len() > limits.max_source_bytes {
            return refusal(
                "source_too_large",
                "limits",
                format!(
                    "the code is {} bytes; the limit is {} bytes: send smaller pieces",
                    source.len(),
                    limits.max_source_bytes
                ),
                (1, 1),
                String::new(),
            );
        }
        let text = match decode::decode(source) {
            Ok(t) => t,
            Err(e) => {
                return refusal(
                    "source_encoding",
                    "encoding",
                    e.message,
                    (e.line, e.col),
                    String::new(),
                );
            }
        };
        // Lines are only indexed to place a finding: ordinary code has none.
        if let Some(pos) = memchr::memchr(0, text.as_bytes()) {
            let index = LineIndex::new(&text);
            let at = index.position(pos);
            return refusal(
                "syntax_error",
                "syntax",
                "source code cannot contain NUL bytes; remove them".into(),
                at,
                index.snippet(at.0),
            );
        }
        let scan_limits = depth::DepthLimits {
            max_nesting: limits.max_nesting_depth,
            max_chain: limits.max_expression_chain,
        };
        let roots = paths::Roots::new(
            &absolute(&ctx.workspace),
            &ctx.allowed_roots
                .iter()
                .map(|p| absolute(p))
                .collect::<Vec<_>>(),
        );
        if let Some(outcome) = self.check_in_two_parts(&text, &roots, scan_limits, left) {
            return self.verdict(outcome, &text);
        }
        let shallow = depth::scan(&text, depth::small_stack_limits(scan_limits)).is_ok();
        let small = shallow && pool::room_to_check_inline();
        if !shallow && let Err(e) = depth::scan(&text, scan_limits) {
            let index = LineIndex::new(&text);
            let at = index.position(e.offset);
            return refusal(
                "nesting_too_deep",
                "limits",
                e.message,
                at,
                index.snippet(at.0),
            );
        }
        let inline = if small {
            // Shallow code is checked on this thread: a hand-off to a parse
            // thread costs a wake-up, which on a loaded machine is more than
            // the check itself.
            catch_unwind(AssertUnwindSafe(|| {
                parse_and_walk(&text, &self.policy, &roots, Some(&mut *left))
            }))
            .map_err(|p| pool::panic_message(&*p))
            .transpose()
        } else {
            None
        };
        let outcome = match inline {
            Some(outcome) => outcome,
            None => {
                let policy = Arc::clone(&self.policy);
                let owned = text.clone().into_owned();
                self.pool
                    .run(move || parse_and_walk(&owned, &policy, &roots, None))
                    .and_then(|o| {
                        o.ok_or_else(|| "the guard's walk stopped on a parse thread".to_string())
                    })
            }
        };
        self.verdict(outcome, &text)
    }

    /// A large source's check with its parse split over two threads (see
    /// split.rs); `None` when it does not apply, and the caller checks the
    /// source whole.
    fn check_in_two_parts(
        &self,
        text: &str,
        roots: &paths::Roots,
        limits: depth::DepthLimits,
        left: &mut Leftovers,
    ) -> Option<Result<Outcome, String>> {
        if !self.split || text.len() < split::SPLIT_MIN_BYTES || !split::worth_it() {
            return None;
        }
        let shared: Arc<str> = text.into();
        let limits = depth::small_stack_limits(limits);
        catch_unwind(AssertUnwindSafe(|| {
            let parts = split::parse(&shared, limits)?;
            let outcome = walk::walk_parts(
                &[&parts.first, parts.second.stmts()],
                &self.policy,
                roots,
                true,
            )
            .ok()
            .map(Outcome::Findings);
            left.0 = Tree::Parts(parts);
            outcome
        }))
        .map_err(|p| pool::panic_message(&*p))
        .transpose()
    }

    fn verdict(&self, outcome: Result<Outcome, String>, text: &str) -> Verdict {
        match outcome {
            Err(message) => Verdict {
                decision: Decision::Blocked,
                retryable_error: false,
                findings: vec![Finding {
                    rule: "internal_error".into(),
                    category: "internal".into(),
                    message,
                    line: 1,
                    col: 1,
                    snippet: String::new(),
                    tripwire: false,
                }],
            },
            Ok(Outcome::Syntax { offset, message }) => {
                let index = LineIndex::new(text);
                let at = index.position(offset);
                refusal("syntax_error", "syntax", message, at, index.snippet(at.0))
            }
            Ok(Outcome::Findings(raw)) => build_verdict(raw, text, self.policy.limits.max_findings),
        }
    }
}

/// Parses and walks `text`; `None` when the walk ran on the caller's stack
/// (`keep` given: the source passed the small-stack scan, and the tree is
/// handed to `keep` rather than freed) and a code string in it needs a parse
/// thread's stack.
fn parse_and_walk(
    text: &str,
    policy: &Policy,
    roots: &paths::Roots,
    keep: Option<&mut Leftovers>,
) -> Option<Outcome> {
    match walk::parse_suite(text) {
        Ok(module) => {
            let outcome = walk::walk(&module.body, policy, roots, keep.is_some())
                .ok()
                .map(Outcome::Findings);
            if let Some(keep) = keep {
                keep.0 = Tree::Whole(module.body);
            }
            outcome
        }
        Err(e) => Some(Outcome::Syntax {
            offset: e.location.start().to_usize(),
            message: format!("syntax error: {}", e.error),
        }),
    }
}

/// A checked source's syntax tree, freed when this is dropped (see
/// [`Guard::check_deferring_free`]). Only trees that passed the small-stack
/// scan are handed out: dropping one recurses no deeper than parsing it did.
#[derive(Debug, Default)]
pub struct Leftovers(Tree);

/// What a [`Leftovers`] holds: only ever dropped, never read.
#[derive(Debug, Default)]
#[allow(dead_code)]
enum Tree {
    #[default]
    None,
    Whole(py::Suite),
    Parts(split::Parts),
}

fn build_verdict(raw: Vec<walk::RawFinding>, text: &str, max: usize) -> Verdict {
    let decision = if raw.iter().any(|f| f.action == Action::Block) {
        Decision::Blocked
    } else if raw.iter().any(|f| f.action == Action::Warn) {
        Decision::Restricted
    } else {
        Decision::Allowed
    };
    if raw.is_empty() {
        return Verdict {
            decision,
            retryable_error: false,
            findings: Vec::new(),
        };
    }
    let index = LineIndex::new(text);
    // Keep source order, but never truncate away every tripwire.
    let tripwires = raw.iter().filter(|f| f.tripwire).count().min(max);
    let mut others_left = max - tripwires;
    let mut tripwires_left = tripwires;
    let kept = raw.into_iter().filter(|f| {
        let budget = if f.tripwire {
            &mut tripwires_left
        } else {
            &mut others_left
        };
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        true
    });
    let findings = kept
        .map(|f| {
            let (line, col) = index.position(f.offset);
            Finding {
                rule: f.rule,
                category: f.category,
                message: f.message,
                line,
                col,
                snippet: index.snippet(line),
                tripwire: f.tripwire,
            }
        })
        .collect();
    Verdict {
        decision,
        retryable_error: false,
        findings,
    }
}

fn refusal(
    rule: &str,
    category: &str,
    message: String,
    at: (u32, u32),
    snippet: String,
) -> Verdict {
    Verdict {
        decision: Decision::Blocked,
        retryable_error: true,
        findings: vec![Finding {
            rule: rule.into(),
            category: category.into(),
            message,
            line: at.0,
            col: at.1,
            snippet,
            tripwire: false,
        }],
    }
}

/// Makes a path absolute without touching the file system beyond the
/// current directory; falls back to the path as given.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The largest `n` for which `shape(n)` still passes the small-stack scan
    /// (so the guard checks it on the caller's thread).
    fn deepest_small(shape: &dyn Fn(usize) -> String) -> String {
        let passes = |n: usize| depth::scan(&shape(n), depth::SMALL_STACK).is_ok();
        assert!(passes(1), "{}", shape(1));
        let mut n = 1;
        while n < 5000 && passes(n + 1) {
            n += 1;
        }
        shape(n)
    }

    fn nest(open: &str, inner: &str, close: &str, n: usize) -> String {
        format!("{}{inner}{}", open.repeat(n), close.repeat(n))
    }

    /// Every shape that nests the tree, at the deepest the small-stack scan
    /// admits, alone, inside the deepest brackets, and as a pandas query
    /// string inside them (a code string is parsed on the same stack).
    fn small_stack_worst_cases() -> Vec<String> {
        let shapes: Vec<Box<dyn Fn(usize) -> String>> = vec![
            Box::new(|n| format!("x = {}\n", nest("(", "1", ")", n))),
            Box::new(|n| format!("x = {}\n", nest("[", "", "]", n))),
            Box::new(|n| format!("x = {}\n", nest("{", "1", "}", n))),
            Box::new(|n| format!("x = a{}\n", ".b".repeat(n))),
            Box::new(|n| format!("x = f{}\n", "()".repeat(n))),
            Box::new(|n| format!("x = a{}\n", "[0]".repeat(n))),
            Box::new(|n| format!("x = 1{}\n", "+1".repeat(n))),
            Box::new(|n| format!("x = 2{}\n", "**2".repeat(n))),
            Box::new(|n| format!("x = {}y\n", "not ".repeat(n))),
            Box::new(|n| format!("x = {}1\n", "-".repeat(n))),
            Box::new(|n| format!("x = {}1\n", "lambda: ".repeat(n))),
            Box::new(|n| format!("x = {}1\n", "1 if c else ".repeat(n))),
            Box::new(|n| format!("x = {}f\n", "a < ".repeat(n))),
            Box::new(|n| format!("x = {}\n", nest("(a := ", "1", ")", n))),
            Box::new(|n| format!("x = {}\n", nest("f\"{", "1", "}\"", n))),
            Box::new(|n| format!("async def g():\n    return {}1\n", "await ".repeat(n))),
            Box::new(|n| {
                let mut s = String::new();
                for i in 0..n {
                    s.push_str(&" ".repeat(i));
                    s.push_str("if a:\n");
                }
                s.push_str(&" ".repeat(n));
                s.push_str("pass\n");
                s
            }),
            Box::new(|n| format!("if a: pass\n{}", "elif a: pass\n".repeat(n))),
        ];
        let mut out = Vec::new();
        for shape in &shapes {
            let alone = deepest_small(shape.as_ref());
            let body = alone.trim_end().to_string();
            out.push(alone);
            // The same shape inside the deepest brackets the scan admits.
            let wrapped = |n: usize| format!("y = {}\n{body}\n", nest("(", "1", ")", n));
            out.push(deepest_small(&wrapped));
            // And as a query string, parsed as code on the same stack.
            let query = body.strip_prefix("x = ").unwrap_or(&body).replace('"', "'");
            if !query.contains('\n') {
                let q = |n: usize| {
                    format!(
                        "r = df.query({}\"{query}\"{})\n",
                        "(".repeat(n),
                        ")".repeat(n)
                    )
                };
                out.push(deepest_small(&q));
            }
        }
        out
    }

    /// Runs `f` once fewer than `left` bytes of stack remain, measured the
    /// way the guard measures it (a thread's real stack can be larger than
    /// asked for: glibc reuses cached stacks up to four times the size).
    fn with_stack_left_below<R>(left: usize, f: impl FnOnce() -> R) -> R {
        if stacker::remaining_stack().unwrap() < left {
            return f();
        }
        let pad = std::hint::black_box([0u8; 4096]);
        let r = with_stack_left_below(left, f);
        std::hint::black_box(&pad);
        r
    }

    /// Checks every worst shallow case with less than `left` bytes of stack
    /// remaining, which must (or must not) count as room to check inline.
    fn judge_worst_cases_with_stack_left(left: usize, inline: bool) {
        let guard = Guard::with_default_policy().unwrap();
        let cases = small_stack_worst_cases();
        assert!(cases.len() > 40);
        let worker = std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                with_stack_left_below(left, || {
                    assert_eq!(pool::room_to_check_inline(), inline);
                    let ctx = CheckContext {
                        workspace: PathBuf::from("/tmp/w"),
                        allowed_roots: vec![],
                    };
                    for src in &cases {
                        let v = guard.check(src.as_bytes(), &ctx);
                        assert!(
                            v.findings.iter().all(|f| f.rule != "internal_error"),
                            "{src}: {v:?}"
                        );
                    }
                })
            })
            .unwrap();
        worker.join().unwrap();
    }

    #[test]
    fn code_checked_on_the_callers_stack_fits_a_small_stack() {
        // A debug build's frames are several times a release build's, and
        // the callers (tokio's blocking threads, `warden check`) have 2 MiB
        // or more: checked inline with under 448 KiB left, the deepest
        // shallow shapes must fit.
        judge_worst_cases_with_stack_left(448 * 1024, true);
    }

    #[test]
    fn a_caller_short_of_stack_has_its_code_checked_on_a_parse_thread() {
        // The deepest shallow shapes need more than 128 KiB on the caller's
        // stack (see above): checked inline with less room they would
        // overflow it, or make the parser map a stack of its own, which can
        // fail when the machine is short of memory. With less than
        // INLINE_STACK_BYTES left the guard hands them to a parse thread
        // instead, every time.
        judge_worst_cases_with_stack_left(256 * 1024, false);
    }

    /// The `.py` files of a corpus directory, in name order.
    pub(super) fn corpus_texts(dir: &str) -> Vec<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "py"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect()
    }

    #[test]
    fn a_large_source_checked_in_two_parts_gets_the_verdict_of_the_whole() {
        let split = Guard::with_default_policy().unwrap();
        let whole = split.clone().split_large_sources(false);
        let ctx = CheckContext {
            workspace: PathBuf::from("/tmp/w"),
            allowed_roots: vec![],
        };
        // Two copies of `benign` make a source the guard splits.
        let mut benign = corpus_texts("tests/corpus/benign").join("\n");
        while benign.len() < SPLIT_MIN_BYTES / 2 {
            benign = format!("{benign}\n{benign}");
        }
        let mut hostile = corpus_texts("tests/corpus/redteam");
        hostile.extend(corpus_texts("tests/corpus/bypass"));
        let (mut checked, mut blocked) = (0, 0);
        // Each hostile program before, inside and after ordinary code, so
        // that what it does falls in either part.
        for bad in &hostile {
            for text in [
                format!("{bad}\n{benign}{benign}"),
                format!("{benign}{bad}\n{benign}"),
                format!("{benign}{benign}{bad}\n"),
            ] {
                assert!(text.len() >= split::SPLIT_MIN_BYTES);
                let a = split.check(text.as_bytes(), &ctx);
                let b = whole.check(text.as_bytes(), &ctx);
                assert_eq!(a, b, "{bad}");
                checked += 1;
                blocked += usize::from(a.decision == Decision::Blocked);
            }
        }
        // Some red-team programs are the OS layer's to stop (a default
        // temporary file); most are the guard's.
        assert!(
            checked > 100 && blocked * 4 > checked * 3,
            "{blocked} of {checked}"
        );
        // Ordinary code is allowed both ways; a syntax error in the second
        // part is reported where it is, as for the whole source.
        let text = format!("{benign}{benign}");
        assert_eq!(
            split.check(text.as_bytes(), &ctx).decision,
            Decision::Allowed
        );
        let bad = format!("{benign}{benign}x = (1,\n");
        let (a, b) = (
            split.check(bad.as_bytes(), &ctx),
            whole.check(bad.as_bytes(), &ctx),
        );
        assert_eq!(a, b);
        assert_eq!(a.findings[0].rule, "syntax_error");
    }

    #[test]
    fn deep_code_still_goes_to_a_parse_thread_and_is_judged() {
        let guard = Guard::with_default_policy().unwrap();
        let ctx = CheckContext {
            workspace: PathBuf::from("/tmp/w"),
            allowed_roots: vec![],
        };
        // Deeper than the small-stack scan, within the policy's limits.
        let deep = format!("x = {}\n", nest("(", "eval('1')", ")", 60));
        assert!(depth::scan(&deep, depth::SMALL_STACK).is_err());
        let v = guard.check(deep.as_bytes(), &ctx);
        assert_eq!(v.decision, Decision::Blocked);
        assert!(
            v.findings.iter().any(|f| f.rule == "blocked_builtin"),
            "{v:?}"
        );
        // A shallow source whose code string is deeper: the walk on the
        // caller's stack stops and the parse thread judges the whole source.
        let q = format!(
            "r = df.query(\"{}\")\n",
            nest("(", "__import__('os')", ")", 60)
        );
        assert!(depth::scan(&q, depth::SMALL_STACK).is_ok());
        let v = guard.check(q.as_bytes(), &ctx);
        assert_eq!(v.decision, Decision::Blocked, "{v:?}");
        assert!(
            v.findings
                .iter()
                .any(|f| f.rule == "blocked_builtin" && f.message.contains("`.query` string")),
            "{v:?}"
        );
    }
}
