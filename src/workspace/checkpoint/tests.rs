use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use super::*;

pub(crate) fn dir_fd(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// A workspace with every kind of thing a checkpoint keeps.
pub(crate) fn sample(root: &Path) {
    std::fs::create_dir_all(root.join("data/raw")).unwrap();
    std::fs::create_dir(root.join("empty")).unwrap();
    std::fs::write(root.join("data/raw/a.csv"), "x,y\n1,2\n").unwrap();
    std::fs::write(root.join("notes.txt"), "hello").unwrap();
    std::fs::set_permissions(
        root.join("notes.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    symlink("data/raw/a.csv", root.join("latest")).unwrap();
    std::fs::hard_link(root.join("notes.txt"), root.join("notes-link.txt")).unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 300_000]).unwrap();
}

/// Names, kinds, modes, link targets, contents and hard-link groups of a tree: what a
/// restore must bring back exactly.
pub(crate) fn fingerprint(root: &Path) -> Vec<String> {
    let fd = dir_fd(root);
    let (nodes, _) = scan(fd.as_fd()).unwrap();
    let first: HashMap<(u64, u64), Vec<u8>> =
        nodes.iter().rev().map(|n| (n.id, n.path.clone())).collect();
    nodes
        .iter()
        .map(|n| {
            let data = match n.kind {
                EntryKind::File => {
                    std::fs::read(root.join(String::from_utf8_lossy(&n.path).as_ref())).unwrap()
                }
                _ => Vec::new(),
            };
            let group = if n.nlink > 1 {
                String::from_utf8_lossy(&first[&n.id]).into_owned()
            } else {
                String::new()
            };
            format!(
                "{} {:?} {:o} {} {:?} {}",
                String::from_utf8_lossy(&n.path),
                n.kind,
                n.mode,
                String::from_utf8_lossy(&n.target),
                crate::audit::sha256_hex(&data),
                group
            )
        })
        .collect()
}

#[test]
fn checkpoint_names_are_plain_words() {
    for good in ["a", "before-cleanup", "v1.2_final", &"x".repeat(MAX_NAME)] {
        assert_eq!(check_name(good), Ok(()), "{good}");
    }
    for bad in [
        "",
        ".",
        "..",
        ".hidden",
        "a/b",
        "../x",
        "nul\0",
        "tab\t",
        "é",
        &"x".repeat(MAX_NAME + 1),
        &"y".repeat(10_000),
    ] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_restore_brings_back_names_contents_modes_links_and_empty_directories() {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("workspace");
    std::fs::create_dir(&ws).unwrap();
    sample(&ws);
    let before = fingerprint(&ws);
    let store = Store::open(&ws).unwrap();
    let meta = Meta {
        name: "start".into(),
        taken_at: 1,
        bytes: 0,
        entries: 0,
        skipped: 0,
        grants: vec!["read /data".into()],
    };
    let taken = store.take(dir_fd(&ws).as_fd(), meta).unwrap();
    assert_eq!(taken.entries, 8, "{taken:?}");
    assert_eq!(taken.bytes, 300_000 + 5 + 8, "a hard link counts once");
    // Deletes, a rename, a mode change, a symlink swap, an edit through a hard link,
    // a new file and a removed empty directory.
    std::fs::remove_dir_all(ws.join("data/raw")).unwrap();
    std::fs::rename(ws.join("big.bin"), ws.join("moved.bin")).unwrap();
    std::fs::set_permissions(ws.join("notes.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(ws.join("latest")).unwrap();
    symlink("/etc/passwd", ws.join("latest")).unwrap();
    std::fs::write(ws.join("notes-link.txt"), "HELLO").unwrap();
    std::fs::write(ws.join("new.txt"), "new").unwrap();
    std::fs::remove_dir(ws.join("empty")).unwrap();
    assert_ne!(fingerprint(&ws), before);
    let report = store.restore(dir_fd(&ws).as_fd(), &ws, "start").unwrap();
    assert_eq!(fingerprint(&ws), before);
    let shown: Vec<(String, Change)> = report
        .changes
        .iter()
        .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.change))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("big.bin".into(), Change::Created),
            ("data/raw/a.csv".into(), Change::Created),
            ("empty".into(), Change::Created),
            ("latest".into(), Change::Modified),
            ("moved.bin".into(), Change::Deleted),
            ("new.txt".into(), Change::Deleted),
            ("notes-link.txt".into(), Change::Modified),
            ("notes.txt".into(), Change::Modified),
        ]
    );
    // Hard links are one inode again.
    let (a, b) = (
        std::fs::metadata(ws.join("notes.txt")).unwrap(),
        std::fs::metadata(ws.join("notes-link.txt")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino());
    // A second restore of an unchanged workspace changes nothing.
    let again = store.restore(dir_fd(&ws).as_fd(), &ws, "start").unwrap();
    assert_eq!(again.changes, vec![]);
    assert_eq!(store.list(), vec![taken]);
}

#[test]
fn a_checkpoint_taken_again_replaces_the_old_one_and_a_missing_one_is_named() {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("workspace");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("v.txt"), "1").unwrap();
    let store = Store::open(&ws).unwrap();
    let meta = |name: &str, at| Meta {
        name: name.into(),
        taken_at: at,
        bytes: 0,
        entries: 0,
        skipped: 0,
        grants: vec![],
    };
    store.take(dir_fd(&ws).as_fd(), meta("c", 1)).unwrap();
    std::fs::write(ws.join("v.txt"), "2").unwrap();
    store.take(dir_fd(&ws).as_fd(), meta("c", 2)).unwrap();
    std::fs::write(ws.join("v.txt"), "3").unwrap();
    store.restore(dir_fd(&ws).as_fd(), &ws, "c").unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("v.txt")).unwrap(), "2");
    let names: Vec<String> = store.list().into_iter().map(|m| m.name).collect();
    assert_eq!(names, vec!["c"]);
    // Nothing but the checkpoint is left in the store (no temporary copies).
    assert_eq!(
        std::fs::read_dir(home.path().join("checkpoints"))
            .unwrap()
            .count(),
        1
    );
    let err = store.restore(dir_fd(&ws).as_fd(), &ws, "nope").unwrap_err();
    assert!(
        matches!(err, CheckpointError::Missing(ref n) if n == "nope"),
        "{err}"
    );
    store.delete("c").unwrap();
    assert!(store.list().is_empty());
}

