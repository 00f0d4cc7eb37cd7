//! Shared harness of the sub-agent runtime tests: workspaces and sessions (scripted
//! or against brood-mock), a model wrapper that records every request and can hold
//! chosen conversations at a gate, and readers for tool results and the ledger.
#![allow(dead_code)]

pub mod hand_built;

use async_trait::async_trait;
use brood::ledger::{EventKind, RunDetail, RunId};
use brood::model::scripted::ScriptedModel;
use brood::model::{EventFn, Message, Model, ModelError, ModelRequest, ModelResponse, Role};
use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::session::{ModelSource, Session, SessionOptions};
use brood::subagent::Limits;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A child's answer in the output contract.
pub fn report(summary: &str) -> String {
    format!("SUMMARY: {summary}\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: None.")
}

/// Upper bound for any wait in these tests (a hang is a failure, not a stall).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A fresh workspace; `config` (TOML) goes to `.brood/config.toml` when non-empty.
pub fn workspace(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if !config.is_empty() {
        std::fs::create_dir_all(dir.path().join(".brood")).unwrap();
        std::fs::write(dir.path().join(".brood/config.toml"), config).unwrap();
    }
    dir
}

pub fn load_config(ws: &Path, env: &BTreeMap<String, String>) -> Config {
    let paths = ConfigPaths {
        user_dir: None,
        workspace: ws.to_path_buf(),
    };
    Config::load(
        &paths,
        env,
        &Overrides {
            // The test's own workspace sets the endpoint.
            trust_workspace: true,
            ..Overrides::default()
        },
    )
    .unwrap()
}

/// Supervisor limits for tests (heartbeat long unless a test shortens it).
pub fn limits(max_concurrent: usize, launch: usize) -> Limits {
    Limits {
        max_concurrent,
        launch_concurrency: launch,
        max_depth: 3,
        max_total: 100,
        heartbeat: Duration::from_secs(300),
    }
}

/// A session on `ws` where every run (parent and children) talks to `model`.
pub async fn session_with(ws: &Path, model: Arc<dyn Model>, limits: Option<Limits>) -> Session {
    let config = load_config(ws, &BTreeMap::new());
    let mut opts = SessionOptions::new(ws, config);
    opts.models = ModelSource::Fixed(model);
    opts.limits = limits;
    Session::open(opts).await.unwrap()
}

/// A session on `ws` whose main provider is brood-mock at `base_url` (model
/// `mock-model`, fast retries); `extra` is appended to the config file.
pub async fn mock_session(
    ws: &Path,
    base_url: &str,
    extra: &str,
    limits: Option<Limits>,
) -> Session {
    std::fs::create_dir_all(ws.join(".brood")).unwrap();
    std::fs::write(
        ws.join(".brood/config.toml"),
        format!(
            "provider = \"local\"\nbase_url = \"{base_url}\"\nmodel = \"mock-model\"\n\
             max_attempts = 2\napi_timeout_secs = 30\n{extra}"
        ),
    )
    .unwrap();
    let config = load_config(ws, &BTreeMap::new());
    let mut opts = SessionOptions::new(ws, config);
    opts.limits = limits;
    Session::open(opts).await.unwrap()
}

/// Runs `fut` with the test deadline.
pub async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// The first user message of a request.
pub fn first_user(req: &ModelRequest) -> &str {
    req.messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .unwrap_or("")
}

/// The contents of the tool-result messages of a request, in order.
pub fn tool_results(req: &ModelRequest) -> Vec<&str> {
    req.messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect()
}

