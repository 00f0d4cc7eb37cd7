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

    pub(crate) fn reason(&self) -> String {
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
    /// [`UsagePlacement::FinalChunk`], a usage chunk — the events the server sends
    /// (`render.rs`), read back as values.
    pub fn stream_chunks(&self, model: &str) -> Vec<Value> {
        let body = crate::render::sse_body(self, model);
        String::from_utf8_lossy(&body)
            .split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .filter_map(|json| serde_json::from_str(json).ok())
            .collect()
    }
}
