//! brood and MCP, end to end: `brood mcp` driven by real MCP hosts (the official
//! Python SDK's 1.x and 2.x lines, `serve`), and brood's MCP client calling real MCP
//! servers for the model (`client`). One test binary (link time dominates a test
//! build), one module per side.
//!
//! `cargo test -p brood-cli --test mcp` runs both; the real-model round trips:
//! `cargo test -p brood-cli --test mcp -- --ignored --test-threads=1 e2e_`.

#[path = "../common/mod.rs"]
mod common;
mod python;

mod client;
mod serve;
