//! macOS: the worker's Seatbelt confinement as data. Pure builders, compiled and
//! unit-tested on every platform (macOS itself cannot run in this project's CI); the
//! glue that applies them on a Mac is [`crate::sandbox::macos_helper`].
//!
//! - [`profile`]: a deny-default SBPL profile. Its text is fixed apart from how many
//!   paths of each kind there are: every path arrives as a parameter (`(param "WRITE_0")`,
//!   passed with `sandbox-exec -D WRITE_0=…`), so no path is ever spliced into the
//!   policy and a path with quotes or parentheses cannot add a rule.
//! - [`sandbox_exec_argv`]: the command line, with `/usr/bin/sandbox-exec` by absolute
//!   path.
//! - [`resolve_view`]: the view with every path resolved (Seatbelt matches the real path:
//!   `/tmp/x` is `/private/tmp/x` to it).
//! - [`walls`]: what the helper reports as standing once the profile is in force.
//!
//! The base policy is a deny-default profile in the tradition of Chromium's renderer
//! profile (which Codex's Seatbelt policy also starts from), narrowed to what CPython
//! needs: the system libraries and dyld's shared cache (read, and mapped executable), a
//! short list of hardware and kernel sysctls, time zone data, `/dev/null` and the random
//! devices, and nothing about other processes, users, Mach services or the network.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::NetworkMode;
use crate::sandbox::linux::world::FsView;
use crate::worker::WORKER_SOURCE;
use crate::worker::report::WallStatus;

/// The one `sandbox-exec` warden runs: never looked up on `PATH`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// What every CPython needs on macOS, the same on every machine: no path in it depends
/// on the user, the session or the interpreter.
const BASE: &str = r#"(version 1)
(deny default)
; This process only: no other process may be inspected or signalled, and none created.
(allow process-info* (target self))
(allow signal (target self))
; What libSystem, libmalloc, dyld and CPython's os/platform modules ask the kernel.
(allow sysctl-read
  (sysctl-name "hw.activecpu")
  (sysctl-name "hw.byteorder")
  (sysctl-name "hw.cachelinesize")
  (sysctl-name "hw.cpufamily")
  (sysctl-name "hw.cputype")
  (sysctl-name "hw.logicalcpu")
  (sysctl-name "hw.logicalcpu_max")
  (sysctl-name "hw.machine")
  (sysctl-name "hw.memsize")
  (sysctl-name "hw.ncpu")
  (sysctl-name "hw.nperflevels")
  (sysctl-name "hw.pagesize")
  (sysctl-name "hw.physicalcpu")
  (sysctl-name "hw.physicalcpu_max")
  (sysctl-name-prefix "hw.optional.")
  (sysctl-name-prefix "hw.perflevel")
  (sysctl-name "kern.argmax")
  (sysctl-name "kern.maxfilesperproc")
  (sysctl-name "kern.osproductversion")
  (sysctl-name "kern.osrelease")
  (sysctl-name "kern.ostype")
  (sysctl-name "kern.osvariant_status")
  (sysctl-name "kern.osversion")
  (sysctl-name "kern.secure_kernel")
  (sysctl-name "kern.usrstack64")
  (sysctl-name "kern.version")
  (sysctl-name "sysctl.proc_cputype"))
; The system's libraries and dyld's shared cache (macOS 11-12 and 13+): read, and mapped
; executable. Nothing else may be mapped executable but the runtime below.
(allow file-read* file-map-executable
  (subpath "/usr/lib")
  (subpath "/System/Library/Frameworks")
  (subpath "/System/Library/PrivateFrameworks")
  (subpath "/System/Library/dyld")
  (subpath "/System/Cryptexes/OS")
  (subpath "/System/Volumes/Preboot/Cryptexes/OS")
  (subpath "/private/var/db/dyld")
  (subpath "/Library/Apple/usr/lib"))
; Time zones, and the devices a program expects.
(allow file-read*
  (literal "/private/etc/localtime")
  (subpath "/private/var/db/timezone")
  (subpath "/usr/share/zoneinfo")
  (literal "/dev/urandom")
  (literal "/dev/random"))
(allow file-read* file-write-data (literal "/dev/null"))
; Enough to resolve the system's own links (/tmp, /var, /etc) and the root.
(allow file-read-metadata
  (literal "/")
  (literal "/private")
  (literal "/tmp")
  (literal "/var")
  (literal "/etc")
  (literal "/dev"))
"#;

/// Rules when `HOST_SANDBOX_NETWORK=allow`: outbound IP and name resolution through
/// mDNSResponder; never inbound, and never this machine's own loopback (the later rule
/// wins), where local services and warden's own HTTP server listen.
const NETWORK_ALLOW: &str = r#"(allow network-outbound (remote ip))
(deny network-outbound (remote ip "localhost:*"))
(allow network-outbound (literal "/private/var/run/mDNSResponder"))
(allow mach-lookup (global-name "com.apple.dnssd.service"))
"#;

/// Rules when `HOST_SANDBOX_NETWORK=deny` (the default): stated, though deny-default already
/// denies it, so that the profile says so.
const NETWORK_DENY: &str = "(deny network*)\n";

