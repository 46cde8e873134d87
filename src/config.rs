//! Settings: the one registry of every setting warden reads ([`REGISTRY`]: name, default,
//! meaning), and their parsing. `warden serve --help`, the book's settings chapter
//! (docs/settings.md) and the `warden://settings` resource are all generated from the
//! registry, so a setting cannot exist in one of them and not in the others (unit tests
//! hold the chapter, the README's short table and the parser to it).
//!
//! A value comes from, strongest first: `--set NAME=VALUE` on the command line, the
//! environment, the `[settings]` table of the config file, the registry's default.
//! Parsing is pure ([`Settings::from_layers`]) so every rule is unit-tested without
//! touching the process environment; an invalid value is a start-up error that names the
//! setting and where its value came from, never a silent default.
//!
//! Adding a setting: one [`Spec`] row in its group of [`REGISTRY`] (a backend's group lives
//! in the backend's folder), one field in [`Settings`] or the group's struct, one line
//! reading it through the [`Reader`] (which takes the default from the row), and
//! docs/settings.md's table regenerated with `warden settings --markdown`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::backend::BackendKind;

/// Hard ceiling for any per-call wall-clock limit, whatever the configuration says.
pub const TIMEOUT_CAP_S: u64 = 120;

/// One setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Spec {
    /// Its one name: environment variable, config-file key and `--set` name.
    pub name: &'static str,
    pub default: DefaultValue,
    /// What it does, in a sentence or two (Markdown: `code` only).
    pub doc: &'static str,
    /// Whether the config file's `[settings]` table may set it (not the settings that
    /// locate the config file or must be known before it is read).
    pub in_config_file: bool,
}

