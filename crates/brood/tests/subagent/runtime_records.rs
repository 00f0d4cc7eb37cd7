//! Sub-agent runtime, end to end: `task` isolation (a child failing on 500s, a
//! panicking tool, a crashing run), the ledger's lifecycle and transcripts,
//! `handle_read`, and many children writing memory at once.

use crate::common::hand_built::*;
use crate::common::*;
use async_trait::async_trait;
use brood::ledger::{EventKind, RunId};
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::{Model, ModelError};
use brood::subagent::{RootRequest, ToolFactory};
use brood::tool::{
    builtin_tools, BuiltinOptions, Capability, Sandbox, Tool, ToolContext, ToolError,
};
use brood_mock::{MockReply, MockServer};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A tool that panics when called.
struct Boom;

#[async_trait]
impl Tool for Boom {
    fn name(&self) -> &str {
        "boom"
    }
    fn description(&self) -> &str {
        "Panics."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        panic!("boom went the tool")
    }
}

#[tokio::test]
async fn task_children_are_isolated_from_500s_and_panicking_tools() {
    let server = MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or("");
        let step = req.assistant_turns();
        match first {
            f if f.starts_with("parent:") => match step {
                0 => MockReply::tool_call(
                    "task",
                    json!({"prompts": ["ok first", "always 500", "calls boom", "ok last"]}),
                ),
                _ => MockReply::text("parent fine"),
            },
            "always 500" => MockReply::status(500, "the server is on fire").retry_after("0"),
            "calls boom" if step == 0 => MockReply::tool_call("boom", json!({})),
            other => MockReply::text(report(&format!("{other} finished"))),
        }
    });
    let ws = workspace("");
    let mut cfg = ProviderConfig::new("local", server.base_url());
    cfg.max_attempts = 3;
    cfg.backoff_base_ms = 1;
    cfg.backoff_max_ms = 5;
    let model: Arc<dyn Model> = Arc::new(OpenAiProvider::new(cfg).unwrap());
    let sup = supervisor(
        ws.path(),
        model,
        builtin_plus(|| vec![Arc::new(Boom) as Arc<dyn Tool>]),
    );
    let (_, outcome) = run_root(&sup, "parent: fan out").await;
    assert_eq!(outcome.final_text, "parent fine", "{outcome:?}");

    let parent = server
        .captured()
        .into_iter()
        .find(|r| r.first_user_text() == Some("parent: fan out") && r.assistant_turns() == 1)
        .unwrap();
    let content = parent.last_message().unwrap()["content"].as_str().unwrap();
    let v: Value = serde_json::from_str(content).unwrap();
    let results = v["results"].as_array().unwrap();
    let statuses: Vec<&str> = results
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["completed", "failed", "completed", "completed"],
        "{v}"
    );
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i);
    }
    assert!(results[0]["result"]
        .as_str()
        .unwrap()
        .contains("ok first finished"));
    assert!(results[3]["result"]
        .as_str()
        .unwrap()
        .contains("ok last finished"));
    let failed = results[1]["result"].as_str().unwrap();
    assert!(failed.contains("500"), "{failed}");
    // It gave up after its attempts: 3 requests, no more.
    let five_hundreds = server
        .captured()
        .iter()
        .filter(|r| r.first_user_text() == Some("always 500"))
        .count();
    assert_eq!(five_hundreds, 3);
    // The panic came back to the child as a tool error; it went on and finished.
    let boom_second = server
        .captured()
        .into_iter()
        .find(|r| r.first_user_text() == Some("calls boom") && r.assistant_turns() == 1)
        .unwrap();
    let tool_msg = boom_second.last_message().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        tool_msg.contains("crashed") && tool_msg.contains("boom went the tool"),
        "{tool_msg}"
    );
    assert!(results[2]["result"]
        .as_str()
        .unwrap()
        .contains("calls boom finished"));
    sup.shutdown().await;
}

#[tokio::test]
async fn a_run_that_crashes_becomes_a_failed_record_and_spares_its_siblings() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["c0", "c1", "c2"]})),
                ScriptStep::text("parent fine"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("child fine"))]);
    // Building the tool set panics for exactly one run (the second child to start).
    let calls = Arc::new(AtomicUsize::new(0));
    let sandbox = Arc::new(Sandbox::new());
    let tools: ToolFactory = Arc::new(move |_run: &str| {
        if calls.fetch_add(1, Ordering::SeqCst) == 2 {
            panic!("tool factory exploded");
        }
        builtin_tools(&BuiltinOptions {
            memory: None,
            sandbox: Some(sandbox.clone()),
        })
    });
    let sup = supervisor(ws.path(), Arc::new(model), tools);
    let (_, outcome) = run_root(&sup, "parent: three").await;
    assert_eq!(outcome.final_text, "parent fine");
    let snap = sup.snapshot();
    assert_eq!(snap.len(), 3);
    let failed: Vec<_> = snap
        .iter()
        .filter(|r| r.status == brood::subagent::LiveStatus::Failed)
        .collect();
    assert_eq!(failed.len(), 1, "{snap:?}");
    assert_eq!(
        snap.iter()
            .filter(|r| r.status == brood::subagent::LiveStatus::Completed)
            .count(),
        2
    );
    let detail = sup
        .env()
        .ledger
        .get_run(&RunId::from_string(&failed[0].agent_id))
        .await
        .unwrap();
    assert_eq!(detail.run.status.as_str(), "failed");
    assert!(
        detail
            .run
            .error
            .unwrap_or_default()
            .contains("tool factory exploded"),
        "the record says why"
    );
    sup.shutdown().await;
}

