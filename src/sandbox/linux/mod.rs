//! The Linux walls. Each file owns one mechanism; `helper` composes them in order.

pub mod helper;
pub mod landlock;
pub mod rlimits;
pub mod seccomp;
