//! The MCP client: tools of the user's MCP servers (`[mcp_servers.<name>]`,
//! a trusted workspace's `.mcp.json`) offered to brood's runs as
//! `mcp__<server>__<tool>`, through the official Rust SDK (`rmcp`).
//!
//! [`McpServers::start`] starts every enabled server of a session at once, when
//! the session opens (a model must see the tools in its first request, so their
//! schemas are needed before any run), each bounded by its start-up timeout. A
//! server that fails to start is a warning naming it; the session goes on
//! without its tools. The servers' connections belong to the session: every run
//! of the tree calls the same [`McpTool`] objects, so a server has one connection
//! (one process) per session, its calls multiplexed over it; one that dies is
//! started again on its next call (the `conn` module), and listed again: runs
//! opened after that get its new tool list (names, schemas, read-only marks),
//! and a tool it no longer offers is refused by name to the runs that still hold
//! it.
//!
//! Which runs get which tools is the grant's business (`subagent::grant`): a tool
//! is read-only — offered to the read-only roles — when the server marks it
//! `readOnlyHint: true` or the user lists it in `read_only_tools`.

mod conn;
pub mod dot_json;
mod http;
pub mod spec;
mod tool;

pub use conn::{LaunchEnv, Server, STDERR_TAIL_BYTES};
pub use spec::{Launch, McpServerConfig, McpServerSpec, SpecProblem};
pub use tool::{is_mcp_tool, mcp_tool_name, McpTool, MAX_TOOL_NAME, MCP_PREFIX};

use super::Tool;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// The tools of `servers` from their current listings: names that are taken,
/// too long or already another server's are left out (with a warning into
/// `warnings`, when given).
fn build(
    servers: &[Arc<Server>],
    taken: &BTreeSet<String>,
    mut warnings: Option<&mut Vec<String>>,
) -> Built {
    let mut out = Built {
        generations: servers.iter().map(|s| s.generation()).collect(),
        ..Built::default()
    };
    let mut names = taken.clone();
    let mut warn = |w: String| {
        if let Some(ws) = warnings.as_mut() {
            ws.push(w);
        }
    };
    for server in servers {
        let spec = server.spec();
        let (edition, listed) = server.listed();
        for entry in listed.iter() {
            let Some(remote) = entry.get("name").and_then(Value::as_str) else {
                continue;
            };
            let name = mcp_tool_name(server.name(), remote);
            if name.len() > MAX_TOOL_NAME {
                warn(format!(
                    "MCP server '{}': tool {remote:?} left out: {name} is longer than the \
                     {MAX_TOOL_NAME} bytes a tool name may have (shorten the server's name)",
                    server.name()
                ));
                continue;
            }
            if !names.insert(name.clone()) {
                warn(format!(
                    "MCP server '{}': tool {remote:?} left out: the name {name} is taken",
                    server.name()
                ));
                continue;
            }
            if is_read_only(spec, entry, remote) {
                out.read_only.insert(name.clone());
            }
            out.tools.push(Arc::new(McpTool::new(
                server.clone(),
                remote,
                entry,
                edition,
            )));
        }
        if !listed.is_empty() {
            for t in &spec.read_only_tools {
                let offered = listed
                    .iter()
                    .any(|e| e.get("name").and_then(Value::as_str) == Some(t.as_str()));
                if !offered {
                    warn(format!(
                        "MCP server '{}': read_only_tools names {t:?}, which the server does not offer",
                        server.name()
                    ));
                }
            }
        }
    }
    out
}

/// The server marks it `readOnlyHint: true`.
fn read_only_hint(entry: &Value) -> bool {
    entry
        .pointer("/annotations/readOnlyHint")
        .and_then(Value::as_bool)
        == Some(true)
}

/// Read-only roles may get it: the hint, or the user's `read_only_tools`.
fn is_read_only(spec: &McpServerSpec, entry: &Value, remote: &str) -> bool {
    read_only_hint(entry) || spec.read_only_tools.iter().any(|t| t == remote)
}

