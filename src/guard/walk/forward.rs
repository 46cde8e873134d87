//! Helpers that pass a parameter on to a capability that reads strings:
//! `def summarise(how): return df.agg(how)`. The string `df.agg` looks up
//! arrives through the helper's parameter, so every call of the helper is
//! judged as a call of the capability, where the argument is written. A
//! helper used any other way (handed on as a value, called before its
//! definition was read, called with `*args`) cannot be followed and is
//! refused; so is a lambda's parameter passed on (a lambda has no name to
//! follow).
//!
//! Only the capabilities that let non-strings pass (`attribute_if_string`,
//! `code_if_string`) need this: the others already refuse any argument that is
//! not a literal.

use foldhash::HashSet;
use ruff_python_ast::visitor::{self, Visitor};

use super::super::ast::{Expr, Stmt, py, start, unpacked_args};
use super::super::names::nfkc;
use super::super::policy::Capability;
use super::Walker;
use super::capabilities::{keyword_arg, positional};

/// A function of this code, while its body is walked.
#[derive(Debug)]
pub(super) struct Frame {
    pub name: String,
    /// Positional parameters in order (`self` included), then keyword-only ones.
    pub positional: Vec<String>,
    pub keyword_only: Vec<String>,
    /// Called through an instance (`obj.f(x)`), which fills the first parameter.
    pub method: bool,
    /// A classmethod: its first parameter is filled through the class too.
    pub class_method: bool,
    /// Index into the walker's scopes of the function's own scope.
    pub scope: usize,
}

impl Frame {
    pub fn new(f: &py::StmtFunctionDef, in_class_body: bool, scope: usize) -> Frame {
        let p = &f.parameters;
        let names = |v: &[py::ParameterWithDefault]| {
            v.iter()
                .map(|a| nfkc(a.parameter.name.as_str()).into_owned())
                .collect::<Vec<_>>()
        };
        let mut positional = names(&p.posonlyargs);
        positional.extend(names(&p.args));
        let decorated = |name: &str| {
            f.decorator_list
                .iter()
                .any(|d| matches!(&d.expression, Expr::Name(n) if n.id.as_str() == name))
        };
        let static_method = decorated("staticmethod");
        Frame {
            name: nfkc(f.name.as_str()).into_owned(),
            positional,
            keyword_only: names(&p.kwonlyargs),
            method: in_class_body && !static_method,
            class_method: in_class_body && decorated("classmethod"),
            scope,
        }
    }
}

/// A parameter of a function of this code that reaches a capability.
#[derive(Debug, Clone)]
pub(super) struct Forward {
    pub function: String,
    /// Its position among the positional parameters, if it has one.
    pub index: Option<usize>,
    pub param: String,
    pub method: bool,
    pub class_method: bool,
    pub cap: Capability,
}

