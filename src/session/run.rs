//! One session's execution: expired grants narrow the sandbox, the guard judges the code,
//! the backend provides a worker, the worker runs the code, and the workspace diff and
//! the worker's outcome become the result. Knows no backend: it holds a [`Worker`].
//! The manager drives a call through a session (`SessionManager::run_call`); the
//! session's own methods never reach back into the manager.

use std::time::{Duration, Instant};

use super::guard::{GuardOutcome, Lookup, PendingCheck, guard_error, summarize};
use super::{Session, SessionManager, SessionState, grants};
use crate::backend::{Gate, InputFile, LateOutput, Outcome, OutputTap, RunOutput, WorkerSpec};
use crate::config::GuardMode;
use crate::execution::{ErrorInfo, ExecResult, ExecStatus};
use crate::guard::{Decision, Verdict};

/// The session's kill switch for as long as a call runs; cleared when the call returns or
/// is abandoned (its future dropped), so it never outlives the worker's process.
struct Running<'a>(&'a Session);

impl<'a> Running<'a> {
    fn start(session: &'a Session, switch: crate::backend::KillSwitch) -> Running<'a> {
        if let Ok(mut running) = session.running.lock() {
            *running = Some(switch);
        }
        Running(session)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut running) = self.0.running.lock() {
            *running = None;
        }
    }
}

/// The result of a call for which no worker could be had.
fn no_worker(
    session: &Session,
    e: ErrorInfo,
    warnings: Vec<String>,
    worker_restarted: bool,
) -> ExecResult {
    if e.retryable {
        tracing::info!(session = %session.key, error = %e.message, "no worker for this call");
    } else {
        tracing::error!(session = %session.key, error = %e.message, "worker did not start");
    }
    let mut result = ExecResult::refused(&session.name, e, warnings);
    result.worker_restarted = worker_restarted;
    result
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl SessionManager {
    /// Narrows the workspace to the bytes a cap leaves, for one call; `Some` warning
    /// when that cannot be done here (then the bytes are counted after the call only).
    fn limit_growth(&self, session: &Session, bytes_left: Option<u64>) -> Option<String> {
        let left = bytes_left?;
        let why = match self.backend.limit_growth(&session.home.slot, Some(left)) {
            Ok(true) => return None,
            Ok(false) => "this backend cannot narrow a workspace while a call runs".to_string(),
            Err(e) => e,
        };
        Some(format!(
            "the byte cap (SANDBOX_MAX_BYTES_WRITTEN, SANDBOX_CLIENT_MAX_BYTES_WRITTEN) is \
             counted after this call but not enforced while it runs: {why}"
        ))
    }
}

/// What a call spent that only its run can tell, for the caps.
#[derive(Debug, Default)]
struct Meter {
    /// CPU time of the worker during the call; `None` when it could not be read.
    cpu_ms: Option<u64>,
    bytes_written: u64,
}

/// The call as the caps admit it: its time limit cut to the wall seconds left, with the
/// warning that says so.
fn narrow<'a>(mut call: Call<'a>, admitted: &crate::caps::Admitted) -> (Call<'a>, Option<String>) {
    let Some(left) = admitted.wall_ms_left.map(Duration::from_millis) else {
        return (call, None);
    };
    if left >= call.timeout {
        return (call, None);
    }
    call.timeout = left;
    let note = format!(
        "this call's time limit was cut to {:.1} s: what is left of the session's or the \
         client's wall-clock cap (SANDBOX_MAX_WALL_S, SANDBOX_CLIENT_MAX_WALL_S)",
        left.as_secs_f64()
    );
    (call, Some(note))
}

/// What a finished call carries into its result besides the run's own output.
struct Done {
    worker_restarted: bool,
    warnings: Vec<String>,
    verdict: Option<Verdict>,
    workspace: String,
    report: crate::workspace::Summary,
}

/// One `execute_python` call, as a session runs it.
pub(super) struct Call<'a> {
    pub code: &'a str,
    pub inputs: &'a [InputFile],
    pub timeout: Duration,
    /// Also receives stdout as it is printed.
    pub tap: Option<OutputTap>,
    /// A failure puts the workspace back as it was before the call.
    pub transactional: bool,
    /// Why the call is transactional although it asked not to be.
    pub overruled: Option<&'static str>,
}

