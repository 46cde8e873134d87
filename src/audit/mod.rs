//! The audit log: one sealed JSON line per execution, guard violation, grant decision and
//! selftest, shared by every warden server of one user (Claude Desktop and Claude Code
//! each start one) and kept out of every sandbox's reach under the data directory.
//!
//! - **Keyed chain** ([`chain`]): each record carries a sequence number, the previous
//!   record's MAC and its own HMAC-SHA256 under a key in a 0600 file, so a record cannot be
//!   edited, removed, inserted or reordered, nor the chain recomputed, without the key.
//! - **Many servers** ([`store`]): every append happens under an exclusive `flock`, after
//!   reading and checking whatever the other servers appended since; a record is written
//!   with one `write` and cut back if that write fails, so records never interleave and a
//!   record is whole or absent. A torn tail (a writer killed mid-write) is cut at the next
//!   append or start, and the cut is itself recorded.
//! - **Segments and a signed checkpoint**: the log rotates into 16 MiB segments; a
//!   checkpoint (sealed with the same key) says how far it was checked, so start-up checks
//!   only what was written since (and that the checkpointed record and the sizes of sealed
//!   segments are unchanged): start-up does not grow with the log. `warden audit-verify`
//!   checks every record.
//! - **A broken log never stops warden**: the damaged segment (and any after it) is renamed
//!   `*.broken.jsonl` and kept, a new segment starts with a record of the break, and every
//!   result warns until the set-aside files are moved away.
//! - **No call runs unaudited**: [`AuditLog::record`] returns an error when the record
//!   cannot be written (disk full, file size limit, lock held), and callers refuse the
//!   call.

mod chain;
mod store;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use chain::Finding;
use chain::{Body, Key, Pos};

/// A segment is sealed (and the next one started) once it reaches this size.
pub const SEGMENT_BYTES: u64 = 16 << 20;
/// The checkpoint is renewed at least this often (records), so start-up never checks
/// more than about this many records plus the anchor.
const CHECKPOINT_EVERY: u64 = 1000;
/// Longest wait for other servers' appends: long enough that servers sharing a data
/// directory on a slow or overloaded machine take turns (two seconds were not, under
/// emulation: a waiter lost every race while two others appended in turn), short enough
/// that a hung holder does not stall calls for long.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest text of any one field of a record (the rest is cut, marked with `…`).
const MAX_FIELD: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Seconds since the Unix epoch.
    pub ts: u64,
    pub session: String,
    /// guard, execute, grant, selftest, audit.
    pub phase: String,
    /// allowed, blocked, start, ok, error, timeout, killed, approved, refused, break, ...
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

    /// Every text field capped and with control characters made visible: exception
    /// names and messages come from sandboxed code.
    fn bounded(mut self) -> AuditEvent {
        for field in [
            &mut self.session,
            &mut self.phase,
            &mut self.decision,
            &mut self.detail,
        ] {
            bound(field);
        }
        if let Some(rule) = &mut self.rule {
            bound(rule);
        }
        self
    }
}

