//! The worker contract every backend speaks, in one place: what a worker is given, how
//! it is spoken to, and what it answers. A backend starts a process that runs the
//! sandbox helper (`warden __sandbox-exec`, on the host or inside a container), hands it
//! a [`policy::WorkerPolicy`], reads back a [`report::SandboxReport`], and from then on
//! speaks the [`protocol`] with the Python program in [`WORKER_SOURCE`].
//!
//! - [`policy`]: what a worker may touch, as data (pure).
//! - [`python`]: finding the real interpreter and what it must read.
//! - [`helper`] (Unix): what the server and every platform's helper agree on (file
//!   descriptors, the helper's subcommand, its refusals).
//! - [`report`]: which walls stand, as the helper saw them.
//! - [`protocol`]: requests and responses over any four streams.
//! - [`capture`]: one call's output from one stream, between its markers.
//! - [`handle`]: a started worker, whatever backend started it; the process behind it
//!   is the backend's own.
//! - [`usage`]: what a worker's process tree uses, read from `/proc`.

pub mod capture;
pub mod handle;
#[cfg(unix)]
pub mod helper;
pub mod policy;
pub mod protocol;
pub mod python;
pub mod report;
#[cfg(unix)]
pub mod usage;
/// Where there is no `/proc` to read (Windows), no worker's usage is known.
#[cfg(not(unix))]
pub mod usage {
    pub fn of_tree(_pid: i32) -> Option<super::handle::Usage> {
        None
    }
}

/// The Python program each worker runs (see `worker.py`), passed with `-c` so that no
/// file outside the read-only runtime needs to be readable.
pub const WORKER_SOURCE: &str = include_str!("worker.py");
