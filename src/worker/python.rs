//! Finding the Python interpreter the workers run: a real ELF binary (never a shell shim
//! such as pyenv's), the ELF loader it needs, and the directories its imports come from.
//! The interpreter is asked once, at start-up, outside any sandbox, so it runs isolated
//! (`-I -S -B`): no environment variables, no user site, no `site` module, hence no
//! `.pth` file and no `sitecustomize` of its site-packages is ever executed there. Only
//! the standard library runs; the venv is found by reading `pyvenv.cfg` ourselves.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    #[error("no python3 found on PATH; install Python 3 or set SANDBOX_PYTHON to its path")]
    NotFound,
    #[error("could not run {path} to ask where its standard library is: {source}")]
    Query {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} did not answer the interpreter query ({detail}); set SANDBOX_PYTHON to a CPython 3 binary"
    )]
    BadAnswer { path: PathBuf, detail: String },
    #[error(
        "{path} is not an ELF executable even after resolving it through the interpreter itself; set SANDBOX_PYTHON to the real binary"
    )]
    NotElf { path: PathBuf },
    #[error(
        "{path} cannot be read by the sandbox user: {reason}; set SANDBOX_PYTHON to an interpreter outside that directory (for example /usr/bin/python3)"
    )]
    Unreachable { path: PathBuf, reason: String },
}

/// The interpreter as the sandbox sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonRuntime {
    /// The path the worker execs: `sys.executable` as the interpreter reports it. A
    /// venv's `bin/python` is a symlink, and it must be run by that path for Python to
    /// find `pyvenv.cfg` and the venv's packages.
    pub executable: PathBuf,
    /// The real ELF binary behind `executable` (symlinks resolved).
    pub binary: PathBuf,
    pub elf_interpreter: Option<PathBuf>,
    pub version: String,
    /// Prefixes and `sys.path` entries: what the worker must be able to read.
    pub read_roots: Vec<PathBuf>,
}

/// Printed by the interpreter itself so that shims, venvs and symlinks are all resolved
/// the way Python resolves them. It runs with `-S`: `import site` then only defines
/// functions (no `site.main()`, so no `.pth` processing). A venv is recognised the way
/// CPython does, by a `pyvenv.cfg` beside or above the executable.
const QUERY: &str = r#"import sys, json, os, site
exe = sys.executable
venv = None
for d in (os.path.dirname(exe), os.path.dirname(os.path.dirname(exe))):
    if os.path.isfile(os.path.join(d, 'pyvenv.cfg')):
        venv = d
        break
print(json.dumps({'executable': exe, 'version': sys.version.split()[0],
    'prefix': sys.prefix, 'base_prefix': sys.base_prefix,
    'path': [p for p in sys.path if p], 'site': site.getsitepackages(), 'venv': venv}))
"#;

/// Flags for every query: isolated mode (no `PYTHON*` variables, no user site), no
/// `site`, no bytecode written.
const QUERY_FLAGS: [&str; 3] = ["-I", "-S", "-B"];

#[derive(Deserialize)]
struct QueryAnswer {
    executable: String,
    version: String,
    prefix: String,
    base_prefix: String,
    path: Vec<String>,
    site: Vec<String>,
    venv: Option<String>,
}

/// Resolves `configured` (or python3 on PATH) to a runtime usable by a sandboxed worker.
///
/// `must_be_world_readable`: when the worker runs as a different, unprivileged uid (the
/// server is root), every directory on the way to the interpreter must be traversable by
/// others; a pyenv under `/root` is not, and then `/usr/bin/python3` is tried instead
/// (with a warning) unless the user named the interpreter explicitly.
pub fn resolve(
    configured: Option<&Path>,
    must_be_world_readable: bool,
) -> Result<PythonRuntime, PythonError> {
    let explicit = configured.is_some();
    let candidate = match configured {
        Some(p) => p.to_path_buf(),
        None => find_on_path("python3").ok_or(PythonError::NotFound)?,
    };
    let runtime = query(&candidate)?;
    if must_be_world_readable
        && let Err(reason) =
            world_reachable(&runtime.executable).and_then(|()| world_reachable(&runtime.binary))
    {
        if explicit {
            return Err(PythonError::Unreachable {
                path: runtime.executable,
                reason,
            });
        }
        let fallback = Path::new("/usr/bin/python3");
        tracing::warn!(
            interpreter = %runtime.executable.display(),
            %reason,
            "python3 on PATH is not reachable by the sandbox user; falling back to /usr/bin/python3 (set SANDBOX_PYTHON to choose)"
        );
        let runtime = query(fallback)?;
        world_reachable(&runtime.binary).map_err(|reason| PythonError::Unreachable {
            path: runtime.executable.clone(),
            reason,
        })?;
        return Ok(runtime);
    }
    Ok(runtime)
}

