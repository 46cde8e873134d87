//! Asking the client's model for the ActionJudge's verdict (what a verdict is, the prompt,
//! the breaker and the cache are in [`crate::judge`]): through MCP sampling, within
//! [`judge::TIMEOUT`], on this connection's own breaker and cache, every verdict and
//! failure in the audit log. The flows that take irreversible actions call
//! [`WardenServer::judge`] before they ask the person.
//!
//! Sampling is marked deprecated in rmcp (SEP-2577, like roots); it is what MCP clients
//! offer today, so it is used until its replacement is.
#![allow(deprecated)]

use std::time::Instant;

use rmcp::RoleServer;
use rmcp::model::{
    CreateMessageRequest, CreateMessageRequestParams, ModelHint, ModelPreferences, SamplingMessage,
    ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext};
use serde_json::json;

use super::{WardenServer, http};
use crate::judge::{self, Action, Gate, JudgeMode, Judgement, Verdict};
use crate::owner::SessionKey;

impl WardenServer {
    /// Why this client has no judge, or `None` when it has one.
    fn judge_absent(&self, ctx: &RequestContext<RoleServer>) -> Option<String> {
        let transport = self.transport(ctx);
        if self.sessions.settings().judge == JudgeMode::Off {
            return Some("SANDBOX_JUDGE=off".to_string());
        }
        if transport == http::Transport::HttpStateless {
            return Some(
                "this client uses stateless HTTP, in which warden cannot ask the client anything"
                    .to_string(),
            );
        }
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        if modern {
            return Some(
                "this client speaks the 2026-07-28 protocol, in which a server cannot ask the \
                 client's model during a call"
                    .to_string(),
            );
        }
        let sampling = ctx
            .client_capabilities()
            .is_some_and(|caps| caps.sampling.is_some());
        (!sampling).then(|| {
            "this client did not declare sampling, so there is no model to ask: no judge"
                .to_string()
        })
    }

    /// The judge as `warden://settings` shows it for this connection.
    pub(super) fn judge_document(&self, ctx: &RequestContext<RoleServer>) -> serde_json::Value {
        let absent = self.judge_absent(ctx);
        json!({
            "mode": self.sessions.settings().judge,
            "active": absent.is_none(),
            "why_not": absent,
            "timeout_ms": judge::TIMEOUT.as_millis() as u64,
            "breaker": {
                "failures": judge::BREAKER_FAILURES,
                "cool_down_s": judge::BREAKER_COOL_DOWN.as_secs(),
            },
            "cache": {
                "entries": judge::CACHE_ENTRIES,
                "ttl_s": judge::CACHE_TTL.as_secs(),
            },
            "status": self.judge.status(Instant::now()),
        })
    }

    /// The judge's word on `action` before it is taken, recorded in the audit log;
    /// `None` when this connection has no judge. Never an error: a judge that fails,
    /// fails open, and the judgement says so.
    pub(super) async fn judge(
        &self,
        ctx: &RequestContext<RoleServer>,
        key: &SessionKey,
        action: Action,
    ) -> Option<Judgement> {
        if self.judge_absent(ctx).is_some() {
            return None;
        }
        let (question, cache_key) = judge::prompt(&action);
        let judgement = match self.judge.gate(&cache_key, Instant::now()) {
            Gate::Cached(verdict, reason) => Judgement {
                verdict,
                reason,
                failed_open: false,
                cached: true,
                model: None,
            },
            Gate::Open(left) => Judgement::failed(format!(
                "skipped: {} answers in a row failed, so warden does not ask again for {} s",
                judge::BREAKER_FAILURES,
                left.as_secs().max(1)
            )),
            Gate::Ask => match ask_model(&ctx.peer, question).await {
                Ok((verdict, reason, model)) => {
                    self.judge
                        .answered(&cache_key, verdict, &reason, Instant::now());
                    Judgement {
                        verdict,
                        reason,
                        failed_open: false,
                        cached: false,
                        model: Some(model),
                    }
                }
                Err(why) => {
                    let opened = self.judge.failed(Instant::now());
                    let then = if opened {
                        format!(
                            "; after {} failures in a row it is not asked for {} s",
                            judge::BREAKER_FAILURES,
                            judge::BREAKER_COOL_DOWN.as_secs()
                        )
                    } else {
                        String::new()
                    };
                    Judgement::failed(format!("{why}{then}"))
                }
            },
        };
        self.audit_judgement(key, &action, &cache_key, &judgement);
        Some(judgement)
    }

