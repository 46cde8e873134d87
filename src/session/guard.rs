//! The call into the static guard, off the async runtime, and what a blocked verdict
//! becomes in a result.

use std::path::{Path, PathBuf};

use super::SessionManager;
use crate::execution::ErrorInfo;
use crate::guard::{CheckContext, Decision, Guard, Verdict};
use std::sync::Arc;

/// What the guard said, or that it is off.
pub enum GuardOutcome {
    Off,
    Checked(Verdict),
}

/// A verdict the cache did not hold: the check still to run (see
/// [`SessionManager::lookup_code`]).
pub struct PendingCheck {
    guard: Guard,
    cache: Arc<crate::guard::VerdictCache>,
    key: crate::guard::CacheKey,
    source: Box<[u8]>,
    ctx: CheckContext,
}

/// The guard's answer at once (off, or a cached verdict), or the check to run.
pub enum Lookup {
    Done(GuardOutcome),
    Miss(PendingCheck),
}

impl SessionManager {
    /// Runs the guard: a cell under 4 KiB where it is awaited, a larger one on a
    /// blocking thread (`Guard::check` itself moves deep code to a parse thread with a
    /// large stack); a verdict cached for the same source, policy and roots is
    /// answered at once.
    pub async fn check_code(
        &self,
        code: &str,
        workspace: &Path,
        allowed_roots: Vec<PathBuf>,
    ) -> GuardOutcome {
        match self.lookup_code(code, workspace, allowed_roots) {
            Lookup::Done(outcome) => outcome,
            Lookup::Miss(pending) => pending.run().await,
        }
    }

    /// The guard's answer when it needs no check (guard off, verdict cached), else the
    /// check to run: a caller can start other work before it awaits that.
    pub fn lookup_code(&self, code: &str, workspace: &Path, allowed_roots: Vec<PathBuf>) -> Lookup {
        let Some(guard) = self.guard.clone() else {
            return Lookup::Done(GuardOutcome::Off);
        };
        let ctx = CheckContext {
            workspace: workspace.to_path_buf(),
            allowed_roots,
        };
        match self.verdicts.get(&guard, code.as_bytes(), &ctx) {
            Ok(v) => Lookup::Done(GuardOutcome::Checked(v)),
            Err(key) => Lookup::Miss(PendingCheck {
                guard,
                cache: Arc::clone(&self.verdicts),
                key,
                source: code.as_bytes().into(),
                ctx,
            }),
        }
    }
}

/// Below this size a check runs on the calling task (see [`PendingCheck::run`]).
const INLINE_MAX_BYTES: usize = 4096;

impl PendingCheck {
    /// Checks the code (a small cell on this task, a larger one on a blocking thread)
    /// and caches the verdict.
    pub async fn run(self) -> GuardOutcome {
        let PendingCheck {
            guard,
            cache,
            key,
            source,
            ctx,
        } = self;
        // A small cell is checked where it is awaited: its check (tens of microseconds)
        // costs less than waking a blocking thread and waiting for it. `Guard::check`
        // catches its own panics and measures the stack it has.
        if source.len() < INLINE_MAX_BYTES {
            let verdict = guard.check(&source, &ctx);
            cache.insert(key, &guard, source, &ctx, &verdict);
            return GuardOutcome::Checked(verdict);
        }
        // The verdict is sent on before the syntax tree is freed: freeing a large
        // tree takes about a tenth of its check, and the caller need not wait for it.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let check = move || {
            let (verdict, leftovers) = guard.check_deferring_free(&source, &ctx);
            cache.insert(key, &guard, source, &ctx, &verdict);
            let _ = tx.send(verdict);
            drop(leftovers);
        };
        // A blocking task that could not start, or that panicked, drops the sender.
        let started = tokio::task::spawn_blocking(check);
        match rx.await {
            Ok(v) => GuardOutcome::Checked(v),
            Err(_) => GuardOutcome::Checked(Verdict {
                decision: Decision::Blocked,
                retryable_error: false,
                findings: vec![crate::guard::Finding {
                    rule: "internal_error".into(),
                    category: "internal".into(),
                    message: format!("the guard failed: {}", failure(started).await),
                    line: 1,
                    col: 1,
                    snippet: String::new(),
                    tripwire: false,
                }],
                unjudged_modules: Vec::new(),
            }),
        }
    }
}

/// Why a guard task ended without a verdict.
async fn failure(task: tokio::task::JoinHandle<()>) -> String {
    match task.await {
        Err(e) => e.to_string(),
        Ok(()) => "the check ended without a verdict".to_string(),
    }
}

impl SessionManager {
    /// What the guard's policy holds, when the guard is on.
    pub fn guard_summary(&self) -> Option<crate::guard::PolicySummary> {
        self.guard.as_ref().map(Guard::policy_summary)
    }
}

pub(super) fn summarize(v: &Verdict) -> String {
    v.findings
        .iter()
        .take(5)
        .map(|f| format!("{} at line {}: {}", f.rule, f.line, f.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The error a blocked verdict becomes: a syntax error is the agent's to fix and retry;
/// a violation says which rule and where.
pub(super) fn guard_error(v: &Verdict) -> ErrorInfo {
    let first = v.findings.first();
    let kind = match (v.retryable_error, first.map(|f| f.rule.as_str())) {
        (true, Some("syntax_error")) => "SyntaxError",
        (true, _) => "InputRejected",
        (false, _) => "GuardBlocked",
    };
    let message = if v.retryable_error {
        format!("{} (fix the code and call again)", summarize(v))
    } else {
        format!(
            "the static guard blocked this code before it ran: {}",
            summarize(v)
        )
    };
    ErrorInfo::new(kind, message)
}