impl Walker<'_> {
    /// `name` given to `cap` where a string would be read: when it is a
    /// parameter of the function being walked, the function's calls are
    /// judged instead (true). A lambda's parameter is refused (true).
    pub(super) fn forwarded_parameter(
        &mut self,
        cap: &Capability,
        name: &str,
        offset: usize,
    ) -> bool {
        let Some(scope) = self.scopes.iter().rposition(|s| s.own.contains(name)) else {
            return false;
        };
        // The innermost binding of the name is a function's own scope: a
        // `def` of this code (its parameter, or a closure over it), or a lambda.
        let Some(frame) = self.frames.iter().rev().find(|f| f.scope == scope) else {
            if self.scopes[scope].function {
                self.report(
                    &cap.rule,
                    &cap.category,
                    format!(
                        "`{}` {}; `{name}` is a lambda's parameter, whose callers the guard cannot \
                         follow: write a `def` and call it, or pass the value itself",
                        cap.name, cap.reason
                    ),
                    offset,
                );
                return true;
            }
            return false;
        };
        let index = frame.positional.iter().position(|p| p == name);
        if index.is_none() && !frame.keyword_only.iter().any(|p| p == name) {
            return false;
        }
        let forward = Forward {
            function: frame.name.clone(),
            index,
            param: name.to_string(),
            method: frame.method,
            class_method: frame.class_method,
            cap: cap.clone(),
        };
        self.forwards.push(forward);
        true
    }

    /// After a function's body: its parameters' defaults that reach a
    /// capability are judged like arguments.
    pub(super) fn forwarded_defaults(&mut self, f: &py::StmtFunctionDef, from: usize) {
        let name = nfkc(f.name.as_str());
        let found: Vec<Forward> = self.forwards[from..]
            .iter()
            .filter(|fw| fw.function == name.as_ref())
            .cloned()
            .collect();
        let p = &f.parameters;
        let all = p.posonlyargs.iter().chain(&p.args).chain(&p.kwonlyargs);
        for param in all {
            let Some(default) = param.default.as_deref() else {
                continue;
            };
            let pname = nfkc(param.parameter.name.as_str());
            for fw in found.iter().filter(|fw| fw.param == pname.as_ref()) {
                self.check_literal_argument(&fw.cap, default);
            }
        }
    }

    /// A call of a function of this code: each parameter it passes on to a
    /// capability is judged where the call writes it.
    pub(super) fn forwarding_call(&mut self, c: &py::ExprCall) {
        if self.forwards.is_empty() {
            return;
        }
        let (name, through_instance) = match c.func.as_ref() {
            Expr::Name(n) => (nfkc(n.id.as_str()), false),
            Expr::Attribute(a) => (nfkc(a.attr.as_str()), true),
            _ => return,
        };
        let forwards: Vec<Forward> = self
            .forwards
            .iter()
            .filter(|fw| fw.function == name.as_ref() && (fw.method == through_instance))
            .cloned()
            .collect();
        if forwards.is_empty() {
            return;
        }
        let through_class = matches!(c.func.as_ref(), Expr::Attribute(a)
            if matches!(a.value.as_ref(), Expr::Name(n) if self.classes.contains(nfkc(n.id.as_str()).as_ref())));
        self.judged_calls.insert(start(c.func.as_ref()));
        for fw in forwards {
            // `obj.f(x)` fills `self` itself; `Class.f(obj, x)` (a class of
            // this code) does not.
            let mut args: Vec<&Expr> = Vec::new();
            if let Some(i) = fw.index {
                let shift = usize::from(fw.method && (!through_class || fw.class_method));
                args.extend(i.checked_sub(shift).and_then(|i| positional(c, i)));
            }
            args.extend(keyword_arg(c, &fw.param));
            let arg = (!args.is_empty()).then_some(());
            for a in &args {
                self.check_literal_argument(&fw.cap, a);
            }
            match arg {
                Some(()) => {}
                None if unpacked_args(c) => self.report(
                    &fw.cap.rule,
                    &fw.cap.category,
                    format!(
                        "`{}` passes its parameter `{}` to `{}`, which {}; `*args`/`**kwargs` \
                         hide what this call gives it",
                        fw.function, fw.param, fw.cap.name, fw.cap.reason
                    ),
                    start(c),
                ),
                // The default, judged with the definition.
                None => {}
            }
        }
    }

    /// Once the whole code is walked: every use of a forwarding function that
    /// was not a call judged above is refused.
    pub(super) fn forwarding_references(&mut self, parts: &[&[Stmt]]) {
        if self.forwards.is_empty() {
            return;
        }
        let functions: HashSet<(String, bool)> = self
            .forwards
            .iter()
            .map(|f| (f.function.clone(), f.method))
            .collect();
        let mut refs = References {
            functions: &functions,
            found: Vec::new(),
        };
        for part in parts {
            for s in *part {
                refs.visit_stmt(s);
            }
        }
        for (name, offset) in refs.found {
            if self.judged_calls.contains(&offset) {
                continue;
            }
            let fw = self.forwards.iter().find(|f| f.function == name).cloned();
            if let Some(fw) = fw {
                self.report(
                    &fw.cap.rule,
                    &fw.cap.category,
                    format!(
                        "`{name}` passes its parameter `{}` to `{}`, which {}; this use of `{name}` \
                         is not a call the guard read after its definition, so what it is given \
                         cannot be checked: call it directly, after the `def`",
                        fw.param, fw.cap.name, fw.cap.reason
                    ),
                    offset,
                );
            }
        }
    }
}

