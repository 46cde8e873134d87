//! What the sessions' tmpfs quotas may commit together (`SANDBOX_DISK_TOTAL`).
//!
//! A session's workspace is a tmpfs of its quota held by the workspace keeper for as long
//! as the session is open (its worker may be stopped long before), and each of its
//! workers has a private `/tmp` tmpfs of a quarter of it: RAM (and swap) that no process
//! owns and no memory limit of a worker covers. A quota costs nothing until the code
//! writes, so nothing but the sum of the quotas bounds what sessions can pin; that sum is
//! kept at or below the budget.
//!
//! The budget is a fraction of the machine's memory (half of it by default, the kernel's
//! own default size for one tmpfs), not what `MemAvailable` says now: quotas are promises
//! that must hold later, whatever else the machine does by then, and an admission that
//! depended on the page cache of the moment would refuse or admit the same session by
//! chance.
//!
//! A new workspace gets its full quota when it fits. When it does not, it gets what is
//! left, never less than a floor ([`MIN_WORKSPACE`], or the configured quota when that is
//! smaller); with less than that left it is refused. So that the sessions
//! `SANDBOX_MAX_SESSIONS` still allows, and the warm workers kept beside them, can each
//! have the floor, that much is held back for them, up to half of the budget: the first sessions get their full quota, later
//! ones a smaller one (every result of theirs says so), and the last are refused only
//! when even the floor no longer fits.
//!
//! [`admit`] is the arithmetic (pure, unit-tested); [`TmpfsBudget`] keeps the ledger.

use std::sync::Mutex;

use crate::sandbox::linux::world::tmp_bytes_for;

/// The smallest workspace quota given when the full one does not fit.
pub const MIN_WORKSPACE: u64 = 16 << 20;

/// What one workspace with a quota of `quota` bytes commits: its tmpfs and its worker's
/// private `/tmp`. Pure.
pub fn commitment(quota: u64) -> u64 {
    quota.saturating_add(tmp_bytes_for(quota))
}

/// The largest quota whose [`commitment`] fits in `room` (0 when none does), in whole
/// MiB. Pure.
fn largest_fitting(room: u64) -> u64 {
    let tmp_floor = tmp_bytes_for(0);
    // Past 5 × the /tmp floor, /tmp is a quarter of the quota: quota × 5/4 ≤ room.
    let quota = if room >= tmp_floor * 5 {
        room / 5 * 4
    } else {
        room.saturating_sub(tmp_floor)
    };
    quota & !((1 << 20) - 1)
}

/// What a new workspace gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The quota asked for.
    Full(u64),
    /// Less than asked for: this quota.
    Shrunk(u64),
    /// Not even the floor fits: `room` bytes are left of the budget.
    Refused { room: u64 },
}

/// The ledger's state, and what is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// `SANDBOX_DISK_TOTAL`.
    pub total: u64,
    /// What the workspaces held now commit together.
    pub committed: u64,
    /// How many workspaces are held now (sessions' and warm workers').
    pub held: usize,
    /// How many workspaces may be held at once: `SANDBOX_MAX_SESSIONS` and the warm
    /// pool's (which refills as sessions take its workers).
    pub max_sessions: usize,
    /// The quota asked for (`SANDBOX_DISK_LIMIT`).
    pub wanted: u64,
}

/// What a new workspace gets, given the ledger (see the module doc). Pure.
pub fn admit(ask: Ask) -> Admission {
    let floor = ask.wanted.min(MIN_WORKSPACE);
    let floor_commitment = commitment(floor);
    let room = ask.total.saturating_sub(ask.committed);
    if room < floor_commitment {
        return Admission::Refused { room };
    }
    let later = ask.max_sessions.saturating_sub(ask.held.saturating_add(1));
    let held_back = floor_commitment
        .saturating_mul(u64::try_from(later).unwrap_or(u64::MAX))
        .min(ask.total / 2);
    let available = room.saturating_sub(held_back).max(floor_commitment);
    if commitment(ask.wanted) <= available {
        return Admission::Full(ask.wanted);
    }
    Admission::Shrunk(largest_fitting(available).clamp(floor, ask.wanted))
}

/// The ledger of what the held workspaces commit.
#[derive(Debug)]
pub struct TmpfsBudget {
    total: u64,
    max_sessions: usize,
    state: Mutex<(u64, usize)>,
}

