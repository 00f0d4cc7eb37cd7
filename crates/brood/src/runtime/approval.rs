//! Approvals as a library hook: an [`Approver`] the session asks before a tool call
//! that is marked `ask` ([`crate::SessionBuilder::ask_before`]), for the parent and
//! every child alike — children's requests reach the session's one approver.
//!
//! The marked tools are wrapped when each run's tools are made (`AskTool`); the
//! wrapper asks the session's `ApprovalGate`, which remembers what was allowed for
//! the session and asks one question at a time (a person answers them in turn).
//! Without an approver every marked call is refused with a reason the model reads.
//! Which calls are marked is the caller's choice here; permission rules that mark
//! them are later work (issue 14.3).

use crate::events::EventBus;
use crate::tool::{Capability, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::Semaphore;

/// Decides tool calls marked `ask`. Implement it to put a person (or a policy) in
/// the loop; give it with [`crate::SessionBuilder::approver`].
///
/// ```
/// use brood::{Approval, ApprovalRequest, Approver};
///
/// /// Lets reads through, refuses the rest.
/// struct ReadsOnly;
///
/// #[async_trait::async_trait]
/// impl Approver for ReadsOnly {
///     async fn approve(&self, request: &ApprovalRequest) -> Approval {
///         match request.tool.as_str() {
///             "read_file" | "grep" => Approval::AllowForSession,
///             _ => Approval::Deny { reason: format!("{} is not allowed here", request.tool) },
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait Approver: Send + Sync {
    /// Answer one call. The run waits for the answer (a cancelled run stops waiting).
    async fn approve(&self, request: &ApprovalRequest) -> Approval;
}

/// A tool call waiting for approval: which agent, which tool, which arguments.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The run making the call.
    pub run_id: String,
    /// Its role (`parent` for the session's top-level agent).
    pub role: String,
    /// Its agent type: the role, or the definition it was opened from.
    pub agent_type: String,
    /// Its ancestors, nearest first (its parent, …, the root); empty for a root.
    pub lineage: Vec<String>,
    /// The tool it calls.
    pub tool: String,
    /// The arguments it gave (model-controlled: show them, never trust them).
    pub arguments: serde_json::Value,
}

/// An approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Run this call.
    AllowOnce,
    /// Run this call and every later call of this tool in the session, by any agent,
    /// without asking again.
    AllowForSession,
    /// Do not run it; the model reads `reason` as the tool's error.
    Deny {
        /// Why, written for the model (say what to do instead).
        reason: String,
    },
}

/// The session's approvals: its approver, what was allowed for the session, and
/// who is asking (from the event bus's record of runs).
pub(crate) struct ApprovalGate {
    approver: Option<Arc<dyn Approver>>,
    allowed: Mutex<HashSet<String>>,
    /// One question at a time.
    turn: Semaphore,
    /// Set once the supervisor exists (it owns the bus).
    pub(crate) bus: OnceLock<Arc<EventBus>>,
}

impl ApprovalGate {
    pub fn new(approver: Option<Arc<dyn Approver>>) -> Self {
        ApprovalGate {
            approver,
            allowed: Mutex::new(HashSet::new()),
            turn: Semaphore::new(1),
            bus: OnceLock::new(),
        }
    }

    fn allowed(&self, tool: &str) -> bool {
        self.allowed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(tool)
    }

    /// Ask (unless already allowed for the session); `Err` is what the model reads.
    async fn check(
        &self,
        tool: &str,
        args: &serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<(), ToolError> {
        if self.allowed(tool) {
            return Ok(());
        }
        let Some(approver) = &self.approver else {
            return Err(ToolError::Denied {
                tool: tool.to_string(),
                reason: "this session asks before running it and has no approver to ask; \
                         do the work without it, or report that it needs the user's approval"
                    .into(),
            });
        };
        let _turn = tokio::select! {
            permit = self.turn.acquire() => permit.map_err(|_| ToolError::Cancelled)?,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        // Allowed for the session while this call waited for its turn.
        if self.allowed(tool) {
            return Ok(());
        }
        let bus = self.bus.get();
        let meta = bus.and_then(|b| b.meta(&ctx.run_id));
        let request = ApprovalRequest {
            run_id: ctx.run_id.clone(),
            role: meta.as_ref().map(|m| m.role.clone()).unwrap_or_default(),
            agent_type: meta
                .as_ref()
                .map(|m| m.agent_type.clone())
                .unwrap_or_default(),
            lineage: bus.map(|b| b.lineage(&ctx.run_id)).unwrap_or_default(),
            tool: tool.to_string(),
            arguments: args.clone(),
        };
        let answer = tokio::select! {
            a = approver.approve(&request) => a,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        match answer {
            Approval::AllowOnce => Ok(()),
            Approval::AllowForSession => {
                self.allowed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(tool.to_string());
                Ok(())
            }
            Approval::Deny { reason } => Err(ToolError::Denied {
                tool: tool.to_string(),
                reason,
            }),
        }
    }
}

/// A tool marked `ask`: the gate decides each call before the tool runs.
pub(crate) struct AskTool {
    pub inner: Arc<dyn Tool>,
    pub gate: Arc<ApprovalGate>,
}

#[async_trait]
impl Tool for AskTool {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn schema(&self) -> serde_json::Value {
        self.inner.schema()
    }
    fn capability(&self) -> Capability {
        self.inner.capability()
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        self.gate.check(self.inner.name(), &args, ctx).await?;
        self.inner.call(args, ctx).await
    }
}
