//! Caps on what a whole session, and a whole client, may spend: calls, CPU seconds,
//! wall seconds and bytes written to the workspace. The settings group, the counters
//! and the rule that admits a call are here, pure; the session layer applies them.
//!
//! Bytes moved through the egress proxy are counted too (the proxy's own
//! `SANDBOX_EGRESS_LIMIT` caps them per session).
//!
//! A cap is checked before its counter grows: a call is refused when running it would
//! pass a cap (one more call) or when a cap it spends is already used up (CPU, wall,
//! bytes). While a call runs, its time limit is cut to the wall seconds left, and its
//! workspace tmpfs may grow only by the bytes left. Counters are kept per session
//! (they live as long as the session: worker restarts, eviction and `reset_session`
//! with `keep_files` keep them, closing it ends them) and per client (its owner: every
//! session it has had, for the server's life).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;

use crate::config::{ConfigError, Reader, Spec, spec};
use crate::owner::Owner;

/// The group's rows, in the order the settings chapter shows them.
pub const SPECS: &[Spec] = &[
    spec(
        "SANDBOX_MAX_CALLS",
        "0",
        "`execute_python` calls one session may make (0: no cap). Counted from the \
         session's opening until it is closed; a restart or `reset_session` with \
         `keep_files` keeps the count.",
    ),
    spec(
        "SANDBOX_MAX_CPU_S",
        "0",
        "CPU seconds one session's calls may use together (0: no cap). A call is refused \
         once they are used up.",
    ),
    spec(
        "SANDBOX_MAX_WALL_S",
        "0",
        "wall-clock seconds one session's calls may take together (0: no cap). A call's \
         time limit is cut to what is left.",
    ),
    spec(
        "SANDBOX_MAX_BYTES_WRITTEN",
        "0",
        "bytes one session's calls may write to its workspace together, counted as the \
         size of every file a call creates or changes (0: no cap; a size such as 64m). \
         Where the workspace is a tmpfs warden sizes (the host; Docker under a root \
         server) it may grow only by what is left while a call runs: past it, writes \
         fail inside Python with ENOSPC.",
    ),
    spec(
        "SANDBOX_CLIENT_MAX_CALLS",
        "0",
        "`execute_python` calls one client (an HTTP client, or the stdio client) may \
         make over all its sessions (0: no cap).",
    ),
    spec(
        "SANDBOX_CLIENT_MAX_CPU_S",
        "0",
        "CPU seconds one client's calls may use over all its sessions (0: no cap).",
    ),
    spec(
        "SANDBOX_CLIENT_MAX_WALL_S",
        "0",
        "wall-clock seconds one client's calls may take over all its sessions (0: no cap).",
    ),
    spec(
        "SANDBOX_CLIENT_MAX_BYTES_WRITTEN",
        "0",
        "bytes one client's calls may write over all its sessions (0: no cap; a size \
         such as 1g).",
    ),
];

/// What is counted.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Cap {
    Calls,
    CpuS,
    WallS,
    BytesWritten,
}

impl Cap {
    const ALL: [Cap; 4] = [Cap::Calls, Cap::CpuS, Cap::WallS, Cap::BytesWritten];

    /// The setting that sets this cap for `scope`.
    pub fn setting(self, scope: Scope) -> &'static str {
        match (scope, self) {
            (Scope::Session, Cap::Calls) => "SANDBOX_MAX_CALLS",
            (Scope::Session, Cap::CpuS) => "SANDBOX_MAX_CPU_S",
            (Scope::Session, Cap::WallS) => "SANDBOX_MAX_WALL_S",
            (Scope::Session, Cap::BytesWritten) => "SANDBOX_MAX_BYTES_WRITTEN",
            (Scope::Client, Cap::Calls) => "SANDBOX_CLIENT_MAX_CALLS",
            (Scope::Client, Cap::CpuS) => "SANDBOX_CLIENT_MAX_CPU_S",
            (Scope::Client, Cap::WallS) => "SANDBOX_CLIENT_MAX_WALL_S",
            (Scope::Client, Cap::BytesWritten) => "SANDBOX_CLIENT_MAX_BYTES_WRITTEN",
        }
    }
}

/// Whose counters.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Session,
    Client,
}

/// The caps of one scope; `None` is no cap. Time in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub calls: Option<u64>,
    pub cpu_ms: Option<u64>,
    pub wall_ms: Option<u64>,
    pub bytes_written: Option<u64>,
}

