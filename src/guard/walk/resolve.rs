//! What a name or an attribute path refers to, as far as this code's own
//! imports tell: `sp.sympify` is `sympy.sympify` after `import sympy as sp`.
//!
//! The imports are collected in a pass over the statements before the walk
//! (a function may use a module imported below it), and every binding of a
//! name counts: a name bound both by `import yaml as y` and by `y = obj`
//! resolves to `yaml` *and* is marked unknown, so the checks by last name
//! apply as well. A name this code never binds (a module imported by an
//! earlier call, a parameter, an instance) resolves to nothing: the checks
//! by last name are all the guard has for it.

// Keyed hashing: the keys are names the program chose (see Cargo.toml).
use foldhash::{HashMap, HashSet};

use super::super::ast::{Expr, Stmt, py};
use super::super::names::nfkc;

/// Where names come from, for one submission.
#[derive(Debug, Default)]
pub(super) struct Imports {
    /// Name -> the dotted paths it was bound to by an import or an alias.
    paths: HashMap<String, Vec<String>>,
    /// Names also bound to something that is not an import.
    other: HashSet<String>,
    /// Where each import (or alias of an import) of a name starts.
    import_at: HashMap<String, Vec<usize>>,
    /// Names some function declares `global` or `nonlocal`.
    declared: HashSet<String>,
}

/// What an expression refers to.
#[derive(Debug, Default)]
pub(super) struct Resolution {
    /// Dotted paths it may be (`numpy.testing.measure`).
    pub paths: Vec<String>,
    /// True when it may also be something the imports do not explain.
    pub unknown: bool,
}

const MAX_PATHS: usize = 8;

impl Imports {
    /// Collects every import (and plain alias of an import) in a module given
    /// as consecutive parts: the same as of their statements joined (they are
    /// read in order).
    pub fn collect_parts(parts: &[&[Stmt]]) -> Imports {
        let mut imports = Imports::default();
        // See `walk`: sized at once, the names are not rehashed as it grows.
        imports.other.reserve(super::expected_names(parts));
        for part in parts {
            imports.stmts(part, 0);
        }
        imports
    }

