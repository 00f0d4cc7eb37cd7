//! Sub-agent runtime, end to end: who owns a child (turn or session), closing one,
//! and how a background child's result reaches its parent — pushed exactly once,
//! or taken by `agent_eval`, also from a grandchild.

use crate::common::*;
use brood::ledger::EventKind;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::subagent::{Limits, LiveStatus};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn turn_cancel_kills_task_children_but_not_agent_open_children() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("agent_open", json!({"prompt": "bg: keep going"})),
                ScriptStep::tool_call("task", json!({"prompts": ["fg: held", "fg2: queued"]})),
                ScriptStep::text("unreachable"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("child finished"))]);
    let probe = Probe::new(model);
    let bg_gate = probe.gate("bg:");
    let _fg_gate = probe.gate("fg");
    let session = session_with(ws.path(), probe.arc(), Some(limits(5, 2))).await;
    let turn = CancellationToken::new();
    let driver = async {
        probe.wait_for("bg:", 1).await;
        probe.wait_for("fg:", 1).await;
        wait_snapshot(&session, "a queued task child", |s| {
            s.iter().any(|r| r.status == LiveStatus::Queued)
        })
        .await;
        turn.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: three children", None, turn.clone()),
        driver
    );
    let out = out.unwrap();
    assert!(!out.succeeded(), "{out:?}");

    let snap = session.supervisor().snapshot();
    let task_children: Vec<String> = snap
        .iter()
        .filter(|r| !r.background)
        .map(|r| r.agent_id.clone())
        .collect();
    assert_eq!(task_children.len(), 2);
    let bg = snap.iter().find(|r| r.background).unwrap().agent_id.clone();
    let never = CancellationToken::new();
    for id in &task_children {
        let r = within("a task child", session.supervisor().wait(id, None, &never))
            .await
            .unwrap();
        assert_eq!(r.status, LiveStatus::Cancelled, "{r:?}");
    }
    // The background child is still running; it completes once let go.
    let live = session.supervisor().snapshot();
    assert_eq!(
        live.iter().find(|r| r.agent_id == bg).unwrap().status,
        LiveStatus::Running
    );
    bg_gate.cancel();
    let bg_result = within(
        "the background child",
        session.supervisor().wait(&bg, None, &never),
    )
    .await
    .unwrap();
    assert_eq!(bg_result.status, LiveStatus::Completed, "{bg_result:?}");
    let mut kinds = Vec::new();
    for id in &task_children {
        kinds.push(lifecycle(&session, id).await);
    }
    kinds.sort_by_key(|k| k.len());
    assert_eq!(
        kinds,
        vec![
            vec![EventKind::Spawned, EventKind::Started, EventKind::Cancelled],
            vec![EventKind::Spawned, EventKind::Queued, EventKind::Cancelled],
        ]
    );
    assert!(
        probe.requests_for("fg2:").is_empty(),
        "the queued child never ran"
    );
    assert_eq!(
        lifecycle(&session, &bg).await,
        vec![EventKind::Spawned, EventKind::Started, EventKind::Completed]
    );
    session.close().await;
}

#[tokio::test]
async fn agent_close_cancels_and_returns_the_final_record() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call(
                    "agent_open",
                    json!({"prompt": "victim: held", "name": "victim"}),
                ),
                ScriptStep::tool_call("agent_close", json!({"agent_id": "victim"})),
                ScriptStep::text("closed it"),
                ScriptStep::text("extra turn"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("never"))]);
    let probe = Probe::new(model);
    let _gate = probe.gate("victim:");
    let session = session_with(ws.path(), probe.arc(), None).await;
    let out = session
        .run_with("parent: open and close", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        out.final_text, "closed it",
        "no extra turn for a closed child"
    );
    let parent = probe.requests_for("parent:");
    assert_eq!(parent.len(), 3);
    let record = last_tool_json(&parent[2]);
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["name"], "victim");
    assert!(
        record["result"]
            .as_str()
            .unwrap()
            .contains("closed by its parent"),
        "{record}"
    );
    assert!(parent.iter().all(|r| completions(r).is_empty()));
    let id = record["agent_id"].as_str().unwrap();
    let detail = run_detail(&session, id).await;
    assert_eq!(detail.run.status.as_str(), "cancelled");
    assert!(detail
        .run
        .status_reason
        .unwrap_or_default()
        .contains("agent_close"));
    session.close().await;
}

