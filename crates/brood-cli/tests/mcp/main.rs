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
mod client_http;
mod serve;

/// The base URL of the local LLM server (`scripts/local-llm start`: starts it, or
/// finds it running), for the real-model round trips; fails the test, saying how to
/// run them, when it does not start.
fn local_llm_url() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(root.join("scripts/local-llm"))
        .arg("start")
        .output()
        .expect("run scripts/local-llm start");
    assert!(
        out.status.success(),
        "the local LLM server does not start; run scripts/e2e-local: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
