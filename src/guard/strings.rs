//! String-literal helpers shared by the walker: folding constant string
//! expressions ("../" * 16 + "etc/passwd", "/".join(["", "etc"]),
//! f-string text) into the value the program will compute, and reading the
//! attribute paths out of `str.format` fields ("{0.__class__}").

use super::ast::{Expr, Operator, py, small_int};

/// Stand-in for an f-string replacement field whose value is unknown.
pub const HOLE: char = '\u{FFFC}';

const MAX_FOLD_LEN: usize = 8 * 1024;

/// Bytes all folds of one check may produce together, so that hostile
/// input (`("a" * 4096 + "b" * 4096) * 2 + x` repeated) costs linear time.
pub const FOLD_BUDGET: usize = 2 * 1024 * 1024;
const MAX_FOLD_DEPTH: u32 = 64;
const MAX_REPEAT: usize = 4096;

/// Whether `e` is an expression [`fold`] may turn into one string.
pub fn is_composite(e: &Expr) -> bool {
    match e {
        Expr::BinOp(b) => matches!(b.op, Operator::Add | Operator::Mult),
        Expr::FString(_) => true,
        Expr::Call(c) => join_call(c).is_some(),
        _ => false,
    }
}

/// The string a constant expression evaluates to, if it is one the guard can
/// compute cheaply (bounded in size and depth).
/// `budget` is decremented by the bytes produced, success or not; at zero
/// nothing more is folded.
pub fn fold(e: &Expr, budget: &mut usize) -> Option<String> {
    if *budget == 0 {
        return None;
    }
    let mut out = String::new();
    let ok = fold_into(e, &mut out, 0) && out.len() <= *budget;
    *budget = budget.saturating_sub(out.len().max(1));
    ok.then_some(out)
}

fn fold_into(e: &Expr, out: &mut String, depth: u32) -> bool {
    if depth > MAX_FOLD_DEPTH || out.len() > MAX_FOLD_LEN {
        return false;
    }
    let ok = fold_step(e, out, depth);
    ok && out.len() <= MAX_FOLD_LEN
}

fn fold_step(e: &Expr, out: &mut String, depth: u32) -> bool {
    match e {
        Expr::StringLiteral(s) => {
            out.push_str(s.value.to_str());
            true
        }
        Expr::BytesLiteral(b) => {
            let bytes: Vec<u8> = b.value.bytes().collect();
            out.push_str(&String::from_utf8_lossy(&bytes));
            true
        }
        Expr::BinOp(b) if matches!(b.op, Operator::Add) => {
            fold_into(&b.left, out, depth + 1) && fold_into(&b.right, out, depth + 1)
        }
        Expr::BinOp(b) if matches!(b.op, Operator::Mult) => {
            let (text, count) = match (
                small_int(&b.left, MAX_REPEAT),
                small_int(&b.right, MAX_REPEAT),
            ) {
                (None, Some(n)) => (&b.left, n),
                (Some(n), None) => (&b.right, n),
                _ => return false,
            };
            let mut piece = String::new();
            if !fold_into(text, &mut piece, depth + 1)
                || out.len() + piece.len().saturating_mul(count) > MAX_FOLD_LEN
            {
                return false;
            }
            out.push_str(&piece.repeat(count));
            true
        }
        Expr::FString(f) => {
            for part in f.value.iter() {
                match part {
                    py::FStringPart::Literal(l) => out.push_str(&l.value),
                    py::FStringPart::FString(f) => {
                        for element in &f.elements {
                            match element {
                                py::InterpolatedStringElement::Literal(l) => out.push_str(&l.value),
                                py::InterpolatedStringElement::Interpolation(_) => out.push(HOLE),
                            }
                        }
                    }
                }
            }
            true
        }
        Expr::Call(c) => {
            let Some((sep, items)) = join_call(c) else {
                return false;
            };
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                if !fold_into(item, out, depth + 1) {
                    return false;
                }
            }
            true
        }
        _ => false,
    }
}

