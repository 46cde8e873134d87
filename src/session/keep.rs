//! Keeping a closing session's workspace (`SANDBOX_KEEP_WORKSPACES`): a copy of it is
//! made under `<data dir>/kept/<instance>/` before the workspace itself is deleted (a
//! workspace may be a tmpfs that exists only in the workspace keeper's namespace, so it
//! cannot be moved).
//!
//! The session's worker is already dead, so nothing changes the tree while it is copied.
//! It was still written by sandboxed code: the walk never follows a symbolic link
//! (links are copied as links), skips anything but directories, regular files and links
//! (a FIFO would block the copy), and is iterative and bounded in depth and entries, so
//! no tree can exhaust the server's stack or hold it forever.

use std::path::{Path, PathBuf};

/// Deepest directory copied.
const MAX_DEPTH: usize = 256;
/// Most entries copied.
const MAX_ENTRIES: usize = 100_000;

/// Copies the tree at `from` to the new directory `to` (its parent is made, mode 0700).
///
/// # Errors
/// What could not be created at `to`, as a sentence. Entries of `from` that cannot be
/// read, or that lie past the bounds, are skipped and counted in a log line.
pub fn copy_workspace(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(parent) = to.parent() {
        crate::os::create_dir(parent, 0o700, true)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    make_dir(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut skipped = 0usize;
    let mut copied = 0usize;
    let mut stack: Vec<(PathBuf, PathBuf, usize)> = vec![(from.to_path_buf(), to.to_path_buf(), 0)];
    while let Some((src, dst, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&src) else {
            skipped += 1;
            continue;
        };
        for entry in entries.flatten() {
            if copied >= MAX_ENTRIES {
                skipped += 1;
                continue;
            }
            let (source, target) = (entry.path(), dst.join(entry.file_name()));
            let Ok(meta) = std::fs::symlink_metadata(&source) else {
                skipped += 1;
                continue;
            };
            let kind = meta.file_type();
            let done = if kind.is_dir() && depth < MAX_DEPTH {
                make_dir(&target).map(|()| stack.push((source, target, depth + 1)))
            } else if kind.is_file() {
                std::fs::copy(&source, &target).map(drop)
            } else if kind.is_symlink() {
                std::fs::read_link(&source).and_then(|link| copy_link(&link, &target))
            } else {
                Err(std::io::Error::other("not a file, directory or link"))
            };
            match done {
                Ok(()) => copied += 1,
                Err(_) => skipped += 1,
            }
        }
    }
    if skipped > 0 {
        tracing::warn!(kept = %to.display(), copied, skipped, "part of a workspace could not be kept");
    }
    Ok(())
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    crate::os::create_dir(path, 0o700, false)?;
    crate::os::set_mode(path, 0o700)
}

/// A link copied as a link (Windows: links are not kept; they need privileges there).
fn copy_link(link: &Path, target: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(link, target)
    }
    #[cfg(not(unix))]
    {
        let _ = (link, target);
        Err(std::io::Error::other("links are not kept on this system"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn files_directories_and_links_are_copied_and_links_never_followed() {
        let src = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("a/b")).unwrap();
        std::fs::write(src.path().join("a/b/data.csv"), "x,y\n").unwrap();
        std::os::unix::fs::symlink("/etc", src.path().join("etc")).unwrap();
        let fifo =
            std::ffi::CString::new(src.path().join("pipe").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid, NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let to = out.path().join("kept/one");
        copy_workspace(src.path(), &to).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("a/b/data.csv")).unwrap(),
            "x,y\n"
        );
        let link = std::fs::symlink_metadata(to.join("etc")).unwrap();
        assert!(link.file_type().is_symlink(), "copied as a link");
        assert_eq!(
            std::fs::read_link(to.join("etc")).unwrap(),
            Path::new("/etc")
        );
        assert!(!to.join("pipe").exists(), "a FIFO is skipped, not read");
    }

    #[test]
    fn a_deep_tree_is_copied_to_the_bound_without_recursion() {
        let src = tempfile::tempdir().unwrap();
        let mut deep = src.path().to_path_buf();
        for _ in 0..(MAX_DEPTH + 20) {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let out = tempfile::tempdir().unwrap();
        let to = out.path().join("k");
        copy_workspace(src.path(), &to).unwrap();
        let mut copied = to.clone();
        for _ in 0..MAX_DEPTH {
            copied.push("d");
        }
        assert!(copied.is_dir());
        assert!(!copied.join("d").exists());
    }
}
