//! The guard policy: the TOML model a policy author writes (`policies/*.toml`)
//! and its compiled, lookup-ready form. Building a [`Policy`] is pure: text in,
//! sets and regexes out, with an error that names the bad field.

// The policy's tables hash with FxHash: their keys are fixed by the policy,
// so a lookup costs the same whatever name the code asks for (no flooding),
// and FxHash is several times cheaper than SipHash on short names.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

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
    /// A tier's name (`"default"`): this file adds to that embedded policy
    /// (read before deserialising, in `from_toml`).
    #[serde(default, rename = "extends")]
    _extends: Option<String>,
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
    #[serde(default)]
    capabilities: Vec<CapabilityFile>,
    #[serde(default)]
    modes: Vec<ModeFile>,
    #[serde(default)]
    config_keys: Vec<ConfigKeysFile>,
    #[serde(default)]
    patterns: Vec<PatternFile>,
}

/// A regular expression over string values that is a finding (not a tripwire).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternFile {
    rule: String,
    category: String,
    reason: String,
    pattern: String,
}

/// APIs that resolve names, evaluate strings, spawn processes, load code or
/// emit native code, by module and function.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapabilityFile {
    rule: String,
    category: String,
    reason: String,
    functions: Vec<String>,
    #[serde(default)]
    literal: Literal,
    #[serde(default)]
    position: Option<usize>,
    #[serde(default)]
    keyword: Option<String>,
    #[serde(default = "yes")]
    by_name: bool,
    /// For `literal = "one_of"`: the literal values that are allowed.
    #[serde(default)]
    values: Vec<String>,
}

/// An argument that switches a function into a dangerous mode.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeFile {
    rule: String,
    category: String,
    reason: String,
    functions: Vec<String>,
    keyword: String,
    #[serde(default)]
    position: Option<usize>,
    #[serde(default)]
    safe: Vec<String>,
    #[serde(default = "yes")]
    by_name: bool,
}

/// Configuration keys whose value is a program the library later runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigKeysFile {
    rule: String,
    category: String,
    reason: String,
    keys: Vec<String>,
    #[serde(default)]
    objects: Vec<String>,
}

/// The generated `policies/reexports.toml`.
#[derive(Debug, Deserialize)]
struct ReexportsFile {
    #[serde(default)]
    reexport: Vec<ReexportFile>,
}

#[derive(Debug, Deserialize)]
struct ReexportFile {
    name: String,
    distinctive: bool,
    targets: Vec<String>,
    #[serde(rename = "where")]
    modules: Vec<String>,
}

/// The generated `policies/judged.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgedFile {
    #[serde(rename = "python")]
    _python: String,
    stdlib: Vec<String>,
    audited: Vec<String>,
}

fn yes() -> bool {
    true
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
    blocked_parts: Vec<String>,
    #[serde(default)]
    hints: HashMap<String, String>,
    #[serde(default)]
    star_import_allowed: Vec<String>,
    /// What an import of a top-level module nobody judged does.
    #[serde(default)]
    unjudged: Unjudged,
    /// Top-level modules the policy's author judged, besides the generated
    /// policies/judged.toml.
    #[serde(default)]
    judged: Vec<String>,
    /// Blocked modules a proxied network allows: HTTP clients whose every connection
    /// the egress proxy judges.
    #[serde(default)]
    proxied: Vec<String>,
    /// When not empty, the only modules (each with its submodules) that may be
    /// imported at all: a tier's whole vocabulary.
    #[serde(default)]
    allow_only: Vec<String>,
    /// Entries of `blocked` that a policy extending another takes out again.
    #[serde(default)]
    unblocked: Vec<String>,
    /// `module.name`s that `from module import name` may bind although the
    /// module is blocked: single functions and values, never the module.
    #[serde(default)]
    importable: Vec<String>,
}

/// What an import of an unjudged module does (`[modules] unjudged`): a module
/// outside the stdlib and the audited packages (policies/judged.toml) may hand
/// out a capability the policy never heard of, so by default the call says so.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Unjudged {
    /// The import passes unremarked; only the OS layer stands behind it.
    Allow,
    /// The code runs; the result's `warnings` name the module.
    #[default]
    Warn,
    /// The call is refused, naming the module and the setting.
    Refuse,
}

