//! The set of tools one run may call, built from its [`Permissions`] and checked
//! again at every call — then put to the session's [`CallGate`] (permission rules
//! and approvals), the one decision point every call of every agent goes through.

use super::rules::RuleSet;
use super::{Permissions, Tool, ToolContext, ToolError};
use crate::model::{ToolCall, ToolSpec};
use futures::FutureExt;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

/// Tool specs by tool name and [`Tool::spec_edition`], shared by the toolboxes
/// of one session: a tool's schema is derived once per session (and edition)
/// instead of once per run (a fan-out of 200 children would otherwise derive
/// every schema 200 times). The last list of specs handed out is kept too: the
/// children of one `task` hold the same tools, and share one list instead of
/// each looking up and copying every spec (issue 17.1: a 1,000-child tree).
#[derive(Default)]
pub struct SpecCache(Mutex<Specs>);

#[derive(Default)]
struct Specs {
    by_tool: HashMap<(String, u64), ToolSpec>,
    /// The last list built, with the edition of each of its tools.
    last: Option<(Vec<u64>, Arc<[ToolSpec]>)>,
}

impl SpecCache {
    /// The specs of `tools`, in their order.
    fn specs_of(&self, tools: &[Arc<dyn Tool>]) -> Arc<[ToolSpec]> {
        let mut specs = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((editions, list)) = &specs.last {
            let same = list.len() == tools.len()
                && tools
                    .iter()
                    .zip(list.iter())
                    .zip(editions)
                    .all(|((t, s), e)| *s.name == *t.name() && *e == t.spec_edition());
            if same {
                return list.clone();
            }
        }
        let mut editions = Vec::with_capacity(tools.len());
        let mut list = Vec::with_capacity(tools.len());
        for t in tools {
            let key = (t.name().to_string(), t.spec_edition());
            editions.push(key.1);
            let spec = specs
                .by_tool
                .entry(key)
                .or_insert_with(|| spec_of(t.as_ref()))
                .clone();
            list.push(spec);
        }
        let list: Arc<[ToolSpec]> = list.into();
        specs.last = Some((editions, list.clone()));
        list
    }
}

fn spec_of(tool: &dyn Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name().into(),
        description: tool.description().into(),
        parameters: tool.schema().into(),
    }
}

/// Decides a call the grant allows, just before it runs: the session's permission
/// rules and approvals (`runtime/approval.rs`). `run_rules` are the rules of the
/// calling run's agent definitions (its own and its ancestors'), on top of the
/// session's.
#[async_trait::async_trait]
pub trait CallGate: Send + Sync {
    /// `Ok` runs the call; `Err` is what the model reads instead.
    async fn check(
        &self,
        tool: &str,
        args: &serde_json::Value,
        run_rules: &RuleSet,
        ctx: &ToolContext,
    ) -> Result<(), ToolError>;

    /// The session's rules now (what a run's record keeps of the rules it ran
    /// under). None by default.
    fn session_rules(&self) -> RuleSet {
        RuleSet::new()
    }
}

/// Tools offered to one run. Only tools its permissions allow are kept.
#[derive(Clone)]
pub struct Toolbox {
    tools: Vec<Arc<dyn Tool>>,
    /// The specs, built once: schemas never change, and deriving them is far
    /// costlier than copying them into each request.
    specs: Arc<[ToolSpec]>,
    /// Candidates the permissions refused, with why (named in call errors).
    refused: Vec<(String, ToolError)>,
    permissions: Arc<Permissions>,
    /// The session's gate and this run's own rules.
    gate: Option<(Arc<dyn CallGate>, Arc<RuleSet>)>,
}

impl Toolbox {
    /// Keep the tools of `candidates` that `permissions` allow (first of a name wins).
    pub fn new(candidates: Vec<Arc<dyn Tool>>, permissions: Permissions) -> Self {
        Self::build(candidates, Arc::new(permissions), None)
    }

