//! The MCP server's handler: brood's delegation tools offered to an MCP host, and
//! the session's runs as resources. The host is the parent: every call goes to
//! the session's [`HostRun`], so every child is admitted, granted, bounded and
//! recorded as under `brood run`.

use super::resources;
use brood::subagent::HostRun;
use brood::ToolError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// Delegation tools that only read (a host may call them without asking).
const READ_ONLY: &[&str] = &["agent_list", "handle_read", "agent_eval"];

/// One `brood mcp` process: one session, one host run.
#[derive(Clone)]
pub struct BroodServer {
    host: Arc<HostRun>,
    workspace: PathBuf,
}

impl BroodServer {
    pub fn new(host: Arc<HostRun>, workspace: PathBuf) -> Self {
        BroodServer { host, workspace }
    }

    fn tools(&self) -> Vec<Tool> {
        self.host
            .tools()
            .iter()
            .map(|t| {
                let schema = match t.schema() {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                let read_only = READ_ONLY.contains(&t.name());
                Tool::new(
                    t.name().to_string(),
                    t.description().to_string(),
                    Arc::new(schema),
                )
                .with_annotations(
                    ToolAnnotations::new()
                        .read_only(read_only)
                        .destructive(t.name() == "agent_close")
                        .open_world(false),
                )
            })
            .collect()
    }

    /// The tool's JSON answer with each settled child's whole result added
    /// (`report`: summary, changes, evidence with its citation check, risks,
    /// blockers; `usage` and `cost_usd` of its own steps; `tree_usage`, its whole
    /// subtree's tokens, requests and cost), and the call's `usage`: the sum of
    /// those subtrees (what the call cost), for programs reading `structuredContent`.
    async fn enrich(&self, mut v: Value) -> Value {
        let mut call = CallUsage::default();
        for key in ["results", "agents"] {
            let Some(items) = v.get_mut(key).and_then(Value::as_array_mut) else {
                continue;
            };
            for item in items.iter_mut() {
                let Some(id) = item.get("agent_id").and_then(Value::as_str) else {
                    continue;
                };
                if let Some(r) = self.host.settled(id).await {
                    item["report"] = serde_json::to_value(&r.report).unwrap_or(Value::Null);
                    item["usage"] = serde_json::to_value(r.usage).unwrap_or(Value::Null);
                    item["cost_usd"] = r.cost_usd.into();
                    item["tree_usage"] = serde_json::to_value(&r.tree_usage).unwrap_or(Value::Null);
                    if key == "results" {
                        call.add(r.tree_usage.as_ref());
                    }
                    item["turns"] = r.turns.into();
                    item["tool_calls"] = r.tool_calls.into();
                    if let Some(reason) = &r.reason {
                        item["reason"] = reason.clone().into();
                    }
                }
            }
        }
        if let Some(id) = v.get("agent_id").and_then(Value::as_str) {
            if let Some(r) = self.host.settled(id).await {
                v["report"] = serde_json::to_value(&r.report).unwrap_or(Value::Null);
                v["usage"] = serde_json::to_value(r.usage).unwrap_or(Value::Null);
                v["cost_usd"] = r.cost_usd.into();
                v["tree_usage"] = serde_json::to_value(&r.tree_usage).unwrap_or(Value::Null);
            }
        } else if call.children > 0 {
            v["usage"] = call.to_json();
        }
        v
    }
}

/// The sum of a `task` call's settled children's subtrees: tokens, requests, and a cost
/// that is `null` once any of them could not be priced (never 0, never a guess).
#[derive(Default)]
struct CallUsage {
    children: u64,
    tally: brood::model::Usage,
    requests: u64,
    cost_usd: Option<f64>,
    unpriced: bool,
}

impl CallUsage {
    fn add(&mut self, t: Option<&brood::subagent::tally::Tally>) {
        self.children += 1;
        match t {
            Some(t) => {
                self.tally.add(&t.usage);
                self.requests = self.requests.saturating_add(t.requests);
                match t.cost_usd {
                    Some(c) => self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c),
                    None => self.unpriced = true,
                }
            }
            None => self.unpriced = true,
        }
    }

    fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self.tally).unwrap_or(Value::Null);
        v["requests"] = self.requests.into();
        v["cost_usd"] = if self.unpriced {
            Value::Null
        } else {
            self.cost_usd.into()
        };
        v
    }
}

impl ServerHandler for BroodServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("brood", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "brood runs sub-agents for you with enforced tool grants, limits and a durable \
ledger. `task` fans out and waits (results in prompt order); `agent_open` starts one in the \
background, `agent_eval` waits for it. Runs are readable as brood://runs/<id> resources.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let name = request.name.to_string();
        if !self.host.tools().iter().any(|t| t.name() == name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{name}'; tools/list names brood's tools"),
                None,
            ));
        }
        // A host that sent a progress token hears how the call's children go.
        let watch = context.meta.get_progress_token().map(|token| {
            let objectives = super::progress::objectives(&name, &args);
            super::progress::watch(&self.host, context.peer.clone(), token, objectives)
        });
        // The request's token fires on the host's notifications/cancelled: a `task`
        // stops and its children are cancelled and recorded so.
        let outcome = self.host.call(&name, args, context.ct.clone()).await;
        if let Some(w) = watch {
            w.finish().await;
        }
        match outcome {
            Ok(text) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
                if let Ok(v) = serde_json::from_str::<Value>(&text) {
                    result.structured_content = Some(self.enrich(v).await);
                }
                Ok(result.into())
            }
            Err(ToolError::Cancelled) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(
                    "cancelled: the call's sub-agents were cancelled and recorded so",
                )]);
                result.structured_content = Some(serde_json::json!({"status": "cancelled"}));
                Ok(result.into())
            }
            Err(e) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
                result.structured_content = Some(serde_json::json!({"error": e.to_string()}));
                Ok(result.into())
            }
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let list = resources::list(&self.workspace).await?;
        Ok(ListResourcesResult::with_all_items(list))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(&self.workspace, &request.uri)
            .await
            .map(Into::into)
    }
}
