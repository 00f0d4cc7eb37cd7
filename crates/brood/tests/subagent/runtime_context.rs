//! Sub-agent runtime, end to end: what a child's requests look like — a fork's
//! byte-identical prefix, fresh contexts, the output contract's repair turn and
//! evidence check, and which model each child asks for.

use crate::common::*;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::ToolChoice;
use brood_mock::{MockReply, MockRequest, MockServer};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn fork_at(req: &MockRequest) -> Option<usize> {
    req.messages().iter().position(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.contains("--- fork:"))
    })
}

fn is_fork(req: &MockRequest) -> bool {
    fork_at(req).is_some()
}

/// A forked child's own step: assistant messages after the fork tail.
fn fork_step(req: &MockRequest) -> usize {
    let at = fork_at(req).unwrap_or(0);
    req.messages()[at..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count()
}

#[tokio::test]
async fn a_forked_child_repeats_the_parent_request_byte_for_byte_and_keeps_its_grant() {
    let server = MockServer::start(|req| {
        let step = req.assistant_turns();
        if is_fork(req) {
            return match fork_step(req) {
                0 => MockReply::tool_calls([
                    ("write_file", json!({"path": "x.txt", "content": "x"})),
                    ("task", json!({"description": "grandchild"})),
                ]),
                _ => MockReply::text(report("forked child done")),
            };
        }
        match step {
            0 => MockReply::tool_call("list_dir", json!({"path": "."})),
            1 => MockReply::tool_call(
                "task",
                json!({"prompts": ["forked: try to write x.txt"], "agent_type": "explore", "fork_context": true}),
            ),
            _ => MockReply::text("parent done"),
        }
    });
    server.set_models(["mock-model", "x-explorer"]);
    let ws = workspace("");
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    // A routed explore model does not apply to a fork: it keeps the parent's route.
    // The parent forks at its second step, so a first-step tool choice must not
    // leak into the fork's (otherwise identical) request.
    let session = mock_session(
        ws.path(),
        &server.base_url(),
        "first_tool_choice = \"list_dir\"\n[subagents]\nexplorer_model = \"x-explorer\"\n",
        None,
    )
    .await;
    let out = session
        .run_with("parent: fork a child", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "parent done", "{out:?}");

    let captured = server.captured();
    // The parent's request that answered with the `task` call: its second.
    let fork_point = captured
        .iter()
        .find(|r| !is_fork(r) && r.assistant_turns() == 1)
        .unwrap();
    let child_first = captured
        .iter()
        .find(|r| is_fork(r) && fork_step(r) == 0)
        .unwrap();
    let parent_raw = &fork_point.raw;
    assert!(parent_raw.ends_with(b"]}"), "messages are serialized last");
    let prefix = &parent_raw[..parent_raw.len() - 2];
    assert!(
        child_first.raw.starts_with(prefix),
        "the fork's request does not start with the parent's:\nparent: {}\nchild:  {}",
        String::from_utf8_lossy(parent_raw),
        String::from_utf8_lossy(&child_first.raw)
    );
    assert_eq!(child_first.model(), "mock-model");
    // One message follows: the fork tail with the role, the state and the task.
    let tail = child_first.last_message().unwrap()["content"]
        .as_str()
        .unwrap();
    assert!(tail.contains("explore") && tail.contains("forked: try to write x.txt"));
    assert_eq!(
        child_first.messages().len(),
        fork_point.messages().len() + 1
    );

    // Offered the parent's tools, refused at execution.
    let child_second = captured
        .iter()
        .find(|r| is_fork(r) && fork_step(r) == 1)
        .unwrap();
    let msgs = child_second.messages();
    for (result, tool) in msgs[msgs.len() - 2..].iter().zip(["write_file", "task"]) {
        let refusal = result["content"].as_str().unwrap();
        assert!(
            refusal.starts_with("error:")
                && refusal.contains(tool)
                && refusal.contains("not allowed for explore"),
            "{refusal}"
        );
    }
    assert!(!ws.path().join("x.txt").exists());
    session.close().await;
}

#[tokio::test]
async fn a_fresh_child_sees_only_its_role_prompt_and_task() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call(
                    "task",
                    json!({"prompts": ["fresh: look"], "agent_type": "review"}),
                ),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("looked"))]);
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    session
        .run_with("parent: secret context", None, CancellationToken::new())
        .await
        .unwrap();
    let child = &probe.requests_for("fresh: look")[0];
    assert_eq!(child.messages.len(), 1, "{}", dump(&child.messages));
    assert_eq!(child.messages[0].content, "fresh: look");
    assert!(!child.system.contains("secret context"));
    for section in ["SUMMARY", "CHANGES", "EVIDENCE", "RISKS", "BLOCKERS"] {
        assert!(child.system.contains(section), "contract missing {section}");
    }
    session.close().await;
}

