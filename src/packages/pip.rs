//! What the installer runs, as data: pip's arguments for the two steps of an install
//! (download wheels into the stage, then install them from there, offline, into a
//! size-capped temporary tree that is copied into the stage), the short Python program
//! that runs both in the installer's interpreter, and how its outcome and wheels are
//! read back. Pure.

use std::path::{Path, PathBuf};

use super::{IndexUrl, Requirement};

/// Where the stage is inside the installer's world: its workspace.
pub const STAGE: &str = crate::workspace::IN_WORLD;
/// The downloaded wheels, inside the stage.
pub const WHEELS: &str = "wheels";
/// The installed tree, inside the stage.
pub const SITE: &str = "site";
/// Where pip installs first: the installer's /tmp, a tmpfs of the package limit, so a
/// wheel that unpacks to more than the limit fills it and fails there.
const TMP_SITE: &str = "/tmp/site";
/// pip's wait for one socket operation, and its retries.
const SOCKET_TIMEOUT_S: &str = "15";
const RETRIES: &str = "1";

/// Where wheels come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A PEP 503 index through the installer's egress proxy; `ca` is the bundle an
    /// `https://` index is verified against (`None`: pip's own).
    Index {
        index: IndexUrl,
        ca: Option<PathBuf>,
    },
    /// A directory of wheels, no network (`SANDBOX_WHEELHOUSE`).
    Wheelhouse(PathBuf),
}

/// One install: the session's whole requirement list (every install builds the layer
/// afresh from it, so what pip resolved is always one consistent set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub requirements: Vec<Requirement>,
    pub source: Source,
}