/// `server`'s tools in `built`, as `brood mcp list` shows them.
fn infos(server: &Arc<Server>, built: &Built) -> Vec<ToolInfo> {
    server
        .listed()
        .1
        .iter()
        .filter_map(|entry| {
            let remote = entry.get("name").and_then(Value::as_str)?;
            let name = mcp_tool_name(server.name(), remote);
            // Only the ones offered (not left out for their name).
            built.tools.iter().find(|t| t.name() == name)?;
            Some(ToolInfo {
                read_only: built.read_only.contains(&name),
                read_only_hint: read_only_hint(entry),
                remote: remote.to_string(),
                name,
            })
        })
        .collect()
}

/// One tool of a started server, as `brood mcp list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolInfo {
    /// The name runs call it by (`mcp__<server>__<tool>`).
    pub name: String,
    /// The server's name for it.
    pub remote: String,
    /// The server marks it `readOnlyHint: true`.
    pub read_only_hint: bool,
    /// Read-only roles get it (the hint, or `read_only_tools`).
    pub read_only: bool,
}

/// How one server's start went.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// Started; these are its tools.
    Ready {
        /// Its tools.
        tools: Vec<ToolInfo>,
    },
    /// It did not start (why); its tools are not offered.
    Failed {
        /// Why, in words.
        error: String,
    },
}

/// A server and how its start went.
#[derive(Debug, Clone, Serialize)]
pub struct ServerReport {
    /// Its name.
    pub name: String,
    /// Started or not.
    #[serde(flatten)]
    pub state: ServerState,
}

/// The MCP servers of one session and the tools they offer.
#[derive(Default)]
pub struct McpServers {
    servers: Vec<Arc<Server>>,
    /// Names MCP tools may not take (built-in, delegation, the embedder's).
    taken: BTreeSet<String>,
    /// The tools as of the servers' listings (`generations`).
    current: Mutex<Built>,
    reports: Vec<ServerReport>,
    warnings: Vec<String>,
}

/// The tools built from the servers' listings of the given generations.
#[derive(Default, Clone)]
struct Built {
    generations: Vec<u64>,
    tools: Vec<Arc<dyn Tool>>,
    read_only: BTreeSet<String>,
}

impl McpServers {
    /// No servers.
    pub fn none() -> McpServers {
        McpServers::default()
    }

    /// Start every server of `specs` at once and list their tools. `taken` are
    /// tool names already offered (an MCP tool of the same name is left out).
    pub async fn start(
        specs: Vec<McpServerSpec>,
        launch_env: LaunchEnv,
        taken: &BTreeSet<String>,
    ) -> McpServers {
        let launch_env = Arc::new(launch_env);
        let servers: Vec<Arc<Server>> = specs
            .into_iter()
            .map(|s| Arc::new(Server::new(s, launch_env.clone())))
            .collect();
        let started = futures::future::join_all(servers.iter().map(|s| s.start_and_list())).await;
        let mut out = McpServers {
            servers: servers.clone(),
            taken: taken.clone(),
            ..McpServers::default()
        };
        let mut warnings = Vec::new();
        let built = build(&servers, taken, Some(&mut warnings));
        out.warnings = warnings;
        for (server, started) in servers.iter().zip(started) {
            let state = match started {
                Ok(()) => ServerState::Ready {
                    tools: infos(server, &built),
                },
                Err(error) => {
                    out.warnings.push(format!(
                        "MCP server '{}' is not available: {error}; the session goes on without its tools",
                        server.name()
                    ));
                    ServerState::Failed { error }
                }
            };
            out.reports.push(ServerReport {
                name: server.name().to_string(),
                state,
            });
        }
        *out.current.lock().unwrap_or_else(|p| p.into_inner()) = built;
        out
    }

    /// The tools as of the servers' last listings (rebuilt after a server was
    /// listed again).
    fn built(&self) -> Built {
        let generations: Vec<u64> = self.servers.iter().map(|s| s.generation()).collect();
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.generations != generations {
            *current = build(&self.servers, &self.taken, None);
        }
        current.clone()
    }

    /// Every tool the servers offer now (each run's toolbox takes them when it
    /// opens; the objects and their connection are shared by all runs).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.built().tools
    }

    /// Names of the tools read-only roles may get now.
    pub fn read_only(&self) -> BTreeSet<String> {
        self.built().read_only
    }

    /// Each server and how its start went.
    pub fn reports(&self) -> &[ServerReport] {
        &self.reports
    }

    /// Servers that did not start and tools left out, one line each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Stop every server (their processes end with their connections).
    pub fn stop(&self) {
        for s in &self.servers {
            s.stop();
        }
    }
}