#[test]
fn fifos_are_left_out_and_counted_and_set_id_bits_dropped() {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("workspace");
    std::fs::create_dir(&ws).unwrap();
    let fifo = std::ffi::CString::new(ws.join("pipe").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a valid, NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::write(ws.join("tool"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(ws.join("tool"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let store = Store::open(&ws).unwrap();
    let meta = Meta {
        name: "c".into(),
        taken_at: 1,
        bytes: 0,
        entries: 0,
        skipped: 0,
        grants: vec![],
    };
    let taken = store.take(dir_fd(&ws).as_fd(), meta).unwrap();
    assert_eq!((taken.entries, taken.skipped), (1, 1));
    store.restore(dir_fd(&ws).as_fd(), &ws, "c").unwrap();
    let mode = std::fs::metadata(ws.join("tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert!(!ws.join("pipe").exists());
}

#[test]
fn the_diff_names_only_what_differs() {
    let node = |path: &str, kind, mode, size| Node {
        path: path.as_bytes().to_vec(),
        kind,
        mode,
        size,
        target: Vec::new(),
        id: (1, path.len() as u64),
        nlink: 1,
        mtime: (0, 0),
    };
    let root = node("", EntryKind::Dir, 0o700, 0);
    let now = vec![
        root.clone(),
        node("d", EntryKind::Dir, 0o755, 0),
        node("d/x", EntryKind::File, 0o644, 3),
        node("same", EntryKind::File, 0o644, 3),
    ];
    let saved = vec![
        root,
        node("d", EntryKind::Dir, 0o755, 0),
        node("same", EntryKind::File, 0o644, 3),
        node("gone-dir", EntryKind::Dir, 0o700, 0),
    ];
    let changes = diff(&now, &saved, |_, _| true);
    let shown: Vec<(&[u8], Change)> = changes
        .iter()
        .map(|c| (c.path.as_slice(), c.change))
        .collect();
    assert_eq!(
        shown,
        vec![
            (b"d/x".as_slice(), Change::Deleted),
            (b"gone-dir".as_slice(), Change::Created),
        ]
    );
    let changes = diff(&now, &saved, |_, _| false);
    assert!(
        changes
            .iter()
            .any(|c| c.path == b"same" && c.change == Change::Modified)
    );
}
