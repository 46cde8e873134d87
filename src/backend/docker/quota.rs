//! The per-session disk quota of the Docker backend (`SANDBOX_DISK_LIMIT`): the
//! workspace a container binds is a size-capped tmpfs that the server, as root, mounts
//! on the session's host directory, so the code gets ENOSPC at the limit and never fills
//! the host's disk, while the server keeps reading the workspace as a host directory.
//!
//! Docker cannot cap a bind mount, and cannot see the workspace keeper's tmpfs (it lives
//! in a mount namespace of its own), so this needs a mount the engine sees: only root
//! can make one, and only an engine in the server's mount namespace sees it. Both are
//! checked at start ([`super::query`]): otherwise the quota is reported as a gap. A
//! server on macOS or Windows has no such mount: there the quota is always a gap.

use std::path::Path;

#[cfg(target_os = "linux")]
use crate::sandbox::linux::keeper::{inodes_for, workspace_options};
#[cfg(target_os = "linux")]
use crate::worker::policy::RunAs;

/// Why a server on this platform cannot cap a Docker workspace, or `None` when it can
/// try (Linux: as root, with an engine in its mount namespace).
pub fn platform_gap() -> Option<String> {
    if cfg!(target_os = "linux") {
        None
    } else {
        Some(format!(
            "the server runs on {}: a size-capped tmpfs the engine sees needs a Linux server as root next to its engine (Docker Desktop's VM shares plain directories)",
            std::env::consts::OS
        ))
    }
}

/// How the Docker backend's workspaces are capped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quota {
    /// Each workspace is a tmpfs of this many bytes, bound into its container.
    Tmpfs { bytes: u64 },
    /// Each workspace is a tmpfs volume of this many bytes on the engine (an
    /// in-container workspace): the engine holds the cap.
    Volume { bytes: u64 },
    /// Plain host directories; why no quota stands.
    Unavailable(String),
}

impl Quota {
    /// The cap on one workspace, wherever it is held.
    pub fn bytes(&self) -> Option<u64> {
        match self {
            Quota::Tmpfs { bytes } | Quota::Volume { bytes } => Some(*bytes),
            Quota::Unavailable(_) => None,
        }
    }

    /// The size of the tmpfs this server mounts on each workspace directory, when it
    /// mounts one.
    pub fn host_tmpfs(&self) -> Option<u64> {
        match self {
            Quota::Tmpfs { bytes } => Some(*bytes),
            _ => None,
        }
    }
}

/// Mounts a tmpfs of `bytes` (and inodes in proportion) on `dir`, owned by `user`, mode
/// 0700; no devices, no set-id, nothing executable.
#[cfg(target_os = "linux")]
pub fn mount(dir: &Path, bytes: u64, user: (u32, u32)) -> std::io::Result<()> {
    let owner = RunAs {
        uid: user.0,
        gid: user.1,
    };
    let options = workspace_options(Some(owner), bytes, inodes_for(bytes));
    let options = std::ffi::CString::new(options)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    rustix::mount::mount(
        "tmpfs",
        dir,
        "tmpfs",
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOEXEC,
        Some(options.as_c_str()),
    )
    .map_err(std::io::Error::from)
}

/// Detaches the tmpfs on `dir` (its pages are freed once no container holds it); a
/// directory with nothing mounted on it is fine.
#[cfg(target_os = "linux")]
pub fn unmount(dir: &Path) -> std::io::Result<()> {
    match rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Lets the tmpfs on `dir` (a workspace of `quota` bytes) grow by at most `left` from
/// what it holds now (`None`: its whole quota again). The container sees the same
/// tmpfs, so its writes fail past the new size.
#[cfg(target_os = "linux")]
pub fn narrow(dir: &Path, quota: u64, left: Option<u64>) -> std::io::Result<()> {
    let size = match left {
        None => quota,
        Some(left) => crate::caps::narrowed_size(quota, crate::caps::used_bytes(dir)?, left),
    };
    let options = std::ffi::CString::new(format!("size={size}"))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    rustix::mount::mount_remount(
        dir,
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOEXEC,
        options.as_c_str(),
    )
    .map_err(std::io::Error::from)
}

/// No tmpfs on this platform: nothing to narrow.
#[cfg(not(target_os = "linux"))]
pub fn narrow(_dir: &Path, _quota: u64, _left: Option<u64>) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        platform_gap().unwrap_or_default(),
    ))
}

/// No tmpfs on this platform (see [`platform_gap`]).
#[cfg(not(target_os = "linux"))]
pub fn mount(_dir: &Path, _bytes: u64, _user: (u32, u32)) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        platform_gap().unwrap_or_default(),
    ))
}

/// Nothing is ever mounted on this platform.
#[cfg(not(target_os = "linux"))]
pub fn unmount(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// What the start-up query saw at `/workspace`, judged: the quota stands only when the
/// container saw this very tmpfs (the marker the server wrote into it) at its size.
/// Under a user-space kernel (`gofer`: gVisor) the container sees the host's file
/// system through the Sentry's own file system, whose type is not tmpfs but whose size
/// is the host tmpfs's: the size and the marker then decide.
pub fn judge(
    expected_marker: &str,
    bytes: u64,
    seen: &super::query::WorkspaceSeen,
    gofer: bool,
) -> Result<Quota, String> {
    if seen.marker.as_deref() != Some(expected_marker) {
        return Err(
            "the engine does not see this server's mounts (it runs in another mount namespace or on another machine), so a tmpfs the server mounts is not what a container would write to"
                .into(),
        );
    }
    // tmpfs rounds its size up to whole pages.
    let page = 1 << 16;
    if !(seen.tmpfs || gofer) || seen.bytes < bytes || seen.bytes > bytes + page {
        return Err(format!(
            "the container saw a workspace of {} bytes (tmpfs: {}), not the {bytes}-byte tmpfs the server mounted",
            seen.bytes, seen.tmpfs
        ));
    }
    Ok(Quota::Tmpfs { bytes })
}

#[cfg(test)]
mod tests {
    use super::super::query::WorkspaceSeen;
    use super::*;

    #[test]
    fn the_quota_stands_only_when_the_container_saw_the_servers_tmpfs() {
        let seen = |marker: Option<&str>, tmpfs, bytes| WorkspaceSeen {
            tmpfs,
            bytes,
            marker: marker.map(str::to_string),
        };
        let mib = 1 << 20;
        assert_eq!(
            judge("m1", mib, &seen(Some("m1"), true, mib), false),
            Ok(Quota::Tmpfs { bytes: mib })
        );
        // Another mount namespace: the container saw the empty directory beneath.
        assert!(
            judge("m1", mib, &seen(None, false, 50 << 30), false)
                .unwrap_err()
                .contains("mount namespace")
        );
        assert!(judge("m1", mib, &seen(Some("m0"), true, mib), false).is_err());
        // The right directory but not a capped tmpfs of that size.
        assert!(judge("m1", mib, &seen(Some("m1"), false, mib), false).is_err());
        assert!(judge("m1", mib, &seen(Some("m1"), true, 8 * mib), false).is_err());
        // gVisor: its own file system's type over the host tmpfs, at the tmpfs's size.
        assert_eq!(
            judge("m1", mib, &seen(Some("m1"), false, mib), true),
            Ok(Quota::Tmpfs { bytes: mib })
        );
        assert!(judge("m1", mib, &seen(Some("m1"), false, 8 * mib), true).is_err());
    }
}
