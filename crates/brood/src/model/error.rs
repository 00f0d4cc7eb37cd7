//! Typed failures of a model step. Each names what went wrong and what to do.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why a model step failed. Serializable so a recording can keep a failed step.
#[derive(Debug, Error, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelError {
    /// No connection could be made (after retries, when wrapped in `RetriesExhausted`).
    #[error("cannot reach {url}: {detail}")]
    Connect {
        /// The endpoint.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The step took longer than `api_timeout_secs`.
    #[error(
        "model step timed out after {secs} s (api_timeout_secs); raise it or check the endpoint"
    )]
    Timeout {
        /// The limit, in seconds.
        secs: u64,
    },
    /// 401/403: the key is missing, wrong or not allowed.
    /// `env_var` is empty when the provider has no key variable configured.
    #[error("{status} from {url}: {message} — {}", auth_hint(env_var))]
    Auth {
        /// The HTTP status.
        status: u16,
        /// The endpoint.
        url: String,
        /// The variable the API key is read from.
        env_var: String,
        /// The server's message.
        message: String,
    },
    /// The server does not know the model id.
    #[error("unknown model '{model}': {message}")]
    UnknownModel {
        /// The model id.
        model: String,
        /// The server's message.
        message: String,
    },
    /// The conversation no longer fits the model's context window.
    #[error("context length exceeded: {message}")]
    ContextLength {
        /// The server's message.
        message: String,
    },
    /// 400/422 and other non-retryable answers.
    #[error("request rejected ({status}): {message}")]
    BadRequest {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// A retryable HTTP status (408, 409, 429, 5xx), with the server's message.
    #[error("server answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
        /// `Retry-After`, in milliseconds, when the server sent one.
        retry_after_ms: Option<u64>,
    },
    /// The stream stopped before a finish reason or `[DONE]`.
    #[error("stream cut mid-way: {detail}")]
    StreamCut {
        /// What went wrong.
        detail: String,
    },
    /// The server answered something that is not a valid chat-completions response.
    #[error("invalid response from provider: {detail}")]
    Protocol {
        /// What went wrong.
        detail: String,
    },
    /// The server answered 200 with nothing in it: a stream that ended cleanly
    /// without a single event, or an empty JSON body. A deliberate answer, not a
    /// network failure, so it is not retried (llama-cpp-python does this for a
    /// streamed `tool_choice` of `auto` or `required`, and for a streamed prompt
    /// longer than its context).
    #[error(
        "{url} answered 200 with an empty {what} (no event, no message): the server \
         could not serve this request that way. If it is llama.cpp's Python server: \
         name a tool in tool_choice instead of auto/required, or set stream = false, \
         or shorten the conversation"
    )]
    EmptyAnswer {
        /// The endpoint.
        url: String,
        /// `stream` or `body`.
        what: String,
    },
    /// One step's answer (content, reasoning and tool-call arguments, or one line of
    /// its stream) grew past `max_answer_bytes`: the stream was dropped there. Not
    /// retried (the same request would get the same answer).
    #[error(
        "the model's answer exceeded max_answer_bytes ({cap} bytes): {size} bytes of \
         {what} read when it was dropped; raise max_answer_bytes or ask for a shorter answer"
    )]
    AnswerTooLarge {
        /// The limit, in bytes.
        cap: u64,
        /// The size reached, in bytes.
        size: u64,
        /// `answer`, `stream line` or `body`.
        what: String,
    },
    /// The request cannot be sent as it is; checked before anything goes out
    /// (see [`super::ModelRequest::check`]).
    #[error("invalid request: {detail}")]
    InvalidRequest {
        /// What went wrong.
        detail: String,
    },
    /// Transient failures kept happening; `last` is the final one.
    #[error("gave up after {}: {last}", attempts_text(*attempts))]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: Box<ModelError>,
    },
    /// The step's budget (`api_timeout_secs`) could not cover another attempt after a
    /// transient failure: the server's `Retry-After` (`retry_after_ms`, when that was
    /// the reason) or the backoff ends past it, or it ran out during a retry. `last`
    /// is the last provider error, `attempts` the attempts made.
    #[error("{}", step_budget_text(*secs, *attempts, *retry_after_ms, last))]
    StepBudget {
        /// The limit, in seconds.
        secs: u64,
        /// Attempts made.
        attempts: u32,
        /// The wait the server asked for, if any.
        retry_after_ms: Option<u64>,
        /// The last error.
        last: Box<ModelError>,
    },
    /// A missing API key: says which variable to set.
    #[error(
        "no API key: set ${env_var} (or choose another provider with --provider / --api-key-env)"
    )]
    MissingKey {
        /// The variable the API key is read from.
        env_var: String,
    },
    /// A scripted or replayed model had no answer for this request.
    #[error("{0}")]
    Script(String),
    /// Replay found a request that differs from the recording.
    #[error("replay mismatch at request #{index}: {detail}")]
    ReplayMismatch {
        /// Which recorded step.
        index: usize,
        /// What went wrong.
        detail: String,
    },
    /// Bad provider configuration (URL, preset name, …).
    #[error("provider configuration: {0}")]
    Config(String),
    /// `--provider NAME` names no preset.
    #[error("unknown provider '{name}'; choose one of: {}", known.join(", "))]
    UnknownProvider {
        /// The name given.
        name: String,
        /// The accepted names.
        known: Vec<String>,
    },
    /// The step succeeded but could not be written to the recording file.
    #[error("cannot write the model recording: {0}")]
    Record(String),
}

/// "1 attempt", "3 attempts".
fn attempts_text(n: u32) -> String {
    if n == 1 {
        "1 attempt".to_string()
    } else {
        format!("{n} attempts")
    }
}

fn step_budget_text(
    secs: u64,
    attempts: u32,
    retry_after_ms: Option<u64>,
    last: &ModelError,
) -> String {
    let tried = attempts_text(attempts);
    match retry_after_ms {
        Some(ms) => format!(
            "gave up after {tried}: {last} — the server asked to wait {} s (Retry-After), \
             longer than what is left of the step's {secs} s (api_timeout_secs); \
             retry later or raise api_timeout_secs",
            fmt_secs(ms)
        ),
        None => format!(
            "model step ran out of its {secs} s (api_timeout_secs) after {tried}; \
             the last error: {last}"
        ),
    }
}

/// Milliseconds as seconds: `3600`, `0.25`.
fn fmt_secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{}.{:03}", ms / 1000, ms % 1000)
            .trim_end_matches('0')
            .to_string()
    }
}

fn auth_hint(env_var: &str) -> String {
    if env_var.is_empty() {
        "this endpoint wants an API key: put it in an env var and name it with --api-key-env"
            .to_string()
    } else {
        format!("check the API key in ${env_var}")
    }
}

impl ModelError {
    /// Whether a retry may succeed: connect errors, retryable statuses, cut streams.
    /// A step timeout is not: it already bounds the whole step, retries included.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ModelError::Connect { .. } | ModelError::Status { .. } | ModelError::StreamCut { .. }
        )
    }

    /// The wait the server asked for (`Retry-After`) with this error, if any.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            ModelError::Status {
                retry_after_ms: Some(ms),
                ..
            } => Some(std::time::Duration::from_millis(*ms)),
            _ => None,
        }
    }
}
