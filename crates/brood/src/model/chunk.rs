//! One streamed chat-completions chunk in the neutral shape the [`super::assemble`]r
//! applies ([`Delta`], [`Fragment`]), and the fast way to read the common chunk: typed
//! and borrowed from the text, without building a `serde_json::Value` (a map per
//! object, a string per field) for every token a server streams.
//!
//! The fast reader takes only the common shape: choices whose `delta` carries string
//! (or null) `content`, `reasoning_content`/`reasoning` and tool-call fragments. Any
//! other chunk — an error, usage or timings, content as parts, a field of another type,
//! a `message` instead of a `delta` — makes [`read_common`] return `None`, and the
//! assembler reads that chunk as a `Value`, exactly as before. Both readers agree on
//! every chunk the fast one takes (tested against each other in `assemble`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// What a delta (or a whole message) adds to the answer.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Delta<'a> {
    pub reasoning: Cow<'a, str>,
    pub content: Cow<'a, str>,
    pub calls: Vec<Fragment<'a>>,
}

/// One tool-call fragment. `id` and `name` are non-empty when present.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Fragment<'a> {
    pub index: Option<u64>,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub arguments: Cow<'a, str>,
}

/// A chunk of the common shape: the chosen choice's delta and finish reason.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Common<'a> {
    pub delta: Option<Delta<'a>>,
    /// Non-empty when present.
    pub finish: Option<Cow<'a, str>>,
}

/// Read `data` if it is a chunk of the common shape (see the module doc), else `None`.
pub(crate) fn read_common(data: &str) -> Option<Common<'_>> {
    let chunk: ChunkIn<'_> = serde_json::from_str(data).ok()?;
    if chunk.error.is_some() || chunk.usage.is_some() || chunk.timings.is_some() {
        return None;
    }
    let Some(choices) = chunk.choices else {
        return Some(Common::default());
    };
    // The choice with index 0, or the first one.
    let pos = choices.iter().position(|c| c.index == Some(0)).unwrap_or(0);
    let Some(choice) = choices.into_iter().nth(pos) else {
        return Some(Common::default());
    };
    if choice.delta.is_none() && choice.message.is_some() {
        return None;
    }
    let delta = choice.delta.map(|d| Delta {
        reasoning: match (d.reasoning_content, d.reasoning) {
            (Field::Text(s), _) => s,
            (Field::Null, _) => Cow::Borrowed(""),
            (Field::Absent, r) => r.text(),
        },
        content: d.content.text(),
        calls: d
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|f| {
                let (name, arguments) = match f.function {
                    Some(function) => (function.name.non_empty(), function.arguments.text()),
                    None => (None, Cow::Borrowed("")),
                };
                Fragment {
                    index: f.index,
                    id: f.id.non_empty(),
                    name,
                    arguments,
                }
            })
            .collect(),
    });
    Some(Common {
        delta,
        finish: choice.finish_reason.non_empty(),
    })
}

#[derive(Deserialize)]
struct ChunkIn<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<ChoiceIn<'a>>>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    timings: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChoiceIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<DeltaIn<'a>>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    finish_reason: Field<'a>,
}

#[derive(Deserialize)]
struct DeltaIn<'a> {
    #[serde(borrow, default)]
    reasoning_content: Field<'a>,
    #[serde(borrow, default)]
    reasoning: Field<'a>,
    #[serde(borrow, default)]
    content: Field<'a>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<FragmentIn<'a>>>,
}

#[derive(Deserialize)]
struct FragmentIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Field<'a>,
    #[serde(borrow, default)]
    function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize)]
struct FunctionIn<'a> {
    #[serde(borrow, default)]
    name: Field<'a>,
    #[serde(borrow, default)]
    arguments: Field<'a>,
}

/// A field that may be absent, `null` or a string (anything else fails the read).
/// `Option` would not do: it reads `null` as absent, and the two differ
/// (`"reasoning_content": null` hides `reasoning`).
#[derive(Debug, Default)]
enum Field<'a> {
    #[default]
    Absent,
    Null,
    Text(Cow<'a, str>),
}

