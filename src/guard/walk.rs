//! The AST walk: visits every statement, expression and pattern once and
//! reports what the policy forbids. Findings carry byte offsets; `mod.rs`
//! turns them into lines and columns.
//!
//! The walk is recursive but depth-bounded: the pre-parse scan (depth.rs)
//! already keeps trees shallow, and [`MAX_AST_DEPTH`] is a second fence that
//! refuses, rather than overflows, if a shape slips past it.

use std::collections::HashSet;

use rustpython_parser::ast::{self, Constant, Expr, ExprContext, Pattern, Ranged, Stmt, UnaryOp};

use super::names::nfkc;
use super::paths::{self, Roots};
use super::policy::{Action, Policy, is_dunder};
use super::strings;
use super::tripwire;

/// Deepest AST nesting the walker descends into.
pub const MAX_AST_DEPTH: usize = 10_000;

/// A finding before positions are resolved.
#[derive(Debug, Clone)]
pub struct RawFinding {
    pub rule: String,
    pub category: String,
    pub message: String,
    pub offset: usize,
    pub tripwire: bool,
    pub action: Action,
}

/// Walks one module and returns its findings in source order.
pub fn walk(body: &[Stmt], policy: &Policy, roots: &Roots) -> Vec<RawFinding> {
    let getter_names = policy
        .attribute_getters
        .iter()
        .map(|q| q.rsplit('.').next().unwrap_or(q).to_string())
        .collect();
    let mut w = Walker {
        policy,
        roots,
        getter_names,
        findings: Vec::new(),
        bound: HashSet::new(),
        module_name_loads: Vec::new(),
        depth: 0,
        fold_suppress: 0,
        fold_budget: strings::FOLD_BUDGET,
        cap: policy.limits.max_findings.saturating_mul(10).max(100),
    };
    w.body(body);
    let loads = std::mem::take(&mut w.module_name_loads);
    for (name, offset) in loads {
        if !w.bound.contains(&name) {
            w.report(
                "unbound_module_name",
                "module",
                format!(
                    "`{name}` is used but never bound in this code; it can only be a module \
                     smuggled in by a star import or an earlier call"
                ),
                offset,
            );
        }
    }
    let mut findings = w.findings;
    findings.sort_by(|a, b| a.offset.cmp(&b.offset).then_with(|| a.rule.cmp(&b.rule)));
    findings.dedup_by(|a, b| a.offset == b.offset && a.rule == b.rule);
    findings
}

struct Walker<'a> {
    policy: &'a Policy,
    roots: &'a Roots,
    /// Last components of the attribute-getter functions (`attrgetter`).
    getter_names: HashSet<String>,
    findings: Vec<RawFinding>,
    /// Every name this code binds anywhere.
    bound: HashSet<String>,
    /// Loads of names that are dangerous module names, resolved at the end.
    module_name_loads: Vec<(String, usize)>,
    depth: usize,
    /// > 0 while inside a string expression that was already folded whole.
    fold_suppress: u32,
    /// Bytes string folding may still produce (see strings::FOLD_BUDGET).
    fold_budget: usize,
    cap: usize,
}

/// What is wrong with reading attribute `name` (already NFKC-normalised).
struct AttrProblem {
    rule: &'static str,
    category: String,
    why: String,
}

impl<'a> Walker<'a> {
    fn report(&mut self, rule: &str, category: &str, message: String, offset: usize) {
        let action = self.policy.action(rule);
        self.push(rule, category, message, offset, false, action);
    }

    fn push(
        &mut self,
        rule: &str,
        category: &str,
        message: String,
        offset: usize,
        tripwire: bool,
        action: Action,
    ) {
        // Tripwires bypass the cap: a flood of ordinary findings must not
        // hide the one that ends the session.
        if action == Action::Off || (self.findings.len() >= self.cap && !tripwire) {
            return;
        }
        if self.findings.len() >= self.cap.saturating_mul(2) {
            return;
        }
        self.findings.push(RawFinding {
            rule: rule.to_string(),
            category: category.to_string(),
            message,
            offset,
            tripwire,
            action,
        });
    }

