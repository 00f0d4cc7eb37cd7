//! The MCP servers of the configuration: `[mcp_servers.<name>]` tables of the
//! user's config and (trusted workspaces only) the workspace's, and a trusted
//! workspace's `.mcp.json`. A server is taken whole from the last layer naming
//! it (user, then workspace config; `.mcp.json` only adds names neither sets).
//! An untrusted workspace's servers are listed as ignored with the reason: a
//! server is a command brood would run. The config layer (`config.rs`) calls
//! these and turns a problem — (file, what) — into its typed error.

use crate::tool::mcp::{dot_json, McpServerConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One configured server and the file that set it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerEntry {
    /// Its table as written.
    pub config: McpServerConfig,
    /// The file that set it.
    pub file: PathBuf,
}

/// A problem in one file: the file and what is wrong.
pub(super) type Problem = (PathBuf, String);

/// The servers of one layer's `[mcp_servers]` table, shape-checked.
pub(super) fn parse_table(
    table: &toml::Table,
) -> Result<BTreeMap<String, McpServerConfig>, String> {
    toml::Value::Table(table.clone())
        .try_into::<BTreeMap<String, McpServerConfig>>()
        .map_err(|e| format!("[mcp_servers] {e}"))
}

/// Take `[mcp_servers]` out of a layer's table into `servers` (whole servers,
/// later layers replacing earlier ones by name).
pub(super) fn take_layer(
    table: &mut toml::Table,
    path: &Path,
    servers: &mut BTreeMap<String, McpServerEntry>,
) -> Result<(), Problem> {
    let Some(v) = table.remove("mcp_servers") else {
        return Ok(());
    };
    let toml::Value::Table(t) = v else {
        return Err((
            path.to_path_buf(),
            "mcp_servers must be a table of servers by name ([mcp_servers.<name>])".into(),
        ));
    };
    for (name, config) in parse_table(&t).map_err(|e| (path.to_path_buf(), e))? {
        servers.insert(
            name,
            McpServerEntry {
                config,
                file: path.to_path_buf(),
            },
        );
    }
    Ok(())
}

/// The names in a workspace's `[mcp_servers]`, as the ignored value.
pub(super) fn names_of(v: &toml::Value) -> String {
    match v {
        toml::Value::Table(t) => t.keys().cloned().collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// Read `<workspace>/.mcp.json` when the workspace is trusted (servers not set by
/// a brood config are added); otherwise list it as ignored. Parts of it brood does
/// not use go to `notes`.
pub(super) fn read_dot_mcp(
    workspace: &Path,
    trusted: bool,
    servers: &mut BTreeMap<String, McpServerEntry>,
    ignored: &mut Vec<(String, String, PathBuf)>,
    notes: &mut Vec<String>,
) -> Result<(), Problem> {
    let path = workspace.join(dot_json::FILE_NAME);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err((path, format!("cannot be read: {e}"))),
    };
    let (found, file_notes) = dot_json::parse(&text).map_err(|e| (path.clone(), e))?;
    if found.is_empty() {
        return Ok(());
    }
    if !trusted {
        let names: Vec<&str> = found.keys().map(String::as_str).collect();
        ignored.push(("mcpServers".into(), names.join(", "), path));
        return Ok(());
    }
    notes.extend(
        file_notes
            .into_iter()
            .map(|n| format!("{}: {n}", path.display())),
    );
    for (name, config) in found {
        if servers.contains_key(&name) {
            notes.push(format!(
                "{}: mcpServers.{name} not used: [mcp_servers.{name}] of a brood config sets it",
                path.display()
            ));
            continue;
        }
        servers.insert(
            name,
            McpServerEntry {
                config,
                file: path.clone(),
            },
        );
    }
    Ok(())
}
