//! What no grant gives, judged from the host: every entry of the never-grant list is
//! refused with its reason (through request_grant and through the operator's config
//! file) and shown in warden://settings; a granted git project's `.git` (and a gitfile,
//! and a bare repository inside it) can be neither read nor written; other file systems
//! mounted inside a requested directory (a `/proc` with a bystander's secret on its
//! command line, a tmpfs) never come in: refused where they cannot be left out, left out
//! where they can (Docker), and a grant that gains one later is withdrawn. Root's server
//! and the login user's alike; the mounts are made by root, as the chroot was.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use super::{Answer, Harness, shared_dir};
use crate::suite::{As, Net, both_modes, data_dir_for, login_user, server_command_as, stdout};

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A git working tree that only the sandbox keeps the code from: every directory and
/// file of it writable by anyone. `.git` with its config and hooks, a submodule's
/// gitfile at `lib/.git`, a bare repository at `mirror.git`, and some data.
fn git_project(root: &Path) -> PathBuf {
    let proj = root.join("proj");
    for d in [
        ".git/objects",
        ".git/refs/heads",
        ".git/hooks",
        "lib",
        "mirror.git/objects",
        "mirror.git/refs",
    ] {
        std::fs::create_dir_all(proj.join(d)).unwrap();
    }
    for (file, text) in [
        (".git/HEAD", "ref: refs/heads/main\n"),
        (".git/config", "[core]\n\trepositoryformatversion = 0\n"),
        ("lib/.git", "gitdir: ../.git/modules/lib\n"),
        ("mirror.git/HEAD", "ref: refs/heads/main\n"),
        ("mirror.git/config", "[core]\n\tbare = true\n"),
        ("data.csv", "a,b\n1,2\n"),
    ] {
        std::fs::write(proj.join(file), text).unwrap();
    }
    let mut stack = vec![proj.clone()];
    while let Some(p) = stack.pop() {
        let dir = p.is_dir();
        chmod(&p, if dir { 0o777 } else { 0o666 });
        if dir {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    proj
}

/// Every file under `dir`, with its content (links not followed).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
        }
    }
    out.sort();
    out
}

/// A process of root's whose command line carries a secret, as a bystander's `--token`.
struct Bystander {
    child: std::process::Child,
    token: String,
}

