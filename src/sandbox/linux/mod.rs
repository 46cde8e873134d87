//! The Linux walls. Each file owns one mechanism; `helper` composes them in order.
//!
//! - [`world`]: the plan of a worker's private world (pure); [`mounts`] applies it and
//!   [`namespaces`] makes the namespaces and the PID-1 split it lives in.
//! - [`keeper`]: the process that holds every session's size-capped workspace tmpfs.
//! - [`landlock`], [`seccomp`], [`rlimits`], [`privileges`]: the walls inside the world.

pub mod helper;
pub mod keeper;
pub mod landlock;
pub mod mounts;
pub mod namespaces;
pub mod privileges;
pub mod rlimits;
pub mod seccomp;
pub mod world;
