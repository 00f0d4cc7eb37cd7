//! One tool of an MCP server as a brood [`Tool`]: named `mcp__<server>__<tool>`
//! (Claude Code's naming), the server's description and input schema, the
//! [`Capability::Mcp`] class; its result is the server's content as text, bounded
//! like a shell's output (the first [`OUTPUT_HEAD_BYTES`] and the last
//! [`OUTPUT_TAIL_BYTES`]); a result the server marks `isError` is a tool error.

use super::conn::Server;
use crate::tool::shell::{OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES};
use crate::tool::{Capability, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;

/// The prefix of every MCP tool's name.
pub const MCP_PREFIX: &str = "mcp__";
/// The longest tool name a provider accepts (OpenAI's function-name rule).
pub const MAX_TOOL_NAME: usize = 64;

/// `mcp__<server>__<tool>`, the tool's name made of what function names may hold
/// (other characters become `_`).
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{MCP_PREFIX}{server}__{clean}")
}

/// Whether `name` is an MCP tool's.
pub fn is_mcp_tool(name: &str) -> bool {
    name.starts_with(MCP_PREFIX)
}

/// A server's tool offered to runs.
pub struct McpTool {
    name: String,
    remote: String,
    description: String,
    schema: Value,
    server: Arc<Server>,
    /// The server's listing it comes from.
    edition: u64,
}

impl McpTool {
    /// The tool `remote` of `server`, from its `tools/list` entry of listing
    /// generation `edition`.
    pub fn new(server: Arc<Server>, remote: &str, listed: &Value, edition: u64) -> McpTool {
        let description = listed
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let schema = listed
            .get("inputSchema")
            .filter(|s| s.is_object())
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        McpTool {
            name: mcp_tool_name(server.name(), remote),
            remote: remote.to_string(),
            description: format!("[MCP server {}] {description}", server.name()),
            schema,
            edition,
            server,
        }
    }

    /// The server's own name for it.
    pub fn remote(&self) -> &str {
        &self.remote
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn schema(&self) -> Value {
        self.schema.clone()
    }
    fn capability(&self) -> Capability {
        Capability::Mcp
    }
    fn spec_edition(&self) -> u64 {
        self.edition
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let result = self.server.call(&self.remote, args, &ctx.cancel).await?;
        let text = bound(&render(&result));
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(ToolError::Mcp {
                server: self.server.name().to_string(),
                detail: format!("{} reported an error: {text}", self.remote),
            });
        }
        Ok(text)
    }
}

/// A `CallToolResult` as text: its text blocks in order, other blocks named
/// (an image's bytes are not shown), else its structured content as JSON.
fn render(result: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => parts.push(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            ),
            "resource" => {
                let r = block.get("resource").cloned().unwrap_or(Value::Null);
                match r.get("text").and_then(Value::as_str) {
                    Some(t) => parts.push(t.to_string()),
                    None => parts.push(format!(
                        "[resource {}]",
                        r.get("uri").and_then(Value::as_str).unwrap_or("?")
                    )),
                }
            }
            "resource_link" => parts.push(format!(
                "[resource link {}]",
                block.get("uri").and_then(Value::as_str).unwrap_or("?")
            )),
            other => parts.push(format!(
                "[{other} content ({}) not shown]",
                block
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown type")
            )),
        }
    }
    if parts.is_empty() {
        if let Some(s) = result.get("structuredContent") {
            return s.to_string();
        }
    }
    parts.join("\n")
}

/// At most the first and last output bytes of a shell, with what was cut.
fn bound(text: &str) -> String {
    if text.len() <= OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES {
        return text.to_string();
    }
    let mut head = OUTPUT_HEAD_BYTES;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - OUTPUT_TAIL_BYTES;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes of the MCP result omitted ...]\n{}",
        text.get(..head).unwrap_or_default(),
        tail - head,
        text.get(tail..).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_function_names() {
        assert_eq!(mcp_tool_name("gh", "get_issue"), "mcp__gh__get_issue");
        assert_eq!(mcp_tool_name("gh", "a.b/c d"), "mcp__gh__a_b_c_d");
    }

    #[test]
    fn results_render_as_text_and_are_bounded() {
        let r = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "text", "text": "two"}
        ]});
        assert_eq!(
            render(&r),
            "one\n[image content (image/png) not shown]\ntwo"
        );
        assert_eq!(
            render(&json!({"content": [], "structuredContent": {"n": 1}})),
            "{\"n\":1}"
        );
        let big = "x".repeat(OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES + 10);
        let b = bound(&big);
        assert!(b.contains("[... 10 bytes of the MCP result omitted ...]"));
        assert!(b.len() < big.len() + 64);
    }
}
