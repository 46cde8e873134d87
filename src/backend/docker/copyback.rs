//! The server's copy of an in-container workspace, refreshed after each call over the
//! engine's API: the container's `/workspace` comes as one archive (an archive
//! download), which is written to a file of the server's, checked and unpacked beside
//! the copy, and only then put in place, file by file. A transfer cut in the middle, an
//! archive over the caps or an entry with a bad name leaves the copy as it was: nothing
//! half-written ever reaches it. Results, the files list, images and `warden://`
//! resources read that copy exactly as they read a host workspace.
//!
//! What comes back: regular files (their bytes, their executable bit, their time) and
//! directories. Symbolic links, devices, FIFOs and sockets stay in the container and are
//! named in the result's warnings; a hard link comes back as a copy of its file.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use bollard::Docker;
use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;

use super::config::WORKSPACE;

/// What one copy may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Bytes of every file together (`SANDBOX_DISK_LIMIT`).
    pub total_bytes: u64,
    /// Bytes of one file (`SANDBOX_FILE_SIZE_LIMIT`).
    pub file_bytes: u64,
    /// Entries of the archive.
    pub entries: usize,
}

/// Most archive entries one copy takes.
pub const MAX_ENTRIES: usize = 200_000;
/// Most entries left out that a result names one by one.
const NAMED: usize = 20;

/// Most entries a fingerprint walks; past them none is taken (and the copy is made).
const FINGERPRINT_ENTRIES: usize = 50_000;

/// An entry changed this recently may change again within the same tick of the
/// kernel's file clock without its times moving: no fingerprint is trusted then.
const RACY: Duration = Duration::from_millis(25);

/// A fingerprint of the tree at `root`: every entry's path, type, size, times, inode and
/// mode, in name order. `None` past [`FINGERPRINT_ENTRIES`], when an entry cannot be
/// read (it changed meanwhile), or when one changed in the last [`RACY`] (a rewrite of
/// the same size within the same clock tick would keep its times): then the copy is
/// made anyway.
pub fn fingerprint(root: &Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let racy = SystemTime::now().checked_sub(RACY)?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let (mut stack, mut seen) = (vec![root.to_path_buf()], 0usize);
    while let Some(dir) = stack.pop() {
        let mut entries = std::fs::read_dir(&dir)
            .ok()?
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            seen += 1;
            if seen > FINGERPRINT_ENTRIES {
                return None;
            }
            let meta = entry.metadata().ok()?;
            if meta.modified().is_ok_and(|t| t >= racy) || changed_since(&meta, racy) {
                return None;
            }
            entry.path().hash(&mut hasher);
            stamp(&meta).hash(&mut hasher);
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Some(hasher.finish())
}

/// Whether an entry's status (its ctime) changed at or after `since`.
#[cfg(unix)]
fn changed_since(m: &std::fs::Metadata, since: SystemTime) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ctime = Duration::new(
        u64::try_from(m.ctime()).unwrap_or(0),
        u32::try_from(m.ctime_nsec()).unwrap_or(0),
    );
    SystemTime::UNIX_EPOCH + ctime >= since
}

#[cfg(not(unix))]
fn changed_since(_m: &std::fs::Metadata, _since: SystemTime) -> bool {
    false
}

/// What of an entry's metadata says it changed.
#[cfg(unix)]
fn stamp(m: &std::fs::Metadata) -> [i64; 7] {
    use std::os::unix::fs::MetadataExt;
    [
        m.size() as i64,
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.ino() as i64,
        i64::from(m.mode()),
    ]
}

#[cfg(not(unix))]
fn stamp(m: &std::fs::Metadata) -> [i64; 7] {
    let t = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    [m.len() as i64, t, 0, 0, 0, 0, i64::from(m.is_dir())]
}

/// What the server knows of an in-container workspace: the fingerprint its launcher
/// last reported, and the one the server's copy was made at.
#[derive(Debug, Default)]
pub struct Freshness {
    state: std::sync::Mutex<(Option<u64>, Option<u64>)>,
}

impl Freshness {
    fn state(&self) -> std::sync::MutexGuard<'_, (Option<u64>, Option<u64>)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The launcher's fingerprint, just before a response (`None`: not taken).
    pub fn report(&self, seen: Option<u64>) {
        self.state().0 = seen;
    }

    /// The fingerprint to copy at, or `None` when the copy is already of it. After a call
    /// that did not finish (its worker died: it reported nothing after the code ran),
    /// always a copy.
    pub fn wanted(&self, finished: bool) -> Option<Option<u64>> {
        let (reported, copied) = *self.state();
        match (finished, reported) {
            (true, Some(now)) if copied == Some(now) => None,
            (true, now) => Some(now),
            (false, _) => Some(None),
        }
    }

