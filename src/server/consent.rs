//! Asking the person: whether this client can be asked at all, the question itself, and
//! reading the answer, shared by path and host grants; and the host grant's own flow.
//! Everything the model sent is input to the question, never to the answer.

use rmcp::RoleServer;
use rmcp::service::RequestContext;

use super::{
    CONSENT_TIMEOUT, GrantArgs, GrantDecision, GrantResult, MAX_REASON_CHARS, WardenServer, http,
    judge,
};
use crate::egress::grants::{HostGrant, authority, parse_requested_host};
use crate::egress::rules::Verdict;
use crate::execution::validate_session_name;
use crate::grants::{Access, Grant, Resolved};
use crate::judge::{Action, Judgement};
use crate::owner::SessionKey;

impl WardenServer {
    /// Whether this client can be asked now; the client's name and route for the
    /// grant's record, or the refusal to return, which ends with `pre_approval` (what
    /// the user can do instead).
    pub(super) fn may_elicit(
        &self,
        ctx: &RequestContext<RoleServer>,
        route: &str,
        pre_approval: &str,
    ) -> Result<String, String> {
        if self.transport(ctx) == http::Transport::HttpStateless {
            return Err(format!(
                "refused: this client uses MCP's stateless HTTP protocol, in which warden \
                 cannot ask the user for consent during a call, and only the user can grant \
                 access. To allow it, the user can {pre_approval}."
            ));
        }
        let supports = ctx
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());
        if !supports {
            return Err(format!(
                "refused: this MCP client cannot ask the user for consent (it did not declare \
                 the elicitation capability), and only the user can grant access. To allow it, \
                 the user can {pre_approval}."
            ));
        }
        Ok(ctx
            .client_info()
            .map(|info| format!("{} {}", info.name, info.version))
            .unwrap_or_else(|| "unknown client".to_string())
            + ", "
            + route)
    }

    /// Asks `question`; the approving answer, or what to tell the agent.
    pub(super) async fn ask_person(
        &self,
        ctx: &RequestContext<RoleServer>,
        question: String,
    ) -> Result<GrantDecision, String> {
        let answer = match ctx.extensions.get::<super::tasks::TaskRun>() {
            Some(run) => ask_in_task(run, question).await,
            None => {
                ctx.peer
                    .elicit_with_timeout::<GrantDecision>(question, Some(CONSENT_TIMEOUT))
                    .await
            }
        };
        match answer {
            Ok(Some(d)) if d.approve => Ok(d),
            Ok(Some(_)) => Err("the user did not approve the request".to_string()),
            Ok(None) | Err(rmcp::service::ElicitationError::NoContent) => {
                Err("the user answered without approving".to_string())
            }
            Err(rmcp::service::ElicitationError::UserDeclined) => {
                Err("the user declined the request".to_string())
            }
            Err(rmcp::service::ElicitationError::UserCancelled) => {
                Err("the user dismissed the request".to_string())
            }
            Err(e) => Err(format!(
                "refused: the consent prompt failed ({e}); the user can {}",
                self.sessions.pre_approval_hint()
            )),
        }
    }

    /// The judge's word on `action` (when there is one) kept in `judgement`, then the
    /// person asked `question` with that word on it; refused without asking when the
    /// judge blocks. The approving answer, or what to tell the agent.
    async fn judge_then_ask(
        &self,
        ctx: &RequestContext<RoleServer>,
        key: &SessionKey,
        action: Option<Action>,
        question: String,
        judgement: &mut Option<Judgement>,
    ) -> Result<GrantDecision, String> {
        if let Some(action) = action {
            *judgement = self.judge(ctx, key, action).await;
        }
        if let Some(blocked) = judgement.as_ref().filter(|j| j.blocks()) {
            return Err(judge::refusal(blocked));
        }
        let question = judge::with_judgement(question, judgement.as_ref());
        self.ask_person(ctx, question).await
    }

    /// The host grant: the exact host and port, asked of the person like a path. It lets
    /// the session's code reach that host through the egress proxy; the deny list and the
    /// private-address rule still hold.
    pub(super) async fn consent_host(
        &self,
        args: &GrantArgs,
        raw_host: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> GrantResult {
        let mut result = GrantResult::not_granted(args);
        let (session, key, route) = match self.grant_preamble(args, ctx) {
            Ok(first) => first,
            Err(message) => {
                result.message = message;
                return result;
            }
        };
        let (host, port) = match parse_requested_host(raw_host) {
            Ok(pair) => pair,
            Err(e) => {
                result.message = format!("refused without asking: {e}");
                return result;
            }
        };
        let shown = authority(&host, port);
        result.host = Some(shown.clone());
        let Some(egress) = self.sessions.egress() else {
            result.message = "refused without asking: HOST_SANDBOX_NETWORK=deny, so the sandbox \
                 has no network and a host grant would change nothing; the operator can set \
                 HOST_SANDBOX_NETWORK=proxy"
                .to_string();
            return result;
        };
        let granted: Vec<(String, u16)> = egress
            .host_grants(&key.to_string())
            .into_iter()
            .map(|g| (g.host, g.port))
            .collect();
        if egress.rules().judge_name_granted(&host, port, &granted) == Verdict::Allowed {
            result.granted = true;
            result.message = format!("{shown} is already allowed; nothing changed");
            return result;
        }
        if let Verdict::Refused(why) =
            egress
                .rules()
                .judge_name_granted(&host, port, &[(host.clone(), port)])
        {
            result.message = format!("refused without asking: {why}");
            return result;
        }
        let pre_approval =
            format!("start warden with --allow-host {shown}, or add it to SANDBOX_EGRESS_ALLOW");
        let client_name = match self.may_elicit(ctx, &route, &pre_approval) {
            Ok(name) => name,
            Err(message) => {
                result.message = format!("{shown}: {message}");
                return result;
            }
        };
        let (reason, _) = crate::text::one_line(&args.reason, MAX_REASON_CHARS);
        let (quoted, _) = crate::text::quoted_one_line(&args.reason, MAX_REASON_CHARS);
        let question = format!(
            "warden: the AI agent asks to let its code connect to\n\n    {shown}\n\nthrough warden's egress proxy, for the Python sandbox of session \"{session}\". Approve only if code written by the agent may send data to this host and read what it answers. Loopback and private addresses stay refused whatever the host resolves to.\n\n---- the agent's stated reason: its own words, not warden's, shown as one quoted line ----\n{quoted}"
        );
        let action = Action::host_grant(&session, &shown, &args.reason);
        let asked = self
            .judge_then_ask(ctx, &key, Some(action), question, &mut result.judge)
            .await;
        let decision = match asked {
            Ok(d) => d,
            Err(message) => {
                result.message = format!("{shown}: {message}");
                return result;
            }
        };
        let now = crate::grants::now_secs();
        let expires_at =
            (decision.expires_minutes > 0).then(|| now + u64::from(decision.expires_minutes) * 60);
        let grant = HostGrant {
            host,
            port,
            granted_at: now,
            expires_at,
            approved_by: format!("user via elicitation ({client_name})"),
            reason,
        };
        tracing::warn!(session = %key, host = %shown, approved_by = %grant.approved_by, "host grant approved by the user");
        match self.sessions.add_host_grant(&key, grant).await {
            Ok(()) => {
                result.granted = true;
                result.expires_at = expires_at;
                result.message = format!(
                    "granted: the session's code can reach {shown} through the proxy now (no restart)"
                );
            }
            Err(e) => result.message = e.message,
        }
        result
    }

    /// The person's approval of an install, under `SANDBOX_PACKAGES=ask` or when the
    /// judge escalates it: who approved it (`None`: nobody had to) and the judge's word,
    /// or the refusal to return. Nothing is asked for a list the session layer would
    /// refuse anyway.
    pub(super) async fn consent_packages(
        &self,
        args: &crate::packages::InstallArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Option<String>, Option<Judgement>), crate::packages::InstallResult> {
        let settings = self.sessions.settings();
        let mode = settings.packages.mode;
        let session = args
            .session
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let Ok(reqs) = crate::packages::requirements::parse_all(&args.packages) else {
            return Ok((None, None));
        };
        if mode == crate::config::PackagesMode::Deny || validate_session_name(&session).is_err() {
            return Ok((None, None));
        }
        let list: Vec<String> = reqs.iter().map(|r| r.text.clone()).collect();
        let action = Action::install(&session, list);
        let key = SessionKey::new(&self.owner(ctx), &session);
        let judgement = self.judge(ctx, &key, action).await;
        let refuse = |message: String| crate::packages::InstallResult {
            judge: judgement.clone(),
            ..crate::packages::InstallResult::refused(
                &session,
                crate::execution::ErrorInfo::new("ConsentRefused", message),
            )
        };
        if let Some(blocked) = judgement.as_ref().filter(|j| j.blocks()) {
            return Err(refuse(judge::refusal(blocked)));
        }
        let escalated = judgement
            .as_ref()
            .is_some_and(|j| !j.failed_open && j.verdict == crate::judge::Verdict::Escalate);
        if mode == crate::config::PackagesMode::Allow && !escalated {
            return Ok((None, judgement));
        }
        let why_asked = match mode {
            crate::config::PackagesMode::Ask => "SANDBOX_PACKAGES=ask needs the person's approval",
            _ => "the client's model escalated it to the person",
        };
        let route = http::consent_route(self.stdio, ctx)
            .map_err(|why| refuse(format!("refused without asking: {why}, and {why_asked}")))?;
        let pre_approval = "set SANDBOX_PACKAGES=allow";
        let client_name = self
            .may_elicit(ctx, &route, pre_approval)
            .map_err(&refuse)?;
        let shown: Vec<String> = reqs.iter().map(|r| format!("    {}", r.text)).collect();
        let from = match &settings.packages.wheelhouse {
            Some(dir) => format!("the wheelhouse {}", dir.display()),
            None => format!("the package index {}", settings.packages.index.url),
        };
        let question = judge::with_judgement(
            format!(
                "warden: the AI agent asks to install these Python packages (and their dependencies) for the sandbox of session \"{session}\":\n\n{}\n\nfrom {from}. They run inside the sandbox, under the same walls as the agent's own code.",
                shown.join("\n")
            ),
            judgement.as_ref(),
        );
        match self.ask_person(ctx, question).await {
            Ok(_) => Ok((
                Some(format!("user via elicitation ({client_name})")),
                judgement,
            )),
            Err(message) => Err(refuse(message)),
        }
    }
}