const SRC: &str = "line one\nline two\nline three\n";

#[tokio::test]
async fn the_contract_gets_one_repair_turn_and_evidence_is_checked() {
    // A configured tool choice must not reach the tool-less repair turn (a request
    // with `tool_choice` and no tools is refused by real servers).
    let ws = workspace("tool_choice = \"required\"\n");
    std::fs::write(ws.path().join("src.txt"), SRC).unwrap();
    let good = "SUMMARY: src.txt is fine.\nCHANGES: None.\nEVIDENCE:\n\
                - src.txt:1-2 the first lines\n- src.txt:5-9 past the end\n\
                RISKS: None.\nBLOCKERS: None.";
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call(
                    "task",
                    json!({"prompts": [
                        "repairable: check src",
                        "stubborn: check src",
                        "toolish: check src"
                    ]}),
                ),
                ScriptStep::text("done"),
            ],
        )
        .on(
            "repairable:",
            vec![
                ScriptStep::text("I looked at src.txt and it is fine."),
                ScriptStep::text(good),
                ScriptStep::text("a third answer nobody asked for"),
            ],
        )
        .on(
            "toolish:",
            vec![
                ScriptStep::text("Fine."),
                // Asked for the format, it calls a tool instead: no second repair.
                ScriptStep::tool_call("list_dir", json!({"path": "."})),
                ScriptStep::text("a third answer nobody asked for"),
            ],
        )
        .on(
            "stubborn:",
            vec![
                ScriptStep::text("It is fine."),
                ScriptStep::text("Still fine, no format."),
                ScriptStep::text("a third answer nobody asked for"),
            ],
        );
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    session
        .run_with("parent: contract", None, CancellationToken::new())
        .await
        .unwrap();

    // Exactly one repair turn each, asking for the format.
    for who in ["repairable:", "stubborn:", "toolish:"] {
        let reqs = probe.requests_for(who);
        assert_eq!(reqs.len(), 2, "{who}");
        let last = reqs[1].messages.last().unwrap();
        assert!(last.content.contains("SUMMARY") && last.content.contains("report format"));
        assert!(reqs[1].tools.is_empty(), "the repair turn offers no tools");
        assert_eq!(reqs[0].tool_choice, Some(ToolChoice::Required));
        assert_eq!(reqs[1].tool_choice, None, "{who}");
    }
    let parent = probe.requests_for("parent:");
    let task = last_tool_json(&parent[1]);
    let repaired = task["results"][0]["result"].as_str().unwrap();
    assert!(repaired.contains("SUMMARY: src.txt is fine."), "{repaired}");
    assert_eq!(task["results"][1]["status"], "completed");
    assert_eq!(task["results"][2]["status"], "completed");
    assert!(task["results"][2]["result"]
        .as_str()
        .unwrap()
        .contains("Fine."));

    // The record holds the parsed report with each citation checked.
    let id = task["results"][0]["agent_id"].as_str().unwrap();
    let result: Value = run_detail(&session, id).await.run.result.unwrap();
    let report = &result["report"];
    assert_eq!(report["summary"], "src.txt is fine.");
    assert_eq!(report["missing"], json!([]));
    let evidence = report["evidence"].as_array().unwrap();
    assert_eq!(evidence.len(), 2, "{report}");
    assert_eq!(evidence[0]["verified"], true, "{}", evidence[0]);
    assert_eq!(evidence[1]["verified"], false, "{}", evidence[1]);
    // The stubborn child's unformatted answer is kept and marked.
    let id = task["results"][1]["agent_id"].as_str().unwrap();
    let result: Value = run_detail(&session, id).await.run.result.unwrap();
    assert!(!result["report"]["missing"].as_array().unwrap().is_empty());
    assert!(result["final_text"].as_str().unwrap().contains("fine"));
    session.close().await;
}

