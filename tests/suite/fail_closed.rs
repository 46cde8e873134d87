//! A wall the kernel refuses: the server runs under a seccomp filter (installed by the
//! test before exec) that makes unshare(2) fail, so no user or network namespace can be
//! made. best-effort must say so in every result; require must refuse to run code and
//! name the wall.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use super::{As, Net, Server, both_modes, data_dir_for, server_command_as, stdout};

/// A seccomp filter under which unshare(2) fails with EPERM: no namespace can be made.
pub fn no_unshare_filter() -> BpfProgram {
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
        [(libc::SYS_unshare, vec![])].into_iter().collect();
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        // The architecture the test runs on: a filter for another one kills the server.
        TargetArch::try_from(std::env::consts::ARCH).unwrap(),
    )
    .unwrap()
    .try_into()
    .unwrap()
}

/// A server that cannot make namespaces (see the module doc), in `mode`.
pub async fn start_without_namespaces(who: As, mode: &str) -> Server {
    let data = data_dir_for(who);
    let mut cmd = server_command_as(who, Net::Host, &[("HOST_SANDBOX", mode)], &[], data.path());
    let filter = no_unshare_filter();
    // SAFETY: between fork and exec only prctl/seccomp run (apply_filter makes no
    // allocation: the program was built before the fork).
    unsafe {
        cmd.pre_exec(move || seccompiler::apply_filter(&filter).map_err(std::io::Error::other));
    }
    Server::from_command(cmd, data, who).await
}

#[tokio::test]
async fn best_effort_runs_and_reports_the_missing_wall_in_every_result() {
    for who in both_modes() {
        let server = start_without_namespaces(who, "best-effort").await;
        for _ in 0..2 {
            let r = server.run("b", "print('ran')").await;
            assert_eq!(stdout(&r), "ran\n", "{r}");
            let warnings = r["warnings"].to_string();
            for wall in ["namespaces", "world", "disk_quota"] {
                assert!(
                    warnings.contains(&format!("sandbox wall '{wall}' is not enforced")),
                    "{wall}: {r}"
                );
            }
            // Without a world the code runs in its host directory, confined by Landlock.
            assert_ne!(r["workspace"], "/workspace", "{r}");
        }
        // The other walls still hold.
        let r = server
            .run(
                "b",
                "try:\n    open('/etc/passwd')\nexcept OSError as e:\n    print(e.errno)",
            )
            .await;
        assert_eq!(stdout(&r), "13\n");
        server.stop().await;
    }
}

#[tokio::test]
async fn require_refuses_to_run_anything_and_names_the_wall() {
    for who in both_modes() {
        let server = start_without_namespaces(who, "require").await;
        let raw = server
            .call(
                "execute_python",
                serde_json::json!({"code": "print('must not run')"}),
            )
            .await
            .unwrap();
        assert_eq!(raw.is_error, Some(true));
        let r = raw.structured_content.unwrap();
        assert_eq!(r["stdout"], "", "{r}");
        assert_eq!(r["error"]["type"], "SandboxRefused", "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("namespaces"),
            "{r}"
        );
        server.stop().await;
    }
}
