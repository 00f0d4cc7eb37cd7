//! A workspace's `.mcp.json` (Claude Code's project MCP servers): `mcpServers`
//! entries with `command`/`args`/`env` (stdio) or `url` (`type` `http`), read into
//! [`McpServerConfig`]s. Whether it is read at all is the config layer's decision
//! (only in a trusted workspace: its servers are commands brood would run).

use super::spec::McpServerConfig;
use serde_json::Value;
use std::collections::BTreeMap;

/// The file's name at the workspace root.
pub const FILE_NAME: &str = ".mcp.json";

/// The servers of a `.mcp.json` text, and a note for each part brood does not use.
pub fn parse(text: &str) -> Result<(BTreeMap<String, McpServerConfig>, Vec<String>), String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Some(servers) = doc.get("mcpServers") else {
        return Ok((BTreeMap::new(), Vec::new()));
    };
    let servers = servers
        .as_object()
        .ok_or("mcpServers must be an object of servers by name")?;
    let mut out = BTreeMap::new();
    let mut notes = Vec::new();
    for (name, entry) in servers {
        let obj = entry
            .as_object()
            .ok_or_else(|| format!("mcpServers.{name} must be an object"))?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("mcpServers.{name}.{key} must be a string")),
            }
        };
        let kind = text("type")?;
        if let Some(k) = kind.as_deref().filter(|k| !matches!(*k, "stdio" | "http")) {
            notes.push(format!(
                "mcpServers.{name}: type {k:?} is not supported (stdio or http); server left out"
            ));
            continue;
        }
        let args = match obj.get("args") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(
                a.iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("mcpServers.{name}.args must be a list of strings"))?,
            ),
            Some(_) => return Err(format!("mcpServers.{name}.args must be a list of strings")),
        };
        let env = match obj.get("env") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(
                m.iter()
                    .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect::<Option<BTreeMap<_, _>>>()
                    .ok_or_else(|| format!("mcpServers.{name}.env values must be strings"))?,
            ),
            Some(_) => return Err(format!("mcpServers.{name}.env must be an object")),
        };
        for key in obj.keys() {
            if !matches!(key.as_str(), "type" | "command" | "args" | "env" | "url") {
                notes.push(format!(
                    "mcpServers.{name}.{key} is not used by brood (set it in [mcp_servers.{name}] of a brood config instead)"
                ));
            }
        }
        out.insert(
            name.clone(),
            McpServerConfig {
                command: text("command")?,
                args,
                env,
                url: text("url")?,
                ..McpServerConfig::default()
            },
        );
    }
    Ok((out, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_entries_are_read() {
        let (servers, notes) = parse(
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "srv"], "env": {"A": "1"}},
                "web": {"type": "http", "url": "https://x/mcp", "headers": {"X": "y"}},
                "old": {"type": "sse", "url": "https://x/sse"}
            }}"#,
        )
        .unwrap();
        assert_eq!(servers["fs"].command.as_deref(), Some("npx"));
        assert_eq!(servers["fs"].args.as_ref().unwrap().len(), 2);
        assert_eq!(servers["web"].url.as_deref(), Some("https://x/mcp"));
        assert!(!servers.contains_key("old"));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(parse("{").is_err());
        assert!(parse(r#"{"mcpServers": {"a": {"args": "x"}}}"#).is_err());
    }
}
