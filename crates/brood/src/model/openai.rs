//! The OpenAI-compatible chat-completions provider over HTTP (DeepSeek, OpenAI,
//! OpenRouter, vLLM, SGLang, Ollama, llama.cpp's server, …).
//!
//! One [`Model::step`] = one `POST {base_url}/chat/completions`, streamed (SSE with
//! `stream_options.include_usage`) or not, retried on transient failures (see
//! [`super::retry`]), the whole step bounded by `api_timeout_secs`. The request body is
//! serialized for each send (the same request always gives the same bytes) and
//! handed to the HTTP client as a one-shot body, so nothing keeps it once it is
//! written: a child waiting for its answer holds no copy of its request's ~8 KiB
//! (BENCHMARKS.md, memory per running child).

use super::assemble::{parse_completion, preview, Assembler, ChunkOutcome};
use super::http::{AnswerBody, HttpClient, HttpError, RequestBody};
use super::retry::{classify_status, parse_retry_after, retry, ErrorContext, RetryPolicy};
use super::sse::SseParser;
use super::{EventFn, Model, ModelError, ModelRequest, ModelResponse};
use async_trait::async_trait;
use futures::StreamExt;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use serde_json::Value;
use std::time::{Duration, SystemTime};

/// `api_timeout_secs` when unset or 0.
pub(crate) const DEFAULT_API_TIMEOUT_SECS: u64 = 120;
pub use super::retry::MAX_API_TIMEOUT_SECS;

/// `max_answer_bytes` by default: 8 MiB of one step's content, reasoning and
/// tool-call arguments.
pub(crate) const DEFAULT_MAX_ANSWER_BYTES: u64 = 8 * 1024 * 1024;

/// The per-step timeout: `None` or 0 → 120 s; otherwise clamped to `1..=1800`.
pub fn clamp_api_timeout(secs: Option<u64>) -> u64 {
    match secs {
        None | Some(0) => DEFAULT_API_TIMEOUT_SECS,
        Some(s) => s.clamp(1, MAX_API_TIMEOUT_SECS),
    }
}

/// How to reach one OpenAI-compatible endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// A label for errors and records (`deepseek`, `local`, …).
    pub name: String,
    /// Up to, not including, `/chat/completions` (e.g. `https://api.openai.com/v1`).
    pub base_url: String,
    /// The key, sent as `Authorization: Bearer …`; `None` sends no header.
    pub api_key: Option<String>,
    /// The env var the key comes from, named in auth and missing-key errors.
    pub api_key_env: Option<String>,
    /// Bounds a whole step, retries and waits included (see [`clamp_api_timeout`]).
    pub api_timeout_secs: u64,
    /// Attempts per step, the first included.
    pub max_attempts: u32,
    /// Ask for an SSE stream (default) or one JSON answer.
    pub stream: bool,
    /// First retry backoff; doubles per retry.
    pub backoff_base_ms: u64,
    /// Backoff cap.
    pub backoff_max_ms: u64,
    /// A server's `Retry-After` is honoured up to this.
    pub max_retry_after_ms: u64,
    /// Send assistant `reasoning` back as `reasoning_content` (off by default: DeepSeek
    /// rejects it in requests for its reasoner model).
    pub send_reasoning: bool,
    /// Extra headers on every request (e.g. OpenRouter's `HTTP-Referer`).
    pub extra_headers: Vec<(String, String)>,
    /// Whether `GET {base_url}/models` lists the model ids this endpoint accepts, so
    /// a child asking for another id can be refused at spawn. Off for servers that
    /// serve one model under any name (llama.cpp's, whose list holds a file path and
    /// whose `/models` waits behind a running generation): then
    /// [`Model::list_models`] answers `Ok(None)` without asking. Default on.
    pub lists_models: bool,
    /// The most bytes one step's answer may hold (content, reasoning and tool-call
    /// arguments; also the longest line of its stream): past it the step fails with
    /// [`ModelError::AnswerTooLarge`] and the stream is dropped. At least 1.
    pub max_answer_bytes: u64,
    /// A PEM file of certificate authorities to trust for this endpoint, beside the
    /// built-in roots (a self-hosted endpoint with its own CA). Verification stays on.
    pub ca_cert: Option<std::path::PathBuf>,
}

