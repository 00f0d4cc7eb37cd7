//! Driving one child from spawn to its terminal record: wait for a slot
//! (queued), run the agent loop with the ledger, heartbeat and inbox wired in
//! (`super::hooks`), enforce the output contract (`super::report`), record the
//! end, then publish the result (and push it to a background child's parent).
//!
//! A run that has answered while background children it opened are still out
//! waits for their completions (see `super::hooks`): meanwhile it holds no
//! running slot and the heartbeat does not watch it. Its wall time starts when it
//! first gets a slot, so queued time is free.
//!
//! The driver uses the supervisor only through its methods; what it runs was
//! decided by `super::open` (the [`ChildPlan`]).

use super::board::LiveStatus;
use super::ctx::RunCtx;
use super::error::SpawnError;
use super::gate::{Hold, Settled as Gate, SpawnGate};
use super::hooks::{hooks_for, record_message};
use super::inbox::{Claim, RunInbox};
use super::prompt::first_context;
use super::record::SpawnRecord;
use super::report;
use super::result::{render_result, ChildResult, Settled};
use super::supervisor::Supervisor;
use super::worktree::{Worktree, WorktreeReport};
use crate::agent::{self, AgentHooks, AgentSpec, ToolChoicePolicy};
use crate::model::{Message, ModelRequest};
use crate::tool::Toolbox;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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
    /// Boxed: the channel is made at spawn and lives as long as the run's entry,
    /// so an unboxed result would be ~0.6 KiB per waiting child.
    pub result_tx: watch::Sender<Option<Box<ChildResult>>>,
    pub claim: Arc<Claim>,
    pub warnings: Vec<String>,
    /// Opens once the spawn record is on disk; until then the child's [`Hold`]
    /// keeps back all but its first request.
    pub spawned: SpawnGate,
    /// Its toolbox, built before its spawn is recorded (the record names its
    /// tools); `Err`: building it panicked (what it said), the child's crash.
    pub toolbox: Result<Toolbox, String>,
}

/// Where a child's end goes: its record, its parent (for a background child), and
/// whoever waits on it.
#[derive(Clone)]
pub(super) struct Delivery {
    pub(super) ctx: Arc<RunCtx>,
    warnings: Vec<String>,
    background: bool,
    parent_inbox: Arc<RunInbox>,
    claim: Arc<Claim>,
    result_tx: watch::Sender<Option<Box<ChildResult>>>,
}

impl ChildPlan {
    pub(super) fn delivery(&self) -> Delivery {
        Delivery {
            ctx: self.ctx.clone(),
            warnings: self.warnings.clone(),
            background: self.background,
            parent_inbox: self.parent_inbox.clone(),
            claim: self.claim.clone(),
            result_tx: self.result_tx.clone(),
        }
    }
}

impl Delivery {
    /// The child's result for how it ended (see [`ChildResult::settled`]).
    pub(super) fn result(&self, sup: &Supervisor, how: Settled<'_>) -> ChildResult {
        let cancel_reason = sup.board().cancel_reason(&self.ctx.run_id);
        ChildResult::settled(self.ctx.who(self.warnings.clone()), how, cancel_reason)
    }
}

/// Queue the child's spawn record now; the future resolves once it is on disk.
pub(crate) fn record_spawn(
    sup: &Supervisor,
    plan: &ChildPlan,
) -> impl std::future::Future<Output = Result<(), SpawnError>> + Send + 'static {
    let ctx = &plan.ctx;
    let durable = sup.recorder().spawn(SpawnRecord {
        id: &ctx.run_id,
        parent_id: Some(&plan.parent_id),
        name: &ctx.name,
        role: ctx.role.as_str(),
        agent_type: &ctx.kind_name,
        objective: &plan.prompt,
        model: &ctx.model_id,
        provider: &ctx.provider_name,
        workspace: sup.env().workspace.root(),
        unpriced: ctx.budgets.price().is_none(),
        grant: sup.recorded_grant(ctx, plan.fork_from.as_ref().map(|f| f.messages.len())),
    });
    async move { durable.await.map_err(SpawnError::Ledger) }
}

