//! What the audit log records of each `execute_python` call's outcome: one record per
//! call, plus a guard record when the guard blocked it (the `start` record written before
//! the call runs is in [`SessionManager::execute_streaming`]).

use super::SessionManager;
use crate::config::GuardMode;
use crate::execution::ExecResult;
use crate::guard::{Decision, Verdict};

impl SessionManager {
    pub fn audit(&self) -> &crate::audit::AuditLog {
        &self.audit
    }

    /// The audit records of an `execute_python` call's outcome.
    pub(super) fn audit_execution(
        &self,
        session: &str,
        code: &str,
        result: &ExecResult,
    ) -> Result<(), crate::audit::AuditError> {
        let enforce = self.settings.codeguard == GuardMode::Enforce;
        let blocked = result
            .guard
            .as_ref()
            .is_some_and(|v| v.decision == Decision::Blocked);
        let rule = result
            .guard
            .as_ref()
            .and_then(|v| v.findings.first())
            .map(|f| f.rule.clone())
            // A call a cap refused names the cap's setting.
            .or_else(|| {
                let cap = result.error.as_ref().and_then(|e| e.cap.as_ref());
                cap.map(|c| c.setting.clone())
            });
        let kill_run = result.guard.as_ref().is_some_and(Verdict::tripwire) && enforce;
        let status = serde_json::to_value(result.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let detail = result
            .error
            .as_ref()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.kind,
                    e.message.chars().take(300).collect::<String>()
                )
            })
            .unwrap_or_default();
        let base = crate::audit::AuditEvent {
            rule,
            detail,
            args_sha256: Some(crate::audit::sha256_hex(code.as_bytes())),
            enforced: enforce,
            kill_run,
            ..crate::audit::AuditEvent::now(session, "execute", &status)
        };
        if blocked {
            self.audit.record(crate::audit::AuditEvent {
                phase: "guard".into(),
                decision: "blocked".into(),
                ..base.clone()
            })?;
        }
        self.audit.record(crate::audit::AuditEvent {
            duration_ms: Some(result.duration_ms),
            ..base
        })
    }
}
