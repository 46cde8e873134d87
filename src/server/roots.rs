//! The client's roots (`roots/list`): the directories the user has open in the client,
//! read when the client declares roots and read again on
//! `notifications/roots/list_changed`. They are candidates for a grant, shown in
//! `warden://settings` and in `request_grant`'s description, and the consent question
//! says when a path is inside one. A root is never a grant by itself: granting one takes
//! the person's consent like any path.
//!
//! One per client connection (each handler has its own). What the client sends is
//! checked: only `file://` URIs of absolute local paths, never `/` itself, at most
//! [`MAX_ROOTS`] of them; anything else is listed as refused with the reason.
//!
//! The 2026-07-28 revision of the protocol deprecates roots (SEP-2577), and rmcp marks
//! them so; clients of the earlier revisions offer them, and they are read only from a
//! client that declares the capability.
#![allow(deprecated)]

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::Root;
use rmcp::service::Peer;
use serde::Serialize;

/// Roots kept from one answer; the rest are refused.
const MAX_ROOTS: usize = 64;
/// The longest URI, and the longest name shown.
const MAX_URI_BYTES: usize = 4096;
const MAX_NAME_CHARS: usize = 120;
/// How long the client may take to answer `roots/list`.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// One usable root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootDir {
    pub path: PathBuf,
    /// The client's name for it (one line, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A root the client sent that is not used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedRoot {
    pub uri: String,
    pub why: String,
}

/// What is known of this client's roots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// The client declared the roots capability.
    pub offered: bool,
    /// The roots it has open: grant candidates, never grants.
    pub roots: Vec<RootDir>,
    pub refused: Vec<RefusedRoot>,
    /// Why the last `roots/list` failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// This connection's roots.
#[derive(Debug, Default)]
pub struct ClientRoots {
    state: Mutex<Snapshot>,
}

