//! What each run said and did, as the UI shows it: streamed text and tool calls
//! (with their results), fed from the session's events. The conversation pane
//! shows the parent turns' transcripts; selecting a child shows its own, live.

use brood::events::{RunEvent, RunEventKind};
use std::collections::HashMap;

/// Bytes of one tool call's arguments or output kept for display (the ledger
/// keeps everything; a model can produce megabytes).
const KEEP: usize = 16 * 1024;

/// One piece of a run's transcript.
#[derive(Debug, Clone)]
pub enum Entry {
    /// Text the model streamed (consecutive pieces joined).
    Text(String),
    /// A tool call; `result` once it ended.
    Tool(ToolCall),
    /// How the run ended, when not with an answer.
    End(String),
}

#[derive(Debug, Clone)]
pub struct ToolCall {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub result: Option<ToolResult>,
}

#[derive(Debug, Clone)]
pub struct ToolResult {
    pub ok: bool,
    pub output: String,
    pub duration_ms: u64,
}

/// Every run's transcript this chat, by run id.
#[derive(Debug, Default)]
pub struct Transcripts {
    runs: HashMap<String, Vec<Entry>>,
}

impl Transcripts {
    /// Take one run event; whether it changed a transcript.
    pub fn apply(&mut self, ev: &RunEvent) -> bool {
        self.apply_kind(&ev.run_id, &ev.kind)
    }

    fn apply_kind(&mut self, run_id: &str, kind: &RunEventKind) -> bool {
        let entries = || Vec::new();
        match kind {
            RunEventKind::TextDelta { text } => {
                let run = self.runs.entry(run_id.to_string()).or_insert_with(entries);
                match run.last_mut() {
                    Some(Entry::Text(t)) => t.push_str(text),
                    _ => run.push(Entry::Text(text.clone())),
                }
            }
            RunEventKind::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                let run = self.runs.entry(run_id.to_string()).or_insert_with(entries);
                run.push(Entry::Tool(ToolCall {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: bounded(arguments),
                    result: None,
                }));
            }
            RunEventKind::ToolResult {
                call_id,
                ok,
                output,
                duration_ms,
                ..
            } => {
                let Some(run) = self.runs.get_mut(run_id) else {
                    return false;
                };
                let call = run.iter_mut().rev().find_map(|e| match e {
                    Entry::Tool(c) if c.call_id == *call_id && c.result.is_none() => Some(c),
                    _ => None,
                });
                let Some(call) = call else { return false };
                call.result = Some(ToolResult {
                    ok: *ok,
                    output: bounded(output),
                    duration_ms: *duration_ms,
                });
            }
            // A new model step: its text is a new paragraph.
            RunEventKind::Step { .. } => {
                let run = self.runs.entry(run_id.to_string()).or_insert_with(entries);
                if matches!(run.last(), Some(Entry::Text(t)) if !t.is_empty()) {
                    run.push(Entry::Text(String::new()));
                }
            }
            RunEventKind::Completed { final_text } => {
                self.answer_if_silent(run_id, final_text);
            }
            RunEventKind::Failed { error } => self.end(run_id, format!("failed: {error}")),
            RunEventKind::Cancelled { reason } => self.end(run_id, format!("cancelled: {reason}")),
            RunEventKind::Interrupted { reason } => {
                self.end(run_id, format!("interrupted: {reason}"))
            }
            RunEventKind::Retrying { attempt, error, .. } => {
                self.end(run_id, format!("retrying (attempt {attempt}): {error}"))
            }
            _ => return false,
        }
        true
    }

    fn end(&mut self, run_id: &str, what: String) {
        self.runs
            .entry(run_id.to_string())
            .or_default()
            .push(Entry::End(what));
    }

    /// A run that answered without streaming its text: show the answer.
    pub fn answer_if_silent(&mut self, run_id: &str, text: &str) {
        let run = self.runs.entry(run_id.to_string()).or_default();
        let said = run
            .iter()
            .any(|e| matches!(e, Entry::Text(t) if !t.is_empty()));
        if !text.is_empty() && !said {
            run.push(Entry::Text(text.to_string()));
        }
    }

    /// A run's transcript (empty when it said nothing yet).
    pub fn of(&self, run_id: &str) -> &[Entry] {
        self.runs.get(run_id).map_or(&[], Vec::as_slice)
    }

    pub fn clear(&mut self) {
        self.runs.clear();
    }
}

/// At most [`KEEP`] bytes of `s`, cut on a character boundary, saying so.
fn bounded(s: &str) -> String {
    if s.len() <= KEEP {
        return s.to_string();
    }
    let mut end = KEEP;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} bytes more in the ledger)",
        &s[..end],
        s.len() - end
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_joins_and_tool_results_pair_with_their_calls() {
        let mut t = Transcripts::default();
        t.apply_kind("r1", &(RunEventKind::TextDelta { text: "he".into() }));
        t.apply_kind("r1", &(RunEventKind::TextDelta { text: "llo".into() }));
        t.apply_kind(
            "r1",
            &(RunEventKind::ToolCall {
                call_id: "c1".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            }),
        );
        t.apply_kind(
            "r1",
            &(RunEventKind::ToolResult {
                call_id: "c1".into(),
                name: "bash".into(),
                ok: false,
                output: "x".repeat(KEEP + 10),
                duration_ms: 3,
            }),
        );
        let e = t.of("r1");
        assert!(matches!(&e[0], Entry::Text(s) if s == "hello"));
        let Entry::Tool(c) = &e[1] else {
            panic!("{e:?}")
        };
        let r = c.result.as_ref().unwrap();
        assert!(!r.ok && r.output.ends_with("(10 bytes more in the ledger)"));
    }
}
