//! The chat-completions request body, serialized straight from a [`ModelRequest`]
//! without building a `serde_json::Value` first (which copied every message and
//! every tool schema once more per request, and was most of a child's CPU to build
//! its step).
//!
//! The shape is the OpenAI wire format: the system prompt first, assistant tool-call
//! messages with `"content": ""` (never null), tool results with `tool_call_id`,
//! `tools` only when there are some, `tool_choice` only when set and tools are sent
//! (OpenAI rejects a `tool_choice` without `tools`). Field order is part of the
//! contract: everything that stays the same across a conversation first, `messages`
//! last, so a forked child's body repeats its parent's body byte for byte as a
//! prefix (provider prefix caches).

use super::{Message, ModelRequest, Role, ToolCall, ToolChoice, ToolSpec};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;

/// A request as the server sees it; `stream` and `send_reasoning` come from the
/// provider's configuration.
pub(crate) struct Body<'a> {
    pub request: &'a ModelRequest,
    pub stream: bool,
    /// Send assistant `reasoning` back as `reasoning_content`.
    pub send_reasoning: bool,
}

impl Body<'_> {
    /// About how many bytes the body will take (a little more, not less, for the
    /// usual request), so it is written into one buffer instead of one regrown
    /// and copied several times.
    pub fn size_hint(&self) -> usize {
        let r = self.request;
        let tools: usize = r
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.rendered().get().len() + 64)
            .sum();
        let messages: usize = r
            .messages
            .iter()
            .map(|m| {
                let calls: usize = m
                    .tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 64)
                    .sum();
                m.content.len() + m.reasoning.as_ref().map_or(0, String::len) + calls + 96
            })
            .sum();
        // Escaping grows text a little; an eighth covers ordinary prose and code.
        let text = r.system.len() + messages;
        512 + tools + text + text / 8
    }
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.request;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", &r.model)?;
        m.serialize_entry("stream", &self.stream)?;
        if self.stream {
            m.serialize_entry(
                "stream_options",
                &StreamOptions {
                    include_usage: true,
                },
            )?;
        }
        if !r.tools.is_empty() {
            let tools: Vec<Entry<'_>> = r.tools.iter().map(Entry::of).collect();
            m.serialize_entry("tools", &tools)?;
            if let Some(choice) = &r.tool_choice {
                m.serialize_entry("tool_choice", &Choice(choice))?;
            }
        }
        let sampling = &r.sampling;
        if let Some(t) = sampling.temperature {
            m.serialize_entry("temperature", &t)?;
        }
        if let Some(p) = sampling.top_p {
            m.serialize_entry("top_p", &p)?;
        }
        if let Some(n) = sampling.max_tokens {
            m.serialize_entry("max_tokens", &n)?;
        }
        if let Some(seed) = sampling.seed {
            m.serialize_entry("seed", &seed)?;
        }
        m.serialize_entry(
            "messages",
            &Messages {
                system: &r.system,
                messages: &r.messages,
                send_reasoning: self.send_reasoning,
            },
        )?;
        m.end()
    }
}

/// `{"include_usage": true}`: usage on the final chunk.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
#[derive(Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    description: &'a str,
    /// Rendered once per schema, copied as is.
    parameters: &'a serde_json::value::RawValue,
}

impl<'a> Tool<'a> {
    fn of(t: &'a ToolSpec) -> Self {
        Tool {
            r#type: "function",
            function: Function {
                name: &t.name,
                description: &t.description,
                parameters: t.parameters.rendered(),
            },
        }
    }
}

/// A tool's entry: rendered once per tool and shared by every request that offers
/// it (see `Schema::tool_entry`), else rendered here.
enum Entry<'a> {
    Rendered(&'a serde_json::value::RawValue),
    Fresh(Tool<'a>),
}

impl<'a> Entry<'a> {
    fn of(t: &'a ToolSpec) -> Self {
        let render = || {
            // Plain structs of strings and a rendered schema always render; the
            // fallback only keeps this panic-free.
            serde_json::value::to_raw_value(&Tool::of(t)).unwrap_or_default()
        };
        match t.parameters.tool_entry(&t.name, &t.description, render) {
            Some(raw) => Entry::Rendered(raw),
            None => Entry::Fresh(Tool::of(t)),
        }
    }
}

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Entry::Rendered(raw) => raw.serialize(s),
            Entry::Fresh(tool) => tool.serialize(s),
        }
    }
}

