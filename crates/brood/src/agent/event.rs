//! Typed events the agent loop emits for every step and tool call. They feed the
//! ledger, the heartbeat and the CLI's activity lines.

use super::Ending;
use crate::model::{Message, ModelRequest, ModelResponse, StreamEvent, ToolCall, Usage};
use std::sync::Arc;

/// Receives a run's events as they happen. Must not block: it is called inline.
pub type EventSink = Arc<dyn Fn(&AgentEvent) + Send + Sync>;

/// One thing that happened in a run.
#[derive(Debug, Clone)]
pub enum AgentEvent {
    /// The loop appended a message to the conversation (model answers, tool
    /// results, injected messages, the final-report prompt). The starting messages
    /// are the caller's: it records them itself (a fork's child records only its
    /// tail, not the parent's conversation).
    Message {
        message: Message,
    },
    /// A message arrived from the inbox (a child's completion, a parent's note).
    Injected {
        message: Message,
    },
    /// A step is about to be sent.
    ModelRequest {
        turn: u32,
        request: Arc<ModelRequest>,
    },
    /// Progress inside a step (any delta counts for the heartbeat).
    Stream {
        turn: u32,
        event: StreamEvent,
    },
    ModelResponse {
        turn: u32,
        response: ModelResponse,
        duration_ms: u64,
    },
    ModelFailed {
        turn: u32,
        error: String,
    },
    ToolStarted {
        call: ToolCall,
    },
    ToolFinished {
        call: ToolCall,
        ok: bool,
        output: String,
        duration_ms: u64,
    },
    Finished {
        ending: Ending,
        turns: u32,
        usage: Usage,
    },
}