impl ClientRoots {
    /// What is known now.
    pub fn snapshot(&self) -> Snapshot {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Asks the client for its roots and keeps the answer; whether the usable roots
    /// changed.
    pub async fn refresh(&self, peer: &Peer<RoleServer>) -> bool {
        let answer = tokio::time::timeout(LIST_TIMEOUT, peer.list_roots()).await;
        let mut next = Snapshot {
            offered: true,
            ..Snapshot::default()
        };
        match answer {
            Ok(Ok(list)) => (next.roots, next.refused) = parse(&list.roots),
            Ok(Err(e)) => next.error = Some(format!("roots/list failed: {e}")),
            Err(_) => {
                next.error = Some(format!(
                    "roots/list got no answer within {} s",
                    LIST_TIMEOUT.as_secs()
                ));
            }
        }
        if let Some(e) = &next.error {
            tracing::warn!(error = %e, "could not read the client's roots");
        }
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        let changed = state.roots != next.roots;
        *state = next;
        changed
    }

    /// The root `path` is in (the deepest), if any.
    pub fn containing(&self, path: &Path) -> Option<RootDir> {
        let state = self.state.lock().ok()?;
        state
            .roots
            .iter()
            .filter(|r| path.starts_with(&r.path))
            .max_by_key(|r| r.path.components().count())
            .cloned()
    }

    /// What `request_grant`'s description adds: the paths the user has open. Empty
    /// without roots.
    pub fn for_description(&self) -> String {
        let roots = self.snapshot().roots;
        if roots.is_empty() {
            return String::new();
        }
        let list: Vec<String> = roots
            .iter()
            .map(|r| crate::text::display_path(&r.path))
            .collect();
        format!(
            "\n\nPaths the user has open (the client's roots; a grant of one still needs the user's approval): {}.",
            list.join(", ")
        )
    }
}

/// The usable roots of a `roots/list` answer and the refused ones. Pure.
pub fn parse(list: &[Root]) -> (Vec<RootDir>, Vec<RefusedRoot>) {
    let mut roots = Vec::new();
    let mut refused = Vec::new();
    for root in list {
        let uri = crate::text::one_line(&root.uri, 200).0;
        let checked = if roots.len() >= MAX_ROOTS {
            Err(format!(
                "more than {MAX_ROOTS} roots; the rest are not used"
            ))
        } else {
            local_dir(&root.uri)
        };
        match checked {
            Ok(path) if !roots.iter().any(|r: &RootDir| r.path == path) => roots.push(RootDir {
                path,
                name: root
                    .name
                    .as_deref()
                    .map(|n| crate::text::one_line(n, MAX_NAME_CHARS).0)
                    .filter(|n| !n.is_empty()),
            }),
            Ok(_) => {}
            Err(why) => refused.push(RefusedRoot { uri, why }),
        }
    }
    (roots, refused)
}

/// The local path a root's URI names: `file://` with no host (or `localhost`), an
/// absolute, normalised path that is not `/`. Pure.
fn local_dir(uri: &str) -> Result<PathBuf, String> {
    if uri.len() > MAX_URI_BYTES {
        return Err(format!("longer than {MAX_URI_BYTES} bytes"));
    }
    let Some(rest) = uri.strip_prefix("file://") else {
        return Err("not a file:// URI".into());
    };
    let path = match rest.strip_prefix("localhost") {
        Some(after) if after.starts_with('/') => after,
        _ if rest.starts_with('/') => rest,
        _ => return Err("names another host; only this machine's paths can be granted".into()),
    };
    let decoded = percent_encoding::percent_decode_str(path).collect::<Vec<u8>>();
    if decoded.contains(&0) {
        return Err("holds a NUL byte".into());
    }
    #[cfg(unix)]
    let path = {
        use std::os::unix::ffi::OsStringExt;
        PathBuf::from(std::ffi::OsString::from_vec(decoded))
    };
    #[cfg(not(unix))]
    let path = PathBuf::from(String::from_utf8_lossy(&decoded).into_owned());
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err("holds `.` or `..`".into());
    }
    if path.parent().is_none() {
        return Err("is the whole file system (`/`)".into());
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(uri: &str, name: Option<&str>) -> Root {
        let mut r = Root::new(uri);
        r.name = name.map(str::to_string);
        r
    }

    #[test]
    fn file_uris_of_local_directories_become_roots() {
        let (roots, refused) = parse(&[
            root("file:///home/ann/project", Some("project")),
            root("file://localhost/srv/data%20set", None),
            root("file:///home/ann/project", Some("again")),
        ]);
        assert!(refused.is_empty(), "{refused:?}");
        assert_eq!(roots.len(), 2, "a duplicate is kept once");
        assert_eq!(roots[0].path, Path::new("/home/ann/project"));
        assert_eq!(roots[0].name.as_deref(), Some("project"));
        assert_eq!(roots[1].path, Path::new("/srv/data set"));
    }

    #[test]
    fn anything_else_is_refused_with_the_reason() {
        let long = format!("file:///{}", "a".repeat(5000));
        let (roots, refused) = parse(&[
            root("https://example.com/x", None),
            root("file:///", None),
            root("file://server/share", None),
            root("file:///home/../etc", None),
            root("file:///tmp/a%00b", None),
            root(&long, None),
            root("/home/ann", None),
        ]);
        assert!(roots.is_empty(), "{roots:?}");
        let why: Vec<&str> = refused.iter().map(|r| r.why.as_str()).collect();
        assert_eq!(why[0], "not a file:// URI");
        assert_eq!(why[1], "is the whole file system (`/`)");
        assert!(why[2].contains("another host"));
        assert_eq!(why[3], "holds `.` or `..`");
        assert_eq!(why[4], "holds a NUL byte");
        assert!(why[5].contains("longer than"));
        assert_eq!(why[6], "not a file:// URI");
        assert!(
            refused[5].uri.chars().count() <= 201,
            "the URI shown is capped"
        );
    }

    #[test]
    fn at_most_so_many_roots_and_names_are_one_capped_line() {
        let many: Vec<Root> = (0..70)
            .map(|i| root(&format!("file:///r/{i}"), Some("two\nlines")))
            .collect();
        let (roots, refused) = parse(&many);
        assert_eq!((roots.len(), refused.len()), (MAX_ROOTS, 6));
        assert!(!roots[0].name.as_deref().unwrap_or_default().contains('\n'));
    }

    #[test]
    fn the_deepest_root_holding_a_path_is_named() {
        let roots = ClientRoots::default();
        if let Ok(mut s) = roots.state.lock() {
            (s.roots, _) = parse(&[
                root("file:///home/ann", Some("home")),
                root("file:///home/ann/project", Some("project")),
            ]);
        }
        let hit = roots.containing(Path::new("/home/ann/project/data.csv"));
        assert_eq!(hit.and_then(|r| r.name).as_deref(), Some("project"));
        assert!(roots.containing(Path::new("/home/annex")).is_none());
        assert!(
            roots
                .for_description()
                .contains("/home/ann, /home/ann/project")
        );
    }
}