/// `"auto"`, `"required"`, `"none"` or `{"type": "function", "function": {"name"}}`.
struct Choice<'a>(&'a ToolChoice);

impl Serialize for Choice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ToolChoice::Auto => s.serialize_str("auto"),
            ToolChoice::Required => s.serialize_str("required"),
            ToolChoice::None => s.serialize_str("none"),
            ToolChoice::Named(name) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("type", "function")?;
                m.serialize_entry("function", &Named { name })?;
                m.end()
            }
        }
    }
}

#[derive(Serialize)]
struct Named<'a> {
    name: &'a str,
}

/// The system prompt (when there is one) as the first message, then the
/// conversation.
struct Messages<'a> {
    system: &'a str,
    messages: &'a [Message],
    send_reasoning: bool,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        if !self.system.is_empty() {
            seq.serialize_element(&System {
                role: "system",
                content: self.system,
            })?;
        }
        for message in self.messages {
            seq.serialize_element(&Wire {
                message,
                send_reasoning: self.send_reasoning,
            })?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct System<'a> {
    role: &'static str,
    content: &'a str,
}

/// One message in the wire format.
struct Wire<'a> {
    message: &'a Message,
    send_reasoning: bool,
}

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let msg = self.message;
        let role = match msg.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", role)?;
        m.serialize_entry("content", &msg.content)?;
        if msg.role == Role::Assistant {
            if let (true, Some(r)) = (self.send_reasoning, &msg.reasoning) {
                m.serialize_entry("reasoning_content", r)?;
            }
            if !msg.tool_calls.is_empty() {
                let calls: Vec<Call<'_>> = msg.tool_calls.iter().map(Call::of).collect();
                m.serialize_entry("tool_calls", &calls)?;
            }
        }
        if let Some(id) = &msg.tool_call_id {
            m.serialize_entry("tool_call_id", id)?;
        }
        m.end()
    }
}

/// `{"id", "type": "function", "function": {"name", "arguments"}}`; empty arguments
/// are sent as `"{}"` (servers refuse an empty string).
#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    r#type: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