/// Start the child's task. A panic anywhere in it becomes a failed record.
///
/// The task's future is what every waiting child holds, so what is not live
/// while it waits stays out of it: the plan comes boxed (an `async fn`'s
/// arguments keep their place in its future for its whole life) and the ending
/// ([`finish`]) and the contract check are boxed futures (6,088 → 3,504 bytes per
/// child in a release build; BENCHMARKS.md, memory per running child).
pub(crate) fn start_child(sup: Supervisor, plan: ChildPlan) {
    let plan = Box::new(plan);
    let fut = async move {
        let delivery = plan.delivery();
        let mut gate = plan.spawned.clone();
        let outcome = AssertUnwindSafe(drive_child(sup.clone(), plan))
            .catch_unwind()
            .await;
        if let Err(panic) = outcome {
            // A run whose spawn never reached the disk has no record to end (one
            // whose `open` was dropped still has its record queued: it ends it).
            if gate.settled().await == Gate::NotRecorded {
                return;
            }
            let detail = crate::tool::panic_message(&panic);
            let result = delivery.result(&sup, Settled::Crashed { detail });
            finish(&sup, &delivery, result).await;
        }
    };
    tokio::spawn(fut);
}

async fn drive_child(sup: Supervisor, plan: Box<ChildPlan>) {
    let delivery = plan.delivery();
    // Boxed: the start (a queued slot, the first context, the loop's wiring) and
    // the plan it consumes are not live while the child waits for the model, so
    // they do not widen every waiting child's task (BENCHMARKS.md, memory).
    let Some(started) = Box::pin(start(&sup, &delivery, plan)).await else {
        return;
    };
    run_started(&sup, &delivery, started).await;
}

/// What a started child's loop runs with, made by [`start`]; boxed, so that the
/// binding in `drive_child` and the argument of `run_started` are a pointer each,
/// not two copies of these fields in every waiting child's task.
struct Started {
    ctx: Arc<RunCtx>,
    spec: AgentSpec,
    hooks: AgentHooks,
    hold: Arc<Hold>,
    messages: Vec<Message>,
    cancel: CancellationToken,
    max_turns: u32,
}

