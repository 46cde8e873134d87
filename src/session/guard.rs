//! The call into the static guard, off the async runtime, and what a blocked verdict
//! becomes in a result; the modules nobody judged that a session imported.

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
    /// The guard's answer when it needs no check (guard off, verdict cached), else the
    /// check to run: a caller can start other work before it awaits that.
    pub fn lookup_code(
        &self,
        owner: &crate::owner::Owner,
        code: &str,
        workspace: &Path,
        allowed_roots: Vec<PathBuf>,
    ) -> Lookup {
        let Some(guard) = self.guard_of(owner) else {
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

/// Unjudged modules a session lists at most in `warden://settings`.
pub const UNJUDGED_SHOWN: usize = 64;

/// The top-level modules nobody judged that a session's code imported: bounded, so
/// that code importing many names cannot grow the settings document.
#[derive(Debug, Default, Clone)]
pub struct UnjudgedSeen {
    pub modules: std::collections::BTreeSet<String>,
    /// Imports of modules not kept once [`UNJUDGED_SHOWN`] were.
    pub omitted: u64,
}

impl UnjudgedSeen {
    fn note(&mut self, names: &[String]) {
        for name in names {
            if self.modules.contains(name) {
                continue;
            }
            if self.modules.len() < UNJUDGED_SHOWN {
                self.modules.insert(name.clone());
            } else {
                self.omitted = self.omitted.saturating_add(1);
            }
        }
    }
}

impl super::Session {
    /// Notes the unjudged modules of a verdict (whatever `[modules] unjudged` made of
    /// them).
    pub(super) fn note_unjudged(&self, verdict: &Verdict) {
        if verdict.unjudged_modules.is_empty() {
            return;
        }
        if let Ok(mut seen) = self.unjudged.lock() {
            seen.note(&verdict.unjudged_modules);
        }
    }

    /// What [`Session::note_unjudged`] has kept.
    pub(super) fn unjudged_seen(&self) -> UnjudgedSeen {
        self.unjudged.lock().map(|s| s.clone()).unwrap_or_default()
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
    /// What the policy checking `owner`'s code holds (a listed client's own, else the
    /// server's), when the guard is on.
    pub fn guard_summary(
        &self,
        owner: &crate::owner::Owner,
    ) -> Option<crate::guard::PolicySummary> {
        self.guard_of(owner).as_ref().map(Guard::policy_summary)
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn unjudged_modules_are_kept_once_and_bounded() {
        let mut seen = UnjudgedSeen::default();
        seen.note(&["b".to_string(), "a".to_string(), "b".to_string()]);
        assert_eq!(seen.modules.iter().collect::<Vec<_>>(), ["a", "b"]);
        let many: Vec<String> = (0..UNJUDGED_SHOWN + 5)
            .map(|i| format!("m{i:03}"))
            .collect();
        seen.note(&many);
        assert_eq!(seen.modules.len(), UNJUDGED_SHOWN);
        assert_eq!(seen.omitted, 7);
        // A module already listed is not counted again.
        seen.note(&["a".to_string()]);
        assert_eq!(seen.omitted, 7);
    }
}