    /// The copy was made at `at`.
    pub fn copied(&self, at: Option<u64>) {
        self.state().1 = at;
    }
}

/// Why a copy was not made.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("the archive of the workspace did not arrive whole: {0}")]
    Transfer(String),
    #[error("the workspace's archive is over its caps: {0}")]
    Caps(String),
    #[error("the workspace's archive holds {0}")]
    Name(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Refreshes `copy` from the `/workspace` of container `id`, through files in `home`
/// (the session's directory of the server's). Returns what was left out.
pub async fn copy_back(
    docker: &Docker,
    id: &str,
    home: &Path,
    copy: &Path,
    caps: Caps,
) -> Result<Vec<String>, CopyError> {
    let archive = home.join("incoming.tar");
    let staging = home.join("incoming");
    let result = async {
        download(docker, id, &archive, caps).await?;
        let (archive, staging, copy) = (archive.clone(), staging.clone(), copy.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let left_out = unpack(&archive, &staging, caps)?;
            apply(&staging, &copy)?;
            Ok(left_out)
        })
        .await
        .map_err(|e| CopyError::Io(std::io::Error::other(e.to_string())))?
    }
    .await;
    let _ = std::fs::remove_file(&archive);
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// The archive's most bytes: every file at its cap, plus a header and padding for each
/// entry.
fn archive_cap(caps: Caps) -> u64 {
    caps.total_bytes
        .saturating_add((caps.entries as u64).saturating_mul(1024))
        .saturating_add(1 << 20)
}

/// Writes the container's archive of `/workspace` to `path`, refusing it past its cap.
async fn download(docker: &Docker, id: &str, path: &Path, caps: Caps) -> Result<(), CopyError> {
    let options = DownloadFromContainerOptions {
        path: WORKSPACE.to_string(),
    };
    let mut stream = docker.download_from_container(id, Some(options));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let (mut written, cap) = (0u64, archive_cap(caps));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| CopyError::Transfer(super::causes(&e)))?;
        written += chunk.len() as u64;
        if written > cap {
            return Err(CopyError::Caps(format!("more than {cap} bytes")));
        }
        file.write_all(&chunk)?;
    }
    drop(file);
    if !ends_whole(path)? {
        return Err(CopyError::Transfer(
            "the archive stops before its end-of-archive blocks".into(),
        ));
    }
    Ok(())
}

/// Whether an archive ends as a whole one does: with two zero blocks (a transfer cut at
/// an entry's boundary would otherwise read as a shorter workspace).
fn ends_whole(path: &Path) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len < 1024 {
        return Ok(false);
    }
    file.seek(SeekFrom::Start(len - 1024))?;
    let mut tail = [0u8; 1024];
    file.read_exact(&mut tail)?;
    Ok(tail.iter().all(|b| *b == 0))
}

/// An entry's path inside the workspace: the archive names the workspace itself first
/// (`workspace/…`). `None` for the workspace itself; an error for any name that is not
/// a plain relative path inside it. Pure.
pub fn inside(name: &Path) -> Result<Option<PathBuf>, CopyError> {
    let mut parts = name.components();
    match parts.next() {
        Some(Component::Normal(first)) if first == "workspace" => {}
        _ => {
            return Err(CopyError::Name(format!(
                "{} outside the workspace",
                name.display()
            )));
        }
    }
    let mut rel = PathBuf::new();
    for part in parts {
        match part {
            Component::Normal(p) => rel.push(p),
            Component::CurDir => {}
            _ => {
                return Err(CopyError::Name(format!(
                    "{} (not a plain name)",
                    name.display()
                )));
            }
        }
    }
    Ok((!rel.as_os_str().is_empty()).then_some(rel))
}