impl<'a> Call<'a> {
    fn of(c: &'a ToolCall) -> Self {
        let arguments = if c.arguments.trim().is_empty() {
            "{}"
        } else {
            c.arguments.as_str()
        };
        Call {
            id: &c.id,
            r#type: "function",
            function: CallFunction {
                name: &c.name,
                arguments,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Sampling;
    use serde_json::json;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system: "be brief".into(),
            messages,
            tools: vec![ToolSpec {
                name: "grep".into(),
                description: "search".into(),
                parameters:
                    json!({"type": "object", "properties": {"pattern": {"type": "string"}}}).into(),
            }]
            .into(),
            tool_choice: Some(ToolChoice::Named("grep".into())),
            sampling: Sampling {
                temperature: Some(0.2),
                top_p: None,
                max_tokens: Some(64),
                seed: Some(7),
            },
        }
    }

    fn bytes(r: &ModelRequest, send_reasoning: bool) -> String {
        let body = Body {
            request: r,
            stream: true,
            send_reasoning,
        };
        match serde_json::to_string(&body) {
            Ok(s) => s,
            Err(e) => panic!("serializing: {e}"),
        }
    }

    fn conversation() -> Vec<Message> {
        let mut assistant = Message::assistant("");
        assistant.reasoning = Some("think".into());
        assistant.tool_calls = vec![ToolCall {
            id: "c1".into(),
            name: "grep".into(),
            arguments: "  ".into(),
        }];
        vec![
            Message::user("find x"),
            assistant,
            Message::tool_result("c1", "no match"),
        ]
    }

    #[test]
    fn a_tool_entry_is_rendered_once_and_a_schema_shared_by_two_tools_keeps_both_names() {
        let schema: crate::model::Schema =
            json!({"type": "object", "properties": {"q": {"type": "string"}}}).into();
        let spec = |name: &str, description: &str| ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: schema.clone(),
        };
        let mut r = request(vec![Message::user("x")]);
        r.tool_choice = None;
        r.tools = vec![spec("a", "says \"a\""), spec("b", "says b")].into();
        let expected = json!([
            {"type": "function", "function": {"name": "a", "description": "says \"a\"",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "b", "description": "says b",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
        ]);
        // The first request renders `a`'s entry into the schema; the second copies it.
        let first = bytes(&r, false);
        let second = bytes(&r, false);
        assert_eq!(first, second);
        let v: serde_json::Value = serde_json::from_str(&second).unwrap();
        assert_eq!(v["tools"], expected);
        // A copy of `a` with another description is not given the cached entry.
        r.tools = vec![spec("a", "changed")].into();
        let v: serde_json::Value = serde_json::from_str(&bytes(&r, false)).unwrap();
        assert_eq!(v["tools"][0]["function"]["description"], json!("changed"));
    }

    #[test]
    fn the_wire_shape_field_by_field_in_order() {
        let got = bytes(&request(conversation()), false);
        let want = concat!(
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"#,
            r#""tools":[{"type":"function","function":{"name":"grep","description":"search","#,
            r#""parameters":{"type":"object","properties":{"pattern":{"type":"string"}}}}}],"#,
            r#""tool_choice":{"type":"function","function":{"name":"grep"}},"#,
            r#""temperature":0.2,"max_tokens":64,"seed":7,"#,
            r#""messages":[{"role":"system","content":"be brief"},"#,
            r#"{"role":"user","content":"find x"},"#,
            r#"{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","#,
            r#""function":{"name":"grep","arguments":"{}"}}]},"#,
            r#"{"role":"tool","content":"no match","tool_call_id":"c1"}]}"#,
        );
        assert_eq!(got, want);
        // Reasoning goes back only when the provider wants it.
        assert!(bytes(&request(conversation()), true)
            .contains(r#"{"role":"assistant","content":"","reasoning_content":"think","#));
    }

    #[test]
    fn no_tools_means_no_tool_choice_and_plain_choices_are_strings() {
        let mut r = request(vec![Message::user("hi")]);
        r.tools = Default::default();
        let got = bytes(&r, false);
        assert!(
            !got.contains("\"tools\"") && !got.contains("tool_choice"),
            "{got}"
        );
        for (choice, text) in [
            (ToolChoice::Auto, r#""tool_choice":"auto""#),
            (ToolChoice::Required, r#""tool_choice":"required""#),
            (ToolChoice::None, r#""tool_choice":"none""#),
        ] {
            let mut r = request(vec![Message::user("hi")]);
            r.tool_choice = Some(choice);
            assert!(bytes(&r, false).contains(text));
        }
    }

    #[test]
    fn a_longer_conversation_repeats_the_shorter_body_as_a_prefix() {
        let short = bytes(&request(conversation()), false);
        let mut longer = conversation();
        longer.push(Message::user("and now y"));
        let long = bytes(&request(longer), false);
        let through_last_message = &short[..short.len() - 2];
        assert!(short.ends_with("]}"));
        assert!(long.starts_with(through_last_message), "{long}");
    }

    #[test]
    fn the_size_hint_covers_the_body_without_overshooting_much() {
        let mut messages = conversation();
        messages.push(Message::user(
            "a line of code with \"quotes\"\n".repeat(200),
        ));
        for r in [
            request(Vec::new()),
            request(conversation()),
            request(messages),
        ] {
            let body = Body {
                request: &r,
                stream: true,
                send_reasoning: true,
            };
            let (hint, len) = (body.size_hint(), bytes(&r, true).len());
            assert!(hint >= len, "hint {hint} < {len}");
            assert!(hint <= len * 2 + 1024, "hint {hint} far over {len}");
        }
    }
}
