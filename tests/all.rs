//! Integration tests: the real `warden` binary, spoken to over MCP stdio by rmcp's
//! client. One test binary (faster to link); suites live in `suite/`.
//! Linux only: the suites drive the Linux walls (namespaces, setpriv, /proc) from the host
//! side. On macOS the same binary confines with Seatbelt; see `tests/macos.rs`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
