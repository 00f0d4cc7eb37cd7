//! brood as a library: what an embedding program writes, through the crate root only.

use async_trait::async_trait;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::{Capability, Session, Tool, ToolContext, ToolError};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// The embedder's tool: answers the weather and remembers which run asked.
struct Weather(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "weather"
    }
    fn description(&self) -> &str {
        "The weather in a city."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        self.0.lock().unwrap().push(ctx.run_id.clone());
        Ok(format!("sunny in {}", args["city"].as_str().unwrap_or("?")))
    }
}

fn report(summary: &str) -> String {
    format!("SUMMARY: {summary}\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: None.")
}

#[tokio::test]
async fn an_embedder_adds_a_tool_and_a_model_and_both_parent_and_child_call_the_tool() {
    let model = ScriptedModel::new()
        .on(
            "CHILD",
            vec![
                ScriptStep::tool_call("weather", json!({"city": "Bergen"})),
                ScriptStep::text(report("Bergen is sunny.")),
            ],
        )
        .otherwise(vec![
            ScriptStep::tool_call("weather", json!({"city": "Oslo"})),
            ScriptStep::tool_call(
                "task",
                json!({"prompts": ["CHILD: check Bergen"], "agent_type": "forecaster"}),
            ),
            ScriptStep::text("Both are sunny."),
        ]);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let dir = tempfile::tempdir().unwrap();
    // A child definition granted the embedder's tool by name.
    std::fs::create_dir_all(dir.path().join(".brood/agents")).unwrap();
    std::fs::write(
        dir.path().join(".brood/agents/forecaster.md"),
        "---\ndescription: Checks the weather.\ntools: weather\nrole: custom\n---\nForecast.\n",
    )
    .unwrap();

    // The embedding program: this is all it takes.
    let session = Session::builder(dir.path())
        .model(model)
        .tool(Weather(calls.clone()))
        .build()
        .await
        .unwrap();
    let report = session
        .ask("PARENT: weather in Oslo and Bergen")
        .await
        .unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(report.final_text, "Both are sunny.");

    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls.len(),
        2,
        "parent and child each call the tool: {calls:?}"
    );
    assert_eq!(calls[0], report.run_id, "the parent called it first");
    assert_ne!(
        calls[1], report.run_id,
        "the child called it from its own run"
    );
    session.close().await;
}

