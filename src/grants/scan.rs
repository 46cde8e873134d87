//! What a granted directory holds that the code must never reach: every entry named in
//! the never-grant rules (`.git`, `.ssh`, shell start-up files …) and every git
//! directory found by its content, wherever it lies in the tree. Those are hidden: the
//! sandbox puts an empty, read-only mount over each ([`Mask`]), in the worker's world or
//! in the container, so neither reading nor writing reaches them. The walk runs at
//! consent (to tell the person) and again at every bind (so that what appeared since is
//! hidden too), on the very descriptor that is bound.
//!
//! [`judge_listing`] decides from one directory's listing, purely; [`scan`] walks.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use super::rules::NeverGrant;

pub use super::MaskKind;

/// One entry to hide, relative to the granted directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    pub rel: PathBuf,
    pub kind: MaskKind,
    pub why: String,
}

/// Bounds of one walk: a tree too large to check is refused, never half-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Directory entries read, in all.
    pub entries: usize,
    /// Directory levels below the granted one.
    pub depth: usize,
    /// Entries hidden.
    pub masks: usize,
}

/// The bounds every grant is checked with.
pub const LIMITS: Limits = Limits {
    entries: 250_000,
    depth: 128,
    masks: 1_000,
};

/// Why a directory's contents could not be checked, or cannot be hidden.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error(
        "{0} is a symbolic link named .git: git follows it, and it cannot be hidden (a mount cannot cover a link)"
    )]
    GitLink(PathBuf),
    #[error("it is itself a git directory (HEAD beside objects/ and refs/)")]
    Repository,
    #[error(
        "it holds more than {0} entries, too many to check for .git and the other never-grantable names; grant a smaller directory"
    )]
    TooLarge(usize),
    #[error(
        "{0} lies more than {1} directories deep, too deep to check; grant a smaller directory"
    )]
    TooDeep(PathBuf, usize),
    #[error("more than {0} entries in it would have to be hidden; grant a smaller directory")]
    TooManyMasks(usize),
    #[error("reading {path} failed: {error}")]
    Io { path: PathBuf, error: String },
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    Symlink,
    Other,
}

/// Whether a listing is that of a git directory, as git itself recognises one: `HEAD`
/// with `objects` and `refs`, or with `commondir` (a worktree's). Pure.
pub fn is_repository(listing: &[Entry]) -> bool {
    let has = |n: &str| listing.iter().any(|e| e.name == OsStr::new(n));
    has("HEAD") && (has("objects") && has("refs") || has("commondir"))
}

/// What one directory's listing holds: the entries to hide (by name, relative to the
/// grant) and the subdirectories still to walk. Pure.
///
/// # Errors
/// A `.git` that is a symbolic link, which no mount can cover.
pub fn judge_listing(
    rel: &Path,
    listing: &[Entry],
    rules: &NeverGrant,
) -> Result<(Vec<Mask>, Vec<OsString>), ScanError> {
    let mut masks = Vec::new();
    let mut walk = Vec::new();
    for entry in listing {
        let path = rel.join(&entry.name);
        match (rules.name_reason(&entry.name), entry.kind) {
            (Some(_), EntryKind::Symlink) if entry.name == OsStr::new(".git") => {
                return Err(ScanError::GitLink(path));
            }
            // Any other link resolves inside the sandbox's own file tree, where what it
            // names on the host does not exist.
            (_, EntryKind::Symlink) => {}
            (Some(why), kind) => masks.push(Mask {
                rel: path,
                kind: if kind == EntryKind::Dir {
                    MaskKind::Dir
                } else {
                    MaskKind::File
                },
                why: why.to_string(),
            }),
            (None, EntryKind::Dir) => walk.push(entry.name.clone()),
            (None, EntryKind::Other) => {}
        }
    }
    Ok((masks, walk))
}

