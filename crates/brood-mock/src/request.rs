//! One captured chat-completions request, parsed lazily: the whole body only when
//! someone asks for it ([`MockRequest::body`]), and otherwise just the fields a
//! handler usually looks at (model, stream, messages) with the rest — the tool
//! schemas, most of the bytes — skipped unparsed. Parsing every body whole into a
//! `Value` was the mock's largest cost in the benchmarks, and the mock shares the
//! machine with what it measures.

use serde::Deserialize;
use serde_json::Value;
use std::sync::OnceLock;
use std::time::Instant;

/// One captured chat-completions request.
#[derive(Debug, Clone)]
pub struct MockRequest {
    /// 0-based arrival order among chat-completions requests.
    pub seq: usize,
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body bytes exactly as received (shared, not copied out of the server's
    /// buffer).
    pub raw: bytes::Bytes,
    /// When the whole request had arrived; a [`crate::MockReply::Delay`] counts from here.
    pub arrived: Instant,
    body: OnceLock<Value>,
    head: OnceLock<Head>,
}

/// The fields handlers ask about, parsed without the rest of the body.
#[derive(Debug, Clone, Default, Deserialize)]
struct Head {
    #[serde(default)]
    model: Value,
    #[serde(default)]
    stream: Value,
    #[serde(default)]
    messages: Vec<Value>,
}

impl MockRequest {
    pub(crate) fn new(
        seq: usize,
        path: String,
        headers: Vec<(String, String)>,
        raw: bytes::Bytes,
        arrived: Instant,
    ) -> MockRequest {
        MockRequest {
            seq,
            path,
            headers,
            raw,
            arrived,
            body: OnceLock::new(),
            head: OnceLock::new(),
        }
    }

    /// The parsed JSON body (`Null` when it was not JSON; such a request got a 400
    /// before any handler saw it).
    pub fn body(&self) -> &Value {
        self.body
            .get_or_init(|| serde_json::from_slice(&self.raw).unwrap_or(Value::Null))
    }

    fn head(&self) -> &Head {
        self.head.get_or_init(|| match self.body.get() {
            Some(body) => Head {
                model: body.get("model").cloned().unwrap_or(Value::Null),
                stream: body.get("stream").cloned().unwrap_or(Value::Null),
                messages: body
                    .get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            },
            // A body whose `messages` is not a list reads as having none, as before.
            None => serde_json::from_slice(&self.raw).unwrap_or_default(),
        })
    }

    /// Whether the body is JSON (`Some(error)` when not). The common fields are
    /// parsed in the same pass, so a well-formed request is scanned once.
    pub(crate) fn check_json(&self) -> Option<serde_json::Error> {
        match serde_json::from_slice::<Head>(&self.raw) {
            Ok(head) => {
                let _ = self.head.set(head);
                None
            }
            // Not the usual shape (or not JSON at all): tell which.
            Err(_) => serde_json::from_slice::<serde::de::IgnoredAny>(&self.raw).err(),
        }
    }

    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the request asked for a stream (`"stream": true`).
    pub fn stream(&self) -> bool {
        self.head().stream.as_bool().unwrap_or(false)
    }

    /// The requested model id (`""` when absent).
    pub fn model(&self) -> &str {
        self.head().model.as_str().unwrap_or("")
    }

    /// The request's messages.
    pub fn messages(&self) -> &[Value] {
        &self.head().messages
    }

    /// The content of the first `user` message.
    pub fn first_user_text(&self) -> Option<&str> {
        self.messages()
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
    }

    /// The last message.
    pub fn last_message(&self) -> Option<&Value> {
        self.messages().last()
    }

    /// How many assistant messages the conversation already has (the step number).
    pub fn assistant_turns(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .count()
    }
}