#[tokio::test]
async fn a_tool_that_shadows_a_built_in_name_is_refused_with_its_name() {
    struct Shadow;
    #[async_trait]
    impl Tool for Shadow {
        fn name(&self) -> &str {
            "read_file"
        }
        fn description(&self) -> &str {
            "not the real one"
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn capability(&self) -> Capability {
            Capability::Read
        }
        async fn call(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let err = match Session::builder(dir.path())
        .model(ScriptedModel::new())
        .tool(Shadow)
        .build()
        .await
    {
        Ok(_) => panic!("a shadowing tool was accepted"),
        Err(e) => e,
    };
    assert!(
        matches!(err, brood::Error::ToolName { ref name } if name == "read_file"),
        "{err}"
    );
    assert!(err.is_usage());
}

/// Reads `events` until the root run (no parent) ends; fails on a hang.
async fn events_of_one_root(mut events: brood::EventStream) -> Vec<brood::RunEvent> {
    use futures::StreamExt;
    let mut seen = Vec::new();
    let read = async {
        while let Some(event) = events.next().await {
            match event {
                brood::Event::Run(e) => {
                    let root_end = e.parent_id.is_none() && e.kind.is_terminal();
                    seen.push(e);
                    if root_end {
                        return;
                    }
                }
                other => panic!("no lag expected for a subscriber that keeps up: {other:?}"),
            }
        }
        panic!("the stream ended before the root did");
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("the root's end within 30 s");
    seen
}

#[tokio::test]
async fn the_event_stream_shows_each_child_spawned_under_its_parent_and_completed_in_order() {
    use brood::RunEventKind as K;
    let model = ScriptedModel::new()
        .on("CHILD", vec![ScriptStep::text(report("done."))])
        .otherwise(vec![
            ScriptStep::tool_call("task", json!({"prompts": ["CHILD one", "CHILD two"]})),
            ScriptStep::text("Both done."),
        ]);
    let dir = tempfile::tempdir().unwrap();
    let session = Session::builder(dir.path())
        .model(model)
        .build()
        .await
        .unwrap();
    let collector = tokio::spawn(events_of_one_root(session.events()));
    let report = session.ask("PARENT: two children").await.unwrap();
    let events = collector.await.unwrap();

    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "seq is stream order"
    );
    let root = &report.run_id;
    let at = |pred: &dyn Fn(&brood::RunEvent) -> bool| events.iter().position(pred);
    let root_spawn = at(&|e| &e.run_id == root && matches!(e.kind, K::Spawned { .. }))
        .expect("the root's spawn");
    assert_eq!(events[root_spawn].role, "parent");
    let task_call =
        at(&|e| &e.run_id == root && matches!(&e.kind, K::ToolCall { name, .. } if name == "task"))
            .expect("the parent's task call");
    let root_end = events.len() - 1;
    assert_eq!(&events[root_end].run_id, root);
    assert!(
        matches!(&events[root_end].kind, K::Completed { final_text } if final_text == "Both done.")
    );

    let children: Vec<&brood::RunEvent> = events
        .iter()
        .filter(|e| e.parent_id.is_some() && matches!(e.kind, K::Spawned { .. }))
        .collect();
    assert_eq!(children.len(), 2, "two children spawned: {events:#?}");
    let mut objectives = Vec::new();
    for child in children {
        assert_eq!(child.parent_id.as_deref(), Some(root.as_str()));
        assert_eq!(&child.root_id, root);
        assert!(!child.model.is_empty());
        if let K::Spawned { objective, .. } = &child.kind {
            objectives.push(objective.clone());
        }
        let spawn =
            at(&|e| e.run_id == child.run_id && matches!(e.kind, K::Spawned { .. })).unwrap();
        let end =
            at(&|e| e.run_id == child.run_id && e.kind.is_terminal()).expect("the child's end");
        assert!(
            matches!(events[end].kind, K::Completed { .. }),
            "{:?}",
            events[end]
        );
        assert_eq!(events[end].parent_id.as_deref(), Some(root.as_str()));
        assert!(
            task_call < spawn && spawn < end && end < root_end,
            "order: task call {task_call}, spawn {spawn}, end {end}, root end {root_end}"
        );
        assert!(
            at(&|e| e.run_id == child.run_id && matches!(e.kind, K::Started))
                .is_some_and(|s| spawn < s && s < end)
        );
    }
    objectives.sort();
    assert_eq!(objectives, ["CHILD one", "CHILD two"]);
    session.close().await;
}

#[tokio::test]
async fn a_run_handle_names_its_run_and_its_events_keep_to_its_own_tree() {
    let model = ScriptedModel::new()
        .on("CHILD", vec![ScriptStep::text(report("done."))])
        .on(
            "FIRST",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["CHILD of first"]})),
                ScriptStep::text("first done"),
            ],
        )
        .otherwise(vec![ScriptStep::text("second done")]);
    let dir = tempfile::tempdir().unwrap();
    let session = Session::builder(dir.path())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut first = session.run("FIRST: delegate");
    let mut second = session.run("SECOND: answer");
    assert_ne!(first.id(), second.id());
    let (first_events, second_events) = (first.events(), second.events());
    let first_id = first.id().to_string();
    let (a, b) = tokio::join!(first, second);
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.run_id, first_id);
    assert_eq!(
        (a.final_text.as_str(), b.final_text.as_str()),
        ("first done", "second done")
    );

    let a_events = events_of_one_root(first_events).await;
    let b_events = events_of_one_root(second_events).await;
    assert!(
        a_events.iter().all(|e| e.root_id == a.run_id),
        "{a_events:#?}"
    );
    assert!(
        b_events.iter().all(|e| e.root_id == b.run_id),
        "{b_events:#?}"
    );
    assert!(
        a_events
            .iter()
            .any(|e| e.parent_id.as_deref() == Some(a.run_id.as_str())
                && matches!(e.kind, brood::RunEventKind::Spawned { .. })),
        "the first run's child is in its tree"
    );
    assert!(
        matches!(a_events[0].kind, brood::RunEventKind::Spawned { .. }),
        "the first events() call sees the spawn"
    );
    session.close().await;
}

