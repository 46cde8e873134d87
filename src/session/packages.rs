//! `install_packages` for one session: the requirements checked, the request recorded
//! before anything runs, the installer started behind the same walls as a worker (its
//! own proxy reaching the index alone, or no network with a wheelhouse), pip's outcome
//! read back, the wheels hashed here, the size checked against the limit, and the layer
//! switched to the new generation, or left exactly as it was.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Session, SessionError, SessionManager};
use crate::backend::{InstallerSpec, Outcome as RunOutcome, RunOutput};
use crate::execution::{ErrorInfo, validate_session_name};
use crate::grants::{Access, ForbiddenPaths, Grant, GrantWalls};
use crate::owner::{Owner, SessionKey};
use crate::packages::layer::{Layer, sha256_file, tree_size};
use crate::packages::pip::{self, Plan, Source};
use crate::packages::{InstallArgs, InstallResult, Installed, Requirement, requirements};

/// What pip may print that the result shows (its stderr; only its errors are kept).
const OUTPUT_CAP: usize = 64 << 10;
/// Room in the installer's /tmp beyond the limit: pip's own temporary files.
const TMP_SLACK: u64 = 64 << 20;

/// The installer's read-only inputs, resolved once at start-up like the operator's
/// grants: the wheelhouse and the index's CA file.
pub(super) fn installer_grants(
    settings: &crate::config::Settings,
    forbidden: &ForbiddenPaths,
    walls: GrantWalls,
) -> Result<Vec<Grant>, SessionError> {
    let p = &settings.packages;
    let mut out = Vec::new();
    for (name, path) in [
        ("SANDBOX_WHEELHOUSE", &p.wheelhouse),
        ("SANDBOX_PACKAGE_CA", &p.ca),
    ] {
        let Some(path) = path else { continue };
        let resolved = crate::grants::resolve(&path.display().to_string(), forbidden, walls)
            .map_err(|error| SessionError::Packages {
                setting: settings.describe(name),
                error,
            })?;
        out.push(resolved.into_grant(
            Access::Read,
            format!("operator ({name})"),
            "the package installer's input".into(),
        ));
    }
    Ok(out)
}

impl SessionManager {
    /// Installs `args.packages` into the session's layer (opening the session if need
    /// be); `approved_by` is who agreed (the user, under `SANDBOX_PACKAGES=ask`).
    pub async fn install_packages(
        &self,
        owner: &Owner,
        args: &InstallArgs,
        approved_by: Option<String>,
    ) -> InstallResult {
        let started = Instant::now();
        let name = args.session.as_deref().unwrap_or("default");
        let key = SessionKey::new(owner, name);
        let mut result = match self.check_install(name, args) {
            Ok(reqs) => self.install_recorded(&key, &reqs, approved_by).await,
            Err(e) => InstallResult::refused(name, e),
        };
        result.session = name.to_string();
        result.duration_ms = started.elapsed().as_millis() as u64;
        if let Some(w) = self.fallback_warning() {
            result.warnings.insert(0, w);
        }
        result.warnings.extend(self.audit.warnings());
        result
    }

    /// What refuses the call before anything is recorded: the gate, the name, the
    /// setting, the requirement strings.
    fn check_install(&self, name: &str, args: &InstallArgs) -> Result<Vec<Requirement>, ErrorInfo> {
        if let Some(reason) = self.gate_reason() {
            return Err(ErrorInfo::new("SandboxRefused", reason));
        }
        validate_session_name(name)?;
        if self.settings.packages.mode == crate::config::PackagesMode::Deny {
            return Err(ErrorInfo::new(
                "PackagesDenied",
                "the operator set SANDBOX_PACKAGES=deny: this server installs no packages",
            ));
        }
        requirements::parse_all(&args.packages)
            .map_err(|e| ErrorInfo::new("InvalidArguments", e.to_string()))
    }

