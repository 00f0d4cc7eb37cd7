//! What of a tool call goes back into the conversation: results capped to a size,
//! and the model's own call echoed in bounded form.
//!
//! The model is attacker input: a 5 MB argument or a megabyte-long function name
//! must not be repeated into every later request. A call's arguments that are not a
//! JSON object and are longer than [`ECHO_MAX_BYTES`] are replaced (in the history
//! only; events and the ledger keep what was sent) by a small JSON object saying
//! what was omitted; a name longer than that is cut. Every tool message, errors
//! included, is cut to [`TOOL_RESULT_MAX_BYTES`] keeping its head and tail.

use crate::model::ToolCall;
use crate::tool::ECHO_MAX_BYTES;

/// Most bytes of one tool message (a result or an error) kept in the conversation.
/// Above the largest output a built-in tool gives (`read_file`'s 256 KiB page).
pub const TOOL_RESULT_MAX_BYTES: usize = 320 * 1024;

/// Default of how many tool calls of one step run at once (`tool_concurrency`).
pub const DEFAULT_TOOL_CONCURRENCY: usize = 8;

/// `text` cut to `max` bytes: head and tail on char boundaries, with a note in the
/// middle saying how many bytes were left out.
pub fn cap(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let keep = max.saturating_sub(120) / 2;
    // Walk down from `keep` and up from `len - keep` to char boundaries (0 and
    // `len` are ones, so both walks end).
    let (head, head_len) = (0..=keep)
        .rev()
        .find_map(|i| text.get(..i).map(|h| (h, i)))
        .unwrap_or_default();
    let (tail, tail_at) = (text.len().saturating_sub(keep)..=text.len())
        .find_map(|i| text.get(i..).map(|t| (t, i)))
        .unwrap_or_default();
    format!(
        "{head}\n[... {} bytes of {} cut by brood ...]\n{tail}",
        tail_at.saturating_sub(head_len),
        text.len(),
    )
}

/// The call as the conversation history keeps it (see the module doc).
pub fn for_history(call: &mut ToolCall) {
    if call.name.len() > ECHO_MAX_BYTES {
        let mut end = ECHO_MAX_BYTES;
        while !call.name.is_char_boundary(end) {
            end -= 1;
        }
        call.name.truncate(end);
    }
    if call.arguments.len() > ECHO_MAX_BYTES && !is_object(&call.arguments) {
        call.arguments = serde_json::json!({
            "omitted_by_brood": format!(
                "the arguments ({} bytes) were not a JSON object; not repeated",
                call.arguments.len()
            )
        })
        .to_string();
    }
}

fn is_object(raw: &str) -> bool {
    matches!(
        serde_json::from_str::<serde_json::Value>(raw),
        Ok(serde_json::Value::Object(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_keeps_head_and_tail_on_char_boundaries() {
        let s = "é".repeat(1000);
        let c = cap(s.clone(), 500);
        assert!(c.len() <= 560, "{}", c.len());
        assert!(c.starts_with('é') && c.ends_with('é'));
        assert!(c.contains("of 2000 cut by brood"));
        assert_eq!(cap("short".into(), 500), "short");
    }
}
