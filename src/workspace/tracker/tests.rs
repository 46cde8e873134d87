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
        let is_live = live(&watcher);
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
        assert!(
            t.rescans == 1 || !is_live,
            "a live tracker rescanned: {}",
            t.rescans
        );
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
        // Past one clock tick (4 ms at HZ=250): on a kernel with coarse timestamps a
        // write in the same tick as the look would leave the ctime as it was (for a
        // polling tracker that is the case the next test's comment describes).
        std::thread::sleep(std::time::Duration::from_millis(20));
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

/// A write of the same size within one clock tick of the last look leaves the stamp as
/// it was on a kernel with coarse timestamps (before 6.13; this one may have fine-grained
/// ones, so the tick is simulated by recording the stamp after the write). The event
/// still says the file was written, so a live tracker reports it, through every name
/// of the file. (A polling tracker has only the stamp: the README says so.)
#[test]
fn a_write_within_one_clock_tick_still_shows_when_watched() {
    let watcher = Watcher::new();
    if !live(&watcher) {
        eprintln!("skipped: no inotify here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("data.bin");
    std::fs::write(&f, "aaaa").unwrap();
    std::fs::hard_link(&f, dir.path().join("other.bin")).unwrap();
    let mut t = Tracker::new(dir.path(), watcher);
    std::fs::write(&f, "bbbb").unwrap();
    let root = std::fs::File::open(dir.path()).unwrap();
    for name in ["data.bin", "other.bin"] {
        let now = fsops::stat_at(root.as_fd(), name.as_bytes()).unwrap();
        t.put(name.as_bytes(), now);
    }
    assert_eq!(
        summary(&t.report()),
        vec![
            ("data.bin".to_string(), Change::Modified),
            ("other.bin".to_string(), Change::Modified),
        ]
    );
    assert!(t.report().changes.is_empty(), "reported once");
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
        let mut t = Tracker::with_limits(root, watcher, 20, MAX_DEPTH, MAX_WATCHES_PER_SESSION);
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

/// Whether the tracker of `watcher` should be live (inotify), i.e. never rescan after the
/// first walk unless told to.
fn live(watcher: &Watcher) -> bool {
    watcher.fd.is_some()
}

fn write(root: &std::path::Path, rel: &str, text: &str) {
    std::fs::write(root.join(rel), text).unwrap();
}

/// 10,200 files in 102 directories; a few are changed, added, deleted and renamed (a file
/// within its directory, a file across directories, a whole directory): the report is
/// exactly those, and a report after no change is empty. With inotify, no report after
/// the first walk rescans: a report looks only at what the kernel named.
#[test]
fn ten_thousand_files_report_exactly_what_changed() {
    for watcher in both() {
        let is_live = live(&watcher);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in 0..102 {
            std::fs::create_dir(root.join(format!("d{d:03}"))).unwrap();
            for f in 0..100 {
                write(root, &format!("d{d:03}/f{f:03}.csv"), "a,b\n1,2\n");
            }
        }
        let mut t = Tracker::new(root, watcher);
        assert!(!t.polling || !is_live, "watches could not be added");
        assert_eq!(t.files_after(None).count(), 10_200);
        assert_eq!(summary(&t.report()), vec![], "nothing changed yet");
        for _ in 0..3 {
            let r = t.report();
            assert!(r.changes.is_empty() && r.incomplete.is_none(), "{r:?}");
        }
        // Reading files changes nothing.
        assert_eq!(
            std::fs::read(root.join("d005/f005.csv")).unwrap(),
            b"a,b\n1,2\n"
        );
        assert_eq!(summary(&t.report()), vec![]);

        write(root, "d000/f000.csv", "changed");
        write(root, "d050/f050.csv", "a,b\n1,3\n"); // same size, new mtime
        std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("d101/f099.csv"))
            .unwrap();
        write(root, "d001/new.txt", "n");
        std::fs::create_dir(root.join("fresh")).unwrap();
        write(root, "fresh/one.csv", "1");
        std::fs::remove_file(root.join("d002/f002.csv")).unwrap();
        std::fs::remove_file(root.join("d099/f000.csv")).unwrap();
        std::fs::rename(root.join("d003/f003.csv"), root.join("d003/g003.csv")).unwrap();
        std::fs::rename(root.join("d004/f004.csv"), root.join("d005/moved.csv")).unwrap();
        std::fs::rename(root.join("d006"), root.join("e006")).unwrap();
        let r = t.report();
        let mut want = vec![
            ("d000/f000.csv".to_string(), Change::Modified),
            ("d001/new.txt".to_string(), Change::Created),
            ("d002/f002.csv".to_string(), Change::Deleted),
            ("d003/f003.csv".to_string(), Change::Deleted),
            ("d003/g003.csv".to_string(), Change::Created),
            ("d004/f004.csv".to_string(), Change::Deleted),
            ("d005/moved.csv".to_string(), Change::Created),
            ("d050/f050.csv".to_string(), Change::Modified),
            ("d099/f000.csv".to_string(), Change::Deleted),
            ("fresh/one.csv".to_string(), Change::Created),
        ];
        for f in 0..100 {
            want.push((format!("d006/f{f:03}.csv"), Change::Deleted));
            want.push((format!("e006/f{f:03}.csv"), Change::Created));
        }
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(summary(&r), want);
        assert!(r.incomplete.is_none());
        assert_eq!(r.changes[0].size, 7);
        assert_eq!(summary(&t.report()), vec![], "nothing changed since");
        // The renamed directory and the new one are watched under their new names.
        write(root, "e006/f010.csv", "x");
        write(root, "fresh/two.csv", "2");
        assert_eq!(
            summary(&t.report()),
            vec![
                ("e006/f010.csv".to_string(), Change::Modified),
                ("fresh/two.csv".to_string(), Change::Created),
            ]
        );
        assert_eq!(t.files_after(None).count(), 10_200 + 1 - 2 + 1 + 1);
        if is_live {
            assert_eq!(t.rescans, 1, "a live tracker rescanned");
        }
    }
}

/// A directory renamed away and back keeps its watch under the name it has now.
#[test]
fn a_directory_renamed_back_is_still_watched() {
    for watcher in both() {
        let is_live = live(&watcher);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/in")).unwrap();
        write(root, "a/in/x", "1");
        let mut t = Tracker::new(root, watcher);
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        t.report();
        std::fs::rename(root.join("b"), root.join("a")).unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![
                ("a/in/x".to_string(), Change::Created),
                ("b/in/x".to_string(), Change::Deleted),
            ]
        );
        write(root, "a/in/x", "22");
        write(root, "a/in/y", "3");
        assert_eq!(
            summary(&t.report()),
            vec![
                ("a/in/x".to_string(), Change::Modified),
                ("a/in/y".to_string(), Change::Created),
            ]
        );
        if is_live {
            assert_eq!(t.rescans, 1);
        }
    }
}

/// Hard links are one file under several names: a change through one name is reported
/// under every tracked name (the kernel announces it for the name written through only);
/// a new link is reported as created, and the other names as modified (their link count
/// and change time moved); so is a removed one, as deleted.
#[test]
fn a_change_through_a_hard_link_shows_under_every_name() {
    for watcher in both() {
        let is_live = live(&watcher);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("one")).unwrap();
        std::fs::create_dir_all(root.join("two")).unwrap();
        write(root, "one/a", "1");
        let mut t = Tracker::new(root, watcher);
        // A second name for a file that had one.
        std::fs::hard_link(root.join("one/a"), root.join("two/b")).unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![
                ("one/a".to_string(), Change::Modified),
                ("two/b".to_string(), Change::Created),
            ]
        );
        write(root, "one/a", "22");
        assert_eq!(
            summary(&t.report()),
            vec![
                ("one/a".to_string(), Change::Modified),
                ("two/b".to_string(), Change::Modified),
            ]
        );
        std::fs::hard_link(root.join("two/b"), root.join("c")).unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![
                ("c".to_string(), Change::Created),
                ("one/a".to_string(), Change::Modified),
                ("two/b".to_string(), Change::Modified),
            ]
        );
        std::fs::remove_file(root.join("one/a")).unwrap();
        assert_eq!(
            summary(&t.report()),
            vec![
                ("c".to_string(), Change::Modified),
                ("one/a".to_string(), Change::Deleted),
                ("two/b".to_string(), Change::Modified),
            ]
        );
        // Through the last two names.
        write(root, "c", "333");
        assert_eq!(
            summary(&t.report()),
            vec![
                ("c".to_string(), Change::Modified),
                ("two/b".to_string(), Change::Modified),
            ]
        );
        assert_eq!(summary(&t.report()), vec![]);
        if is_live {
            assert_eq!(t.rescans, 1);
        }
    }
}

