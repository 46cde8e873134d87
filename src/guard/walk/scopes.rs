//! Which names are this code's own at a given point: a name the code binds
//! itself (assignment, `def`, `class`, parameter, loop, `with` or comprehension
//! variable) is that binding, not a library API of the same spelling.
//!
//! A binding only counts where it is certain to be in effect, because a
//! session keeps the names of earlier calls (`from sympy import S` in one
//! call, `S(code)` in the next):
//!
//! * inside a function, every name it binds and does not declare `global` or
//!   `nonlocal` is local by Python's scoping rules, in the whole function: it
//!   can never be a value left by an earlier call;
//! * a lambda's parameters and a comprehension's variables, inside them;
//! * a loop's, `with`'s or `except`'s variable inside the block it binds for;
//! * at module level, a name bound by a statement of the module's own block
//!   (not under `if`, `try`, a loop) after that statement: nothing this code
//!   does not spell can put a library object back under the name.

use foldhash::HashSet;
use ruff_python_ast::visitor::{self, Visitor};

use super::super::ast::{Expr, Stmt, py};
use super::super::names::nfkc;

/// The names a function body binds locally (its parameters included).
pub(super) fn function_locals(params: Option<&py::Parameters>, body: &[Stmt]) -> HashSet<String> {
    let mut c = Collector::default();
    if let Some(params) = params {
        for p in super::super::ast::parameters(params) {
            c.bound.insert(nfkc(p.name.as_str()).into_owned());
        }
    }
    for s in body {
        c.visit_stmt(s);
    }
    let Collector {
        mut bound,
        declared,
    } = c;
    bound.retain(|n| !declared.contains(n));
    bound
}

/// The names an assignment target (or loop variable) binds.
pub(super) fn target_names(target: &Expr, out: &mut Vec<String>) {
    match target {
        Expr::Name(n) => out.push(nfkc(n.id.as_str()).into_owned()),
        Expr::Tuple(t) => t.elts.iter().for_each(|e| target_names(e, out)),
        Expr::List(l) => l.elts.iter().for_each(|e| target_names(e, out)),
        Expr::Starred(s) => target_names(&s.value, out),
        _ => {}
    }
}

/// The names one module-level statement binds whenever it completes.
pub(super) fn statement_binds(s: &Stmt) -> Vec<String> {
    let mut out = Vec::new();
    match s {
        Stmt::Assign(a) => a.targets.iter().for_each(|t| target_names(t, &mut out)),
        Stmt::AnnAssign(a) if a.value.is_some() => target_names(&a.target, &mut out),
        Stmt::FunctionDef(f) => out.push(nfkc(f.name.as_str()).into_owned()),
        Stmt::ClassDef(c) => out.push(nfkc(c.name.as_str()).into_owned()),
        _ => {}
    }
    out
}

#[derive(Default)]
struct Collector {
    bound: HashSet<String>,
    declared: HashSet<String>,
}

impl<'a> Visitor<'a> for Collector {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            // A nested scope: its name is bound here, its body is its own.
            Stmt::FunctionDef(f) => {
                self.bound.insert(nfkc(f.name.as_str()).into_owned());
            }
            Stmt::ClassDef(c) => {
                self.bound.insert(nfkc(c.name.as_str()).into_owned());
            }
            Stmt::Global(g) => self.declare(&g.names),
            Stmt::Nonlocal(n) => self.declare(&n.names),
            Stmt::Import(i) => {
                for a in &i.names {
                    let name = a.asname.as_ref().map_or_else(
                        || a.name.as_str().split('.').next().unwrap_or("").to_string(),
                        |n| n.as_str().to_string(),
                    );
                    self.bound.insert(nfkc(&name).into_owned());
                }
            }
            Stmt::ImportFrom(i) => {
                for a in &i.names {
                    let name = a.asname.as_ref().unwrap_or(&a.name);
                    self.bound.insert(nfkc(name.as_str()).into_owned());
                }
            }
            _ => visitor::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(n) if n.ctx == py::ExprContext::Store => {
                self.bound.insert(nfkc(n.id.as_str()).into_owned());
            }
            // Their variables are their own; a walrus inside binds here but
            // is simply not counted (the name then stays unknown).
            Expr::Lambda(_)
            | Expr::ListComp(_)
            | Expr::SetComp(_)
            | Expr::DictComp(_)
            | Expr::Generator(_) => {}
            _ => visitor::walk_expr(self, expr),
        }
    }

    fn visit_except_handler(&mut self, h: &'a py::ExceptHandler) {
        let py::ExceptHandler::ExceptHandler(inner) = h;
        if let Some(n) = &inner.name {
            self.bound.insert(nfkc(n.as_str()).into_owned());
        }
        visitor::walk_except_handler(self, h);
    }
}

impl Collector {
    fn declare(&mut self, names: &[py::Identifier]) {
        for n in names {
            self.declared.insert(nfkc(n.as_str()).into_owned());
        }
    }
}
