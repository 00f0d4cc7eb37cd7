//! Driving one run from spawn to its terminal record: wait for a slot (queued),
//! run the agent loop with the ledger, heartbeat and inbox wired in, enforce the
//! output contract, record the end durably, then publish the result (and push it
//! to a background child's parent).
//!
//! A run that has answered while background children it opened are still out
//! waits for their completions (see `LoopInbox`): meanwhile it holds no running
//! slot and the heartbeat does not watch it. Its wall time starts when it first
//! gets a slot, so queued time is free.

use super::contract;
use super::fork;
use super::gate::{Settled, SpawnGate};
use super::inbox::{Claim, RunInbox};
use super::result::ChildResult;
use super::role::Role;
use super::run::{RootRequest, Supervisor};
use super::supervisor::{LiveStatus, Progress};
use super::tally::{RootTallies, TallyCell};
use super::tools::delegation_tools;
use super::SpawnError;
use crate::agent::{
    self, AgentEvent, AgentHooks, AgentOutcome, AgentSpec, BudgetSpent, Ending, EventSink, Guard,
    Inbox, ToolChoicePolicy,
};
use crate::model::pricing::Price;
use crate::model::{Message, Model, ModelRequest, ModelResponse, StreamEvent, Usage};
use crate::tool::{Capability, Permissions, Tool, Toolbox};
use async_trait::async_trait;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

/// The tree-wide limits every run of a tree checks (`[subagents] tree_*`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeLimits {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// This run's own limits (`[subagents] token_budget`, `cost_budget_usd`,
/// `wall_time_secs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunLimits {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub wall_time: Option<Duration>,
}

/// Token, cost and time budgets of one run, and the shared counters of its tree.
pub struct Budgets {
    /// Tokens used by the whole tree (root and all descendants).
    tree_used: Arc<AtomicU64>,
    /// What the model answered to the whole tree, and to this run.
    tree_tally: Arc<TallyCell>,
    own_tally: Arc<TallyCell>,
    tree: TreeLimits,
    run: RunLimits,
    /// The model this run talks to and its price (if the user set one).
    model_id: String,
    price: Option<Price>,
    started: std::sync::OnceLock<Instant>,
}

impl Budgets {
    pub fn root(
        tree: TreeLimits,
        tallies: Option<&RootTallies>,
        model_id: &str,
        price: Option<Price>,
    ) -> Self {
        let tallies = tallies.map(|t| (t.tree.clone(), t.own.clone()));
        let (tree_tally, own_tally) = tallies.unwrap_or_default();
        Budgets {
            tree_used: Arc::new(AtomicU64::new(0)),
            tree_tally,
            own_tally,
            tree,
            run: RunLimits::default(),
            model_id: model_id.to_string(),
            price,
            started: std::sync::OnceLock::new(),
        }
    }
    pub fn child(parent: &Budgets, run: RunLimits, model_id: &str, price: Option<Price>) -> Self {
        Budgets {
            tree_used: parent.tree_used.clone(),
            tree_tally: parent.tree_tally.clone(),
            own_tally: Arc::default(),
            tree: parent.tree,
            run,
            model_id: model_id.to_string(),
            price,
            started: std::sync::OnceLock::new(),
        }
    }
    /// The run got its slot: its wall time starts now (once).
    pub fn start(&self) {
        let _ = self.started.set(Instant::now());
    }
    /// Count one model answer (with its usage, if reported) for this run and its tree.
    fn add(&self, usage: Option<&Usage>) {
        if let Some(u) = usage {
            self.tree_used.fetch_add(u.total(), Ordering::Relaxed);
        }
        let price = self.price.as_ref();
        self.tree_tally.add(&self.model_id, usage, price);
        self.own_tally.add(&self.model_id, usage, price);
    }
    /// `Err` naming the budget once the tree's token or cost budget is spent (or
    /// its cost cannot be known under a cost budget).
    pub fn check_tree(&self) -> Result<(), SpawnError> {
        Ok(self.tree_spent()?)
    }

