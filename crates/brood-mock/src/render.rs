//! An answer's SSE body rendered straight to bytes: the same events as
//! [`Answer::stream_chunks`] (byte for byte, tested), written from typed structs into
//! one buffer instead of building a `serde_json::Value` per chunk and printing it.
//! Every streamed answer of a benchmark goes through here, and the mock shares the
//! machine with what it measures, so its cost is kept small.

use crate::answer::Answer;
use serde::Serialize;

#[derive(Serialize)]
struct Chunk<'a, D> {
    id: &'static str,
    object: &'static str,
    created: u8,
    model: &'a str,
    choices: [Choice<D>; 1],
}

#[derive(Serialize)]
struct Choice<D> {
    index: u8,
    delta: D,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize)]
struct Role {
    role: &'static str,
    content: &'static str,
}

#[derive(Serialize)]
struct Reasoning<'a> {
    reasoning_content: &'a str,
}

#[derive(Serialize)]
struct Content<'a> {
    content: &'a str,
}

#[derive(Serialize)]
struct ToolCalls<'a> {
    tool_calls: [Fragment<'a>; 1],
}

#[derive(Serialize)]
struct Fragment<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

/// `data: <chunk>\n\n` for each chunk of `answer` (without `[DONE]`).
pub(crate) fn sse_body(answer: &Answer, model: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + answer.content.len() * 24);
    let mut put = |delta: &dyn erased::Delta| {
        out.extend_from_slice(b"data: ");
        delta.write(&mut out, model);
        out.extend_from_slice(b"\n\n");
    };
    put(&Role {
        role: "assistant",
        content: "",
    });
    if let Some(r) = &answer.reasoning {
        for piece in pieces(r, answer.fragment_chars) {
            put(&Reasoning {
                reasoning_content: piece,
            });
        }
    }
    for piece in pieces(&answer.content, answer.fragment_chars) {
        put(&Content { content: piece });
    }
    for (i, call) in answer.tool_calls.iter().enumerate() {
        let args = std::iter::once("").chain(pieces(&call.arguments, answer.fragment_chars));
        for (k, piece) in args.enumerate() {
            let named = k == 0 || answer.repeat_id_and_name;
            put(&ToolCalls {
                tool_calls: [Fragment {
                    index: (!answer.omit_index).then_some(i),
                    id: named.then_some(call.id.as_str()),
                    kind: named.then_some("function"),
                    function: Function {
                        name: named.then_some(call.name.as_str()),
                        arguments: piece,
                    },
                }],
            });
        }
    }
    // The last one or two chunks carry the rare parts (usage, timings): as values.
    let chunks = answer.stream_chunks_tail(model);
    for c in chunks {
        out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
    }
    out
}

/// `s` in pieces of `n` characters (0: one piece; empty: none), as slices.
fn pieces(s: &str, n: usize) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = match n {
            0 => rest.len(),
            n => rest.char_indices().nth(n).map_or(rest.len(), |(i, _)| i),
        };
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some(piece)
    })
}

/// Writing a chunk around any delta type without generics in the closure.
mod erased {
    use super::{Choice, Chunk};
    use serde::Serialize;

    pub(super) trait Delta {
        fn write(&self, out: &mut Vec<u8>, model: &str);
    }

    impl<D: Serialize> Delta for D {
        fn write(&self, out: &mut Vec<u8>, model: &str) {
            let chunk = Chunk {
                id: "chatcmpl-mock",
                object: "chat.completion.chunk",
                created: 0,
                model,
                choices: [Choice {
                    index: 0,
                    delta: self,
                    finish_reason: None,
                }],
            };
            // Plain structs of strings and numbers always serialize.
            let _ = serde_json::to_writer(&mut *out, &chunk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn by_values(a: &Answer, model: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for c in a.stream_chunks(model) {
            out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
        }
        out
    }

    #[test]
    fn renders_the_same_bytes_as_the_chunk_values() {
        let answers = [
            Answer::text("hello there, a \"quoted\" line\nand é accents ✓ over pieces"),
            Answer::text(""),
            Answer::text("whole").fragment(0),
            Answer::text("x")
                .reasoning("thinking about it")
                .usage(json!({"prompt_tokens": 3, "completion_tokens": 1})),
            Answer::new()
                .tool_call("task", json!({"prompts": ["a", "b"]}))
                .usage(json!({"prompt_tokens": 3}))
                .usage_on_finish_chunk()
                .timings(json!({"prompt_n": 3})),
            Answer::new()
                .tool_call("grep", json!({"pattern": "x"}))
                .llama_style(),
            Answer::new()
                .tool_call("grep", json!({"pattern": "x"}))
                .without_index(),
        ];
        for a in &answers {
            let fast = sse_body(a, "m-1");
            assert_eq!(
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&by_values(a, "m-1")),
                "{a:?}"
            );
        }
    }
}