impl Unjudged {
    /// The finding's action: `allow` reports nothing.
    pub fn action(self) -> Action {
        match self {
            Unjudged::Allow => Action::Off,
            Unjudged::Warn => Action::Warn,
            Unjudged::Refuse => Action::Block,
        }
    }

    /// As the policy file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Unjudged::Allow => "allow",
            Unjudged::Warn => "warn",
            Unjudged::Refuse => "refuse",
        }
    }
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
    reexports_by_receiver_only: Vec<String>,
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
    #[serde(default)]
    metaclasses: Vec<String>,
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

/// What a literal argument of a capability may be; anything not literal is
/// refused, since its text cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Literal {
    /// Never allowed, literal or not.
    #[default]
    Never,
    /// Python code: parsed and checked like the submitted source.
    Code,
    /// A dotted attribute path: every part checked like `obj.name`.
    Attribute,
    /// A `str.format` field path (`0.name[key]`): its attributes checked.
    Field,
    /// A module name: checked like an import.
    Module,
    /// A template (jinja): its expressions checked for attribute walks.
    Template,
    /// Field names of a generated class: each checked like `obj.name`.
    Fields,
    /// Field names the function itself restricts to identifiers without a
    /// leading underscore and pastes into its generated source only as
    /// such (`collections.namedtuple`): literal names are checked like
    /// `obj.name`, names chosen at run time pass (no dunder, no code).
    IdentifierFields,
    /// Python code when it is a string (checked like `code`), anything
    /// else when it is not one (`lambdify(x, x**2)` takes an expression,
    /// `lambdify(x, "x**2")` pastes the string into generated source).
    CodeIfString,
    /// An attribute name when it is a string (`df.agg("sum")` calls
    /// `getattr(df, "sum")()`): the string, and every string in a list,
    /// tuple or dict display given instead, checked like `obj.name`; a
    /// string built at run time is refused, anything else passes.
    AttributeIfString,
    /// One of the entry's `values` (a built-in style name); a literal dict
    /// passes too (its keys are checked as configuration keys).
    OneOf,
    /// The call's keyword names become attributes of an object
    /// (`SimpleNamespace(**d)`): every keyword name, and every key of a
    /// `**{...}` display, checked like `obj.name`; `**` of anything else is
    /// refused, since its keys cannot be read.
    KeywordNames,
    /// Any direct call passes; a reference that is not a call (an alias, a
    /// base class: `class R(redirect_stdout)` may override what the class
    /// reads and writes) is refused.
    Call,
}

impl Literal {
    /// Whether an argument that is not a string (a function given by a
    /// bare decorator, `@numba.njit`) passes.
    pub fn passes_non_strings(self) -> bool {
        matches!(self, Literal::CodeIfString | Literal::AttributeIfString)
    }
}

/// One capability entry, compiled.
#[derive(Debug, Clone)]
pub struct Capability {
    /// The qualified name as the policy wrote it (`sympy.sympify`).
    pub name: String,
    pub rule: String,
    pub category: String,
    pub reason: String,
    pub literal: Literal,
    pub position: Option<usize>,
    pub keyword: Option<String>,
    /// The allowed literals of a `one_of` entry.
    pub values: Vec<String>,
}

/// An argument that must keep a function in its safe mode.
#[derive(Debug, Clone)]
pub struct Mode {
    pub name: String,
    pub rule: String,
    pub category: String,
    pub reason: String,
    pub keyword: String,
    pub position: Option<usize>,
    /// Values (last names) that keep it safe; empty: only False/None/0.
    pub safe: HashSet<String>,
}

/// Configuration keys that name programs.
#[derive(Debug, Clone)]
pub struct ConfigKeys {
    pub rule: String,
    pub category: String,
    pub reason: String,
}

/// A name under which allowed modules hand out something blocked.
#[derive(Debug, Clone)]
pub struct Reexport {
    /// Nothing harmless in the audited runtime has this name.
    pub distinctive: bool,
    /// What it is (`module os`, `builtin exec`, `api subprocess.check_output`).
    pub targets: Vec<String>,
    /// Modules (and classes) where it holds.
    pub modules: HashSet<String>,
}