    /// The tree's budgets, as a [`Guard`] answers.
    fn tree_spent(&self) -> Result<(), BudgetSpent> {
        if let Some(budget) = self.tree.tokens {
            let used = self.tree_used.load(Ordering::Relaxed);
            if used >= budget {
                return Err(BudgetSpent::TreeTokens { budget, used });
            }
        }
        if let Some(budget_usd) = self.tree.cost_usd {
            match self.tree_tally.cost_usd() {
                Some(used_usd) if used_usd >= budget_usd => {
                    return Err(BudgetSpent::TreeCost {
                        budget_usd,
                        used_usd,
                    })
                }
                None => {
                    return Err(BudgetSpent::TreeCostUnpriced {
                        budget_usd,
                        model: None,
                    })
                }
                Some(_) => {}
            }
            if self.price.is_none() {
                return Err(BudgetSpent::TreeCostUnpriced {
                    budget_usd,
                    model: Some(self.model_id.clone()),
                });
            }
        }
        Ok(())
    }
}

impl Guard for Budgets {
    fn before_step(&self, usage: &Usage, _turn: u32) -> Result<(), BudgetSpent> {
        if let (Some(wall), Some(started)) = (self.run.wall_time, self.started.get()) {
            if started.elapsed() >= wall {
                return Err(BudgetSpent::WallTime {
                    limit_secs: wall.as_secs(),
                });
            }
        }
        if let Some(budget) = self.run.tokens {
            if usage.total() >= budget {
                return Err(BudgetSpent::RunTokens {
                    budget,
                    used: usage.total(),
                });
            }
        }
        if let Some(budget_usd) = self.run.cost_usd {
            match (self.price, self.own_tally.cost_usd()) {
                (Some(_), Some(used_usd)) if used_usd >= budget_usd => {
                    return Err(BudgetSpent::RunCost {
                        budget_usd,
                        used_usd,
                    })
                }
                (Some(_), Some(_)) => {}
                _ => {
                    return Err(BudgetSpent::RunCostUnpriced {
                        budget_usd,
                        model: self.model_id.clone(),
                    })
                }
            }
        }
        self.tree_spent()
    }
}

/// What a run's own tools need to know about it (its delegation tools open
/// children of it).
pub struct RunCtx {
    pub run_id: String,
    pub root_id: String,
    pub name: String,
    pub depth: u32,
    pub role: Role,
    pub kind_name: String,
    pub permissions: Arc<Permissions>,
    /// Names of the tools this run has (a custom child may only pick among them);
    /// set once its toolbox is built.
    pub tool_names: std::sync::OnceLock<Vec<String>>,
    pub inbox: Arc<RunInbox>,
    pub progress: Arc<Progress>,
    pub budgets: Budgets,
    pub provider_name: String,
    pub model_id: String,
    pub model: Arc<dyn Model>,
    /// The running slot this run holds (children only); yielded while it waits.
    pub(crate) slot: Mutex<Option<OwnedSemaphorePermit>>,
    pub(crate) last_request: Mutex<Option<Arc<ModelRequest>>>,
}

impl RunCtx {
    /// Run `fut` (a wait on children) with this run's running slot given back, and
    /// take a slot again afterwards — unless `cancel` (the run's token) fired.
    pub(crate) async fn without_slot<F: std::future::Future>(
        &self,
        sup: &Supervisor,
        cancel: &CancellationToken,
        fut: F,
    ) -> F::Output {
        let had = self
            .slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some();
        let out = fut.await;
        if had {
            if let Some(p) = sup.inner.board.acquire_slot(cancel).await {
                *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
            }
        }
        out
    }

    /// Names of the tools in this run's toolbox.
    pub fn tool_names(&self) -> Vec<String> {
        self.tool_names.get().cloned().unwrap_or_default()
    }