fn query(candidate: &Path) -> Result<PythonRuntime, PythonError> {
    let output = Command::new(candidate)
        .args(QUERY_FLAGS)
        .args(["-c", QUERY])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .output()
        .map_err(|source| PythonError::Query {
            path: candidate.to_path_buf(),
            source,
        })?;
    if !output.status.success() {
        return Err(PythonError::BadAnswer {
            path: candidate.to_path_buf(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    let answer: QueryAnswer =
        serde_json::from_slice(&output.stdout).map_err(|e| PythonError::BadAnswer {
            path: candidate.to_path_buf(),
            detail: e.to_string(),
        })?;
    let executable = PathBuf::from(&answer.executable);
    if !executable.is_absolute() {
        return Err(PythonError::BadAnswer {
            path: candidate.to_path_buf(),
            detail: format!(
                "sys.executable {:?} is not an absolute path",
                answer.executable
            ),
        });
    }
    let binary = fs::canonicalize(&executable).map_err(|e| PythonError::BadAnswer {
        path: candidate.to_path_buf(),
        detail: format!("sys.executable {:?}: {e}", answer.executable),
    })?;
    let head = read_head(&binary).map_err(|e| PythonError::Query {
        path: binary.clone(),
        source: e,
    })?;
    if !head.starts_with(b"\x7fELF") {
        return Err(PythonError::NotElf { path: binary });
    }
    let elf_interpreter = elf_interpreter(&head)
        .map(PathBuf::from)
        .and_then(|p| fs::canonicalize(p).ok());
    let mut read_roots: Vec<PathBuf> = Vec::new();
    let mut push = |p: PathBuf| {
        if let Ok(c) = fs::canonicalize(&p)
            && !read_roots.iter().any(|r| c.starts_with(r))
        {
            read_roots.retain(|r| !r.starts_with(&c));
            read_roots.push(c);
        }
    };
    for p in answer.path.iter().chain(&answer.site).map(PathBuf::from) {
        push(p);
    }
    for prefix in [&answer.prefix, &answer.base_prefix] {
        push(Path::new(prefix).join("lib"));
    }
    // A venv: the interpreter reads its pyvenv.cfg at start-up, and its packages live
    // inside it. The whole venv is read-only to the worker.
    if let Some(venv) = &answer.venv {
        push(PathBuf::from(venv));
    }
    Ok(PythonRuntime {
        executable,
        binary,
        elf_interpreter,
        version: answer.version,
        read_roots,
    })
}

fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read(&mut buf[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    buf.truncate(filled);
    Ok(buf)
}

/// The permission bits of a file (Windows has none: everything counts as allowed, and
/// no worker there runs as another user).
fn unix_mode(meta: &fs::Metadata) -> u32 {
    #[cfg(unix)]
    {
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        0o777
    }
}

/// Finds an executable named `name` on PATH, resolving symlinks.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && unix_mode(&m) & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Checks that a process with no special rights could reach and read `path`: every
/// ancestor directory must be searchable by others and the file readable by others.
pub fn world_reachable(path: &Path) -> Result<(), String> {
    let meta = fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if unix_mode(&meta) & 0o005 != 0o005 {
        return Err(format!(
            "{} is not readable and executable by others (mode {:o})",
            path.display(),
            unix_mode(&meta) & 0o7777
        ));
    }
    traversable_by_others(path.parent().unwrap_or(Path::new("/")))
}

/// Checks that a process with no special rights could pass through `dir` and every
/// directory above it.
pub fn traversable_by_others(dir: &Path) -> Result<(), String> {
    for dir in dir.ancestors() {
        let meta = fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if unix_mode(&meta) & 0o001 == 0 {
            return Err(format!(
                "{} is mode {:o}, so other users cannot pass through it",
                dir.display(),
                unix_mode(&meta) & 0o7777
            ));
        }
    }
    Ok(())
}

/// The `PT_INTERP` path of a 64-bit little-endian ELF, from its first bytes.
pub fn elf_interpreter(head: &[u8]) -> Option<String> {
    const PT_INTERP: u32 = 3;
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| {
        head.get(o..o.checked_add(2)?)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        head.get(o..o.checked_add(4)?)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        head.get(o..o.checked_add(8)?).and_then(|b| {
            let arr: [u8; 8] = b.try_into().ok()?;
            Some(u64::from_le_bytes(arr))
        })
    };
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let base = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(base)? != PT_INTERP {
            continue;
        }
        let offset = usize::try_from(u64_at(base.checked_add(0x08)?)?).ok()?;
        let size = usize::try_from(u64_at(base.checked_add(0x20)?)?).ok()?;
        let bytes = head.get(offset..offset.checked_add(size)?)?;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        return String::from_utf8(bytes[..end].to_vec()).ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pt_interp_of_a_real_binary() {
        let head = read_head(Path::new("/bin/sh")).unwrap();
        let interp = elf_interpreter(&head).unwrap();
        assert!(interp.contains("ld-linux"), "{interp}");
    }

    #[test]
    fn rejects_non_elf_and_truncated_input() {
        assert_eq!(elf_interpreter(b"#!/bin/sh\n"), None);
        assert_eq!(elf_interpreter(&[0x7f, b'E', b'L', b'F', 2, 1]), None);
        let mut bogus = vec![0u8; 64];
        bogus[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        bogus[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        bogus[0x38] = 5;
        assert_eq!(elf_interpreter(&bogus), None);
    }

    #[test]
    fn root_home_is_not_world_reachable() {
        if fs::metadata("/root")
            .map(|m| unix_mode(&m) & 0o001 == 0)
            .unwrap_or(false)
        {
            assert!(world_reachable(Path::new("/root/.bashrc")).is_err());
        }
        assert!(world_reachable(Path::new("/bin/sh")).is_ok());
    }
}
