//! Workspaces seen from the host, where sandboxed code decides what is in them: what a
//! call created, changed or deleted ([`tracker`]: incremental, bounded, honest about its
//! limits), reading a file back out without ever leaving the workspace, and removing a
//! tree of any depth ([`fsops`]). Names are raw bytes throughout; they become text only
//! when shown, escaped ([`crate::text::display_name`]), never dropped.

#[cfg(target_os = "linux")]
pub mod checkpoint;
#[cfg(target_os = "linux")]
pub mod cow;
#[cfg(target_os = "linux")]
pub mod fsops;
#[cfg(target_os = "linux")]
pub mod journal;
#[cfg(target_os = "linux")]
pub mod tracker;
// Elsewhere (no inotify, no openat2): the same interface, kept by bounded walks.
#[cfg(not(target_os = "linux"))]
#[path = "portable.rs"]
pub mod tracker;

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[cfg(target_os = "linux")]
pub use fsops::remove_tree;
#[cfg(not(target_os = "linux"))]
pub use tracker::remove_tree;
pub use tracker::{MAX_DEPTH, MAX_TRACKED, Tracker, Watcher};
#[cfg(target_os = "linux")]
pub use tracker::{MAX_WATCHES_PER_SESSION, server_share};

/// Where a backend's world shows the session's workspace to the code: its working
/// directory and `HOME`. Every world uses this one path, so code written for one backend
/// runs unchanged under another.
pub const IN_WORLD: &str = "/workspace";

/// Most changes listed in one result (the rest are counted).
pub const MAX_REPORTED: usize = 200;
/// Longest path shown (escaped); a longer one keeps its start and its end.
pub const MAX_SHOWN_PATH: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Created,
    Modified,
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileChange {
    /// Path relative to the workspace, as text: bytes that are not UTF-8 appear as
    /// `\xNN`, control characters as `\u{…}`, and `\`, `<`, `>`, `&` escaped too.
    pub path: String,
    pub change: Change,
    pub kind: EntryKind,
    /// Size in bytes after the call (0 when deleted).
    pub size: u64,
    /// The path was longer than 1024 bytes shown: its middle is cut (`…`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The real name, for the server's own use (images, resources).
    #[serde(skip)]
    #[schemars(skip)]
    pub raw: Vec<u8>,
}

/// A path as shown: escaped, and at most [`MAX_SHOWN_PATH`] bytes (the start and the end
/// kept). Returns whether it was cut.
pub fn shown_path(raw: &[u8]) -> (String, bool) {
    let shown = crate::text::display_name(raw);
    if shown.len() <= MAX_SHOWN_PATH {
        return (shown, false);
    }
    let (head, _) = crate::text::capped(&shown, MAX_SHOWN_PATH / 3);
    let mut tail_start = shown.len() - (MAX_SHOWN_PATH - MAX_SHOWN_PATH / 3 - 4);
    while !shown.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    (format!("{head}…{}", &shown[tail_start..]), true)
}

/// One change, by raw path (shown escaped only when the report is built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChange {
    pub path: Vec<u8>,
    pub change: Change,
    pub kind: EntryKind,
    pub size: u64,
}

/// What one tracker report found (each OS's [`Tracker`] makes it its own way).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every change, in path order (files, links and others; not directories: a new
    /// directory shows through what is in it).
    pub changes: Vec<RawChange>,
    /// Why changes may be missing (parts of the workspace are beyond what is tracked).
    pub incomplete: Option<String>,
    /// Why the changes were found by walking the workspace rather than from inotify's
    /// events (a session past its share of the user's inotify watches).
    pub by_scan: Option<String>,
}

/// A call's change report as a result carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// The first [`MAX_REPORTED`] changes, in path order.
    pub files: Vec<FileChange>,
    /// How many changes there were in all.
    pub total: u64,
    /// Why changes may be missing, when parts of the workspace are not tracked.
    pub incomplete: Option<String>,
    /// Why this session's tracking is by scan, when it is.
    pub by_scan: Option<String>,
    /// The size of every file created or modified (what the call wrote, as the caps
    /// count it).
    pub bytes_written: u64,
}

impl From<Report> for Summary {
    fn from(report: Report) -> Summary {
        let total = report.changes.len() as u64;
        let bytes_written = report
            .changes
            .iter()
            .filter(|c| c.change != Change::Deleted)
            .fold(0u64, |sum, c| sum.saturating_add(c.size));
        let files = report
            .changes
            .into_iter()
            .take(MAX_REPORTED)
            .map(|c| {
                let (path, truncated) = shown_path(&c.path);
                FileChange {
                    path,
                    change: c.change,
                    kind: c.kind,
                    size: c.size,
                    truncated,
                    raw: c.path,
                }
            })
            .collect();
        Summary {
            files,
            total,
            incomplete: report.incomplete,
            by_scan: report.by_scan,
            bytes_written,
        }
    }
}

