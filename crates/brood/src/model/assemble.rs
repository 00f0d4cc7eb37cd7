//! Turning chat-completions answers into one [`ModelResponse`]: streamed chunks one at a
//! time ([`Assembler`]) or a whole completion ([`parse_completion`]), with usage read in
//! every dialect ([`parse_usage`]).
//!
//! Tool-call fragments are keyed by `index`; without an index, by `id`; without either
//! they continue the last call. Servers that repeat `id` and `function.name` in every
//! fragment (llama.cpp) or several calls that all claim `index: 0` with distinct ids
//! are assembled without duplicates.
//!
//! A chunk of the common shape is read typed ([`super::chunk::read_common`]); any
//! other chunk, and a whole completion, is read as a `serde_json::Value` and turned
//! into the same [`Delta`].

use super::chunk::{Delta, Fragment};
use super::retry::{classify_status, ErrorContext};
use super::{
    EventFn, FinishReason, Message, ModelError, ModelResponse, Role, StreamEvent, ToolCall, Usage,
    MAX_STEP_TOKENS,
};
use serde_json::Value;
use std::borrow::Cow;

/// Whether the stream said it is over (`[DONE]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkOutcome {
    Continue,
    Done,
}

#[derive(Debug, Default)]
struct PartialCall {
    /// The `index` the server used for this call, while it still designates it.
    key: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// What one tool call counts toward [`Assembler::size`] besides its text.
const CALL_OVERHEAD: usize = 64;

/// Accumulates one step's answer and reports each piece as it arrives.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    content: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    /// Counts of the server's usage that were rejected, and the raw usage (audit).
    rejected_usage: Option<(Vec<String>, String)>,
    chunks: usize,
    /// Bytes accumulated so far (see [`Assembler::size`]), kept as they come.
    size: usize,
    done: bool,
    /// Tests only: read every chunk as a `Value` (to check both readers agree).
    value_only: bool,
}

impl Assembler {
    pub(crate) fn new() -> Assembler {
        Assembler::default()
    }

    #[cfg(test)]
    pub(crate) fn value_only() -> Assembler {
        Assembler {
            value_only: true,
            ..Assembler::default()
        }
    }

