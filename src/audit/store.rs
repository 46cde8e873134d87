//! The audit directory on disk: the key file, the lock file, the signed checkpoint and
//! the numbered segments (`00000001.jsonl`, …; a segment found broken is renamed
//! `00000001.broken.jsonl` and kept for investigation). Everything is created 0600 inside
//! a 0700 directory: no sandbox can reach it (workers see only their workspace), and the
//! directory is never grantable (it is under the data directory).

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::chain::{self, Checkpoint, Key};

pub const KEY_FILE: &str = "key";
pub const LOCK_FILE: &str = "lock";
pub const CHECKPOINT_FILE: &str = "checkpoint";

pub fn segment_name(n: u64) -> String {
    format!("{n:08}.jsonl")
}

pub fn broken_name(n: u64) -> String {
    format!("{n:08}.broken.jsonl")
}

/// The number of a live segment's file name.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".jsonl")?;
    (digits.len() == 8 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The number of a set-aside segment's file name (`00000003.broken.jsonl`, or with a
/// suffix when that name was taken: `00000003.broken.2.jsonl`).
pub fn parse_broken_name(name: &str) -> Option<u64> {
    let (digits, rest) = name.split_once(".broken")?;
    (digits.len() == 8 && rest.ends_with(".jsonl"))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Live segment numbers, ascending, and set-aside file names.
pub fn list(dir: &Path) -> std::io::Result<(Vec<u64>, Vec<String>)> {
    let mut live = Vec::new();
    let mut broken = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = parse_segment_name(name) {
            live.push(n);
        } else if parse_broken_name(name).is_some() {
            broken.push(name.to_string());
        }
    }
    live.sort_unstable();
    broken.sort();
    Ok((live, broken))
}

pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    crate::os::create_dir(dir, 0o700, true)?;
    let meta = std::fs::metadata(dir)?;
    if crate::os::permission_bits(&meta).is_some_and(|m| m & 0o077 != 0) {
        crate::os::set_mode(dir, 0o700)?;
    }
    Ok(())
}

fn private() -> OpenOptions {
    let mut o = OpenOptions::new();
    crate::os::private_file(&mut o);
    o
}

/// Reads the key, creating it first if there is none. Two servers starting at once agree
/// on one key: the file appears whole (written aside, then linked into place) or not at
/// all, and whoever links second reads the first one's key.
pub fn load_or_create_key(dir: &Path) -> std::io::Result<Key> {
    let path = dir.join(KEY_FILE);
    for _ in 0..3 {
        match read_key(&path) {
            Ok(key) => return Ok(key),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        crate::os::create_private_file(&path, Key::generate().to_hex().as_bytes())?;
    }
    read_key(&path)
}

fn read_key(path: &Path) -> std::io::Result<Key> {
    let mut f = private().read(true).open(path)?;
    let meta = f.metadata()?;
    if crate::os::permission_bits(&meta).is_some_and(|m| m & 0o077 != 0) {
        // Someone widened it: narrow it again (the key may have leaked; the log says so
        // through the warning the caller raises when it sees this error's sibling).
        crate::os::set_mode(path, 0o600)?;
    }
    let mut text = String::new();
    std::io::Read::by_ref(&mut f)
        .take(200)
        .read_to_string(&mut text)?;
    Key::from_hex(&text).ok_or_else(|| {
        std::io::Error::new(
            ErrorKind::InvalidData,
            format!("{} does not hold a key", path.display()),
        )
    })
}

/// Opens a live segment for appending (`create`: it must not exist yet).
pub fn open_segment(dir: &Path, n: u64, create: bool) -> std::io::Result<File> {
    let mut o = private();
    o.read(true).append(true);
    if create {
        o.create_new(true);
    }
    o.open(dir.join(segment_name(n)))
}

/// Renames a live segment aside; returns its new name.
pub fn set_aside(dir: &Path, n: u64) -> std::io::Result<String> {
    let from = dir.join(segment_name(n));
    let mut name = broken_name(n);
    let mut i = 2;
    while dir.join(&name).exists() {
        name = format!("{n:08}.broken.{i}.jsonl");
        i += 1;
    }
    std::fs::rename(from, dir.join(&name))?;
    Ok(name)
}

/// The exclusive lock every server takes around reading the log's end and appending.
pub struct Lock(File);

pub struct LockGuard<'a>(&'a File);

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl Lock {
    pub fn open(dir: &Path) -> std::io::Result<Lock> {
        Ok(Lock(
            private()
                .read(true)
                .write(true)
                .create(true)
                .open(dir.join(LOCK_FILE))?,
        ))
    }

    /// Takes the lock, waiting at most `timeout` (a holder is only ever inside one
    /// append, microseconds; a stopped process holding it must not hang every call).
    pub fn acquire(&self, timeout: Duration) -> std::io::Result<LockGuard<'_>> {
        let until = Instant::now() + timeout;
        let mut nap = Duration::from_micros(50);
        loop {
            // flock(LOCK_EX | LOCK_NB) on Unix, LockFileEx on Windows.
            match self.0.try_lock() {
                Ok(()) => return Ok(LockGuard(&self.0)),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) if e.kind() == ErrorKind::Interrupted => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
            if Instant::now() >= until {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!("another process has held the audit lock for {timeout:?}"),
                ));
            }
            std::thread::sleep(nap);
            // Short naps: an append holds the lock for well under a millisecond, and a
            // waiter that sleeps long loses every release to the ones that retry sooner.
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }
}