fn bound(field: &mut String) {
    if let std::borrow::Cow::Owned(escaped) = crate::text::escape_controls(field) {
        *field = escaped;
    }
    if crate::text::cap_in_place(field, MAX_FIELD) {
        field.push('…');
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::hex(&Sha256::digest(bytes))
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("the audit log in {dir} cannot be opened: {reason}")]
    Unavailable { dir: PathBuf, reason: String },
    #[error("the audit record could not be written to {dir}: {source}")]
    Write {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot check the audit log in {dir}: {reason}")]
    Verify { dir: PathBuf, reason: String },
}

/// The log as one server holds it.
pub struct AuditLog {
    dir: PathBuf,
    instance: String,
    /// [`SEGMENT_BYTES`], smaller in tests.
    segment_bytes: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    open: Option<Open>,
    /// Why the log could not be opened, the last time it was tried.
    error: Option<String>,
    /// Said in every result for this server's life.
    warnings: Vec<String>,
}

/// The end of the log as this server last saw it (under the lock).
struct Open {
    key: Key,
    lock: Arc<store::Lock>,
    seg: u64,
    file: File,
    id: (u64, u64),
    /// Bytes of `seg` checked (and, after our own appends, its size).
    offset: u64,
    pos: Pos,
    sealed: Vec<(u64, u64)>,
    checkpointed: u64,
}

impl AuditLog {
    /// Opens the log in `dir` (created 0700 when missing) for the server `instance`.
    /// Never fails: a log that cannot be opened now is retried at each record (which
    /// fails, so calls are refused, until it can), and a broken log is set aside.
    pub fn open(dir: &Path, instance: &str) -> AuditLog {
        AuditLog::open_with(dir, instance, SEGMENT_BYTES)
    }

    fn open_with(dir: &Path, instance: &str, segment_bytes: u64) -> AuditLog {
        let log = AuditLog {
            dir: dir.to_path_buf(),
            instance: instance.to_string(),
            segment_bytes,
            inner: Mutex::new(Inner::default()),
        };
        if let Ok(mut inner) = log.inner.lock() {
            log.ensure_open(&mut inner);
            if let Some(e) = &inner.error {
                tracing::error!(dir = %dir.display(), error = %e, "the audit log cannot be opened; calls are refused until it can");
            }
            for w in &inner.warnings {
                tracing::warn!("{w}");
            }
        }
        log
    }

    /// The audit directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one event. On an error nothing was written, and the caller must not let
    /// the action it records go ahead unaudited.
    pub fn record(&self, event: AuditEvent) -> Result<(), AuditError> {
        let mut inner = self.inner.lock().map_err(|_| AuditError::Unavailable {
            dir: self.dir.clone(),
            reason: "a thread panicked while writing it".into(),
        })?;
        self.ensure_open(&mut inner);
        let Inner {
            open,
            warnings,
            error,
        } = &mut *inner;
        let Some(o) = open.as_mut() else {
            return Err(AuditError::Unavailable {
                dir: self.dir.clone(),
                reason: error.clone().unwrap_or_default(),
            });
        };
        self.append(o, warnings, vec![event.bounded()])
            .map_err(|source| {
                tracing::error!(dir = %self.dir.display(), error = %source, "audit write failed");
                AuditError::Write {
                    dir: self.dir.clone(),
                    source,
                }
            })
    }

    /// What every result must say about the log (a break found, the log unavailable).
    pub fn warnings(&self) -> Vec<String> {
        let Ok(inner) = self.inner.lock() else {
            return vec!["the audit log's state is unknown (a thread panicked)".into()];
        };
        let mut out = inner.warnings.clone();
        if inner.open.is_none()
            && let Some(e) = &inner.error
        {
            out.push(format!(
                "the audit log in {} cannot be opened ({e}): calls are refused until it can",
                self.dir.display()
            ));
        }
        out
    }

    /// For `warden://settings`.
    pub fn status(&self) -> serde_json::Value {
        let warnings = self.warnings();
        let Ok(inner) = self.inner.lock() else {
            return serde_json::json!({"dir": self.dir, "warnings": warnings});
        };
        let open = inner.open.as_ref();
        serde_json::json!({
            "dir": self.dir,
            "available": open.is_some(),
            "records": open.map(|o| o.pos.seq),
            "segment": open.map(|o| store::segment_name(o.seg)),
            "keyed": "HMAC-SHA256, key in a 0600 file beside the segments",
            "warnings": warnings,
        })
    }

    /// Catches up with the log and renews the checkpoint, so the next start checks
    /// nothing this server wrote (called at shutdown; best effort).
    pub fn checkpoint_now(&self) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let Inner { open, warnings, .. } = &mut *inner;
        let Some(o) = open.as_mut() else { return };
        let lock = o.lock.clone();
        let Ok(_held) = lock.acquire(Duration::from_millis(200)) else {
            return;
        };
        if self.sync(o, warnings).is_ok() {
            self.checkpoint(o);
        }
    }

    fn ensure_open(&self, inner: &mut Inner) {
        if inner.open.is_some() {
            return;
        }
        match self.open_log(&mut inner.warnings) {
            Ok(o) => {
                inner.open = Some(o);
                inner.error = None;
            }
            Err(e) => inner.error = Some(e.to_string()),
        }
    }

    /// Start-up: key, lock, then check from the checkpoint to the end.
    fn open_log(&self, warnings: &mut Vec<String>) -> std::io::Result<Open> {
        store::create_dir(&self.dir)?;
        let (key, key_break) = match store::load_or_create_key(&self.dir) {
            Ok(key) => (key, None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let aside = self.dir.join(format!(
                    "{}.broken.{}",
                    store::KEY_FILE,
                    crate::hex(&crate::random_bytes::<4>())
                ));
                std::fs::rename(self.dir.join(store::KEY_FILE), &aside)?;
                let key = store::load_or_create_key(&self.dir)?;
                let why = format!(
                    "the key file did not hold a key (it was moved to {}); nothing written under the old key can be checked",
                    aside.display()
                );
                (key, Some(why))
            }
            Err(e) => return Err(e),
        };
        let lock = Arc::new(store::Lock::open(&self.dir)?);
        let _held = lock.acquire(LOCK_TIMEOUT)?;
        let (live, broken_files) = store::list(&self.dir)?;
        let mut notes = Vec::new();
        let cp = match store::read_checkpoint(&self.dir, &key) {
            store::Stored::Valid(cp) => Some(cp),
            store::Stored::Missing => None,
            store::Stored::Invalid(why) => {
                let text = format!(
                    "the audit checkpoint is not valid ({why}); the whole log was checked again"
                );
                warnings.push(text.clone());
                notes.push(AuditEvent {
                    detail: text,
                    ..AuditEvent::now("", "audit", "checkpoint_invalid")
                });
                None
            }
        };
        let scan = match key_break {
            Some(why) => Scan::Broken {
                seg: live.first().copied().unwrap_or(1),
                what: why,
                last: Pos::genesis(),
                sealed: Vec::new(),
            },
            None => scan(&self.dir, &key, &live, cp.as_ref())?,
        };
        let mut o = match scan {
            Scan::Good { tip, torn } => {
                let file = store::open_segment(&self.dir, tip.seg, false)?;
                if torn > 0 {
                    file.set_len(tip.offset)?;
                    notes.push(torn_note(tip.seg, torn));
                }
                Open {
                    id: store::file_identity(&file)?,
                    key,
                    lock: lock.clone(),
                    seg: tip.seg,
                    file,
                    offset: tip.offset,
                    pos: tip.pos,
                    sealed: tip.sealed,
                    checkpointed: 0,
                }
            }
            Scan::Broken {
                seg,
                what,
                last,
                sealed,
            } => {
                let (o, warning) = self.restart(key, lock.clone(), seg, &what, last, sealed)?;
                warnings.push(warning);
                o
            }
        };
        if !broken_files.is_empty() {
            warnings.push(format!(
                "the audit directory {} holds segments set aside after an earlier break ({}); \
                 run `warden audit-verify` for details and move them away once investigated",
                self.dir.display(),
                broken_files.join(", ")
            ));
        }
        if o.pos.seq == 0 {
            notes.push(self.genesis_note());
        }
        if !notes.is_empty() {
            self.write_records(&mut o, notes)?;
        }
        self.checkpoint(&mut o);
        Ok(o)
    }

    fn genesis_note(&self) -> AuditEvent {
        let legacy = self
            .dir
            .parent()
            .map(|p| p.join("audit.jsonl"))
            .filter(|p| p.exists());
        AuditEvent {
            detail: match legacy {
                Some(p) => format!(
                    "a new audit log; an unkeyed log of an earlier warden remains at {} and is not part of this chain",
                    p.display()
                ),
                None => "a new audit log".to_string(),
            },
            ..AuditEvent::now("", "audit", "start")
        }
    }

    /// Sets aside live segments from `from` on, and opens a new segment whose first
    /// record says why. Returns the new end and the warning to give.
    fn restart(
        &self,
        key: Key,
        lock: Arc<store::Lock>,
        from: u64,
        what: &str,
        last: Pos,
        sealed: Vec<(u64, u64)>,
    ) -> std::io::Result<(Open, String)> {
        let (live, broken) = store::list(&self.dir)?;
        let mut moved = Vec::new();
        for n in live.iter().filter(|n| **n >= from) {
            moved.push(store::set_aside(&self.dir, *n)?);
        }
        let highest = live
            .iter()
            .copied()
            .chain(broken.iter().filter_map(|b| store::parse_broken_name(b)))
            .chain([from])
            .max()
            .unwrap_or(0);
        let seg = highest + 1;
        let file = store::open_segment(&self.dir, seg, true)?;
        let set_aside = if moved.is_empty() {
            "nothing was left to set aside".to_string()
        } else {
            format!("set aside as {}", moved.join(", "))
        };
        let detail = format!(
            "the audit log was found broken: {what}; {set_aside}; the chain restarts in {}",
            store::segment_name(seg)
        );
        tracing::error!("{detail}");
        let mut o = Open {
            id: store::file_identity(&file)?,
            key,
            lock,
            seg,
            file,
            offset: 0,
            pos: Pos {
                seq: last.seq,
                tail: chain::ZERO.to_string(),
            },
            sealed: sealed.into_iter().filter(|(n, _)| *n < from).collect(),
            checkpointed: 0,
        };
        self.write_records(
            &mut o,
            vec![AuditEvent {
                detail: detail.clone(),
                ..AuditEvent::now("", "audit", "break")
            }],
        )?;
        self.checkpoint(&mut o);
        let warning = format!(
            "{detail}. Run `warden audit-verify` for the first bad record; move the .broken files \
             out of {} once investigated to clear this warning",
            self.dir.display()
        );
        Ok((o, warning))
    }

    /// One append: take the lock, catch up with other servers, rotate when due, write.
    fn append(
        &self,
        o: &mut Open,
        warnings: &mut Vec<String>,
        events: Vec<AuditEvent>,
    ) -> std::io::Result<()> {
        let lock = o.lock.clone();
        let _held = lock.acquire(LOCK_TIMEOUT)?;
        let mut notes = self.sync(o, warnings)?;
        if o.offset >= self.segment_bytes {
            self.rotate(o, warnings)?;
        }
        notes.extend(events);
        self.write_records(o, notes)?;
        if o.pos.seq >= o.checkpointed + CHECKPOINT_EVERY {
            self.checkpoint(o);
        }
        Ok(())
    }

    /// Reads and checks what other servers appended since this one last looked, follows
    /// their rotations and restarts, and cuts a torn tail. Returns records to add first.
    fn sync(&self, o: &mut Open, warnings: &mut Vec<String>) -> std::io::Result<Vec<AuditEvent>> {
        let mut notes = Vec::new();
        loop {
            if store::identity(&self.dir.join(store::segment_name(o.seg))) != Some(o.id) {
                let (live, _) = store::list(&self.dir)?;
                let Some(&next) = live.iter().find(|n| **n > o.seg) else {
                    let what = format!(
                        "{} disappeared while this server was writing to it",
                        store::segment_name(o.seg)
                    );
                    self.restart_in_place(o, &what, warnings)?;
                    return Ok(notes);
                };
                // Another server set our segment aside and restarted the chain.
                self.switch_to(o, next)?;
                let w = chain::walk(&o.key, &self.read_from(o, 0)?, Some(o.pos.clone()), 0);
                if let Some(f) = w.broken {
                    let what = describe(next, &f);
                    self.restart_in_place(o, &what, warnings)?;
                    return Ok(notes);
                }
                for r in &w.restarts {
                    warnings.push(format!(
                        "another warden server found the audit log broken: {}",
                        r.event.detail
                    ));
                }
                o.offset = w.consumed;
                o.pos = w.pos;
                continue;
            }
            let size = o.file.metadata()?.len();
            if size < o.offset {
                let what = format!(
                    "{} shrank from {} to {size} bytes: records were removed",
                    store::segment_name(o.seg),
                    o.offset
                );
                self.restart_in_place(o, &what, warnings)?;
                return Ok(notes);
            }
            if size > o.offset {
                let bytes = self.read_from(o, o.offset)?;
                let w = chain::walk(&o.key, &bytes, Some(o.pos.clone()), 0);
                if let Some(f) = w.broken {
                    let what = format!(
                        "{}, in what another process appended: {}",
                        store::segment_name(o.seg),
                        f.problem
                    );
                    self.restart_in_place(o, &what, warnings)?;
                    return Ok(notes);
                }
                o.offset += w.consumed;
                o.pos = w.pos;
                if w.torn > 0 {
                    o.file.set_len(o.offset)?;
                    notes.push(torn_note(o.seg, w.torn));
                }
            }
            let next = o.seg + 1;
            if store::identity(&self.dir.join(store::segment_name(next))).is_none() {
                return Ok(notes);
            }
            o.sealed.push((o.seg, o.offset));
            self.switch_to(o, next)?;
            o.offset = 0;
        }
    }

    fn restart_in_place(
        &self,
        o: &mut Open,
        what: &str,
        warnings: &mut Vec<String>,
    ) -> std::io::Result<()> {
        let sealed = std::mem::take(&mut o.sealed);
        let (fresh, warning) = self.restart(
            o.key.clone(),
            o.lock.clone(),
            o.seg,
            what,
            o.pos.clone(),
            sealed,
        )?;
        *o = fresh;
        warnings.push(warning);
        Ok(())
    }

    fn switch_to(&self, o: &mut Open, seg: u64) -> std::io::Result<()> {
        o.file = store::open_segment(&self.dir, seg, false)?;
        o.id = store::file_identity(&o.file)?;
        o.seg = seg;
        Ok(())
    }

    fn read_from(&self, o: &Open, offset: u64) -> std::io::Result<Vec<u8>> {
        let size = o.file.metadata()?.len();
        let mut buf = vec![0u8; size.saturating_sub(offset) as usize];
        crate::os::read_exact_at(&o.file, &mut buf, offset)?;
        Ok(buf)
    }

    /// Starts the next segment (or follows another server that just did).
    fn rotate(&self, o: &mut Open, warnings: &mut Vec<String>) -> std::io::Result<()> {
        let next = o.seg + 1;
        match store::open_segment(&self.dir, next, true) {
            Ok(file) => {
                o.sealed.push((o.seg, o.offset));
                o.id = store::file_identity(&file)?;
                o.file = file;
                o.seg = next;
                o.offset = 0;
                self.checkpoint(o);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.sync(o, warnings).map(drop)
            }
            Err(e) => Err(e),
        }
    }

    /// Seals and writes `events` with one write; on failure cuts back what was written.
    fn write_records(&self, o: &mut Open, events: Vec<AuditEvent>) -> std::io::Result<()> {
        let mut buf = String::new();
        let mut pos = o.pos.clone();
        for event in events {
            let body = Body {
                seq: pos.seq + 1,
                instance: self.instance.clone(),
                event,
                prev: pos.tail.clone(),
            };
            let (line, mac) = chain::seal(&o.key, &body).map_err(std::io::Error::other)?;
            buf.push_str(&line);
            buf.push('\n');
            pos = Pos {
                seq: body.seq,
                tail: mac,
            };
        }
        if let Err(e) = std::io::Write::write_all(&mut &o.file, buf.as_bytes()) {
            // A partial record must not stay: we hold the lock, so nothing follows it.
            let _ = o.file.set_len(o.offset);
            return Err(e);
        }
        o.offset += buf.len() as u64;
        o.pos = pos;
        Ok(())
    }

    /// Renews the checkpoint (best effort: a stale checkpoint only means a longer check at
    /// the next start).
    fn checkpoint(&self, o: &mut Open) {
        let cp = chain::Checkpoint {
            segment: o.seg,
            offset: o.offset,
            pos: o.pos.clone(),
            sealed: o.sealed.clone(),
        };
        match store::write_checkpoint(&self.dir, &o.key, &cp) {
            Ok(()) => o.checkpointed = o.pos.seq,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot renew the audit checkpoint")
            }
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.checkpoint_now();
    }
}

