//! The AST walk: visits every statement, expression and pattern once and
//! reports what the policy forbids. Findings carry byte offsets; `mod.rs`
//! turns them into lines and columns.
//!
//! The traversal lives here; what is checked at each node lives in the
//! submodules: names and attributes (`attrs.rs`), calls (`calls.rs`), code
//! the program hands to an evaluator (`embedded.rs`).
//!
//! The walk is recursive but depth-bounded: the pre-parse scan (depth.rs)
//! already keeps trees shallow, and [`MAX_AST_DEPTH`] is a second fence that
//! refuses, rather than overflows, if a shape slips past it.

mod attrs;
mod calls;
mod capabilities;
mod classes;
mod embedded;
mod forward;
mod namespace;
mod resolve;
mod scopes;
mod sealed;
mod templates;

// Keyed hashing: the keys are names the program chose (see Cargo.toml).
use foldhash::{HashMap, HashSet};

use super::ast::{Expr, Pattern, Ranged, Stmt, const_str, py, start};
use super::names::nfkc;
use super::paths::Roots;
use super::policy::{Action, Policy};
use super::strings;

/// Deepest AST nesting the walker descends into.
pub const MAX_AST_DEPTH: usize = 10_000;

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
    /// The unjudged top-level module an `unjudged_module` finding is about
    /// (kept even when its action is off: the verdict lists it).
    pub module: Option<String>,
}

/// What this code binds to one name.
#[derive(Debug, Clone)]
struct Binding {
    /// True while each binding is a plain string literal (a `str.format`
    /// template the guard has read).
    literal: bool,
    /// First offset of an unconditional module-level `name = "literal"`.
    literal_at: Option<usize>,
    /// True while each binding is `string.Formatter()` (no subclass).
    formatter: bool,
    /// First offset of an unconditional module-level `name = Formatter()`.
    formatter_at: Option<usize>,
    /// True while each binding is plain data: `json.load(...)`,
    /// `json.loads(...)` or a dict display with literal keys.
    plain_data: bool,
    /// What every binding assigned, while each is a string the guard read or
    /// a number (written `0`: its text is never code).
    values: Option<Vec<String>>,
}

/// `SimpleNamespace(**d)` with `d` a name, judged once every binding of `d`
/// in this code is known.
#[derive(Debug)]
struct NamespaceUse {
    name: String,
    offset: usize,
    /// The name was certainly this code's own binding at the use.
    own: bool,
    rule: String,
    category: String,
    what: String,
}

/// `name.format(...)`, judged once every binding of `name` is known.
struct FormatUse {
    name: String,
    offset: usize,
    /// The call's first argument is a literal template.
    literal_first: bool,
    /// The name was certainly this code's own binding at the use (a
    /// function's local, or bound earlier in the same block).
    own: bool,
}

/// How an expression is used: the role decides what counts as an alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A value: assigned, passed, returned.
    Value,
    /// The function of a call.
    Callee,
    /// The object of an attribute access (`S` in `S.Half`).
    Receiver,
    /// A base in a class statement: not an alias (`class P(NamedTuple)`
    /// declares its fields in a body the guard reads), but a subclass can
    /// override the class attributes a `call` capability relies on.
    Base,
    /// A bare decorator (`@numba.njit`): called with the function it
    /// decorates, which is not a literal of any kind.
    Decorator,
}

/// The walk met a code string too deep for the caller's stack (see
/// [`walk`]): run the whole check again on a parse thread.
#[derive(Debug)]
pub struct NeedsBigStack;

/// Walks one module and returns its findings in source order.
///
/// `small_stack`: the walk runs on the caller's stack because the source
/// passed the small-stack depth scan; a code string (a query, a string
/// annotation) that does not pass it too, or a code string inside a code
/// string, stops the walk with [`NeedsBigStack`] rather than parsing it here.
pub fn walk(
    body: &[Stmt],
    policy: &Policy,
    roots: &Roots,
    small_stack: bool,
) -> Result<Vec<RawFinding>, NeedsBigStack> {
    walk_parts(&[body], policy, roots, small_stack)
}

/// [`walk`] of one module given as consecutive parts (a source parsed in
/// parts, split.rs): exactly the walk of their statements joined.
pub fn walk_parts(
    parts: &[&[Stmt]],
    policy: &Policy,
    roots: &Roots,
    small_stack: bool,
) -> Result<Vec<RawFinding>, NeedsBigStack> {
    let mut w = Walker::new(policy, roots, strings::FOLD_BUDGET, 0);
    w.small_stack = small_stack;
    // Sized for the code at once: grown step by step, the table would
    // rehash every name (SipHash: the names are the code's) at each step.
    w.bindings.reserve(expected_names(parts));
    w.imports = resolve::Imports::collect_parts(parts);
    w.selves = sealed::selves(parts);
    // The module's statements, as `body` walks them.
    w.block_depth += 1;
    w.block_own.push(HashMap::default());
    for part in parts {
        for s in *part {
            w.stmt(s);
            w.block_binding(s);
        }
    }
    w.block_depth -= 1;
    w.forwarding_references(parts);
    let mappings: HashSet<String> = w.namespace_names.iter().map(|u| u.name.clone()).collect();
    if !mappings.is_empty() {
        let judged: HashSet<usize> = w.namespace_names.iter().map(|u| u.offset).collect();
        let key_ok = |k: &str| w.attr_problem(k).is_none();
        let changed = namespace::changed(parts, &mappings, &judged, &key_ok);
        w.changed_mappings = changed;
    }
    w.judge_by_name();
    if w.needs_big_stack {
        return Err(NeedsBigStack);
    }
    Ok(w.finish())
}

