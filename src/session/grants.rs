//! Grants per session: the operator's (pre-approved at start, every session) and the
//! ones a person approved for one session. Widening a session's sandbox replaces its
//! worker, since a sealed sandbox (a Landlock ruleset, a container's mounts) cannot be
//! widened in place.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{PreApproval, Session, SessionError, SessionManager};
use crate::backend::WorldPlaces;
use crate::execution::ErrorInfo;
use crate::grants::{
    Access, Dropped, ForbiddenPaths, Grant, GrantError, GrantWalls, NeverGrant, PathKind, Resolved,
    WardenPaths,
};
use crate::owner::{Owner, SessionKey};

/// The never-grant list of this server: `policies/never-grant.toml` for the server
/// user's home and every login user's, its configuration file and directory, its data.
pub(super) fn forbidden_paths(
    settings: &crate::config::Settings,
    data_dir: &Path,
) -> Result<ForbiddenPaths, SessionError> {
    let rules = NeverGrant::embedded()?;
    let mut homes: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
        homes.extend(crate::grants::rules::login_homes(&passwd));
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    homes.retain(|h| {
        let fresh = h.is_absolute() && h != Path::new("/") && !seen.contains(h);
        seen.push(h.clone());
        fresh
    });
    let warden = WardenPaths {
        config_file: settings.config_file.clone(),
        config_dir: crate::config::config_dir(),
        data_dir: data_dir.to_path_buf(),
    };
    Ok(ForbiddenPaths::standard(rules, &homes, &warden))
}

/// Resolves the operator's pre-approved paths at start. One that can never be granted,
/// or that could rewrite another, stops the server with the reason; one that another
/// already gives is dropped with a warning (returned, for `warden://settings`).
pub(super) fn operator_grants(
    pre_approved: &[PreApproval],
    forbidden: &ForbiddenPaths,
    world: Option<WorldPlaces>,
    walls: GrantWalls,
) -> Result<(Vec<Grant>, Vec<Dropped>), SessionError> {
    let mut candidates = Vec::new();
    for pre in pre_approved {
        let resolved = resolve_in_world(&pre.path, forbidden, world, walls).map_err(|error| {
            SessionError::PreApproval {
                origin: pre.source.clone(),
                error,
            }
        })?;
        for (path, why) in &resolved.inside.hidden {
            tracing::warn!(grant = %resolved.path.display(), hidden = %path.display(), %why, "hidden inside a pre-approved grant");
        }
        for mount in &resolved.inside.left_out {
            tracing::warn!(grant = %resolved.path.display(), %mount, "another mount, left out of a pre-approved grant");
        }
        let inside = resolved.inside.clone();
        let grant = resolved.into_grant(
            pre.access,
            format!("operator ({})", pre.source),
            "pre-approved at start-up".into(),
        );
        candidates.push((grant, inside));
    }
    let (kept, dropped) = crate::grants::combine_operator(candidates).map_err(|(i, error)| {
        SessionError::PreApproval {
            origin: pre_approved[i].source.clone(),
            error,
        }
    })?;
    for d in &dropped {
        tracing::warn!(path = %d.path.display(), access = ?d.access, source = %d.approved_by, covered_by = %d.covered_by.display(), why = %d.why, "pre-approved grant dropped: another one already gives it");
    }
    for grant in &kept {
        tracing::info!(path = %grant.path.display(), access = ?grant.access, source = %grant.approved_by, "pre-approved grant");
    }
    Ok((kept, dropped))
}

/// Resolves and opens a requested path ([`crate::grants::resolve`]) and, when workers
/// live in a world of their own, refuses paths that would land on its own places.
fn resolve_in_world(
    raw: &str,
    forbidden: &ForbiddenPaths,
    world: Option<WorldPlaces>,
    walls: GrantWalls,
) -> Result<Resolved, GrantError> {
    let resolved = crate::grants::resolve(raw, forbidden, walls)?;
    if let Some(what) = world.and_then(|w| w.reserved(&resolved.path)) {
        return Err(GrantError::Forbidden {
            path: resolved.path,
            why: format!("it would land on {what} inside the sandbox"),
        });
    }
    Ok(resolved)
}

/// Drops the session's expired grants and returns them.
pub(super) fn take_expired(session: &Session) -> Vec<Grant> {
    match session.grants.lock() {
        Ok(mut grants) => {
            let now = crate::grants::now_secs();
            let (live, gone): (Vec<Grant>, Vec<Grant>) =
                grants.drain(..).partition(|g| g.is_live(now));
            *grants = live;
            gone
        }
        Err(_) => Vec::new(),
    }
}

impl SessionManager {
    /// Canonicalises a requested path, opens exactly that object and refuses the ones
    /// that can never be granted (nor land on the world's own places).
    pub fn resolve_grant_path(&self, raw: &str) -> Result<Resolved, GrantError> {
        resolve_in_world(raw, &self.forbidden, self.world, self.grant_walls)
    }

    /// The operator's grants dropped at start because another already gives them.
    pub fn dropped_grants(&self) -> &[Dropped] {
        &self.dropped_grants
    }

