//! Grants: extra paths a session's sandbox may reach, approved by a human, never by the
//! model. A grant widens both walls at once (the guard's allowed roots and what the
//! worker's world holds). This module owns the grant record, the paths that can never be
//! granted, how a path is resolved and opened at consent, and the rules that keep a grant
//! bound to the object the person approved; the consent dialogue lives in the server.
//!
//! A grant is the object, not the path: at consent the canonical path (the one shown to
//! the person) is opened without following any symlink, its device and inode are
//! recorded and the open descriptor is kept (so the inode cannot be freed and its number
//! reused). Every later worker start binds the object at that path only if it is still
//! that one ([`check_still_approved`]; the sandbox helper checks again, race-free, on the
//! descriptor it binds). Grants that would let one rewrite another are refused
//! ([`conflict`]), as are grants covering the runtime, the binary or warden's data; an
//! operator grant that another already gives is dropped instead ([`combine_operator`]).
//!
//! What may never be granted is data ([`rules`]: `policies/never-grant.toml`). What a
//! granted directory holds that no grant gives is found by [`scan`] (entries to hide:
//! `.git`, credentials, shell start-up files, git directories) and [`mountinfo`] (other
//! file systems mounted inside it); [`judge_inside`] decides, for what the backend can
//! do ([`GrantWalls`]), whether they are hidden, left out, or the grant refused.

#[cfg(unix)]
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[cfg(unix)]
pub mod mountinfo;
pub mod rules;
#[cfg(unix)]
pub mod scan;

pub use rules::NeverGrant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// The narrower access, when none is named.
    #[default]
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    File,
    Directory,
}

/// The identity of a file system object: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ObjectKey {
    pub dev: u64,
    pub ino: u64,
}

/// The descriptor opened at consent, kept for the grant's life so that the approved
/// inode stays allocated: its number can then never name another file.
#[derive(Debug, Clone, Default)]
pub struct Pin(
    #[expect(
        dead_code,
        reason = "held, never read: it keeps the approved inode allocated"
    )]
    Option<Arc<PinHandle>>,
);

/// What pins an approved object: an open descriptor (grants exist only on Unix hosts).
#[cfg(unix)]
type PinHandle = OwnedFd;
#[cfg(not(unix))]
type PinHandle = std::fs::File;

impl PartialEq for Pin {
    /// Grants are compared by what they grant; the pin is bookkeeping.
    fn eq(&self, _: &Pin) -> bool {
        true
    }
}

impl Eq for Pin {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Grant {
    /// Canonical path (symlinks and `..` resolved), as the person was shown it.
    pub path: PathBuf,
    pub kind: PathKind,
    /// `write` includes read.
    pub access: Access,
    /// The object the person approved; only this object is ever bound.
    pub object: ObjectKey,
    #[serde(skip)]
    #[schemars(skip)]
    pub pin: Pin,
    /// Seconds since the Unix epoch.
    pub granted_at: u64,
    /// Seconds since the Unix epoch; absent: until the server stops.
    pub expires_at: Option<u64>,
    /// Who approved it: "user via elicitation (client …)" or "operator (…)".
    pub approved_by: String,
    /// The agent's stated reason, as shown to the person.
    pub reason: String,
}

impl Grant {
    pub fn is_live(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|t| now < t)
    }

    /// Whether this grant already gives `access` to `path`.
    pub fn covers(&self, path: &Path, access: Access) -> bool {
        let within = match self.kind {
            PathKind::Directory => path.starts_with(&self.path),
            PathKind::File => path == self.path,
        };
        within && (self.access == Access::Write || access == Access::Read)
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    #[error("{path:?} is not an absolute path; give the full path, e.g. /data/export.csv")]
    NotAbsolute { path: String },
    #[error("{path:?} cannot be resolved ({reason}); it must exist before it can be granted")]
    Unresolvable { path: String, reason: String },
    #[error("{path} can never be granted, even with consent: {why}")]
    Forbidden { path: PathBuf, why: String },
    #[error("{path} changed while it was being checked ({why}); nothing was granted, ask again")]
    Changed { path: PathBuf, why: String },
    #[error("{path} cannot be granted together with {other}: {why}")]
    Conflict {
        path: PathBuf,
        other: PathBuf,
        why: String,
    },
}

/// The places that stay closed whatever anyone approves: the rules of
/// `policies/never-grant.toml` ([`rules`]) expanded for this server, and what it found
/// at start-up (its configuration, its data, the runtime).
#[derive(Debug, Clone)]
pub struct ForbiddenPaths {
    /// Exact paths that may not be granted (but their descendants may).
    pub exact: Vec<PathBuf>,
    /// Trees that may not be granted, nor any path inside them, nor any ancestor of them
    /// (granting an ancestor would expose them too).
    pub trees: Vec<(PathBuf, String)>,
    /// The same trees by identity, so that one reached under another name (a bind
    /// mount, a second mount of the same file system) is recognised too.
    pub objects: Vec<(ObjectKey, PathBuf)>,
    /// The rules as written: names that matter anywhere, git directories, the reasons.
    pub rules: Arc<NeverGrant>,
}

/// What one server found at start-up that no grant may reach.
#[derive(Debug, Clone, Default)]
pub struct WardenPaths {
    /// The configuration file in use (`WARDEN_CONFIG`), if any.
    pub config_file: Option<PathBuf>,
    /// The default configuration directory (its `config.toml` is read when
    /// `WARDEN_CONFIG` is unset).
    pub config_dir: Option<PathBuf>,
    pub data_dir: PathBuf,
}

impl ForbiddenPaths {
    /// The list for this server: every tree rule (those under `~/` in each of `homes`),
    /// its configuration file and directory (the one in use and the default one), and
    /// its data directory (every session's workspace, the audit log).
    pub fn standard(rules: NeverGrant, homes: &[PathBuf], warden: &WardenPaths) -> ForbiddenPaths {
        let mut forbidden = ForbiddenPaths {
            exact: vec![PathBuf::from("/")],
            trees: Vec::new(),
            objects: Vec::new(),
            rules: Arc::new(rules),
        };
        let rules = forbidden.rules.clone();
        for tree in &rules.trees {
            for path in rules::expand_tree(&tree.path, homes) {
                forbidden.add_tree(path, &tree.why);
            }
        }
        let computed = &rules.computed;
        let default_file = warden.config_dir.as_ref().map(|d| d.join("config.toml"));
        for file in warden.config_file.iter().chain(default_file.iter()) {
            let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
            if let Some(dir) = file.parent() {
                forbidden.add_tree(dir.to_path_buf(), &computed.config_dir);
            }
            forbidden.add_tree(file, &computed.config_file);
        }
        forbidden.add_tree(warden.data_dir.clone(), &computed.data_dir);
        forbidden
    }