#[tokio::test]
async fn cancelling_a_run_handle_ends_the_run_cancelled_with_the_reason() {
    use futures::StreamExt;
    // The model never answers in time: only the cancel ends this run.
    let model = ScriptedModel::new().otherwise(vec![
        ScriptStep::text("too late").after(std::time::Duration::from_secs(600))
    ]);
    let dir = tempfile::tempdir().unwrap();
    let session = Session::builder(dir.path())
        .model(model)
        .build()
        .await
        .unwrap();
    let mut run = session.run("PARENT: wait");
    let mut events = run.events();
    // Cancel once the first step is on its way.
    while let Some(e) = events.next().await {
        if matches!(e, brood::Event::Run(ref e) if matches!(e.kind, brood::RunEventKind::Step { .. }))
        {
            break;
        }
    }
    run.cancel();
    let report = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("the cancelled run reports within 30 s")
        .unwrap();
    assert!(!report.succeeded());
    assert_eq!(
        report.error.as_deref(),
        Some("cancelled: cancelled by the embedding program")
    );
    let end = events_of_one_root(events).await;
    assert!(
        matches!(&end.last().unwrap().kind, brood::RunEventKind::Cancelled { reason } if reason.contains("embedding program")),
        "{end:#?}"
    );
    session.close().await;
}

/// An approver that answers from a list and keeps every request it was asked.
struct Scripted {
    asked: Arc<Mutex<Vec<brood::ApprovalRequest>>>,
    answer: brood::Approval,
}

#[async_trait]
impl brood::Approver for Scripted {
    async fn approve(&self, request: &brood::ApprovalRequest) -> brood::Approval {
        self.asked.lock().unwrap().push(request.clone());
        self.answer.clone()
    }
}

/// A step that keeps the tool results the model was shown, then answers `text`.
fn remember_tool_results(seen: Arc<Mutex<Vec<String>>>, text: String) -> ScriptStep {
    ScriptStep::func(move |req| {
        seen.lock().unwrap().extend(
            req.messages
                .iter()
                .filter(|m| m.role == brood::model::Role::Tool)
                .map(|m| m.content.clone()),
        );
        Ok(brood::ModelResponse {
            message: brood::model::Message::assistant(text.clone()),
            usage: None,
            finish_reason: brood::model::FinishReason::Stop,
        })
    })
}

#[tokio::test]
async fn a_childs_marked_call_reaches_the_sessions_approver_and_its_denial_reaches_the_model() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .on(
            "CHILD",
            vec![
                ScriptStep::tool_call("write_file", json!({"path": "out.txt", "content": "x"})),
                remember_tool_results(seen.clone(), report("could not write.")),
            ],
        )
        .otherwise(vec![
            ScriptStep::tool_call(
                "task",
                json!({"prompts": ["CHILD: write out.txt"], "agent_type": "general"}),
            ),
            ScriptStep::text("done"),
        ]);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let dir = tempfile::tempdir().unwrap();
    let session = Session::builder(dir.path())
        .model(model)
        .ask_before(["write_file"])
        .approver(Scripted {
            asked: asked.clone(),
            answer: brood::Approval::Deny {
                reason: "no writes today; report instead".into(),
            },
        })
        .build()
        .await
        .unwrap();
    let report = session.ask("PARENT: delegate a write").await.unwrap();

    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let q = &asked[0];
    assert_ne!(q.run_id, report.run_id, "the child asked");
    assert_eq!(
        q.lineage,
        vec![report.run_id.clone()],
        "its lineage is its parent"
    );
    assert_eq!(
        (q.role.as_str(), q.agent_type.as_str()),
        ("general", "general")
    );
    assert_eq!(
        (q.tool.as_str(), &q.arguments["path"]),
        ("write_file", &json!("out.txt"))
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|r| r.contains("no writes today; report instead")),
        "the child's model reads the reason: {seen:?}"
    );
    assert!(
        !dir.path().join("out.txt").exists(),
        "the denied write did not happen"
    );
    session.close().await;
}

