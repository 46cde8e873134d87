//! The files a worker holds open for writing (or maps shared and writable): written
//! later through those descriptors or mappings, never through a call the journal's
//! filter stops, so a journal keeps their bytes when it first sees the worker and a
//! checkpoint copies them rather than share them.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

use super::calls::{in_workspace, opath, opath_dir};
use crate::sandbox::linux::seccomp::journal::{O_RDWR, O_WRONLY};
use crate::workspace::journal::Journal;

/// Every process of the worker's tree, from its helper down.
fn tree(helper: i32) -> Vec<i32> {
    let mut out = vec![helper];
    let mut i = 0;
    while i < out.len() && out.len() < 4096 {
        let pid = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// Every file (device, inode) a process of the worker can write now.
pub(super) fn writable(helper: i32) -> std::collections::HashSet<(u64, u64)> {
    let mut out = std::collections::HashSet::new();
    for pid in tree(helper) {
        for file in writable_of(pid) {
            if let Ok(st) = rustix::fs::fstat(&file) {
                out.insert((st.st_dev, st.st_ino));
            }
        }
    }
    out
}

/// The files `pid` holds open for writing or maps shared and writable.
fn writable_of(pid: i32) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) {
        for fd in fds.flatten() {
            let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u64::from_str_radix(f.trim(), 8).ok())
                .unwrap_or(0);
            if flags & (O_WRONLY | O_RDWR) == 0 {
                continue;
            }
            let name = fd.file_name();
            if let Ok(file) = opath(&format!("/proc/{pid}/fd/{}", name.to_string_lossy())) {
                out.push(file);
            }
        }
    }
    out.extend(shared_maps(pid));
    out
}

/// Hands `journal` every file on its file system that a process of the worker can
/// still write.
pub(super) fn take_in(helper: i32, journal: &mut Journal) {
    for pid in tree(helper) {
        for file in writable_of(pid) {
            let path = in_workspace(file.as_fd());
            if let Err(e) = journal.before_write(file.as_fd(), &path) {
                tracing::warn!(error = %e, "an open file could not be journaled");
            }
        }
    }
}

/// Files mapped shared and writable: written through memory, never through a call.
fn shared_maps(pid: i32) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let Ok(root) = opath_dir(&format!("/proc/{pid}/root")) else {
        return out;
    };
    for line in maps.lines() {
        let fields: Vec<&str> = line.splitn(6, ' ').collect();
        let (Some(perms), Some(path)) = (fields.get(1), fields.get(5)) else {
            continue;
        };
        let path = path.trim_start();
        if !perms.contains('w') || !perms.ends_with('s') || !path.starts_with('/') {
            continue;
        }
        let resolve = rustix::fs::ResolveFlags::IN_ROOT | rustix::fs::ResolveFlags::NO_MAGICLINKS;
        if let Ok(file) = rustix::fs::openat2(
            &root,
            path,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            resolve,
        ) {
            out.push(file);
        }
    }
    out
}
