//! The Seatbelt builders, run on whatever machine runs the tests. What only a Mac can
//! show (that `sandbox-exec` compiles this text and Python starts under it) is not
//! claimed here: see the README's platform table.

use super::*;
use crate::sandbox::linux::world::ObjectId;

fn view() -> FsView {
    FsView {
        executables: vec![PathBuf::from("/opt/homebrew/bin/python3")],
        read_dirs: vec![
            PathBuf::from(
                "/opt/homebrew/Cellar/python@3.12/3.12.7/Frameworks/Python.framework/Versions/3.12",
            ),
            PathBuf::from("/Users/a/data"),
        ],
        read_files: vec![PathBuf::from("/Users/a/notes.txt")],
        write_dirs: vec![
            PathBuf::from("/Users/a/Library/warden/s/\")(allow default)(\"/workspace"),
            PathBuf::from("/private/var/folders/x/T/warden-tmp"),
        ],
        write_files: vec![
            PathBuf::from("/dev/null"),
            PathBuf::from("/Users/a/out.csv"),
        ],
        workspace: PathBuf::from("/Users/a/Library/warden/s/w"),
        tmp: PathBuf::from("/private/var/folders/x/T/warden-tmp"),
        checked: vec![
            (PathBuf::from("/Users/a/data"), ObjectId { dev: 1, ino: 2 }),
            (
                PathBuf::from("/Users/a/notes.txt"),
                ObjectId { dev: 1, ino: 3 },
            ),
            (
                PathBuf::from("/Users/a/out.csv"),
                ObjectId { dev: 1, ino: 4 },
            ),
        ],
        unmasked_grants: false,
    }
}

fn exec() -> Vec<PathBuf> {
    interpreter_names(
        Path::new("/opt/homebrew/bin/python3"),
        Path::new(
            "/opt/homebrew/Cellar/python@3.12/3.12.7/Frameworks/Python.framework/Versions/3.12/bin/python3.12",
        ),
    )
}

fn param<'a>(p: &'a Profile, name: &str) -> &'a Path {
    &p.params
        .iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("no parameter {name} in {:?}", p.params))
        .path
}

/// The worker's own rule that allows `rights` (after the base), as text.
fn block<'a>(p: &'a Profile, rights: &str) -> &'a str {
    let own = p.text.find("; This worker's paths").unwrap();
    let start = p.text[own..]
        .find(&format!("(allow {rights}\n"))
        .unwrap_or_else(|| panic!("no rule for {rights}:\n{}", p.text))
        + own;
    let end = p.text[start..].find(")))\n").unwrap() + start + 3;
    &p.text[start..end]
}

#[test]
fn denies_by_default_and_forks_nothing() {
    let p = profile(&view(), &exec(), NetworkMode::Deny);
    assert!(
        p.text.starts_with("(version 1)\n(deny default)\n"),
        "{}",
        p.text
    );
    assert!(!p.text.contains("process-fork"));
    assert!(!p.text.contains("(allow default"));
    assert!(
        !p.text.contains("mach-lookup"),
        "no Mach service without network"
    );
    assert!(!p.text.contains("ipc-posix"));
    assert!(p.text.contains("(allow signal (target self))"));
    assert!(p.text.contains("(allow process-info* (target self))"));
    // The only process-exec rule is the interpreter's, by literal names.
    assert_eq!(p.text.matches("process-exec").count(), 1, "{}", p.text);
    let exec_rule = block(&p, "process-exec file-read* file-map-executable");
    assert_eq!(exec_rule.matches("(literal (param \"EXEC_").count(), 3);
}

#[test]
fn no_path_is_spliced_into_the_text() {
    let v = view();
    let p = profile(&v, &exec(), NetworkMode::Deny);
    for path in v
        .read_dirs
        .iter()
        .chain(&v.write_dirs)
        .chain(&v.read_files)
        .chain(&exec())
    {
        assert!(
            !p.text.contains(&*path.to_string_lossy()),
            "{} is in the text:\n{}",
            path.display(),
            p.text
        );
    }
    // The hostile workspace name is a parameter's value, verbatim.
    assert_eq!(
        param(&p, "WRITE_DIR_0"),
        Path::new("/Users/a/Library/warden/s/\")(allow default)(\"/workspace")
    );
    // The text depends only on how many paths (and parents) there are of each kind.
    let mut other = v.clone();
    other.write_dirs[0] = PathBuf::from("/Users/a/Library/warden/s/other/workspace");
    assert_eq!(profile(&other, &exec(), NetworkMode::Deny).text, p.text);
}