impl TmpfsBudget {
    pub fn new(total: u64, max_sessions: usize) -> TmpfsBudget {
        TmpfsBudget {
            total,
            max_sessions,
            state: Mutex::new((0, 0)),
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Admits a workspace asking for `wanted`; what it got is committed until
    /// [`TmpfsBudget::release`] (a refusal commits nothing).
    pub fn reserve(&self, wanted: u64) -> Admission {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (committed, held) = *state;
        let admission = admit(Ask {
            total: self.total,
            committed,
            held,
            max_sessions: self.max_sessions,
            wanted,
        });
        if let Admission::Full(q) | Admission::Shrunk(q) = admission {
            *state = (committed.saturating_add(commitment(q)), held + 1);
        }
        admission
    }

    /// Gives back what a workspace of `quota` committed (its tmpfs is gone).
    pub fn release(&self, quota: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *state = (
            state.0.saturating_sub(commitment(quota)),
            state.1.saturating_sub(1),
        );
    }

    /// What the held workspaces commit now, and how many there are.
    pub fn committed(&self) -> (u64, usize) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn ask(total: u64, committed: u64, held: usize, wanted: u64) -> Ask {
        Ask {
            total,
            committed,
            held,
            max_sessions: 64,
            wanted,
        }
    }

    #[test]
    fn a_workspace_commits_its_quota_and_its_tmp() {
        assert_eq!(commitment(GIB), GIB + 256 * MIB);
        assert_eq!(commitment(8 * MIB), 24 * MIB, "/tmp is at least 16 MiB");
        for room in [0, MIB, 17 * MIB, 79 * MIB, 80 * MIB, 81 * MIB, 10 * GIB + 7] {
            let q = largest_fitting(room);
            assert!(commitment(q) <= room || q == 0, "{room}: {q}");
            assert!(commitment(q + MIB) > room, "{room}: {q} is not the largest");
        }
    }

    #[test]
    fn the_first_sessions_get_their_full_quota_on_a_24_gib_machine() {
        // The default budget there: half of 24 GiB.
        let total = 12 * GIB;
        let each = commitment(GIB);
        assert_eq!(admit(ask(total, 0, 0, GIB)), Admission::Full(GIB));
        // 63 floors (32 MiB each) are held back for the sessions that may follow.
        let full = (0..64)
            .take_while(|n| admit(ask(total, each * n, *n as usize, GIB)) == Admission::Full(GIB))
            .count();
        assert_eq!(full, 8, "{full} full quotas");
    }

    #[test]
    fn past_what_fits_the_quota_shrinks_to_the_floor_and_then_is_refused() {
        let total = 12 * GIB;
        let mut committed = 0;
        let mut got = Vec::new();
        for held in 0..200usize {
            match admit(ask(total, committed, held, GIB)) {
                Admission::Full(q) | Admission::Shrunk(q) => {
                    committed += commitment(q);
                    got.push(q);
                }
                Admission::Refused { room } => {
                    assert!(room < commitment(MIN_WORKSPACE), "{room}");
                    break;
                }
            }
        }
        assert!(committed <= total, "{committed} committed of {total}");
        // All 64 sessions SANDBOX_MAX_SESSIONS allows got at least the floor.
        assert!(got.len() >= 64, "{} admitted", got.len());
        assert!(got.iter().all(|q| (MIN_WORKSPACE..=GIB).contains(q)));
        assert!(
            got.windows(2).all(|w| w[0] >= w[1]),
            "never larger later: {got:?}"
        );
        assert!(got.contains(&MIN_WORKSPACE));
    }

    #[test]
    fn a_small_budget_shrinks_then_refuses_deterministically() {
        // What the integration test configures: 64 MiB quotas (80 MiB with /tmp), a
        // 200 MiB budget, four sessions at most.
        let a = |committed, held| {
            admit(Ask {
                total: 200 * MIB,
                committed,
                held,
                max_sessions: 4,
                wanted: 64 * MIB,
            })
        };
        // Three floors (32 MiB) held back leave 104 MiB: the full 80 fits.
        assert_eq!(a(0, 0), Admission::Full(64 * MIB));
        // 120 left, two floors held back: 56 MiB, a 40 MiB quota.
        assert_eq!(a(80 * MIB, 1), Admission::Shrunk(40 * MIB));
        // 64 left, one floor held back: 32 MiB, the floor.
        assert_eq!(a(136 * MIB, 2), Admission::Shrunk(16 * MIB));
        // 32 left: the floor.
        assert_eq!(a(168 * MIB, 3), Admission::Shrunk(16 * MIB));
        // Nothing left.
        assert_eq!(a(200 * MIB, 4), Admission::Refused { room: 0 });
        assert_eq!(
            a(180 * MIB, 3),
            Admission::Refused { room: 20 * MIB },
            "20 MiB is less than the floor's 32"
        );
    }

    #[test]
    fn a_quota_below_the_floor_is_its_own_floor() {
        let a = admit(Ask {
            total: 30 * MIB,
            committed: 0,
            held: 0,
            max_sessions: 64,
            wanted: 8 * MIB,
        });
        assert_eq!(a, Admission::Full(8 * MIB), "24 MiB fits in 30");
        let b = admit(Ask {
            total: 20 * MIB,
            committed: 0,
            held: 0,
            max_sessions: 64,
            wanted: 8 * MIB,
        });
        assert_eq!(b, Admission::Refused { room: 20 * MIB });
    }

    #[test]
    fn the_ledger_commits_and_releases() {
        let budget = TmpfsBudget::new(200 * MIB, 4);
        assert_eq!(budget.reserve(64 * MIB), Admission::Full(64 * MIB));
        assert_eq!(budget.committed(), (80 * MIB, 1));
        assert_eq!(budget.reserve(64 * MIB), Admission::Shrunk(40 * MIB));
        budget.release(64 * MIB);
        budget.release(40 * MIB);
        assert_eq!(budget.committed(), (0, 0));
        assert_eq!(budget.reserve(64 * MIB), Admission::Full(64 * MIB));
    }
}
