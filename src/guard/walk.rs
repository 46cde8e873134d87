//! The AST walk: visits every statement, expression and pattern once and
//! reports what the policy forbids. Findings carry byte offsets; `mod.rs`
//! turns them into lines and columns.
//!
//! The walk is recursive but depth-bounded: the pre-parse scan (depth.rs)
//! already keeps trees shallow, and [`MAX_AST_DEPTH`] is a second fence that
//! refuses, rather than overflows, if a shape slips past it.

use std::collections::{HashMap, HashSet};

use rustpython_parser::Parse;
use rustpython_parser::ast::{self, Constant, Expr, ExprContext, Pattern, Ranged, Stmt, UnaryOp};

use super::depth;
use super::names::nfkc;
use super::paths::{self, Roots};
use super::policy::{Action, Policy, is_dunder};
use super::strings;
use super::tripwire;

/// Deepest AST nesting the walker descends into.
pub const MAX_AST_DEPTH: usize = 10_000;

/// How many code strings may nest inside each other (a query string holding
/// a query string ...). Real code never nests them at all.
const MAX_EMBED_DEPTH: u32 = 4;

/// Code strings longer than this are refused rather than parsed: a query or
/// an annotation is one short expression.
const MAX_EMBEDDED_LEN: usize = 64 * 1024;

/// The `str.format` entry points whose receiver is the template.
const FORMAT_METHODS: &[&str] = &["format", "format_map"];

/// Class attribute whose strings `case C(x, y)` reads as attribute names.
const MATCH_ARGS: &str = "__match_args__";

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
    let mut w = Walker::new(policy, roots, strings::FOLD_BUDGET, 0);
    w.body(body);
    w.finish()
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
    /// Enclosing class names, innermost last: `__x` inside `class C` is
    /// the attribute `_C__x` (private name mangling).
    class_stack: Vec<String>,
    /// Enclosing functions: name and the parameter after `self`.
    fn_stack: Vec<(String, Option<String>)>,
    /// For every name this code binds: true while each binding is a plain
    /// string literal (a `str.format` template the guard has read).
    string_names: HashMap<String, bool>,
    /// `name.format(...)` receivers, resolved against `string_names` at the end.
    format_names: Vec<(String, usize)>,
    /// First offset of an unconditional module-level `name = "literal"`.
    literal_at: HashMap<String, usize>,
    /// True while the targets of `name = "literal"` are walked.
    const_store: bool,
    /// Statement blocks entered (1: the module's own statements).
    block_depth: u32,
    /// > 0 inside an annotation, where CPython's typing evaluates strings.
    in_annotation: u32,
    /// How many code strings this walker is nested in (0: the submitted code).
    embed_depth: u32,
}

/// What is wrong with reading attribute `name` (already NFKC-normalised).
struct AttrProblem {
    rule: &'static str,
    category: String,
    why: String,
}

impl<'a> Walker<'a> {
    fn new(policy: &'a Policy, roots: &'a Roots, fold_budget: usize, embed_depth: u32) -> Self {
        let getter_names = policy
            .attribute_getters
            .iter()
            .map(|q| q.rsplit('.').next().unwrap_or(q).to_string())
            .collect();
        Walker {
            policy,
            roots,
            getter_names,
            findings: Vec::new(),
            bound: HashSet::new(),
            module_name_loads: Vec::new(),
            depth: 0,
            fold_suppress: 0,
            fold_budget,
            cap: policy.limits.max_findings.saturating_mul(10).max(100),
            class_stack: Vec::new(),
            fn_stack: Vec::new(),
            string_names: HashMap::new(),
            format_names: Vec::new(),
            literal_at: HashMap::new(),
            const_store: false,
            block_depth: 0,
            in_annotation: 0,
            embed_depth,
        }
    }