/// A shared writable mapping of a workspace file, written between reports.
struct Mapping {
    addr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(path: &std::path::Path, len: usize) -> Mapping {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        // SAFETY: a fresh mapping of `len` bytes of a file at least that long; the file
        // descriptor may be closed afterwards (the mapping holds the file).
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        Mapping {
            addr: addr.cast(),
            len,
        }
    }

    fn store(&self, at: usize, byte: u8) {
        assert!(at < self.len);
        // SAFETY: `at` is inside the mapping, which lives as long as `self`.
        unsafe { self.addr.add(at).write_volatile(byte) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; nothing refers to it afterwards.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// A write through a shared mapping makes no inotify event. What is reported: the file,
/// as modified, when the write moved its mtime (the first store through a new mapping
/// does), because a file held open (a live mapping holds it) is looked at on every
/// report; and nothing more once the mapping is gone (its release is a close, looked at
/// too). A store to a page already written since the last report may move nothing the
/// tracker can see (said in the module docs and the README).
#[test]
fn a_write_through_a_shared_mapping_is_reported() {
    for watcher in both() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let page = 4096 * 4; // larger than any page size this runs on
        std::fs::write(root.join("mapped.bin"), vec![0u8; page * 2]).unwrap();
        std::fs::write(root.join("other.bin"), "x").unwrap();
        let mut t = Tracker::new(root, watcher);
        let map = Mapping::new(&root.join("mapped.bin"), page * 2);
        assert_eq!(
            summary(&t.report()),
            vec![],
            "mapping alone changes nothing"
        );
        map.store(0, 1);
        assert_eq!(
            summary(&t.report()),
            vec![("mapped.bin".to_string(), Change::Modified)]
        );
        assert_eq!(summary(&t.report()), vec![]);
        // A store to a page already written: whether the mtime moves depends on the file
        // system (tmpfs: no; ext4: only when the page was written back, and its large
        // folios span pages), so nothing is asserted of it.
        map.store(page, 2);
        t.report();
        drop(map);
        assert_eq!(summary(&t.report()), vec![]);
        assert!(t.open.is_empty(), "{:?}", t.open.keys().collect::<Vec<_>>());
        // Mapped, written and unmapped between two reports.
        let map = Mapping::new(&root.join("mapped.bin"), page * 2);
        map.store(3, 3);
        drop(map);
        assert_eq!(
            summary(&t.report()),
            vec![("mapped.bin".to_string(), Change::Modified)]
        );
        let bytes = std::fs::read(root.join("mapped.bin")).unwrap();
        assert_eq!((bytes[0], bytes[3], bytes[page]), (1, 3, 2));
    }
}

/// More events than the kernel queues (16,384 by default; 10,000 new files make about
/// 40,000): the report rescans once, is exact, and the tracker is live again after it.
#[test]
fn an_overflowed_queue_costs_one_rescan_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut t = Tracker::new(root, Watcher::new());
    assert!(!t.polling);
    for i in 0..10_000 {
        write(root, &format!("f{i:05}"), "x");
    }
    let r = t.report();
    assert_eq!(r.changes.len(), 10_000);
    assert!(r.changes.iter().all(|c| c.change == Change::Created));
    let rescans = t.rescans;
    write(root, "f00042", "changed");
    std::fs::remove_file(root.join("f09999")).unwrap();
    assert_eq!(
        summary(&t.report()),
        vec![
            ("f00042".to_string(), Change::Modified),
            ("f09999".to_string(), Change::Deleted),
        ]
    );
    assert_eq!(t.rescans, rescans, "live again after the rescan");
    assert!(!t.polling);
}

#[test]
fn the_servers_share_is_a_quarter_of_the_users_watches() {
    assert_eq!(server_share(Some(192_540)), 48_135);
    assert_eq!(server_share(Some(1_048_576)), 262_144);
    assert_eq!(server_share(None), 2048, "the kernel's smallest default");
    assert_eq!(
        server_share(Some(100)),
        64,
        "at least a small workspace's worth"
    );
}

fn make_dirs(root: &std::path::Path, n: usize) {
    for i in 0..n {
        std::fs::create_dir(root.join(format!("d{i:03}"))).unwrap();
    }
}

/// Past its cap of directories a session gives its watches back and is tracked by scan,
/// still exactly, and is watched again once its directories fit with room to spare.
#[test]
fn past_its_cap_a_session_is_tracked_by_scan_and_watched_again_when_it_fits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let watcher = Watcher::new();
    let mut t = Tracker::with_limits(root, watcher.clone(), MAX_TRACKED, MAX_DEPTH, 10);
    make_dirs(root, 4);
    assert!(t.report().by_scan.is_none());
    assert_eq!(watcher.held(), 5, "the workspace and its four directories");
    make_dirs(&root.join("d000"), 12);
    write(root, "d000/d011/new.csv", "x");
    let r = t.report();
    let why = r.by_scan.expect("tracked by scan");
    assert!(why.contains("more than 10 directories"), "{why}");
    assert_eq!(watcher.held(), 0, "every watch given back");
    // By scan, every change is still reported.
    write(root, "d001/a.txt", "a");
    std::fs::remove_file(root.join("d000/d011/new.csv")).unwrap();
    let r = t.report();
    assert_eq!(
        summary(&r),
        vec![
            ("d000/d011/new.csv".to_string(), Change::Deleted),
            ("d001/a.txt".to_string(), Change::Created),
        ]
    );
    assert!(r.by_scan.is_some());
    assert_eq!(watcher.held(), 0);
    // Fewer directories than nine tenths of the cap: watched again.
    for i in 0..12 {
        std::fs::remove_dir(root.join(format!("d000/d{i:03}"))).unwrap();
    }
    assert!(t.report().by_scan.is_some(), "the walk that finds the room");
    assert!(t.report().by_scan.is_none());
    assert_eq!(watcher.held(), 5);
    let rescans = t.rescans;
    write(root, "d002/b.txt", "b");
    assert_eq!(
        summary(&t.report()),
        vec![("d002/b.txt".to_string(), Change::Created)]
    );
    assert_eq!(t.rescans, rescans, "by events again");
}

