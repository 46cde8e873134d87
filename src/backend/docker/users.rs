//! Who a container runs as on the host (`SANDBOX_USER`), and why.
//!
//! A root server gives each session a uid (and gid) of its own from this instance's
//! range ([`UidPool`], the host backend's own kind: far above login uids and every
//! subordinate range, never an account's). The session's workspace is owned by it, so
//! no host process can reach it, and neither can another session's container. A warm
//! container is made with its own uid in a home of its own, so a new session takes it
//! as it is. The uid goes back to the range when its session closes.
//!
//! A server that is not root cannot give a workspace to another uid: its containers run
//! as its own uid and gid, and its workspaces are its own mode-0700 directories. Such a
//! server reaches the engine as a member of the `docker` group, which is root on this
//! machine through the engine anyway, so this keeps the other users out and the
//! server's user in, as it must. An explicit `UID:GID` pins every container to that one
//! identity: the workspaces are then shared with it, which selftest and the settings
//! report as a gap.

use crate::capability::Capability;
use crate::sandbox::uids::UidPool;
use crate::worker::policy::RunAs;

/// How this server's containers get their identity.
#[derive(Debug)]
pub enum Users {
    /// A uid of its own for each session (a root server, `SANDBOX_USER=auto`).
    PerSession(UidPool),
    /// One identity for every container, and why.
    Fixed { ids: (u32, u32), why: Fixed },
}

/// Why every container runs as one identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixed {
    /// `SANDBOX_USER=UID:GID`.
    Pinned,
    /// The server is not root: its own uid and gid.
    ServerOwn,
    /// No host uids on this platform (Windows): Docker Desktop maps ownership itself.
    NoHostUids,
}

/// What decides the identity, as the start-up saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// `SANDBOX_USER`; `None`: `auto`.
    pub configured: Option<(u32, u32)>,
    pub root: bool,
    /// The server's own uid and gid, where the platform has them.
    pub own: Option<(u32, u32)>,
}

/// The identity rule (pure): why every container runs as one identity, or `None` when
/// each session gets a uid of its own.
pub fn decide(facts: Facts) -> Option<Fixed> {
    match (facts.configured, facts.root, facts.own) {
        (Some(_), _, _) => Some(Fixed::Pinned),
        (None, true, Some(_)) => None,
        (None, false, Some(_)) => Some(Fixed::ServerOwn),
        (None, _, None) => Some(Fixed::NoHostUids),
    }
}

/// The `nobody` identity, used where the platform has no host uids.
const NOBODY: (u32, u32) = (65534, 65534);

impl Users {
    /// The identity rule applied: a fresh uid range for a root server left at `auto`.
    pub fn new(facts: Facts) -> Users {
        match decide(facts) {
            None => Users::PerSession(UidPool::pick()),
            Some(why) => Users::Fixed {
                ids: match why {
                    Fixed::Pinned => facts.configured.unwrap_or(NOBODY),
                    Fixed::ServerOwn => facts.own.unwrap_or(NOBODY),
                    Fixed::NoHostUids => NOBODY,
                },
                why,
            },
        }
    }

    /// The identity of a new session's container (released with [`Users::release`]).
    ///
    /// # Errors
    /// Every uid of the range is held by an open session.
    pub fn allocate(&self) -> std::io::Result<(u32, u32)> {
        match self {
            Users::PerSession(pool) => pool.allocate().map(|r| (r.uid, r.gid)),
            Users::Fixed { ids, .. } => Ok(*ids),
        }
    }

    pub fn release(&self, ids: (u32, u32)) {
        if let Users::PerSession(pool) = self {
            pool.release(RunAs {
                uid: ids.0,
                gid: ids.1,
            });
        }
    }

    pub fn per_session(&self) -> bool {
        matches!(self, Users::PerSession(_))
    }

    /// How a container's user is described in its wall.
    pub fn describe(&self, ids: (u32, u32)) -> String {
        let (uid, gid) = ids;
        match self {
            Users::PerSession(_) => format!("user {uid}:{gid} (this session's own)"),
            Users::Fixed { .. } => format!("user {uid}:{gid} (every session's)"),
        }
    }

    /// Why sessions do not each have a uid of their own, for selftest and the settings;
    /// `rootless_engine`: the engine runs as the server's user (rootless Podman), which
    /// gives the server no power over the machine.
    pub fn gap(&self, rootless_engine: bool) -> Option<Capability> {
        let Users::Fixed {
            ids: (uid, gid),
            why,
        } = self
        else {
            return None;
        };
        let reason = match why {
            Fixed::Pinned => format!(
                "SANDBOX_USER={uid}:{gid} pins every container to that identity: every session's workspace is owned by uid {uid}, so any host process running as uid {uid} can reach them all (through the containers' processes, /proc/PID/root) and signal those processes, and sessions share that uid's per-user limits (leave SANDBOX_USER at auto for a uid per session under a root server)"
            ),
            Fixed::ServerOwn if rootless_engine => format!(
                "the server is not root, so its containers run as its own uid and gid ({uid}:{gid}), kept inside by the rootless engine's user namespace (keep-id), and every workspace is its own mode-0700 directory: other users cannot reach them, and sessions share that uid's per-user limits outside the containers"
            ),
            Fixed::ServerOwn => format!(
                "the server is not root, so its containers run as its own uid and gid ({uid}:{gid}) and every workspace is its own mode-0700 directory: other users cannot reach them, and the server's user, who reaches the engine through the docker group, is root on this machine through it anyway"
            ),
            Fixed::NoHostUids => format!(
                "this platform has no host uids: containers run as {uid}:{gid} and Docker Desktop maps the workspaces' ownership itself"
            ),
        };
        Some(Capability {
            mechanism: "uid_per_session".into(),
            enforced: false,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_server_at_auto_gives_each_session_a_uid_of_its_own() {
        let facts = |configured, root, own| Facts {
            configured,
            root,
            own,
        };
        let me = Some((1000, 1000));
        assert_eq!(decide(facts(None, true, Some((0, 0)))), None);
        assert_eq!(decide(facts(None, false, me)), Some(Fixed::ServerOwn));
        assert_eq!(
            decide(facts(Some((5000, 5000)), true, Some((0, 0)))),
            Some(Fixed::Pinned)
        );
        let pinned = Some((5000, 5000));
        assert_eq!(decide(facts(pinned, false, me)), Some(Fixed::Pinned));
        assert_eq!(decide(facts(None, false, None)), Some(Fixed::NoHostUids));

        let users = Users::new(facts(None, true, Some((0, 0))));
        assert!(users.per_session() && users.gap(false).is_none());
        let (a, b) = (users.allocate().unwrap(), users.allocate().unwrap());
        assert_ne!(a, b, "two sessions, two uids");
        assert!(a.0 >= 1_000_000_000 && a.0 == a.1, "{a:?}");

        let own = Users::new(facts(None, false, me));
        assert_eq!(own.allocate().unwrap(), (1000, 1000));
        let gap = own.gap(false).unwrap().reason;
        assert!(
            gap.contains("not root") && gap.contains("docker group"),
            "{gap}"
        );
        let rootless = own.gap(true).unwrap().reason;
        assert!(
            rootless.contains("keep-id") && !rootless.contains("docker group"),
            "{rootless}"
        );
        let pinned = Users::new(facts(Some((5000, 5001)), true, Some((0, 0))));
        assert_eq!(pinned.allocate().unwrap(), (5000, 5001));
        let gap = pinned.gap(false).unwrap();
        assert!(!gap.enforced && gap.reason.contains("any host process running as uid 5000"));
    }
}