    fn enter(&mut self, offset: usize) -> bool {
        self.depth += 1;
        if self.depth > MAX_AST_DEPTH {
            self.report(
                "nesting_too_deep",
                "limits",
                format!("the code nests more than {MAX_AST_DEPTH} levels deep; flatten it"),
                offset,
            );
            return false;
        }
        true
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    // ---- predicates -------------------------------------------------------

    fn attr_problem(&self, name: &str) -> Option<AttrProblem> {
        let p = self.policy;
        if is_dunder(name) && !p.dunder_allowed(name) {
            return Some(AttrProblem {
                rule: "internals_attribute",
                category: "internals".into(),
                why: format!("`{name}` is an interpreter internal (use type(x) for the class)"),
            });
        }
        if p.internals.contains(name) {
            return Some(AttrProblem {
                rule: "internals_attribute",
                category: "internals".into(),
                why: format!("`{name}` exposes frames or code objects"),
            });
        }
        if p.module_reexports.contains(name) {
            return Some(AttrProblem {
                rule: "module_reexport",
                category: "module".into(),
                why: format!("`.{name}` hands out a blocked module from an allowed one"),
            });
        }
        p.dangerous.get(name).map(|d| AttrProblem {
            rule: "blocked_attribute",
            category: d.category.clone(),
            why: format!("`{name}` {}", d.reason),
        })
    }

    fn check_attr_name(&mut self, name: &str, offset: usize, context: &str) {
        if let Some(problem) = self.attr_problem(name) {
            self.report(
                problem.rule,
                &problem.category,
                format!("{context}: {}", problem.why),
                offset,
            );
        }
    }

    /// Checks an identifier used as a variable (load, store or delete).
    fn check_name(&mut self, raw: &str, ctx: &ExprContext, offset: usize, as_callee: bool) {
        let name = nfkc(raw);
        let name = name.as_ref();
        let p = self.policy;
        if matches!(ctx, ExprContext::Store) {
            self.bound.insert(name.to_string());
            if is_dunder(name) && !p.dunder_allowed(name) {
                self.report(
                    "dunder_name",
                    "internals",
                    format!("assigning `{name}` rebinds interpreter machinery"),
                    offset,
                );
            }
            return;
        }
        if p.blocked_builtins.contains(name) {
            self.report(
                "blocked_builtin",
                "builtin",
                format!("`{name}` is a blocked builtin (it runs or reaches arbitrary code); any reference to it is refused"),
                offset,
            );
        } else if is_dunder(name) && !p.dunder_allowed(name) {
            self.report(
                "dunder_name",
                "internals",
                format!("`{name}` is interpreter machinery"),
                offset,
            );
        }
        if !as_callee && p.reflection_builtins.contains(name) {
            self.report(
                "reflection",
                "reflection",
                format!("`{name}` is only allowed as a direct call with a constant attribute name; an alias cannot be checked"),
                offset,
            );
        }
        if p.module_reexports.contains(name) {
            self.module_name_loads.push((name.to_string(), offset));
        }
    }

    fn bind(&mut self, raw: &str) {
        self.bound.insert(nfkc(raw).into_owned());
    }

    /// Path, tripwire and format-field checks on one string value.
    fn check_string(&mut self, value: &str, offset: usize, docstring: bool) {
        if let Some(problem) = paths::check(value, false, self.roots, self.policy) {
            self.report(problem.rule, "path", problem.message, offset);
        }
        if !docstring {
            self.check_tripwires(value, offset);
        }
        for attr in strings::format_field_attrs(value) {
            let attr = nfkc(attr);
            if let Some(problem) = self.attr_problem(&attr) {
                self.report(
                    "format_field",
                    "reflection",
                    format!("format field reads an attribute: {}", problem.why),
                    offset,
                );
            }
        }
    }

    fn check_tripwires(&mut self, value: &str, offset: usize) {
        for t in tripwire::hits(self.policy, value) {
            self.push(
                &t.id,
                &t.category,
                format!(
                    "tripwire: {} ({} pattern `{}`)",
                    t.description, t.category, t.id
                ),
                offset,
                true,
                t.action,
            );
        }
    }

    // ---- statements -------------------------------------------------------

    fn body(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        let offset = s.start().to_usize();
        if !self.enter(offset) {
            self.leave();
            return;
        }
        match s {
            Stmt::FunctionDef(f) => {
                self.bind(f.name.as_str());
                self.exprs(&f.decorator_list);
                self.arguments(&f.args);
                self.opt_expr(f.returns.as_deref());
                self.type_params(&f.type_params);
                self.body(&f.body);
            }
            Stmt::AsyncFunctionDef(f) => {
                self.bind(f.name.as_str());
                self.exprs(&f.decorator_list);
                self.arguments(&f.args);
                self.opt_expr(f.returns.as_deref());
                self.type_params(&f.type_params);
                self.body(&f.body);
            }
            Stmt::ClassDef(c) => {
                self.bind(c.name.as_str());
                self.exprs(&c.decorator_list);
                self.exprs(&c.bases);
                self.keywords(&c.keywords);
                self.type_params(&c.type_params);
                self.body(&c.body);
            }
            Stmt::Return(r) => self.opt_expr(r.value.as_deref()),
            Stmt::Delete(d) => self.exprs(&d.targets),
            Stmt::Assign(a) => {
                self.exprs(&a.targets);
                self.expr(&a.value);
            }
            Stmt::TypeAlias(t) => {
                self.expr(&t.name);
                self.type_params(&t.type_params);
                self.expr(&t.value);
            }
            Stmt::AugAssign(a) => {
                self.expr(&a.target);
                self.expr(&a.value);
            }
            Stmt::AnnAssign(a) => {
                self.expr(&a.target);
                self.expr(&a.annotation);
                self.opt_expr(a.value.as_deref());
            }
            Stmt::For(f) => {
                self.expr(&f.target);
                self.expr(&f.iter);
                self.body(&f.body);
                self.body(&f.orelse);
            }
            Stmt::AsyncFor(f) => {
                self.expr(&f.target);
                self.expr(&f.iter);
                self.body(&f.body);
                self.body(&f.orelse);
            }
            Stmt::While(w) => {
                self.expr(&w.test);
                self.body(&w.body);
                self.body(&w.orelse);
            }
            Stmt::If(i) => {
                self.expr(&i.test);
                self.body(&i.body);
                self.body(&i.orelse);
            }
            Stmt::With(w) => {
                for item in &w.items {
                    self.expr(&item.context_expr);
                    self.opt_expr(item.optional_vars.as_deref());
                }
                self.body(&w.body);
            }
            Stmt::AsyncWith(w) => {
                for item in &w.items {
                    self.expr(&item.context_expr);
                    self.opt_expr(item.optional_vars.as_deref());
                }
                self.body(&w.body);
            }
            Stmt::Match(m) => {
                self.expr(&m.subject);
                for case in &m.cases {
                    self.pattern(&case.pattern);
                    self.opt_expr(case.guard.as_deref());
                    self.body(&case.body);
                }
            }
            Stmt::Raise(r) => {
                self.opt_expr(r.exc.as_deref());
                self.opt_expr(r.cause.as_deref());
            }
            Stmt::Try(t) => {
                self.body(&t.body);
                self.handlers(&t.handlers);
                self.body(&t.orelse);
                self.body(&t.finalbody);
            }
            Stmt::TryStar(t) => {
                self.body(&t.body);
                self.handlers(&t.handlers);
                self.body(&t.orelse);
                self.body(&t.finalbody);
            }
            Stmt::Assert(a) => {
                self.expr(&a.test);
                self.opt_expr(a.msg.as_deref());
            }
            Stmt::Import(i) => self.import(i),
            Stmt::ImportFrom(i) => self.import_from(i),
            Stmt::Global(g) => self.declared_names(&g.names, offset),
            Stmt::Nonlocal(n) => self.declared_names(&n.names, offset),
            Stmt::Expr(e) => match e.value.as_ref() {
                // A bare string statement (docstring) is never data the
                // program acts on: paths are still checked, tripwires not.
                Expr::Constant(c) if matches!(c.value, Constant::Str(_)) => {
                    if let Constant::Str(s) = &c.value {
                        self.check_string(s, c.start().to_usize(), true);
                    }
                }
                other => self.expr(other),
            },
            Stmt::Pass(_) | Stmt::Break(_) | Stmt::Continue(_) => {}
        }
        self.leave();
    }

    fn declared_names(&mut self, names: &[ast::Identifier], offset: usize) {
        for n in names {
            let name = nfkc(n.as_str());
            if self.policy.blocked_builtins.contains(name.as_ref())
                || (is_dunder(&name) && !self.policy.dunder_allowed(&name))
            {
                self.report(
                    "dunder_name",
                    "internals",
                    format!("declaring `{name}` global or nonlocal reaches interpreter machinery"),
                    offset,
                );
            }
        }
    }

    fn handlers(&mut self, handlers: &[ast::ExceptHandler]) {
        for ast::ExceptHandler::ExceptHandler(h) in handlers {
            self.opt_expr(h.type_.as_deref());
            if let Some(name) = &h.name {
                self.bind(name.as_str());
            }
            self.body(&h.body);
        }
    }

    fn import(&mut self, i: &ast::StmtImport) {
        for alias in &i.names {
            let offset = alias.start().to_usize();
            let module = nfkc(alias.name.as_str()).into_owned();
            self.check_module(&module, offset);
            match &alias.asname {
                Some(asname) => self.bind(asname.as_str()),
                None => {
                    let first = module.split('.').next().unwrap_or(&module).to_string();
                    self.bound.insert(first);
                }
            }
        }
    }

    fn import_from(&mut self, i: &ast::StmtImportFrom) {
        let module = i
            .module
            .as_ref()
            .map(|m| nfkc(m.as_str()).into_owned())
            .unwrap_or_default();
        let stmt_offset = i.start().to_usize();
        if !module.is_empty() {
            self.check_module(&module, stmt_offset);
        }
        for alias in &i.names {
            let offset = alias.start().to_usize();
            let name = nfkc(alias.name.as_str()).into_owned();
            if name == "*" {
                continue;
            }
            let full = if module.is_empty() {
                name.clone()
            } else {
                format!("{module}.{name}")
            };
            // `from http import client` imports the submodule http.client.
            if let Some(hit) = self.policy.module_blocked(&full)
                && self.policy.module_blocked(&module).is_none()
            {
                let msg = self.module_message(&full, hit);
                self.report("blocked_module", "module", msg, offset);
            }
            self.check_attr_name(&name, offset, &format!("`from {module} import {name}`"));
            if self.policy.blocked_builtins.contains(name.as_str()) {
                self.report(
                    "blocked_builtin",
                    "builtin",
                    format!("importing `{name}` brings in a blocked builtin-like function"),
                    offset,
                );
            }
            let renamed = alias
                .asname
                .as_ref()
                .is_some_and(|a| nfkc(a.as_str()) != name.as_str());
            if renamed
                && (self.getter_names.contains(&name)
                    || self.policy.reflection_builtins.contains(&name))
            {
                self.report(
                    "reflection",
                    "reflection",
                    format!("importing `{name}` under another name hides it from the guard; import it as `{name}`"),
                    offset,
                );
            }
            match &alias.asname {
                Some(asname) => self.bind(asname.as_str()),
                None => {
                    self.bound.insert(name);
                }
            }
        }
    }

    fn check_module(&mut self, module: &str, offset: usize) {
        if let Some(hit) = self.policy.module_blocked(module) {
            let msg = self.module_message(module, hit);
            self.report("blocked_module", "module", msg, offset);
        }
    }

    fn module_message(&self, module: &str, hit: &str) -> String {
        let mut msg = if hit == module {
            format!("importing `{module}` is not allowed")
        } else {
            format!("importing `{module}` is not allowed (policy blocks `{hit}`)")
        };
        if let Some(hint) = self.policy.module_hints.get(hit) {
            msg.push_str(": ");
            msg.push_str(hint);
        }
        msg
    }

    fn type_params(&mut self, params: &[ast::TypeParam]) {
        for p in params {
            match p {
                ast::TypeParam::TypeVar(t) => {
                    self.bind(t.name.as_str());
                    self.opt_expr(t.bound.as_deref());
                }
                ast::TypeParam::ParamSpec(t) => self.bind(t.name.as_str()),
                ast::TypeParam::TypeVarTuple(t) => self.bind(t.name.as_str()),
            }
        }
    }

    fn arguments(&mut self, args: &ast::Arguments) {
        for a in args
            .posonlyargs
            .iter()
            .chain(&args.args)
            .chain(&args.kwonlyargs)
        {
            self.bind(a.def.arg.as_str());
            self.opt_expr(a.def.annotation.as_deref());
            self.opt_expr(a.default.as_deref());
        }
        for a in [&args.vararg, &args.kwarg].into_iter().flatten() {
            self.bind(a.arg.as_str());
            self.opt_expr(a.annotation.as_deref());
        }
    }

    fn keywords(&mut self, keywords: &[ast::Keyword]) {
        for k in keywords {
            self.expr(&k.value);
        }
    }

    fn pattern(&mut self, p: &Pattern) {
        let offset = p.start().to_usize();
        if !self.enter(offset) {
            self.leave();
            return;
        }
        match p {
            Pattern::MatchValue(v) => self.expr(&v.value),
            Pattern::MatchSingleton(_) => {}
            Pattern::MatchSequence(s) => {
                for q in &s.patterns {
                    self.pattern(q);
                }
            }
            Pattern::MatchMapping(m) => {
                self.exprs(&m.keys);
                for q in &m.patterns {
                    self.pattern(q);
                }
                if let Some(rest) = &m.rest {
                    self.bind(rest.as_str());
                }
            }
            Pattern::MatchClass(c) => {
                self.expr(&c.cls);
                for q in &c.patterns {
                    self.pattern(q);
                }
                // `case C(attr=x)` reads `attr` from the subject.
                for attr in &c.kwd_attrs {
                    let name = nfkc(attr.as_str()).into_owned();
                    self.check_attr_name(&name, offset, "class pattern keyword");
                }
                for q in &c.kwd_patterns {
                    self.pattern(q);
                }
            }
            Pattern::MatchStar(s) => {
                if let Some(n) = &s.name {
                    self.bind(n.as_str());
                }
            }
            Pattern::MatchAs(a) => {
                if let Some(q) = &a.pattern {
                    self.pattern(q);
                }
                if let Some(n) = &a.name {
                    self.bind(n.as_str());
                }
            }
            Pattern::MatchOr(o) => {
                for q in &o.patterns {
                    self.pattern(q);
                }
            }
        }
        self.leave();
    }

    // ---- expressions ------------------------------------------------------

    fn exprs(&mut self, es: &[Expr]) {
        for e in es {
            self.expr(e);
        }
    }

    fn opt_expr(&mut self, e: Option<&Expr>) {
        if let Some(e) = e {
            self.expr(e);
        }
    }

    fn comprehensions(&mut self, gens: &[ast::Comprehension]) {
        for g in gens {
            self.expr(&g.target);
            self.expr(&g.iter);
            self.exprs(&g.ifs);
        }
    }

    fn expr(&mut self, e: &Expr) {
        self.expr_as(e, false);
    }

    /// `as_callee` is true when `e` is the function of a call, which is the
    /// one place a reflection builtin may appear.
    fn expr_as(&mut self, e: &Expr, as_callee: bool) {
        let offset = e.start().to_usize();
        if !self.enter(offset) {
            self.leave();
            return;
        }
        let composite = strings::is_composite(e);
        let mut suppressed = false;
        if composite
            && self.fold_suppress == 0
            && let Some(value) = strings::fold(e, &mut self.fold_budget)
        {
            self.check_string(&value, offset, false);
            // Nested concatenations of a fully folded BinOp/join would only
            // repeat this finding; f-string fields hold real code.
            if !matches!(e, Expr::JoinedStr(_)) {
                suppressed = true;
                self.fold_suppress += 1;
            }
        }
        match e {
            Expr::BoolOp(b) => self.exprs(&b.values),
            Expr::NamedExpr(n) => {
                self.expr(&n.target);
                self.expr(&n.value);
            }
            Expr::BinOp(b) => {
                self.expr(&b.left);
                self.expr(&b.right);
            }
            Expr::UnaryOp(u) => self.expr(&u.operand),
            Expr::Lambda(l) => {
                self.arguments(&l.args);
                self.expr(&l.body);
            }
            Expr::IfExp(i) => {
                self.expr(&i.test);
                self.expr(&i.body);
                self.expr(&i.orelse);
            }
            Expr::Dict(d) => {
                for k in d.keys.iter().flatten() {
                    self.expr(k);
                }
                self.exprs(&d.values);
            }
            Expr::Set(s) => self.exprs(&s.elts),
            Expr::ListComp(c) => {
                self.comprehensions(&c.generators);
                self.expr(&c.elt);
            }
            Expr::SetComp(c) => {
                self.comprehensions(&c.generators);
                self.expr(&c.elt);
            }
            Expr::DictComp(c) => {
                self.comprehensions(&c.generators);
                self.expr(&c.key);
                self.expr(&c.value);
            }
            Expr::GeneratorExp(c) => {
                self.comprehensions(&c.generators);
                self.expr(&c.elt);
            }
            Expr::Await(a) => self.expr(&a.value),
            Expr::Yield(y) => self.opt_expr(y.value.as_deref()),
            Expr::YieldFrom(y) => self.expr(&y.value),
            Expr::Compare(c) => {
                self.expr(&c.left);
                self.exprs(&c.comparators);
            }
            Expr::Call(c) => self.call(c),
            Expr::FormattedValue(f) => {
                self.expr(&f.value);
                self.opt_expr(f.format_spec.as_deref());
            }
            Expr::JoinedStr(j) => self.exprs(&j.values),
            Expr::Constant(c) => self.constant(&c.value, offset),
            Expr::Attribute(a) => {
                let name = nfkc(a.attr.as_str());
                self.check_attr_name(&name, offset, "attribute access");
                if !as_callee && self.getter_names.contains(name.as_ref()) {
                    self.report(
                        "reflection",
                        "reflection",
                        format!("`{name}` is only allowed as a direct call with constant names; an alias cannot be checked"),
                        offset,
                    );
                }
                self.expr(&a.value);
            }
            Expr::Subscript(s) => {
                if let Expr::Constant(k) = s.slice.as_ref()
                    && let Constant::Str(key) = &k.value
                {
                    let key = nfkc(key);
                    if is_dunder(&key) && !self.policy.dunder_allowed(&key) {
                        self.report(
                            "reflection",
                            "reflection",
                            format!("indexing by `{key}` reaches interpreter machinery through a namespace"),
                            offset,
                        );
                    }
                }
                self.expr(&s.value);
                self.expr(&s.slice);
            }
            Expr::Starred(s) => self.expr(&s.value),
            Expr::Name(n) => self.check_name(n.id.as_str(), &n.ctx, offset, as_callee),
            Expr::List(l) => self.exprs(&l.elts),
            Expr::Tuple(t) => self.exprs(&t.elts),
            Expr::Slice(s) => {
                self.opt_expr(s.lower.as_deref());
                self.opt_expr(s.upper.as_deref());
                self.opt_expr(s.step.as_deref());
            }
        }
        if suppressed {
            self.fold_suppress -= 1;
        }
        self.leave();
    }

    fn constant(&mut self, c: &Constant, offset: usize) {
        match c {
            Constant::Str(s) => self.check_string(s, offset, false),
            Constant::Bytes(b) => {
                let s = String::from_utf8_lossy(b);
                self.check_string(&s, offset, false);
            }
            Constant::Tuple(items) => {
                for item in items {
                    self.constant(item, offset);
                }
            }
            _ => {}
        }
    }

    fn call(&mut self, c: &ast::ExprCall) {
        let callee = callee_name(&c.func).map(nfkc);
        if let Some(name) = callee.as_deref() {
            let direct_builtin = matches!(c.func.as_ref(), Expr::Name(_));
            if direct_builtin && self.policy.reflection_builtins.contains(name) {
                self.reflection_call(name, c);
            }
            if self.getter_names.contains(name) {
                self.getter_call(name, c);
            }
            if matches!(name, "open" | "FileIO" | "fdopen") && opens_descriptor(c) {
                self.report(
                    "open_file_descriptor",
                    "path",
                    format!("`{name}` of an integer opens an inherited file descriptor; open a file by its path"),
                    c.start().to_usize(),
                );
            }
            if self.policy.path_functions.contains(name) {
                let args = c.args.iter().chain(c.keywords.iter().map(|k| &k.value));
                for arg in args {
                    if let Some(value) = literal_string(arg, &mut self.fold_budget)
                        && let Some(problem) = paths::check(&value, true, self.roots, self.policy)
                    {
                        self.report(
                            problem.rule,
                            "path",
                            problem.message,
                            arg.start().to_usize(),
                        );
                    }
                }
            }
        }
        if let Some(name) = callee.as_deref()
            && let Some(target) = self.code_file_target(name, c)
        {
            self.report(
                "code_file_write",
                "code",
                format!(
                    "writing `{target}` creates code that a later import would run unchecked; \
                     write data files (csv, json, txt) instead"
                ),
                c.start().to_usize(),
            );
        }
        self.expr_as(&c.func, true);
        self.exprs(&c.args);
        self.keywords(&c.keywords);
    }

    /// The file name when a call writes Python source or a native extension:
    /// `open("x.py", "w")`, `Path("x.py").open("w")`, `Path("x.py").write_text(...)`.
    fn code_file_target(&mut self, name: &str, c: &ast::ExprCall) -> Option<String> {
        let budget = &mut self.fold_budget;
        let writes = |mode: Option<&Expr>| {
            mode.and_then(const_str)
                .is_some_and(|m| m.contains(['w', 'a', 'x', '+']))
        };
        // A method on a path object (`Path("x.py").open`) carries the path
        // on its receiver; `io.open(...)` or `open(...)` carry it as argument.
        let receiver = match c.func.as_ref() {
            Expr::Attribute(a) if !matches!(a.value.as_ref(), Expr::Name(_)) => Some(&a.value),
            _ => None,
        };
        let path = match (name, receiver) {
            ("open", Some(recv)) => {
                if !writes(c.args.first().or_else(|| keyword(c, "mode"))) {
                    return None;
                }
                receiver_path(recv, budget)
            }
            ("open" | "FileIO", _) => {
                if !writes(c.args.get(1).or_else(|| keyword(c, "mode"))) {
                    return None;
                }
                let file = c.args.first().or_else(|| keyword(c, "file"))?;
                literal_string(file, budget)
            }
            ("write_text" | "write_bytes" | "touch" | "symlink_to" | "hardlink_to", Some(recv)) => {
                receiver_path(recv, budget)
            }
            _ => None,
        }?;
        let lower = path.to_ascii_lowercase();
        self.policy
            .code_extensions
            .iter()
            .any(|ext| lower.ends_with(ext.as_str()))
            .then_some(path)
    }

    fn unpacked_args(c: &ast::ExprCall) -> bool {
        c.args.iter().any(|a| matches!(a, Expr::Starred(_)))
            || c.keywords.iter().any(|k| k.arg.is_none())
    }

    /// getattr/setattr/delattr/hasattr: the name must be a safe constant.
    fn reflection_call(&mut self, func: &str, c: &ast::ExprCall) {
        let offset = c.start().to_usize();
        if Self::unpacked_args(c) {
            self.report(
                "reflection",
                "reflection",
                format!("`{func}` with unpacked arguments hides the attribute name"),
                offset,
            );
            return;
        }
        let name_arg = c.args.get(1).or_else(|| {
            c.keywords
                .iter()
                .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "name"))
                .map(|k| &k.value)
        });
        let Some(arg) = name_arg else {
            return;
        };
        match const_str(arg) {
            Some(s) => {
                let name = nfkc(s).into_owned();
                if let Some(problem) = self.attr_problem(&name) {
                    self.report(
                        "reflection",
                        "reflection",
                        format!("`{func}` with a blocked name: {}", problem.why),
                        offset,
                    );
                }
            }
            None => self.report(
                "reflection",
                "reflection",
                format!("`{func}` with a computed attribute name cannot be checked; use `obj.name` or a constant string"),
                offset,
            ),
        }
    }

    /// operator.attrgetter("a.b") / methodcaller("name", ...).
    fn getter_call(&mut self, func: &str, c: &ast::ExprCall) {
        let offset = c.start().to_usize();
        if Self::unpacked_args(c) {
            self.report(
                "reflection",
                "reflection",
                format!("`{func}` with unpacked arguments hides the attribute names"),
                offset,
            );
            return;
        }
        let names: Vec<&Expr> = if func == "methodcaller" {
            c.args.iter().take(1).collect()
        } else {
            c.args.iter().collect()
        };
        for arg in names {
            match const_str(arg) {
                Some(s) => {
                    for part in s.split('.') {
                        let part = nfkc(part).into_owned();
                        if let Some(problem) = self.attr_problem(&part) {
                            self.report(
                                "reflection",
                                "reflection",
                                format!("`{func}` with a blocked name: {}", problem.why),
                                offset,
                            );
                        }
                    }
                }
                None => self.report(
                    "reflection",
                    "reflection",
                    format!("`{func}` with a computed attribute name cannot be checked"),
                    offset,
                ),
            }
        }
    }
}