    /// The never-grant list as `warden://settings` shows it.
    pub fn never_grantable(&self) -> serde_json::Value {
        let mut doc = self.forbidden.document();
        doc["grant_walls"] = serde_json::json!(self.grant_walls);
        doc
    }

    /// Why no path of this machine can be granted to `session` (its workspace lives in
    /// a container that cannot reach them), if so.
    pub fn host_paths_unreachable(&self, session: &SessionKey) -> Option<String> {
        match self.lookup(session) {
            Ok(Some(s)) => s.home.slot.host_paths_unreachable(),
            _ => None,
        }
    }

    /// Why `grant` may not join the grants `session` already has (the operator's
    /// included): one of them could rewrite the other.
    pub fn grant_conflict(&self, session: &SessionKey, grant: &Grant) -> Option<GrantError> {
        let existing = match self.lookup(session) {
            Ok(Some(s)) => self.effective_grants(&s),
            _ => self.operator_grants.clone(),
        };
        crate::grants::conflict(&existing, grant)
    }

    /// The live grants a new worker of `session` binds: only those whose path still
    /// holds the object the person approved, and, where nothing can be hidden in it or
    /// left out of it, nothing more. A session grant that fails is revoked, an operator
    /// grant skipped, each with a warning. The second value says why a running worker
    /// must not go on: by host paths alone (no world of its own), it reaches whatever
    /// was mounted inside a granted directory since it started.
    pub(super) fn approved_grants(
        &self,
        session: &Session,
        starting: bool,
        warnings: &mut Vec<String>,
    ) -> (Vec<Grant>, Option<String>) {
        let mut out = Vec::new();
        let mut withdrawn = None;
        for grant in self.effective_grants(session) {
            let checked = crate::grants::check_still_approved(&grant).and_then(|()| {
                crate::grants::check_inside(
                    &grant,
                    &self.forbidden.rules,
                    self.grant_walls,
                    starting,
                )
                .inspect_err(|why| {
                    if self.grant_walls == crate::grants::GrantWalls::PathsOnly {
                        withdrawn = Some(format!("a grant was withdrawn ({why})"));
                    }
                })
            });
            match checked {
                Ok(()) => out.push(grant),
                Err(why) => {
                    tracing::warn!(session = %session.key, path = %grant.path.display(), %why, "grant not bound");
                    if let Ok(mut own) = session.grants.lock() {
                        own.retain(|g| g.path != grant.path);
                    }
                    let what = if grant.approved_by.starts_with("operator") {
                        "not applied"
                    } else {
                        "revoked"
                    };
                    warnings.push(format!(
                        "the grant for {} was {what}: {why}; ask for it again if it is still needed",
                        grant.path.display()
                    ));
                }
            }
        }
        (out, withdrawn)
    }

    /// The operator's grants whose objects are still the approved ones: what a new
    /// session's first worker binds, and so what a warm worker must have been started with.
    pub(super) fn approved_operator_grants(&self) -> Vec<Grant> {
        self.operator_grants
            .iter()
            .filter(|g| {
                crate::grants::check_still_approved(g).is_ok()
                    && crate::grants::check_inside(g, &self.forbidden.rules, self.grant_walls, true)
                        .is_ok()
            })
            .cloned()
            .collect()
    }

    /// Live grants for a session: the operator's and the session's own.
    pub fn effective_grants(&self, session: &Session) -> Vec<Grant> {
        let now = crate::grants::now_secs();
        let mut all: Vec<Grant> = self.operator_grants.clone();
        if let Ok(own) = session.grants.lock() {
            all.extend(own.iter().filter(|g| g.is_live(now)).cloned());
        }
        all
    }

    /// An existing live grant that already gives `access` to `path` in `session`.
    pub fn covering_grant(
        &self,
        session: &SessionKey,
        path: &Path,
        access: Access,
    ) -> Option<Grant> {
        let grants = match self.lookup(session).ok()? {
            Some(session) => self.effective_grants(&session),
            None => self.operator_grants.clone(),
        };
        grants.into_iter().find(|g| g.covers(path, access))
    }

    /// Records an approved grant and restarts the session's worker, since a sealed
    /// Landlock ruleset cannot be widened. Returns whether a running worker (and so its
    /// variables) was discarded.
    pub async fn add_grant(&self, session: &SessionKey, grant: Grant) -> Result<bool, ErrorInfo> {
        if let Some(conflict) = self.grant_conflict(session, &grant) {
            return Err(ErrorInfo::new("GrantConflict", conflict.to_string()));
        }
        // A session that does not exist yet is opened without a warm worker: its first
        // worker needs the grant.
        let session = self.open_session(session, false).await?;
        let mut state = session.state.lock().await;
        if state.closed {
            return Err(ErrorInfo::new(
                "SessionClosed",
                "the session was closed while the grant was being recorded; ask again",
            )
            .retryable());
        }
        {
            let mut grants = session
                .grants
                .lock()
                .map_err(|_| ErrorInfo::new("InternalError", "grant table poisoned"))?;
            // The same path with wider access replaces the narrower grant.
            grants.retain(|g| g.path != grant.path);
            grants.push(grant.clone());
        }
        let restarted = if session.drop_worker(&mut state).is_some() {
            state.lost_worker = Some(format!(
                "the sandbox was widened by a grant for {}",
                grant.path.display()
            ));
            true
        } else {
            false
        };
        Ok(restarted)
    }

