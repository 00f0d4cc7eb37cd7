//! A model answer (text, reasoning, tool calls, usage) and how it is rendered: as one
//! JSON chat completion, or as the SSE chunks a streaming server would send.

use serde_json::{json, Map, Value};

/// One tool call of an [`Answer`]. `arguments` is the raw JSON text sent to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Where a streamed answer carries its usage object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsagePlacement {
    /// A last chunk with `"choices": []` and `usage` (OpenAI's `include_usage`).
    #[default]
    FinalChunk,
    /// On the chunk that carries `finish_reason` (DeepSeek, llama.cpp).
    FinishChunk,
}

/// A model answer. Built with the chained builders; rendered by the server as SSE or
/// JSON following the request's `"stream"` flag.
#[derive(Debug, Clone)]
pub struct Answer {
    pub content: String,
    /// DeepSeek-style `reasoning_content`.
    pub reasoning: Option<String>,
    pub tool_calls: Vec<MockToolCall>,
    /// The raw `usage` object (any provider's shape).
    pub usage: Option<Value>,
    pub usage_placement: UsagePlacement,
    /// llama.cpp's top-level `timings` object (on the finish chunk / the completion).
    pub timings: Option<Value>,
    /// Default: `tool_calls` when there are tool calls, else `stop`.
    pub finish_reason: Option<String>,
    /// Streamed text, reasoning and arguments are split into pieces of this many
    /// characters (0: one piece). Default 8.
    pub fragment_chars: usize,
    /// llama.cpp style: every tool-call fragment repeats `id`, `type` and `function.name`.
    pub repeat_id_and_name: bool,
    /// Leave `index` out of tool-call fragments (some servers do).
    pub omit_index: bool,
}

impl Default for Answer {
    fn default() -> Self {
        Answer {
            content: String::new(),
            reasoning: None,
            tool_calls: Vec::new(),
            usage: None,
            usage_placement: UsagePlacement::FinalChunk,
            timings: None,
            finish_reason: None,
            fragment_chars: 8,
            repeat_id_and_name: false,
            omit_index: false,
        }
    }
}

impl Answer {
    /// An empty answer (no text, no calls).
    pub fn new() -> Answer {
        Answer::default()
    }

    /// A text answer.
    pub fn text(text: impl Into<String>) -> Answer {
        Answer {
            content: text.into(),
            ..Answer::default()
        }
    }

    /// Set the text content.
    pub fn content(mut self, text: impl Into<String>) -> Answer {
        self.content = text.into();
        self
    }

    /// Add DeepSeek-style `reasoning_content`.
    pub fn reasoning(mut self, text: impl Into<String>) -> Answer {
        self.reasoning = Some(text.into());
        self
    }

    /// Add a tool call with id `call_N` (N = its position).
    pub fn tool_call(self, name: impl Into<String>, arguments: Value) -> Answer {
        let id = format!("call_{}", self.tool_calls.len());
        self.tool_call_with_id(id, name, arguments.to_string())
    }

