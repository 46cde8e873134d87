//! Path literals. A string literal that names a file outside the session
//! workspace (and the roots the user granted) is a finding. Resolution is
//! purely lexical (`..` and `.` are folded against the workspace, the file
//! system is never touched): symlinks are the OS sandbox's job.

use std::path::{Component, Path};

use super::policy::Policy;

/// The directories code may name, as normalised component lists.
#[derive(Debug, Clone)]
pub struct Roots {
    workspace: Vec<String>,
    allowed: Vec<Vec<String>>,
}

impl Roots {
    /// `workspace` and `allowed` should be absolute; relative ones are taken
    /// relative to `/` so that the check stays deterministic.
    pub fn new(workspace: &Path, allowed: &[std::path::PathBuf]) -> Roots {
        Roots {
            workspace: components_of(workspace),
            allowed: allowed.iter().map(|p| components_of(p)).collect(),
        }
    }

    fn contains(&self, comps: &[String]) -> bool {
        comps.starts_with(&self.workspace) || self.allowed.iter().any(|r| comps.starts_with(r))
    }
}

fn components_of(p: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// What is wrong with a path literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathProblem {
    pub rule: &'static str,
    pub message: String,
}

const MAX_PATH_LEN: usize = 4096;

/// Checks one string value. `in_path_call` says the string is passed straight
/// to a function that takes a path (`open`, `Path`, `read_csv`, ...), which
/// makes any absolute path count, not only those under system directories.
pub fn check(
    value: &str,
    in_path_call: bool,
    roots: &Roots,
    policy: &Policy,
) -> Option<PathProblem> {
    if value.is_empty() || value.len() > MAX_PATH_LEN || value.contains(['\n', '\0']) {
        return None;
    }
    if let Some(path) = file_url_path(value) {
        return check_absolute(&path, value, true, roots, policy);
    }
    if let Some(rest) = value.strip_prefix('~') {
        let user_len = rest
            .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .unwrap_or(rest.len());
        let after = &rest[user_len..];
        let looks_like_home = after.starts_with('/') || (after.is_empty() && in_path_call);
        if looks_like_home {
            return Some(PathProblem {
                rule: "path_outside_workspace",
                message: format!(
                    "`{}` names a home directory, which is outside the workspace; \
                     use a path relative to the workspace",
                    shorten(value)
                ),
            });
        }
        return None;
    }
    if value.starts_with('/') {
        return check_absolute(value, value, in_path_call, roots, policy);
    }
    if value.split('/').any(|c| c == "..") {
        let mut comps = roots.workspace.clone();
        let mut escaped = false;
        for c in value.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    if comps.pop().is_none() {
                        escaped = true;
                    }
                }
                other => comps.push(other.to_string()),
            }
        }
        if escaped || !roots.contains(&comps) {
            return Some(PathProblem {
                rule: "path_outside_workspace",
                message: format!(
                    "`{}` climbs out of the workspace (to /{}); keep paths inside the workspace",
                    shorten(value),
                    shorten(&comps.join("/"))
                ),
            });
        }
    }
    None
}

