use std::os::unix::ffi::OsStrExt;

use super::*;

fn summary(r: &Report) -> Vec<(String, Change)> {
    r.changes
        .iter()
        .map(|c| (crate::text::display_name(&c.path), c.change))
        .collect()
}

fn both() -> [Arc<Watcher>; 2] {
    [Watcher::new(), Watcher::disabled()]
}

#[test]
fn reports_created_modified_and_deleted_files_incrementally() {
    for watcher in both() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "a").unwrap();
        std::fs::write(root.join("gone.txt"), "a").unwrap();
        std::fs::write(root.join("edit.txt"), "a").unwrap();
        let mut t = Tracker::new(root, watcher);
        assert!(
            t.report().changes.is_empty(),
            "nothing since tracking began"
        );
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::write(root.join("edit.txt"), "abc").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/new.csv"), "x,y").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        let r = t.report();
        assert_eq!(
            summary(&r),
            vec![
                ("edit.txt".to_string(), Change::Modified),
                ("gone.txt".to_string(), Change::Deleted),
                ("link".to_string(), Change::Created),
                ("sub/new.csv".to_string(), Change::Created),
            ]
        );
        assert_eq!(r.changes[2].kind, EntryKind::Symlink);
        assert!(r.incomplete.is_none());
        // Files in a new directory are watched from now on.
        std::fs::write(root.join("sub/new.csv"), "x,y,z").unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![("sub/new.csv".to_string(), Change::Modified)]
        );
        assert!(t.report().changes.is_empty());
    }
}

/// A write that restores the old mtime still shows (the inode change time moved).
#[test]
fn a_write_hidden_behind_a_restored_mtime_still_shows() {
    for watcher in both() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("data.bin");
        std::fs::write(&f, "aaaa").unwrap();
        let before = std::fs::metadata(&f).unwrap().modified().unwrap();
        let mut t = Tracker::new(dir.path(), watcher);
        std::fs::write(&f, "bbbb").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(before)
            .unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![("data.bin".to_string(), Change::Modified)]
        );
    }
}

#[test]
fn renames_and_replacements_are_followed() {
    for watcher in both() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/inner")).unwrap();
        std::fs::write(root.join("a/inner/x"), "1").unwrap();
        let mut t = Tracker::new(root, watcher);
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![
                ("a/inner/x".to_string(), Change::Deleted),
                ("b/inner/x".to_string(), Change::Created),
            ]
        );
        std::fs::write(root.join("b/inner/x"), "22").unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![("b/inner/x".to_string(), Change::Modified)]
        );
        // A directory replaced by a file, and a file by a directory.
        std::fs::remove_dir_all(root.join("b")).unwrap();
        std::fs::write(root.join("b"), "now a file").unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![
                ("b".to_string(), Change::Created),
                ("b/inner/x".to_string(), Change::Deleted),
            ]
        );
    }
}

/// Names that are not UTF-8 are reported (escaped when shown), never dropped.
#[test]
fn non_utf8_names_are_reported() {
    for watcher in both() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Tracker::new(dir.path(), watcher);
        let name = std::ffi::OsStr::from_bytes(b"caf\xe9\n.csv");
        std::fs::create_dir(dir.path().join(std::ffi::OsStr::from_bytes(b"d\xff"))).unwrap();
        std::fs::write(dir.path().join(name), "x").unwrap();
        std::fs::write(
            dir.path()
                .join(std::ffi::OsStr::from_bytes(b"d\xff"))
                .join("in.txt"),
            "y",
        )
        .unwrap();
        let r = t.report();
        assert_eq!(
            summary(&r),
            vec![
                ("caf\\xe9\\u{a}.csv".to_string(), Change::Created),
                ("d\\xff/in.txt".to_string(), Change::Created),
            ]
        );
        assert_eq!(r.changes[0].path, b"caf\xe9\n.csv");
        let files: Vec<Vec<u8>> = t.files_after(None).map(|(p, _)| p.to_vec()).collect();
        assert_eq!(files.len(), 2);
    }
}

/// Past its limit the tracker says so and never invents a deletion.
#[test]
fn past_the_limit_the_report_says_so_and_invents_nothing() {
    for watcher in both() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..50 {
            std::fs::write(root.join(format!("f{i:02}")), "x").unwrap();
        }
        let mut t = Tracker::with_limits(root, watcher, 20, MAX_DEPTH);
        let tracked: Vec<Vec<u8>> = t.files_after(None).map(|(p, _)| p.to_vec()).collect();
        assert_eq!(tracked.len(), 20);
        assert!(t.limit().unwrap().contains("more than 20"));
        let untracked = (0..50)
            .map(|i| format!("f{i:02}").into_bytes())
            .find(|n| !tracked.contains(n))
            .unwrap();
        // Changes to untracked files: nothing invented; a tracked one deleted: reported.
        std::fs::write(
            root.join(std::ffi::OsStr::from_bytes(&untracked)),
            "changed",
        )
        .unwrap();
        std::fs::remove_file(root.join(std::ffi::OsStr::from_bytes(&tracked[0]))).unwrap();
        let r = t.report();
        assert!(r.incomplete.is_some());
        assert!(
            r.changes
                .iter()
                .all(|c| c.change != Change::Deleted || c.path == tracked[0]),
            "{:?}",
            summary(&r)
        );
        assert!(
            r.changes
                .iter()
                .any(|c| c.change == Change::Deleted && c.path == tracked[0]),
            "{:?}",
            summary(&r)
        );
    }
}

/// A nest far deeper than the limit (the 100,000-deep one runs in the integration tests):
/// tracked to the depth limit, said so, and no crash.
#[test]
fn a_deep_nest_is_tracked_to_its_limit_and_said_so() {
    for watcher in both() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Tracker::new(dir.path(), watcher);
        crate::workspace::fsops::test_support::nest(dir.path(), 3_000, c"leaf");
        std::fs::write(dir.path().join("top.txt"), "x").unwrap();
        let r = t.report();
        assert_eq!(summary(&r), vec![("top.txt".to_string(), Change::Created)]);
        assert!(r.incomplete.unwrap().contains("deeper than 64"));
        crate::workspace::remove_tree(&dir.path().join("d")).unwrap();
        let r = t.report();
        assert!(r.changes.is_empty(), "{:?}", summary(&r));
    }
}

#[test]
fn many_files_are_counted_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Tracker::new(dir.path(), Watcher::new());
    for i in 0..5000 {
        std::fs::write(dir.path().join(format!("f{i:05}")), "x").unwrap();
    }
    let r = t.report();
    assert_eq!(r.changes.len(), 5000);
    assert!(r.incomplete.is_none());
    let s = crate::workspace::Summary::from(r);
    assert_eq!(
        (s.files.len(), s.total),
        (crate::workspace::MAX_REPORTED, 5000)
    );
    assert_eq!(s.files[0].path, "f00000");
}
