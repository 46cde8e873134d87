//! Ordinary analysis code must run and print exactly what it should (false positives,
//! from the guard or the sandbox, are bugs too).

use super::{Server, corpus, sandbox_python_has, stdout};

#[tokio::test]
async fn every_benign_snippet_prints_its_expected_line() {
    // The full stack: the guard enforcing in front of the sandbox.
    let server = Server::start(&[("CODEGUARD", "enforce")]).await;
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
            failures.push(format!("{name}: the guard objected: {}", r["guard"]));
        }
        if r["status"] != "ok" || stdout(&r).trim_end() != expected {
            failures.push(format!("{name}: expected {expected:?}, got {r}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    server.stop().await;
}
