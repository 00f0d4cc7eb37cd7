//! An outside parent as a root run: a program that is not one of brood's agents
//! (an MCP host — Claude Code, Codex, … — through `brood mcp`) opens and waits for
//! children through the same delegation tools a parent agent calls, so every
//! child it opens is admitted, granted, bounded and recorded exactly as under
//! `brood run`. The host run is recorded like any root run (its children hang
//! off it in the ledger); it has no model loop of its own.

use super::board::LiveStatus;
use super::ctx::RunCtx;
use super::error::SpawnError;
use super::open::root_ctx;
use super::record::SpawnRecord;
use super::result::{ChildResult, Settled};
use super::supervisor::{new_run_id, Supervisor};
use super::tools::delegation_tools;
use crate::tool::{Tool, ToolContext, ToolError};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A root run driven from outside: its delegation tools, callable by name.
pub struct HostRun {
    sup: Supervisor,
    ctx: Arc<RunCtx>,
    tools: Vec<Arc<dyn Tool>>,
    finished: std::sync::atomic::AtomicBool,
}

impl Supervisor {
    /// Record a root run named `name` for an outside parent and bind the delegation
    /// tools (`task`, `agent_open`, `agent_eval`, `agent_close`, `agent_list`,
    /// `handle_read`) to it. With sub-agents disabled (`[subagents] enabled =
    /// false`) every call is refused, as a parent agent's would be.
    pub async fn open_host(&self, name: &str, objective: &str) -> Result<HostRun, SpawnError> {
        let env = self.env();
        let id = new_run_id();
        let ctx = root_ctx(self, id.clone(), name, None).await;
        // A custom child may pick among the host's tools: the workspace tools and
        // the delegation tools, as for `brood run`'s parent.
        let mut names: Vec<String> = (env.tools)(&id)
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        let tools = delegation_tools(self, &ctx);
        names.extend(tools.iter().map(|t| t.name().to_string()));
        let _ = ctx.tool_names.set(names.into());
        self.recorder()
            .spawn(SpawnRecord {
                id: &id,
                parent_id: None,
                name,
                role: "parent",
                agent_type: "host",
                objective,
                model: &ctx.model_id,
                provider: &ctx.provider_name,
                workspace: env.workspace.root(),
                unpriced: ctx.budgets.price().is_none(),
                grant: self.recorded_grant(&ctx, None),
            })
            .await
            .map_err(SpawnError::Ledger)?;
        self.recorder().status_queued(&id, LiveStatus::Running);
        ctx.budgets.start();
        Ok(HostRun {
            sup: self.clone(),
            ctx,
            tools,
            finished: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

impl HostRun {
    /// The host run's id (its children's `parent_id`).
    pub fn run_id(&self) -> &str {
        &self.ctx.run_id
    }

    /// The live events of this host's tree (its children and their descendants),
    /// from now on — what `brood mcp` turns into progress notifications.
    pub fn events(&self) -> crate::events::EventStream {
        self.sup.bus().subscribe(Some(self.ctx.run_id.clone()))
    }

    /// The delegation tools, for their names, descriptions and schemas.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// Call delegation tool `name` as the host. `cancel` is the call's token: it
    /// stops a `task` fan-out (its children are cancelled and recorded so) and ends
    /// a wait early.
    pub async fn call(
        &self,
        name: &str,
        args: serde_json::Value,
        cancel: CancellationToken,
    ) -> Result<String, ToolError> {
        let Some(tool) = self.tools.iter().find(|t| t.name() == name) else {
            return Err(ToolError::UnknownTool {
                name: name.to_string(),
                available: self
                    .tools
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if !self
            .ctx
            .permissions
            .capabilities
            .contains(&crate::tool::Capability::Delegate)
        {
            return Err(ToolError::NotGranted {
                tool: name.to_string(),
                holder: self.ctx.name.clone(),
                reason: "sub-agents are disabled in this configuration ([subagents] enabled = \
                         false); enable them to serve delegation"
                    .into(),
            });
        }
        let ctx = ToolContext {
            workspace: self.sup.env().workspace.clone(),
            permissions: self.ctx.permissions.clone(),
            cancel,
            run_id: self.ctx.run_id.clone(),
        };
        tool.call(args, &ctx).await
    }

    /// A settled child's whole result (report, usage), without waiting; `None`
    /// while it runs or when it is not a descendant of this host.
    pub async fn settled(&self, key: &str) -> Option<ChildResult> {
        let id = self.sup.lookup_descendant(&self.ctx.run_id, key)?;
        let never = CancellationToken::new();
        self.sup
            .wait(&id, Some(std::time::Duration::ZERO), &never)
            .await
    }

    /// Record the host run's end (`completed`, or `cancelled` with a reason). Its
    /// background children are not stopped here: the session's close does that.
    pub async fn finish(&self, cancelled: Option<&str>) {
        if self
            .finished
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let how = match cancelled {
            Some(reason) => Settled::Cancelled {
                reason: Some(reason.to_string()),
            },
            None => Settled::Closed,
        };
        let result = ChildResult::settled(self.ctx.who(Vec::new()), how, None);
        self.sup.recorder().finish(&result).await;
    }
}