/// A setting's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DefaultValue {
    /// A literal value, parsed by the same rules as a configured one.
    Value(&'static str),
    /// Worked out at start-up; the text says how.
    Computed(&'static str),
}

pub(crate) const fn spec(name: &'static str, default: &'static str, doc: &'static str) -> Spec {
    Spec {
        name,
        default: DefaultValue::Value(default),
        doc,
        in_config_file: true,
    }
}

pub(crate) const fn computed(name: &'static str, how: &'static str, doc: &'static str) -> Spec {
    Spec {
        name,
        default: DefaultValue::Computed(how),
        doc,
        in_config_file: true,
    }
}

/// Every setting warden reads, in the order the settings chapter and `--help` show them:
/// the server's own, each backend's group, then serving. A backend's group lives in its
/// folder ([`crate::backend::docker_settings`]); adding one is one line in `GROUPS`.
pub const REGISTRY: &[Spec] = &FLAT;

const GROUPS: &[&[Spec]] = &[
    GENERAL,
    crate::caps::SPECS,
    crate::backend::docker_settings::SPECS,
    SERVING,
];
const FLAT: [Spec; total(GROUPS)] = concat(GROUPS);

/// How many settings `groups` hold together.
const fn total(groups: &[&[Spec]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < groups.len() {
        n += groups[i].len();
        i += 1;
    }
    n
}

/// `groups`, one after another, at compile time.
const fn concat<const N: usize>(groups: &[&[Spec]]) -> [Spec; N] {
    let mut out = [spec("", "", ""); N];
    let (mut k, mut i) = (0, 0);
    while i < groups.len() {
        let mut j = 0;
        while j < groups[i].len() {
            out[k] = groups[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

/// The server's own settings: backend, walls, limits, guard, grants, network.
const GENERAL: &[Spec] = &[
    spec(
        "EXECUTION_BACKEND",
        "host",
        "`host`: a sandboxed worker process per session on this machine. `docker`: a \
         hardened container per session (see `SANDBOX_IMAGE`); when no engine or image is \
         reachable, the host backend runs instead with a warning in every result, or \
         nothing runs under `HOST_SANDBOX=require`.",
    ),
    spec(
        "HOST_SANDBOX",
        "best-effort",
        "`best-effort`: install every wall the kernel supports, report missing ones in \
         `warnings`. `require`: refuse to run code unless every wall stands, naming the \
         missing one. `off`: no sandbox at all (development only); every result says so.",
    ),
    spec(
        "HOST_SANDBOX_NETWORK",
        "deny",
        "`deny`: no sockets at all. `proxy`: the worker keeps a network namespace of its \
         own whose only endpoint is warden's HTTP(S) egress proxy (`HTTP_PROXY` and \
         `HTTPS_PROXY` are set); the proxy lets through the hosts `SANDBOX_EGRESS_ALLOW` \
         names, and never a loopback, private, link-local or metadata address that DNS \
         returned. `allow`: the same proxy letting through every public host (LLM API \
         hosts excepted unless named): the unsafe mode, since whatever the code reads it \
         can send anywhere. Neither reaches this machine's loopback. Docker containers \
         get the same proxy (a root server makes its endpoint in the container's \
         namespace).",
    ),
    spec(
        "SANDBOX_EGRESS_ALLOW",
        "",
        "hosts the egress proxy lets through (`proxy` network), comma-separated: `host`, \
         `*.suffix` (subdomains only) or `*`, each optionally `:port`; without a port only \
         80 and 443. LLM API hosts (policies/llm-hosts.toml) pass only when named exactly.",
    ),
    spec(
        "SANDBOX_EGRESS_DENY",
        "",
        "hosts the egress proxy refuses, in the syntax of `SANDBOX_EGRESS_ALLOW`; the deny \
         list wins.",
    ),
    spec(
        "SANDBOX_EGRESS_RESOLVE",
        "",
        "names the egress proxy resolves to a fixed address, comma-separated `name=addr` \
         (like curl's `--resolve`): an internal mirror, a test's origin. The operator chose \
         these addresses, so the private-address rule does not judge them; an address DNS \
         returned always is.",
    ),
    spec(
        "SANDBOX_EGRESS_PROBE_URL",
        "",
        "a URL the allow list names, which `selftest` fetches through the egress proxy to \
         show it works (`net.proxy_allowed`); without one that probe is inconclusive.",
    ),
    spec(
        "SANDBOX_EGRESS_LIMIT",
        "1g",
        "bytes one session may move through the egress proxy, both ways together \
         (`512m`, `4g`, bytes); the connection that passes it is cut.",
    ),
    spec(
        "SANDBOX_PACKAGES",
        "allow",
        "`install_packages`: `allow` installs what the agent asks for; `ask` asks the user \
         first (through the MCP client), naming every requirement; `deny` refuses the tool.",
    ),
    spec(
        "SANDBOX_PACKAGE_INDEX",
        "https://pypi.org/simple",
        "the PEP 503 index `install_packages` reads (PyPI's by default, or a mirror). The \
         installer's proxy reaches this host only (and, for PyPI, files.pythonhosted.org). \
         An `https://` index is verified against the system's CAs (or `SANDBOX_PACKAGE_CA`); \
         an `http://` one is used as named. A mirror at a private address needs its name \
         pinned in `SANDBOX_EGRESS_RESOLVE`.",
    ),
    spec(
        "SANDBOX_PACKAGE_CA",
        "",
        "a PEM file of the CA certificates an `https://` package index is verified against, \
         instead of the system's (a mirror with a private CA).",
    ),
    spec(
        "SANDBOX_WHEELHOUSE",
        "",
        "a directory of wheels: `install_packages` installs from it alone, with no network \
         at all (air-gapped machines).",
    ),
    spec(
        "SANDBOX_PACKAGE_LIMIT",
        "1g",
        "what one session's installed packages may take, and what one install may download \
         (`512m`, `4g`, bytes); an install over it changes nothing.",
    ),
    spec(
        "SANDBOX_PACKAGE_TIMEOUT",
        "300",
        "seconds one `install_packages` call may take (downloads included); one that takes \
         longer is stopped and changes nothing.",
    ),
    spec(
        "SANDBOX_JUDGE",
        "off",
        "`advisory`: before an irreversible action (a write grant, a new host, a package \
         install, closing a session and deleting its files) warden asks the client's own \
         model, through MCP sampling, for a verdict: `proceed`, `escalate` or `block`. \
         `block` refuses without asking the user; the others are shown to the user in the \
         question. Advice only: a judge that fails or is slow (2 s) is skipped, and the \
         result says so. Clients without sampling get no judge. `off`: never asked.",
    ),
    spec(
        "SANDBOX_TASK_AFTER_MS",
        "1000",
        "for a client that declares MCP Tasks (`io.modelcontextprotocol/tasks`): a call of \
         `execute_python`, `install_packages` or `request_grant` still running after this \
         many milliseconds answers with a task, which the client polls (`tasks/get`) or \
         cancels. A consent prompt inside such a call makes it a task at once. Other \
         clients are unchanged.",
    ),
    spec(
        "SANDBOX_TASK_TIMEOUT_S",
        "3600",
        "seconds a call that became a task may run (instead of `SANDBOX_TIMEOUT_S`, whose \
         cap of 120 s does not apply); a task past it is stopped, its code killed.",
    ),
    spec(
        "SANDBOX_TASK_TTL_S",
        "600",
        "seconds a task is kept: its `ttlMs` is `SANDBOX_TASK_TIMEOUT_S` plus this, and a \
         finished task's result stays readable at least this long.",
    ),
    spec(
        "SANDBOX_MAX_TASKS",
        "64",
        "tasks one client may have running or waiting for input at once; a call that \
         would start another is refused (`TooManyTasks`).",
    ),
    spec(
        "SANDBOX_MEM_LIMIT",
        "2g",
        "address-space limit per worker (`512m`, `4g`, bytes; at least `64m`).",
    ),
    spec(
        "SANDBOX_PIDS_LIMIT",
        "256",
        "processes + threads per worker (at least 8): RLIMIT_NPROC, which the kernel (Linux \
         5.14+) counts in the worker's own user namespace, so it caps each worker alone \
         for a desktop user's server too; as root also on the session's own uid. `selftest` \
         says which holds.",
    ),
    spec(
        "SANDBOX_FILE_SIZE_LIMIT",
        "256m",
        "largest file the code can write (at least `1m`).",
    ),
    spec(
        "SANDBOX_DISK_LIMIT",
        "1g",
        "what one session may store in its workspace (at least `1m`): a tmpfs of this \
         size per session, enforced as the code writes (ENOSPC inside Python), never the \
         real disk; each worker's private `/tmp` holds a quarter of it more (at least \
         16 MiB). It is RAM (and swap), used only as far as the code really writes; \
         `SANDBOX_MAX_SESSIONS` caps the sessions and `SANDBOX_DISK_TOTAL` what their \
         quotas add up to.",
    ),
    computed(
        "SANDBOX_DISK_TOTAL",
        "half of physical memory (12 GiB on a 24 GiB machine)",
        "what the quotas of every open session's workspace and `/tmp` may add up to \
         (`8g`, `512m`; at least `1m`), warm workers' included: they are RAM and swap \
         that no process owns, held while a session is open even after its worker \
         stopped. A new session whose `SANDBOX_DISK_LIMIT` does not fit gets a smaller \
         quota, said in its every result (at least 16 MiB; that much is held back for \
         the sessions `SANDBOX_MAX_SESSIONS` still allows and the warm workers, up to \
         half of this), or is refused as `DiskTotalReached` when not even that fits.",
    ),
    spec(
        "SANDBOX_TIMEOUT_S",
        "10",
        "default wall clock per call, in seconds; hard cap 120.",
    ),
    spec(
        "SANDBOX_OUTPUT_LIMIT",
        "64k",
        "per stream (stdout, stderr, result); beyond it the text is cut and \
         `truncated: true` (at least `1k`).",
    ),
    computed(
        "SANDBOX_MAX_WORKERS",
        "¾ of physical memory divided by the smaller of `SANDBOX_MEM_LIMIT` and `256m`, \
         from 2 to 1024 (72 on a 24 GiB machine)",
        "live workers at once (warm ones included). A session is a name, a workspace and a \
         record; only its worker counts. At the cap the least recently used idle worker is \
         stopped (its session keeps its files and reports `worker_restarted: true` next \
         time); a call is refused as `WorkersBusy` (retryable) only when every worker is in \
         a call (1 to 4096).",
    ),
    spec(
        "SANDBOX_WARM_WORKERS",
        "2",
        "workers kept started ahead, frozen inside their walls with an empty workspace; a \
         new session's first call gets one instead of waiting for a start, and the pool \
         refills in the background (0 to 64; never more than `SANDBOX_MAX_WORKERS`). With \
         the Docker backend `SANDBOX_POOL_SIZE`, when set, sizes the same pool.",
    ),
    spec(
        "SANDBOX_MAX_SESSIONS",
        "64",
        "live sessions at once, every client's together (1 to 4096). A call that would \
         open one more is refused as `TooManySessions`, naming this setting, and starts \
         nothing; close a session (`reset_session`) or let idle ones expire.",
    ),
    spec(
        "SANDBOX_SESSION_IDLE_S",
        "3600",
        "a session unused this many seconds expires: its worker is stopped, its workspace \
         removed (see `SANDBOX_KEEP_WORKSPACES`) and its name is free again. `0`: never.",
    ),
    spec(
        "SANDBOX_KEEP_WORKSPACES",
        "false",
        "`true`: the workspaces of expired sessions, and of every session at shutdown, are \
         moved to `<SANDBOX_DATA_DIR>/kept/<instance>/` instead of deleted (`reset_session` \
         still deletes).",
    ),
    spec(
        "SANDBOX_TRANSACTIONS",
        "off",
        "which `execute_python` calls are transactional (a call that raises, times out, is \
         cancelled, trips a wire, passes a cap or loses its worker leaves the workspace as \
         it was before it): `off`, only those that ask (`transactional: true`); \
         `on-failure`, every call unless it asks not to (`transactional: false`); \
         `always`, every call.",
    ),
    spec(
        "SANDBOX_MAX_CHECKPOINTS",
        "8",
        "named checkpoints (`checkpoint`, `restore`, `list_checkpoints`) one session may \
         keep at once (0 to 1024; `0`: the tools are off). Their bytes count against the \
         session's disk quota; they go with the session.",
    ),
    computed(
        "SANDBOX_DATA_DIR",
        "per-user data dir (`~/.local/share/warden`); `/var/lib/warden` as root",
        "where session workspaces (under `sessions/<instance>/`) and the audit log live. \
         As root it must be traversable by other users.",
    ),
    computed(
        "SANDBOX_PYTHON",
        "`python3` on `PATH`, resolved to a real ELF binary",
        "the interpreter (a venv's python brings its packages). Shims (pyenv) are resolved \
         by asking the interpreter itself. As root, an interpreter the sandbox uid cannot \
         reach (e.g. under `/root`) falls back to `/usr/bin/python3` with a warning.",
    ),
    spec(
        "CODEGUARD",
        "enforce",
        "the static guard: `enforce` (a blocked call runs nothing), `shadow` (runs the \
         code, reports what would have been blocked in `warnings` and `guard`), `off` \
         (every result says the guard is off).",
    ),
    spec(
        "SANDBOX_POLICY",
        "default",
        "the guard's policy: a tier compiled in (`strict`: no third-party package and a \
         smaller standard library; `default`; `data-science`: the default plus what \
         analysis code needs and the default refuses for convenience, not safety; see \
         `policies/`), or the path of a policy file (TOML, which may start with \
         `extends = \"default\"`). A file named like a tier is given as `./strict`.",
    ),
];

/// The settings after the backends' groups: serving, probes, logging.
const SERVING: &[Spec] = &[
    spec(
        "SANDBOX_PROBE_ADDR",
        "192.0.2.1",
        "where selftest's connect probe aims (an IPv4 address; the default is RFC 5737 \
         TEST-NET-1).",
    ),
    spec(
        "SANDBOX_HTTP_ADDR",
        "127.0.0.1:8765",
        "where `serve --http` listens when no address is given: `IP:PORT` (every client \
         must send the bearer token, loopback included), or `unix:PATH`, a UNIX socket \
         (mode 0600, in a directory no one else can write) that serves only processes of \
         the server's own uid, checked on every connection (`SO_PEERCRED`).",
    ),
    computed(
        "SANDBOX_HTTP_TOKEN",
        "the `http-token` file in the data directory (generated at the first TCP start, \
         printed once, saved mode 0600)",
        "the bearer token HTTP clients must send (`Authorization: Bearer <token>`), on \
         loopback too; requests without it get `401`. On a UNIX socket the peer's uid is \
         the credential, and a token is required only when this is set. One token is one \
         client scope. Never shown in `warden://settings`.",
    ),
    computed(
        "SANDBOX_HTTP_CLIENTS",
        "none",
        "a TOML file of more HTTP clients, each `[[client]]` with a `name`, the SHA-256 \
         of its own bearer token (`token_sha256`, 64 hex digits) and optionally its own \
         guard `policy` (a tier or a file, as `SANDBOX_POLICY`). Each listed token is let \
         in besides the server's own; its client's code is checked with its policy.",
    ),
    computed(
        "SANDBOX_HTTP_ALLOWED_HOSTS",
        "`localhost`, `127.0.0.1`, `::1` and the bound address",
        "more `Host` header values `serve --http` accepts, comma-separated (the names or \
         addresses clients use to reach a non-loopback address); others are refused \
         (DNS-rebinding protection).",
    ),
    computed(
        "SANDBOX_HTTP_ALLOWED_ORIGINS",
        "`http(s)://localhost:*`, `127.0.0.1:*`, `[::1]:*`",
        "more browser `Origin` values accepted, comma-separated, with scheme and port \
         (`https://app.example:443`; `:*` for any port); requests from other origins \
         are refused.",
    ),
    Spec {
        in_config_file: false,
        ..computed(
            "WARDEN_CONFIG",
            "`~/.config/warden/config.toml` (the per-user config dir)",
            "the config file: `[settings]` (any setting here but this one and \
             `WARDEN_LOG`) and pre-approved `[[grants]]`. Named explicitly, it must exist.",
        )
    },
    Spec {
        in_config_file: false,
        ..spec(
            "WARDEN_LOG",
            "warn",
            "log filter (tracing `EnvFilter` syntax, e.g. `info`, `warden=debug`); logs \
             go to stderr.",
        )
    },
];

/// The registry row of `name`.
pub fn lookup_spec(name: &str) -> Option<&'static Spec> {
    REGISTRY.iter().find(|s| s.name == name)
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Default,
    ConfigFile,
    Environment,
    Flag,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Default => "the default",
            Origin::ConfigFile => "the config file",
            Origin::Environment => "the environment",
            Origin::Flag => "--set on the command line",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{name}={value:?} (from {origin}) is not valid: {expected}")]
    Invalid {
        name: &'static str,
        value: String,
        origin: Origin,
        expected: &'static str,
    },
    #[error(
        "EXECUTION_BACKEND={0}: this build has no {0} backend (it is built with the \
         `{0}` Cargo feature, on by default); unset EXECUTION_BACKEND or set it to \
         \"host\""
    )]
    BackendNotBuilt(&'static str),
    #[error("{given} names no setting; known settings: {known}")]
    Unknown { given: String, known: String },
    #[error("{name} cannot be set in the config file's [settings] (set it in the environment)")]
    NotInFile { name: String },
    #[error("{name}: {reason}")]
    Egress { name: &'static str, reason: String },
    #[error("--set expects NAME=VALUE, got {0:?}")]
    BadFlag(String),
    #[error("WARDEN_CONFIG={path} (from {origin}): {problem}")]
    ConfigFile {
        path: PathBuf,
        origin: Origin,
        problem: String,
    },
}

/// `HOST_SANDBOX`: how strictly the host sandbox's walls are required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No sandbox at all: development only, reported loudly in every result.
    Off,
    /// Apply every wall the kernel supports; report the ones that are missing.
    BestEffort,
    /// Refuse to run code unless every wall is in force.
    Require,
}

impl SandboxMode {
    /// `HOST_SANDBOX`'s word for the mode.
    pub fn word(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::BestEffort => "best-effort",
            SandboxMode::Require => "require",
        }
    }
}

/// Where `serve --http` listens (`SANDBOX_HTTP_ADDR`, `--http ADDR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpBind {
    /// A TCP address: every client sends the bearer token.
    Tcp(std::net::SocketAddr),
    /// A UNIX socket's path: the peer's uid is the credential.
    Unix(PathBuf),
}

impl HttpBind {
    /// `IP:PORT`, or `unix:PATH`. Pure.
    pub fn parse(text: &str) -> Result<HttpBind, String> {
        let text = text.trim();
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path, such as unix:/run/user/1000/warden.sock".into());
            }
            return Ok(HttpBind::Unix(PathBuf::from(path)));
        }
        text.parse()
            .map(HttpBind::Tcp)
            .map_err(|_| format!("{text:?} is neither IP:PORT (127.0.0.1:8765) nor unix:PATH"))
    }
}

