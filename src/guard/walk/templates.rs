//! Template engines that walk attributes (jinja's `{{ x.__init__.__globals__ }}`).
//!
//! Outside jinja's sandbox, a template expression reads any attribute of
//! what it is given, and `x[name]` falls back to `getattr(x, name)` when
//! `name` is a string. So a literal template handed to an unsandboxed engine
//! is checked like code: every `.name` and every quoted name must be an
//! attribute the guard allows, a subscript must be a plain literal, and the
//! `attr` filter must name a literal. Every other string that looks like a
//! template (it holds `{{` or `{%`) is checked for interpreter internals,
//! whatever will render it.

use super::super::names::nfkc;
use super::super::policy::Capability;
use super::Walker;

/// The expression parts of a template: the insides of `{{ }}` and `{% %}`.
fn blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(['{']) {
        let after = &rest[open..];
        let close = if after.starts_with("{{") {
            "}}"
        } else if after.starts_with("{%") {
            "%}"
        } else {
            rest = &rest[open + 1..];
            continue;
        };
        let inner = &after[2..];
        match inner.find(close) {
            Some(end) => {
                out.push(&inner[..end]);
                rest = &inner[end + 2..];
            }
            None => {
                out.push(inner);
                break;
            }
        }
    }
    out
}

/// What one template expression does that the guard must judge.
#[derive(Debug, Default)]
struct Scan<'t> {
    /// `.name` attribute reads.
    attributes: Vec<&'t str>,
    /// Quoted strings (jinja reads `x['name']` as an attribute too).
    quoted: Vec<&'t str>,
    /// A subscript whose key is computed, or an `attr` filter with a
    /// computed name.
    computed: bool,
}

fn scan(expr: &str) -> Scan<'_> {
    let bytes = expr.as_bytes();
    let mut s = Scan::default();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' | b'"' => {
                let quote = bytes[i];
                let start = i + 1;
                let end = expr[start..]
                    .find(quote as char)
                    .map_or(expr.len(), |p| start + p);
                s.quoted.push(&expr[start..end]);
                i = end + 1;
            }
            b'.' => {
                let start = i + 1;
                let end = ident_end(expr, start);
                if end > start {
                    s.attributes.push(&expr[start..end]);
                }
                i = end.max(start);
            }
            b'[' => {
                let start = i + 1;
                let end = expr[start..].find(']').map_or(expr.len(), |p| start + p);
                if !plain_key(expr[start..end].trim()) {
                    s.computed = true;
                }
                i = start;
            }
            _ if expr[i..].starts_with("attr(") && (i == 0 || !is_ident(bytes[i - 1])) => {
                let arg = expr[i + 5..].trim_start();
                if !arg.starts_with(['\'', '"']) {
                    s.computed = true;
                }
                i += 5;
            }
            _ => i += 1,
        }
    }
    s
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

fn ident_end(text: &str, start: usize) -> usize {
    text[start..]
        .char_indices()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
        .map_or(text.len(), |(p, _)| start + p)
}

/// A subscript key that is one literal: a number, or one quoted string.
fn plain_key(key: &str) -> bool {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'-' || b == b':')
    {
        return true;
    }
    let quoted = |q: char| {
        key.len() >= 2
            && key.starts_with(q)
            && key.ends_with(q)
            && !key[1..key.len() - 1].contains(q)
    };
    quoted('\'') || quoted('"')
}

impl Walker<'_> {
    /// A literal template handed to an unsandboxed engine.
    pub(super) fn template_literal(&mut self, cap: &Capability, text: &str, offset: usize) {
        for block in blocks(text) {
            let s = scan(block);
            for name in s.attributes.iter().chain(&s.quoted) {
                let name = nfkc(name).into_owned();
                if let Some(problem) = self.attr_problem(&name) {
                    self.report(
                        &cap.rule,
                        &cap.category,
                        format!("the template reads an attribute: {}", problem.why),
                        offset,
                    );
                }
            }
            if s.computed {
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!(
                        "`{}`: a template subscript or `attr` filter with a computed name reads any attribute; \
                         use literal keys, or jinja2.sandbox.SandboxedEnvironment",
                        cap.name
                    ),
                    offset,
                );
            }
        }
    }

    /// Any string that looks like a template: interpreter internals in its
    /// expressions are refused whatever engine renders it.
    pub(super) fn template_string(&mut self, value: &str, offset: usize) {
        if !(value.contains("{{") || value.contains("{%")) {
            return;
        }
        for block in blocks(value) {
            // `{{0.__class__}}` in a str.format template is an escaped brace
            // around a positional field, not a template expression.
            if block.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
                continue;
            }
            let s = scan(block);
            for name in s.attributes.iter().chain(&s.quoted) {
                let name = nfkc(name).into_owned();
                if let Some(problem) = self.attr_problem(&name)
                    && problem.rule == "internals_attribute"
                {
                    self.report(
                        "template_field",
                        "template",
                        format!("a template expression reads an attribute: {}", problem.why),
                        offset,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_blocks_attributes_and_computed_keys() {
        assert_eq!(
            blocks("a {{ x.y }} b {% if z %} c"),
            vec![" x.y ", " if z "]
        );
        let s = scan(" x.__init__.__globals__['os'] ");
        assert_eq!(s.attributes, vec!["__init__", "__globals__"]);
        assert_eq!(s.quoted, vec!["os"]);
        assert!(!s.computed);
        assert!(scan(" x[k] ").computed);
        assert!(scan(" x['__cla' ~ 'ss__'] ").computed);
        assert!(scan(" x|attr(name) ").computed);
        assert!(!scan(" x|attr('total') ").computed);
        assert!(!scan(" rows[0].name ").computed);
        assert!(blocks("{{ unclosed").len() == 1);
        assert!(blocks("plain {text}").is_empty());
    }
}