    /// Adds a tree (compared in canonical form, so that /var/run → /run style links
    /// cannot slip by, and by identity).
    pub fn add_tree(&mut self, path: PathBuf, why: &str) {
        let canonical = std::fs::canonicalize(&path).unwrap_or(path);
        if let Ok(meta) = std::fs::metadata(&canonical) {
            let (dev, ino) = crate::os::file_identity(&meta);
            let key = ObjectKey { dev, ino };
            self.objects.push((key, canonical.clone()));
        }
        if !self.trees.iter().any(|(t, _)| t == &canonical) {
            self.trees.push((canonical, why.to_string()));
        }
    }

    /// Adds what the sandbox itself depends on: a grant covering the interpreter's
    /// prefix or read roots could change what every later worker loads, one covering the
    /// binary what every later worker runs as its helper.
    pub fn add_runtime(&mut self, read_roots: &[PathBuf], programs: &[PathBuf]) {
        let rules = self.rules.clone();
        for root in read_roots {
            self.add_tree(root.clone(), &rules.computed.runtime);
        }
        for program in programs {
            self.add_tree(program.clone(), &rules.computed.program);
        }
    }

    /// Why the object `key` may never be granted, if it is one of the forbidden trees.
    pub fn reason_for_object(&self, key: ObjectKey) -> Option<String> {
        self.objects
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, path)| format!("it is {} under another name", path.display()))
    }

    /// Why `canonical` may never be granted, if it may not. Pure.
    pub fn reason(&self, canonical: &Path) -> Option<String> {
        if self.exact.iter().any(|p| p == canonical) {
            return Some("the whole filesystem".to_string());
        }
        for (tree, why) in &self.trees {
            if canonical.starts_with(tree) {
                return Some(format!("it is inside {} ({why})", tree.display()));
            }
            if tree.starts_with(canonical) {
                return Some(format!(
                    "it contains {} ({why}), which a grant cannot leave out",
                    tree.display()
                ));
            }
        }
        canonical.components().find_map(|c| {
            let name = c.as_os_str();
            self.rules
                .name_reason(name)
                .map(|why| format!("it is or lies inside a {} ({why})", name.to_string_lossy()))
        })
    }

    /// The list as `warden://settings` shows it: the rules as written, and the paths
    /// they resolved to on this machine.
    pub fn document(&self) -> serde_json::Value {
        serde_json::json!({
            "rules": &*self.rules,
            "resolved": self
                .exact
                .iter()
                .map(|p| serde_json::json!({"path": p, "why": "the whole filesystem", "covers": "exactly"}))
                .chain(self.trees.iter().map(|(p, why)| {
                    serde_json::json!({"path": p, "why": why, "covers": "the path, what is inside it, and what holds it"})
                }))
                .collect::<Vec<_>>(),
        })
    }
}

/// Why `path` lies inside a git directory (found by its content, whatever its name),
/// if it does: such a path is never granted.
pub fn repository_reason(path: &Path, rules: &NeverGrant) -> Option<String> {
    path.ancestors().find_map(|dir| {
        let has = |name: &str| std::fs::symlink_metadata(dir.join(name)).is_ok();
        (has("HEAD") && (has("objects") && has("refs") || has("commondir"))).then(|| {
            format!(
                "it is or lies inside the git directory {} ({})",
                dir.display(),
                rules.repository.why
            )
        })
    })
}

/// `path` with `.` and `..` taken lexically (no file system access): the form the
/// rules are checked in before a path that does not exist is refused for that. Pure.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// How an entry inside a granted directory is hidden: an empty read-only directory over
/// a directory, an empty file that cannot be opened over anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MaskKind {
    Dir,
    File,
}

/// What the backend's sandbox can do about what a granted directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantWalls {
    /// The worker's private world: entries that must not be reached are hidden by
    /// empty read-only mounts; other file systems mounted inside cannot be left out (the
    /// kernel binds such a directory, in an unprivileged namespace, only with them).
    World,
    /// Containers: entries hidden by mounts, other file systems left out (the bind is
    /// not recursive).
    Container,
    /// Host paths only (Landlock without a mount namespace, or no sandbox): nothing can
    /// be hidden or left out.
    PathsOnly,
}

/// What a granted directory holds that the grant does not give.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inside {
    /// Entries hidden from the code (absolute paths), each with why.
    pub hidden: Vec<(PathBuf, String)>,
    /// Other file systems mounted inside it, left out of the grant.
    pub left_out: Vec<String>,
}