/// The server's share is for every session together: a session that would pass it is
/// tracked by scan, and the others keep their watches.
#[test]
fn a_session_past_the_servers_share_is_tracked_by_scan_and_the_others_keep_theirs() {
    let watcher = Watcher::with_share(8);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    make_dirs(a.path(), 5);
    make_dirs(b.path(), 5);
    let mut first = Tracker::with_limits(a.path(), watcher.clone(), MAX_TRACKED, MAX_DEPTH, 100);
    assert!(first.report().by_scan.is_none());
    let mut second = Tracker::with_limits(b.path(), watcher.clone(), MAX_TRACKED, MAX_DEPTH, 100);
    let why = second.report().by_scan.expect("past the share");
    assert!(
        why.contains("share of the user's inotify watches (8"),
        "{why}"
    );
    assert_eq!(watcher.held(), 6, "the first session's watches only");
    write(a.path(), "d004/x", "x");
    assert_eq!(
        summary(&first.report()),
        vec![("d004/x".to_string(), Change::Created)]
    );
    // Once the first is gone there is room: the second is watched again at its next
    // report (its last walk counted its directories).
    drop(first);
    assert_eq!(watcher.held(), 0);
    assert!(second.report().by_scan.is_none());
    assert_eq!(watcher.held(), 6);
}
