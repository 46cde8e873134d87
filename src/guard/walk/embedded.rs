//! Code the program hands to an evaluator (a pandas query, a string
//! annotation, a sympy expression): checked as if it were part of the source.

use super::super::depth;
use super::super::names::nfkc;
use super::super::policy::is_dunder;
use super::{Walker, parse_suite};

/// How many code strings may nest inside each other (a query string holding
/// a query string ...). Real code never nests them at all.
const MAX_EMBED_DEPTH: u32 = 4;

/// Code strings longer than this are refused rather than parsed: a query or
/// an annotation is one short expression.
const MAX_EMBEDDED_LEN: usize = 64 * 1024;

impl Walker<'_> {
    /// Checks `code`, a string the program hands to an evaluator (a pandas
    /// query, a string annotation), as if it were part of the source. Every
    /// finding points at the string literal at `offset`.
    pub(super) fn embedded_code(&mut self, code: &str, offset: usize, what: &str) {
        if self.embed_depth >= MAX_EMBED_DEPTH || code.len() > MAX_EMBEDDED_LEN {
            self.report(
                "code_string",
                "code",
                format!("the {what} is too long or nests code strings too deeply to be checked"),
                offset,
            );
            return;
        }
        // pandas rewrites `@name` (a local variable) and `backquoted names`
        // before it parses; strip both so the rest parses as Python.
        let text = pandas_preparse(code);
        let limits = depth::DepthLimits {
            max_nesting: self.policy.limits.max_nesting_depth,
            max_chain: self.policy.limits.max_expression_chain,
        };
        // On the caller's stack only one shallow code string may be parsed.
        if self.small_stack
            && (self.embed_depth > 0
                || depth::scan(&text, depth::small_stack_limits(limits)).is_err())
        {
            self.needs_big_stack = true;
            return;
        }
        if depth::scan(&text, limits).is_err() {
            self.report(
                "code_string",
                "code",
                format!("the {what} nests too deeply to be checked"),
                offset,
            );
            return;
        }
        let Ok(body) = parse_suite(&text) else {
            // Python cannot parse it, so neither can the evaluator; SQL and
            // prose end up here. Interpreter internals are still refused.
            self.scan_identifiers(code, offset, what);
            return;
        };
        let mut sub = Walker::new(
            self.policy,
            self.roots,
            self.fold_budget,
            self.embed_depth + 1,
        );
        // Strings inside a forward reference are forward references too.
        sub.in_annotation = self.in_annotation;
        sub.small_stack = self.small_stack;
        sub.body(&body.body);
        sub.forwarding_references(&[&body.body]);
        sub.judge_by_name();
        self.fold_budget = sub.fold_budget;
        self.needs_big_stack |= sub.needs_big_stack;
        for f in sub.finish() {
            let message = format!("in the {what}: {}", f.message);
            self.push(&f.rule, &f.category, message, offset, f.tripwire, f.action);
        }
    }

    /// Dunder and frame/code names spelled anywhere in a code string that
    /// does not parse.
    fn scan_identifiers(&mut self, code: &str, offset: usize, what: &str) {
        let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        for word in words.filter(|w| !w.is_empty()) {
            let word = nfkc(word);
            let internal = (is_dunder(&word) && !self.policy.dunder_allowed(&word))
                || self.policy.internals.contains(word.as_ref());
            if internal {
                self.report(
                    "code_string",
                    "code",
                    format!("the {what} names interpreter internals (`{word}`)"),
                    offset,
                );
                return;
            }
        }
    }
}

/// pandas' own rewrites before it parses a query: `@name` is a local
/// variable and `` `a b` `` a column name. Each line is stripped, as
/// pd.eval does for multi-line expressions.
fn pandas_preparse(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    for (i, line) in code.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut in_backticks = false;
        for ch in line.trim().chars() {
            match ch {
                '`' => {
                    if !in_backticks {
                        out.push('_');
                    }
                    in_backticks = !in_backticks;
                }
                _ if in_backticks => {}
                '@' => {}
                _ => out.push(ch),
            }
        }
    }
    out
}
