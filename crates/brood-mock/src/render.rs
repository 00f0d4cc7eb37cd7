//! An answer's SSE body, rendered straight to bytes: the chunks are written from typed
//! structs into one buffer instead of building a `serde_json::Value` per chunk and
//! printing it (only the last one or two, which carry usage and timings, are values).
//! Every streamed answer goes through here ([`Answer::stream_chunks`] reads these
//! events back), and the mock shares the machine with what it benchmarks, so its cost
//! is kept small.

use serde_json::{json, Value};

use crate::answer::{Answer, UsagePlacement};
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
    for c in tail(answer, model) {
        out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
    }
    out
}

/// The finish chunk and, with [`UsagePlacement::FinalChunk`] and usage, a usage chunk.
fn tail(answer: &Answer, model: &str) -> Vec<Value> {
    let chunk = |choices: Value| {
        json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": choices,
        })
    };
    let mut finish = chunk(json!([{"index": 0, "delta": {}, "finish_reason": answer.reason()}]));
    if let Some(t) = &answer.timings {
        finish["timings"] = t.clone();
    }
    match (&answer.usage, answer.usage_placement) {
        (Some(u), UsagePlacement::FinishChunk) => {
            finish["usage"] = u.clone();
            vec![finish]
        }
        (Some(u), UsagePlacement::FinalChunk) => {
            let mut last = chunk(json!([]));
            last["usage"] = u.clone();
            vec![finish, last]
        }
        (None, _) => vec![finish],
    }
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

    fn deltas(chunks: &[Value]) -> Vec<&Value> {
        chunks
            .iter()
            .filter_map(|c| c["choices"].get(0))
            .map(|c| &c["delta"])
            .collect()
    }

    #[test]
    fn text_and_reasoning_stream_in_pieces_after_a_role_chunk() {
        let text = "hello there, a \"quoted\" line\nand é accents ✓";
        let chunks = Answer::text(text)
            .reasoning("thinking")
            .stream_chunks("m-1");
        assert!(chunks
            .iter()
            .all(|c| c["model"] == "m-1" && c["object"] == "chat.completion.chunk"));
        let d = deltas(&chunks);
        assert_eq!(*d[0], json!({"role": "assistant", "content": ""}));
        let reasoning: String = d
            .iter()
            .filter_map(|d| d["reasoning_content"].as_str())
            .collect();
        assert_eq!(reasoning, "thinking");
        let pieces: Vec<&str> = d[1..]
            .iter()
            .filter_map(|d| d["content"].as_str())
            .collect();
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| p.chars().count() <= 8), "{pieces:?}");
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
        let whole = Answer::text("whole text").fragment(0).stream_chunks("m");
        assert_eq!(deltas(&whole)[1]["content"], "whole text");
    }

    #[test]
    fn tool_fragments_follow_each_dialect() {
        let call = |a: Answer| a.tool_call("grep", json!({"pattern": "a long pattern"}));
        let frags = |a: Answer| -> Vec<Value> {
            deltas(&a.stream_chunks("m"))
                .into_iter()
                .filter_map(|d| d["tool_calls"].get(0).cloned())
                .collect()
        };
        let plain = frags(call(Answer::new()));
        assert_eq!(plain[0]["id"], "call_0");
        assert_eq!(plain[0]["function"]["name"], "grep");
        assert!(plain[1..]
            .iter()
            .all(|f| f.get("id").is_none() && f["function"].get("name").is_none()));
        assert!(plain.iter().all(|f| f["index"] == 0));
        let args: String = plain
            .iter()
            .filter_map(|f| f["function"]["arguments"].as_str())
            .collect();
        assert_eq!(args, json!({"pattern": "a long pattern"}).to_string());
        let llama = frags(call(Answer::new()).llama_style());
        assert!(llama
            .iter()
            .all(|f| f["id"] == "call_0" && f["function"]["name"] == "grep"));
        let bare = frags(call(Answer::new()).without_index());
        assert!(bare.iter().all(|f| f.get("index").is_none()));
        let last = call(Answer::new()).stream_chunks("m");
        assert_eq!(
            last.last().unwrap()["choices"][0]["finish_reason"],
            "tool_calls"
        );
    }

    #[test]
    fn usage_and_timings_go_where_the_answer_says() {
        let usage = json!({"prompt_tokens": 3});
        let final_chunk = Answer::text("x").usage(usage.clone()).stream_chunks("m");
        let last = final_chunk.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"], usage);
        let on_finish = Answer::text("x")
            .usage(usage.clone())
            .usage_on_finish_chunk()
            .timings(json!({"prompt_n": 3}))
            .stream_chunks("m");
        let last = on_finish.last().unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "stop");
        assert_eq!(last["usage"], usage);
        assert_eq!(last["timings"]["prompt_n"], 3);
    }
}
