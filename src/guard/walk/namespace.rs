//! Whether the mapping in `SimpleNamespace(**d)` (and the other constructors
//! that store keywords as attributes) still holds only the keys its literal
//! display or `json.load` gave it: the code must not change it or hand it to
//! anything that could. Every use of `d` in the code is read: a `**d` the
//! walk judged, a subscript read (`d["k"]`), a subscript write under a literal
//! key `key_ok` accepts (`d["epochs"] = 3`) and the read-only methods pass; any
//! other subscript write, any other method, and any other use (passed to a
//! function, aliased, stored) mean the keys are no longer known.

use foldhash::HashSet;
use ruff_python_ast::visitor::{self, Visitor};

use super::super::ast::{Expr, Stmt, start};
use super::super::names::nfkc;

/// Methods of a dict that read it and hand out no way to change it.
const READERS: &[&str] = &[
    "get",
    "keys",
    "values",
    "items",
    "copy",
    "__contains__",
    "__len__",
];

/// The names of `names` some use in `parts` may change (see the module doc);
/// `judged` are the offsets of the `**d` uses the walk judged, `key_ok` says
/// whether a literal key may become an attribute.
pub(super) fn changed(
    parts: &[&[Stmt]],
    names: &HashSet<String>,
    judged: &HashSet<usize>,
    key_ok: &dyn Fn(&str) -> bool,
) -> HashSet<String> {
    let mut v = Uses {
        names,
        judged,
        key_ok,
        safe: HashSet::default(),
        changed: HashSet::default(),
    };
    for part in parts {
        for s in *part {
            v.visit_stmt(s);
        }
    }
    v.changed
}

struct Uses<'s> {
    names: &'s HashSet<String>,
    judged: &'s HashSet<usize>,
    key_ok: &'s dyn Fn(&str) -> bool,
    /// Offsets of loads already found to be safe (a subscript read, a reader).
    safe: HashSet<usize>,
    changed: HashSet<String>,
}

impl Uses<'_> {
    fn tracked(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Name(n) => {
                let name = nfkc(n.id.as_str());
                self.names
                    .contains(name.as_ref())
                    .then(|| name.into_owned())
            }
            _ => None,
        }
    }
}

impl<'a> Visitor<'a> for Uses<'_> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Subscript(s) => {
                if let Some(name) = self.tracked(&s.value) {
                    let literal_key = s.ctx.is_store()
                        && super::super::ast::const_str(&s.slice)
                            .is_some_and(|k| (self.key_ok)(&nfkc(k)));
                    if s.ctx.is_load() || literal_key {
                        self.safe.insert(start(s.value.as_ref()));
                    } else {
                        self.changed.insert(name);
                    }
                }
            }
            Expr::Attribute(a) => {
                if let Some(name) = self.tracked(&a.value) {
                    if READERS.contains(&a.attr.as_str()) && a.ctx.is_load() {
                        self.safe.insert(start(a.value.as_ref()));
                    } else {
                        self.changed.insert(name);
                    }
                }
            }
            Expr::Name(n) if n.ctx.is_load() => {
                let offset = start(expr);
                if !self.safe.contains(&offset)
                    && !self.judged.contains(&offset)
                    && let Some(name) = self.tracked(expr)
                {
                    self.changed.insert(name);
                }
            }
            _ => {}
        }
        visitor::walk_expr(self, expr);
    }
}
