//! The `execute_python` contract: its arguments and its result, as JSON schemas the
//! client sees, plus the checks on input that happen before any worker is touched.

use std::collections::BTreeMap;

use base64::Engine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backend::{BackendKind, InputFile};
use crate::guard::Verdict;
use crate::workspace::FileChange;

/// Largest `code` accepted, in bytes.
pub const MAX_CODE_BYTES: usize = 1 << 20;
/// Largest total of all `inputs`, decoded, in bytes.
pub const MAX_INPUT_BYTES: usize = 16 << 20;
/// Longest exception type name returned (a class name is the code's to choose).
pub const MAX_ERROR_TYPE: usize = 200;
/// Longest session name.
pub const MAX_SESSION_NAME: usize = 64;

/// `execute_python`'s arguments. Unknown arguments are refused by name (a model that
/// writes `timeout` instead of `timeout_s` learns it at once instead of being ignored).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    /// The Python source code to run. The value of a final bare expression is returned
    /// as `result` (like a notebook cell).
    pub code: String,
    /// Session name (letters, digits, `_`, `-`, `.`; default "default"). Variables and
    /// workspace files persist between calls of one session; sessions share nothing.
    #[serde(default)]
    pub session: Option<String>,
    /// Wall-clock limit for this call in seconds, greater than 0; fractions allowed
    /// (default from SANDBOX_TIMEOUT_S; at most 120).
    #[serde(default, deserialize_with = "seconds")]
    #[schemars(with = "f64", extend("exclusiveMinimum" = 0))]
    pub timeout_s: Option<f64>,
    /// Files written into the session's workspace before the code runs: relative path →
    /// text, or `{"base64": "..."}` for binary content. 16 MiB in all.
    #[serde(default)]
    pub inputs: Option<BTreeMap<String, InputContent>>,
    /// Set by the server, never by the client: the call may become an MCP Task, whose
    /// limit (`SANDBOX_TASK_TIMEOUT_S`) replaces the plain call's.
    #[serde(skip)]
    #[schemars(skip)]
    pub task_limit: Option<std::time::Duration>,
    /// true: if the call raises, times out, is cancelled, trips a wire, passes a cap or
    /// loses its worker, the workspace is put back exactly as it was before it (the
    /// interpreter's variables are not). Default from SANDBOX_TRANSACTIONS.
    #[serde(default)]
    pub transactional: Option<bool>,
}

/// What `timeout_s` accepts: a JSON number (`15`, `15.0`, `2.5`), or a string holding
/// one (`"2"`, as some clients send every value), greater than 0; `null` is "not given".
/// Anything else is refused with a message that says what to send.
fn seconds<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    let raw = Option::<Raw>::deserialize(de).map_err(|_| {
        serde::de::Error::custom("must be a number of seconds greater than 0, e.g. 15 or 2.5")
    })?;
    let value = match raw {
        None => return Ok(None),
        Some(Raw::Number(n)) => n,
        Some(Raw::Text(text)) => text.trim().parse::<f64>().map_err(|_| {
            serde::de::Error::custom(format!(
                "must be a number of seconds greater than 0, e.g. 15 or 2.5; got the string {:?}",
                text.chars().take(40).collect::<String>()
            ))
        })?,
    };
    check_seconds(value)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// A wall-clock limit must be a finite number of seconds above 0. Pure.