/// Walks the directory `root` (never following a link, never leaving its file system,
/// never entering `skip`, paths relative to `root`) and returns what must be hidden.
/// A directory the walker may enter but not list is hidden whole: what lies inside it
/// cannot be checked.
///
/// # Errors
/// The tree is itself a git directory, holds a `.git` link, or is too large to check.
pub fn scan(
    root: BorrowedFd<'_>,
    rules: &NeverGrant,
    skip: &[PathBuf],
    limits: &Limits,
) -> Result<Vec<Mask>, ScanError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: rustix::io::Errno| ScanError::Io {
            path: path.clone(),
            error: e.to_string(),
        }
    };
    let top = Path::new("");
    let root = rustix::fs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io(top))?;
    let device = rustix::fs::fstat(&root).map_err(io(top))?.st_dev;
    let mut seen = 0usize;
    let listing = list(&root, &mut seen, limits).map_err(|e| e.at(top))?;
    if is_repository(&listing) {
        return Err(ScanError::Repository);
    }
    let (mut masks, walk) = judge_listing(top, &listing, rules)?;
    let mut stack: Vec<(PathBuf, OwnedFd, Vec<OsString>)> = vec![(PathBuf::new(), root, walk)];
    loop {
        let depth = stack.len();
        let Some((rel, dir, pending)) = stack.last_mut() else {
            break;
        };
        let Some(name) = pending.pop() else {
            stack.pop();
            continue;
        };
        let child_rel = rel.join(&name);
        if skip.contains(&child_rel) {
            continue;
        }
        if depth > limits.depth {
            return Err(ScanError::TooDeep(child_rel, limits.depth));
        }
        let Some(child) = open_child(dir.as_fd(), &name, &child_rel, &mut masks)? else {
            continue;
        };
        if rustix::fs::fstat(&child).map_err(io(&child_rel))?.st_dev != device {
            // Another file system mounted here: not part of the grant.
            continue;
        }
        let listing = list(&child, &mut seen, limits).map_err(|e| e.at(&child_rel))?;
        if is_repository(&listing) {
            masks.push(Mask {
                rel: child_rel,
                kind: MaskKind::Dir,
                why: rules.repository.why.clone(),
            });
        } else {
            let (found, walk) = judge_listing(&child_rel, &listing, rules)?;
            masks.extend(found);
            stack.push((child_rel, child, walk));
        }
        if masks.len() > limits.masks {
            return Err(ScanError::TooManyMasks(limits.masks));
        }
    }
    if masks.len() > limits.masks {
        return Err(ScanError::TooManyMasks(limits.masks));
    }
    Ok(masks)
}

/// Why a directory that can be entered but not listed is hidden whole.
const UNLISTABLE: &str = "it can be entered but not listed, so what is inside it cannot be checked";

/// Opens a subdirectory to walk. `None`: it is gone, no longer a directory, or cannot
/// be entered at all (then nothing inside it is reachable either); one that can be
/// entered but not listed is hidden whole.
fn open_child(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    rel: &Path,
    masks: &mut Vec<Mask>,
) -> Result<Option<OwnedFd>, ScanError> {
    use rustix::io::Errno;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ACCESS) => {
            let enterable = rustix::fs::accessat(
                dir,
                name,
                rustix::fs::Access::EXEC_OK,
                rustix::fs::AtFlags::empty(),
            )
            .is_ok();
            if enterable {
                masks.push(Mask {
                    rel: rel.to_path_buf(),
                    kind: MaskKind::Dir,
                    why: UNLISTABLE.to_string(),
                });
            }
            Ok(None)
        }
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => Ok(None),
        Err(e) => Err(ScanError::Io {
            path: rel.to_path_buf(),
            error: e.to_string(),
        }),
    }
}

/// A listing failure, placed once its path is known.
enum ListError {
    TooLarge(usize),
    Io(String),
}

impl ListError {
    fn at(self, path: &Path) -> ScanError {
        match self {
            ListError::TooLarge(n) => ScanError::TooLarge(n),
            ListError::Io(error) => ScanError::Io {
                path: path.to_path_buf(),
                error,
            },
        }
    }
}