/// One parameter: its name in the profile and the path `sandbox-exec -D` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub path: PathBuf,
}

/// A profile ready for `sandbox-exec`: the fixed text and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub text: String,
    pub params: Vec<Param>,
}

/// The kinds of path a profile grants, each with its rights.
#[derive(Clone, Copy)]
enum Grant {
    /// Programs that may be executed (the interpreter, by every name it has).
    Exec,
    /// The runtime: read, and mapped executable.
    Runtime,
    /// Read-only data (granted directories).
    ReadDir,
    /// Read-only single files.
    ReadFile,
    /// Read-write trees: the workspace, the temporary directory, write grants.
    WriteDir,
    /// Read-write single files.
    WriteFile,
    /// The parents of everything above: their metadata only, so that paths resolve.
    Ancestor,
}

impl Grant {
    fn prefix(self) -> &'static str {
        match self {
            Grant::Exec => "EXEC",
            Grant::Runtime => "RUNTIME",
            Grant::ReadDir => "READ_DIR",
            Grant::ReadFile => "READ_FILE",
            Grant::WriteDir => "WRITE_DIR",
            Grant::WriteFile => "WRITE_FILE",
            Grant::Ancestor => "ANCESTOR",
        }
    }

    fn rule(self) -> (&'static str, &'static str) {
        match self {
            Grant::Exec => ("process-exec file-read* file-map-executable", "literal"),
            Grant::Runtime => ("file-read* file-map-executable", "subpath"),
            Grant::ReadDir => ("file-read*", "subpath"),
            Grant::ReadFile => ("file-read*", "literal"),
            Grant::WriteDir => ("file-read* file-write*", "subpath"),
            Grant::WriteFile => ("file-read* file-write*", "literal"),
            Grant::Ancestor => ("file-read-metadata", "literal"),
        }
    }
}

/// Adds one rule for `paths` (nothing when there are none), each path a parameter.
fn add(text: &mut String, params: &mut Vec<Param>, grant: Grant, paths: &[PathBuf]) {
    if paths.is_empty() {
        return;
    }
    let (rights, filter) = grant.rule();
    text.push_str(&format!("(allow {rights}"));
    for (i, path) in paths.iter().enumerate() {
        let name = format!("{}_{i}", grant.prefix());
        text.push_str(&format!("\n  ({filter} (param \"{name}\"))"));
        params.push(Param {
            name,
            path: path.clone(),
        });
    }
    text.push_str(")\n");
}

/// Every proper ancestor of `paths`, once each, shortest first; `/` is in the base.
fn ancestors(paths: &[&PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        for a in path.ancestors().skip(1) {
            if a.parent().is_some() && !out.iter().any(|o| o == a) {
                out.push(a.to_path_buf());
            }
        }
    }
    out.sort_by_key(|p| p.components().count());
    out
}