impl std::fmt::Display for HttpBind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpBind::Tcp(addr) => write!(f, "{addr}"),
            HttpBind::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl Serialize for HttpBind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `HOST_SANDBOX_NETWORK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    Deny,
    /// Every public host through the egress proxy.
    Allow,
    /// The hosts `SANDBOX_EGRESS_ALLOW` names, through the egress proxy.
    Proxy,
}

impl NetworkMode {
    /// Whether the worker reaches out through the egress proxy.
    pub fn proxied(self) -> bool {
        self != NetworkMode::Deny
    }
}

/// The egress proxy's settings.
#[derive(Debug, Clone, Serialize)]
pub struct EgressSettings {
    pub rules: crate::egress::rules::EgressRules,
    /// `SANDBOX_EGRESS_LIMIT`: bytes per session, both ways.
    pub limit_bytes: u64,
    /// `SANDBOX_EGRESS_PROBE_URL`: what selftest fetches to show the proxy works.
    pub probe_url: Option<String>,
}

/// Reads `SANDBOX_EGRESS_*`; `allow` adds `*` to the allow list.
fn egress_settings(
    r: &mut Reader<'_>,
    network: NetworkMode,
) -> Result<EgressSettings, ConfigError> {
    let text = |t: &str| Some(t.to_string());
    let mut allow = r.value("SANDBOX_EGRESS_ALLOW", "host patterns", text)?;
    let deny = r.value("SANDBOX_EGRESS_DENY", "host patterns", text)?;
    let resolve = r.value("SANDBOX_EGRESS_RESOLVE", "name=addr pairs", text)?;
    let probe_url = r.value(
        "SANDBOX_EGRESS_PROBE_URL",
        "an http:// or https:// URL",
        |t| match t {
            "" => Some(None),
            url if url.starts_with("http://") || url.starts_with("https://") => {
                Some(Some(url.to_string()))
            }
            _ => None,
        },
    )?;
    let limit_bytes = r.value("SANDBOX_EGRESS_LIMIT", SIZE_1K, size_at_least(1 << 10))?;
    if network == NetworkMode::Allow {
        allow = if allow.trim().is_empty() {
            "*".to_string()
        } else {
            format!("*,{allow}")
        };
    }
    use crate::egress::rules::EgressRules;
    let egress = |name, e: crate::egress::rules::RuleError| ConfigError::Egress {
        name,
        reason: e.to_string(),
    };
    let llm = EgressRules::builtin_llm_hosts().map_err(|e| egress("policies/llm-hosts.toml", e))?;
    let rules = EgressRules::parse(&allow, &deny, &resolve, &llm)
        .map_err(|e| egress("SANDBOX_EGRESS_ALLOW, _DENY or _RESOLVE", e))?;
    Ok(EgressSettings {
        rules,
        limit_bytes,
        probe_url,
    })
}

/// When and for how long a call runs as an MCP Task.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TaskSettings {
    /// `SANDBOX_TASK_AFTER_MS`.
    pub after_ms: u64,
    /// `SANDBOX_TASK_TIMEOUT_S`.
    pub timeout_s: u64,
    /// `SANDBOX_TASK_TTL_S`.
    pub ttl_s: u64,
    /// `SANDBOX_MAX_TASKS`.
    pub max_tasks: usize,
}

/// Reads `SANDBOX_TASK_*` and `SANDBOX_MAX_TASKS`, in registry order.
fn task_settings(r: &mut Reader<'_>) -> Result<TaskSettings, ConfigError> {
    let whole =
        |lo: u64, hi: u64| move |t: &str| t.parse::<u64>().ok().filter(|n| (lo..=hi).contains(n));
    let after_ms = r.value(
        "SANDBOX_TASK_AFTER_MS",
        "whole milliseconds from 0 to 600000",
        whole(0, 600_000),
    )?;
    let timeout_s = r.value(
        "SANDBOX_TASK_TIMEOUT_S",
        "whole seconds from 1 to 86400",
        whole(1, 86_400),
    )?;
    let ttl_s = r.value(
        "SANDBOX_TASK_TTL_S",
        "whole seconds from 1 to 86400",
        whole(1, 86_400),
    )?;
    let max_tasks = r.value("SANDBOX_MAX_TASKS", "a whole number from 1 to 4096", |t| {
        t.parse::<usize>().ok().filter(|n| (1..=4096).contains(n))
    })?;
    Ok(TaskSettings {
        after_ms,
        timeout_s,
        ttl_s,
        max_tasks,
    })
}

/// `SANDBOX_PACKAGES`: whether `install_packages` runs, and whether the user is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackagesMode {
    Allow,
    Ask,
    Deny,
}

/// What `install_packages` installs from, and within what.
#[derive(Debug, Clone, Serialize)]
pub struct PackageSettings {
    pub mode: PackagesMode,
    /// `SANDBOX_PACKAGE_INDEX`, parsed.
    pub index: crate::packages::IndexUrl,
    /// `SANDBOX_PACKAGE_CA`.
    pub ca: Option<PathBuf>,
    /// `SANDBOX_WHEELHOUSE`: wheels only from here, no network.
    pub wheelhouse: Option<PathBuf>,
    /// `SANDBOX_PACKAGE_LIMIT`.
    pub limit_bytes: u64,
    /// `SANDBOX_PACKAGE_TIMEOUT`, seconds.
    pub timeout_s: u64,
}

/// Reads `SANDBOX_PACKAGE*` and `SANDBOX_WHEELHOUSE`, in registry order.
fn package_settings(r: &mut Reader<'_>) -> Result<PackageSettings, ConfigError> {
    let mode = r.choice(
        "SANDBOX_PACKAGES",
        "allow, ask or deny",
        &[
            ("allow", PackagesMode::Allow),
            ("ask", PackagesMode::Ask),
            ("deny", PackagesMode::Deny),
        ],
    )?;
    let index = r.value(
        "SANDBOX_PACKAGE_INDEX",
        "an http:// or https:// URL of a PEP 503 index, without user or password",
        |t| crate::packages::IndexUrl::parse(t).ok(),
    )?;
    let absolute = |t: &str| match t {
        "" => Some(None),
        t if Path::new(t).is_absolute() => Some(Some(PathBuf::from(t))),
        _ => None,
    };
    let ca = r.value(
        "SANDBOX_PACKAGE_CA",
        "an absolute path to a PEM file",
        absolute,
    )?;
    let wheelhouse = r.value(
        "SANDBOX_WHEELHOUSE",
        "an absolute path to a directory",
        absolute,
    )?;
    let limit_bytes = r.value("SANDBOX_PACKAGE_LIMIT", SIZE_1K, size_at_least(1 << 10))?;
    let timeout_s = r.value(
        "SANDBOX_PACKAGE_TIMEOUT",
        "whole seconds from 1 to 3600",
        |t| t.parse::<u64>().ok().filter(|s| (1..=3600).contains(s)),
    )?;
    Ok(PackageSettings {
        mode,
        index,
        ca,
        wheelhouse,
        limit_bytes,
        timeout_s,
    })
}

/// `CODEGUARD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuardMode {
    Enforce,
    Shadow,
    Off,
}

