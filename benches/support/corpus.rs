//! The benign corpus as bench input: ordinary analysis code, in whole files.

use std::path::{Path, PathBuf};

/// Whole files of `tests/corpus/benign` in name order, repeated until there are at
/// least `n` lines (whole files only, so every statement stays complete), each line
/// prefixed with `indent`. Each file is the body of a function of its own: the cells
/// are separate programs, and one's names (a matrix `S`) are not another's imports
/// (`from sympy import S`), which one scope would make ambiguous to the guard.
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
    for (i, text) in texts.iter().cycle().enumerate() {
        out.push_str(&format!("{indent}def _cell_{i}():\n"));
        for line in text.lines() {
            out.push_str(indent);
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
            lines += 1;
        }
        out.push_str(&format!("{indent}    pass\n"));
        if lines >= n {
            break;
        }
    }
    out
}
