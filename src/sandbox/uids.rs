//! The unprivileged uids workers run as when the server is root: one range per server
//! instance, one uid per session, chosen so that no running process already uses them.

/// Width of one instance's uid range (one uid per open session, warm homes and selftests
/// included): wider than the most sessions `SANDBOX_MAX_SESSIONS` allows (4096) with
/// every warm home and selftest beside them.
pub const UID_RANGE: u32 = 65_536;
/// How many ranges fit between 1,000,000,000 and the top of the 32-bit uid space, whose
/// last value (-1) means "no uid" to the kernel.
const RANGES: u32 = 45_000;

/// A random uid range far above login and subuid ranges that no running process uses,
/// so that two servers on one machine never share a uid.
pub fn pick_uid_range() -> u32 {
    let in_use = uids_in_use();
    let mut base = 0;
    for _ in 0..64 {
        let r: [u8; 4] = crate::random_bytes();
        base = 1_000_000_000 + (u32::from_le_bytes(r) % RANGES) * UID_RANGE;
        if !in_use.iter().any(|u| (base..base + UID_RANGE).contains(u)) {
            break;
        }
    }
    base
}

/// Real uids of the processes running now.
fn uids_in_use() -> Vec<u32> {
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
                .and_then(|u| u.parse().ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_stay_inside_the_32_bit_uid_space() {
        let top = 1_000_000_000u64 + u64::from(RANGES) * u64::from(UID_RANGE);
        assert!(top < u64::from(u32::MAX) - 1, "{top}");
        let base = pick_uid_range();
        assert!(base >= 1_000_000_000);
        assert!(base.checked_add(UID_RANGE).is_some());
    }
}
