//! The provider against the quirks a real llama.cpp server (llama-cpp-python 0.3.36,
//! measured in docs/LOCAL_LLM.md) shows on the wire, replayed byte for byte by
//! brood-mock: empty 200 answers, `[DONE]` without a finish reason, explicit `null`s
//! and the duplicate legacy `function_call` in deltas, `tool_choice` naming a tool
//! that is not offered, tool arguments cut by `max_tokens`, a model list that does
//! not name the model. Each test names the quirk (by its number in that file).

use crate::step;
use brood::agent::{self, AgentHooks, AgentSpec, ToolChoicePolicy};
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::{
    FinishReason, Message, Model, ModelError, ModelRequest, Role, Sampling, StreamEvent,
    ToolChoice, ToolSpec,
};
use brood::tool::{self, Permissions, Toolbox, Workspace};
use brood_mock::{Answer, MockReply, MockServer};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn config(server: &MockServer) -> ProviderConfig {
    let mut c = ProviderConfig::new("local", server.base_url());
    c.backoff_base_ms = 5;
    c.backoff_max_ms = 20;
    c.api_timeout_secs = 20;
    c
}

fn provider(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(config(server)).unwrap()
}

fn read_file_spec() -> ToolSpec {
    ToolSpec {
        name: "read_file".into(),
        description: "Read a file from the workspace".into(),
        parameters: json!({"type": "object",
            "properties": {"path": {"type": "string"}}, "required": ["path"]})
        .into(),
    }
}

fn request(tools: Vec<ToolSpec>, tool_choice: Option<ToolChoice>) -> ModelRequest {
    ModelRequest {
        model: "local".into(),
        system: "You are a coding agent working in a workspace. Use relative paths.".into(),
        messages: vec![Message::user("Read the file README.md")],
        tools: tools.into(),
        tool_choice,
        sampling: Sampling::default(),
    }
}

fn raw_sse(events: &[&str]) -> MockReply {
    MockReply::Raw {
        parts: events
            .iter()
            .map(|e| format!("data: {e}\n\n").into_bytes())
            .collect(),
    }
}

/// Quirk 3 (and 4, and a streamed context overflow): `200 text/event-stream` with a
/// body of 0 bytes that ends cleanly. Before: retried as a cut stream, then
/// reported as one. Now: a typed, non-retried error naming the endpoint.
#[tokio::test]
async fn an_empty_stream_is_a_typed_error_and_is_not_retried() {
    let server = MockServer::start(|_| MockReply::Raw { parts: vec![] });
    let req = request(vec![read_file_spec()], Some(ToolChoice::Auto));
    let (r, events) = step(&provider(&server), &req).await;
    match r.unwrap_err() {
        e @ ModelError::EmptyAnswer { .. } => {
            let ModelError::EmptyAnswer { url, what } = &e else {
                unreachable!()
            };
            assert_eq!(what, "stream");
            assert!(url.starts_with(&server.base_url()), "{url}");
            let text = e.to_string();
            assert!(text.contains("empty stream") && text.contains("stream = false"));
            assert!(!e.is_transient());
        }
        other => panic!("expected EmptyAnswer, got {other:?}"),
    }
    assert_eq!(server.request_count(), 1, "an empty answer is not retried");
    assert!(events.is_empty(), "{events:?}");
}

/// The same for a non-streamed answer: `200` with an empty body is not "no JSON".
#[tokio::test]
async fn an_empty_json_body_is_a_typed_error_and_is_not_retried() {
    let server = MockServer::start(|_| MockReply::status_raw(200, ""));
    let mut c = config(&server);
    c.stream = false;
    let (r, _) = step(&OpenAiProvider::new(c).unwrap(), &request(vec![], None)).await;
    assert!(
        matches!(&r, Err(ModelError::EmptyAnswer { what, .. }) if what == "body"),
        "{r:?}"
    );
    assert_eq!(server.request_count(), 1);
}