#[tokio::test]
async fn the_ledger_keeps_every_lifecycle_and_transcript_and_handle_read_slices_it() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["rec ok: read", "rec fail"]})),
                ScriptStep::func(|req| {
                    let task = last_tool_json(req);
                    let handle = task["results"][0]["transcript_handle"].as_str().unwrap();
                    Ok(call(
                        "handle_read",
                        json!({"handle": handle, "from": 1, "limit": 2}),
                    ))
                }),
                ScriptStep::text("parent fine"),
            ],
        )
        .on(
            "rec ok",
            vec![
                ScriptStep::tool_call("list_dir", json!({"path": "."})),
                ScriptStep::text(report("listed")),
            ],
        )
        .on(
            "rec fail",
            vec![ScriptStep::error(ModelError::Script(
                "the model broke".into(),
            ))],
        );
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    let out = session
        .run_with("parent: record", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "parent fine");
    let parent = probe.requests_for("parent:");
    let task = last_tool_json(&parent[1]);
    let ok_id = task["results"][0]["agent_id"].as_str().unwrap().to_string();
    let fail_id = task["results"][1]["agent_id"].as_str().unwrap().to_string();
    assert_eq!(task["results"][1]["status"], "failed");

    flushed(&session).await;
    let ok = run_detail(&session, &ok_id).await;
    let kinds: Vec<EventKind> = ok.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| k.is_lifecycle())
            .collect::<Vec<_>>(),
        [
            &EventKind::Spawned,
            &EventKind::Started,
            &EventKind::Completed
        ]
    );
    for k in [
        EventKind::ModelRequest,
        EventKind::ToolStarted,
        EventKind::ToolFinished,
    ] {
        assert!(kinds.contains(&k), "{k:?} missing from {kinds:?}");
    }
    assert_eq!(ok.run.steps, 2);
    let result = ok.run.result.clone().unwrap();
    assert_eq!(result["report"]["summary"], "listed", "{result}");
    let fail = run_detail(&session, &fail_id).await;
    assert_eq!(
        fail.events
            .iter()
            .map(|e| e.kind)
            .filter(|k| k.is_lifecycle())
            .collect::<Vec<_>>(),
        [EventKind::Spawned, EventKind::Started, EventKind::Failed]
    );
    assert!(fail
        .run
        .error
        .unwrap_or_default()
        .contains("the model broke"));

    // The whole conversation is in the transcript, starting with the task.
    let slice = session
        .ledger()
        .transcript(&RunId::from_string(&ok_id), 0, 100)
        .await
        .unwrap();
    let roles: Vec<&str> = slice.entries.iter().map(|e| e.role.as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{slice:#?}"
    );
    assert_eq!(slice.entries[0].content["content"], "rec ok: read");

    // handle_read gave the parent the asked-for window of it.
    let read = last_tool_json(&parent[2]);
    let entries = read["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{read}");
    assert_eq!(entries[0]["seq"], 1);
    assert_eq!(entries[0]["role"], "assistant");
    assert_eq!(entries[1]["role"], "tool");
    assert_eq!(read["total"], 4);
    session.close().await;
}

#[tokio::test]
async fn handle_read_reads_only_the_callers_own_sub_agents() {
    let ws = workspace("");
    let refused = "is not the handle, id or name of one of your sub-agents";
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["peek one", "peek two"]})),
                // Another session's run, or a made-up id: not this run's to read.
                ScriptStep::tool_call(
                    "handle_read",
                    json!({"handle": "transcript:0123456789abcdef"}),
                ),
                ScriptStep::text("parent fine"),
            ],
        )
        .on("peek one", vec![ScriptStep::text(report("one"))])
        .on(
            "peek two",
            vec![
                // Its sibling, by the name `task` gave it.
                ScriptStep::tool_call("handle_read", json!({"handle": "general"})),
                ScriptStep::text(report("two")),
            ],
        );
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    let out = session
        .run_with("parent: peek", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "parent fine");
    let two = probe.requests_for("peek two");
    let sibling = tool_results(&two[1]).last().copied().unwrap_or_default();
    assert!(sibling.contains(refused), "{sibling}");
    let parent = probe.requests_for("parent:");
    let task = last_tool_json(&parent[1]);
    assert_eq!(task["results"][0]["name"], "general", "{task}");
    let other = tool_results(&parent[2]).last().copied().unwrap_or_default();
    assert!(other.contains(refused), "{other}");
    session.close().await;
}

