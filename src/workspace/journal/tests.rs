//! The journal without a supervisor: each test notes what it is about to do exactly as
//! the supervisor would, does it, rolls back, and compares the whole tree (names, kinds,
//! modes, contents, link targets, hard-link groups) with the tree before.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::*;
use crate::workspace::checkpoint::tests::{dir_fd, fingerprint, sample};

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    journal: Journal,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("workspace");
    std::fs::create_dir(&ws).unwrap();
    sample(&ws);
    std::fs::create_dir(tmp.path().join(".journal")).unwrap();
    let journal = Journal::new(dir_fd(&ws), dir_fd(&tmp.path().join(".journal")), None).unwrap();
    Fixture {
        _tmp: tmp,
        ws,
        journal,
    }
}

fn opath(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

impl Fixture {
    fn p(&self, rel: &str) -> PathBuf {
        self.ws.join(rel)
    }

    /// The note the supervisor makes before `rel` is created, replaced or removed.
    fn entry(&mut self, rel: &str) {
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let fd = opath(&self.ws.join(dir));
        self.journal
            .before_entry(fd, dir.as_bytes(), name.as_bytes())
            .unwrap();
    }

    fn write(&mut self, rel: &str) {
        let fd = opath(&self.p(rel));
        self.journal
            .before_write(fd.as_fd(), rel.as_bytes())
            .unwrap();
    }

    fn rename(&mut self, from: &str, to: &str, exchange: bool) {
        let split = |rel: &'static str| rel.rsplit_once('/').unwrap_or(("", rel));
        let (a, b) = (split(leak(from)), split(leak(to)));
        let (fa, fb) = (opath(&self.ws.join(a.0)), opath(&self.ws.join(b.0)));
        self.journal
            .before_rename(
                (fa, a.0.as_bytes(), a.1.as_bytes()),
                (fb, b.0.as_bytes(), b.1.as_bytes()),
                exchange,
            )
            .unwrap();
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn roll_back_restores(change: impl FnOnce(&mut Fixture)) -> Report {
    let mut f = fixture();
    let before = fingerprint(&f.ws);
    change(&mut f);
    assert_ne!(fingerprint(&f.ws), before, "the change changed nothing");
    let Fixture { _tmp, ws, journal } = f;
    let report = journal.roll_back().unwrap();
    assert_eq!(fingerprint(&ws), before);
    let aside = std::fs::read_dir(_tmp.path().join(".journal"))
        .unwrap()
        .count();
    assert_eq!(aside, 0, "the journal's kept files are removed");
    report
}

#[test]
fn an_overwritten_file_gets_its_bytes_and_its_hard_link_back() {
    let report = roll_back_restores(|f| {
        f.write("notes.txt");
        std::fs::write(f.p("notes.txt"), "changed through one of two names").unwrap();
    });
    let paths: Vec<_> = report.changes.iter().map(|c| c.path.clone()).collect();
    assert_eq!(paths, [b"notes.txt".to_vec()]);
    assert_eq!(report.changes[0].change, Change::Modified);
}

#[test]
fn created_files_and_directories_go_and_deleted_ones_come_back() {
    let report = roll_back_restores(|f| {
        f.entry("new");
        std::fs::create_dir(f.p("new")).unwrap();
        f.entry("new/file");
        std::fs::write(f.p("new/file"), "x").unwrap();
        f.entry("big.bin");
        std::fs::remove_file(f.p("big.bin")).unwrap();
        f.entry("data/raw/a.csv");
        std::fs::remove_file(f.p("data/raw/a.csv")).unwrap();
        f.entry("data/raw");
        std::fs::remove_dir(f.p("data/raw")).unwrap();
        f.entry("empty");
        std::fs::remove_dir(f.p("empty")).unwrap();
    });
    let mut seen: Vec<(String, Change)> = report
        .changes
        .iter()
        .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.change))
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        [
            ("big.bin".to_string(), Change::Created),
            ("data/raw/a.csv".to_string(), Change::Created),
            ("new/file".to_string(), Change::Deleted),
        ]
    );
}

#[test]
fn renamed_directories_and_files_move_back_and_what_they_replaced_returns() {
    roll_back_restores(|f| {
        f.rename("data", "moved", false);
        std::fs::rename(f.p("data"), f.p("moved")).unwrap();
        // A note made after the rename names the directory by where it is now.
        f.write("moved/raw/a.csv");
        std::fs::write(f.p("moved/raw/a.csv"), "changed after the move").unwrap();
        f.rename("notes.txt", "latest", false);
        std::fs::rename(f.p("notes.txt"), f.p("latest")).unwrap();
        f.rename("big.bin", "empty", false);
        std::fs::rename(f.p("big.bin"), f.p("empty")).unwrap_err();
    });
}

#[test]
fn an_exchange_is_exchanged_back_and_a_symlink_swap_is_undone() {
    roll_back_restores(|f| {
        f.rename("data", "empty", true);
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            f.p("data"),
            rustix::fs::CWD,
            f.p("empty"),
            RenameFlags::EXCHANGE,
        )
        .unwrap();
        f.entry("latest.tmp");
        symlink("notes.txt", f.p("latest.tmp")).unwrap();
        f.rename("latest.tmp", "latest", false);
        std::fs::rename(f.p("latest.tmp"), f.p("latest")).unwrap();
    });
}

#[test]
fn a_tree_removed_whole_comes_back_and_modes_are_put_back() {
    roll_back_restores(|f| {
        f.journal
            .before_mode(opath(&f.p("notes.txt")).as_fd(), b"notes.txt")
            .unwrap();
        std::fs::set_permissions(f.p("notes.txt"), std::fs::Permissions::from_mode(0o400)).unwrap();
        for rel in ["data/raw/a.csv", "data/raw", "data"] {
            f.entry(rel);
        }
        std::fs::remove_dir_all(f.p("data")).unwrap();
        // Then something new where it was, made read-only.
        f.entry("data");
        std::fs::create_dir(f.p("data")).unwrap();
        f.entry("data/x");
        std::fs::write(f.p("data/x"), "x").unwrap();
        f.journal
            .before_mode(opath(&f.p("data")).as_fd(), b"data")
            .unwrap();
        std::fs::set_permissions(f.p("data"), std::fs::Permissions::from_mode(0o500)).unwrap();
    });
}

#[test]
fn a_note_of_a_call_that_failed_undoes_nothing() {
    let mut f = fixture();
    let before = fingerprint(&f.ws);
    // mkdir over an existing file, rmdir of a directory with things in it: both fail.
    f.entry("notes.txt");
    f.entry("data");
    std::fs::remove_dir(f.p("data")).unwrap_err();
    f.rename("missing", "notes.txt", false);
    let report = f.journal.roll_back().unwrap();
    assert!(report.changes.is_empty(), "{:?}", report.changes);
    assert_eq!(fingerprint(&f.ws), before);
}

#[test]
fn what_is_not_on_the_workspace_file_system_is_not_noted() {
    let mut f = fixture();
    let elsewhere = opath(Path::new("/proc"));
    f.journal.before_entry(elsewhere, b"", b"self").unwrap();
    assert!(f.journal.is_empty());
}

#[test]
fn past_its_bound_a_journal_refuses_the_change_as_a_full_disk_would() {
    let mut f = fixture();
    f.journal.max_notes = 2;
    f.entry("one");
    f.entry("two");
    let dir = opath(&f.ws);
    let e = f.journal.before_entry(dir, b"", b"three").unwrap_err();
    assert_eq!(e.errno(), Errno::NOSPC);
    assert!(e.to_string().contains("at most 2 names"), "{e}");
}