impl SessionManager {
    /// Runs one call; `None` when the session was closed while the call waited for it
    /// (the caller opens the name again). The caps admit it first and are charged after.
    pub(super) async fn run_call(&self, session: &Session, call: Call<'_>) -> Option<ExecResult> {
        let started = Instant::now();
        let mut state = session.state.lock().await;
        if state.closed {
            return None;
        }
        session.touch(self.now_ms());
        let owner = &session.key.owner;
        let settled = self.settle_transaction(session, &mut state).await;
        let mut result = match self.caps.admit(owner, &session.spent) {
            Err(exceeded) => {
                let e = ErrorInfo::cap_exceeded(exceeded);
                ExecResult::refused(&session.name, e, Vec::new())
            }
            Ok(admitted) => {
                self.run_admitted(session, &mut state, call, &admitted, started)
                    .await
            }
        };
        result.warnings.extend(settled);
        result.budget = self.caps.budget(owner, &session.spent);
        session.touch(self.now_ms());
        Some(result)
    }

    /// A call the caps admitted: narrowed to what they leave, made transactional when
    /// asked, run, and charged.
    async fn run_admitted(
        &self,
        session: &Session,
        state: &mut SessionState,
        call: Call<'_>,
        admitted: &crate::caps::Admitted,
        started: Instant,
    ) -> ExecResult {
        let owner = &session.key.owner;
        let (call, cut) = narrow(call, admitted);
        let transactional = call.transactional;
        let overruled = call.overruled;
        let begun = match transactional {
            true => self.transactions_supported(),
            false => Ok(()),
        };
        let growth = self.limit_growth(session, admitted.bytes_left);
        let proxied = || {
            self.egress
                .as_ref()
                .map_or(0, |e| e.used(&session.key.to_string()))
        };
        let proxy_before = proxied();
        let mut meter = Meter::default();
        let began = transactional && begun.is_ok();
        let mut result = match begun {
            Ok(()) => {
                self.execute_locked(session, state, call, started, &mut meter)
                    .await
            }
            Err(e) => ExecResult::refused(&session.name, e, Vec::new()),
        };
        if admitted.bytes_left.is_some() && growth.is_none() {
            // Back to the whole quota between calls (a refused resize has already said
            // so), before a rollback needs the room.
            let _ = self.backend.limit_growth(&session.home.slot, None);
        }
        result.transactional = transactional;
        if began {
            self.end_transaction(session, &mut result).await;
        }
        result.warnings.extend(cut.into_iter().chain(growth));
        result.warnings.extend(overruled.map(str::to_string));
        let wall_ms = elapsed_ms(started);
        let cost = crate::caps::Cost {
            // A worker that died with its call can no longer be read: its CPU time is
            // counted as the call's wall time.
            cpu_ms: meter.cpu_ms.unwrap_or(wall_ms),
            wall_ms,
            bytes_written: meter.bytes_written,
            proxy_bytes: proxied().saturating_sub(proxy_before),
        };
        self.caps.settle(owner, &session.spent, &cost);
        result
    }