/// The name a call goes to: `f` for `f(...)`, `m` for `x.y.m(...)`.
fn callee_name(func: &Expr) -> Option<&str> {
    match func {
        Expr::Name(n) => Some(n.id.as_str()),
        Expr::Attribute(a) => Some(a.attr.as_str()),
        _ => None,
    }
}

fn keyword<'e>(c: &'e ast::ExprCall, name: &str) -> Option<&'e Expr> {
    c.keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == name))
        .map(|k| &k.value)
}

/// The literal path of a receiver like `Path("x.py")` or `Path("a") / "x.py"`.
fn receiver_path(e: &Expr, budget: &mut usize) -> Option<String> {
    match e {
        Expr::Call(inner) => literal_string(inner.args.last()?, budget),
        Expr::BinOp(b) if matches!(b.op, ast::Operator::Div) => literal_string(&b.right, budget),
        _ => None,
    }
}

fn const_str(e: &Expr) -> Option<&str> {
    match e {
        Expr::Constant(c) => match &c.value {
            Constant::Str(s) => Some(s.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// A string literal, or the value of a foldable string expression.
fn literal_string(e: &Expr, budget: &mut usize) -> Option<String> {
    match const_str(e) {
        Some(s) => Some(s.to_string()),
        None if strings::is_composite(e) => strings::fold(e, budget),
        None => None,
    }
}

/// `open(3)`, `open(-1)`, `open(file=0)`.
fn opens_descriptor(c: &ast::ExprCall) -> bool {
    let first = c.args.first().or_else(|| {
        c.keywords
            .iter()
            .find(|k| {
                k.arg
                    .as_ref()
                    .is_some_and(|a| matches!(a.as_str(), "file" | "fd"))
            })
            .map(|k| &k.value)
    });
    match first {
        Some(Expr::Constant(k)) => matches!(k.value, Constant::Int(_) | Constant::Bool(_)),
        Some(Expr::UnaryOp(u)) if matches!(u.op, UnaryOp::USub) => {
            matches!(u.operand.as_ref(), Expr::Constant(k) if matches!(k.value, Constant::Int(_)))
        }
        _ => false,
    }
}