fn torn_note(seg: u64, bytes: u64) -> AuditEvent {
    AuditEvent {
        detail: format!(
            "{bytes} bytes of an unfinished record were cut from the end of {} (a writer stopped mid-write)",
            store::segment_name(seg)
        ),
        ..AuditEvent::now("", "audit", "torn_tail_cut")
    }
}

fn describe(seg: u64, f: &Finding) -> String {
    let seq = f.seq.map(|s| format!(" (seq {s})")).unwrap_or_default();
    format!(
        "{} line {}{seq}: {}",
        store::segment_name(seg),
        f.line,
        f.problem
    )
}

/// How far the log checks out.
struct Tip {
    seg: u64,
    offset: u64,
    pos: Pos,
    sealed: Vec<(u64, u64)>,
}

enum Scan {
    /// Everything checks out (`torn` bytes must be cut from the last segment).
    Good { tip: Tip, torn: u64 },
    /// `what` is wrong in segment `seg`; `last` is the last good position known.
    Broken {
        seg: u64,
        what: String,
        last: Pos,
        sealed: Vec<(u64, u64)>,
    },
}

/// What is wrong with the log before the checkpoint, as a broken scan, if anything: a
/// sealed segment whose size changed or that is gone, or the checkpointed record itself.
fn checkpoint_problem(
    dir: &Path,
    key: &Key,
    cp: &chain::Checkpoint,
) -> std::io::Result<Option<Scan>> {
    let broken = |seg: u64, what: String, sealed: Vec<(u64, u64)>| Scan::Broken {
        seg,
        what,
        last: Pos::genesis(),
        sealed,
    };
    for (n, size) in &cp.sealed {
        let now = std::fs::metadata(dir.join(store::segment_name(*n))).map(|m| m.len());
        if now.as_ref().ok() != Some(size) {
            let what = match now {
                Ok(now) => format!(
                    "{} changed size from {size} to {now} bytes after it was sealed",
                    store::segment_name(*n)
                ),
                Err(_) => format!("sealed segment {} is missing", store::segment_name(*n)),
            };
            return Ok(Some(broken(*n, what, Vec::new())));
        }
    }
    Ok(anchor_problem(dir, key, cp)?.map(|what| broken(cp.segment, what, cp.sealed.clone())))
}