    async fn execute_locked(
        &self,
        session: &Session,
        state: &mut SessionState,
        call: Call<'_>,
        started: Instant,
        meter: &mut Meter,
    ) -> ExecResult {
        let Call {
            code,
            inputs,
            timeout,
            tap,
            transactional,
            ..
        } = call;
        if let Some(ended) = &state.killed {
            return ExecResult::refused(&session.name, ended.error(), Vec::new());
        }
        let mut warnings = Vec::new();
        session.drop_expired_grants(state);
        let starting = state.worker.is_none();
        let (grants, withdrawn) = self.approved_grants(session, starting, &mut warnings);
        if let Some(why) = withdrawn
            && session.drop_worker(state).is_some()
        {
            state.lost_worker = Some(why);
        }
        let (mut verdict, pending) = match self
            .verdict_first(session, state, code, &grants, &mut warnings)
            .await
        {
            Ok(first) => first,
            Err(mut refused) => {
                refused.duration_ms = elapsed_ms(started);
                return *refused;
            }
        };
        let worker_restarted = session.note_lost_worker(state, &mut warnings);
        let spec = WorkerSpec {
            slot: &session.home.slot,
            grants: &grants,
        };
        let worker = match self.ensure_worker(session, state, &spec).await {
            Ok(worker) => worker,
            Err(e) => return no_worker(session, e, warnings, worker_restarted),
        };
        let protected = self
            .protect_checkpoints(session, worker.journal_link())
            .await;
        if let Err(e) = protected {
            let mut refused = ExecResult::refused(&session.name, e, warnings);
            refused.duration_ms = elapsed_ms(started);
            return refused;
        }
        if transactional
            && let Err(e) = self.begin_transaction(session, worker.journal_link()).await
        {
            let mut refused = ExecResult::refused(&session.name, e, warnings);
            refused.duration_ms = elapsed_ms(started);
            return refused;
        }
        let worker_warnings = worker.report().warnings();
        let seen_workspace = worker.report().workspace.clone();
        let cap = self.settings.output_limit_bytes;
        worker.tap_stdout(tap);
        let running = Running::start(session, worker.kill_switch());
        let mut held = None;
        let gate = pending.map(|pending| {
            let mode = self.settings.codeguard;
            let held = &mut held;
            Box::pin(async move {
                let outcome = pending.run().await;
                let go = may_run(&outcome, mode);
                *held = Some(outcome);
                go
            }) as Gate<'_>
        });
        let probe = worker.usage_probe();
        let cpu_before = probe.read().map(|u| u.cpu_ms);
        let run = worker.execute_gated(code, inputs, timeout, cap, gate).await;
        let cpu_after = probe.read().map(|u| u.cpu_ms);
        meter.cpu_ms = cpu_before
            .zip(cpu_after)
            .map(|(before, after)| after.saturating_sub(before));
        let egress_refusals = worker.take_egress_refusals();
        drop(running);
        if !run.reusable {
            self.end_worker(session, state).await;
        }
        let lost = match run.reusable {
            true => None,
            false => self.end_if_engine_lost(session, state).await,
        };
        if let Some(outcome) = held {
            match self.judge(session, state, outcome, &mut warnings) {
                Ok(v) => verdict = v,
                Err(mut refused) => {
                    if !run.reusable && state.killed.is_none() {
                        // The worker died or hung while the guard judged; the next call
                        // says so, as after any lost worker.
                        state.lost_worker =
                            Some("the worker was lost while its call was held".into());
                    }
                    refused.duration_ms = elapsed_ms(started);
                    return *refused;
                }
            }
        }
        warnings.extend(worker_warnings);
        warnings.extend(egress_refusals);
        if lost.is_none() {
            let finished = run.reusable;
            warnings.extend(self.backend.settle(&session.home.slot, finished).await);
        }
        let report = session.workspace_report();
        meter.bytes_written = report.bytes_written;
        let done = Done {
            worker_restarted,
            warnings,
            verdict,
            workspace: seen_workspace,
            report,
        };
        let mut result = self.result(session, state, run, done, started, timeout);
        if let Some(lost) = lost {
            result.status = ExecStatus::Error;
            result.error = Some(lost);
        }
        result
    }

    /// The guard's verdict when it is known before the call (guard off, cached, or no
    /// live worker to hold the code), else the check to run while the worker holds it.
    async fn verdict_first(
        &self,
        session: &Session,
        state: &mut SessionState,
        code: &str,
        grants: &[crate::grants::Grant],
        warnings: &mut Vec<String>,
    ) -> Result<(Option<Verdict>, Option<PendingCheck>), Box<ExecResult>> {
        let roots = grants.iter().map(|g| g.path.clone()).collect();
        let workspace = self.guard_workspace(session);
        let outcome = match self.lookup_code(&session.key.owner, code, &workspace, roots) {
            Lookup::Done(outcome) => outcome,
            // A session whose worker is live sends the code at once and lets it compile
            // there while the guard judges it here (see `Gate`).
            Lookup::Miss(pending) if may_hold(state) => return Ok((None, Some(pending))),
            Lookup::Miss(pending) => pending.run().await,
        };
        Ok((self.judge(session, state, outcome, warnings)?, None))
    }

    /// The call's result from what its run produced.
    fn result(
        &self,
        session: &Session,
        state: &mut SessionState,
        mut run: RunOutput,
        done: Done,
        started: Instant,
        timeout: Duration,
    ) -> ExecResult {
        let Done {
            worker_restarted,
            mut warnings,
            verdict,
            workspace,
            report,
        } = done;
        warnings.extend(late_warning(&run.late));
        warnings.extend(session.home.slot.notice());
        let (out_cut, err_cut) = (run.stdout.truncated, run.stderr.truncated);
        let mut result = ExecResult {
            status: ExecStatus::Ok,
            stdout: run.stdout.take_text(),
            stderr: run.stderr.take_text(),
            result: None,
            error: None,
            duration_ms: elapsed_ms(started),
            timed_out: false,
            truncated: false,
            backend: self.backend.kind(),
            configured_backend: self.configured_backend(),
            container_runtime: self.backend.container_runtime(),
            session: session.name.clone(),
            files: Vec::new(),
            files_total: 0,
            files_complete: true,
            truncated_fields: Vec::new(),
            worker_restarted,
            warnings,
            guard: verdict,
            workspace: Some(workspace),
            budget: None,
            transactional: false,
            rolled_back: false,
            undone: Vec::new(),
            undone_total: 0,
        };
        for (cut, field) in [(out_cut, "stdout"), (err_cut, "stderr")] {
            if cut {
                result.mark_truncated(field);
            }
        }
        if let Some(lost) = apply_outcome(&mut result, run, timeout) {
            state.lost_worker = Some(lost);
        }
        result.set_files(report);
        result
    }

