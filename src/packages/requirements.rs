//! The requirement strings `install_packages` accepts: a strict subset of PEP 508 that
//! names a distribution of the index and nothing else. A direct URL (`name @ url`), an
//! environment marker, an option (`-r file`, `--index-url`) or any character outside the
//! grammar is refused before anything runs, with the entry and the reason. Pure.

/// Most requirements one call may name.
pub const MAX_REQUIREMENTS: usize = 64;
/// Longest requirement string.
pub const MAX_REQUIREMENT_CHARS: usize = 200;

/// One accepted requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The distribution's name, normalized as PEP 503 does (`Foo_Bar` → `foo-bar`).
    pub name: String,
    /// The requirement as pip is given it: name, extras and specifiers, no spaces.
    pub text: String,
}

/// Why a list of requirements was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("`packages` is empty: name at least one distribution, such as \"scikit-learn\"")]
    Empty,
    #[error("`packages` has {0} entries; at most {MAX_REQUIREMENTS} may be installed in one call")]
    TooMany(usize),
    #[error("`packages` entry {index} ({shown}): {why}")]
    Invalid {
        index: usize,
        shown: String,
        why: String,
    },
}

/// Parses every entry, or names the first that is refused.
///
/// # Errors
/// [`RequirementError`] naming the entry and why.
pub fn parse_all(entries: &[String]) -> Result<Vec<Requirement>, RequirementError> {
    if entries.is_empty() {
        return Err(RequirementError::Empty);
    }
    if entries.len() > MAX_REQUIREMENTS {
        return Err(RequirementError::TooMany(entries.len()));
    }
    entries
        .iter()
        .enumerate()
        .map(|(index, raw)| {
            parse(raw).map_err(|why| RequirementError::Invalid {
                index,
                shown: crate::text::quoted_one_line(raw, 60).0,
                why,
            })
        })
        .collect()
}

/// Parses one requirement string.
///
/// # Errors
/// Why it is not accepted, as one sentence.
pub fn parse(raw: &str) -> Result<Requirement, String> {
    if raw.chars().count() > MAX_REQUIREMENT_CHARS {
        return Err(format!("longer than {MAX_REQUIREMENT_CHARS} characters"));
    }
    let text = raw.trim_matches(' ');
    if text.starts_with('-') {
        return Err("options are not requirements: name a distribution".into());
    }
    if text.contains('@') || text.contains("://") {
        return Err(
            "direct URL references are not installed: packages come from the index only".into(),
        );
    }
    if text.contains(';') {
        return Err(
            "environment markers are not supported: name what this interpreter needs".into(),
        );
    }
    if let Some(c) = text.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "the character {c:?} is not part of a requirement (name[extras]specifiers)"
        ));
    }
    let mut rest = text;
    let name = take_name(&mut rest).ok_or("it does not start with a distribution name")?;
    let mut out = name.to_string();
    skip_spaces(&mut rest);
    if let Some(after) = rest.strip_prefix('[') {
        let (inside, tail) = after
            .split_once(']')
            .ok_or("an extras list is not closed with `]`")?;
        let mut extras = Vec::new();
        for extra in inside.split(',') {
            let mut e = extra.trim_matches(' ');
            let parsed = take_name(&mut e).ok_or("an extra is not a name")?;
            if !e.is_empty() {
                return Err(format!("the extra {extra:?} is not a name"));
            }
            extras.push(parsed.to_string());
        }
        out.push_str(&format!("[{}]", extras.join(",")));
        rest = tail;
    }
    let specs = rest.trim_matches(' ');
    if !specs.is_empty() {
        let mut parsed = Vec::new();
        for spec in specs.split(',') {
            parsed.push(specifier(spec.trim_matches(' '))?);
        }
        out.push_str(&parsed.join(","));
    }
    Ok(Requirement {
        name: normalize(name),
        text: out,
    })
}

/// PEP 503's normal form of a distribution name.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_run {
                out.push('-');
            }
            in_run = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_run = false;
        }
    }
    out
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || " ._-[],=<>!~*+".contains(c)
}

