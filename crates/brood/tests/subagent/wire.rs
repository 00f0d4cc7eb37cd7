//! What a session's parent and children put on the wire, against brood-mock: the
//! tool-choice policy (session-wide, and `[subagents]` overrides for children only)
//! and hybrid routing (a fixed parent model, children on a configured endpoint).

use brood::ledger::{ListFilter, RunStatus};
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::{FinishReason, Message, ModelResponse, Role};
use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::session::{ModelSource, Session, SessionOptions};
use brood_mock::{MockReply, MockRequest, MockServer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

const REPORT: &str = "SUMMARY: looked.\nCHANGES: None.\nEVIDENCE:\n- a.txt:1-1 the line\nRISKS: None.\nBLOCKERS: None.";

fn options(dir: &Path, toml: &str, env: &[(&str, &str)]) -> SessionOptions {
    std::fs::write(dir.join("a.txt"), "hello\n").unwrap();
    std::fs::create_dir_all(dir.join(".brood")).unwrap();
    std::fs::write(dir.join(".brood/config.toml"), toml).unwrap();
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let paths = ConfigPaths {
        user_dir: None,
        workspace: dir.to_path_buf(),
    };
    let config = Config::load(
        &paths,
        &env,
        &Overrides {
            // The test's own workspace sets the endpoint.
            trust_workspace: true,
            ..Overrides::default()
        },
    )
    .unwrap();
    let mut opts = SessionOptions::new(dir, config);
    opts.env = env;
    opts
}

/// The `tool_choice` of each request of the conversation that starts with `user`,
/// in order (`None`: the field was not sent).
fn choices(server: &MockServer, user: &str) -> Vec<Option<Value>> {
    let mut reqs: Vec<MockRequest> = server
        .captured()
        .into_iter()
        .filter(|r| r.first_user_text() == Some(user))
        .collect();
    reqs.sort_by_key(|r| r.assistant_turns());
    reqs.iter()
        .map(|r| r.body().get("tool_choice").cloned())
        .collect()
}

fn named(tool: &str) -> Option<Value> {
    Some(json!({"type": "function", "function": {"name": tool}}))
}

fn live_config(server: &MockServer, extra: &str) -> String {
    format!(
        "provider = \"local\"\nbase_url = \"{}\"\nmodel = \"m\"\n{extra}",
        server.base_url()
    )
}

#[tokio::test]
async fn children_inherit_the_session_tool_choice_policy_on_the_wire() {
    let server = MockServer::start(|req| match (req.first_user_text(), req.assistant_turns()) {
        (Some("parent"), 0) => MockReply::tool_call("read_file", json!({"path": "a.txt"})),
        (Some("parent"), 1) => {
            MockReply::tool_call("task", json!({"prompts": ["child one", "child two"]}))
        }
        (Some("parent"), _) => MockReply::text("done"),
        (_, 0) => MockReply::tool_call("read_file", json!({"path": "a.txt"})),
        _ => MockReply::text(REPORT),
    });
    let dir = tempfile::tempdir().unwrap();
    let toml = live_config(
        &server,
        "first_tool_choice = \"read_file\"\ntool_choice = \"auto\"\n",
    );
    let session = Session::open(options(dir.path(), &toml, &[]))
        .await
        .unwrap();
    let report = session
        .run_with("parent", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.final_text, "done", "{report:?}");
    let auto = Some(json!("auto"));
    assert_eq!(
        choices(&server, "parent"),
        vec![named("read_file"), auto.clone(), auto.clone()]
    );
    for child in ["child one", "child two"] {
        assert_eq!(
            choices(&server, child),
            vec![named("read_file"), auto.clone()],
            "{child}"
        );
    }
    session.close().await;
}

#[tokio::test]
async fn subagents_tool_choice_overrides_apply_to_children_only() {
    let server = MockServer::start(|req| match (req.first_user_text(), req.assistant_turns()) {
        (Some("parent"), 0) => {
            MockReply::tool_call("task", json!({"prompts": ["child one", "child two"]}))
        }
        (Some("parent"), _) => MockReply::text("done"),
        (_, 0) => MockReply::tool_call("read_file", json!({"path": "a.txt"})),
        (Some("child two"), 1) => MockReply::text("no sections at all"),
        _ => MockReply::text(REPORT),
    });
    let dir = tempfile::tempdir().unwrap();
    let toml = live_config(
        &server,
        "tool_choice = \"auto\"\n[subagents]\ntool_choice = \"none\"\n",
    );
    let env = [("BROOD_SUBAGENT_FIRST_TOOL_CHOICE", "read_file")];
    let session = Session::open(options(dir.path(), &toml, &env))
        .await
        .unwrap();
    let report = session
        .run_with("parent", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.final_text, "done", "{report:?}");
    let auto = Some(json!("auto"));
    let none = Some(json!("none"));
    assert_eq!(choices(&server, "parent"), vec![auto.clone(), auto]);
    assert_eq!(
        choices(&server, "child one"),
        vec![named("read_file"), none.clone()]
    );
    // The contract repair step offers no tools, so it sends no tool_choice (a forced
    // first tool there would be refused as not offered).
    assert_eq!(
        choices(&server, "child two"),
        vec![named("read_file"), none, None]
    );
    let repair = server
        .captured()
        .into_iter()
        .find(|r| r.first_user_text() == Some("child two") && r.assistant_turns() == 2)
        .unwrap();
    assert!(repair.body().get("tools").is_none(), "{}", repair.body());
    session.close().await;
}

/// The parent's step that receives the task results, captured.
fn scripted_parent(seen: Arc<Mutex<Option<String>>>) -> ScriptedModel {
    ScriptedModel::new().on(
        "parent",
        vec![
            ScriptStep::tool_call("task", json!({"prompts": ["child one", "child two"]})),
            ScriptStep::func(move |req| {
                let last = req.messages.last().unwrap();
                assert_eq!(last.role, Role::Tool);
                *seen.lock().unwrap() = Some(last.content.clone());
                Ok(ModelResponse {
                    message: Message::assistant("done"),
                    usage: None,
                    finish_reason: FinishReason::Stop,
                })
            }),
        ],
    )
}

const HYBRID: &str = "[subagents]\nsubagent_provider = \"local\"\nsubagent_model = \"tiny-local\"\n[providers.local]\nbase_url = \"URL\"\n";

#[tokio::test]
async fn fixed_main_keeps_the_parent_scripted_and_sends_children_to_the_configured_endpoint() {
    // The mock lists only "mock-model": the local preset must not ask (llama.cpp
    // accepts any name), or the spawn of "tiny-local" would be refused.
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::text(REPORT),
        _ => MockReply::status(400, "a child needed one step only"),
    });
    let dir = tempfile::tempdir().unwrap();
    let toml = HYBRID.replace("URL", &server.base_url());
    let mut opts = options(dir.path(), &toml, &[]);
    let seen = Arc::new(Mutex::new(None));
    opts.models = ModelSource::FixedMain(Arc::new(scripted_parent(seen.clone())));
    let session = Session::open(opts).await.unwrap();
    let report = session
        .run_with("parent", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.final_text, "done", "{report:?}");

    // Only the children reached the endpoint, with the configured model id.
    let reqs = server.captured();
    let mut users: Vec<&str> = reqs.iter().filter_map(|r| r.first_user_text()).collect();
    users.sort();
    assert_eq!(users, ["child one", "child two"]);
    assert!(reqs.iter().all(|r| r.model() == "tiny-local"));

    // The ledger says where each run ran; results come back in prompt order.
    let runs = session
        .ledger()
        .list_runs(ListFilter::default())
        .await
        .unwrap();
    let objective_of = |id: &str| {
        runs.iter()
            .find(|r| r.run.id.as_str() == id)
            .map(|r| r.run.objective.clone())
            .unwrap()
    };
    let parent = runs.iter().find(|r| r.run.parent_id.is_none()).unwrap();
    assert_eq!(parent.run.provider.as_deref(), Some("scripted"));
    let children: Vec<_> = runs.iter().filter(|r| r.run.parent_id.is_some()).collect();
    assert_eq!(children.len(), 2);
    for c in &children {
        assert_eq!(c.run.provider.as_deref(), Some("local"));
        assert_eq!(c.run.model.as_deref(), Some("tiny-local"));
        assert_eq!(c.run.status, RunStatus::Completed);
    }
    let results: Value = serde_json::from_str(seen.lock().unwrap().as_deref().unwrap()).unwrap();
    let results = results["results"].as_array().unwrap();
    for (i, prompt) in ["child one", "child two"].iter().enumerate() {
        assert_eq!(results[i]["index"], json!(i));
        assert_eq!(results[i]["status"], json!("completed"));
        assert_eq!(
            objective_of(results[i]["agent_id"].as_str().unwrap()),
            *prompt
        );
    }
    session.close().await;
}