impl Bystander {
    fn start() -> Bystander {
        let token = format!("warden-secret-{}", std::process::id());
        // A group of its own, so that its `sleep` goes with it; no inherited output, so
        // that nothing keeps the test's output pipe open after it.
        let child = std::process::Command::new("sh")
            .args(["-c", "sleep 600", "bystander", &format!("--token={token}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        Bystander { child, token }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the process group this test made.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Mounts the test made, undone when it ends.
#[derive(Default)]
struct Mounts(Vec<PathBuf>);

impl Mounts {
    fn mount(&mut self, fstype: &str, at: &Path, options: &str) {
        let ok = std::process::Command::new("mount")
            .args(["-t", fstype, "-o", options, fstype])
            .arg(at)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount {fstype} on {}", at.display());
        self.0.push(at.to_path_buf());
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for at in self.0.iter().rev() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(at)
                .status();
        }
    }
}

/// A directory of root's that holds a `/proc` and a tmpfs anyone may write.
fn tree_with_mounts(mounts: &mut Mounts) -> (tempfile::TempDir, PathBuf) {
    let (keep, dir) = shared_dir("a,b\n");
    chmod(&dir, 0o755);
    for sub in ["proc", "scratch"] {
        std::fs::create_dir(dir.join(sub)).unwrap();
        chmod(&dir.join(sub), 0o777);
    }
    mounts.mount("proc", &dir.join("proc"), "rw");
    mounts.mount("tmpfs", &dir.join("scratch"), "mode=1777,size=1m");
    (keep, dir)
}

/// Tries each of `attempts` (name, Python expression) and prints `name DONE value` or
/// `name denied errno`.
fn attempts(attempts: &[(&str, String)]) -> String {
    let mut code = String::from(
        "import os\ndef attempt(name, fn):\n    try:\n        print(name, 'DONE', fn())\n    except OSError as e:\n        print(name, 'denied', e.errno)\n",
    );
    for (name, expr) in attempts {
        code.push_str(&format!("attempt({name:?}, lambda: {expr})\n"));
    }
    code
}

/// What the code tries against a tree with a `/proc` and a tmpfs in it.
fn submount_attack(dir: &Path, pid: u32) -> String {
    let at = |p: &str| dir.join(p).display().to_string();
    attempts(&[
        (
            "cmdline",
            format!(
                "open({:?}, 'rb').read()",
                at(&format!("proc/{pid}/cmdline"))
            ),
        ),
        ("listing", format!("os.listdir({:?})", at("proc"))),
        (
            "scratch",
            format!("open({:?}, 'w').write('from the sandbox')", at("scratch/x")),
        ),
    ])
}

/// The never-grant entries a request must be refused for, each with a word of the
/// reason the refusal must give.
fn never_grantable(
    home: &Path,
    config: &Path,
    data: &Path,
    scratch: &Path,
) -> Vec<(PathBuf, &'static str)> {
    let proj = git_project(scratch);
    std::fs::write(scratch.join(".bashrc"), "").unwrap();
    let mut list: Vec<(PathBuf, &'static str)> = vec![
        (config.to_path_buf(), "configuration file"),
        (config.parent().unwrap().to_path_buf(), "configuration"),
        (data.to_path_buf(), "warden's own data"),
        (data.join("audit"), "warden's own data"),
        ("/var/spool/cron".into(), "crontabs"),
        ("/var/spool/cron/crontabs/root".into(), "crontabs"),
        ("/etc/cron.d".into(), "crontabs"),
        ("/etc/crontab".into(), "crontabs"),
        (proj.join(".git"), "core.fsmonitor"),
        (proj.join(".git/config"), "core.fsmonitor"),
        (proj.join("lib/.git"), "core.fsmonitor"),
        (proj.join("mirror.git"), "git directory"),
        (proj.join("mirror.git/config"), "git directory"),
        (scratch.join(".bashrc"), "shell start-up file"),
        (home.to_path_buf(), "cannot leave out"),
        (home.join(".ssh"), "SSH keys"),
        (home.join(".ssh/authorized_keys"), "SSH keys"),
        (home.join(".config/autostart"), "desktop starts"),
        (home.join(".config/systemd/user"), "systemd user units"),
        (home.join(".local/share/systemd"), "systemd user units"),
        (home.join(".config/fish"), "fish"),
        (home.join(".gitconfig"), "git configuration"),
    ];
    for file in [
        ".bashrc",
        ".bash_profile",
        ".bash_login",
        ".bash_logout",
        ".profile",
        ".zshrc",
        ".zshenv",
        ".zprofile",
        ".zlogin",
    ] {
        list.push((home.join(file), "shell start-up file"));
    }
    list
}

/// A config file (`WARDEN_CONFIG`) both servers can read, in a directory of its own.
fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let file = dir.path().join("warden.toml");
    std::fs::write(&file, text).unwrap();
    chmod(&file, 0o644);
    (dir, file)
}

/// Each entry, for reading and for writing: refused before anyone is asked, with its
/// reason. Then the same list in warden://settings.
#[tokio::test]
async fn every_never_grantable_entry_is_refused_with_its_reason() {
    // The login user's home is a login home for both servers.
    let Some(user) = login_user() else { return };
    for who in both_modes() {
        let (_conf_dir, config) = config_file("");
        let scratch = tempfile::tempdir().unwrap();
        chmod(scratch.path(), 0o755);
        let data = data_dir_for(who);
        let data_path = data.path().to_path_buf();
        let cmd = server_command_as(
            who,
            Net::Host,
            &[("WARDEN_CONFIG", config.to_str().unwrap())],
            &[],
            data.path(),
        );
        let h = Harness::start_command(cmd, data, Answer::Approve).await;
        for (path, why) in never_grantable(&user.home, &config, &data_path, scratch.path()) {
            for access in ["read", "write"] {
                let (is_error, r) = h.grant(&path, access).await;
                let msg = r["message"].as_str().unwrap();
                assert!(is_error, "{who:?} {access} {}: {r}", path.display());
                assert!(
                    msg.contains("refused without asking")
                        && msg.contains("can never be granted")
                        && msg.contains(why),
                    "{who:?} {access} {}: {msg}",
                    path.display()
                );
            }
        }
        assert!(h.asked().is_empty(), "{who:?}: {:?}", h.asked());
        settings_show_the_list(&h, who, &config, &user.home).await;
        h.client.cancel().await.unwrap();
    }
}

async fn settings_show_the_list(h: &Harness, who: As, config: &Path, home: &Path) {
    let read = h
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "warden://settings",
        ))
        .await
        .unwrap();
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("{read:?}")
    };
    let doc: Value = serde_json::from_str(text).unwrap();
    let list = &doc["never_grantable"];
    let rule = |kind: &str, key: &str, value: &str| {
        list["rules"][kind]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r[key] == value)
            .unwrap_or_else(|| panic!("{who:?}: no {kind} {value} in {list}"))["why"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(rule("tree", "path", "~/.bashrc").contains("start-up"));
    assert!(rule("tree", "path", "/var/spool/cron").contains("crontabs"));
    assert!(rule("tree", "path", "~/.ssh").contains("SSH"));
    assert!(rule("name", "name", ".git").contains("core.fsmonitor"));
    assert!(list["rules"]["repository"]["why"].is_string());
    let resolved = list["resolved"].as_array().unwrap();
    let why_of = |p: &Path| {
        resolved
            .iter()
            .find(|r| r["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("{who:?}: {} not in {list}", p.display()))["why"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(why_of(config).contains("WARDEN_CONFIG"), "{who:?}");
    assert!(why_of(&home.join(".zshrc")).contains("start-up"), "{who:?}");
}

/// The operator's pre-approval in the config file obeys the same list: the server
/// refuses to start and says why.
#[tokio::test]
async fn a_never_grantable_entry_in_the_config_file_stops_the_server_with_its_reason() {
    let Some(user) = login_user() else { return };
    for who in both_modes() {
        let scratch = tempfile::tempdir().unwrap();
        chmod(scratch.path(), 0o755);
        let proj = git_project(scratch.path());
        let data = data_dir_for(who);
        let (_conf_dir, config) = config_file("");
        for (path, why) in [
            (config.clone(), "configuration file"),
            (data.path().to_path_buf(), "warden's own data"),
            (user.home.join(".bashrc"), "shell start-up file"),
            (user.home.join(".ssh"), "SSH keys"),
            (PathBuf::from("/var/spool/cron"), "crontabs"),
            (proj.join(".git"), "core.fsmonitor"),
        ] {
            std::fs::write(
                &config,
                format!(
                    "[[grants]]\npath = {:?}\naccess = \"read\"\n",
                    path.display().to_string()
                ),
            )
            .unwrap();
            let mut cmd = server_command_as(
                who,
                Net::Host,
                &[("WARDEN_CONFIG", config.to_str().unwrap())],
                &[],
                data.path(),
            );
            cmd.stdin(Stdio::null());
            let out = cmd.output().await.unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{who:?} {}: started", path.display());
            assert!(
                err.contains("can never be granted") && err.contains(why),
                "{who:?} {}: {err}",
                path.display()
            );
        }
    }
}

/// A write grant on a git working tree: the person is told `.git` is hidden, and the
/// code can neither read nor change the repository's configuration, its hooks, a
/// submodule's gitfile or a bare repository inside it. Judged on the host: every byte of
/// them as before, no `fsmonitor` anywhere, while the rest of the tree was writable.
#[tokio::test]
async fn a_granted_git_project_never_gives_its_git_directories() {
    for who in both_modes() {
        let (_keep, root) = shared_dir("x");
        let proj = git_project(&root);
        // Root's, enterable but not listable by the code: what is inside it cannot be
        // checked, so it is hidden whole (the code could otherwise open a name it knows).
        std::fs::create_dir(proj.join("locked")).unwrap();
        std::fs::write(proj.join("locked/known.txt"), "known").unwrap();
        chmod(&proj.join("locked"), 0o711);
        let before = snapshot(&proj);
        let h = Harness::start_as(who, Answer::Approve, &[], "off").await;
        let (is_error, r) = h.grant(&proj, "write").await;
        assert!(!is_error, "{who:?}: {r}");
        let hidden: Vec<String> = r["hidden"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        for p in [".git", "lib/.git", "mirror.git"] {
            assert!(
                hidden.contains(&proj.join(p).display().to_string()),
                "{who:?}: {p} not hidden: {r}"
            );
        }
        let asked = h.asked();
        assert!(
            asked[0].contains("hides")
                && asked[0].contains(&proj.join(".git").display().to_string()),
            "{who:?}: {asked:?}"
        );
        let at = |p: &str| proj.join(p).display().to_string();
        let fsmonitor = "[core] fsmonitor = touch /tmp/warden-fsmonitor-ran";
        let code = attempts(&[
            (
                "read-config",
                format!("open({:?}).read()", at(".git/config")),
            ),
            (
                "append-config",
                format!("open({:?}, 'a').write({fsmonitor:?})", at(".git/config")),
            ),
            (
                "new-config",
                format!(
                    "open({:?}, 'w').write({fsmonitor:?})",
                    at(".git/config.new")
                ),
            ),
            (
                "hook",
                format!(
                    "open({:?}, 'w').write('#!/bin/sh')",
                    at(".git/hooks/pre-commit")
                ),
            ),
            (
                "rename-git",
                format!("os.rename({:?}, {:?})", at(".git"), at("old-git")),
            ),
            ("remove-git", format!("os.rmdir({:?})", at(".git"))),
            ("read-gitfile", format!("open({:?}).read()", at("lib/.git"))),
            (
                "gitfile",
                format!("open({:?}, 'w').write('gitdir: /tmp/evil')", at("lib/.git")),
            ),
            ("remove-gitfile", format!("os.unlink({:?})", at("lib/.git"))),
            (
                "bare",
                format!(
                    "open({:?}, 'a').write({fsmonitor:?})",
                    at("mirror.git/config")
                ),
            ),
            (
                "locked",
                format!("open({:?}).read()", at("locked/known.txt")),
            ),
            (
                "data",
                format!("open({:?}, 'w').write('result')", at("result.txt")),
            ),
        ]);
        let r = h.run(&code).await;
        let out = stdout(&r);
        for line in out.lines() {
            if line.starts_with("data") {
                assert_eq!(line, "data DONE 6", "{who:?}: {r}");
            } else {
                assert!(line.contains(" denied "), "{who:?}: {line}\n{r}");
            }
        }
        assert_eq!(out.lines().count(), 12, "{who:?}: {r}");
        assert_eq!(
            std::fs::read_to_string(proj.join("result.txt")).unwrap(),
            "result"
        );
        std::fs::remove_file(proj.join("result.txt")).unwrap();
        assert_eq!(snapshot(&proj), before, "{who:?}: the repository changed");
        assert!(
            !snapshot(&proj)
                .iter()
                .any(|(_, c)| String::from_utf8_lossy(c).contains("fsmonitor")),
            "{who:?}"
        );
        assert!(!Path::new("/tmp/warden-fsmonitor-ran").exists());
        h.client.cancel().await.unwrap();
    }
}

/// A directory holding a `/proc` (a bystander's secret on its command line) and a tmpfs:
/// refused before anyone is asked, since a worker's world can bind it only with them;
/// the code reaches neither. A granted directory that gains such mounts later: the
/// running world never sees them, and the grant is withdrawn before the next worker.
#[tokio::test]
async fn grants_over_trees_with_proc_and_tmpfs_mounts_never_bring_them_in() {
    for who in both_modes() {
        let bystander = Bystander::start();
        let mut mounts = Mounts::default();
        let (_keep, tree) = tree_with_mounts(&mut mounts);
        let h = Harness::start_as(who, Answer::Approve, &[], "off").await;
        for access in ["read", "write"] {
            let (is_error, r) = h.grant(&tree, access).await;
            let msg = r["message"].as_str().unwrap();
            assert!(is_error, "{who:?}: {r}");
            assert!(
                msg.contains("refused without asking")
                    && msg.contains("other file systems are mounted inside it")
                    && msg.contains(&format!("{} (proc)", tree.join("proc").display()))
                    && msg.contains(&format!("{} (tmpfs)", tree.join("scratch").display())),
                "{who:?}: {msg}"
            );
        }
        assert!(h.asked().is_empty(), "{who:?}");
        let r = h.run(&submount_attack(&tree, bystander.pid())).await;
        assert_eq!(
            stdout(&r),
            "cmdline denied 2\nlisting denied 2\nscratch denied 2\n",
            "{who:?}: {r}"
        );
        // Granted clean, mounted on afterwards.
        let (_keep2, later) = shared_dir("later");
        for sub in ["proc", "scratch"] {
            std::fs::create_dir(later.join(sub)).unwrap();
            chmod(&later.join(sub), 0o777);
        }
        let (is_error, r) = h.grant(&later, "write").await;
        assert!(!is_error, "{who:?}: {r}");
        assert_eq!(stdout(&h.run("print('started')").await), "started\n");
        mounts.mount("proc", &later.join("proc"), "rw");
        mounts.mount("tmpfs", &later.join("scratch"), "mode=1777,size=1m");
        let r = h.run(&submount_attack(&later, bystander.pid())).await;
        let out = stdout(&r);
        assert!(
            out.starts_with("cmdline denied 2\nlisting DONE []\n"),
            "{who:?}: {r}"
        );
        assert!(!out.contains(&bystander.token), "{who:?}: {r}");
        // The grant is withdrawn at once, with the reason (the running world, private
        // since it was built, never sees the new mounts); the next worker is without it.
        let warnings = r["warnings"].to_string();
        assert!(
            warnings.contains("was revoked") && warnings.contains("other file systems"),
            "{who:?}: {r}"
        );
        h.call("reset_session", json!({"session": "g", "keep_files": true}))
            .await;
        let r = h.run(&submount_attack(&later, bystander.pid())).await;
        assert_eq!(
            stdout(&r),
            "cmdline denied 2\nlisting denied 2\nscratch denied 2\n",
            "{who:?}: {r}"
        );
        for scratch in [tree.join("scratch"), later.join("scratch")] {
            assert_eq!(
                std::fs::read_dir(&scratch).unwrap().count(),
                0,
                "{who:?}: the code wrote into {}",
                scratch.display()
            );
        }
        h.client.cancel().await.unwrap();
    }
}

/// Without a mount namespace (the Landlock-only fallback), nothing can be hidden or
/// left out: a git project and a directory holding mounts are refused before anyone is
/// asked, and an operator's grant that gains a mount is no longer applied (the running
/// worker, which would reach through it by path, is replaced).
#[tokio::test]
async fn without_a_world_what_cannot_be_hidden_or_left_out_is_not_granted() {
    for who in both_modes() {
        let bystander = Bystander::start();
        let mut mounts = Mounts::default();
        let (_keep, tree) = tree_with_mounts(&mut mounts);
        let (_keep2, root) = shared_dir("x");
        let proj = git_project(&root);
        let (_keep3, clean) = shared_dir("pre-approved");
        std::fs::create_dir(clean.join("proc")).unwrap();
        let data = data_dir_for(who);
        let clean_arg = clean.display().to_string();
        let mut cmd = server_command_as(
            who,
            Net::Host,
            &[("HOST_SANDBOX", "best-effort")],
            &["--allow-read", &clean_arg],
            data.path(),
        );
        let filter = crate::suite::fail_closed::no_unshare_filter();
        // SAFETY: between fork and exec only prctl/seccomp run (the program was built
        // before the fork).
        unsafe {
            cmd.pre_exec(move || seccompiler::apply_filter(&filter).map_err(std::io::Error::other));
        }
        let h = Harness::start_command(cmd, data, Answer::Approve).await;
        let read_clean = format!(
            "print(open({:?}).read())",
            clean.join("export.csv").display().to_string()
        );
        let r = h.run(&read_clean).await;
        assert!(
            r["warnings"]
                .to_string()
                .contains("'namespaces' is not enforced"),
            "{who:?}: not the fallback: {r}"
        );
        assert_eq!(stdout(&r), "pre-approved\n", "{who:?}: {r}");
        for (path, why) in [(&proj, "cannot hide"), (&tree, "Landlock")] {
            let (is_error, r) = h.grant(path, "read").await;
            let msg = r["message"].as_str().unwrap();
            assert!(is_error, "{who:?}: {r}");
            assert!(
                msg.contains("refused without asking") && msg.contains(why),
                "{who:?}: {msg}"
            );
        }
        assert!(h.asked().is_empty(), "{who:?}");
        mounts.mount("proc", &clean.join("proc"), "rw");
        let r = h.run(&submount_attack(&clean, bystander.pid())).await;
        let out = stdout(&r);
        assert!(
            out.starts_with("cmdline denied 13\nlisting denied 13\n"),
            "{who:?}: {r}"
        );
        assert!(!out.contains(&bystander.token), "{who:?}: {r}");
        let warnings = r["warnings"].to_string();
        assert!(
            warnings.contains("not applied") && warnings.contains("other file systems"),
            "{who:?}: {r}"
        );
        assert_eq!(r["worker_restarted"], true, "{who:?}: {r}");
        h.client.cancel().await.unwrap();
    }
}

/// The Docker backend binds a grant without the mounts inside it, and covers `.git` and
/// the other names in it: the person is told both; the code sees an empty `/proc` mount
/// point and an empty `.git`, and writes reach neither the tmpfs nor the repository.
#[tokio::test]
async fn a_container_leaves_out_the_mounts_inside_a_grant_and_hides_its_git_directory() {
    if !crate::suite::docker::docker_ready() {
        return;
    }
    let bystander = Bystander::start();
    let mut mounts = Mounts::default();
    let (_keep, tree) = tree_with_mounts(&mut mounts);
    let proj = git_project(&tree);
    let before = snapshot(&proj);
    let env = crate::suite::docker::docker_env(&[]);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let data = data_dir_for(As::Root);
    let cmd = server_command_as(As::Root, Net::Host, &pairs, &[], data.path());
    let h = Harness::start_command(cmd, data, Answer::Approve).await;
    let (is_error, r) = h.grant(&tree, "write").await;
    assert!(!is_error, "{r}");
    assert_eq!(
        r["mounts_left_out"],
        json!([
            format!("{} (proc)", tree.join("proc").display()),
            format!("{} (tmpfs)", tree.join("scratch").display())
        ]),
        "{r}"
    );
    assert!(h.asked()[0].contains("are not included"), "{:?}", h.asked());
    let at = |p: &str| proj.join(p).display().to_string();
    let mut code = submount_attack(&tree, bystander.pid());
    code.push_str(&attempts(&[
        ("git", format!("os.listdir({:?})", at(".git"))),
        (
            "config",
            format!("open({:?}, 'a').write('fsmonitor')", at(".git/config")),
        ),
        (
            "gitfile",
            format!("open({:?}, 'a').write('fsmonitor')", at("lib/.git")),
        ),
        (
            "bare",
            format!(
                "open({:?}, 'a').write('fsmonitor')",
                at("mirror.git/config")
            ),
        ),
    ]));
    let r = h.run(&code).await;
    let out = stdout(&r);
    assert!(
        out.starts_with("cmdline denied 2\nlisting DONE []\n"),
        "{r}"
    );
    assert!(out.contains("git DONE []\n"), "{r}");
    for name in ["config", "gitfile", "bare"] {
        assert!(out.contains(&format!("{name} denied")), "{name}: {r}");
    }
    assert!(!out.contains(&bystander.token), "{r}");
    // The tmpfs the host sees got nothing (a write landed, if at all, on the directory
    // beneath it, which is the granted file system).
    assert_eq!(std::fs::read_dir(tree.join("scratch")).unwrap().count(), 0);
    assert_eq!(snapshot(&proj), before, "the repository changed");
    h.client.cancel().await.unwrap();
}
