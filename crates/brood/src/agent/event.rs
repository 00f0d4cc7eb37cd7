//! Typed events the agent loop emits for every step and tool call. They feed the
//! ledger, the heartbeat and the CLI's activity lines.

use super::Ending;
use crate::model::{Message, ModelRequest, ModelResponse, StreamEvent, ToolCall, Usage};
use std::sync::Arc;

/// Receives a run's events as they happen. Must not block: it is called inline.
pub type EventSink = Arc<dyn Fn(&AgentEvent) + Send + Sync>;

/// One thing that happened in a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AgentEvent {
    /// The loop appended a message to the conversation (model answers, tool
    /// results, injected messages, the final-report prompt). The starting messages
    /// are the caller's: it records them itself (a fork's child records only its
    /// tail, not the parent's conversation).
    Message {
        /// The message.
        message: Message,
    },
    /// A message arrived from the inbox (a child's completion, a parent's note).
    Injected {
        /// The message.
        message: Message,
    },
    /// A step is about to be sent.
    ModelRequest {
        /// The step's number (from 1).
        turn: u32,
        /// What is sent.
        request: Arc<ModelRequest>,
    },
    /// Progress inside a step (any delta counts for the heartbeat).
    Stream {
        /// The step's number.
        turn: u32,
        /// What arrived.
        event: StreamEvent,
    },
    /// A step's assembled answer.
    ModelResponse {
        /// The step's number.
        turn: u32,
        /// The answer.
        response: ModelResponse,
        /// How long the step took.
        duration_ms: u64,
    },
    /// A step failed (after its retries).
    ModelFailed {
        /// The step's number.
        turn: u32,
        /// Why, in words.
        error: String,
    },
    /// A tool call starts.
    ToolStarted {
        /// The call as the model made it.
        call: ToolCall,
    },
    /// A tool call ended.
    ToolFinished {
        /// The call.
        call: ToolCall,
        /// Whether it succeeded.
        ok: bool,
        /// What goes back to the model (capped).
        output: String,
        /// How long it took.
        duration_ms: u64,
    },
    /// The loop ended.
    Finished {
        /// How.
        ending: Ending,
        /// Steps made.
        turns: u32,
        /// Usage summed over the steps.
        usage: Usage,
    },
}
