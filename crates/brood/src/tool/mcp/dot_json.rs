//! A workspace's `.mcp.json` (Claude Code's project MCP servers): `mcpServers`
//! entries with `command`/`args`/`env` (stdio) or `url` + `headers` (`type`
//! `http`), read into [`McpServerConfig`]s; `${VAR}` and `${VAR:-default}` in
//! them are expanded when the server starts ([`expand`]), so a value read from
//! the environment is never part of the configuration `config show` prints.
//! Whether the file is read at all is the config layer's decision (only in a
//! trusted workspace: its servers are commands brood would run).

use super::spec::McpServerConfig;
use serde_json::Value;
use std::collections::BTreeMap;

/// The file's name at the workspace root.
pub(crate) const FILE_NAME: &str = ".mcp.json";

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
            let why = if k == "sse" {
                "the SSE transport (deprecated by MCP in 2025) is not supported; use the server's streamable HTTP endpoint (type \"http\")"
            } else {
                "not supported (stdio or http)"
            };
            notes.push(format!(
                "mcpServers.{name}: type {k:?}: {why}; server left out"
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
        let map = |key: &str| -> Result<Option<BTreeMap<String, String>>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect::<Option<BTreeMap<_, _>>>()
                    .map(Some)
                    .ok_or_else(|| format!("mcpServers.{name}.{key} values must be strings")),
                Some(_) => Err(format!("mcpServers.{name}.{key} must be an object")),
            }
        };
        let env = map("env")?;
        let headers = map("headers")?;
        for key in obj.keys() {
            if !matches!(
                key.as_str(),
                "type" | "command" | "args" | "env" | "url" | "headers"
            ) {
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
                http_headers: headers,
                expand_vars: true,
                ..McpServerConfig::default()
            },
        );
    }
    Ok((out, notes))
}

/// `text` with `${VAR}` replaced by the variable's value and `${VAR:-default}`
/// by the value, or `default` when the variable is unset or empty (Claude Code's
/// `.mcp.json` expansion). A `$` not followed by `{` is kept. An unset variable
/// without a default is an error naming it (never a value).
pub fn expand(text: &str, var: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let (before, after) = rest.split_at(at);
        out.push_str(before);
        let inner = after.get(2..).unwrap_or_default();
        let Some(end) = inner.find('}') else {
            return Err(format!("an unclosed ${{ in {text:?}"));
        };
        let (body, tail) = inner.split_at(end);
        let (name, default) = match body.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (body, None),
        };
        let valid =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(format!("${{{body}}} does not name a variable"));
        }
        match (
            var(name).filter(|v| !v.is_empty() || default.is_none()),
            default,
        ) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "${{{name}}} is not set (set it, or write ${{{name}:-default}})"
                ))
            }
        }
        rest = tail.get(1..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_as_claude_code_does() {
        let var = |n: &str| match n {
            "HOME" => Some("/h".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(expand("${HOME}/x", var).unwrap(), "/h/x");
        assert_eq!(expand("a${NOPE:-d}b", var).unwrap(), "adb");
        assert_eq!(expand("${EMPTY:-d}", var).unwrap(), "d");
        assert_eq!(expand("${EMPTY}", var).unwrap(), "");
        assert_eq!(expand("$HOME ${HOME:-z}", var).unwrap(), "$HOME /h");
        let e = expand("Bearer ${TOKEN}", var).unwrap_err();
        assert!(e.contains("${TOKEN} is not set"), "{e}");
        assert!(expand("${HOME", var).is_err());
        assert!(expand("${A-B}", var).is_err());
    }

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
        assert_eq!(servers["web"].http_headers.as_ref().unwrap()["X"], "y");
        assert!(servers["web"].expand_vars);
        assert!(!servers.contains_key("old"));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("SSE transport"), "{notes:?}");
        assert!(parse("{").is_err());
        assert!(parse(r#"{"mcpServers": {"a": {"args": "x"}}}"#).is_err());
    }
}