impl ProviderConfig {
    /// A config with the defaults: no key, 120 s timeout, 4 attempts, streaming,
    /// backoff 500 ms doubling up to 20 s, `Retry-After` honoured up to 60 s.
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> ProviderConfig {
        let policy = RetryPolicy::default();
        ProviderConfig {
            name: name.into(),
            base_url: base_url.into(),
            api_key: None,
            api_key_env: None,
            api_timeout_secs: DEFAULT_API_TIMEOUT_SECS,
            max_attempts: policy.max_attempts,
            stream: true,
            backoff_base_ms: policy.base_delay.as_millis() as u64,
            backoff_max_ms: policy.max_delay.as_millis() as u64,
            max_retry_after_ms: policy.max_retry_after.as_millis() as u64,
            send_reasoning: false,
            extra_headers: Vec::new(),
            lists_models: true,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            ca_cert: None,
        }
    }

    /// The retry policy these settings describe.
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.max(1),
            base_delay: Duration::from_millis(self.backoff_base_ms),
            max_delay: Duration::from_millis(self.backoff_max_ms.max(self.backoff_base_ms)),
            max_retry_after: Duration::from_millis(self.max_retry_after_ms),
        }
    }
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("api_timeout_secs", &self.api_timeout_secs)
            .field("max_attempts", &self.max_attempts)
            .field("stream", &self.stream)
            .field("backoff_base_ms", &self.backoff_base_ms)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .field("max_retry_after_ms", &self.max_retry_after_ms)
            .field("send_reasoning", &self.send_reasoning)
            .field("extra_headers", &self.extra_headers.len())
            .field("lists_models", &self.lists_models)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

/// A [`Model`] speaking OpenAI chat completions over HTTP.
#[derive(Clone)]
pub struct OpenAiProvider {
    config: ProviderConfig,
    client: HttpClient,
    /// The chat-completions URL, parsed once (not once per request), and as text.
    endpoint: Uri,
    endpoint_text: String,
    models_url: Uri,
    models_text: String,
    /// Every chat-completions request's headers (key, `extra_headers`, content
    /// type), checked and built once.
    post_headers: HeaderMap,
    /// The model list request's.
    get_headers: HeaderMap,
    timeout_secs: u64,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("config", &self.config)
            .field("endpoint", &self.endpoint_text)
            .finish_non_exhaustive()
    }
}

/// The error for a 3xx answer to a request to `url`: brood follows no redirect of
/// a model endpoint; the message names the status, where it points (its
/// `Location`, at most 200 characters) and what to do.
fn redirect_error(status: StatusCode, headers: &HeaderMap, url: &str) -> ModelError {
    let location = headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(200).collect::<String>())
        .unwrap_or_else(|| "no Location header".to_string());
    ModelError::BadRequest {
        status: status.as_u16(),
        message: format!(
            "{url} redirects to {location}; brood does not follow a model endpoint's \
             redirects (the request's body and key would go elsewhere): if the provider \
             moved, set its `base_url` to the new address"
        ),
    }
}

/// The headers every request of `config` carries: its key as `Authorization:
/// Bearer …` (marked sensitive), its `extra_headers`, then `base` where the extra
/// ones did not set them, and `Accept: */*` unless set. A name or value that
/// cannot be a header is [`ModelError::Config`] naming it.
fn request_headers(
    config: &ProviderConfig,
    base: &[(HeaderName, &'static str)],
) -> Result<HeaderMap, ModelError> {
    let mut headers = HeaderMap::new();
    if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            ModelError::Config(format!(
                "the API key of provider '{}' holds a character a header cannot carry \
                 (a line break or a control character)",
                config.name
            ))
        })?;
        value.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, value);
    }
    for (k, v) in &config.extra_headers {
        let bad = |e: &dyn std::fmt::Display| {
            ModelError::Config(format!(
                "extra header '{k}' of provider '{}' is not a valid HTTP header: {e}",
                config.name
            ))
        };
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| bad(&e))?;
        let value = HeaderValue::from_str(v).map_err(|e| bad(&e))?;
        headers.append(name, value);
    }
    for (name, value) in base {
        if !headers.contains_key(name) {
            headers.insert(name.clone(), HeaderValue::from_static(value));
        }
    }
    if !headers.contains_key(header::ACCEPT) {
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    }
    Ok(headers)
}

