//! Driving the session's top-level run: recorded like any other run, with no
//! running slot and the full grant, its loop wired like a child's; its end is
//! recorded durably before its caller hears of it.

use super::board::LiveStatus;
use super::ctx::RunCtx;
use super::error::SpawnError;
use super::hooks::{hooks_for, record_message};
use super::prompt::{root_system_prompt, with_project_instructions};
use super::record::SpawnRecord;
use super::result::{ChildResult, Settled};
use super::spawn::RootRequest;
use super::supervisor::Supervisor;
use crate::agent::{self, AgentOutcome, AgentSpec};
use crate::model::Message;
use crate::tool::Toolbox;
use std::sync::Arc;

/// Run root `ctx` with `toolbox` to its end; `on_start` hears its id once its
/// spawn is recorded.
pub(crate) async fn run(
    sup: &Supervisor,
    ctx: Arc<RunCtx>,
    toolbox: Toolbox,
    req: RootRequest,
    on_start: impl FnOnce(&str),
) -> Result<(String, AgentOutcome), SpawnError> {
    let env = sup.env();
    let id = ctx.run_id.clone();
    sup.recorder()
        .spawn(SpawnRecord {
            id: &id,
            parent_id: None,
            name: &req.name,
            role: "parent",
            agent_type: "parent",
            objective: &req.prompt,
            model: &ctx.model_id,
            provider: &ctx.provider_name,
            workspace: env.workspace.root(),
            unpriced: ctx.budgets.price().is_none(),
            grant: sup.recorded_grant(&ctx, None),
        })
        .await
        .map_err(SpawnError::Ledger)?;
    sup.recorder().status_queued(&id, LiveStatus::Running);
    on_start(&id);
    let first = Message::user(req.prompt.clone());
    record_message(sup, &ctx, &first);
    // The run stops on its turn's token or the session's: session → turn → children.
    // A child of the turn's token, so cancelling the turn stops it at once, as it
    // stops its `task` children: linked through a task, a root whose children were
    // cancelled next (`Session::cancel_all`) could read their results and take one
    // more step before the link ran — and record a turn the user quit `completed`.
    let cancel = req.cancel.child_token();
    let link = {
        let session = env.session_cancel.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = session.cancelled() => cancel.cancel(),
                _ = cancel.cancelled() => {}
            }
        })
    };
    let spec = AgentSpec {
        run_id: id.clone(),
        system: req
            .system
            .unwrap_or_else(|| {
                with_project_instructions(
                    root_system_prompt(env.settings.enabled),
                    &env.project_instructions,
                )
            })
            .into(),
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
    let how = Settled::Ran {
        outcome: &outcome,
        max_turns: req.max_turns,
    };
    let result = ChildResult::settled(ctx.who(Vec::new()), how, sup.board().root_reason(&id));
    sup.recorder().finish(&result).await;
    Ok((id, outcome))
}
