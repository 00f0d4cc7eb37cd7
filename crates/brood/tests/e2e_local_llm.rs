//! End to end against a real LLM nobody in this project wrote: llama.cpp's
//! OpenAI-compatible server (llama-cpp-python) serving SmolLM2-135M on CPU, started
//! by `scripts/local-llm` (docs/LOCAL_LLM.md).
//!
//! Every test is `#[ignore]`d, so `cargo test --workspace` never needs the server.
//! Run them with `scripts/e2e-local`, which installs the server, runs
//! `cargo test -p brood --test e2e_local_llm -- --ignored --test-threads=1` and stops
//! the server at the end. One test at a time: the server serializes requests anyway,
//! and one test kills it (the next test starts it again). The tests find the server
//! through `scripts/local-llm start` (idempotent) with `BROOD_LLM_STATE` (default: a
//! directory under cargo's target tmp dir, so no shared server is ever killed).
//!
//! They assert the protocol's shape and the runtime's behaviour — a call was made
//! with parseable arguments, a tool result went back, an answer arrived, a typed
//! error after retries — never what a 135M model says.

use async_trait::async_trait;
use brood::agent::{self, AgentEvent, AgentHooks, AgentSpec, Ending, ToolChoicePolicy};
use brood::ledger::{EventKind, ListFilter, ListedRun, RunId, RunStatus};
use brood::model::openai::OpenAiProvider;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::{
    EventFn, FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, Role, Sampling,
    StreamEvent, ToolChoice, ToolSpec,
};
use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::provider::ProviderFactory;
use brood::runtime::session::{ModelSource, Session, SessionOptions};
use brood::tool::{self, Permissions, Toolbox, Workspace};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

/// Generous: the server takes 1–10 s a step on 2 shared cores.
const STEP_TIMEOUT_SECS: u64 = 120;
/// Small, so the whole run stays within minutes.
const MAX_TOKENS: u32 = 64;
/// A whole multi-agent test may not take longer than this.
const TEST_DEADLINE: Duration = Duration::from_secs(300);

const SYSTEM: &str = "You are a coding agent working in a workspace. Use relative paths.";
const README: &str = "# Demo\nThis project prints the current date.\n";