impl OpenAiProvider {
    /// Check the config and build the HTTP client. Errors: a base URL that is not
    /// http(s), a key or an extra header that cannot be sent, a `ca_cert` that
    /// cannot be used, a proxy brood cannot use ([`ModelError::Config`]); a key env
    /// var named but no key ([`ModelError::MissingKey`]).
    pub fn new(config: ProviderConfig) -> Result<OpenAiProvider, ModelError> {
        let base = config.base_url.trim().trim_end_matches('/').to_string();
        let not_a_url = |what: &str, e: &dyn std::fmt::Display| {
            ModelError::Config(format!(
                "base URL '{}' of provider '{}' {what}: {e}",
                config.base_url, config.name
            ))
        };
        let url: Uri = base.parse().map_err(|e| not_a_url("is not a URL", &e))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err(ModelError::Config(format!(
                "base URL '{}' of provider '{}' must start with http:// or https://",
                config.base_url, config.name
            )));
        }
        let has_key = config.api_key.as_deref().is_some_and(|k| !k.is_empty());
        if let (false, Some(var)) = (has_key, &config.api_key_env) {
            return Err(ModelError::MissingKey {
                env_var: var.clone(),
            });
        }
        let endpoint_text = format!("{base}/chat/completions");
        let endpoint: Uri = endpoint_text
            .parse()
            .map_err(|e| not_a_url("does not make a chat-completions URL", &e))?;
        let models_text = format!("{base}/models");
        let models_url: Uri = models_text
            .parse()
            .map_err(|e| not_a_url("does not make a models URL", &e))?;
        let accept = if config.stream {
            "text/event-stream"
        } else {
            "*/*"
        };
        let post_headers = request_headers(
            &config,
            &[
                (header::CONTENT_TYPE, "application/json"),
                (header::ACCEPT, accept),
            ],
        )?;
        let get_headers = request_headers(&config, &[])?;
        // One client per provider, shared by every run that talks to it (see
        // `runtime::provider`): one pool (`model::http`). Redirects are not
        // followed: a model request is a POST carrying the conversation and the
        // key; a redirect is answered with an error naming where it points
        // ([`redirect_error`]), so the user moves `base_url` there on purpose.
        let client = HttpClient::new(&endpoint, config.ca_cert.as_deref(), &config.name)?;
        Ok(OpenAiProvider {
            endpoint,
            endpoint_text,
            models_url,
            models_text,
            post_headers,
            get_headers,
            timeout_secs: clamp_api_timeout(Some(config.api_timeout_secs)),
            config,
            client,
        })
    }

    /// The endpoint settings.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// The chat-completions URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint_text
    }

    /// The JSON body sent for `request`, as a value (see `model::body` for the
    /// shape; [`Model::step`] serializes the same body straight to bytes).
    pub fn request_body(&self, request: &ModelRequest) -> Value {
        serde_json::to_value(self.body(request)).unwrap_or(Value::Null)
    }

    fn body<'a>(&self, request: &'a ModelRequest) -> super::body::Body<'a> {
        super::body::Body {
            request,
            stream: self.config.stream,
            send_reasoning: self.config.send_reasoning,
        }
    }

    fn context<'a>(&'a self, url: &'a str, model: &'a str) -> ErrorContext<'a> {
        ErrorContext {
            url,
            model,
            api_key_env: self.config.api_key_env.as_deref(),
        }
    }

    fn send_error(&self, url: &str, e: HttpError) -> ModelError {
        let detail = if closed_before_answer(&e) {
            format!(
                "the server closed the connection or refused the request before it answered ({})",
                error_chain(&*e)
            )
        } else {
            error_chain(&*e)
        };
        ModelError::Connect {
            url: url.to_string(),
            detail,
        }
    }

    /// The request's body, serialized into one buffer sized for it.
    fn encode(&self, request: &ModelRequest) -> Result<bytes::Bytes, ModelError> {
        let body = self.body(request);
        let mut buf = Vec::with_capacity(body.size_hint());
        serde_json::to_writer(&mut buf, &body).map_err(|e| ModelError::Protocol {
            detail: format!("cannot serialize the request: {e}"),
        })?;
        Ok(bytes::Bytes::from(buf))
    }

    /// Send one request. A kept-alive connection the server closed while idle (it
    /// answered the last request completely, then hung up without `Connection:
    /// close`, as uvicorn and nginx do) fails before any byte of the answer; that
    /// is the pool's stale connection, not the server refusing: the request is sent
    /// once more on a fresh connection, without spending an attempt.
    ///
    /// The body goes to the client as one buffer of known length
    /// (`Content-Length`, not chunked), which hyper drops once written: a child
    /// waiting for its answer holds no copy of its request.
    async fn send(&self, request: &ModelRequest) -> Result<Response<AnswerBody>, ModelError> {
        match self.client.send(self.post(self.encode(request)?)).await {
            Err(e) if closed_before_answer(&e) => {
                self.client.send(self.post(self.encode(request)?)).await
            }
            r => r,
        }
        .map_err(|e| self.send_error(&self.endpoint_text, e))
    }

    /// The chat-completions request carrying `body`.
    fn post(&self, body: bytes::Bytes) -> Request<RequestBody> {
        let mut req = Request::new(body);
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.endpoint.clone();
        *req.headers_mut() = self.post_headers.clone();
        req
    }

    /// One attempt: send, then read the answer.
    ///
    /// Reading is boxed, allocated once the answer's head has come: its future
    /// (the response, the SSE parser, the assembler, the body stream) is most of a
    /// step's, and a child waiting for its model would otherwise carry it, unused,
    /// for the whole wait — a thousand waiting children, a thousand copies
    /// (BENCHMARKS.md, "What a waiting child holds").
    async fn attempt(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let resp = self.send(request).await?;
        Box::pin(self.read_answer(resp, &request.model, on_event)).await
    }

    /// Type an error status, or read the answer (streamed or whole).
    async fn read_answer(
        &self,
        resp: Response<AnswerBody>,
        model: &str,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let ctx = self.context(&self.endpoint_text, model);
        let status = resp.status();
        if status.is_redirection() {
            return Err(redirect_error(status, resp.headers(), &self.endpoint_text));
        }
        let cap = self.answer_cap();
        if !status.is_success() {
            let retry_after = resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let text = body_text(resp.into_body(), cap, "error body")
                .await
                .unwrap_or_default();
            return Err(classify_status(status.as_u16(), &text, retry_after, &ctx));
        }
        let is_sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        let mut body = resp.into_body();
        if is_sse {
            // The label is a hint, the first bytes decide: a whole JSON completion
            // relabelled `text/event-stream` (by a proxy or a gateway) is read as one.
            let mut first = Vec::new();
            let mut failed = None;
            while first.trim_ascii().is_empty() {
                match body.next().await {
                    Some(Ok(chunk)) => first.extend_from_slice(&chunk),
                    Some(Err(e)) => {
                        failed = Some(e);
                        break;
                    }
                    None => break,
                }
            }
            let head = bytes::Bytes::from(first);
            let replay = std::iter::once(Ok(head.clone())).chain(failed.map(Err));
            let rest = futures::stream::iter(replay).chain(body);
            if !head.trim_ascii_start().starts_with(b"{") {
                return read_stream(rest, on_event, &ctx, cap).await;
            }
            let bytes = read_body(rest, cap, "answer body").await?;
            return self.whole_answer(&bytes, on_event, &ctx, cap);
        }
        let bytes = read_body(body, cap, "answer body").await?;
        if bytes.trim_ascii_start().starts_with(b"data:") {
            // An event stream sent without its content type.
            let whole = futures::stream::iter([Ok::<_, HttpError>(bytes)]);
            return read_stream(whole, on_event, &ctx, cap).await;
        }
        self.whole_answer(&bytes, on_event, &ctx, cap)
    }

    /// A whole (non-streamed) answer's body: parsed, then held to the cap.
    fn whole_answer(
        &self,
        bytes: &[u8],
        on_event: EventFn<'_>,
        ctx: &ErrorContext<'_>,
        cap: usize,
    ) -> Result<ModelResponse, ModelError> {
        if bytes.trim_ascii().is_empty() {
            return Err(ModelError::EmptyAnswer {
                url: self.endpoint_text.clone(),
                what: "body".to_string(),
            });
        }
        let response = parse_completion(bytes, on_event, ctx)?;
        let m = &response.message;
        let size = m.tool_calls.iter().fold(
            m.content
                .len()
                .saturating_add(m.reasoning.as_ref().map_or(0, String::len)),
            |n, c| {
                n.saturating_add(c.name.len())
                    .saturating_add(c.arguments.len())
            },
        );
        if size > cap {
            return Err(too_large(cap, size, "answer"));
        }
        Ok(response)
    }

    /// `max_answer_bytes` as a length (at least 1).
    fn answer_cap(&self) -> usize {
        usize::try_from(self.config.max_answer_bytes.max(1)).unwrap_or(usize::MAX)
    }
}