impl Limits {
    fn get(&self, cap: Cap) -> Option<u64> {
        match cap {
            Cap::Calls => self.calls,
            Cap::CpuS => self.cpu_ms,
            Cap::WallS => self.wall_ms,
            Cap::BytesWritten => self.bytes_written,
        }
    }

    pub fn any(&self) -> bool {
        Cap::ALL.iter().any(|c| self.get(*c).is_some())
    }
}

/// `SANDBOX_MAX_*` and `SANDBOX_CLIENT_MAX_*`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CapSettings {
    pub session: Limits,
    pub client: Limits,
}

/// Reads the group. A negative number, a fraction or one past 2^64 is an error naming
/// the setting.
pub(crate) fn read(r: &mut Reader<'_>) -> Result<CapSettings, ConfigError> {
    let mut both = [Limits::default(), Limits::default()];
    for (limits, scope) in both.iter_mut().zip([Scope::Session, Scope::Client]) {
        let count = |t: &str| t.parse::<u64>().ok();
        let seconds = |t: &str| t.parse::<u64>().ok().and_then(|s| s.checked_mul(1000));
        let none_if_zero = |n: u64| (n > 0).then_some(n);
        let whole = "a whole number (0: no cap)";
        limits.calls = none_if_zero(r.value(Cap::Calls.setting(scope), whole, count)?);
        limits.cpu_ms = none_if_zero(r.value(Cap::CpuS.setting(scope), whole, seconds)?);
        limits.wall_ms = none_if_zero(r.value(Cap::WallS.setting(scope), whole, seconds)?);
        limits.bytes_written = none_if_zero(r.value(
            Cap::BytesWritten.setting(scope),
            "a size such as 64m, 1g or 65536 (bytes; 0: no cap)",
            crate::config::parse_size,
        )?);
    }
    let [session, client] = both;
    Ok(CapSettings { session, client })
}

/// What one scope has spent. Time in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Spent {
    pub calls: u64,
    pub cpu_ms: u64,
    pub wall_ms: u64,
    pub bytes_written: u64,
    /// Bytes its calls moved through the egress proxy (counted and shown; the cap on
    /// them is `SANDBOX_EGRESS_LIMIT`, per session).
    pub proxy_bytes: u64,
}

impl Spent {
    fn get(&self, cap: Cap) -> u64 {
        match cap {
            Cap::Calls => self.calls,
            Cap::CpuS => self.cpu_ms,
            Cap::WallS => self.wall_ms,
            Cap::BytesWritten => self.bytes_written,
        }
    }

    fn add(&mut self, cost: &Cost) {
        self.cpu_ms = self.cpu_ms.saturating_add(cost.cpu_ms);
        self.wall_ms = self.wall_ms.saturating_add(cost.wall_ms);
        self.bytes_written = self.bytes_written.saturating_add(cost.bytes_written);
        self.proxy_bytes = self.proxy_bytes.saturating_add(cost.proxy_bytes);
    }
}

/// What one finished call cost (its call was counted when it was admitted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    pub cpu_ms: u64,
    pub wall_ms: u64,
    pub bytes_written: u64,
    pub proxy_bytes: u64,
}

/// Why a call was refused: the cap, its limit and what was used, in the cap's unit
/// (calls, seconds or bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Exceeded {
    pub setting: String,
    pub scope: Scope,
    pub cap: Cap,
    pub limit: u64,
    pub used: u64,
}

impl Exceeded {
    pub fn message(&self) -> String {
        let whose = match self.scope {
            Scope::Session => "this session",
            Scope::Client => "this client, over all its sessions,",
        };
        let what = match self.cap {
            Cap::Calls => format!("made {} of {} calls", self.used, self.limit),
            Cap::CpuS => format!("used {} of {} CPU seconds", self.used, self.limit),
            Cap::WallS => format!("used {} of {} wall-clock seconds", self.used, self.limit),
            Cap::BytesWritten => format!("wrote {} of {} bytes", self.used, self.limit),
        };
        let after = match self.scope {
            Scope::Session => {
                "close the session (reset_session with keep_files: false) to start \
                               a new count, or ask the operator to raise the cap"
            }
            Scope::Client => "ask the operator to raise the cap",
        };
        format!(
            "{whose} has {what} ({} = {}); {after}",
            self.setting, self.limit
        )
    }
}

/// In the cap's unit: calls, whole seconds (rounded up) or bytes.
fn shown(cap: Cap, value: u64) -> u64 {
    match cap {
        Cap::CpuS | Cap::WallS => value.div_ceil(1000),
        Cap::Calls | Cap::BytesWritten => value,
    }
}