    /// Bytes of the answer accumulated so far: content, reasoning, and every tool
    /// call's name and arguments (what `max_answer_bytes` bounds).
    /// Each tool call also counts [`CALL_OVERHEAD`], so a stream of empty calls is
    /// bounded too.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    fn grow(&mut self, bytes: usize) {
        self.size = self.size.saturating_add(bytes);
    }

    /// Chunks received so far.
    pub(crate) fn chunks(&self) -> usize {
        self.chunks
    }

    /// A finish reason was seen: the answer is complete. `[DONE]` alone is not
    /// enough: a server that ends a stream early (llama-cpp-python when another
    /// request interrupts it) still sends `[DONE]`, but never a finish reason.
    pub(crate) fn complete(&self) -> bool {
        self.finish.is_some()
    }

    /// Why a stream that ended cleanly without a finish reason is not an answer:
    /// [`ModelError::EmptyAnswer`] when not a single event came (deterministic, not
    /// retried), else [`ModelError::StreamCut`] (retried).
    pub(crate) fn incomplete(&self, ctx: &ErrorContext<'_>) -> ModelError {
        if self.chunks == 0 && !self.done {
            return ModelError::EmptyAnswer {
                url: ctx.url.to_string(),
                what: "stream".to_string(),
            };
        }
        let detail = if self.done {
            format!(
                "[DONE] after {} chunks but no finish_reason: the server ended the answer \
                 early (llama-cpp-python does this when another request interrupts a stream)",
                self.chunks
            )
        } else {
            format!(
                "stream ended after {} chunks without a finish reason or [DONE]",
                self.chunks
            )
        };
        ModelError::StreamCut { detail }
    }

    /// Take one SSE `data` payload.
    pub(crate) fn handle(
        &mut self,
        data: &str,
        on_event: EventFn<'_>,
        ctx: &ErrorContext<'_>,
    ) -> Result<ChunkOutcome, ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(ChunkOutcome::Done);
        }
        if data.is_empty() {
            return Ok(ChunkOutcome::Continue);
        }
        if !self.value_only {
            if let Some(chunk) = super::chunk::read_common(data) {
                self.chunks += 1;
                if let Some(delta) = chunk.delta {
                    self.apply(delta, on_event);
                }
                if let Some(r) = chunk.finish {
                    self.finish = Some(FinishReason::parse(&r));
                }
                return Ok(ChunkOutcome::Continue);
            }
        }
        let v: Value = serde_json::from_str(data).map_err(|e| ModelError::Protocol {
            detail: format!(
                "stream chunk #{} is not JSON ({e}): {}",
                self.chunks + 1,
                preview(data)
            ),
        })?;
        self.chunks += 1;
        if has_error(&v) {
            return Err(error_object(&v, ctx));
        }
        self.take_usage(parse_usage(v.get("usage"), v.get("timings")));
        if let Some(choice) = pick_choice(&v) {
            if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
                self.apply(delta_of(delta, false), on_event);
            }
            // Some servers send `"finish_reason": ""` on every chunk but the last.
            if let Some(r) = choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
            {
                self.finish = Some(FinishReason::parse(r));
            }
        }
        Ok(ChunkOutcome::Continue)
    }

    /// Apply a delta (streaming) or a whole message.
    fn apply(&mut self, delta: Delta<'_>, on_event: EventFn<'_>) {
        if !delta.reasoning.is_empty() {
            self.reasoning.push_str(&delta.reasoning);
            self.grow(delta.reasoning.len());
            on_event(StreamEvent::ReasoningDelta {
                text: delta.reasoning.into_owned(),
            });
        }
        if !delta.content.is_empty() {
            self.content.push_str(&delta.content);
            self.grow(delta.content.len());
            on_event(StreamEvent::TextDelta {
                text: delta.content.into_owned(),
            });
        }
        for fragment in delta.calls {
            self.tool_fragment(fragment, on_event);
        }
    }

    fn tool_fragment(&mut self, f: Fragment<'_>, on_event: EventFn<'_>) {
        let id = f.id.as_deref();
        let name = f.name.as_deref();
        let pos = self.slot(f.index, id);
        // `slot` returns the position of a call it found or pushed.
        let Some(call) = self.calls.get_mut(pos) else {
            return;
        };
        let mut new_id = None;
        if let Some(id) = id {
            if call.id.is_empty() {
                call.id = id.to_string();
                new_id = Some(id.to_string());
            }
        }
        let mut new_name = None;
        if let Some(n) = name {
            if call.name.is_empty() {
                call.name = n.to_string();
                new_name = Some(n.to_string());
            } else if call.name != n {
                // A name sent in pieces; a repeated whole name is ignored above.
                call.name.push_str(n);
                new_name = Some(n.to_string());
            }
        }
        // Some servers resend the complete arguments at the end: appending them to an
        // already complete JSON value could only corrupt it.
        let repeat = !f.arguments.is_empty()
            && f.arguments == call.arguments
            && serde_json::from_str::<Value>(&call.arguments).is_ok();
        let args = if repeat {
            String::new()
        } else {
            f.arguments.into_owned()
        };
        call.arguments.push_str(&args);
        let grown = new_id.as_ref().map_or(0, String::len)
            + new_name.as_ref().map_or(0, String::len)
            + args.len();
        self.grow(grown);
        if new_id.is_some() || new_name.is_some() || !args.is_empty() {
            on_event(StreamEvent::ToolCallDelta {
                index: pos,
                id: new_id,
                name: new_name,
                arguments: args,
            });
        }
    }

    /// The position of the call a fragment belongs to (a new one when needed).
    fn slot(&mut self, index: Option<u64>, id: Option<&str>) -> usize {
        if let Some(i) = index {
            let found = self
                .calls
                .iter_mut()
                .enumerate()
                .find(|(_, c)| c.key == Some(i));
            if let Some((p, c)) = found {
                let other_call = matches!(id, Some(id) if !c.id.is_empty() && c.id != id);
                if !other_call {
                    return p;
                }
                c.key = None;
            }
            return self.push(Some(i));
        }
        if let Some(id) = id {
            if let Some(p) = self.calls.iter().position(|c| c.id == id) {
                return p;
            }
            return self.push(None);
        }
        match self.calls.len() {
            0 => self.push(None),
            n => n - 1,
        }
    }

    fn push(&mut self, key: Option<u64>) -> usize {
        self.grow(CALL_OVERHEAD);
        self.calls.push(PartialCall {
            key,
            ..PartialCall::default()
        });
        self.calls.len() - 1
    }

    /// Keep the usage of a chunk (a later one replaces an earlier one).
    fn take_usage(&mut self, parsed: ParsedUsage) {
        if let Some(u) = parsed.usage {
            self.usage = Some(u);
        }
        if !parsed.rejected.is_empty() {
            self.rejected_usage = Some((parsed.rejected, parsed.raw));
        }
    }

    /// Finish: report usage and the finish reason, return the assembled response.
    /// Calls without an id get `call_N`; empty arguments become `{}`; a call
    /// without a name keeps an empty one (the loop answers it with a tool error).
    pub(crate) fn into_response(self, on_event: EventFn<'_>) -> Result<ModelResponse, ModelError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (i, c) in self.calls.into_iter().enumerate() {
            // An empty name goes on to the agent loop, which answers it with a
            // tool error the model can correct (not a failed run).
            tool_calls.push(ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: if c.arguments.trim().is_empty() {
                    "{}".to_string()
                } else {
                    c.arguments
                },
            });
        }
        let finish_reason = match self.finish {
            // Some servers (older Ollama) say `stop` after tool calls.
            Some(FinishReason::Stop) | None if !tool_calls.is_empty() => FinishReason::ToolCalls,
            Some(r) => r,
            None => FinishReason::Stop,
        };
        if let Some((fields, raw)) = self.rejected_usage {
            on_event(StreamEvent::UsageRejected { fields, raw });
        }
        if let Some(usage) = self.usage {
            on_event(StreamEvent::Usage { usage });
        }
        on_event(StreamEvent::Finish {
            reason: finish_reason.clone(),
        });
        Ok(ModelResponse {
            message: Message {
                role: Role::Assistant,
                content: self.content,
                reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
                tool_calls,
                tool_call_id: None,
            },
            usage: self.usage,
            finish_reason,
        })
    }
}

