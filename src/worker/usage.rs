//! What a worker uses, read from `/proc` without touching it: CPU time, resident
//! and proportional memory of the worker's process and everything below it (the helper
//! may stay as a waiting parent above the interpreter). Reading never signals, stops or
//! ptraces the worker, so it works while the worker is frozen or in a call.

use std::path::Path;

use crate::worker::handle::Usage;

/// Most processes counted under one worker (it cannot fork, so a handful at most).
const MAX_MEMBERS: usize = 64;

/// The usage of `pid` and its descendants; `None` once `pid` is gone.
pub fn of_tree(pid: i32) -> Option<Usage> {
    let members = tree(pid);
    if members.is_empty() {
        return None;
    }
    let mut usage = Usage::default();
    let mut pss = Some(0u64);
    for member in members {
        let dir = format!("/proc/{member}");
        let dir = Path::new(&dir);
        if let Some(ticks) = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| cpu_ticks(&s))
        {
            usage.cpu_ms += ticks * 1000 / clock_ticks_per_second();
        }
        if let Some(rss) = std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|s| kib_field(&s, "VmRSS:"))
        {
            usage.rss_bytes += rss * 1024;
        }
        // smaps_rollup needs ptrace-read access; a non-dumpable worker of the same uid
        // may refuse it, and then PSS is unknown rather than wrong.
        pss = match (
            pss,
            std::fs::read_to_string(dir.join("smaps_rollup"))
                .ok()
                .and_then(|s| kib_field(&s, "Pss:")),
        ) {
            (Some(total), Some(kib)) => Some(total + kib * 1024),
            _ => None,
        };
    }
    usage.pss_bytes = pss;
    Some(usage)
}

/// `pid` and its descendants, through `/proc/<pid>/task/<tid>/children`.
fn tree(pid: i32) -> Vec<i32> {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return Vec::new();
    }
    let mut out = vec![pid];
    let mut next = 0;
    while next < out.len() && out.len() < MAX_MEMBERS {
        let parent = out[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            out.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    out.truncate(MAX_MEMBERS);
    out
}

/// utime + stime (clock ticks) from a `/proc/<pid>/stat` line. Pure.
fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line; `rest` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The kiB value of a `Name:   123 kB` line. Pure.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_skip_a_command_name_with_spaces_and_parentheses() {
        let stat =
            "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 99 1000 50";
        assert_eq!(cpu_ticks(stat), Some(12));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn kib_fields_are_found_by_name() {
        let text = "Name:\tpython3\nVmRSS:\t   10240 kB\nPss:   5 kB\n";
        assert_eq!(kib_field(text, "VmRSS:"), Some(10240));
        assert_eq!(kib_field(text, "Pss:"), Some(5));
        assert_eq!(kib_field(text, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_a_usage_and_a_gone_one_has_none() {
        let me = of_tree(std::process::id() as i32).unwrap();
        assert!(me.rss_bytes > 0);
        assert!(
            me.pss_bytes.is_some_and(|p| p > 0),
            "root may read its own smaps"
        );
        assert_eq!(of_tree(i32::MAX), None);
    }
}