/// Take a running slot (queued meanwhile), build the first context and wire the
/// loop; `None` when the child ended before it started (its end is recorded).
async fn start(
    sup: &Supervisor,
    delivery: &Delivery,
    plan: Box<ChildPlan>,
) -> Option<Box<Started>> {
    let ChildPlan {
        ctx,
        prompt,
        system_prompt,
        fork_from,
        max_turns,
        cancel,
        spawned: mut gate,
        toolbox,
        ..
    } = *plan;
    let board = sup.board();
    // Queue for a running slot; queued time does not count for the heartbeat.
    let permit = match board.try_slot() {
        Some(p) => Some(p),
        None => {
            if !spawn_on_disk(sup, delivery, &mut gate).await {
                return None;
            }
            board.set_status(&ctx.run_id, LiveStatus::Queued);
            sup.recorder().status(&ctx.run_id, LiveStatus::Queued).await;
            board.acquire_slot(&cancel).await
        }
    };
    let Some(permit) = permit else {
        if !spawn_on_disk(sup, delivery, &mut gate).await {
            return None;
        }
        let result = delivery.result(sup, Settled::Cancelled { reason: None });
        finish(sup, delivery, result).await;
        return None;
    };
    // The first context is built, and the first request sent, while the spawn
    // record commits.
    let (system, messages, offered) = first_context(
        &ctx,
        &system_prompt,
        &prompt,
        fork_from.as_deref(),
        &sup.env().project_instructions,
        sup.system_prompts(),
    );
    // Copied into the context: not kept for the rest of the start.
    drop((system_prompt, prompt));
    let toolbox = match toolbox {
        Ok(t) => t,
        Err(detail) => {
            drop(permit);
            if spawn_on_disk(sup, delivery, &mut gate).await {
                let result = delivery.result(sup, Settled::Crashed { detail });
                finish(sup, delivery, result).await;
            }
            return None;
        }
    };
    // The tree's budget was spent while this child waited for its slot: it never
    // starts (no model request), and its record says which budget stopped it.
    if let Err(spent) = ctx.budgets.check_tree() {
        drop(permit);
        if spawn_on_disk(sup, delivery, &mut gate).await {
            let reason = Some(spent.to_string());
            let result = delivery.result(sup, Settled::Cancelled { reason });
            finish(sup, delivery, result).await;
        }
        return None;
    }
    *ctx.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(permit);
    ctx.budgets.start();
    let mut hooks = hooks_for(sup, &ctx, None);
    // What the child records first, once its spawn is on disk (its first request
    // may be out already): it runs, and the transcript starts with what it was
    // told (for a fork: the tail; the parent's part is in the parent's transcript).
    let first = {
        let (sup, ctx) = (sup.clone(), ctx.clone());
        let told = messages.last().cloned();
        move || {
            sup.board().set_status(&ctx.run_id, LiveStatus::Running);
            sup.recorder()
                .status_queued(&ctx.run_id, LiveStatus::Running);
            ctx.progress.pause(false);
            if let Some(told) = told {
                record_message(&sup, &ctx, &told);
            }
        }
    };
    let hold = Hold::new(gate, hooks.events.take(), first);
    hooks.events = Some(hold.sink());
    let env = sup.env();
    let spec = AgentSpec {
        run_id: ctx.run_id.clone(),
        system,
        model: hold.model(ctx.model.clone()),
        model_id: ctx.model_id.clone(),
        sampling: match &fork_from {
            Some(f) => f.sampling.clone(),
            None => env.sampling.clone(),
        },
        // A child's policy: `[subagents]` overrides, else the session's. A fork's
        // first request must repeat the parent's, tool choice included (the parent
        // may be past its first step, where `first` no longer applies).
        tool_choice: {
            let policy = env.settings.child_tool_choice(&env.tool_choice);
            match &fork_from {
                Some(f) => ToolChoicePolicy {
                    first: f.tool_choice.clone(),
                    rest: policy.rest,
                },
                None => policy,
            }
        },
        toolbox,
        workspace: ctx.workspace.clone(),
        max_turns,
        offered_tools: offered,
        tool_concurrency: env.tool_concurrency,
    };
    Some(Box::new(Started {
        ctx,
        spec,
        hooks,
        hold,
        messages,
        cancel,
        max_turns,
    }))
}

/// Run a started child's loop, enforce its contract and record its end. Its
/// fields are used in place (an `async fn`'s argument keeps its place in the
/// future: destructured, it would be held twice while the child waits).
async fn run_started(sup: &Supervisor, delivery: &Delivery, mut s: Box<Started>) {
    let messages = std::mem::take(&mut s.messages);
    let mut outcome = agent::run(&s.spec, messages, &s.hooks, &s.cancel).await;
    // A loop that ended before its gate opened (cancelled in flight, or its spawn
    // failed) records what it held now, or nothing at all.
    let how = s.hold.settled().await;
    if !on_settled(sup, delivery, how).await {
        drop(s.ctx.slot.lock().unwrap_or_else(|p| p.into_inner()).take());
        return;
    }
    // Boxed: the contract check is not live while the child waits for the model,
    // so it does not widen every waiting child's task (BENCHMARKS.md, memory).
    let enforced = report::enforce(sup, &s.ctx, &s.spec, &s.hooks, &mut outcome, &s.cancel);
    let report = Box::pin(enforced).await;
    s.ctx.progress.pause(true);
    // Give the slot back before the (durable) terminal write.
    drop(s.ctx.slot.lock().unwrap_or_else(|p| p.into_inner()).take());
    let how = Settled::Ran {
        outcome: &outcome,
        max_turns: s.max_turns,
    };
    let mut result = delivery.result(sup, how);
    result.report = report;
    finish(sup, delivery, result).await;
}