/// A stream with only comments and blank lines has no event either.
#[tokio::test]
async fn a_stream_of_only_comments_is_an_empty_answer() {
    let server = MockServer::start(|_| MockReply::Raw {
        parts: vec![b": keep-alive\n\n".to_vec(), b"\n\n".to_vec()],
    });
    let (r, _) = step(&provider(&server), &request(vec![], None)).await;
    assert!(matches!(r, Err(ModelError::EmptyAnswer { .. })), "{r:?}");
}

/// Quirk 12: a stream interrupted by another request ends with its role chunk and
/// `data: [DONE]`, no finish reason. Before: accepted as a complete, empty answer.
/// Now: a cut stream, retried; the retry's answer is the step's answer.
#[tokio::test]
async fn done_without_a_finish_reason_is_a_cut_stream_and_is_retried() {
    let interrupted = r#"{"id": "chatcmpl-1", "model": "local", "created": 1795309177, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": null, "finish_reason": null}]}"#;
    let server = MockServer::start_sequence(vec![
        raw_sse(&[interrupted, "[DONE]"]),
        MockReply::text("the real answer"),
    ]);
    let (r, events) = step(&provider(&server), &request(vec![], None)).await;
    assert_eq!(r.unwrap().message.content, "the real answer");
    assert_eq!(server.request_count(), 2);
    assert!(
        events.iter().any(|e| matches!(e,
            StreamEvent::Retrying { error, .. } if error.contains("[DONE]") && error.contains("no finish_reason"))),
        "{events:?}"
    );

    // Interrupted every time: a typed error after the retries, never an empty answer.
    let server = MockServer::start(move |_| raw_sse(&[interrupted, "[DONE]"]));
    let (r, _) = step(&provider(&server), &request(vec![], None)).await;
    match r.unwrap_err() {
        ModelError::RetriesExhausted { attempts: 4, last } => {
            assert!(matches!(*last, ModelError::StreamCut { .. }), "{last:?}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.request_count(), 4);
}

/// Some servers send `"finish_reason": ""` on every chunk before the last; an empty
/// reason is no reason, so a stream cut after such chunks is still a cut stream.
#[tokio::test]
async fn an_empty_finish_reason_does_not_end_the_answer() {
    let chunk = |content: &str, finish: &str| json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]});
    let server = MockServer::start_sequence(vec![
        MockReply::Cut {
            chunks: vec![chunk("Hel", ""), chunk("lo", "")],
        },
        MockReply::Sse {
            chunks: vec![chunk("Hel", ""), chunk("lo", ""), chunk("", "stop")],
            done: true,
        },
    ]);
    let (r, _) = step(&provider(&server), &request(vec![], None)).await;
    let r = r.unwrap();
    assert_eq!(r.message.content, "Hello");
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert_eq!(server.request_count(), 2, "the cut stream was retried");
}

