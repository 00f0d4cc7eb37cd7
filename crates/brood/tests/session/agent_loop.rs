//! The agent loop through its public API with the scripted model: parallel tool
//! calls (concurrent, results in call order), the max_turns final report, a
//! guard's budget, cancellation mid-step, a failing step.

use async_trait::async_trait;
use brood::agent::{
    self, AgentEvent, AgentHooks, AgentSpec, BudgetSpent, Ending, Guard, ToolChoicePolicy,
};
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::{Message, ModelError, Role, Sampling, ToolChoice, Usage};
use brood::tool::{Capability, Permissions, Tool, ToolContext, ToolError, Toolbox, Workspace};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

/// A tool that waits at a barrier: it only returns once `n` calls are in flight
/// together, so sequential execution would hang (and the test time out).
struct Rendezvous {
    barrier: Arc<Barrier>,
}

#[async_trait]
impl Tool for Rendezvous {
    fn name(&self) -> &str {
        "meet"
    }
    fn description(&self) -> &str {
        "waits for its siblings"
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "properties": {"tag": {"type": "string"}}})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.barrier.wait().await;
        Ok(format!("met {}", args["tag"].as_str().unwrap_or("?")))
    }
}

/// Counts calls, says it started; never finishes until cancelled.
struct Forever(Arc<AtomicUsize>, Arc<tokio::sync::Notify>);

#[async_trait]
impl Tool for Forever {
    fn name(&self) -> &str {
        "forever"
    }
    fn description(&self) -> &str {
        "never returns"
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        self.1.notify_one();
        std::future::pending().await
    }
}

/// A model answering every step with a closure.
struct FnModel<F>(F);

#[async_trait]
impl<F> brood::model::Model for FnModel<F>
where
    F: Fn(&brood::model::ModelRequest) -> Result<brood::model::ModelResponse, ModelError>
        + Send
        + Sync,
{
    fn provider_name(&self) -> &str {
        "fn"
    }
    async fn step(
        &self,
        request: &brood::model::ModelRequest,
        _on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, ModelError> {
        (self.0)(request)
    }
}

fn spec<M: brood::model::Model + 'static>(
    model: M,
    tools: Vec<Arc<dyn Tool>>,
    max_turns: u32,
) -> (AgentSpec, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let spec = AgentSpec {
        run_id: "r1".into(),
        system: "sys".into(),
        model: Arc::new(model),
        model_id: "m".into(),
        sampling: Sampling::default(),
        tool_choice: ToolChoicePolicy::default(),
        toolbox: Toolbox::new(tools, Permissions::full("test")),
        workspace: Arc::new(Workspace::open(dir.path()).unwrap()),
        max_turns,
        offered_tools: None,
        tool_concurrency: brood::agent::DEFAULT_TOOL_CONCURRENCY,
    };
    (spec, dir)
}

fn recording_hooks() -> (AgentHooks, Arc<Mutex<Vec<AgentEvent>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let hooks = AgentHooks {
        events: Some(Arc::new(move |e: &AgentEvent| {
            s.lock().unwrap().push(e.clone())
        })),
        ..Default::default()
    };
    (hooks, seen)
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently_and_answer_in_call_order() {
    let barrier = Arc::new(Barrier::new(3));
    let model = ScriptedModel::new().on(
        "go",
        vec![
            ScriptStep::tool_calls([
                ("meet", json!({"tag": "a"})),
                ("meet", json!({"tag": "b"})),
                ("meet", json!({"tag": "c"})),
            ]),
            ScriptStep::text("all met"),
        ],
    );
    let (spec, _dir) = spec(model, vec![Arc::new(Rendezvous { barrier })], 10);
    let (hooks, events) = recording_hooks();
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        agent::run(
            &spec,
            vec![Message::user("go")],
            &hooks,
            &CancellationToken::new(),
        ),
    )
    .await
    .expect("tool calls of one step must run concurrently (a barrier of 3 was never met)");
    assert_eq!(out.ending, Ending::Completed);
    assert_eq!(out.final_text, "all met");
    assert_eq!(out.turns, 2);
    assert_eq!(out.tool_calls, 3);
    let results: Vec<&str> = out
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(
        results,
        ["met a", "met b", "met c"],
        "results go back in call order"
    );
    // Each result answers its own call id.
    let call_ids: Vec<String> = out.messages[1]
        .tool_calls
        .iter()
        .map(|c| c.id.clone())
        .collect();
    let answered: Vec<String> = out
        .messages
        .iter()
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    assert_eq!(call_ids, answered);
    let finished = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolFinished { ok: true, .. }))
        .count();
    assert_eq!(finished, 3);
}

