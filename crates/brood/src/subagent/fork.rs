//! Fork: a child that continues from its parent's exact request.
//!
//! With `fork_context: true` the child's first request is the parent's last
//! request — the same system prompt, tool specs and messages, byte for byte, so a
//! provider's prefix cache hits — with one user message appended at the tail: the
//! role instructions, a short state snapshot, and the task. The child's grant is
//! still enforced when its tools execute: it is *offered* the parent's specs (to
//! keep the prefix identical) but a call outside its grant is refused.

use std::collections::BTreeSet;

/// What a forked child is told about where it stands. It holds no run ids or
/// times, so the same fork replays byte-identically (`--replay`).
pub struct StateSnapshot<'a> {
    pub(crate) role: &'a str,
    pub(crate) depth: u32,
    /// Messages in the parent's conversation at the fork.
    pub parent_messages: usize,
    /// The child's allowed tools, when its grant names them.
    pub allowed_tools: Option<BTreeSet<String>>,
}

/// The single message appended after the parent's messages.
pub fn fork_tail(instructions: &str, state: &StateSnapshot<'_>, task: &str) -> String {
    let tools = match &state.allowed_tools {
        Some(t) => t.iter().cloned().collect::<Vec<_>>().join(", "),
        None => "as your role allows (calls outside your grant are refused)".into(),
    };
    format!(
        "--- fork: you are now a sub-agent ---\n\
The conversation above is your parent's, up to the moment it delegated to you. Do not \
continue the parent's work; do only the task below.\n\n\
{instructions}\n\n\
State: you are a {role} sub-agent at depth {depth}; the parent had {n} messages at the \
fork; your tools: {tools}.\n\n\
Task:\n{task}",
        role = state.role,
        depth = state.depth,
        n = state.parent_messages,
    )
}
