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
//! started again on its next call (the `conn` module).
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
use std::sync::Arc;

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
    tools: Vec<Arc<dyn Tool>>,
    read_only: BTreeSet<String>,
    reports: Vec<ServerReport>,
    warnings: Vec<String>,
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
        let listed = futures::future::join_all(servers.iter().map(|s| s.start_and_list())).await;
        let mut out = McpServers {
            servers: servers.clone(),
            ..McpServers::default()
        };
        let mut names = taken.clone();
        for (server, listed) in servers.into_iter().zip(listed) {
            let state = match listed {
                Ok(list) => ServerState::Ready {
                    tools: out.add_tools(&server, &list, &mut names),
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
        out
    }

    fn add_tools(
        &mut self,
        server: &Arc<Server>,
        listed: &[Value],
        names: &mut BTreeSet<String>,
    ) -> Vec<ToolInfo> {
        let spec = server.spec();
        let mut infos = Vec::new();
        for entry in listed {
            let Some(remote) = entry.get("name").and_then(Value::as_str) else {
                continue;
            };
            let name = mcp_tool_name(server.name(), remote);
            if name.len() > MAX_TOOL_NAME {
                self.warnings.push(format!(
                    "MCP server '{}': tool {remote:?} left out: {name} is longer than the \
                     {MAX_TOOL_NAME} bytes a tool name may have (shorten the server's name)",
                    server.name()
                ));
                continue;
            }
            if !names.insert(name.clone()) {
                self.warnings.push(format!(
                    "MCP server '{}': tool {remote:?} left out: the name {name} is taken",
                    server.name()
                ));
                continue;
            }
            let hint = entry
                .pointer("/annotations/readOnlyHint")
                .and_then(Value::as_bool)
                == Some(true);
            let read_only = hint || spec.read_only_tools.iter().any(|t| t == remote);
            if read_only {
                self.read_only.insert(name.clone());
            }
            self.tools
                .push(Arc::new(McpTool::new(server.clone(), remote, entry)));
            infos.push(ToolInfo {
                name,
                remote: remote.to_string(),
                read_only_hint: hint,
                read_only,
            });
        }
        for t in &spec.read_only_tools {
            if !infos.iter().any(|i| &i.remote == t) {
                self.warnings.push(format!(
                    "MCP server '{}': read_only_tools names {t:?}, which the server does not offer",
                    server.name()
                ));
            }
        }
        infos
    }

    /// Every tool of every started server (shared by all runs).
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// Names of the tools read-only roles may get.
    pub fn read_only(&self) -> &BTreeSet<String> {
        &self.read_only
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
