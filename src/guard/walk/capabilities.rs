//! Capabilities named by module and function in the policy: evaluators,
//! reflection, template engines, process spawners, loaders, native code,
//! dangerous modes, configuration keys that name programs, and the
//! re-exports generated from the runtime. What is checked:
//!
//! * a call: the argument the entry names must be a literal of its kind
//!   (code, attribute path, field path, module, template, field names), read
//!   and checked; `never` entries are refused outright;
//! * a reference that is not a call (`f = sympify`, `map(full_load, ...)`) and
//!   a renamed import: an alias the guard could not follow later;
//! * a mode argument by keyword, by position and through `**{...}`;
//! * `X.name` / `from X import name` where the runtime hands out a blocked
//!   module, builtin or API under `name`.

use super::super::ast::{Expr, callee_name, const_str, literally_falsy, py, start};
use super::super::names::nfkc;
use super::super::policy::{Capability, Literal, Mode};
use super::super::strings;
use super::resolve::Resolution;
use super::{Role, Walker};

/// What a reference is: a bare name or an attribute.
#[derive(Clone, Copy)]
pub(super) enum Target<'e> {
    Name(&'e py::ExprName),
    Attribute(&'e py::ExprAttribute),
}

/// The name at the root of an attribute chain (`sp` in `sp.a.b`).
fn root_name(e: &Expr) -> Option<&str> {
    match e {
        Expr::Name(n) => Some(n.id.as_str()),
        Expr::Attribute(a) => root_name(&a.value),
        _ => None,
    }
}

impl<'a> Walker<'a> {
    /// The capabilities `func` may be, by resolved path or by last name.
    fn capabilities_of(&self, res: &Resolution, last: &str) -> Vec<&'a Capability> {
        let caps = &self.policy.capabilities;
        if caps.is_empty() {
            return Vec::new();
        }
        let mut out = caps.lookup(&res.paths, last);
        if res.unknown && !res.paths.is_empty() {
            out.extend(caps.lookup(&[], last));
        }
        // The same entry may come back by path and by name; two entries for
        // one function that check different arguments both stay.
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.position.cmp(&b.position)));
        out.dedup_by(|a, b| a.name == b.name && a.rule == b.rule && a.position == b.position);
        out
    }

    /// Checks a call against the capabilities and modes it may be.
    pub(super) fn capability_call(&mut self, c: &py::ExprCall) {
        self.forwarding_call(c);
        let Some(last) = callee_name(&c.func).map(nfkc) else {
            return;
        };
        self.config_call(&last, c);
        if matches!(c.func.as_ref(), Expr::Name(_)) && self.own_name(&last, start(c)) {
            // `def locate(...)` in this code, called: not `pydoc.locate`.
            return;
        }
        if let Expr::Attribute(a) = c.func.as_ref()
            && self.own_method_call(a)
        {
            return;
        }
        let p = self.policy;
        let named =
            p.capabilities.names.contains(last.as_ref()) || p.modes.names.contains(last.as_ref());
        if !named {
            // Only the evaluator-module rule (sympy) can apply: it needs an
            // imported root and an argument built at run time.
            let imported_root = matches!(root_name(&c.func), Some(r) if self.imports.is_import(r));
            if !imported_root || !self.any_computed_argument(c) {
                return;
            }
        }
        let res = self.imports.resolve(&c.func);
        for cap in self.capabilities_of(&res, &last) {
            self.check_capability_call(cap, c);
        }
        let m = &p.modes;
        let mut modes = m.lookup(&res.paths, &last);
        if res.unknown && !res.paths.is_empty() {
            modes.extend(m.lookup(&[], &last));
        }
        for mode in modes {
            self.check_mode(mode, c);
        }
        self.computed_string_to_evaluator_module(&res, c);
    }

    fn any_computed_argument(&self, c: &py::ExprCall) -> bool {
        c.arguments
            .args
            .iter()
            .chain(c.arguments.keywords.iter().map(|k| &k.value))
            .any(|a| self.computed_string(a, 0))
    }

    /// A name or attribute used as a value, not called: an alias of a
    /// capability could not be followed to its call.
    pub(super) fn capability_reference(&mut self, target: Target<'_>, role: Role, offset: usize) {
        let raw = match target {
            Target::Name(n) => n.id.as_str(),
            Target::Attribute(a) => a.attr.as_str(),
        };
        if !self.policy.capabilities.names.contains(nfkc(raw).as_ref()) {
            return;
        }
        let last = nfkc(raw).into_owned();
        if matches!(target, Target::Name(_)) && self.own_name(&last, offset) {
            // The code's own variable, function or parameter of that spelling.
            return;
        }
        let res = match target {
            Target::Name(n) => self.imports.resolve_name(n),
            Target::Attribute(a) => self.imports.resolve_attribute(a),
        };
        // A bare name is matched by name only when the imports do not explain it.
        for cap in self.capabilities_of(&res, &last) {
            if cap.literal == Literal::Never {
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!("`{}` {}", cap.name, cap.reason),
                    offset,
                );
            } else if role == Role::Value || (role == Role::Base && cap.literal == Literal::Call) {
                let allowed = if cap.literal == Literal::Call {
                    "a direct call; an alias or a subclass cannot be checked"
                } else {
                    "a direct call with a literal argument; an alias cannot be checked"
                };
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!(
                        "`{last}` ({}) {} and is only allowed as {allowed}",
                        cap.name, cap.reason
                    ),
                    offset,
                );
            } else if role == Role::Decorator && decorated_is_checked(cap) {
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!(
                        "`@{last}` ({}) {}: as a decorator it is given a function, not the literal it must be given",
                        cap.name, cap.reason
                    ),
                    offset,
                );
            }
        }
    }

    /// `from module import name [as other]`; `qualified` is `module.name`.
    pub(super) fn capability_import(
        &mut self,
        module: &str,
        name: &str,
        qualified: String,
        renamed: bool,
        offset: usize,
    ) {
        let caps = self.policy.capabilities.lookup(&[qualified], name);
        for cap in caps {
            if cap.literal == Literal::Never {
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!(
                        "`from {module} import {name}`: `{}` {}",
                        cap.name, cap.reason
                    ),
                    offset,
                );
            } else if renamed {
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!(
                        "importing `{name}` under another name hides it from the guard ({}); import it as `{name}`",
                        cap.reason
                    ),
                    offset,
                );
            }
        }
        self.reexport_from(module, name, offset);
    }

    fn check_capability_call(&mut self, cap: &Capability, c: &py::ExprCall) {
        let offset = start(c);
        if cap.literal == Literal::Never {
            self.report(
                &cap.rule,
                &cap.category,
                format!("`{}` {}", cap.name, cap.reason),
                offset,
            );
            return;
        }
        match cap.literal {
            Literal::Call => return,
            Literal::KeywordNames => return self.check_keyword_names(cap, c),
            _ => {}
        }
        let arg = cap
            .position
            .and_then(|p| positional(c, p))
            .or_else(|| cap.keyword.as_deref().and_then(|k| keyword_arg(c, k)));
        let Some(arg) = arg else {
            if super::super::ast::unpacked_args(c) {
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!(
                        "`{}` {}; `*args`/`**kwargs` hide the argument the guard must read",
                        cap.name, cap.reason
                    ),
                    offset,
                );
            }
            return;
        };
        self.check_literal_argument(cap, arg);
    }

    pub(super) fn check_literal_argument(&mut self, cap: &Capability, arg: &Expr) {
        let offset = start(arg);
        if cap.literal.passes_non_strings()
            && let Expr::Name(n) = arg
            && self.string_name_judged(cap, &nfkc(n.id.as_str()), offset)
        {
            return;
        }
        let text = match cap.literal {
            Literal::Fields | Literal::IdentifierFields => {
                return self.check_field_names(cap, arg);
            }
            Literal::CodeIfString if const_str(arg).is_none() && !self.computed_string(arg, 0) => {
                // `vectorize(["f8(f8)", "i8(i8)"])`: a display of signatures.
                for item in display_items(arg) {
                    self.check_literal_argument(cap, item);
                }
                return;
            }
            Literal::OneOf if literal_keyed_dict(arg) => return,
            // `S(1) / 2`, `sympify(0.5)`: a number is no code.
            Literal::Code if number_literal(arg) => return,
            Literal::AttributeIfString if const_str(arg).is_none() => {
                if self.computed_string(arg, 0) {
                    self.report(
                        &cap.rule,
                        &cap.category,
                        format!(
                            "`{}` {}, so a string given to it must be a literal the guard can read",
                            cap.name, cap.reason
                        ),
                        offset,
                    );
                }
                for item in display_items(arg) {
                    self.check_literal_argument(cap, item);
                }
                return;
            }
            _ => const_str(arg),
        };
        let Some(text) = text else {
            self.report(
                &cap.rule,
                &cap.category,
                format!(
                    "`{}` {}, so its argument must be a string literal the guard can read; \
                     a string built at run time cannot be checked",
                    cap.name, cap.reason
                ),
                offset,
            );
            return;
        };
        self.check_literal_text(cap, text, offset);
    }

    /// A name given where `cap` reads a string: the literal strings it
    /// iterates are judged one by one, a parameter of a function of this code
    /// at the function's calls, and a name this code certainly bound by
    /// what all its assignments give it, at the end (forward.rs). False: it
    /// is not known to be a string, and a non-string passes.
    fn string_name_judged(&mut self, cap: &Capability, name: &str, offset: usize) -> bool {
        if let Some(values) = self.loop_literals(name) {
            for text in &values {
                self.check_literal_text(cap, text, offset);
            }
            return true;
        }
        if self.forwarded_parameter(cap, name, offset) {
            return true;
        }
        if self.own_name(name, offset) {
            // Judged at the end, once every assignment of it is known (a later
            // one may run first, in a loop or a function called later).
            self.by_name.push(super::forward::ByName {
                template: vec![super::forward::Piece::Name(name.to_string(), false)],
                judge: super::forward::Judge::Capability(cap.clone()),
                offset,
            });
        }
        false
    }

    /// A string `cap` reads, judged as what the capability makes of it.
    pub(super) fn check_literal_text(&mut self, cap: &Capability, text: &str, offset: usize) {
        match cap.literal {
            Literal::Code | Literal::CodeIfString => {
                self.embedded_code(text, offset, &format!("`{}` string", cap.name));
            }
            Literal::OneOf => {
                if !cap.values.iter().any(|v| v == text) {
                    self.report(
                        &cap.rule,
                        &cap.category,
                        format!(
                            "`{}` {}: `{text}` is not one of the names it may take ({})",
                            cap.name,
                            cap.reason,
                            cap.values.join(", ")
                        ),
                        offset,
                    );
                }
            }
            Literal::Attribute | Literal::AttributeIfString => {
                for part in text.split('.') {
                    self.literal_attribute(cap, part, offset);
                }
            }
            Literal::Field => {
                let mut attrs = Vec::new();
                strings::field_path_attrs(text, &mut attrs);
                for part in attrs {
                    self.literal_attribute(cap, part, offset);
                }
            }
            Literal::Module => {
                let module = text.strip_prefix("module://").unwrap_or(text);
                if let Some(hit) = self.policy.module_blocked(module) {
                    self.report(
                        &cap.rule,
                        &cap.category,
                        format!(
                            "`{}` would import `{module}`, which is blocked (`{hit}`)",
                            cap.name
                        ),
                        offset,
                    );
                }
            }
            Literal::Template => self.template_literal(cap, text, offset),
            Literal::Never
            | Literal::Fields
            | Literal::IdentifierFields
            | Literal::KeywordNames
            | Literal::Call => {}
        }
    }

    /// `SimpleNamespace(a=1, **{"b": 2})`: each keyword name becomes an
    /// attribute, so each is checked like `obj.name`; `**d` whose keys the
    /// guard cannot read is refused (a computed `__array_interface__` key
    /// makes numpy read raw memory).
    fn check_keyword_names(&mut self, cap: &Capability, c: &py::ExprCall) {
        for k in &c.arguments.keywords {
            if let Some(name) = &k.arg {
                self.literal_attribute(cap, name.as_str(), start(c));
                continue;
            }
            let keys = match &k.value {
                Expr::Dict(d) => d
                    .items
                    .iter()
                    .map(|i| i.key.as_ref().and_then(const_str))
                    .collect::<Option<Vec<_>>>(),
                _ => None,
            };
            match keys {
                Some(keys) => {
                    for key in keys {
                        self.literal_attribute(cap, key, start(&k.value));
                    }
                }
                // `**json.load(f)`: plain data, as when it is first bound to a name.
                None if matches!(&k.value, Expr::Call(_)) && self.is_plain_data(&k.value) => {}
                None => {
                    if let Expr::Name(n) = &k.value {
                        // Judged at the end, once every binding of it is known.
                        let name = nfkc(n.id.as_str()).into_owned();
                        let own = self.own_name(&name, start(&k.value));
                        self.namespace_names.push(super::NamespaceUse {
                            name,
                            offset: start(&k.value),
                            own,
                            rule: cap.rule.clone(),
                            category: cap.category.clone(),
                            what: format!("`{}` {}", cap.name, cap.reason),
                        });
                        continue;
                    }
                    self.report(
                        &cap.rule,
                        &cap.category,
                        format!(
                            "`{}` {}; `**` of a mapping whose keys the guard cannot read could name \
                             any attribute: pass the names as keywords",
                            cap.name, cap.reason
                        ),
                        start(&k.value),
                    );
                }
            }
        }
    }

    fn literal_attribute(&mut self, cap: &Capability, part: &str, offset: usize) {
        let part = nfkc(part).into_owned();
        if let Some(problem) = self.attr_problem(&part) {
            self.report(
                &cap.rule,
                &cap.category,
                format!("`{}` with a blocked name: {}", cap.name, problem.why),
                offset,
            );
        } else if self.reflection_sensitive(&part) {
            self.report(
                &cap.rule,
                &cap.category,
                format!(
                    "`{}` reaches `{part}`, which the guard only allows as a direct call",
                    cap.name
                ),
                offset,
            );
        }
    }

    /// `namedtuple("P", ["x", "y"])`, `namedtuple("P", "x y")`,
    /// `NamedTuple("P", [("x", int)])`: literal names, each checked.
    fn check_field_names(&mut self, cap: &Capability, arg: &Expr) {
        let offset = start(arg);
        let mut names: Vec<String> = Vec::new();
        let ok = match arg {
            Expr::StringLiteral(s) => {
                names.extend(
                    s.value
                        .to_str()
                        .split(|c: char| c == ',' || c.is_whitespace())
                        .filter(|n| !n.is_empty())
                        .map(str::to_string),
                );
                true
            }
            Expr::List(l) => field_items(&l.elts, &mut names),
            Expr::Tuple(t) => field_items(&t.elts, &mut names),
            Expr::Dict(d) => d.items.iter().all(|item| {
                item.key
                    .as_ref()
                    .and_then(const_str)
                    .map(|k| names.push(k.to_string()))
                    .is_some()
            }),
            _ => false,
        };
        if !ok && cap.literal == Literal::IdentifierFields {
            // `namedtuple("Row", header)`: refused at run time unless each
            // is an identifier that does not start with an underscore.
            return;
        }
        if !ok {
            self.report(
                &cap.rule,
                &cap.category,
                format!(
                    "`{}` {}: give the field names as literal strings so the guard can check them",
                    cap.name, cap.reason
                ),
                offset,
            );
            return;
        }
        for name in names {
            self.literal_attribute(cap, &name, offset);
        }
    }

    fn check_mode(&mut self, mode: &Mode, c: &py::ExprCall) {
        let offset = start(c);
        let explicit =
            keyword_arg(c, &mode.keyword).or_else(|| mode.position.and_then(|p| positional(c, p)));
        let value = match explicit {
            Some(v) => Some(v),
            None => match double_star_value(c, &mode.keyword) {
                DoubleStar::Found(v) => Some(v),
                DoubleStar::Absent => None,
                DoubleStar::Hidden => {
                    self.report(
                        &mode.rule,
                        &mode.category,
                        format!(
                            "`{}`: `*args`/`**kwargs` may set `{}`, which {}; pass it by name",
                            mode.name, mode.keyword, mode.reason
                        ),
                        offset,
                    );
                    return;
                }
            },
        };
        let Some(value) = value else { return };
        if !mode_safe(mode, value) {
            self.report(
                &mode.rule,
                &mode.category,
                format!(
                    "`{}` with `{}` set: {}",
                    mode.name, mode.keyword, mode.reason
                ),
                start(value),
            );
        }
    }

    /// sympy turns strings into code almost everywhere (`simplify(s)`,
    /// `Matrix([s])`): a string built at run time may not reach it.
    fn computed_string_to_evaluator_module(&mut self, res: &Resolution, c: &py::ExprCall) {
        let evaluator = res
            .paths
            .iter()
            .any(|p| p == "sympy" || p.starts_with("sympy."));
        if !evaluator {
            return;
        }
        let args = c
            .arguments
            .args
            .iter()
            .chain(c.arguments.keywords.iter().map(|k| &k.value));
        for a in args {
            if self.computed_string(a, 0) {
                self.report(
                    "code_string",
                    "code",
                    "sympy evaluates string arguments as Python code; a string built at run time \
                     cannot be checked: build the expression from Symbols instead"
                        .into(),
                    start(a),
                );
            }
        }
    }

    /// An expression that builds a string at run time: an f-string with
    /// fields, `+`/`%` with a string, `.join`, `.format`, `chr`, `.decode`,
    /// `codecs.decode`, slicing a string, or a name bound to one of those.
    pub(super) fn computed_string(&self, e: &Expr, depth: u32) -> bool {
        if depth > 16 {
            return false;
        }
        match e {
            Expr::FString(_) => true,
            Expr::BinOp(b) => {
                let stringy = |x: &Expr| {
                    matches!(x, Expr::StringLiteral(_) | Expr::BytesLiteral(_))
                        || self.computed_string(x, depth + 1)
                };
                match b.op {
                    py::Operator::Add | py::Operator::Mult => stringy(&b.left) || stringy(&b.right),
                    py::Operator::Mod => stringy(&b.left),
                    _ => false,
                }
            }
            Expr::Call(c) => matches!(
                callee_name(&c.func),
                Some(
                    "join"
                        | "format"
                        | "format_map"
                        | "decode"
                        | "chr"
                        | "str"
                        | "replace"
                        | "lower"
                        | "upper"
                        | "strip"
                        | "fromhex"
                        | "b64decode"
                        | "unhexlify"
                        | "translate"
                        | "swapcase"
                        | "title"
                        | "capitalize"
                        | "casefold"
                )
            ),
            Expr::Subscript(s) => {
                matches!(
                    s.value.as_ref(),
                    Expr::StringLiteral(_) | Expr::BytesLiteral(_)
                ) || self.computed_string(&s.value, depth + 1)
            }
            Expr::Name(n) => self.computed_names.contains(nfkc(n.id.as_str()).as_ref()),
            _ => false,
        }
    }

    // ---- re-exports ------------------------------------------------------------

    /// `X.name` where the runtime hands out something blocked as `name`.
    pub(super) fn reexport_attribute(&mut self, a: &py::ExprAttribute, offset: usize) {
        let name = nfkc(a.attr.as_str());
        let Some(r) = self.policy.reexports.get(name.as_ref()) else {
            return;
        };
        let res = self.imports.resolve(&a.value);
        let hit = r.distinctive || res.paths.iter().any(|p| r.modules.contains(p));
        if hit {
            let targets = r.targets.join(", ");
            self.report(
                "module_reexport",
                "module",
                format!(
                    "`.{name}` is {targets} handed out by an allowed module; the guard blocks it \
                     whatever module it passes through"
                ),
                offset,
            );
        }
    }

    fn reexport_from(&mut self, module: &str, name: &str, offset: usize) {
        let Some(r) = self.policy.reexports.get(name) else {
            return;
        };
        // The policy lets this very name be imported from its own module.
        if self.policy.importable.contains(&format!("{module}.{name}")) {
            return;
        }
        if r.distinctive || r.modules.contains(module) {
            let targets = r.targets.join(", ");
            self.report(
                "module_reexport",
                "module",
                format!("`from {module} import {name}` is {targets} under another name"),
                offset,
            );
        }
    }

    // ---- configuration keys --------------------------------------------------------

    /// A string equal to a configuration key that names a program.
    pub(super) fn config_string(&mut self, value: &str, offset: usize) {
        if let Some(&g) = self.policy.config_keys.get(value)
            && let Some(group) = self.policy.config_groups.get(g).cloned()
        {
            self.report(
                &group.rule,
                &group.category,
                format!(
                    "`{value}` {}; the sandbox runs no other program",
                    group.reason
                ),
                offset,
            );
        }
    }

    /// `rc("animation", ffmpeg_path=...)`, `rcParams.update(d)`, `rc_context(d)`.
    fn config_call(&mut self, last: &str, c: &py::ExprCall) {
        if self.policy.config_groups.is_empty() {
            return;
        }
        for k in &c.arguments.keywords {
            if let Some(arg) = &k.arg
                && let Some(&g) = self.policy.config_leaves.get(nfkc(arg.as_str()).as_ref())
                && let Some(group) = self.policy.config_groups.get(g).cloned()
            {
                self.report(
                    &group.rule,
                    &group.category,
                    format!("`{arg}=` {}", group.reason),
                    start(k),
                );
            }
        }
        let receiver_is_config = match c.func.as_ref() {
            Expr::Attribute(a) => {
                last == "update"
                    && callee_name(&a.value)
                        .is_some_and(|n| self.policy.config_objects.contains(nfkc(n).as_ref()))
            }
            _ => false,
        };
        let call_is_config = self.policy.config_objects.contains(last);
        if !(receiver_is_config || call_is_config) {
            return;
        }
        let hidden = c.arguments.keywords.iter().any(|k| k.arg.is_none())
            || c.arguments.args.iter().any(|a| {
                !matches!(
                    a,
                    Expr::Dict(_)
                        | Expr::StringLiteral(_)
                        | Expr::NumberLiteral(_)
                        | Expr::BooleanLiteral(_)
                        | Expr::NoneLiteral(_)
                ) || matches!(a, Expr::Dict(d) if d.items.iter().any(|i| i.key.as_ref().and_then(const_str).is_none()))
            });
        if hidden && let Some(group) = self.policy.config_groups.first().cloned() {
            self.report(
                &group.rule,
                &group.category,
                format!(
                    "`{last}(...)` with keys the guard cannot read: configuration keys can name programs \
                     that are run later; write them as literals"
                ),
                start(c),
            );
        }
    }

    /// `rcParams[k] = v` with a key that is not a literal.
    pub(super) fn config_subscript_store(&mut self, s: &py::ExprSubscript, offset: usize) {
        let target_is_config = callee_name(&s.value)
            .is_some_and(|n| self.policy.config_objects.contains(nfkc(n).as_ref()));
        if target_is_config
            && const_str(&s.slice).is_none()
            && let Some(group) = self.policy.config_groups.first().cloned()
        {
            self.report(
                &group.rule,
                &group.category,
                "a configuration write with a key the guard cannot read: keys can name programs \
                 that are run later; write the key as a literal"
                    .into(),
                offset,
            );
        }
    }
}

