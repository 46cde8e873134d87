//! Names, attributes, imports and string values: what each identifier or
//! literal the walk meets may not be.

use super::super::ast::{Expr, ExprContext, const_str, py, start};
use super::super::names::{nfkc, nfkc_is};
use super::super::paths;
use super::super::policy::{UNJUDGED_RULE, Unjudged, is_dunder};
use super::super::strings;
use super::super::tripwire;
use super::{Binding, FORMAT_METHODS, MATCH_ARGS, RawFinding, Walker};

/// What is wrong with reading attribute `name` (already NFKC-normalised).
pub(super) struct AttrProblem {
    pub rule: &'static str,
    pub category: String,
    pub why: String,
}

impl Walker<'_> {
    pub(super) fn attr_problem(&self, name: &str) -> Option<AttrProblem> {
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
    pub(super) fn reflection_sensitive(&self, name: &str) -> bool {
        let p = self.policy;
        p.reflection_builtins.contains(name)
            || self.policy.getter_names.contains(name)
            || p.blocked_builtins.contains(name)
            || p.code_string_methods.contains(name)
            || p.code_string_functions.contains(name)
            || FORMAT_METHODS.contains(&name)
            || name == "vformat"
    }

    pub(super) fn check_attr_name(&mut self, name: &str, offset: usize, context: &str) {
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
    pub(super) fn check_name(
        &mut self,
        raw: &str,
        ctx: ExprContext,
        offset: usize,
        as_callee: bool,
    ) {
        let name = nfkc(raw);
        let name = name.as_ref();
        if matches!(ctx, ExprContext::Store) {
            self.store_name(name, offset);
            return;
        }
        let p = self.policy;
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

    fn store_name(&mut self, name: &str, offset: usize) {
        let literal = self.const_store;
        let formatter = self.formatter_store;
        let plain_data = self.plain_data_store;
        let top = self.block_depth == 1 && self.fn_stack.is_empty();
        let first_literal = (literal && top).then_some(offset);
        let first_formatter = (formatter && top).then_some(offset);
        let value = self.const_value.clone();
        match self.bindings.get_mut(name) {
            Some(b) => {
                b.literal &= literal;
                b.literal_at = b.literal_at.or(first_literal);
                b.formatter &= formatter;
                b.formatter_at = b.formatter_at.or(first_formatter);
                b.plain_data &= plain_data;
                match (&mut b.values, value) {
                    (Some(values), Some(v)) => values.push(v),
                    _ => b.values = None,
                }
            }
            None => {
                self.bindings.insert(
                    name.to_string(),
                    Binding {
                        literal,
                        literal_at: first_literal,
                        formatter,
                        formatter_at: first_formatter,
                        plain_data,
                        values: value.map(|v| vec![v]),
                    },
                );
            }
        }
        if is_dunder(name) && !self.policy.dunder_allowed(name) {
            self.report(
                "dunder_name",
                "internals",
                format!("assigning `{name}` rebinds interpreter machinery"),
                offset,
            );
        }
    }

    pub(super) fn bind(&mut self, raw: &str) {
        let name = nfkc(raw);
        match self.bindings.get_mut(name.as_ref()) {
            Some(b) => {
                b.literal = false;
                b.formatter = false;
                b.plain_data = false;
                b.values = None;
            }
            None => self.new_binding(name.into_owned()),
        }
    }

    /// A binding that is not a string literal (parameter, import, def, ...).
    pub(super) fn bind_owned(&mut self, name: String) {
        match self.bindings.get_mut(&name) {
            Some(b) => {
                b.literal = false;
                b.formatter = false;
                b.plain_data = false;
                b.values = None;
            }
            None => self.new_binding(name),
        }
    }

    fn new_binding(&mut self, name: String) {
        let b = Binding {
            literal: false,
            literal_at: None,
            formatter: false,
            formatter_at: None,
            plain_data: false,
            values: None,
        };
        self.bindings.insert(name, b);
    }

    /// The text of a string the guard can read completely, or `0` for a
    /// number (whose text is never code and names no attribute).
    pub(super) fn literal_text(&mut self, e: &Expr) -> Option<String> {
        match e {
            Expr::NumberLiteral(_) => Some("0".into()),
            Expr::UnaryOp(u) if matches!(u.operand.as_ref(), Expr::NumberLiteral(_)) => {
                Some("0".into())
            }
            _ => match const_str(e) {
                Some(t) => Some(t.to_string()),
                None if strings::is_composite(e) => {
                    strings::fold(e, &mut self.fold_budget).filter(|v| !v.contains(strings::HOLE))
                }
                None => None,
            },
        }
    }

    /// Whether `e` is a string the guard can read completely.
    pub(super) fn is_literal_string(&mut self, e: &Expr) -> bool {
        match const_str(e) {
            Some(_) => true,
            None if strings::is_composite(e) => {
                strings::fold(e, &mut self.fold_budget).is_some_and(|v| !v.contains(strings::HOLE))
            }
            None => false,
        }
    }

    /// A constant dunder key: `ns["__builtins__"]`, `case {"__import__": f}`.
    pub(super) fn dunder_key(&mut self, key: &Expr, offset: usize) {
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

    pub(super) fn declared_names(&mut self, names: &[py::Identifier], offset: usize) {
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

    /// `def name` in any scope: some dunder methods may not be defined.
    pub(super) fn definition(&mut self, raw: &str, offset: usize) {
        let name = nfkc(raw);
        if self.policy.not_definable.contains(name.as_ref()) {
            self.report(
                "dunder_name",
                "internals",
                format!(
                    "defining `{name}` is not allowed: numpy reads raw memory addresses from it, \
                     class patterns read attributes by the names it returns, or copy and \
                     dataclasses turn what it returns into attributes or source (see \
                     [dunders].not_definable)"
                ),
                offset,
            );
        }
    }

    /// Path, tripwire, format-field, template and configuration-key checks
    /// on one string value.
    pub(super) fn check_string(&mut self, value: &str, offset: usize, docstring: bool) {
        if let Some(problem) = paths::check(value, false, self.roots, self.policy) {
            self.report(problem.rule, "path", problem.message, offset);
        }
        if !docstring {
            self.check_tripwires_and_patterns(value, offset);
            self.config_string(value, offset);
            if nfkc_is(value, MATCH_ARGS) {
                self.report(
                    "reflection",
                    "reflection",
                    format!("the string `{MATCH_ARGS}` sets, by name, the attribute names class patterns read; assign a literal tuple in the class body"),
                    offset,
                );
            }
        }
        self.template_string(value, offset);
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

    /// Tripwires, then policy patterns that are findings but not tripwires
    /// (`!!python/`): one regex set for both.
    fn check_tripwires_and_patterns(&mut self, value: &str, offset: usize) {
        let hits = tripwire::hits(self.policy, value);
        for t in hits.tripwires {
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
        for p in hits.patterns {
            self.report(
                &p.rule,
                &p.category,
                format!("the string {}", p.reason),
                offset,
            );
        }
    }

    /// `__match_args__ = (...)`: `case C(x)` reads these attributes by name.
    pub(super) fn match_args_value(&mut self, value: Option<&Expr>, offset: usize) {
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

    // ---- imports -----------------------------------------------------------

    pub(super) fn import(&mut self, i: &py::StmtImport) {
        for alias in &i.names {
            let offset = start(alias);
            let module = nfkc(alias.name.as_str()).into_owned();
            self.check_module(&module, offset);
            self.check_judged(&module, offset);
            match &alias.asname {
                Some(asname) => self.bind(asname.as_str()),
                None => {
                    let first = module.split('.').next().unwrap_or(&module).to_string();
                    self.bind_owned(first);
                }
            }
        }
    }

    pub(super) fn import_from(&mut self, i: &py::StmtImportFrom) {
        let module = i
            .module
            .as_ref()
            .map(|m| nfkc(m.as_str()).into_owned())
            .unwrap_or_default();
        // `from os import getcwd` under a policy whose [modules] importable lists
        // `os.getcwd`: only the listed names are bound, never the module.
        let importable = i.level == 0
            && i.names.iter().all(|a| {
                let name = nfkc(a.name.as_str());
                self.policy.importable.contains(&format!("{module}.{name}"))
            });
        if !module.is_empty() && !importable {
            self.check_module(&module, start(i));
            // A relative import names no top-level module (and at the top
            // level of a cell it fails: the code has no package).
            if i.level == 0 {
                self.check_judged(&module, start(i));
            }
        }
        for alias in &i.names {
            let name = nfkc(alias.name.as_str()).into_owned();
            if name == "*" {
                self.star_import(&module, i.level > 0, start(alias));
                continue;
            }
            self.imported_name(&module, &name, alias);
            match &alias.asname {
                Some(asname) => self.bind(asname.as_str()),
                None => self.bind_owned(name),
            }
        }
    }

    fn star_import(&mut self, module: &str, relative: bool, offset: usize) {
        if !relative && self.policy.star_import_allowed.contains(module) {
            return;
        }
        let shown = if relative {
            format!(".{module}")
        } else {
            module.to_string()
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

    /// `from module import name [as alias]`.
    fn imported_name(&mut self, module: &str, name: &str, alias: &py::Alias) {
        let offset = start(alias);
        let full = if module.is_empty() {
            name.to_string()
        } else {
            format!("{module}.{name}")
        };
        // `from http import client` imports the submodule http.client.
        if let Some(hit) = self.policy.module_blocked(&full)
            && self.policy.module_blocked(module).is_none()
        {
            let msg = self.module_message(&full, hit);
            self.report("blocked_module", "module", msg, offset);
        }
        if self.attr_problem(name).is_some() || self.mangled(name).is_some() {
            self.check_attr_name(name, offset, &format!("`from {module} import {name}`"));
        }
        let renamed_any = alias
            .asname
            .as_ref()
            .is_some_and(|a| nfkc(a.as_str()) != name);
        if !module.is_empty() {
            self.capability_import(module, name, full, renamed_any, offset);
        }
        if self.policy.blocked_builtins.contains(name) {
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
            .is_some_and(|a| nfkc(a.as_str()) != name);
        if renamed
            && (self.policy.getter_names.contains(name)
                || self.policy.reflection_builtins.contains(name))
        {
            self.report(
                "reflection",
                "reflection",
                format!("importing `{name}` under another name hides it from the guard; import it as `{name}`"),
                offset,
            );
        }
    }

    fn check_module(&mut self, module: &str, offset: usize) {
        if let Some(hit) = self.policy.module_blocked(module) {
            let msg = self.module_message(module, hit);
            self.report("blocked_module", "module", msg, offset);
        }
    }

    /// An import of a top-level module outside the judged set
    /// ([`Policy::module_judged`]): noted once per module, with the action
    /// `[modules] unjudged` gives it. A blocked module is left to its own
    /// finding.
    fn check_judged(&mut self, module: &str, offset: usize) {
        let top = module.split('.').next().unwrap_or(module);
        if top.is_empty()
            || self.policy.module_judged(top)
            || self.policy.module_blocked(module).is_some()
            || self
                .findings
                .iter()
                .any(|f| f.module.as_deref() == Some(top))
            || self.findings.len() >= self.cap.saturating_mul(2)
        {
            return;
        }
        let setting = self.policy.unjudged;
        let message = match setting {
            Unjudged::Refuse => format!(
                "importing `{top}` is refused: nobody judged it (it is neither in the standard \
                 library nor an audited package) and the policy sets [modules] unjudged = \
                 \"refuse\"; use a judged package, or ask the user to review `{top}` and add \
                 it to [modules] judged in the policy"
            ),
            _ => format!(
                "`{top}` is unjudged: neither the standard library nor an audited package, so \
                 the guard knows nothing of what it hands out and only the OS sandbox stands \
                 behind it ([modules] unjudged = \"{}\")",
                setting.as_str()
            ),
        };
        self.findings.push(RawFinding {
            rule: UNJUDGED_RULE.to_string(),
            category: "module".to_string(),
            message,
            offset,
            tripwire: false,
            action: setting.action(),
            module: Some(top.to_string()),
        });
    }

    fn module_message(&self, module: &str, hit: &str) -> String {
        let p = &self.policy;
        if !p.blocked_modules.contains(hit) && !p.blocked_parts.contains(hit) {
            return format!(
                "importing `{module}` is not allowed: this policy allows only the modules in \
                 its [modules] allow_only list, and `{hit}` is not among them"
            );
        }
        let mut msg = if hit == module {
            format!("importing `{module}` is not allowed")
        } else {
            format!("importing `{module}` is not allowed (policy blocks `{hit}`)")
        };
        if let Some(hint) = self.policy.module_hints.get(hit) {
            msg.push_str(": ");
            msg.push_str(hint);
        }
        let names = self.policy.importable_from(module);
        if !names.is_empty() {
            msg.push_str(&format!(
                "; this policy lets you import single names: `from {module} import {}`",
                names.join(", ")
            ));
        }
        msg
    }
}
