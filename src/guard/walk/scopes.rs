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
//! * a loop's, `with`'s or `except`'s variable inside the block it binds for,
//!   and a walrus in an `if`/`while` test or a comprehension's condition in
//!   what that guards (when no `and`/`or` may skip it);
//! * a name bound by a statement of a block (the module's own statements,
//!   an `if` or `with` body, ...) in that block's later statements, which run
//!   only once the binding statement completed. After the block it does not
//!   count: a condition or a context manager that swallows an exception may
//!   have skipped it, and the earlier call's value is still there.

use foldhash::{HashMap, HashSet};
use ruff_python_ast::visitor::{self, Visitor};

use super::super::ast::{Expr, Stmt, py};
use super::super::names::nfkc;

/// One scope's own names, and those of them that iterate literal strings.
#[derive(Debug, Default)]
pub(super) struct Scope {
    pub own: HashSet<String>,
    pub literals: HashMap<String, Vec<String>>,
    /// A function's (or lambda's) locals: no import outside it rebinds them
    /// (its own imports are left out of `own`).
    pub function: bool,
    /// Where its bindings are made: an import from here on may rebind them.
    pub start: usize,
}

impl Scope {
    pub fn new(own: HashSet<String>, start: usize) -> Scope {
        Scope {
            own,
            literals: HashMap::default(),
            function: false,
            start,
        }
    }

    pub fn function(own: HashSet<String>) -> Scope {
        Scope {
            own,
            literals: HashMap::default(),
            function: true,
            start: 0,
        }
    }
}

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
        imported,
    } = c;
    bound.retain(|n| !declared.contains(n) && !imported.contains(n));
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
    /// Names the function imports: library objects, never its own.
    imported: HashSet<String>,
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
                    self.imported.insert(nfkc(&name).into_owned());
                }
            }
            Stmt::ImportFrom(i) => {
                for a in &i.names {
                    let name = a.asname.as_ref().unwrap_or(&a.name);
                    self.imported.insert(nfkc(name.as_str()).into_owned());
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

/// The string constants of a tuple, list or set display, when every
/// element is one (`("mean", "median")`); a number stands as `0`, whose
/// text is never code and names no attribute (`(2020, 2021)`).
pub(super) fn literal_strings(e: &Expr) -> Option<Vec<String>> {
    let elts = match e {
        Expr::Tuple(t) => &t.elts,
        Expr::List(l) => &l.elts,
        Expr::Set(s) => &s.elts,
        _ => return None,
    };
    elts.iter()
        .map(|x| match x {
            Expr::NumberLiteral(_) => Some("0".to_string()),
            _ => super::super::ast::const_str(x).map(|s| nfkc(s).into_owned()),
        })
        .collect()
}

/// Whether anything in `stmts` or `exprs` (nested functions, lambdas and
/// comprehensions included) binds `name` again or declares it `global` or
/// `nonlocal`: a loop variable is only the loop's literal while nothing does.
pub(super) fn rebinds(name: &str, stmts: &[Stmt], exprs: &[&Expr]) -> bool {
    let mut r = Rebinds { name, hit: false };
    for s in stmts {
        r.visit_stmt(s);
    }
    for e in exprs {
        r.visit_expr(e);
    }
    r.hit
}

struct Rebinds<'n> {
    name: &'n str,
    hit: bool,
}

impl Rebinds<'_> {
    fn is(&self, raw: &str) -> bool {
        nfkc(raw) == self.name
    }
}

impl<'a> Visitor<'a> for Rebinds<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        let hit = match stmt {
            Stmt::FunctionDef(f) => self.is(f.name.as_str()),
            Stmt::ClassDef(c) => self.is(c.name.as_str()),
            Stmt::Global(g) => g.names.iter().any(|n| self.is(n.as_str())),
            Stmt::Nonlocal(n) => n.names.iter().any(|n| self.is(n.as_str())),
            _ => false,
        };
        self.hit |= hit;
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if let Expr::Name(n) = expr
            && n.ctx != py::ExprContext::Load
            && self.is(n.id.as_str())
        {
            self.hit = true;
        }
        visitor::walk_expr(self, expr);
    }

    fn visit_parameter(&mut self, p: &'a py::Parameter) {
        self.hit |= self.is(p.name.as_str());
        visitor::walk_parameter(self, p);
    }

    fn visit_alias(&mut self, a: &'a py::Alias) {
        let bound = a.asname.as_ref().unwrap_or(&a.name);
        self.hit |= self.is(bound.as_str().split('.').next().unwrap_or(""));
    }

    fn visit_except_handler(&mut self, h: &'a py::ExceptHandler) {
        let py::ExceptHandler::ExceptHandler(inner) = h;
        self.hit |= inner.name.as_ref().is_some_and(|n| self.is(n.as_str()));
        visitor::walk_except_handler(self, h);
    }

    fn visit_pattern(&mut self, p: &'a py::Pattern) {
        let hit = match p {
            py::Pattern::MatchAs(a) => a.name.as_ref().is_some_and(|n| self.is(n.as_str())),
            py::Pattern::MatchStar(s) => s.name.as_ref().is_some_and(|n| self.is(n.as_str())),
            py::Pattern::MatchMapping(m) => m.rest.as_ref().is_some_and(|n| self.is(n.as_str())),
            _ => false,
        };
        self.hit |= hit;
        visitor::walk_pattern(self, p);
    }
}

/// The names walrus expressions in `e` bind whenever `e` is evaluated in
/// full: not behind `and`/`or`, a conditional expression, a lambda or a
/// comprehension.
pub(super) fn eager_walrus(e: &Expr) -> Vec<String> {
    let mut w = Walrus::default();
    w.visit_expr(e);
    w.names
}

#[derive(Default)]
struct Walrus {
    names: Vec<String>,
}

impl<'a> Visitor<'a> for Walrus {
    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Named(n) => {
                target_names(&n.target, &mut self.names);
                self.visit_expr(&n.value);
            }
            Expr::BoolOp(b) => {
                if let Some(first) = b.values.first() {
                    self.visit_expr(first);
                }
            }
            Expr::If(i) => self.visit_expr(&i.test),
            Expr::Lambda(_)
            | Expr::ListComp(_)
            | Expr::SetComp(_)
            | Expr::DictComp(_)
            | Expr::Generator(_) => {}
            _ => visitor::walk_expr(self, expr),
        }
    }
}