/// Read an SSE answer to its end. A stream that stops before a finish reason —
/// cut, or closed with or without `[DONE]` — is [`ModelError::StreamCut`]; one that
/// closes cleanly without a single event is [`ModelError::EmptyAnswer`].
/// `cap` bounds the answer accumulated and each line of the stream: past it the
/// stream is dropped with [`ModelError::AnswerTooLarge`].
async fn read_stream<S>(
    mut body: S,
    on_event: EventFn<'_>,
    ctx: &ErrorContext<'_>,
    cap: usize,
) -> Result<ModelResponse, ModelError>
where
    S: futures::Stream<Item = Result<bytes::Bytes, HttpError>> + Unpin,
{
    let mut parser = SseParser::with_line_cap(cap);
    let mut acc = Assembler::new();
    let protocol = |e: super::sse::SseError| match e {
        super::sse::SseError::LineTooLong(size) => too_large(cap, size, "stream line"),
        super::sse::SseError::NotUtf8(detail) => ModelError::Protocol { detail },
    };
    'read: loop {
        match body.next().await {
            Some(Ok(bytes)) => {
                let events = parser.feed(&bytes).map_err(protocol)?;
                for data in events {
                    let outcome = acc.handle(&data, on_event, ctx)?;
                    if acc.size() > cap {
                        return Err(too_large(cap, acc.size(), "answer"));
                    }
                    if outcome == ChunkOutcome::Done {
                        drain_after_done(&mut body).await;
                        break 'read;
                    }
                }
            }
            Some(Err(e)) => {
                if acc.complete() {
                    break;
                }
                return Err(ModelError::StreamCut {
                    detail: format!(
                        "connection lost after {} chunks: {}",
                        acc.chunks(),
                        error_chain(&*e)
                    ),
                });
            }
            None => {
                for data in parser.finish().map_err(protocol)? {
                    if acc.handle(&data, on_event, ctx)? == ChunkOutcome::Done {
                        break;
                    }
                }
                break;
            }
        }
    }
    if !acc.complete() {
        return Err(acc.incomplete(ctx));
    }
    acc.into_response(on_event)
}