/// Every load of a forwarding function's name (`f`, or `x.f` for a method),
/// with the offset a call of it would have been recorded under.
struct References<'s> {
    functions: &'s HashSet<(String, bool)>,
    found: Vec<(String, usize)>,
}

impl<'a> Visitor<'a> for References<'_> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        let (name, method) = match expr {
            Expr::Name(n) if n.ctx.is_load() => (nfkc(n.id.as_str()), false),
            Expr::Attribute(a) if a.ctx.is_load() => (nfkc(a.attr.as_str()), true),
            _ => (std::borrow::Cow::Borrowed(""), false),
        };
        if !name.is_empty() && self.functions.contains(&(name.to_string(), method)) {
            self.found.push((name.into_owned(), start(expr)));
        }
        visitor::walk_expr(self, expr);
    }
}

/// A string given through names, judged once every binding is known.
#[derive(Debug)]
pub(super) struct ByName {
    pub template: Vec<Piece>,
    pub judge: Judge,
    pub offset: usize,
}

/// One piece of such a string.
#[derive(Debug)]
pub(super) enum Piece {
    /// Text known now: one of these.
    Text(Vec<String>),
    /// What a name this code bound is assigned; `true`: through `!r`/`!a`.
    Name(String, bool),
    /// A name formatted with a format spec: it must hold numbers only.
    Number(String),
}

/// What the string is given to.
#[derive(Debug)]
pub(super) enum Judge {
    /// A capability that lets non-strings pass: an unknown value passes.
    Capability(Capability),
    /// A code-string method (`df.query`): an unknown value is refused.
    Code(String),
}

/// At most this many texts are judged for one string (the product of its
/// pieces' alternatives); past it, a code string is refused.
const MAX_TEXTS: usize = 64;

/// `repr()` of a string, when it is plain enough to write exactly.
pub(super) fn quoted(v: &str) -> Option<String> {
    let plain = !v.chars().any(|c| c == '\\' || c.is_control());
    match (plain, v.contains('\''), v.contains('"')) {
        (true, false, _) => Some(format!("'{v}'")),
        (true, true, false) => Some(format!("\"{v}\"")),
        _ => None,
    }
}

impl Walker<'_> {
    /// Judges the strings given through names (see [`ByName`]).
    pub(super) fn judge_by_name(&mut self) {
        for b in std::mem::take(&mut self.by_name) {
            match self.texts(&b.template) {
                Some(texts) => {
                    for text in texts {
                        match &b.judge {
                            Judge::Capability(cap) => self.check_literal_text(cap, &text, b.offset),
                            Judge::Code(what) => self.embedded_code(&text, b.offset, what),
                        }
                    }
                }
                None => {
                    if let Judge::Code(what) = &b.judge {
                        self.report(
                            "code_string",
                            "code",
                            format!(
                                "the {what} is an f-string whose values the guard cannot all \
                                 read (a name assigned something other than literals, or too \
                                 many combinations); refer to Python values with @name \
                                 (`df.query(\"x > @limit\")`)"
                            ),
                            b.offset,
                        );
                    }
                }
            }
        }
    }

    /// Every text the template can make, when each name's bindings are all
    /// literals and there are at most [`MAX_TEXTS`].
    fn texts(&self, template: &[Piece]) -> Option<Vec<String>> {
        let mut out = vec![String::new()];
        for piece in template {
            let alternatives: Vec<String> = match piece {
                Piece::Text(t) => t.clone(),
                Piece::Name(name, repr) => {
                    let values = self.bindings.get(name)?.values.as_ref()?;
                    if *repr {
                        values.iter().map(|v| quoted(v)).collect::<Option<_>>()?
                    } else {
                        values.clone()
                    }
                }
                Piece::Number(name) => {
                    let values = self.bindings.get(name)?.values.as_ref()?;
                    if values.iter().any(|v| v != "0") {
                        return None;
                    }
                    vec!["0".into()]
                }
            };
            let mut alternatives = alternatives;
            alternatives.sort_unstable();
            alternatives.dedup();
            if out.len().saturating_mul(alternatives.len()) > MAX_TEXTS {
                return None;
            }
            out = out
                .iter()
                .flat_map(|o| alternatives.iter().map(move |a| format!("{o}{a}")))
                .collect();
        }
        Some(out)
    }
}
