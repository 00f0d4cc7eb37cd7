//! The model-facing delegation tools of one run: `task`, `agent_open`,
//! `agent_eval`, `agent_close`, `agent_list`, `handle_read`. Their schemas are
//! derived from the argument structs; their descriptions are written for a model.
//!
//! While a run waits on its children (`task`, `agent_eval`, `agent_close`) it gives
//! its running slot back, so a parent blocked on children never starves them.
//! `agent_eval` and `agent_close` address only the caller's own children: another
//! run's child belongs to that run, and its result is delivered there.

use super::agent_types::{AgentTypesTool, Directory};
use super::board::LiveStatus;
use super::ctx::RunCtx;
use super::result::{render_result, ChildResult};
use super::spawn::{SpawnMode, SpawnRequest, Spawner};
use super::supervisor::{settled, Supervisor};
use super::worktree::Isolation;
use crate::tool::{parse_args, schema_of, Capability, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The delegation tools bound to the run `ctx`.
pub(crate) fn delegation_tools(sup: &Supervisor, ctx: &Arc<RunCtx>) -> Vec<Arc<dyn Tool>> {
    let b = || Bound {
        sup: sup.clone(),
        ctx: ctx.clone(),
    };
    let directory = sup.directory();
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(TaskTool {
            b: b(),
            directory: directory.clone(),
        }),
        Arc::new(OpenTool(b())),
        Arc::new(EvalTool(b())),
        Arc::new(CloseTool(b())),
        Arc::new(ListTool(b())),
        Arc::new(ReadTool(b())),
    ];
    if directory.overflows() {
        tools.push(Arc::new(AgentTypesTool(directory)));
    }
    tools
}

#[derive(Clone)]
struct Bound {
    sup: Supervisor,
    ctx: Arc<RunCtx>,
}

impl Bound {
    /// Run `fut` with this run's slot given back (see `RunCtx::without_slot`).
    async fn yielding<F: Future>(&self, cancel: &CancellationToken, fut: F) -> F::Output {
        self.ctx.without_slot(cancel, fut).await
    }

    /// One of this run's own children, by id, name or id prefix. A run waits for,
    /// messages and closes only children it opened: another run's child belongs to
    /// that run (its result is delivered there).
    fn own_child(&self, tool: &str, key: &str) -> Result<String, ToolError> {
        self.sup
            .lookup_child(&self.ctx, key)
            .ok_or_else(|| ToolError::InvalidArguments {
                tool: tool.into(),
                detail: format!(
                    "'{key}' is not a sub-agent you opened; you can only wait for or close \
                     your own (agent_list shows them with their parent_id)"
                ),
            })
    }

    fn cap(&self) -> usize {
        self.sup.env().settings.context_cap_bytes
    }
}

fn child_json(index: Option<usize>, r: &ChildResult, cap: usize) -> serde_json::Value {
    let mut v = json!({
        "agent_id": r.agent_id,
        "name": r.name,
        "role": r.role,
        "status": r.status,
        "result": render_result(r, cap),
        "transcript_handle": r.transcript_handle,
    });
    if let (Some(i), Some(map)) = (index, v.as_object_mut()) {
        map.insert("index".into(), json!(i));
    }
    v
}

/// A tool result as compact JSON: the model reads it as well as an indented one,
/// and indentation is input tokens paid on every later step of the parent (two
/// to three thousand for a 200-child `task`).
fn to_text(v: &serde_json::Value) -> String {
    v.to_string()
}

// ---------------------------------------------------------------- task

/// Arguments of `task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    /// One self-contained task per child.
    prompts: Option<Vec<String>>,
    /// Or one task.
    description: Option<String>,
    /// Role or defined agent.
    #[serde(alias = "type")]
    agent_type: Option<String>,
    /// true: children fork your conversation.
    fork_context: Option<bool>,
    /// A git worktree per writer.
    isolation: Option<IsolationArg>,
}

