//! The system prompts and first messages of runs: a child's (who it is, its
//! stance and the output contract; for a fork, the parent's conversation and a
//! tail), the top-level run's default, and the project's instructions ending each.

use super::ctx::RunCtx;
use super::fork;
use super::last_made::LastMade;
use crate::model::{Message, ModelRequest, ToolSpec};
use std::sync::Arc;

/// The child's system prompt and first messages; for a fork, also the parent's
/// tool specs (offered byte-identical; the grant is enforced at execution). A
/// fork shares its parent's system prompt; others share `shared`'s when theirs is
/// the same.
pub(crate) fn first_context(
    ctx: &RunCtx,
    system_prompt: &str,
    prompt: &str,
    fork_from: Option<&ModelRequest>,
    project_instructions: &str,
    shared: &LastMade<str>,
) -> (Arc<str>, Vec<Message>, Option<Arc<[ToolSpec]>>) {
    let instructions =
        with_project_instructions(child_instructions(system_prompt), project_instructions);
    match fork_from {
        Some(parent) => {
            let tail = fork::fork_tail(
                &instructions,
                &fork::StateSnapshot {
                    role: &ctx.kind_name,
                    depth: ctx.depth,
                    parent_messages: parent.messages.len(),
                    allowed_tools: ctx.permissions.allowed_tools.clone(),
                },
                prompt,
            );
            let mut messages = parent.messages.clone();
            messages.push(Message::user(tail));
            (parent.system.clone(), messages, Some(parent.tools.clone()))
        }
        None => (
            shared.share(instructions),
            vec![Message::user(prompt.to_string())],
            None,
        ),
    }
}

/// A system prompt ending with the project's instructions (the same block for
/// every run, last, so siblings' prefixes stay byte-identical).
pub(crate) fn with_project_instructions(prompt: String, project: &str) -> String {
    if project.is_empty() {
        prompt
    } else {
        format!("{prompt}\n\n{project}")
    }
}

/// A child's system prompt: who it is, then its stance and the contract.
pub(crate) fn child_instructions(stance_and_contract: &str) -> String {
    format!(
        "You are a brood sub-agent, opened by a parent agent for one focused task; tool \
calls outside your grant are refused.\n\n{stance_and_contract}"
    )
}

/// The top-level run's default system prompt (delegation described only when
/// sub-agents are enabled).
pub(crate) fn root_system_prompt(delegation: bool) -> String {
    let mut s = String::from(
        "You are a coding agent working in a software workspace through tools. Read before \
you change things, keep changes minimal, and verify them. When you are done, answer with a \
short account of what you did and found.",
    );
    if delegation {
        s.push_str(
            "\n\nYou can delegate: `task` runs focused sub-agents in parallel and waits for \
their reports (one prompt per independent question); `agent_open` starts background work \
whose result arrives by itself later. Treat their reports as a working set to check, not \
as ground truth.",
        );
    }
    s
}