#[tokio::test]
async fn many_children_remembering_at_once_each_note_lands_once() {
    let ws = workspace("[memory]\nenabled = true\n");
    let n = 12;
    let prompts: Vec<String> = (0..n).map(|i| format!("note {i}")).collect();
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": prompts})),
                ScriptStep::text("parent fine"),
            ],
        )
        .otherwise(vec![
            ScriptStep::func(|req| {
                let i = first_user(req).trim_start_matches("note ");
                Ok(call(
                    "remember",
                    json!({"note": format!("fact <{i}> holds")}),
                ))
            }),
            ScriptStep::text(report("noted")),
        ]);
    let session = session_with(ws.path(), Arc::new(model), Some(limits(n, n))).await;
    let out = session
        .run_with("parent: remember things", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "parent fine");
    let memory = std::fs::read_to_string(ws.path().join(".brood/memory.md")).unwrap();
    for i in 0..n {
        let needle = format!("fact <{i}> holds");
        assert_eq!(memory.matches(&needle).count(), 1, "{needle} in:\n{memory}");
    }
    assert_eq!(
        memory.lines().filter(|l| l.contains("fact <")).count(),
        n,
        "one line per note:\n{memory}"
    );
    session.close().await;
}

#[tokio::test]
async fn shutdown_stops_the_parent_and_its_task_children_promptly() {
    let ws = workspace("");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["held: forever"]})),
                ScriptStep::text("unreachable"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("never"))]);
    let probe = Probe::new(model);
    let _gate = probe.gate("held:");
    let sup = supervisor(ws.path(), probe.arc(), builtin_plus(Vec::new));
    let root = {
        let sup = sup.clone();
        tokio::spawn(async move {
            sup.run_root(RootRequest {
                prompt: "parent: hold on".into(),
                system: None,
                max_turns: 10,
                events: None,
                cancel: CancellationToken::new(),
                name: "parent".into(),
                tallies: None,
                history: Vec::new(),
            })
            .await
        })
    };
    probe.wait_for("held:", 1).await;
    tokio::time::timeout(std::time::Duration::from_secs(5), sup.shutdown())
        .await
        .expect("shutdown waited for a run nobody cancelled");
    let (root_id, outcome) = within("the parent", root).await.unwrap().unwrap();
    assert_eq!(outcome.ending, brood::agent::Ending::Cancelled);
    let child = &sup.snapshot()[0];
    assert_eq!(child.status, brood::subagent::LiveStatus::Cancelled);
    let ledger = &sup.env().ledger;
    for id in [root_id.as_str(), child.agent_id.as_str()] {
        let run = ledger.get_run(&RunId::from_string(id)).await.unwrap().run;
        assert_eq!(run.status.as_str(), "cancelled", "{id}");
    }
}

#[tokio::test]
async fn agent_list_shows_earlier_sessions_only_when_asked() {
    let ws = workspace("");
    let first = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["old: work"]})),
                ScriptStep::text("done"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("old work"))]);
    let session = session_with(ws.path(), Arc::new(first), None).await;
    session
        .run_with("parent: first session", None, CancellationToken::new())
        .await
        .unwrap();
    let old_id = session.supervisor().snapshot()[0].agent_id.clone();
    session.close().await;

    let second = ScriptedModel::new().on(
        "parent:",
        vec![
            ScriptStep::tool_call("agent_list", json!({})),
            ScriptStep::tool_call("agent_list", json!({"include_archived": true})),
            ScriptStep::text("listed"),
        ],
    );
    let probe = Probe::new(second);
    let session = session_with(ws.path(), probe.arc(), None).await;
    session
        .run_with("parent: second session", None, CancellationToken::new())
        .await
        .unwrap();
    let parent = probe.requests_for("parent:");
    let current = last_tool_json(&parent[1]);
    assert_eq!(current["agents"], json!([]), "{current}");
    let all = last_tool_json(&parent[2]);
    let old = all["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == old_id.as_str())
        .unwrap_or_else(|| panic!("{old_id} not in {all}"));
    assert_eq!(old["from_prior_session"], true);
    assert_eq!(old["status"], "completed");
    session.close().await;
}

