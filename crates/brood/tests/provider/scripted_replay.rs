//! The scripted model and record/replay, through the `Model` trait.

use crate::step;
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::record::{RecordError, Recorder, Replayer};
use brood::model::scripted::{estimate_tokens, ScriptStep, ScriptedModel};
use brood::model::{
    FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, Sampling, StreamEvent,
    ToolCall, Usage,
};
use brood_mock::{Answer, MockServer};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn request(user: &str) -> ModelRequest {
    ModelRequest {
        model: "m".into(),
        system: "sys".into(),
        messages: vec![Message::user(user)],
        tools: Default::default(),
        tool_choice: None,
        sampling: Sampling::default(),
    }
}

/// `req` followed by the assistant message of `resp` and one tool result per call.
fn continue_with(req: &ModelRequest, resp: &ModelResponse) -> ModelRequest {
    let mut next = req.clone();
    next.messages.push(resp.message.clone());
    for c in &resp.message.tool_calls {
        next.messages
            .push(Message::tool_result(&c.id, format!("result of {}", c.name)));
    }
    next
}

fn temp_path(dir: &tempfile::TempDir, name: &str) -> std::path::PathBuf {
    dir.path().join(name)
}

#[tokio::test]
async fn scripts_are_keyed_by_conversation_and_stepped_by_assistant_turns() {
    let model = ScriptedModel::new()
        .on(
            "find config",
            vec![
                ScriptStep::tool_calls([
                    ("grep", json!({"pattern": "Config"})),
                    ("list_dir", json!({"path": "."})),
                ]),
                ScriptStep::text("Config is parsed in src/config.rs."),
            ],
        )
        .on("say hi", vec![ScriptStep::text("hi")]);

    // Two conversations at once: the model keeps no state between them.
    let a0 = request("please find config parsing");
    let b0 = request("say hi please");
    let ((ra, ea), (rb, _)) = tokio::join!(step(&model, &a0), step(&model, &b0));
    let ra = ra.unwrap();
    assert_eq!(rb.unwrap().message.content, "hi");
    assert_eq!(ra.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        ra.message.tool_calls,
        vec![
            ToolCall {
                id: "call_0_0".into(),
                name: "grep".into(),
                arguments: r#"{"pattern":"Config"}"#.into()
            },
            ToolCall {
                id: "call_0_1".into(),
                name: "list_dir".into(),
                arguments: r#"{"path":"."}"#.into()
            },
        ]
    );
    let deltas = ea
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
        .count();
    assert_eq!(deltas, 2);
    assert!(matches!(
        ea.last(),
        Some(StreamEvent::Finish {
            reason: FinishReason::ToolCalls
        })
    ));

    let a1 = continue_with(&a0, &ra);
    let (r, events) = step(&model, &a1).await;
    let r = r.unwrap();
    assert_eq!(r.message.content, "Config is parsed in src/config.rs.");
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert!(events.contains(&StreamEvent::TextDelta {
        text: "Config is parsed in src/config.rs.".into()
    }));

    // Usage is estimated from the request and grows with it.
    let u0 = ra.usage.unwrap();
    let u1 = r.usage.unwrap();
    assert!(u1.input_tokens > u0.input_tokens, "{u0:?} then {u1:?}");
    assert_eq!(
        u1.output_tokens,
        estimate_tokens("Config is parsed in src/config.rs.")
    );
    assert!(events.contains(&StreamEvent::Usage { usage: u1 }));
}

