//! Sub-agent runtime, end to end: the concurrency cap and the queue, depth,
//! `max_total`, and the heartbeat.

use crate::common::*;
use brood::ledger::EventKind;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::{FinishReason, Message, ModelResponse, ToolCall};
use brood::subagent::{Limits, LiveStatus};
use brood_mock::{Answer, MockReply, MockServer};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The `task` result JSON the mock's parent received in its second request.
fn mock_task_results(server: &MockServer) -> Vec<Value> {
    let parent = server
        .captured()
        .into_iter()
        .find(|r| {
            r.first_user_text().unwrap_or("").starts_with("parent:") && r.assistant_turns() == 1
        })
        .expect("the parent's second request");
    let content = parent.last_message().unwrap()["content"].as_str().unwrap();
    let v: Value = serde_json::from_str(content).unwrap();
    v["results"].as_array().unwrap().clone()
}

#[tokio::test]
async fn task_never_exceeds_max_concurrent_and_keeps_prompt_order() {
    let prompts: Vec<String> = (0..10).map(|i| format!("question {i}")).collect();
    let task_args = json!({"prompts": prompts, "agent_type": "explore"});
    let server = MockServer::start(move |req| {
        let first = req.first_user_text().unwrap_or("").to_string();
        if first.starts_with("parent:") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("task", task_args.clone()),
                _ => MockReply::text("done"),
            };
        }
        MockReply::text(report(&format!("answer to {first}"))).after(Duration::from_millis(150))
    });
    let ws = workspace("");
    let session = mock_session(ws.path(), &server.base_url(), "", Some(limits(3, 3))).await;
    let out = session
        .run_with("parent: fan out", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done", "{out:?}");
    assert_eq!(
        server.max_in_flight(),
        3,
        "at most 3 at once, and 3 were used"
    );

    let results = mock_task_results(&server);
    assert_eq!(results.len(), 10);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "{r}");
        assert_eq!(r["status"], "completed", "{r}");
        let text = r["result"].as_str().unwrap();
        assert!(
            text.contains(&format!("answer to question {i}")),
            "{i}: {text}"
        );
    }
    // Seven children had to wait for a slot: each either started at once or went
    // through `queued`, and some did.
    flushed(&session).await;
    let mut queued = 0;
    for run in session.supervisor().snapshot() {
        let kinds = lifecycle(&session, &run.agent_id).await;
        let direct = vec![EventKind::Spawned, EventKind::Started, EventKind::Completed];
        let waited = vec![
            EventKind::Spawned,
            EventKind::Queued,
            EventKind::Started,
            EventKind::Completed,
        ];
        assert!(kinds == direct || kinds == waited, "{kinds:?}");
        queued += usize::from(kinds == waited);
    }
    assert!(queued >= 1, "no child was ever queued");
    session.close().await;
}

#[tokio::test]
async fn agent_open_at_the_cap_gets_the_cap_error() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_calls(
                    (0..3).map(|i| ("agent_open", json!({"prompt": format!("held child {i}")}))),
                ),
                ScriptStep::text("waiting"),
                ScriptStep::text("done"),
                ScriptStep::text("done"),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("child"))]);
    let probe = Probe::new(model);
    let gate = probe.gate("held child");
    let session = session_with(ws.path(), probe.arc(), Some(limits(2, 2))).await;
    let driver = async {
        probe.wait_for("parent:", 2).await;
        let second = &probe.requests_for("parent:")[1];
        let results = tool_results(second);
        let refused: Vec<&&str> = results.iter().filter(|r| r.starts_with("error:")).collect();
        assert_eq!(refused.len(), 1, "{results:?}");
        assert!(
            refused[0].contains("max_concurrent = 2") && refused[0].contains("agent_eval"),
            "{}",
            refused[0]
        );
        assert_eq!(session.supervisor().snapshot().len(), 2);
        gate.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: open three", None, CancellationToken::new()),
        driver
    );
    let out = out.unwrap();
    assert_eq!(out.final_text, "done");
    session.close().await;
}