#[tokio::test]
async fn allow_for_session_is_asked_once_and_without_an_approver_a_marked_call_is_refused() {
    let model = || {
        ScriptedModel::new().otherwise(vec![
            ScriptStep::tool_call("write_file", json!({"path": "a.txt", "content": "a"})),
            ScriptStep::tool_call("write_file", json!({"path": "b.txt", "content": "b"})),
            ScriptStep::text("wrote both"),
        ])
    };
    let asked = Arc::new(Mutex::new(Vec::new()));
    let dir = tempfile::tempdir().unwrap();
    let session = Session::builder(dir.path())
        .model(model())
        .ask_before(["write_file"])
        .approver(Scripted {
            asked: asked.clone(),
            answer: brood::Approval::AllowForSession,
        })
        .build()
        .await
        .unwrap();
    session.ask("PARENT: write two files").await.unwrap();
    assert_eq!(asked.lock().unwrap().len(), 1, "asked once for the session");
    assert!(dir.path().join("a.txt").exists() && dir.path().join("b.txt").exists());
    session.close().await;

    // No approver: refused, and the model is told why.
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new().otherwise(vec![
        ScriptStep::tool_call("write_file", json!({"path": "a.txt", "content": "a"})),
        remember_tool_results(seen.clone(), "gave up".into()),
    ]);
    let session = Session::builder(dir.path())
        .model(model)
        .ask_before(["write_file"])
        .build()
        .await
        .unwrap();
    session.ask("PARENT: write").await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|r| r.contains("no approver")), "{seen:?}");
    assert!(!dir.path().join("a.txt").exists());
    session.close().await;

    // A name the session has no tool for is a usage error naming the accepted ones.
    let err = Session::builder(dir.path())
        .model(ScriptedModel::new())
        .ask_before(["rm_rf"])
        .build()
        .await
        .err()
        .expect("an unknown ask_before name is refused");
    assert!(
        matches!(&err, brood::Error::AskUnknownTool { name, accepted } if name == "rm_rf" && accepted.iter().any(|a| a == "bash")),
        "{err}"
    );
    assert!(err.is_usage());
}

/// The embedder's own model: asks for the weather, then answers with what it got.
struct OwnModel;

#[async_trait]
impl brood::Model for OwnModel {
    fn provider_name(&self) -> &str {
        "own"
    }
    async fn step(
        &self,
        request: &brood::ModelRequest,
        on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::ModelResponse, brood::ModelError> {
        use brood::model::{FinishReason, Message, Role, ToolCall};
        let result = request.messages.iter().find(|m| m.role == Role::Tool);
        let mut message = Message::assistant(match result {
            Some(r) => format!("It is {}.", r.content),
            None => String::new(),
        });
        if result.is_none() {
            message.tool_calls.push(ToolCall {
                id: "call_1".into(),
                name: "weather".into(),
                arguments: json!({"city": "Oslo"}).to_string(),
            });
        }
        let response = brood::ModelResponse {
            message,
            usage: None,
            finish_reason: FinishReason::Stop,
        };
        brood::model::emit_response_events(&response, on_event);
        Ok(response)
    }
}

#[tokio::test]
async fn an_embedder_brings_its_own_model_and_tool_in_a_few_lines() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    // The user code: open, ask, close.
    let session = Session::builder(dir.path())
        .model(OwnModel)
        .tool(Weather(calls.clone()))
        .build()
        .await
        .unwrap();
    let report = session.ask("Weather in Oslo?").await.unwrap();
    session.close().await;

