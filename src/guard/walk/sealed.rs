//! Methods whose `self` is certainly an instance of the code's own class, so
//! that `self.optimizer` read there is an attribute the code's own objects
//! hold, not `jinja2.optimizer` handed out by a library.
//!
//! A method gets a foreign `self` only when its function is reached without
//! an instance: through the class object (`C.m(jinja2)`, `type(x).m`,
//! `x.__class__.m`, `C.__dict__`, `vars(C)`), through a bound method's
//! `__func__`, or through something that finds the class by itself
//! (`globals()`, a module's attributes, `inspect`, `gc`). So a class is
//! *sealed* when the code never lets its class object out:
//!
//! - its name is bound only by its `class` statements (a cell run twice
//!   defines it twice: each is sealed or none is), and every load of it
//!   is a call (`C(...)`), the type in `isinstance`/`issubclass`, or the base
//!   of another sealed class of the code;
//! - its bases are sealed classes of the code (or `object`), with no
//!   metaclass, and its decorators are `dataclass` or `total_ordering`;
//! - every class of the code that names it as a base is sealed too;
//! - nowhere in the code: `type(x)` other than `type(x).__name__` or a
//!   comparison, `__class__` other than `.__class__.__name__`, a dunder that
//!   reaches a class's or a function's insides (`__dict__`, `__func__`,
//!   `__mro__`, `__subclasses__`, ...), `globals`/`locals`/`vars`/`dir`/
//!   `__import__` (as names or attributes), `_getframe`, `.modules`, a
//!   `__set_name__` (it is handed the class), an import of `inspect`, `gc`,
//!   `importlib`, `builtins` or `__main__`, an attribute named like the
//!   class, or a string equal to its name;
//! - it has no class method, `__new__`, `__init_subclass__` or
//!   `__class_getitem__`: each is handed the class object.
//!
//! A method of a sealed class (not a static or class method) whose first
//! parameter no statement, lambda or comprehension in it binds again has
//! that class's instance as `self`. Whatever such a `self.x` holds was
//! stored by code the guard read.

use foldhash::{HashMap, HashSet};
use ruff_python_ast::visitor::{self, Visitor};

use ruff_text_size::Ranged;

use super::super::ast::{Expr, Stmt, callee_name, const_str, py};
use super::super::names::nfkc;

/// Attributes that reach a class's or a function's insides.
const OPENERS: &[&str] = &[
    "__dict__",
    "__func__",
    "__self__",
    "__mro__",
    "mro",
    "__bases__",
    "__base__",
    "__subclasses__",
    "__getattribute__",
    "__get__",
    "__globals__",
    "__closure__",
    "__code__",
    "__wrapped__",
    "__annotations__",
    "get_type_hints",
    "f_globals",
    "f_locals",
    "f_back",
    "tb_frame",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "modules",
    "_getframe",
    "__set_name__",
];

/// Calls that find classes without naming them.
const FINDERS: &[&str] = &[
    "globals",
    "locals",
    "vars",
    "dir",
    "__import__",
    "eval",
    "exec",
];

/// Modules that find classes without naming them.
const FINDER_MODULES: &[&str] = &["inspect", "gc", "importlib", "__main__", "builtins"];

/// Decorators that take the class and hand back the same class, calling none of
/// its methods with another `self`.
const PLAIN_DECORATORS: &[&str] = &["dataclass", "total_ordering"];

/// What the code's methods' `self` is, by the offset of their `def` statement, and
/// which names hold instances of the code's sealed classes.
#[derive(Debug, Default)]
pub(super) struct Selves {
    /// Certainly an instance of the method's own class (see the module doc): the
    /// class's name.
    pub own_instance: HashMap<usize, String>,
    /// Names every binding of which is `C(...)` of a sealed class: the class's name.
    pub instances: HashMap<String, String>,
    /// The methods a sealed class's instances have from its own `def` statements
    /// (and its bases'), which no other statement of a class body rebinds.
    pub methods: HashMap<String, HashSet<String>>,
    /// Bound again inside the method (by an assignment, a nested function's or a
    /// lambda's parameter, a comprehension, a pattern): not the method's `self` there.
    pub rebound: HashSet<usize>,
}