/// One setting as it resolved: for `warden://settings`, `warden settings` and errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub name: &'static str,
    /// The text given, or the literal default; `None` for a computed default.
    pub value: Option<String>,
    pub origin: Origin,
}

/// `SANDBOX_TRANSACTIONS`: which calls are transactional when they do not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transactions {
    /// Only calls that ask (`transactional: true`).
    Off,
    /// Every call unless it asks not to (`transactional: false`).
    OnFailure,
    /// Every call, whatever it asks.
    Always,
}

impl Transactions {
    /// Whether a call that asked `asked` is transactional, and the warning when what it
    /// asked was overruled. Pure.
    pub fn decide(self, asked: Option<bool>) -> (bool, Option<&'static str>) {
        match (self, asked) {
            (Transactions::Always, Some(false)) => (
                true,
                Some(
                    "SANDBOX_TRANSACTIONS=always: this call is transactional although it asked not to be",
                ),
            ),
            (Transactions::Always, _) => (true, None),
            (_, Some(asked)) => (asked, None),
            (Transactions::OnFailure, None) => (true, None),
            (Transactions::Off, None) => (false, None),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub backend: BackendKind,
    pub docker: crate::backend::docker_settings::DockerSettings,
    pub host_sandbox: SandboxMode,
    pub network: NetworkMode,
    /// `SANDBOX_EGRESS_*`: what the egress proxy lets through.
    pub egress: EgressSettings,
    /// `SANDBOX_PACKAGE*`, `SANDBOX_WHEELHOUSE`: what `install_packages` may do.
    pub packages: PackageSettings,
    /// `SANDBOX_TASK_*`, `SANDBOX_MAX_TASKS`: long calls as MCP Tasks.
    pub tasks: TaskSettings,
    /// `SANDBOX_JUDGE`: whether the client's model is asked before irreversible actions.
    pub judge: crate::judge::JudgeMode,
    /// `SANDBOX_MAX_*` and `SANDBOX_CLIENT_MAX_*`: what a session and a client may spend.
    pub caps: crate::caps::CapSettings,
    pub mem_limit_bytes: u64,
    pub pids_limit: u64,
    pub file_size_limit_bytes: u64,
    /// `SANDBOX_DISK_LIMIT`: one session's workspace (its /tmp is a quarter more).
    pub disk_limit_bytes: u64,
    /// `SANDBOX_DISK_TOTAL`: every open session's workspace and /tmp quotas together.
    pub disk_total_bytes: u64,
    pub timeout_s: u64,
    pub output_limit_bytes: usize,
    /// `SANDBOX_MAX_WORKERS`: live workers at once, warm ones included.
    pub max_workers: usize,
    /// `SANDBOX_WARM_WORKERS`: workers started ahead (at most `max_workers`).
    pub warm_workers: usize,
    /// `SANDBOX_MAX_SESSIONS`: live sessions at once.
    pub max_sessions: usize,
    /// `SANDBOX_SESSION_IDLE_S`: idle seconds before a session expires; 0 = never.
    pub session_idle_s: u64,
    /// `SANDBOX_KEEP_WORKSPACES`: move expired sessions' workspaces aside instead of
    /// deleting them.
    pub keep_workspaces: bool,
    /// `SANDBOX_TRANSACTIONS`: which calls are transactional by default.
    pub transactions: Transactions,
    /// `SANDBOX_MAX_CHECKPOINTS`: checkpoints one session keeps; 0 = the tools are off.
    pub max_checkpoints: usize,
    /// `None`: the platform default (see [`default_data_dir`]).
    pub data_dir: Option<PathBuf>,
    /// `None`: python3 on PATH, resolved to a real ELF binary.
    pub python: Option<PathBuf>,
    /// `SANDBOX_POLICY`: a tier or a policy file.
    pub policy: crate::guard::PolicyChoice,
    pub codeguard: GuardMode,
    /// Where the selftest's connect probe aims (RFC 5737 TEST-NET-1 by default).
    pub probe_addr: String,
    /// The config file, when one was named or the default one exists.
    pub config_file: Option<PathBuf>,
    /// `WARDEN_LOG`.
    pub log_filter: String,
    /// `SANDBOX_HTTP_ADDR`: `serve --http`'s default address.
    pub http_addr: HttpBind,
    /// `SANDBOX_HTTP_TOKEN` (a secret: never serialised).
    #[serde(skip)]
    pub http_token: Option<String>,
    pub http_allowed_hosts: Vec<String>,
    pub http_allowed_origins: Vec<String>,
    /// `SANDBOX_HTTP_CLIENTS`: the file of more HTTP clients, if any.
    pub http_clients: Option<PathBuf>,
    /// Every registry setting in registry order, with where its value came from.
    #[serde(skip)]
    pub resolved: Vec<Resolved>,
}

/// The sources a value can come from, weakest last.
#[derive(Debug, Default, Clone)]
pub struct Layers {
    /// `--set NAME=VALUE`.
    pub flags: BTreeMap<String, String>,
    /// The environment's values of registry names (and nothing else).
    pub env: BTreeMap<String, String>,
    /// The config file's `[settings]`.
    pub file: BTreeMap<String, String>,
    /// This machine's physical memory, for computed defaults; `None`: read
    /// `/proc/meminfo` (tests pass a value).
    pub memory_bytes: Option<u64>,
}

impl Layers {
    /// The strongest non-blank value of `name`, and where it came from.
    fn get(&self, name: &str) -> Option<(String, Origin)> {
        let pick = |map: &BTreeMap<String, String>, origin: Origin| {
            map.get(name)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (v.clone(), origin))
        };
        pick(&self.flags, Origin::Flag)
            .or_else(|| pick(&self.env, Origin::Environment))
            .or_else(|| pick(&self.file, Origin::ConfigFile))
    }
}

/// Reads settings through the layers, taking defaults from the registry and recording
/// where each value came from.
pub(crate) struct Reader<'a> {
    layers: &'a Layers,
    resolved: Vec<Resolved>,
}

impl Reader<'_> {
    /// The given text of `name` (or its literal default) parsed by `parse`.
    pub(crate) fn value<T>(
        &mut self,
        name: &'static str,
        expected: &'static str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<T, ConfigError> {
        match self.optional(name, expected, parse)? {
            Some(v) => Ok(v),
            // A computed default read through `value` is a registry mistake.
            None => Err(ConfigError::Invalid {
                name,
                value: String::new(),
                origin: Origin::Default,
                expected: "a literal default in the settings registry",
            }),
        }
    }

    /// Like [`Reader::value`], `None` when unset and the default is computed.
    pub(crate) fn optional<T>(
        &mut self,
        name: &'static str,
        expected: &'static str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        let spec = lookup_spec(name).ok_or_else(|| ConfigError::Unknown {
            given: name.to_string(),
            known: known_names(),
        })?;
        let (text, origin) = match (self.layers.get(name), spec.default) {
            (Some((text, origin)), _) => (text, origin),
            (None, DefaultValue::Value(v)) => (v.to_string(), Origin::Default),
            (None, DefaultValue::Computed(_)) => {
                self.resolved.push(Resolved {
                    name,
                    value: None,
                    origin: Origin::Default,
                });
                return Ok(None);
            }
        };
        let parsed = parse(text.trim()).ok_or_else(|| ConfigError::Invalid {
            name,
            value: text.clone(),
            origin: origin.clone(),
            expected,
        })?;
        self.resolved.push(Resolved {
            name,
            value: Some(text),
            origin,
        });
        Ok(Some(parsed))
    }

    /// A choice among fixed words.
    pub(crate) fn choice<T: Copy>(
        &mut self,
        name: &'static str,
        expected: &'static str,
        words: &[(&str, T)],
    ) -> Result<T, ConfigError> {
        self.value(name, expected, |t| {
            words.iter().find(|(w, _)| *w == t).map(|(_, v)| *v)
        })
    }
}

