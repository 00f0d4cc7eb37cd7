//! Permission rules and approvals: the one decision every tool call of every agent
//! goes through after its grant allowed it (the toolbox calls the session's
//! `ApprovalGate`, a [`crate::tool::CallGate`]).
//!
//! The gate applies the session's rules (`[permissions]`, `.claude/settings.json`,
//! the ones added with [`crate::Session::add_rule`]) and the calling run's agent
//! definitions' rules: a `deny` refuses the call naming the rule; an `ask` — or a
//! tool the embedder marked with [`crate::SessionBuilder::ask_before`] that no
//! `allow` rule covers — goes to the session's one [`Approver`], for the parent and
//! every child alike. Answers `AllowForSession` are remembered (per asking rule, or
//! per tool for `ask_before`). Calls of several runs waiting at once are each their
//! own `approve` call, so a UI sees them all and queues them (`brood chat` shows
//! every asking agent as "Needs input"). Without an approver every such call is
//! refused with a reason the model reads.

use crate::events::EventBus;
use crate::tool::{RuleKind, RuleSet, ToolContext, ToolError, Verdict};
use async_trait::async_trait;
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

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
    /// Several runs may be waiting at once, each in its own call: a person-facing
    /// approver queues them.
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
    /// The `ask` rule that matched, as written, and where it came from (`None`: the
    /// tool was marked with [`crate::SessionBuilder::ask_before`]).
    pub rule: Option<(String, String)>,
}

/// An approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Run this call.
    AllowOnce,
    /// Run this call and every later call the same rule asks about (or, for an
    /// `ask_before` tool, every later call of the tool) in the session, by any
    /// agent, without asking again.
    AllowForSession,
    /// Do not run it; the model reads `reason` as the tool's error.
    Deny {
        /// Why, written for the model (say what to do instead).
        reason: String,
    },
}

/// The session's rules and approvals: its approver, what was allowed for the
/// session, and who is asking (from the event bus's record of runs).
pub(crate) struct ApprovalGate {
    approver: Option<Arc<dyn Approver>>,
    /// The session's rules (changed by `/permissions`: never held across an await).
    rules: Mutex<RuleSet>,
    /// Tools the embedder marked `ask`.
    ask_before: BTreeSet<String>,
    /// Keys allowed for the session: `rule:<text>` or `tool:<name>`.
    allowed: Mutex<HashSet<String>>,
    /// The workspace root (path rules given absolute paths).
    root: PathBuf,
    /// Set once the supervisor exists (it owns the bus).
    pub(crate) bus: OnceLock<Arc<EventBus>>,
}

/// Why a call goes to the approver.
struct Asking {
    key: String,
    rule: Option<(String, String)>,
}

impl ApprovalGate {
    pub fn new(
        approver: Option<Arc<dyn Approver>>,
        rules: RuleSet,
        ask_before: BTreeSet<String>,
        root: PathBuf,
    ) -> Self {
        ApprovalGate {
            approver,
            rules: Mutex::new(rules),
            ask_before,
            allowed: Mutex::new(HashSet::new()),
            root,
            bus: OnceLock::new(),
        }
    }

    /// The session's rules now.
    pub fn rules(&self) -> RuleSet {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Add a rule for the rest of the session.
    pub fn add_rule(&self, kind: RuleKind, text: &str) -> Result<(), crate::tool::RuleError> {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(kind, text, "this session")
    }

    /// Remove every session rule written `text`; how many.
    pub fn remove_rule(&self, text: &str) -> usize {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(text)
    }

    fn allowed(&self, key: &str) -> bool {
        self.allowed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }

    /// What the rules say: refuse, ask (why), or run.
    fn verdict(
        &self,
        tool: &str,
        args: &serde_json::Value,
        run_rules: &RuleSet,
    ) -> Result<Option<Asking>, ToolError> {
        let mut all = self.rules();
        all.extend(run_rules);
        match all.decide(tool, args, &self.root) {
            Verdict::Deny(r) => Err(ToolError::Denied {
                tool: tool.to_string(),
                reason: format!(
                    "the permission rule deny {:?} ({}) forbids this call; do the work another way or report that it is forbidden",
                    r.rule.text(),
                    r.source
                ),
            }),
            Verdict::Ask(r) => Ok(Some(Asking {
                key: format!("rule:{}", r.rule.text()),
                rule: Some((r.rule.text().to_string(), r.source.clone())),
            })),
            Verdict::Allow(_) => Ok(None),
            Verdict::None if self.ask_before.contains(tool) => Ok(Some(Asking {
                key: format!("tool:{tool}"),
                rule: None,
            })),
            Verdict::None => Ok(None),
        }
    }

    /// Ask (unless already allowed for the session); `Err` is what the model reads.
    async fn ask(
        &self,
        asking: Asking,
        tool: &str,
        args: &serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<(), ToolError> {
        if self.allowed(&asking.key) {
            return Ok(());
        }
        let Some(approver) = &self.approver else {
            let why = match &asking.rule {
                Some((rule, source)) => {
                    format!("the permission rule ask {rule:?} ({source}) requires approval")
                }
                None => "this session asks before running it".to_string(),
            };
            return Err(ToolError::Denied {
                tool: tool.to_string(),
                reason: format!(
                    "{why} and there is no approver to ask; do the work without it, or report that it needs the user's approval"
                ),
            });
        };
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
            rule: asking.rule.clone(),
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
                    .insert(asking.key);
                Ok(())
            }
            Approval::Deny { reason } => Err(ToolError::Denied {
                tool: tool.to_string(),
                reason,
            }),
        }
    }
}

#[async_trait]
impl crate::tool::CallGate for ApprovalGate {
    async fn check(
        &self,
        tool: &str,
        args: &serde_json::Value,
        run_rules: &RuleSet,
        ctx: &ToolContext,
    ) -> Result<(), ToolError> {
        match self.verdict(tool, args, run_rules)? {
            Some(asking) => self.ask(asking, tool, args, ctx).await,
            None => Ok(()),
        }
    }

    fn session_rules(&self) -> RuleSet {
        self.rules()
    }
}