    /// The request this run sent last (what a forked child continues from).
    pub fn last_request(&self) -> Option<Arc<ModelRequest>> {
        self.last_request
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Everything decided at spawn time for one child.
pub(crate) struct ChildPlan {
    pub ctx: Arc<RunCtx>,
    pub parent_id: String,
    pub parent_inbox: Arc<RunInbox>,
    pub prompt: String,
    /// The role's stance (or the definition's body) and the output contract.
    pub system_prompt: String,
    pub fork_from: Option<Arc<ModelRequest>>,
    pub max_turns: u32,
    pub background: bool,
    pub cancel: CancellationToken,
    pub result_tx: watch::Sender<Option<ChildResult>>,
    pub claim: Arc<Claim>,
    pub transcript_handle: String,
    pub warnings: Vec<String>,
    /// Opens once the spawn record is on disk.
    pub spawned: SpawnGate,
}

/// Where a child's end goes: its record, its parent (for a background child), and
/// whoever waits on it.
struct Delivery {
    ctx: Arc<RunCtx>,
    background: bool,
    parent_inbox: Arc<RunInbox>,
    claim: Arc<Claim>,
    result_tx: watch::Sender<Option<ChildResult>>,
}

impl ChildPlan {
    fn delivery(&self) -> Delivery {
        Delivery {
            ctx: self.ctx.clone(),
            background: self.background,
            parent_inbox: self.parent_inbox.clone(),
            claim: self.claim.clone(),
            result_tx: self.result_tx.clone(),
        }
    }
}

/// The settled status for how a run's loop ended.
fn status_of(ending: &Ending) -> LiveStatus {
    match ending {
        Ending::Completed | Ending::MaxTurns | Ending::Budget { .. } => LiveStatus::Completed,
        Ending::Cancelled => LiveStatus::Cancelled,
        Ending::Failed { .. } => LiveStatus::Failed,
    }
}

/// Queue the child's spawn record now; the future resolves once it is on disk.
pub(crate) fn record_spawn(
    sup: &Supervisor,
    plan: &ChildPlan,
) -> impl std::future::Future<Output = Result<(), SpawnError>> + Send + 'static {
    let ctx = &plan.ctx;
    let durable = sup.inner.recorder.spawn(super::record::SpawnRecord {
        id: &ctx.run_id,
        parent_id: Some(&plan.parent_id),
        name: &ctx.name,
        role: ctx.role.as_str(),
        agent_type: &ctx.kind_name,
        objective: &plan.prompt,
        model: &ctx.model_id,
        provider: &ctx.provider_name,
        workspace: sup.inner.env.workspace.root(),
    });
    async move { durable.await.map_err(SpawnError::Ledger) }
}

/// Start the child's task. A panic anywhere in it becomes a failed record.
pub(crate) fn start_child(sup: Supervisor, plan: ChildPlan) {
    tokio::spawn(async move {
        let delivery = plan.delivery();
        let ctx = plan.ctx.clone();
        let handle = plan.transcript_handle.clone();
        let mut gate = plan.spawned.clone();
        let sup2 = sup.clone();
        let outcome = AssertUnwindSafe(drive_child(sup2, plan))
            .catch_unwind()
            .await;
        if let Err(panic) = outcome {
            // A run whose spawn never reached the disk has no record to end (one
            // whose `open` was dropped still has its record queued: it ends it).
            if gate.settled().await == Settled::NotRecorded {
                return;
            }
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            let result = ChildResult {
                agent_id: ctx.run_id.clone(),
                name: ctx.name.clone(),
                role: ctx.kind_name.clone(),
                status: LiveStatus::Failed,
                reason: Some(format!("the run crashed: {detail}")),
                final_text: String::new(),
                report: None,
                turns: 0,
                tool_calls: 0,
                usage: Usage::default(),
                error: Some(format!("the run crashed: {detail}")),
                transcript_handle: handle,
                model: format!("{}/{}", ctx.provider_name, ctx.model_id),
                warnings: Vec::new(),
            };
            finish(&sup, &delivery, result).await;
        }
    });
}

async fn drive_child(sup: Supervisor, plan: ChildPlan) {
    let inner = &sup.inner;
    let ctx = plan.ctx.clone();
    let mut gate = plan.spawned.clone();
    // Queue for a running slot; queued time does not count for the heartbeat.
    let permit = match inner.board.try_slot() {
        Some(p) => Some(p),
        None => {
            if !spawn_on_disk(&sup, &plan, &mut gate).await {
                return;
            }
            inner.board.set_status(&ctx.run_id, LiveStatus::Queued);
            inner.recorder.status(&ctx.run_id, LiveStatus::Queued).await;
            inner.board.acquire_slot(&plan.cancel).await
        }
    };
    let Some(permit) = permit else {
        if !spawn_on_disk(&sup, &plan, &mut gate).await {
            return;
        }
        let result = settle(&sup, &plan, None, LiveStatus::Cancelled).await;
        finish(&sup, &plan.delivery(), result).await;
        return;
    };
    // The first context and the toolbox are built while the spawn record commits.
    let (system, messages, offered) = first_context(&sup, &plan);
    let toolbox = build_toolbox(&sup, &ctx, offered.is_some());
    if !spawn_on_disk(&sup, &plan, &mut gate).await {
        drop(permit);
        return;
    }
    // The tree's budget was spent while this child waited for its slot: it never
    // starts (no model request), and its record says which budget stopped it.
    if let Err(spent) = ctx.budgets.check_tree() {
        drop(permit);
        let mut result = settle(&sup, &plan, None, LiveStatus::Cancelled).await;
        result.reason = Some(spent.to_string());
        finish(&sup, &plan.delivery(), result).await;
        return;
    }
    *ctx.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(permit);
    ctx.budgets.start();
    inner.board.set_status(&ctx.run_id, LiveStatus::Running);
    inner
        .recorder
        .status_queued(&ctx.run_id, LiveStatus::Running);
    ctx.progress.pause(false);
    // The transcript starts with what the child was told (for a fork: the tail;
    // the parent's part is in the parent's transcript).
    if let Some(first) = messages.last() {
        record_message(&sup, &ctx, first);
    }
    let spec = AgentSpec {
        run_id: ctx.run_id.clone(),
        system,
        model: ctx.model.clone(),
        model_id: ctx.model_id.clone(),
        sampling: match &plan.fork_from {
            Some(f) => f.sampling.clone(),
            None => inner.env.sampling.clone(),
        },
        // A child's policy: `[subagents]` overrides, else the session's. A fork's
        // first request must repeat the parent's, tool choice included (the parent
        // may be past its first step, where `first` no longer applies).
        tool_choice: {
            let policy = inner.env.settings.child_tool_choice(&inner.env.tool_choice);
            match &plan.fork_from {
                Some(f) => ToolChoicePolicy {
                    first: f.tool_choice.clone(),
                    rest: policy.rest,
                },
                None => policy,
            }
        },
        toolbox,
        workspace: inner.env.workspace.clone(),
        max_turns: plan.max_turns,
        offered_tools: offered,
        tool_concurrency: inner.env.tool_concurrency,
    };
    let hooks = hooks_for(&sup, &ctx, None);
    let mut outcome = agent::run(&spec, messages, &hooks, &plan.cancel).await;
    // The output contract: parse; ask once for the format if sections are missing.
    let mut report = None;
    if outcome.succeeded() {
        let mut parsed = contract::parse(&outcome.final_text);
        // The repair is a model request like any other: not after a budget stopped
        // the run, nor once the tree's budget is spent.
        let budget_left =
            !matches!(outcome.ending, Ending::Budget { .. }) && ctx.budgets.check_tree().is_ok();
        if !parsed.missing.is_empty() && !plan.cancel.is_cancelled() && budget_left {
            let mut messages = outcome.messages.clone();
            let repair = Message::user(contract::repair_prompt(&parsed.missing));
            record_message(&sup, &ctx, &repair);
            messages.push(repair);
            if let Some(answer) =
                repair_step(&spec, &hooks, &messages, outcome.turns + 1, &plan.cancel).await
            {
                outcome.turns += 1;
                outcome.usage.add(&answer.usage.unwrap_or_default());
                let text = answer.message.content.clone();
                messages.push(answer.message);
                if !text.trim().is_empty() {
                    let again = contract::parse(&text);
                    if again.missing.len() < parsed.missing.len() {
                        parsed = again;
                        outcome.final_text = text;
                    }
                }
            }
            outcome.messages = messages;
        }
        // Reading files: off the async threads (bounded inside `verify_all`).
        let root = inner.env.workspace.root().to_path_buf();
        let mut evidence = parsed.evidence.clone();
        let checked = tokio::task::spawn_blocking(move || {
            super::evidence::verify_all(&mut evidence, &root);
            evidence
        })
        .await;
        match checked {
            Ok(evidence) => parsed.evidence = evidence,
            // The check itself crashed: the citations stay unchecked, saying so.
            Err(e) => {
                for item in parsed.evidence.iter_mut().filter(|i| i.path.is_some()) {
                    item.verified = None;
                    item.reason = Some(format!("not checked: the check failed ({e})"));
                }
            }
        }
        report = Some(parsed);
    }
    ctx.progress.pause(true);
    // Give the slot back before the (durable) terminal write.
    drop(ctx.slot.lock().unwrap_or_else(|p| p.into_inner()).take());
    // A budget that stopped the run before its first request: it never started.
    let status = match &outcome.ending {
        Ending::Budget { .. } if outcome.turns == 0 => LiveStatus::Cancelled,
        ending => status_of(ending),
    };
    let mut result = settle(&sup, &plan, Some(&outcome), status).await;
    result.report = report;
    finish(&sup, &plan.delivery(), result).await;
}

/// Ask once more for the report format: exactly one model step, with no tools
/// (and so no tool choice: servers refuse one without tools), reported to the
/// run's hooks like any other step. A tool call in the answer is dropped. `None`
/// when the step failed or the run was cancelled.
async fn repair_step(
    spec: &AgentSpec,
    hooks: &AgentHooks,
    messages: &[Message],
    turn: u32,
    cancel: &CancellationToken,
) -> Option<ModelResponse> {
    let emit = |event: AgentEvent| {
        if let Some(sink) = &hooks.events {
            sink(&event);
        }
    };
    let request = Arc::new(ModelRequest {
        model: spec.model_id.clone(),
        system: spec.system.clone(),
        messages: messages.to_vec(),
        tools: Vec::new(),
        tool_choice: None,
        sampling: spec.sampling.clone(),
    });
    emit(AgentEvent::ModelRequest {
        turn,
        request: request.clone(),
    });
    let sink = hooks.events.clone();
    let on_event = move |event: StreamEvent| {
        if let Some(s) = &sink {
            s(&AgentEvent::Stream { turn, event });
        }
    };
    let started = Instant::now();
    let result = tokio::select! {
        r = spec.model.step(&request, &on_event) => r,
        _ = cancel.cancelled() => return None,
    };
    match result {
        Ok(mut response) => {
            response.message.tool_calls.clear();
            emit(AgentEvent::ModelResponse {
                turn,
                response: response.clone(),
                duration_ms: started.elapsed().as_millis() as u64,
            });
            emit(AgentEvent::Message {
                message: response.message.clone(),
            });
            Some(response)
        }
        Err(e) => {
            emit(AgentEvent::ModelFailed {
                turn,
                error: e.to_string(),
            });
            None
        }
    }
}

/// The child's system prompt and first messages; for a fork, also the parent's
/// tool specs (offered byte-identical; the grant is enforced at execution).
fn first_context(
    sup: &Supervisor,
    plan: &ChildPlan,
) -> (String, Vec<Message>, Option<Vec<crate::model::ToolSpec>>) {
    let ctx = &plan.ctx;
    let instructions = with_project_instructions(
        child_instructions(&plan.system_prompt),
        &sup.inner.env.project_instructions,
    );
    match &plan.fork_from {
        Some(parent) => {
            let tail = fork::fork_tail(
                &instructions,
                &fork::StateSnapshot {
                    role: &ctx.kind_name,
                    depth: ctx.depth,
                    parent_messages: parent.messages.len(),
                    allowed_tools: ctx.permissions.allowed_tools.clone(),
                },
                &plan.prompt,
            );
            let mut messages = parent.messages.clone();
            messages.push(Message::user(tail));
            (parent.system.clone(), messages, Some(parent.tools.clone()))
        }
        None => {
            let _ = sup;
            (instructions, vec![Message::user(plan.prompt.clone())], None)
        }
    }
}

/// A child's system prompt: who it is, then its stance and the contract.
/// A system prompt ending with the project's instructions (the same block for
/// every run, last, so siblings' prefixes stay byte-identical).
fn with_project_instructions(prompt: String, project: &str) -> String {
    if project.is_empty() {
        prompt
    } else {
        format!("{prompt}\n\n{project}")
    }
}

fn child_instructions(stance_and_contract: &str) -> String {
    format!(
        "You are a brood sub-agent, opened by a parent agent for one focused task; tool \
calls outside your grant are refused.\n\n{stance_and_contract}"
    )
}

/// The run's toolbox: fresh workspace tools, plus delegation tools unless the run
/// is at the depth limit. `fork` keeps every candidate so specs can match the parent.
fn build_toolbox(sup: &Supervisor, ctx: &Arc<RunCtx>, _fork: bool) -> Toolbox {
    let mut tools: Vec<Arc<dyn Tool>> = (sup.inner.env.tools)(&ctx.run_id);
    let mut permissions = (*ctx.permissions).clone();
    let can_delegate = sup.inner.env.settings.enabled
        && ctx.depth < sup.limits().max_depth
        && permissions.capabilities.contains(&Capability::Delegate);
    if !can_delegate {
        // Still candidates, so a call to one (a forked child is offered its
        // parent's specs) is refused as not granted, naming the tool and role.
        permissions.capabilities.remove(&Capability::Delegate);
    }
    tools.extend(delegation_tools(sup, ctx));
    let toolbox = Toolbox::with_cache(tools, permissions, &sup.inner.specs);
    let _ = ctx.tool_names.set(toolbox.names());
    toolbox
}

fn hooks_for(sup: &Supervisor, ctx: &Arc<RunCtx>, extra: Option<EventSink>) -> AgentHooks {
    let recorder = sup.inner.recorder.clone();
    let ctx2 = ctx.clone();
    let sink: EventSink = Arc::new(move |event: &AgentEvent| {
        match event {
            AgentEvent::ModelRequest { request, .. } => {
                *ctx2.last_request.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(request.clone());
            }
            AgentEvent::ModelResponse { response, .. } => {
                ctx2.budgets.add(response.usage.as_ref());
            }
            AgentEvent::ToolStarted { .. } => ctx2.progress.tool_started(),
            AgentEvent::ToolFinished { .. } => ctx2.progress.tool_finished(),
            _ => {}
        }
        ctx2.progress.touch();
        recorder.observe(&ctx2.run_id, event);
        if let Some(x) = &extra {
            x(event);
        }
    });
    AgentHooks {
        events: Some(sink),
        inbox: Some(Arc::new(LoopInbox {
            sup: sup.clone(),
            ctx: ctx.clone(),
        })),
        guard: Some(Arc::new(GuardRef(ctx.clone()))),
    }
}

/// A message the loop did not push itself (the task, a fork tail, the repair
/// prompt), recorded so the transcript holds the whole conversation.
fn record_message(sup: &Supervisor, ctx: &RunCtx, message: &Message) {
    sup.inner.recorder.observe(
        &ctx.run_id,
        &AgentEvent::Message {
            message: message.clone(),
        },
    );
}

/// A run's inbox as its loop sees it. A run that has answered but still has
/// background children out waits for their completions; while it waits it does no
/// work, so it gives its running slot back (or a tree of waiting parents could
/// hold every slot while their children queue) and the heartbeat leaves it alone
/// (the children are watched themselves).
struct LoopInbox {
    sup: Supervisor,
    ctx: Arc<RunCtx>,
}

#[async_trait]
impl Inbox for LoopInbox {
    fn drain(&self) -> Vec<Message> {
        self.ctx.inbox.drain()
    }

