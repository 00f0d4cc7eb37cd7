//! How a run's agent loop is wired to the sub-agent layer: its events go to the
//! ledger and the live bus (and charge its budgets), its guard is its budgets, and
//! its inbox delivers children's completions and parents' messages — giving the
//! running slot back while it only waits.

use super::ctx::RunCtx;
use super::supervisor::Supervisor;
use crate::agent::{AgentEvent, AgentHooks, BudgetSpent, EventSink, Guard, Inbox};
use crate::model::{Message, Usage};
use async_trait::async_trait;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The loop's hooks for run `ctx`: every event recorded (and published), its
/// budgets charged and checked, its progress clock kept, its inbox drained; `extra`
/// sees every event too (the CLI's live output).
pub(crate) fn hooks_for(
    sup: &Supervisor,
    ctx: &Arc<RunCtx>,
    extra: Option<EventSink>,
) -> AgentHooks {
    let recorder = sup.recorder().clone();
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
        recorder.observe(&ctx2.run_id, event, ctx2.budgets.price());
        if let Some(x) = &extra {
            x(event);
        }
    });
    AgentHooks {
        events: Some(sink),
        inbox: Some(Arc::new(LoopInbox { ctx: ctx.clone() })),
        guard: Some(Arc::new(GuardRef(ctx.clone()))),
        pace: Some(Arc::new(sup.recorder().clone())),
    }
}

/// A message the loop did not push itself (the task, a fork tail, the repair
/// prompt), recorded so the transcript holds the whole conversation.
pub(crate) fn record_message(sup: &Supervisor, ctx: &RunCtx, message: &Message) {
    sup.recorder().observe(
        &ctx.run_id,
        &AgentEvent::Message {
            message: message.clone(),
        },
        None,
    );
}

/// A run's inbox as its loop sees it. A run that has answered but still has
/// background children out waits for their completions; while it waits it does no
/// work, so it gives its running slot back (or a tree of waiting parents could
/// hold every slot while their children queue) and the heartbeat leaves it alone
/// (the children are watched themselves).
struct LoopInbox {
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
            .without_slot(cancel, self.ctx.inbox.wait_for_more(cancel))
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
