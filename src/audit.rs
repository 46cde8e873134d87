//! The audit log: one JSON line per execution, guard violation, grant decision and
//! selftest, appended under the data directory (which no sandbox can reach). Each line
//! carries the SHA-256 of the previous line's hash and its own content, so removing or
//! editing a line breaks the chain; [`verify`] finds the first broken line.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The hash that starts every chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Seconds since the Unix epoch.
    pub ts: u64,
    pub session: String,
    /// guard, execute, grant, selftest.
    pub phase: String,
    /// allowed, blocked, ok, error, timeout, killed, approved, refused, ...
    pub decision: String,
    pub rule: Option<String>,
    pub detail: String,
    /// SHA-256 of the arguments (the code, the requested path), never the text itself.
    pub args_sha256: Option<String>,
    /// The decision was enforced (false in shadow mode).
    pub enforced: bool,
    pub kill_run: bool,
    pub duration_ms: Option<u64>,
}

impl AuditEvent {
    /// An event stamped now, enforced, with no rule, detail or duration yet.
    pub fn now(session: &str, phase: &str, decision: &str) -> AuditEvent {
        AuditEvent {
            ts: crate::grants::now_secs(),
            session: session.to_string(),
            phase: phase.to_string(),
            decision: decision.to_string(),
            rule: None,
            detail: String::new(),
            args_sha256: None,
            enforced: true,
            kill_run: false,
            duration_ms: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    #[serde(flatten)]
    event: AuditEvent,
    prev: String,
    hash: String,
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open the audit log {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the audit log {path} is broken at line {line}: {problem}; it may have been tampered with: keep it for investigation and move it aside to start a new log"
    )]
    Broken {
        path: PathBuf,
        line: usize,
        problem: String,
    },
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The hash of one entry: SHA-256 over the previous hash and the event's JSON. Pure.
pub fn chain_hash(prev: &str, event: &AuditEvent) -> String {
    let body = serde_json::to_string(event).unwrap_or_default();
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(b"\n");
    h.update(body.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

pub struct AuditLog {
    path: PathBuf,
    /// The open file and the hash of the last line written.
    state: Mutex<(std::fs::File, String)>,
}

impl AuditLog {
    /// Opens (or creates, mode 0600) the log and continues its chain.
    ///
    /// # Errors
    /// When the file cannot be opened, or its existing chain is broken.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        let last = verify(path)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode_0600()
            .open(path)
            .map_err(|source| AuditError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            state: Mutex::new((file, last)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event. A failure to write is logged, never fatal to the call.
    pub fn record(&self, event: AuditEvent) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let hash = chain_hash(&state.1, &event);
        let line = Line {
            event,
            prev: state.1.clone(),
            hash: hash.clone(),
        };
        let Ok(mut text) = serde_json::to_vec(&line) else {
            return;
        };
        text.push(b'\n');
        match state.0.write_all(&text) {
            Ok(()) => state.1 = hash,
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "audit write failed")
            }
        }
    }
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// Checks the whole chain; returns the last hash (the genesis hash for an absent or
/// empty log).
///
/// # Errors
/// [`AuditError::Broken`] with the first line that does not chain.
pub fn verify(path: &Path) -> Result<String, AuditError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(GENESIS.to_string()),
        Err(source) => {
            return Err(AuditError::Open {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut prev = GENESIS.to_string();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let broken = |problem: String| AuditError::Broken {
            path: path.to_path_buf(),
            line: i + 1,
            problem,
        };
        let line = line.map_err(|e| broken(e.to_string()))?;
        let entry: Line = serde_json::from_str(&line).map_err(|e| broken(e.to_string()))?;
        if entry.prev != prev {
            return Err(broken("does not follow the line before it".to_string()));
        }
        if chain_hash(&prev, &entry.event) != entry.hash {
            return Err(broken("its content does not match its hash".to_string()));
        }
        prev = entry.hash;
    }
    Ok(prev)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(detail: &str) -> AuditEvent {
        AuditEvent {
            ts: 1,
            session: "s".into(),
            phase: "grant".into(),
            decision: "approved".into(),
            rule: None,
            detail: detail.into(),
            args_sha256: Some(sha256_hex(b"/data")),
            enforced: true,
            kill_run: false,
            duration_ms: None,
        }
    }

    #[test]
    fn chain_survives_reopening_and_detects_tampering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        log.record(event("one"));
        log.record(event("two"));
        drop(log);
        let log = AuditLog::open(&path).unwrap();
        log.record(event("three"));
        drop(log);
        assert!(verify(&path).is_ok());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3);

        let edited = text.replacen("\"two\"", "\"tw0\"", 1);
        std::fs::write(&path, edited).unwrap();
        let err = verify(&path).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");

        let lines: Vec<&str> = text.lines().collect();
        std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
        let err = verify(&path).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("follow"), "{err}");
        assert!(
            AuditLog::open(&path).is_err(),
            "a broken chain is not continued"
        );
    }

    #[test]
    fn file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        AuditLog::open(&path).unwrap().record(event("x"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