    fn stmts(&mut self, body: &[Stmt], depth: u32) {
        if depth > 64 {
            return;
        }
        for s in body {
            self.stmt(s, depth);
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: u32) {
        let at = super::super::ast::start(s);
        match s {
            Stmt::Global(g) => self.declare(&g.names),
            Stmt::Nonlocal(g) => self.declare(&g.names),
            Stmt::Import(i) => self.import(i, at),
            Stmt::ImportFrom(i) => self.import_from(i, at),
            Stmt::Assign(a) => {
                let path = self.resolve(&a.value).paths;
                for t in &a.targets {
                    match t {
                        Expr::Name(n) if !path.is_empty() => {
                            for p in &path {
                                self.bind(n.id.as_str(), p.clone(), at);
                            }
                        }
                        other => self.mark_target(other),
                    }
                }
            }
            Stmt::FunctionDef(f) => {
                self.mark_other(f.name.as_str());
                for p in super::super::ast::parameters(&f.parameters) {
                    self.mark_other(p.name.as_str());
                }
                self.stmts(&f.body, depth + 1);
            }
            Stmt::ClassDef(c) => {
                self.mark_other(c.name.as_str());
                self.stmts(&c.body, depth + 1);
            }
            Stmt::AnnAssign(a) => self.mark_target(&a.target),
            Stmt::AugAssign(a) => self.mark_target(&a.target),
            Stmt::For(f) => {
                self.mark_target(&f.target);
                self.stmts(&f.body, depth + 1);
                self.stmts(&f.orelse, depth + 1);
            }
            Stmt::While(w) => {
                self.stmts(&w.body, depth + 1);
                self.stmts(&w.orelse, depth + 1);
            }
            Stmt::If(i) => {
                self.stmts(&i.body, depth + 1);
                for c in &i.elif_else_clauses {
                    self.stmts(&c.body, depth + 1);
                }
            }
            Stmt::With(w) => {
                for item in &w.items {
                    if let Some(v) = &item.optional_vars {
                        self.mark_target(v);
                    }
                }
                self.stmts(&w.body, depth + 1);
            }
            Stmt::Try(t) => {
                self.stmts(&t.body, depth + 1);
                for py::ExceptHandler::ExceptHandler(h) in &t.handlers {
                    if let Some(n) = &h.name {
                        self.mark_other(n.as_str());
                    }
                    self.stmts(&h.body, depth + 1);
                }
                self.stmts(&t.orelse, depth + 1);
                self.stmts(&t.finalbody, depth + 1);
            }
            Stmt::Match(m) => {
                for case in &m.cases {
                    self.stmts(&case.body, depth + 1);
                }
            }
            _ => {}
        }
    }

    /// `global` and `nonlocal` names: bound outside the block that declares them.
    fn declare(&mut self, names: &[py::Identifier]) {
        for n in names {
            self.declared.insert(nfkc(n.as_str()).into_owned());
        }
    }

    /// `import a.b as c` binds `c` to `a.b`; `import a.b` binds `a`.
    fn import(&mut self, i: &py::StmtImport, at: usize) {
        for alias in &i.names {
            let module = nfkc(alias.name.as_str()).into_owned();
            match &alias.asname {
                Some(asname) => self.bind(asname.as_str(), module, at),
                None => {
                    let first = module.split('.').next().unwrap_or(&module).to_string();
                    self.bind(&first.clone(), first, at);
                }
            }
        }
    }

    /// `from m import n as b` binds `b` to `m.n`; relative and star imports bind nothing
    /// known.
    fn import_from(&mut self, i: &py::StmtImportFrom, at: usize) {
        let module = i.module.as_ref().map(|m| nfkc(m.as_str()).into_owned());
        for alias in &i.names {
            let name = nfkc(alias.name.as_str()).into_owned();
            let bound = alias.asname.as_ref().map_or(name.as_str(), |a| a.as_str());
            match (&module, i.level) {
                (Some(m), 0) if name != "*" => {
                    self.bind(bound, format!("{m}.{name}"), at);
                }
                _ => self.mark_other(bound),
            }
        }
    }

    fn bind(&mut self, name: &str, path: String, at: usize) {
        let name = nfkc(name);
        self.import_at
            .entry(name.clone().into_owned())
            .or_default()
            .push(at);
        let paths = match self.paths.get_mut(name.as_ref()) {
            Some(paths) => paths,
            None => self.paths.entry(name.into_owned()).or_default(),
        };
        if paths.len() < MAX_PATHS && !paths.contains(&path) {
            paths.push(path);
        }
    }

    /// Every name an assignment target binds.
    fn mark_target(&mut self, target: &Expr) {
        match target {
            Expr::Name(n) => self.mark_other(n.id.as_str()),
            Expr::Tuple(t) => t.elts.iter().for_each(|e| self.mark_target(e)),
            Expr::List(l) => l.elts.iter().for_each(|e| self.mark_target(e)),
            Expr::Starred(s) => self.mark_target(&s.value),
            _ => {}
        }
    }

    fn mark_other(&mut self, name: &str) {
        // Most names are bound many times: copy a name only the first time.
        let name = nfkc(name);
        if !self.other.contains(name.as_ref()) {
            self.other.insert(name.into_owned());
        }
    }

    /// Whether an import in this code may rebind `name` between a binding
    /// at `bound` and a use at `used`: one that starts in between, or any
    /// later one when the use may run again (`again`: in a loop or a
    /// function), or any, when a function declares the name `global` or
    /// `nonlocal` (its import then rebinds a name outside it).
    pub fn imported_between(&self, name: &str, bound: usize, used: usize, again: bool) -> bool {
        let Some(ats) = self.import_at.get(name) else {
            return false;
        };
        self.declared.contains(name) || ats.iter().any(|&at| at >= bound && (at <= used || again))
    }

    /// Whether a function declares `name` `global`/`nonlocal` and an import
    /// binds it: that import may rebind a name outside the function.
    pub fn declared_and_imported(&self, name: &str) -> bool {
        self.declared.contains(name) && self.import_at.contains_key(name)
    }

    /// Whether `name` was bound by an import in this code.
    pub fn is_import(&self, name: &str) -> bool {
        self.paths.contains_key(name)
    }

    /// What `e` refers to.
    pub fn resolve(&self, e: &Expr) -> Resolution {
        self.resolve_at(e, 0)
    }

    pub fn resolve_name(&self, n: &py::ExprName) -> Resolution {
        let name = nfkc(n.id.as_str());
        let paths = self.paths.get(name.as_ref()).cloned().unwrap_or_default();
        let unknown = paths.is_empty() || self.other.contains(name.as_ref());
        Resolution { paths, unknown }
    }

    pub fn resolve_attribute(&self, a: &py::ExprAttribute) -> Resolution {
        let inner = self.resolve_at(&a.value, 1);
        let attr = nfkc(a.attr.as_str());
        Resolution {
            paths: inner
                .paths
                .into_iter()
                .map(|p| format!("{p}.{attr}"))
                .collect(),
            unknown: inner.unknown,
        }
    }

    fn resolve_at(&self, e: &Expr, depth: u32) -> Resolution {
        if depth > 32 {
            return Resolution {
                paths: Vec::new(),
                unknown: true,
            };
        }
        match e {
            Expr::Name(n) => self.resolve_name(n),
            Expr::Attribute(a) => {
                let inner = self.resolve_at(&a.value, depth + 1);
                let attr = nfkc(a.attr.as_str());
                Resolution {
                    paths: inner
                        .paths
                        .into_iter()
                        .map(|p| format!("{p}.{attr}"))
                        .collect(),
                    unknown: inner.unknown,
                }
            }
            _ => Resolution {
                paths: Vec::new(),
                unknown: true,
            },
        }
    }
}