/// The first cap that admitting one more call would pass. Pure.
pub fn check(limits: &Limits, spent: &Spent, scope: Scope) -> Result<(), Exceeded> {
    for cap in Cap::ALL {
        let Some(limit) = limits.get(cap) else {
            continue;
        };
        let used = spent.get(cap);
        let over = match cap {
            Cap::Calls => used.saturating_add(1) > limit,
            _ => used >= limit,
        };
        if over {
            return Err(Exceeded {
                setting: cap.setting(scope).to_string(),
                scope,
                cap,
                limit: shown(cap, limit),
                used: shown(cap, used),
            });
        }
    }
    Ok(())
}

/// What is left of one scope's caps, in their units; only caps that are set.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Remaining {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    /// Whole seconds, rounded down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<u64>,
}

impl Remaining {
    pub fn of(limits: &Limits, spent: &Spent) -> Remaining {
        let left = |cap: Cap| limits.get(cap).map(|l| l.saturating_sub(spent.get(cap)));
        Remaining {
            calls: left(Cap::Calls),
            cpu_s: left(Cap::CpuS).map(|ms| ms / 1000),
            wall_s: left(Cap::WallS).map(|ms| ms / 1000),
            bytes_written: left(Cap::BytesWritten),
        }
    }
}

/// A result's `budget`: what is left for the session and for its client.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Budget {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<Remaining>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<Remaining>,
}

/// One call, admitted: how long it may take and how much it may grow the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Wall milliseconds left (the tighter of the session's and the client's).
    pub wall_ms_left: Option<u64>,
    /// Bytes left to write.
    pub bytes_left: Option<u64>,
}

/// The size a workspace of `quota` bytes that holds `used` gets for a call that may
/// write `left` more. Pure.
pub fn narrowed_size(quota: u64, used: u64, left: u64) -> u64 {
    used.saturating_add(left).min(quota)
}

/// What the file system holding `path` uses, in bytes (a tmpfs: the workspace's data).
///
/// # Errors
/// The file system cannot be asked.
#[cfg(unix)]
pub fn used_bytes(path: &std::path::Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(path)?;
    Ok(st
        .f_blocks
        .saturating_sub(st.f_bfree)
        .saturating_mul(st.f_frsize))
}