/// A log with no segment: a new one when nothing was ever written, else broken.
fn empty_log(dir: &Path, seg: u64, pos: Pos, sealed: Vec<(u64, u64)>) -> std::io::Result<Scan> {
    if pos.seq > 0 {
        return Ok(Scan::Broken {
            seg,
            what: format!(
                "every segment is gone (the checkpoint counted {} records)",
                pos.seq
            ),
            last: pos,
            sealed,
        });
    }
    drop(store::open_segment(dir, 1, true)?);
    Ok(Scan::Good {
        tip: Tip {
            seg: 1,
            offset: 0,
            pos,
            sealed,
        },
        torn: 0,
    })
}

/// Checks the log from the checkpoint (or from the start) to its end.
fn scan(
    dir: &Path,
    key: &Key,
    live: &[u64],
    cp: Option<&chain::Checkpoint>,
) -> std::io::Result<Scan> {
    let broken = |seg: u64, what: String, last: Pos, sealed: Vec<(u64, u64)>| {
        Ok(Scan::Broken {
            seg,
            what,
            last,
            sealed,
        })
    };
    let (mut seg, mut offset, mut pos, mut sealed) = match cp {
        Some(cp) => (cp.segment, cp.offset, cp.pos.clone(), cp.sealed.clone()),
        None => (
            live.first().copied().unwrap_or(1),
            0,
            Pos::genesis(),
            Vec::new(),
        ),
    };
    if let Some(cp) = cp
        && let Some(problem) = checkpoint_problem(dir, key, cp)?
    {
        return Ok(problem);
    }
    if live.is_empty() {
        return empty_log(dir, seg, pos, sealed);
    }
    let rest: Vec<u64> = live.iter().copied().filter(|n| *n >= seg).collect();
    if rest.first() != Some(&seg) {
        let what = format!("{} is missing", store::segment_name(seg));
        return broken(seg, what, pos, sealed);
    }
    let last = rest.last().copied().unwrap_or(seg);
    for (i, n) in rest.iter().copied().enumerate() {
        let gap = i > 0 && n != seg + 1;
        seg = n;
        let path = dir.join(store::segment_name(n));
        let bytes = read_at(&path, offset)?;
        let w = chain::walk(key, &bytes, Some(pos.clone()), 0);
        // A gap in the numbers is legitimate only before a break record.
        if gap && w.restarts.is_empty() {
            let what = format!(
                "segments between {} and {} are missing",
                store::segment_name(rest[i - 1]),
                store::segment_name(n)
            );
            return broken(n, what, pos, sealed);
        }
        if let Some(mut f) = w.broken {
            if offset > 0 {
                f.line += count_lines(&path, offset)?;
            }
            return broken(n, describe(n, &f), w.pos, sealed);
        }
        pos = w.pos;
        offset += w.consumed;
        if n != last {
            if w.torn > 0 {
                let what = format!(
                    "{} ends in an unfinished record although later segments follow it",
                    store::segment_name(n)
                );
                return broken(n, what, pos, sealed);
            }
            sealed.push((n, offset));
            offset = 0;
        } else {
            return Ok(Scan::Good {
                tip: Tip {
                    seg: n,
                    offset,
                    pos,
                    sealed,
                },
                torn: w.torn,
            });
        }
    }
    Ok(Scan::Good {
        tip: Tip {
            seg,
            offset,
            pos,
            sealed,
        },
        torn: 0,
    })
}