#[test]
fn runtime_is_read_only_and_executable_workspace_is_read_write_grants_are_data() {
    let p = profile(&view(), &exec(), NetworkMode::Deny);
    let runtime = block(&p, "file-read* file-map-executable");
    assert!(runtime.contains("(subpath (param \"RUNTIME_0\"))"));
    assert_eq!(
        param(&p, "RUNTIME_0"),
        Path::new(
            "/opt/homebrew/Cellar/python@3.12/3.12.7/Frameworks/Python.framework/Versions/3.12"
        )
    );
    // A granted directory is readable, never mapped executable, never writable.
    assert_eq!(param(&p, "READ_DIR_0"), Path::new("/Users/a/data"));
    assert!(block(&p, "file-read*").contains("(subpath (param \"READ_DIR_0\"))"));
    assert_eq!(param(&p, "READ_FILE_0"), Path::new("/Users/a/notes.txt"));
    let rw = block(&p, "file-read* file-write*");
    assert!(rw.contains("(subpath (param \"WRITE_DIR_0\"))"));
    assert!(rw.contains("(subpath (param \"WRITE_DIR_1\"))"));
    assert!(
        p.text
            .contains("(allow file-read* file-write*\n  (literal (param \"WRITE_FILE_0\")))")
    );
    assert_eq!(param(&p, "WRITE_FILE_0"), Path::new("/Users/a/out.csv"));
    // /dev/null is the base's, write-data only.
    assert!(p.params.iter().all(|x| x.path != Path::new("/dev/null")));
    assert!(
        p.text
            .contains("(allow file-read* file-write-data (literal \"/dev/null\"))")
    );
    // file-write* appears in two rules only: this worker's writable trees and files.
    assert_eq!(p.text.matches("file-write*").count(), 2, "{}", p.text);
}

#[test]
fn ancestors_get_metadata_only() {
    let p = profile(&view(), &exec(), NetworkMode::Deny);
    let meta: Vec<&Path> = p
        .params
        .iter()
        .filter(|x| x.name.starts_with("ANCESTOR_"))
        .map(|x| x.path.as_path())
        .collect();
    for dir in [
        "/Users",
        "/Users/a",
        "/opt/homebrew",
        "/private/var/folders/x/T",
    ] {
        assert!(
            meta.contains(&Path::new(dir)),
            "{dir} missing from {meta:?}"
        );
    }
    // The root is in the base; a granted directory's own contents are not an ancestor.
    assert!(!meta.contains(&Path::new("/")));
    assert!(!meta.contains(&Path::new("/Users/a/data")));
    assert!(block(&p, "file-read-metadata").contains("(literal (param \"ANCESTOR_0\"))"));
    // Shortest first, each once.
    let mut sorted = meta.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), meta.len());
    assert_eq!(meta[0].components().count(), 2);
}

#[test]
fn network_is_denied_unless_allowed_and_never_inbound() {
    let deny = profile(&view(), &exec(), NetworkMode::Deny);
    assert!(deny.text.contains("(deny network*)"));
    assert!(!deny.text.contains("(allow network"));
    let allow = profile(&view(), &exec(), NetworkMode::Allow);
    assert!(allow.text.contains("(allow network-outbound (remote ip))"));
    assert!(allow.text.contains("com.apple.dnssd.service"));
    assert!(!allow.text.contains("network-inbound"));
    assert!(!allow.text.contains("network-bind"));
}

#[test]
fn framework_builds_also_run_their_app_binary() {
    let names = exec();
    assert_eq!(names[0], Path::new("/opt/homebrew/bin/python3"));
    assert_eq!(
        names[2],
        Path::new(
            "/opt/homebrew/Cellar/python@3.12/3.12.7/Frameworks/Python.framework/Versions/3.12/Resources/Python.app/Contents/MacOS/Python"
        )
    );
    // A plain build (a venv, pyenv, uv) is executed by its names only.
    let plain = interpreter_names(
        Path::new("/Users/a/.venv/bin/python"),
        Path::new("/Users/a/.pyenv/versions/3.12.7/bin/python3.12"),
    );
    assert_eq!(plain.len(), 2);
    let same = interpreter_names(
        Path::new("/usr/local/bin/python3"),
        Path::new("/usr/local/bin/python3"),
    );
    assert_eq!(same, vec![PathBuf::from("/usr/local/bin/python3")]);
}

#[test]
fn paths_are_resolved_as_seatbelt_sees_them() {
    let v = view();
    let resolved = resolve_view(&v, &|p| {
        p.strip_prefix("/Users/a")
            .ok()
            .map(|rest| Path::new("/System/Volumes/Data/Users/a").join(rest))
    });
    assert_eq!(
        resolved.read_dirs[1],
        Path::new("/System/Volumes/Data/Users/a/data")
    );
    assert_eq!(
        resolved.checked[0].0,
        Path::new("/System/Volumes/Data/Users/a/data")
    );
    // Unresolvable paths stay.
    assert_eq!(resolved.read_dirs[0], v.read_dirs[0]);
    // Grants stay data after resolution.
    let p = profile(&resolved, &exec(), NetworkMode::Deny);
    assert_eq!(
        param(&p, "READ_DIR_0"),
        Path::new("/System/Volumes/Data/Users/a/data")
    );
}

