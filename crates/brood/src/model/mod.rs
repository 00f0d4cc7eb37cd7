//! The LLM boundary: the [`Model`] trait (one async call per agent step), the
//! request/response vocabulary shared by every provider, and the providers
//! themselves (OpenAI-compatible HTTP, scripted, record/replay).
//!
//! A step takes a [`ModelRequest`] and reports [`StreamEvent`]s to a callback while
//! it runs (text deltas, reasoning deltas, tool-call fragments, usage, finish), then
//! returns one assembled [`ModelResponse`]. Cancelling a step is dropping its future.
//!
//! The event contract every provider keeps:
//! - text and reasoning deltas concatenate to the response's `content` / `reasoning`;
//! - [`StreamEvent::ToolCallDelta`] carries `id` and `name` only when they first become
//!   known (never repeated, even when the server repeats them); `arguments` fragments
//!   concatenate to the call's arguments; `index` is the call's position in the
//!   response's `tool_calls`;
//! - [`StreamEvent::Usage`] comes at most once, at the end, just before the single
//!   [`StreamEvent::Finish`] of a successful step;
//! - [`StreamEvent::Retrying`] means the attempt failed and the step starts over:
//!   discard the deltas received since the step (or the previous `Retrying`) began.
//!
//! Providers: [`openai::OpenAiProvider`] (any OpenAI-compatible endpoint, configured
//! by hand or from a [`preset`]), [`scripted::ScriptedModel`] (deterministic),
//! [`record::Recorder`] / [`record::Replayer`] (`--record` / `--replay`).

mod error;
mod schema;

pub use error::ModelError;
pub use schema::Schema;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The user (or the runtime speaking for it).
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// One message of a conversation, in the OpenAI chat-completions shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Text content. Empty (never absent) for an assistant message that only calls tools.
    #[serde(default)]
    pub content: String,
    /// Reasoning text (DeepSeek's `reasoning_content`), kept apart from `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }
    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, content)
    }
    /// The result of tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Self::plain(Role::Tool, content)
        }
    }
    fn plain(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call requested by the model. `arguments` is the raw JSON text the model sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id, once known.
    pub id: String,
    /// The name given.
    pub name: String,
    /// A fragment of the arguments (JSON text).
    pub arguments: String,
}

/// A tool as the model sees it: name, description, JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Shared like the schema: every step of every run that has the tool copies
    /// its spec into the request, so a copy is three reference counts, not text.
    pub name: std::sync::Arc<str>,
    /// What it does, written for a model.
    pub description: std::sync::Arc<str>,
    /// Shared and rendered once (see [`Schema`]): every request of every run that
    /// has the tool carries it.
    pub parameters: Schema,
}

/// How the model may use tools in one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call tools.
    None,
    /// The model must call this tool.
    #[serde(untagged)]
    Named(String),
}

impl ToolChoice {
    /// Parse `auto`, `required`, `none`, or a tool name.
    pub fn parse(s: &str) -> ToolChoice {
        match s.trim() {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            other => ToolChoice::Named(other.to_string()),
        }
    }
}

/// Sampling parameters; `None` leaves the provider's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Sampling temperature.
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Seed, where the server supports it.
    pub seed: Option<u64>,
}

/// Everything one model step needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Model id as the provider knows it.
    pub model: String,
    /// System prompt; sent as the first message when non-empty. Shared: a run's
    /// requests all carry the same one.
    pub system: std::sync::Arc<str>,
    /// The conversation (after the system prompt).
    pub messages: Vec<Message>,
    #[serde(default)]
    /// Tools offered. Shared: a run's requests, and siblings' with the same tools,
    /// point to one list (a step copies a reference count, not the specs); build
    /// one from a `Vec<ToolSpec>` with `.into()`.
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// `None` sends no `tool_choice` field (the provider's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default)]
    /// Temperature and the like.
    pub sampling: Sampling,
}

