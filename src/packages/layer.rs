//! One session's package layer on the server's disk: `<instance>/pkg/<id>/` holds
//! generations (`gen-N/`, each a complete installed tree) and `current`, a relative
//! symlink to the one in use; workers bind the directory read-only and import from
//! `current`. An install is staged beside it (`<id>.stage/`, the installer's workspace)
//! and becomes the next generation by one rename of `current`: a worker sees the old
//! tree or the new one, never a mix. The previous generation is removed after the
//! switch (a running interpreter keeps what it already loaded).

use std::path::{Path, PathBuf};

use crate::os::{create_dir, set_mode};

/// The link to the generation in use.
const CURRENT: &str = "current";
/// Deepest directory and most entries [`tree_size`] walks.
const MAX_DEPTH: usize = 128;
const MAX_ENTRIES: u64 = 500_000;

/// One session's layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    root: PathBuf,
}

impl Layer {
    /// Creates an empty layer at `root` (generation 0, empty), readable by every uid
    /// (a root server's workers run as uids of their own) and writable by the server
    /// alone.
    ///
    /// # Errors
    /// The file system's refusal.
    pub fn create(root: &Path) -> std::io::Result<Layer> {
        if let Some(parent) = root.parent() {
            create_dir(parent, 0o711, true)?;
        }
        create_dir(root, 0o755, false)?;
        set_mode(root, 0o755)?;
        let layer = Layer {
            root: root.to_path_buf(),
        };
        create_dir(&layer.generation_dir(0), 0o755, false)?;
        relative_link("gen-0", &root.join(CURRENT))?;
        Ok(layer)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where an install is staged.
    pub fn stage_dir(&self) -> PathBuf {
        self.root.with_extension("stage")
    }

    /// The generation in use.
    pub fn current(&self) -> u64 {
        std::fs::read_link(self.root.join(CURRENT))
            .ok()
            .and_then(|t| t.to_str()?.strip_prefix("gen-")?.parse().ok())
            .unwrap_or(0)
    }

    /// The directory of the generation in use (not the link to it).
    pub fn current_dir(&self) -> PathBuf {
        self.generation_dir(self.current())
    }

    fn generation_dir(&self, n: u64) -> PathBuf {
        self.root.join(format!("gen-{n}"))
    }

    /// A fresh, empty stage owned by `owner` (the uid the installer runs as, when the
    /// server is root). An earlier stage left behind is removed first.
    ///
    /// # Errors
    /// The file system's refusal.
    pub fn new_stage(&self, owner: Option<(u32, u32)>) -> std::io::Result<PathBuf> {
        let stage = self.stage_dir();
        if stage.exists() {
            std::fs::remove_dir_all(&stage)?;
        }
        create_dir(&stage, 0o700, false)?;
        #[cfg(unix)]
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&stage, Some(uid), Some(gid))?;
        }
        #[cfg(not(unix))]
        let _ = owner;
        Ok(stage)
    }

    /// Makes the stage's installed tree (`stage/site`) the layer's next generation, and
    /// removes the previous one and the stage. Returns the new generation's number.
    ///
    /// # Errors
    /// The file system's refusal; the layer is then unchanged (the switch is the one
    /// rename that makes it change).
    pub fn promote(&self, site: &Path) -> std::io::Result<u64> {
        let old = self.current();
        let new = old + 1;
        let target = self.generation_dir(new);
        if target.exists() {
            std::fs::remove_dir_all(&target)?;
        }
        std::fs::rename(site, &target)?;
        set_mode(&target, 0o755)?;
        let link = self.root.join(".current-next");
        let _ = std::fs::remove_file(&link);
        relative_link(&format!("gen-{new}"), &link)?;
        std::fs::rename(&link, self.root.join(CURRENT))?;
        if let Err(e) = std::fs::remove_dir_all(self.generation_dir(old)) {
            tracing::warn!(error = %e, layer = %self.root.display(), "a previous package generation could not be removed");
        }
        self.discard_stage();
        Ok(new)
    }

    /// Removes the stage (a failed or finished install).
    pub fn discard_stage(&self) {
        let stage = self.stage_dir();
        if stage.exists()
            && let Err(e) = std::fs::remove_dir_all(&stage)
        {
            tracing::warn!(error = %e, stage = %stage.display(), "a package stage could not be removed");
        }
    }

    /// Removes the layer and any stage (the session closed).
    ///
    /// # Errors
    /// What could not be removed.
    pub fn remove(&self) -> Result<(), String> {
        self.discard_stage();
        match std::fs::remove_dir_all(&self.root) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{}: {e}", self.root.display())),
        }
    }
}

