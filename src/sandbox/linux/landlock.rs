//! Landlock: which filesystem trees the worker may read, write or execute, and the
//! network/scope rights it loses. [`filesystem_rules`] is the pure policy builder;
//! [`restrict_current_thread`] applies it in the single-threaded helper, and reports the
//! enforcement status instead of silently accepting a partial ruleset.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::config::NetworkMode;
use crate::sandbox::linux::world::{FsView, ObjectId};

/// The ABI whose rights warden relies on: truncate (3), TCP (4), device ioctl (5),
/// abstract-socket and signal scoping (6). Kernels below it leave gaps that are reported.
pub const TARGET_ABI: ABI = ABI::V6;

/// What one rule grants, in warden's own vocabulary (mapped to Landlock rights at apply
/// time, so that tests can compare whole rule lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsGrant {
    /// Execute and read one file: the interpreter and its ELF loader.
    ExecuteFile,
    /// Read a whole tree.
    ReadTree,
    /// Read one file.
    ReadFile,
    /// Read and write one device file such as /dev/null.
    ReadWriteFile,
    /// Read and write a tree, create files, directories and symlinks in it, but never
    /// execute from it or create device nodes, sockets or FIFOs.
    WriteTree,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRule {
    pub path: PathBuf,
    pub grant: FsGrant,
}

/// Builds the filesystem rule list for what a worker sees. Pure.
pub fn filesystem_rules(view: &FsView) -> Vec<FsRule> {
    let rule = |grant: FsGrant| {
        move |p: &PathBuf| FsRule {
            path: p.clone(),
            grant,
        }
    };
    let mut rules: Vec<FsRule> = view
        .executables
        .iter()
        .map(rule(FsGrant::ExecuteFile))
        .collect();
    rules.extend(view.read_dirs.iter().map(rule(FsGrant::ReadTree)));
    rules.extend(view.read_files.iter().map(rule(FsGrant::ReadFile)));
    rules.extend(view.write_dirs.iter().map(rule(FsGrant::WriteTree)));
    rules.extend(view.write_files.iter().map(rule(FsGrant::ReadWriteFile)));
    rules
}

fn access_for(grant: FsGrant) -> BitFlags<AccessFs> {
    let all = AccessFs::from_all(TARGET_ABI);
    match grant {
        FsGrant::ExecuteFile => AccessFs::Execute | AccessFs::ReadFile,
        FsGrant::ReadTree => AccessFs::ReadFile | AccessFs::ReadDir,
        FsGrant::ReadFile => AccessFs::ReadFile.into(),
        FsGrant::ReadWriteFile => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
        FsGrant::WriteTree => {
            all & !(AccessFs::Execute
                | AccessFs::MakeChar
                | AccessFs::MakeBlock
                | AccessFs::MakeSock
                | AccessFs::MakeFifo)
        }
    }
}

/// The outcome of applying the ruleset, for the sandbox report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockOutcome {
    pub fully_enforced: bool,
    pub kernel_abi: Option<i32>,
    pub detail: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error(
        "Landlock is not available on this kernel ({0}); the filesystem wall cannot be installed"
    )]
    Unavailable(String),
    #[error("building the Landlock ruleset failed: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("{0}; the worker was not started")]
    GrantChanged(String),
}

/// Applies the worker's Landlock ruleset to the calling thread (and, through execve, to
/// the interpreter). Sets no_new_privs.
///
/// # Errors
/// [`LandlockError::Unavailable`] when the kernel has no Landlock at all; any other
/// failure to build or apply the ruleset.
pub fn restrict_current_thread(
    view: &FsView,
    network: NetworkMode,
) -> Result<LandlockOutcome, LandlockError> {
    let rules = filesystem_rules(view);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))?;
    // Every TCP bind and connect is denied, a second wall behind seccomp and the network
    // namespace, except a connect to the egress proxy's port when the network is proxied.
    ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI))?;
    let ruleset = ruleset.scope(Scope::from_all(TARGET_ABI))?;
    let mut created = ruleset.create()?.no_new_privs(true);
    if network.proxied() {
        created = created.add_rule(NetPort::new(
            crate::egress::PROXY_PORT,
            AccessNet::ConnectTcp,
        ))?;
    }
    let mut skipped = Vec::new();
    for rule in &rules {
        let fd = match open_rule_path(view, &rule.path) {
            Ok(fd) => fd,
            Err(Refused::Missing) => {
                // A missing path grants nothing: fail-closed by construction.
                skipped.push(rule.path.display().to_string());
                continue;
            }
            Err(Refused::Changed(why)) => return Err(LandlockError::GrantChanged(why)),
        };
        created = created.add_rule(PathBeneath::new(fd, access_for(rule.grant)))?;
    }
    let status = created.restrict_self()?;
    let kernel_abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => Some(kernel_abi.unwrap_or(effective_abi as i32)),
        _ => None,
    };
    match status.ruleset {
        RulesetStatus::NotEnforced => {
            Err(LandlockError::Unavailable(format!("{:?}", status.landlock)))
        }
        RulesetStatus::FullyEnforced => Ok(LandlockOutcome {
            fully_enforced: true,
            kernel_abi,
            detail: format!(
                "enforced (ABI {}): read-only runtime, read-write workspace, no execute outside the interpreter{}",
                kernel_abi.unwrap_or(0),
                skipped_note(&skipped)
            ),
        }),
        RulesetStatus::PartiallyEnforced => Ok(LandlockOutcome {
            fully_enforced: false,
            kernel_abi,
            detail: format!(
                "partially enforced: kernel ABI {} lacks rights of ABI {} ({}){}",
                kernel_abi.unwrap_or(0),
                TARGET_ABI as i32,
                abi_gaps(kernel_abi.unwrap_or(0)).join(", "),
                skipped_note(&skipped)
            ),
        }),
    }
}