// ------------------------------------------------------------------ the server

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn state_dir() -> PathBuf {
    std::env::var_os("BROOD_LLM_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("local-llm"))
}

/// Run `scripts/local-llm ARGS`; its stdout (one value) or its stderr.
async fn local_llm(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(repo_root().join("scripts/local-llm"))
        .args(args)
        .env("BROOD_LLM_STATE", state_dir())
        .output()
        .await
        .map_err(|e| format!("cannot run scripts/local-llm: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The base URL of the running server, started if needed.
async fn server_url() -> String {
    match local_llm(&["start"]).await {
        Ok(url) => url,
        Err(e) => panic!(
            "the local LLM server does not start; run scripts/e2e-local (it installs it \
             first) or scripts/local-llm install.\n{e}"
        ),
    }
}

fn provider(url: &str, stream: bool) -> OpenAiProvider {
    let mut c = brood::model::preset::preset("local").unwrap().config();
    c.base_url = url.to_string();
    c.api_timeout_secs = STEP_TIMEOUT_SECS;
    c.stream = stream;
    OpenAiProvider::new(c).unwrap()
}

fn sampling() -> Sampling {
    Sampling {
        temperature: Some(0.0),
        max_tokens: Some(MAX_TOKENS),
        ..Sampling::default()
    }
}

fn builtin_toolbox() -> Toolbox {
    Toolbox::new(
        tool::builtin_tools(&Default::default()),
        Permissions::full("e2e"),
    )
}

fn read_file_spec() -> ToolSpec {
    builtin_toolbox()
        .specs()
        .iter()
        .find(|s| &*s.name == "read_file")
        .cloned()
        .unwrap()
}

async fn step(
    model: &dyn Model,
    req: &ModelRequest,
) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
    let seen = Mutex::new(Vec::new());
    let on = |e: StreamEvent| seen.lock().unwrap().push(e);
    let r = model.step(req, &on).await;
    (r, seen.into_inner().unwrap())
}

fn args_object(raw: &str) -> serde_json::Map<String, Value> {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => m,
        other => panic!("tool arguments {raw:?} are not a JSON object: {other:?}"),
    }
}

// ------------------------------------------------------------------ model level

#[tokio::test]
#[ignore = "needs the local LLM server: scripts/e2e-local"]
async fn a_plain_completion_streamed_and_not() {
    let url = server_url().await;
    for stream in [true, false] {
        let p = provider(&url, stream);
        let req = ModelRequest {
            model: "smollm2".into(),
            system: "You are a helpful assistant.".into(),
            messages: vec![Message::user("Say hello in five words.")],
            tools: Default::default(),
            tool_choice: None,
            sampling: sampling(),
        };
        let started = Instant::now();
        let (r, events) = step(&p, &req).await;
        let r = r.unwrap_or_else(|e| panic!("stream={stream}: {e}"));
        eprintln!(
            "plain completion, stream={stream}: {:?} in {:?}",
            r.message.content,
            started.elapsed()
        );
        assert!(!r.message.content.is_empty(), "stream={stream}");
        assert!(r.message.tool_calls.is_empty());
        assert!(
            matches!(r.finish_reason, FinishReason::Stop | FinishReason::Length),
            "{:?}",
            r.finish_reason
        );
        let texts: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts.concat(), r.message.content);
        if stream {
            assert!(texts.len() > 1, "streamed in pieces: {texts:?}");
        } else {
            assert_eq!(texts.len(), 1);
            let u = r.usage.expect("a non-streamed answer carries usage");
            assert!(u.input_tokens > 0 && u.output_tokens > 0, "{u:?}");
        }
        let finishes = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Finish { .. }))
            .count();
        assert_eq!(finishes, 1);
        assert!(matches!(events.last(), Some(StreamEvent::Finish { .. })));
        assert!(!events
            .iter()
            .any(|e| matches!(e, StreamEvent::Retrying { .. })));
    }
}

#[tokio::test]
#[ignore = "needs the local LLM server: scripts/e2e-local"]
async fn a_forced_tool_call_is_assembled_into_exactly_one_call() {
    let url = server_url().await;
    for stream in [true, false] {
        let p = provider(&url, stream);
        let req = ModelRequest {
            model: "smollm2".into(),
            system: SYSTEM.into(),
            messages: vec![Message::user("Read the file README.md")],
            tools: vec![read_file_spec()].into(),
            tool_choice: Some(ToolChoice::Named("read_file".into())),
            sampling: sampling(),
        };
        let (r, events) = step(&p, &req).await;
        let r = r.unwrap_or_else(|e| panic!("stream={stream}: {e}"));
        eprintln!("forced call, stream={stream}: {:?}", r.message.tool_calls);
        assert_eq!(r.message.tool_calls.len(), 1, "{:?}", r.message.tool_calls);
        let call = &r.message.tool_calls[0];
        assert_eq!(call.name, "read_file");
        assert!(!call.id.is_empty());
        assert!(args_object(&call.arguments)
            .get("path")
            .is_some_and(Value::is_string));
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        let deltas: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallDelta {
                    index,
                    id,
                    name,
                    arguments,
                } => Some((*index, id.is_some(), name.is_some(), arguments.clone())),
                _ => None,
            })
            .collect();
        assert!(deltas.iter().all(|d| d.0 == 0), "{deltas:?}");
        assert_eq!(deltas.iter().filter(|d| d.1).count(), 1, "id once");
        assert_eq!(deltas.iter().filter(|d| d.2).count(), 1, "name once");
        let args: String = deltas.iter().map(|d| d.3.as_str()).collect();
        assert_eq!(args, call.arguments);
        if stream {
            // The server sends one token per chunk, repeating id and name each time.
            assert!(deltas.len() > 2, "streamed in fragments: {deltas:?}");
        }
    }
}

// ------------------------------------------------------------------ agent level