/// The checkpointed record must still be there, whole, and still carry the MAC the
/// checkpoint holds (so a chain recomputed before the checkpoint is caught at start-up).
fn anchor_problem(
    dir: &Path,
    key: &Key,
    cp: &chain::Checkpoint,
) -> std::io::Result<Option<String>> {
    if cp.offset == 0 {
        return Ok(None);
    }
    let name = store::segment_name(cp.segment);
    let Ok(file) = File::open(dir.join(&name)) else {
        return Ok(Some(format!("{name} is missing")));
    };
    let size = file.metadata()?.len();
    if size < cp.offset {
        return Ok(Some(format!(
            "{name} shrank to {size} bytes although {} were checked: records were removed",
            cp.offset
        )));
    }
    // The last checked line: at most a few KiB before the offset.
    let start = cp.offset.saturating_sub(64 << 10);
    let mut buf = vec![0u8; (cp.offset - start) as usize];
    crate::os::read_exact_at(&file, &mut buf, start)?;
    let ok = buf.last() == Some(&b'\n')
        && {
            let body = &buf[..buf.len() - 1];
            let line = match memchr::memrchr(b'\n', body) {
                Some(i) => &body[i + 1..],
                None => body,
            };
            matches!(chain::unseal(key, line), Ok((b, mac)) if mac == cp.pos.tail && b.seq == cp.pos.seq)
        };
    Ok((!ok).then(|| {
        format!(
            "the last checked record of {name} (seq {}) was changed or moved since it was checked",
            cp.pos.seq
        )
    }))
}