enum Refused {
    Missing,
    Changed(String),
}

/// Opens a rule's path: a grant without following any symlink and only if it is still
/// the approved object; anything else as Landlock's own `PathFd` does.
fn open_rule_path(view: &FsView, path: &std::path::Path) -> Result<OwnedFd, Refused> {
    let Some((_, approved)) = view.checked.iter().find(|(p, _)| p == path) else {
        return rustix::fs::open(
            path,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|_| Refused::Missing);
    };
    let fd = crate::grants::open_no_symlinks(path).map_err(|e| {
        Refused::Changed(format!(
            "grant {}: no longer opens without following a symlink ({e})",
            path.display()
        ))
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Refused::Changed(e.to_string()))?;
    if (ObjectId {
        dev: st.st_dev,
        ino: st.st_ino,
    }) != *approved
    {
        return Err(Refused::Changed(format!(
            "grant {}: the object there is no longer the one the person approved",
            path.display()
        )));
    }
    if view.unmasked_grants
        && rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
    {
        // By host paths a rule reaches through every mount inside the directory, and
        // nothing in it can be hidden: such a directory is not granted.
        let rules =
            crate::grants::NeverGrant::embedded().map_err(|e| Refused::Changed(e.to_string()))?;
        crate::grants::inspect(
            path,
            fd.as_fd(),
            &rules,
            crate::grants::GrantWalls::PathsOnly,
        )
        .map_err(|e| {
            Refused::Changed(format!("grant {}: {e}; it is not granted", path.display()))
        })?;
    }
    Ok(fd)
}

fn skipped_note(skipped: &[String]) -> String {
    if skipped.is_empty() {
        String::new()
    } else {
        format!("; absent paths not granted: {}", skipped.join(", "))
    }
}

/// What an older kernel's Landlock cannot restrict. Pure.
pub fn abi_gaps(kernel_abi: i32) -> Vec<&'static str> {
    let mut gaps = Vec::new();
    if kernel_abi < 2 {
        gaps.push("cross-directory rename/link (denied outright)");
    }
    if kernel_abi < 3 {
        gaps.push("truncate");
    }
    if kernel_abi < 4 {
        gaps.push("TCP bind/connect (seccomp still denies sockets)");
    }
    if kernel_abi < 5 {
        gaps.push("device ioctl");
    }
    if kernel_abi < 6 {
        gaps.push("abstract UNIX socket and signal scoping (seccomp compensates)");
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> FsView {
        crate::worker::policy::example_policy(NetworkMode::Deny).host_view
    }

    #[test]
    fn rules_grant_exactly_the_runtime_and_the_session() {
        let rules = filesystem_rules(&view());
        let expect = vec![
            FsRule {
                path: "/usr/bin/python3.11".into(),
                grant: FsGrant::ExecuteFile,
            },
            FsRule {
                path: "/usr/lib64/ld-linux-x86-64.so.2".into(),
                grant: FsGrant::ExecuteFile,
            },
            FsRule {
                path: "/usr/lib".into(),
                grant: FsGrant::ReadTree,
            },
            FsRule {
                path: "/etc/ld.so.cache".into(),
                grant: FsGrant::ReadFile,
            },
            FsRule {
                path: "/w/workspace".into(),
                grant: FsGrant::WriteTree,
            },
            FsRule {
                path: "/w/tmp".into(),
                grant: FsGrant::WriteTree,
            },
            FsRule {
                path: "/dev/null".into(),
                grant: FsGrant::ReadWriteFile,
            },
        ];
        assert_eq!(rules, expect);
    }

    #[test]
    fn writable_trees_are_never_executable() {
        let write = access_for(FsGrant::WriteTree);
        assert!(!write.contains(AccessFs::Execute));
        assert!(!write.contains(AccessFs::MakeChar));
        assert!(!write.contains(AccessFs::MakeSock));
        assert!(write.contains(AccessFs::WriteFile));
        assert!(write.contains(AccessFs::MakeSym));
        let read = access_for(FsGrant::ReadTree);
        assert!(!read.contains(AccessFs::Execute));
        assert!(!read.contains(AccessFs::WriteFile));
    }

    #[test]
    fn gaps_shrink_as_the_abi_grows() {
        assert_eq!(abi_gaps(6), Vec::<&str>::new());
        assert_eq!(abi_gaps(5).len(), 1);
        assert!(abi_gaps(2).contains(&"truncate"));
    }
}
