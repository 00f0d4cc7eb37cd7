//! The OpenAI-compatible provider against brood-mock: assembly of streamed and whole
//! answers, the request it sends, usage dialects, retries, timeouts and typed errors.

use crate::step;
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::{
    FinishReason, Message, Model, ModelError, ModelRequest, Sampling, StreamEvent, ToolCall,
    ToolChoice, ToolSpec, Usage,
};
use brood_mock::{Answer, MockReply, MockServer};
use serde_json::json;
use std::time::{Duration, Instant};

mod failures;

fn config(server: &MockServer) -> ProviderConfig {
    let mut c = ProviderConfig::new("mock", server.base_url());
    c.api_key = Some("sk-test".into());
    c.api_key_env = Some("MOCK_API_KEY".into());
    c.backoff_base_ms = 10;
    c.backoff_max_ms = 40;
    c.api_timeout_secs = 20;
    c
}

fn provider(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(config(server)).unwrap()
}

fn request(user: &str) -> ModelRequest {
    ModelRequest {
        model: "mock-model".into(),
        system: "You are terse.".into(),
        messages: vec![Message::user(user)],
        tools: Default::default(),
        tool_choice: None,
        sampling: Sampling::default(),
    }
}

fn text_of(events: &[StreamEvent]) -> (String, usize) {
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (deltas.concat(), deltas.len())
}

fn tool_deltas(events: &[StreamEvent]) -> Vec<(usize, Option<String>, Option<String>, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => Some((*index, id.clone(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

#[tokio::test]
async fn streams_text_in_pieces_and_sends_a_streaming_request() {
    let server = MockServer::start(|_| MockReply::text("Hello from the mock, streamed in pieces."));
    let (r, events) = step(&provider(&server), &request("hi")).await;
    let r = r.unwrap();
    assert_eq!(
        r.message.content,
        "Hello from the mock, streamed in pieces."
    );
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert!(r.message.tool_calls.is_empty());
    let (text, pieces) = text_of(&events);
    assert_eq!(text, r.message.content);
    assert!(pieces > 3, "expected several deltas, got {pieces}");
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            reason: FinishReason::Stop
        })
    );

    let sent = &server.captured()[0];
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(sent.body()["stream"], json!(true));
    assert_eq!(
        sent.body()["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(sent.body()["model"], json!("mock-model"));
    assert_eq!(
        sent.body()["messages"],
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}])
    );
    assert!(sent.body().get("tools").is_none());
    assert!(sent.body().get("tool_choice").is_none());
}

#[tokio::test]
async fn non_streaming_mode_sends_stream_false_and_reads_one_completion() {
    let server = MockServer::start(|_| MockReply::text("whole answer"));
    let mut c = config(&server);
    c.stream = false;
    let p = OpenAiProvider::new(c).unwrap();
    let (r, events) = step(&p, &request("hi")).await;
    assert_eq!(r.unwrap().message.content, "whole answer");
    assert_eq!(text_of(&events), ("whole answer".to_string(), 1));
    let body = &server.requests()[0];
    assert_eq!(body["stream"], json!(false));
    assert!(body.get("stream_options").is_none());
}

#[tokio::test]
async fn fragmented_tool_arguments_are_assembled_exactly() {
    let args = json!({"path": "src/main.rs", "start": 1, "end": 40, "note": "naïve ✓"});
    let server = MockServer::start(move |_| {
        Answer::new()
            .tool_call("read_file", args.clone())
            .fragment(3)
            .into()
    });
    let (r, events) = step(&provider(&server), &request("read it")).await;
    let r = r.unwrap();
    assert_eq!(
        r.message.tool_calls,
        vec![call(
            "call_0",
            "read_file",
            &json!({"path": "src/main.rs", "start": 1, "end": 40, "note": "naïve ✓"}).to_string()
        )]
    );
    assert_eq!(r.message.content, "");
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    let deltas = tool_deltas(&events);
    assert!(
        deltas.len() > 10,
        "arguments should arrive in many fragments"
    );
    assert_eq!(
        deltas.iter().map(|d| d.3.as_str()).collect::<String>(),
        r.message.tool_calls[0].arguments
    );
    // id and name are reported once, when first seen.
    assert_eq!(deltas.iter().filter(|d| d.1.is_some()).count(), 1);
    assert_eq!(deltas.iter().filter(|d| d.2.is_some()).count(), 1);
}