/// Each spawn record names the session workspace's branch as `.git/HEAD` says at
/// that spawn: a checkout between two spawns (git renames a new `HEAD` over the
/// old one) is seen by the next, and a detached `HEAD` names no branch.
#[tokio::test]
async fn each_spawn_records_the_branch_head_names_at_that_spawn() {
    let ws = workspace("");
    let git = ws.path().join(".git");
    std::fs::create_dir_all(&git).unwrap();
    let checkout = |head: &str| {
        std::fs::write(git.join("HEAD.lock"), head).unwrap();
        std::fs::rename(git.join("HEAD.lock"), git.join("HEAD")).unwrap();
    };
    checkout("ref: refs/heads/main\n");
    let model = ScriptedModel::new()
        .on(
            "parent:",
            vec![
                ScriptStep::tool_call("task", json!({"prompts": ["child"]})),
                ScriptStep::text("parent fine"),
            ],
        )
        .otherwise(vec![ScriptStep::text(report("child fine"))]);
    let sup = supervisor(ws.path(), Arc::new(model), builtin_plus(Vec::new));
    let mut seen = std::collections::HashSet::new();
    let mut branches = Vec::new();
    for head in [
        "ref: refs/heads/main\n",
        "ref: refs/heads/main\n",
        "ref: refs/heads/topic\n",
        "0123456789abcdef0123456789abcdef01234567\n",
    ] {
        checkout(head);
        let (_, outcome) = run_root(&sup, "parent: one child").await;
        assert_eq!(outcome.final_text, "parent fine");
        let child = sup
            .snapshot()
            .into_iter()
            .find(|r| seen.insert(r.agent_id.clone()))
            .expect("a new child");
        let run = sup
            .env()
            .ledger
            .get_run(&RunId::from_string(&child.agent_id))
            .await
            .unwrap()
            .run;
        branches.push(run.git_branch);
    }
    assert_eq!(
        branches,
        [
            Some("main".to_string()),
            Some("main".to_string()),
            Some("topic".to_string()),
            None
        ],
        "each child names the branch of its own spawn"
    );
    sup.shutdown().await;
}

/// The opens of one step, of different kinds in turn, each record the grant of
/// its own kind (siblings of one grant share its encoded text; one of another
/// kind between them must not get theirs).
#[tokio::test]
async fn each_spawn_records_its_own_grant_when_kinds_alternate() {
    let ws = workspace("");
    let calls = [
        json!({"prompt": "e1", "agent_type": "explore"}),
        json!({"prompt": "g1", "agent_type": "general"}),
        json!({"prompt": "e2", "agent_type": "explore"}),
        json!({"prompt": "c1", "agent_type": "custom", "allowed_tools": ["read_file"]}),
        json!({"prompt": "g2", "agent_type": "general"}),
        json!({"prompt": "c2", "agent_type": "custom", "allowed_tools": ["read_file", "grep"]}),
    ];
    let mut parent = vec![ScriptStep::tool_calls(
        calls.iter().map(|a| ("agent_open", a.clone())),
    )];
    parent.extend((0..=calls.len()).map(|_| ScriptStep::text("parent fine")));
    let model = ScriptedModel::new()
        .on("parent:", parent)
        .otherwise(vec![ScriptStep::text(report("child fine"))]);
    let sup = supervisor(ws.path(), Arc::new(model), builtin_plus(Vec::new));
    let (_, outcome) = run_root(&sup, "parent: open six").await;
    assert_eq!(outcome.final_text, "parent fine", "{outcome:?}");
    let mut grants = std::collections::HashMap::new();
    for child in sup.snapshot() {
        let detail = sup
            .env()
            .ledger
            .get_run(&RunId::from_string(&child.agent_id))
            .await
            .unwrap();
        let spawned = detail
            .events
            .iter()
            .find(|e| e.kind == EventKind::Spawned)
            .expect("a spawn record");
        let prompt = detail.run.objective.clone();
        grants.insert(prompt, spawned.payload["grant"].clone());
    }
    assert_eq!(grants.len(), 6, "{grants:?}");
    let tools =
        |p: &str| -> Vec<String> { serde_json::from_value(grants[p]["tools"].clone()).unwrap() };
    assert_eq!(grants["e1"], grants["e2"], "one kind, one grant");
    assert_eq!(grants["g1"], grants["g2"], "one kind, one grant");
    assert!(
        tools("g1").contains(&"write_file".to_string()),
        "{:?}",
        tools("g1")
    );
    assert!(
        !tools("e1").contains(&"write_file".to_string()),
        "{:?}",
        tools("e1")
    );
    assert_eq!(grants["e1"]["permissions"]["holder"], "explore");
    assert_eq!(grants["g1"]["permissions"]["holder"], "general");
    assert_eq!(tools("c1"), ["read_file"]);
    assert_eq!(tools("c2"), ["grep", "read_file"]);
    sup.shutdown().await;
}