/// At most this many entries are named in a message; the rest are counted.
const NAMED: usize = 8;

/// `items` as one phrase, the first [`NAMED`] named and the rest counted. Pure.
pub fn some_of(items: &[String]) -> String {
    let mut text = items
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > NAMED {
        text.push_str(&format!(" and {} more", items.len() - NAMED));
    }
    text
}

/// Whether a directory holding `masks` (relative to `dir`) and the other mounts
/// `submounts` can be granted with `walls`, and what the person must be told. Pure.
///
/// # Errors
/// Why not, as the refusal's reason.
#[cfg(unix)]
pub fn judge_inside(
    walls: GrantWalls,
    dir: &Path,
    masks: &[scan::Mask],
    submounts: &[String],
) -> Result<Inside, String> {
    let hidden: Vec<(PathBuf, String)> = masks
        .iter()
        .map(|m| (dir.join(&m.rel), m.why.clone()))
        .collect();
    let names: Vec<String> = hidden
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    if walls == GrantWalls::PathsOnly && !hidden.is_empty() {
        return Err(format!(
            "it holds what must never be reached ({}: {}), and this sandbox cannot hide it \
             (without a private mount namespace, or with the sandbox off, a grant is the \
             whole directory); grant a directory without them",
            some_of(&names),
            hidden[0].1
        ));
    }
    if walls != GrantWalls::Container && !submounts.is_empty() {
        let why = if walls == GrantWalls::World {
            "the kernel lets the sandbox bind a directory only together with the file \
             systems mounted inside it"
        } else {
            "without a private mount namespace, Landlock's rules would reach through them"
        };
        return Err(format!(
            "other file systems are mounted inside it ({}), and they cannot be left out: \
             {why}; grant a directory that holds no other mount",
            some_of(submounts)
        ));
    }
    Ok(Inside {
        hidden,
        left_out: if walls == GrantWalls::Container {
            submounts.to_vec()
        } else {
            Vec::new()
        },
    })
}

/// What a directory grant of `canonical` (opened as `fd`) holds, judged for `walls`:
/// the other mounts inside it (this process's mount table) and the entries to hide.
///
/// # Errors
/// Why it cannot be granted.
#[cfg(unix)]
pub fn inspect(
    canonical: &Path,
    fd: std::os::fd::BorrowedFd<'_>,
    rules: &NeverGrant,
    walls: GrantWalls,
) -> Result<Inside, String> {
    let table = mountinfo::read_self()
        .map_err(|e| format!("cannot tell which other file systems are mounted inside it ({e})"))?;
    let under = mountinfo::beneath(&table, canonical);
    let skip: Vec<PathBuf> = under
        .iter()
        .filter_map(|m| m.mount_point.strip_prefix(canonical).ok())
        .map(Path::to_path_buf)
        .collect();
    let submounts: Vec<String> = under.iter().map(|m| m.describe()).collect();
    let masks = scan::scan(fd, rules, &skip, &scan::LIMITS).map_err(|e| e.to_string())?;
    judge_inside(walls, canonical, &masks, &submounts)
}

/// Without a Unix host there are no grants to check (they cannot be made).
///
/// # Errors
/// Never.
#[cfg(not(unix))]
pub fn check_inside(
    _grant: &Grant,
    _rules: &NeverGrant,
    _walls: GrantWalls,
    _starting: bool,
) -> Result<(), String> {
    Ok(())
}

/// Whether a granted directory may still be given with `walls` (checked before every
/// call): no other file system mounted inside it since, where none can be left out,
/// and, when a worker is about to start (`starting`), nothing to hide where nothing can
/// be hidden. (In a world, what is to be hidden is found again at the bind; in a
/// container, at the container's creation.)
///
/// # Errors
/// What changed, for the result's warning.
#[cfg(unix)]
pub fn check_inside(
    grant: &Grant,
    rules: &NeverGrant,
    walls: GrantWalls,
    starting: bool,
) -> Result<(), String> {
    if grant.kind != PathKind::Directory || walls == GrantWalls::Container {
        return Ok(());
    }
    let what = |why: String| format!("{}: {why}", grant.path.display());
    if walls == GrantWalls::World || !starting {
        let under = mountinfo::mounts_beneath(&grant.path).map_err(what)?;
        return judge_inside(walls, &grant.path, &[], &under)
            .map(drop)
            .map_err(what);
    }
    let fd = open_no_symlinks(&grant.path).map_err(|e| what(e.to_string()))?;
    inspect(&grant.path, fd.as_fd(), rules, walls)
        .map(drop)
        .map_err(what)
}

/// A path resolved and opened at consent: what a [`Grant`] records.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub path: PathBuf,
    pub kind: PathKind,
    pub object: ObjectKey,
    pub pin: Pin,
    /// What a directory holds that the grant does not give (hidden, left out).
    pub inside: Inside,
}

impl Resolved {
    /// The grant for this object.
    pub fn into_grant(self, access: Access, approved_by: String, reason: String) -> Grant {
        Grant {
            path: self.path,
            kind: self.kind,
            access,
            object: self.object,
            pin: self.pin,
            granted_at: now_secs(),
            expires_at: None,
            approved_by,
            reason,
        }
    }
}

