//! Long calls as MCP Tasks (SEP-2663, `io.modelcontextprotocol/tasks`), for clients that
//! declare the extension. Such a client's `execute_python`, `install_packages` and
//! `request_grant` run in the background from the start; one still running after
//! `SANDBOX_TASK_AFTER_MS` answers with a task instead, which the client polls
//! (`tasks/get`), answers (`tasks/update`) or cancels (`tasks/cancel`). A consent prompt
//! inside such a call makes it a task at once, and the prompt becomes the task's input
//! request: a client that polls can still ask its person.
//!
//! rmcp's `TaskManager` keeps each task's state; this module owns what is warden's:
//! - **whose**: one manager per client (its [`Owner`]), held by the server rather than
//!   the connection, so a task outlives an HTTP reconnect and no client sees another's;
//! - **how long**: the run's limit is `SANDBOX_TASK_TIMEOUT_S`, its `ttlMs` that plus
//!   `SANDBOX_TASK_TTL_S`, and `SANDBOX_MAX_TASKS` bounds a client's unfinished tasks;
//! - **what the client sees while it runs**: the last line the code printed, capped and
//!   escaped, as the status message, and `notifications/tasks` on every change;
//! - **after a restart**: the ids handed out are journalled in the data directory, so a
//!   later `tasks/get` on one says the restart ended it rather than "unknown".

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, InputRequest, TaskPayload, TaskStatus};
use rmcp::task_manager::TaskManager;
use tokio::sync::{mpsc, oneshot, watch};

use crate::owner::Owner;

/// A question a call asks from inside a task, and where its answer goes.
pub(super) type Ask = (InputRequest, oneshot::Sender<serde_json::Value>);

/// Put in a call's request context when the call may become a task: how it asks the
/// person (through the task), where its output's last line goes, and its time limit.
#[derive(Clone)]
pub(super) struct TaskRun {
    pub ask: mpsc::Sender<Ask>,
    pub output: crate::backend::OutputTap,
    pub limit: Duration,
}

/// Every client's tasks.
pub(super) struct Tasks {
    settings: crate::config::TaskSettings,
    by_owner: Mutex<HashMap<Owner, ClientTasks>>,
    /// Ids an earlier run of this server handed out: (owner digest, id).
    before_restart: HashSet<(String, String)>,
    journal: Option<PathBuf>,
}

#[derive(Default)]
struct ClientTasks {
    manager: TaskManager,
    issued: HashSet<String>,
}

/// How long a journal line is kept.
const JOURNAL_KEEP_S: u64 = 24 * 3600;
/// The journal stops growing here (about 40,000 tasks between restarts); later tasks
/// are reported "unknown" rather than "ended by a restart" after one.
const JOURNAL_MAX_BYTES: u64 = 4 << 20;

/// Writes (or appends) to the journal, a private file of the server's.
fn write_journal(path: &std::path::Path, bytes: &[u8], append: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    match append {
        true => options.append(true),
        false => options.write(true).truncate(true),
    };
    crate::os::private_file(options.create(true))
        .open(path)?
        .write_all(bytes)
}

fn owner_digest(owner: &Owner) -> String {
    crate::audit::sha256_hex(format!("{owner:?}").as_bytes())
}

impl Tasks {
    /// The task store, journalling under `data_dir` (ids older than a day are dropped).
    pub fn new(settings: crate::config::TaskSettings, data_dir: Option<PathBuf>) -> Tasks {
        let journal = data_dir.map(|d| d.join("tasks.journal"));
        let mut before_restart = HashSet::new();
        if let Some(path) = &journal {
            let now = crate::grants::now_secs();
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let kept: Vec<&str> = text
                .lines()
                .filter(|line| {
                    let mut parts = line.split(' ');
                    match (parts.next(), parts.next(), parts.next()) {
                        (Some(owner), Some(id), Some(at)) => {
                            let fresh = at
                                .parse::<u64>()
                                .is_ok_and(|at| now.saturating_sub(at) < JOURNAL_KEEP_S);
                            if fresh {
                                before_restart.insert((owner.to_string(), id.to_string()));
                            }
                            fresh
                        }
                        _ => false,
                    }
                })
                .collect();
            let mut body = kept.join("\n");
            if !body.is_empty() {
                body.push('\n');
            }
            if let Err(e) = write_journal(path, body.as_bytes(), false) {
                tracing::warn!(path = %path.display(), error = %e, "could not rewrite the task journal");
            }
        }
        Tasks {
            settings,
            by_owner: Mutex::default(),
            before_restart,
            journal,
        }
    }