// What a call may ask for: a worktree, or nothing more than config says (`none`
// never turns off what config or the agent's definition require). A plain comment,
// not a doc comment: schemars would put it in every request's tool schema.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum IsolationArg {
    None,
    Worktree,
}

impl IsolationArg {
    fn asked(a: Option<IsolationArg>) -> Option<Isolation> {
        match a {
            Some(IsolationArg::Worktree) => Some(Isolation::Worktree),
            _ => None,
        }
    }
}

/// `task`; its description ends with the agent types (see `agent_types`), made
/// once per session and shared by every run's `task` (not a copy per child).
struct TaskTool {
    b: Bound,
    directory: Arc<Directory>,
}

#[async_trait]
impl Tool for TaskTool {
    fn name(&self) -> &str {
        "task"
    }
    fn description(&self) -> &str {
        &self.directory.task_description
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<TaskArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Delegate
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: TaskArgs = parse_args("task", args)?;
        let b = &self.b;
        let prompts = match (a.prompts, a.description) {
            (Some(p), None) if !p.is_empty() => p,
            (None, Some(d)) if !d.trim().is_empty() => vec![d],
            _ => {
                return Err(ToolError::InvalidArguments {
                    tool: "task".into(),
                    detail: "give exactly one of `prompts` (a non-empty list) and `description`"
                        .into(),
                })
            }
        };
        let fork_from = if a.fork_context.unwrap_or(false) {
            b.ctx.last_request()
        } else {
            None
        };
        // Open all children at once: each open waits for its spawn record to be
        // durable, and concurrent opens share one group commit instead of paying
        // one commit each, one after another (admission still runs in prompt order).
        // Each prompt moves into its spawn: the parent keeps no copy of it.
        let opens = prompts.into_iter().map(|prompt| {
            let req = SpawnRequest {
                prompt,
                agent_type: a.agent_type.clone(),
                name: None,
                model: None,
                fork_from: fork_from.clone(),
                allowed_tools: None,
                isolation: IsolationArg::asked(a.isolation),
                mode: SpawnMode::Task {
                    turn_cancel: ctx.cancel.clone(),
                },
            };
            b.sup.open(&b.ctx, req)
        });
        let opened = futures::future::join_all(opens).await;
        let cap = b.cap();
        // What the wait keeps per child is its result channel (or why it did not
        // open), not what its open answered: a tree of a thousand waits is a
        // thousand of these (BENCHMARKS.md, memory per running child). Each
        // child's entry is rendered as soon as that child ends, while the others
        // still run, so only the last one's is left after the last end.
        let waits = opened.into_iter().enumerate().map(|(i, o)| {
            let rx = o
                .map(|op| b.sup.result_of(&op.agent_id))
                .map_err(|e| e.to_string());
            async move {
                match rx {
                    Ok(Some(mut rx)) => match settled(&mut rx).await {
                        Some(res) => child_json(Some(i), &res, cap),
                        None => json!({"index": i, "status": "cancelled"}),
                    },
                    Ok(None) => json!({"index": i, "status": "cancelled"}),
                    Err(e) => json!({"index": i, "status": "failed", "error": e}),
                }
            }
        });
        let all = futures::future::join_all(waits);
        let cancel = ctx.cancel.clone();
        let results = b
            .yielding(&ctx.cancel, async move {
                tokio::select! {
                    r = all => Some(r),
                    _ = cancel.cancelled() => None,
                }
            })
            .await;
        let Some(results) = results else {
            return Err(ToolError::Cancelled);
        };
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let mut out = json!({ "results": results });
        // Say which budget stopped the tree, so the model does not retry.
        if let (Err(spent), Some(map)) = (b.ctx.budgets.check_tree(), out.as_object_mut()) {
            map.insert("budget".into(), json!(spent.to_string()));
        }
        Ok(to_text(&out))
    }
}

// ---------------------------------------------------------------- agent_open