impl ModelRequest {
    /// Check what a server would reject, or worse silently ignore, before sending:
    /// a `tool_choice` naming a tool this request does not offer (OpenAI answers
    /// 400, llama.cpp's Python server 500 — or, with no tools at all, a plain text
    /// answer as if nothing had been forced), and `required` with no tools.
    /// Errors are [`ModelError::InvalidRequest`] naming the tool and the offered ones.
    pub fn check(&self) -> Result<(), ModelError> {
        let offered = || {
            if self.tools.is_empty() {
                "it offers no tools".to_string()
            } else {
                let names: Vec<&str> = self.tools.iter().map(|t| &*t.name).collect();
                format!("it offers: {}", names.join(", "))
            }
        };
        match &self.tool_choice {
            Some(ToolChoice::Named(name)) if !self.tools.iter().any(|t| *t.name == **name) => {
                Err(ModelError::InvalidRequest {
                    detail: format!(
                        "tool_choice names the tool '{name}', which this request does not \
                         offer ({}); name one of the offered tools, or use auto or none",
                        offered()
                    ),
                })
            }
            Some(ToolChoice::Required) if self.tools.is_empty() => {
                Err(ModelError::InvalidRequest {
                    detail: "tool_choice is 'required' but the request offers no tools; \
                             offer tools or drop tool_choice"
                        .to_string(),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Token usage of one step (or a sum of steps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens (cached ones included).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens served from the provider's prefix cache.
    pub cached_input_tokens: u64,
}

/// The most tokens one step may report for one count: a larger (or negative,
/// fractional, non-numeric) count from a server is read as unknown (see
/// [`StreamEvent::UsageRejected`]). Far above any real context window, far below
/// where sums over a session could overflow `u64` or the ledger's `INTEGER`.
pub const MAX_STEP_TOKENS: u64 = 1_000_000_000_000;

impl Usage {
    /// Add `other`'s counts, saturating (a sum never wraps past a budget).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
    }
    /// Input plus output tokens, saturating.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// A final answer.
    Stop,
    /// Tool calls to run.
    ToolCalls,
    /// The output limit was hit.
    Length,
    /// The provider's content filter stopped it.
    ContentFilter,
    #[serde(untagged)]
    /// Anything else, as sent.
    Other(String),
}

impl FinishReason {
    /// Read a server's `finish_reason` (aliases included).
    pub fn parse(s: &str) -> FinishReason {
        match s {
            "stop" | "eos" => FinishReason::Stop,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_string()),
        }
    }
}

/// What a step reports while it runs. Any event counts as progress for the heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEvent {
    /// Answer text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// Reasoning text (DeepSeek `reasoning_content`).
    ReasoningDelta {
        /// The new text.
        text: String,
    },
    /// A fragment of tool call number `index` of this step.
    ToolCallDelta {
        /// Which recorded step.
        index: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// The call id, once known.
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// The name given.
        name: Option<String>,
        /// A fragment of the arguments (JSON text).
        arguments: String,
    },
    /// What the step used.
    Usage {
        /// The counts.
        usage: Usage,
    },
    /// The server's usage held counts that are not plausible token counts (negative,
    /// fractional, non-numeric, above [`MAX_STEP_TOKENS`]): they were read as unknown.
    /// `raw` is the usage (and timings) object as the server sent it (shortened),
    /// kept for audit; `fields` names the rejected counts. Comes before
    /// [`StreamEvent::Usage`] (if any count was usable) and [`StreamEvent::Finish`].
    UsageRejected {
        /// The counts that were rejected.
        fields: Vec<String>,
        /// The usage object as sent (shortened).
        raw: String,
    },
    /// The step ended.
    Finish {
        /// Why.
        reason: FinishReason,
    },
    /// A transient failure is being retried after `delay_ms`.
    Retrying {
        /// The attempt about to be made.
        attempt: u32,
        /// The wait before it.
        delay_ms: u64,
        /// The error, in words.
        error: String,
    },
}

/// The assembled result of one step. When the message carries tool calls, providers
/// report `finish_reason` [`FinishReason::ToolCalls`] even if the server said `stop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The assistant message (content, reasoning, tool calls).
    pub message: Message,
    /// `None` when the server reported no usage.
    pub usage: Option<Usage>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
}

/// Callback that receives a step's events as they happen.
pub type EventFn<'a> = &'a (dyn Fn(StreamEvent) + Send + Sync);

/// One LLM step. Implementations: [`openai::OpenAiProvider`], [`scripted::ScriptedModel`],
/// [`record::Recorder`], [`record::Replayer`] — or your own, given to
/// [`crate::SessionBuilder::model`]:
///
/// ```no_run
/// use brood::model::{emit_response_events, EventFn, FinishReason, Message};
/// use brood::{Model, ModelError, ModelRequest, ModelResponse};
///
/// /// Answers every step with the same text (a stand-in for your own client).
/// struct Canned(String);
///
/// #[async_trait::async_trait]
/// impl Model for Canned {
///     fn provider_name(&self) -> &str {
///         "canned"
///     }
///     async fn step(
///         &self,
///         _request: &ModelRequest,
///         on_event: EventFn<'_>,
///     ) -> Result<ModelResponse, ModelError> {
///         let response = ModelResponse {
///             message: Message::assistant(self.0.clone()),
///             usage: None,
///             finish_reason: FinishReason::Stop,
///         };
///         // Tell the runtime what a streaming provider would have told it.
///         emit_response_events(&response, on_event);
///         Ok(response)
///     }
/// }
///
/// # async fn demo() -> Result<(), brood::Error> {
/// let session = brood::Session::builder(".")
///     .model(Canned("Nothing to do.".into()))
///     .build()
///     .await?;
/// assert_eq!(session.ask("Anything?").await?.final_text, "Nothing to do.");
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Model: Send + Sync {
    /// A short label for records and errors (e.g. `deepseek`, `scripted`).
    fn provider_name(&self) -> &str;

    /// Run one step. Events are reported to `on_event` as they arrive; the assembled
    /// response is returned at the end. Dropping the future cancels the step.
    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError>;

    /// The model ids this provider accepts, when it can list them (used to fail a
    /// spawn early with the accepted list). `Ok(None)`: the provider does not say.
    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        Ok(None)
    }

    /// The prices the endpoint publishes for its models (OpenRouter's `/models`
    /// does), by model id. Empty: it publishes none.
    async fn published_prices(&self) -> Result<pricing::Pricing, ModelError> {
        Ok(pricing::Pricing::default())
    }
}

/// Report a finished response as the events a streaming provider would have sent:
/// reasoning, text, one [`StreamEvent::ToolCallDelta`] per call (whole), usage, finish.
/// Used by the models that answer without a stream (scripted, replay).
pub fn emit_response_events(response: &ModelResponse, on_event: EventFn<'_>) {
    let m = &response.message;
    if let Some(r) = m.reasoning.as_ref().filter(|r| !r.is_empty()) {
        on_event(StreamEvent::ReasoningDelta { text: r.clone() });
    }
    if !m.content.is_empty() {
        on_event(StreamEvent::TextDelta {
            text: m.content.clone(),
        });
    }
    for (index, c) in m.tool_calls.iter().enumerate() {
        on_event(StreamEvent::ToolCallDelta {
            index,
            id: Some(c.id.clone()),
            name: Some(c.name.clone()),
            arguments: c.arguments.clone(),
        });
    }
    if let Some(usage) = response.usage {
        on_event(StreamEvent::Usage { usage });
    }
    on_event(StreamEvent::Finish {
        reason: response.finish_reason.clone(),
    });
}

mod assemble;
mod body;
mod chunk;
mod h2;
mod h2conn;
mod http;
pub mod openai;
pub mod preset;
pub mod pricing;
pub mod record;
pub mod retry;
pub mod scripted;
mod sse;
