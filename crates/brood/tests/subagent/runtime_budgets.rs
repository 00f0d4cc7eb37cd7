//! Sub-agent runtime, end to end: per-child turn and token limits, the tree token
//! budget, the cap on what a child's result puts into its parent's context, and
//! `enabled = false`.

use crate::common::*;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::Usage;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A child that lists the directory for as long as it is offered tools, and
/// reports when it is not (the final report step).
fn busy_child() -> Vec<ScriptStep> {
    let step = ScriptStep::func(|req| {
        let mut r = if req.tools.is_empty() {
            answer(&report("stopped"))
        } else {
            call("list_dir", json!({"path": "."}))
        };
        // 90 tokens a step.
        r.usage = Some(Usage {
            input_tokens: 80,
            output_tokens: 10,
            cached_input_tokens: 0,
        });
        Ok(r)
    });
    vec![step; 12]
}

/// The last request of the busy child: its tool-less final report step.
fn final_report_step(probe: &Probe) -> (usize, std::sync::Arc<brood::model::ModelRequest>) {
    let reqs = probe.requests_for("busy:");
    let last = reqs.last().unwrap().clone();
    (reqs.len(), last)
}

async fn run_busy(config: &str) -> (Probe, serde_json::Value) {
    let ws = workspace(config);
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["busy: keep listing"]})),
                ScriptStep::text("done"),
            ],
        )
        .on("busy:", busy_child());
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    let out = session
        .run_with("parent: limits", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done");
    let task = last_tool_json(&probe.requests_for("parent:")[1]);
    session.close().await;
    (probe, task["results"][0].clone())
}

#[tokio::test]
async fn a_child_at_max_turns_makes_one_tool_less_report_step() {
    let (probe, result) = run_busy("[subagents]\nmax_turns = 2\n").await;
    let (n, last) = final_report_step(&probe);
    assert_eq!(n, 3, "two turns and the report");
    assert!(last.tools.is_empty());
    assert!(last
        .messages
        .last()
        .unwrap()
        .content
        .contains("max_turns = 2"));
    assert_eq!(result["status"], "completed", "{result}");
    assert!(
        result["result"]
            .as_str()
            .unwrap()
            .contains("max_turns = 2 reached"),
        "{result}"
    );
}

#[tokio::test]
async fn a_child_over_its_token_budget_reports_what_it_has() {
    // 90 tokens a step: the budget is spent after the second.
    let (probe, result) = run_busy("[subagents]\ntoken_budget = 100\n").await;
    let (n, last) = final_report_step(&probe);
    assert_eq!(n, 3, "two steps, then the report");
    assert!(last.tools.is_empty());
    assert_eq!(result["status"], "completed", "{result}");
    assert!(
        result["result"]
            .as_str()
            .unwrap()
            .contains("token budget exhausted"),
        "{result}"
    );
}

#[tokio::test]
async fn no_spawn_once_the_tree_budget_is_spent() {
    let ws = workspace("[subagents]\ntree_token_budget = 1\n");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["never: runs"]})),
                ScriptStep::text("report without children"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("ran anyway"))]);
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    let out = session
        .run_with("parent: budget", None, CancellationToken::new())
        .await
        .unwrap();
    assert!(out.succeeded(), "{out:?}");
    assert!(probe.requests_for("never:").is_empty());
    let parent = probe.requests_for("parent:");
    let task = last_tool_json(&parent[1]);
    let error = task["results"][0]["error"].as_str().unwrap();
    assert!(error.contains("tree token budget exhausted"), "{error}");
    // The parent itself is past the budget: its next step is the final report.
    assert!(parent[1].tools.is_empty());
    assert!(session.supervisor().snapshot().is_empty());
    session.close().await;
}

#[tokio::test]
async fn a_long_result_is_capped_in_the_parent_with_the_transcript_handle() {
    let ws = workspace("[subagents]\ncontext_cap_bytes = 1024\n");
    let long = format!(
        "SUMMARY: {}\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: None.",
        "word ".repeat(2000)
    );
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["long: answer"]})),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(long)]);
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    session
        .run_with("parent: cap", None, CancellationToken::new())
        .await
        .unwrap();
    let task = last_tool_json(&probe.requests_for("parent:")[1]);
    let r = &task["results"][0];
    let text = r["result"].as_str().unwrap();
    assert!(text.len() <= 1024, "{} bytes", text.len());
    let handle = r["transcript_handle"].as_str().unwrap();
    assert!(text.contains(handle), "{text}");
    // The whole answer is in the record.
    let id = r["agent_id"].as_str().unwrap();
    let result = run_detail(&session, id).await.run.result.unwrap();
    assert!(result["final_text"].as_str().unwrap().len() > 10_000);
    session.close().await;
}

#[tokio::test]
async fn disabled_subagents_offer_no_delegation_tools() {
    let ws = workspace("[subagents]\nenabled = false\n");
    let model = ScriptedModel::new().on(
        "parent:",
        vec![
            ScriptStep::tool_call("task", json!({"prompts": ["never: runs"]})),
            ScriptStep::text("did it myself"),
        ],
    );
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    let out = session
        .run_with("parent: alone", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "did it myself");
    let parent = probe.requests_for("parent:");
    let names = tool_names(&parent[0]);
    assert!(names.contains(&"read_file".to_string()));
    for t in [
        "task",
        "agent_open",
        "agent_eval",
        "agent_close",
        "agent_list",
    ] {
        assert!(!names.contains(&t.to_string()), "{t} offered");
    }
    let refused = tool_results(&parent[1])[0];
    assert!(refused.starts_with("error:"), "{refused}");
    assert!(probe.requests_for("never:").is_empty());
    assert!(session.supervisor().snapshot().is_empty());
    session.close().await;
}