#[tokio::test]
#[ignore = "needs the local LLM server: scripts/e2e-local"]
async fn a_forced_read_file_runs_the_real_tool_and_the_next_answer_arrives() {
    let url = server_url().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), README).unwrap();
    let p = provider(&url, true);
    let spec = AgentSpec {
        run_id: "e2e-forced".into(),
        system: SYSTEM.into(),
        model: Arc::new(p.clone()),
        model_id: "smollm2".into(),
        sampling: sampling(),
        tool_choice: ToolChoicePolicy {
            first: Some(ToolChoice::Named("read_file".into())),
            rest: Some(ToolChoice::None),
        },
        toolbox: builtin_toolbox(),
        workspace: Arc::new(Workspace::open(dir.path()).unwrap()),
        max_turns: 3,
        offered_tools: None,
        tool_concurrency: brood::agent::DEFAULT_TOOL_CONCURRENCY,
    };
    let events: Arc<Mutex<Vec<AgentEvent>>> = Arc::default();
    let sink = events.clone();
    let hooks = AgentHooks {
        events: Some(Arc::new(move |e: &AgentEvent| {
            sink.lock().unwrap().push(e.clone())
        })),
        ..AgentHooks::default()
    };
    let out = agent::run(
        &spec,
        vec![Message::user("Read the file README.md")],
        &hooks,
        &CancellationToken::new(),
    )
    .await;
    eprintln!("forced read_file: {:?}", out.messages);
    assert_eq!(out.ending, Ending::Completed, "{out:?}");
    assert_eq!((out.turns, out.tool_calls), (2, 1));
    let roles: Vec<Role> = out.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    let call = &out.messages[1].tool_calls[0];
    assert_eq!(out.messages[1].tool_calls.len(), 1);
    assert_eq!(call.name, "read_file");
    args_object(&call.arguments);
    let result = &out.messages[2];
    assert_eq!(result.tool_call_id.as_deref(), Some(call.id.as_str()));
    assert!(out.messages[3].tool_calls.is_empty());

    let events = events.lock().unwrap();
    // The real tool ran on the model's arguments (its answer — the file, or a typed
    // error for a path the model made up — is what went back).
    let finished = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolFinished {
                call: c, output, ..
            } if c.id == call.id => Some(output.clone()),
            _ => None,
        })
        .expect("the tool ran");
    assert_eq!(finished, result.content);
    assert!(!result.content.is_empty());
    // The second request carried the call and its result, in the shape the server
    // accepts (assistant content "" and never null; the tool message with its id).
    let second = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ModelRequest { turn: 2, request } => Some(request.clone()),
            _ => None,
        })
        .unwrap();
    let body = p.request_body(&second);
    let msgs = body["messages"].as_array().unwrap();
    let n = msgs.len();
    assert_eq!(msgs[n - 2]["role"], "assistant");
    assert_eq!(msgs[n - 2]["content"], json!(""));
    assert_eq!(msgs[n - 2]["tool_calls"][0]["id"], json!(call.id));
    assert_eq!(msgs[n - 1]["role"], "tool");
    assert_eq!(msgs[n - 1]["tool_call_id"], json!(call.id));
    assert_eq!(body["tool_choice"], json!("none"));
    // And the next answer arrived from the server.
    let answered = events.iter().any(|e| {
        matches!(e, AgentEvent::ModelResponse { turn: 2, response, .. }
            if matches!(response.finish_reason, FinishReason::Stop | FinishReason::Length))
    });
    assert!(answered);
}

// ------------------------------------------------------------------ sessions