/// Reads the code's classes and methods (see the module doc).
pub(super) fn selves(parts: &[&[Stmt]]) -> Selves {
    let mut scan = Scan::default();
    for part in parts {
        for s in *part {
            scan.visit_stmt(s);
        }
    }
    let sealed = if scan.leaks_classes {
        HashSet::default()
    } else {
        scan.sealed()
    };
    let mut out = Selves::default();
    for m in &scan.methods {
        if m.self_rebound {
            out.rebound.insert(m.offset);
        } else if m.plain && sealed.contains(&m.class) {
            out.own_instance.insert(m.offset, m.class.clone());
        }
    }
    for (name, made) in std::mem::take(&mut scan.made) {
        if let Some(class) = made.filter(|c| sealed.contains(c)) {
            out.instances.insert(name, class);
        }
    }
    let mut memo = HashMap::default();
    for class in &sealed {
        out.methods
            .insert(class.clone(), scan.methods_of(class, &mut memo));
    }
    out
}

/// One class statement of the code.
struct Class {
    /// Names of its bases (`None`: a base that is not a plain name).
    bases: Vec<Option<String>>,
    /// A metaclass or a decorator other than the plain ones.
    unusual: bool,
    /// Names its body binds by `def`, and by anything else.
    defs: HashSet<String>,
    others: HashSet<String>,
}

/// A node's exact place: two nodes share it only when one is the other's only
/// content, which no load here can be.
fn span(node: &impl Ranged) -> (usize, usize) {
    let r = node.range();
    (r.start().to_usize(), r.end().to_usize())
}

/// One candidate method.
struct Method {
    class: String,
    offset: usize,
    /// No decorator but the plain ones (a static or class method is not one).
    plain: bool,
    /// Its first parameter is bound again somewhere inside it.
    self_rebound: bool,
}

#[derive(Default)]
struct Scan {
    classes: HashMap<String, Vec<Class>>,
    /// Names bound by anything but their class statement, or loaded other than
    /// as allowed.
    let_out: HashSet<String>,
    /// Names used as attributes or string values anywhere.
    named: HashSet<String>,
    methods: Vec<Method>,
    /// Something in the code can reach any class (see the module doc).
    leaks_classes: bool,
    /// The exact nodes (start and end) of loads that hand nothing on: `type(x)` and
    /// `x.__class__` whose name is read or that are compared, the callee of a call,
    /// the types of `isinstance`, the bases of a class.
    harmless: HashSet<(usize, usize)>,
    /// The method names of the class whose body statements are being walked
    /// (empty inside its methods), and whether one of them was loaded: a class body
    /// that loads one hands the plain function on.
    method_names: Vec<(HashSet<String>, bool)>,
    /// The first parameters of the methods being walked, innermost last, and
    /// whether each was bound again.
    selves: Vec<(String, bool)>,
    /// Per name: the class every binding of it called (`x = C(...)`), or `None`
    /// once it was bound any other way.
    made: HashMap<String, Option<String>>,
    /// Targets of `x = C(...)`, which bind `x` to an instance.
    constructed: HashSet<(usize, usize)>,
}

impl Scan {
    /// The methods `class` and its bases define by `def` and never rebind
    /// otherwise; a name with several class statements has the methods all of
    /// them give. Each class is computed once (`memo`; a cycle of names gives
    /// nothing), so no chain of bases costs more than its length.
    fn methods_of(
        &self,
        class: &str,
        memo: &mut HashMap<String, Option<HashSet<String>>>,
    ) -> HashSet<String> {
        if let Some(done) = memo.get(class) {
            return done.clone().unwrap_or_default();
        }
        let Some(defs) = self.classes.get(class) else {
            return HashSet::default();
        };
        memo.insert(class.to_string(), None);
        let mut all: Option<HashSet<String>> = None;
        for def in defs {
            let mut mine: HashSet<String> = def.defs.difference(&def.others).cloned().collect();
            for base in def.bases.iter().flatten() {
                mine.extend(self.methods_of(base, memo));
            }
            all = Some(match all {
                Some(before) => before.intersection(&mine).cloned().collect(),
                None => mine,
            });
        }
        let all = all.unwrap_or_default();
        memo.insert(class.to_string(), Some(all.clone()));
        all
    }