#[tokio::test]
async fn a_background_completion_is_pushed_exactly_once_and_keeps_the_parent_going() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("agent_open", json!({"prompt": "bg: look around"})),
                ScriptStep::text("waiting for the helper"),
                ScriptStep::text("done with the helper"),
                ScriptStep::text("one turn too many"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("helper found the thing"))]);
    let probe = Probe::new(model);
    let gate = probe.gate("bg:");
    let session = session_with(ws.path(), probe.arc(), None).await;
    let driver = async {
        // The parent has given its answer while the child still runs.
        probe.wait_for("parent:", 2).await;
        gate.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: background", None, CancellationToken::new()),
        driver
    );
    let out = out.unwrap();
    assert_eq!(out.final_text, "done with the helper");
    let parent = probe.requests_for("parent:");
    assert_eq!(parent.len(), 3, "exactly one extra turn");
    assert!(completions(&parent[1]).is_empty());
    let pushed = completions(&parent[2]);
    assert_eq!(pushed.len(), 1, "{}", dump(&parent[2].messages));
    let child = &session.supervisor().snapshot()[0];
    assert!(pushed[0].contains(&child.agent_id), "{}", pushed[0]);
    assert!(
        pushed[0].contains("helper found the thing"),
        "{}",
        pushed[0]
    );
    session.close().await;
}

#[tokio::test]
async fn a_result_taken_by_agent_eval_is_not_pushed_again() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call(
                    "agent_open",
                    json!({"prompt": "bg: look around", "name": "worker"}),
                ),
                ScriptStep::tool_call(
                    "agent_eval",
                    json!({"agent_id": "worker", "timeout_ms": 30000}),
                ),
                ScriptStep::text("got it"),
                ScriptStep::text("one turn too many"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("helper found the thing"))]);
    let probe = Probe::new(model);
    let gate = probe.gate("bg:");
    let session = session_with(ws.path(), probe.arc(), None).await;
    let driver = async {
        // Let the child finish only once the parent is waiting in agent_eval.
        probe.wait_for("parent:", 2).await;
        gate.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: eval", None, CancellationToken::new()),
        driver
    );
    assert_eq!(out.unwrap().final_text, "got it");
    let parent = probe.requests_for("parent:");
    assert_eq!(parent.len(), 3);
    let eval = last_tool_json(&parent[2]);
    let agents = eval["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0]["status"], "completed", "{eval}");
    assert!(agents[0]["result"]
        .as_str()
        .unwrap()
        .contains("helper found the thing"));
    assert!(parent.iter().all(|r| completions(r).is_empty()));
    session.close().await;
}

#[tokio::test]
async fn a_grandchild_delivers_to_its_own_parent_which_waits_for_it() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["middle: open a helper"]})),
                ScriptStep::text("done"),
            ],
        )
        .on(
            "middle:",
            vec![
                ScriptStep::tool_call("agent_open", json!({"prompt": "grand: slow check"})),
                ScriptStep::text(report("middle waiting")),
                ScriptStep::text(report("middle got the helper's result")),
                ScriptStep::text(report("one turn too many")),
            ],
        )
        .on(
            "grand:",
            vec![
                ScriptStep::tool_call("bash", json!({"command": "sleep 1", "timeout_secs": 20})),
                ScriptStep::text(report("grand checked")),
            ],
        );
    let probe = Probe::new(model);
    // One running slot and a short heartbeat: the middle child waits for its
    // background child after answering, and must neither hold the only slot nor be
    // taken for stalled while it waits.
    let lim = Limits {
        heartbeat: Duration::from_millis(250),
        ..limits(3, 1)
    };
    let session = session_with(ws.path(), probe.arc(), Some(lim)).await;
    let out = session
        .run_with("parent: nested", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done");
    let parent = probe.requests_for("parent:");
    let task = last_tool_json(&parent[1]);
    let middle = &task["results"][0];
    assert_eq!(middle["status"], "completed", "{task}");
    assert!(middle["result"]
        .as_str()
        .unwrap()
        .contains("middle got the helper's result"));
    let middle_reqs = probe.requests_for("middle:");
    assert_eq!(middle_reqs.len(), 3);
    let pushed = completions(&middle_reqs[2]);
    assert_eq!(pushed.len(), 1);
    assert!(pushed[0].contains("grand checked"), "{}", pushed[0]);
    // Only the middle child hears of the grandchild.
    assert!(parent.iter().all(|r| completions(r).is_empty()));
    for r in session.supervisor().snapshot() {
        assert_eq!(r.status, LiveStatus::Completed, "{r:?}");
    }
    session.close().await;
}

#[tokio::test]
async fn a_sibling_cannot_take_or_close_another_run_s_child() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call(
                    "agent_open",
                    json!({"prompt": "owned: look", "name": "alpha"}),
                ),
                ScriptStep::tool_call("task", json!({"prompts": ["thief: take alpha"]})),
                ScriptStep::text("waiting"),
                ScriptStep::text("done"),
                ScriptStep::text("one turn too many"),
            ],
        )
        .on(
            "thief:",
            vec![
                ScriptStep::tool_calls([
                    (
                        "agent_eval",
                        json!({"agent_id": "alpha", "timeout_ms": 1000}),
                    ),
                    ("agent_close", json!({"agent_id": "alpha"})),
                ]),
                ScriptStep::text(report("could not")),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("alpha's finding"))]);
    let probe = Probe::new(model);
    let gate = probe.gate("owned:");
    let session = session_with(ws.path(), probe.arc(), None).await;
    let driver = async {
        probe.wait_for("thief:", 2).await;
        gate.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: guard alpha", None, CancellationToken::new()),
        driver
    );
    out.unwrap();
    let thief = probe.requests_for("thief:");
    for r in tool_results(&thief[1]) {
        assert!(
            r.starts_with("error:") && r.contains("alpha") && r.contains("not"),
            "{r}"
        );
    }
    // alpha ran to its end and its result reached its own parent, once.
    let parent = probe.requests_for("parent:");
    let last = parent.last().unwrap();
    let pushed = completions(last);
    assert_eq!(pushed.len(), 1, "{}", dump(&last.messages));
    assert!(pushed[0].contains("alpha's finding") && pushed[0].contains("completed"));
    session.close().await;
}