    assert_eq!(report.final_text, "It is sunny in Oslo.");
    assert_eq!(report.tool_calls, 1);
    assert_eq!(*calls.lock().unwrap(), vec![report.run_id.clone()]);
}

/// A session on the scripted model named `model`, priced by `pricing` (a
/// `[pricing]` table), whose parent fans out to two children.
async fn priced_session(dir: &std::path::Path, model: &str, pricing: &str) -> Session {
    let scripted = ScriptedModel::new()
        .on("CHILD", vec![ScriptStep::text(report("done."))])
        .otherwise(vec![
            ScriptStep::tool_call("task", json!({"prompts": ["CHILD one", "CHILD two"]})),
            ScriptStep::text("Both done."),
        ]);
    let paths = brood::runtime::config::ConfigPaths {
        user_dir: None,
        workspace: dir.to_path_buf(),
    };
    let overrides = brood::runtime::config::Overrides {
        model: Some(model.to_string()),
        ..Default::default()
    };
    let mut config = brood::runtime::config::Config::load(
        &paths,
        &std::collections::BTreeMap::new(),
        &overrides,
    )
    .unwrap();
    config.pricing =
        brood::model::pricing::Pricing::from_table(&toml::from_str(pricing).unwrap()).unwrap();
    Session::builder(dir)
        .config(config)
        .model(scripted)
        .build()
        .await
        .unwrap()
}

/// Every `Usage` event of `events`: (input, cached input, output, cost).
fn usage_events(events: &[brood::RunEvent]) -> Vec<(u64, u64, u64, Option<f64>)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            brood::RunEventKind::Usage {
                input_tokens,
                cached_input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => Some((input_tokens, cached_input_tokens, output_tokens, cost_usd)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn each_usage_event_carries_its_steps_cost_at_the_users_price_and_they_sum_to_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let session = priced_session(
        dir.path(),
        "priced-model",
        "[\"priced-model\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 10.0\n",
    )
    .await;
    let collector = tokio::spawn(events_of_one_root(session.events()));
    let report = session.ask("PARENT: two children").await.unwrap();
    let usages = usage_events(&collector.await.unwrap());
    // Two parent steps and one step per child, each reported with its usage.
    assert_eq!(usages.len(), 4, "{usages:?}");
    let mut sum = 0.0;
    for (input, cached, output, cost) in &usages {
        assert_eq!(*cached, 0);
        assert!(*input > 0 && *output > 0);
        let want = (*input as f64 * 2.0 + *output as f64 * 10.0) / 1e6;
        let got = cost.expect("a priced model's step has a cost");
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        sum += got;
    }
    let total = report.usage.cost_usd.expect("the tree is priced");
    assert!(
        (total - sum).abs() < 1e-12,
        "report {total} vs events {sum}"
    );
    session.close().await;
}

#[tokio::test]
async fn a_usage_event_of_an_unpriced_model_has_no_cost_never_zero() {
    let dir = tempfile::tempdir().unwrap();
    // Priced: another model only.
    let session = priced_session(
        dir.path(),
        "unpriced-model",
        "[\"other-model\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 10.0\n",
    )
    .await;
    let collector = tokio::spawn(events_of_one_root(session.events()));
    let report = session.ask("PARENT: two children").await.unwrap();
    let usages = usage_events(&collector.await.unwrap());
    assert_eq!(usages.len(), 4, "{usages:?}");
    assert!(usages.iter().all(|u| u.3.is_none()), "{usages:?}");
    assert_eq!(report.usage.cost_usd, None);
    session.close().await;
}
