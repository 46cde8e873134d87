//! Human-readable verdicts for `warden check FILE...`: one header line per
//! file, then one compiler-style line per finding with its source line.

use std::fmt::Write;

use super::{Decision, Verdict};

/// Renders `verdict` for the file at `path`, ending with a newline.
pub fn render_human(path: &str, verdict: &Verdict) -> String {
    let mut out = String::new();
    let status = match (verdict.decision, verdict.retryable_error) {
        (Decision::Blocked, true) => "NOT CHECKED (fix the code and retry)",
        (Decision::Blocked, false) => "BLOCKED",
        (Decision::Restricted, _) => "RESTRICTED (runs, with warnings)",
        (Decision::Allowed, _) => "ALLOWED",
    };
    let n = verdict.findings.len();
    let plural = if n == 1 { "" } else { "s" };
    let _ = writeln!(out, "{path}: {status} - {n} finding{plural}");
    for f in &verdict.findings {
        let mark = if f.tripwire { " TRIPWIRE" } else { "" };
        let _ = writeln!(
            out,
            "  {path}:{}:{}: [{}/{}]{mark} {}",
            f.line, f.col, f.rule, f.category, f.message
        );
        if !f.snippet.is_empty() {
            let _ = writeln!(out, "      | {}", f.snippet);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::guard::Finding;

    #[test]
    fn renders_header_and_findings() {
        let v = Verdict {
            decision: Decision::Blocked,
            retryable_error: false,
            findings: vec![Finding {
                rule: "blocked_module".into(),
                category: "module".into(),
                message: "importing `os` is not allowed".into(),
                line: 3,
                col: 1,
                snippet: "import os".into(),
                tripwire: false,
            }],
            unjudged_modules: Vec::new(),
        };
        let text = render_human("a.py", &v);
        assert!(text.starts_with("a.py: BLOCKED - 1 finding\n"));
        assert!(text.contains("a.py:3:1: [blocked_module/module] importing `os`"));
        assert!(text.contains("| import os"));
        let ok = Verdict {
            decision: Decision::Allowed,
            retryable_error: false,
            findings: vec![],
            unjudged_modules: Vec::new(),
        };
        assert_eq!(render_human("b.py", &ok), "b.py: ALLOWED - 0 findings\n");
    }
}