/// Lookup tables for entries named by module and function.
#[derive(Debug)]
pub struct ByName<T> {
    pub entries: Vec<T>,
    /// Last component of every entry, matched by name or not: a call whose
    /// last name is not here cannot be any entry.
    pub names: HashSet<String>,
    /// Full dotted name -> entry.
    pub qualified: HashMap<String, Vec<usize>>,
    /// Last component -> entries matched on any receiver the guard cannot resolve.
    pub last: HashMap<String, Vec<usize>>,
    /// Entries written as a bare name (`_UnixSubprocessTransport`): matched
    /// on every receiver, resolved or not.
    pub bare: HashMap<String, Vec<usize>>,
}

impl<T> Default for ByName<T> {
    fn default() -> Self {
        ByName {
            entries: Vec::new(),
            names: HashSet::default(),
            qualified: HashMap::default(),
            last: HashMap::default(),
            bare: HashMap::default(),
        }
    }
}

impl<T> ByName<T> {
    fn add(&mut self, qualified: &str, by_name: bool, entry: T) {
        let i = self.entries.len();
        self.entries.push(entry);
        self.qualified
            .entry(qualified.to_string())
            .or_default()
            .push(i);
        let last = qualified.rsplit('.').next().unwrap_or(qualified);
        self.names.insert(last.to_string());
        if !qualified.contains('.') {
            self.bare.entry(last.to_string()).or_default().push(i);
        }
        if by_name && qualified.contains('.') {
            let last = qualified.rsplit('.').next().unwrap_or(qualified);
            self.last.entry(last.to_string()).or_default().push(i);
        }
    }