fn read_at(path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut buf = vec![0u8; size.saturating_sub(offset) as usize];
    crate::os::read_exact_at(&file, &mut buf, offset)?;
    Ok(buf)
}

fn count_lines(path: &Path, upto: u64) -> std::io::Result<u64> {
    let file = File::open(path)?;
    let mut buf = vec![0u8; upto as usize];
    crate::os::read_exact_at(&file, &mut buf, 0)?;
    Ok(memchr::memchr_iter(b'\n', &buf).count() as u64)
}

/// What `warden audit-verify` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub dir: PathBuf,
    pub segments: Vec<String>,
    pub records: u64,
    /// The first bad record of the live chain, as `file line N (seq S): problem`.
    pub first_bad: Option<String>,
    /// Breaks the log recorded itself (each restarted the chain).
    pub recorded_breaks: Vec<String>,
    /// Set-aside files, each with its own first bad record (checked on its own).
    pub set_aside: Vec<(String, Option<String>)>,
    /// An unfinished record at the end (cut at the next start; not tampering).
    pub torn_tail: Option<String>,
}

impl Report {
    /// Nothing was ever broken: every record verifies, in one unbroken chain.
    pub fn clean(&self) -> bool {
        self.first_bad.is_none() && self.recorded_breaks.is_empty() && self.set_aside.is_empty()
    }
}