    async fn wait_for_more(&self, cancel: &CancellationToken) -> bool {
        if !self.ctx.inbox.would_wait() {
            return self.ctx.inbox.wait_for_more(cancel).await;
        }
        self.ctx.progress.pause(true);
        let more = self
            .ctx
            .without_slot(&self.sup, cancel, self.ctx.inbox.wait_for_more(cancel))
            .await;
        self.ctx.progress.pause(false);
        more
    }
}

struct GuardRef(Arc<RunCtx>);

impl Guard for GuardRef {
    fn before_step(&self, usage: &Usage, turn: u32) -> Result<(), BudgetSpent> {
        self.0.budgets.before_step(usage, turn)
    }
}

/// Build the child's result from its outcome (or its absence when cancelled
/// before it started).
async fn settle(
    sup: &Supervisor,
    plan: &ChildPlan,
    outcome: Option<&AgentOutcome>,
    status: LiveStatus,
) -> ChildResult {
    let ctx = &plan.ctx;
    let cancel_reason = sup.inner.board.cancel_reason(&ctx.run_id);
    let reason = match outcome.map(|o| &o.ending) {
        Some(Ending::MaxTurns) => Some(format!(
            "max_turns = {} reached; final report",
            plan.max_turns
        )),
        Some(Ending::Budget { reason }) if outcome.is_some_and(|o| o.turns == 0) => {
            Some(reason.clone())
        }
        Some(Ending::Budget { reason }) => Some(format!("{reason}; final report")),
        Some(Ending::Failed { error }) => Some(error.clone()),
        Some(Ending::Cancelled) | None => Some(
            cancel_reason
                .unwrap_or_else(|| "cancelled (the parent's turn or the session ended)".into()),
        ),
        Some(Ending::Completed) => None,
    };
    ChildResult {
        agent_id: ctx.run_id.clone(),
        name: ctx.name.clone(),
        role: ctx.kind_name.clone(),
        status,
        error: match (&status, &reason) {
            (LiveStatus::Failed, Some(r)) => Some(r.clone()),
            _ => None,
        },
        reason,
        final_text: outcome.map(|o| o.final_text.clone()).unwrap_or_default(),
        report: None,
        turns: outcome.map(|o| o.turns).unwrap_or(0),
        tool_calls: outcome.map(|o| o.tool_calls).unwrap_or(0),
        usage: outcome.map(|o| o.usage).unwrap_or_default(),
        transcript_handle: plan.transcript_handle.clone(),
        model: format!("{}/{}", ctx.provider_name, ctx.model_id),
        warnings: plan.warnings.clone(),
    }
}

/// Wait for the spawn record; `true` when the child may run. A spawn whose `open`
/// was dropped (the parent's turn cancelled while the record waited for the
/// ledger) still has its record queued: the child ends it `cancelled`, which gives
/// back its slot and its name, and tells no parent (nobody was told it opened).
async fn spawn_on_disk(sup: &Supervisor, plan: &ChildPlan, gate: &mut SpawnGate) -> bool {
    match gate.settled().await {
        Settled::OnDisk => true,
        Settled::NotRecorded => false,
        Settled::Abandoned => {
            sup.inner.board.cancel(
                &plan.ctx.run_id,
                "cancelled before it started: the call that opened it was cancelled \
                 while its spawn record waited for the ledger",
            );
            let result = settle(sup, plan, None, LiveStatus::Cancelled).await;
            let delivery = Delivery {
                background: false,
                ..plan.delivery()
            };
            finish(sup, &delivery, result).await;
            false
        }
    }
}

/// Record the end (durably), then publish it; a background child's result is
/// pushed into its parent's next step unless someone claimed it first.
async fn finish(sup: &Supervisor, d: &Delivery, result: ChildResult) {
    let Delivery {
        ctx,
        background,
        parent_inbox,
        claim,
        result_tx,
    } = d;
    drop(ctx.slot.lock().unwrap_or_else(|p| p.into_inner()).take());
    sup.inner.recorder.finish_queued(&result);
    sup.inner.board.set_status(&ctx.run_id, result.status);
    if *background {
        let cap = sup.inner.env.settings.context_cap_bytes;
        let text = format!(
            "Background sub-agent {} ({}) settled:\n{}",
            result.name,
            result.agent_id,
            super::tools::render_result(&result, cap)
        );
        parent_inbox.push_completion(&ctx.run_id, Message::user(text), claim.clone());
    }
    let _ = result_tx.send(Some(result));
}

/// The session's root run: recorded like any other, no slot, full grant.
pub(crate) async fn run_root(
    sup: &Supervisor,
    id: String,
    req: RootRequest,
    on_start: impl FnOnce(&str),
) -> Result<(String, AgentOutcome), SpawnError> {
    let inner = &sup.inner;
    let env = &inner.env;
    let progress = inner.board.new_progress();
    let permissions = env.root_permissions();
    let price = sup
        .price_for(
            &env.main_provider,
            &env.main_model_id,
            env.main_model.as_ref(),
        )
        .await;
    let ctx = Arc::new(RunCtx {
        run_id: id.clone(),
        root_id: id.clone(),
        name: req.name.clone(),
        depth: 0,
        role: Role::General,
        kind_name: "parent".into(),
        tool_names: std::sync::OnceLock::new(),
        permissions: Arc::new(permissions),
        inbox: RunInbox::new(),
        progress,
        budgets: Budgets::root(
            TreeLimits {
                tokens: env.settings.tree_token_budget,
                cost_usd: env.settings.tree_cost_budget_usd,
            },
            req.tallies.as_deref(),
            &env.main_model_id,
            price,
        ),
        provider_name: env.main_provider.clone(),
        model_id: env.main_model_id.clone(),
        model: env.main_model.clone(),
        slot: Mutex::new(None),
        last_request: Mutex::new(None),
    });
    inner
        .recorder
        .spawn(super::record::SpawnRecord {
            id: &id,
            parent_id: None,
            name: &req.name,
            role: "parent",
            agent_type: "parent",
            objective: &req.prompt,
            model: &ctx.model_id,
            provider: &ctx.provider_name,
            workspace: env.workspace.root(),
        })
        .await
        .map_err(SpawnError::Ledger)?;
    inner.recorder.status_queued(&id, LiveStatus::Running);
    on_start(&id);
    let first = Message::user(req.prompt.clone());
    record_message(sup, &ctx, &first);
    // The run stops on its turn's token or the session's: session → turn → children.
    let cancel = env.session_cancel.child_token();
    let link = {
        let turn = req.cancel.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = turn.cancelled() => cancel.cancel(),
                _ = cancel.cancelled() => {}
            }
        })
    };
    let toolbox = build_toolbox(sup, &ctx, false);
    let spec = AgentSpec {
        run_id: id.clone(),
        system: req.system.unwrap_or_else(|| {
            with_project_instructions(root_system_prompt(sup), &sup.inner.env.project_instructions)
        }),
        model: ctx.model.clone(),
        model_id: ctx.model_id.clone(),
        sampling: env.sampling.clone(),
        tool_choice: env.tool_choice.clone(),
        toolbox,
        workspace: env.workspace.clone(),
        max_turns: req.max_turns,
        offered_tools: None,
        tool_concurrency: env.tool_concurrency,
    };
    let hooks = hooks_for(sup, &ctx, req.events);
    let mut initial = req.history;
    initial.push(first);
    let outcome = agent::run(&spec, initial, &hooks, &cancel).await;
    link.abort();
    let status = status_of(&outcome.ending);
    let result = ChildResult {
        agent_id: id.clone(),
        name: req.name,
        role: "parent".into(),
        status,
        reason: match &outcome.ending {
            Ending::Completed => None,
            Ending::MaxTurns => Some(format!(
                "max_turns = {} reached; final report",
                req.max_turns
            )),
            Ending::Budget { reason } => Some(reason.clone()),
            Ending::Cancelled => Some(
                inner
                    .board
                    .root_reason(&id)
                    .unwrap_or_else(|| "cancelled".into()),
            ),
            Ending::Failed { error } => Some(error.clone()),
        },
        final_text: outcome.final_text.clone(),
        report: None,
        turns: outcome.turns,
        tool_calls: outcome.tool_calls,
        usage: outcome.usage,
        error: match &outcome.ending {
            Ending::Failed { error } => Some(error.clone()),
            _ => None,
        },
        transcript_handle: format!("transcript:{id}"),
        model: format!("{}/{}", ctx.provider_name, ctx.model_id),
        warnings: Vec::new(),
    };
    inner.recorder.finish(&result).await;
    Ok((id, outcome))
}

fn root_system_prompt(sup: &Supervisor) -> String {
    let mut s = String::from(
        "You are a coding agent working in a software workspace through tools. Read before \
you change things, keep changes minimal, and verify them. When you are done, answer with a \
short account of what you did and found.",
    );
    if sup.inner.env.settings.enabled {
        s.push_str(
            "\n\nYou can delegate: `task` runs focused sub-agents in parallel and waits for \
their reports (one prompt per independent question); `agent_open` starts background work \
whose result arrives by itself later. Treat their reports as a working set to check, not \
as ground truth.",
        );
    }
    s
}
