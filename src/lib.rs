//! warden: an MCP server that runs AI-written Python behind two independent walls, a
//! static AST guard and an operating-system sandbox.
//!
//! Layers, top to bottom: [`server`] (MCP tools over stdio) → [`session`] (per-session
//! workspace, guard, grants, audit) → [`backend`] (where workers run, and the worker
//! protocol) → [`sandbox`] (the host platform's walls and policy). [`config`] reads the
//! settings; [`provenance`] wraps every result.

pub mod audit;
pub mod backend;
pub mod config;
pub mod execution;
pub mod grants;
pub mod guard;
pub mod instances;
pub mod owner;
pub mod provenance;
pub mod sandbox;
pub mod selftest;
pub mod server;
pub mod session;
pub mod text;
pub mod workspace;

/// `N` bytes from the kernel's CSPRNG (nonces, instance names, uid ranges).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: getrandom writes at most the given length into the live buffer.
        let n = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), N - filled, 0) };
        if n > 0 {
            filled += n as usize;
        }
    }
    buf
}