/// Checks every record of the log in `dir` (nothing is written).
pub fn verify_dir(dir: &Path) -> Result<Report, AuditError> {
    let fail = |reason: String| AuditError::Verify {
        dir: dir.to_path_buf(),
        reason,
    };
    let key_path = dir.join(store::KEY_FILE);
    let key_text = std::fs::read_to_string(&key_path)
        .map_err(|e| fail(format!("cannot read the key {}: {e}", key_path.display())))?;
    let key = Key::from_hex(&key_text).ok_or_else(|| fail("the key file holds no key".into()))?;
    let (live, broken) = store::list(dir).map_err(|e| fail(e.to_string()))?;
    let mut report = Report {
        dir: dir.to_path_buf(),
        segments: live.iter().map(|n| store::segment_name(*n)).collect(),
        records: 0,
        first_bad: None,
        recorded_breaks: Vec::new(),
        set_aside: Vec::new(),
        torn_tail: None,
    };
    let mut pos = Pos::genesis();
    for (i, n) in live.iter().copied().enumerate() {
        let path = dir.join(store::segment_name(n));
        let bytes = read_at(&path, 0).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        let w = chain::walk(&key, &bytes, Some(pos.clone()), 0);
        report.records += w.lines;
        for r in &w.restarts {
            report
                .recorded_breaks
                .push(format!("seq {}: {}", r.seq, r.event.detail));
        }
        if i > 0 && n != live[i - 1] + 1 && w.restarts.is_empty() {
            report.first_bad = Some(format!(
                "{} line 1: the segments between {} and it are missing",
                store::segment_name(n),
                store::segment_name(live[i - 1])
            ));
            break;
        }
        if let Some(f) = w.broken {
            report.first_bad = Some(describe(n, &f));
            break;
        }
        if w.torn > 0 {
            let what = format!(
                "{} ends in {} bytes of an unfinished record",
                store::segment_name(n),
                w.torn
            );
            if i + 1 < live.len() {
                report.first_bad = Some(what);
                break;
            }
            report.torn_tail = Some(what);
        }
        pos = w.pos;
    }
    for name in broken {
        let bytes = read_at(&dir.join(&name), 0).map_err(|e| fail(e.to_string()))?;
        let w = chain::walk(&key, &bytes, None, 0);
        let first = w.broken.map(|f| {
            let seq = f.seq.map(|s| format!(" (seq {s})")).unwrap_or_default();
            format!("line {}{seq}: {}", f.line, f.problem)
        });
        report.set_aside.push((name, first));
    }
    Ok(report)
}

/// Checks one segment file on its own (its first record is taken as given).
pub fn verify_file(path: &Path, key_dir: &Path) -> Result<(u64, Option<String>), AuditError> {
    let fail = |reason: String| AuditError::Verify {
        dir: key_dir.to_path_buf(),
        reason,
    };
    let key_text = std::fs::read_to_string(key_dir.join(store::KEY_FILE))
        .map_err(|e| fail(format!("cannot read the key: {e}")))?;
    let key = Key::from_hex(&key_text).ok_or_else(|| fail("the key file holds no key".into()))?;
    let bytes = read_at(path, 0).map_err(|e| fail(e.to_string()))?;
    let w = chain::walk(&key, &bytes, None, 0);
    Ok((
        w.lines,
        w.broken.map(|f| {
            let seq = f.seq.map(|s| format!(" (seq {s})")).unwrap_or_default();
            format!("line {}{seq}: {}", f.line, f.problem)
        }),
    ))
}

#[cfg(test)]
mod tests;
