//! Classes whose attribute names are chosen at run time, and the machinery
//! that reads attributes by those names later:
//!
//! * `type(name, bases, namespace)` with a namespace the guard cannot read,
//!   and metaclasses (which rewrite a class namespace, or make
//!   `isinstance` and so `case C(x)` accept any object);
//! * field names of a class body (`gi_frame: int` in a dataclass becomes a
//!   `__match_args__` entry that `case D(f)` reads);
//! * `@f.register` without a type, where singledispatch evaluates the
//!   function's annotations as code (a string annotation built at run time
//!   is code the guard never saw).

use super::super::ast::{Expr, callee_name, const_str, py, start};
use super::super::names::nfkc;
use super::{MATCH_ARGS, Walker};

/// Builtin types an annotation may name without an import.
const BUILTIN_TYPES: &[&str] = &[
    "int",
    "float",
    "complex",
    "str",
    "bytes",
    "bytearray",
    "bool",
    "list",
    "dict",
    "tuple",
    "set",
    "frozenset",
    "object",
    "type",
    "range",
    "slice",
    "memoryview",
    "Exception",
    "BaseException",
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
];

impl Walker<'_> {
    /// `type("A", bases, ns)` and `type.__new__(M, "A", bases, ns)`.
    pub(super) fn class_factory_call(&mut self, c: &py::ExprCall) {
        let args = &c.arguments.args;
        let (bases, ns) = match c.func.as_ref() {
            Expr::Name(n) if n.id.as_str() == "type" && args.len() == 3 => (&args[1], &args[2]),
            Expr::Attribute(a)
                if a.attr.as_str() == "__new__"
                    && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "type")
                    && args.len() == 4 =>
            {
                (&args[2], &args[3])
            }
            _ => return,
        };
        let offset = start(c);
        if self.bases_make_metaclass(std::slice::from_ref(bases)) {
            self.report(
                "reflection",
                "reflection",
                "`type(...)` builds a metaclass here; metaclasses rewrite class namespaces and decide \
                 what `isinstance` (and so `case C(x)`) accepts"
                    .into(),
                offset,
            );
        }
        let Expr::Dict(d) = ns else {
            self.report(
                "reflection",
                "reflection",
                "`type(name, bases, namespace)` with a namespace the guard cannot read sets attributes \
                 by computed names; write a class statement"
                    .into(),
                offset,
            );
            return;
        };
        for item in &d.items {
            match item.key.as_ref().and_then(const_str) {
                Some(key) => self.definition(key, start(item.key.as_ref().unwrap_or(ns))),
                None => self.report(
                    "reflection",
                    "reflection",
                    "a class namespace with a computed key sets an attribute by a computed name"
                        .into(),
                    offset,
                ),
            }
        }
    }

    /// Whether a class with these bases is a metaclass (`class M(type)`,
    /// `class M(ABCMeta)`, `class M(type(x))`, `type("M", (type(x),), {})`).
    pub(super) fn bases_make_metaclass(&self, bases: &[Expr]) -> bool {
        let named = |e: &Expr| {
            callee_name(e).is_some_and(|n| {
                let n = nfkc(n);
                n == "type" || self.policy.metaclasses.contains(n.as_ref())
            })
        };
        let type_of = |e: &Expr| matches!(e, Expr::Call(c) if callee_name(&c.func) == Some("type"));
        bases.iter().any(|b| match b {
            Expr::Tuple(t) => t.elts.iter().any(|e| type_of(e) || named(e)),
            other => type_of(other) || named(other),
        })
    }

    /// A class statement: metaclasses are refused.
    pub(super) fn class_bases(&mut self, c: &py::StmtClassDef, offset: usize) {
        let Some(args) = &c.arguments else { return };
        if self.bases_make_metaclass(&args.args) {
            self.report(
                "reflection",
                "reflection",
                format!(
                    "`class {}` is a metaclass; metaclasses rewrite class namespaces and decide what \
                     `isinstance` (and so `case C(x)`) accepts",
                    c.name.as_str()
                ),
                offset,
            );
        }
    }

    /// `name: T` in a class body is a field name that dataclasses and
    /// `__match_args__` turn into attribute reads.
    pub(super) fn class_field(&mut self, target: &Expr, offset: usize) {
        if !self.in_class_body {
            return;
        }
        if let Expr::Name(n) = target {
            let name = nfkc(n.id.as_str()).into_owned();
            if name != MATCH_ARGS {
                self.check_attr_name(&name, offset, "class field");
            }
        }
    }

    /// `@f.register` on a function: singledispatch evaluates its annotations.
    pub(super) fn dispatch_registration(&mut self, f: &py::StmtFunctionDef, offset: usize) {
        let bare_register = f
            .decorator_list
            .iter()
            .any(|d| matches!(&d.expression, Expr::Attribute(a) if a.attr.as_str() == "register"));
        if !bare_register {
            return;
        }
        let plain = super::super::ast::parameters(&f.parameters)
            .filter_map(|p| p.annotation.as_deref())
            .all(|a| self.plain_type(a, 0));
        if !plain {
            self.report(
                "reflection",
                "reflection",
                "`@f.register` without a type makes singledispatch evaluate the annotations, and one of \
                 them is not a type the guard can read; register the type explicitly: `@f.register(T)`"
                    .into(),
                offset,
            );
        }
    }

    /// A type expression the guard can read: a builtin type, a class or
    /// import of this code, attributes of those, subscripts and unions.
    fn plain_type(&self, e: &Expr, depth: u32) -> bool {
        if depth > 16 {
            return false;
        }
        match e {
            Expr::Name(n) => {
                let name = nfkc(n.id.as_str());
                BUILTIN_TYPES.contains(&name.as_ref())
                    || self.classes.contains(name.as_ref())
                    || self.imports.is_import(name.as_ref())
            }
            Expr::Attribute(a) => self.plain_type(&a.value, depth + 1),
            Expr::Subscript(s) => {
                self.plain_type(&s.value, depth + 1) && self.plain_type(&s.slice, depth + 1)
            }
            Expr::Tuple(t) => t.elts.iter().all(|x| self.plain_type(x, depth + 1)),
            Expr::BinOp(b) => {
                matches!(b.op, py::Operator::BitOr)
                    && self.plain_type(&b.left, depth + 1)
                    && self.plain_type(&b.right, depth + 1)
            }
            Expr::NoneLiteral(_) | Expr::StringLiteral(_) | Expr::EllipsisLiteral(_) => true,
            _ => false,
        }
    }
}
