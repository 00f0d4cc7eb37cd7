//! What a settled child hands back: status, the structured output contract,
//! usage, and the handle to read its whole transcript.

use super::supervisor::LiveStatus;
use crate::model::Usage;
use serde::{Deserialize, Serialize};

/// The settled result of one child run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildResult {
    pub agent_id: String,
    pub name: String,
    pub role: String,
    pub status: LiveStatus,
    /// Why it ended that way (max_turns, budget, heartbeat, cancelled by parent, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The child's final answer, as written.
    pub final_text: String,
    /// SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS parsed from the final answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<super::contract::ParsedResult>,
    pub turns: u32,
    pub tool_calls: u32,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Read the whole transcript with `handle_read` / `brood agents transcript`.
    pub transcript_handle: String,
    /// Provider/model the child ran on, and any routing warning.
    pub model: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
