//! Applies a [`WorldPlan`]: the only code that mounts anything. Runs in the helper's
//! child, PID 1 of its PID namespace, holding capabilities in its user namespace.
//!
//! Every bind of the runtime and the session's own places is recursive (mounts that
//! came from a more privileged namespace are locked and can only be bound whole); a
//! grant's is not: it brings in exactly one file system, and when other file systems
//! are mounted inside it the kernel refuses (EINVAL), so the grant is not bound. Each
//! bind is then remounted with the flags it must have: read-only unless writable,
//! always `nosuid` and `nodev`, `noexec` on everything the code can write; the flags
//! the kernel locked on the source are carried over (a remount in a user namespace may
//! not clear them), as bubblewrap does. Inside a granted directory, every entry the
//! never-grant rules name (`.git`, credentials, shell start-up files, git directories
//! by content) is covered by an empty, read-only mount.

use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use rustix::fs::StatVfsMountFlags;
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use crate::grants::open_no_symlinks;
use crate::sandbox::linux::world::{BindMode, Kind, MountStep, ObjectId, WorldPlan};

/// Builds the world of `plan` on the empty directory `root_mount` and moves into it.
///
/// # Errors
/// The step that failed and why; a grant whose object changed says so.
pub fn enter_world(plan: &WorldPlan, root_mount: &Path) -> Result<(), String> {
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| format!("making the mount namespace private: {e}"))?;
    for step in &plan.steps {
        apply(step, root_mount)?;
    }
    Ok(())
}

fn inside(root: &Path, target: &Path) -> PathBuf {
    root.join(target.strip_prefix("/").unwrap_or(target))
}

fn apply(step: &MountStep, root: &Path) -> Result<(), String> {
    match step {
        MountStep::Tmpfs { target, options } => {
            let at = inside(root, target);
            if target != Path::new("/") {
                make_dir(&at)?;
            }
            let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
            let data = std::ffi::CString::new(options.as_str()).map_err(|e| e.to_string())?;
            rustix::mount::mount("tmpfs", &at, "tmpfs", flags, Some(data.as_c_str()))
                .map_err(|e| format!("tmpfs on {}: {e}", target.display()))
        }
        MountStep::Dir { target } => make_dir(&inside(root, target)),
        MountStep::Symlink { target, link } => {
            let at = inside(root, target);
            if let Some(parent) = at.parent() {
                make_dir(parent)?;
            }
            std::os::unix::fs::symlink(link, &at)
                .map_err(|e| format!("symlink {} -> {}: {e}", target.display(), link.display()))
        }
        MountStep::Bind {
            source,
            target,
            kind,
            mode,
        } => {
            let at = inside(root, target);
            mount_point(&at, *kind)?;
            rustix::mount::mount_bind_recursive(source, &at).map_err(|e| {
                format!("binding {} on {}: {e}", source.display(), target.display())
            })?;
            restrict(&at, *mode).map_err(|e| format!("{}: {e}", target.display()))
        }
        MountStep::BindGrant {
            source,
            kind,
            writable,
            approved,
        } => bind_grant(root, source, *kind, *writable, *approved),
        MountStep::Proc { target } => {
            let at = inside(root, target);
            make_dir(&at)?;
            rustix::mount::mount(
                "proc",
                &at,
                "proc",
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                Some(c"subset=pid"),
            )
            .map_err(|e| format!("proc on {}: {e}", target.display()))
        }
        MountStep::PivotRoot => pivot_into(root),
        MountStep::RemountRootReadOnly => rustix::mount::mount_remount(
            "/",
            MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
            "",
        )
        .map_err(|e| format!("making the world's root read-only: {e}")),
    }
}

