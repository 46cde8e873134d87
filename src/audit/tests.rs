use super::*;

fn event(detail: &str) -> AuditEvent {
    AuditEvent {
        detail: detail.into(),
        ..AuditEvent::now("s", "execute", "ok")
    }
}

fn segment(dir: &Path, n: u64) -> PathBuf {
    dir.join(store::segment_name(n))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Unix modes (Windows has none to check).
fn warden_mode(meta: &std::fs::Metadata) -> Option<u32> {
    crate::os::permission_bits(meta)
}

#[test]
fn records_chain_across_reopening_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let log = AuditLog::open(&dir, "1-a");
    log.record(event("one")).unwrap();
    log.record(event("two")).unwrap();
    drop(log);
    let log = AuditLog::open(&dir, "2-b");
    log.record(event("three")).unwrap();
    assert!(log.warnings().is_empty(), "{:?}", log.warnings());
    drop(log);
    let report = verify_dir(&dir).unwrap();
    assert!(report.clean(), "{report:?}");
    // The genesis note, then three events.
    assert_eq!(report.records, 4);
    let text = lines(&segment(&dir, 1));
    assert!(text[3].contains("\"instance\":\"2-b\"") && text[3].contains("\"three\""));
    for (name, mode) in [("", 0o700), ("key", 0o600), ("00000001.jsonl", 0o600)] {
        let meta = std::fs::metadata(dir.join(name)).unwrap();
        if let Some(m) = warden_mode(&meta) {
            assert_eq!(m & 0o777, mode, "{name}");
        }
    }
}

/// Two servers (two logs on one directory) appending from many threads at once.
#[test]
fn concurrent_writers_never_interleave() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let logs: Vec<Arc<AuditLog>> = (0..3)
        .map(|i| Arc::new(AuditLog::open_with(&dir, &format!("{i}-x"), 8 << 10)))
        .collect();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let log = logs[t % 3].clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    log.record(event(&format!("t{t} r{i} {}", "x".repeat(i % 50))))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for log in &logs {
        assert!(log.warnings().is_empty(), "{:?}", log.warnings());
    }
    drop(logs);
    let report = verify_dir(&dir).unwrap();
    assert!(report.clean(), "{report:?}");
    assert_eq!(report.records, 900 + 1);
    assert!(report.segments.len() > 5, "rotated: {:?}", report.segments);
}

#[test]
fn a_torn_tail_is_cut_and_the_cut_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let log = AuditLog::open(&dir, "1-a");
    log.record(event("whole")).unwrap();
    drop(log);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(segment(&dir, 1))
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":3,\"instance\":\"1-a\",\"ts\":").unwrap();
    let report = verify_dir(&dir).unwrap();
    assert!(report.torn_tail.is_some() && report.first_bad.is_none());
    let log = AuditLog::open(&dir, "2-b");
    assert!(log.warnings().is_empty(), "a torn tail is not tampering");
    log.record(event("after")).unwrap();
    drop(log);
    let text = lines(&segment(&dir, 1));
    assert!(text[2].contains("torn_tail_cut"), "{text:?}");
    assert!(verify_dir(&dir).unwrap().clean());
}

/// A record removed and the chain recomputed with plain SHA-256 (what anyone without
/// the key can do): start-up notices, sets the segment aside, warns, and goes on.
#[test]
fn a_rewritten_log_is_set_aside_and_the_server_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let log = AuditLog::open(&dir, "1-a");
    for i in 0..5 {
        log.record(event(&format!("r{i}"))).unwrap();
    }
    drop(log);
    let original = lines(&segment(&dir, 1));
    let mut prev = chain::ZERO.to_string();
    let mut forged = String::new();
    for (i, line) in original.iter().enumerate() {
        if i == 2 {
            continue;
        }
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.remove("mac");
        obj.insert("prev".into(), prev.clone().into());
        let body = serde_json::to_string(&v).unwrap();
        prev = sha256_hex(body.as_bytes());
        forged.push_str(&format!(
            "{},\"mac\":\"{prev}\"}}\n",
            &body[..body.len() - 1]
        ));
    }
    std::fs::write(segment(&dir, 1), forged).unwrap();

    let log = AuditLog::open(&dir, "2-b");
    let warnings = log.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("found broken"), "{warnings:?}");
    log.record(event("still recording")).unwrap();
    drop(log);
    let report = verify_dir(&dir).unwrap();
    assert!(!report.clean());
    assert!(
        report.first_bad.is_none(),
        "the live chain is whole: {report:?}"
    );
    assert_eq!(report.recorded_breaks.len(), 1, "{report:?}");
    assert_eq!(report.set_aside.len(), 1);
    let (name, first_bad) = &report.set_aside[0];
    assert_eq!(name, "00000001.broken.jsonl");
    let first_bad = first_bad.as_deref().unwrap();
    assert!(
        first_bad.starts_with("line 1:") && first_bad.contains("MAC"),
        "{first_bad}"
    );
    // Later servers keep warning until the set-aside file is moved away.
    let log = AuditLog::open(&dir, "3-c");
    assert_eq!(log.warnings().len(), 1);
    assert!(log.warnings()[0].contains("00000001.broken.jsonl"));
    drop(log);
    std::fs::rename(dir.join(name), tmp.path().join(name)).unwrap();
    assert!(AuditLog::open(&dir, "4-d").warnings().is_empty());
}