/// Parse a non-streaming completion body, reporting its parts as events.
pub(crate) fn parse_completion(
    body: &[u8],
    on_event: EventFn<'_>,
    ctx: &ErrorContext<'_>,
) -> Result<ModelResponse, ModelError> {
    let text = String::from_utf8_lossy(body);
    let v: Value = serde_json::from_slice(body).map_err(|e| ModelError::Protocol {
        detail: format!("response is not JSON ({e}): {}", preview(&text)),
    })?;
    if has_error(&v) {
        return Err(error_object(&v, ctx));
    }
    let message = pick_choice(&v)
        .and_then(|c| c.get("message"))
        .ok_or_else(|| ModelError::Protocol {
            detail: format!("response has no choices[0].message: {}", preview(&text)),
        })?;
    let mut a = Assembler::new();
    a.apply(delta_of(message, true), on_event);
    a.finish = pick_choice(&v)
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .map(FinishReason::parse);
    a.take_usage(parse_usage(v.get("usage"), v.get("timings")));
    a.into_response(on_event)
}

/// Usage read from a server's answer: the counts, and the fields whose value was
/// not a plausible token count (read as unknown), with the raw objects for audit.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ParsedUsage {
    pub usage: Option<Usage>,
    pub rejected: Vec<String>,
    /// The usage and timings objects as parsed (shortened; an integer beyond `u64`
    /// reads as a float), for audit; empty when nothing was rejected.
    pub raw: String,
}

/// One token count: a JSON integer (or an integral float) in `0..=MAX_STEP_TOKENS`.
/// Anything else — negative, fractional, a string, above the bound — is `Err`
/// (unknown); an absent or `null` field is `Ok(None)`.
fn token_count(v: &Value) -> Result<Option<u64>, ()> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => {
            let count = match n.as_u64() {
                Some(c) => c,
                None => match n.as_f64() {
                    Some(f) if f.is_finite() && f >= 0.0 && f.fract() == 0.0 => {
                        if f > MAX_STEP_TOKENS as f64 {
                            return Err(());
                        }
                        f as u64
                    }
                    _ => return Err(()),
                },
            };
            if count > MAX_STEP_TOKENS {
                Err(())
            } else {
                Ok(Some(count))
            }
        }
        _ => Err(()),
    }
}