fn dedup(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The profile for a worker that sees `view` (resolved: see [`resolve_view`]) and may
/// execute `executables` (the interpreter by every name it has, see
/// [`interpreter_names`]). Directories the user granted are data: readable, never
/// mapped executable; the runtime's directories are both. Pure.
pub fn profile(view: &FsView, executables: &[PathBuf], network: NetworkMode) -> Profile {
    let granted = |p: &PathBuf| view.checked.iter().any(|(g, _)| g == p);
    let (read_dirs, runtime): (Vec<PathBuf>, Vec<PathBuf>) =
        view.read_dirs.iter().cloned().partition(|p| granted(p));
    let write_files: Vec<PathBuf> = view
        .write_files
        .iter()
        .filter(|f| f.as_path() != Path::new("/dev/null"))
        .cloned()
        .collect();
    let exec = dedup(executables.iter().cloned());
    let runtime = dedup(runtime);
    let read_dirs = dedup(read_dirs);
    let read_files = dedup(view.read_files.iter().cloned());
    let write_dirs = dedup(view.write_dirs.iter().cloned());
    let write_files = dedup(write_files);
    let every: Vec<&PathBuf> = exec
        .iter()
        .chain(&runtime)
        .chain(&read_dirs)
        .chain(&read_files)
        .chain(&write_dirs)
        .chain(&write_files)
        .collect();
    let ancestors = ancestors(&every);

    let mut text = String::from(BASE);
    text.push_str("; This worker's paths, each a parameter (sandbox-exec -D NAME=path).\n");
    let mut params = Vec::new();
    add(&mut text, &mut params, Grant::Exec, &exec);
    add(&mut text, &mut params, Grant::Runtime, &runtime);
    add(&mut text, &mut params, Grant::ReadDir, &read_dirs);
    add(&mut text, &mut params, Grant::ReadFile, &read_files);
    add(&mut text, &mut params, Grant::WriteDir, &write_dirs);
    add(&mut text, &mut params, Grant::WriteFile, &write_files);
    add(&mut text, &mut params, Grant::Ancestor, &ancestors);
    text.push_str(match network {
        // The egress proxy needs a network namespace to be the only endpoint.
        NetworkMode::Deny | NetworkMode::Proxy => NETWORK_DENY,
        NetworkMode::Allow => NETWORK_ALLOW,
    });
    Profile { text, params }
}

/// The names the interpreter is executed by: `python` as configured and its real file,
/// plus, for a framework build (python.org's installer, Homebrew), the `Python.app`
/// binary that the framework's `bin/python3.X` re-executes. Pure: `real` is
/// `python` with its links resolved.
pub fn interpreter_names(python: &Path, real: &Path) -> Vec<PathBuf> {
    let mut out = dedup([python.to_path_buf(), real.to_path_buf()]);
    if let Some(app) = framework_app(real) {
        out.push(app);
    }
    out
}

/// `…/Python.framework/Versions/X/Resources/Python.app/Contents/MacOS/Python` for an
/// interpreter at `…/Python.framework/Versions/X/bin/python3*`. Pure.
fn framework_app(real: &Path) -> Option<PathBuf> {
    let bin = real.parent()?;
    let version = bin.parent()?;
    let versions = version.parent()?;
    let framework = versions.parent()?;
    let is_framework = bin.file_name()? == "bin"
        && versions.file_name()? == "Versions"
        && framework.file_name()? == "Python.framework";
    is_framework.then(|| version.join("Resources/Python.app/Contents/MacOS/Python"))
}

/// `view` with each path replaced by what `resolve` makes of it (`std::fs::canonicalize`
/// on a Mac), keeping paths it cannot resolve as they are. Pure given `resolve`.
pub fn resolve_view(view: &FsView, resolve: &dyn Fn(&Path) -> Option<PathBuf>) -> FsView {
    let one = |p: &PathBuf| resolve(p).unwrap_or_else(|| p.clone());
    let all = |ps: &[PathBuf]| ps.iter().map(one).collect::<Vec<_>>();
    FsView {
        executables: all(&view.executables),
        read_dirs: all(&view.read_dirs),
        read_files: all(&view.read_files),
        write_dirs: all(&view.write_dirs),
        write_files: all(&view.write_files),
        workspace: one(&view.workspace),
        tmp: one(&view.tmp),
        checked: view.checked.iter().map(|(p, id)| (one(p), *id)).collect(),
        unmasked_grants: view.unmasked_grants,
    }
}

/// The command that starts the worker: `sandbox-exec` applies `profile` to itself, then
/// executes the interpreter (which the profile must allow) with the worker program.
/// Pure.
pub fn sandbox_exec_argv(profile: &Profile, python: &Path) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![SANDBOX_EXEC.into(), "-p".into(), (&profile.text).into()];
    for param in &profile.params {
        let mut define = OsString::from(format!("{}=", param.name));
        define.push(param.path.as_os_str());
        argv.push("-D".into());
        argv.push(define);
    }
    argv.push("--".into());
    argv.push(python.as_os_str().to_owned());
    for arg in ["-I", "-B", "-u", "-c", WORKER_SOURCE] {
        argv.push(arg.into());
    }
    argv
}

/// The walls a macOS worker stands behind once `sandbox-exec` has applied the profile
/// (it executes nothing if the profile does not compile, so no Python runs without it).
/// What macOS lacks is not here: the capability report lists it
/// ([`crate::sandbox::platform::host_capabilities`]). Pure.
pub fn walls(
    profile: &Profile,
    network: NetworkMode,
    run_as: Option<u32>,
    rlimits: String,
    env_len: usize,
) -> Vec<WallStatus> {
    let count = |prefix: &str| {
        profile
            .params
            .iter()
            .filter(|p| p.name.starts_with(prefix))
            .count()
    };
    let net = match network {
        NetworkMode::Deny => "no network",
        NetworkMode::Proxy => {
            "no network: the egress proxy (HOST_SANDBOX_NETWORK=proxy) needs a network namespace, which macOS has not"
        }
        NetworkMode::Allow => "outbound network allowed (HOST_SANDBOX_NETWORK=allow)",
    };
    let wall = |name: &str, detail: String| WallStatus {
        name: name.into(),
        enforced: true,
        detail,
    };
    let mut out = vec![
        wall(
            "seatbelt",
            format!(
                "deny-default Seatbelt profile through {SANDBOX_EXEC}: runtime read-only ({} dirs), {} read-write trees (workspace, tmp, write grants), {} read grants, {net}, no process but the interpreter ({} names), nothing mapped executable outside the system and the runtime",
                count("RUNTIME_"),
                count("WRITE_DIR_"),
                count("READ_DIR_") + count("READ_FILE_"),
                count("EXEC_"),
            ),
        ),
        wall("rlimits", rlimits),
        wall(
            "process_group",
            "own session and process group; a watchdog kills it when the server dies (macOS has no parent-death signal)".into(),
        ),
        wall(
            "environment",
            format!("allowlist of {env_len} variables; nothing inherited from the server"),
        ),
        wall(
            "inherited_fds",
            "only stdin, stdout, stderr and the two protocol pipes remain".into(),
        ),
    ];
    if let Some(uid) = run_as {
        out.push(wall(
            "privileges",
            format!("runs as uid {uid}, the session's own, with no supplementary groups"),
        ));
    }
    out
}

#[cfg(test)]
mod tests;
