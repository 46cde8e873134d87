//! The mount table as `/proc/self/mountinfo` gives it: which other file systems are
//! mounted inside a directory. A grant brings in exactly one file system, so the mounts
//! beneath a requested directory are found here, at consent and again before every
//! worker start. [`parse`] and [`beneath`] are pure.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of mountinfo, the fields warden uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub id: u64,
    pub parent: u64,
    /// Where it is mounted, as this process sees it.
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

impl MountEntry {
    /// "proc on /data/chroot/proc" style, for messages.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.mount_point.display(), self.fs_type)
    }
}

/// Undoes the kernel's octal escapes of space, tab, newline and backslash (`\040`,
/// `\011`, `\012`, `\134`); any other byte is kept as it is. Pure.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && i + 3 < field.len()
            && field[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = field[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            if let Ok(byte) = u8::try_from(value) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

/// Parses mountinfo text (proc(5)): `id parent major:minor root mount_point options
/// [optional fields…] - fs_type source super_options`. Pure.
///
/// # Errors
/// The first line that does not have that shape: a table read wrong must not be
/// taken for one without mounts.
pub fn parse(text: &[u8]) -> Result<Vec<MountEntry>, String> {
    let mut entries = Vec::new();
    for (n, line) in text.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        let bad = || {
            format!(
                "mountinfo line {}: unexpected shape: {}",
                n + 1,
                String::from_utf8_lossy(line)
            )
        };
        let number = |f: &[u8]| -> Result<u64, String> {
            std::str::from_utf8(f)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(bad)
        };
        let dash = fields.iter().position(|f| *f == b"-").ok_or_else(bad)?;
        if fields.len() < 6 || dash < 6 || fields.len() < dash + 3 {
            return Err(bad());
        }
        entries.push(MountEntry {
            id: number(fields[0])?,
            parent: number(fields[1])?,
            mount_point: PathBuf::from(OsString::from_vec(unescape(fields[4]))),
            fs_type: String::from_utf8_lossy(&unescape(fields[dash + 1])).into_owned(),
            source: String::from_utf8_lossy(&unescape(fields[dash + 2])).into_owned(),
        });
    }
    Ok(entries)
}

/// The mounts strictly beneath `root` (not a mount on `root` itself), outermost first,
/// each once. Pure.
pub fn beneath<'a>(entries: &'a [MountEntry], root: &Path) -> Vec<&'a MountEntry> {
    let mut found: Vec<&MountEntry> = entries
        .iter()
        .filter(|e| e.mount_point != root && e.mount_point.starts_with(root))
        .collect();
    found.sort_by_key(|e| e.mount_point.components().count());
    let mut seen: Vec<&Path> = Vec::new();
    found.retain(|e| {
        if seen.contains(&e.mount_point.as_path()) {
            return false;
        }
        seen.push(&e.mount_point);
        true
    });
    found
}

/// This process's mount table.
///
/// # Errors
/// When it cannot be read or parsed, as a sentence.
#[cfg(target_os = "linux")]
pub fn read_self() -> Result<Vec<MountEntry>, String> {
    let text = std::fs::read("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    parse(&text)
}

/// macOS has no mountinfo: the mount table comes from `getfsstat` (ids and parents are
/// not known there, and not needed).
///
/// # Errors
/// When the table cannot be read.
#[cfg(target_os = "macos")]
pub fn read_self() -> Result<Vec<MountEntry>, String> {
    let failed = || format!("getfsstat: {}", std::io::Error::last_os_error());
    // SAFETY: a null buffer asks only for the number of mounted file systems.
    let count = unsafe { libc::getfsstat(std::ptr::null_mut(), 0, libc::MNT_NOWAIT) };
    let count = usize::try_from(count).map_err(|_| failed())?;
    // Room for a few mounted since the count.
    let mut table: Vec<libc::statfs> = Vec::with_capacity(count + 16);
    let bytes = table.capacity() * std::mem::size_of::<libc::statfs>();
    let bytes = libc::c_int::try_from(bytes).map_err(|_| "too many mounts".to_string())?;
    // SAFETY: the buffer holds `bytes` bytes of statfs records, which getfsstat fills.
    let filled = unsafe { libc::getfsstat(table.as_mut_ptr(), bytes, libc::MNT_NOWAIT) };
    let filled = usize::try_from(filled).map_err(|_| failed())?;
    // SAFETY: getfsstat initialised `filled` records, at most the capacity.
    unsafe { table.set_len(filled.min(table.capacity())) };
    let text = |field: &[libc::c_char]| {
        // SAFETY: the kernel NUL-terminates these fixed-size fields.
        unsafe { std::ffi::CStr::from_ptr(field.as_ptr()) }
            .to_bytes()
            .to_vec()
    };
    Ok(table
        .iter()
        .map(|fs| MountEntry {
            id: 0,
            parent: 0,
            mount_point: PathBuf::from(OsString::from_vec(text(&fs.f_mntonname))),
            fs_type: String::from_utf8_lossy(&text(&fs.f_fstypename)).into_owned(),
            source: String::from_utf8_lossy(&text(&fs.f_mntfromname)).into_owned(),
        })
        .collect())
}

/// Elsewhere the mount table is not read: nothing can be told about mounts inside a
/// directory, so none is granted.
///
/// # Errors
/// Always.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn read_self() -> Result<Vec<MountEntry>, String> {
    Err("this system's mount table cannot be read to check a directory for other mounts".into())
}

