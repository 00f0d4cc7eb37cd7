//! The output contract enforced on a child's answer: parse its
//! SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS sections, ask once for the format when
//! sections are missing (a [`agent::follow_up`] step of the same loop, not a
//! copy of it), then check its citations against the workspace.

use super::contract::{self, ParsedResult};
use super::ctx::RunCtx;
use super::evidence;
use super::supervisor::Supervisor;
use crate::agent::{self, AgentHooks, AgentOutcome, AgentSpec, Ending};
use crate::model::Message;
use tokio_util::sync::CancellationToken;

/// The parsed report of a child that answered (`None` when it did not); a
/// repaired answer replaces `outcome`'s final text when it has fewer missing
/// sections.
pub(crate) async fn enforce(
    sup: &Supervisor,
    ctx: &RunCtx,
    spec: &AgentSpec,
    hooks: &AgentHooks,
    outcome: &mut AgentOutcome,
    cancel: &CancellationToken,
) -> Option<ParsedResult> {
    if !outcome.succeeded() {
        return None;
    }
    let mut parsed = contract::parse(&outcome.final_text);
    // The repair is a model request like any other: not after a budget stopped
    // the run, nor once the tree's budget is spent.
    let budget_left =
        !matches!(outcome.ending, Ending::Budget { .. }) && ctx.budgets.check_tree().is_ok();
    if !parsed.missing.is_empty() && !cancel.is_cancelled() && budget_left {
        let repair = Message::user(contract::repair_prompt(&parsed.missing));
        if let Some(text) = agent::follow_up(spec, outcome, repair, hooks, cancel).await {
            if !text.trim().is_empty() {
                let again = contract::parse(&text);
                if again.missing.len() < parsed.missing.len() {
                    parsed = again;
                    outcome.final_text = text;
                }
            }
        }
    }
    // A report citing no `path:lines` reads no file: its items are marked here,
    // without a trip to the blocking pool (a thread woken per child of a tree).
    if parsed.evidence.iter().all(|e| e.path.is_none()) {
        evidence::verify_in(&mut parsed.evidence, &sup.env().workspace);
        return Some(parsed);
    }
    // Reading files: off the async threads (bounded inside `verify_in`), in the
    // session's workspace, the tree the child's tools read.
    let workspace = sup.env().workspace.clone();
    let mut cited = parsed.evidence.clone();
    let checked = tokio::task::spawn_blocking(move || {
        evidence::verify_in(&mut cited, &workspace);
        cited
    })
    .await;
    match checked {
        Ok(checked) => parsed.evidence = checked,
        // The check itself crashed: the citations stay unchecked, saying so.
        Err(e) => {
            for item in parsed.evidence.iter_mut().filter(|i| i.path.is_some()) {
                item.verified = None;
                item.reason = Some(format!("not checked: the check failed ({e})"));
            }
        }
    }
    Some(parsed)
}
