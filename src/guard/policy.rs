//! The guard policy: the TOML model a policy author writes (`policies/*.toml`)
//! and its compiled, lookup-ready form. Building a [`Policy`] is pure: text in,
//! sets and regexes out, with an error that names the bad field.

use std::collections::{HashMap, HashSet};

use regex::bytes::{RegexSet, RegexSetBuilder};
use serde::Deserialize;

use super::GuardError;
use super::names::nfkc;

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The code does not run.
    #[default]
    Block,
    /// The code runs; the verdict is `restricted` and lists the finding.
    Warn,
    /// The rule is not checked.
    Off,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    version: u32,
    limits: LimitsFile,
    #[serde(default)]
    actions: HashMap<String, Action>,
    modules: ModulesFile,
    builtins: BuiltinsFile,
    dunders: DundersFile,
    attributes: AttributesFile,
    reflection: ReflectionFile,
    paths: PathsFile,
    #[serde(default)]
    tripwires: Vec<TripwireFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    max_source_bytes: usize,
    max_nesting_depth: usize,
    max_expression_chain: usize,
    max_findings: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModulesFile {
    blocked: Vec<String>,
    #[serde(default)]
    hints: HashMap<String, String>,
    #[serde(default)]
    star_import_allowed: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BuiltinsFile {
    blocked: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DundersFile {
    allowed: Vec<String>,
    #[serde(default)]
    not_definable: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttributesFile {
    internals: Vec<String>,
    module_reexports: Vec<String>,
    #[serde(default)]
    dangerous: Vec<DangerousGroupFile>,
    #[serde(default)]
    dangerous_keywords: Vec<DangerousGroupFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DangerousGroupFile {
    category: String,
    reason: String,
    names: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReflectionFile {
    builtins: Vec<String>,
    attribute_getters: Vec<String>,
    #[serde(default)]
    code_string_methods: Vec<String>,
    #[serde(default)]
    code_string_functions: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathsFile {
    system_roots: Vec<String>,
    alias_prefixes: Vec<String>,
    path_functions: Vec<String>,
    code_extensions: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TripwireFile {
    id: String,
    category: String,
    description: String,
    pattern: String,
    #[serde(default)]
    action: Action,
}

/// Input limits enforced before parsing.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_source_bytes: usize,
    pub max_nesting_depth: usize,
    pub max_expression_chain: usize,
    pub max_findings: usize,
}

/// One compiled tripwire pattern.
#[derive(Debug, Clone)]
pub struct Tripwire {
    pub id: String,
    pub category: String,
    pub description: String,
    pub action: Action,
}

/// A dangerous attribute name and why.
#[derive(Debug, Clone)]
pub struct Dangerous {
    pub category: String,
    pub reason: String,
}

/// The compiled policy: every name NFKC-normalised, every lookup a hash set.
#[derive(Debug)]
pub struct Policy {
    pub limits: Limits,
    actions: HashMap<String, Action>,
    pub blocked_modules: HashSet<String>,
    /// What to use instead of a blocked module.
    pub module_hints: HashMap<String, String>,
    /// Modules whose `from m import *` is allowed.
    pub star_import_allowed: HashSet<String>,
    pub blocked_builtins: HashSet<String>,
    pub allowed_dunders: HashSet<String>,
    /// Dunder methods a class may not define.
    pub not_definable: HashSet<String>,
    pub internals: HashSet<String>,
    pub module_reexports: HashSet<String>,
    pub dangerous: HashMap<String, Dangerous>,
    /// Keyword arguments that must be literally falsy (`allow_pickle`).
    pub dangerous_keywords: HashMap<String, Dangerous>,
    pub reflection_builtins: HashSet<String>,
    pub attribute_getters: HashSet<String>,
    /// Methods whose first argument is run as code; only constants pass.
    pub code_string_methods: HashSet<String>,
    /// Functions whose constant string argument is checked as code.
    pub code_string_functions: HashSet<String>,
    pub system_roots: HashSet<String>,
    pub alias_prefixes: Vec<String>,
    pub path_functions: HashSet<String>,
    /// Lower-case file suffixes of code an import would run (".py", ".so").
    pub code_extensions: Vec<String>,
    pub tripwires: Vec<Tripwire>,
    pub tripwire_set: RegexSet,
}

fn invalid(field: &str, why: impl Into<String>) -> GuardError {
    GuardError::InvalidPolicy {
        field: field.to_string(),
        reason: why.into(),
    }
}

fn dangerous_map(
    field: &str,
    groups: &[DangerousGroupFile],
) -> Result<HashMap<String, Dangerous>, GuardError> {
    let mut map = HashMap::new();
    for group in groups {
        for n in name_set(field, &group.names)? {
            map.insert(
                n,
                Dangerous {
                    category: group.category.clone(),
                    reason: group.reason.clone(),
                },
            );
        }
    }
    Ok(map)
}

fn name_set(field: &str, names: &[String]) -> Result<HashSet<String>, GuardError> {
    let mut set = HashSet::with_capacity(names.len());
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            return Err(invalid(field, "contains an empty name"));
        }
        set.insert(nfkc(n).into_owned());
    }
    Ok(set)
}

/// Every rule name an `[actions]` entry may use.
pub const RULES: &[&str] = &[
    "blocked_module",
    "module_reexport",
    "blocked_builtin",
    "dunder_name",
    "internals_attribute",
    "blocked_attribute",
    "reflection",
    "format_field",
    "unbound_module_name",
    "open_file_descriptor",
    "path_outside_workspace",
    "path_alias",
    "code_file_write",
    "star_import",
    "code_string",
];

impl Policy {
    /// Parses and compiles a policy document.
    pub fn from_toml(text: &str) -> Result<Policy, GuardError> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| GuardError::PolicySyntax {
            reason: e.to_string(),
        })?;
        Policy::compile(file)
    }

    fn compile(file: PolicyFile) -> Result<Policy, GuardError> {
        if file.version != 1 {
            return Err(invalid(
                "version",
                format!(
                    "version {} is not supported; this build reads version 1",
                    file.version
                ),
            ));
        }
        let l = &file.limits;
        for (field, v) in [
            ("limits.max_source_bytes", l.max_source_bytes),
            ("limits.max_nesting_depth", l.max_nesting_depth),
            ("limits.max_expression_chain", l.max_expression_chain),
            ("limits.max_findings", l.max_findings),
        ] {
            if v == 0 {
                return Err(invalid(field, "must be greater than 0"));
            }
        }
        // Bounds keep the parse thread's stack (see mod.rs) sufficient.
        if l.max_nesting_depth > 1000 {
            return Err(invalid("limits.max_nesting_depth", "must be at most 1000"));
        }
        if l.max_expression_chain > 10_000 {
            return Err(invalid(
                "limits.max_expression_chain",
                "must be at most 10000",
            ));
        }
        for rule in file.actions.keys() {
            if !RULES.contains(&rule.as_str()) {
                return Err(invalid(
                    "actions",
                    format!("unknown rule `{rule}`; known rules: {}", RULES.join(", ")),
                ));
            }
        }
        for module in file.modules.hints.keys() {
            if !file.modules.blocked.contains(module) {
                return Err(invalid(
                    "modules.hints",
                    format!("`{module}` has a hint but is not in modules.blocked"),
                ));
            }
        }
        let dangerous = dangerous_map("attributes.dangerous.names", &file.attributes.dangerous)?;
        let dangerous_keywords = dangerous_map(
            "attributes.dangerous_keywords.names",
            &file.attributes.dangerous_keywords,
        )?;
        let mut alias_prefixes = Vec::new();
        for p in &file.paths.alias_prefixes {
            if !p.starts_with('/') {
                return Err(invalid(
                    "paths.alias_prefixes",
                    format!("`{p}` is not absolute"),
                ));
            }
            alias_prefixes.push(p.trim_end_matches('/').to_string());
        }
        let mut tripwires = Vec::new();
        let mut patterns = Vec::new();
        let mut seen = HashSet::new();
        for t in file.tripwires {
            if !seen.insert(t.id.clone()) {
                return Err(invalid("tripwires", format!("duplicate id `{}`", t.id)));
            }
            if t.action == Action::Off {
                continue;
            }
            tripwire_builder(std::slice::from_ref(&t.pattern))
                .build()
                .map_err(|e| invalid(&format!("tripwires.{}.pattern", t.id), e.to_string()))?;
            patterns.push(t.pattern);
            tripwires.push(Tripwire {
                id: t.id,
                category: t.category,
                description: t.description,
                action: t.action,
            });
        }
        let tripwire_set = tripwire_builder(&patterns)
            .build()
            .map_err(|e| invalid("tripwires", e.to_string()))?;
        Ok(Policy {
            limits: Limits {
                max_source_bytes: l.max_source_bytes,
                max_nesting_depth: l.max_nesting_depth,
                max_expression_chain: l.max_expression_chain,
                max_findings: l.max_findings,
            },
            actions: file.actions,
            blocked_modules: name_set("modules.blocked", &file.modules.blocked)?,
            module_hints: file.modules.hints,
            star_import_allowed: name_set(
                "modules.star_import_allowed",
                &file.modules.star_import_allowed,
            )?,
            blocked_builtins: name_set("builtins.blocked", &file.builtins.blocked)?,
            allowed_dunders: name_set("dunders.allowed", &file.dunders.allowed)?,
            not_definable: name_set("dunders.not_definable", &file.dunders.not_definable)?,
            internals: name_set("attributes.internals", &file.attributes.internals)?,
            module_reexports: name_set(
                "attributes.module_reexports",
                &file.attributes.module_reexports,
            )?,
            dangerous,
            dangerous_keywords,
            reflection_builtins: name_set("reflection.builtins", &file.reflection.builtins)?,
            attribute_getters: name_set(
                "reflection.attribute_getters",
                &file.reflection.attribute_getters,
            )?,
            code_string_methods: name_set(
                "reflection.code_string_methods",
                &file.reflection.code_string_methods,
            )?,
            code_string_functions: name_set(
                "reflection.code_string_functions",
                &file.reflection.code_string_functions,
            )?,
            system_roots: name_set("paths.system_roots", &file.paths.system_roots)?,
            alias_prefixes,
            path_functions: name_set("paths.path_functions", &file.paths.path_functions)?,
            code_extensions: file
                .paths
                .code_extensions
                .iter()
                .map(|e| e.to_ascii_lowercase())
                .collect(),
            tripwires,
            tripwire_set,
        })
    }

    /// The action configured for a rule (tripwires carry their own).
    pub fn action(&self, rule: &str) -> Action {
        self.actions.get(rule).copied().unwrap_or_default()
    }

    /// Whether `module` (dotted) or any package above it is blocked.
    pub fn module_blocked(&self, module: &str) -> Option<&str> {
        let mut end = 0;
        for (i, part) in module.split('.').enumerate() {
            end += part.len() + usize::from(i > 0);
            let prefix = &module[..end];
            if let Some(hit) = self.blocked_modules.get(prefix) {
                return Some(hit.as_str());
            }
        }
        None
    }

    /// Whether a dunder name may be read.
    pub fn dunder_allowed(&self, name: &str) -> bool {
        self.allowed_dunders.contains(name)
    }
}

/// Tripwires match bytes with ASCII semantics (`\b`, `\w`, `(?i)`): the
/// commands and paths they describe are ASCII, and ASCII word boundaries
/// keep the whole set on the fast DFA path.
fn tripwire_builder(patterns: &[String]) -> RegexSetBuilder {
    let mut b = RegexSetBuilder::new(patterns);
    b.unicode(false).size_limit(16 << 20);
    b
}

/// Whether `name` has the `__x__` shape.
pub fn is_dunder(name: &str) -> bool {
    name.len() > 4 && name.starts_with("__") && name.ends_with("__")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const DEFAULT: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/policies/default.toml"
    ));

    #[test]
    fn default_policy_compiles_with_the_required_counts() {
        let p = Policy::from_toml(DEFAULT).unwrap();
        assert!(p.blocked_modules.len() >= 31);
        assert!(p.blocked_builtins.len() >= 11);
        assert!(p.tripwires.len() >= 21);
        for m in [
            "posix",
            "_posixsubprocess",
            "_socket",
            "_ctypes",
            "_frozen_importlib",
            "_frozen_importlib_external",
            "builtins",
            "importlib",
            "ctypes",
            "cffi",
            "mmap",
            "gc",
            "inspect",
            "pickle",
            "marshal",
            "pty",
            "subprocess",
            "multiprocessing",
            "signal",
            "socket",
            "os",
            "sys",
            "shutil",
            "code",
            "codeop",
            "runpy",
        ] {
            assert!(p.blocked_modules.contains(m), "{m}");
        }
        for b in [
            "eval",
            "exec",
            "compile",
            "__import__",
            "globals",
            "vars",
            "breakpoint",
        ] {
            assert!(p.blocked_builtins.contains(b), "{b}");
        }
        assert!(!p.blocked_builtins.contains("open"));
        assert!(!p.blocked_modules.contains("threading"));
        assert!(!p.dunder_allowed("__class__"));
        assert!(p.dunder_allowed("__name__"));
    }

    #[test]
    fn module_prefixes_match_on_dot_boundaries() {
        let p = Policy::from_toml(DEFAULT).unwrap();
        assert_eq!(p.module_blocked("os.path"), Some("os"));
        assert_eq!(p.module_blocked("http.client"), Some("http.client"));
        assert_eq!(p.module_blocked("http"), None);
        assert_eq!(p.module_blocked("urllib.parse"), None);
        assert_eq!(p.module_blocked("osmosis"), None);
        assert_eq!(p.module_blocked("asyncio"), None);
        assert_eq!(
            p.module_blocked("asyncio.subprocess"),
            Some("asyncio.subprocess")
        );
    }

    #[test]
    fn bad_policies_say_which_field() {
        let bad_regex = DEFAULT.replace(r"pattern = '/dev/(tcp|udp)/'", "pattern = '(('");
        let err = Policy::from_toml(&bad_regex).unwrap_err().to_string();
        assert!(err.contains("tripwires.dev_tcp.pattern"), "{err}");

        let bad_rule = DEFAULT.replace("[actions]", "[actions]\nno_such_rule = \"warn\"");
        let err = Policy::from_toml(&bad_rule).unwrap_err().to_string();
        assert!(err.contains("no_such_rule"), "{err}");

        let err = Policy::from_toml("version = 1").unwrap_err().to_string();
        assert!(err.contains("limits"), "{err}");

        let zero = DEFAULT.replace("max_nesting_depth = 100", "max_nesting_depth = 0");
        let err = Policy::from_toml(&zero).unwrap_err().to_string();
        assert!(err.contains("max_nesting_depth"), "{err}");
    }

    #[test]
    fn actions_default_to_block_and_can_warn() {
        let p = Policy::from_toml(DEFAULT).unwrap();
        assert_eq!(p.action("format_field"), Action::Block);
        let warn = DEFAULT.replace(
            "path_outside_workspace = \"block\"",
            "path_outside_workspace = \"warn\"",
        );
        let p = Policy::from_toml(&warn).unwrap();
        assert_eq!(p.action("path_outside_workspace"), Action::Warn);
    }

    #[test]
    fn dunder_shape() {
        assert!(is_dunder("__class__"));
        assert!(!is_dunder("____"));
        assert!(!is_dunder("_x_"));
        assert!(!is_dunder("__private"));
    }
}