    /// The classes whose class object never leaves the code's hands: a fixpoint,
    /// since a class is sealed only when its bases are.
    fn sealed(&self) -> HashSet<String> {
        let mut sealed: HashSet<String> = self
            .classes
            .iter()
            .filter(|(name, defs)| {
                defs.iter().all(|d| !d.unusual)
                    && !self.let_out.contains(*name)
                    && !self.named.contains(*name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        loop {
            let mut unsealed: Vec<String> = sealed
                .iter()
                .filter(|name| {
                    !self.classes[*name]
                        .iter()
                        .flat_map(|d| &d.bases)
                        .all(|b| match b {
                            Some(b) => b == "object" || sealed.contains(b),
                            None => false,
                        })
                })
                .cloned()
                .collect();
            // A subclass that lets its class object out lets its bases' methods out
            // with it (`Sub.m(jinja2)`).
            for (name, defs) in &self.classes {
                if !sealed.contains(name) {
                    let bases = defs.iter().flat_map(|d| d.bases.iter().flatten());
                    unsealed.extend(bases.filter(|b| sealed.contains(*b)).cloned());
                }
            }
            if unsealed.is_empty() {
                return sealed;
            }
            for name in &unsealed {
                sealed.remove(name);
            }
        }
    }

    fn class_def(&mut self, c: &py::StmtClassDef) {
        let name = nfkc(c.name.as_str()).into_owned();
        // The name is now a class: whatever instance it held before is gone.
        self.made.insert(name.clone(), None);
        let mut unusual = c.decorator_list.iter().any(|d| {
            let callee = match &d.expression {
                Expr::Call(call) => call.func.as_ref(),
                other => other,
            };
            !callee_name(callee).is_some_and(|n| PLAIN_DECORATORS.contains(&n))
        });
        let mut bases = Vec::new();
        if let Some(args) = &c.arguments {
            unusual |= !args.keywords.is_empty();
            for base in &args.args {
                match base {
                    Expr::Name(n) => {
                        self.harmless.insert(span(base));
                        bases.push(Some(nfkc(n.id.as_str()).into_owned()));
                    }
                    other => {
                        self.visit_expr(other);
                        bases.push(None);
                    }
                }
            }
            for k in &args.keywords {
                self.visit_expr(&k.value);
            }
        }
        for d in &c.decorator_list {
            self.visit_expr(&d.expression);
        }
        // Methods handed the class object itself (`cls`) let it out.
        unusual |= c.body.iter().any(|s| match s {
            Stmt::FunctionDef(f) => {
                matches!(
                    f.name.as_str(),
                    "__new__" | "__init_subclass__" | "__class_getitem__"
                ) || f
                    .decorator_list
                    .iter()
                    .any(|d| callee_name(&d.expression) == Some("classmethod"))
            }
            _ => false,
        });
        let defs: HashSet<String> = c
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::FunctionDef(f) => Some(nfkc(f.name.as_str()).into_owned()),
                _ => None,
            })
            .collect();
        let others = c
            .body
            .iter()
            .filter(|s| !matches!(s, Stmt::FunctionDef(_)))
            .flat_map(super::scopes::statement_binds)
            .collect();
        self.method_names.push((defs.clone(), false));
        for s in &c.body {
            match s {
                Stmt::FunctionDef(f) => self.method(&name, f, s),
                other => self.visit_stmt(other),
            }
        }
        unusual |= self.method_names.pop().is_some_and(|(_, loaded)| loaded);
        self.classes.entry(name).or_default().push(Class {
            bases,
            unusual,
            defs,
            others,
        });
    }

    fn method(&mut self, class: &str, f: &py::StmtFunctionDef, s: &Stmt) {
        // A descriptor's `__set_name__` is handed the class it is set on.
        if f.name.as_str() == "__set_name__" {
            self.leaks_classes = true;
        }
        // A decorator receives the plain function and may hand it to anything; these
        // wrap it and call it only with the instance they were reached through.
        let plain = f.decorator_list.iter().all(|d| {
            callee_name(&d.expression).is_some_and(|n| {
                matches!(
                    n,
                    "property"
                        | "setter"
                        | "getter"
                        | "deleter"
                        | "cached_property"
                        | "cache"
                        | "lru_cache"
                        | "abstractmethod"
                )
            }) || matches!(&d.expression, Expr::Call(c)
                if callee_name(&c.func) == Some("lru_cache"))
        });
        let first = f
            .parameters
            .posonlyargs
            .iter()
            .chain(&f.parameters.args)
            .next()
            .map(|p| nfkc(p.parameter.name.as_str()).into_owned());
        // Its other parameters may shadow a class's name.
        for p in f
            .parameters
            .posonlyargs
            .iter()
            .chain(&f.parameters.args)
            .skip(1)
        {
            self.bound(p.parameter.name.as_str());
        }
        // Inside a method a bare name is not the class's attribute.
        self.method_names.push((HashSet::default(), false));
        let Some(me) = first else {
            visitor::walk_stmt(self, s);
            self.method_names.pop();
            return;
        };
        self.selves.push((me, false));
        visitor::walk_stmt(self, s);
        self.method_names.pop();
        let (_, rebound) = self.selves.pop().unwrap_or_default();
        self.methods.push(Method {
            class: class.to_string(),
            offset: span(s).0,
            plain,
            self_rebound: rebound,
        });
    }

    /// A name bound here: a class's name bound again lets the class out, and a
    /// method's `self` bound again is no longer its instance.
    fn bound(&mut self, name: &str) {
        let name = nfkc(name).into_owned();
        self.made.insert(name.clone(), None);
        for (me, rebound) in &mut self.selves {
            if *me == name {
                *rebound = true;
            }
        }
        self.let_out.insert(name);
    }

    fn parameters(&mut self, p: &py::Parameters) {
        for a in p.posonlyargs.iter().chain(&p.args).chain(&p.kwonlyargs) {
            self.bound(a.parameter.name.as_str());
        }
        for a in [&p.vararg, &p.kwarg].into_iter().flatten() {
            self.bound(a.name.as_str());
        }
    }

    fn call(&mut self, c: &py::ExprCall) {
        let args = &c.arguments.args;
        // `C(...)`: an instance, never the class.
        if let Expr::Name(n) = c.func.as_ref() {
            let name = n.id.as_str();
            if FINDERS.contains(&name) {
                self.leaks_classes = true;
            }
            if name == "type" && args.len() == 1 && !self.harmless.contains(&span(c)) {
                self.leaks_classes = true;
            }
            if matches!(name, "isinstance" | "issubclass") && args.len() == 2 {
                self.types(&args[1]);
            }
            self.harmless.insert(span(c.func.as_ref()));
        }
    }

    /// The type argument of `isinstance`: names and tuples of names are read only.
    fn types(&mut self, e: &Expr) {
        match e {
            Expr::Name(_) => {
                self.harmless.insert(span(e));
            }
            Expr::Tuple(t) => {
                for item in &t.elts {
                    self.types(item);
                }
            }
            _ => {}
        }
    }

    fn attribute(&mut self, a: &py::ExprAttribute) {
        let name = nfkc(a.attr.as_str()).into_owned();
        if OPENERS.contains(&name.as_str()) || FINDERS.contains(&name.as_str()) {
            self.leaks_classes = true;
        }
        // `type(x).__name__`, `x.__class__.__name__`: a string.
        if matches!(name.as_str(), "__name__" | "__qualname__") {
            self.harmless.insert(span(a.value.as_ref()));
        }
        if name == "__class__" && !self.harmless.contains(&span(a)) {
            self.leaks_classes = true;
        }
        self.named.insert(name);
    }
}

impl<'a> Visitor<'a> for Scan {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::ClassDef(c) => return self.class_def(c),
            Stmt::FunctionDef(f) => {
                // A descriptor's `__set_name__` is handed the class it is set on.
                if f.name.as_str() == "__set_name__" {
                    self.leaks_classes = true;
                }
                self.bound(f.name.as_str());
                self.parameters(&f.parameters);
            }
            Stmt::Import(i) => {
                for alias in &i.names {
                    let module = alias.name.as_str();
                    if FINDER_MODULES.contains(&module.split('.').next().unwrap_or(module)) {
                        self.leaks_classes = true;
                    }
                    let bound = alias.asname.as_ref().unwrap_or(&alias.name);
                    self.bound(bound.as_str().split('.').next().unwrap_or_default());
                }
            }
            Stmt::ImportFrom(i) => {
                let module = i.module.as_ref().map_or("", |m| m.as_str());
                if FINDER_MODULES.contains(&module.split('.').next().unwrap_or(module)) {
                    self.leaks_classes = true;
                }
                for alias in &i.names {
                    let bound = alias.asname.as_ref().unwrap_or(&alias.name);
                    self.bound(bound.as_str());
                }
            }
            Stmt::Assign(a) => {
                if let [Expr::Name(target)] = a.targets.as_slice()
                    && let Expr::Call(c) = a.value.as_ref()
                    && let Expr::Name(class) = c.func.as_ref()
                {
                    let class = nfkc(class.id.as_str()).into_owned();
                    self.constructed.insert(span(target));
                    self.made
                        .entry(nfkc(target.id.as_str()).into_owned())
                        .and_modify(|made| {
                            if made.as_ref() != Some(&class) {
                                *made = None;
                            }
                        })
                        .or_insert(Some(class));
                }
            }
            Stmt::Global(g) => g.names.iter().for_each(|n| self.bound(n.as_str())),
            Stmt::Nonlocal(n) => n.names.iter().for_each(|n| self.bound(n.as_str())),
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            // Comparisons read `type(x)` without handing the class on.
            Expr::Compare(c) => {
                for side in std::iter::once(c.left.as_ref()).chain(c.comparators.iter()) {
                    if let Expr::Call(call) = side
                        && matches!(call.func.as_ref(), Expr::Name(n) if n.id.as_str() == "type")
                    {
                        self.harmless.insert(span(side));
                    }
                    if matches!(side, Expr::Name(_)) {
                        self.harmless.insert(span(side));
                    }
                }
            }
            Expr::Attribute(a) => self.attribute(a),
            Expr::Call(c) => self.call(c),
            Expr::Lambda(l) => {
                if let Some(p) = &l.parameters {
                    self.parameters(p);
                }
            }
            Expr::Named(n) => {
                if let Expr::Name(target) = n.target.as_ref() {
                    self.bound(target.id.as_str());
                }
            }
            Expr::Name(n) => {
                let name = nfkc(n.id.as_str()).into_owned();
                if FINDERS.contains(&name.as_str()) && !self.harmless.contains(&span(expr)) {
                    self.leaks_classes = true;
                }
                if n.ctx.is_load() {
                    if let Some((methods, loaded)) = self.method_names.last_mut()
                        && methods.contains(&name)
                    {
                        *loaded = true;
                    }
                    if !self.harmless.contains(&span(expr)) {
                        self.let_out.insert(name);
                    }
                } else if self.constructed.contains(&span(expr)) {
                    // `x = C(...)`: a binding, recorded with its class.
                    let made = self.made.remove(&name);
                    self.bound(&name);
                    if let Some(made) = made {
                        self.made.insert(name, made);
                    }
                } else {
                    self.bound(&name);
                }
            }
            _ => {
                if let Some(text) = const_str(expr) {
                    self.named.insert(text.to_string());
                }
            }
        }
        visitor::walk_expr(self, expr);
    }

    fn visit_comprehension(&mut self, c: &'a py::Comprehension) {
        let mut names = Vec::new();
        super::scopes::target_names(&c.target, &mut names);
        for name in names {
            self.bound(&name);
        }
        visitor::walk_comprehension(self, c);
    }

    fn visit_pattern(&mut self, p: &'a py::Pattern) {
        let name = match p {
            py::Pattern::MatchAs(m) => m.name.as_ref(),
            py::Pattern::MatchStar(m) => m.name.as_ref(),
            py::Pattern::MatchMapping(m) => m.rest.as_ref(),
            _ => None,
        };
        if let Some(name) = name {
            self.bound(name.as_str());
        }
        visitor::walk_pattern(self, p);
    }

    fn visit_except_handler(&mut self, h: &'a py::ExceptHandler) {
        let py::ExceptHandler::ExceptHandler(h) = h;
        if let Some(name) = &h.name {
            self.bound(name.as_str());
        }
        visitor::walk_except_handler(self, &py::ExceptHandler::ExceptHandler(h.clone()));
    }
}
