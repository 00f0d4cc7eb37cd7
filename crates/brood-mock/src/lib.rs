//! An in-process, scriptable OpenAI-compatible chat-completions server on loopback,
//! for brood's tests, CLI tests and benchmarks.
//!
//! [`MockServer::start`] binds `127.0.0.1` on a free port and serves, on its own threads
//! and its own Tokio runtime (two workers; so it works from plain `#[test]`s,
//! `#[tokio::test]`s and from a process that spawns the `brood` binary):
//!
//! - `POST /v1/chat/completions` — every request is captured (parsed JSON body, raw
//!   bytes, headers, sequence number) and answered by your handler's [`MockReply`];
//! - `GET /v1/models` — the model ids set with [`MockServer::set_models`]
//!   (default `["mock-model"]`).
//!
//! A handler is a plain closure `Fn(&MockRequest) -> MockReply`. Replies:
//!
//! - [`MockReply::Answer`] (built with [`MockReply::text`], [`MockReply::tool_call`],
//!   [`Answer`]'s builders): rendered as an SSE stream when the request says
//!   `"stream": true`, as one JSON completion otherwise. Options: llama.cpp-style
//!   tool-call chunks that repeat `id` and `function.name` in every fragment,
//!   DeepSeek `reasoning_content`, a usage object (separate final chunk, or on the
//!   finish chunk), llama.cpp `timings`, fragment size;
//! - [`MockReply::Json`], [`MockReply::Sse`] (explicit chunks, with or without
//!   `[DONE]`), [`MockReply::Raw`] (exact SSE bytes, split where you like);
//! - [`MockReply::Cut`]: send some chunks, then drop the connection mid-way;
//! - [`MockReply::Stall`]: send some chunks, then never send more nor close;
//! - [`MockReply::Status`]: an HTTP error status with a body and optional `Retry-After`;
//! - [`MockReply::Delay`]: wait (async) before giving another reply — the per-request
//!   latency knob of the benchmarks. Delays count from the request's arrival
//!   ([`MockRequest::arrived`]) and are kept by a clock thread to ~0.1 ms, not by
//!   Tokio's millisecond timer;
//! - [`MockReply::Gated`] ([`MockReply::until`]): wait until the test opens a
//!   [`Gate`], then give another reply — requests held in flight, without sleeps;
//! - [`MockReply::Hang`]: never answer (until the client gives up or the server stops);
//! - [`MockReply::Body`]: any status, content type and bytes (wrong content types,
//!   empty or non-JSON bodies, invalid UTF-8);
//! - [`MockReply::Endless`]: one SSE chunk repeated forever, as fast as the client
//!   reads or dripped at an interval (a huge or never-ending answer; the server never
//!   holds more than one chunk of it).
//!
//! [`MockServer::start_tls`] serves the same over TLS (`https://127.0.0.1:PORT/v1`)
//! with a certificate signed by a CA made at start ([`MockServer::ca_cert_pem`]),
//! offering HTTP/2 and HTTP/1.1 through ALPN, or HTTP/1.1 alone ([`Alpn`]).
//! [`MockServer::connections`] counts the connections accepted (either mode),
//! [`MockServer::h2_connections`] those that settled on HTTP/2.
//! [`MockServer::go_away`] closes the open connections gracefully (an HTTP/2
//! `GOAWAY`), [`MockServer::drop_connections`] at once, requests in progress or not;
//! [`MockServer::open_connections`] counts those still open.
//! [`MockServer::refuse_next`] refuses requests unprocessed (HTTP/2 `REFUSED_STREAM`).
//!
//! [`MockServer::set_idle_close`] makes the server close each kept-alive connection
//! under its second request, without answering (an idle-closing proxy).
//!
//! The server counts requests in flight (a streamed reply is in flight until its last
//! byte) and the maximum seen, so tests and benchmarks can check concurrency limits.
//! [`MockServer::stop`] (or dropping the server) shuts its runtime down: every
//! connection is closed and the port is released before `stop` returns.
//!
//! ```no_run
//! use brood_mock::{MockServer, MockReply};
//! let server = MockServer::start(|req| {
//!     if req.seq == 0 {
//!         MockReply::status(429, "slow down").retry_after("1")
//!     } else {
//!         MockReply::text("hello")
//!     }
//! });
//! let url = server.base_url(); // http://127.0.0.1:PORT/v1
//! # let _ = url;
//! ```

mod answer;
mod clock;
mod gate;
mod render;
mod request;
mod server;
mod tls;

pub use answer::{Answer, MockToolCall, UsagePlacement};
pub use gate::Gate;
pub use request::MockRequest;
pub use server::{Handler, MockServer};
pub use tls::Alpn;

use serde_json::Value;
use std::time::Duration;

