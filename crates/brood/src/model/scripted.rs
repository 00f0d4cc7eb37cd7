//! A deterministic model for tests, benchmarks and demos.
//!
//! A [`ScriptedModel`] holds scripts: each is a key that picks conversations (a
//! substring of the first user message, or any predicate over the request) and a list
//! of [`ScriptStep`]s. The step to play is the number of assistant messages already in
//! the request, so the model keeps no state and serves any number of concurrent
//! conversations. Scripts are tried in the order they were added.
//!
//! It reports events like a real provider (text, tool-call deltas, usage, finish) and,
//! for text and tool-call steps, a usage estimate (about 4 characters per token) so
//! budgets can be tested.

use super::{
    emit_response_events, EventFn, FinishReason, Message, Model, ModelError, ModelRequest,
    ModelResponse, Role, ToolCall, Usage,
};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// A step computed from the request.
pub(crate) type StepFn =
    Arc<dyn Fn(&ModelRequest) -> Result<ModelResponse, ModelError> + Send + Sync>;
/// Picks the conversations a script answers.
pub(crate) type MatchFn = Arc<dyn Fn(&ModelRequest) -> bool + Send + Sync>;

/// One scripted answer.
#[derive(Clone)]
pub enum ScriptStep {
    /// A final text answer.
    Text(String),
    /// Tool calls `(name, raw JSON arguments)`; ids are `call_<step>_<n>`.
    ToolCalls(Vec<(String, String)>),
    /// Exactly this response.
    Respond(ModelResponse),
    /// This error.
    Error(ModelError),
    /// Computed from the request.
    Func(StepFn),
    /// Wait (asynchronously), then play the inner step.
    Delayed(Duration, Box<ScriptStep>),
}

impl ScriptStep {
    /// A final text answer.
    pub fn text(text: impl Into<String>) -> ScriptStep {
        ScriptStep::Text(text.into())
    }

    /// One tool call.
    pub fn tool_call(name: impl Into<String>, arguments: serde_json::Value) -> ScriptStep {
        ScriptStep::ToolCalls(vec![(name.into(), arguments.to_string())])
    }

    /// Several tool calls in one step (they run concurrently in the agent).
    pub fn tool_calls<N: Into<String>>(
        calls: impl IntoIterator<Item = (N, serde_json::Value)>,
    ) -> ScriptStep {
        ScriptStep::ToolCalls(
            calls
                .into_iter()
                .map(|(n, a)| (n.into(), a.to_string()))
                .collect(),
        )
    }

    /// This error, as a provider would fail.
    pub fn error(error: ModelError) -> ScriptStep {
        ScriptStep::Error(error)
    }

    /// Exactly this response.
    pub fn respond(response: ModelResponse) -> ScriptStep {
        ScriptStep::Respond(response)
    }

    /// An answer computed from the request.
    pub fn func<F>(f: F) -> ScriptStep
    where
        F: Fn(&ModelRequest) -> Result<ModelResponse, ModelError> + Send + Sync + 'static,
    {
        ScriptStep::Func(Arc::new(f))
    }

    /// Play this step after `delay`.
    pub fn after(self, delay: Duration) -> ScriptStep {
        ScriptStep::Delayed(delay, Box::new(self))
    }
}

impl std::fmt::Debug for ScriptStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScriptStep::Text(t) => f.debug_tuple("Text").field(t).finish(),
            ScriptStep::ToolCalls(c) => f.debug_tuple("ToolCalls").field(c).finish(),
            ScriptStep::Respond(r) => f.debug_tuple("Respond").field(r).finish(),
            ScriptStep::Error(e) => f.debug_tuple("Error").field(e).finish(),
            ScriptStep::Func(_) => f.write_str("Func(..)"),
            ScriptStep::Delayed(d, s) => f.debug_tuple("Delayed").field(d).field(s).finish(),
        }
    }
}

#[derive(Clone)]
enum Key {
    FirstUserContains(String),
    Matches(MatchFn),
    Any,
}

impl Key {
    fn matches(&self, request: &ModelRequest) -> bool {
        match self {
            Key::FirstUserContains(s) => first_user_text(request).is_some_and(|t| t.contains(s)),
            Key::Matches(f) => f(request),
            Key::Any => true,
        }
    }

    fn describe(&self) -> String {
        match self {
            Key::FirstUserContains(s) => format!("the script for {s:?}"),
            Key::Matches(_) => "a predicate script".to_string(),
            Key::Any => "the fallback script".to_string(),
        }
    }
}

/// A model that plays scripts (see the module docs).
#[derive(Clone)]
pub struct ScriptedModel {
    name: String,
    scripts: Vec<(Key, Vec<ScriptStep>)>,
}