/// Usage from any dialect: OpenAI (`prompt_tokens_details.cached_tokens`), DeepSeek
/// (`prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`), llama.cpp `timings`
/// (`prompt_n` + `cache_n` in, `predicted_n` out, `cache_n` cached) filling what the
/// usage object lacks. `usage: None` when neither is there. Every count is bounded
/// (see [`token_count`]): a rejected one is unknown, as if absent, and named in
/// `rejected`; sums saturate.
pub(crate) fn parse_usage(usage: Option<&Value>, timings: Option<&Value>) -> ParsedUsage {
    let rejected = std::cell::RefCell::new(Vec::<String>::new());
    let num = |v: &Value, obj: &str, p: &str| -> Option<u64> {
        let x = v.pointer(p)?;
        match token_count(x) {
            Ok(c) => c,
            Err(()) => {
                rejected
                    .borrow_mut()
                    .push(format!("{obj}{}", p.replace('/', ".")));
                None
            }
        }
    };
    let from_usage = usage.filter(|u| u.is_object()).map(|u| {
        let num = |p: &str| num(u, "usage", p);
        let hit = num("/prompt_cache_hit_tokens");
        let miss = num("/prompt_cache_miss_tokens");
        let split = match (hit, miss) {
            (None, None) => None,
            (h, m) => Some(h.unwrap_or(0).saturating_add(m.unwrap_or(0))),
        };
        let prompt = num("/prompt_tokens");
        let input = num("/input_tokens");
        let completion = num("/completion_tokens");
        let output = num("/output_tokens");
        let cached = num("/prompt_tokens_details/cached_tokens");
        let cached_alt = num("/input_tokens_details/cached_tokens");
        Usage {
            input_tokens: prompt.or(input).or(split).unwrap_or(0),
            output_tokens: completion.or(output).unwrap_or(0),
            cached_input_tokens: cached.or(hit).or(cached_alt).unwrap_or(0),
        }
    });
    let from_timings = timings.filter(|t| t.is_object()).and_then(|t| {
        let prompt = num(t, "timings", "/prompt_n");
        let cache = num(t, "timings", "/cache_n");
        let predicted = num(t, "timings", "/predicted_n");
        if prompt.is_none() && cache.is_none() && predicted.is_none() {
            return None;
        }
        Some(Usage {
            input_tokens: prompt.unwrap_or(0).saturating_add(cache.unwrap_or(0)),
            output_tokens: predicted.unwrap_or(0),
            cached_input_tokens: cache.unwrap_or(0),
        })
    });
    let counts = match (from_usage, from_timings) {
        (Some(mut u), Some(t)) => {
            if u.input_tokens == 0 {
                u.input_tokens = t.input_tokens;
            }
            if u.output_tokens == 0 {
                u.output_tokens = t.output_tokens;
            }
            if u.cached_input_tokens == 0 {
                u.cached_input_tokens = t.cached_input_tokens;
            }
            Some(u)
        }
        (u, t) => u.or(t),
    };
    let rejected = rejected.into_inner();
    let raw = if rejected.is_empty() {
        String::new()
    } else {
        let both = serde_json::json!({"usage": usage_raw(usage), "timings": usage_raw(timings)});
        preview_n(&both.to_string(), RAW_USAGE_MAX)
    };
    ParsedUsage {
        usage: counts,
        rejected,
        raw,
    }
}

/// How much of a rejected usage object is kept for audit.
const RAW_USAGE_MAX: usize = 2000;

fn usage_raw(v: Option<&Value>) -> Value {
    v.cloned().unwrap_or(Value::Null)
}