#[tokio::test]
async fn unmatched_and_exhausted_scripts_are_errors_naming_the_conversation() {
    let model = ScriptedModel::new()
        .named("demo")
        .on("known", vec![ScriptStep::text("once")]);
    match step(&model, &request("something else entirely"))
        .await
        .0
        .unwrap_err()
    {
        ModelError::Script(m) => {
            assert!(
                m.contains("something else entirely") && m.contains("demo"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    let first = request("known thing");
    let resp = step(&model, &first).await.0.unwrap();
    match step(&model, &continue_with(&first, &resp))
        .await
        .0
        .unwrap_err()
    {
        ModelError::Script(m) => {
            assert!(
                m.contains("has 1 steps") && m.contains("step 2") && m.contains("known thing"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn predicates_functions_errors_and_fallback() {
    let model = ScriptedModel::new()
        .on_request(
            |r| r.model == "special",
            vec![ScriptStep::func(|r| {
                Ok(ModelResponse {
                    message: Message::assistant(format!("{} messages", r.messages.len())),
                    usage: Some(Usage {
                        input_tokens: 1,
                        output_tokens: 2,
                        cached_input_tokens: 3,
                    }),
                    finish_reason: FinishReason::Stop,
                })
            })],
        )
        .on(
            "fail",
            vec![ScriptStep::error(ModelError::ContextLength {
                message: "too long".into(),
            })],
        )
        .otherwise(vec![ScriptStep::text("fallback")]);
    let special = ModelRequest {
        model: "special".into(),
        ..request("fail")
    };
    let r = step(&model, &special).await.0.unwrap();
    assert_eq!(r.message.content, "1 messages");
    assert_eq!(
        r.usage,
        Some(Usage {
            input_tokens: 1,
            output_tokens: 2,
            cached_input_tokens: 3
        })
    );
    assert_eq!(
        step(&model, &request("fail now")).await.0.unwrap_err(),
        ModelError::ContextLength {
            message: "too long".into()
        }
    );
    assert_eq!(
        step(&model, &request("other"))
            .await
            .0
            .unwrap()
            .message
            .content,
        "fallback"
    );
}

#[tokio::test]
async fn delayed_steps_wait_without_blocking_each_other() {
    let model = ScriptedModel::new().otherwise(vec![
        ScriptStep::text("late").after(Duration::from_millis(300))
    ]);
    let started = Instant::now();
    let reqs: Vec<ModelRequest> = (0..5).map(|i| request(&format!("c{i}"))).collect();
    let results = futures::future::join_all(reqs.iter().map(|r| step(&model, r))).await;
    let elapsed = started.elapsed();
    assert!(results
        .iter()
        .all(|(r, _)| r.as_ref().unwrap().message.content == "late"));
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_millis(1200),
        "delays ran one after another: {elapsed:?}"
    );
}

fn mock_provider(server: &MockServer) -> Arc<dyn Model> {
    let mut c = ProviderConfig::new("mock", server.base_url());
    c.backoff_base_ms = 10;
    Arc::new(OpenAiProvider::new(c).unwrap())
}

#[tokio::test]
async fn record_against_the_server_then_replay_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir, "run.jsonl");
    let mut server = MockServer::start(|req| {
        if req.assistant_turns() == 0 {
            Answer::new()
                .reasoning("look first")
                .tool_call("read_file", json!({"path": "README.md"}))
                .usage(json!({"prompt_tokens": 12, "completion_tokens": 4}))
                .into()
        } else {
            Answer::text("README says hello")
                .usage(json!({"prompt_tokens": 30, "completion_tokens": 5}))
                .into()
        }
    });
    let recorder = Recorder::create(mock_provider(&server), &path).unwrap();
    let r0 = request("what does the README say?");
    let (resp0, ev0) = step(&recorder, &r0).await;
    let resp0 = resp0.unwrap();
    let r1 = continue_with(&r0, &resp0);
    let (resp1, _) = step(&recorder, &r1).await;
    let resp1 = resp1.unwrap();
    assert_eq!(resp1.message.content, "README says hello");
    server.stop();
    drop(recorder);

    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["provider"], json!("mock"));
    assert_eq!(
        lines[1]["request"]["messages"][1]["tool_calls"][0]["name"],
        json!("read_file")
    );

    let replay = Replayer::from_file(&path).unwrap();
    assert_eq!(replay.len(), 2);
    // Replayed in reverse order: matching is by request, not position.
    let (again1, _) = step(&replay, &r1).await;
    let (again0, ev_again0) = step(&replay, &r0).await;
    assert_eq!(again0.unwrap(), resp0);
    assert_eq!(again1.unwrap(), resp1);
    assert_eq!(replay.remaining(), 0);
    // Replay reports the same kinds of events (reasoning, tool call, usage, finish).
    let kinds = |ev: &[StreamEvent]| {
        let mut k: Vec<String> = ev
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        k.dedup();
        k
    };
    assert_eq!(kinds(&ev_again0), kinds(&ev0));
}

#[tokio::test]
async fn replay_mismatch_names_the_request_and_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir, "run.jsonl");
    let model: Arc<dyn Model> =
        Arc::new(ScriptedModel::new().otherwise(vec![ScriptStep::text("ok")]));
    let recorder = Recorder::create(model, &path).unwrap();
    step(&recorder, &request("summarize the parser module"))
        .await
        .0
        .unwrap();
    drop(recorder);

    let replay = Replayer::from_file(&path).unwrap();
    match step(&replay, &request("summarize the lexer module"))
        .await
        .0
        .unwrap_err()
    {
        ModelError::ReplayMismatch { index, detail } => {
            assert_eq!(index, 0);
            assert!(detail.contains("summarize the lexer module"), "{detail}");
            assert!(detail.contains("line 1"), "{detail}");
            assert!(detail.contains("messages[0]"), "{detail}");
            assert!(
                detail.contains("parser") && detail.contains("lexer"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
    let other_model = ModelRequest {
        model: "other".into(),
        ..request("summarize the parser module")
    };
    match step(&replay, &other_model).await.0.unwrap_err() {
        ModelError::ReplayMismatch { index: 1, detail } => {
            assert!(
                detail.contains("model: recorded 'm', got 'other'"),
                "{detail}"
            )
        }
        other => panic!("{other:?}"),
    }
    // The recorded request is answered once; asking again is a mismatch.
    step(&replay, &request("summarize the parser module"))
        .await
        .0
        .unwrap();
    match step(&replay, &request("summarize the parser module"))
        .await
        .0
        .unwrap_err()
    {
        ModelError::ReplayMismatch { index: 3, detail } => {
            assert!(detail.contains("already answered"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn failed_steps_are_recorded_and_replayed_as_the_same_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir, "err.jsonl");
    let err = ModelError::RetriesExhausted {
        attempts: 4,
        last: Box::new(ModelError::Status {
            status: 503,
            message: "busy".into(),
            retry_after_ms: Some(10),
        }),
    };
    let model: Arc<dyn Model> =
        Arc::new(ScriptedModel::new().otherwise(vec![ScriptStep::error(err.clone())]));
    let recorder = Recorder::create(model, &path).unwrap();
    assert_eq!(step(&recorder, &request("x")).await.0.unwrap_err(), err);
    drop(recorder);
    let replay = Replayer::from_file(&path).unwrap();
    assert_eq!(step(&replay, &request("x")).await.0.unwrap_err(), err);
}

#[tokio::test]
async fn concurrent_steps_are_recorded_as_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir, "many.jsonl");
    let long = "x".repeat(20_000);
    let model: Arc<dyn Model> =
        Arc::new(ScriptedModel::new().otherwise(vec![ScriptStep::text(long.clone())]));
    let recorder = Recorder::create(model, &path).unwrap();
    let reqs: Vec<ModelRequest> = (0..24)
        .map(|i| request(&format!("conversation {i}")))
        .collect();
    let results = futures::future::join_all(reqs.iter().map(|r| step(&recorder, r))).await;
    assert!(results.iter().all(|(r, _)| r.is_ok()));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut seqs: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    seqs.sort();
    assert_eq!(seqs, (0..24).collect::<Vec<u64>>());
    let replay = Replayer::from_file(&path).unwrap();
    for r in reqs.iter().rev() {
        assert_eq!(step(&replay, r).await.0.unwrap().message.content, long);
    }
}

#[test]
fn bad_recordings_are_typed_errors_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = temp_path(&dir, "missing.jsonl");
    assert!(
        matches!(Replayer::from_file(&missing), Err(RecordError::Open { path, .. }) if path == missing)
    );

    let empty = temp_path(&dir, "empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    assert!(matches!(
        Replayer::from_file(&empty),
        Err(RecordError::Empty { .. })
    ));

    let good = json!({"seq": 0, "provider": "p", "request": request("a"),
        "response": {"message": {"role": "assistant", "content": "ok"}, "usage": null, "finish_reason": "stop"}});
    let bad = temp_path(&dir, "bad.jsonl");
    std::fs::write(&bad, format!("{good}\n{{\"seq\": 1, \"request\": 5}}\n")).unwrap();
    let e = Replayer::from_file(&bad).unwrap_err();
    assert!(matches!(&e, RecordError::BadLine { line: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("bad.jsonl:2"), "{e}");

    let neither = temp_path(&dir, "neither.jsonl");
    let mut no_outcome = good.clone();
    no_outcome.as_object_mut().unwrap().remove("response");
    std::fs::write(&neither, format!("{no_outcome}\n")).unwrap();
    assert!(matches!(
        Replayer::from_file(&neither),
        Err(RecordError::BadLine { line: 1, .. })
    ));

    let ok = temp_path(&dir, "ok.jsonl");
    std::fs::write(&ok, format!("{good}\n")).unwrap();
    assert_eq!(Replayer::from_file(&ok).unwrap().len(), 1);
}

#[tokio::test]
async fn recording_to_an_unwritable_place_fails_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    let model: Arc<dyn Model> = Arc::new(ScriptedModel::new());
    let e = Recorder::create(model, dir.path().join("no/such/dir/run.jsonl")).unwrap_err();
    assert!(matches!(e, RecordError::Open { .. }), "{e:?}");
}