    /// Entries for a call or reference: by qualified name when the guard
    /// resolved it, else by its last name.
    pub fn lookup(&self, resolved: &[String], last: &str) -> Vec<&T> {
        let mut out: Vec<&T> = Vec::new();
        if let Some(ids) = self.bare.get(last) {
            out.extend(ids.iter().filter_map(|&i| self.entries.get(i)));
        }
        if resolved.is_empty() {
            if let Some(ids) = self.last.get(last) {
                out.extend(ids.iter().filter_map(|&i| self.entries.get(i)));
            }
            return out;
        }
        for q in resolved {
            if let Some(ids) = self.qualified.get(q) {
                out.extend(ids.iter().filter_map(|&i| self.entries.get(i)));
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
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
    /// When not empty, the only modules (with their submodules) that may be
    /// imported (`[modules] allow_only`).
    pub allow_only: HashSet<String>,
    /// `module.name`s a from-import may bind from a blocked module
    /// (`[modules] importable`).
    pub importable: HashSet<String>,
    /// Blocked modules a proxied network allows (`[modules] proxied`).
    pub proxied_modules: HashSet<String>,
    /// What to use instead of a blocked module.
    pub module_hints: HashMap<String, String>,
    /// Modules whose `from m import *` is allowed.
    pub star_import_allowed: HashSet<String>,
    /// Top-level modules someone judged: the stdlib, the audited packages
    /// (policies/judged.toml) and the policy's own `[modules] judged`.
    pub judged_modules: HashSet<String>,
    /// What importing any other top-level module does.
    pub unjudged: Unjudged,
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
    /// Last components of the attribute getters (`operator.attrgetter`).
    pub getter_names: HashSet<String>,
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
    /// The tripwires' patterns, then the policy patterns': match `i` is
    /// `tripwires[i]` below `tripwires.len()`, else `patterns[i - len]`.
    pub string_set: RegexSet,
    /// Module path components that block a module wherever they appear (`tests`).
    pub blocked_parts: HashSet<String>,
    pub capabilities: ByName<Capability>,
    pub modes: ByName<Mode>,
    /// Configuration key (`animation.ffmpeg_path`) -> its group.
    pub config_keys: HashMap<String, usize>,
    /// Last part of each key (`ffmpeg_path`), as `rc(group, ffmpeg_path=...)` spells it.
    pub config_leaves: HashMap<String, usize>,
    pub config_groups: Vec<ConfigKeys>,
    /// Objects whose keys are configuration (`rcParams`): computed keys are refused.
    pub config_objects: HashSet<String>,
    /// Generated from the runtime (policies/reexports.toml).
    pub reexports: HashMap<String, Reexport>,
    /// Classes whose subclasses are metaclasses (`ABCMeta`).
    pub metaclasses: HashSet<String>,
    /// Findings (not tripwires) for string values, in `string_set` after the tripwires.
    pub patterns: Vec<ConfigKeys>,
}

fn invalid(field: &str, why: impl Into<String>) -> GuardError {
    GuardError::InvalidPolicy {
        field: field.to_string(),
        reason: why.into(),
    }
}

/// The file's version, its limits, and rule and module names that must exist.
fn check_header(file: &PolicyFile) -> Result<(), GuardError> {
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
    Ok(())
}

/// `paths.alias_prefixes`: absolute, without a trailing slash.
fn alias_prefixes(given: &[String]) -> Result<Vec<String>, GuardError> {
    let mut alias_prefixes = Vec::new();
    for p in given {
        if !p.starts_with('/') {
            return Err(invalid(
                "paths.alias_prefixes",
                format!("`{p}` is not absolute"),
            ));
        }
        alias_prefixes.push(p.trim_end_matches('/').to_string());
    }
    Ok(alias_prefixes)
}

/// The tripwires in force, and their regexes in the same order.
fn compile_tripwires(specs: Vec<TripwireFile>) -> Result<(Vec<Tripwire>, Vec<String>), GuardError> {
    let mut tripwires = Vec::new();
    let mut regexes = Vec::new();
    let mut seen = HashSet::default();
    for t in specs {
        if !seen.insert(t.id.clone()) {
            return Err(invalid("tripwires", format!("duplicate id `{}`", t.id)));
        }
        if t.action == Action::Off {
            continue;
        }
        tripwire_builder(std::slice::from_ref(&t.pattern))
            .build()
            .map_err(|e| invalid(&format!("tripwires.{}.pattern", t.id), e.to_string()))?;
        regexes.push(t.pattern);
        tripwires.push(Tripwire {
            id: t.id,
            category: t.category,
            description: t.description,
            action: t.action,
        });
    }
    Ok((tripwires, regexes))
}

/// The last dotted part of each qualified name (`operator.attrgetter` → `attrgetter`).
fn last_parts(names: HashSet<String>) -> HashSet<String> {
    names
        .iter()
        .map(|q| q.rsplit('.').next().unwrap_or(q).to_string())
        .collect()
}

fn dangerous_map(
    field: &str,
    groups: &[DangerousGroupFile],
) -> Result<HashMap<String, Dangerous>, GuardError> {
    let mut map = HashMap::default();
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
    let mut set = HashSet::with_capacity_and_hasher(names.len(), Default::default());
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            return Err(invalid(field, "contains an empty name"));
        }
        set.insert(nfkc(n).into_owned());
    }
    Ok(set)
}

/// The rule of an import of an unjudged module. Its action is set by
/// `[modules] unjudged`, not by `[actions]`: one setting, one place.
pub const UNJUDGED_RULE: &str = "unjudged_module";

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
    "template_field",
    "process_spawn",
    "unsafe_loader",
    "native_code",
    "config_key",
];

impl Policy {
    /// Parses and compiles a policy document. A document with
    /// `extends = "default"` (or another tier's name) adds to that embedded
    /// policy: its lists are appended, its tables merged, its values replace
    /// the base's.
    /// The re-exports generated from the runtime (policies/reexports.toml)
    /// are part of every policy.
    pub fn from_toml(text: &str) -> Result<Policy, GuardError> {
        let syntax = |e: toml::de::Error| GuardError::PolicySyntax {
            reason: e.to_string(),
        };
        let value: toml::Value = toml::from_str(text).map_err(syntax)?;
        let value = with_base(value, 0)?;
        let file: PolicyFile = value.try_into().map_err(syntax)?;
        let reexports: ReexportsFile = toml::from_str(super::REEXPORTS).map_err(syntax)?;
        let judged: JudgedFile = toml::from_str(super::JUDGED).map_err(syntax)?;
        Policy::compile(file, reexports, judged)
    }

    /// This policy for a proxied network: the `[modules] proxied` HTTP clients are
    /// allowed, since the OS walls leave the proxy as their only way out.
    pub fn allow_proxied_modules(&mut self) {
        for module in &self.proxied_modules {
            self.blocked_modules.remove(module);
            self.module_hints.remove(module);
            // `urllib.request` reached as `urllib.request` is the module itself.
            let target = format!("module {module}");
            for entry in self.reexports.values_mut() {
                entry.targets.retain(|t| *t != target);
            }
        }
        self.reexports.retain(|_, entry| !entry.targets.is_empty());
    }