#[tokio::test]
async fn fixed_still_pins_every_route_to_the_given_model() {
    let server = MockServer::start(|_| MockReply::text(REPORT));
    let dir = tempfile::tempdir().unwrap();
    let toml = HYBRID.replace("URL", &server.base_url());
    let mut opts = options(dir.path(), &toml, &[]);
    let seen = Arc::new(Mutex::new(None));
    let model = scripted_parent(seen.clone()).on("child", vec![ScriptStep::text(REPORT)]);
    opts.models = ModelSource::Fixed(Arc::new(model));
    let session = Session::open(opts).await.unwrap();
    let report = session
        .run_with("parent", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.final_text, "done", "{report:?}");
    assert_eq!(server.request_count(), 0);
    session.close().await;
}

#[tokio::test]
async fn providers_lists_models_turns_the_spawn_check_back_on() {
    // The same hybrid config, but the endpoint is said to list its models (a router
    // in front of llama.cpp): a child asking for an unlisted id is refused at spawn,
    // naming what the endpoint accepts, and never reaches it.
    let server = MockServer::start(|_| MockReply::text(REPORT));
    let dir = tempfile::tempdir().unwrap();
    let toml = HYBRID.replace("URL", &server.base_url()) + "lists_models = true\n";
    let mut opts = options(dir.path(), &toml, &[]);
    let seen = Arc::new(Mutex::new(None));
    opts.models = ModelSource::FixedMain(Arc::new(scripted_parent(seen.clone())));
    let session = Session::open(opts).await.unwrap();
    let report = session
        .run_with("parent", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.final_text, "done", "{report:?}");
    assert_eq!(server.request_count(), 0);
    let results: Value = serde_json::from_str(seen.lock().unwrap().as_deref().unwrap()).unwrap();
    for r in results["results"].as_array().unwrap() {
        assert_eq!(r["status"], json!("failed"), "{r}");
        let error = r["error"].as_str().unwrap_or("");
        assert!(
            error.contains("unknown model 'tiny-local'") && error.contains("mock-model"),
            "{error}"
        );
    }
    session.close().await;
}
