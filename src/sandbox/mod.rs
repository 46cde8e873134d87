//! The walls that confine a worker, per operating system: on the host (driven by
//! [`crate::backend::host`]) and, on Linux, inside a container (the Docker launcher runs
//! the same helper). What a worker is asked and answers lives in [`crate::worker`].
//!
//! - [`linux`]: the plan of a worker's private world (pure, every platform) and, on
//!   Linux, the walls (namespaces, Landlock, seccomp, privileges) and the helper stage
//!   that installs them before exec.
//! - [`macos`]: the policy as a deny-default Seatbelt profile and the `sandbox-exec`
//!   command line (pure builders, tested everywhere); `macos_helper` (macOS) applies
//!   them.
//! - [`rlimits`]: the resource limits per operating system (pure) and applying them.
//! - [`platform`]: what each operating system can and cannot enforce (pure).
//! - [`store`] (Unix): where workspaces live (the keeper's size-capped tmpfs, or host
//!   dirs).
//! - [`tmpfs_budget`]: what those tmpfs quotas may commit together (pure arithmetic and
//!   its ledger).

pub mod linux;
pub mod macos;
#[cfg(target_os = "macos")]
pub mod macos_helper;
pub mod platform;
pub mod rlimits;
#[cfg(unix)]
pub mod store;
pub mod tmpfs_budget;
pub mod uids;

/// Entry point of `warden __sandbox-exec`, the helper the host backend starts for each
/// worker: it confines itself with this platform's walls and execs the interpreter, or
/// reports why it refused. Never returns.
#[cfg(unix)]
pub fn run_helper_main() -> ! {
    #[cfg(target_os = "linux")]
    {
        linux::helper::run_helper_main()
    }
    #[cfg(target_os = "macos")]
    {
        macos_helper::run_helper_main()
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        crate::worker::helper::exit_refused(crate::worker::helper::refuse(
            "host_sandbox",
            platform::host_unsupported_reason(platform::HostOs::current()),
        ))
    }
}