/// Quirk 5: a named tool that is not among the tools is a 500 there (OpenAI: 400);
/// named with no tools at all it is silently ignored. Refused before sending.
#[tokio::test]
async fn a_tool_choice_naming_a_tool_not_offered_is_refused_before_sending() {
    let server = MockServer::start(|_| MockReply::text("never"));
    let p = provider(&server);
    let named = Some(ToolChoice::Named("write_file".into()));
    let (r, events) = step(&p, &request(vec![read_file_spec()], named.clone())).await;
    match r.unwrap_err() {
        ModelError::InvalidRequest { detail } => {
            assert!(
                detail.contains("'write_file'") && detail.contains("read_file"),
                "{detail}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(events.is_empty());
    let (r, _) = step(&p, &request(vec![], named)).await;
    assert!(
        matches!(&r, Err(ModelError::InvalidRequest { detail }) if detail.contains("offers no tools")),
        "{r:?}"
    );
    let (r, _) = step(&p, &request(vec![], Some(ToolChoice::Required))).await;
    assert!(matches!(r, Err(ModelError::InvalidRequest { .. })), "{r:?}");
    assert_eq!(server.request_count(), 0, "nothing was sent");

    // auto/none without tools mean nothing: sent without the field (OpenAI rejects a
    // tool_choice without tools).
    let (r, _) = step(&p, &request(vec![], Some(ToolChoice::Auto))).await;
    r.unwrap();
    let body = &server.requests()[0];
    assert!(body.get("tool_choice").is_none() && body.get("tools").is_none());
    // A named tool that is offered goes out in the function shape.
    let named = Some(ToolChoice::Named("read_file".into()));
    step(&p, &request(vec![read_file_spec()], named))
        .await
        .0
        .unwrap();
    assert_eq!(
        server.requests()[1]["tool_choice"],
        json!({"type": "function", "function": {"name": "read_file"}})
    );
}

/// Quirk 6: the exact stream of a forced call — explicit nulls in every delta, id and
/// name repeated in every fragment, the legacy `function_call` duplicating each one,
/// an empty last fragment, an all-null finish delta. Exactly one call results, its
/// id and name reported once, `null` content never turning into text.
#[tokio::test]
async fn a_llama_cpp_python_streamed_tool_call_is_exactly_one_call() {
    const ID: &str = "call__0_read_file_cmpl-c96218ef-b876-4d6c-9132-e409728da56c";
    let head = r#"{"id": "chatcmpl-c96218ef", "object": "chat.completion.chunk", "created": 1795309180, "model": "local", "choices": [{"index": 0, "finish_reason": null, "logprobs": null, "delta": {"role": "assistant", "content": null, "function_call": null, "tool_calls": null}}]}"#.to_string();
    let fragment = |args: &str| {
        json!({"id": "chatcmpl-c96218ef", "object": "chat.completion.chunk", "created": 1795309180,
               "model": "local", "choices": [{"index": 0, "finish_reason": null, "logprobs": null,
               "delta": {"role": null, "content": null,
                         "function_call": {"name": "read_file", "arguments": args},
                         "tool_calls": [{"index": 0, "id": ID, "type": "function",
                                         "function": {"name": "read_file", "arguments": args}}]}}]})
        .to_string()
    };
    let finish = r#"{"id": "chatcmpl-c96218ef", "object": "chat.completion.chunk", "created": 1795309180, "model": "local", "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null, "delta": {"role": null, "content": null, "function_call": null, "tool_calls": null}}]}"#.to_string();
    let pieces = ["{\"", "path", "\":", " \"", "README", ".md", "\"}", ""];
    let mut events: Vec<String> = vec![head];
    events.extend(pieces.iter().map(|p| fragment(p)));
    events.push(finish);
    events.push("[DONE]".into());
    let refs: Vec<&str> = events.iter().map(String::as_str).collect();
    let reply = raw_sse(&refs);
    let server = MockServer::start(move |_| reply.clone());
    let req = request(
        vec![read_file_spec()],
        Some(ToolChoice::Named("read_file".into())),
    );
    let (r, events) = step(&provider(&server), &req).await;
    let r = r.unwrap();
    assert_eq!(r.message.content, "", "null content is no text");
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.usage, None, "no usage in this server's streams (quirk 7)");
    assert_eq!(r.message.tool_calls.len(), 1, "{:?}", r.message.tool_calls);
    let call = &r.message.tool_calls[0];
    assert_eq!((call.id.as_str(), call.name.as_str()), (ID, "read_file"));
    assert_eq!(call.arguments, r#"{"path": "README.md"}"#);
    let deltas: Vec<_> = events
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
        .collect();
    assert!(deltas.iter().all(|d| d.0 == 0));
    assert_eq!(deltas.iter().filter(|d| d.1.is_some()).count(), 1);
    assert_eq!(deltas.iter().filter(|d| d.2.is_some()).count(), 1);
    let args: String = deltas.iter().map(|d| d.3.as_str()).collect();
    assert_eq!(args, call.arguments);
    assert!(!events
        .iter()
        .any(|e| matches!(e, StreamEvent::TextDelta { .. })));
}

/// Quirk 16: the non-streamed `auto` answer, verbatim: `content: null`, the call in
/// `tool_calls`, and a legacy `function_call` whose name has a trailing colon. The
/// legacy field is ignored, so the name is the right one and nothing is doubled.
#[tokio::test]
async fn a_non_streamed_answer_with_a_colon_named_legacy_function_call_is_one_clean_call() {
    let body: Value = serde_json::from_str(r#"{"id":"chatcmpl-cc4c0bc4","object":"chat.completion","created":1795309189,"model":"local","choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"call__0_read_file_cmpl-43544633","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"README.md\"}"}}],"role":"assistant","function_call":{"name":"read_file:","arguments":"{\"path\": \"README.md\"}"}},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":226,"completion_tokens":9,"total_tokens":235}}"#).unwrap();
    let server = MockServer::start(move |_| MockReply::Json(body.clone()));
    let mut c = config(&server);
    c.stream = false;
    let req = request(vec![read_file_spec()], Some(ToolChoice::Auto));
    let r = step(&OpenAiProvider::new(c).unwrap(), &req)
        .await
        .0
        .unwrap();
    let names: Vec<&str> = r
        .message
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["read_file"]);
    assert_eq!(r.message.content, "");
    assert_eq!(
        r.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((226, 9))
    );
}

/// Quirk 8: `finish_reason: "tool_calls"` with arguments cut by `max_tokens`. The
/// provider passes the call on as sent (it cannot repair it); the agent's toolbox
/// answers the model with a tool error saying the arguments are not valid JSON, and
/// the loop goes on. The invalid text also goes back verbatim in the history.
#[tokio::test]
async fn arguments_cut_by_max_tokens_become_a_tool_error_the_model_sees() {
    let server = MockServer::start(|req| {
        if req.assistant_turns() == 0 {
            Answer::new()
                .tool_call_with_id("call_cut", "read_file", r#"{"path": ""#)
                .llama_style()
                .into()
        } else {
            MockReply::text("I could not read it.")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let workspace = Arc::new(Workspace::open(dir.path()).unwrap());
    let spec = AgentSpec {
        run_id: "r".into(),
        system: "You are a coding agent.".into(),
        model: Arc::new(provider(&server)),
        model_id: "local".into(),
        sampling: Sampling::default(),
        tool_choice: ToolChoicePolicy {
            first: Some(ToolChoice::Named("read_file".into())),
            rest: Some(ToolChoice::None),
        },
        toolbox: Toolbox::new(
            tool::builtin_tools(&Default::default()),
            Permissions::full("t"),
        ),
        workspace,
        max_turns: 4,
        offered_tools: None,
        tool_concurrency: brood::agent::DEFAULT_TOOL_CONCURRENCY,
    };
    let out = agent::run(
        &spec,
        vec![Message::user("Read the file README.md")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.final_text, "I could not read it.", "{out:?}");
    let tool_msg = out.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert_eq!(tool_msg.tool_call_id.as_deref(), Some("call_cut"));
    assert!(
        tool_msg.content.starts_with("error:") && tool_msg.content.contains("not valid JSON"),
        "{}",
        tool_msg.content
    );
    let second = &server.requests()[1];
    let msgs = second["messages"].as_array().unwrap();
    let assistant = &msgs[msgs.len() - 2];
    assert_eq!(assistant["content"], json!(""), "quirk 9: never null");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        json!(r#"{"path": ""#)
    );
    assert_eq!(msgs[msgs.len() - 1]["role"], "tool");
    assert_eq!(second["tool_choice"], json!("none"));
}

/// Quirk 16/13: llama.cpp lists its model under the file path and `/models` waits
/// behind a running generation; the `local`/`llamacpp` presets therefore do not ask,
/// so any model name is accepted at spawn.
#[tokio::test]
async fn a_provider_that_does_not_list_models_never_asks() {
    let server = MockServer::start(|_| MockReply::text("x"));
    let listed = provider(&server).list_models().await.unwrap();
    assert_eq!(listed, Some(vec!["mock-model".to_string()]));
    let local = brood::model::preset::preset("local").unwrap().config();
    assert!(!local.lists_models);
    let mut c = config(&server);
    c.lists_models = local.lists_models;
    let p = OpenAiProvider::new(c).unwrap();
    assert_eq!(p.list_models().await.unwrap(), None);
}

fn agent_on(server: &MockServer, dir: &tempfile::TempDir) -> AgentSpec {
    AgentSpec {
        run_id: "r".into(),
        system: "You are a coding agent.".into(),
        // A 5 MB answer takes a while in a debug build on a busy machine.
        model: Arc::new(
            OpenAiProvider::new(ProviderConfig {
                api_timeout_secs: 120,
                ..config(server)
            })
            .unwrap(),
        ),
        model_id: "local".into(),
        sampling: Sampling::default(),
        tool_choice: ToolChoicePolicy::default(),
        toolbox: Toolbox::new(
            tool::builtin_tools(&Default::default()),
            Permissions::full("t"),
        ),
        workspace: Arc::new(Workspace::open(dir.path()).unwrap()),
        max_turns: 4,
        offered_tools: None,
        tool_concurrency: brood::agent::DEFAULT_TOOL_CONCURRENCY,
    }
}

/// Issue 13.10: a call with an empty or unknown function name is a tool error the
/// model sees and can correct; the run goes on (it used to fail the whole run).
#[tokio::test]
async fn an_empty_or_unknown_function_name_is_a_tool_error_the_model_sees() {
    let server = MockServer::start(|req| {
        if req.assistant_turns() == 0 {
            Answer::new()
                .tool_call_with_id("call_empty", "", "{}")
                .tool_call_with_id("call_bogus", "no_such_tool", "{}")
                .into()
        } else {
            MockReply::text("corrected")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = agent::run(
        &agent_on(&server, &dir),
        vec![Message::user("go")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.ending, agent::Ending::Completed, "{out:?}");
    assert_eq!(out.final_text, "corrected");
    let second = serde_json::to_string(&server.requests()[1]).unwrap();
    assert!(
        second.contains("unknown tool ''") && second.contains("named no function"),
        "{second}"
    );
    assert!(second.contains("unknown tool 'no_such_tool'"), "{second}");
    assert!(
        second.contains("read_file"),
        "the error lists the tools: {second}"
    );
}

/// Issue 13.9: a 5 MB argument that is not JSON (and a 1 MB name) is not echoed
/// back whole: the next request stays small.
#[tokio::test]
async fn a_huge_bad_argument_is_not_echoed_into_the_next_request() {
    let huge_args = format!("{{\"path\": \"{}", "a".repeat(5 << 20));
    let huge_name = "n".repeat(1 << 20);
    let server = MockServer::start(move |req| {
        if req.assistant_turns() == 0 {
            Answer::new()
                .tool_call_with_id("call_big", "read_file", &huge_args)
                .tool_call_with_id("call_name", &huge_name, "{}")
                .into()
        } else {
            MockReply::text("ok")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = agent::run(
        &agent_on(&server, &dir),
        vec![Message::user("go")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.ending, agent::Ending::Completed, "{out:?}");
    let second = serde_json::to_string(&server.requests()[1]).unwrap();
    assert!(
        second.len() < 20 * 1024,
        "next request is {} bytes",
        second.len()
    );
    assert!(second.contains("not valid JSON"), "{second}");
    assert!(
        second.contains("5242890 bytes"),
        "the original size is named: {second}"
    );
}