#[tokio::test]
async fn children_beyond_launch_concurrency_wait_in_queued() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_calls([
                    ("agent_open", json!({"prompt": "held A"})),
                    ("agent_open", json!({"prompt": "held B"})),
                ]),
                ScriptStep::text("waiting"),
                ScriptStep::text("done"),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("child"))]);
    let probe = Probe::new(model);
    let gate = probe.gate("held");
    let session = session_with(ws.path(), probe.arc(), Some(limits(3, 1))).await;
    let driver = async {
        let snap = wait_snapshot(&session, "one running, one queued", |s| {
            s.iter().filter(|r| r.status == LiveStatus::Running).count() == 1
                && s.iter().filter(|r| r.status == LiveStatus::Queued).count() == 1
        })
        .await;
        // The running one is at the gate; the queued one has made no request.
        probe
            .wait_until("the running child's request", |rs| {
                rs.iter().any(|r| first_user(r).starts_with("held"))
            })
            .await;
        assert_eq!(probe.requests_for("held").len(), 1);
        let queued = snap
            .iter()
            .find(|r| r.status == LiveStatus::Queued)
            .unwrap();
        gate.cancel();
        queued.agent_id.clone()
    };
    let (out, queued_id) = tokio::join!(
        session.run_with("parent: open two", None, CancellationToken::new()),
        driver
    );
    assert_eq!(out.unwrap().final_text, "done");
    let kinds = lifecycle(&session, &queued_id).await;
    assert_eq!(
        kinds,
        vec![
            EventKind::Spawned,
            EventKind::Queued,
            EventKind::Started,
            EventKind::Completed
        ]
    );
    session.close().await;
}

/// Always delegates while it can: `level N` opens `level N+1`.
fn always_delegate(
    req: &brood::model::ModelRequest,
) -> Result<ModelResponse, brood::model::ModelError> {
    let level: u32 = first_user(req)
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let can = req.tools.iter().any(|t| &*t.name == "task");
    let step = ScriptedModel::step_index(req);
    let message = if can && step == 0 {
        let mut m = Message::assistant("");
        m.tool_calls = vec![ToolCall {
            id: "call_0".into(),
            name: "task".into(),
            arguments: json!({"prompts": [format!("level {}", level + 1)]}).to_string(),
        }];
        m
    } else {
        Message::assistant(report(&format!("level {level} done")))
    };
    let finish = if message.tool_calls.is_empty() {
        FinishReason::Stop
    } else {
        FinishReason::ToolCalls
    };
    Ok(ModelResponse {
        message,
        usage: None,
        finish_reason: finish,
    })
}

#[tokio::test]
async fn a_model_that_always_delegates_stops_exactly_at_max_depth() {
    let ws = workspace("");
    let probe = Probe::new(ScriptedModel::new().otherwise(vec![
        ScriptStep::func(always_delegate),
        ScriptStep::func(always_delegate),
    ]));
    let session = session_with(ws.path(), probe.arc(), Some(limits(10, 10))).await;
    session
        .run_with("level 0", None, CancellationToken::new())
        .await
        .unwrap();
    let mut depths: Vec<u32> = session
        .supervisor()
        .snapshot()
        .iter()
        .map(|r| r.depth)
        .collect();
    depths.sort();
    assert_eq!(depths, vec![1, 2, 3]);
    for level in 0..=3u32 {
        let reqs = probe.requests_for(&format!("level {level}"));
        let names = tool_names(&reqs[0]);
        let delegates = ["task", "agent_open", "agent_eval", "agent_close"]
            .iter()
            .any(|t| names.contains(&t.to_string()));
        assert_eq!(delegates, level < 3, "level {level} offered {names:?}");
    }
    assert!(probe.requests_for("level 4").is_empty());
    // The ledger agrees.
    flushed(&session).await;
    let runs = session
        .ledger()
        .list_runs(Default::default())
        .await
        .unwrap();
    let mut depths: Vec<u32> = runs.iter().map(|r| r.run.depth).collect();
    depths.sort();
    assert_eq!(depths, vec![0, 1, 2, 3]);
    session.close().await;
}

#[tokio::test]
async fn spawns_beyond_max_total_get_the_typed_error() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["t0", "t1", "t2"]})),
                ScriptStep::tool_call("agent_open", json!({"prompt": "t3"})),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("child"))]);
    let probe = Probe::new(model);
    let session = session_with(
        ws.path(),
        probe.arc(),
        Some(Limits {
            max_total: 2,
            ..limits(10, 10)
        }),
    )
    .await;
    let out = session
        .run_with("parent: too many", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done");
    let reqs = probe.requests_for("parent:");
    let results = last_tool_json(&reqs[1]);
    let results = results["results"].as_array().unwrap();
    assert_eq!(results[0]["status"], "completed");
    assert_eq!(results[1]["status"], "completed");
    assert_eq!(results[2]["status"], "failed");
    assert!(
        results[2]["error"]
            .as_str()
            .unwrap()
            .contains("max_total = 2"),
        "{}",
        results[2]
    );
    let open = tool_results(&reqs[2]).last().unwrap().to_string();
    assert!(
        open.starts_with("error:") && open.contains("max_total = 2"),
        "{open}"
    );
    assert!(probe.requests_for("t2").is_empty() && probe.requests_for("t3").is_empty());
    assert_eq!(session.supervisor().snapshot().len(), 2);
    session.close().await;
}

