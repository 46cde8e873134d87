//! Ordinary analysis code must run and print exactly what it should (false positives,
//! from the guard or the sandbox, are bugs too).

use super::{Server, corpus, sandbox_python_has, stdout};

#[tokio::test]
async fn every_benign_snippet_prints_its_expected_line() {
    for who in super::both_modes() {
        // The full stack: the guard enforcing in front of the sandbox.
        let server = Server::start_as(who, super::Net::Host, &[("CODEGUARD", "enforce")]).await;
        let mut files: Vec<_> = std::fs::read_dir(corpus("benign"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "py"))
            .collect();
        files.sort();
        assert!(files.len() >= 30, "benign corpus missing");
        let mut failures = Vec::new();
        for (i, path) in files.iter().enumerate() {
            let code = std::fs::read_to_string(path).unwrap();
            let expected = code
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# expect: "))
                .expect("expect line")
                .to_string();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let needs = if code.contains("import pandas") {
                Some("pandas")
            } else if code.contains("import numpy") {
                Some("numpy")
            } else {
                None
            };
            if let Some(module) = needs
                && !sandbox_python_has(module)
            {
                eprintln!("skipping {name}: {module} is not installed for the sandbox's Python");
                continue;
            }
            // A fresh session (fresh workspace) per snippet, as the corpus asks.
            let r = server.run(&format!("benign{i}"), &code).await;
            if r["guard"]["decision"] != "allowed" {
                failures.push(format!(
                    "{who:?} {name}: the guard objected: {}",
                    r["guard"]
                ));
            }
            if r["status"] != "ok" || stdout(&r).trim_end() != expected {
                failures.push(format!("{who:?} {name}: expected {expected:?}, got {r}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        server.stop().await;
    }
}

/// Finding 8: matplotlib from Debian's /usr/bin/python3 could not read its own data.
/// A savefig comes back as an image, with the server as root and as the login user.
#[tokio::test]
async fn a_matplotlib_savefig_returns_an_image() {
    if !sandbox_python_has("matplotlib") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI installs Debian's python3-matplotlib"
        );
        eprintln!("skipping: matplotlib is not installed for /usr/bin/python3");
        return;
    }
    for who in super::both_modes() {
        let server = Server::start_as(who, super::Net::Host, &[("CODEGUARD", "enforce")]).await;
        let code = "import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 6, 50)\nplt.plot(x, np.sin(x))\nplt.title('sine')\nplt.savefig('plot.png')\nprint('saved')";
        let raw = server
            .call(
                "execute_python",
                serde_json::json!({"code": code, "session": "mpl"}),
            )
            .await
            .unwrap();
        let r = raw.structured_content.clone().unwrap();
        assert_eq!(stdout(&r), "saved\n", "{who:?}: {r}");
        let image = raw
            .content
            .iter()
            .find_map(|c| c.as_image().cloned())
            .unwrap_or_else(|| panic!("{who:?}: no image content: {raw:?}"));
        assert_eq!(image.mime_type, "image/png");
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD
            .decode(&image.data)
            .unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{who:?}: not a PNG");
        // matplotlib's caches went to the private /tmp, not into the workspace.
        let files = super::file_paths(&r);
        assert_eq!(files, ["plot.png"], "{who:?}: {r}");
        server.stop().await;
    }
}