impl WardenServer {
    /// Before a session is closed and its files deleted: the judge's word, and the
    /// person's when the judge escalates; or the refusal to return. Nothing is judged
    /// when there is no open session to close.
    pub(super) async fn consent_close(
        &self,
        ctx: &RequestContext<RoleServer>,
        owner: &crate::owner::Owner,
        session: &str,
    ) -> Result<Option<Judgement>, super::ResetResult> {
        let key = SessionKey::new(owner, session);
        if validate_session_name(session).is_err() || !self.sessions.is_open(&key) {
            return Ok(None);
        }
        let judgement = self.judge(ctx, &key, Action::close(session)).await;
        let refuse = |message: String| super::ResetResult {
            message: format!("not closed: {message}"),
            judge: judgement.clone(),
            ..super::ResetResult::not_done(session.to_string())
        };
        let Some(j) = judgement.as_ref() else {
            return Ok(None);
        };
        if j.blocks() {
            return Err(refuse(judge::refusal(j)));
        }
        if j.failed_open || j.verdict != crate::judge::Verdict::Escalate {
            return Ok(judgement);
        }
        let route = http::consent_route(self.stdio, ctx).map_err(|why| {
            refuse(format!(
                "the client's model escalated closing this session to the user, who cannot be asked here: {why}"
            ))
        })?;
        let pre_approval = "close it again once the user agrees, with SANDBOX_JUDGE=off";
        self.may_elicit(ctx, &route, pre_approval)
            .map_err(&refuse)?;
        let question = judge::with_judgement(
            format!(
                "warden: the AI agent asks to close session \"{session}\": its interpreter stops, and its workspace files and grants are deleted for good. Approve to close it."
            ),
            Some(j),
        );
        match self.ask_person(ctx, question).await {
            Ok(_) => Ok(judgement),
            Err(message) => Err(refuse(message)),
        }
    }