impl Settings {
    /// Reads every setting through `lookup` as if it were the environment (tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        let env = REGISTRY
            .iter()
            .filter_map(|s| lookup(s.name).map(|v| (s.name.to_string(), v)))
            .collect();
        Settings::from_layers(&Layers {
            env,
            ..Layers::default()
        })
    }

    /// Reads every setting of the registry through the layers. Pure.
    pub fn from_layers(layers: &Layers) -> Result<Settings, ConfigError> {
        let mut r = Reader {
            layers,
            resolved: Vec::new(),
        };
        let (backend, host_sandbox, network) = kinds(&mut r)?;
        let egress = egress_settings(&mut r, network)?;
        let packages = package_settings(&mut r)?;
        let judge = r.choice(
            "SANDBOX_JUDGE",
            "off or advisory",
            &[
                ("off", crate::judge::JudgeMode::Off),
                ("advisory", crate::judge::JudgeMode::Advisory),
            ],
        )?;
        let tasks = task_settings(&mut r)?;
        let limits = resource_limits(&mut r, layers)?;
        let max_sessions = r.value(
            "SANDBOX_MAX_SESSIONS",
            "a whole number from 1 to 4096",
            |t| t.parse::<usize>().ok().filter(|n| (1..=4096).contains(n)),
        )?;
        let session_idle_s = r.value(
            "SANDBOX_SESSION_IDLE_S",
            "whole seconds (0: never expire)",
            |t| t.parse::<u64>().ok(),
        )?;
        let keep_workspaces = r.value("SANDBOX_KEEP_WORKSPACES", "true or false", |t| match t {
            "true" | "1" | "yes" => Some(true),
            "false" | "0" | "no" => Some(false),
            _ => None,
        })?;
        let transactions = r.choice(
            "SANDBOX_TRANSACTIONS",
            "off, on-failure or always",
            &[
                ("off", Transactions::Off),
                ("on-failure", Transactions::OnFailure),
                ("always", Transactions::Always),
            ],
        )?;
        let max_checkpoints = r.value(
            "SANDBOX_MAX_CHECKPOINTS",
            "a whole number from 0 to 1024 (0: checkpoints off)",
            |t| t.parse::<usize>().ok().filter(|n| *n <= 1024),
        )?;
        let data_dir = r.optional("SANDBOX_DATA_DIR", "a directory path", path)?;
        let python = r.optional("SANDBOX_PYTHON", "a path to a Python 3 interpreter", path)?;
        let codeguard = r.choice(
            "CODEGUARD",
            "enforce, shadow or off",
            &[
                ("enforce", GuardMode::Enforce),
                ("shadow", GuardMode::Shadow),
                ("off", GuardMode::Off),
            ],
        )?;
        let policy = r.value(
            "SANDBOX_POLICY",
            "strict, default, data-science or a path to a policy file",
            crate::guard::PolicyChoice::parse,
        )?;
        let caps = crate::caps::read(&mut r)?;
        let docker = crate::backend::docker_settings::read(&mut r)?;
        let probe_addr = r.value("SANDBOX_PROBE_ADDR", "an IPv4 address", |t| {
            t.parse::<std::net::Ipv4Addr>().ok().map(|a| a.to_string())
        })?;
        let (http_addr, http_token, http_clients, http_allowed_hosts, http_allowed_origins) =
            http_settings(&mut r)?;
        let config_file = r.optional("WARDEN_CONFIG", "a path to a TOML file", path)?;
        let log_filter = r.value("WARDEN_LOG", "a log filter such as warn or info", |t| {
            Some(t.to_string())
        })?;

        Ok(Settings {
            backend,
            docker,
            host_sandbox,
            network,
            egress,
            packages,
            tasks,
            judge,
            caps,
            mem_limit_bytes: limits.mem_limit_bytes,
            pids_limit: limits.pids_limit,
            file_size_limit_bytes: limits.file_size_limit_bytes,
            disk_limit_bytes: limits.disk_limit_bytes,
            disk_total_bytes: limits.disk_total_bytes,
            timeout_s: limits.timeout_s,
            output_limit_bytes: limits.output_limit_bytes,
            max_workers: limits.max_workers,
            warm_workers: limits.warm_workers.min(limits.max_workers),
            max_sessions,
            session_idle_s,
            keep_workspaces,
            transactions,
            max_checkpoints,
            data_dir,
            python,
            policy,
            codeguard,
            probe_addr,
            config_file,
            log_filter,
            http_addr,
            http_token,
            http_clients,
            http_allowed_hosts,
            http_allowed_origins,
            resolved: hide_secrets(r.resolved),
        })
    }

    /// The per-call wall clock: the caller's wish (already checked to be above 0), else
    /// the default, never above the cap.
    pub fn effective_timeout(&self, requested: Option<f64>) -> std::time::Duration {
        let cap = TIMEOUT_CAP_S as f64;
        let seconds = match requested {
            Some(s) if s.is_finite() && s > 0.0 => s.min(cap),
            _ => self.timeout_s.clamp(1, TIMEOUT_CAP_S) as f64,
        };
        std::time::Duration::from_secs_f64(seconds)
    }

    /// How many workers the warm pool keeps started ahead when `kind` is the backend
    /// that runs code: `SANDBOX_POOL_SIZE` for containers when it is set, else
    /// `SANDBOX_WARM_WORKERS`; never more than `SANDBOX_MAX_WORKERS`.
    pub fn warm_target(&self, kind: BackendKind) -> usize {
        let wanted = match (kind, self.docker.pool_size) {
            (BackendKind::Docker, Some(n)) => n,
            _ => self.warm_workers,
        };
        wanted.min(self.max_workers)
    }

    /// `NAME=value (from origin)`, for error messages about a configured value.
    pub fn describe(&self, name: &str) -> String {
        match self.resolved.iter().find(|r| r.name == name) {
            Some(Resolved {
                value: Some(v),
                origin,
                ..
            }) => format!("{name}={v} (from {origin})"),
            _ => format!("{name} (unset, default)"),
        }
    }

    /// Every setting with its value, origin, default and meaning, in registry order.
    pub fn document(&self) -> Vec<serde_json::Value> {
        REGISTRY
            .iter()
            .map(|spec| {
                let r = self.resolved.iter().find(|r| r.name == spec.name);
                serde_json::json!({
                    "name": spec.name,
                    "value": r.and_then(|r| r.value.clone()),
                    "origin": r.map(|r| r.origin.clone()).unwrap_or(Origin::Default),
                    "default": spec.default,
                    "doc": spec.doc,
                })
            })
            .collect()
    }
}

/// What one worker is assumed to hold on average when sizing `SANDBOX_MAX_WORKERS`: a
/// data-analysis worker with numpy, pandas and matplotlib loaded is about 100 MiB
/// resident, far below its address-space limit.
const TYPICAL_WORKER_BYTES: u64 = 256 << 20;

/// `SANDBOX_MAX_WORKERS`'s default: ¾ of `memory` (4 GiB when unknown) over the smaller of
/// the per-worker limit and [`TYPICAL_WORKER_BYTES`], from 2 to 1024. Pure.
pub fn default_max_workers(memory: Option<u64>, mem_limit_bytes: u64) -> usize {
    let memory = memory.unwrap_or(4 << 30);
    let per_worker = mem_limit_bytes.clamp(1, TYPICAL_WORKER_BYTES);
    usize::try_from(memory / 4 * 3 / per_worker)
        .unwrap_or(usize::MAX)
        .clamp(2, 1024)
}

/// `SANDBOX_DISK_TOTAL`'s default: half of `memory` (4 GiB when unknown), the kernel's own
/// default size for one tmpfs. Pure.
pub fn default_disk_total(memory: Option<u64>) -> u64 {
    memory.unwrap_or(4 << 30) / 2
}

/// MemTotal from `/proc/meminfo`, in bytes.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

const SIZE_64M: &str = "a size such as 512m, 2g or 65536 (bytes), at least 64m";
pub(crate) const SIZE_1M: &str = "a size such as 512m, 2g or 65536 (bytes), at least 1m";
const SIZE_1K: &str = "a size such as 64k, 1m or 65536 (bytes), at least 1k";

pub(crate) fn size_at_least(minimum: u64) -> impl Fn(&str) -> Option<u64> {
    move |t| parse_size(t).filter(|n| *n >= minimum)
}

/// Settings whose values are secrets: shown as set or unset, never as text.
pub const SECRET_SETTINGS: &[&str] = &["SANDBOX_HTTP_TOKEN"];

fn hide_secrets(mut resolved: Vec<Resolved>) -> Vec<Resolved> {
    for r in &mut resolved {
        if SECRET_SETTINGS.contains(&r.name) && r.value.is_some() {
            r.value = Some("<set; hidden>".to_string());
        }
    }
    resolved
}

/// Which backend runs code, how strictly its walls are required, and the network mode.
fn kinds(r: &mut Reader<'_>) -> Result<(BackendKind, SandboxMode, NetworkMode), ConfigError> {
    let backend = r.value("EXECUTION_BACKEND", "host or docker", |t| {
        BackendKind::from_word(t).map(|(kind, built)| {
            built
                .then_some(kind)
                .ok_or(ConfigError::BackendNotBuilt(kind.as_str()))
        })
    })??;
    let host_sandbox = r.choice(
        "HOST_SANDBOX",
        "off, best-effort or require",
        &[
            ("best-effort", SandboxMode::BestEffort),
            ("require", SandboxMode::Require),
            ("off", SandboxMode::Off),
        ],
    )?;
    let network = r.choice(
        "HOST_SANDBOX_NETWORK",
        "deny, proxy or allow",
        &[
            ("deny", NetworkMode::Deny),
            ("proxy", NetworkMode::Proxy),
            ("allow", NetworkMode::Allow),
        ],
    )?;
    Ok((backend, host_sandbox, network))
}

