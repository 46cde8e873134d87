//! The Linux walls. Each file owns one mechanism; `helper` composes them in order.
//!
//! - [`world`]: the plan of a worker's private world (pure, built on every platform:
//!   the policy carries it); [`mounts`] applies it and [`namespaces`] makes the
//!   namespaces and the PID-1 split it lives in.
//! - [`egress`]: the world's end of the egress proxy (a listener handed to the server).
//! - [`keeper`]: the process that holds every session's size-capped workspace tmpfs.
//! - [`landlock`], [`seccomp`], [`privileges`]: the walls inside the world (the
//!   rlimits are [`crate::sandbox::rlimits`]).
//! - [`supervisor`]: the server's end of the journal's filter (transactional calls).
//!
//! Everything but [`world`] exists in Linux builds only.

#[cfg(target_os = "linux")]
pub mod egress;
#[cfg(target_os = "linux")]
pub mod helper;
#[cfg(target_os = "linux")]
pub mod keeper;
#[cfg(target_os = "linux")]
pub mod landlock;
#[cfg(target_os = "linux")]
pub mod mounts;
#[cfg(target_os = "linux")]
pub mod namespaces;
#[cfg(target_os = "linux")]
pub mod privileges;
#[cfg(target_os = "linux")]
pub mod seccomp;
#[cfg(target_os = "linux")]
pub mod supervisor;
pub mod world;