#[tokio::test]
async fn llama_cpp_chunks_repeating_id_and_name_are_not_duplicated() {
    let server = MockServer::start(|_| {
        Answer::new()
            .tool_call_with_id("abc", "grep", r#"{"pattern":"fn main","path":"src"}"#)
            .tool_call_with_id("def", "list_dir", r#"{"path":"."}"#)
            .fragment(4)
            .llama_style()
            .into()
    });
    let (r, events) = step(&provider(&server), &request("look")).await;
    let r = r.unwrap();
    assert_eq!(
        r.message.tool_calls,
        vec![
            call("abc", "grep", r#"{"pattern":"fn main","path":"src"}"#),
            call("def", "list_dir", r#"{"path":"."}"#),
        ]
    );
    let deltas = tool_deltas(&events);
    assert_eq!(deltas.iter().filter(|d| d.2.is_some()).count(), 2);
    assert!(deltas.iter().all(|d| d.0 < 2));
}

#[tokio::test]
async fn fragments_without_index_are_keyed_by_id() {
    let server = MockServer::start(|_| {
        Answer::new()
            .tool_call_with_id("x1", "read_file", r#"{"path":"a.rs"}"#)
            .tool_call_with_id("x2", "read_file", r#"{"path":"b.rs"}"#)
            .fragment(5)
            .llama_style()
            .without_index()
            .into()
    });
    let (r, _) = step(&provider(&server), &request("two")).await;
    assert_eq!(
        r.unwrap().message.tool_calls,
        vec![
            call("x1", "read_file", r#"{"path":"a.rs"}"#),
            call("x2", "read_file", r#"{"path":"b.rs"}"#),
        ]
    );
}

#[tokio::test]
async fn several_tool_calls_in_one_step_streamed_or_not() {
    let answer = Answer::new()
        .content("Let me look.")
        .tool_call("read_file", json!({"path": "a"}))
        .tool_call("grep", json!({"pattern": "x"}))
        .tool_call("list_dir", json!({}))
        .fragment(2);
    let expected = vec![
        call("call_0", "read_file", r#"{"path":"a"}"#),
        call("call_1", "grep", r#"{"pattern":"x"}"#),
        call("call_2", "list_dir", "{}"),
    ];
    for stream in [true, false] {
        let a = answer.clone();
        let server = MockServer::start(move |_| a.clone().into());
        let mut c = config(&server);
        c.stream = stream;
        let (r, events) = step(&OpenAiProvider::new(c).unwrap(), &request("go")).await;
        let r = r.unwrap();
        assert_eq!(r.message.tool_calls, expected, "stream={stream}");
        assert_eq!(r.message.content, "Let me look.");
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        let indices: Vec<usize> = tool_deltas(&events).iter().map(|d| d.0).collect();
        assert!(indices.windows(2).all(|w| w[0] <= w[1]), "{indices:?}");
        assert_eq!(indices.last(), Some(&2));
    }
}

#[tokio::test]
async fn reasoning_content_is_kept_apart_from_content() {
    for stream in [true, false] {
        let server = MockServer::start(|_| {
            Answer::text("The answer is 4.")
                .reasoning("2+2: add the numbers.")
                .into()
        });
        let mut c = config(&server);
        c.stream = stream;
        let (r, events) = step(&OpenAiProvider::new(c).unwrap(), &request("2+2?")).await;
        let r = r.unwrap();
        assert_eq!(r.message.content, "The answer is 4.", "stream={stream}");
        assert_eq!(
            r.message.reasoning.as_deref(),
            Some("2+2: add the numbers.")
        );
        let reasoning: String = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ReasoningDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, "2+2: add the numbers.");
        assert_eq!(text_of(&events).0, "The answer is 4.");
    }
}

#[tokio::test]
async fn history_with_tool_calls_is_sent_with_empty_content_and_call_ids() {
    let server = MockServer::start(|_| MockReply::text("done"));
    let mut assistant = Message::assistant("");
    assistant.reasoning = Some("thinking".into());
    assistant.tool_calls = vec![
        call("c1", "read_file", r#"{"path":"a"}"#),
        call("c2", "todo_read", ""),
    ];
    let req = ModelRequest {
        messages: vec![
            Message::user("read a"),
            assistant,
            Message::tool_result("c1", "contents of a"),
            Message::tool_result("c2", "no todos"),
        ],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}})
                .into(),
        }]
        .into(),
        tool_choice: Some(ToolChoice::Named("read_file".into())),
        sampling: Sampling {
            temperature: Some(0.5),
            top_p: None,
            max_tokens: Some(256),
            seed: Some(7),
        },
        ..request("unused")
    };
    let (r, _) = step(&provider(&server), &req).await;
    r.unwrap();
    let body = &server.requests()[0];
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5);
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "todo_read", "arguments": "{}"}}
        ]})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "content": "contents of a", "tool_call_id": "c1"})
    );
    assert_eq!(messages[4]["tool_call_id"], json!("c2"));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}])
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "read_file"}})
    );
    assert_eq!(body["temperature"], json!(0.5));
    assert_eq!(body["max_tokens"], json!(256));
    assert_eq!(body["seed"], json!(7));
    assert!(body.get("top_p").is_none());

    // Every attempt of a step sends the same bytes.
    let server =
        MockServer::start_sequence(vec![MockReply::status(503, "busy"), MockReply::text("ok")]);
    step(&provider(&server), &req).await.0.unwrap();
    let raw = server.raw_requests();
    assert_eq!(raw.len(), 2);
    assert_eq!(raw[0], raw[1]);
    // Sent with its length, not chunked (the body is a one-shot body of known size,
    // dropped once written; some local servers refuse chunked requests).
    for r in server.captured() {
        let header = |name: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header("content-length"), Some(r.raw.len().to_string()));
        assert_eq!(header("transfer-encoding"), None);
    }
}