fn session_options(dir: &Path, toml: &str) -> SessionOptions {
    std::fs::create_dir_all(dir.join(".brood")).unwrap();
    std::fs::write(dir.join(".brood/config.toml"), toml).unwrap();
    let paths = ConfigPaths {
        user_dir: None,
        workspace: dir.to_path_buf(),
    };
    let config = Config::load(
        &paths,
        &BTreeMap::new(),
        &Overrides {
            // The test's own workspace sets the endpoint.
            trust_workspace: true,
            ..Overrides::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    SessionOptions::new(dir, config)
}

fn tool_results(req: &ModelRequest) -> Vec<Value> {
    req.messages
        .iter()
        .rev()
        .take_while(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap_or_else(|_| json!(m.content)))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// A scripted parent: `first` (tool calls), then it records the tool results it got
/// and answers `done`.
fn scripted_parent(key: &str, first: ScriptStep, seen: Arc<Mutex<Vec<Value>>>) -> ScriptedModel {
    ScriptedModel::new().on(
        key,
        vec![
            first,
            ScriptStep::func(move |req| {
                *seen.lock().unwrap() = tool_results(req);
                Ok(ModelResponse {
                    message: Message::assistant("done"),
                    usage: None,
                    finish_reason: FinishReason::Stop,
                })
            }),
        ],
    )
}

async fn runs(session: &Session) -> Vec<ListedRun> {
    session
        .ledger()
        .list_runs(ListFilter::default())
        .await
        .unwrap()
}

fn run_with_objective<'a>(runs: &'a [ListedRun], objective: &str) -> &'a ListedRun {
    runs.iter()
        .find(|r| r.run.objective == objective)
        .unwrap_or_else(|| panic!("no run for {objective:?}"))
}

const FAN_OUT_PROMPTS: [&str; 2] = [
    "Read the file README.md and report what it says.",
    "Read the file notes.txt and report what it says.",
];

/// The product path: `[subagents] subagent_provider = "local"` with
/// `[providers.local] base_url`, the parent fixed to a scripted model.
#[tokio::test]
#[ignore = "needs the local LLM server: scripts/e2e-local"]
async fn a_scripted_parent_fans_out_to_two_children_on_the_real_server() {
    let url = server_url().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), README).unwrap();
    std::fs::write(
        dir.path().join("notes.txt"),
        "Remember to water the plants.\n",
    )
    .unwrap();
    let toml = format!(
        "api_timeout_secs = {STEP_TIMEOUT_SECS}\nmax_tokens = {MAX_TOKENS}\ntemperature = 0\n\
         [subagents]\nsubagent_provider = \"local\"\nsubagent_model = \"smollm2\"\n\
         first_tool_choice = \"read_file\"\ntool_choice = \"none\"\nmax_turns = 4\n\
         [providers.local]\nbase_url = \"{url}\"\n"
    );
    let mut opts = session_options(dir.path(), &toml);
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let parent = scripted_parent(
        "Coordinate",
        ScriptStep::tool_call(
            "task",
            json!({"prompts": FAN_OUT_PROMPTS, "agent_type": "explore"}),
        ),
        seen.clone(),
    );
    opts.models = ModelSource::FixedMain(Arc::new(parent));
    let session = Session::open(opts).await.unwrap();
    let started = Instant::now();
    let report = tokio::time::timeout(
        TEST_DEADLINE,
        session.run_with("Coordinate two readers.", None, CancellationToken::new()),
    )
    .await
    .expect("the fan-out finished in time")
    .unwrap();
    eprintln!("fan-out took {:?}", started.elapsed());
    assert_eq!(report.final_text, "done", "{report:?}");

    let all = runs(&session).await;
    let mut children = Vec::new();
    for prompt in FAN_OUT_PROMPTS {
        let child = run_with_objective(&all, prompt);
        assert_eq!(child.run.provider.as_deref(), Some("local"));
        assert_eq!(child.run.model.as_deref(), Some("smollm2"));
        assert_eq!(
            child.run.status,
            RunStatus::Completed,
            "{prompt}: {:?}",
            child.run.error
        );
        let detail = session.ledger().get_run(&child.run.id).await.unwrap();
        let of = |kind: EventKind| -> Vec<&Value> {
            detail
                .events
                .iter()
                .filter(|e| e.kind == kind)
                .map(|e| &e.payload)
                .collect()
        };
        // Step 1 was forced to read_file and answered with that call, parseable; the
        // real tool ran; later steps reached the server and came back.
        let requests = of(EventKind::ModelRequest);
        assert_eq!(
            requests[0]["tool_choice"],
            json!("read_file"),
            "{requests:?}"
        );
        assert_eq!(requests[1]["tool_choice"], json!("none"));
        let responses = of(EventKind::ModelResponse);
        assert_eq!(responses[0]["tool_calls"], json!(["read_file"]));
        assert!(
            responses.iter().all(|r| r.get("error").is_none()),
            "{responses:?}"
        );
        assert!(responses.len() >= 2, "{responses:?}");
        let started = of(EventKind::ToolStarted);
        assert_eq!(started.len(), 1, "{started:?}");
        assert_eq!(started[0]["name"], "read_file");
        args_object(started[0]["arguments"].as_str().unwrap());
        assert_eq!(of(EventKind::ToolFinished).len(), 1);
        assert!(child.run.steps >= 2);
        children.push(child.run.id.clone());
    }
    // One task call, its results in prompt order, each a settled child's outcome
    // (the structured report, or what contract repair made of the answer).
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let results = seen[0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (i, id) in children.iter().enumerate() {
        assert_eq!(results[i]["index"], json!(i));
        assert_eq!(results[i]["agent_id"], json!(id.as_str()));
        assert_eq!(results[i]["status"], json!("completed"));
        assert!(results[i]["result"]
            .as_str()
            .is_some_and(|r| r.starts_with("status: completed")));
    }
    session.close().await;
}