impl<'a> Field<'a> {
    fn text(self) -> Cow<'a, str> {
        match self {
            Field::Text(s) => s,
            Field::Absent | Field::Null => Cow::Borrowed(""),
        }
    }

    fn non_empty(self) -> Option<Cow<'a, str>> {
        match self {
            Field::Text(s) if !s.is_empty() => Some(s),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for FieldVisitor<'a> {
            type Value = Field<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Field::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Field::Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Field::Text(Cow::Owned(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Field::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Field::Null)
            }
        }
        d.deserialize_any(FieldVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::super::assemble::Assembler;
    use super::super::retry::ErrorContext;
    use super::super::{ModelError, ModelResponse, StreamEvent};
    use super::*;
    use brood_mock::Answer;
    use serde_json::json;
    use std::sync::Mutex;

    /// The response (or error) and the events an assembler makes of `chunks`.
    fn assemble(
        mut a: Assembler,
        chunks: &[String],
    ) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
        let events = Mutex::new(Vec::new());
        let on = |e: StreamEvent| events.lock().unwrap().push(e);
        let ctx = ErrorContext {
            url: "u",
            model: "m",
            api_key_env: None,
        };
        let mut result = Ok(());
        for c in chunks {
            if let Err(e) = a.handle(c, &on, &ctx) {
                result = Err(e);
                break;
            }
        }
        let response = result.and_then(|()| a.into_response(&on));
        (response, events.into_inner().unwrap())
    }

    fn rendered(answer: Answer) -> Vec<String> {
        answer
            .stream_chunks("m")
            .iter()
            .map(|c| c.to_string())
            .collect()
    }

    #[test]
    fn both_readers_make_the_same_answer_of_every_chunk() {
        let call = |frag: serde_json::Value| {
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [frag]}}]}).to_string()
        };
        let delta = |d: serde_json::Value| {
            json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]}).to_string()
        };
        let streams: Vec<Vec<String>> = vec![
            rendered(Answer::text(
                "hello \"there\"\n\u{e9}\u{2713} over several pieces",
            )),
            rendered(
                Answer::text("x")
                    .reasoning("thinking")
                    .usage(json!({"prompt_tokens": 3, "completion_tokens": 1})),
            ),
            rendered(
                Answer::new()
                    .tool_call("task", json!({"prompts": ["a", "b"]}))
                    .tool_call("grep", json!({"pattern": "x"}))
                    .usage(json!({"prompt_tokens": 3}))
                    .usage_on_finish_chunk()
                    .timings(json!({"prompt_n": 3, "predicted_n": 1})),
            ),
            rendered(Answer::new().tool_call("grep", json!({})).llama_style()),
            rendered(
                Answer::new()
                    .tool_call("grep", json!({"p": 1}))
                    .without_index(),
            ),
            rendered(Answer::text("whole").fragment(0).finish_reason("length")),
            vec![
                // `reasoning_content: null` hides `reasoning`; a lone `reasoning` counts.
                delta(json!({"reasoning_content": null, "reasoning": "hidden"})),
                delta(json!({"reasoning": "shown"})),
                delta(json!({"content": null})),
                // Content as parts, arguments as an object, odd types: the Value path.
                delta(json!({"content": [{"type": "text", "text": "a"}, {"text": "b"}]})),
                call(
                    json!({"index": 0, "id": "c1", "function": {"name": "f", "arguments": {"k": 1}}}),
                ),
                call(json!({"index": "0", "id": 7, "function": {"arguments": "{}"}})),
                call(json!({"index": 1, "id": "", "function": {"name": "", "arguments": null}})),
                call(json!({"id": "c2", "function": {"name": "g"}})),
                call(json!({"function": null})),
                json!({"choices": [{"index": 1, "delta": {"content": "other choice"}},
                                   {"index": 0, "delta": {"content": "index zero"}}]})
                .to_string(),
                json!({"choices": [{"delta": null, "message": {"content": "m"}}]}).to_string(),
                json!({"choices": [{"message": {"content": "whole message"}}]}).to_string(),
                json!({"choices": null}).to_string(),
                json!({"choices": []}).to_string(),
                json!([1, 2]).to_string(),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": ""}]}).to_string(),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    .to_string(),
            ],
            vec![
                delta(json!({"content": "partial"})),
                json!({"error": {"message": "overloaded", "code": 529}}).to_string(),
            ],
            vec![delta(json!({"content": "x"})), "{not json".to_string()],
        ];
        for chunks in &streams {
            let (fast, fast_events) = assemble(Assembler::new(), chunks);
            let (slow, slow_events) = assemble(Assembler::value_only(), chunks);
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{chunks:#?}");
            assert_eq!(fast_events, slow_events, "{chunks:#?}");
        }
    }

    #[test]
    fn the_common_chunk_is_read_without_a_value() {
        let c = r#"{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi \"q\""},"finish_reason":null}]}"#;
        let common = read_common(c).expect("common shape");
        let delta = common.delta.expect("a delta");
        assert_eq!(delta.content, "hi \"q\"");
        assert_eq!(common.finish, None);
        // Anything else goes to the Value reader.
        assert!(read_common(r#"{"choices":[],"usage":{"prompt_tokens":1}}"#).is_none());
        assert!(read_common(r#"{"error":{"message":"x"}}"#).is_none());
        assert!(read_common(r#"{"choices":[{"delta":{"content":[{"text":"a"}]}}]}"#).is_none());
    }
}