    /// Records the request, installs, records the outcome.
    async fn install_recorded(
        &self,
        key: &SessionKey,
        reqs: &[Requirement],
        approved_by: Option<String>,
    ) -> InstallResult {
        let asked: Vec<&str> = reqs.iter().map(|r| r.text.as_str()).collect();
        let asked = asked.join(" ");
        let by = approved_by
            .map(|b| format!("; approved by {b}"))
            .unwrap_or_default();
        let requested = crate::audit::AuditEvent {
            detail: format!("requested: {asked}{by}"),
            args_sha256: Some(crate::audit::sha256_hex(asked.as_bytes())),
            ..crate::audit::AuditEvent::now(&key.to_string(), "packages", "requested")
        };
        if let Err(e) = self.audit.record(requested) {
            let e = ErrorInfo::new(
                "AuditUnavailable",
                format!("{e}; every install is recorded before it runs"),
            );
            return InstallResult::refused(&key.name, e);
        }
        let outcome = self.install_in_session(key, reqs).await;
        let (decision, detail) = match &outcome {
            Ok((installed, _)) => ("installed", describe(installed)),
            Err(e) => ("refused", format!("{}: {}", e.kind, e.message)),
        };
        let event = crate::audit::AuditEvent {
            detail,
            args_sha256: Some(crate::audit::sha256_hex(asked.as_bytes())),
            ..crate::audit::AuditEvent::now(&key.to_string(), "packages", decision)
        };
        let audited = self.audit.record(event);
        let mut result = match outcome {
            Ok((installed, all)) => InstallResult {
                ok: true,
                message: format!(
                    "installed: {} distribution(s) in the session's packages; the next call imports them (a module already imported stays as it was until reset_session)",
                    installed.len()
                ),
                installed,
                requirements: all.into_iter().map(|r| r.text).collect(),
                ..InstallResult::default()
            },
            Err(e) => InstallResult::refused(&key.name, e),
        };
        if let Err(e) = audited {
            result.warnings.push(format!(
                "the audit record of this install's outcome could not be written: {e}"
            ));
        }
        result
    }

    /// Installs under the session's lock (no call of it runs meanwhile).
    async fn install_in_session(
        &self,
        key: &SessionKey,
        reqs: &[Requirement],
    ) -> Result<(Vec<Installed>, Vec<Requirement>), ErrorInfo> {
        for _ in 0..3 {
            let session = self.open_session(key, true).await?;
            let state = session.state.lock().await;
            if state.closed {
                continue;
            }
            if let Some(ended) = &state.killed {
                return Err(ended.error());
            }
            session.touch(self.now_ms());
            let outcome = self.install_locked(&session, reqs).await;
            session.touch(self.now_ms());
            return outcome;
        }
        Err(ErrorInfo::new(
            "InternalError",
            "the session was closed three times while this install waited; retry",
        )
        .retryable())
    }

    async fn install_locked(
        &self,
        session: &Session,
        reqs: &[Requirement],
    ) -> Result<(Vec<Installed>, Vec<Requirement>), ErrorInfo> {
        let Some((layer, owner)) = session.home.slot.package_layer() else {
            let why = match session.home.slot.host_paths_unreachable() {
                Some(why) => format!(
                    "install_packages adds a layer of this machine's, bound into the worker, and {why}"
                ),
                None => "this server's workers cannot take a package layer here".to_string(),
            };
            return Err(ErrorInfo::new("PackagesUnsupported", why));
        };
        let earlier = session
            .packages
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default();
        let all = requirements::merge(&earlier, reqs);
        let plan = Plan {
            requirements: all.clone(),
            source: self.package_source(),
        };
        let stage = layer
            .new_stage(owner)
            .map_err(|e| ErrorInfo::new("InstallFailed", format!("the install's stage: {e}")))?;
        let outcome = self.run_installer(session, &plan, &stage).await;
        let installed = outcome.and_then(|()| self.promote(layer, &stage));
        if installed.is_err() {
            layer.discard_stage();
        }
        let installed = installed?;
        if let Ok(mut p) = session.packages.lock() {
            *p = all.clone();
        }
        Ok((installed, all))
    }

    /// Where wheels come from: the wheelhouse when one is set, else the index.
    fn package_source(&self) -> Source {
        let p = &self.settings.packages;
        match &p.wheelhouse {
            Some(dir) => Source::Wheelhouse(dir.clone()),
            None => Source::Index {
                index: p.index.clone(),
                ca: p.ca.clone().or_else(system_ca_bundle),
            },
        }
    }

    /// Starts the installer, runs pip's two steps in it, and says what went wrong.
    async fn run_installer(
        &self,
        session: &Session,
        plan: &Plan,
        stage: &Path,
    ) -> Result<(), ErrorInfo> {
        let limit = self.settings.packages.limit_bytes;
        let egress = match &plan.source {
            Source::Index { index, .. } => {
                let rules = self
                    .settings
                    .egress
                    .rules
                    .allowing_only(&index.hosts())
                    .map_err(|e| {
                        ErrorInfo::new("InstallFailed", format!("SANDBOX_PACKAGE_INDEX: {e}"))
                    })?;
                Some(crate::egress::Egress::for_installer(
                    rules,
                    limit,
                    self.audit.clone(),
                ))
            }
            Source::Wheelhouse(_) => None,
        };
        let spec = InstallerSpec {
            stage,
            grants: &self.package_grants,
            egress,
            tmp_bytes: limit.saturating_add(TMP_SLACK),
        };
        let permit = self.make_room(session).await?;
        let mut worker = self
            .backend
            .start_installer(&session.home.slot, &spec)
            .await
            .map_err(|e| ErrorInfo::new(e.kind(), format!("the package installer: {e}")))?;
        worker.set_egress_session(&format!("{} (install_packages)", session.key));
        let timeout = Duration::from_secs(self.settings.packages.timeout_s);
        let run = worker
            .execute(&plan.driver(), &[], timeout, OUTPUT_CAP)
            .await;
        let refusals = worker.take_egress_refusals();
        worker.kill();
        drop(worker);
        drop(permit);
        judge_run(run, timeout, &refusals)
    }