#[tokio::test]
async fn agent_eval_times_out_then_delivers_a_message_at_the_child_s_next_step() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call(
                    "agent_open",
                    json!({"prompt": "slow: step", "name": "slow"}),
                ),
                ScriptStep::tool_call(
                    "agent_eval",
                    json!({"agent_id": "slow", "timeout_ms": 1000, "message": "also check B"}),
                ),
                ScriptStep::tool_call("agent_eval", json!({})),
                ScriptStep::text("done"),
                ScriptStep::text("one turn too many"),
            ],
        )
        .otherwise(vec![
            ScriptStep::tool_call("list_dir", json!({"path": "."})),
            ScriptStep::text(report("checked A and B")),
        ]);
    let probe = Probe::new(model);
    let gate =
        probe.gate_when(|r| first_user(r) == "slow: step" && ScriptedModel::step_index(r) == 0);
    let session = session_with(ws.path(), probe.arc(), None).await;
    let driver = async {
        // The first agent_eval has timed out: the child is still at its first step.
        probe.wait_for("parent:", 3).await;
        gate.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: talk to it", None, CancellationToken::new()),
        driver
    );
    assert_eq!(out.unwrap().final_text, "done");
    let parent = probe.requests_for("parent:");
    let first = last_tool_json(&parent[2]);
    assert_eq!(first["agents"][0]["settled"], false, "{first}");
    assert_eq!(first["agents"][0]["status"], "running", "{first}");
    let second = last_tool_json(&parent[3]);
    assert_eq!(second["agents"][0]["status"], "completed", "{second}");
    assert!(parent.iter().all(|r| completions(r).is_empty()));
    // The message reached the child's conversation before its next step, once.
    let child = probe.requests_for("slow: step");
    assert_eq!(child.len(), 2);
    assert_eq!(user_messages_containing(&child[1], "also check B"), 1);
    session.close().await;
}

#[tokio::test]
async fn names_are_unique_among_live_runs() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_calls([
                    ("agent_open", json!({"prompt": "named one", "name": "w"})),
                    ("agent_open", json!({"prompt": "named two", "name": "w"})),
                ]),
                ScriptStep::text("done"),
                ScriptStep::text("done"),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("named"))]);
    let probe = Probe::new(model);
    let gate = probe.gate("named ");
    let session = session_with(ws.path(), probe.arc(), None).await;
    let driver = async {
        probe.wait_for("parent:", 2).await;
        gate.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: names", None, CancellationToken::new()),
        driver
    );
    out.unwrap();
    let mut names: Vec<String> = tool_results(&probe.requests_for("parent:")[1])
        .iter()
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(r).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["w", "w-2"]);
    session.close().await;
}

#[tokio::test]
async fn many_unnamed_children_get_unique_names_that_start_over_once_free() {
    let ws = workspace("");
    let wide: Vec<String> = (0..30).map(|i| format!("wide {i}")).collect();
    let model = ScriptedModel::new()
        .on(
            "parent: wide",
            vec![
                ScriptStep::tool_call("task", json!({ "prompts": wide })),
                ScriptStep::text("done"),
            ],
        )
        .on(
            "parent: again",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["again 0", "again 1"]})),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("named"))]);
    let session = session_with(ws.path(), std::sync::Arc::new(model), Some(limits(40, 40))).await;
    let names_under = |root: &str| {
        let mut names: Vec<String> = session
            .supervisor()
            .snapshot()
            .into_iter()
            .filter(|r| r.parent_id.as_deref() == Some(root))
            .map(|r| r.name)
            .collect();
        names.sort();
        names
    };
    let first = session
        .run_with("parent: wide", None, CancellationToken::new())
        .await
        .unwrap();
    let mut want: Vec<String> = std::iter::once("general".to_string())
        .chain((2..=30).map(|n| format!("general-{n}")))
        .collect();
    want.sort();
    assert_eq!(names_under(&first.run_id), want);
    // All thirty have ended: the bare name and the low suffixes are free again.
    let second = session
        .run_with("parent: again", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(names_under(&second.run_id), ["general", "general-2"]);
    session.close().await;
}