/// Arguments of `agent_open`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OpenArgs {
    /// Self-contained task.
    prompt: String,
    /// As in task, or custom (with allowed_tools).
    #[serde(alias = "type")]
    agent_type: Option<String>,
    name: Option<String>,
    /// Model id.
    model: Option<String>,
    fork_context: Option<bool>,
    /// For custom: the tools it may use.
    allowed_tools: Option<Vec<String>>,
    // As in task (no doc comment: it would ride in every request's schema).
    isolation: Option<IsolationArg>,
}

struct OpenTool(Bound);

#[async_trait]
impl Tool for OpenTool {
    fn name(&self) -> &str {
        "agent_open"
    }
    fn description(&self) -> &str {
        "Start a background sub-agent; returns its agent_id at once, and its report arrives in your conversation when it ends."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<OpenArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Delegate
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let a: OpenArgs = parse_args("agent_open", args)?;
        let b = &self.0;
        let req = SpawnRequest {
            prompt: a.prompt,
            agent_type: a.agent_type,
            name: a.name,
            model: a.model,
            fork_from: if a.fork_context.unwrap_or(false) {
                b.ctx.last_request()
            } else {
                None
            },
            allowed_tools: a.allowed_tools,
            isolation: IsolationArg::asked(a.isolation),
            mode: SpawnMode::Background,
        };
        let opened = b
            .sup
            .open(&b.ctx, req)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        serde_json::to_value(&opened)
            .map(|v| to_text(&v))
            .map_err(|e| ToolError::Failed(format!("encoding the opened sub-agent: {e}")))
    }
}

// ---------------------------------------------------------------- agent_eval

/// Arguments of `agent_eval`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EvalArgs {
    agent_id: Option<String>,
    agent_ids: Option<Vec<String>>,
    /// 1000..=600000, default 30000.
    timeout_ms: Option<u64>,
    message: Option<String>,
}

struct EvalTool(Bound);

#[async_trait]
impl Tool for EvalTool {
    fn name(&self) -> &str {
        "agent_eval"
    }
    fn description(&self) -> &str {
        "Wait up to timeout_ms for your background sub-agents (default: all) and return their reports; `message` reaches each running one first."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<EvalArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Delegate
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: EvalArgs = parse_args("agent_eval", args)?;
        let b = &self.0;
        let timeout = a.timeout_ms.unwrap_or(30_000);
        if !(1000..=600_000).contains(&timeout) {
            return Err(ToolError::InvalidArguments {
                tool: "agent_eval".into(),
                detail: format!("timeout_ms = {timeout} is out of range; use 1000..=600000"),
            });
        }
        let mut keys: Vec<String> = a.agent_ids.unwrap_or_default();
        keys.extend(a.agent_id);
        let ids: Vec<String> = if keys.is_empty() {
            b.sup
                .snapshot()
                .into_iter()
                .filter(|r| r.parent_id.as_deref() == Some(&b.ctx.run_id) && r.background)
                .filter(|r| {
                    !r.status.is_terminal()
                        || !b
                            .sup
                            .board()
                            .handles(&r.agent_id)
                            .is_some_and(|h| h.claim.is_taken())
                })
                .map(|r| r.agent_id)
                .collect()
        } else {
            keys.iter()
                .map(|k| b.own_child("agent_eval", k))
                .collect::<Result<_, _>>()?
        };
        if let Some(msg) = &a.message {
            for id in &ids {
                b.sup.message(id, msg);
            }
        }
        let deadline = Duration::from_millis(timeout);
        let cancel = ctx.cancel.clone();
        let waits = ids.iter().map(|id| {
            let sup = b.sup.clone();
            let cancel = cancel.clone();
            let id = id.clone();
            async move { (id.clone(), sup.wait(&id, Some(deadline), &cancel).await) }
        });
        let settled = b
            .yielding(&ctx.cancel, futures::future::join_all(waits))
            .await;
        let out: Vec<serde_json::Value> = settled
            .into_iter()
            .map(|(id, r)| match r {
                Some(res) => {
                    b.sup.claim(&b.ctx, &id);
                    child_json(None, &res, b.cap())
                }
                None => {
                    let status = b
                        .sup
                        .board()
                        .handles(&id)
                        .map(|h| h.status)
                        .unwrap_or(LiveStatus::Running);
                    json!({"agent_id": id, "status": status, "settled": false})
                }
            })
            .collect();
        Ok(to_text(&json!({ "agents": out })))
    }
}