/// What the server answers to one chat-completions request.
#[derive(Debug, Clone)]
pub enum MockReply {
    /// A model answer, rendered as SSE when the request asked for `"stream": true` and as
    /// one JSON completion otherwise.
    Answer(Answer),
    /// `200` with this JSON body, whatever the request's stream flag.
    Json(Value),
    /// `200` `text/event-stream`: one `data:` event per chunk, then `data: [DONE]` when
    /// `done` is true. The body ends cleanly either way.
    Sse { chunks: Vec<Value>, done: bool },
    /// `200` `text/event-stream` with exactly these byte pieces, each flushed on its own.
    Raw { parts: Vec<Vec<u8>> },
    /// Send these SSE chunks, then abort the connection (no finish, no `[DONE]`, no
    /// terminating HTTP chunk).
    Cut { chunks: Vec<Value> },
    /// Send these SSE chunks, then stall: the connection stays open, nothing more comes.
    Stall { chunks: Vec<Value> },
    /// An HTTP status with this body (JSON when it parses as JSON) and an optional
    /// `Retry-After` header value.
    Status {
        status: u16,
        body: String,
        retry_after: Option<String>,
    },
    /// A redirect: this 3xx status with a `Location` header and no body.
    Redirect { status: u16, location: String },
    /// Wait this long (asynchronously), then give the inner reply.
    Delay(Duration, Box<MockReply>),
    /// Wait until the gate is open, then give the inner reply.
    Gated(Gate, Box<MockReply>),
    /// Never answer.
    Hang,
    /// This status, `content-type` and body bytes, exactly.
    Body {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// `200` `text/event-stream`: `data: <chunk>` sent again and again, never ending;
    /// with a non-zero `every`, one chunk per `every` (a dripping server).
    Endless { chunk: Value, every: Duration },
}

impl MockReply {
    /// A plain text answer (SSE or JSON per the request).
    pub fn text(text: impl Into<String>) -> MockReply {
        MockReply::Answer(Answer::text(text))
    }

    /// One tool call `name(arguments)` (SSE or JSON per the request), id `call_0`.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> MockReply {
        MockReply::Answer(Answer::new().tool_call(name, arguments))
    }

    /// Several tool calls in one answer, ids `call_0`, `call_1`, …
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> MockReply {
        let mut answer = Answer::new();
        for (name, args) in calls {
            answer = answer.tool_call(name, args);
        }
        MockReply::Answer(answer)
    }

    /// An error status with an OpenAI-style body `{"error": {"message": …}}`.
    pub fn status(status: u16, message: impl Into<String>) -> MockReply {
        let body = serde_json::json!({
            "error": {"message": message.into(), "type": "mock_error", "code": status}
        });
        MockReply::Status {
            status,
            body: body.to_string(),
            retry_after: None,
        }
    }

    /// An error status with exactly this body.
    pub fn status_raw(status: u16, body: impl Into<String>) -> MockReply {
        MockReply::Status {
            status,
            body: body.into(),
            retry_after: None,
        }
    }

    /// A redirect to `location` with this 3xx status (`307` keeps the method and body).
    pub fn redirect(status: u16, location: impl Into<String>) -> MockReply {
        MockReply::Redirect {
            status,
            location: location.into(),
        }
    }

    /// Add a `Retry-After` header (seconds or an HTTP date) to a [`MockReply::Status`];
    /// other replies are returned unchanged.
    pub fn retry_after(self, value: impl Into<String>) -> MockReply {
        match self {
            MockReply::Status { status, body, .. } => MockReply::Status {
                status,
                body,
                retry_after: Some(value.into()),
            },
            other => other,
        }
    }

    /// A `200` with this content type and these bytes.
    pub fn body(content_type: impl Into<String>, body: impl Into<Vec<u8>>) -> MockReply {
        MockReply::Body {
            status: 200,
            content_type: content_type.into(),
            body: body.into(),
        }
    }

    /// A streamed text answer that never ends: `piece` as content, again and again.
    pub fn endless_text(piece: &str, every: Duration) -> MockReply {
        let chunk = serde_json::json!({
            "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
            "model": "mock-model",
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}],
        });
        MockReply::Endless { chunk, every }
    }

    /// Give this reply after `delay` (async sleep; requests are delayed concurrently).
    pub fn after(self, delay: Duration) -> MockReply {
        MockReply::Delay(delay, Box::new(self))
    }

    /// Give this reply once `gate` is open (at once if it already is).
    pub fn until(self, gate: &Gate) -> MockReply {
        MockReply::Gated(gate.clone(), Box::new(self))
    }
}

impl From<Answer> for MockReply {
    fn from(answer: Answer) -> MockReply {
        MockReply::Answer(answer)
    }
}
