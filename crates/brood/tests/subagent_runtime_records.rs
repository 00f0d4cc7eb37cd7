//! Sub-agent runtime, end to end: `task` isolation (a child failing on 500s, a
//! panicking tool, a crashing run), the ledger's lifecycle and transcripts,
//! `handle_read`, and many children writing memory at once.
mod common;

use async_trait::async_trait;
use brood::agent::AgentOutcome;
use brood::ledger::{EventKind, Ledger, LedgerOptions, RunId};
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::{Model, ModelError, Sampling};
use brood::subagent::{
    AgentCatalog, QuickModels, RootRequest, SubagentSettings, Supervisor, SupervisorEnv,
    ToolFactory,
};
use brood::tool::{
    builtin_tools, BuiltinOptions, Capability, Sandbox, Tool, ToolContext, ToolError, Workspace,
};
use brood_mock::{MockReply, MockServer};
use common::*;
use serde_json::{json, Value};
use std::path::Path;
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

/// A supervisor built by hand, so the tool set can be extended.
fn supervisor(ws: &Path, model: Arc<dyn Model>, tools: ToolFactory) -> Supervisor {
    supervisor_with(ws, model, tools, LedgerOptions::default())
}

fn supervisor_with(
    ws: &Path,
    model: Arc<dyn Model>,
    tools: ToolFactory,
    options: LedgerOptions,
) -> Supervisor {
    supervisor_on(
        ws,
        Arc::new(Ledger::open(ws, options).unwrap()),
        model,
        tools,
    )
}

/// A supervisor on a ledger the test keeps a handle to.
fn supervisor_on(
    ws: &Path,
    ledger: Arc<Ledger>,
    model: Arc<dyn Model>,
    tools: ToolFactory,
) -> Supervisor {
    Supervisor::new(SupervisorEnv {
        workspace: Arc::new(Workspace::open(ws).unwrap()),
        session_id: ledger.session_id().to_string(),
        ledger,
        catalog: Arc::new(AgentCatalog::load(ws, &[])),
        settings: SubagentSettings::default(),
        quick_models: QuickModels::default(),
        main_provider: "local".into(),
        main_model_id: "mock-model".into(),
        main_model: model,
        routes: Arc::new(|p: &str, _m: &str| Err(ModelError::Config(format!("no provider {p}")))),
        tools,
        read_only_shell: false,
        sampling: Sampling::default(),
        tool_choice: Default::default(),
        tool_concurrency: brood::agent::DEFAULT_TOOL_CONCURRENCY,
        session_cancel: CancellationToken::new(),
        pricing: Default::default(),
        project_instructions: "".into(),
        mcp: Default::default(),
    })
}

fn builtin_plus(extra: impl Fn() -> Vec<Arc<dyn Tool>> + Send + Sync + 'static) -> ToolFactory {
    let sandbox = Arc::new(Sandbox::new());
    Arc::new(move |_run: &str| {
        let mut tools = builtin_tools(&BuiltinOptions {
            memory: None,
            sandbox: Some(sandbox.clone()),
        });
        tools.extend(extra());
        tools
    })
}