#[tokio::test]
async fn usage_is_read_in_every_dialect() {
    let deepseek = json!({"prompt_tokens": 100, "completion_tokens": 20,
        "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36, "total_tokens": 120});
    let openai = json!({"prompt_tokens": 50, "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 32}});
    let cases: Vec<(&str, Answer, bool, Usage)> = vec![
        (
            "deepseek on the finish chunk",
            Answer::text("a")
                .usage(deepseek.clone())
                .usage_on_finish_chunk(),
            true,
            Usage {
                input_tokens: 100,
                output_tokens: 20,
                cached_input_tokens: 64,
            },
        ),
        (
            "openai final usage chunk",
            Answer::text("a").usage(openai.clone()),
            true,
            Usage {
                input_tokens: 50,
                output_tokens: 5,
                cached_input_tokens: 32,
            },
        ),
        (
            "llama.cpp timings",
            Answer::text("a").timings(json!({"prompt_n": 3, "cache_n": 40, "predicted_n": 9})),
            true,
            Usage {
                input_tokens: 43,
                output_tokens: 9,
                cached_input_tokens: 40,
            },
        ),
        (
            "deepseek, not streamed",
            Answer::text("a").usage(deepseek),
            false,
            Usage {
                input_tokens: 100,
                output_tokens: 20,
                cached_input_tokens: 64,
            },
        ),
        (
            "openai, not streamed",
            Answer::text("a").usage(openai),
            false,
            Usage {
                input_tokens: 50,
                output_tokens: 5,
                cached_input_tokens: 32,
            },
        ),
    ];
    for (what, answer, stream, expected) in cases {
        let server = MockServer::start(move |_| answer.clone().into());
        let mut c = config(&server);
        c.stream = stream;
        let (r, events) = step(&OpenAiProvider::new(c).unwrap(), &request("u")).await;
        assert_eq!(r.unwrap().usage, Some(expected), "{what}");
        let usage_events: Vec<&StreamEvent> = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Usage { .. }))
            .collect();
        assert_eq!(
            usage_events,
            vec![&StreamEvent::Usage { usage: expected }],
            "{what}"
        );
    }
    let server = MockServer::start(|_| MockReply::text("no usage"));
    assert_eq!(
        step(&provider(&server), &request("u"))
            .await
            .0
            .unwrap()
            .usage,
        None
    );
}

#[tokio::test]
async fn raw_sse_with_crlf_comments_and_split_events_is_parsed() {
    let server = MockServer::start(|_| {
        MockReply::Raw {
        parts: vec![
            b": OPENROUTER PROCESSING\r\n\r\n".to_vec(),
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel".to_vec(),
            b"lo\"}}]}\r\n\r\ndata:{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\r".to_vec(),
            b"\n\r\ndata: [DONE]\r\n\r\n".to_vec(),
        ],
    }
    });
    let r = step(&provider(&server), &request("x")).await.0.unwrap();
    assert_eq!(r.message.content, "Hello");
    assert_eq!(r.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_is_still_understood() {
    let server =
        MockServer::start(|req| MockReply::Json(Answer::text("json anyway").to_json(req.model())));
    let r = step(&provider(&server), &request("x")).await.0.unwrap();
    assert_eq!(r.message.content, "json anyway");
}

#[tokio::test]
async fn concurrent_steps_reach_the_server_concurrently() {
    let server = MockServer::start(|_| MockReply::text("slow").after(Duration::from_millis(300)));
    let p = provider(&server);
    let req = request("x");
    let steps = futures::future::join_all((0..6).map(|_| step(&p, &req)));
    let watch = async {
        tokio::time::timeout(Duration::from_secs(10), server.wait_for_in_flight(6))
            .await
            .is_ok()
    };
    let (results, reached) = tokio::join!(steps, watch);
    assert!(reached, "6 steps were never in flight at once");
    assert!(results.into_iter().all(|(r, _)| r.is_ok()));
    assert_eq!(server.max_in_flight(), 6);
    assert_eq!(server.in_flight(), 0);
}

#[tokio::test]
async fn list_models_reads_the_models_route() {
    let server = MockServer::start(|_| MockReply::text("unused"));
    server.set_models(["deepseek-chat", "deepseek-reasoner"]);
    let models = provider(&server).list_models().await.unwrap();
    assert_eq!(
        models,
        Some(vec![
            "deepseek-chat".to_string(),
            "deepseek-reasoner".to_string()
        ])
    );
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn tool_calls_with_finish_reason_stop_still_finish_as_tool_calls() {
    let server = MockServer::start(|_| {
        Answer::new()
            .tool_call("todo_read", json!({}))
            .finish_reason("stop")
            .into()
    });
    let r = step(&provider(&server), &request("x")).await.0.unwrap();
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.message.tool_calls.len(), 1);
}

#[tokio::test]
async fn an_event_stream_without_its_content_type_is_still_read() {
    let server = MockServer::start(|_| {
        let body: String = Answer::text("mislabelled")
            .stream_chunks("m")
            .iter()
            .map(|c| format!("data: {c}\n\n"))
            .collect();
        MockReply::status_raw(200, body + "data: [DONE]\n\n")
    });
    let r = step(&provider(&server), &request("x")).await.0.unwrap();
    assert_eq!(r.message.content, "mislabelled");
}

#[tokio::test]
async fn an_answer_past_max_answer_bytes_fails_naming_the_cap_and_stops_reading() {
    const CAP: u64 = 64 * 1024;
    let big = "x".repeat(1024 * 1024);
    let cases = [
        // Text in many deltas, streamed and whole.
        (
            MockReply::Answer(Answer::text(big.clone()).fragment(4096)),
            true,
            "answer",
        ),
        (MockReply::text(big.clone()), false, "answer"),
        (
            MockReply::text("z".repeat(2 * 1024 * 1024)),
            false,
            "body (read up to 4 × the cap + 1 MiB)",
        ),
        // Tool-call arguments in many fragments.
        (
            MockReply::Answer(
                Answer::new()
                    .tool_call("write_file", json!({ "content": big }))
                    .fragment(4096),
            ),
            true,
            "answer",
        ),
        // Many empty tool calls: each counts, so their number is bounded too.
        (
            MockReply::Sse {
                chunks: (0..4000)
                    .map(|i| json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i}]}}]}))
                    .collect(),
                done: true,
            },
            true,
            "answer",
        ),
        // One SSE line longer than the cap, in many pieces, never ended.
        (
            MockReply::Raw {
                parts: std::iter::once(b"data: {\"choices\":[{\"delta\":{\"content\":\"".to_vec())
                    .chain(std::iter::repeat_n(vec![b'y'; 8192], 128))
                    .collect(),
            },
            true,
            "stream line",
        ),
    ];
    for (reply, stream, what) in cases {
        let server = MockServer::start(move |_| reply.clone());
        let mut c = config(&server);
        c.max_answer_bytes = CAP;
        c.stream = stream;
        let p = OpenAiProvider::new(c).unwrap();
        let (r, events) = step(&p, &request("write a lot")).await;
        match r {
            Err(ModelError::AnswerTooLarge { cap, size, what: w }) => {
                assert_eq!(cap, CAP, "{what}");
                assert_eq!(w, what);
                if stream {
                    let soon = size > CAP && size < CAP + 16 * 1024;
                    assert!(soon, "dropped soon past the cap: {size}");
                } else if what == "answer" {
                    // A whole JSON body is read (up to 4 × the cap + 1 MiB), then judged.
                    assert_eq!(size, 1024 * 1024);
                } else {
                    let limit = 4 * CAP + (1 << 20);
                    assert!(size > limit && size < 2 * 1024 * 1024, "{size}");
                }
            }
            other => panic!("{what} (stream {stream}): expected AnswerTooLarge, got {other:?}"),
        }
        let err = ModelError::AnswerTooLarge {
            cap: CAP,
            size: CAP + 1,
            what: what.into(),
        };
        assert!(
            err.to_string().contains("max_answer_bytes (65536 bytes)"),
            "{err}"
        );
        // Not retried: the same request would get the same answer.
        assert_eq!(server.captured().len(), 1);
        assert!(!events
            .iter()
            .any(|e| matches!(e, StreamEvent::Retrying { .. })));
    }
    // The default leaves room for real answers.
    assert_eq!(
        ProviderConfig::new("x", "http://127.0.0.1:1").max_answer_bytes,
        8 << 20
    );
}