/// A delta (streaming) or a whole message (`whole`: each tool call in the array is
/// its own call even without index or id) read from a `Value`.
fn delta_of(delta: &Value, whole: bool) -> Delta<'_> {
    let reasoning = delta
        .get("reasoning_content")
        .or_else(|| delta.get("reasoning"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let calls = delta
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(pos, f)| {
                    let function = f.get("function");
                    Fragment {
                        index: if whole {
                            Some(pos as u64)
                        } else {
                            f.get("index").and_then(Value::as_u64)
                        },
                        id: non_empty(f.get("id")),
                        name: non_empty(function.and_then(|x| x.get("name"))),
                        arguments: match function.and_then(|x| x.get("arguments")) {
                            Some(Value::String(s)) => Cow::Borrowed(s.as_str()),
                            Some(Value::Null) | None => Cow::Borrowed(""),
                            Some(other) => Cow::Owned(other.to_string()),
                        },
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Delta {
        reasoning: Cow::Borrowed(reasoning),
        content: content_text(delta.get("content")),
        calls,
    }
}

/// A string field that is there and not empty.
fn non_empty(v: Option<&Value>) -> Option<Cow<'_, str>> {
    v.and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Cow::Borrowed)
}

/// `content` as text: a string, or the `text` of an array of parts.
fn content_text(content: Option<&Value>) -> Cow<'_, str> {
    match content {
        Some(Value::String(s)) => Cow::Borrowed(s.as_str()),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<String>()
            .into(),
        _ => Cow::Borrowed(""),
    }
}

/// The choice with index 0 (or the first one).
fn pick_choice(v: &Value) -> Option<&Value> {
    let choices = v.get("choices")?.as_array()?;
    choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64) == Some(0))
        .or_else(|| choices.first())
}

fn has_error(v: &Value) -> bool {
    v.get("error").is_some_and(|e| !e.is_null())
}

/// An `{"error": …}` object inside a 200 answer or a stream: typed like an HTTP error
/// with its numeric `code`/`status`, or as a retryable 502 without one.
fn error_object(v: &Value, ctx: &ErrorContext<'_>) -> ModelError {
    let status = ["/error/code", "/error/status", "/status"]
        .iter()
        .find_map(|p| {
            v.pointer(p).and_then(|c| {
                c.as_u64()
                    .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
            })
        })
        .filter(|s| (400..600).contains(s))
        .unwrap_or(502) as u16;
    classify_status(status, &v.to_string(), None, ctx)
}

pub(crate) fn preview(s: &str) -> String {
    preview_n(s, 200)
}