#[tokio::test]
async fn max_turns_ends_with_one_tool_less_report_step() {
    // A model that would call tools forever.
    let requests = Arc::new(Mutex::new(Vec::new()));
    let r = requests.clone();
    let model = FnModel(move |req: &brood::model::ModelRequest| {
        r.lock().unwrap().push(req.clone());
        let last = req
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        if req.tools.is_empty() {
            Ok(brood::model::ModelResponse {
                message: Message::assistant(format!("report after: {}", !last.is_empty())),
                usage: Some(Usage {
                    input_tokens: 10,
                    output_tokens: 5,
                    cached_input_tokens: 0,
                }),
                finish_reason: brood::model::FinishReason::Stop,
            })
        } else {
            let mut m = Message::assistant("");
            m.tool_calls.push(brood::model::ToolCall {
                id: format!("c{}", req.messages.len()),
                name: "list_dir".into(),
                arguments: "{}".into(),
            });
            Ok(brood::model::ModelResponse {
                message: m,
                usage: Some(Usage {
                    input_tokens: 10,
                    output_tokens: 5,
                    cached_input_tokens: 0,
                }),
                finish_reason: brood::model::FinishReason::ToolCalls,
            })
        }
    });
    let tools = brood::tool::builtin_tools(&Default::default());
    let (spec, _dir) = spec(model, tools, 3);
    let out = agent::run(
        &spec,
        vec![Message::user("loop")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.ending, Ending::MaxTurns);
    assert_eq!(out.turns, 4, "3 turns plus the report step");
    assert_eq!(out.final_text, "report after: true");
    assert_eq!(out.usage.input_tokens, 40);
    let reqs = requests.lock().unwrap();
    assert_eq!(reqs.len(), 4);
    assert!(reqs[..3].iter().all(|r| !r.tools.is_empty()));
    let last = &reqs[3];
    assert!(
        last.tools.is_empty() && last.tool_choice.is_none(),
        "the report step offers no tools"
    );
    let prompt = &last.messages.last().unwrap().content;
    assert!(prompt.contains("max_turns = 3"), "{prompt}");
}

struct TokenBudget(u64);
impl Guard for TokenBudget {
    fn before_step(&self, usage: &Usage, _turn: u32) -> Result<(), BudgetSpent> {
        if usage.total() >= self.0 {
            Err(BudgetSpent::RunTokens {
                budget: self.0,
                used: usage.total(),
            })
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn a_guard_stops_the_loop_with_a_report() {
    let model = ScriptedModel::new().on(
        "work",
        vec![
            ScriptStep::tool_call("list_dir", json!({})),
            ScriptStep::tool_call("list_dir", json!({})),
            ScriptStep::text("partial report"),
        ],
    );
    let (spec, _dir) = spec(model, brood::tool::builtin_tools(&Default::default()), 30);
    let hooks = AgentHooks {
        guard: Some(Arc::new(TokenBudget(1))),
        ..Default::default()
    };
    let out = agent::run(
        &spec,
        vec![Message::user("work")],
        &hooks,
        &CancellationToken::new(),
    )
    .await;
    assert!(
        matches!(out.ending, Ending::Budget { ref reason } if reason.contains("token budget")),
        "{:?}",
        out.ending
    );
    // One real step, then the report step.
    assert_eq!(out.turns, 2);
}

#[tokio::test]
async fn cancellation_mid_tool_call_stops_the_loop() {
    let calls = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Notify::new());
    let model = ScriptedModel::new().on(
        "hang",
        vec![
            ScriptStep::tool_call("forever", json!({})),
            ScriptStep::text("never"),
        ],
    );
    let (spec, _dir) = spec(
        model,
        vec![Arc::new(Forever(calls.clone(), started.clone()))],
        10,
    );
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    let run = tokio::spawn(async move {
        agent::run(
            &spec,
            vec![Message::user("hang")],
            &AgentHooks::default(),
            &c2,
        )
        .await
    });
    started.notified().await;
    cancel.cancel();
    let out = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("cancel must stop a running tool")
        .unwrap();
    assert_eq!(out.ending, Ending::Cancelled);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let tool_msg = out.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(
        tool_msg.content.contains("cancelled"),
        "{}",
        tool_msg.content
    );
}

#[tokio::test]
async fn cancellation_mid_model_step_stops_the_loop() {
    let model = ScriptedModel::new().on(
        "slow",
        vec![ScriptStep::text("late").after(Duration::from_secs(600))],
    );
    let (spec, _dir) = spec(model, vec![], 10);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    let hooks = AgentHooks {
        events: Some(Arc::new(move |e: &AgentEvent| {
            if matches!(e, AgentEvent::ModelRequest { .. }) {
                c2.cancel();
            }
        })),
        ..Default::default()
    };
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        agent::run(&spec, vec![Message::user("slow")], &hooks, &cancel),
    )
    .await
    .expect("cancel must stop a model step");
    assert_eq!(out.ending, Ending::Cancelled);
    assert_eq!(out.final_text, "");
}

#[tokio::test]
async fn a_failed_step_ends_the_run_with_the_typed_error() {
    let model = ScriptedModel::new().on(
        "fail",
        vec![ScriptStep::error(ModelError::Status {
            status: 503,
            message: "down".into(),
            retry_after_ms: None,
        })],
    );
    let (spec, _dir) = spec(model, vec![], 10);
    let out = agent::run(
        &spec,
        vec![Message::user("fail")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert!(matches!(out.ending, Ending::Failed { .. }));
    assert!(matches!(
        out.error,
        Some(ModelError::Status { status: 503, .. })
    ));
}

#[tokio::test]
async fn tool_choice_policy_forces_only_the_first_step() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let model = FnModel(move |req: &brood::model::ModelRequest| {
        s.lock().unwrap().push(req.tool_choice.clone());
        let n = s.lock().unwrap().len();
        let mut m = Message::assistant(if n > 1 { "done" } else { "" });
        if n == 1 {
            m.tool_calls.push(brood::model::ToolCall {
                id: "c1".into(),
                name: "list_dir".into(),
                arguments: "{}".into(),
            });
        }
        Ok(brood::model::ModelResponse {
            message: m,
            usage: None,
            finish_reason: brood::model::FinishReason::Stop,
        })
    });
    let (mut spec, _dir) = spec(model, brood::tool::builtin_tools(&Default::default()), 10);
    spec.tool_choice = ToolChoicePolicy {
        first: Some(ToolChoice::Named("list_dir".into())),
        rest: Some(ToolChoice::Auto),
    };
    let out = agent::run(
        &spec,
        vec![Message::user("x")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.final_text, "done");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            Some(ToolChoice::Named("list_dir".into())),
            Some(ToolChoice::Auto)
        ]
    );
}

#[tokio::test]
async fn a_tool_error_goes_back_to_the_model_and_the_loop_continues() {
    let model = ScriptedModel::new().on(
        "read",
        vec![
            ScriptStep::tool_call("read_file", json!({"path": "../../etc/passwd"})),
            ScriptStep::text("ok"),
        ],
    );
    let (spec, _dir) = spec(model, brood::tool::builtin_tools(&Default::default()), 10);
    let out = agent::run(
        &spec,
        vec![Message::user("read")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.ending, Ending::Completed);
    let tool_msg = out.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(
        tool_msg.content.starts_with("error:")
            && tool_msg.content.contains("outside the workspace"),
        "{}",
        tool_msg.content
    );
}

/// Counts how many calls are inside it at once; each waits at a barrier of
/// `limit`, so the step only finishes if exactly `limit` can run together.
struct GaugeState {
    in_flight: AtomicUsize,
    most: AtomicUsize,
    barrier: Barrier,
}

struct Gauge(Arc<GaugeState>);

#[async_trait]
impl Tool for Gauge {
    fn name(&self) -> &str {
        "gauge"
    }
    fn description(&self) -> &str {
        "counts concurrent entries"
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let g = &self.0;
        let now = g.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        g.most.fetch_max(now, Ordering::SeqCst);
        g.barrier.wait().await;
        g.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok("counted".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tool_calls_of_one_step_never_exceed_tool_concurrency() {
    let limit = 4;
    let gauge = Arc::new(GaugeState {
        in_flight: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        barrier: Barrier::new(limit),
    });
    let calls: Vec<(&str, serde_json::Value)> = (0..20).map(|_| ("gauge", json!({}))).collect();
    let model = ScriptedModel::new().on(
        "go",
        vec![ScriptStep::tool_calls(calls), ScriptStep::text("done")],
    );
    let (mut spec, _dir) = spec(model, vec![Arc::new(Gauge(gauge.clone()))], 5);
    spec.tool_concurrency = limit;
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        agent::run(
            &spec,
            vec![Message::user("go")],
            &AgentHooks::default(),
            &CancellationToken::new(),
        ),
    )
    .await
    .expect("calls must run `limit` at a time (a barrier of `limit` was never met)");
    assert_eq!(out.ending, Ending::Completed);
    assert_eq!(out.tool_calls, 20);
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        limit,
        "at most tool_concurrency calls run at once"
    );
    let results = out.messages.iter().filter(|m| m.role == Role::Tool).count();
    assert_eq!(results, 20);
}

#[tokio::test]
async fn a_huge_tool_result_is_capped_in_the_conversation() {
    struct Flood;
    #[async_trait]
    impl Tool for Flood {
        fn name(&self) -> &str {
            "flood"
        }
        fn description(&self) -> &str {
            "returns 5 MB"
        }
        fn schema(&self) -> serde_json::Value {
            json!({"type": "object"})
        }
        fn capability(&self) -> Capability {
            Capability::Read
        }
        async fn call(
            &self,
            _args: serde_json::Value,
            _ctx: &ToolContext,
        ) -> Result<String, ToolError> {
            Err(ToolError::Io {
                path: "x".repeat(5 << 20),
                detail: "boom".into(),
            })
        }
    }
    let model = ScriptedModel::new().on(
        "go",
        vec![
            ScriptStep::tool_call("flood", json!({})),
            ScriptStep::text("ok"),
        ],
    );
    let (spec, _dir) = spec(model, vec![Arc::new(Flood)], 5);
    let out = agent::run(
        &spec,
        vec![Message::user("go")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.ending, Ending::Completed);
    let tool_msg = out.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(tool_msg.content.len() <= agent::TOOL_RESULT_MAX_BYTES);
    assert!(tool_msg.content.contains("cut by brood"));
    assert!(tool_msg.content.ends_with("boom"), "the tail is kept");
}

/// Counts the steps it lets through; with `hold`, cancels the run and never lets
/// the step go (a ledger whose writer cannot keep up).
struct CountingPace {
    steps: Arc<AtomicUsize>,
    hold: Option<CancellationToken>,
}

#[async_trait]
impl agent::Pace for CountingPace {
    async fn before_step(&self) {
        self.steps.fetch_add(1, Ordering::SeqCst);
        if let Some(cancel) = &self.hold {
            cancel.cancel();
            std::future::pending::<()>().await
        }
    }
}

#[tokio::test]
async fn the_pace_is_awaited_before_every_step_and_cancellation_ends_its_wait() {
    let model = ScriptedModel::new().on(
        "go",
        vec![
            ScriptStep::tool_call("list_dir", json!({})),
            ScriptStep::text("done"),
        ],
    );
    let (paced, _dir) = spec(model, brood::tool::builtin_tools(&Default::default()), 30);
    let steps = Arc::new(AtomicUsize::new(0));
    let hooks = AgentHooks {
        pace: Some(Arc::new(CountingPace {
            steps: steps.clone(),
            hold: None,
        })),
        ..Default::default()
    };
    let out = agent::run(
        &paced,
        vec![Message::user("go")],
        &hooks,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.ending, Ending::Completed);
    assert_eq!(out.turns, 2);
    assert_eq!(steps.load(Ordering::SeqCst), 2, "one wait per step");

    // A pace that holds: the step is not taken (a request to this model, which has
    // no script for it, would fail the run), and cancelling ends the wait.
    let (held, _dir2) = spec(
        ScriptedModel::new(),
        brood::tool::builtin_tools(&Default::default()),
        30,
    );
    let cancel = CancellationToken::new();
    let hooks = AgentHooks {
        pace: Some(Arc::new(CountingPace {
            steps: steps.clone(),
            hold: Some(cancel.clone()),
        })),
        ..Default::default()
    };
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        agent::run(&held, vec![Message::user("go")], &hooks, &cancel),
    )
    .await
    .expect("cancellation did not end the pace's wait");
    assert_eq!(out.ending, Ending::Cancelled);
    assert_eq!(out.turns, 0);
    assert_eq!(steps.load(Ordering::SeqCst), 3);
}

/// Spawns a task that notes it ran, notes its own start, and returns at once
/// (as `agent_open` starts a child and waits only for its record).
struct Starter(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Tool for Starter {
    fn name(&self) -> &str {
        "start"
    }
    fn description(&self) -> &str {
        "starts a task"
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "properties": {"tag": {"type": "string"}}})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let tag = args["tag"].as_str().unwrap_or("?").to_string();
        self.0.lock().unwrap().push(format!("call {tag}"));
        let log = self.0.clone();
        tokio::spawn(async move { log.lock().unwrap().push(format!("task {tag}")) });
        Ok("started".into())
    }
}

/// A child's task started by one call of a step runs before the step's next call
/// starts: the calls of one step are started one per poll of the run, so a
/// step opening ten children does not keep its worker until the tenth is open
/// while the first nine wait in its queue (BENCHMARKS.md, spawn latency). On one
/// thread the order is exact; started all in one poll it would be every call,
/// then every task.
#[tokio::test(flavor = "current_thread")]
async fn what_a_call_starts_runs_before_the_next_call_of_its_step_starts() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let calls: Vec<(&str, serde_json::Value)> = ["a", "b", "c"]
        .iter()
        .map(|t| ("start", json!({ "tag": t })))
        .collect();
    let model = ScriptedModel::new().on(
        "go",
        vec![ScriptStep::tool_calls(calls), ScriptStep::text("done")],
    );
    let (spec, _dir) = spec(model, vec![Arc::new(Starter(log.clone()))], 5);
    let out = agent::run(
        &spec,
        vec![Message::user("go")],
        &AgentHooks::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.ending, Ending::Completed);
    let results: Vec<&str> = out
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(
        results, ["started"; 3],
        "every call answered, in call order"
    );
    // The last call's task runs whenever the runtime gets to it.
    let log = log.lock().unwrap();
    assert_eq!(
        log[..5],
        ["call a", "task a", "call b", "task b", "call c"],
        "each call's task ran before the next call started"
    );
}