    fn compile(
        file: PolicyFile,
        reexports: ReexportsFile,
        judged: JudgedFile,
    ) -> Result<Policy, GuardError> {
        check_header(&file)?;
        let l = &file.limits;
        let dangerous = dangerous_map("attributes.dangerous.names", &file.attributes.dangerous)?;
        let dangerous_keywords = dangerous_map(
            "attributes.dangerous_keywords.names",
            &file.attributes.dangerous_keywords,
        )?;
        let alias_prefixes = alias_prefixes(&file.paths.alias_prefixes)?;
        // Every string regex: the tripwires' here, the patterns' after them.
        let (tripwires, mut regexes) = compile_tripwires(file.tripwires)?;
        let capabilities = compile_capabilities(&file.capabilities)?;
        let modes = compile_modes(&file.modes)?;
        let config = compile_config(&file.config_keys)?;
        let mut reexports = compile_reexports(reexports);
        for name in name_set(
            "attributes.reexports_by_receiver_only",
            &file.attributes.reexports_by_receiver_only,
        )? {
            if let Some(r) = reexports.get_mut(&name) {
                r.distinctive = false;
            }
        }
        let judged_modules = judged_set(&file.modules.judged, judged)?;
        let (patterns, pattern_regexes) = compile_patterns(&file.patterns)?;
        // One set for both, tripwires first: nearly every literal matches
        // neither, and one pass over it answers that for both.
        regexes.extend(pattern_regexes);
        let string_set = tripwire_builder(&regexes)
            .build()
            .map_err(|e| invalid("tripwires and patterns", e.to_string()))?;
        let getter_names = last_parts(name_set(
            "reflection.attribute_getters",
            &file.reflection.attribute_getters,
        )?);
        Ok(Policy {
            metaclasses: name_set("reflection.metaclasses", &file.reflection.metaclasses)?,
            patterns,
            blocked_parts: name_set("modules.blocked_parts", &file.modules.blocked_parts)?,
            capabilities,
            modes,
            config_keys: config.keys,
            config_leaves: config.leaves,
            config_groups: config.groups,
            config_objects: config.objects,
            reexports,
            limits: Limits {
                max_source_bytes: l.max_source_bytes,
                max_nesting_depth: l.max_nesting_depth,
                max_expression_chain: l.max_expression_chain,
                max_findings: l.max_findings,
            },
            actions: file.actions,
            blocked_modules: blocked_modules(&file.modules)?,
            allow_only: name_set("modules.allow_only", &file.modules.allow_only)?,
            importable: importable(&file.modules.importable)?,
            proxied_modules: name_set("modules.proxied", &file.modules.proxied)?,
            module_hints: file.modules.hints,
            star_import_allowed: name_set(
                "modules.star_import_allowed",
                &file.modules.star_import_allowed,
            )?,
            judged_modules,
            unjudged: file.modules.unjudged,
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
            getter_names,
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
            string_set,
        })
    }

    /// The action configured for a rule (tripwires carry their own).
    pub fn action(&self, rule: &str) -> Action {
        self.actions.get(rule).copied().unwrap_or_default()
    }

    /// Whether `module` (dotted) or any package above it is blocked: the entry
    /// that blocks it, or, outside a policy's `allow_only`, its top-level name.
    pub fn module_blocked<'a>(&'a self, module: &'a str) -> Option<&'a str> {
        if let Some(part) = module.split('.').find(|p| self.blocked_parts.contains(*p)) {
            return self.blocked_parts.get(part).map(String::as_str);
        }
        if let Some(hit) = dotted_prefixes(module).find_map(|p| self.blocked_modules.get(p)) {
            return Some(hit.as_str());
        }
        if !self.allow_only.is_empty()
            && !dotted_prefixes(module).any(|p| self.allow_only.contains(p))
        {
            return module.split('.').next();
        }
        None
    }