/// The last tool result of a request, parsed as JSON.
pub fn last_tool_json(req: &ModelRequest) -> Value {
    let text = tool_results(req)
        .last()
        .copied()
        .unwrap_or_else(|| panic!("no tool result in {req:#?}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("tool result is not JSON ({e}): {text}"))
}

/// The names of the tools a request offers.
pub fn tool_names(req: &ModelRequest) -> Vec<String> {
    req.tools.iter().map(|t| t.name.to_string()).collect()
}

/// How many user messages of `req` contain `needle`.
pub fn user_messages_containing(req: &ModelRequest, needle: &str) -> usize {
    req.messages
        .iter()
        .filter(|m| m.role == Role::User && m.content.contains(needle))
        .count()
}

type Pick = Arc<dyn Fn(&ModelRequest) -> bool + Send + Sync>;

/// Wraps a model: records every request (in arrival order) and holds requests of
/// gated conversations until their gate opens.
#[derive(Clone)]
pub struct Probe {
    inner: Arc<dyn Model>,
    log: Arc<Mutex<Vec<Arc<ModelRequest>>>>,
    seen: Arc<watch::Sender<usize>>,
    gates: Arc<Mutex<Vec<(Pick, CancellationToken)>>>,
}

impl Probe {
    pub fn new(inner: ScriptedModel) -> Probe {
        Probe {
            inner: Arc::new(inner),
            log: Arc::new(Mutex::new(Vec::new())),
            seen: Arc::new(watch::channel(0).0),
            gates: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn arc(&self) -> Arc<dyn Model> {
        Arc::new(self.clone())
    }

    /// Requests of conversations whose first user message contains `needle` wait
    /// (after being recorded) until the returned token is cancelled.
    pub fn gate(&self, needle: &str) -> CancellationToken {
        let needle = needle.to_string();
        self.gate_when(move |r| first_user(r).contains(&needle))
    }

    pub fn gate_when(
        &self,
        pick: impl Fn(&ModelRequest) -> bool + Send + Sync + 'static,
    ) -> CancellationToken {
        let token = CancellationToken::new();
        self.gates
            .lock()
            .unwrap()
            .push((Arc::new(pick), token.clone()));
        token
    }

    pub fn requests(&self) -> Vec<Arc<ModelRequest>> {
        self.log.lock().unwrap().clone()
    }

    /// Requests of conversations whose first user message contains `needle`.
    pub fn requests_for(&self, needle: &str) -> Vec<Arc<ModelRequest>> {
        self.requests()
            .into_iter()
            .filter(|r| first_user(r).contains(needle))
            .collect()
    }

    /// Wait until the recorded requests satisfy `done`.
    pub async fn wait_until(&self, what: &str, done: impl Fn(&[Arc<ModelRequest>]) -> bool) {
        let mut rx = self.seen.subscribe();
        within(what, async {
            loop {
                if done(&self.requests()) {
                    return;
                }
                rx.changed().await.unwrap();
            }
        })
        .await
    }

    /// Wait until `n` requests of the `needle` conversations were made.
    pub async fn wait_for(&self, needle: &str, n: usize) {
        let what = format!("{n} requests of {needle:?}");
        self.wait_until(&what, |rs| {
            rs.iter().filter(|r| first_user(r).contains(needle)).count() >= n
        })
        .await
    }
}

#[async_trait]
impl Model for Probe {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        self.log.lock().unwrap().push(Arc::new(request.clone()));
        self.seen.send_modify(|n| *n += 1);
        let gate = self
            .gates
            .lock()
            .unwrap()
            .iter()
            .find(|(pick, _)| pick(request))
            .map(|(_, t)| t.clone());
        if let Some(gate) = gate {
            gate.cancelled().await;
        }
        self.inner.step(request, on_event).await
    }

    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        self.inner.list_models().await
    }
}

/// A run's ledger detail.
pub async fn run_detail(session: &Session, id: &str) -> RunDetail {
    session
        .ledger()
        .get_run(&RunId::from_string(id))
        .await
        .unwrap()
}

/// The kinds of a run's lifecycle events, in order.
pub async fn lifecycle(session: &Session, id: &str) -> Vec<EventKind> {
    run_detail(session, id)
        .await
        .events
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| k.is_lifecycle())
        .collect()
}

/// A message list's contents, for failure output.
pub fn dump(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| format!("[{:?}] {}", m.role, m.content))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Wait until the supervisor's snapshot satisfies `done` (woken by its change feed).
pub async fn wait_snapshot(
    session: &Session,
    what: &str,
    done: impl Fn(&[brood::subagent::RunSnapshot]) -> bool,
) -> Vec<brood::subagent::RunSnapshot> {
    let sup = session.supervisor();
    let mut rx = sup.subscribe();
    within(what, async {
        loop {
            let snap = sup.snapshot();
            if done(&snap) {
                return snap;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
}

/// Everything recorded so far is readable.
pub async fn flushed(session: &Session) {
    session.ledger().flush().await.unwrap();
}

/// A response calling one tool.
pub fn call(name: &str, args: Value) -> brood::model::ModelResponse {
    let mut m = Message::assistant("");
    m.tool_calls = vec![brood::model::ToolCall {
        id: "call_0".into(),
        name: name.into(),
        arguments: args.to_string(),
    }];
    brood::model::ModelResponse {
        message: m,
        usage: None,
        finish_reason: brood::model::FinishReason::ToolCalls,
    }
}

/// A final text response.
pub fn answer(text: &str) -> brood::model::ModelResponse {
    brood::model::ModelResponse {
        message: Message::assistant(text),
        usage: None,
        finish_reason: brood::model::FinishReason::Stop,
    }
}

/// Every user message of `req` that carries a background completion.
pub fn completions(req: &ModelRequest) -> Vec<&str> {
    req.messages
        .iter()
        .filter(|m| m.role == Role::User && m.content.starts_with("Background sub-agent"))
        .map(|m| m.content.as_str())
        .collect()
}