/// The grant's object, opened without following any symlink, must still be the one the
/// person approved; exactly that descriptor is bound, so nothing can be swapped between
/// the check and the mount.
fn bind_grant(
    root: &Path,
    source: &Path,
    kind: Kind,
    writable: bool,
    approved: ObjectId,
) -> Result<(), String> {
    let fd = open_no_symlinks(source).map_err(|e| {
        format!(
            "grant {}: no longer opens without following a symlink ({e}); it is not bound",
            source.display()
        )
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("grant {}: {e}", source.display()))?;
    if st.st_dev != approved.dev || st.st_ino != approved.ino {
        return Err(format!(
            "grant {}: the object there is no longer the one the person approved; it is not bound",
            source.display()
        ));
    }
    let at = inside(root, source);
    mount_point(&at, kind)?;
    let by_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    rustix::mount::mount_bind(by_fd.as_str(), &at).map_err(|e| match e {
        rustix::io::Errno::INVAL => format!(
            "grant {}: other file systems are mounted inside it, and the kernel binds it \
             only together with them; it is not bound (ask for a directory that holds no \
             other mount)",
            source.display()
        ),
        e => format!("binding grant {}: {e}", source.display()),
    })?;
    let mode = if writable {
        BindMode::ReadWrite
    } else {
        BindMode::ReadOnly
    };
    restrict(&at, mode).map_err(|e| format!("grant {}: {e}", source.display()))?;
    if kind == Kind::Dir {
        hide_inside(&at)
            .map_err(|e| format!("grant {}: {e}; it is not bound", source.display()))?;
    }
    Ok(())
}

/// Covers every entry of the bound directory `at` that the never-grant rules name with
/// an empty, read-only mount, found by walking the bound tree itself (so what appeared
/// since consent is covered too).
fn hide_inside(at: &Path) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags};
    let rules = crate::grants::NeverGrant::embedded().map_err(|e| e.to_string())?;
    let dir = rustix::fs::open(
        at,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("opening the bound directory: {e}"))?;
    let masks = crate::grants::scan::scan(dir.as_fd(), &rules, &[], &crate::grants::scan::LIMITS)
        .map_err(|e| e.to_string())?;
    for mask in &masks {
        hide(dir.as_fd(), mask).map_err(|e| format!("hiding {}: {e}", mask.rel.display()))?;
    }
    Ok(())
}

/// Mounts over one entry beneath `dir`, reached without following any link or leaving
/// the grant's file system: a read-only tmpfs over a directory; over anything else a
/// read-only, `nodev` bind of `/dev/null`, which can then not be opened at all.
fn hide(dir: std::os::fd::BorrowedFd<'_>, mask: &crate::grants::scan::Mask) -> Result<(), String> {
    use crate::grants::scan::MaskKind;
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use rustix::mount::{MoveMountFlags, OpenTreeFlags};
    let target = rustix::fs::openat2(
        dir,
        &mask.rel,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
    )
    .map_err(|e| e.to_string())?;
    let is_dir = rustix::fs::FileType::from_raw_mode(
        rustix::fs::fstat(&target)
            .map_err(|e| e.to_string())?
            .st_mode,
    ) == rustix::fs::FileType::Directory;
    if is_dir != (mask.kind == MaskKind::Dir) {
        return Err("it changed while it was being hidden".to_string());
    }
    let at = format!("/proc/self/fd/{}", target.as_raw_fd());
    if is_dir {
        return rustix::mount::mount(
            "tmpfs",
            at.as_str(),
            "tmpfs",
            MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            Some(c"size=4k,nr_inodes=2,mode=0555"),
        )
        .map_err(|e| e.to_string());
    }
    let null = rustix::mount::open_tree(
        rustix::fs::CWD,
        "/dev/null",
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(|e| format!("cloning /dev/null: {e}"))?;
    rustix::mount::move_mount(
        &null,
        "",
        &target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| e.to_string())?;
    // The clone is attached now: its descriptor names exactly the new mount.
    restrict(
        Path::new(&format!("/proc/self/fd/{}", null.as_raw_fd())),
        BindMode::ReadOnly,
    )
}

/// Remounts the bind at `at` with the flags its [`BindMode`] asks for, always
/// `nosuid`, keeping the flags the kernel locked on it.
fn restrict(at: &Path, mode: BindMode) -> Result<(), String> {
    let current = rustix::fs::statvfs(at).map_err(|e| format!("statvfs: {e}"))?;
    let flags = remount_flags(mode, current.f_flag);
    rustix::mount::mount_remount(at, flags, "").map_err(|e| format!("remount ({flags:?}): {e}"))
}

/// The flags of a bind's remount: what `mode` asks for, plus every flag already set
/// (a user namespace may not clear the locked ones, and clearing none is simplest).
/// Pure.
pub fn remount_flags(mode: BindMode, current: StatVfsMountFlags) -> MountFlags {
    let mut flags = MountFlags::BIND | MountFlags::NOSUID;
    let (read_only, no_exec, no_dev) = match mode {
        BindMode::Runtime => (true, false, true),
        BindMode::ReadOnly => (true, true, true),
        BindMode::ReadWrite => (false, true, true),
        BindMode::Device => (true, true, false),
    };
    if read_only || current.contains(StatVfsMountFlags::RDONLY) {
        flags |= MountFlags::RDONLY;
    }
    if no_exec || current.contains(StatVfsMountFlags::NOEXEC) {
        flags |= MountFlags::NOEXEC;
    }
    if no_dev || current.contains(StatVfsMountFlags::NODEV) {
        flags |= MountFlags::NODEV;
    }
    flags | atime_flags(current)
}

/// The access-time flags of a mount, which a remount in a user namespace must repeat.
/// Pure.
pub fn atime_flags(current: StatVfsMountFlags) -> MountFlags {
    let mut flags = MountFlags::empty();
    if current.contains(StatVfsMountFlags::NOATIME) {
        flags |= MountFlags::NOATIME;
    } else if current.contains(StatVfsMountFlags::RELATIME) {
        flags |= MountFlags::RELATIME;
    } else {
        flags |= MountFlags::STRICTATIME;
    }
    if current.contains(StatVfsMountFlags::NODIRATIME) {
        flags |= MountFlags::NODIRATIME;
    }
    flags
}

fn make_dir(path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("mkdir {}: {e}", path.display()))
}