    /// Hashes the wheels, checks the size, and switches the layer.
    fn promote(&self, layer: &Layer, stage: &Path) -> Result<Vec<Installed>, ErrorInfo> {
        let failed = |why: String| ErrorInfo::new("InstallFailed", why);
        let site = stage.join(pip::SITE);
        let limit = self.settings.packages.limit_bytes;
        match tree_size(&site) {
            Some(size) if size <= limit => {}
            Some(size) => {
                return Err(ErrorInfo::new(
                    "PackageLimit",
                    format!(
                        "the installed packages take {size} bytes, over SANDBOX_PACKAGE_LIMIT ({limit} bytes)"
                    ),
                ));
            }
            None => {
                return Err(failed(
                    "the installed tree is too deep or has too many files".into(),
                ));
            }
        }
        let installed = hash_wheels(&stage.join(pip::WHEELS)).map_err(failed)?;
        layer
            .promote(&site)
            .map_err(|e| failed(format!("the new packages could not be put in place: {e}")))?;
        Ok(installed)
    }
}

/// What the driver's run means: installed, or the error to report (pip's own lines).
fn judge_run(run: RunOutput, timeout: Duration, refusals: &[String]) -> Result<(), ErrorInfo> {
    let stderr = String::from_utf8_lossy(&run.stderr.bytes).into_owned();
    let pip_said = pip::pip_errors(&stderr, 8);
    let proxy_said = if refusals.is_empty() {
        String::new()
    } else {
        format!("\nthe installer's proxy: {}", refusals.join("; "))
    };
    let why = match run.outcome {
        RunOutcome::Finished(response) => match (response.error, response.result.as_deref()) {
            (None, Some(value)) => match pip::Outcome::from_value(value) {
                Some(pip::Outcome::Installed) => return Ok(()),
                Some(pip::Outcome::DownloadFailed) => {
                    "pip could not download every wheel".to_string()
                }
                Some(pip::Outcome::InstallFailed) => "pip could not install the wheels".to_string(),
                Some(pip::Outcome::NothingInstalled) => "pip installed nothing".to_string(),
                None => format!("the installer ended with {value:?}"),
            },
            (Some(e), _) => format!("the installer failed: {}: {}", e.kind, e.message),
            (None, None) => "the installer ended without an outcome".to_string(),
        },
        RunOutcome::TimedOut => format!(
            "the install did not finish within {} s (SANDBOX_PACKAGE_TIMEOUT) and was stopped",
            timeout.as_secs()
        ),
        RunOutcome::Died(how) => format!("the installer died: {how}"),
        RunOutcome::Broken(how) => format!("the installer broke its protocol: {how}"),
        RunOutcome::Withheld => "the installer did not run".to_string(),
    };
    if refusals.iter().any(|r| r.contains("SANDBOX_PACKAGE_LIMIT")) {
        return Err(ErrorInfo::new(
            "PackageLimit",
            format!("the downloads passed SANDBOX_PACKAGE_LIMIT and were cut{proxy_said}"),
        ));
    }
    let detail = if pip_said.is_empty() {
        String::new()
    } else {
        format!("\n{pip_said}")
    };
    Err(ErrorInfo::new(
        "InstallFailed",
        format!("{why}{detail}{proxy_said}"),
    ))
}

/// Every wheel in `dir`, hashed here (never following a link), sorted by name.
fn hash_wheels(dir: &Path) -> Result<Vec<Installed>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("the downloaded wheels: {e}"))?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some((name, version)) = pip::wheel_name(&path) else {
            continue;
        };
        let sha256 = sha256_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(Installed {
            name,
            version,
            sha256,
            wheel: entry.file_name().to_string_lossy().into_owned(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The audit record's list: `name==version sha256=…`, one per distribution.
fn describe(installed: &[Installed]) -> String {
    installed
        .iter()
        .map(|i| format!("{}=={} sha256={}", i.name, i.version, i.sha256))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The system's CA bundle, which the installer's world shows (its /etc/ssl/certs):
/// pip's own bundle would not have the CAs the machine's operator added.
fn system_ca_bundle() -> Option<PathBuf> {
    let path = PathBuf::from("/etc/ssl/certs/ca-certificates.crt");
    path.is_file().then_some(path)
}
