//! Integration tests: the real `warden` binary, spoken to over MCP stdio by rmcp's
//! client. One test binary (faster to link); suites live in `suite/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