/// Opens `path` as an `O_PATH` descriptor without following any symlink or magic link
/// at any component: the object at exactly this path, or an error.
#[cfg(target_os = "linux")]
pub fn open_no_symlinks(path: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
    rustix::fs::openat2(
        CWD,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(std::io::Error::from)
}

/// Without `openat2` (macOS): one component at a time from `/`, none followed.
#[cfg(all(unix, not(target_os = "linux")))]
pub fn open_no_symlinks(path: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let rel = path.strip_prefix("/").map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an absolute path")
    })?;
    let root = rustix::fs::open(
        "/",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if rel.as_os_str().is_empty() {
        return Ok(root);
    }
    crate::os::open_by_components(root.as_fd(), rel, OFlags::empty(), false)
}

/// The identity and kind of an open object, and its hard-link count. (`st_dev` is i32
/// and `st_nlink` u16 on macOS, both u64 on Linux.)
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)]
fn identify(fd: impl AsFd) -> std::io::Result<(ObjectKey, PathKind, u64)> {
    let st = rustix::fs::fstat(fd)?;
    let kind = if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
    {
        PathKind::Directory
    } else {
        PathKind::File
    };
    Ok((
        ObjectKey {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        },
        kind,
        st.st_nlink as u64,
    ))
}

/// Resolves a requested path (symlinks, `..`), checks it against the forbidden list,
/// then opens exactly the resolved path (no symlink followed past what the person will
/// be shown) and checks the opened object again: its real path, its identity, for a
/// file that no other name reaches it, and for a directory what it holds (`walls`: what
/// the sandbox can hide or leave out of it).
pub fn resolve(
    raw: &str,
    forbidden: &ForbiddenPaths,
    walls: GrantWalls,
) -> Result<Resolved, GrantError> {
    if !raw.starts_with('/') {
        return Err(GrantError::NotAbsolute {
            path: raw.to_string(),
        });
    }
    // The rules first, as written: a path that may never be granted is refused for that
    // reason whether or not it exists.
    let written = lexical(Path::new(raw));
    if let Some(why) = forbidden.reason(&written) {
        return Err(GrantError::Forbidden { path: written, why });
    }
    let canonical = std::fs::canonicalize(raw).map_err(|e| GrantError::Unresolvable {
        path: raw.to_string(),
        reason: e.to_string(),
    })?;
    let forbid = |why: String| GrantError::Forbidden {
        path: canonical.clone(),
        why,
    };
    if let Some(why) = forbidden
        .reason(&canonical)
        .or_else(|| repository_reason(&canonical, &forbidden.rules))
    {
        return Err(forbid(why));
    }
    pin_object(canonical, forbidden, walls)
}

/// Grants need a descriptor pinned at consent and checked by identity: a Unix host.
#[cfg(not(unix))]
fn pin_object(
    canonical: PathBuf,
    _forbidden: &ForbiddenPaths,
    _walls: GrantWalls,
) -> Result<Resolved, GrantError> {
    Err(GrantError::Unresolvable {
        path: canonical.display().to_string(),
        reason: "grants need a Unix host (the host backend does not run on this system)".into(),
    })
}

/// Opens exactly `canonical` (no symlink followed) and checks the opened object again:
/// its real path, its identity, and for a file that no other name reaches it.
#[cfg(unix)]
fn pin_object(
    canonical: PathBuf,
    forbidden: &ForbiddenPaths,
    walls: GrantWalls,
) -> Result<Resolved, GrantError> {
    let forbid = |why: String| GrantError::Forbidden {
        path: canonical.clone(),
        why,
    };
    let changed = |why: String| GrantError::Changed {
        path: canonical.clone(),
        why,
    };
    let fd = open_no_symlinks(&canonical)
        .map_err(|e| changed(format!("it no longer opens without a symlink: {e}")))?;
    // What the descriptor really is, whatever happened to the path since it was resolved.
    let real = crate::os::fd_path(fd.as_fd())
        .map_err(|e| changed(format!("cannot tell what was opened: {e}")))?;
    if real != canonical {
        return Err(changed(format!("it now opens as {}", real.display())));
    }
    let (object, kind, links) = identify(&fd).map_err(|e| changed(e.to_string()))?;
    if let Some(why) = forbidden.reason_for_object(object) {
        return Err(forbid(why));
    }
    if kind == PathKind::File && links > 1 {
        return Err(forbid(format!(
            "the file has {links} hard links, so the same content is reachable under other              names that were not shown; grant a copy of it, or its directory"
        )));
    }
    let inside = match kind {
        PathKind::Directory => {
            inspect(&canonical, fd.as_fd(), &forbidden.rules, walls).map_err(&forbid)?
        }
        PathKind::File => Inside::default(),
    };
    Ok(Resolved {
        path: canonical,
        kind,
        object,
        pin: Pin(Some(Arc::new(fd))),
        inside,
    })
}

/// Whether the object at a grant's path is still the one the person approved (checked
/// before every worker start; the helper checks again on the descriptor it binds).
///
/// # Errors
/// A sentence saying what changed, for the result's warning.
#[cfg(not(unix))]
pub fn check_still_approved(grant: &Grant) -> Result<(), String> {
    Err(format!("{}: grants need a Unix host", grant.path.display()))
}

/// Whether the object at a grant's path is still the one the person approved.
///
/// # Errors
/// A sentence saying what changed, for the result's warning.
#[cfg(unix)]
pub fn check_still_approved(grant: &Grant) -> Result<(), String> {
    let fd = open_no_symlinks(&grant.path).map_err(|e| {
        format!(
            "{} no longer opens without following a symlink ({e})",
            grant.path.display()
        )
    })?;
    let (object, kind, _) = identify(&fd).map_err(|e| e.to_string())?;
    if object != grant.object || kind != grant.kind {
        return Err(format!(
            "{} is no longer the object that was approved (device/inode {}:{} became {}:{})",
            grant.path.display(),
            grant.object.dev,
            grant.object.ino,
            object.dev,
            object.ino
        ));
    }
    Ok(())
}

