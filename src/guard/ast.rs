//! Small readers over ruff's Python AST that every check needs: the value of a
//! string literal, the name a call goes to, a keyword argument, numbers that can
//! only be numbers. Pure functions, no policy.

pub use ruff_python_ast::{
    self as py, Expr, ExprContext, Number, Operator, Pattern, Stmt, UnaryOp,
};
pub use ruff_text_size::Ranged;

/// Byte offset where `node` starts.
pub fn start<T: Ranged>(node: &T) -> usize {
    node.start().to_usize()
}

/// The value of a plain string literal (implicit concatenation included).
pub fn const_str(e: &Expr) -> Option<&str> {
    match e {
        Expr::StringLiteral(s) => Some(s.value.to_str()),
        _ => None,
    }
}

/// The name a call goes to: `f` for `f(...)`, `m` for `x.y.m(...)`.
pub fn callee_name(func: &Expr) -> Option<&str> {
    match func {
        Expr::Name(n) => Some(n.id.as_str()),
        Expr::Attribute(a) => Some(a.attr.as_str()),
        _ => None,
    }
}

/// The value of keyword argument `name`.
pub fn keyword<'e>(c: &'e py::ExprCall, name: &str) -> Option<&'e Expr> {
    c.arguments
        .keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == name))
        .map(|k| &k.value)
}

/// Whether a call unpacks `*args` or `**kwargs`, which hides what it passes.
pub fn unpacked_args(c: &py::ExprCall) -> bool {
    c.arguments
        .args
        .iter()
        .any(|a| matches!(a, Expr::Starred(_)))
        || c.arguments.keywords.iter().any(|k| k.arg.is_none())
}

/// A small non-negative integer literal.
pub fn small_int(e: &Expr, max: usize) -> Option<usize> {
    let Expr::NumberLiteral(n) = e else {
        return None;
    };
    let Number::Int(i) = &n.value else {
        return None;
    };
    i.as_usize().filter(|v| *v <= max)
}

/// A keyword value that keeps a dangerous mode off: False, None or 0.
pub fn literally_falsy(e: &Expr) -> bool {
    match e {
        Expr::BooleanLiteral(b) => !b.value,
        Expr::NoneLiteral(_) => true,
        Expr::NumberLiteral(n) => matches!(&n.value, Number::Int(i) if i.as_u64() == Some(0)),
        _ => false,
    }
}

/// An expression that can only be a number: `3`, `-1`, `1 + 2`, `int("3")`,
/// `len(x)`. A path is never spelled like this.
pub fn numeric(e: &Expr, depth: u32) -> bool {
    if depth > 16 {
        return false;
    }
    match e {
        Expr::NumberLiteral(n) => matches!(n.value, Number::Int(_)),
        Expr::BooleanLiteral(_) => true,
        Expr::UnaryOp(u) => !matches!(u.op, UnaryOp::Not) && numeric(&u.operand, depth + 1),
        Expr::BinOp(b) => {
            // `"a" * 3` is a string; a number needs a number on both sides
            // for `+`, and on either side only for the arithmetic-only ops.
            match b.op {
                Operator::Add | Operator::Mult | Operator::Mod => {
                    numeric(&b.left, depth + 1) && numeric(&b.right, depth + 1)
                }
                _ => numeric(&b.left, depth + 1) || numeric(&b.right, depth + 1),
            }
        }
        Expr::Call(c) => matches!(
            callee_name(&c.func),
            Some("int" | "len" | "abs" | "round" | "ord" | "sum" | "hash" | "id")
        ),
        _ => false,
    }
}

/// Every parameter of a function or lambda, in order.
pub fn parameters(p: &py::Parameters) -> impl Iterator<Item = &py::Parameter> {
    p.posonlyargs
        .iter()
        .chain(&p.args)
        .map(|a| &a.parameter)
        .chain(p.vararg.as_deref())
        .chain(p.kwonlyargs.iter().map(|a| &a.parameter))
        .chain(p.kwarg.as_deref())
}

/// Defaults of a function's parameters.
pub fn defaults(p: &py::Parameters) -> impl Iterator<Item = &Expr> {
    p.posonlyargs
        .iter()
        .chain(&p.args)
        .chain(&p.kwonlyargs)
        .filter_map(|a| a.default.as_deref())
}