/// What one worker and one session may use, and how many workers there are.
struct ResourceLimits {
    mem_limit_bytes: u64,
    pids_limit: u64,
    file_size_limit_bytes: u64,
    disk_limit_bytes: u64,
    disk_total_bytes: u64,
    timeout_s: u64,
    output_limit_bytes: usize,
    max_workers: usize,
    warm_workers: usize,
}

fn resource_limits(r: &mut Reader<'_>, layers: &Layers) -> Result<ResourceLimits, ConfigError> {
    let mem_limit_bytes = r.value("SANDBOX_MEM_LIMIT", SIZE_64M, size_at_least(64 << 20))?;
    let pids_limit = r.value("SANDBOX_PIDS_LIMIT", "a whole number from 8", |t| {
        t.parse::<u64>()
            .ok()
            .filter(|n| (8..=1_000_000).contains(n))
    })?;
    let file_size_limit_bytes =
        r.value("SANDBOX_FILE_SIZE_LIMIT", SIZE_1M, size_at_least(1 << 20))?;
    let disk_limit_bytes = r.value("SANDBOX_DISK_LIMIT", SIZE_1M, size_at_least(1 << 20))?;
    let disk_total_bytes = r
        .optional("SANDBOX_DISK_TOTAL", SIZE_1M, size_at_least(1 << 20))?
        .unwrap_or_else(|| default_disk_total(layers.memory_bytes.or_else(physical_memory)));
    let timeout_s = r.value("SANDBOX_TIMEOUT_S", "whole seconds, at least 1", |t| {
        t.parse::<u64>()
            .ok()
            .filter(|n| *n >= 1)
            .map(|n| n.min(TIMEOUT_CAP_S))
    })?;
    let output_limit_bytes = r.value("SANDBOX_OUTPUT_LIMIT", SIZE_1K, |t| {
        size_at_least(1 << 10)(t).and_then(|n| usize::try_from(n).ok())
    })?;
    let max_workers = r
        .optional(
            "SANDBOX_MAX_WORKERS",
            "a whole number from 1 to 4096",
            |t| t.parse::<usize>().ok().filter(|n| (1..=4096).contains(n)),
        )?
        .unwrap_or_else(|| {
            default_max_workers(
                layers.memory_bytes.or_else(physical_memory),
                mem_limit_bytes,
            )
        });
    let warm_workers = r.value("SANDBOX_WARM_WORKERS", "a whole number from 0 to 64", |t| {
        t.parse::<usize>().ok().filter(|n| *n <= 64)
    })?;
    Ok(ResourceLimits {
        mem_limit_bytes,
        pids_limit,
        file_size_limit_bytes,
        disk_limit_bytes,
        disk_total_bytes,
        timeout_s,
        output_limit_bytes,
        max_workers,
        warm_workers,
    })
}

/// `serve --http`'s settings: address, token, listed clients, hosts and origins.
type HttpSettings = (
    HttpBind,
    Option<String>,
    Option<PathBuf>,
    Vec<String>,
    Vec<String>,
);

fn http_settings(r: &mut Reader<'_>) -> Result<HttpSettings, ConfigError> {
    let http_addr = r.value(
        "SANDBOX_HTTP_ADDR",
        "an IP:PORT address or unix:PATH",
        |t| HttpBind::parse(t).ok(),
    )?;
    let http_token = r.optional("SANDBOX_HTTP_TOKEN", "at least 16 characters", |t| {
        valid_http_token(t).then(|| t.to_string())
    })?;
    let http_clients = r.optional("SANDBOX_HTTP_CLIENTS", "a path to a TOML file", path)?;
    let http_allowed_hosts = r
        .optional(
            "SANDBOX_HTTP_ALLOWED_HOSTS",
            "comma-separated host names",
            list,
        )?
        .unwrap_or_default();
    let http_allowed_origins = r
        .optional(
            "SANDBOX_HTTP_ALLOWED_ORIGINS",
            "comma-separated origins such as https://app.example:443",
            list,
        )?
        .unwrap_or_default();
    Ok((
        http_addr,
        http_token,
        http_clients,
        http_allowed_hosts,
        http_allowed_origins,
    ))
}

fn list(t: &str) -> Option<Vec<String>> {
    Some(
        t.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

pub(crate) fn path(t: &str) -> Option<PathBuf> {
    Some(PathBuf::from(t))
}

fn known_names() -> String {
    REGISTRY
        .iter()
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `123`, `64k`, `512m`, `2g` (also `KiB`/`MB`-style suffixes; all binary units).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(digits_end);
    let n: u64 = digits.parse().ok()?;
    let shift = match unit.trim() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// `--set NAME=VALUE` flags as a map; the name must be a registry setting.
pub fn parse_flags(flags: &[String]) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for flag in flags {
        let (name, value) = flag
            .split_once('=')
            .ok_or_else(|| ConfigError::BadFlag(flag.clone()))?;
        let name = name.trim();
        if lookup_spec(name).is_none() {
            return Err(ConfigError::Unknown {
                given: format!("--set {name}"),
                known: known_names(),
            });
        }
        out.insert(name.to_string(), value.to_string());
    }
    Ok(out)
}

/// The environment's values of registry names, and the names that look like warden
/// settings but are not in the registry (probably typos; the caller warns about them).
pub fn read_env(
    vars: impl Iterator<Item = (String, String)>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut known = BTreeMap::new();
    let mut unknown = Vec::new();
    for (name, value) in vars {
        if lookup_spec(&name).is_some() {
            known.insert(name, value);
        } else if looks_like_a_setting(&name) {
            unknown.push(name);
        }
    }
    (known, unknown)
}

fn looks_like_a_setting(name: &str) -> bool {
    let ours = [
        "SANDBOX_",
        "HOST_SANDBOX",
        "WARDEN_",
        "CODEGUARD",
        "EXECUTION_BACKEND",
    ];
    // The test suite's own variables (WARDEN_TEST_PYTHON, WARDEN_TEST_USER, and
    // WARDEN_REQUIRE_DOCKER and WARDEN_REQUIRE_PODMAN, which .ci/run sets) are not
    // server settings.
    ours.iter().any(|p| name.starts_with(p))
        && !name.starts_with("WARDEN_TEST_")
        && !name.starts_with("WARDEN_REQUIRE_")
}

/// warden's configuration directory (the config file and nothing a worker can write).
pub fn config_dir() -> Option<PathBuf> {
    directories::ProjectDirs::from("dev", "warden", "warden").map(|d| d.config_dir().to_path_buf())
}

/// The config file: `WARDEN_CONFIG` from the environment, else `config.toml` in
/// [`config_dir`]. (Prefer [`Settings::config_file`], which also honours `--set`.)
pub fn config_file_path() -> Option<PathBuf> {
    match std::env::var_os("WARDEN_CONFIG") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => config_dir().map(|d| d.join("config.toml")),
    }
}

/// One `[[grants]]` entry of the config file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigGrant {
    pub path: String,
    pub access: crate::grants::Access,
}

/// The config file's contents.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConfigFile {
    /// The file it was read from (`None`: no file).
    pub path: Option<PathBuf>,
    /// `[settings]`, values as text.
    pub settings: BTreeMap<String, String>,
    pub grants: Vec<ConfigGrant>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfigFile {
    #[serde(default)]
    settings: BTreeMap<String, toml::Value>,
    #[serde(default)]
    grants: Vec<ConfigGrant>,
}

/// Parses the config file's text. Pure. Every `[settings]` key must be a registry name
/// that may be set in a file; values may be strings, numbers or booleans.
pub fn parse_config_file(text: &str) -> Result<ConfigFile, String> {
    let raw: RawConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut settings = BTreeMap::new();
    for (name, value) in raw.settings {
        let spec = lookup_spec(&name).ok_or_else(|| {
            ConfigError::Unknown {
                given: format!("[settings] {name}"),
                known: known_names(),
            }
            .to_string()
        })?;
        if !spec.in_config_file {
            return Err(ConfigError::NotInFile { name }.to_string());
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Float(f) => f.to_string(),
            _ => {
                return Err(format!(
                    "[settings] {name}: give a string, number or boolean"
                ));
            }
        };
        settings.insert(name, text);
    }
    Ok(ConfigFile {
        path: None,
        settings,
        grants: raw.grants,
    })
}

/// Reads the config file at `path`; a missing file is an empty config unless it was named
/// explicitly (`origin` is not the default). Errors name `WARDEN_CONFIG`.
pub fn load_config_file(path: &Path, origin: Origin) -> Result<ConfigFile, ConfigError> {
    let fail = |problem: String| ConfigError::ConfigFile {
        path: path.to_path_buf(),
        origin: origin.clone(),
        problem,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && origin == Origin::Default => {
            return Ok(ConfigFile::default());
        }
        Err(e) => return Err(fail(format!("cannot read the config file: {e}"))),
    };
    let mut file = parse_config_file(&text)
        .map_err(|e| fail(format!("the config file is not valid: {}", e.trim_end())))?;
    file.path = Some(path.to_path_buf());
    Ok(file)
}