/// A symbolic link `at -> target` (relative, so that it resolves inside a world or a
/// container as well as here). Package layers need them: Unix only.
fn relative_link(target: &str, at: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    return std::os::unix::fs::symlink(target, at);
    #[cfg(not(unix))]
    {
        let _ = (target, at);
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "package layers are made on Unix servers only",
        ))
    }
}

/// The bytes a tree takes (regular files' lengths), never following a symbolic link,
/// bounded in depth and entries: `None` when the bound is passed.
pub fn tree_size(root: &Path) -> Option<u64> {
    let mut total = 0u64;
    let mut entries = 0u64;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(list) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in list.flatten() {
            entries += 1;
            if entries > MAX_ENTRIES {
                return None;
            }
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                if depth + 1 > MAX_DEPTH {
                    return None;
                }
                stack.push((entry.path(), depth + 1));
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    Some(total)
}

/// The SHA-256 of a regular file, opened without following a symbolic link.
///
/// # Errors
/// It is not a regular file, or cannot be read.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW);
    #[cfg(not(unix))]
    if path.symlink_metadata()?.file_type().is_symlink() {
        return Err(std::io::Error::other("a symbolic link"));
    }
    let mut file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(crate::hex(&hasher.finalize()))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_promotion_switches_current_at_once_and_drops_the_old_generation() {
        let dir = tempfile::tempdir().unwrap();
        let layer = Layer::create(&dir.path().join("pkg/w1")).unwrap();
        assert_eq!(layer.current(), 0);
        assert!(layer.root().join("current").is_dir());
        let stage = layer.new_stage(None).unwrap();
        std::fs::create_dir(stage.join("site")).unwrap();
        std::fs::write(stage.join("site/mod.py"), "X = 1\n").unwrap();
        assert_eq!(layer.promote(&stage.join("site")).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(layer.root().join("current/mod.py")).unwrap(),
            "X = 1\n"
        );
        assert_eq!(
            std::fs::read_link(layer.root().join("current")).unwrap(),
            PathBuf::from("gen-1"),
            "relative, so it resolves inside the world too"
        );
        assert!(!layer.root().join("gen-0").exists());
        assert!(!stage.exists());
        layer.remove().unwrap();
        assert!(!layer.root().exists());
    }

    #[test]
    fn a_failed_promotion_leaves_the_layer_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let layer = Layer::create(&dir.path().join("w2")).unwrap();
        let _stage = layer.new_stage(None).unwrap();
        assert!(layer.promote(&layer.stage_dir().join("site")).is_err());
        assert_eq!(layer.current(), 0);
        assert!(layer.root().join("current").is_dir());
    }

    #[test]
    fn tree_size_counts_files_and_never_follows_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/f"), vec![0u8; 1000]).unwrap();
        std::os::unix::fs::symlink("/usr", dir.path().join("a/l")).unwrap();
        assert_eq!(tree_size(dir.path()), Some(1000));
        std::fs::write(dir.path().join("w.whl"), b"abc").unwrap();
        assert_eq!(
            sha256_file(&dir.path().join("w.whl")).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(sha256_file(&dir.path().join("a/l")).is_err());
    }
}
