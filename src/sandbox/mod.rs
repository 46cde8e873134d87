//! The host platform's sandbox: what confines one host worker (driven by
//! [`crate::backend::host`]).
//!
//! - [`policy`]: what a worker may touch, as data (pure).
//! - [`python`]: finding the real interpreter and what it must read.
//! - [`linux`]: the walls (Landlock, seccomp, rlimits, namespaces, privileges) and the
//!   helper stage that installs them before exec.
//! - [`report`]: which walls stand, as the helper saw them.
//! - [`store`]: where workspaces live (the keeper's size-capped tmpfs, or host dirs).
//! - [`macos`], [`windows`]: the same policy as an SBPL profile and a job-object plan
//!   (pure builders; the platform glue that applies them is not in this build).

pub mod linux;
pub mod macos;
pub mod policy;
pub mod python;
pub mod report;
pub mod store;
pub mod uids;
pub mod windows;

/// The Python program each worker runs (see `worker.py`), passed with `-c` so that no
/// file outside the read-only runtime needs to be readable.
pub const WORKER_SOURCE: &str = include_str!("worker.py");