/// Options both steps share: no configuration file or environment variable of pip's
/// counts, nothing is asked or cached, and only wheels are ever considered (no build
/// step runs code at install time).
fn common(command: &str) -> Vec<String> {
    [
        command,
        "--isolated",
        "--no-input",
        "--disable-pip-version-check",
        "--no-cache-dir",
        "--progress-bar",
        "off",
        "--only-binary",
        ":all:",
        "--timeout",
        SOCKET_TIMEOUT_S,
        "--retries",
        RETRIES,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl Plan {
    /// pip's arguments for the download into the stage.
    pub fn download_args(&self) -> Vec<String> {
        let mut args = common("download");
        args.extend(["--dest".into(), format!("{STAGE}/{WHEELS}")]);
        match &self.source {
            Source::Index { index, ca } => {
                args.extend(["--index-url".into(), index.url.clone()]);
                let proxy = format!("http://127.0.0.1:{}", crate::egress::PROXY_PORT);
                args.extend(["--proxy".into(), proxy]);
                if index.https {
                    if let Some(ca) = ca {
                        args.extend(["--cert".into(), ca.display().to_string()]);
                    }
                } else {
                    args.extend(["--trusted-host".into(), index.host.clone()]);
                }
            }
            Source::Wheelhouse(dir) => {
                args.extend(["--no-index".into(), "--find-links".into()]);
                args.push(dir.display().to_string());
            }
        }
        self.with_requirements(args)
    }

    /// pip's arguments for the offline install of the downloaded wheels.
    pub fn install_args(&self) -> Vec<String> {
        let mut args = common("install");
        args.extend([
            "--no-index".into(),
            "--find-links".into(),
            format!("{STAGE}/{WHEELS}"),
            "--target".into(),
            TMP_SITE.into(),
        ]);
        self.with_requirements(args)
    }

    fn with_requirements(&self, mut args: Vec<String>) -> Vec<String> {
        // Nothing after `--` is read as an option, whatever it looks like.
        args.push("--".into());
        args.extend(self.requirements.iter().map(|r| r.text.clone()));
        args
    }

    /// The Python the installer's worker runs: pip in its own interpreter (a sandboxed
    /// worker may start no process), both steps, then the copy of the installed tree
    /// into the stage. Its value is one of the [`Outcome`] codes.
    pub fn driver(&self) -> String {
        let steps = serde_json::json!([self.download_args(), self.install_args()]);
        let site = format!("{STAGE}/{SITE}");
        // JSON is valid Python for these values (lists of strings).
        format!(
            r#"def _warden_install(steps, site):
    import os, shutil
    # The sandbox refuses chmod (no file is made executable, nothing setuid): the modes
    # pip would copy or set do not matter in a layer nothing is executed from.
    def _keep_mode(*args, **kwargs):
        return None
    os.chmod = shutil.copymode = shutil.copystat = _keep_mode
    # pip says why an index page could not be read (a 500, a refusal of the proxy) only
    # at debug level: that line is the clearest error there is.
    import logging, sys
    class _Unfetched(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("Could not fetch URL"):
                sys.stderr.write("ERROR: " + message + "\n")
    collector = logging.getLogger("pip._internal.index.collector")
    collector.setLevel(logging.DEBUG)
    collector.addHandler(_Unfetched())
    # pip's user agent describes the machine (reading /etc files the sandbox hides): the
    # index learns nothing of it.
    import pip._internal.network.session as session
    session.user_agent = lambda: "pip (warden installer)"
    from pip._internal.cli.main import main as pip
    for code, args in zip((10, 20), steps):
        try:
            status = pip(args)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        if status != 0:
            return code
    try:
        shutil.copytree({TMP_SITE:?}, site, symlinks=True)
    except FileNotFoundError:
        return 30
    return 0
_warden_install({steps}, {site:?})
"#
        )
    }
}

/// How the driver ended, from its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Installed,
    DownloadFailed,
    InstallFailed,
    NothingInstalled,
}

impl Outcome {
    /// The driver's value (`"0"`, `"10"`…), or `None` if it is not one.
    pub fn from_value(value: &str) -> Option<Outcome> {
        match value.trim() {
            "0" => Some(Outcome::Installed),
            "10" => Some(Outcome::DownloadFailed),
            "20" => Some(Outcome::InstallFailed),
            "30" => Some(Outcome::NothingInstalled),
            _ => None,
        }
    }
}

/// What pip said went wrong: its last retry (what the index answered), its `ERROR:`
/// lines and, after a traceback, the exception it ends with; else the last lines it wrote. At most `max_lines`, each cut to 300
/// characters.
pub fn pip_errors(stderr: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    // The last retry names what the index answered (a 500, a refused connection).
    let mut picked: Vec<&str> = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("WARNING: Retrying"))
        .copied()
        .into_iter()
        .collect();
    picked.extend(lines.iter().filter(|l| l.starts_with("ERROR:")).copied());
    if lines.iter().any(|l| l.starts_with("Traceback")) {
        picked.extend(lines.last().copied());
    }
    if picked.is_empty() {
        picked = lines[lines.len().saturating_sub(max_lines)..].to_vec();
    }
    let from = picked.len().saturating_sub(max_lines);
    picked[from..]
        .iter()
        .map(|l| crate::text::one_line(l.trim_end(), 300).0)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A wheel's distribution name and version, from its file name
/// (`{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`).
pub fn wheel_name(file: &Path) -> Option<(String, String)> {
    let stem = file.file_name()?.to_str()?.strip_suffix(".whl")?;
    let parts: Vec<&str> = stem.split('-').collect();
    if !(5..=6).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    Some((
        super::requirements::normalize(parts[0]),
        parts[1].to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(source: Source) -> Plan {
        Plan {
            requirements: super::super::requirements::parse_all(&[
                "numpy>=1".into(),
                "wtiny".into(),
            ])
            .unwrap(),
            source,
        }
    }

    fn https_index() -> Source {
        Source::Index {
            index: IndexUrl::parse("https://index.test:8443/simple").unwrap(),
            ca: Some("/etc/ssl/certs/ca-certificates.crt".into()),
        }
    }

    #[test]
    fn downloads_go_through_the_proxy_wheels_only_and_requirements_after_the_options() {
        let args = plan(https_index()).download_args();
        let joined = args.join(" ");
        assert!(
            args[0] == "download" && joined.contains("--only-binary :all:"),
            "{joined}"
        );
        assert!(
            joined.contains("--index-url https://index.test:8443/simple/"),
            "{joined}"
        );
        assert!(joined.contains("--proxy http://127.0.0.1:3128"), "{joined}");
        assert!(
            joined.contains("--cert /etc/ssl/certs/ca-certificates.crt"),
            "{joined}"
        );
        assert!(!joined.contains("--trusted-host"), "{joined}");
        assert!(joined.ends_with("-- numpy>=1 wtiny"), "{joined}");
        assert!(joined.contains("--isolated") && joined.contains("--no-cache-dir"));
    }

    #[test]
    fn an_http_index_is_trusted_as_named_and_a_wheelhouse_needs_no_network() {
        let http = Source::Index {
            index: IndexUrl::parse("http://mirror.test/simple/").unwrap(),
            ca: None,
        };
        let joined = plan(http).download_args().join(" ");
        assert!(joined.contains("--trusted-host mirror.test"), "{joined}");
        let joined = plan(Source::Wheelhouse("/srv/wheels".into()))
            .download_args()
            .join(" ");
        assert!(
            joined.contains("--no-index --find-links /srv/wheels"),
            "{joined}"
        );
        assert!(
            !joined.contains("--proxy") && !joined.contains("--index-url"),
            "{joined}"
        );
    }

    #[test]
    fn the_install_step_is_offline_from_the_downloaded_wheels() {
        let joined = plan(https_index()).install_args().join(" ");
        assert!(joined.starts_with("install "), "{joined}");
        assert!(joined.contains("--no-index --find-links /workspace/wheels --target /tmp/site"));
        assert!(!joined.contains("--proxy"), "{joined}");
    }

    #[test]
    fn the_driver_carries_both_steps_as_literals() {
        let code = plan(https_index()).driver();
        assert!(code.contains("[[\"download\""), "{code}");
        assert!(code.contains("\"/workspace/site\""), "{code}");
    }

    #[test]
    fn outcomes_and_errors_are_read_back() {
        assert_eq!(Outcome::from_value("0"), Some(Outcome::Installed));
        assert_eq!(Outcome::from_value("20"), Some(Outcome::InstallFailed));
        assert_eq!(Outcome::from_value("'0'"), None);
        let stderr = "Looking in indexes: x\nERROR: Could not find a version that satisfies the requirement nope\nERROR: No matching distribution found for nope\n";
        assert_eq!(
            pip_errors(stderr, 5),
            "ERROR: Could not find a version that satisfies the requirement nope\nERROR: No matching distribution found for nope"
        );
        assert_eq!(pip_errors("a\nb\nc\n", 2), "b\nc");
        let crash = "ERROR: Exception:\nTraceback (most recent call last):\n  File x\nPermissionError: [Errno 1] no\n";
        assert_eq!(
            pip_errors(crash, 5),
            "ERROR: Exception:\nPermissionError: [Errno 1] no"
        );
    }

    #[test]
    fn wheel_file_names_give_name_and_version() {
        let name = |f: &str| wheel_name(Path::new(f));
        assert_eq!(
            name("scikit_learn-1.5.0-cp311-cp311-manylinux_2_17_x86_64.whl"),
            Some(("scikit-learn".into(), "1.5.0".into()))
        );
        assert_eq!(
            name("wtiny-1.0-1-py3-none-any.whl"),
            Some(("wtiny".into(), "1.0".into()))
        );
        assert_eq!(name("wtiny-1.0.tar.gz"), None);
        assert_eq!(name("bad.whl"), None);
    }
}