/// The elements of a list, tuple or set display, or the values of a dict
/// display: where `df.agg(["sum", "mean"])` puts its names.
fn display_items(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::List(l) => l.elts.iter().collect(),
        Expr::Tuple(t) => t.elts.iter().collect(),
        Expr::Set(s) => s.elts.iter().collect(),
        Expr::Dict(d) => d.items.iter().map(|i| &i.value).collect(),
        _ => Vec::new(),
    }
}

/// A number, a negated number, `True`/`False` or `None`: never a string.
fn number_literal(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(_) | Expr::BooleanLiteral(_) | Expr::NoneLiteral(_) => true,
        Expr::UnaryOp(u) => matches!(u.operand.as_ref(), Expr::NumberLiteral(_)),
        _ => false,
    }
}

/// A dict display whose keys are all string literals.
fn literal_keyed_dict(e: &Expr) -> bool {
    matches!(e, Expr::Dict(d) if d.items.iter().all(|i| i.key.as_ref().and_then(const_str).is_some()))
}

/// `@cap` calls `cap(decorated)`: refused when the decorated function is the
/// argument the entry checks (it is no literal of any kind), allowed when
/// the entry passes non-strings or checks an argument a bare decorator never
/// passes (`@attr.s` has no `these`).
fn decorated_is_checked(cap: &Capability) -> bool {
    match cap.literal {
        Literal::Never => true,
        Literal::Call | Literal::KeywordNames => false,
        l if l.passes_non_strings() => false,
        _ => cap.position == Some(0),
    }
}