/// `s` trimmed, at most `max` characters (then ending in `…`).
fn preview_n(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_dialects() {
        let ds = json!({"prompt_tokens": 10, "completion_tokens": 3,
                        "prompt_cache_hit_tokens": 6, "prompt_cache_miss_tokens": 4});
        assert_eq!(
            parse_usage(Some(&ds), None).usage,
            Some(Usage {
                input_tokens: 10,
                output_tokens: 3,
                cached_input_tokens: 6
            })
        );
        let ds_split = json!({"completion_tokens": 1, "prompt_cache_hit_tokens": 6, "prompt_cache_miss_tokens": 4});
        assert_eq!(
            parse_usage(Some(&ds_split), None)
                .usage
                .unwrap()
                .input_tokens,
            10
        );
        let oa = json!({"prompt_tokens": 20, "completion_tokens": 5,
                        "prompt_tokens_details": {"cached_tokens": 16}});
        assert_eq!(
            parse_usage(Some(&oa), None)
                .usage
                .unwrap()
                .cached_input_tokens,
            16
        );
        let timings = json!({"prompt_n": 4, "cache_n": 30, "predicted_n": 7});
        assert_eq!(
            parse_usage(None, Some(&timings)).usage,
            Some(Usage {
                input_tokens: 34,
                output_tokens: 7,
                cached_input_tokens: 30
            })
        );
        let plain = json!({"prompt_tokens": 34, "completion_tokens": 7});
        assert_eq!(
            parse_usage(Some(&plain), Some(&timings))
                .usage
                .unwrap()
                .cached_input_tokens,
            30
        );
        assert_eq!(
            parse_usage(Some(&Value::Null), None),
            ParsedUsage::default()
        );
    }

    #[test]
    fn implausible_counts_are_unknown_and_kept_raw() {
        // 2^70, 2^64, 5e18 (a float), negative, fractional, text: each unknown.
        let usage: Value = serde_json::from_str(
            r#"{"prompt_tokens": 1180591620717411303424, "completion_tokens": -2,
                "prompt_cache_hit_tokens": 18446744073709551616,
                "prompt_cache_miss_tokens": 5e18,
                "prompt_tokens_details": {"cached_tokens": 1.5},
                "output_tokens": "7"}"#,
        )
        .unwrap();
        let p = parse_usage(Some(&usage), None);
        assert_eq!(p.usage, Some(Usage::default()));
        assert_eq!(
            p.rejected,
            [
                "usage.prompt_cache_hit_tokens",
                "usage.prompt_cache_miss_tokens",
                "usage.prompt_tokens",
                "usage.completion_tokens",
                "usage.output_tokens",
                "usage.prompt_tokens_details.cached_tokens",
            ]
        );
        assert!(p.raw.contains("1.1805916207174113e+21"), "{}", p.raw);
        // The bound itself and integral floats are fine; one over is not.
        let edge = json!({"prompt_tokens": MAX_STEP_TOKENS, "completion_tokens": 12.0,
                          "prompt_cache_hit_tokens": MAX_STEP_TOKENS + 1});
        let p = parse_usage(Some(&edge), None);
        assert_eq!(
            p.usage,
            Some(Usage {
                input_tokens: MAX_STEP_TOKENS,
                output_tokens: 12,
                cached_input_tokens: 0
            })
        );
        assert_eq!(p.rejected, ["usage.prompt_cache_hit_tokens"]);
        // Timings too; hit + miss at the bound saturate, never wrap.
        let p = parse_usage(None, Some(&json!({"prompt_n": -1, "predicted_n": 3})));
        assert_eq!(p.rejected, ["timings.prompt_n"]);
        assert_eq!(p.usage.unwrap().output_tokens, 3);
        let mut total = Usage {
            input_tokens: u64::MAX,
            output_tokens: 1,
            cached_input_tokens: u64::MAX,
        };
        total.add(&total.clone());
        assert_eq!(total.input_tokens, u64::MAX);
        assert_eq!(total.total(), u64::MAX);
    }

    #[test]
    fn a_stream_with_absurd_usage_reports_it_rejected_before_usage() {
        let events = std::sync::Mutex::new(Vec::new());
        let on = |e: StreamEvent| events.lock().unwrap().push(e);
        let ctx = ErrorContext {
            url: "u",
            model: "m",
            api_key_env: None,
        };
        let mut a = Assembler::new();
        let chunk = r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],
                        "usage":{"prompt_tokens":1180591620717411303424,"completion_tokens":3}}"#;
        a.handle(chunk, &on, &ctx).unwrap();
        let r = a.into_response(&on).unwrap();
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 0,
                output_tokens: 3,
                cached_input_tokens: 0
            })
        );
        let events = events.into_inner().unwrap();
        let kinds: Vec<_> = events
            .iter()
            .map(|e| match e {
                StreamEvent::UsageRejected { fields, raw } => {
                    assert_eq!(fields, &["usage.prompt_tokens"]);
                    assert!(raw.contains("1.1805916207174113e+21"), "{raw}");
                    "rejected"
                }
                StreamEvent::Usage { .. } => "usage",
                StreamEvent::Finish { .. } => "finish",
                _ => "delta",
            })
            .collect();
        assert_eq!(kinds, ["delta", "rejected", "usage", "finish"]);
    }

    #[test]
    fn calls_sharing_index_zero_with_distinct_ids_stay_apart() {
        let mut a = Assembler::new();
        let ctx = ErrorContext {
            url: "u",
            model: "m",
            api_key_env: None,
        };
        for (id, name) in [("a", "f"), ("b", "g")] {
            let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": id, "function": {"name": name, "arguments": "{}"}}]}}]});
            a.handle(&chunk.to_string(), &|_| {}, &ctx).unwrap();
        }
        let r = a.into_response(&|_| {}).unwrap();
        let names: Vec<_> = r
            .message
            .tool_calls
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["f", "g"]);
    }

    #[test]
    fn resent_complete_arguments_are_not_doubled() {
        let mut a = Assembler::new();
        let ctx = ErrorContext {
            url: "u",
            model: "m",
            api_key_env: None,
        };
        for args in ["{\"x\":", "1}", "{\"x\":1}"] {
            let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "c", "function": {"name": "f", "arguments": args}}]}}]});
            a.handle(&chunk.to_string(), &|_| {}, &ctx).unwrap();
        }
        let r = a.into_response(&|_| {}).unwrap();
        assert_eq!(r.message.tool_calls[0].arguments, "{\"x\":1}");
    }
}