/// What another server appended is checked too: an edit made while a server runs is
/// found at its next append.
#[test]
fn an_edit_while_running_is_found_at_the_next_append() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let a = AuditLog::open(&dir, "1-a");
    let b = AuditLog::open(&dir, "2-b");
    a.record(event("from a")).unwrap();
    b.record(event("from b")).unwrap();
    // A line appended without the key.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(segment(&dir, 1))
        .unwrap();
    let forged = format!(
        "{{\"seq\":4,\"instance\":\"x\",\"prev\":\"{}\",\"mac\":\"{}\"}}\n",
        "0".repeat(64),
        "1".repeat(64)
    );
    std::io::Write::write_all(&mut f, forged.as_bytes()).unwrap();
    a.record(event("after the forgery")).unwrap();
    assert_eq!(a.warnings().len(), 1, "{:?}", a.warnings());
    // b follows a's restart and says so.
    b.record(event("b again")).unwrap();
    assert!(
        b.warnings()[0].contains("another warden server"),
        "{:?}",
        b.warnings()
    );
    drop((a, b));
    let report = verify_dir(&dir).unwrap();
    assert!(report.first_bad.is_none(), "{report:?}");
    assert_eq!(report.set_aside[0].0, "00000001.broken.jsonl");
    assert!(
        report.set_aside[0]
            .1
            .as_deref()
            .unwrap()
            .starts_with("line 4:"),
        "{report:?}"
    );
}

/// Start-up reads from the checkpoint: it costs the same for a long log as for a short
/// one, and still catches a chain recomputed before the checkpoint (the anchor) and a
/// sealed segment that changed size.
#[test]
fn start_up_checks_from_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let log = AuditLog::open_with(&dir, "1-a", 4 << 10);
    for i in 0..200 {
        log.record(event(&format!("r{i}"))).unwrap();
    }
    drop(log);
    let segments = store::list(&dir).unwrap().0;
    assert!(segments.len() > 3);
    // A same-length edit deep inside a sealed segment, with no MAC recomputed: only the
    // full check finds it; start-up does not read that far back.
    let first = segment(&dir, 1);
    let text = std::fs::read_to_string(&first).unwrap();
    std::fs::write(&first, text.replacen("\"r1\"", "\"r7\"", 1)).unwrap();
    assert!(AuditLog::open(&dir, "2-b").warnings().is_empty());
    let report = verify_dir(&dir).unwrap();
    assert!(
        report
            .first_bad
            .as_deref()
            .unwrap()
            .starts_with("00000001.jsonl line 3:"),
        "{report:?}"
    );
    // A sealed segment that changed size is caught at start-up.
    std::fs::write(&first, text.replacen("\"r1\"", "\"r10\"", 1)).unwrap();
    let log = AuditLog::open(&dir, "3-c");
    assert!(
        log.warnings()[0].contains("changed size"),
        "{:?}",
        log.warnings()
    );
}

#[test]
fn the_anchor_catches_a_recomputed_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let log = AuditLog::open(&dir, "1-a");
    log.record(event("a")).unwrap();
    log.record(event("b")).unwrap();
    drop(log);
    let path = segment(&dir, 1);
    let mut text = lines(&path);
    let last = text.pop().unwrap();
    let swapped = last.replace("\"b\"", "\"c\"");
    text.push(swapped);
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    let log = AuditLog::open(&dir, "2-b");
    assert!(
        log.warnings()[0].contains("changed or moved"),
        "{:?}",
        log.warnings()
    );
}

#[test]
fn a_log_that_cannot_be_opened_refuses_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    // A file where the directory should be.
    let dir = tmp.path().join("audit");
    std::fs::write(&dir, "not a directory").unwrap();
    let log = AuditLog::open(&dir, "1-a");
    assert!(log.record(event("x")).is_err());
    assert!(log.warnings()[0].contains("cannot be opened"));
    std::fs::remove_file(&dir).unwrap();
    log.record(event("y")).unwrap();
    assert!(log.warnings().is_empty());
    drop(log);
    assert!(verify_dir(&dir).unwrap().clean());
}

#[test]
fn fields_are_capped_and_controls_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let log = AuditLog::open(&dir, "1-a");
    log.record(AuditEvent {
        detail: format!("{}\n{}", "\u{1b}[2J", "y".repeat(5000)),
        rule: Some("r".repeat(5000)),
        ..AuditEvent::now("s", "execute", "error")
    })
    .unwrap();
    drop(log);
    let text = lines(&segment(&dir, 1));
    let v: serde_json::Value = serde_json::from_str(&text[1]).unwrap();
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.starts_with("\\u{1b}[2J\\u{a}yyy"), "{detail}");
    assert!(detail.len() <= MAX_FIELD + '…'.len_utf8());
    assert!(v["rule"].as_str().unwrap().len() <= MAX_FIELD + 3);
}