fn mount_point(at: &Path, kind: Kind) -> Result<(), String> {
    match kind {
        Kind::Dir => make_dir(at),
        Kind::File => {
            if let Some(parent) = at.parent() {
                make_dir(parent)?;
            }
            use std::os::unix::fs::OpenOptionsExt;
            // Never through a symlink: a mount point is made, not looked up.
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_NOFOLLOW)
                .open(at)
                .map(drop)
                .map_err(|e| format!("mount point {}: {e}", at.display()))
        }
    }
}

/// `pivot_root(".", ".")` then a lazy unmount of the old root: the host's tree is gone
/// from this mount namespace (pivot_root(2) documents the idiom).
fn pivot_into(root: &Path) -> Result<(), String> {
    std::env::set_current_dir(root).map_err(|e| format!("chdir {}: {e}", root.display()))?;
    rustix::process::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH)
        .map_err(|e| format!("detaching the old root: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_get_the_flags_of_their_use_and_keep_locked_ones() {
        let none = StatVfsMountFlags::RELATIME;
        let base = MountFlags::BIND | MountFlags::NOSUID | MountFlags::RELATIME;
        assert_eq!(
            remount_flags(BindMode::Runtime, none),
            base | MountFlags::RDONLY | MountFlags::NODEV
        );
        assert_eq!(
            remount_flags(BindMode::ReadWrite, none),
            base | MountFlags::NOEXEC | MountFlags::NODEV
        );
        assert_eq!(
            remount_flags(BindMode::Device, none),
            base | MountFlags::RDONLY | MountFlags::NOEXEC
        );
        // A source already nodev (locked) stays so, even for a device.
        assert!(
            remount_flags(BindMode::Device, none | StatVfsMountFlags::NODEV)
                .contains(MountFlags::NODEV)
        );
    }

    #[test]
    fn access_time_flags_are_carried_over() {
        assert_eq!(
            atime_flags(StatVfsMountFlags::RELATIME),
            MountFlags::RELATIME
        );
        assert_eq!(
            atime_flags(StatVfsMountFlags::NOATIME | StatVfsMountFlags::NODIRATIME),
            MountFlags::NOATIME | MountFlags::NODIRATIME
        );
        assert_eq!(
            atime_flags(StatVfsMountFlags::empty()),
            MountFlags::STRICTATIME
        );
    }
}