pub fn check_seconds(value: f64) -> Result<f64, String> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(format!(
            "must be a number of seconds greater than 0, e.g. 15 or 2.5; got {value}"
        ))
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum InputContent {
    /// UTF-8 text.
    Text(String),
    /// Binary content.
    Binary {
        /// Standard base64 (with padding).
        base64: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// The code ran to the end.
    Ok,
    /// The code raised an exception, or the call was refused before running.
    Error,
    /// The wall-clock limit was reached; the worker was killed.
    Timeout,
    /// The worker process died (memory limit, crash, forbidden syscall) or was killed.
    Killed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorInfo {
    /// Exception class name, or a warden error kind (InputError, SandboxRefused,
    /// WorkerDied, Timeout...).
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    /// Traceback of the user's own frames ("" when not applicable).
    pub traceback: String,
    /// The same call may succeed if retried in a moment (every worker was busy); nothing
    /// about the code or the arguments is wrong.
    #[serde(default)]
    pub retryable: bool,
    /// `CapExceeded`: the cap that refused the call, its limit and what was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<Box<crate::caps::Exceeded>>,
}

impl ErrorInfo {
    pub fn new(kind: &str, message: impl Into<String>) -> ErrorInfo {
        ErrorInfo {
            kind: kind.to_string(),
            message: message.into(),
            traceback: String::new(),
            retryable: false,
            cap: None,
        }
    }

    /// A call refused by a cap (`CapExceeded`).
    pub fn cap_exceeded(exceeded: crate::caps::Exceeded) -> ErrorInfo {
        ErrorInfo {
            cap: Some(Box::new(exceeded.clone())),
            ..ErrorInfo::new("CapExceeded", exceeded.message())
        }
    }

    /// Marks the error as worth retrying unchanged.
    pub fn retryable(mut self) -> ErrorInfo {
        self.retryable = true;
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecResult {
    pub status: ExecStatus,
    /// What the code wrote to fd 1 (Python and C alike), decoded lossily as UTF-8.
    pub stdout: String,
    /// What the code wrote to fd 2.
    pub stderr: String,
    /// repr() of the final bare expression, if it was not None.
    pub result: Option<String>,
    pub error: Option<ErrorInfo>,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// Some output (stdout, stderr or result) was cut at the output limit.
    pub truncated: bool,
    /// The backend that really ran the code.
    pub backend: BackendKind,
    /// The backend EXECUTION_BACKEND asked for (differs from `backend` only when Docker
    /// was unavailable; `warnings` then says why).
    pub configured_backend: BackendKind,
    /// The container runtime that ran the code, configured and resolved (the Docker
    /// backend; absent on the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<crate::backend::ContainerRuntime>,
    pub session: String,
    /// Files created, modified or deleted in the workspace by this call, in path order:
    /// the first 200 (see `files_total`).
    pub files: Vec<FileChange>,
    /// How many changes there were (more than `files` lists when over 200).
    pub files_total: u64,
    /// false when parts of the workspace are beyond what warden tracks (too many entries,
    /// too deep; `warnings` says which): changes there are not reported. A deletion is
    /// never reported unless the file is really gone.
    pub files_complete: bool,
    /// The fields that were cut (`stdout`, `stderr`, `result`, `error.type`,
    /// `error.message`, `error.traceback`, `files`); `truncated` is true when any was.
    pub truncated_fields: Vec<String>,
    /// A new worker was started for this call after the previous one was lost (timeout,
    /// crash): variables from earlier calls are gone; workspace files are kept.
    pub worker_restarted: bool,
    /// Sandbox walls that are not in force, and other things the caller must know.
    pub warnings: Vec<String>,
    /// The static guard's verdict (absent when CODEGUARD=off or the call was refused
    /// before the guard ran).
    pub guard: Option<Verdict>,
    /// The workspace as the code sees it, its working directory and HOME: `/workspace`
    /// in the sandbox's private world (absent when no worker ran).
    pub workspace: Option<String>,
    /// What is left of the session's and the client's caps after this call (absent when
    /// no `SANDBOX_MAX_*` or `SANDBOX_CLIENT_MAX_*` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::caps::Budget>,
    /// The call was transactional: had it failed, its workspace changes would be undone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transactional: bool,
    /// The transactional call failed and the workspace is back exactly as it was before
    /// it (names, contents, modes, links); the interpreter's variables are not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rolled_back: bool,
    /// What the rollback undid, as `files` shows changes (the first 200, in path order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undone: Vec<FileChange>,
    /// How many changes the rollback undid in all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub undone_total: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ExecResult {
    /// Puts a workspace change report in the result: the listed changes, the count, and
    /// a warning when the list is cut or the report is incomplete.
    pub fn set_files(&mut self, report: crate::workspace::Summary) {
        self.files_total = report.total;
        self.files_complete = report.incomplete.is_none();
        if report.total > report.files.len() as u64 {
            self.mark_truncated("files");
            self.warnings.push(format!(
                "{} workspace changes; `files` lists the first {} in path order",
                report.total,
                report.files.len()
            ));
        }
        if let Some(why) = report.by_scan {
            self.warnings.push(format!(
                "tracking for this session is by scan (each call's changes are found by \
                 walking its workspace, not from inotify) because {why}"
            ));
        }
        if let Some(why) = report.incomplete {
            self.warnings.push(format!(
                "the workspace change report is incomplete: {why} (no deletion is ever guessed)"
            ));
        }
        self.files = report.files;
    }

    /// Caps every text field the sandboxed code chose, at `limit` bytes each (the
    /// exception's type name at [`MAX_ERROR_TYPE`]), marking what was cut. Applied where a
    /// result is finalised, whatever produced it.
    pub fn cap_text(&mut self, limit: usize) {
        let mut cut = Vec::new();
        for (field, text, max) in [
            ("stdout", &mut self.stdout, limit),
            ("stderr", &mut self.stderr, limit),
        ] {
            if crate::text::cap_in_place(text, max) {
                cut.push(field);
            }
        }
        if let Some(r) = &mut self.result
            && crate::text::cap_in_place(r, limit)
        {
            cut.push("result");
        }
        if let Some(e) = &mut self.error {
            for (field, text, max) in [
                ("error.type", &mut e.kind, MAX_ERROR_TYPE),
                ("error.message", &mut e.message, limit),
                ("error.traceback", &mut e.traceback, limit),
            ] {
                if crate::text::cap_in_place(text, max) {
                    cut.push(field);
                }
            }
        }
        for field in cut {
            self.mark_truncated(field);
        }
    }

    /// Records that `field` was cut.
    pub fn mark_truncated(&mut self, field: &str) {
        self.truncated = true;
        if !self.truncated_fields.iter().any(|f| f == field) {
            self.truncated_fields.push(field.to_string());
        }
    }

    /// A result for a call that was refused before any code ran.
    pub fn refused(session: &str, error: ErrorInfo, warnings: Vec<String>) -> ExecResult {
        ExecResult {
            status: ExecStatus::Error,
            stdout: String::new(),
            stderr: String::new(),
            result: None,
            error: Some(error),
            duration_ms: 0,
            timed_out: false,
            truncated: false,
            backend: BackendKind::Host,
            configured_backend: BackendKind::Host,
            container_runtime: None,
            session: session.to_string(),
            files: Vec::new(),
            files_total: 0,
            files_complete: true,
            truncated_fields: Vec::new(),
            worker_restarted: false,
            warnings,
            guard: None,
            workspace: None,
            budget: None,
            transactional: false,
            rolled_back: false,
            undone: Vec::new(),
            undone_total: 0,
        }
    }
}

/// Checks a session name: it becomes a directory name.
pub fn validate_session_name(name: &str) -> Result<(), ErrorInfo> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SESSION_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(ErrorInfo::new(
            "InvalidArgument",
            format!(
                "session name {name:?} is not valid: use 1 to {MAX_SESSION_NAME} letters, digits, '_', '-' or '.', not starting with '.'"
            ),
        ))
    }
}

/// Validates and encodes `inputs` for the worker (which writes them, inside the sandbox).
pub fn prepare_inputs(
    inputs: Option<&BTreeMap<String, InputContent>>,
) -> Result<Vec<InputFile>, ErrorInfo> {
    let Some(inputs) = inputs else {
        return Ok(Vec::new());
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let mut total = 0usize;
    let mut out = Vec::with_capacity(inputs.len());
    for (name, content) in inputs {
        validate_input_name(name)?;
        let (len, b64) = match content {
            InputContent::Text(text) => (text.len(), engine.encode(text.as_bytes())),
            InputContent::Binary { base64 } => {
                let decoded = engine.decode(base64.as_bytes()).map_err(|e| {
                    ErrorInfo::new(
                        "InvalidArgument",
                        format!("input {name:?}: base64 is not valid: {e}"),
                    )
                })?;
                (decoded.len(), base64.clone())
            }
        };
        total = total.saturating_add(len);
        if total > MAX_INPUT_BYTES {
            return Err(ErrorInfo::new(
                "InputTooLarge",
                format!(
                    "inputs total more than {} MiB; write large data in several calls or generate it in code",
                    MAX_INPUT_BYTES >> 20
                ),
            ));
        }
        out.push(InputFile {
            name: name.clone(),
            b64,
        });
    }
    Ok(out)
}

fn validate_input_name(name: &str) -> Result<(), ErrorInfo> {
    let bad = name.is_empty()
        || name.len() > 1024
        || name.starts_with('/')
        || name.contains('\0')
        || name.contains('\\')
        || name
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == ".." || part.len() > 255);
    if bad {
        return Err(ErrorInfo::new(
            "InvalidArgument",
            format!(
                "input name {name:?} must be a relative path inside the workspace (no '..', no leading '/')"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Result<ExecuteArgs, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn timeout_takes_numbers_fractions_and_numeric_strings() {
        use serde_json::json;
        for (given, want) in [
            (json!(15), 15.0),
            (json!(15.0), 15.0),
            (json!(2.5), 2.5),
            (json!("2"), 2.0),
            (json!(" 0.25 "), 0.25),
        ] {
            let args = parse(json!({"code": "1", "timeout_s": given})).unwrap();
            assert_eq!(args.timeout_s, Some(want));
        }
        assert_eq!(parse(json!({"code": "1"})).unwrap().timeout_s, None);
        assert_eq!(
            parse(json!({"code": "1", "timeout_s": null}))
                .unwrap()
                .timeout_s,
            None
        );
    }

    #[test]
    fn zero_negative_and_non_numeric_timeouts_are_clear_errors() {
        use serde_json::json;
        for bad in [
            json!(0),
            json!(-1),
            json!(-0.5),
            json!("soon"),
            json!(true),
            json!([1]),
        ] {
            let err = parse(json!({"code": "1", "timeout_s": bad})).unwrap_err();
            assert!(err.contains("greater than 0"), "{bad}: {err}");
        }
    }

    #[test]
    fn session_names_are_safe_directory_names() {
        assert!(validate_session_name("default").is_ok());
        assert!(validate_session_name("a-b_c.1").is_ok());
        for bad in ["", "..", ".hidden", "a/b", "a b", &"x".repeat(65), "é"] {
            assert!(validate_session_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn input_names_cannot_leave_the_workspace() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "",
            "a\0b",
            "./a",
        ] {
            let mut map = BTreeMap::new();
            map.insert(bad.to_string(), InputContent::Text("x".into()));
            assert!(prepare_inputs(Some(&map)).is_err(), "{bad:?}");
        }
        let mut map = BTreeMap::new();
        map.insert("data/in.csv".to_string(), InputContent::Text("a,b".into()));
        map.insert(
            "blob.bin".to_string(),
            InputContent::Binary {
                base64: "AAEC".into(),
            },
        );
        let files = prepare_inputs(Some(&map)).unwrap();
        assert_eq!(files.len(), 2);
    }

    #[test]
    fn inputs_are_capped_in_total() {
        let mut map = BTreeMap::new();
        map.insert(
            "a".to_string(),
            InputContent::Text("x".repeat(MAX_INPUT_BYTES)),
        );
        map.insert("b".to_string(), InputContent::Text("y".into()));
        let err = prepare_inputs(Some(&map)).unwrap_err();
        assert_eq!(err.kind, "InputTooLarge");
    }

    #[test]
    fn bad_base64_is_a_clear_error() {
        let mut map = BTreeMap::new();
        map.insert(
            "a.bin".to_string(),
            InputContent::Binary {
                base64: "not base64!".into(),
            },
        );
        assert!(
            prepare_inputs(Some(&map))
                .unwrap_err()
                .message
                .contains("base64")
        );
    }
}