    /// The names `[modules] importable` lets `from module import ...` bind.
    pub fn importable_from(&self, module: &str) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .importable
            .iter()
            .filter_map(|q| q.strip_prefix(module)?.strip_prefix('.'))
            .filter(|n| !n.contains('.'))
            .collect();
        names.sort_unstable();
        names
    }

    /// Whether the top-level module `top` was judged (see [`Policy::judged_modules`]).
    pub fn module_judged(&self, top: &str) -> bool {
        self.judged_modules.contains(top)
    }

    /// Whether a dunder name may be read.
    pub fn dunder_allowed(&self, name: &str) -> bool {
        self.allowed_dunders.contains(name)
    }
}

fn check_rule(field: &str, rule: &str) -> Result<(), GuardError> {
    if RULES.contains(&rule) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("unknown rule `{rule}`; known rules: {}", RULES.join(", ")),
        ))
    }
}

fn qualified_names(field: &str, names: &[String]) -> Result<Vec<String>, GuardError> {
    names
        .iter()
        .map(|n| {
            let n = nfkc(n.trim()).into_owned();
            if n.is_empty() || n.split('.').any(str::is_empty) {
                Err(invalid(field, format!("`{n}` is not a dotted name")))
            } else {
                Ok(n)
            }
        })
        .collect()
}

fn compile_capabilities(files: &[CapabilityFile]) -> Result<ByName<Capability>, GuardError> {
    let mut out = ByName::default();
    for c in files {
        check_rule("capabilities.rule", &c.rule)?;
        let needs_argument = !matches!(
            c.literal,
            Literal::Never | Literal::KeywordNames | Literal::Call
        );
        if needs_argument && c.position.is_none() && c.keyword.is_none() {
            return Err(invalid(
                "capabilities",
                format!(
                    "`{}`: a capability checked by its literal argument needs `position` or `keyword`",
                    c.functions.join(", ")
                ),
            ));
        }
        if (c.literal == Literal::OneOf) == c.values.is_empty() {
            return Err(invalid(
                "capabilities",
                format!(
                    "`{}`: `values` goes with `literal = \"one_of\"`, and only with it",
                    c.functions.join(", ")
                ),
            ));
        }
        for name in qualified_names("capabilities.functions", &c.functions)? {
            let entry = Capability {
                name: name.clone(),
                rule: c.rule.clone(),
                category: c.category.clone(),
                reason: c.reason.clone(),
                literal: c.literal,
                position: c.position,
                keyword: c.keyword.clone(),
                values: c.values.clone(),
            };
            out.add(&name, c.by_name, entry);
        }
    }
    Ok(out)
}

fn compile_modes(files: &[ModeFile]) -> Result<ByName<Mode>, GuardError> {
    let mut out = ByName::default();
    for m in files {
        check_rule("modes.rule", &m.rule)?;
        let safe = name_set("modes.safe", &m.safe)?;
        for name in qualified_names("modes.functions", &m.functions)? {
            let entry = Mode {
                name: name.clone(),
                rule: m.rule.clone(),
                category: m.category.clone(),
                reason: m.reason.clone(),
                keyword: m.keyword.clone(),
                position: m.position,
                safe: safe.clone(),
            };
            out.add(&name, m.by_name, entry);
        }
    }
    Ok(out)
}

struct CompiledConfig {
    keys: HashMap<String, usize>,
    leaves: HashMap<String, usize>,
    groups: Vec<ConfigKeys>,
    objects: HashSet<String>,
}

fn compile_config(files: &[ConfigKeysFile]) -> Result<CompiledConfig, GuardError> {
    let mut out = CompiledConfig {
        keys: HashMap::default(),
        leaves: HashMap::default(),
        groups: Vec::new(),
        objects: HashSet::default(),
    };
    for (i, g) in files.iter().enumerate() {
        check_rule("config_keys.rule", &g.rule)?;
        for key in name_set("config_keys.keys", &g.keys)? {
            if let Some(leaf) = key.rsplit('.').next() {
                out.leaves.insert(leaf.to_string(), i);
            }
            out.keys.insert(key, i);
        }
        out.objects
            .extend(name_set("config_keys.objects", &g.objects)?);
        out.groups.push(ConfigKeys {
            rule: g.rule.clone(),
            category: g.category.clone(),
            reason: g.reason.clone(),
        });
    }
    Ok(out)
}