/// Unpacks the archive into `staging` (made afresh), checking every name and cap;
/// returns what was left out.
fn unpack(archive: &Path, staging: &Path, caps: Caps) -> Result<Vec<String>, CopyError> {
    let _ = std::fs::remove_dir_all(staging);
    crate::os::create_dir(staging, 0o700, false)?;
    let mut reader = tar::Archive::new(std::fs::File::open(archive)?);
    let (mut total, mut count, mut left_out) = (0u64, 0usize, Vec::new());
    let entries = reader
        .entries()
        .map_err(|e| CopyError::Transfer(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| CopyError::Transfer(e.to_string()))?;
        count += 1;
        if count > caps.entries {
            return Err(CopyError::Caps(format!(
                "more than {} entries",
                caps.entries
            )));
        }
        let name = entry
            .path()
            .map_err(|e| CopyError::Name(e.to_string()))?
            .into_owned();
        let Some(rel) = inside(&name)? else { continue };
        let to = staging.join(&rel);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&to)?;
            continue;
        }
        if kind.is_hard_link() {
            let target = entry
                .link_name()
                .ok()
                .flatten()
                .map(|l| inside(&l))
                .transpose()?
                .flatten();
            match target.map(|t| staging.join(t)).filter(|t| t.is_file()) {
                Some(from) => {
                    if let Some(parent) = to.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    total += std::fs::copy(&from, &to)?;
                }
                None => left_out.push(format!("{} (a hard link)", rel.display())),
            }
            continue;
        }
        if !(kind.is_file() || kind.is_contiguous()) {
            left_out.push(format!("{} ({})", rel.display(), kind_word(kind)));
            continue;
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| CopyError::Transfer(e.to_string()))?;
        if size > caps.file_bytes {
            return Err(CopyError::Caps(format!(
                "{} has {size} bytes, more than {}",
                rel.display(),
                caps.file_bytes
            )));
        }
        total += size;
        if total > caps.total_bytes {
            return Err(CopyError::Caps(format!(
                "more than {} bytes",
                caps.total_bytes
            )));
        }
        write_file(&mut entry, &to)?;
    }
    Ok(left_out)
}

fn kind_word(kind: tar::EntryType) -> &'static str {
    if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_character_special() || kind.is_block_special() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// One regular file of the archive, with its executable bit and its time.
fn write_file(entry: &mut tar::Entry<'_, std::fs::File>, to: &Path) -> Result<(), CopyError> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mode = entry.header().mode().unwrap_or(0o600);
    let mtime = entry.header().mtime().unwrap_or(0);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    std::io::copy(entry, &mut file).map_err(|e| CopyError::Transfer(e.to_string()))?;
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime))?;
    drop(file);
    crate::os::set_mode(to, if mode & 0o100 != 0 { 0o700 } else { 0o600 })?;
    Ok(())
}

/// Makes `copy` hold exactly what `staging` holds: a file whose size, time and mode are
/// the same is left alone; any other is moved in whole (a rename); what `staging` does
/// not hold is removed.
pub fn apply(staging: &Path, copy: &Path) -> std::io::Result<()> {
    let mut kept = HashSet::new();
    for entry in std::fs::read_dir(staging)? {
        let entry = entry?;
        let (from, to) = (entry.path(), copy.join(entry.file_name()));
        kept.insert(entry.file_name());
        let there = std::fs::symlink_metadata(&to).ok();
        if entry.file_type()?.is_dir() {
            if !there.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                remove_any(&to)?;
                crate::os::create_dir(&to, 0o700, false)?;
            }
            apply(&from, &to)?;
        } else if !there.is_some_and(|m| entry.metadata().is_ok_and(|e| same_file(&e, &m))) {
            if std::fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir_all(&to)?;
            }
            std::fs::rename(&from, &to)?;
        }
    }
    for entry in std::fs::read_dir(copy)? {
        let entry = entry?;
        if !kept.contains(&entry.file_name()) {
            remove_any(&entry.path())?;
        }
    }
    Ok(())
}