/// A method of a class this code defines, while its body is walked.
struct OwnMethod {
    /// Its first parameter.
    me: String,
    /// The block depth of its body.
    block: u32,
    /// The attributes of `me` its own block has set so far.
    set: HashSet<String>,
    /// The class `me` is certainly an instance of (sealed.rs).
    own_instance: Option<String>,
}

struct Walker<'a> {
    policy: &'a Policy,
    roots: &'a Roots,
    findings: Vec<RawFinding>,
    /// Every name this code binds anywhere, with what the bindings were:
    /// one map, so that a binding costs one lookup.
    bindings: HashMap<String, Binding>,
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
    /// The first parameter (`self`, `cls`) of each enclosing function.
    self_params: Vec<Option<String>>,
    /// `name.format(...)` receivers, resolved against `bindings` at the end,
    /// and whether the call's first argument is a literal template.
    format_names: Vec<FormatUse>,
    /// True while the targets of `name = "literal"` are walked.
    const_store: bool,
    /// True while the targets of `name = string.Formatter()` are walked.
    formatter_store: bool,
    /// True while the targets of `name = json.loads(...)` (plain data) are walked.
    plain_data_store: bool,
    /// `SimpleNamespace(**name)` uses, judged in `finish`.
    namespace_names: Vec<NamespaceUse>,
    /// Statement blocks entered (1: the module's own statements).
    block_depth: u32,
    /// > 0 inside an annotation, where CPython's typing evaluates strings.
    in_annotation: u32,
    /// How many code strings this walker is nested in (0: the submitted code).
    embed_depth: u32,
    /// What this code's imports bind.
    imports: resolve::Imports,
    /// Names bound to a string built at run time (`s = "a" + x`).
    computed_names: HashSet<String>,
    /// Classes this code defines.
    classes: HashSet<String>,
    /// True while the statements of a class body (not of its methods) are walked.
    in_class_body: bool,
    /// Running on the caller's stack: see [`walk`].
    small_stack: bool,
    /// Set when a code string needs a parse thread's stack.
    needs_big_stack: bool,
    /// Names this code binds, per enclosing function, lambda, comprehension
    /// or bound block (see scopes.rs), innermost last.
    scopes: Vec<scopes::Scope>,
    /// Per statement block entered, innermost last: the names its own
    /// statements have bound so far, and the offset from which.
    block_own: Vec<HashMap<String, usize>>,
    /// Loop bodies entered: what is walked there may run again.
    loop_depth: u32,
    /// Per enclosing function: for a method of a class this code defines,
    /// its `self`, the block depth of its body, the attributes of `self`
    /// it has set so far in that block, and whether `self` is certainly an
    /// instance of its class (see [`Walker::own_self_attribute`]).
    methods: Vec<Option<OwnMethod>>,
    /// What the code's methods' `self` is (sealed.rs).
    selves: sealed::Selves,
    /// The functions of this code being walked, innermost last (forward.rs).
    frames: Vec<forward::Frame>,
    /// Parameters of this code's functions that reach a capability.
    forwards: Vec<forward::Forward>,
    /// Where the calls of those functions that were judged start.
    judged_calls: HashSet<usize>,
    /// While the targets of `name = <literal or number>` are walked: its text.
    const_value: Option<String>,
    /// Names of `**d` mappings some use of the code may change (namespace.rs).
    changed_mappings: HashSet<String>,
    /// Strings given to a capability or a code-string method through names,
    /// judged once every binding of those names is known (forward.rs).
    by_name: Vec<forward::ByName>,
}

impl<'a> Walker<'a> {
    fn new(policy: &'a Policy, roots: &'a Roots, fold_budget: usize, embed_depth: u32) -> Self {
        Walker {
            policy,
            roots,
            findings: Vec::new(),
            bindings: HashMap::default(),
            module_name_loads: Vec::new(),
            depth: 0,
            fold_suppress: 0,
            fold_budget,
            cap: policy.limits.max_findings.saturating_mul(10).max(100),
            class_stack: Vec::new(),
            fn_stack: Vec::new(),
            self_params: Vec::new(),
            format_names: Vec::new(),
            const_store: false,
            formatter_store: false,
            plain_data_store: false,
            namespace_names: Vec::new(),
            block_depth: 0,
            in_annotation: 0,
            embed_depth,
            imports: resolve::Imports::default(),
            computed_names: HashSet::default(),
            classes: HashSet::default(),
            in_class_body: false,
            small_stack: false,
            needs_big_stack: false,
            scopes: Vec::new(),
            block_own: Vec::new(),
            loop_depth: 0,
            methods: Vec::new(),
            selves: sealed::Selves::default(),
            frames: Vec::new(),
            forwards: Vec::new(),
            judged_calls: HashSet::default(),
            const_value: None,
            changed_mappings: HashSet::default(),
            by_name: Vec::new(),
        }
    }

