//! The unprivileged uids workers run as when the server is root: one range per server
//! instance, one uid per session, chosen so that no running process already uses them.

/// Width of one instance's uid range (one uid per session, selftests included).
pub const UID_RANGE: u32 = 1_000;

/// A random uid range far above login and subuid ranges that no running process uses,
/// so that two servers on one machine never share a uid.
pub fn pick_uid_range() -> u32 {
    let in_use = uids_in_use();
    let mut base = 0;
    for _ in 0..64 {
        let r: [u8; 4] = crate::random_bytes();
        base = 1_000_000_000 + (u32::from_le_bytes(r) % 3_000_000) * UID_RANGE;
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