/// Why `new` may not live beside `existing` (the grants of one session, the operator's
/// included): a write grant on a directory lets the code replace anything inside it,
/// so no other grant may lie inside a writable directory, nor a writable directory
/// around another grant. The same path with wider access is an upgrade, not a
/// conflict. Pure.
pub fn conflict(existing: &[Grant], new: &Grant) -> Option<GrantError> {
    let writable_dir = |g: &Grant| g.access == Access::Write && g.kind == PathKind::Directory;
    for old in existing {
        if old.path == new.path {
            continue;
        }
        let why = if writable_dir(old) && new.path.starts_with(&old.path) {
            "it lies inside a directory the code may already write, where it could be              swapped for something else before you approve it"
        } else if writable_dir(new) && old.path.starts_with(&new.path) {
            "writing this directory would let the code replace what was already granted              inside it"
        } else {
            continue;
        };
        return Some(GrantError::Conflict {
            path: new.path.clone(),
            other: old.path.clone(),
            why: why.to_string(),
        });
    }
    None
}

/// A pre-approved grant left out at start because another pre-approved grant already
/// gives everything it would (shown in `warden://settings`, logged as a warning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dropped {
    pub path: PathBuf,
    pub access: Access,
    /// Who asked for it, e.g. "operator (--allow-read)".
    pub approved_by: String,
    /// The grant that gives it.
    pub covered_by: PathBuf,
    pub covered_by_access: Access,
    pub why: String,
}

/// Why `wide` (with what it hides or leaves out, `inside`) already gives all of
/// `narrow`, if it does: the same path with at least the access, or a directory on the
/// same device that holds it with at least the access, and neither hides it nor leaves
/// out a mount (a mount left out could be what holds it). Pure.
fn covered_by(wide: &Grant, inside: &Inside, narrow: &Grant) -> Option<String> {
    let access_ok = wide.access == Access::Write || narrow.access == Access::Read;
    if !access_ok {
        return None;
    }
    if wide.path == narrow.path {
        return Some(match (wide.access, narrow.access) {
            (Access::Write, Access::Read) => "the same path is also granted for writing".into(),
            _ => "the same path is granted twice".into(),
        });
    }
    let holds = wide.kind == PathKind::Directory
        && narrow.path.starts_with(&wide.path)
        && wide.object.dev == narrow.object.dev
        && inside.left_out.is_empty()
        && !inside
            .hidden
            .iter()
            .any(|(p, _)| narrow.path.starts_with(p));
    holds.then(|| {
        let verb = match wide.access {
            Access::Write => "write",
            Access::Read => "read",
        };
        format!(
            "it lies inside {}, which the code may already {verb}",
            wide.path.display()
        )
    })
}

/// The operator's grants as they are kept: each grant that another already gives is
/// dropped (it would add nothing), and what remains must not be able to rewrite one
/// another ([`conflict`]). Of two grants that give each other (the same path, the same
/// access), the first is kept. Pure.
///
/// # Errors
/// The index (in `candidates`) of the first grant that conflicts with one kept before
/// it, and why: a combination that would widen something.
pub fn combine_operator(
    candidates: Vec<(Grant, Inside)>,
) -> Result<(Vec<Grant>, Vec<Dropped>), (usize, GrantError)> {
    let mut dropped = Vec::new();
    let mut kept: Vec<usize> = Vec::new();
    for (i, (grant, _)) in candidates.iter().enumerate() {
        // A wider grant that is itself kept: covering is transitive, so the widest
        // (the one nothing else covers) always exists.
        let cover = candidates
            .iter()
            .enumerate()
            .find_map(|(j, (wide, inside))| {
                let wider = (i != j)
                    && (wide.path != grant.path || wide.access != grant.access || j < i)
                    && !is_covered(&candidates, j);
                wider
                    .then(|| covered_by(wide, inside, grant).map(|why| (wide, why)))
                    .flatten()
            });
        match cover {
            Some((wide, why)) => dropped.push(Dropped {
                path: grant.path.clone(),
                access: grant.access,
                approved_by: grant.approved_by.clone(),
                covered_by: wide.path.clone(),
                covered_by_access: wide.access,
                why,
            }),
            None => kept.push(i),
        }
    }
    let mut out: Vec<Grant> = Vec::new();
    for i in kept {
        let grant = &candidates[i].0;
        if let Some(error) = conflict(&out, grant) {
            return Err((i, error));
        }
        out.push(grant.clone());
    }
    Ok((out, dropped))
}