fn check_absolute(
    path: &str,
    shown: &str,
    in_path_call: bool,
    roots: &Roots,
    policy: &Policy,
) -> Option<PathProblem> {
    let comps = normalise(path);
    let joined = format!("/{}", comps.join("/"));
    for prefix in &policy.alias_prefixes {
        let under = joined == *prefix
            || joined
                .strip_prefix(prefix.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        if under {
            return Some(PathProblem {
                rule: "path_alias",
                message: format!(
                    "`{}` is under {prefix}, which can alias any file or descriptor \
                     (/proc/self/root, /dev/fd/N); use a path inside the workspace",
                    shorten(shown)
                ),
            });
        }
    }
    if roots.contains(&comps) {
        return None;
    }
    let system = comps
        .first()
        .is_some_and(|c| policy.system_roots.contains(c.as_str()));
    if system || in_path_call {
        return Some(PathProblem {
            rule: "path_outside_workspace",
            message: format!(
                "`{}` is outside the workspace; use a path relative to the workspace \
                 (the user can grant more directories with request_grant)",
                shorten(shown)
            ),
        });
    }
    None
}

/// The path of a `file:` URL, percent-decoded; `None` for anything else.
fn file_url_path(value: &str) -> Option<String> {
    let head = value.get(..5)?;
    if !head.eq_ignore_ascii_case("file:") {
        return None;
    }
    let mut rest = &value[5..];
    if let Some(r) = rest.strip_prefix("//") {
        // file://host/path: only the path part names a local file.
        let slash = r.find('/').unwrap_or(r.len());
        rest = &r[slash..];
    }
    let decoded = percent_decode(rest);
    Some(if decoded.starts_with('/') {
        decoded
    } else {
        format!("/{decoded}")
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|b| (*b as char).to_digit(16)),
                bytes.get(i + 2).and_then(|b| (*b as char).to_digit(16)),
            )
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Lexical normalisation of an absolute path: `//`, `.` and `..` folded; `..`
/// at the root stays at the root, as the kernel does.
fn normalise(path: &str) -> Vec<String> {
    let mut comps: Vec<String> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                comps.pop();
            }
            other => comps.push(other.to_string()),
        }
    }
    comps
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 80 {
        let mut t: String = s.chars().take(80).collect();
        t.push('…');
        t
    } else {
        s.to_string()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn policy() -> Policy {
        Policy::from_toml(crate::guard::DEFAULT_POLICY).unwrap()
    }

    fn roots() -> Roots {
        Roots::new(
            Path::new("/srv/warden/ws/s1"),
            &[PathBuf::from("/data/shared")],
        )
    }

    fn rule(v: &str, call: bool) -> Option<&'static str> {
        check(v, call, &roots(), &policy()).map(|p| p.rule)
    }

    #[test]
    fn system_paths_are_outside() {
        assert_eq!(rule("/etc/passwd", false), Some("path_outside_workspace"));
        assert_eq!(rule("/tmp/pwned", false), Some("path_outside_workspace"));
        assert_eq!(
            rule("//etc/./passwd", false),
            Some("path_outside_workspace")
        );
        assert_eq!(
            rule("/srv/warden/ws/s1/../s2/x", false),
            Some("path_outside_workspace")
        );
    }

    #[test]
    fn workspace_and_granted_roots_are_inside() {
        assert_eq!(rule("/srv/warden/ws/s1/out.csv", true), None);
        assert_eq!(rule("/data/shared/in.csv", true), None);
        assert_eq!(rule("data/x.csv", true), None);
        assert_eq!(rule("data/../x.csv", true), None);
        assert_eq!(rule("out.csv", false), None);
    }

    #[test]
    fn relative_paths_that_climb_out_are_outside() {
        assert_eq!(rule("../", false), Some("path_outside_workspace"));
        assert_eq!(
            rule("../../../../../../../etc/passwd", false),
            Some("path_outside_workspace")
        );
        assert_eq!(rule("a/../../s2/x", false), Some("path_outside_workspace"));
        // Not path components.
        assert_eq!(rule("Loading..", false), None);
        assert_eq!(rule("wait...", false), None);
    }

    #[test]
    fn non_system_absolute_strings_count_only_in_path_calls() {
        assert_eq!(rule("/api/v1/users", false), None);
        assert_eq!(rule("/api/v1/users", true), Some("path_outside_workspace"));
        assert_eq!(rule("/", false), None);
        assert_eq!(rule("/", true), Some("path_outside_workspace"));
    }

    #[test]
    fn aliases_are_flagged_even_inside_granted_roots() {
        let r = Roots::new(Path::new("/srv/ws"), &[PathBuf::from("/")]);
        let p = policy();
        assert_eq!(
            check("/proc/self/root/etc/passwd", false, &r, &p).map(|x| x.rule),
            Some("path_alias")
        );
        assert_eq!(
            check("/dev/fd/3", false, &r, &p).map(|x| x.rule),
            Some("path_alias")
        );
        assert_eq!(
            check("/proc/1/cwd", false, &r, &p).map(|x| x.rule),
            Some("path_alias")
        );
        assert_eq!(check("/devices", false, &r, &p).map(|x| x.rule), None);
    }

    #[test]
    fn home_and_file_urls() {
        assert_eq!(rule("~/.ssh/id_rsa", false), Some("path_outside_workspace"));
        assert_eq!(rule("~root/x", false), Some("path_outside_workspace"));
        assert_eq!(rule("~", true), Some("path_outside_workspace"));
        assert_eq!(rule("~approx", false), None);
        assert_eq!(
            rule("file:///etc/passwd", false),
            Some("path_outside_workspace")
        );
        assert_eq!(
            rule("FILE://localhost/%65tc/shadow", false),
            Some("path_outside_workspace")
        );
        assert_eq!(rule("file:///srv/warden/ws/s1/a.txt", false), None);
        assert_eq!(rule("file:/proc/self/environ", false), Some("path_alias"));
    }

    #[test]
    fn odd_strings_do_not_panic() {
        for s in [
            "%",
            "file:",
            "file://",
            "~é/x",
            "/é/../..",
            "..",
            "é..",
            "\u{0}",
        ] {
            let _ = rule(s, true);
        }
    }
}
