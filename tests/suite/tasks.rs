//! Long calls as MCP Tasks, with rmcp's own client declaring the extension: a short call
//! answers as before, a long one answers with a task that is polled to its result (the
//! status message carrying the last line printed, `notifications/tasks` pushed), a
//! cancelled task's code is killed, tasks expire and pass their time limit, a consent
//! prompt inside a task is its input request, a restart ends tasks and says so, and
//! unknown ids, stray input keys and a client over its task cap are clear errors.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, TaskPayload, TaskStatus, TaskStatusNotificationParams,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use super::{As, Net, both_modes, data_dir_for, server_command_as, until_some};

/// A client that declares Tasks and elicitation (answered only through tasks here), and
/// keeps the task statuses the server pushed.
#[derive(Clone, Default)]
struct TaskClient {
    pushed: Arc<Mutex<Vec<(String, TaskStatus)>>>,
}

impl ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::builder().enable_tasks().build();
        caps.elicitation = Some(Default::default());
        ClientConfig::new(caps, Implementation::new("task-test-client", "1.0"))
    }

    async fn on_task_status(
        &self,
        params: TaskStatusNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) {
        let task = &params.task;
        self.pushed
            .lock()
            .unwrap()
            .push((task.task.task_id.clone(), task.status()));
    }
}

struct Tasked {
    client: RunningService<RoleClient, TaskClient>,
    handler: TaskClient,
}

async fn start_in(who: As, data: &std::path::Path, env: &[(&str, &str)]) -> Tasked {
    // 0: every eligible call becomes a task (none can end before its own start).
    let mut all = env.to_vec();
    if !env.iter().any(|(k, _)| *k == "SANDBOX_TASK_AFTER_MS") {
        all.push(("SANDBOX_TASK_AFTER_MS", "0"));
    }
    let cmd = server_command_as(who, Net::Host, &all, &[], data);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let handler = TaskClient::default();
    // Tasks are the 2026-07-28 protocol's: discovered, not initialized.
    let modern = rmcp::service::ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    };
    let client = rmcp::service::serve_client_with_lifecycle(handler.clone(), transport, modern)
        .await
        .unwrap();
    Tasked { client, handler }
}

impl Tasked {
    /// One `tools/call`, not driven further: a result, or a task id.
    async fn call(&self, tool: &'static str, args: Value) -> Result<Value, String> {
        let Value::Object(map) = args else { panic!() };
        let params = CallToolRequestParams::new(tool).with_arguments(map);
        match self.client.peer().call_tool_once(params).await.unwrap() {
            CallToolResponse::Complete(r) => Ok(r.structured_content.unwrap()),
            CallToolResponse::Task(task) => Err(task.task.task_id),
            other => panic!("{other:?}"),
        }
    }

    async fn run(&self, session: &str, code: &str) -> Result<Value, String> {
        self.call("execute_python", json!({"session": session, "code": code}))
            .await
    }

    async fn get(&self, id: &str) -> Result<rmcp::model::DetailedTask, String> {
        self.client
            .get_task(GetTaskParams::new(id))
            .await
            .map(|r| r.task)
            .map_err(|e| e.to_string())
    }

    /// Polls `id` until `done` holds of it (a window of 60 s).
    async fn until(
        &self,
        id: &str,
        done: impl Fn(&rmcp::model::DetailedTask) -> bool,
    ) -> rmcp::model::DetailedTask {
        let poll = async || Some(self.get(id).await.unwrap()).filter(&done);
        match until_some(1200, Duration::from_millis(50), poll).await {
            Some(task) => task,
            None => panic!(
                "task {id} never reached the expected state: {:?}",
                self.get(id).await
            ),
        }
    }

    /// A run's result, whether it answered at once or as a task.
    async fn run_to_end(&self, session: &str, code: &str) -> Value {
        match self.run(session, code).await {
            Ok(r) => r,
            Err(id) => completed(&self.finished(&id).await),
        }
    }