/// Whether candidate `j` is given by another candidate (see [`combine_operator`]).
fn is_covered(candidates: &[(Grant, Inside)], j: usize) -> bool {
    let narrow = &candidates[j].0;
    candidates.iter().enumerate().any(|(k, (wide, inside))| {
        k != j
            && (wide.path != narrow.path || wide.access != narrow.access || k < j)
            && covered_by(wide, inside, narrow).is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> ForbiddenPaths {
        ForbiddenPaths::standard(
            NeverGrant::embedded().unwrap(),
            &[PathBuf::from("/home/ana"), PathBuf::from("/srv/bob")],
            &WardenPaths {
                config_file: Some("/opt/conf/warden.toml".into()),
                config_dir: Some("/home/ana/.config/warden".into()),
                data_dir: "/var/lib/warden".into(),
            },
        )
    }

    const WORLD: GrantWalls = GrantWalls::World;

    #[test]
    fn system_and_credential_paths_are_never_grantable() {
        let f = forbidden();
        for p in [
            "/",
            "/etc",
            "/etc/shadow",
            "/proc/1",
            "/sys",
            "/dev/sda",
            "/root",
            "/root/data",
            "/home/ana/.ssh",
            "/home/ana/.ssh/id_ed25519",
            "/home/ana/.aws",
            "/home/ana/.config",
            "/home/ana/.gnupg",
            "/var/lib/warden",
            "/var/lib/warden/sessions/1/other/workspace",
            "/home/bob/.ssh",
            "/var/spool/cron/crontabs/ana",
            "/etc/cron.d",
        ] {
            assert!(f.reason(Path::new(p)).is_some(), "{p} must be refused");
        }
    }

    #[test]
    fn the_config_file_its_directory_and_start_up_files_are_never_grantable() {
        let f = forbidden();
        for (p, why) in [
            ("/opt/conf/warden.toml", "configuration file"),
            ("/opt/conf", "configuration file"),
            ("/opt", "configuration"),
            ("/home/ana/.config/warden/config.toml", "configuration"),
            ("/home/ana/.bashrc", "shell start-up file"),
            ("/home/ana/.zshenv", "shell start-up file"),
            ("/home/ana/.config/fish/config.fish", "fish"),
            ("/home/ana/.config/autostart/x.desktop", "desktop"),
            ("/home/ana/.config/systemd/user/x.service", "systemd"),
            ("/home/ana/.local/share/systemd/user", "systemd"),
            ("/home/ana/.local", "systemd"),
            ("/srv/bob/.profile", "shell start-up file"),
            ("/srv/bob", "SSH keys"),
            ("/srv", "SSH keys"),
            ("/data/proj/.git", ".git"),
            ("/data/proj/.git/config", ".git"),
            ("/mnt/chroot/home/x/.bash_login", ".bash_login"),
        ] {
            let reason = f
                .reason(Path::new(p))
                .unwrap_or_else(|| panic!("{p} must be refused"));
            assert!(reason.contains(why), "{p}: {reason}");
        }
        assert_eq!(f.reason(Path::new("/home/ana/projects/report")), None);
        assert_eq!(f.reason(Path::new("/data/proj/.gitignore")), None);
    }

    #[test]
    fn a_path_that_may_never_be_granted_is_refused_for_that_even_if_it_does_not_exist() {
        let err = resolve("/home/ana/.zshrc", &forbidden(), WORLD).unwrap_err();
        assert!(err.to_string().contains("shell start-up file"), "{err}");
        let err = resolve("/data/x/../../home/ana/.ssh/id", &forbidden(), WORLD).unwrap_err();
        assert!(
            matches!(err, GrantError::Forbidden { ref path, .. } if path == Path::new("/home/ana/.ssh/id"))
        );
        assert_eq!(lexical(Path::new("/a/./b/../c/..")), Path::new("/a"));
        assert_eq!(lexical(Path::new("/../x")), Path::new("/x"));
    }

    #[test]
    fn the_settings_document_shows_the_rules_and_what_they_resolved_to() {
        let doc = forbidden().document();
        assert!(
            doc["rules"]["tree"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["path"] == "~/.ssh")
        );
        assert!(
            doc["rules"]["name"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["name"] == ".git")
        );
        let resolved = doc["resolved"].as_array().unwrap();
        assert!(resolved.iter().any(|r| r["path"] == "/srv/bob/.bashrc"));
        assert!(resolved.iter().any(|r| r["path"] == "/opt/conf/warden.toml"
            && r["why"].as_str().unwrap().contains("WARDEN_CONFIG")));
    }

    #[cfg(unix)]
    #[test]
    fn what_a_directory_holds_is_hidden_left_out_or_refused_by_what_the_sandbox_can_do() {
        let masks = [scan::Mask {
            rel: ".git".into(),
            kind: scan::MaskKind::Dir,
            why: "git".into(),
        }];
        let mounts = ["/d/proc (proc)".to_string()];
        let dir = Path::new("/d");
        // Hidden in a world and in a container; nothing can be hidden by paths alone.
        let inside = judge_inside(GrantWalls::World, dir, &masks, &[]).unwrap();
        assert_eq!(
            inside.hidden,
            [(PathBuf::from("/d/.git"), "git".to_string())]
        );
        assert!(judge_inside(GrantWalls::Container, dir, &masks, &[]).is_ok());
        let err = judge_inside(GrantWalls::PathsOnly, dir, &masks, &[]).unwrap_err();
        assert!(
            err.contains("/d/.git") && err.contains("cannot hide"),
            "{err}"
        );
        // Other mounts: left out of a container; refused in a world and by paths alone.
        let inside = judge_inside(GrantWalls::Container, dir, &[], &mounts).unwrap();
        assert_eq!(inside.left_out, mounts);
        for walls in [GrantWalls::World, GrantWalls::PathsOnly] {
            let err = judge_inside(walls, dir, &[], &mounts).unwrap_err();
            assert!(
                err.contains("/d/proc (proc)") && err.contains("cannot be left out"),
                "{err}"
            );
        }
        assert_eq!(
            judge_inside(GrantWalls::PathsOnly, dir, &[], &[]),
            Ok(Inside::default())
        );
        let many: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        assert_eq!(some_of(&many), "0, 1, 2, 3, 4, 5, 6, 7 and 2 more");
    }

    #[cfg(unix)]
    #[test]
    fn a_repository_in_a_directory_is_hidden_in_a_world_and_refused_by_paths_alone() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        for d in [".git/objects", ".git/refs", "src"] {
            std::fs::create_dir_all(proj.join(d)).unwrap();
        }
        std::fs::write(proj.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(proj.join(".git/config"), "[core]\n").unwrap();
        let raw = proj.to_str().unwrap();
        let r = resolve(raw, &forbidden(), WORLD).unwrap();
        let canon = std::fs::canonicalize(&proj).unwrap();
        assert_eq!(r.inside.hidden[0].0, canon.join(".git"));
        let err = resolve(raw, &forbidden(), GrantWalls::PathsOnly).unwrap_err();
        assert!(err.to_string().contains(".git"), "{err}");
        // A git directory itself, whatever its name, and anything in it.
        std::fs::rename(proj.join(".git"), dir.path().join("bare.git")).unwrap();
        for p in ["bare.git", "bare.git/config", "bare.git/refs"] {
            let err =
                resolve(dir.path().join(p).to_str().unwrap(), &forbidden(), WORLD).unwrap_err();
            assert!(err.to_string().contains("git directory"), "{p}: {err}");
        }
    }

    #[test]
    fn ancestors_of_forbidden_trees_are_refused_too() {
        let f = forbidden();
        assert!(
            f.reason(Path::new("/home/ana")).is_some(),
            "contains ~/.ssh"
        );
        assert!(
            f.reason(Path::new("/var/lib")).is_some(),
            "contains warden's data"
        );
        assert!(f.reason(Path::new("/var")).is_some());
    }

    #[test]
    fn ordinary_data_paths_are_grantable() {
        let f = forbidden();
        for p in [
            "/data",
            "/data/export.parquet",
            "/home/ana/projects/report",
            "/srv/share",
        ] {
            assert_eq!(f.reason(Path::new(p)), None, "{p}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn resolve_canonicalises_before_checking() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("innocent");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let err = resolve(link.to_str().unwrap(), &forbidden(), WORLD).unwrap_err();
        assert!(matches!(err, GrantError::Forbidden { ref path, .. } if path == Path::new("/etc")));
        let dotted = format!("{}/../../etc", dir.path().display());
        assert!(matches!(
            resolve(&dotted, &forbidden(), WORLD),
            Err(GrantError::Forbidden { .. })
        ));
        assert!(matches!(
            resolve("relative/x", &forbidden(), WORLD),
            Err(GrantError::NotAbsolute { .. })
        ));
        assert!(matches!(
            resolve("/definitely/not/here", &forbidden(), WORLD),
            Err(GrantError::Unresolvable { .. })
        ));
        let r = resolve(dir.path().to_str().unwrap(), &forbidden(), WORLD).unwrap();
        assert_eq!(r.kind, PathKind::Directory);
        assert_eq!(r.path, std::fs::canonicalize(dir.path()).unwrap());
    }

    fn grant(path: &str, kind: PathKind, access: Access) -> Grant {
        Grant {
            path: path.into(),
            kind,
            access,
            object: ObjectKey { dev: 1, ino: 2 },
            pin: Pin::default(),
            granted_at: 10,
            expires_at: Some(100),
            approved_by: "user".into(),
            reason: String::new(),
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_approved_object_is_recorded_and_a_swap_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.csv");
        std::fs::write(&file, "a,b").unwrap();
        let g = resolve(file.to_str().unwrap(), &forbidden(), WORLD)
            .unwrap()
            .into_grant(Access::Read, "user".into(), String::new());
        assert_eq!(g.kind, PathKind::File);
        assert_eq!(check_still_approved(&g), Ok(()));
        // The file swapped for a symlink to something else: refused.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s").unwrap();
        std::fs::rename(&file, dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&secret, &file).unwrap();
        assert!(check_still_approved(&g).unwrap_err().contains("symlink"));
        // Swapped for another file: refused (the pin keeps the old inode number taken).
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, "a,b").unwrap();
        assert!(
            check_still_approved(&g)
                .unwrap_err()
                .contains("no longer the object")
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_file_with_other_hard_links_and_a_forbidden_tree_by_another_name_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("report.csv");
        std::fs::write(&file, "x").unwrap();
        std::fs::hard_link(&file, dir.path().join("other-name")).unwrap();
        let err = resolve(file.to_str().unwrap(), &forbidden(), WORLD).unwrap_err();
        assert!(err.to_string().contains("hard links"), "{err}");
        let mut f = forbidden();
        let protected = dir.path().join("protected");
        std::fs::create_dir(&protected).unwrap();
        f.objects.push((
            {
                use std::os::unix::fs::MetadataExt;
                let m = std::fs::metadata(&protected).unwrap();
                ObjectKey {
                    dev: m.dev(),
                    ino: m.ino(),
                }
            },
            "/elsewhere/protected".into(),
        ));
        let err = resolve(protected.to_str().unwrap(), &f, WORLD).unwrap_err();
        assert!(err.to_string().contains("under another name"), "{err}");
    }

    #[test]
    fn runtime_and_binary_are_never_grantable() {
        let mut f = forbidden();
        f.add_runtime(
            &["/opt/venv".into(), "/usr/lib/python3.11".into()],
            &["/usr/local/bin/warden".into()],
        );
        for p in [
            "/opt/venv",
            "/opt",
            "/opt/venv/lib/site-packages",
            "/usr/lib",
            "/usr/local/bin/warden",
            "/usr/local/bin",
        ] {
            assert!(f.reason(Path::new(p)).is_some(), "{p}");
        }
        assert_eq!(f.reason(Path::new("/opt/data")), None);
    }

    #[test]
    fn a_writable_directory_may_not_hold_or_surround_another_grant() {
        let file_read = grant("/data/x.csv", PathKind::File, Access::Read);
        let dir_write = grant("/data", PathKind::Directory, Access::Write);
        let dir_read = grant("/data", PathKind::Directory, Access::Read);
        let sub_write = grant("/data/out", PathKind::Directory, Access::Write);
        // The attack: a file, then its folder for writing (either order).
        assert!(conflict(std::slice::from_ref(&file_read), &dir_write).is_some());
        assert!(conflict(std::slice::from_ref(&dir_write), &file_read).is_some());
        // Reading a folder that holds a writable one, and the reverse, are fine; so is an
        // upgrade of the same path.
        assert_eq!(conflict(std::slice::from_ref(&sub_write), &dir_read), None);
        assert_eq!(conflict(std::slice::from_ref(&dir_read), &sub_write), None);
        assert_eq!(conflict(std::slice::from_ref(&dir_read), &dir_write), None);
        // Siblings never conflict.
        let other = grant("/database", PathKind::Directory, Access::Write);
        assert_eq!(conflict(std::slice::from_ref(&dir_write), &other), None);
    }

    fn plain(grants: &[&Grant]) -> Vec<(Grant, Inside)> {
        grants
            .iter()
            .map(|g| ((*g).clone(), Inside::default()))
            .collect()
    }

    fn paths(grants: &[Grant]) -> Vec<(&Path, Access)> {
        grants
            .iter()
            .map(|g| (g.path.as_path(), g.access))
            .collect()
    }

    #[test]
    fn an_operator_grant_another_already_gives_is_dropped_in_either_order() {
        let file_read = grant("/data/input.csv", PathKind::File, Access::Read);
        let dir_write = grant("/data", PathKind::Directory, Access::Write);
        for order in [[&dir_write, &file_read], [&file_read, &dir_write]] {
            let (kept, dropped) = combine_operator(plain(&order)).unwrap();
            assert_eq!(paths(&kept), [(Path::new("/data"), Access::Write)]);
            assert_eq!(dropped.len(), 1);
            assert_eq!(dropped[0].path, Path::new("/data/input.csv"));
            assert_eq!(dropped[0].covered_by, Path::new("/data"));
            assert!(dropped[0].why.contains("may already write"), "{dropped:?}");
        }
        // A read grant inside a read directory, a writable directory inside a writable
        // one, the same path twice: the narrower goes, the widest stays.
        let dir_read = grant("/data", PathKind::Directory, Access::Read);
        let sub_write = grant("/data/out", PathKind::Directory, Access::Write);
        let (kept, dropped) = combine_operator(plain(&[&file_read, &dir_read])).unwrap();
        assert_eq!(paths(&kept), [(Path::new("/data"), Access::Read)]);
        assert_eq!(dropped[0].path, Path::new("/data/input.csv"));
        let (kept, _) = combine_operator(plain(&[&sub_write, &dir_write, &file_read])).unwrap();
        assert_eq!(paths(&kept), [(Path::new("/data"), Access::Write)]);
        let (kept, dropped) = combine_operator(plain(&[&dir_read, &dir_write])).unwrap();
        assert_eq!(paths(&kept), [(Path::new("/data"), Access::Write)]);
        assert!(dropped[0].why.contains("also granted for writing"));
        let (kept, dropped) = combine_operator(plain(&[&dir_read, &dir_read])).unwrap();
        assert_eq!((kept.len(), dropped.len()), (1, 1));
    }

    #[test]
    fn operator_grants_that_widen_something_are_kept_or_refused_never_dropped() {
        let dir_read = grant("/data", PathKind::Directory, Access::Read);
        let file_write = grant("/data/out.csv", PathKind::File, Access::Write);
        let sub_write = grant("/data/out", PathKind::Directory, Access::Write);
        // Writing inside a read-only directory adds something: both are kept.
        let (kept, dropped) =
            combine_operator(plain(&[&dir_read, &file_write, &sub_write])).unwrap();
        assert_eq!(kept.len(), 3);
        assert!(dropped.is_empty());
        // A file on another device (a mount inside the directory) is not what the
        // directory's grant gives: still refused beside a writable directory.
        let dir_write = grant("/data", PathKind::Directory, Access::Write);
        let mut mounted = grant("/data/mnt/x.csv", PathKind::File, Access::Read);
        mounted.object.dev = 9;
        let (i, err) = combine_operator(plain(&[&dir_write, &mounted])).unwrap_err();
        assert_eq!(i, 1);
        assert!(matches!(err, GrantError::Conflict { .. }), "{err}");
        // Nor what the directory hides, nor anything when it leaves a mount out.
        let file_read = grant("/data/private/x.csv", PathKind::File, Access::Read);
        for inside in [
            Inside {
                hidden: vec![("/data/private".into(), "unlistable".into())],
                left_out: vec![],
            },
            Inside {
                hidden: vec![],
                left_out: vec!["/data/elsewhere (nfs)".into()],
            },
        ] {
            let candidates = vec![
                (dir_write.clone(), inside),
                (file_read.clone(), Inside::default()),
            ];
            assert!(combine_operator(candidates).is_err());
        }
    }

    #[test]
    fn coverage_and_expiry() {
        let g = grant("/data", PathKind::Directory, Access::Read);
        assert!(g.covers(Path::new("/data/x.csv"), Access::Read));
        assert!(!g.covers(Path::new("/data/x.csv"), Access::Write));
        assert!(!g.covers(Path::new("/database"), Access::Read));
        assert!(g.is_live(99));
        assert!(!g.is_live(100));
    }
}