async fn run_root(sup: &Supervisor, prompt: &str) -> (String, AgentOutcome) {
    let req = RootRequest {
        prompt: prompt.into(),
        system: None,
        max_turns: 10,
        events: None,
        cancel: CancellationToken::new(),
        name: "parent".into(),
        tallies: None,
        history: Vec::new(),
    };
    within("the parent run", sup.run_root(req)).await.unwrap()
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

/// Holds the ledger's write lock from outside during the parent's first step (the
/// one that opens the children), and notes when each child's model step starts.
struct LockDuringSpawn {
    inner: ScriptedModel,
    db: std::path::PathBuf,
    /// The thread holding the lock; it returns when it released it.
    holder: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<std::time::Instant>>>>,
    child_steps: Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
}

#[async_trait]
impl Model for LockDuringSpawn {
    fn provider_name(&self) -> &str {
        "lock-during-spawn"
    }
    async fn step(
        &self,
        request: &brood::model::ModelRequest,
        on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, ModelError> {
        let first = request.messages.first().map(|m| m.content.as_str());
        let is_parent = first.is_some_and(|t| t.starts_with("parent:"));
        if is_parent && request.messages.len() == 1 {
            let (locked_tx, locked_rx) = std::sync::mpsc::channel();
            let db = self.db.clone();
            let holder = std::thread::spawn(move || {
                let conn = rusqlite::Connection::open(db).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                locked_tx.send(()).unwrap();
                // The stall every spawn record has to wait out.
                std::thread::sleep(std::time::Duration::from_millis(300));
                let released = std::time::Instant::now();
                conn.execute_batch("ROLLBACK").unwrap();
                released
            });
            *self.holder.lock().unwrap() = Some(holder);
            locked_rx.recv().unwrap();
        } else if !is_parent {
            self.child_steps
                .lock()
                .unwrap()
                .push(std::time::Instant::now());
        }
        self.inner.step(request, on_event).await
    }
}

/// The parent opens three children while the ledger is locked from outside for
/// 300 ms; returns the parent's outcome, when the lock was released and when each
/// child's model step started.
async fn open_children_under_a_locked_ledger(
    options: LedgerOptions,
) -> (AgentOutcome, std::time::Instant, Vec<std::time::Instant>) {
    let ws = workspace("");
    let db = Ledger::open(ws.path(), LedgerOptions::default())
        .unwrap()
        .db_path()
        .to_path_buf();
    let holder = Arc::new(std::sync::Mutex::new(None));
    let child_steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let model = LockDuringSpawn {
        inner: ScriptedModel::new()
            .on(
                "parent:",
                vec![
                    ScriptStep::tool_call("task", json!({"prompts": ["c0", "c1", "c2"]})),
                    ScriptStep::text("parent fine"),
                ],
            )
            .otherwise(vec![ScriptStep::text(report("child fine"))]),
        db,
        holder: holder.clone(),
        child_steps: child_steps.clone(),
    };
    let sup = supervisor_with(ws.path(), Arc::new(model), builtin_plus(Vec::new), options);
    let (_, outcome) = run_root(&sup, "parent: three").await;
    sup.shutdown().await;
    let holder = holder.lock().unwrap().take().expect("the lock was taken");
    let released = holder.join().unwrap();
    let steps = child_steps.lock().unwrap().clone();
    (outcome, released, steps)
}

/// The text of the parent's first tool result (its `task` call's).
fn first_tool_result(outcome: &AgentOutcome) -> String {
    outcome
        .messages
        .iter()
        .find(|m| m.role == brood::model::Role::Tool)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_child_sends_nothing_before_its_spawn_record_is_on_disk() {
    let (outcome, released, steps) =
        open_children_under_a_locked_ledger(LedgerOptions::default()).await;
    assert_eq!(outcome.final_text, "parent fine");
    assert_eq!(steps.len(), 3, "each child made its step");
    // The task result is compact JSON (indentation would be tokens on every later step).
    let task_result = first_tool_result(&outcome);
    let parsed: Value = serde_json::from_str(&task_result).unwrap();
    assert_eq!(parsed["results"].as_array().map(Vec::len), Some(3));
    assert_eq!(parsed.to_string(), task_result);
    for at in steps {
        assert!(
            at > released,
            "a child asked its model {:?} before its spawn could be written",
            released - at
        );
    }
}

#[tokio::test]
async fn a_spawn_record_waits_out_a_lock_held_past_the_busy_timeout() {
    // The writer's busy timeout ends long before the lock is released: it waits and
    // tries again instead of failing the spawns, and the children run once recorded.
    let options = LedgerOptions {
        busy_timeout: std::time::Duration::from_millis(50),
        ..LedgerOptions::default()
    };
    let (outcome, released, steps) = open_children_under_a_locked_ledger(options).await;
    assert_eq!(outcome.final_text, "parent fine");
    assert_eq!(steps.len(), 3, "each child ran once its spawn was written");
    assert!(steps.iter().all(|at| *at > released));
    let task_result: Value = serde_json::from_str(&first_tool_result(&outcome)).unwrap();
    for r in task_result["results"].as_array().unwrap() {
        assert_eq!(r["status"], "completed", "{task_result}");
    }
}

/// Takes the ledger's write lock from outside when the first child asks its model,
/// and holds it until the writer has been seen retrying `retries` times: the
/// children's and the parent's end-of-run records all meet the lock.
struct LockAcrossTheEnd {
    inner: ScriptedModel,
    db: std::path::PathBuf,
    ledger: Arc<Ledger>,
    retries: u64,
    holder: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<u64>>>>,
}

#[async_trait]
impl Model for LockAcrossTheEnd {
    fn provider_name(&self) -> &str {
        "lock-across-the-end"
    }
    async fn step(
        &self,
        request: &brood::model::ModelRequest,
        on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, ModelError> {
        let first = request.messages.first().map(|m| m.content.as_str());
        let is_child = !first.is_some_and(|t| t.starts_with("parent:"));
        let locked = {
            let mut holder = self.holder.lock().unwrap();
            if is_child && holder.is_none() {
                let (locked_tx, locked_rx) = std::sync::mpsc::channel();
                let (db, ledger, want) = (self.db.clone(), self.ledger.clone(), self.retries);
                *holder = Some(std::thread::spawn(move || {
                    let conn = rusqlite::Connection::open(db).unwrap();
                    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                    locked_tx.send(()).unwrap();
                    // Release once the writer has been seen waiting (or give up).
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                    let mut seen = ledger.stats();
                    while (seen.busy_retries < want || seen.waiting_since_ms.is_none())
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        seen = ledger.stats();
                    }
                    conn.execute_batch("ROLLBACK").unwrap();
                    seen.busy_retries
                }));
                Some(locked_rx)
            } else {
                None
            }
        };
        if let Some(rx) = locked {
            rx.recv().unwrap();
        }
        self.inner.step(request, on_event).await
    }
}

#[tokio::test]
async fn end_of_run_records_wait_out_a_lock_held_across_the_end_of_a_fan_out() {
    let ws = workspace("");
    let options = LedgerOptions {
        busy_timeout: std::time::Duration::from_millis(200),
        ..LedgerOptions::default()
    };
    let ledger = Arc::new(Ledger::open(ws.path(), options).unwrap());
    let holder = Arc::new(std::sync::Mutex::new(None));
    let model = LockAcrossTheEnd {
        inner: ScriptedModel::new()
            .on(
                "parent:",
                vec![
                    ScriptStep::tool_call("task", json!({"prompts": ["c0", "c1", "c2"]})),
                    ScriptStep::text("parent fine"),
                ],
            )
            .otherwise(vec![ScriptStep::text(report("child fine"))]),
        db: ledger.db_path().to_path_buf(),
        ledger: ledger.clone(),
        // About 2 s at a 200 ms busy timeout with the writer's backoff.
        retries: 5,
        holder: holder.clone(),
    };
    let sup = supervisor_on(
        ws.path(),
        ledger.clone(),
        Arc::new(model),
        builtin_plus(Vec::new),
    );
    let (_, outcome) = run_root(&sup, "parent: three").await;
    assert_eq!(outcome.final_text, "parent fine");
    let handle = holder.lock().unwrap().take().expect("the lock was taken");
    let retries = handle.join().unwrap();
    within("the flush", ledger.flush()).await.unwrap();
    let runs = ledger.list_runs(Default::default()).await.unwrap();
    assert_eq!(runs.len(), 4, "{runs:?}");
    for r in &runs {
        assert_eq!(
            r.run.status,
            brood::ledger::RunStatus::Completed,
            "{:?}: {:?}",
            r.run.name,
            r.run.status_reason
        );
        let detail = ledger.get_run(&r.run.id).await.unwrap();
        assert!(
            detail.run.result.is_some(),
            "{:?} lost its result",
            r.run.name
        );
    }
    let stats = ledger.stats();
    assert_eq!(stats.ops_failed, 0, "{stats:?}");
    assert!(
        retries >= 5,
        "the writer was never seen waiting ({retries})"
    );

    assert_eq!(stats.waiting_since_ms, None, "the wait is over");
    assert_eq!(sup.ledger_write_failures(), 0);
    sup.shutdown().await;
}