/// One named checkpoint of a workspace, as its record beside the copy holds it and the
/// checkpoint tools show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointInfo {
    pub name: String,
    /// Seconds since the Unix epoch.
    pub taken_at: u64,
    /// Bytes of file data it holds (each hard-linked file once); they count against
    /// the session's disk quota.
    pub bytes: u64,
    /// Files, directories and links in it.
    pub entries: u64,
    /// Entries of the workspace it left out (FIFOs, sockets).
    pub skipped: u64,
    /// The grants the session held when it was taken (`read PATH`, `write PATH`,
    /// `host NAME:PORT`): a restore is refused once one of them is gone.
    pub grants: Vec<String>,
}

/// Largest file the server reads back out of a workspace (resources, images).
pub const MAX_READ_BYTES: u64 = 10 << 20;

/// Reads `relative` (raw bytes) inside `root` without ever leaving it: the kernel resolves
/// the path beneath `root`, refusing `..` escapes, symlinks (at any component) and magic
/// links, so code that swaps a file for a symlink after the fact gains nothing. Only
/// regular files up to `max` bytes are read.
pub fn read_beneath(root: &Path, relative: &[u8], max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let invalid =
        |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
    if relative.is_empty() || relative.starts_with(b"/") || relative.contains(&0) {
        return Err(invalid("the path must be relative to the workspace"));
    }
    let file = open_file_beneath(root, relative)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid("not a regular file"));
    }
    if meta.len() > max {
        return Err(invalid("file too large to return"));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(invalid("file too large to return"));
    }
    Ok(out)
}

#[cfg(target_os = "linux")]
fn open_file_beneath(root: &Path, relative: &[u8]) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    let dir = std::fs::File::open(root)?;
    let fd = fsops::open_beneath(
        dir.as_fd(),
        relative,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
    )?;
    Ok(std::fs::File::from(fd))
}

#[cfg(not(target_os = "linux"))]
fn open_file_beneath(root: &Path, relative: &[u8]) -> std::io::Result<std::fs::File> {
    tracker::open_file(root, relative)
}

/// The MIME type for a workspace file, by extension.
pub fn mime_for(path: &[u8]) -> &'static str {
    let ext = path
        .rsplit(|b| *b == b'.')
        .next()
        .map(|e| String::from_utf8_lossy(e).to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "csv" => "text/csv",
        "json" => "application/json",
        "txt" | "log" | "md" | "py" | "tsv" | "yaml" | "yml" | "toml" | "html" | "xml" => {
            "text/plain"
        }
        _ => "application/octet-stream",
    }
}

/// The tests make symlinks, which need privileges on Windows.
#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn read_beneath_refuses_every_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("ok.txt"), "inside").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/deep.csv"), "a,b").unwrap();
        std::fs::write(root.join(std::ffi::OsStr::new("bad\u{fffd}")), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etcdir")).unwrap();
        std::os::unix::fs::symlink("ok.txt", root.join("inner_link")).unwrap();
        assert_eq!(read_beneath(root, b"ok.txt", 100).unwrap(), b"inside");
        assert_eq!(read_beneath(root, b"sub/deep.csv", 100).unwrap(), b"a,b");
        for bad in [
            &b"link.txt"[..],
            b"etcdir/passwd",
            b"inner_link",
            b"../../../../etc/passwd",
            b"/etc/passwd",
            b"sub",
            b"",
        ] {
            assert!(
                read_beneath(root, bad, 100).is_err(),
                "{:?} was read",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(read_beneath(root, b"ok.txt", 3).is_err(), "size cap");
    }

    #[test]
    fn long_paths_keep_their_start_and_end() {
        let raw: Vec<u8> = (0..300)
            .flat_map(|i| format!("dir{i}/").into_bytes())
            .collect();
        let mut raw = raw;
        raw.extend_from_slice(b"leaf.csv");
        let (shown, cut) = shown_path(&raw);
        assert!(cut && shown.len() <= MAX_SHOWN_PATH + 3, "{}", shown.len());
        assert!(shown.starts_with("dir0/dir1/") && shown.ends_with("/leaf.csv"));
        assert_eq!(shown_path(b"a/b.txt"), ("a/b.txt".to_string(), false));
    }

    #[test]
    fn mime_types_by_extension() {
        assert_eq!(mime_for(b"plot.PNG"), "image/png");
        assert_eq!(mime_for(b"data\xff.csv"), "text/csv");
        assert_eq!(mime_for(b"noext"), "application/octet-stream");
    }
}