/// The entries of an open directory (without `.` and `..`), each with its kind (asked
/// of the file system when the listing does not say).
fn list(dir: &OwnedFd, seen: &mut usize, limits: &Limits) -> Result<Vec<Entry>, ListError> {
    let mut entries = Vec::new();
    let mut reader = rustix::fs::Dir::read_from(dir).map_err(|e| ListError::Io(e.to_string()))?;
    for entry in reader.by_ref() {
        let entry = entry.map_err(|e| ListError::Io(e.to_string()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        *seen += 1;
        if *seen > limits.entries {
            return Err(ListError::TooLarge(limits.entries));
        }
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name);
        let kind = match entry.file_type() {
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            FileType::Unknown => {
                match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                        FileType::Directory => EntryKind::Dir,
                        FileType::Symlink => EntryKind::Symlink,
                        _ => EntryKind::Other,
                    },
                    Err(_) => continue,
                }
            }
            _ => EntryKind::Other,
        };
        entries.push(Entry {
            name: name.to_os_string(),
            kind,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> NeverGrant {
        NeverGrant::embedded().unwrap()
    }

    fn entry(name: &str, kind: EntryKind) -> Entry {
        Entry {
            name: name.into(),
            kind,
        }
    }

    #[test]
    fn a_listing_names_what_to_hide_and_what_to_walk() {
        let listing = [
            entry(".git", EntryKind::Dir),
            entry(".bashrc", EntryKind::Other),
            entry("src", EntryKind::Dir),
            entry("data.csv", EntryKind::Other),
            entry(".profile", EntryKind::Symlink),
            entry("link", EntryKind::Symlink),
            entry(".gitignore", EntryKind::Other),
        ];
        let (masks, walk) = judge_listing(Path::new("proj"), &listing, &rules()).unwrap();
        let hidden: Vec<(String, MaskKind)> = masks
            .iter()
            .map(|m| (m.rel.display().to_string(), m.kind))
            .collect();
        assert_eq!(
            hidden,
            [
                ("proj/.git".to_string(), MaskKind::Dir),
                ("proj/.bashrc".to_string(), MaskKind::File)
            ]
        );
        assert!(masks[0].why.contains("core.fsmonitor"));
        assert_eq!(walk, [OsString::from("src")]);
    }

    #[test]
    fn a_git_file_is_hidden_and_a_git_link_refused() {
        let (masks, _) = judge_listing(
            Path::new("sub"),
            &[entry(".git", EntryKind::Other)],
            &rules(),
        )
        .unwrap();
        assert_eq!(masks[0].kind, MaskKind::File);
        assert_eq!(
            judge_listing(
                Path::new("sub"),
                &[entry(".git", EntryKind::Symlink)],
                &rules()
            ),
            Err(ScanError::GitLink("sub/.git".into()))
        );
    }

    #[test]
    fn git_directories_are_known_by_their_content() {
        let bare = [
            entry("HEAD", EntryKind::Other),
            entry("objects", EntryKind::Dir),
            entry("refs", EntryKind::Dir),
            entry("config", EntryKind::Other),
        ];
        assert!(is_repository(&bare));
        let worktree = [
            entry("HEAD", EntryKind::Other),
            entry("commondir", EntryKind::Other),
        ];
        assert!(is_repository(&worktree));
        assert!(!is_repository(&bare[1..]));
        assert!(!is_repository(&[
            entry("HEAD", EntryKind::Other),
            entry("refs", EntryKind::Dir)
        ]));
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in [
            "proj/.git/objects",
            "proj/.git/refs",
            "proj/src/deep",
            "proj/vendor/lib",
            "srv/repo.git/objects",
            "srv/repo.git/refs",
            "home/bob/.ssh",
        ] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        std::fs::write(p.join("proj/.git/config"), "[core]\n").unwrap();
        std::fs::write(p.join("proj/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            p.join("proj/vendor/lib/.git"),
            "gitdir: ../../.git/modules/lib\n",
        )
        .unwrap();
        std::fs::write(p.join("srv/repo.git/HEAD"), "ref: x\n").unwrap();
        std::fs::write(p.join("home/bob/.bashrc"), "").unwrap();
        std::fs::write(p.join("proj/src/deep/data.csv"), "a").unwrap();
        dir
    }

    fn hidden(root: &Path, skip: &[PathBuf], limits: &Limits) -> Result<Vec<String>, ScanError> {
        let fd = std::fs::File::open(root).unwrap();
        let mut found: Vec<String> = scan(fd.as_fd(), &rules(), skip, limits)?
            .into_iter()
            .map(|m| format!("{} {:?}", m.rel.display(), m.kind))
            .collect();
        found.sort();
        Ok(found)
    }

    #[test]
    fn the_walk_finds_every_entry_to_hide_wherever_it_is() {
        let dir = tree();
        assert_eq!(
            hidden(dir.path(), &[], &LIMITS).unwrap(),
            [
                "home/bob/.bashrc File",
                "home/bob/.ssh Dir",
                "proj/.git Dir",
                "proj/vendor/lib/.git File",
                "srv/repo.git Dir",
            ]
        );
        // A skipped subtree (another mount there) is not walked.
        assert_eq!(
            hidden(dir.path(), &["home".into(), "srv".into()], &LIMITS).unwrap(),
            ["proj/.git Dir", "proj/vendor/lib/.git File"]
        );
        // The tree being a git directory itself.
        assert_eq!(
            hidden(&dir.path().join("srv/repo.git"), &[], &LIMITS),
            Err(ScanError::Repository)
        );
    }

    #[test]
    fn a_link_named_git_is_refused_and_other_links_are_not_followed() {
        let dir = tree();
        std::os::unix::fs::symlink("/etc", dir.path().join("proj/src/etc")).unwrap();
        assert_eq!(
            hidden(&dir.path().join("proj/src"), &[], &LIMITS).unwrap(),
            Vec::<String>::new()
        );
        std::os::unix::fs::symlink("../.git", dir.path().join("proj/src/.git")).unwrap();
        assert_eq!(
            hidden(&dir.path().join("proj"), &[], &LIMITS),
            Err(ScanError::GitLink("src/.git".into()))
        );
    }

    #[test]
    fn a_tree_too_large_or_too_deep_is_refused_not_half_checked() {
        let dir = tree();
        let small = Limits {
            entries: 5,
            ..LIMITS
        };
        assert_eq!(hidden(dir.path(), &[], &small), Err(ScanError::TooLarge(5)));
        let shallow = Limits { depth: 2, ..LIMITS };
        assert!(matches!(
            hidden(dir.path(), &[], &shallow),
            Err(ScanError::TooDeep(_, 2))
        ));
        let few = Limits { masks: 2, ..LIMITS };
        assert_eq!(
            hidden(dir.path(), &[], &few),
            Err(ScanError::TooManyMasks(2))
        );
    }
}