#[test]
fn argv_runs_sandbox_exec_by_absolute_path_with_every_parameter() {
    let p = profile(&view(), &exec(), NetworkMode::Deny);
    let argv = sandbox_exec_argv(&p, Path::new("/opt/homebrew/bin/python3"));
    assert_eq!(argv[0], "/usr/bin/sandbox-exec");
    assert_eq!(argv[1], "-p");
    assert_eq!(argv[2], OsString::from(&p.text));
    let sep = argv.iter().position(|a| a == "--").unwrap();
    let defines = &argv[3..sep];
    assert_eq!(defines.len(), 2 * p.params.len());
    for (pair, param) in defines.chunks(2).zip(&p.params) {
        assert_eq!(pair[0], "-D");
        let mut want = OsString::from(format!("{}=", param.name));
        want.push(&param.path);
        assert_eq!(pair[1], want);
    }
    assert_eq!(argv[sep + 1], "/opt/homebrew/bin/python3");
    assert_eq!(&argv[sep + 2..sep + 6], ["-I", "-B", "-u", "-c"]);
    assert_eq!(argv[sep + 6], WORKER_SOURCE);
    assert_eq!(argv.len(), sep + 7);
}

#[test]
fn walls_report_what_stands_and_privileges_only_with_a_uid() {
    let p = profile(&view(), &exec(), NetworkMode::Deny);
    let w = walls(&p, NetworkMode::Deny, None, "cpu 30 s".into(), 9);
    let names: Vec<&str> = w.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "seatbelt",
            "rlimits",
            "process_group",
            "environment",
            "inherited_fds"
        ]
    );
    assert!(w.iter().all(|x| x.enforced));
    assert!(w[0].detail.contains("no network"), "{}", w[0].detail);
    assert!(
        w[0].detail.contains("2 read-write trees"),
        "{}",
        w[0].detail
    );
    assert!(w[0].detail.contains("2 read grants"), "{}", w[0].detail);
    assert!(w[3].detail.contains("9 variables"));
    let root = walls(&p, NetworkMode::Allow, Some(61000), String::new(), 9);
    assert!(root[0].detail.contains("outbound network allowed"));
    assert_eq!(root.last().unwrap().name, "privileges");
    assert!(root.last().unwrap().detail.contains("61000"));
}

/// The parameter names a profile's text refers to, after checking that its
/// parentheses balance outside string literals (a malformed profile would make
/// `sandbox-exec` refuse to start anything).
fn referenced_params(text: &str) -> Vec<String> {
    let mut depth = 0i32;
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        match (in_string, c) {
            (true, _) if escaped => escaped = false,
            (true, '\\') => escaped = true,
            (true, '"') => in_string = false,
            (false, '"') => in_string = true,
            (false, '(') => depth += 1,
            (false, ')') => {
                depth -= 1;
                assert!(depth >= 0, "unbalanced ')' in:\n{text}");
            }
            _ => {}
        }
    }
    assert!(!in_string && depth == 0, "unbalanced profile:\n{text}");
    text.split("(param \"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_string())
        .collect()
}

#[test]
fn the_profile_is_well_formed_and_every_parameter_is_defined_once() {
    for network in [NetworkMode::Deny, NetworkMode::Allow] {
        let p = profile(&view(), &exec(), network);
        let used = referenced_params(&p.text);
        let defined: Vec<String> = p.params.iter().map(|x| x.name.clone()).collect();
        assert_eq!(used, defined);
        let mut unique = defined.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), defined.len());
        // Comments stay on their own lines: no rule hides after a ';'.
        for line in p.text.lines() {
            if let Some(i) = line.find(';') {
                assert!(line[..i].trim().is_empty(), "{line}");
            }
        }
    }
    // An empty view still gives a valid profile (the base, no parameter).
    let empty = FsView {
        executables: vec![],
        read_dirs: vec![],
        read_files: vec![],
        write_dirs: vec![],
        write_files: vec![],
        workspace: PathBuf::from("/w"),
        tmp: PathBuf::from("/t"),
        checked: vec![],
        unmasked_grants: false,
    };
    let p = profile(&empty, &[], NetworkMode::Deny);
    assert!(referenced_params(&p.text).is_empty());
    assert!(p.params.is_empty());
}