impl Default for ScriptedModel {
    fn default() -> Self {
        ScriptedModel::new()
    }
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("name", &self.name)
            .field("scripts", &self.scripts.len())
            .finish()
    }
}

impl ScriptedModel {
    /// A model with no scripts, named `scripted`.
    pub fn new() -> ScriptedModel {
        ScriptedModel {
            name: "scripted".to_string(),
            scripts: Vec::new(),
        }
    }

    /// Rename it (the [`Model::provider_name`]).
    pub fn named(mut self, name: impl Into<String>) -> ScriptedModel {
        self.name = name.into();
        self
    }

    /// Answer conversations whose first user message contains `needle`.
    pub fn on(mut self, needle: impl Into<String>, steps: Vec<ScriptStep>) -> ScriptedModel {
        self.scripts
            .push((Key::FirstUserContains(needle.into()), steps));
        self
    }

    /// Answer conversations for which `pick` is true.
    pub fn on_request<F>(mut self, pick: F, steps: Vec<ScriptStep>) -> ScriptedModel
    where
        F: Fn(&ModelRequest) -> bool + Send + Sync + 'static,
    {
        self.scripts.push((Key::Matches(Arc::new(pick)), steps));
        self
    }

    /// Answer every conversation no earlier script took.
    pub fn otherwise(mut self, steps: Vec<ScriptStep>) -> ScriptedModel {
        self.scripts.push((Key::Any, steps));
        self
    }

    /// The step a request is at: the number of assistant messages it already has.
    pub fn step_index(request: &ModelRequest) -> usize {
        request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count()
    }

    /// The step to play for `request`, or why there is none.
    fn pick(&self, request: &ModelRequest) -> Result<(usize, ScriptStep), ModelError> {
        let preview = first_user_text(request)
            .map(|t| short(t, 120))
            .unwrap_or_else(|| "<no user message>".to_string());
        let (key, steps) = self
            .scripts
            .iter()
            .find(|(k, _)| k.matches(request))
            .ok_or_else(|| {
                ModelError::Script(format!(
                    "scripted model '{}' has no script for the conversation starting {preview:?}",
                    self.name
                ))
            })?;
        let index = ScriptedModel::step_index(request);
        let step = steps.get(index).cloned().ok_or_else(|| {
            ModelError::Script(format!(
                "{} of scripted model '{}' has {} steps, but the conversation starting \
                 {preview:?} asks for step {}",
                key.describe(),
                self.name,
                steps.len(),
                index + 1
            ))
        })?;
        Ok((index, step))
    }
}

/// About one token per 4 characters (rounded up).
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The estimated input tokens of a request: system, messages and tool specs.
pub(crate) fn estimate_input_tokens(request: &ModelRequest) -> u64 {
    let mut n = estimate_tokens(&request.system);
    for m in &request.messages {
        n += estimate_tokens(&m.content);
        for c in &m.tool_calls {
            n += estimate_tokens(&c.name) + estimate_tokens(&c.arguments);
        }
    }
    for t in request.tools.iter() {
        n += estimate_tokens(&t.name)
            + estimate_tokens(&t.description)
            + estimate_tokens(&t.parameters.to_string());
    }
    n
}

fn first_user_text(request: &ModelRequest) -> Option<&str> {
    request
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

fn estimated(request: &ModelRequest, message: Message, finish: FinishReason) -> ModelResponse {
    let mut output = estimate_tokens(&message.content);
    for c in &message.tool_calls {
        output += estimate_tokens(&c.name) + estimate_tokens(&c.arguments);
    }
    ModelResponse {
        message,
        usage: Some(Usage {
            input_tokens: estimate_input_tokens(request),
            output_tokens: output,
            cached_input_tokens: 0,
        }),
        finish_reason: finish,
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn provider_name(&self) -> &str {
        &self.name
    }

    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let (index, mut step) = self.pick(request)?;
        let response = loop {
            match step {
                ScriptStep::Delayed(d, inner) => {
                    tokio::time::sleep(d).await;
                    step = *inner;
                }
                ScriptStep::Text(text) => {
                    break estimated(request, Message::assistant(text), FinishReason::Stop)
                }
                ScriptStep::ToolCalls(calls) => {
                    let mut message = Message::assistant("");
                    message.tool_calls = calls
                        .into_iter()
                        .enumerate()
                        .map(|(i, (name, arguments))| ToolCall {
                            id: format!("call_{index}_{i}"),
                            name,
                            arguments,
                        })
                        .collect();
                    break estimated(request, message, FinishReason::ToolCalls);
                }
                ScriptStep::Respond(r) => break r,
                ScriptStep::Error(e) => return Err(e),
                ScriptStep::Func(f) => break f(request)?,
            }
        };
        emit_response_events(&response, on_event);
        Ok(response)
    }
}
