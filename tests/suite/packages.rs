//! `install_packages`, end to end: a real PEP 503 index (wheels this test builds, one
//! with a C extension) served over HTTPS with a test CA by an origin in a network
//! namespace of its own at a TEST-NET-3 address; pip in the installer sandbox reaches it
//! through the installer's own egress proxy; the session imports what was installed.
//! Every verdict is judged from outside: the index's own request log, the audit log, the
//! wheel files' hashes computed here.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

use super::netorigin::NetOrigin;
use super::{As, Net, Server, both_modes, stdout};

/// The index's port in its namespace.
const PORT: u16 = 8443;

/// The index tree (wheels, pages, CA, server certificate), built once per test run in a
/// directory every test user can read.
pub fn index_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("warden-index-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/wheel_index.py");
        let out = std::process::Command::new("/usr/bin/python3")
            .args([script, "build"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building the test index: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// The index served over HTTPS in a namespace of its own.
fn start_index() -> NetOrigin {
    let copy = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/wheel_index.py");
    let dir = index_dir().display().to_string();
    NetOrigin::serving(copy, PORT, move |addr| {
        let port = PORT.to_string();
        [
            "/usr/bin/python3",
            "-u",
            script,
            "serve",
            &dir,
            addr,
            &port,
            "--tls",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    })
}

/// A server whose installer reads the test index at `path` (`/simple`, `/fail/simple`).
async fn server(who: As, index: &NetOrigin, path: &str, extra: &[(&str, &str)]) -> Server {
    let url = format!("https://index.test:{PORT}{path}");
    let resolve = format!("index.test={}", index.addr);
    let ca = index_dir().join("ca.pem").display().to_string();
    let mut env = vec![
        ("HOST_SANDBOX", "require"),
        ("SANDBOX_PACKAGE_INDEX", url.as_str()),
        ("SANDBOX_EGRESS_RESOLVE", resolve.as_str()),
        ("SANDBOX_PACKAGE_CA", ca.as_str()),
    ];
    env.extend_from_slice(extra);
    Server::start_as(who, Net::Host, &env).await
}

async fn install(server: &Server, session: &str, packages: &[&str]) -> Value {
    let r = server
        .call(
            "install_packages",
            json!({"session": session, "packages": packages}),
        )
        .await
        .expect("install_packages");
    let v = r.structured_content.clone().expect("structuredContent");
    assert_eq!(r.is_error, Some(v["ok"] != true), "{v}");
    v
}

/// The SHA-256 of a file of the index, computed here.
fn sha256_of(file: &str) -> String {
    use sha2::Digest;
    let bytes = std::fs::read(index_dir().join("files").join(file)).unwrap();
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Installed from the HTTPS index through the proxy, imported by the session (the C
/// extension loads from the read-only layer under W^X), kept across a restart of the
/// interpreter, extended by a second install, never writable by the code; every wheel's
/// hash is the one computed here, and the index saw the installer's requests.
#[tokio::test]
async fn packages_come_from_the_index_and_the_session_imports_them() {
    let index = start_index();
    for who in both_modes() {
        let context = format!("{who:?}");
        let h = server(who, &index, "/simple", &[]).await;
        let v = install(&h, "p", &["wtiny", "wfast"]).await;
        assert_eq!(v["ok"], true, "{context}: {v}");
        let installed: Vec<(String, String, String)> = v["installed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["name"].as_str().unwrap().to_string(),
                    i["version"].as_str().unwrap().to_string(),
                    i["sha256"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let names: Vec<&str> = installed.iter().map(|i| i.0.as_str()).collect();
        assert_eq!(names, ["wdep", "wfast", "wtiny"], "{context}: {v}");
        assert_eq!(
            installed[2].2,
            sha256_of("wtiny-1.0-py3-none-any.whl"),
            "{context}"
        );
        assert_eq!(
            installed[0].2,
            sha256_of("wdep-1.0-py3-none-any.whl"),
            "{context}"
        );
        let seen = index.requests();
        assert!(
            seen.iter().any(|r| r.starts_with("GET /simple/wtiny/")),
            "{context}: the index saw {seen:?}"
        );
        let r = h
            .run(
                "p",
                "import wtiny, wfast\nprint(wtiny.VALUE, wfast.add(2, 3))",
            )
            .await;
        assert_eq!(stdout(&r), "42 5\n", "{context}: {r}");
        // The layer is read-only to the code, whatever it tries.
        let r = h
            .run(
                "p",
                "import os\nfor p in ['/packages/current/wtiny/__init__.py', '/packages/x']:\n    try:\n        open(p, 'w').write('VALUE = 0')\n        print('wrote', p)\n    except OSError as e:\n        print('refused', e.errno)",
            )
            .await;
        assert!(!stdout(&r).contains("wrote"), "{context}: {r}");
        // Judged from the host: the installed module on the server's disk is unchanged.
        let layer = super::find_files(h.data_dir.path(), "__init__.py");
        let modules: Vec<_> = layer
            .iter()
            .filter(|p| {
                p.display().to_string().contains("/pkg/") && p.ends_with("wtiny/__init__.py")
            })
            .collect();
        assert_eq!(modules.len(), 1, "{context}: {layer:?}");
        assert_eq!(
            std::fs::read_to_string(modules[0]).unwrap(),
            "from wdep import BASE\nVALUE = BASE + 1\n",
            "{context}"
        );
        // Another session does not see this one's packages.
        let r = h.run("other", "import wtiny").await;
        assert_eq!(r["error"]["type"], "ModuleNotFoundError", "{context}: {r}");
        // A restarted interpreter still has them; a second install adds to them.
        let reset = h
            .call("reset_session", json!({"session": "p", "keep_files": true}))
            .await
            .unwrap();
        assert_ne!(reset.is_error, Some(true), "{context}");
        let v = install(&h, "p", &["wsock==1.0"]).await;
        assert_eq!(v["ok"], true, "{context}: {v}");
        assert_eq!(
            v["requirements"],
            json!(["wtiny", "wfast", "wsock==1.0"]),
            "{context}"
        );
        let r = h
            .run(
                "p",
                "import wtiny, wfast, psutil\nprint(wtiny.VALUE + wfast.add(0, 1), psutil.VERSION)",
            )
            .await;
        assert_eq!(stdout(&r), "43 0\n", "{context}: {r}");
        let data = h.stop().await;
        let records = super::audit::records(data.path());
        let installed = records
            .iter()
            .find(|r| r["phase"] == "packages" && r["decision"] == "installed")
            .unwrap_or_else(|| panic!("{context}: no install record in {records:?}"));
        let detail = installed["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!(
                "wtiny==1.0 sha256={}",
                sha256_of("wtiny-1.0-py3-none-any.whl")
            )),
            "{context}: {detail}"
        );
        assert!(
            records.iter().any(|r| r["phase"] == "egress"
                && r["session"]
                    .as_str()
                    .unwrap_or("")
                    .contains("(install_packages)")
                && r["detail"].as_str().unwrap_or("").contains("index.test")),
            "{context}: the installer's connections are audited: {records:?}"
        );
    }
}

/// The guard judges installed modules by the same policy: a distribution that provides
/// a module the policy blocks does not make it importable.
#[tokio::test]
async fn installed_is_not_trusted_by_the_guard() {
    let index = start_index();
    let h = server(As::Root, &index, "/simple", &[("CODEGUARD", "enforce")]).await;
    let v = install(&h, "g", &["wsock", "wtiny"]).await;
    assert_eq!(v["ok"], true, "{v}");
    let r = h.run("g", "import psutil\nprint(psutil.VERSION)").await;
    assert_eq!(r["error"]["type"], "GuardBlocked", "{r}");
    let r = h.run("g", "import wtiny\nprint(wtiny.VALUE)").await;
    assert_eq!(stdout(&r), "42\n", "{r}");
    h.stop().await;
}

/// Every bad install is a clear error and leaves the layer exactly as it was: unknown
/// names and versions, a distribution with no wheel, a wheel whose hash does not match,
/// one over the package limit, requirement strings that are not requirements, an index
/// that fails, and one that hangs.
#[tokio::test]
async fn bad_installs_are_clear_errors_and_change_nothing() {
    let index = start_index();
    let h = server(
        As::Root,
        &index,
        "/simple",
        &[("SANDBOX_PACKAGE_LIMIT", "2m")],
    )
    .await;
    let v = install(&h, "b", &["wtiny"]).await;
    assert_eq!(v["ok"], true, "{v}");
    let cases: &[(&[&str], &str, &str)] = &[
        (&["wnope"], "InstallFailed", "No matching distribution"),
        (&["wtiny==9.9"], "InstallFailed", "No matching distribution"),
        (&["wsdist"], "InstallFailed", "No matching distribution"),
        (&["wbadhash"], "InstallFailed", "HASHES"),
        (&["wbig"], "PackageLimit", "SANDBOX_PACKAGE_LIMIT"),
        (
            &["wtiny; rm -rf /"],
            "InvalidArguments",
            "environment markers",
        ),
        (
            &["wtiny && id"],
            "InvalidArguments",
            "not part of a requirement",
        ),
        (
            &["--index-url=https://evil.test/simple"],
            "InvalidArguments",
            "options",
        ),
        (
            &["wtiny @ https://evil.test/x.whl"],
            "InvalidArguments",
            "direct URL",
        ),
    ];
    for (packages, kind, says) in cases {
        let v = install(&h, "b", packages).await;
        assert_eq!(v["ok"], false, "{packages:?}: {v}");
        assert_eq!(v["error"]["type"], *kind, "{packages:?}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{packages:?}: {message}");
    }
    let many: Vec<String> = (0..10_000).map(|i| format!("p{i}")).collect();
    let r = h
        .call(
            "install_packages",
            json!({"session": "b", "packages": many}),
        )
        .await
        .unwrap();
    let v = r.structured_content.unwrap();
    assert_eq!(v["error"]["type"], "InvalidArguments", "{v}");
    // Nothing of the failed installs is in the layer; the first install is all there.
    let r = h
        .run(
            "b",
            "import wtiny\nprint(wtiny.VALUE)\ntry:\n    import wbig\n    print('wbig')\nexcept ImportError:\n    print('no wbig')",
        )
        .await;
    assert_eq!(stdout(&r), "42\nno wbig\n", "{r}");
    h.stop().await;

    let h = server(As::Root, &index, "/fail/simple", &[]).await;
    let v = install(&h, "f", &["wtiny"]).await;
    assert_eq!(v["error"]["type"], "InstallFailed", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("500"),
        "{v}"
    );
    h.stop().await;

    let h = server(
        As::Root,
        &index,
        "/hang/simple",
        &[("SANDBOX_PACKAGE_TIMEOUT", "3")],
    )
    .await;
    let v = install(&h, "f", &["wtiny"]).await;
    assert_eq!(v["error"]["type"], "InstallFailed", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("within 3 s"),
        "{v}"
    );
    let r = h.run("f", "import wtiny").await;
    assert_eq!(r["error"]["type"], "ModuleNotFoundError", "{r}");
    h.stop().await;
}

/// `SANDBOX_WHEELHOUSE` installs with no network at all, the packages outlive their
/// worker's eviction, and a kept workspace keeps them; `SANDBOX_PACKAGES=deny` refuses the tool, and `ask` refuses a client that
/// cannot ask the user.
#[tokio::test]
async fn a_wheelhouse_needs_no_network_and_the_operator_decides() {
    let files = index_dir().join("files").display().to_string();
    for who in both_modes() {
        let context = format!("{who:?}");
        let h = Server::start_as(
            who,
            Net::Isolated,
            &[
                ("HOST_SANDBOX", "require"),
                ("SANDBOX_WHEELHOUSE", &files),
                ("SANDBOX_KEEP_WORKSPACES", "true"),
                ("SANDBOX_MAX_WORKERS", "1"),
                ("SANDBOX_WARM_WORKERS", "0"),
            ],
        )
        .await;
        let v = install(&h, "w", &["wtiny"]).await;
        assert_eq!(v["ok"], true, "{context}: {v}");
        let r = h.run("w", "import wtiny\nprint(wtiny.VALUE)").await;
        assert_eq!(stdout(&r), "42\n", "{context}: {r}");
        // One worker for everything: another session's call evicts this one's worker,
        // and the packages are still there for the next.
        let r = h.run("x", "print('x')").await;
        assert_eq!(stdout(&r), "x\n", "{context}: {r}");
        let r = h.run("w", "import wtiny\nprint(wtiny.VALUE)").await;
        assert_eq!(stdout(&r), "42\n", "{context}: {r}");
        assert_eq!(r["worker_restarted"], true, "{context}: {r}");
        // A kept workspace keeps its packages beside it.
        let data = h.stop().await;
        let kept = super::find_files(&data.path().join("kept"), "__init__.py");
        assert!(
            kept.iter()
                .any(|p| p.display().to_string().contains("-packages/wtiny/")),
            "{context}: {kept:?}"
        );
    }
    for (mode, kind) in [("deny", "PackagesDenied"), ("ask", "ConsentRefused")] {
        let h = Server::start(&[("SANDBOX_PACKAGES", mode), ("SANDBOX_WHEELHOUSE", &files)]).await;
        let v = install(&h, "w", &["wtiny"]).await;
        assert_eq!(v["error"]["type"], kind, "{mode}: {v}");
        h.stop().await;
    }
}

/// The Docker backend does the same: the installer is a container of the image (pip
/// picks wheels for the image's interpreter) whose only endpoint is its own proxy, and
/// the session's container binds the layer read-only.
#[tokio::test]
async fn docker_containers_install_through_the_proxy_and_bind_the_layer_read_only() {
    if !super::docker::docker_ready() {
        return;
    }
    let index = start_index();
    let url = format!("https://index.test:{PORT}/simple");
    let resolve = format!("index.test={}", index.addr);
    let ca = index_dir().join("ca.pem").display().to_string();
    let env = super::docker::docker_env(&[
        ("SANDBOX_PACKAGE_INDEX", &url),
        ("SANDBOX_EGRESS_RESOLVE", &resolve),
        ("SANDBOX_PACKAGE_CA", &ca),
    ]);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let h = Server::start_as(As::Root, Net::Host, &pairs).await;
    let v = install(&h, "d", &["wtiny", "wfast"]).await;
    assert_eq!(v["ok"], true, "{v}");
    assert!(
        index
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /simple/wfast/")),
        "{:?}",
        index.requests()
    );
    let r = h
        .run(
            "d",
            "import wtiny, wfast\nprint(wtiny.VALUE, wfast.add(2, 3))\ntry:\n    open('/packages/current/wtiny/__init__.py', 'w')\n    print('wrote')\nexcept OSError as e:\n    print('refused', e.errno)",
        )
        .await;
    assert_eq!(stdout(&r), "42 5\nrefused 30\n", "{r}");
    // pip's install step reads the image's /etc/mime.types, and so can the code.
    let r = h
        .run(
            "d",
            "import mimetypes\nprint(mimetypes.guess_type('a.csv')[0])",
        )
        .await;
    assert_eq!(stdout(&r), "text/csv\n", "{r}");
    h.stop().await;
}