/// How long, and how many bytes, the end of a stream is waited for after `[DONE]`.
const DRAIN_WAIT: Duration = Duration::from_millis(5);
const DRAIN_BYTES: usize = 64 * 1024;

/// Read what follows `[DONE]` to the body's end — over HTTP/1.1 the chunked
/// terminator usually comes in a write of its own — so the connection goes back to
/// the pool: a body dropped before its end closes the connection, and the next
/// request (the next child's) opens a new one. Bounded (a few milliseconds, 64 KiB):
/// a server that keeps the stream open after `[DONE]` only loses the reuse.
async fn drain_after_done<S>(body: &mut S)
where
    S: futures::Stream<Item = Result<bytes::Bytes, HttpError>> + Unpin,
{
    let drain = async {
        let mut read = 0;
        while let Some(Ok(chunk)) = body.next().await {
            read += chunk.len();
            if read > DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_WAIT, drain).await;
}

/// [`ModelError::AnswerTooLarge`] for `size` bytes of `what` past `cap`.
fn too_large(cap: usize, size: usize, what: &str) -> ModelError {
    ModelError::AnswerTooLarge {
        cap: cap as u64,
        size: size as u64,
        what: what.to_string(),
    }
}

/// A whole (non-streamed) answer body, read up to 4 × `cap` plus 1 MiB (JSON
/// escaping of the capped text, and the envelope); a longer body is dropped there.
/// `what` names the body in the error of a cut one.
async fn read_body<S>(mut body: S, cap: usize, what: &str) -> Result<bytes::Bytes, ModelError>
where
    S: futures::Stream<Item = Result<bytes::Bytes, HttpError>> + Unpin,
{
    let limit = cap.saturating_mul(4).saturating_add(1 << 20);
    let mut whole = Vec::new();
    loop {
        match body.next().await {
            Some(Ok(chunk)) => {
                whole.extend_from_slice(&chunk);
                if whole.len() > limit {
                    return Err(too_large(
                        cap,
                        whole.len(),
                        "body (read up to 4 × the cap + 1 MiB)",
                    ));
                }
            }
            None => return Ok(bytes::Bytes::from(whole)),
            Some(Err(e)) => {
                return Err(ModelError::StreamCut {
                    detail: format!("{what} cut: {}", error_chain(&*e)),
                })
            }
        }
    }
}

/// A body read whole (bounded as [`read_body`]) as text, invalid UTF-8 replaced.
async fn body_text(body: AnswerBody, cap: usize, what: &str) -> Result<String, ModelError> {
    let bytes = read_body(body, cap, what).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether sending failed because the connection was closed before any byte of the
/// answer came (hyper's `IncompleteMessage`: "connection closed before message
/// completed", or the connection reset under the request) — what a reused
/// keep-alive connection the server dropped looks like — or, over HTTP/2, because
/// the server refused the stream unprocessed: above the last stream of its `GOAWAY`
/// (it is closing the connection), or reset with `REFUSED_STREAM`.
fn closed_before_answer(e: &HttpError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&**e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() {
                return true;
            }
        }
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return (h2.is_go_away() && h2.is_remote())
                || (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM));
        }
        // Closed with the request still unread in the server's buffers, the socket
        // resets instead (ECONNRESET), or the write meets the closed end (EPIPE).
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            );
        }
        source = s.source();
    }
    false
}

