//! The benign corpus as bench input: ordinary analysis code, in whole files.

use std::path::{Path, PathBuf};

/// Whole files of `tests/corpus/benign` in name order, repeated until there are at
/// least `n` lines (whole files only, so every statement stays complete), each line
/// prefixed with `indent`.
pub fn benign_lines(n: usize, indent: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/benign");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    let texts: Vec<String> = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut out = String::new();
    let mut lines = 0;
    for text in texts.iter().cycle() {
        for line in text.lines() {
            out.push_str(indent);
            out.push_str(line);
            out.push('\n');
            lines += 1;
        }
        if lines >= n {
            break;
        }
    }
    out
}