/// Settings as the command line starts them: `--set` flags, then the environment, then
/// the config file that those name (or the default one), then the registry's defaults.
/// Returns the settings, the config file, and names in the environment that look like
/// misspelt settings.
pub fn load(
    flags: &[String],
    env: impl Iterator<Item = (String, String)>,
) -> Result<(Settings, ConfigFile, Vec<String>), ConfigError> {
    let flags = parse_flags(flags)?;
    let (env, unknown) = read_env(env);
    let mut layers = Layers {
        flags,
        env,
        file: BTreeMap::new(),
        memory_bytes: None,
    };
    // Where the config file is: only flags and the environment may say.
    let located = Settings::from_layers(&layers)?;
    let (path, origin) = match located.config_file.clone() {
        Some(p) => (
            Some(p),
            located
                .resolved
                .iter()
                .find(|r| r.name == "WARDEN_CONFIG")
                .map(|r| r.origin.clone())
                .unwrap_or(Origin::Environment),
        ),
        None => (config_dir().map(|d| d.join("config.toml")), Origin::Default),
    };
    let file = match &path {
        Some(p) => load_config_file(p, origin)?,
        None => ConfigFile::default(),
    };
    layers.file = file.settings.clone();
    let mut settings = Settings::from_layers(&layers)?;
    settings.config_file = file.path.clone().or(settings.config_file);
    Ok((settings, file, unknown))
}

/// What a bearer token must be: at least 16 characters, no whitespace. Pure.
pub fn valid_http_token(text: &str) -> bool {
    text.len() >= 16 && !text.contains(char::is_whitespace)
}

/// Where workspaces and the audit log live when `SANDBOX_DATA_DIR` is unset.
///
/// As root the per-user data dir is under `/root`, which no unprivileged sandbox uid can
/// traverse, so root uses the system-service convention `/var/lib/warden` instead.
pub fn default_data_dir(running_as_root: bool) -> Option<PathBuf> {
    if running_as_root {
        return Some(PathBuf::from("/var/lib/warden"));
    }
    directories::ProjectDirs::from("dev", "warden", "warden").map(|d| d.data_dir().to_path_buf())
}

/// The registry as the settings chapter's Markdown table (docs/settings.md).
pub fn markdown_table() -> String {
    let mut out = String::from("| setting | default | meaning |\n|---|---|---|\n");
    for s in REGISTRY {
        let default = match s.default {
            DefaultValue::Value(v) => format!("`{v}`"),
            DefaultValue::Computed(how) => how.to_string(),
        };
        out.push_str(&format!("| `{}` | {default} | {} |\n", s.name, s.doc));
    }
    out
}