/// Whether two files are taken to be the same: size, time and mode.
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    b.is_file()
        && a.len() == b.len()
        && a.modified().ok() == b.modified().ok()
        && a.permissions() == b.permissions()
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The warning a result carries for what was left out.
pub fn left_out_warning(left_out: &[String]) -> Option<String> {
    if left_out.is_empty() {
        return None;
    }
    let shown: Vec<&str> = left_out.iter().take(NAMED).map(String::as_str).collect();
    let more = left_out.len().saturating_sub(NAMED);
    Some(format!(
        "the workspace lives in the container; these entries stay there and are not in the server's copy (only regular files and directories come back): {}{}",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(dir: &Path, build: impl FnOnce(&mut tar::Builder<std::fs::File>)) -> PathBuf {
        let path = dir.join("a.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
        build(&mut b);
        b.finish().unwrap();
        path
    }

    fn file(b: &mut tar::Builder<std::fs::File>, name: &str, data: &[u8], mode: u32) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, data).unwrap();
    }

    const CAPS: Caps = Caps {
        total_bytes: 1 << 20,
        file_bytes: 1 << 16,
        entries: 100,
    };

    #[test]
    fn a_copy_is_made_only_when_the_workspace_changed_or_the_call_did_not_finish() {
        let f = Freshness::default();
        assert_eq!(f.wanted(true), Some(None), "nothing copied yet");
        f.report(Some(7));
        assert_eq!(f.wanted(true), Some(Some(7)));
        f.copied(Some(7));
        assert_eq!(f.wanted(true), None, "unchanged");
        assert_eq!(f.wanted(false), Some(None), "a worker that died");
        f.report(None);
        assert_eq!(f.wanted(true), Some(None), "not taken");
        let t = tempfile::tempdir().unwrap();
        let settle = || std::thread::sleep(RACY * 2);
        let written = std::time::Instant::now();
        std::fs::write(t.path().join("a"), "1").unwrap();
        let just = fingerprint(t.path());
        // Only meaningful when the walk came within RACY of the write (a loaded machine
        // may take longer, and then the entry is no longer too recent).
        if written.elapsed() < RACY {
            assert_eq!(just, None, "just changed: not trusted");
        }
        settle();
        let before = fingerprint(t.path()).unwrap();
        assert_eq!(fingerprint(t.path()), Some(before));
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::write(t.path().join("d/b"), "2").unwrap();
        settle();
        let after = fingerprint(t.path()).unwrap();
        assert_ne!(after, before);
        std::fs::write(t.path().join("d/b"), "3").unwrap();
        assert_ne!(fingerprint(t.path()), Some(after), "a rewrite in place");
        settle();
        assert_ne!(
            fingerprint(t.path()),
            Some(after),
            "a rewrite in place, later"
        );
    }

    #[test]
    fn only_plain_names_inside_the_workspace_come_back() {
        assert_eq!(inside(Path::new("workspace")).unwrap(), None);
        assert_eq!(
            inside(Path::new("workspace/a/b.txt")).unwrap(),
            Some(PathBuf::from("a/b.txt"))
        );
        for bad in [
            "etc/passwd",
            "/workspace/a",
            "workspace/../x",
            "../workspace/x",
        ] {
            assert!(inside(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    #[cfg(unix)]
    fn the_copy_becomes_the_archive_and_keeps_what_did_not_change() {
        let t = tempfile::tempdir().unwrap();
        let (staging, copy) = (t.path().join("staging"), t.path().join("copy"));
        std::fs::create_dir(&copy).unwrap();
        std::fs::write(copy.join("gone.txt"), "old").unwrap();
        std::fs::create_dir(copy.join("was-a-dir")).unwrap();
        let a = archive(t.path(), |b| {
            file(b, "workspace/a.txt", b"alpha", 0o644);
            file(b, "workspace/sub/run.sh", b"#!/bin/sh", 0o755);
            file(b, "workspace/was-a-dir", b"now a file", 0o644);
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "workspace/link", "/etc/passwd")
                .unwrap();
        });
        let left = unpack(&a, &staging, CAPS).unwrap();
        assert_eq!(left, vec!["link (a symbolic link)".to_string()]);
        apply(&staging, &copy).unwrap();
        assert_eq!(std::fs::read(copy.join("a.txt")).unwrap(), b"alpha");
        assert_eq!(
            std::fs::read(copy.join("was-a-dir")).unwrap(),
            b"now a file"
        );
        assert!(!copy.join("gone.txt").exists());
        assert!(!copy.join("link").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&copy.join("sub/run.sh")), 0o700);
        assert_eq!(mode(&copy.join("a.txt")), 0o600);
        // The same archive again changes nothing: the file is the same inode.
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(copy.join("a.txt")).unwrap().ino();
        unpack(&a, &staging, CAPS).unwrap();
        apply(&staging, &copy).unwrap();
        assert_eq!(std::fs::metadata(copy.join("a.txt")).unwrap().ino(), ino);
    }

    #[test]
    fn an_archive_over_its_caps_or_cut_short_is_refused_whole() {
        let t = tempfile::tempdir().unwrap();
        let staging = t.path().join("staging");
        let big = archive(t.path(), |b| {
            file(b, "workspace/big", &[7u8; 70_000], 0o644)
        });
        assert!(matches!(
            unpack(&big, &staging, CAPS),
            Err(CopyError::Caps(_))
        ));
        let many = archive(t.path(), |b| {
            for i in 0..101 {
                file(b, &format!("workspace/f{i}"), b"x", 0o644);
            }
        });
        assert!(matches!(
            unpack(&many, &staging, CAPS),
            Err(CopyError::Caps(_))
        ));
        let escaping = archive(t.path(), |b| file(b, "elsewhere/x", b"x", 0o644));
        assert!(matches!(
            unpack(&escaping, &staging, CAPS),
            Err(CopyError::Name(_))
        ));
        let whole = archive(t.path(), |b| file(b, "workspace/x", &[1u8; 5000], 0o644));
        let bytes = std::fs::read(&whole).unwrap();
        std::fs::write(&whole, &bytes[..1500]).unwrap();
        assert!(unpack(&whole, &staging, CAPS).is_err(), "a cut archive");
    }
}
