//! Starting a session's MCP servers: the environment their processes get (the
//! session's, minus every provider key variable — the same list no shell sees)
//! and the names MCP tools may not take (built-in, delegation and the embedder's
//! tools).

use crate::tool::mcp::{LaunchEnv, McpServerSpec, McpServers};
use crate::tool::{self, Tool};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

/// Start `specs` (see [`McpServers::start`]) for a session on `root` whose
/// embedder adds `extra` tools; the variables in `deny` (the provider keys:
/// [`super::sandbox_options`]'s `env.deny`) are not passed. No servers starts nothing.
pub async fn start(
    specs: Vec<McpServerSpec>,
    deny: &[String],
    env: &BTreeMap<String, String>,
    root: &Path,
    extra: &[Arc<dyn Tool>],
) -> McpServers {
    if specs.is_empty() {
        return McpServers::none();
    }
    let env = env
        .iter()
        .filter(|(k, _)| !deny.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let taken: BTreeSet<String> = tool::builtin_tools(&tool::BuiltinOptions::default())
        .iter()
        .map(|t| t.name().to_string())
        .chain(extra.iter().map(|t| t.name().to_string()))
        .chain(
            crate::subagent::definition::DELEGATION_TOOLS
                .iter()
                .map(|n| n.to_string()),
        )
        .collect();
    McpServers::start(
        specs,
        LaunchEnv {
            env,
            root: root.to_path_buf(),
            withheld: deny.iter().cloned().collect(),
        },
        &taken,
    )
    .await
}