/// Passes a step through, telling the test when its first text arrives (the stream
/// is running) and publishing a failed step's typed error.
struct Tap {
    inner: Arc<dyn Model>,
    streaming: Mutex<Option<oneshot::Sender<()>>>,
    failed: watch::Sender<Option<ModelError>>,
    retries: Mutex<Vec<String>>,
}

#[async_trait]
impl Model for Tap {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let tap = |e: StreamEvent| {
            match &e {
                StreamEvent::TextDelta { .. } => {
                    if let Some(tx) = self.streaming.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                }
                StreamEvent::Retrying { error, .. } => {
                    self.retries.lock().unwrap().push(error.clone())
                }
                _ => {}
            }
            on_event(e);
        };
        let r = self.inner.step(request, &tap).await;
        if let Err(e) = &r {
            self.failed.send_replace(Some(e.clone()));
        }
        r
    }
}

/// The main (scripted) model, holding the conversation with `key` at its second
/// step until `open` says the doomed child's step failed: the sibling provably
/// carries on after its sibling's failure.
struct Gate {
    inner: ScriptedModel,
    key: &'static str,
    open: watch::Receiver<Option<ModelError>>,
}

#[async_trait]
impl Model for Gate {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let first_user = request
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or("");
        if first_user.contains(self.key) && ScriptedModel::step_index(request) >= 1 {
            let mut open = self.open.clone();
            let _ = open.wait_for(Option::is_some).await;
        }
        self.inner.step(request, on_event).await
    }
}

const DOOMED: &str = "Count from 1 to 200, separated by commas.";
const SIBLING: &str = "steady sibling: read a.txt";
const SIBLING_REPORT: &str = "SUMMARY: read it.\nCHANGES: None.\nEVIDENCE:\n- a.txt:1-1 the line\nRISKS: None.\nBLOCKERS: None.";

