//! What the caps show outside a call: a session's budget (the resource
//! `warden://sessions/{session}/budget`) and the caps part of `warden://settings`.

use serde_json::{Value, json};

use super::SessionManager;
use crate::caps::Remaining;
use crate::owner::{Owner, SessionKey};

impl SessionManager {
    /// The caps in force, and what `owner` has spent over all its sessions.
    pub fn caps_document(&self, owner: &Owner) -> Value {
        let settings = self.caps.settings();
        let spent = self.caps.client_spent(owner);
        json!({
            "session_limits": settings.session,
            "client_limits": settings.client,
            "client_spent": spent,
            "client_remaining": Remaining::of(&settings.client, &spent),
        })
    }

    /// One open session's spending and what is left of its caps and its client's.
    pub fn session_budget(&self, owner: &Owner, name: &str) -> Result<Value, String> {
        let key = SessionKey::new(owner, name);
        let session = self
            .lookup(&key)
            .map_err(|e| e.message)?
            .ok_or_else(|| format!("no open session {name:?}"))?;
        let settings = self.caps.settings();
        let spent = session.spent.spent();
        Ok(json!({
            "session": name,
            "spent": spent,
            "limits": settings.session,
            "remaining": Remaining::of(&settings.session, &spent),
            "client": self.caps_document(owner),
        }))
    }

    /// What is left of one session's caps (`warden://settings`' sessions).
    pub(super) fn session_remaining(&self, session: &super::Session) -> Option<Remaining> {
        let limits = &self.caps.settings().session;
        limits
            .any()
            .then(|| Remaining::of(limits, &session.spent.spent()))
    }
}