    /// Add a tool call with an explicit id and raw argument text.
    pub fn tool_call_with_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Answer {
        self.tool_calls.push(MockToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        });
        self
    }

    /// Attach a raw usage object, e.g. `{"prompt_tokens": 10, "completion_tokens": 2}`.
    pub fn usage(mut self, usage: Value) -> Answer {
        self.usage = Some(usage);
        self
    }

    /// Put the usage object on the finish chunk instead of a separate last chunk.
    pub fn usage_on_finish_chunk(mut self) -> Answer {
        self.usage_placement = UsagePlacement::FinishChunk;
        self
    }

    /// Attach llama.cpp `timings`, e.g. `{"prompt_n": 5, "cache_n": 3, "predicted_n": 2}`.
    pub fn timings(mut self, timings: Value) -> Answer {
        self.timings = Some(timings);
        self
    }

    /// Override the finish reason.
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Answer {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Split streamed strings into pieces of `chars` characters (0: whole).
    pub fn fragment(mut self, chars: usize) -> Answer {
        self.fragment_chars = chars;
        self
    }

    /// llama.cpp style tool-call chunks: `id` and `function.name` in every fragment.
    pub fn llama_style(mut self) -> Answer {
        self.repeat_id_and_name = true;
        self
    }

    /// Leave `index` out of tool-call fragments.
    pub fn without_index(mut self) -> Answer {
        self.omit_index = true;
        self
    }

    /// Stream the first `k` chunks of this answer, then drop the connection.
    pub fn cut_after(self, k: usize) -> crate::MockReply {
        let mut chunks = self.stream_chunks("mock-model");
        chunks.truncate(k);
        crate::MockReply::Cut { chunks }
    }

    /// Stream the first `k` chunks of this answer, then stall with the connection open.
    pub fn stall_after(self, k: usize) -> crate::MockReply {
        let mut chunks = self.stream_chunks("mock-model");
        chunks.truncate(k);
        crate::MockReply::Stall { chunks }
    }

    fn reason(&self) -> String {
        match &self.finish_reason {
            Some(r) => r.clone(),
            None if self.tool_calls.is_empty() => "stop".into(),
            None => "tool_calls".into(),
        }
    }

    /// The non-streaming completion body.
    pub fn to_json(&self, model: &str) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        let content = if self.content.is_empty() && !self.tool_calls.is_empty() {
            Value::Null
        } else {
            json!(self.content)
        };
        message.insert("content".into(), content);
        if let Some(r) = &self.reasoning {
            message.insert("reasoning_content".into(), json!(r));
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut body = json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": Value::Object(message), "finish_reason": self.reason()}],
        });
        if let Some(u) = &self.usage {
            body["usage"] = u.clone();
        }
        if let Some(t) = &self.timings {
            body["timings"] = t.clone();
        }
        body
    }

    /// The streaming chunks (without the final `[DONE]`): a role chunk, reasoning
    /// pieces, content pieces, tool-call fragments, the finish chunk and, with
    /// [`UsagePlacement::FinalChunk`], a usage chunk.
    pub fn stream_chunks(&self, model: &str) -> Vec<Value> {
        let chunk = |delta: Value, finish: Value| chunk_value(model, delta, finish);
        let mut out = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        if let Some(r) = &self.reasoning {
            for piece in split(r, self.fragment_chars) {
                out.push(chunk(json!({"reasoning_content": piece}), Value::Null));
            }
        }
        for piece in split(&self.content, self.fragment_chars) {
            out.push(chunk(json!({"content": piece}), Value::Null));
        }
        for (i, call) in self.tool_calls.iter().enumerate() {
            let mut first = true;
            let mut pieces = split(&call.arguments, self.fragment_chars);
            pieces.insert(0, String::new());
            for piece in pieces {
                let mut frag = Map::new();
                if !self.omit_index {
                    frag.insert("index".into(), json!(i));
                }
                let mut function = Map::new();
                if first || self.repeat_id_and_name {
                    frag.insert("id".into(), json!(call.id));
                    frag.insert("type".into(), json!("function"));
                    function.insert("name".into(), json!(call.name));
                }
                function.insert("arguments".into(), json!(piece));
                frag.insert("function".into(), Value::Object(function));
                out.push(chunk(
                    json!({"tool_calls": [Value::Object(frag)]}),
                    Value::Null,
                ));
                first = false;
            }
        }
        out.extend(self.stream_chunks_tail(model));
        out
    }
}

impl Answer {
    /// The finish chunk and, with [`UsagePlacement::FinalChunk`] and usage, the
    /// usage chunk — the end of [`Answer::stream_chunks`].
    pub(crate) fn stream_chunks_tail(&self, model: &str) -> Vec<Value> {
        let chunk = |delta: Value, finish: Value| chunk_value(model, delta, finish);
        let mut out = Vec::with_capacity(2);
        let mut finish = chunk(json!({}), json!(self.reason()));
        if let Some(t) = &self.timings {
            finish["timings"] = t.clone();
        }
        match (&self.usage, self.usage_placement) {
            (Some(u), UsagePlacement::FinishChunk) => {
                finish["usage"] = u.clone();
                out.push(finish);
            }
            (Some(u), UsagePlacement::FinalChunk) => {
                out.push(finish);
                out.push(json!({
                    "id": "chatcmpl-mock",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [],
                    "usage": u,
                }));
            }
            (None, _) => out.push(finish),
        }
        out
    }
}

/// One streamed chunk carrying `delta` (and `finish` as its finish reason).
fn chunk_value(model: &str, delta: Value, finish: Value) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

/// Split `s` into pieces of `n` characters (0: one piece; empty string: none).
fn split(s: &str, n: usize) -> Vec<String> {
    if s.is_empty() {
        return Vec::new();
    }
    if n == 0 {
        return vec![s.to_string()];
    }
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}
