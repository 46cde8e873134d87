//! The unprivileged uids workers run as when the server is root (a host worker, or a
//! Docker container): one range per server instance, one uid per session, chosen so that
//! no running process, no account (`/etc/passwd`, `/etc/group`) and no user's
//! subordinate range (`/etc/subuid`, `/etc/subgid`) already holds any of them. A uid of
//! a user's subordinate range would be that user's to map into a user namespace of their
//! own, and so theirs to act as; a range far above them is nobody's.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::worker::policy::RunAs;

/// Width of one instance's uid range (one uid per open session, warm homes and selftests
/// included): wider than the most sessions `SANDBOX_MAX_SESSIONS` allows (4096) with
/// every warm home and selftest beside them.
pub const UID_RANGE: u32 = 65_536;
/// Where the ranges begin: above the login uids and the subordinate ranges `useradd`
/// hands out (100000 upwards, 65536 per user).
const FIRST: u32 = 1_000_000_000;
/// How many ranges fit between [`FIRST`] and 2^31: the kernel takes uids up to 2^32 - 2,
/// but Docker refuses any above 2^31 - 1 ("uids and gids must be in range
/// 0-2147483647"), and so do programs that keep a uid in a signed int.
const RANGES: u32 = (i32::MAX as u32 - FIRST) / UID_RANGE;

/// A random uid range that no running process, account or subordinate range overlaps,
/// so that two servers on one machine never share a uid and no one else owns one.
pub fn pick_uid_range() -> u32 {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let mut taken = ids_in_use();
    taken.extend(account_ids(&read("/etc/passwd"), 2));
    taken.extend(account_ids(&read("/etc/group"), 2));
    taken.extend(subordinate_ranges(&read("/etc/subuid")));
    taken.extend(subordinate_ranges(&read("/etc/subgid")));
    let mut base = FIRST;
    for _ in 0..64 {
        let r: [u8; 4] = crate::random_bytes();
        base = FIRST + (u32::from_le_bytes(r) % RANGES) * UID_RANGE;
        if is_free(base, &taken) {
            break;
        }
    }
    base
}

/// Whether `[base, base + UID_RANGE)` overlaps none of `taken`. Pure.
fn is_free(base: u32, taken: &[Range<u64>]) -> bool {
    let mine = u64::from(base)..u64::from(base) + u64::from(UID_RANGE);
    !taken
        .iter()
        .any(|t| t.start < mine.end && mine.start < t.end)
}

/// The ids in field `field` (0-based) of a colon-separated account file
/// (`/etc/passwd`: the uid is field 2; `/etc/group`: the gid is field 2). Pure.
fn account_ids(text: &str, field: usize) -> Vec<Range<u64>> {
    text.lines()
        .filter_map(|l| l.split(':').nth(field)?.trim().parse::<u64>().ok())
        .map(|id| id..id + 1)
        .collect()
}

/// The ranges of `/etc/subuid` or `/etc/subgid` (`name:start:count`). Pure.
fn subordinate_ranges(text: &str) -> Vec<Range<u64>> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':').skip(1);
            let start = f.next()?.trim().parse::<u64>().ok()?;
            let count = f.next()?.trim().parse::<u64>().ok()?;
            Some(start..start.saturating_add(count))
        })
        .collect()
}

/// Real uids of the processes running now.
fn ids_in_use() -> Vec<Range<u64>> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|u| u.parse::<u64>().ok())
        })
        .map(|id| id..id + 1)
        .collect()
}

/// One instance's uid range and the uids its open sessions hold: each session gets the
/// next uid no open session holds (the range wraps, so uids of finished sessions are
/// reused only after the whole range), and two open sessions never share one.
#[derive(Debug)]
pub struct UidPool {
    base: u32,
    next: AtomicU32,
    held: Mutex<HashSet<u32>>,
}

impl UidPool {
    /// A pool over a range picked by [`pick_uid_range`].
    pub fn pick() -> UidPool {
        UidPool::at(pick_uid_range())
    }

    fn at(base: u32) -> UidPool {
        UidPool {
            base,
            next: AtomicU32::new(0),
            held: Mutex::new(HashSet::new()),
        }
    }

    /// A uid (and the gid of the same number) no open session holds.
    ///
    /// # Errors
    /// Every uid of the range is held by an open session.
    pub fn allocate(&self) -> std::io::Result<RunAs> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() >= UID_RANGE as usize {
            return Err(std::io::Error::other(format!(
                "all {UID_RANGE} sandbox uids of this server are held by open sessions; close sessions (reset_session) or lower SANDBOX_SESSION_IDLE_S"
            )));
        }
        loop {
            let uid = self.base + self.next.fetch_add(1, Ordering::Relaxed) % UID_RANGE;
            if held.insert(uid) {
                return Ok(RunAs { uid, gid: uid });
            }
        }
    }

    /// Frees a session's uid for a later session.
    pub fn release(&self, run_as: RunAs) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run_as.uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_stay_below_2_to_the_31() {
        let top = u64::from(FIRST) + u64::from(RANGES) * u64::from(UID_RANGE);
        assert!(top <= i32::MAX as u64 + 1, "{top}");
        const { assert!(RANGES > 17_000) };
        for _ in 0..50 {
            let base = pick_uid_range();
            assert!(base >= FIRST);
            assert!(
                u64::from(base) + u64::from(UID_RANGE) <= i32::MAX as u64 + 1,
                "{base}"
            );
        }
    }

    #[test]
    fn accounts_and_subordinate_ranges_are_never_picked() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nodd:x:1000065537:1:x:/:/bin/sh\nbroken\n";
        let subuid = "alice:100000:65536\nbig:1000000000:200000\nbad:x:1\n";
        let mut taken = account_ids(passwd, 2);
        taken.extend(subordinate_ranges(subuid));
        assert_eq!(
            taken,
            vec![
                0..1,
                1_000_065_537..1_000_065_538,
                100_000..165_536,
                1_000_000_000..1_000_200_000
            ]
        );
        // The first four ranges hold an account or a subordinate uid; the fifth is free.
        for n in 0..4 {
            assert!(!is_free(FIRST + n * UID_RANGE, &taken), "range {n}");
        }
        assert!(is_free(FIRST + 4 * UID_RANGE, &taken));
    }

    #[test]
    fn open_sessions_never_share_a_uid_and_freed_ones_come_back_later() {
        let pool = UidPool::at(FIRST);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_ne!(a, b);
        assert_eq!((a.uid, a.gid), (FIRST, FIRST));
        pool.release(a);
        // The range goes round before a freed uid is given again.
        assert_eq!(pool.allocate().unwrap().uid, FIRST + 2);
    }
}