    /// Every live grant of `owner`'s sessions, per session name ("*" for the
    /// operator's, which apply to all).
    pub fn list_grants(&self, owner: &Owner, only: Option<&str>) -> Vec<(String, Grant)> {
        let now = crate::grants::now_secs();
        let mut out: Vec<(String, Grant)> = self
            .operator_grants
            .iter()
            .map(|g| ("*".to_string(), g.clone()))
            .collect();
        let sessions: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| &s.key.owner == owner)
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        for s in sessions {
            if only.is_some_and(|o| o != s.name) {
                continue;
            }
            if let Ok(grants) = s.grants.lock() {
                out.extend(
                    grants
                        .iter()
                        .filter(|g| g.is_live(now))
                        .map(|g| (s.name.clone(), g.clone())),
                );
            }
        }
        out
    }

    /// When each session has its own uid, file permissions must let that uid reach a
    /// granted path too; says what is missing, if anything.
    pub fn permission_warning(
        &self,
        path: &Path,
        kind: PathKind,
        access: Access,
    ) -> Option<String> {
        if !self.enforcement().dedicated_uid_per_session {
            return None;
        }
        let mode = unix_mode(path)?;
        let need = match (kind, access) {
            (PathKind::Directory, Access::Read) => 0o005,
            (PathKind::Directory, Access::Write) => 0o007,
            (PathKind::File, Access::Read) => 0o004,
            (PathKind::File, Access::Write) => 0o006,
        };
        let parent_ok = path
            .parent()
            .is_none_or(|p| crate::worker::python::traversable_by_others(p).is_ok());
        if mode & need == need && parent_ok {
            return None;
        }
        Some(format!(
            "the sandboxed code runs as its own unprivileged uid, and the file permissions of {} (mode {:o}) or of a directory above it do not let other users {}; the grant is recorded, but the operating system will still refuse until permissions allow it (e.g. chmod o+{})",
            path.display(),
            mode & 0o7777,
            if access == Access::Write {
                "read and write it"
            } else {
                "read it"
            },
            if access == Access::Write { "rwx" } else { "rx" },
        ))
    }

    /// How a person can pre-approve paths when their client cannot ask them.
    pub fn pre_approval_hint(&self) -> String {
        let config = self
            .settings
            .config_file
            .clone()
            .or_else(crate::config::config_file_path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "the file named by WARDEN_CONFIG".to_string());
        format!(
            "start warden with `warden serve --allow-read PATH` or `--allow-write PATH`, or add \
             [[grants]] entries (path = \"...\", access = \"read\" | \"write\") to {config}"
        )
    }
}

/// The permission bits of `path` (dedicated uids, hence modes, exist only on Unix).
#[cfg(unix)]
fn unix_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(std::fs::metadata(path).ok()?.permissions().mode())
}

#[cfg(not(unix))]
fn unix_mode(_path: &Path) -> Option<u32> {
    None
}

impl SessionManager {
    /// The egress proxy, when the network is proxied.
    pub fn egress(&self) -> Option<&Arc<crate::egress::Egress>> {
        self.egress.as_ref()
    }

    /// Records a host the person granted `session` (opened if it does not exist yet, as
    /// for a path). The worker keeps running: the proxy reads the grant per connection.
    pub async fn add_host_grant(
        &self,
        session: &SessionKey,
        grant: crate::egress::grants::HostGrant,
    ) -> Result<(), ErrorInfo> {
        let Some(egress) = &self.egress else {
            return Err(ErrorInfo::new(
                "NoNetwork",
                "HOST_SANDBOX_NETWORK=deny: the sandbox has no network, so a host grant would change nothing",
            ));
        };
        let opened = self.open_session(session, true).await?;
        let state = opened.state.lock().await;
        if state.closed {
            return Err(ErrorInfo::new(
                "SessionClosed",
                "the session was closed while the grant was being recorded; ask again",
            )
            .retryable());
        }
        egress.grant_host(&session.to_string(), grant);
        Ok(())
    }

    /// Every live host grant of `owner`'s sessions, per session name.
    pub fn list_host_grants(
        &self,
        owner: &Owner,
        only: Option<&str>,
    ) -> Vec<(String, crate::egress::grants::HostGrant)> {
        let Some(egress) = &self.egress else {
            return Vec::new();
        };
        let sessions: Vec<Arc<Session>> = match self.sessions.lock() {
            Ok(map) => map
                .values()
                .filter(|s| &s.key.owner == owner && only.is_none_or(|o| o == s.name))
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        let mut out = Vec::new();
        for s in sessions {
            out.extend(
                egress
                    .host_grants(&s.key.to_string())
                    .into_iter()
                    .map(|g| (s.name.clone(), g)),
            );
        }
        out.sort_by(|a, b| (&a.0, &a.1.host, a.1.port).cmp(&(&b.0, &b.1.host, b.1.port)));
        out
    }
}
