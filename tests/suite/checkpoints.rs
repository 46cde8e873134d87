//! Named checkpoints (`checkpoint`, `restore`, `list_checkpoints`): a restore puts the
//! workspace back exactly (names, contents, modes, links, hard links, empty directories)
//! and lists what it changed; bad names, missing checkpoints, a full quota, the bound
//! on how many, and a call in flight are clear errors that change nothing.

use serde_json::{Value, json};

use super::audit::records;
use super::{As, Net, Server, both_modes, find_files, json_resource, stdout};

async fn start(who: As, env: &[(&str, &str)]) -> Server {
    Server::start_as(who, Net::Host, env).await
}

/// A tool's structured result and whether it was an error.
pub(super) async fn tool(server: &Server, name: &'static str, args: Value) -> (bool, Value) {
    let r = server.call(name, args).await.unwrap();
    (
        r.is_error == Some(true),
        r.structured_content.unwrap_or(Value::Null),
    )
}

/// Everything a restore must bring back, as the code sees it: each entry's name, type,
/// mode, link target, content digest and hard-link group.
pub(super) const FINGERPRINT: &str = r#"
import hashlib, os, stat
def fingerprint():
    out, first = [], {}
    for top, dirs, files in os.walk('.'):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(top, name)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            extra = ''
            if stat.S_ISLNK(st.st_mode):
                extra = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                extra = hashlib.sha256(open(p, 'rb').read()).hexdigest()
                if st.st_nlink > 1:
                    extra += ' group ' + first.setdefault(st.st_ino, p)
            out.append(f'{p} {kind:o} {stat.S_IMODE(st.st_mode):o} {extra}')
    return hashlib.sha256('\n'.join(out).encode()).hexdigest(), len(out)
print(*fingerprint())
"#;

async fn fingerprint(server: &Server, session: &str) -> String {
    let r = server.run(session, FINGERPRINT).await;
    assert_eq!(r["status"], "ok", "{r}");
    stdout(&r).to_string()
}

/// Path `chmod` is refused inside (seccomp: it could reach outside the workspace);
/// `fchmod` on a file the code opened is not.
pub(super) const SETUP: &str = r#"
import os
def chmod(path, mode):
    fd = os.open(path, os.O_RDONLY)
    os.fchmod(fd, mode)
    os.close(fd)
os.makedirs('data/raw')
os.mkdir('empty')
open('data/raw/a.csv', 'w').write('x,y\n1,2\n')
open('notes.txt', 'w').write('hello')
chmod('notes.txt', 0o640)
os.symlink('data/raw/a.csv', 'latest')
os.link('notes.txt', 'notes-link.txt')
open('big.bin', 'wb').write(os.urandom(1 << 20))
"#;

const DAMAGE: &str = r#"
import os, shutil
shutil.rmtree('data/raw')
os.rename('big.bin', 'moved.bin')
chmod('notes.txt', 0o600)
os.remove('latest')
os.symlink('/etc/passwd', 'latest')
open('notes-link.txt', 'w').write('HELLO')
open('new.txt', 'w').write('new')
os.rmdir('empty')
after_checkpoint = 42
"#;