    /// The guard's verdict, or the refusal it becomes under CODEGUARD=enforce (a tripwire
    /// also kills the session). Shadow and restricted verdicts become warnings.
    fn judge(
        &self,
        session: &Session,
        state: &mut SessionState,
        outcome: GuardOutcome,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Verdict>, Box<ExecResult>> {
        let verdict = match outcome {
            GuardOutcome::Off => {
                warnings.push(
                    "CODEGUARD=off: the static guard is switched off; only the operating-system sandbox stands"
                        .to_string(),
                );
                return Ok(None);
            }
            GuardOutcome::Checked(v) => v,
        };
        session.note_unjudged(&verdict);
        if refuses(&verdict, self.settings.codeguard) {
            if verdict.tripwire() {
                session.kill_by_tripwire(state, &verdict);
            }
            let mut result = ExecResult::refused(
                &session.name,
                guard_error(&verdict),
                std::mem::take(warnings),
            );
            result.guard = Some(verdict);
            return Err(Box::new(result));
        }
        match verdict.decision {
            Decision::Blocked => warnings.push(format!(
                "CODEGUARD=shadow: the guard would have blocked this code ({}); it ran anyway",
                summarize(&verdict)
            )),
            Decision::Restricted => warnings.push(format!(
                "the guard allowed this code with warnings: {}",
                summarize(&verdict)
            )),
            Decision::Allowed => {}
        }
        Ok(Some(verdict))
    }

    /// Where the guard is told the code sees its workspace: where the backend's world
    /// shows it, or the server's own path when there is no world.
    fn guard_workspace(&self, session: &Session) -> std::path::PathBuf {
        self.world.map_or_else(
            || session.home.paths.workspace.clone(),
            |w| std::path::PathBuf::from(w.workspace),
        )
    }
}

impl Session {
    /// What the call changed in the workspace (incremental; see [`crate::workspace::tracker`]).
    fn workspace_report(&self) -> crate::workspace::Summary {
        match self.tracker.lock() {
            Ok(mut t) => t.report().into(),
            Err(_) => crate::workspace::Summary {
                incomplete: Some("the workspace tracker failed".into()),
                ..Default::default()
            },
        }
    }

    /// Expired grants narrow the sandbox again: the worker must be rebuilt without them.
    fn drop_expired_grants(&self, state: &mut SessionState) {
        let expired = grants::take_expired(self);
        if expired.is_empty() {
            return;
        }
        for g in &expired {
            tracing::info!(session = %self.key, path = %g.path.display(), "grant expired");
        }
        if self.drop_worker(state).is_some() {
            let paths: Vec<String> = expired
                .iter()
                .map(|g| g.path.display().to_string())
                .collect();
            state.lost_worker = Some(format!("grants expired ({})", paths.join(", ")));
        }
    }

    fn kill_by_tripwire(&self, state: &mut SessionState, verdict: &Verdict) {
        let rules: Vec<&str> = verdict
            .findings
            .iter()
            .filter(|f| f.tripwire)
            .map(|f| f.rule.as_str())
            .collect();
        let reason = format!(
            "session {:?} was killed by a tripwire ({}); open another session",
            self.name,
            rules.join(", ")
        );
        tracing::warn!(session = %self.key, %reason, "tripwire");
        state.killed = Some(super::Ended::tripwire(reason));
        self.drop_worker(state);
    }