    /// Resolves what needed the whole code, then sorts the findings.
    fn finish(mut self) -> Vec<RawFinding> {
        // A code string runs against the program's namespace, which this
        // walker does not see: its names are judged by the outer walk.
        if self.embed_depth == 0 {
            let loads = std::mem::take(&mut self.module_name_loads);
            for (name, offset) in loads {
                if !self.bound.contains(&name) {
                    self.report(
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
        }
        let templates = std::mem::take(&mut self.format_names);
        for (name, offset) in templates {
            // Every binding in this code is a literal, and one of them runs
            // unconditionally before the use: a value left by an earlier
            // call (or hidden behind `if False:`) cannot reach the template.
            let literal = self.string_names.get(&name) == Some(&true)
                && self.literal_at.get(&name).is_some_and(|&at| at < offset);
            if !literal {
                self.report(
                    "format_field",
                    "reflection",
                    format!(
                        "`{name}.format(...)`: `{name}` is not a string literal assigned in this code, \
                         so its fields (which can read any attribute) cannot be checked; \
                         use an f-string or a literal template"
                    ),
                    offset,
                );
            }
        }
        let mut findings = self.findings;
        findings.sort_by(|a, b| a.offset.cmp(&b.offset).then_with(|| a.rule.cmp(&b.rule)));
        findings.dedup_by(|a, b| a.offset == b.offset && a.rule == b.rule);
        findings
    }

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

    /// The name CPython really looks up for `__x` written inside a class:
    /// `license.__filenames` in `class _Printer` reads `_Printer__filenames`.
    fn mangled(&self, name: &str) -> Option<String> {
        let class = self.class_stack.last()?.trim_start_matches('_');
        let private = name.starts_with("__") && !name.ends_with("__") && !name.contains('.');
        (private && !class.is_empty()).then(|| format!("_{class}{name}"))
    }

    /// Names a reflection call must not fetch even as a constant: functions
    /// the guard only judges when it sees them called directly
    /// (`getattr(operator, "attrgetter")(name)`, `methodcaller("format", x)`).
    fn reflection_sensitive(&self, name: &str) -> bool {
        let p = self.policy;
        p.reflection_builtins.contains(name)
            || self.getter_names.contains(name)
            || p.blocked_builtins.contains(name)
            || p.code_string_methods.contains(name)
            || p.code_string_functions.contains(name)
            || FORMAT_METHODS.contains(&name)
            || name == "vformat"
    }

    fn check_attr_name(&mut self, name: &str, offset: usize, context: &str) {
        if let Some(mangled) = self.mangled(name)
            && let Some(problem) = self.attr_problem(&mangled)
        {
            self.report(
                problem.rule,
                &problem.category,
                format!(
                    "{context} (`{name}` is `{mangled}` inside this class): {}",
                    problem.why
                ),
                offset,
            );
        }
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
            let literal = self.const_store;
            if literal && self.block_depth == 1 && self.fn_stack.is_empty() {
                self.literal_at.entry(name.to_string()).or_insert(offset);
            }
            self.string_names
                .entry(name.to_string())
                .and_modify(|v| *v &= literal)
                .or_insert(literal);
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
        self.bind_owned(nfkc(raw).into_owned());
    }

    /// A binding that is not a string literal (parameter, import, def, ...).
    fn bind_owned(&mut self, name: String) {
        self.string_names.insert(name.clone(), false);
        self.bound.insert(name);
    }

    /// Whether `e` is a string the guard can read completely.
    fn is_literal_string(&mut self, e: &Expr) -> bool {
        match const_str(e) {
            Some(_) => true,
            None if strings::is_composite(e) => {
                strings::fold(e, &mut self.fold_budget).is_some_and(|v| !v.contains(strings::HOLE))
            }
            None => false,
        }
    }

    /// Checks `code`, a string the program hands to an evaluator (a pandas
    /// query, a string annotation), as if it were part of the source. Every
    /// finding points at the string literal at `offset`.
    fn embedded_code(&mut self, code: &str, offset: usize, what: &str) {
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
        if depth::scan(&text, limits).is_err() {
            self.report(
                "code_string",
                "code",
                format!("the {what} nests too deeply to be checked"),
                offset,
            );
            return;
        }
        let Ok(body) = ast::Suite::parse(&text, "<string>") else {
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
        sub.body(&body);
        self.fold_budget = sub.fold_budget;
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

    /// `__match_args__ = (...)`: `case C(x)` reads these attributes by name.
    fn match_args_value(&mut self, value: Option<&Expr>, offset: usize) {
        let items = match value {
            Some(Expr::Tuple(t)) => Some(&t.elts),
            Some(Expr::List(l)) => Some(&l.elts),
            _ => None,
        };
        let names: Option<Vec<String>> = items.and_then(|items| {
            items
                .iter()
                .map(|e| const_str(e).map(|s| nfkc(s).into_owned()))
                .collect()
        });
        let Some(names) = names else {
            self.report(
                "reflection",
                "reflection",
                format!("`{MATCH_ARGS}` must be a literal tuple of attribute names: class patterns read them by name"),
                offset,
            );
            return;
        };
        for name in names {
            if let Some(problem) = self.attr_problem(&name) {
                self.report(
                    "reflection",
                    "reflection",
                    format!("`{MATCH_ARGS}` names a blocked attribute: {}", problem.why),
                    offset,
                );
            }
        }
    }

    /// Walks an annotation; CPython's typing evaluates strings found in it.
    fn annotation(&mut self, e: Option<&Expr>) {
        if let Some(e) = e {
            self.in_annotation += 1;
            self.expr(e);
            self.in_annotation -= 1;
        }
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
        self.block_depth += 1;
        for s in stmts {
            self.stmt(s);
        }
        self.block_depth -= 1;
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
                self.definition(f.name.as_str(), offset);
                self.exprs(&f.decorator_list);
                self.arguments(&f.args);
                self.annotation(f.returns.as_deref());
                self.type_params(&f.type_params);
                let name = nfkc(f.name.as_str()).into_owned();
                self.fn_stack.push((name, second_param(&f.args)));
                self.body(&f.body);
                self.fn_stack.pop();
            }
            Stmt::AsyncFunctionDef(f) => {
                self.bind(f.name.as_str());
                self.definition(f.name.as_str(), offset);
                self.exprs(&f.decorator_list);
                self.arguments(&f.args);
                self.annotation(f.returns.as_deref());
                self.type_params(&f.type_params);
                let name = nfkc(f.name.as_str()).into_owned();
                self.fn_stack.push((name, second_param(&f.args)));
                self.body(&f.body);
                self.fn_stack.pop();
            }
            Stmt::ClassDef(c) => {
                self.bind(c.name.as_str());
                self.exprs(&c.decorator_list);
                self.exprs(&c.bases);
                self.keywords(&c.keywords);
                self.type_params(&c.type_params);
                self.class_stack.push(nfkc(c.name.as_str()).into_owned());
                self.body(&c.body);
                self.class_stack.pop();
            }
            Stmt::Return(r) => self.opt_expr(r.value.as_deref()),
            Stmt::Delete(d) => self.exprs(&d.targets),
            Stmt::Assign(a) => {
                if a.targets
                    .iter()
                    .any(|t| target_name(t).as_deref() == Some(MATCH_ARGS))
                {
                    self.match_args_value(Some(&a.value), offset);
                }
                self.const_store = self.is_literal_string(&a.value);
                self.exprs(&a.targets);
                self.const_store = false;
                self.expr(&a.value);
            }
            Stmt::TypeAlias(t) => {
                self.expr(&t.name);
                self.type_params(&t.type_params);
                self.expr(&t.value);
            }
            Stmt::AugAssign(a) => {
                if target_name(&a.target).as_deref() == Some(MATCH_ARGS) {
                    self.match_args_value(None, offset);
                }
                self.expr(&a.target);
                self.expr(&a.value);
            }
            Stmt::AnnAssign(a) => {
                if target_name(&a.target).as_deref() == Some(MATCH_ARGS) {
                    self.match_args_value(a.value.as_deref(), offset);
                }
                self.const_store = a
                    .value
                    .as_deref()
                    .is_some_and(|v| self.is_literal_string(v));
                self.expr(&a.target);
                self.const_store = false;
                self.annotation(Some(&a.annotation));
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
                    self.bind_owned(first);
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
                let relative = i.level.is_some_and(|l| l.to_u32() > 0);
                if relative || !self.policy.star_import_allowed.contains(&module) {
                    let shown = if relative {
                        format!(".{module}")
                    } else {
                        module.clone()
                    };
                    self.report(
                        "star_import",
                        "module",
                        format!(
                            "`from {shown} import *` binds names the guard cannot see (and keeps them for \
                             later calls); import the names you use: `from {shown} import a, b`"
                        ),
                        offset,
                    );
                }
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
                None => self.bind_owned(name),
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
            self.annotation(a.def.annotation.as_deref());
            self.opt_expr(a.default.as_deref());
        }
        for a in [&args.vararg, &args.kwarg].into_iter().flatten() {
            self.bind(a.arg.as_str());
            self.annotation(a.annotation.as_deref());
        }
    }

    fn keywords(&mut self, keywords: &[ast::Keyword]) {
        for k in keywords {
            if k.arg
                .as_ref()
                .is_some_and(|a| nfkc(a.as_str()) == MATCH_ARGS)
            {
                self.match_args_value(Some(&k.value), k.start().to_usize());
            }
            self.expr(&k.value);
        }
    }

    /// `def name` in any scope: some dunder methods may not be defined.
    fn definition(&mut self, raw: &str, offset: usize) {
        let name = nfkc(raw);
        if self.policy.not_definable.contains(name.as_ref()) {
            self.report(
                "dunder_name",
                "internals",
                format!(
                    "defining `{name}` is not allowed: numpy reads raw memory addresses from it, \
                     or class patterns read attributes by the names it returns"
                ),
                offset,
            );
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
                // `case {"__builtins__": b}` is `d["__builtins__"]`.
                for key in &m.keys {
                    self.dunder_key(key, key.start().to_usize());
                }
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
                // type("A", (), {"__match_args__": (...)}) builds a class.
                for (k, v) in d.keys.iter().zip(&d.values) {
                    if let Some(k) = k
                        && const_str(k).is_some_and(|s| nfkc(s) == MATCH_ARGS)
                    {
                        self.match_args_value(Some(v), k.start().to_usize());
                    }
                }
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
            Expr::Constant(c) => {
                self.constant(&c.value, offset);
                if self.in_annotation > 0
                    && let Constant::Str(code) = &c.value
                {
                    // typing.get_type_hints, pydantic and singledispatch eval
                    // string annotations: `def f(x: "__import__('os')")`.
                    self.embedded_code(code, offset, "string annotation");
                }
            }
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
                if !as_callee && FORMAT_METHODS.contains(&name.as_ref()) {
                    // `map(tmpl.format, rows)`: the template must be readable.
                    self.format_template(&a.value, None, offset);
                }
                self.expr(&a.value);
            }
            Expr::Subscript(s) => {
                self.dunder_key(&s.slice, offset);
                self.expr(&s.value);
                // `List["x"]`, `list["x"]`: a string argument of a generic
                // becomes a forward reference that typing later evaluates.
                let generic = callee_name(&s.value).is_some_and(|n| {
                    n.starts_with(|c: char| c.is_uppercase())
                        || matches!(n, "list" | "dict" | "tuple" | "set" | "frozenset" | "type")
                });
                if generic {
                    self.annotation(Some(&s.slice));
                } else {
                    self.expr(&s.slice);
                }
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

    /// A constant dunder key: `ns["__builtins__"]`, `case {"__import__": f}`.
    fn dunder_key(&mut self, key: &Expr, offset: usize) {
        if let Some(key) = const_str(key) {
            let key = nfkc(key);
            if is_dunder(&key) && !self.policy.dunder_allowed(&key) {
                self.report(
                    "reflection",
                    "reflection",
                    format!(
                        "indexing by `{key}` reaches interpreter machinery through a namespace"
                    ),
                    offset,
                );
            }
        }
    }

    /// The template of a `str.format` call must be a string the guard has
    /// read: its fields can walk any attribute (`"{0.__class__}"`).
    fn format_template(&mut self, recv: &Expr, call: Option<&ast::ExprCall>, offset: usize) {
        if self.is_literal_string(recv) {
            return;
        }
        // str.format(tmpl, ...) and string.Formatter().format(tmpl, ...)
        // take the template as their first argument.
        let template_first = match recv {
            Expr::Name(n) => n.id.as_str() == "str",
            Expr::Call(inner) => callee_name(&inner.func).is_some_and(|n| nfkc(n) == "Formatter"),
            _ => false,
        };
        if let Expr::Name(n) = recv
            && !template_first
        {
            self.format_names
                .push((nfkc(n.id.as_str()).into_owned(), offset));
            return;
        }
        if template_first
            && let Some(c) = call
            && !Self::unpacked_args(c)
            && let Some(first) = c.args.first()
            && self.is_literal_string(first)
        {
            return;
        }
        self.report(
            "format_field",
            "reflection",
            "a `format` template that is not a string literal cannot be checked (its fields can read \
             any attribute); use an f-string or a literal template"
                .into(),
            offset,
        );
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
        if let Some(name) = callee.as_deref() {
            self.call_by_name(name, c);
        }
        if let Some(target) = self.suffix_target(c) {
            self.report(
                "code_file_write",
                "code",
                format!(
                    "creating a file ending in `{target}` creates code that a later import would run \
                     unchecked; use a data suffix (.csv, .json, .txt)"
                ),
                c.start().to_usize(),
            );
        }
        for k in &c.keywords {
            let Some(arg) = &k.arg else { continue };
            let arg = nfkc(arg.as_str());
            if let Some(d) = self.policy.dangerous_keywords.get(arg.as_ref())
                && !literally_falsy(&k.value)
            {
                let why = format!("`{arg}=` {} (only a literal False is allowed)", d.reason);
                let category = d.category.clone();
                self.report("blocked_attribute", &category, why, k.start().to_usize());
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

    /// Checks that depend on the called name: code strings, `str.format`
    /// templates and explicit `__setattr__` calls.
    fn call_by_name(&mut self, name: &str, c: &ast::ExprCall) {
        let offset = c.start().to_usize();
        let method = match c.func.as_ref() {
            Expr::Attribute(a) => Some(a),
            _ => None,
        };
        if method.is_some() && self.policy.code_string_methods.contains(name) {
            let code = c.args.first().or_else(|| keyword(c, "expr"));
            match code.map(|e| (e, const_str(e))) {
                // `model.eval()`: not a code string at all.
                None if !Self::unpacked_args(c) => {}
                Some((e, Some(text))) => {
                    self.embedded_code(text, e.start().to_usize(), &format!("`.{name}` string"));
                }
                _ => self.report(
                    "code_string",
                    "code",
                    format!(
                        "`.{name}(...)` runs its argument as code, so it must be a string literal the guard \
                         can read; refer to Python values with @name (`df.query(\"x > @limit\")`)"
                    ),
                    offset,
                ),
            }
        }
        if self.policy.code_string_functions.contains(name)
            && let Some(first) = c.args.first()
            && let Some(text) = const_str(first)
        {
            self.embedded_code(text, first.start().to_usize(), &format!("`{name}` string"));
        }
        if let Some(a) = method {
            if FORMAT_METHODS.contains(&name) {
                self.format_template(&a.value, Some(c), offset);
            }
            if name == "vformat" {
                let literal = c.args.first().is_some_and(|t| self.is_literal_string(t));
                if !literal || Self::unpacked_args(c) {
                    self.report(
                        "format_field",
                        "reflection",
                        "`vformat` with a template that is not a string literal cannot be checked"
                            .into(),
                        offset,
                    );
                }
            }
            if matches!(name, "__setattr__" | "__delattr__") {
                self.dunder_setattr(name, c);
            }
        }
    }

    /// `object.__setattr__(obj, name, v)` is `setattr` spelled differently;
    /// the name must be a constant the guard can check. Passing the
    /// parameter straight through inside `def __setattr__(self, name, v)`
    /// is the one computed form allowed: that name came from an `obj.x = v`
    /// the guard already read.
    fn dunder_setattr(&mut self, func: &str, c: &ast::ExprCall) {
        let offset = c.start().to_usize();
        let first_two = &c.args[..c.args.len().min(2)];
        let constants: Vec<String> = first_two
            .iter()
            .filter_map(|e| const_str(e).map(|s| nfkc(s).into_owned()))
            .collect();
        if !constants.is_empty() && !Self::unpacked_args(c) {
            for name in constants {
                if let Some(problem) = self.attr_problem(&name) {
                    self.report(
                        "reflection",
                        "reflection",
                        format!("`{func}` with a blocked name: {}", problem.why),
                        offset,
                    );
                }
            }
            return;
        }
        let pass_through = self.fn_stack.last().is_some_and(|(fname, param)| {
            fname == func
                && param.as_deref().is_some_and(|p| {
                    first_two
                        .iter()
                        .any(|e| matches!(e, Expr::Name(n) if nfkc(n.id.as_str()) == p))
                })
        });
        if !pass_through {
            self.report(
                "reflection",
                "reflection",
                format!("`{func}` with a computed attribute name cannot be checked; assign `obj.name = value`"),
                offset,
            );
        }
    }

    /// `tempfile.NamedTemporaryFile(suffix=".py")` and friends.
    fn suffix_target(&mut self, c: &ast::ExprCall) -> Option<String> {
        let suffix = keyword(c, "suffix")?;
        let value = literal_string(suffix, &mut self.fold_budget)?;
        let lower = value.to_ascii_lowercase();
        self.policy
            .code_extensions
            .iter()
            .any(|ext| lower.ends_with(ext.as_str()))
            .then_some(value)
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
            // Renaming or copying data to `x.py` writes code just the same.
            ("rename" | "link_to" | "copy" | "copy2" | "copyfile" | "move", _) => {
                let target = c
                    .args
                    .get(usize::from(receiver.is_none() && c.args.len() > 1));
                literal_string(target.or_else(|| keyword(c, "target"))?, budget)
            }
            // str.replace has the same name; only a path receiver counts.
            ("replace", Some(recv)) if receiver_path(recv, budget).is_some() => {
                literal_string(c.args.first().or_else(|| keyword(c, "target"))?, budget)
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
                } else if func == "getattr" && self.reflection_sensitive(&name) {
                    self.report(
                        "reflection",
                        "reflection",
                        format!("`getattr(x, \"{name}\")` fetches a function the guard only allows as a direct call"),
                        offset,
                    );
                } else if func == "setattr" && name == MATCH_ARGS {
                    self.report(
                        "reflection",
                        "reflection",
                        format!("`setattr(x, \"{MATCH_ARGS}\", ...)` sets attribute names class patterns will read"),
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
                        } else if self.reflection_sensitive(&part) {
                            self.report(
                                "reflection",
                                "reflection",
                                format!("`{func}(\"{part}\")` reaches a function the guard only allows as a direct call"),
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
    first.is_some_and(|e| numeric(e, 0))
}

/// An expression that can only be a number: `3`, `-1`, `1 + 2`, `int("3")`,
/// `len(x)`. A path is never spelled like this.
fn numeric(e: &Expr, depth: u32) -> bool {
    if depth > 16 {
        return false;
    }
    match e {
        Expr::Constant(k) => matches!(k.value, Constant::Int(_) | Constant::Bool(_)),
        Expr::UnaryOp(u) => !matches!(u.op, UnaryOp::Not) && numeric(&u.operand, depth + 1),
        Expr::BinOp(b) => {
            // `"a" * 3` is a string; a number needs a number on both sides
            // for `+`, and on either side only for the arithmetic-only ops.
            match b.op {
                ast::Operator::Add | ast::Operator::Mult | ast::Operator::Mod => {
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

/// A keyword value that keeps a dangerous mode off: False, None or 0.
fn literally_falsy(e: &Expr) -> bool {
    match e {
        Expr::Constant(k) => match &k.value {
            Constant::Bool(b) => !b,
            Constant::None => true,
            Constant::Int(i) => i.to_string() == "0",
            _ => false,
        },
        _ => false,
    }
}

/// The parameter after `self`: the attribute name in `def __setattr__(self, name, value)`.
fn second_param(args: &ast::Arguments) -> Option<String> {
    args.posonlyargs
        .iter()
        .chain(&args.args)
        .nth(1)
        .map(|a| nfkc(a.def.arg.as_str()).into_owned())
}

/// The name an assignment target binds or sets: `x` or `obj.x`.
fn target_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Name(n) => Some(nfkc(n.id.as_str()).into_owned()),
        Expr::Attribute(a) => Some(nfkc(a.attr.as_str()).into_owned()),
        _ => None,
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