    /// The path grant's flow. Everything the model sent is input to the question, never
    /// to the answer: only the person's reply through the client can approve.
    pub(super) async fn consent(
        &self,
        args: GrantArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> GrantResult {
        let mut result = GrantResult::not_granted(&args);
        let (session, key, route) = match self.grant_preamble(&args, ctx) {
            Ok(first) => first,
            Err(message) => {
                result.message = message;
                return result;
            }
        };
        let resolved = match self.resolve_for_grant(&args.path).await {
            Ok(resolved) => resolved,
            Err(message) => {
                result.message = message;
                return result;
            }
        };
        let (path, kind) = (resolved.path.clone(), resolved.kind);
        result.path = path.display().to_string();
        result.hidden = resolved
            .inside
            .hidden
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect();
        result.mounts_left_out = resolved.inside.left_out.clone();
        if let Some(existing) = self.sessions.covering_grant(&key, &path, args.access) {
            result.granted = true;
            result.expires_at = existing.expires_at;
            result.message = format!(
                "already granted (by {}); nothing changed",
                existing.approved_by
            );
            return result;
        }
        let candidate = resolved
            .clone()
            .into_grant(args.access, String::new(), String::new());
        if let Some(why) = self.sessions.host_paths_unreachable(&key) {
            result.message = format!("refused without asking: {why}");
            return result;
        }
        if let Some(conflict) = self.sessions.grant_conflict(&key, &candidate) {
            result.message = format!("refused without asking: {conflict}");
            return result;
        }
        let client_name = match self.may_elicit(ctx, &route, &self.sessions.pre_approval_hint()) {
            Ok(client_name) => client_name,
            Err(message) => {
                result.message = message;
                return result;
            }
        };
        let action = (args.access == Access::Write)
            .then(|| Action::write_grant(&session, &path, &args.reason));
        let question = path_question(&args, &session, &resolved, self.roots.containing(&path));
        let asked = self
            .judge_then_ask(ctx, &key, action, question, &mut result.judge)
            .await;
        let decision = match asked {
            Ok(decision) => decision,
            Err(message) => {
                result.message = message;
                return result;
            }
        };
        let now = crate::grants::now_secs();
        let expires_at =
            (decision.expires_minutes > 0).then(|| now + u64::from(decision.expires_minutes) * 60);
        let (reason, _) = crate::text::one_line(&args.reason, MAX_REASON_CHARS);
        let grant = Grant {
            expires_at,
            ..resolved.into_grant(
                args.access,
                format!("user via elicitation ({client_name})"),
                reason,
            )
        };
        tracing::warn!(
            session = %key,
            path = %path.display(),
            access = ?args.access,
            approved_by = %grant.approved_by,
            expires_at = ?expires_at,
            "grant approved by the user"
        );
        match self.sessions.add_grant(&key, grant).await {
            Ok(restarted) => {
                result.granted = true;
                result.expires_at = expires_at;
                result.worker_restarted = restarted;
                result.message =
                    granted_message(restarted, &result.hidden, &result.mounts_left_out);
                if let Some(w) = self.sessions.permission_warning(&path, kind, args.access) {
                    result.warnings.push(w);
                }
            }
            Err(e) => result.message = e.message,
        }
        result
    }

    /// What every grant's flow checks first: the session it is for (a valid name) and
    /// that the person can be asked on this transport, refused outright on any the
    /// person does not control, before anything else is looked at. The session's name,
    /// its key and the consent route; or the refusal to return.
    fn grant_preamble(
        &self,
        args: &GrantArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(String, SessionKey, String), String> {
        let session = args
            .session
            .clone()
            .unwrap_or_else(|| "default".to_string());
        validate_session_name(&session).map_err(|e| e.message)?;
        let key = SessionKey::new(&self.owner(ctx), &session);
        let route = http::consent_route(self.stdio, ctx).map_err(|why| {
            format!("refused without asking: {why}, and only the person can grant access")
        })?;
        Ok((session, key, route))
    }

    /// Resolves a requested path off the runtime's threads (a directory is walked for
    /// what it must not give); the refusal to return otherwise.
    async fn resolve_for_grant(&self, raw: &str) -> Result<Resolved, String> {
        let sessions = self.sessions.clone();
        let raw = raw.to_string();
        match tokio::task::spawn_blocking(move || sessions.resolve_grant_path(&raw)).await {
            Ok(Ok(resolved)) => Ok(resolved),
            Ok(Err(e)) => Err(format!("refused without asking: {e}")),
            Err(e) => Err(format!(
                "refused without asking: checking the path failed ({e})"
            )),
        }
    }
}

/// The question a path grant puts to the person. The model's words go last, on one
/// quoted line of their own, control characters removed and capped, so they can neither
/// run into warden's text nor fake a line of it. Pure.
/// `root`: the client's root the path is in, which the person is told.
fn path_question(
    args: &GrantArgs,
    session: &str,
    resolved: &Resolved,
    root: Option<super::roots::RootDir>,
) -> String {
    let (quoted, _) = crate::text::quoted_one_line(&args.reason, MAX_REASON_CHARS);
    let shown = crate::text::display_path(&resolved.path);
    let (what, verb) = match args.access {
        Access::Read => ("READ", "read"),
        Access::Write => ("READ AND WRITE", "read and change"),
    };
    let noun = match resolved.kind {
        crate::grants::PathKind::Directory => "directory (and everything in it)",
        crate::grants::PathKind::File => "file",
    };
    format!(
        "warden: the AI agent asks for {what} access to the {noun}\n\n    {shown}\n\nfor the Python sandbox of session \"{session}\".{} Approve only if code written by the agent should be able to {verb} it.{} The session's interpreter restarts; its variables are cleared.\n\n---- the agent's stated reason: its own words, not warden's, shown as one quoted line ----\n{quoted}",
        root_notice(&resolved.path, root),
        inside_notice(&resolved.inside),
    )
}

/// What the person is told when the path is one of the folders they have open in the
/// client (its roots), which is no approval by itself. Pure.
fn root_notice(path: &std::path::Path, root: Option<super::roots::RootDir>) -> String {
    let Some(root) = root else {
        return String::new();
    };
    let named = root.name.map(|n| format!(" (\"{n}\")")).unwrap_or_default();
    if root.path == path {
        format!(" It is one of the folders you have open in this client{named}.")
    } else {
        format!(
            " It is inside {}{named}, one of the folders you have open in this client.",
            crate::text::display_path(&root.path)
        )
    }
}

/// What a granted path's result says: whether the worker restarted, and what the grant
/// does not give. Pure.
fn granted_message(restarted: bool, hidden: &[String], left_out: &[String]) -> String {
    let mut message = if restarted {
        "granted. The session's worker was restarted with the wider sandbox: Python variables were cleared; workspace files are kept.".to_string()
    } else {
        "granted. The next call starts a worker with the wider sandbox.".to_string()
    };
    if !hidden.is_empty() {
        message.push_str(&format!(
            " Hidden from the code inside it (empty, read-only): {}.",
            crate::grants::some_of(hidden)
        ));
    }
    if !left_out.is_empty() {
        message.push_str(&format!(
            " Other file systems mounted inside it are not included: {}.",
            crate::grants::some_of(left_out)
        ));
    }
    message
}

/// What the person is told of a directory's contents that the grant does not give: the
/// entries hidden from the code and the other mounts left out. Empty when there are
/// none. Pure.
fn inside_notice(inside: &crate::grants::Inside) -> String {
    let mut text = String::new();
    if !inside.hidden.is_empty() {
        let names: Vec<String> = inside
            .hidden
            .iter()
            .map(|(p, _)| crate::text::display_path(p))
            .collect();
        text.push_str(&format!(
            "\n\nInside it, warden hides from the code (an empty, read-only mount covers each, so it can neither read nor change them): {}.",
            crate::grants::some_of(&names)
        ));
        if inside.hidden.iter().any(|(p, _)| p.ends_with(".git")) {
            text.push_str(
                " A .git directory is never given: git runs the commands its configuration and hooks name.",
            );
        }
    }
    if !inside.left_out.is_empty() {
        text.push_str(&format!(
            "\n\nOther file systems mounted inside it are not included (the code sees their empty mount points): {}.",
            crate::grants::some_of(&inside.left_out)
        ));
    }
    text
}

/// The consent question asked through the call's task: it becomes the task's input
/// request, and the client's `tasks/update` answers it.
async fn ask_in_task(
    run: &super::tasks::TaskRun,
    question: String,
) -> Result<Option<GrantDecision>, rmcp::service::ElicitationError> {
    use rmcp::model::{ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction};
    use rmcp::service::{ElicitationError, ServiceError};
    let failed = |why: String| {
        ElicitationError::Service(ServiceError::McpError(rmcp::ErrorData::internal_error(
            why, None,
        )))
    };
    let schema = rmcp::model::ElicitationSchema::from_type::<GrantDecision>()
        .map_err(|e| failed(format!("the consent form could not be built: {e}")))?;
    let request = ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question,
        requested_schema: schema,
    });
    let (reply, answer) = tokio::sync::oneshot::channel();
    run.ask
        .send((rmcp::model::InputRequest::Elicitation(request), reply))
        .await
        .map_err(|_| failed("the task that would ask is gone".to_string()))?;
    let value = match tokio::time::timeout(CONSENT_TIMEOUT, answer).await {
        Ok(Ok(value)) => value,
        Ok(Err(_)) => return Err(ElicitationError::UserCancelled),
        Err(_) => return Err(failed("nobody answered in time".to_string())),
    };
    let result: ElicitResult = serde_json::from_value(value.clone())
        .map_err(|error| ElicitationError::ParseError { error, data: value })?;
    match result.action {
        ElicitationAction::Accept => match result.content {
            Some(content) => serde_json::from_value(content.clone())
                .map(Some)
                .map_err(|error| ElicitationError::ParseError {
                    error,
                    data: content,
                }),
            None => Err(ElicitationError::NoContent),
        },
        ElicitationAction::Decline => Err(ElicitationError::UserDeclined),
        _ => Err(ElicitationError::UserCancelled),
    }
}