/// An error with its causes ("error sending request: … : connection refused").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[async_trait]
impl Model for OpenAiProvider {
    fn provider_name(&self) -> &str {
        &self.config.name
    }

    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        request.check()?;
        let policy = self.config.retry_policy();
        retry(&policy, self.timeout_secs, on_event, |_| {
            self.attempt(request, on_event)
        })
        .await
    }

    /// `GET {base_url}/models`; `Ok(None)` when the server has no such route, or
    /// without asking when [`ProviderConfig::lists_models`] is off.
    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        let Some(v) = self.model_list().await? else {
            return Ok(None);
        };
        let ids = v
            .get("data")
            .or_else(|| v.get("models"))
            .and_then(Value::as_array)
            .ok_or_else(|| ModelError::Protocol {
                detail: format!(
                    "model list has no 'data' array: {}",
                    preview(&v.to_string())
                ),
            })?
            .iter()
            .filter_map(|m| {
                m.get("id")
                    .or_else(|| m.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect();
        Ok(Some(ids))
    }

    /// The `pricing` of each entry of `GET {base_url}/models` (OpenRouter's form:
    /// USD per token as strings), where the list has them.
    async fn published_prices(&self) -> Result<super::pricing::Pricing, ModelError> {
        match self.model_list().await? {
            Some(v) => Ok(super::pricing::Pricing::from_model_list(&v)),
            None => Ok(super::pricing::Pricing::default()),
        }
    }
}

impl OpenAiProvider {
    /// The JSON of `GET {base_url}/models`, bounded by the step timeout; `None`
    /// when the server has no such route or [`ProviderConfig::lists_models`] is off.
    async fn model_list(&self) -> Result<Option<Value>, ModelError> {
        if !self.config.lists_models {
            return Ok(None);
        }
        let ctx = self.context(&self.models_text, "");
        let fetch = async {
            let mut req = Request::new(RequestBody::default());
            *req.uri_mut() = self.models_url.clone();
            *req.headers_mut() = self.get_headers.clone();
            let resp = self
                .client
                .send(req)
                .await
                .map_err(|e| self.send_error(&self.models_text, e))?;
            if resp.status().is_redirection() {
                return Err(redirect_error(
                    resp.status(),
                    resp.headers(),
                    &self.models_text,
                ));
            }
            let status = resp.status().as_u16();
            if matches!(status, 404 | 405 | 501) {
                return Ok(None);
            }
            let text = body_text(resp.into_body(), self.answer_cap(), "model list").await?;
            if !(200..300).contains(&status) {
                return Err(classify_status(status, &text, None, &ctx));
            }
            let v: Value = serde_json::from_str(&text).map_err(|e| ModelError::Protocol {
                detail: format!("model list is not JSON ({e}): {}", preview(&text)),
            })?;
            Ok(Some(v))
        };
        match tokio::time::timeout(Duration::from_secs(self.timeout_secs), fetch).await {
            Ok(r) => r,
            Err(_) => Err(ModelError::Timeout {
                secs: self.timeout_secs,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_timeout_is_clamped() {
        assert_eq!(clamp_api_timeout(None), 120);
        assert_eq!(clamp_api_timeout(Some(0)), 120);
        assert_eq!(clamp_api_timeout(Some(1)), 1);
        assert_eq!(clamp_api_timeout(Some(600)), 600);
        assert_eq!(clamp_api_timeout(Some(99_999)), 1800);
    }

    #[test]
    fn config_debug_redacts_the_key() {
        let mut c = ProviderConfig::new("x", "http://h");
        c.api_key = Some("sk-secret".into());
        assert!(!format!("{c:?}").contains("sk-secret"));
    }
}