/// The `p`-th positional argument, when no `*args` comes before it.
pub(super) fn positional(c: &py::ExprCall, p: usize) -> Option<&Expr> {
    let args = &c.arguments.args;
    if args
        .iter()
        .take(p + 1)
        .any(|a| matches!(a, Expr::Starred(_)))
    {
        return None;
    }
    args.get(p)
}

pub(super) fn keyword_arg<'e>(c: &'e py::ExprCall, name: &str) -> Option<&'e Expr> {
    c.arguments
        .keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| nfkc(a.as_str()) == name))
        .map(|k| &k.value)
}

enum DoubleStar<'e> {
    Found(&'e Expr),
    Absent,
    /// `**kwargs` or `*args` that may carry it.
    Hidden,
}

/// The value `**{...}` gives keyword `name`, or whether unpacking hides it.
fn double_star_value<'e>(c: &'e py::ExprCall, name: &str) -> DoubleStar<'e> {
    let mut hidden = c
        .arguments
        .args
        .iter()
        .any(|a| matches!(a, Expr::Starred(_)));
    for k in c.arguments.keywords.iter().filter(|k| k.arg.is_none()) {
        match &k.value {
            Expr::Dict(d) => {
                for item in &d.items {
                    match item.key.as_ref() {
                        Some(key) => match const_str(key) {
                            Some(s) if nfkc(s) == name => return DoubleStar::Found(&item.value),
                            Some(_) => {}
                            None => hidden = true,
                        },
                        None => hidden = true,
                    }
                }
            }
            _ => hidden = true,
        }
    }
    if hidden {
        DoubleStar::Hidden
    } else {
        DoubleStar::Absent
    }
}

/// Whether a mode argument keeps the function safe.
fn mode_safe(mode: &Mode, value: &Expr) -> bool {
    if mode.safe.is_empty() {
        return literally_falsy(value);
    }
    match value {
        Expr::StringLiteral(_)
        | Expr::NumberLiteral(_)
        | Expr::NoneLiteral(_)
        | Expr::BooleanLiteral(_) => true,
        Expr::Name(_) | Expr::Attribute(_) => {
            callee_name(value).is_some_and(|n| mode.safe.contains(nfkc(n).as_ref()))
        }
        _ => false,
    }
}

/// Field names from `["x", "y"]` or `[("x", int), ("y", str)]`.
fn field_items(items: &[Expr], names: &mut Vec<String>) -> bool {
    items.iter().all(|e| {
        let name = match e {
            Expr::Tuple(t) => t.elts.first().and_then(const_str),
            Expr::List(l) => l.elts.first().and_then(const_str),
            other => const_str(other),
        };
        name.map(|n| names.push(n.to_string())).is_some()
    })
}