    /// Reports a worker lost since the last call; returns whether one was.
    fn note_lost_worker(&self, state: &mut SessionState, warnings: &mut Vec<String>) -> bool {
        let Some(why) = state.lost_worker.take() else {
            return false;
        };
        warnings.push(format!(
            "the previous worker of this session was lost ({why}); a new one was started: variables from earlier calls are gone, workspace files are kept"
        ));
        true
    }
}

/// A session's code may be sent before its verdict only to a live worker that is ready
/// for a call: never to one still to start (a refused call would have started it for
/// nothing), and never when the call must first report a lost worker.
fn may_hold(state: &SessionState) -> bool {
    state.lost_worker.is_none()
        && state
            .worker
            .as_ref()
            .is_some_and(|live| !live.worker.is_busy())
}

/// Whether a verdict refuses the call: blocked while the guard enforces. `judge` refuses
/// by it, and a held call's gate opens by it.
fn refuses(verdict: &Verdict, mode: GuardMode) -> bool {
    verdict.decision == Decision::Blocked && mode == GuardMode::Enforce
}

/// The gate's answer: the code runs unless `judge` will refuse it.
fn may_run(outcome: &GuardOutcome, mode: GuardMode) -> bool {
    match outcome {
        GuardOutcome::Off => true,
        GuardOutcome::Checked(v) => !refuses(v, mode),
    }
}

/// A timeout as people write it: whole seconds bare, a fraction to the millisecond
/// (`timeout_s` may be 0.4; saying "0 s" would be wrong).
fn seconds(timeout: Duration) -> f64 {
    (timeout.as_secs_f64() * 1000.0).round() / 1000.0
}

/// What the result says about output written outside its call (never shown as this
/// call's own).
fn late_warning(late: &LateOutput) -> Option<String> {
    if late.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if late.from_earlier_calls > 0 {
        let excerpt: String = late.excerpt.chars().take(200).collect();
        let more = if (excerpt.len() as u64) < late.from_earlier_calls {
            "…"
        } else {
            ""
        };
        parts.push(format!(
            "threads started by earlier calls of this session wrote {} bytes to stdout/stderr during this call ({excerpt:?}{more})",
            late.from_earlier_calls
        ));
    }
    if late.between_calls > 0 {
        parts.push(format!(
            "{} bytes reached stdout/stderr between calls",
            late.between_calls
        ));
    }
    Some(format!(
        "{}; that output is not this call's and was set apart (work should end with its call: join the threads you start)",
        parts.join("; ")
    ))
}

/// Fills in status and error from the worker's outcome; returns why the worker is lost,
/// when it is.
fn apply_outcome(result: &mut ExecResult, run: RunOutput, timeout: Duration) -> Option<String> {
    match run.outcome {
        Outcome::Finished(response) => {
            result.result = response.result;
            if response.result_truncated {
                result.mark_truncated("result");
            }
            if let Some(e) = response.error {
                result.status = ExecStatus::Error;
                result.error = Some(ErrorInfo {
                    kind: e.kind,
                    message: e.message,
                    traceback: e.traceback,
                    retryable: false,
                    cap: None,
                });
            } else if response.status != "ok" {
                result.status = ExecStatus::Error;
            }
            (!run.reusable).then(|| "the code closed or redirected its output streams".to_string())
        }
        Outcome::TimedOut => {
            result.status = ExecStatus::Timeout;
            result.timed_out = true;
            result.error = Some(ErrorInfo::new(
                "Timeout",
                format!(
                    "the code ran longer than {} s and its whole process group was killed; the next call starts a fresh worker (variables are lost, files are kept)",
                    seconds(timeout)
                ),
            ));
            Some(format!("timed out after {} s", seconds(timeout)))
        }
        Outcome::Died(how) => {
            result.status = ExecStatus::Killed;
            result.error = Some(ErrorInfo::new(
                "WorkerDied",
                format!(
                    "the Python worker died during the call ({how}); the next call starts a fresh worker (variables are lost, files are kept)"
                ),
            ));
            Some(format!("the worker died: {how}"))
        }
        Outcome::Withheld => {
            // Only ever with a refusing verdict, which returns before this.
            result.status = ExecStatus::Error;
            result.error = Some(ErrorInfo::new(
                "InternalError",
                "the code was held back without a verdict that refused it; it did not run",
            ));
            None
        }
        Outcome::Broken(why) => {
            result.status = ExecStatus::Killed;
            result.error = Some(ErrorInfo::new(
                "WorkerProtocolError",
                format!("the worker broke its protocol ({why}) and was killed"),
            ));
            Some(format!("protocol error: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_said_as_given() {
        assert_eq!(format!("{} s", seconds(Duration::from_secs(30))), "30 s");
        assert_eq!(
            format!("{} s", seconds(Duration::from_secs_f64(0.4))),
            "0.4 s"
        );
        assert_eq!(
            format!("{} s", seconds(Duration::from_secs_f64(2.000_4))),
            "2 s"
        );
    }
}