    async fn finished(&self, id: &str) -> rmcp::model::DetailedTask {
        self.until(id, |t| t.status().is_terminal()).await
    }
}

/// The structured result of a completed task.
fn completed(task: &rmcp::model::DetailedTask) -> Value {
    match &task.payload {
        TaskPayload::Completed { result } => result["structuredContent"].clone(),
        other => panic!("not completed: {other:?}"),
    }
}

fn failed(task: &rmcp::model::DetailedTask) -> String {
    match &task.payload {
        TaskPayload::Failed { error } => error["message"].as_str().unwrap().to_string(),
        other => panic!("not failed: {other:?}"),
    }
}

#[tokio::test]
async fn a_long_call_becomes_a_task_polled_to_its_result() {
    for who in both_modes() {
        let data = data_dir_for(who);
        let t = start_in(who, data.path(), &[]).await;
        // Long: a task, whose status message shows the last line printed.
        let code = "import time\nprint('halfway \\x1b[2J there', flush=True)\ntime.sleep(3)\nprint('done')";
        let id = t.run("s", code).await.expect_err("a task");
        let working = t
            .until(&id, |t| {
                t.task
                    .status_message
                    .as_deref()
                    .is_some_and(|m| m.contains("halfway"))
            })
            .await;
        assert_eq!(working.status(), TaskStatus::Working);
        let message = working.task.status_message.unwrap();
        assert!(
            message.contains("last output: halfway [2J there"),
            "{message}"
        );
        assert!(!message.contains('\u{1b}'), "{message}");
        let done = t.finished(&id).await;
        assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
        let r = completed(&done);
        assert_eq!(r["stdout"], "halfway \u{1b}[2J there\ndone\n", "{r}");
        assert_eq!(r["status"], "ok");
        // The changes were pushed, the last one `completed`.
        let last_pushed = async || {
            let pushed = t.handler.pushed.lock().unwrap().clone();
            pushed
                .iter()
                .any(|(i, s)| *i == id && *s == TaskStatus::Completed)
                .then_some(())
        };
        until_some(100, Duration::from_millis(50), last_pushed).await;
        let pushed = t.handler.pushed.lock().unwrap().clone();
        let mine: Vec<TaskStatus> = pushed
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            mine.first(),
            Some(&TaskStatus::Working),
            "{who:?}: {pushed:?}"
        );
        assert_eq!(
            mine.last(),
            Some(&TaskStatus::Completed),
            "{who:?}: {pushed:?}"
        );
        // An unknown id is a clear error.
        let e = t.get("no-such-task").await.unwrap_err();
        assert!(e.contains("unknown task \"no-such-task\""), "{e}");
        t.client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_cancelled_task_kills_its_code_and_frees_its_session() {
    let data = data_dir_for(As::Root);
    let t = start_in(As::Root, data.path(), &[]).await;
    let id = t
        .run(
            "c",
            "import time\nprint('started', flush=True)\ntime.sleep(600)",
        )
        .await
        .expect_err("a task");
    t.until(&id, |t| {
        t.task
            .status_message
            .as_deref()
            .is_some_and(|m| m.contains("started"))
    })
    .await;
    t.client
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let done = t.finished(&id).await;
    assert_eq!(done.status(), TaskStatus::Cancelled, "{done:?}");
    // The session is free again (the killed run no longer holds it): a call ends.
    let after = t.run_to_end("c", "print('after')").await;
    assert_eq!(after["stdout"], "after\n", "{after}");
}

#[tokio::test]
async fn tasks_pass_their_time_limit_and_expire() {
    let data = data_dir_for(As::Root);
    let env = [("SANDBOX_TASK_TIMEOUT_S", "2"), ("SANDBOX_TASK_TTL_S", "1")];
    let t = start_in(As::Root, data.path(), &env).await;
    // Past SANDBOX_TASK_TIMEOUT_S: stopped, and said so.
    let id = t
        .run("t", "import time\ntime.sleep(30)")
        .await
        .expect_err("a task");
    let over = t.finished(&id).await;
    let why = match over.status() {
        TaskStatus::Failed => failed(&over),
        _ => completed(&over)["error"]["message"].to_string(),
    };
    assert!(
        why.contains("longer than 2 s") || why.contains("SANDBOX_TASK_TIMEOUT_S (2 s)"),
        "{why}"
    );
    // Finished and kept for its ttlMs (3 s here), then gone: the error says it expired.
    let id = t
        .run("t", "import time\ntime.sleep(1)\nprint('ok')")
        .await
        .expect_err("a task");
    let done = t.finished(&id).await;
    assert_eq!(completed(&done)["stdout"], "ok\n");
    assert_eq!(done.task.ttl_ms, Some(3000));
    let gone = async || t.get(&id).await.err();
    let e = until_some(200, Duration::from_millis(100), gone)
        .await
        .expect("the task was never dropped");
    assert!(e.contains("has expired"), "{e}");
}

#[tokio::test]
async fn consent_inside_a_task_is_its_input_request() {
    for who in both_modes() {
        let data = data_dir_for(who);
        let t = start_in(who, data.path(), &[("CODEGUARD", "off")]).await;
        let (_keep, dir) = super::grants::shared_dir("task rows");
        let id = t
            .call(
                "request_grant",
                json!({"path": dir, "access": "read", "reason": "read the rows", "session": "q"}),
            )
            .await
            .expect_err("a task at once");
        let asking = t
            .until(&id, |t| t.status() == TaskStatus::InputRequired)
            .await;
        let TaskPayload::InputRequired { input_requests } = &asking.payload else {
            panic!("{asking:?}")
        };
        let keys: Vec<&String> = input_requests.keys().collect();
        assert_eq!(keys, ["consent-1"]);
        let asked = serde_json::to_value(&input_requests["consent-1"]).unwrap();
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        let message = asked["params"]["message"].as_str().unwrap();
        assert!(message.contains(&dir.display().to_string()), "{message}");
        // A key never asked is refused, and nothing is applied.
        let stray = UpdateTaskParams::new(
            id.clone(),
            [(
                "consent-9".to_string(),
                json!({"action": "accept", "content": {"approve": true}}),
            )]
            .into_iter()
            .collect(),
        );
        let e = t.client.update_task(stray).await.unwrap_err().to_string();
        assert!(
            e.contains("\"consent-9\" is not a question this task is waiting on"),
            "{e}"
        );
        assert_eq!(
            t.get(&id).await.unwrap().status(),
            TaskStatus::InputRequired
        );
        // The person approves through tasks/update: granted, and the code reads it.
        let answer = UpdateTaskParams::new(
            id.clone(),
            [(
                "consent-1".to_string(),
                json!({"action": "accept", "content": {"approve": true}}),
            )]
            .into_iter()
            .collect(),
        );
        t.client.update_task(answer).await.unwrap();
        let r = completed(&t.finished(&id).await);
        assert_eq!(r["granted"], true, "{r}");
        let read = format!(
            "print(open({:?}).read())",
            dir.join("export.csv").display().to_string()
        );
        let out = t.run_to_end("q", &read).await;
        assert_eq!(out["stdout"], "task rows\n", "{who:?}: {out}");
        t.client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_restart_ends_tasks_and_a_later_poll_says_so() {
    let data = data_dir_for(As::Root);
    let t = start_in(As::Root, data.path(), &[]).await;
    let id = t
        .run("r", "import time\ntime.sleep(600)")
        .await
        .expect_err("a task");
    t.client.cancel().await.unwrap();
    let t = start_in(As::Root, data.path(), &[]).await;
    let e = t.get(&id).await.unwrap_err();
    assert!(e.contains("ended when the warden server restarted"), "{e}");
}

#[tokio::test]
async fn a_client_over_its_task_cap_is_refused() {
    let data = data_dir_for(As::Root);
    let t = start_in(As::Root, data.path(), &[("SANDBOX_MAX_TASKS", "1")]).await;
    let id = t
        .run("a", "import time\ntime.sleep(600)")
        .await
        .expect_err("a task");
    let refused = t.run("b", "print(1)").await.expect("refused at once");
    assert_eq!(refused["error"]["type"], "TooManyTasks", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOX_MAX_TASKS")
    );
    t.client
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    t.finished(&id).await;
    let id = t
        .run("b", "print(1)")
        .await
        .expect_err("room again, for a task");
    assert_eq!(completed(&t.finished(&id).await)["stdout"], "1\n");
}

/// With a limit no call reaches, a client that declares Tasks gets plain results.
#[tokio::test]
async fn a_call_that_ends_in_time_answers_as_before() {
    let data = data_dir_for(As::Root);
    let t = start_in(
        As::Root,
        data.path(),
        &[("SANDBOX_TASK_AFTER_MS", "600000")],
    )
    .await;
    let r = t.run("s", "print('quick')").await.expect("a plain result");
    assert_eq!(r["stdout"], "quick\n");
}

/// `tasks/get` over HTTP: the task, or the JSON-RPC error's message.
fn http_get(client: &mut super::http::McpHttp, id: &str) -> Result<Value, String> {
    // A stateless client declares its capabilities on every request.
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let params =
        json!({"taskId": id, "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}});
    let (rid, reply) = client.request_with("tasks/get", params, |_| {});
    assert_eq!(reply.status, 200, "{reply:?}");
    let response = reply.response(rid);
    match response.get("error") {
        Some(e) => Err(e["message"].as_str().unwrap_or_default().to_string()),
        None => Ok(response["result"].clone()),
    }
}

/// Over HTTP, 32 tasks run at once, each with its own output; a task belongs to the
/// client that made it: a client in another scope cannot see it, the same client on a
/// new connection can.
#[test]
fn over_http_32_tasks_run_at_once_and_each_is_its_clients_own() {
    use super::http::HttpServer;
    let server = HttpServer::start("127.0.0.1:0", &[("SANDBOX_TASK_AFTER_MS", "0")]);
    // The client: 2026-07-28 (stateless), declaring Tasks on every request.
    let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mut a = server.client().stateless();
    let ids: Vec<String> = (0..32)
        .map(|i| {
            let code = format!("import time\ntime.sleep(1)\nprint('task', {i})");
            let args = json!({"session": format!("s{i}"), "code": code});
            let meta = json!({"io.modelcontextprotocol/clientCapabilities": caps});
            let params = json!({"name": "execute_python", "arguments": args, "_meta": meta});
            let r = a.request("tools/call", params);
            assert_eq!(r["resultType"], "task", "{r}");
            r["taskId"].as_str().unwrap().to_string()
        })
        .collect();
    let mut left: Vec<usize> = (0..32).collect();
    for _ in 0..1200 {
        left.retain(|&i| {
            let task = http_get(&mut a, &ids[i]).unwrap();
            if task["status"] != "completed" {
                assert_eq!(task["status"], "working", "{task}");
                return true;
            }
            let out = &task["result"]["structuredContent"]["stdout"];
            assert_eq!(out, &json!(format!("task {i}\n")), "{task}");
            false
        });
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(left.is_empty(), "unfinished: {left:?}");
    // A client of an MCP session (another scope) does not see it, even declaring Tasks.
    let mut b = server.client();
    b.initialize(caps);
    let e = http_get(&mut b, &ids[0]).unwrap_err();
    assert!(e.starts_with("unknown task"), "{e}");
    // The same client on a new connection does (a stateless client is its credential).
    let mut again = server.client().stateless();
    assert_eq!(
        http_get(&mut again, &ids[31]).unwrap()["status"],
        "completed"
    );
}