#[tokio::test]
#[ignore = "needs the local LLM server: scripts/e2e-local"]
async fn the_server_killed_mid_stream_fails_that_child_only() {
    let url = server_url().await;
    let pid = local_llm(&["pid"]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    // Explore children run on the server (a quick model); general ones on the main,
    // scripted model.
    let toml = format!(
        "api_timeout_secs = {STEP_TIMEOUT_SECS}\nmax_tokens = 96\ntemperature = 0\n\
         [models.tiny]\nprovider = \"local\"\nmodel = \"smollm2\"\n\
         [subagents]\nexplorer_model = \"tiny\"\ntool_choice = \"none\"\nmax_turns = 3\n\
         [providers.local]\nbase_url = \"{url}\"\n"
    );
    let mut opts = session_options(dir.path(), &toml);
    // The child's provider is the one a live session builds from this config
    // ([providers.local]), tapped.
    let factory = ProviderFactory::new(Arc::new(opts.config.clone()), Arc::new(BTreeMap::new()));
    let (streaming_tx, streaming_rx) = oneshot::channel();
    let (failed_tx, failed_rx) = watch::channel(None);
    let tap = Arc::new(Tap {
        inner: factory.named("local", "smollm2").unwrap().model,
        streaming: Mutex::new(Some(streaming_tx)),
        failed: failed_tx,
        retries: Mutex::default(),
    });
    let tapped = tap.clone();
    opts.route_builder = Some(Arc::new(move |provider: &str, model: &str| {
        assert_eq!(
            (provider, model),
            ("local", "smollm2"),
            "only the doomed child"
        );
        Ok(tapped.clone() as Arc<dyn Model>)
    }));
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let scripted = scripted_parent(
        "Coordinate",
        ScriptStep::tool_calls([
            (
                "task",
                json!({"description": DOOMED, "agent_type": "explore"}),
            ),
            (
                "task",
                json!({"description": SIBLING, "agent_type": "general"}),
            ),
        ]),
        seen.clone(),
    )
    .on(
        "steady sibling",
        vec![
            ScriptStep::tool_call("read_file", json!({"path": "a.txt"})),
            ScriptStep::text(SIBLING_REPORT),
        ],
    );
    opts.models = ModelSource::FixedMain(Arc::new(Gate {
        inner: scripted,
        key: "steady sibling",
        open: failed_rx,
    }));
    let session = Session::open(opts).await.unwrap();
    let killer = async {
        streaming_rx.await.expect("the doomed child streamed");
        let status = tokio::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success(), "kill -9 {pid}");
        eprintln!("killed the server (pid {pid}) while a child streamed");
    };
    let (report, ()) = tokio::time::timeout(
        TEST_DEADLINE,
        futures::future::join(
            session.run_with(
                "Coordinate a doomed and a steady child.",
                None,
                CancellationToken::new(),
            ),
            killer,
        ),
    )
    .await
    .expect("the parent finished in time");
    let report = report.unwrap();

    // The child got a typed error after its retries: the cut stream, then refused
    // connections.
    let error = tap.failed.borrow().clone().expect("the doomed step failed");
    match &error {
        ModelError::RetriesExhausted { attempts: 4, last } => {
            assert!(matches!(**last, ModelError::Connect { .. }), "{last:?}")
        }
        other => panic!("expected RetriesExhausted after 4 attempts, got {other:?}"),
    }
    let retries = tap.retries.lock().unwrap().clone();
    assert_eq!(retries.len(), 3, "{retries:?}");
    assert!(
        retries[0].contains("stream cut"),
        "the kill landed mid-stream: {retries:?}"
    );

    // The parent and the sibling carried on.
    assert_eq!(report.final_text, "done", "{report:?}");
    assert!(report.succeeded());
    let all = runs(&session).await;
    let doomed = run_with_objective(&all, DOOMED);
    let sibling = run_with_objective(&all, SIBLING);
    assert_eq!(
        sibling.run.status,
        RunStatus::Completed,
        "{:?}",
        sibling.run
    );
    assert_eq!(sibling.run.provider.as_deref(), Some("scripted"));
    let parent = all.iter().find(|r| r.run.parent_id.is_none()).unwrap();
    assert_eq!(parent.run.status, RunStatus::Completed);

    // The ledger says what happened.
    assert_eq!(doomed.run.status, RunStatus::Failed);
    assert_eq!(doomed.run.provider.as_deref(), Some("local"));
    let recorded = doomed.run.error.clone().unwrap_or_default();
    assert!(
        recorded.contains("gave up after 4 attempts") && recorded.contains(&url),
        "{recorded}"
    );
    let detail = session
        .ledger()
        .get_run(&RunId::from_string(doomed.run.id.as_str()))
        .await
        .unwrap();
    assert!(detail
        .events
        .iter()
        .any(|e| e.kind == EventKind::ModelResponse
            && e.payload["error"]
                .as_str()
                .is_some_and(|s| s.contains("gave up after 4 attempts"))));
    assert!(detail.events.iter().any(|e| e.kind == EventKind::Failed));

    // The parent got both outcomes, each in its own task result, in call order.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["results"][0]["status"], json!("failed"));
    assert!(seen[0]["results"][0]["result"]
        .as_str()
        .is_some_and(|r| r.contains("gave up after 4 attempts")));
    assert_eq!(seen[1]["results"][0]["status"], json!("completed"));
    session.close().await;
}
