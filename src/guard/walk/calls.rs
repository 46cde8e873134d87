//! Calls: reflection with a name the guard must read, `str.format`
//! templates, code strings, dangerous keyword modes, path arguments and
//! writes that create code files.

use super::super::ast::{
    Expr, callee_name, const_str, keyword, literally_falsy, numeric, py, start, unpacked_args,
};
use super::super::names::nfkc;
use super::super::paths;
use super::super::strings;
use super::{FORMAT_METHODS, MATCH_ARGS, Walker};

impl Walker<'_> {
    pub(super) fn call(&mut self, c: &py::ExprCall) {
        let callee = callee_name(&c.func).map(nfkc);
        if let Some(name) = callee.as_deref() {
            self.call_checks(name, c);
            self.call_by_name(name, c);
            if let Some(target) = self.code_file_target(name, c) {
                self.report(
                    "code_file_write",
                    "code",
                    format!(
                        "writing `{target}` creates code that a later import would run unchecked; \
                         write data files (csv, json, txt) instead"
                    ),
                    start(c),
                );
            }
        }
        if let Some(target) = self.suffix_target(c) {
            self.report(
                "code_file_write",
                "code",
                format!(
                    "creating a file ending in `{target}` creates code that a later import would run \
                     unchecked; use a data suffix (.csv, .json, .txt)"
                ),
                start(c),
            );
        }
        self.dangerous_keywords(c);
        self.capability_call(c);
        self.class_factory_call(c);
        self.expr_as(&c.func, super::Role::Callee);
        self.exprs(&c.arguments.args);
        self.keywords(&c.arguments.keywords);
    }

    /// Reflection builtins and getters, raw descriptors, path arguments.
    fn call_checks(&mut self, name: &str, c: &py::ExprCall) {
        let direct_builtin = matches!(c.func.as_ref(), Expr::Name(_));
        if direct_builtin && self.policy.reflection_builtins.contains(name) {
            self.reflection_call(name, c);
        }
        if self.policy.getter_names.contains(name) {
            self.getter_call(name, c);
        }
        if matches!(name, "open" | "FileIO" | "fdopen") && opens_descriptor(c) {
            self.report(
                "open_file_descriptor",
                "path",
                format!("`{name}` of an integer opens an inherited file descriptor; open a file by its path"),
                start(c),
            );
        }
        if self.policy.path_functions.contains(name) {
            let args = c
                .arguments
                .args
                .iter()
                .chain(c.arguments.keywords.iter().map(|k| &k.value));
            for arg in args {
                if let Some(value) = literal_string(arg, &mut self.fold_budget)
                    && let Some(problem) = paths::check(&value, true, self.roots, self.policy)
                {
                    self.report(problem.rule, "path", problem.message, start(arg));
                }
            }
        }
    }

    /// Keyword arguments that switch an allowed function into a dangerous
    /// mode (`allow_pickle=True`).
    fn dangerous_keywords(&mut self, c: &py::ExprCall) {
        for k in &c.arguments.keywords {
            let Some(arg) = &k.arg else { continue };
            let arg = nfkc(arg.as_str());
            if let Some(d) = self.policy.dangerous_keywords.get(arg.as_ref())
                && !literally_falsy(&k.value)
            {
                let why = format!("`{arg}=` {} (only a literal False is allowed)", d.reason);
                let category = d.category.clone();
                self.report("blocked_attribute", &category, why, start(k));
            }
        }
    }

    /// Checks that depend on the called name: code strings, `str.format`
    /// templates and explicit `__setattr__` calls.
    fn call_by_name(&mut self, name: &str, c: &py::ExprCall) {
        let offset = start(c);
        let method = match c.func.as_ref() {
            Expr::Attribute(a) => Some(a),
            _ => None,
        };
        if method.is_some() && self.policy.code_string_methods.contains(name) {
            self.code_string_method(name, c);
        }
        if self.policy.code_string_functions.contains(name)
            && let Some(first) = c.arguments.args.first()
            && let Some(text) = const_str(first)
        {
            self.embedded_code(text, start(first), &format!("`{name}` string"));
        }
        if let Some(a) = method {
            if FORMAT_METHODS.contains(&name) {
                self.format_template(&a.value, Some(c), offset);
            }
            if name == "vformat" {
                let literal = c
                    .arguments
                    .args
                    .first()
                    .is_some_and(|t| self.is_literal_string(t));
                if !literal || unpacked_args(c) {
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
            if matches!(name, "__init__" | "__setstate__") {
                self.explicit_initialiser(name, a, c);
            }
        }
    }

    /// `super().__init__(...)` and `Base.__init__(self, ...)` inside
    /// `__init__` (likewise `__setstate__`) initialise the code's own new
    /// object. Any other explicit `__init__`/`__setstate__` runs a class's
    /// initialiser on an object of the code's choosing, and library ones set
    /// attributes by names the caller picks: `sympy.Basic.__setstate__(C,
    /// state)` and `argparse.Namespace.__init__(C, **kw)` write a class's
    /// `__annotations__`, which `@dataclass` pastes into source (even from
    /// `__init_subclass__(cls)`, hence the same-name rule).
    fn explicit_initialiser(&mut self, name: &str, a: &py::ExprAttribute, c: &py::ExprCall) {
        let own = self.self_params.last().cloned().flatten();
        let is_own = |e: &Expr| matches!((e, &own), (Expr::Name(n), Some(p)) if nfkc(n.id.as_str()) == p.as_str());
        let via_super = matches!(a.value.as_ref(), Expr::Call(s)
            if matches!(s.func.as_ref(), Expr::Name(n) if n.id.as_str() == "super"));
        let same_method = self.fn_stack.last().is_some_and(|(f, _)| f == name);
        let on_own = via_super || is_own(&a.value) || c.arguments.args.first().is_some_and(is_own);
        if same_method && on_own {
            return;
        }
        self.report(
            "reflection",
            "reflection",
            format!(
                "an explicit `{name}` call outside the class's own `{name}` runs an initialiser \
                 on an object of the code's choosing (library ones set attributes by any name, \
                 dunders included); call `super().{name}(...)` from `{name}` instead"
            ),
            start(c),
        );
    }

    /// `df.query(text)` / `df.eval(text)`: the text is code.
    fn code_string_method(&mut self, name: &str, c: &py::ExprCall) {
        let code = c.arguments.args.first().or_else(|| keyword(c, "expr"));
        match code.map(|e| (e, const_str(e))) {
            // `model.eval()`: not a code string at all.
            None if !unpacked_args(c) => {}
            Some((e, Some(text))) => {
                self.embedded_code(text, start(e), &format!("`.{name}` string"));
            }
            // `df.query(f"{col} > {limit}")`: judged as every text it can make.
            Some((Expr::FString(f), None)) if let Some(template) = self.fstring_template(f) => {
                self.by_name.push(super::forward::ByName {
                    template,
                    judge: super::forward::Judge::Code(format!("`.{name}` string")),
                    offset: start(c),
                });
            }
            _ => self.report(
                "code_string",
                "code",
                format!(
                    "`.{name}(...)` runs its argument as code, so it must be a string literal the guard \
                     can read; refer to Python values with @name (`df.query(\"x > @limit\")`)"
                ),
                start(c),
            ),
        }
    }

    /// The pieces of an f-string whose every field is a number or a name this
    /// code binds (a loop over literals now; any other at the end,
    /// by all its assignments); `None` when one is anything else.
    fn fstring_template(&self, f: &py::ExprFString) -> Option<Vec<super::forward::Piece>> {
        use super::forward::{Piece, quoted};
        let mut pieces = Vec::new();
        for part in f.value.iter() {
            let elements = match part {
                py::FStringPart::Literal(l) => {
                    pieces.push(Piece::Text(vec![l.value.to_string()]));
                    continue;
                }
                py::FStringPart::FString(f) => &f.elements,
            };
            for element in elements {
                let i = match element {
                    py::InterpolatedStringElement::Literal(l) => {
                        pieces.push(Piece::Text(vec![l.value.to_string()]));
                        continue;
                    }
                    py::InterpolatedStringElement::Interpolation(i) => i,
                };
                let repr = !matches!(
                    i.conversion,
                    py::ConversionFlag::None | py::ConversionFlag::Str
                );
                let spec = i.format_spec.is_some();
                let piece = match i.expression.as_ref() {
                    // A string literal in a field only builds a string out of
                    // pieces: never needed, so refused like any string built.
                    Expr::NumberLiteral(_) => Piece::Text(vec!["0".into()]),
                    Expr::Name(n) => {
                        let name = nfkc(n.id.as_str()).into_owned();
                        match self.loop_literals(&name) {
                            Some(values) if spec => values
                                .iter()
                                .all(|v| v == "0")
                                .then(|| Piece::Text(vec!["0".into()]))?,
                            Some(values) if repr => Piece::Text(
                                values.iter().map(|v| quoted(v)).collect::<Option<_>>()?,
                            ),
                            Some(values) => Piece::Text(values),
                            None if !self.own_name(&name, start(n)) => return None,
                            None if spec => Piece::Number(name),
                            None => Piece::Name(name, repr),
                        }
                    }
                    _ => return None,
                };
                pieces.push(piece);
            }
        }
        Some(pieces)
    }

    /// The template of a `str.format` call must be a string the guard has
    /// read: its fields can walk any attribute (`"{0.__class__}"`).
    pub(super) fn format_template(
        &mut self,
        recv: &Expr,
        call: Option<&py::ExprCall>,
        offset: usize,
    ) {
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
        if let Some(c) = call
            && styler_format_without_template(recv, c)
        {
            return;
        }
        if let Expr::Name(n) = recv
            && !template_first
        {
            let literal_first = call.is_some_and(|c| {
                !unpacked_args(c)
                    && c.arguments
                        .args
                        .first()
                        .is_some_and(|a| const_str(a).is_some())
            });
            self.format_names.push(super::FormatUse {
                own: self.own_name(&nfkc(n.id.as_str()), offset),
                name: nfkc(n.id.as_str()).into_owned(),
                offset,
                literal_first,
            });
            return;
        }
        if template_first
            && let Some(c) = call
            && !unpacked_args(c)
            && let Some(first) = c.arguments.args.first()
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

    /// `x = string.Formatter()`: the stdlib formatter itself (its template is
    /// the first argument of each `format` call), not a subclass.
    pub(super) fn is_plain_formatter(&self, value: &Expr) -> bool {
        let Expr::Call(c) = value else { return false };
        if !c.arguments.args.is_empty() || !c.arguments.keywords.is_empty() {
            return false;
        }
        let res = self.imports.resolve(&c.func);
        !res.unknown && res.paths.iter().all(|p| p == "string.Formatter")
    }

    /// `json.load(f)`, `json.loads(s)` or `{"a": 1, ...}` with literal keys.
    pub(super) fn is_plain_data(&self, value: &Expr) -> bool {
        match value {
            // Literal keys, each one a name `obj.name` may read.
            Expr::Dict(d) => d.items.iter().all(|i| {
                i.key
                    .as_ref()
                    .and_then(const_str)
                    .is_some_and(|k| self.attr_problem(&nfkc(k)).is_none())
            }),
            Expr::Call(c) => {
                let res = self.imports.resolve(&c.func);
                !res.unknown
                    && !res.paths.is_empty()
                    && res
                        .paths
                        .iter()
                        .all(|p| p == "json.load" || p == "json.loads")
                    && c.arguments.keywords.is_empty()
            }
            _ => false,
        }
    }

    /// `object.__setattr__(obj, name, v)` is `setattr` spelled differently;
    /// the name must be a constant the guard can check. Passing the
    /// parameter straight through inside `def __setattr__(self, name, v)`
    /// is the one computed form allowed: that name came from an `obj.x = v`
    /// the guard already read.
    fn dunder_setattr(&mut self, func: &str, c: &py::ExprCall) {
        let offset = start(c);
        let args = &c.arguments.args;
        let first_two = &args[..args.len().min(2)];
        let constants: Vec<String> = first_two
            .iter()
            .filter_map(|e| const_str(e).map(|s| nfkc(s).into_owned()))
            .collect();
        if !constants.is_empty() && !unpacked_args(c) {
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
    fn suffix_target(&mut self, c: &py::ExprCall) -> Option<String> {
        let suffix = keyword(c, "suffix")?;
        let value = literal_string(suffix, &mut self.fold_budget)?;
        self.is_code_file(&value).then_some(value)
    }

    fn is_code_file(&self, path: &str) -> bool {
        let lower = path.to_ascii_lowercase();
        self.policy
            .code_extensions
            .iter()
            .any(|ext| lower.ends_with(ext.as_str()))
    }

    /// The file name when a call writes Python source or a native extension:
    /// `open("x.py", "w")`, `Path("x.py").open("w")`, `Path("x.py").write_text(...)`.
    fn code_file_target(&mut self, name: &str, c: &py::ExprCall) -> Option<String> {
        let budget = &mut self.fold_budget;
        let args = &c.arguments.args;
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
                if !writes(args.first().or_else(|| keyword(c, "mode"))) {
                    return None;
                }
                receiver_path(recv, budget)
            }
            ("open" | "FileIO", _) => {
                if !writes(args.get(1).or_else(|| keyword(c, "mode"))) {
                    return None;
                }
                let file = args.first().or_else(|| keyword(c, "file"))?;
                literal_string(file, budget)
            }
            ("write_text" | "write_bytes" | "touch" | "symlink_to" | "hardlink_to", Some(recv)) => {
                receiver_path(recv, budget)
            }
            // Renaming or copying data to `x.py` writes code just the same.
            ("rename" | "link_to" | "copy" | "copy2" | "copyfile" | "move", _) => {
                let target = args.get(usize::from(receiver.is_none() && args.len() > 1));
                literal_string(target.or_else(|| keyword(c, "target"))?, budget)
            }
            // str.replace has the same name; only a path receiver counts.
            ("replace", Some(recv)) if receiver_path(recv, budget).is_some() => {
                literal_string(args.first().or_else(|| keyword(c, "target"))?, budget)
            }
            _ => None,
        }?;
        self.is_code_file(&path).then_some(path)
    }

    /// getattr/setattr/delattr/hasattr: the name must be a safe constant.
    fn reflection_call(&mut self, func: &str, c: &py::ExprCall) {
        let offset = start(c);
        if unpacked_args(c) {
            self.report(
                "reflection",
                "reflection",
                format!("`{func}` with unpacked arguments hides the attribute name"),
                offset,
            );
            return;
        }
        let Some(arg) = c.arguments.args.get(1).or_else(|| keyword(c, "name")) else {
            return;
        };
        let names = match (const_str(arg), arg) {
            (Some(s), _) => vec![nfkc(s).into_owned()],
            // `for stat in ("mean", "median"): getattr(s, stat)`.
            (None, Expr::Name(n)) => match self.loop_literals(&nfkc(n.id.as_str())) {
                Some(values) => values,
                None => return self.computed_reflection_name(func, offset),
            },
            _ => return self.computed_reflection_name(func, offset),
        };
        for name in names {
            self.reflection_name(func, &name, offset);
        }
    }

    fn computed_reflection_name(&mut self, func: &str, offset: usize) {
        self.report(
            "reflection",
            "reflection",
            format!("`{func}` with a computed attribute name cannot be checked; use `obj.name` or a constant string"),
            offset,
        );
    }

    /// One attribute name a reflection call is given.
    fn reflection_name(&mut self, func: &str, name: &str, offset: usize) {
        let name = name.to_string();
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

    /// operator.attrgetter("a.b") / methodcaller("name", ...).
    fn getter_call(&mut self, func: &str, c: &py::ExprCall) {
        let offset = start(c);
        if unpacked_args(c) {
            self.report(
                "reflection",
                "reflection",
                format!("`{func}` with unpacked arguments hides the attribute names"),
                offset,
            );
            return;
        }
        let take = if func == "methodcaller" {
            1
        } else {
            usize::MAX
        };
        for arg in c.arguments.args.iter().take(take) {
            let Some(s) = const_str(arg) else {
                self.report(
                    "reflection",
                    "reflection",
                    format!("`{func}` with a computed attribute name cannot be checked"),
                    offset,
                );
                continue;
            };
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
    }
}

/// The literal path of a receiver like `Path("x.py")` or `Path("a") / "x.py"`.
fn receiver_path(e: &Expr, budget: &mut usize) -> Option<String> {
    match e {
        Expr::Call(inner) => literal_string(inner.arguments.args.last()?, budget),
        Expr::BinOp(b) if matches!(b.op, py::Operator::Div) => literal_string(&b.right, budget),
        _ => None,
    }
}

/// A string literal, or the value of a foldable string expression.
pub(super) fn literal_string(e: &Expr, budget: &mut usize) -> Option<String> {
    match const_str(e) {
        Some(s) => Some(s.to_string()),
        None if strings::is_composite(e) => strings::fold(e, budget),
        None => None,
    }
}

/// `open(3)`, `open(-1)`, `open(file=0)`.
fn opens_descriptor(c: &py::ExprCall) -> bool {
    let first = c
        .arguments
        .args
        .first()
        .or_else(|| keyword(c, "file"))
        .or_else(|| keyword(c, "fd"));
    first.is_some_and(|e| numeric(e, 0))
}

/// `df.style.format(precision=2)`, `df.style.format("{:.1f}", subset=["a"])`:
/// pandas' `Styler.format` given no template or a literal one (its `formatter`,
/// first argument: a string, or a dict display of strings, whose fields the
/// string pass judges like any literal template) and only literal options, so no
/// template the guard has not read and no object a template could walk reaches
/// the call.
fn styler_format_without_template(recv: &Expr, c: &py::ExprCall) -> bool {
    let styler = matches!(recv, Expr::Attribute(a) if nfkc(a.attr.as_str()) == "style");
    let literal_formatter = |e: &Expr| match e {
        Expr::StringLiteral(_) => true,
        Expr::Dict(d) => d.items.iter().all(|i| {
            i.key.as_ref().is_some_and(plain_literal) && matches!(i.value, Expr::StringLiteral(_))
        }),
        _ => false,
    };
    styler
        && c.arguments.args.len() <= 1
        && c.arguments.args.iter().all(literal_formatter)
        && c.arguments.keywords.iter().all(|k| match k.arg.as_ref() {
            Some(a) if nfkc(a.as_str()) == "formatter" => literal_formatter(&k.value),
            Some(_) => plain_literal(&k.value),
            None => false,
        })
}

/// A constant, or a list or tuple of constants.
fn plain_literal(e: &Expr) -> bool {
    match e {
        Expr::StringLiteral(_)
        | Expr::NumberLiteral(_)
        | Expr::BooleanLiteral(_)
        | Expr::NoneLiteral(_) => true,
        Expr::List(l) => l.elts.iter().all(plain_literal),
        Expr::Tuple(t) => t.elts.iter().all(plain_literal),
        _ => false,
    }
}