// ---------------------------------------------------------------- agent_close

/// Arguments of `agent_close`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CloseArgs {
    agent_id: String,
}

struct CloseTool(Bound);

#[async_trait]
impl Tool for CloseTool {
    fn name(&self) -> &str {
        "agent_close"
    }
    fn description(&self) -> &str {
        "Cancel a background sub-agent; returns its final record."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<CloseArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Delegate
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: CloseArgs = parse_args("agent_close", args)?;
        let b = &self.0;
        let id = b.own_child("agent_close", &a.agent_id)?;
        b.sup.cancel(&id, "closed by its parent (agent_close)");
        let never = CancellationToken::new();
        let r = b
            .yielding(
                &ctx.cancel,
                b.sup.wait(&id, Some(Duration::from_secs(60)), &never),
            )
            .await;
        b.sup.claim(&b.ctx, &id);
        match r {
            Some(res) => Ok(to_text(&child_json(None, &res, b.cap()))),
            None => Err(ToolError::Failed(format!(
                "sub-agent {id} did not stop within 60 s; it stays cancelled and its record will say so"
            ))),
        }
    }
}

// ---------------------------------------------------------------- agent_list

/// Arguments of `agent_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// Also earlier sessions' runs.
    include_archived: Option<bool>,
}

struct ListTool(Bound);

#[async_trait]
impl Tool for ListTool {
    fn name(&self) -> &str {
        "agent_list"
    }
    fn description(&self) -> &str {
        "List this session's sub-agents and their status."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<ListArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Delegate
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let a: ListArgs = parse_args("agent_list", args)?;
        let b = &self.0;
        let mut agents: Vec<serde_json::Value> = b
            .sup
            .snapshot()
            .into_iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()
            .map_err(|e| ToolError::Failed(format!("encoding the sub-agent list: {e}")))?;
        if a.include_archived.unwrap_or(false) {
            let archived = b
                .sup
                .recorder()
                .archived_runs()
                .await
                .map_err(ToolError::Failed)?;
            agents.extend(archived);
        }
        Ok(to_text(&json!({ "agents": agents })))
    }
}

// ---------------------------------------------------------------- handle_read

/// Arguments of `handle_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// `transcript:<agent_id>` or an agent id.
    handle: String,
    /// First message index (default 0).
    from: Option<u64>,
    /// Default 20, max 200.
    limit: Option<u64>,
}

struct ReadTool(Bound);

#[async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &str {
        "handle_read"
    }
    fn description(&self) -> &str {
        "Read part of a transcript of your sub-agents (or theirs)."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<ReadArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Delegate
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let a: ReadArgs = parse_args("handle_read", args)?;
        let b = &self.0;
        let key = a.handle.strip_prefix("transcript:").unwrap_or(&a.handle);
        // Only the transcripts of the caller's own sub-agents (and theirs): a sibling's
        // or another session's conversation is not this run's to read.
        let Some(id) = b.sup.lookup_descendant(&b.ctx.run_id, key) else {
            return Err(ToolError::InvalidArguments {
                tool: "handle_read".into(),
                detail: format!(
                    "'{}' is not the handle, id or name of one of your sub-agents (or of \
                     theirs); agent_list shows them and each result carries its \
                     transcript_handle",
                    a.handle
                ),
            });
        };
        let limit = a.limit.unwrap_or(20).clamp(1, 200);
        let slice = b
            .sup
            .recorder()
            .transcript(&id, a.from.unwrap_or(0), limit)
            .await
            .map_err(ToolError::Failed)?;
        Ok(to_text(&slice))
    }
}