    fn audit_judgement(
        &self,
        key: &SessionKey,
        action: &Action,
        cache_key: &str,
        judgement: &Judgement,
    ) {
        let decision = match judgement.failed_open {
            true => "failed-open",
            false => judgement.verdict.name(),
        };
        let what = serde_json::to_string(&action.arguments).unwrap_or_default();
        let event = crate::audit::AuditEvent {
            detail: format!(
                "{} {}: {}{}",
                serde_json::to_value(action.action)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                crate::text::one_line(&what, 300).0,
                crate::text::one_line(&judgement.reason, judge::MAX_REASON_CHARS).0,
                if judgement.cached { " (cached)" } else { "" },
            ),
            args_sha256: Some(cache_key.to_string()),
            enforced: judgement.blocks(),
            ..crate::audit::AuditEvent::now(&key.to_string(), "judge", decision)
        };
        if let Err(e) = self.sessions.audit().record(event) {
            tracing::warn!(error = %e, "the judge's verdict could not be audited");
        }
    }
}

/// What a tool answers when the judge blocked its action.
pub(super) fn refusal(judgement: &Judgement) -> String {
    format!(
        "refused without asking the user: warden asked the client's model for a second \
         opinion (SANDBOX_JUDGE=advisory) and it answered block — {}",
        crate::text::quoted_one_line(&judgement.reason, judge::MAX_REASON_CHARS).0
    )
}

/// `question` with the judge's word on it, when there is one, last and set apart.
pub(super) fn with_judgement(question: String, judgement: Option<&Judgement>) -> String {
    match judgement {
        Some(j) => format!("{question}\n\n---- a second opinion ----\n{}", j.shown()),
        None => question,
    }
}

/// One sampling request with the fixed prompt: the verdict, its reason and the model
/// that answered, or why there is none.
async fn ask_model(
    peer: &Peer<RoleServer>,
    question: String,
) -> Result<(Verdict, String, String), String> {
    // A budget tier: the cheapest, fastest model the client has.
    let preferences = ModelPreferences::new()
        .with_hints(vec![ModelHint::new("haiku"), ModelHint::new("mini")])
        .with_cost_priority(1.0)
        .with_speed_priority(1.0)
        .with_intelligence_priority(0.2);
    let params = CreateMessageRequestParams::new(
        vec![SamplingMessage::user_text(question)],
        judge::MAX_TOKENS,
    )
    .with_system_prompt(judge::SYSTEM_PROMPT)
    .with_model_preferences(preferences)
    .with_temperature(0.0);
    let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
    let options = PeerRequestOptions::with_timeout(judge::TIMEOUT);
    let sent = peer
        .send_request_with_option(request, options)
        .await
        .map_err(|e| format!("the sampling request could not be sent: {e}"))?;
    let answer = match sent.await_response().await {
        Ok(rmcp::model::ClientResult::CreateMessageResult(answer)) => answer,
        Ok(_) => return Err("the client answered sampling with something else".to_string()),
        Err(rmcp::service::ServiceError::Timeout { .. }) => {
            return Err(format!(
                "no answer within {} s",
                judge::TIMEOUT.as_secs_f32()
            ));
        }
        Err(e) => {
            let (e, _) = crate::text::one_line(&e.to_string(), 200);
            return Err(format!("the client's sampling failed: {e}"));
        }
    };
    let text: String = answer
        .message
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n");
    let (model, _) = crate::text::one_line(&answer.model, 100);
    let (verdict, reason) = judge::parse(&text).map_err(|why| format!("not a verdict: {why}"))?;
    Ok((verdict, reason, model))
}