#[tokio::test]
async fn heartbeat_cancels_a_stalled_stream_while_queued_children_survive() {
    let server = MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or("");
        if first.starts_with("parent:") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call(
                    "task",
                    json!({"prompts": ["stall here", "fine one", "fine two"]}),
                ),
                _ => MockReply::text("done"),
            };
        }
        if first == "stall here" {
            return Answer::text("I am thinking about").stall_after(3);
        }
        MockReply::text(report(first))
    });
    let ws = workspace("");
    let lim = Limits {
        heartbeat: Duration::from_millis(300),
        ..limits(3, 1)
    };
    let session = mock_session(ws.path(), &server.base_url(), "", Some(lim)).await;
    let out = session
        .run_with("parent: watch it", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done", "{out:?}");
    let results = mock_task_results(&server);
    assert_eq!(results[0]["status"], "cancelled", "{}", results[0]);
    assert!(
        results[0]["result"].as_str().unwrap().contains("heartbeat"),
        "{}",
        results[0]
    );
    assert_eq!(results[1]["status"], "completed", "{}", results[1]);
    assert_eq!(results[2]["status"], "completed", "{}", results[2]);

    // The stalled child's record says why; the others waited in the queue while
    // it held the only slot, and ran once it was released.
    let stalled = results[0]["agent_id"].as_str().unwrap();
    let detail = run_detail(&session, stalled).await;
    assert_eq!(detail.run.status.as_str(), "cancelled");
    assert!(
        detail
            .run
            .status_reason
            .as_deref()
            .unwrap_or("")
            .contains("heartbeat"),
        "{:?}",
        detail.run.status_reason
    );
    for r in &results[1..] {
        let kinds = lifecycle(&session, r["agent_id"].as_str().unwrap()).await;
        assert!(kinds.contains(&EventKind::Queued), "{kinds:?}");
    }
    session.close().await;
}

#[tokio::test]
async fn heartbeat_spares_long_tool_calls_and_parents_waiting_on_children() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["middle: delegate"]})),
                ScriptStep::text("done"),
            ],
        )
        .on(
            "middle:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["leaf: run the slow check"]})),
                ScriptStep::text(report("middle done")),
            ],
        )
        .on(
            "leaf:",
            vec![
                ScriptStep::tool_call("bash", json!({"command": "sleep 1", "timeout_secs": 20})),
                ScriptStep::text(report("leaf done")),
            ],
        );
    let probe = Probe::new(model);
    let lim = Limits {
        heartbeat: Duration::from_millis(250),
        ..limits(3, 3)
    };
    let session = session_with(ws.path(), probe.arc(), Some(lim)).await;
    let out = session
        .run_with("parent: slow work", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done");
    let leaf = probe.requests_for("leaf:");
    assert_eq!(leaf.len(), 2);
    let bash = tool_results(&leaf[1])[0];
    assert!(!bash.starts_with("error:"), "{bash}");
    for r in session.supervisor().snapshot() {
        assert_eq!(r.status, LiveStatus::Completed, "{r:?}");
    }
    session.close().await;
}

#[tokio::test]
async fn wall_time_counts_from_the_start_not_from_the_queue() {
    let ws = workspace("[subagents]\nwall_time_secs = 1\n");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["first: slow", "second: after"]})),
                ScriptStep::text("done"),
            ],
        )
        .on("first:", vec![ScriptStep::text(report("slow one"))])
        .on(
            "second:",
            vec![
                ScriptStep::tool_call("list_dir", json!({"path": "."})),
                ScriptStep::text(report("second one")),
            ],
        );
    let probe = Probe::new(model);
    let gate = probe.gate("first:");
    let session = session_with(ws.path(), probe.arc(), Some(limits(3, 1))).await;
    let driver = async {
        probe.wait_for("first:", 1).await;
        wait_snapshot(&session, "the second child queued", |s| {
            s.iter().any(|r| r.status == LiveStatus::Queued)
        })
        .await;
        // The scenario: the second child waits in the queue longer than its wall
        // time while the first holds the only slot.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        gate.cancel();
    };
    let (out, ()) = tokio::join!(
        session.run_with("parent: slow queue", None, CancellationToken::new()),
        driver
    );
    assert_eq!(out.unwrap().final_text, "done");
    let task = last_tool_json(&probe.requests_for("parent:")[1]);
    let second = &task["results"][1];
    assert_eq!(second["status"], "completed", "{second}");
    let text = second["result"].as_str().unwrap();
    assert!(!text.contains("wall time"), "{text}");
    let reqs = probe.requests_for("second:");
    assert_eq!(reqs.len(), 2, "the queued child did its work");
    assert!(!reqs[0].tools.is_empty());
    session.close().await;
}