/// `"sep".join([a, b, ...])` with a literal list or tuple.
fn join_call(c: &py::ExprCall) -> Option<(&str, &[Expr])> {
    let Expr::Attribute(attr) = c.func.as_ref() else {
        return None;
    };
    let args = &c.arguments;
    if attr.attr.as_str() != "join" || args.args.len() != 1 || !args.keywords.is_empty() {
        return None;
    }
    let Expr::StringLiteral(sep) = attr.value.as_ref() else {
        return None;
    };
    match &args.args[0] {
        Expr::List(l) => Some((sep.value.to_str(), l.elts.as_slice())),
        Expr::Tuple(t) => Some((sep.value.to_str(), t.elts.as_slice())),
        _ => None,
    }
}

/// Every attribute name used in a `str.format` field path of `s`:
/// "{0.__class__.__base__}" yields `__class__` and `__base__`. Nested fields
/// inside format specs are found too, because every `{` is treated as the
/// start of a field.
pub fn format_field_attrs(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    if !s.contains('{') || !s.contains('.') {
        return out;
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'{' {
            i += 1;
            continue;
        }
        if bytes.get(i + 1) == Some(&b'{') {
            i += 2;
            continue;
        }
        let start = i + 1;
        let end = s[start..]
            .find(['}', '!', ':', '{'])
            .map_or(s.len(), |p| start + p);
        field_path_attrs(&s[start..end], &mut out);
        i = end.max(start);
    }
    out
}

/// Attribute names in one field path (`0.a[key].b` yields `a` and `b`).
pub fn field_path_attrs<'s>(field: &'s str, out: &mut Vec<&'s str>) {
    let mut rest = field;
    // Skip the argument name or index.
    let first = rest.find(['.', '[']).unwrap_or(rest.len());
    rest = &rest[first..];
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            out.push(&after[..end]);
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').map_or(after.len(), |p| p + 1);
            rest = &after[end..];
        } else {
            break;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn expr(src: &str) -> Expr {
        *ruff_python_parser::parse_expression(src)
            .unwrap()
            .into_syntax()
            .body
    }

    fn fold(e: &Expr) -> Option<String> {
        super::fold(e, &mut FOLD_BUDGET.clone())
    }

    #[test]
    fn folds_concatenation_repetition_join_and_fstrings() {
        assert_eq!(
            fold(&expr("'../' * 3 + 'etc/passwd'")).as_deref(),
            Some("../../../etc/passwd")
        );
        assert_eq!(fold(&expr("2 * 'ab'")).as_deref(), Some("abab"));
        assert_eq!(
            fold(&expr("'/'.join(['', 'etc', 'passwd'])")).as_deref(),
            Some("/etc/passwd")
        );
        assert_eq!(
            fold(&expr("f'/home/{user}/.ssh'")),
            Some(format!("/home/{HOLE}/.ssh"))
        );
        assert_eq!(
            fold(&expr("b'/etc/' + b'shadow'")).as_deref(),
            Some("/etc/shadow")
        );
    }

    #[test]
    fn refuses_what_it_cannot_compute_or_what_is_too_big() {
        assert_eq!(fold(&expr("x + 'a'")), None);
        assert_eq!(fold(&expr("'a' * 100000000")), None);
        assert_eq!(fold(&expr("'/'.join(parts)")), None);
        assert_eq!(fold(&expr("'a' * -1")), None);
        assert!(is_composite(&expr("'a' + 'b'")));
        assert!(!is_composite(&expr("'a' - 'b'")));
    }

    #[test]
    fn the_budget_bounds_total_work() {
        let e = expr("'a' * 4000 + 'b'");
        let mut budget = 10_000;
        assert!(super::fold(&e, &mut budget).is_some());
        assert!(super::fold(&e, &mut budget).is_some());
        assert!(super::fold(&e, &mut budget).is_none());
        assert_eq!(budget, 0);
        assert!(super::fold(&e, &mut budget).is_none());
    }

    #[test]
    fn format_fields() {
        assert_eq!(
            format_field_attrs("{0.__class__.__base__}"),
            vec!["__class__", "__base__"]
        );
        assert_eq!(
            format_field_attrs("{x[a.b].c!r:>{y.__dict__}}"),
            vec!["c", "__dict__"]
        );
        assert!(format_field_attrs("{{0.__class__}}").is_empty());
        assert!(format_field_attrs("total={total:.2f}").is_empty());
        assert!(format_field_attrs("{\"json\": 1.5}").is_empty());
        for odd in ["{", "{.", "{0.", "{0[", "{0[.}", "}{.a"] {
            let _ = format_field_attrs(odd);
        }
    }
}