/// The registry as plain text for `--help`: each setting, its default, its meaning.
pub fn help_text() -> String {
    let mut out = String::from(
        "Settings (environment variables; also `--set NAME=VALUE`, or `NAME = \"value\"` \
         under [settings] in the config file; strongest first: --set, environment, config \
         file, default):\n",
    );
    for s in REGISTRY {
        let default = match s.default {
            DefaultValue::Value(v) => v.to_string(),
            DefaultValue::Computed(how) => how.replace('`', ""),
        };
        out.push_str(&format!("\n  {}  [default: {default}]\n", s.name));
        for line in wrap(&s.doc.replace('`', ""), 84) {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out
}

/// Greedy word wrap.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_are_decided_by_the_call_then_the_server() {
        use Transactions::*;
        assert_eq!(Off.decide(None), (false, None));
        assert_eq!(Off.decide(Some(true)), (true, None));
        assert_eq!(OnFailure.decide(None), (true, None));
        assert_eq!(OnFailure.decide(Some(false)), (false, None));
        assert_eq!(Always.decide(None), (true, None));
        let (on, said) = Always.decide(Some(false));
        assert!(on && said.is_some_and(|w| w.contains("SANDBOX_TRANSACTIONS=always")));
    }
    use std::collections::{BTreeSet, HashMap};

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_match_the_design_card() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.backend, BackendKind::Host);
        assert_eq!(s.host_sandbox, SandboxMode::BestEffort);
        assert_eq!(s.network, NetworkMode::Deny);
        assert_eq!(s.mem_limit_bytes, 2 << 30);
        assert_eq!(s.pids_limit, 256);
        assert_eq!(s.max_sessions, 64);
        let layers = Layers {
            memory_bytes: Some(24 << 30),
            ..Layers::default()
        };
        let s24 = Settings::from_layers(&layers).unwrap();
        assert_eq!(s24.disk_total_bytes, 12 << 30, "half of 24 GiB");
        assert_eq!(default_disk_total(None), 2 << 30);
        assert_eq!(
            settings(&[("SANDBOX_DISK_TOTAL", "200m")])
                .unwrap()
                .disk_total_bytes,
            200 << 20
        );
        assert!(settings(&[("SANDBOX_DISK_TOTAL", "1k")]).is_err());
        assert_eq!(s.timeout_s, 10);
        assert_eq!(s.output_limit_bytes, 64 << 10);
        assert_eq!(s.codeguard, GuardMode::Enforce);
        assert_eq!(s.log_filter, "warn");
    }

    /// Every registry row is read by the parser (none is documented but ignored), and
    /// the parser reads nothing that is not in the registry.
    #[test]
    fn the_parser_reads_exactly_the_registry() {
        let asked = std::cell::RefCell::new(BTreeSet::new());
        Settings::from_lookup(|name| {
            asked.borrow_mut().insert(name.to_string());
            None
        })
        .unwrap();
        let registry: BTreeSet<String> = REGISTRY.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(*asked.borrow(), registry);
        let s = settings(&[]).unwrap();
        let resolved: Vec<&str> = s.resolved.iter().map(|r| r.name).collect();
        let names: Vec<&str> = REGISTRY.iter().map(|s| s.name).collect();
        assert_eq!(resolved, names, "every setting resolves, in registry order");
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "no name twice");
    }

    #[test]
    fn literal_defaults_parse_as_given_values() {
        for spec in REGISTRY {
            if let DefaultValue::Value(v) = spec.default {
                settings(&[(spec.name, v)])
                    .unwrap_or_else(|e| panic!("{}'s default {v:?}: {e}", spec.name));
            }
        }
    }

    #[test]
    fn http_addresses_are_ip_port_or_a_unix_socket_path() {
        assert_eq!(
            HttpBind::parse(" 127.0.0.1:8765 "),
            Ok(HttpBind::Tcp("127.0.0.1:8765".parse().unwrap()))
        );
        assert_eq!(
            HttpBind::parse("unix:/run/user/1000/warden.sock"),
            Ok(HttpBind::Unix(PathBuf::from("/run/user/1000/warden.sock")))
        );
        for bad in ["unix:", "localhost:8765", "8765", ""] {
            assert!(HttpBind::parse(bad).is_err(), "{bad:?}");
        }
        let s = settings(&[("SANDBOX_HTTP_ADDR", "unix:/tmp/w.sock")]).unwrap();
        assert_eq!(s.http_addr.to_string(), "unix:/tmp/w.sock");
        assert_eq!(
            serde_json::to_value(&s).unwrap()["http_addr"],
            "unix:/tmp/w.sock"
        );
        assert!(settings(&[("SANDBOX_HTTP_ADDR", "nowhere")]).is_err());
        assert!(!valid_http_token("short"));
        assert!(!valid_http_token("sixteen chars ok"));
        assert!(valid_http_token("0123456789abcdef"));
    }

    /// The book's settings chapter is the registry's table (regenerate it with
    /// `warden settings --markdown`).
    #[test]
    fn the_settings_chapter_is_the_registry() {
        let chapter =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/settings.md"))
                .unwrap();
        let table = markdown_table();
        assert!(
            chapter.contains(&table),
            "docs/settings.md's table differs from the registry; replace it with:\n\n{table}"
        );
    }

    /// The README's short table names settings that exist, with their defaults.
    #[test]
    fn the_readmes_settings_exist_with_their_defaults() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let start = readme.find("| setting | default |").unwrap();
        let rows: Vec<&str> = readme[start..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert!(rows.len() >= 10, "{rows:?}");
        for row in rows {
            let cells: Vec<&str> = row.split(" | ").collect();
            let name = cells[0].trim_start_matches("| ").trim_matches('`');
            let spec = lookup_spec(name).unwrap_or_else(|| panic!("{name} is not a setting"));
            let shown = cells[1];
            let right = match spec.default {
                DefaultValue::Value("") => shown == "(empty)",
                DefaultValue::Value(v) => shown == format!("`{v}`"),
                DefaultValue::Computed(how) => how.starts_with(shown),
            };
            assert!(
                right,
                "{name}: README shows {shown}, the registry {:?}",
                spec.default
            );
        }
    }

    #[test]
    fn help_lists_every_setting_with_its_default() {
        let help = help_text();
        for spec in REGISTRY {
            assert!(help.contains(&format!("\n  {}  [default: ", spec.name)));
        }
        assert!(help.contains("SANDBOX_MEM_LIMIT  [default: 2g]"));
    }

    #[test]
    fn worker_cap_is_sized_from_memory_and_the_limit() {
        let gib = 1u64 << 30;
        assert_eq!(default_max_workers(Some(24 * gib), 2 * gib), 72);
        assert_eq!(default_max_workers(Some(24 * gib), 128 << 20), 144);
        assert_eq!(default_max_workers(Some(4 * gib), 2 * gib), 12);
        assert_eq!(
            default_max_workers(Some(256 << 20), 2 * gib),
            2,
            "at least 2"
        );
        assert_eq!(
            default_max_workers(Some(1 << 50), 64 << 20),
            1024,
            "at most 1024"
        );
        assert_eq!(default_max_workers(None, 2 * gib), 12, "4 GiB when unknown");
        let layers = Layers {
            memory_bytes: Some(24 * gib),
            ..Layers::default()
        };
        let s = Settings::from_layers(&layers).unwrap();
        assert_eq!(s.max_workers, 72);
        assert_eq!(s.warm_workers, 2);
        assert_eq!(s.session_idle_s, 3600);
        assert!(!s.keep_workspaces);
        let s = settings(&[
            ("SANDBOX_MAX_WORKERS", "4"),
            ("SANDBOX_WARM_WORKERS", "9"),
            ("SANDBOX_SESSION_IDLE_S", "0"),
            ("SANDBOX_KEEP_WORKSPACES", "true"),
        ])
        .unwrap();
        assert_eq!((s.max_workers, s.warm_workers), (4, 4), "warm ≤ max");
        assert_eq!(s.session_idle_s, 0);
        assert!(s.keep_workspaces);
        for (name, bad) in [
            ("SANDBOX_MAX_WORKERS", "0"),
            ("SANDBOX_MAX_WORKERS", "many"),
            ("SANDBOX_WARM_WORKERS", "65"),
            ("SANDBOX_SESSION_IDLE_S", "-1"),
            ("SANDBOX_KEEP_WORKSPACES", "maybe"),
        ] {
            let err = settings(&[(name, bad)]).unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn task_and_judge_settings_are_read_and_bad_values_named() {
        let s = settings(&[]).unwrap();
        let t = s.tasks;
        assert_eq!(
            (t.after_ms, t.timeout_s, t.ttl_s, t.max_tasks),
            (1000, 3600, 600, 64)
        );
        assert_eq!(s.judge, crate::judge::JudgeMode::Off);
        let s = settings(&[("SANDBOX_JUDGE", "advisory"), ("SANDBOX_MAX_TASKS", "2")]).unwrap();
        assert_eq!(
            (s.judge, s.tasks.max_tasks),
            (crate::judge::JudgeMode::Advisory, 2)
        );
        for (name, bad) in [
            ("SANDBOX_MAX_TASKS", "0"),
            ("SANDBOX_MAX_TASKS", "1.5"),
            ("SANDBOX_TASK_TIMEOUT_S", "-1"),
            ("SANDBOX_TASK_TIMEOUT_S", "1180591620717411303424"),
            ("SANDBOX_TASK_AFTER_MS", "600001"),
            ("SANDBOX_TASK_TTL_S", "0"),
            ("SANDBOX_JUDGE", "strict"),
        ] {
            let err = settings(&[(name, bad)]).unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn timeout_is_capped_at_120_seconds() {
        let s = settings(&[("SANDBOX_TIMEOUT_S", "999")]).unwrap();
        assert_eq!(s.timeout_s, 120);
        let secs = |d: std::time::Duration| d.as_secs_f64();
        assert_eq!(secs(s.effective_timeout(Some(5000.0))), 120.0);
        assert_eq!(secs(s.effective_timeout(Some(2.5))), 2.5);
        assert_eq!(secs(s.effective_timeout(None)), 120.0);
    }

    #[test]
    fn bad_values_name_the_setting_and_its_origin() {
        let err = settings(&[("HOST_SANDBOX", "maybe")]).unwrap_err();
        assert!(err.to_string().contains("HOST_SANDBOX"), "{err}");
        assert!(err.to_string().contains("the environment"), "{err}");
        for bad in ["0", "4097", "-1", "many"] {
            let err = settings(&[("SANDBOX_MAX_SESSIONS", bad)]).unwrap_err();
            assert!(err.to_string().contains("SANDBOX_MAX_SESSIONS"), "{err}");
        }
        assert_eq!(
            settings(&[("SANDBOX_MAX_SESSIONS", "1")])
                .unwrap()
                .max_sessions,
            1
        );
        let err = settings(&[("SANDBOX_MEM_LIMIT", "lots")]).unwrap_err();
        assert!(err.to_string().contains("SANDBOX_MEM_LIMIT"), "{err}");
        assert!(settings(&[("SANDBOX_MEM_LIMIT", "1k")]).is_err());
        let layers = Layers {
            file: [("SANDBOX_TIMEOUT_S".to_string(), "soon".to_string())].into(),
            ..Layers::default()
        };
        let err = Settings::from_layers(&layers).unwrap_err().to_string();
        assert!(
            err.contains("SANDBOX_TIMEOUT_S") && err.contains("config file"),
            "{err}"
        );
    }

    #[test]
    fn flags_beat_the_environment_which_beats_the_file() {
        let one = |v: &str| [("SANDBOX_TIMEOUT_S".to_string(), v.to_string())].into();
        let layers = Layers {
            flags: one("3"),
            env: one("4"),
            file: one("5"),
            memory_bytes: None,
        };
        assert_eq!(Settings::from_layers(&layers).unwrap().timeout_s, 3);
        let layers = Layers {
            flags: BTreeMap::new(),
            ..layers
        };
        let s = Settings::from_layers(&layers).unwrap();
        assert_eq!(s.timeout_s, 4);
        assert_eq!(
            s.describe("SANDBOX_TIMEOUT_S"),
            "SANDBOX_TIMEOUT_S=4 (from the environment)"
        );
        let layers = Layers {
            env: BTreeMap::new(),
            ..layers
        };
        let s = Settings::from_layers(&layers).unwrap();
        assert_eq!(s.timeout_s, 5);
        let doc = s.document();
        let row = doc
            .iter()
            .find(|d| d["name"] == "SANDBOX_TIMEOUT_S")
            .unwrap();
        assert_eq!(row["origin"], "config_file");
        assert_eq!(row["value"], "5");
        assert_eq!(row["default"], serde_json::json!({"value": "10"}));
    }

    #[test]
    fn flags_and_file_keys_must_name_settings() {
        assert!(parse_flags(&["SANDBOX_TIMEOUT_S=5".into()]).is_ok());
        let err = parse_flags(&["SANDBOX_TIMEOUT=5".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SANDBOX_TIMEOUT ") && err.contains("SANDBOX_TIMEOUT_S"),
            "{err}"
        );
        assert!(parse_flags(&["novalue".into()]).is_err());
        let err = parse_config_file("[settings]\nSANDBOX_TIMOUT_S = 5\n").unwrap_err();
        assert!(err.contains("SANDBOX_TIMOUT_S"), "{err}");
        let err = parse_config_file("[settings]\nWARDEN_CONFIG = \"/x\"\n").unwrap_err();
        assert!(err.contains("WARDEN_CONFIG"), "{err}");
        let file =
            parse_config_file("[settings]\nSANDBOX_TIMEOUT_S = 30\nCODEGUARD = \"shadow\"\n")
                .unwrap();
        assert_eq!(file.settings["SANDBOX_TIMEOUT_S"], "30");
        assert_eq!(file.settings["CODEGUARD"], "shadow");
    }

    #[test]
    fn misspelt_environment_settings_are_noticed() {
        let vars = [
            ("SANDBOX_TIMEOUT", "5"),
            ("SANDBOX_TIMEOUT_S", "5"),
            ("WARDEN_TEST_USER", "x"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let (known, unknown) = read_env(vars.into_iter());
        assert_eq!(known.len(), 1);
        assert_eq!(unknown, vec!["SANDBOX_TIMEOUT".to_string()]);
    }

    #[test]
    fn a_bad_config_file_names_warden_config() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.toml");
        let err = load_config_file(&missing, Origin::Environment)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("WARDEN_CONFIG="), "{err}");
        assert!(
            load_config_file(&missing, Origin::Default)
                .unwrap()
                .path
                .is_none()
        );
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "x=").unwrap();
        let err = load_config_file(&bad, Origin::Default)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("WARDEN_CONFIG=") && err.contains("not valid"),
            "{err}"
        );
    }

    #[test]
    fn config_file_lists_pre_approved_grants() {
        let grants = parse_config_file(
            "[[grants]]\npath = \"/data/in\"\naccess = \"read\"\n[[grants]]\npath = \"/data/out\"\naccess = \"write\"\n",
        )
        .unwrap()
        .grants;
        assert_eq!(grants.len(), 2);
        assert_eq!(grants[1].access, crate::grants::Access::Write);
        assert!(parse_config_file("[[grants]]\npath = \"/x\"\naccess = \"all\"\n").is_err());
        assert!(parse_config_file("grantz = 1\n").is_err());
        assert!(parse_config_file("").unwrap().grants.is_empty());
    }

    #[test]
    fn probe_address_must_be_ipv4() {
        assert_eq!(settings(&[]).unwrap().probe_addr, "192.0.2.1");
        assert_eq!(
            settings(&[("SANDBOX_PROBE_ADDR", "127.0.0.2")])
                .unwrap()
                .probe_addr,
            "127.0.0.2"
        );
        assert!(settings(&[("SANDBOX_PROBE_ADDR", "example.com")]).is_err());
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("64KiB"), Some(64 << 10));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999g"), None);
    }
}