/// Wait for the spawn record; `true` when the child may run. A spawn whose `open`
/// was dropped (the parent's turn cancelled while the record waited for the
/// ledger) still has its record queued: the child ends it `cancelled`, which gives
/// back its slot and its name, and tells no parent (nobody was told it opened).
pub(super) async fn spawn_on_disk(
    sup: &Supervisor,
    delivery: &Delivery,
    gate: &mut SpawnGate,
) -> bool {
    on_settled(sup, delivery, gate.settled().await).await
}

/// `true` when the child may run, its spawn being on disk; else see
/// [`spawn_on_disk`].
async fn on_settled(sup: &Supervisor, delivery: &Delivery, how: Gate) -> bool {
    match how {
        Gate::OnDisk => true,
        Gate::NotRecorded => false,
        Gate::Abandoned => {
            sup.board().cancel(
                &delivery.ctx.run_id,
                "cancelled before it started: the call that opened it was cancelled \
                 while its spawn record waited for the ledger",
            );
            let result = delivery.result(sup, Settled::Cancelled { reason: None });
            let unannounced = Delivery {
                background: false,
                ..delivery.clone()
            };
            finish(sup, &unannounced, result).await;
            false
        }
    }
}

/// Record the end (queued to the ledger, ordered before anything recorded after
/// it), then publish it; a background child's result is pushed into its parent's
/// next step unless someone claimed it first. Boxed, so that its future (~1.5 KiB)
/// is not part of every child's task.
pub(super) fn finish<'a>(
    sup: &'a Supervisor,
    d: &'a Delivery,
    mut result: ChildResult,
) -> BoxFuture<'a, ()> {
    Box::pin(async move {
        if let Some(tree) = d.ctx.worktree.clone() {
            result.worktree = Some(settle_worktree(sup, &d.ctx.run_id, &d.ctx.name, tree).await);
        }
        drop(d.ctx.slot.lock().unwrap_or_else(|p| p.into_inner()).take());
        sup.recorder().finish_queued(&result);
        publish(sup, d, result);
    })
}

/// Publish a child's end, already recorded (by [`finish`], or by the fleet worker
/// that ran it): its live status, a background child's completion pushed into its
/// parent's next step (unless claimed first), and whoever waits on it.
pub(super) fn publish(sup: &Supervisor, d: &Delivery, result: ChildResult) {
    let Delivery {
        ctx,
        background,
        parent_inbox,
        claim,
        result_tx,
        ..
    } = d;
    sup.board().set_status(&ctx.run_id, result.status);
    if *background {
        let cap = sup.env().settings.context_cap_bytes;
        let text = format!(
            "Background sub-agent {} ({}) settled:\n{}",
            result.name,
            result.agent_id,
            render_result(&result, cap)
        );
        parent_inbox.push_completion(&ctx.run_id, Message::user(text), claim.clone());
    }
    let _ = result_tx.send(Some(Box::new(result)));
}

/// Commit what an isolated child left in its worktree and keep or remove it (see
/// [`Worktree::settle`]); recorded as the run's `worktree` event before its end.
pub(super) async fn settle_worktree(
    sup: &Supervisor,
    id: &str,
    name: &str,
    tree: Arc<Worktree>,
) -> WorktreeReport {
    let message = format!("brood: {name} (run {id})");
    let settled = tokio::task::spawn_blocking(move || tree.settle(&message)).await;
    let report = match settled {
        Ok(r) => r,
        Err(e) => {
            // The settle panicked: the worktree is untouched and kept.
            let dir = crate::subagent::worktree::dir_of(sup.env().workspace.root(), id);
            WorktreeReport {
                branch: crate::subagent::worktree::branch_of(id),
                path: dir,
                base: String::new(),
                commits: Vec::new(),
                diff_stat: String::new(),
                kept: true,
                pushed_to: None,
                error: Some(format!("settling the worktree failed: {e}")),
            }
        }
    };
    sup.recorder().worktree(
        id,
        serde_json::to_value(&report)
            .map(|v| serde_json::json!({ "settled": v }))
            .unwrap_or_default(),
    );
    report
}