    /// Resolves what needed the whole code, then sorts the findings.
    fn finish(mut self) -> Vec<RawFinding> {
        // A code string runs against the program's namespace, which this
        // walker does not see: its names are judged by the outer walk.
        if self.embed_depth == 0 {
            let loads = std::mem::take(&mut self.module_name_loads);
            for (name, offset) in loads {
                if !self.bindings.contains_key(&name) {
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
        // `SimpleNamespace(**cfg)`: every binding of `cfg` is data whose keys
        // cannot forge an object protocol numpy trusts (JSON has no tuples
        // or callables), or literal keys, and the use is certainly one of them.
        for u in std::mem::take(&mut self.namespace_names) {
            let plain = u.own
                && !self.changed_mappings.contains(&u.name)
                && self.bindings.get(&u.name).is_some_and(|b| b.plain_data);
            if !plain {
                self.report(
                    &u.rule,
                    &u.category,
                    format!(
                        "{}; `**{}`: a mapping whose keys the guard cannot read could name any \
                         attribute: pass the names as keywords, or build it with `json.load`/\
                         `json.loads` or a dict display with literal keys, and do not change it",
                        u.what, u.name
                    ),
                    u.offset,
                );
            }
        }
        let templates = std::mem::take(&mut self.format_names);
        for FormatUse {
            name,
            offset,
            literal_first,
            own,
        } in templates
        {
            // Every binding in this code is a literal, and the use certainly
            // sees one of them (a function's local, a binding earlier in its
            // block, or an unconditional module-level one before it): a value
            // left by an earlier call (or hidden behind `if False:`) cannot
            // reach the template. The same for a `string.Formatter()` the code
            // made itself, whose template is the call's first argument.
            let before = |at: Option<usize>| own || at.is_some_and(|at| at < offset);
            let literal = self.bindings.get(&name).is_some_and(|b| {
                (b.literal && before(b.literal_at))
                    || (literal_first && b.formatter && before(b.formatter_at))
            });
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
            module: None,
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

    // ---- statements -------------------------------------------------------

    fn body(&mut self, stmts: &[Stmt]) {
        self.block_depth += 1;
        self.block_own.push(HashMap::default());
        for s in stmts {
            self.stmt(s);
            self.block_binding(s);
        }
        self.block_own.pop();
        self.block_depth -= 1;
    }

    fn stmt(&mut self, s: &Stmt) {
        let offset = start(s);
        if self.enter(offset) {
            self.stmt_inner(s, offset);
        }
        self.leave();
    }

    fn stmt_inner(&mut self, s: &Stmt, offset: usize) {
        match s {
            Stmt::FunctionDef(f) => self.function_def(f, offset),
            Stmt::ClassDef(c) => self.class_def(c, offset),
            Stmt::Return(r) => self.opt_expr(r.value.as_deref()),
            Stmt::Delete(d) => self.exprs(&d.targets),
            Stmt::Assign(a) => self.assign(a, offset),
            Stmt::TypeAlias(t) => {
                self.expr(&t.name);
                self.type_params(t.type_params.as_deref());
                self.expr(&t.value);
            }
            Stmt::AugAssign(a) => {
                if target_name(&a.target).as_deref() == Some(MATCH_ARGS) {
                    self.match_args_value(None, offset);
                }
                self.expr(&a.target);
                self.expr(&a.value);
            }
            Stmt::AnnAssign(a) => self.ann_assign(a, offset),
            Stmt::For(f) => self.for_loop(f),
            Stmt::While(w) => {
                self.expr(&w.test);
                let own: HashSet<String> = scopes::eager_walrus(&w.test).into_iter().collect();
                self.scopes.push(scopes::Scope::new(own, offset));
                self.loop_depth += 1;
                self.body(&w.body);
                self.loop_depth -= 1;
                self.scopes.pop();
                self.body(&w.orelse);
            }
            Stmt::If(i) => {
                self.expr(&i.test);
                // `if (n := len(x)) > 2:` binds `n` for the block it guards.
                let own: HashSet<String> = scopes::eager_walrus(&i.test).into_iter().collect();
                self.scopes.push(scopes::Scope::new(own, offset));
                self.body(&i.body);
                self.scopes.pop();
                for clause in &i.elif_else_clauses {
                    self.opt_expr(clause.test.as_ref());
                    self.body(&clause.body);
                }
            }
            Stmt::With(w) => self.with_stmt(w),
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
            Stmt::Try(t) => self.try_stmt(t, offset),
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
                Expr::StringLiteral(s) => self.check_string(s.value.to_str(), start(s), true),
                other => self.expr(other),
            },
            Stmt::Pass(_) | Stmt::Break(_) | Stmt::Continue(_) | Stmt::IpyEscapeCommand(_) => {}
        }
    }

    /// A class: its name, bases, decorators and body.
    fn class_def(&mut self, c: &py::StmtClassDef, offset: usize) {
        self.bind(c.name.as_str());
        self.classes.insert(nfkc(c.name.as_str()).into_owned());
        self.class_bases(c, offset);
        self.decorators(&c.decorator_list);
        if let Some(args) = &c.arguments {
            // A base class is not an alias: `class P(NamedTuple)` declares
            // its fields in a body the guard reads.
            for base in &args.args {
                self.expr_as(base, Role::Base);
            }
            self.keywords(&args.keywords);
        }
        self.type_params(c.type_params.as_deref());
        self.class_stack.push(nfkc(c.name.as_str()).into_owned());
        let outer = std::mem::replace(&mut self.in_class_body, true);
        self.body(&c.body);
        self.in_class_body = outer;
        self.class_stack.pop();
    }

    /// An assignment: what its value tells of the names it binds.
    fn assign(&mut self, a: &py::StmtAssign, offset: usize) {
        if a.targets
            .iter()
            .any(|t| target_name(t).as_deref() == Some(MATCH_ARGS))
        {
            self.match_args_value(Some(&a.value), offset);
        }
        self.const_store = self.is_literal_string(&a.value);
        self.const_value = self.literal_text(&a.value);
        if self.computed_string(&a.value, 0) {
            for t in &a.targets {
                if let Expr::Name(n) = t {
                    self.computed_names.insert(nfkc(n.id.as_str()).into_owned());
                }
            }
        }
        self.formatter_store = self.is_plain_formatter(&a.value);
        self.plain_data_store = self.is_plain_data(&a.value);
        self.exprs(&a.targets);
        self.const_store = false;
        self.const_value = None;
        self.formatter_store = false;
        self.plain_data_store = false;
        self.expr(&a.value);
        self.self_attributes_set(&a.targets);
    }

    /// An annotated assignment.
    fn ann_assign(&mut self, a: &py::StmtAnnAssign, offset: usize) {
        if target_name(&a.target).as_deref() == Some(MATCH_ARGS) {
            self.match_args_value(a.value.as_deref(), offset);
        }
        self.class_field(&a.target, offset);
        self.const_store = a
            .value
            .as_deref()
            .is_some_and(|v| self.is_literal_string(v));
        self.const_value = a.value.as_deref().and_then(|v| self.literal_text(v));
        self.expr(&a.target);
        self.const_store = false;
        self.const_value = None;
        self.annotation(Some(&a.annotation));
        self.opt_expr(a.value.as_deref());
    }

    /// A for loop: names a literal sequence binds stay literal in its body.
    fn for_loop(&mut self, f: &py::StmtFor) {
        self.expr(&f.target);
        self.expr(&f.iter);
        let literal = match f.target.as_ref() {
            Expr::Name(n) => scopes::literal_strings(&f.iter)
                .filter(|_| !scopes::rebinds(n.id.as_str(), &f.body, &[]))
                .map(|v| (nfkc(n.id.as_str()).into_owned(), v)),
            _ => None,
        };
        self.scoped(&[&f.target], |w| {
            if let (Some(scope), Some((name, values))) = (w.scopes.last_mut(), literal) {
                scope.literals.insert(name, values);
            }
            w.loop_depth += 1;
            w.body(&f.body);
            w.loop_depth -= 1;
        });
        self.body(&f.orelse);
    }

    /// A try statement: each handler's name is bound in its own scope.
    fn try_stmt(&mut self, t: &py::StmtTry, offset: usize) {
        self.body(&t.body);
        for py::ExceptHandler::ExceptHandler(h) in &t.handlers {
            self.opt_expr(h.type_.as_deref());
            if let Some(name) = &h.name {
                self.bind(name.as_str());
            }
            let own: HashSet<String> = h
                .name
                .iter()
                .map(|n| nfkc(n.as_str()).into_owned())
                .collect();
            self.scopes.push(scopes::Scope::new(own, offset));
            self.body(&h.body);
            self.scopes.pop();
        }
        self.body(&t.orelse);
        self.body(&t.finalbody);
    }

    /// A with statement: what it binds does not count after it.
    fn with_stmt(&mut self, w: &py::StmtWith) {
        for item in &w.items {
            self.expr(&item.context_expr);
            self.opt_expr(item.optional_vars.as_deref());
        }
        let vars: Vec<&Expr> = w
            .items
            .iter()
            .filter_map(|i| i.optional_vars.as_deref())
            .collect();
        // What the block binds does not count after it: a context
        // manager may swallow an exception raised before the binding
        // (even `open` may be another function an earlier call bound).
        self.scoped(&vars, |w2| w2.body(&w.body));
    }

    fn function_def(&mut self, f: &py::StmtFunctionDef, offset: usize) {
        self.bind(f.name.as_str());
        self.definition(f.name.as_str(), offset);
        self.dispatch_registration(f, offset);
        self.decorators(&f.decorator_list);
        self.arguments(&f.parameters);
        self.annotation(f.returns.as_deref());
        self.type_params(f.type_params.as_deref());
        let name = nfkc(f.name.as_str()).into_owned();
        self.fn_stack.push((name, second_param(&f.parameters)));
        self.self_params.push(first_param(&f.parameters));
        // A `self` bound again inside the method (`lambda self: ...`) is not
        // the method's own there: nothing about it is known.
        let own_instance = self.selves.own_instance.get(&offset).cloned();
        let method = first_param(&f.parameters)
            .filter(|_| self.in_class_body && !self.selves.rebound.contains(&offset))
            .map(|me| OwnMethod {
                me,
                block: self.block_depth + 1,
                set: HashSet::default(),
                own_instance,
            });
        self.methods.push(method);
        let outer = std::mem::replace(&mut self.in_class_body, false);
        self.scopes
            .push(scopes::Scope::function(scopes::function_locals(
                Some(&f.parameters),
                &f.body,
            )));
        let frame = forward::Frame::new(f, outer, self.scopes.len() - 1);
        self.frames.push(frame);
        let forwards_before = self.forwards.len();
        self.body(&f.body);
        self.frames.pop();
        self.scopes.pop();
        self.forwarded_defaults(f, forwards_before);
        self.in_class_body = outer;
        self.methods.pop();
        self.self_params.pop();
        self.fn_stack.pop();
    }

    fn decorators(&mut self, decorators: &[py::Decorator]) {
        for d in decorators {
            let role = match &d.expression {
                Expr::Name(_) | Expr::Attribute(_) => Role::Decorator,
                _ => Role::Value,
            };
            self.expr_as(&d.expression, role);
        }
    }

    fn type_params(&mut self, params: Option<&py::TypeParams>) {
        let Some(params) = params else { return };
        for p in &params.type_params {
            match p {
                py::TypeParam::TypeVar(t) => {
                    self.bind(t.name.as_str());
                    self.opt_expr(t.bound.as_deref());
                    self.opt_expr(t.default.as_deref());
                }
                py::TypeParam::ParamSpec(t) => {
                    self.bind(t.name.as_str());
                    self.opt_expr(t.default.as_deref());
                }
                py::TypeParam::TypeVarTuple(t) => {
                    self.bind(t.name.as_str());
                    self.opt_expr(t.default.as_deref());
                }
            }
        }
    }

    fn arguments(&mut self, params: &py::Parameters) {
        for p in super::ast::parameters(params) {
            self.bind(p.name.as_str());
            self.annotation(p.annotation.as_deref());
        }
        for d in super::ast::defaults(params) {
            self.expr(d);
        }
    }

    fn keywords(&mut self, keywords: &[py::Keyword]) {
        for k in keywords {
            if k.arg
                .as_ref()
                .is_some_and(|a| nfkc(a.as_str()) == MATCH_ARGS)
            {
                self.match_args_value(Some(&k.value), start(k));
            }
            self.expr(&k.value);
        }
    }

    fn pattern(&mut self, p: &Pattern) {
        let offset = start(p);
        if self.enter(offset) {
            self.pattern_inner(p, offset);
        }
        self.leave();
    }

    fn pattern_inner(&mut self, p: &Pattern, offset: usize) {
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
                    self.dunder_key(key, start(key));
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
                for q in &c.arguments.patterns {
                    self.pattern(q);
                }
                // `case C(attr=x)` reads `attr` from the subject.
                for k in &c.arguments.keywords {
                    let name = nfkc(k.attr.as_str()).into_owned();
                    self.check_attr_name(&name, offset, "class pattern keyword");
                    self.pattern(&k.pattern);
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

    /// Walks the generators and leaves their variables' scope pushed: the
    /// caller walks the element and pops it. The first iterable is evaluated
    /// outside the comprehension, so it is walked before the scope opens.
    fn comprehensions(&mut self, gens: &[py::Comprehension], elts: &[&Expr]) {
        let mut names = Vec::new();
        for g in gens {
            scopes::target_names(&g.target, &mut names);
        }
        if let Some(first) = gens.first() {
            self.expr(&first.iter);
        }
        let at = gens.first().map_or(0, start);
        let mut scope = scopes::Scope::new(names.iter().cloned().collect(), at);
        // `for stat in ("mean", "median")` as the only binding of `stat`.
        for g in gens {
            if let Expr::Name(n) = &g.target {
                let name = nfkc(n.id.as_str()).into_owned();
                let mut others: Vec<&Expr> = elts.to_vec();
                others.extend(gens.iter().flat_map(|h| h.ifs.iter()));
                if names.iter().filter(|x| **x == name).count() == 1
                    && !scopes::rebinds(&name, &[], &others)
                    && let Some(values) = scopes::literal_strings(&g.iter)
                {
                    scope.literals.insert(name, values);
                }
            }
        }
        self.scopes.push(scope);
        for (i, g) in gens.iter().enumerate() {
            self.expr(&g.target);
            if i > 0 {
                self.expr(&g.iter);
            }
            self.exprs(&g.ifs);
        }
        // The element is evaluated after every condition held: a walrus
        // in a condition binds its name for the element.
        let walrus: Vec<String> = gens
            .iter()
            .flat_map(|g| g.ifs.iter())
            .flat_map(scopes::eager_walrus)
            .collect();
        if let Some(scope) = self.scopes.last_mut() {
            scope.own.extend(walrus);
        }
    }

    /// Walks `f` with the names `targets` bind counted as this code's own.
    fn scoped(&mut self, targets: &[&Expr], f: impl FnOnce(&mut Self)) {
        let mut names = Vec::new();
        for t in targets {
            scopes::target_names(t, &mut names);
        }
        let at = targets.first().map_or(0, |t| start(*t));
        self.scopes
            .push(scopes::Scope::new(names.into_iter().collect(), at));
        f(self);
        self.scopes.pop();
    }

    /// `self.x = ...` as a statement of a method's own block: from here on
    /// `self.x` in that block is the value just stored, whatever `self` is.
    fn self_attributes_set(&mut self, targets: &[Expr]) {
        let depth = self.block_depth;
        let Some(Some(OwnMethod { me, block, set, .. })) = self.methods.last_mut() else {
            return;
        };
        if *block != depth {
            return;
        }
        for t in targets {
            if let Expr::Attribute(a) = t
                && let Expr::Name(n) = a.value.as_ref()
                && nfkc(n.id.as_str()) == me.as_str()
            {
                set.insert(nfkc(a.attr.as_str()).into_owned());
            }
        }
    }

    /// `self.optimizer` on the method's own `self` is not a module handed
    /// out by a library when it is written (`self.optimizer = "adam"`:
    /// storing reads nothing), or read after the method's own block stored
    /// it: even if the method was called with a module as `self`, the store
    /// replaced what the module held. Any read is the code's own when the
    /// method's class never lets its class object out (sealed.rs), so `self`
    /// is certainly its instance. Any other read keeps the re-export check,
    /// because a method called through its class (`C.m(jinja2)`) gets
    /// whatever `self` it is given.
    fn own_self_attribute(&self, a: &py::ExprAttribute) -> bool {
        let Some(Some(OwnMethod {
            me,
            set,
            own_instance,
            ..
        })) = self.methods.last()
        else {
            return false;
        };
        let Expr::Name(n) = a.value.as_ref() else {
            return false;
        };
        if nfkc(n.id.as_str()) != me.as_str() {
            return false;
        }
        a.ctx != py::ExprContext::Load
            || own_instance.is_some()
            || set.contains(nfkc(a.attr.as_str()).as_ref())
    }

    /// `obj.locate(...)` where `obj` is certainly an instance of a sealed class of
    /// this code (its `self` in one of its methods, or a name every binding of which
    /// is `C(...)`, certainly bound in this call) whose own `def` gives `locate`: the
    /// code's own method, not `pydoc.locate`.
    pub(super) fn own_method_call(&self, a: &py::ExprAttribute) -> bool {
        let Expr::Name(n) = a.value.as_ref() else {
            return false;
        };
        let name = nfkc(n.id.as_str());
        let of_self = match self.methods.last() {
            Some(Some(m)) if m.me == name.as_ref() => m.own_instance.as_ref(),
            _ => None,
        };
        let class = of_self.or_else(|| {
            self.selves
                .instances
                .get(name.as_ref())
                .filter(|_| self.own_name(&name, start(n)))
        });
        class
            .and_then(|c| self.selves.methods.get(c))
            .is_some_and(|methods| methods.contains(nfkc(a.attr.as_str()).as_ref()))
    }

    /// Records what a statement of the current block binds, from its end
    /// on: the block's later statements run only once it completed. A class
    /// body's statements bind class attributes, which its methods do not see.
    fn block_binding(&mut self, s: &Stmt) {
        if self.in_class_body {
            return;
        }
        let end = s.range().end().to_usize();
        if let Some(block) = self.block_own.last_mut() {
            for name in scopes::statement_binds(s) {
                block.insert(name, end);
            }
        }
    }

    /// Whether `name`, used at `offset`, is certainly a binding this code
    /// made itself (see scopes.rs) and no import of the code binds it.
    ///
    /// The binding must also outlast every import of the name: a function's
    /// locals are not rebound by imports outside it (its own are left out),
    /// any other binding only counts when no import of the name starts
    /// after it (a loop or a later call could run that import first).
    pub(super) fn own_name(&self, name: &str, offset: usize) -> bool {
        let imports = &self.imports;
        let in_scope = self.scopes.iter().rev().find(|s| s.own.contains(name));
        if let Some(s) = in_scope {
            // The innermost binding of the name decides.
            return if s.function {
                !imports.declared_and_imported(name)
            } else {
                !imports.imported_between(name, s.start, offset, true)
            };
        }
        let again = self.loop_depth > 0 || !self.fn_stack.is_empty();
        self.block_own.iter().any(|b| {
            b.get(name).is_some_and(|&at| {
                at <= offset && !imports.imported_between(name, at, offset, again)
            })
        })
    }

    /// The literal strings `name` iterates, when its innermost binding is a
    /// loop over a literal display that nothing rebinds.
    pub(super) fn loop_literals(&self, name: &str) -> Option<Vec<String>> {
        let scope = self.scopes.iter().rev().find(|s| s.own.contains(name))?;
        scope.literals.get(name).cloned()
    }

    fn expr(&mut self, e: &Expr) {
        self.expr_as(e, Role::Value);
    }

    /// `role` says how `e` is used: the function of a call is the one
    /// place a reflection builtin may appear.
    fn expr_as(&mut self, e: &Expr, role: Role) {
        let offset = start(e);
        if self.enter(offset) {
            let suppressed = self.fold_whole(e, offset);
            self.expr_inner(e, offset, role);
            if suppressed {
                self.fold_suppress -= 1;
            }
        }
        self.leave();
    }

    /// Checks the value of a string-building expression (`"../" * 3 + x`,
    /// f-strings) as one string. True when the parts need no second look.
    fn fold_whole(&mut self, e: &Expr, offset: usize) -> bool {
        if !strings::is_composite(e) || self.fold_suppress > 0 {
            return false;
        }
        let Some(value) = strings::fold(e, &mut self.fold_budget) else {
            return false;
        };
        self.check_string(&value, offset, false);
        // Nested concatenations of a fully folded BinOp/join would only
        // repeat this finding; f-string fields hold real code.
        if matches!(e, Expr::FString(_)) {
            return false;
        }
        self.fold_suppress += 1;
        true
    }

    fn expr_inner(&mut self, e: &Expr, offset: usize, role: Role) {
        match e {
            Expr::BoolOp(b) => self.exprs(&b.values),
            Expr::Named(n) => {
                self.expr(&n.target);
                self.expr(&n.value);
            }
            Expr::BinOp(b) => {
                self.expr(&b.left);
                self.expr(&b.right);
            }
            Expr::UnaryOp(u) => self.expr(&u.operand),
            Expr::Lambda(l) => self.lambda(l),
            Expr::If(i) => {
                self.expr(&i.test);
                self.expr(&i.body);
                self.expr(&i.orelse);
            }
            Expr::Dict(d) => self.dict(d),
            Expr::Set(s) => self.exprs(&s.elts),
            Expr::ListComp(c) => self.comprehension(&c.generators, &c.elt),
            Expr::SetComp(c) => self.comprehension(&c.generators, &c.elt),
            Expr::DictComp(c) => {
                let mut elts = vec![c.value.as_ref()];
                elts.extend(c.key.as_deref());
                self.comprehensions(&c.generators, &elts);
                self.opt_expr(c.key.as_deref());
                self.expr(&c.value);
                self.scopes.pop();
            }
            Expr::Generator(c) => self.comprehension(&c.generators, &c.elt),
            Expr::Await(a) => self.expr(&a.value),
            Expr::Yield(y) => self.opt_expr(y.value.as_deref()),
            Expr::YieldFrom(y) => self.expr(&y.value),
            Expr::Compare(c) => {
                self.expr(&c.left);
                self.exprs(&c.comparators);
            }
            Expr::Call(c) => self.call(c),
            Expr::FString(f) => {
                for part in f.value.iter() {
                    match part {
                        py::FStringPart::Literal(l) => self.check_string(&l.value, start(l), false),
                        py::FStringPart::FString(f) => self.interpolations(&f.elements),
                    }
                }
            }
            Expr::TString(t) => {
                for t in t.value.iter() {
                    self.interpolations(&t.elements);
                }
            }
            Expr::StringLiteral(s) => self.string_literal(s.value.to_str(), offset),
            Expr::BytesLiteral(b) => {
                let bytes: Vec<u8> = b.value.bytes().collect();
                self.check_string(&String::from_utf8_lossy(&bytes), offset, false);
            }
            Expr::NumberLiteral(_)
            | Expr::BooleanLiteral(_)
            | Expr::NoneLiteral(_)
            | Expr::EllipsisLiteral(_)
            | Expr::IpyEscapeCommand(_) => {}
            Expr::Attribute(a) => self.attribute(a, offset, role),
            Expr::Subscript(s) => self.subscript(s, offset),
            Expr::Starred(s) => self.expr(&s.value),
            Expr::Name(n) => {
                self.check_name(n.id.as_str(), n.ctx, offset, role == Role::Callee);
                if n.ctx == py::ExprContext::Load && role != Role::Callee {
                    self.capability_reference(capabilities::Target::Name(n), role, offset);
                }
            }
            Expr::List(l) => self.exprs(&l.elts),
            Expr::Tuple(t) => self.exprs(&t.elts),
            Expr::Slice(s) => {
                self.opt_expr(s.lower.as_deref());
                self.opt_expr(s.upper.as_deref());
                self.opt_expr(s.step.as_deref());
            }
        }
    }

    /// A list, set or generator comprehension: its element in the comprehension's scope.
    fn comprehension(&mut self, generators: &[py::Comprehension], elt: &Expr) {
        self.comprehensions(generators, &[elt]);
        self.expr(elt);
        self.scopes.pop();
    }

    /// A lambda: its parameters' defaults outside, its body in a scope of its own.
    fn lambda(&mut self, l: &py::ExprLambda) {
        if let Some(p) = &l.parameters {
            self.arguments(p);
        }
        self.scopes
            .push(scopes::Scope::function(scopes::function_locals(
                l.parameters.as_deref(),
                &[],
            )));
        self.expr(&l.body);
        self.scopes.pop();
    }

    /// The replacement fields of an f-string (and of their format specs).
    fn interpolations(&mut self, elements: &[py::InterpolatedStringElement]) {
        for element in elements {
            match element {
                py::InterpolatedStringElement::Literal(l) => {
                    self.check_string(&l.value, start(l), false);
                }
                py::InterpolatedStringElement::Interpolation(i) => {
                    self.expr(&i.expression);
                    if let Some(spec) = &i.format_spec {
                        self.interpolations(&spec.elements);
                    }
                }
            }
        }
    }

    fn string_literal(&mut self, value: &str, offset: usize) {
        self.check_string(value, offset, false);
        if self.in_annotation > 0 {
            // typing.get_type_hints, pydantic and singledispatch eval
            // string annotations: `def f(x: "__import__('os')")`.
            self.embedded_code(value, offset, "string annotation");
        }
    }

    fn dict(&mut self, d: &py::ExprDict) {
        // type("A", (), {"__match_args__": (...)}) builds a class.
        for item in &d.items {
            if let Some(k) = &item.key
                && const_str(k).is_some_and(|s| nfkc(s) == MATCH_ARGS)
            {
                self.match_args_value(Some(&item.value), start(k));
            }
        }
        for item in &d.items {
            self.opt_expr(item.key.as_ref());
        }
        for item in &d.items {
            self.expr(&item.value);
        }
    }

    fn attribute(&mut self, a: &py::ExprAttribute, offset: usize, role: Role) {
        let as_callee = role == Role::Callee;
        let name = nfkc(a.attr.as_str());
        // `self.__class__.__name__` is a string: the class object itself is
        // never handed to the program, so `__class__` is not judged here.
        if matches!(name.as_ref(), "__name__" | "__qualname__")
            && a.ctx == py::ExprContext::Load
            && let Expr::Attribute(inner) = a.value.as_ref()
            && nfkc(inner.attr.as_str()) == "__class__"
        {
            self.expr_as(&inner.value, Role::Receiver);
            return;
        }
        self.check_attr_name(&name, offset, "attribute access");
        let own = self.own_self_attribute(a);
        if !own {
            self.reexport_attribute(a, offset);
        }
        if !own && role != Role::Callee && a.ctx == py::ExprContext::Load {
            self.capability_reference(capabilities::Target::Attribute(a), role, offset);
        }
        if !as_callee && self.policy.getter_names.contains(name.as_ref()) {
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
        self.expr_as(&a.value, Role::Receiver);
    }

    fn subscript(&mut self, s: &py::ExprSubscript, offset: usize) {
        self.dunder_key(&s.slice, offset);
        if s.ctx == py::ExprContext::Store {
            self.config_subscript_store(s, offset);
        }
        self.expr(&s.value);
        // `List["x"]`, `list["x"]`: a string argument of a generic
        // becomes a forward reference that typing later evaluates.
        let generic = super::ast::callee_name(&s.value).is_some_and(|n| {
            n.starts_with(|c: char| c.is_uppercase())
                || matches!(n, "list" | "dict" | "tuple" | "set" | "frozenset" | "type")
        });
        if generic {
            self.annotation(Some(&s.slice));
        } else {
            self.expr(&s.slice);
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
}

/// About how many distinct names code of this size binds (ordinary
/// analysis code: one per 100 bytes or so), capped so that a huge source
/// does not reserve much more than it will use.
fn expected_names(parts: &[&[Stmt]]) -> usize {
    let bytes = parts
        .iter()
        .rev()
        .find_map(|p| p.last())
        .map_or(0, |s| s.range().end().to_usize());
    (bytes / 100).clamp(8, 4096)
}

/// The first parameter: `self` or `cls`.
fn first_param(args: &py::Parameters) -> Option<String> {
    args.posonlyargs
        .iter()
        .chain(&args.args)
        .next()
        .map(|a| nfkc(a.parameter.name.as_str()).into_owned())
}

/// The parameter after `self`: the attribute name in `def __setattr__(self, name, value)`.
fn second_param(args: &py::Parameters) -> Option<String> {
    args.posonlyargs
        .iter()
        .chain(&args.args)
        .nth(1)
        .map(|a| nfkc(a.parameter.name.as_str()).into_owned())
}

/// The name an assignment target binds or sets: `x` or `obj.x`.
fn target_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Name(n) => Some(nfkc(n.id.as_str()).into_owned()),
        Expr::Attribute(a) => Some(nfkc(a.attr.as_str()).into_owned()),
        _ => None,
    }
}

/// Parses a module with ruff's parser; the error says where and what.
pub fn parse_suite(text: &str) -> Result<py::ModModule, ruff_python_parser::ParseError> {
    ruff_python_parser::parse_module(text).map(ruff_python_parser::Parsed::into_syntax)
}