fn skip_spaces(rest: &mut &str) {
    *rest = rest.trim_start_matches(' ');
}

/// A PEP 508 name at the start of `rest` (letters and digits at both ends, `._-` inside).
fn take_name<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !ends_ok(name.chars().next()) || !ends_ok(name.chars().last()) {
        return None;
    }
    *rest = &rest[end..];
    Some(name)
}

/// One version specifier (`>=1.2`, `==2.*`), spaces removed.
fn specifier(spec: &str) -> Result<String, String> {
    const OPERATORS: &[&str] = &["===", "==", "!=", "~=", ">=", "<=", ">", "<"];
    let op = OPERATORS
        .iter()
        .find(|op| spec.starts_with(**op))
        .ok_or_else(|| format!("{spec:?} is not a version specifier (such as >=1.2 or ==2.0)"))?;
    let version = spec[op.len()..].trim_matches(' ');
    let valid = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".*+!_-".contains(c));
    if !valid {
        return Err(format!("{spec:?} does not name a version"));
    }
    Ok(format!("{op}{version}"))
}

/// The session's requirements after an install of `new`: a later requirement of a
/// distribution replaces the earlier one, and the order of first mention is kept.
pub fn merge(earlier: &[Requirement], new: &[Requirement]) -> Vec<Requirement> {
    let mut out: Vec<Requirement> = earlier.to_vec();
    for r in new {
        match out.iter_mut().find(|e| e.name == r.name) {
            Some(e) => *e = r.clone(),
            None => out.push(r.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        parse(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}")).text
    }

    #[test]
    fn ordinary_requirements_are_accepted_and_rendered_without_spaces() {
        assert_eq!(ok("scikit-learn"), "scikit-learn");
        assert_eq!(ok("numpy >= 1.26, < 3"), "numpy>=1.26,<3");
        assert_eq!(
            ok("requests[socks,security]==2.31.0"),
            "requests[socks,security]==2.31.0"
        );
        assert_eq!(ok("pandas~=2.1"), "pandas~=2.1");
        assert_eq!(ok("zope.interface===6.0"), "zope.interface===6.0");
        assert_eq!(ok("Django==4.*"), "Django==4.*");
        assert_eq!(parse("Foo_Bar.baz").unwrap().name, "foo-bar-baz");
    }

    #[test]
    fn anything_but_a_name_from_the_index_is_refused() {
        for raw in [
            "",
            "-r requirements.txt",
            "--index-url=https://evil.example/simple",
            "pkg @ https://evil.example/pkg.whl",
            "git+https://github.com/x/y",
            "numpy; python_version < '3.8'",
            "numpy && rm -rf /",
            "numpy`id`",
            "$(id)",
            "numpy\n--extra-index-url x",
            "numpy>=",
            "numpy 1.0",
            "numpy[",
            "-numpy",
            "numpy-",
            "./local/dir",
            "numpy>=1.0|2",
            "nümpy",
        ] {
            assert!(parse(raw).is_err(), "{raw:?} was accepted");
        }
        assert!(parse(&"a".repeat(201)).is_err());
    }

    #[test]
    fn lists_are_bounded_and_errors_name_the_entry() {
        assert_eq!(parse_all(&[]), Err(RequirementError::Empty));
        let many = vec!["numpy".to_string(); 10_000];
        assert_eq!(parse_all(&many), Err(RequirementError::TooMany(10_000)));
        let err = parse_all(&["numpy".into(), "x; rm".into()]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`packages` entry 1 (\"x; rm\")"),
            "{err}"
        );
    }

    #[test]
    fn a_later_requirement_of_a_distribution_replaces_the_earlier() {
        let a = parse_all(&["numpy<2".into(), "pandas".into()]).unwrap();
        let b = parse_all(&["NumPy>=2".into(), "scipy".into()]).unwrap();
        let merged: Vec<String> = merge(&a, &b).into_iter().map(|r| r.text).collect();
        assert_eq!(merged, ["NumPy>=2", "pandas", "scipy"]);
    }
}