    /// As [`Toolbox::new`], taking specs from (and adding them to) `cache`, and
    /// `permissions` shared (a run's own grant, not a copy). Tools of one name
    /// must have one spec within a cache's users.
    pub(crate) fn with_cache(
        candidates: Vec<Arc<dyn Tool>>,
        permissions: Arc<Permissions>,
        cache: &SpecCache,
    ) -> Self {
        Self::build(candidates, permissions, Some(cache))
    }

    fn build(
        candidates: Vec<Arc<dyn Tool>>,
        permissions: Arc<Permissions>,
        cache: Option<&SpecCache>,
    ) -> Self {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut refused = Vec::new();
        for t in candidates {
            if tools.iter().any(|x| x.name() == t.name()) {
                continue;
            }
            match permissions.check_tool(t.as_ref()) {
                Ok(()) => tools.push(t),
                Err(e) => refused.push((t.name().to_string(), e)),
            }
        }
        let specs = match cache {
            Some(c) => c.specs_of(&tools),
            None => tools.iter().map(|t| spec_of(t.as_ref())).collect(),
        };
        Toolbox {
            tools,
            specs,
            refused,
            permissions,
            gate: None,
        }
    }

    /// Put every call (after the grant checks) to `gate`, with this run's `rules`.
    pub(crate) fn with_gate(mut self, gate: Arc<dyn CallGate>, rules: Arc<RuleSet>) -> Self {
        self.gate = Some((gate, rules));
        self
    }

    /// An empty toolbox (a tool-less step).
    pub fn empty(holder: &str) -> Self {
        Toolbox::new(Vec::new(), Permissions::full(holder))
    }

    /// What calls are checked against.
    pub fn permissions(&self) -> &Arc<Permissions> {
        &self.permissions
    }

    /// Every tool it holds (offered or not).
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// Their names.
    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_string()).collect()
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// It holds no tool.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The specs sent to the model, in a stable order: one shared list (every
    /// request of the run, and siblings' toolboxes built from one [`SpecCache`],
    /// point to it).
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        self.specs.clone()
    }

    /// Run one call: find the tool, check the permissions again, parse the
    /// arguments, call it. A panic inside the tool becomes [`ToolError::Panicked`].
    pub async fn call(&self, call: &ToolCall, ctx: &ToolContext) -> Result<String, ToolError> {
        if call.name.trim().is_empty() {
            return Err(ToolError::UnknownTool {
                name: String::new(),
                available: format!(
                    "{} (the call named no function; call one of these by name)",
                    self.names().join(", ")
                ),
            });
        }
        let Some(tool) = self.get(&call.name) else {
            if let Some((_, e)) = self.refused.iter().find(|(n, _)| n == &call.name) {
                return Err(e.clone());
            }
            return Err(ToolError::UnknownTool {
                name: super::clip(&call.name),
                available: self.names().join(", "),
            });
        };
        self.permissions.check_tool(tool.as_ref())?;
        ctx.permissions.check_tool(tool.as_ref())?;
        let args = parse_arguments(&call.name, &call.arguments)?;
        if let Some((gate, rules)) = &self.gate {
            gate.check(&call.name, &args, rules, ctx).await?;
        }
        let fut = AssertUnwindSafe(tool.call(args, ctx)).catch_unwind();
        tokio::select! {
            r = fut => r.unwrap_or_else(|panic| Err(ToolError::Panicked {
                tool: call.name.clone(),
                detail: panic_message(&panic),
            })),
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }
}

/// Arguments as the model sent them: a JSON object (empty text means `{}`).
fn parse_arguments(tool: &str, raw: &str) -> Result<serde_json::Value, ToolError> {
    if raw.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(other) => Err(ToolError::InvalidArguments {
            tool: tool.to_string(),
            detail: format!(
                "expected a JSON object, got {}",
                super::clip(&other.to_string())
            ),
        }),
        Err(e) => Err(ToolError::InvalidArguments {
            tool: tool.to_string(),
            detail: format!("arguments are not valid JSON ({e}): {}", super::clip(raw)),
        }),
    }
}

/// What a caught panic said.
pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}