/// The policy patterns' findings and their regexes, each checked on its own.
fn compile_patterns(files: &[PatternFile]) -> Result<(Vec<ConfigKeys>, Vec<String>), GuardError> {
    let mut out = Vec::new();
    let mut sources = Vec::new();
    for p in files {
        check_rule("patterns.rule", &p.rule)?;
        tripwire_builder(std::slice::from_ref(&p.pattern))
            .build()
            .map_err(|e| invalid("patterns.pattern", e.to_string()))?;
        sources.push(p.pattern.clone());
        out.push(ConfigKeys {
            rule: p.rule.clone(),
            category: p.category.clone(),
            reason: p.reason.clone(),
        });
    }
    Ok((out, sources))
}

/// `a`, `a.b`, `a.b.c` for `a.b.c`.
fn dotted_prefixes(module: &str) -> impl Iterator<Item = &str> {
    module
        .match_indices('.')
        .map(|(i, _)| &module[..i])
        .chain(std::iter::once(module))
}

/// `[modules] blocked` without the entries `[modules] unblocked` takes out; an
/// unblocked name that is not blocked is a mistake worth saying.
fn blocked_modules(modules: &ModulesFile) -> Result<HashSet<String>, GuardError> {
    let mut blocked = name_set("modules.blocked", &modules.blocked)?;
    for name in name_set("modules.unblocked", &modules.unblocked)? {
        if !blocked.remove(&name) {
            return Err(invalid(
                "modules.unblocked",
                format!(
                    "`{name}` is not in [modules] blocked; name an entry exactly as it is listed"
                ),
            ));
        }
    }
    Ok(blocked)
}

/// `[modules] importable`: dotted `module.name`s.
fn importable(given: &[String]) -> Result<HashSet<String>, GuardError> {
    let set = name_set("modules.importable", given)?;
    match set.iter().find(|n| !n.contains('.')) {
        Some(bare) => Err(invalid(
            "modules.importable",
            format!("`{bare}` names no module; write `module.name`, as in `os.getcwd`"),
        )),
        None => Ok(set),
    }
}

/// The document with the tier it `extends` merged under it (recursively, at
/// most [`MAX_EXTENDS`] deep).
fn with_base(value: toml::Value, depth: usize) -> Result<toml::Value, GuardError> {
    let Some(name) = value.get("extends").and_then(toml::Value::as_str) else {
        return Ok(value);
    };
    let tier = super::tier::Tier::from_name(name).ok_or_else(|| {
        invalid(
            "extends",
            format!(
                "`{name}` is not a policy this build knows; use one of {}",
                super::tier::Tier::names()
            ),
        )
    })?;
    if depth >= MAX_EXTENDS {
        return Err(invalid(
            "extends",
            format!("more than {MAX_EXTENDS} policies deep"),
        ));
    }
    let base: toml::Value = toml::from_str(tier.text()).map_err(|e| GuardError::PolicySyntax {
        reason: e.to_string(),
    })?;
    let mut base = with_base(base, depth + 1)?;
    merge(&mut base, value);
    Ok(base)
}

/// How many policies an `extends` chain may stack.
const MAX_EXTENDS: usize = 4;

/// The judged top-level modules: the generated set and the policy's own,
/// which must be top-level names (`[modules] judged = ["mylib"]`).
fn judged_set(own: &[String], generated: JudgedFile) -> Result<HashSet<String>, GuardError> {
    let field = "modules.judged";
    let mut set = name_set(field, own)?;
    if let Some(dotted) = set.iter().find(|n| n.contains('.')) {
        return Err(invalid(
            field,
            format!("`{dotted}` is not a top-level module; name the package it belongs to"),
        ));
    }
    set.extend(name_set(field, &generated.stdlib)?);
    set.extend(name_set(field, &generated.audited)?);
    Ok(set)
}

fn compile_reexports(file: ReexportsFile) -> HashMap<String, Reexport> {
    file.reexport
        .into_iter()
        .map(|r| {
            let entry = Reexport {
                distinctive: r.distinctive,
                targets: r.targets,
                modules: r.modules.into_iter().collect(),
            };
            (nfkc(&r.name).into_owned(), entry)
        })
        .collect()
}

/// Adds `overlay` to `base`: arrays are appended, tables merged, other
/// values replaced.
fn merge(base: &mut toml::Value, overlay: toml::Value) {
    match (base, overlay) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (toml::Value::Array(b), toml::Value::Array(o)) => b.extend(o),
        (b, o) => *b = o,
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