fn tighter(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Every client's counters and the rule; one per server. A session's counters live in
/// the session ([`SessionCounter`]).
#[derive(Debug, Default)]
pub struct Ledger {
    settings: CapSettings,
    clients: Mutex<HashMap<Owner, Spent>>,
}

/// A counter's lock, even after a panic elsewhere held it: the counts are plain sums
/// that are never half-written, and a cap must not stop counting (fail open).
fn held<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One session's counters.
#[derive(Debug, Default)]
pub struct SessionCounter(Mutex<Spent>);

impl SessionCounter {
    pub fn spent(&self) -> Spent {
        *held(&self.0)
    }
}

impl Ledger {
    pub fn new(settings: CapSettings) -> Ledger {
        Ledger {
            settings,
            clients: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &CapSettings {
        &self.settings
    }

    /// Checks both scopes and, when both admit it, counts the call in both at once.
    pub fn admit(&self, owner: &Owner, session: &SessionCounter) -> Result<Admitted, Exceeded> {
        let mut clients = held(&self.clients);
        let mut own = held(&session.0);
        let client = clients.entry(owner.clone()).or_default();
        check(&self.settings.session, &own, Scope::Session)?;
        check(&self.settings.client, client, Scope::Client)?;
        own.calls += 1;
        client.calls += 1;
        let (s, c) = (&self.settings.session, &self.settings.client);
        let left = |l: Option<u64>, used: u64| l.map(|l| l.saturating_sub(used));
        Ok(Admitted {
            wall_ms_left: tighter(
                left(s.wall_ms, own.wall_ms),
                left(c.wall_ms, client.wall_ms),
            ),
            bytes_left: tighter(
                left(s.bytes_written, own.bytes_written),
                left(c.bytes_written, client.bytes_written),
            ),
        })
    }

    /// Adds what a finished call cost to both scopes.
    pub fn settle(&self, owner: &Owner, session: &SessionCounter, cost: &Cost) {
        held(&session.0).add(cost);
        held(&self.clients)
            .entry(owner.clone())
            .or_default()
            .add(cost);
    }

    /// What a client has spent over all its sessions.
    pub fn client_spent(&self, owner: &Owner) -> Spent {
        held(&self.clients).get(owner).copied().unwrap_or_default()
    }

    /// What is left, for a result; `None` when no cap is set.
    pub fn budget(&self, owner: &Owner, session: &SessionCounter) -> Option<Budget> {
        let (s, c) = (&self.settings.session, &self.settings.client);
        if !s.any() && !c.any() {
            return None;
        }
        Some(Budget {
            session: s.any().then(|| Remaining::of(s, &session.spent())),
            client: c.any().then(|| Remaining::of(c, &self.client_spent(owner))),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn limits(calls: Option<u64>, cpu_ms: Option<u64>) -> Limits {
        Limits {
            calls,
            cpu_ms,
            ..Limits::default()
        }
    }

    #[test]
    fn the_call_that_would_pass_a_cap_is_the_one_refused() {
        let l = limits(Some(3), None);
        let mut spent = Spent::default();
        for _ in 0..3 {
            assert!(check(&l, &spent, Scope::Session).is_ok());
            spent.calls += 1;
        }
        let e = check(&l, &spent, Scope::Session).unwrap_err();
        assert_eq!((e.cap, e.limit, e.used), (Cap::Calls, 3, 3));
        assert_eq!(e.setting, "SANDBOX_MAX_CALLS");
        assert!(e.message().contains("made 3 of 3 calls"), "{}", e.message());
    }

    #[test]
    fn time_is_refused_once_used_up_and_shown_in_seconds() {
        let l = limits(None, Some(2000));
        let spent = Spent {
            cpu_ms: 1999,
            ..Spent::default()
        };
        assert!(check(&l, &spent, Scope::Client).is_ok());
        let spent = Spent {
            cpu_ms: 2001,
            ..Spent::default()
        };
        let e = check(&l, &spent, Scope::Client).unwrap_err();
        assert_eq!((e.limit, e.used), (2, 3));
        assert_eq!(e.setting, "SANDBOX_CLIENT_MAX_CPU_S");
    }

    #[test]
    fn admitting_counts_both_scopes_and_gives_the_tighter_budget() {
        let settings = CapSettings {
            session: Limits {
                calls: Some(2),
                wall_ms: Some(10_000),
                ..Limits::default()
            },
            client: Limits {
                calls: Some(3),
                wall_ms: Some(4_000),
                bytes_written: Some(100),
                ..Limits::default()
            },
        };
        let ledger = Ledger::new(settings);
        let owner = Owner::Local;
        let (a, b) = (SessionCounter::default(), SessionCounter::default());
        let first = ledger.admit(&owner, &a).unwrap();
        assert_eq!(first.wall_ms_left, Some(4_000));
        assert_eq!(first.bytes_left, Some(100));
        let cost = Cost {
            cpu_ms: 5,
            wall_ms: 1_500,
            bytes_written: 60,
            proxy_bytes: 7,
        };
        ledger.settle(&owner, &a, &cost);
        let second = ledger.admit(&owner, &a).unwrap();
        assert_eq!(second.wall_ms_left, Some(2_500));
        assert_eq!(second.bytes_left, Some(40));
        let e = ledger.admit(&owner, &a).unwrap_err();
        assert_eq!(e.scope, Scope::Session);
        // The other session has its own count, the client's is shared.
        ledger.admit(&owner, &b).unwrap();
        let e = ledger.admit(&owner, &b).unwrap_err();
        assert_eq!((e.scope, e.cap, e.used), (Scope::Client, Cap::Calls, 3));
        let budget = ledger.budget(&owner, &a).unwrap();
        assert_eq!(budget.session.unwrap().calls, Some(0));
        assert_eq!(budget.client.unwrap().bytes_written, Some(40));
        // A refused call counts nothing.
        assert_eq!(a.spent().calls, 2);
        assert_eq!(ledger.client_spent(&owner).calls, 3);
        assert_eq!(ledger.client_spent(&owner).proxy_bytes, 7);
    }

    #[test]
    fn a_narrowed_workspace_never_passes_its_quota() {
        assert_eq!(narrowed_size(100, 30, 50), 80);
        assert_eq!(narrowed_size(100, 30, 500), 100);
        assert_eq!(narrowed_size(100, 30, u64::MAX), 100);
    }

    #[test]
    fn no_cap_means_no_budget() {
        let ledger = Ledger::new(CapSettings::default());
        assert!(
            ledger
                .budget(&Owner::Local, &SessionCounter::default())
                .is_none()
        );
        for _ in 0..1000 {
            ledger
                .admit(&Owner::Local, &SessionCounter::default())
                .unwrap();
        }
    }
}