#[tokio::test]
async fn a_restore_undoes_deletes_renames_mode_changes_and_a_symlink_swap() {
    for who in both_modes() {
        let server = start(who, &[("SANDBOX_KEEP_WORKSPACES", "true")]).await;
        let r = server.run("c", SETUP).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let before = fingerprint(&server, "c").await;
        let (err, taken) = tool(
            &server,
            "checkpoint",
            json!({"session": "c", "name": "base"}),
        )
        .await;
        assert!(!err, "{who:?}: {taken}");
        assert_eq!(taken["checkpoint"]["entries"], 8, "{who:?}: {taken}");
        assert_eq!(
            taken["checkpoint"]["bytes"],
            (1 << 20) + 5 + 8,
            "{who:?}: {taken}"
        );
        let r = server.run("c", DAMAGE).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        assert_ne!(fingerprint(&server, "c").await, before, "{who:?}");
        let (err, restored) =
            tool(&server, "restore", json!({"session": "c", "name": "base"})).await;
        assert!(!err, "{who:?}: {restored}");
        assert_eq!(fingerprint(&server, "c").await, before, "{who:?}");
        let changes: Vec<(String, String)> = restored["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["path"].as_str().unwrap().to_string(),
                    c["change"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = [
            ("big.bin", "created"),
            ("data/raw/a.csv", "created"),
            ("empty", "created"),
            ("latest", "modified"),
            ("moved.bin", "deleted"),
            ("new.txt", "deleted"),
            ("notes-link.txt", "modified"),
            ("notes.txt", "modified"),
        ]
        .iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect();
        assert_eq!(changes, expected, "{who:?}: {restored}");
        assert_eq!(restored["memory_restored"], false);
        // What came back belongs to the code as before: it can change and delete it.
        let r = server
            .run(
                "c",
                "open('notes.txt', 'a').write('!')\nimport shutil\nshutil.rmtree('data')",
            )
            .await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let (err, _) = tool(&server, "restore", json!({"session": "c", "name": "base"})).await;
        assert!(!err);
        // The interpreter keeps what the calls since gave it; the next call's change
        // report does not repeat the restore's.
        let r = server.run("c", "print(after_checkpoint)").await;
        assert_eq!(stdout(&r), "42\n", "{who:?}: {r}");
        assert_eq!(r["files"], json!([]), "{who:?}: {r}");
        // Listed by the tool and the resource; the audit log has both actions.
        let (err, list) = tool(&server, "list_checkpoints", json!({"session": "c"})).await;
        assert!(!err, "{list}");
        assert_eq!(list["checkpoints"][0]["name"], "base", "{list}");
        assert_eq!(list["max_checkpoints"], 8, "{list}");
        // A transactional call's copy is not a checkpoint: not listed, and not kept.
        let r = server
            .exec(
                json!({"session": "c", "code": "open('t', 'w').write('1')", "transactional": true}),
            )
            .await;
        assert_eq!(r["status"], "ok", "{r}");
        let resource = json_resource(&server.client, "warden://sessions/c/checkpoints")
            .await
            .unwrap();
        assert_eq!(resource["checkpoints"], list["checkpoints"]);
        let data = server.stop().await;
        let phases: Vec<String> = records(data.path())
            .iter()
            .filter(|r| r["phase"] == "checkpoint")
            .map(|r| r["decision"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(phases, ["taken", "restored", "restored"], "{who:?}");
        // A kept workspace keeps its checkpoints beside it.
        let metas = find_files(&data.path().join("kept"), "meta.json");
        assert!(
            metas.len() == 1 && metas[0].to_string_lossy().contains("-checkpoints/base/"),
            "{who:?}: {metas:?}"
        );
    }
}

#[tokio::test]
async fn bad_names_missing_checkpoints_and_the_bounds_are_clear_errors_that_change_nothing() {
    for who in both_modes() {
        let server = start(
            who,
            &[
                ("SANDBOX_MAX_CHECKPOINTS", "2"),
                ("SANDBOX_DISK_LIMIT", "16m"),
            ],
        )
        .await;
        let (err, r) = tool(&server, "checkpoint", json!({"session": "b", "name": "x"})).await;
        assert!(err && r["error"]["type"] == "NoSuchSession", "{who:?}: {r}");
        // Held open for writing, `big` is copied into a checkpoint, never shared.
        server
            .run(
                "b",
                "held = open('big', 'wb')\nheld.write(b'x' * (9 << 20))\nheld.flush()",
            )
            .await;
        let before = fingerprint(&server, "b").await;
        let long = "y".repeat(10_000);
        for bad in ["a/b", "..", "../x", "nul\0byte", ".hidden", long.as_str()] {
            let (err, r) = tool(&server, "checkpoint", json!({"session": "b", "name": bad})).await;
            assert!(
                err && r["error"]["type"] == "InputError",
                "{who:?} {bad:?}: {r}"
            );
            let (err, r) = tool(&server, "restore", json!({"session": "b", "name": bad})).await;
            assert!(
                err && r["error"]["type"] == "InputError",
                "{who:?} {bad:?}: {r}"
            );
        }
        // A copy of 9 MiB does not fit in a 16 MiB quota that already holds 9 MiB.
        let (err, r) = tool(
            &server,
            "checkpoint",
            json!({"session": "b", "name": "full"}),
        )
        .await;
        assert!(
            err && r["error"]["type"] == "DiskQuotaExceeded",
            "{who:?}: {r}"
        );
        let (err, r) = tool(&server, "restore", json!({"session": "b", "name": "full"})).await;
        assert!(
            err && r["error"]["type"] == "NoSuchCheckpoint",
            "{who:?}: {r}"
        );
        assert_eq!(fingerprint(&server, "b").await, before, "{who:?}");
        server
            .run("b", "import os; held.close(); os.remove('big')")
            .await;
        for name in ["one", "two"] {
            let (err, r) = tool(&server, "checkpoint", json!({"session": "b", "name": name})).await;
            assert!(!err, "{who:?}: {r}");
        }
        let (err, r) = tool(
            &server,
            "checkpoint",
            json!({"session": "b", "name": "three"}),
        )
        .await;
        assert!(
            err && r["error"]["type"] == "TooManyCheckpoints",
            "{who:?}: {r}"
        );
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("SANDBOX_MAX_CHECKPOINTS"),
            "{r}"
        );
        // Taking one again under its name replaces it.
        server.run("b", "open('later', 'w').write('1')").await;
        let (err, r) = tool(
            &server,
            "checkpoint",
            json!({"session": "b", "name": "two"}),
        )
        .await;
        assert!(!err, "{who:?}: {r}");
        server.run("b", "import os; os.remove('later')").await;
        let (err, r) = tool(&server, "restore", json!({"session": "b", "name": "two"})).await;
        assert!(!err, "{who:?}: {r}");
        let r = server.run("b", "print(open('later').read())").await;
        assert_eq!(stdout(&r), "1\n", "{who:?}: {r}");
        // Refusals are on the record too, with their reason.
        let data = server.stop().await;
        let refused: Vec<String> = records(data.path())
            .iter()
            .filter(|r| r["phase"] == "checkpoint" && r["decision"] == "refused")
            .map(|r| r["detail"].as_str().unwrap_or_default().to_string())
            .collect();
        for kind in [
            "NoSuchSession",
            "InputError",
            "DiskQuotaExceeded",
            "NoSuchCheckpoint",
            "TooManyCheckpoints",
        ] {
            assert!(
                refused.iter().any(|d| d.contains(kind)),
                "{who:?} {kind}: {refused:?}"
            );
        }
    }
}

/// A restore asked for while a call runs is refused at once, and the call goes on.
#[tokio::test]
async fn a_restore_during_a_running_call_is_refused() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        server.run("r", "open('f', 'w').write('a')").await;
        let (err, r) = tool(&server, "checkpoint", json!({"session": "r", "name": "c"})).await;
        assert!(!err, "{r}");
        let Value::Object(args) = json!({
            "session": "r",
            "timeout_s": 100,
            "code": "import time\nopen('f', 'w').write('b')\ntime.sleep(100)"
        }) else {
            unreachable!()
        };
        let refused = {
            let call = server.client.call_tool(
                rmcp::model::CallToolRequestParams::new("execute_python").with_arguments(args),
            );
            tokio::pin!(call);
            // Until the call holds the session, a restore simply succeeds; then it is refused.
            let refused = loop {
                tokio::select! {
                    done = &mut call => panic!("{who:?}: the long call ended: {done:?}"),
                    (err, r) = tool(&server, "restore", json!({"session": "r", "name": "c"})) => {
                        if err {
                            break r;
                        }
                    }
                }
            };
            // The long call is cancelled here: its future is dropped.
            refused
        };
        assert_eq!(
            refused["error"]["type"], "CallRunning",
            "{who:?}: {refused}"
        );
        assert_eq!(refused["error"]["retryable"], true, "{refused}");
        // The session recovers, and a restore now works.
        let (err, r) = loop {
            let (err, r) = tool(&server, "restore", json!({"session": "r", "name": "c"})).await;
            if r["error"]["type"] != "CallRunning" {
                break (err, r);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert!(!err, "{who:?}: {r}");
        let r = server.run("r", "print(open('f').read())").await;
        assert_eq!(stdout(&r), "a\n", "{who:?}: {r}");
        server.stop().await;
    }
}

#[tokio::test]
async fn with_no_checkpoints_allowed_the_tools_say_so() {
    let server = start(As::Root, &[("SANDBOX_MAX_CHECKPOINTS", "0")]).await;
    server.run("z", "print(1)").await;
    let (err, r) = tool(&server, "checkpoint", json!({"session": "z", "name": "a"})).await;
    assert!(err && r["error"]["type"] == "Unsupported", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOX_MAX_CHECKPOINTS=0"),
        "{r}"
    );
    server.stop().await;
}

/// A checkpoint shares the workspace's files until the code changes them: whichever way
/// a shared file is changed in place (rewritten, appended to, truncated, its mode or its
/// times changed, written through a shared mapping, through either of two hard links),
/// and through a file the worker held open for writing when the checkpoint was taken,
/// the restore brings back what the checkpoint saw.
#[tokio::test]
async fn a_checkpoint_keeps_what_it_saw_however_a_shared_file_is_changed() {
    for who in both_modes() {
        let server = start(who, &[]).await;
        let setup = format!(
            "{SETUP}\nfor n in 'abcdef':\n    open(n + '.txt', 'w').write(n * 100)\nkept = open('held.txt', 'w')\nkept.write('held'); kept.flush()"
        );
        let r = server.run("w", &setup).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let before = fingerprint(&server, "w").await;
        let (err, r) = tool(&server, "checkpoint", json!({"session": "w", "name": "c"})).await;
        assert!(!err, "{who:?}: {r}");
        // The checkpoint shares the files (each has one more link), but the one held
        // open for writing; sharing is not a change of the code's files.
        let r = server
            .run(
                "w",
                "import os\nprint(os.stat('a.txt').st_nlink, os.stat('held.txt').st_nlink)",
            )
            .await;
        assert_eq!(stdout(&r), "2 1\n", "{who:?}: {r}");
        assert_eq!(r["files_total"], 0, "{who:?}: {r}");
        let change = "import os, mmap\n\
            open('a.txt', 'w').write('rewritten')\n\
            open('b.txt', 'a').write('appended')\n\
            os.truncate('c.txt', 3)\n\
            chmod('d.txt', 0o600)\n\
            os.utime('e.txt', (1, 1))\n\
            with open('f.txt', 'r+b') as f:\n    m = mmap.mmap(f.fileno(), 0)\n    m[0:4] = b'MMAP'\n    m.flush(); m.close()\n\
            open('notes-link.txt', 'w').write('through the other name')\n\
            kept.write(' and more'); kept.flush()\n\
            open('big.bin', 'r+b').write(b'\\0' * 10)";
        let r = server.run("w", change).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        assert_ne!(fingerprint(&server, "w").await, before, "{who:?}");
        let (err, r) = tool(&server, "restore", json!({"session": "w", "name": "c"})).await;
        assert!(!err, "{who:?}: {r}");
        assert_eq!(fingerprint(&server, "w").await, before, "{who:?}");
        let r = server
            .run("w", "import os\nprint(os.stat('e.txt').st_mtime > 1)")
            .await;
        assert_eq!(stdout(&r), "True\n", "{who:?}: {r}");
        // The checkpoint still holds what it saw after a second round of changes.
        let r = server.run("w", change).await;
        assert_eq!(r["status"], "ok", "{who:?}: {r}");
        let (err, r) = tool(&server, "restore", json!({"session": "w", "name": "c"})).await;
        assert!(!err, "{who:?}: {r}");
        assert_eq!(fingerprint(&server, "w").await, before, "{who:?}");
        server.stop().await;
    }
}
