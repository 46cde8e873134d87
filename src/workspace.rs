//! Workspace bookkeeping seen from the host: which files a call created or changed.
//! The walk never follows symlinks (the code controls what is in the workspace) and is
//! bounded, so a workspace with a million files costs a bounded amount of time.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

const MAX_ENTRIES: usize = 10_000;
const MAX_DEPTH: usize = 32;
/// Most files listed in one result.
pub const MAX_REPORTED: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    kind: EntryKind,
}

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
    /// Path relative to the workspace.
    pub path: String,
    pub change: Change,
    pub kind: EntryKind,
    /// Size in bytes after the call (0 when deleted).
    pub size: u64,
}

/// The state of a workspace at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    entries: BTreeMap<PathBuf, Stamp>,
    /// The walk stopped at its bound; changes beyond it are not reported.
    pub incomplete: bool,
}

impl Snapshot {
    pub fn take(root: &Path) -> Snapshot {
        let mut snap = Snapshot::default();
        let mut stack = vec![(root.to_path_buf(), 0usize)];
        while let Some((dir, depth)) = stack.pop() {
            let Ok(read) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in read.flatten() {
                if snap.entries.len() >= MAX_ENTRIES {
                    snap.incomplete = true;
                    return snap;
                }
                let path = entry.path();
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                let kind = if meta.file_type().is_symlink() {
                    EntryKind::Symlink
                } else if meta.is_dir() {
                    EntryKind::Dir
                } else if meta.is_file() {
                    EntryKind::File
                } else {
                    EntryKind::Other
                };
                let stamp = Stamp {
                    size: if kind == EntryKind::Dir {
                        0
                    } else {
                        meta.len()
                    },
                    mtime_ns: i128::from(meta.mtime()) * 1_000_000_000
                        + i128::from(meta.mtime_nsec()),
                    kind,
                };
                if kind == EntryKind::Dir {
                    if depth + 1 < MAX_DEPTH {
                        stack.push((path.clone(), depth + 1));
                    } else {
                        snap.incomplete = true;
                    }
                }
                if let Ok(rel) = path.strip_prefix(root) {
                    snap.entries.insert(rel.to_path_buf(), stamp);
                }
            }
        }
        snap
    }

    /// What changed from `self` to `after`: files and symlinks, not directories (a new
    /// directory shows through the files in it).
    pub fn changes_to(&self, after: &Snapshot) -> Vec<FileChange> {
        let mut out = Vec::new();
        for (path, stamp) in &after.entries {
            if stamp.kind == EntryKind::Dir {
                continue;
            }
            let change = match self.entries.get(path) {
                None => Change::Created,
                Some(old) if old != stamp => Change::Modified,
                Some(_) => continue,
            };
            out.push(FileChange {
                path: path.to_string_lossy().into_owned(),
                change,
                kind: stamp.kind,
                size: stamp.size,
            });
        }
        for (path, stamp) in &self.entries {
            if stamp.kind != EntryKind::Dir && !after.entries.contains_key(path) {
                out.push(FileChange {
                    path: path.to_string_lossy().into_owned(),
                    change: Change::Deleted,
                    kind: stamp.kind,
                    size: 0,
                });
            }
        }
        out.truncate(MAX_REPORTED);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_created_modified_and_deleted_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "a").unwrap();
        std::fs::write(dir.path().join("gone.txt"), "a").unwrap();
        std::fs::write(dir.path().join("edit.txt"), "a").unwrap();
        let before = Snapshot::take(dir.path());
        std::fs::remove_file(dir.path().join("gone.txt")).unwrap();
        std::fs::write(dir.path().join("edit.txt"), "abc").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/new.csv"), "x,y").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let after = Snapshot::take(dir.path());
        let mut changes = before.changes_to(&after);
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        let summary: Vec<(String, Change)> =
            changes.iter().map(|c| (c.path.clone(), c.change)).collect();
        assert_eq!(
            summary,
            vec![
                ("edit.txt".to_string(), Change::Modified),
                ("gone.txt".to_string(), Change::Deleted),
                ("link".to_string(), Change::Created),
                ("sub/new.csv".to_string(), Change::Created),
            ]
        );
        let link = changes.iter().find(|c| c.path == "link").unwrap();
        assert_eq!(link.kind, EntryKind::Symlink);
    }
}