/// What the checkpoint file holds.
pub enum Stored {
    Missing,
    Invalid(String),
    Valid(Checkpoint),
}

pub fn read_checkpoint(dir: &Path, key: &Key) -> Stored {
    let path = dir.join(CHECKPOINT_FILE);
    let mut text = String::new();
    match private().read(true).open(&path) {
        Ok(f) => {
            if let Err(e) = f.take(16 << 20).read_to_string(&mut text) {
                return Stored::Invalid(e.to_string());
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => return Stored::Missing,
        Err(e) => return Stored::Invalid(e.to_string()),
    }
    match chain::unseal_checkpoint(key, &text) {
        Ok(cp) => Stored::Valid(cp),
        Err(problem) => Stored::Invalid(problem),
    }
}

/// Replaces the checkpoint atomically (written aside, then renamed over it).
pub fn write_checkpoint(dir: &Path, key: &Key, cp: &Checkpoint) -> std::io::Result<()> {
    let text = chain::seal_checkpoint(key, cp).map_err(std::io::Error::other)?;
    let tmp: PathBuf = dir.join(format!(
        "{CHECKPOINT_FILE}.{}",
        crate::hex(&crate::random_bytes::<6>())
    ));
    let result = private()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Device and inode of a path (not following symlinks), to see whether a segment is still
/// the file this server has open.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| crate::os::file_identity(&m))
}

pub fn file_identity(f: &File) -> std::io::Result<(u64, u64)> {
    Ok(crate::os::file_identity(&f.metadata()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_segment_name(&segment_name(42)), Some(42));
        assert_eq!(parse_broken_name(&broken_name(42)), Some(42));
        assert_eq!(parse_broken_name("00000042.broken.3.jsonl"), Some(42));
        assert_eq!(parse_segment_name(&broken_name(42)), None);
        assert_eq!(parse_segment_name("checkpoint"), None);
        assert_eq!(parse_segment_name("1.jsonl"), None);
    }

    #[cfg(unix)]
    #[test]
    fn the_key_is_made_once_and_kept_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        create_dir(dir.path()).unwrap();
        let a = load_or_create_key(dir.path()).unwrap();
        let b = load_or_create_key(dir.path()).unwrap();
        assert_eq!(a.to_hex(), b.to_hex());
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary key files left");
    }

    #[test]
    fn the_lock_excludes_a_second_holder_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let a = Lock::open(dir.path()).unwrap();
        let b = Lock::open(dir.path()).unwrap();
        let held = a.acquire(Duration::from_secs(1)).unwrap();
        let err = b.acquire(Duration::from_millis(30)).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::TimedOut);
        drop(held);
        assert!(b.acquire(Duration::from_millis(30)).is_ok());
    }
}
