//! A run's conversation rebuilt from its recorded transcript, for resuming it: each
//! transcript entry is one serialized [`Message`] (the caller substitutes a spilled
//! entry's full text), and a tool call the transcript holds no result for — the run
//! stopped while the tool ran — gets a synthetic result saying so. Such a call is
//! never re-run: its effects may already be in the workspace.

use crate::model::{Message, Role};
use serde_json::Value;
use std::collections::HashSet;
use thiserror::Error;

/// The result a tool call gets when its run stopped before the call finished.
pub const INTERRUPTED_CALL_RESULT: &str = "error: this tool call was interrupted before it \
finished (the run stopped and was resumed later); it was not run again. Check what it may \
already have done before calling it again.";

/// A transcript entry that is not a message brood wrote.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("transcript entry {seq} is not a recorded message ({detail}); the run cannot be rebuilt from it")]
pub struct RebuildError {
    /// The entry's seq.
    pub seq: u64,
    /// What was wrong.
    pub detail: String,
}

/// The messages of `entries` (`(seq, content)` in seq order, full text substituted),
/// with a synthetic result after every tool call left unanswered, in call order.
pub fn rebuild_messages(entries: &[(u64, Value)]) -> Result<Vec<Message>, RebuildError> {
    let mut parsed = Vec::with_capacity(entries.len());
    for (seq, content) in entries {
        let message: Message =
            serde_json::from_value(content.clone()).map_err(|e| RebuildError {
                seq: *seq,
                detail: e.to_string(),
            })?;
        if message.role == Role::System {
            // The system prompt is rebuilt from the run's role, never from the record.
            continue;
        }
        parsed.push(message);
    }
    Ok(answer_open_calls(parsed))
}

/// Insert, after each assistant message's tool results, a synthetic result for every
/// call of it that has none.
fn answer_open_calls(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut open: Vec<String> = Vec::new();
    let close = |out: &mut Vec<Message>, open: &mut Vec<String>| {
        for id in open.drain(..) {
            out.push(Message::tool_result(id, INTERRUPTED_CALL_RESULT));
        }
    };
    for m in messages {
        match m.role {
            Role::Tool => {
                if let Some(id) = &m.tool_call_id {
                    open.retain(|o| o != id);
                }
                out.push(m);
            }
            _ => {
                close(&mut out, &mut open);
                if m.role == Role::Assistant {
                    let mut seen = HashSet::new();
                    open = m
                        .tool_calls
                        .iter()
                        .filter(|c| seen.insert(c.id.clone()))
                        .map(|c| c.id.clone())
                        .collect();
                }
                out.push(m);
            }
        }
    }
    close(&mut out, &mut open);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        }
    }

    fn entries(ms: &[Message]) -> Vec<(u64, Value)> {
        ms.iter()
            .enumerate()
            .map(|(i, m)| (i as u64, serde_json::to_value(m).unwrap()))
            .collect()
    }

    #[test]
    fn unanswered_calls_get_a_synthetic_result_and_answered_ones_stay() {
        let mut asked = Message::assistant("");
        asked.tool_calls = vec![call("a"), call("b")];
        let ms = vec![
            Message::user("task"),
            asked,
            Message::tool_result("a", "done a"),
        ];
        let got = rebuild_messages(&entries(&ms)).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got[2].content, "done a");
        assert_eq!(got[3].tool_call_id.as_deref(), Some("b"));
        assert_eq!(got[3].content, INTERRUPTED_CALL_RESULT);
    }

    #[test]
    fn the_synthetic_result_sits_before_the_next_message() {
        let mut asked = Message::assistant("");
        asked.tool_calls = vec![call("a")];
        let ms = vec![Message::user("task"), asked, Message::user("a note")];
        let got = rebuild_messages(&entries(&ms)).unwrap();
        assert_eq!(got[2].tool_call_id.as_deref(), Some("a"));
        assert_eq!(got[3].content, "a note");
    }

    #[test]
    fn an_entry_that_is_not_a_message_is_refused_naming_its_seq() {
        let bad = vec![(0, json!({"role": "user", "content": "x"})), (1, json!(42))];
        let e = rebuild_messages(&bad).unwrap_err();
        assert_eq!(e.seq, 1);
    }
}
