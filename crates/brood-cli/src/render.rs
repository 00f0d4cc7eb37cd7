//! Live rendering of a parent run: answer text to stdout as it streams, one line
//! per tool call to stderr (tool, short arguments, ok/error, duration).

use brood::agent::{AgentEvent, EventSink};
use brood::events::RunEventKind;
use brood::model::StreamEvent;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Prints a run as it happens. With `stream = false` (`--json`) it prints only
/// tool activity to stderr.
pub struct Printer {
    stream: bool,
    /// `--quiet`: no tool or retry lines.
    quiet: bool,
    /// The live status line, cleared while anything else is written.
    status: Option<crate::status::StatusLine>,
    /// Whether the text of the last step was already streamed.
    streamed: Arc<AtomicBool>,
    printed_any: Arc<AtomicBool>,
}

impl Printer {
    pub fn new(stream: bool, quiet: bool, status: Option<crate::status::StatusLine>) -> Self {
        Printer {
            stream,
            quiet,
            status,
            streamed: Arc::new(AtomicBool::new(false)),
            printed_any: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn sink(&self) -> EventSink {
        let stream = self.stream;
        let quiet = self.quiet;
        let streamed = self.streamed.clone();
        let printed_any = self.printed_any.clone();
        let status = self.status.clone();
        let show = move |f: &mut dyn FnMut()| match &status {
            Some(s) => s.suspend(f),
            None => f(),
        };
        // Under a status line, streamed text goes out a whole line at a time: the
        // line is redrawn below what was written, and would erase a partial one.
        let whole_lines = self.status.is_some();
        let pending = Arc::new(std::sync::Mutex::new(String::new()));
        Arc::new(move |event: &AgentEvent| match event {
            AgentEvent::ModelRequest { .. } => streamed.store(false, Ordering::Relaxed),
            AgentEvent::Stream {
                event: StreamEvent::TextDelta { text },
                ..
            } if stream => {
                streamed.store(true, Ordering::Relaxed);
                printed_any.store(true, Ordering::Relaxed);
                if whole_lines {
                    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                    p.push_str(text);
                    if let Some(end) = p.rfind('\n') {
                        let lines: String = p.drain(..=end).collect();
                        show(&mut || crate::out::stdout_bytes(lines.as_bytes()));
                    }
                } else {
                    crate::out::stdout_bytes(text.as_bytes());
                }
            }
            AgentEvent::ModelResponse { response, .. } if stream => {
                // A provider that did not stream: print the whole text now.
                if !streamed.load(Ordering::Relaxed) && !response.message.content.is_empty() {
                    printed_any.store(true, Ordering::Relaxed);
                    show(&mut || crate::out::stdout_bytes(response.message.content.as_bytes()));
                }
                if !response.message.content.is_empty() {
                    let rest =
                        std::mem::take(&mut *pending.lock().unwrap_or_else(|e| e.into_inner()));
                    show(&mut || crate::out::stdout_bytes(format!("{rest}\n").as_bytes()));
                }
            }
            AgentEvent::ToolFinished {
                call,
                ok,
                output,
                duration_ms,
            } if !quiet => {
                let status = tool_status(&call.name, *ok, output);
                show(&mut || {
                    errln!(
                        "  [tool] {} {} {} ({} ms)",
                        call.name,
                        short(&call.arguments, 80),
                        status,
                        duration_ms
                    )
                });
            }
            AgentEvent::Stream {
                event:
                    StreamEvent::Retrying {
                        attempt,
                        delay_ms,
                        error,
                    },
                ..
            } if !quiet => {
                show(&mut || {
                    errln!(
                        "  [retry] attempt {attempt} in {delay_ms} ms: {}",
                        first_line(error)
                    )
                });
            }
            _ => {}
        })
    }

    /// A child's live event (from the session's event stream): its retries get a
    /// line like the parent's, naming the child. `names` remembers each run's name
    /// from its spawn. The parent's own events come through [`Printer::sink`].
    pub fn child_event(
        &self,
        names: &mut std::collections::HashMap<String, String>,
        event: &brood::events::Event,
    ) {
        let brood::events::Event::Run(ev) = event else {
            return;
        };
        if ev.parent_id.is_none() {
            return;
        }
        match &ev.kind {
            RunEventKind::Spawned { name, .. } => {
                names.insert(ev.run_id.clone(), name.clone());
            }
            RunEventKind::Retrying {
                attempt,
                delay_ms,
                error,
                ..
            } if !self.quiet => {
                // Its name (unique in the session), else its id.
                let who = names.get(&ev.run_id).unwrap_or(&ev.run_id);
                let line = format!(
                    "  [retry] child {who}: attempt {attempt} in {delay_ms} ms: {}",
                    first_line(error)
                );
                match &self.status {
                    Some(s) => s.suspend(|| errln!("{line}")),
                    None => errln!("{line}"),
                }
            }
            RunEventKind::Completed { .. }
            | RunEventKind::Failed { .. }
            | RunEventKind::Cancelled { .. }
            | RunEventKind::Interrupted { .. } => {
                names.remove(&ev.run_id);
            }
            _ => {}
        }
    }

    /// After the run: make sure the final answer was shown.
    pub fn finish(&self, final_text: &str) {
        if self.stream && !self.printed_any.load(Ordering::Relaxed) && !final_text.is_empty() {
            outln!("{final_text}");
        }
    }
}

/// How a finished tool call reads on its line: `ok`, `error: …` (once, whether or
/// not the tool's own text already starts with `error:`), and for `task` how many
/// of its children did not complete — a `task` whose children failed is not `ok`.
fn tool_status(name: &str, ok: bool, output: &str) -> String {
    if !ok {
        let text = first_line(output);
        let text = text
            .strip_prefix("error:")
            .map(str::trim_start)
            .unwrap_or(&text);
        return format!("error: {text}");
    }
    if name == "task" {
        if let Some(summary) = task_summary(output) {
            return summary;
        }
    }
    "ok".to_string()
}

/// `task`'s output is `{"results": [{"status": …}, …]}`: `ok` when every child
/// completed, else what became of the others (`2 of 3 failed`, `1 of 3 failed, 1 of
/// 3 cancelled`; `child failed` for a single one). `None` for another shape.
fn task_summary(output: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(output).ok()?;
    let results = v.get("results")?.as_array()?;
    let total = results.len();
    let mut others: Vec<(String, usize)> = Vec::new();
    for r in results {
        let status = r
            .get("status")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("unknown");
        if status == "completed" {
            continue;
        }
        match others.iter_mut().find(|(s, _)| s == status) {
            Some((_, n)) => *n += 1,
            None => others.push((status.to_string(), 1)),
        }
    }
    if others.is_empty() {
        return Some(if total == 1 {
            "ok".to_string()
        } else {
            format!("ok ({total} children)")
        });
    }
    if total == 1 {
        return Some(format!("child {}", others[0].0));
    }
    Some(
        others
            .iter()
            .map(|(status, n)| format!("{n} of {total} {status}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

fn first_line(s: &str) -> String {
    short(s.lines().next().unwrap_or(""), 160)
}

fn short(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}