/// The mounts beneath `root` in this process's table, as one sentence each.
///
/// # Errors
/// When the table cannot be read.
pub fn mounts_beneath(root: &Path) -> Result<Vec<String>, String> {
    let table = read_self()?;
    Ok(beneath(&table, root)
        .into_iter()
        .map(MountEntry::describe)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &[u8] = b"22 27 0:21 / /proc rw,relatime - proc proc rw\n\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
45 27 254:0 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/vda rw\n\
60 27 0:40 / /data/my\\040tree rw,relatime master:3 - tmpfs tmpfs rw\n\
61 60 0:41 / /data/my\\040tree/proc rw - proc proc rw\n\
62 60 0:42 / /data/my\\040tree/a\\011b\\012c\\134d rw - tmpfs my\\040src rw\n\
63 61 0:43 / /data/my\\040tree/proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n\
64 60 0:44 / /data/my\\040tree/proc rw - tmpfs over rw\n\
70 27 0:45 / /database rw - tmpfs tmpfs rw\n";

    #[test]
    fn octal_escapes_are_undone_and_nothing_else() {
        assert_eq!(unescape(b"a\\040b"), b"a b");
        assert_eq!(unescape(b"\\011\\012\\134"), b"\t\n\\");
        assert_eq!(unescape(b"\\09x"), b"\\09x");
        assert_eq!(unescape(b"end\\04"), b"end\\04");
        assert_eq!(unescape(b"\\777"), b"\\777");
        assert_eq!(unescape(b"caf\xc3\xa9"), "café".as_bytes());
    }

    #[test]
    fn lines_are_parsed_with_their_optional_fields() {
        let table = parse(SAMPLE).unwrap();
        assert_eq!(table.len(), 9);
        assert_eq!(table[2].mount_point, Path::new("/var/lib/docker"));
        assert_eq!(table[2].fs_type, "ext4");
        assert_eq!(table[3].mount_point, Path::new("/data/my tree"));
        assert_eq!(table[3].parent, 27);
        assert_eq!(table[5].mount_point, Path::new("/data/my tree/a\tb\nc\\d"));
        assert_eq!(table[5].source, "my src");
    }

    #[test]
    fn a_malformed_table_is_an_error_not_an_empty_one() {
        assert!(parse(b"22 27 0:21 / /proc rw,relatime proc proc rw\n").is_err());
        assert!(parse(b"x 27 0:21 / /proc rw - proc proc rw\n").is_err());
        assert!(parse(b"22 27 0:21 / - proc proc\n").is_err());
        assert_eq!(parse(b"").unwrap(), []);
    }

    #[test]
    fn mounts_beneath_a_tree_are_found_outermost_first() {
        let table = parse(SAMPLE).unwrap();
        let under = |p: &str| -> Vec<String> {
            beneath(&table, Path::new(p))
                .iter()
                .map(|e| e.mount_point.display().to_string())
                .collect()
        };
        assert_eq!(
            under("/data/my tree"),
            [
                "/data/my tree/proc",
                "/data/my tree/a\tb\nc\\d",
                "/data/my tree/proc/sys/fs/binfmt_misc"
            ]
        );
        // The tree's own mount is not beneath it; a sibling sharing a prefix is not.
        let mut with_tree = vec!["/data/my tree".to_string()];
        with_tree.extend(under("/data/my tree"));
        assert_eq!(under("/data"), with_tree);
        assert!(under("/data/my").is_empty());
        assert!(under("/srv").is_empty());
        assert_eq!(under("/var/lib"), ["/var/lib/docker"]);
    }
}
