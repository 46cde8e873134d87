#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The manual holds together: the README stays one screenful per question (under 300
//! lines), neither it nor the book speaks of the project's history (work sessions, issue
//! numbers, branches), every link between them and into the repository lands on a file
//! that exists and, with a `#fragment`, on one of its headings, every chapter is in the
//! book's table of contents, and every client example parses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// README.md and every page of the book.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

#[test]
fn the_readme_is_under_300_lines() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 300,
        "README.md has {lines} lines; move depth into docs/"
    );
}

/// Words that name the project's history rather than the product.
const HISTORY: &[&str] = &[
    r"(?i)\bwork sessions?\b",
    r"(?i)\bsession \d+\b",
    r"(?i)\bround \d+\b",
    r"(?i)\bissues? #?\d+",
    r"(?i)\bPR #?\d+",
    r"(^|[\s(])#\d{1,4}\b",
    r"\b(feature|fix|wip|topic)/[a-z0-9-]+",
    r"\borigin/[a-z]",
];

#[test]
fn no_page_speaks_of_the_projects_history() {
    let patterns: Vec<regex::Regex> = HISTORY
        .iter()
        .map(|p| regex::Regex::new(p).unwrap())
        .collect();
    let mut found = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in text.lines().enumerate() {
            for p in &patterns {
                if let Some(m) = p.find(line) {
                    found.push(format!("{}:{}: {:?}", page.display(), n + 1, m.as_str()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "history in the manual:\n{}",
        found.join("\n")
    );
}

/// A heading's anchor as mdBook and GitHub make it: lowercase, punctuation dropped,
/// spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of a page's Markdown links (`[text](target)`), outside code.
fn links(text: &str) -> Vec<String> {
    let re = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Inline code is not a link.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        out.extend(re.captures_iter(&plain).map(|c| c[1].to_string()));
    }
    out
}

#[test]
fn every_link_lands_on_a_file_and_a_heading() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((f, frag)) => (f, Some(frag)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if let Some(fragment) = fragment
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&resolved).contains(fragment)
            {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "dead links:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_in_the_table_of_contents() {
    let summary = std::fs::read_to_string(Path::new(ROOT).join("docs/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    for page in pages().into_iter().skip(1) {
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        if name == "SUMMARY.md" {
            continue;
        }
        assert!(
            listed.contains(&name),
            "docs/{name} is not in docs/SUMMARY.md"
        );
    }
}

#[test]
fn every_client_example_parses() {
    let mut stack = vec![Path::new(ROOT).join("examples")];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path).unwrap();
                serde_json::from_str::<serde_json::Value>(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                seen += 1;
            }
        }
    }
    assert!(seen >= 8, "{seen} examples");
}

/// `tools/bench-table.py` turns bench output into the performance chapter's tables: one
/// section per bench in the order run, each measurement a row, each target a line.
#[test]
fn bench_output_becomes_the_performance_tables() {
    let log = [
        "   Compiling warden",
        "     Running benches/egress.rs (target/release/deps/egress-1)",
        "egress proxy: release build",
        "through the proxy: bulk download               n=2     p50=   23.66 ms p95=   23.66 ms p99=   23.66 ms | 1.00× baseline (23.74 ms) | -",
        "  20 MB: 1.00× the direct download; target ≤ 1.1×",
        "     Running benches/guard.rs (target/release/deps/guard-2)",
        "guard, 20 lines                                n=9     p50=    0.02 ms p95=    0.03 ms p99=    0.03 ms | - | 0.30× native (0.0700 ms)",
    ]
    .join("\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.log");
    std::fs::write(&path, log).unwrap();
    let out = std::process::Command::new("/usr/bin/python3")
        .arg(Path::new(ROOT).join("tools/bench-table.py"))
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        table,
        "_A full run._\n\n### `cargo bench --bench egress`\n\n\
| measurement | n | p50 | p95 | vs baseline | vs native |\n|---|---|---|---|---|---|\n\
| through the proxy: bulk download | 2 | 23.66 ms | 23.66 ms | 1.00× baseline (23.74 ms) | — |\n\n\
- 20 MB: 1.00× the direct download; target ≤ 1.1×\n\n\
### `cargo bench --bench guard`\n\n\
| measurement | n | p50 | p95 | vs baseline | vs native |\n|---|---|---|---|---|---|\n\
| guard, 20 lines | 9 | 0.02 ms | 0.03 ms | — | 0.30× native (0.0700 ms) |\n"
    );
}