#[tokio::test]
async fn routing_precedence_reaches_the_server() {
    let server = MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or("");
        if first.starts_with("parent:") {
            return match req.assistant_turns() {
                0 => MockReply::tool_calls([
                    (
                        "agent_open",
                        json!({"prompt": "route explorer", "agent_type": "explore"}),
                    ),
                    (
                        "agent_open",
                        json!({"prompt": "route explicit", "agent_type": "explore", "model": "x-explicit"}),
                    ),
                    ("agent_open", json!({"prompt": "route general"})),
                    (
                        "agent_open",
                        json!({"prompt": "route plan", "agent_type": "planner"}),
                    ),
                    (
                        "agent_open",
                        json!({"prompt": "route unknown", "model": "nope"}),
                    ),
                    (
                        "agent_open",
                        json!({"prompt": "route cloud", "agent_type": "review"}),
                    ),
                ]),
                _ => MockReply::text("done"),
            };
        }
        MockReply::text(report(first))
    });
    server.set_models([
        "mock-model",
        "x-explorer",
        "x-explicit",
        "x-plan",
        "x-awaiter",
    ]);
    let ws = workspace("");
    // The mock lists its models like vLLM would; the local preset does not ask
    // unless told to (llama.cpp serves one model whatever the name).
    let extra = "[providers.local]\nlists_models = true\n\
                 [subagents]\nexplorer_model = \"x-explorer\"\nawaiter_model = \"x-awaiter\"\n\
                 review_model = \"cloud\"\n\
                 [subagents.models]\nPlan = \"x-plan\"\n\
                 [models.cloud]\nprovider = \"openai\"\nmodel = \"gpt-cloud\"\n";
    let session = mock_session(ws.path(), &server.base_url(), extra, None).await;
    let out = session
        .run_with("parent: route", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done");

    let model_of = |prompt: &str| -> String {
        let reqs: Vec<MockRequest> = server
            .captured()
            .into_iter()
            .filter(|r| r.first_user_text() == Some(prompt))
            .collect();
        assert!(!reqs.is_empty(), "no request for {prompt}");
        reqs[0].model().to_string()
    };
    assert_eq!(model_of("parent: route"), "mock-model");
    assert_eq!(model_of("route explorer"), "x-explorer", "named key");
    assert_eq!(model_of("route explicit"), "x-explicit", "the call wins");
    assert_eq!(model_of("route general"), "mock-model", "nothing set: main");
    assert_eq!(
        model_of("route plan"),
        "x-plan",
        "the map wins over awaiter_model"
    );
    assert_eq!(model_of("route cloud"), "mock-model", "fell back to main");

    let parent = server
        .captured()
        .into_iter()
        .find(|r| r.first_user_text() == Some("parent: route") && r.assistant_turns() == 1)
        .unwrap();
    let results: Vec<String> = parent
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(results.len(), 6);
    let unknown = &results[4];
    assert!(
        unknown.starts_with("error:")
            && unknown.contains("unknown model 'nope'")
            && unknown.contains("x-explorer"),
        "{unknown}"
    );
    let cloud: Value = serde_json::from_str(&results[5]).unwrap();
    let warning = cloud["warnings"][0].as_str().unwrap_or("");
    assert!(
        warning.contains("openai") && warning.contains("could not be built"),
        "{cloud}"
    );
    // The warning is in the child's record too (the parent ended after it settled).
    let id = cloud["agent_id"].as_str().unwrap();
    let result = run_detail(&session, id).await.run.result.unwrap();
    assert!(
        result["warnings"][0]
            .as_str()
            .unwrap_or("")
            .contains("could not be built"),
        "{result}"
    );
    session.close().await;
}