    pub fn settings(&self) -> crate::config::TaskSettings {
        self.settings
    }

    fn table(&self) -> MutexGuard<'_, HashMap<Owner, ClientTasks>> {
        match self.by_owner.lock() {
            Ok(t) => t,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// `owner`'s task manager (made on first use).
    pub fn manager(&self, owner: &Owner) -> TaskManager {
        self.table()
            .entry(owner.clone())
            .or_default()
            .manager
            .clone()
    }

    /// `owner`'s task manager, if it ever made a task (asking makes none).
    fn existing(&self, owner: &Owner) -> Option<TaskManager> {
        self.table().get(owner).map(|t| t.manager.clone())
    }

    /// The client is gone (its MCP session ended): its tasks stop and are dropped.
    pub fn forget(&self, owner: &Owner) {
        if let Some(tasks) = self.table().remove(owner) {
            tasks.manager.shutdown();
        }
    }

    /// Refuses a call that would start one more unfinished task than the cap allows.
    pub fn room_for_one_more(&self, owner: &Owner) -> Result<(), String> {
        let running = self
            .existing(owner)
            .map_or(0, |manager| manager.running_task_count());
        if running >= self.settings.max_tasks {
            return Err(format!(
                "this client has {running} tasks running or waiting for input, the most \
                 SANDBOX_MAX_TASKS allows; wait for one to finish or cancel one (tasks/cancel)"
            ));
        }
        Ok(())
    }

    /// Records that `id` is `owner`'s, in memory and in the journal.
    pub fn issued(&self, owner: &Owner, id: &str) {
        self.table()
            .entry(owner.clone())
            .or_default()
            .issued
            .insert(id.to_string());
        let room = |path: &std::path::Path| {
            std::fs::metadata(path).map_or(true, |m| m.len() < JOURNAL_MAX_BYTES)
        };
        if let Some(path) = self.journal.as_deref().filter(|p| room(p)) {
            let line = format!(
                "{} {id} {}\n",
                owner_digest(owner),
                crate::grants::now_secs()
            );
            if let Err(e) = write_journal(path, line.as_bytes(), true) {
                tracing::warn!(path = %path.display(), error = %e, "could not journal a task");
            }
        }
    }

    /// `owner`'s task `id`, or an error that says why there is none: another client's
    /// and never-issued ids are both "unknown" (nothing is leaked).
    pub fn get(&self, owner: &Owner, id: &str) -> Result<DetailedTask, McpError> {
        self.existing(owner)
            .and_then(|manager| manager.get_task(id).ok())
            .ok_or_else(|| self.missing(owner, id))
    }

    fn missing(&self, owner: &Owner, id: &str) -> McpError {
        let (shown, _) = crate::text::quoted_one_line(id, 80);
        let why = if self
            .before_restart
            .contains(&(owner_digest(owner), id.to_string()))
        {
            format!(
                "task {shown} was ended when the warden server restarted: its run was \
                 stopped and its result is lost; call the tool again"
            )
        } else if self
            .table()
            .get(owner)
            .is_some_and(|t| t.issued.contains(id))
        {
            format!(
                "task {shown} has expired: a task is kept for its ttlMs (SANDBOX_TASK_TIMEOUT_S \
                 plus SANDBOX_TASK_TTL_S), and its result with it"
            )
        } else {
            format!("unknown task {shown}: no task of this client has that id")
        };
        McpError::invalid_params(why, None)
    }

    /// Answers to `id`'s input requests; every key must be one it asked and has not
    /// had answered.
    pub fn update(
        &self,
        owner: &Owner,
        id: &str,
        responses: rmcp::model::InputResponses,
    ) -> Result<(), McpError> {
        let task = self.get(owner, id)?;
        let asked: HashSet<String> = match &task.payload {
            TaskPayload::InputRequired { input_requests } => {
                input_requests.keys().cloned().collect()
            }
            _ => HashSet::new(),
        };
        if let Some(stray) = responses.keys().find(|k| !asked.contains(*k)) {
            let (stray, _) = crate::text::quoted_one_line(stray, 80);
            return Err(McpError::invalid_params(
                format!(
                    "inputResponses key {stray} is not a question this task is waiting on \
                     (it asks: {:?}); nothing was applied",
                    asked
                ),
                None,
            ));
        }
        self.manager(owner).update_task(id, responses)
    }

    pub fn cancel(&self, owner: &Owner, id: &str) -> Result<(), McpError> {
        self.get(owner, id)?;
        self.manager(owner).cancel_task(id)
    }
}

/// Keeps the last whole line of a run's output for its task's status message: at most
/// 200 characters, escaped to one line.
pub(super) fn last_line_tap() -> (crate::backend::OutputTap, watch::Receiver<String>) {
    let (tap, mut chunks) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let (line_tx, line_rx) = watch::channel(String::new());
    tokio::spawn(async move {
        let mut pending: Vec<u8> = Vec::new();
        while let Some(chunk) = chunks.recv().await {
            pending.extend_from_slice(&chunk);
            if let Some(end) = pending.iter().rposition(|b| *b == b'\n') {
                let text = String::from_utf8_lossy(&pending[..end]).into_owned();
                let last = text.rsplit('\n').next().unwrap_or_default();
                let (line, _) = crate::text::one_line(last, 200);
                let _ = line_tx.send(line);
                pending.drain(..=end);
            }
            if pending.len() > 64 * 1024 {
                pending.clear();
            }
        }
    });
    (tap, line_rx)
}

/// Sends `notifications/tasks` to `peer` each time the task's status or message
/// changes, until it ends (or the client is gone).
pub(super) fn push_changes(
    peer: rmcp::service::Peer<rmcp::RoleServer>,
    manager: TaskManager,
    id: String,
) {
    tokio::spawn(async move {
        let mut last: Option<(TaskStatus, Option<String>)> = None;
        loop {
            let Ok(task) = manager.get_task(&id) else {
                return;
            };
            let now = (task.status(), task.task.status_message.clone());
            if last.as_ref() != Some(&now) {
                let terminal = task.status().is_terminal();
                let note = rmcp::model::TaskStatusNotification::new(task.into());
                let sent = peer
                    .send_notification(rmcp::model::ServerNotification::TaskStatusNotification(
                        note,
                    ))
                    .await;
                if sent.is_err() || terminal {
                    return;
                }
                last = Some(now);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// The tools a client that declares Tasks may get a task for.
const TASK_TOOLS: [&str; 3] = ["execute_python", "install_packages", "request_grant"];

/// How a call that may become a task ended before it did.
type Finished = Result<rmcp::model::CallToolResponse, McpError>;

impl super::WardenServer {
    /// Whether this call may become a task: one of [`TASK_TOOLS`], from a client that
    /// declared the extension on protocol 2026-07-28 or later (the extension's own;
    /// clients of earlier revisions may declare it and still not read a task).
    pub(super) fn task_eligible(
        &self,
        request: &rmcp::model::CallToolRequestParams,
        ctx: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> bool {
        TASK_TOOLS.contains(&request.name.as_ref())
            && ctx
                .protocol_version()
                .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28)
            && ctx
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks())
    }

    /// Runs the call in the background: its answer if it ends within
    /// `SANDBOX_TASK_AFTER_MS`, else (or as soon as it asks the person) a task.
    pub(super) async fn call_maybe_as_task(
        &self,
        request: rmcp::model::CallToolRequestParams,
        ctx: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Finished {
        let owner = self.owner(&ctx);
        if let Err(why) = self.tasks.room_for_one_more(&owner) {
            let error = crate::execution::ErrorInfo::new("TooManyTasks", why);
            let value = serde_json::json!({"error": error});
            return Ok(super::tool_result(&request.name, value, true).into());
        }
        let settings = self.tasks.settings();
        let run_ct = tokio_util::sync::CancellationToken::new();
        let (ask_tx, mut ask_rx) = mpsc::channel::<Ask>(1);
        let (output, lines) = last_line_tap();
        let mut run_ctx = ctx.clone();
        run_ctx.ct = run_ct.clone();
        run_ctx.meta.remove("progressToken");
        run_ctx.extensions.insert(TaskRun {
            ask: ask_tx,
            output,
            limit: Duration::from_secs(settings.timeout_s),
        });
        let (done_tx, mut done_rx) = oneshot::channel::<Finished>();
        let server = self.clone();
        tokio::spawn(async move {
            let call = rmcp::handler::server::tool::ToolCallContext::new(&server, request, run_ctx);
            let _ = done_tx.send(server.tool_router.call(call).await);
        });
        let first_ask = tokio::select! {
            finished = &mut done_rx => return finished.unwrap_or_else(|_| Err(ended_without_result())),
            Some(ask) = ask_rx.recv() => Some(ask),
            () = tokio::time::sleep(Duration::from_millis(settings.after_ms)) => None,
            () = ctx.ct.cancelled() => {
                run_ct.cancel();
                return Err(McpError::invalid_request("the call was cancelled; its code was killed", None));
            }
        };
        let manager = self.tasks.manager(&owner);
        let options = rmcp::task_manager::TaskOptions::new()
            .with_ttl_ms((settings.timeout_s + settings.ttl_s) * 1000)
            .with_poll_interval_ms(500)
            .with_status_message("running");
        let run = Running {
            done: done_rx,
            asks: ask_rx,
            first_ask,
            stop: run_ct,
            lines,
            limit: Duration::from_secs(settings.timeout_s),
        };
        let task = manager.spawn(options, move |tctx| Box::pin(run.drive(tctx)));
        self.tasks.issued(&owner, &task.task_id);
        push_changes(ctx.peer.clone(), manager, task.task_id.clone());
        Ok(rmcp::model::CallToolResponse::Task(
            rmcp::model::CreateTaskResult::new(task),
        ))
    }
}

fn ended_without_result() -> McpError {
    McpError::internal_error("the call ended without a result", None)
}

/// The task's outcome from the call's.
fn settle(
    finished: Result<Finished, oneshot::error::RecvError>,
) -> Result<rmcp::model::CallToolResult, rmcp::task_manager::TaskExit> {
    use rmcp::task_manager::TaskExit;
    match finished {
        Ok(Ok(rmcp::model::CallToolResponse::Complete(result))) => Ok(result),
        Ok(Ok(_)) | Err(_) => Err(TaskExit::Error(ended_without_result())),
        Ok(Err(e)) => Err(TaskExit::Error(e)),
    }
}

/// A call that became a task, as its task's operation sees it.
struct Running {
    done: oneshot::Receiver<Finished>,
    asks: mpsc::Receiver<Ask>,
    first_ask: Option<Ask>,
    /// Cancels the run (its code is killed); also when the task is dropped.
    stop: tokio_util::sync::CancellationToken,
    lines: watch::Receiver<String>,
    limit: Duration,
}

impl Running {
    /// Until the run ends, is cancelled or passes its limit: forwards its questions as
    /// the task's input requests and its output's last line as the status message.
    async fn drive(
        mut self,
        tctx: rmcp::task_manager::TaskContext,
    ) -> Result<rmcp::model::CallToolResult, rmcp::task_manager::TaskExit> {
        use rmcp::task_manager::TaskExit;
        let _stop_on_drop = self.stop.clone().drop_guard();
        let deadline = tokio::time::sleep(self.limit);
        tokio::pin!(deadline);
        let over = |limit: Duration| {
            TaskExit::Error(McpError::internal_error(
                format!(
                    "the task ran past SANDBOX_TASK_TIMEOUT_S ({} s); its code was killed",
                    limit.as_secs()
                ),
                None,
            ))
        };
        let (mut asked, mut asks_open, mut lines_open) = (0u32, true, true);
        loop {
            if let Some((question, reply)) = self.first_ask.take() {
                asked += 1;
                tokio::select! {
                    answer = tctx.request_input(format!("consent-{asked}"), question) => match answer {
                        Ok(value) => { let _ = reply.send(value); }
                        Err(exit) => { self.stop.cancel(); return Err(exit); }
                    },
                    // The call gave up waiting (its own consent timeout): so does the task.
                    finished = &mut self.done => return settle(finished),
                    () = &mut deadline => { self.stop.cancel(); return Err(over(self.limit)); }
                }
                continue;
            }
            tokio::select! {
                finished = &mut self.done => return settle(finished),
                ask = self.asks.recv(), if asks_open => match ask {
                    Some(ask) => self.first_ask = Some(ask),
                    None => asks_open = false,
                },
                changed = self.lines.changed(), if lines_open => match changed {
                    Ok(()) => {
                        let line = self.lines.borrow_and_update().clone();
                        tctx.set_status_message(format!("running; last output: {line}"));
                    }
                    Err(_) => lines_open = false,
                },
                () = tctx.cancelled() => { self.stop.cancel(); return Err(TaskExit::Cancelled); }
                () = &mut deadline => { self.stop.cancel(); return Err(over(self.limit)); }
            }
        }
    }
}
