//! The [`Supervisor`]: one per session. It holds what every run shares (the
//! session's environment, the registry and slots of [`super::board`], the
//! recorder, the providers' model lists and prices) and answers for them through
//! its methods: waiting for a run, cancelling it, messaging it, finding it,
//! shutting the session down. Opening runs is `super::open`; driving one is
//! `super::drive` (children) and `super::root` (the session's top-level run).

use super::agent_types::Directory;
use super::board::{Board, Limits, RunSnapshot};
use super::catalog::AgentCatalog;
use super::config::{QuickModels, SubagentSettings};
use super::ctx::RunCtx;
use super::error::SpawnError;
use super::record::Recorder;
use super::result::ChildResult;
use crate::agent::ToolChoicePolicy;
use crate::ledger::Ledger;
use crate::model::pricing::{Price, Pricing, PUBLISHES_PRICES};
use crate::model::{Model, ModelError, Sampling};
use crate::tool::{Permissions, SpecCache, Tool, Workspace};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Builds a fresh set of workspace tools for one run (todo lists are per run).
pub type ToolFactory = Arc<dyn Fn(&str) -> Vec<Arc<dyn Tool>> + Send + Sync>;

/// Builds a provider for `(provider, model)` routes other than the main one.
pub type RouteBuilder = Arc<dyn Fn(&str, &str) -> Result<Arc<dyn Model>, ModelError> + Send + Sync>;

/// The models one provider accepts, asked once (`None` inside: it does not say).
type KnownModels = Arc<tokio::sync::OnceCell<Option<Vec<String>>>>;

/// What the supervisor needs from the session.
#[derive(Clone)]
pub struct SupervisorEnv {
    /// The workspace every run works in.
    pub workspace: Arc<Workspace>,
    /// Where every run is recorded.
    pub ledger: Arc<Ledger>,
    /// The agent types children may name.
    pub catalog: Arc<AgentCatalog>,
    /// `[subagents]` after defaults and checks.
    pub settings: SubagentSettings,
    /// Quick models (`[models.<alias>]`) for routing.
    pub quick_models: QuickModels,
    /// The session's main provider name, model id and model.
    pub main_provider: String,
    /// The main model's id.
    pub main_model_id: String,
    /// The main model.
    pub main_model: Arc<dyn Model>,
    /// Builds the model of any other route.
    pub routes: RouteBuilder,
    /// Builds a run's toolbox from its permissions.
    pub tools: ToolFactory,
    /// Whether read-only shells can be sandboxed here (landlock).
    pub read_only_shell: bool,
    /// Temperature and max tokens for every request.
    pub sampling: Sampling,
    /// The session's tool-choice policy: the root run's, and children's where
    /// `[subagents] tool_choice / first_tool_choice` do not override it.
    pub tool_choice: ToolChoicePolicy,
    /// How many tool calls of one step run at once, in every run (`tool_concurrency`).
    pub tool_concurrency: usize,
    /// The session's token: cancelling it stops every run.
    pub session_cancel: CancellationToken,
    /// Session identity for the ledger.
    pub session_id: String,
    /// The user's prices (`[pricing]`), for costs and cost budgets.
    pub pricing: Arc<Pricing>,
    /// Project instructions (AGENTS.md …) ending every system prompt; empty: none.
    pub project_instructions: Arc<str>,
    /// The session's MCP servers: which of their tools (`mcp__<server>__<tool>`)
    /// the read-only roles may get, as of each server's last listing (the server
    /// marks them `readOnlyHint`, or the user lists them in `read_only_tools`).
    pub mcp: Arc<crate::tool::mcp::McpServers>,
}

struct Inner {
    env: SupervisorEnv,
    /// Tool specs derived once per session.
    specs: SpecCache,
    /// The last grant record encoded (siblings share it).
    grant_texts: super::granted::GrantTexts,
    /// The last child system prompt made (siblings share it: the prompt is
    /// ~1 KiB, per waiting child before).
    system_prompts: super::last_made::LastMade<str>,
    /// The last child grant made (siblings share it; `subagent/last_made.rs`).
    grants: super::last_made::LastMade<Permissions>,
    /// The last run's tool names (siblings hold the same tools).
    tool_name_lists: super::last_made::LastMade<[String]>,
    /// The agent types delegating runs are told about (made on first use).
    directory: OnceLock<Arc<Directory>>,
    board: Board,
    recorder: Recorder,
    /// The root runs' tasks: shutdown waits for their end records.
    roots: tokio_util::task::TaskTracker,
    /// Models each provider accepts, asked once per provider.
    known_models: Mutex<HashMap<String, KnownModels>>,
    /// Prices each provider publishes, once asked (see [`Supervisor::price_for`]).
    published_prices: Mutex<HashMap<String, Arc<Pricing>>>,
    /// Permission rules and approvals for every call of every run (set once by the
    /// session; a bare supervisor has none).
    gate: OnceLock<Arc<dyn crate::tool::CallGate>>,
    /// Ends of fleet children, pushed through the database (started on first use).
    fleet: super::fleet_wait::FleetWait,
    /// The last `[subagents] fleet_repository` found to hold the workspace's
    /// `HEAD`, so that a fan-out checks its remote once per commit, not once per
    /// child (`subagent/fleet.rs`).
    fleet_checked: Mutex<Option<super::fleet_repo::Checked>>,
}

/// One per session: admits, runs, bounds and records every run.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl Supervisor {
    /// Build the supervisor and start its heartbeat.
    pub fn new(env: SupervisorEnv) -> Supervisor {
        Self::with_limits(env.settings_limits(), env)
    }

    /// As [`Supervisor::new`] with explicit limits (tests use short heartbeats).
    pub fn with_limits(limits: Limits, env: SupervisorEnv) -> Supervisor {
        let board = Board::new(limits);
        let recorder = Recorder::new(env.ledger.clone());
        let sup = Supervisor {
            inner: Arc::new(Inner {
                env,
                specs: SpecCache::default(),
                grant_texts: Default::default(),
                system_prompts: Default::default(),
                grants: Default::default(),
                tool_name_lists: Default::default(),
                directory: Default::default(),
                board,
                recorder,
                roots: tokio_util::task::TaskTracker::new(),
                known_models: Mutex::new(HashMap::new()),
                published_prices: Mutex::new(HashMap::new()),
                gate: OnceLock::new(),
                fleet: Default::default(),
                fleet_checked: Mutex::new(None),
            }),
        };
        sup.start_heartbeat();
        sup
    }

    fn start_heartbeat(&self) {
        let board = self.inner.board.clone();
        let cancel = self.inner.env.session_cancel.clone();
        let period = (board.limits().heartbeat / 10)
            .clamp(Duration::from_millis(20), Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => { board.sweep(); }
                    _ = cancel.cancelled() => break,
                }
            }
        });
    }

    pub(crate) fn limits(&self) -> &Limits {
        self.inner.board.limits()
    }

    /// The last fleet repository check that passed (see `subagent/fleet.rs`).
    pub(super) fn fleet_checked(&self) -> &Mutex<Option<super::fleet_repo::Checked>> {
        &self.inner.fleet_checked
    }

    /// What the session gave this supervisor.
    pub fn env(&self) -> &SupervisorEnv {
        &self.inner.env
    }

    /// The registry of runs and the running slots.
    pub(crate) fn board(&self) -> &Board {
        &self.inner.board
    }

    /// Where runs are recorded (the ledger) and published (the event bus).
    pub(crate) fn fleet_wait(&self) -> &super::fleet_wait::FleetWait {
        &self.inner.fleet
    }

    pub(crate) fn recorder(&self) -> &Recorder {
        &self.inner.recorder
    }

    /// Tool specs, derived once per session.
    pub(crate) fn specs(&self) -> &SpecCache {
        &self.inner.specs
    }

    /// Run `ctx`'s grant record now, encoded (siblings of one grant share it;
    /// `fork_messages` for a fork).
    pub(crate) fn recorded_grant(
        &self,
        ctx: &RunCtx,
        fork_messages: Option<usize>,
    ) -> Option<crate::ledger::JsonText> {
        self.inner
            .grant_texts
            .text_for(self.call_gate(), ctx, fork_messages)
    }

    /// The last child system prompt made, which siblings share.
    pub(crate) fn system_prompts(&self) -> &super::last_made::LastMade<str> {
        &self.inner.system_prompts
    }

    /// The last child grant made, which siblings granted the same share.
    pub(crate) fn grants(&self) -> &super::last_made::LastMade<Permissions> {
        &self.inner.grants
    }

    /// The last run's tool names, which siblings holding the same tools share.
    pub(crate) fn tool_name_lists(&self) -> &super::last_made::LastMade<[String]> {
        &self.inner.tool_name_lists
    }

    /// Put every tool call of every run (after its grant checks) to `gate`: the
    /// session's permission rules and approvals. Set once; later calls are ignored.
    pub fn set_call_gate(&self, gate: Arc<dyn crate::tool::CallGate>) {
        let _ = self.inner.gate.set(gate);
    }

    pub(crate) fn call_gate(&self) -> Option<&Arc<dyn crate::tool::CallGate>> {
        self.inner.gate.get()
    }

    /// The agent types delegating runs are told about (made on first use).
    pub(crate) fn directory(&self) -> Arc<Directory> {
        self.inner
            .directory
            .get_or_init(|| Arc::new(Directory::new(&self.inner.env.catalog)))
            .clone()
    }

    /// Run `fut` (a root run) as a task the session's shutdown waits for.
    pub(crate) fn spawn_root<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.roots.spawn(fut)
    }

    /// A copy of every run this session knows (never waits for runs).
    pub fn snapshot(&self) -> Vec<RunSnapshot> {
        self.inner.board.snapshot()
    }

    /// A receiver that sees a new value after every admission or status change of
    /// any run (wait on it, then read [`Supervisor::snapshot`]).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.board.subscribe()
    }

    /// The session's live events (published where runs are recorded).
    pub(crate) fn bus(&self) -> &Arc<crate::events::EventBus> {
        self.inner.recorder.bus()
    }

    /// Ledger writes that failed in this session (0 when every record landed).
    pub fn ledger_write_failures(&self) -> u64 {
        self.inner.recorder.write_failures()
    }

    /// Runs currently in `Running`.
    pub fn running(&self) -> usize {
        self.inner.board.running()
    }

    /// The price of `model_id` on `provider`: the user's `[pricing]` first, else what
    /// the endpoint publishes (OpenRouter's `/models`, asked once per session and
    /// provider), else none.
    pub(crate) async fn price_for(
        &self,
        provider: &str,
        model_id: &str,
        model: &dyn Model,
    ) -> Option<Price> {
        if let Some(p) = self.inner.env.pricing.price(provider, model_id) {
            return Some(p);
        }
        if !PUBLISHES_PRICES
            .iter()
            .any(|p| p.eq_ignore_ascii_case(provider))
        {
            return None;
        }
        let key = provider.to_ascii_lowercase();
        let cached = self
            .inner
            .published_prices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let prices = match cached {
            Some(p) => p,
            None => {
                // An endpoint that cannot say prices nothing (not an error for the run).
                let p = Arc::new(model.published_prices().await.unwrap_or_default());
                self.inner
                    .published_prices
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, p.clone());
                p
            }
        };
        prices.price(provider, model_id)
    }

    /// Where the provider lists its models, an unknown id fails the spawn.
    pub(crate) async fn check_model_known(
        &self,
        provider: &str,
        model_id: &str,
        model: &dyn Model,
    ) -> Result<(), SpawnError> {
        // One listing per provider, however many children open at once: the
        // first asks, the others wait for its answer (children opened together
        // used to send a `GET /models` each, over a connection each).
        let cell = self
            .inner
            .known_models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(provider.to_string())
            .or_default()
            .clone();
        // A provider that cannot list its models is the authority itself.
        let known = cell
            .get_or_init(|| async { model.list_models().await.unwrap_or(None) })
            .await
            .clone();
        match known {
            Some(list) if !list.is_empty() && !list.iter().any(|m| m == model_id) => {
                Err(SpawnError::UnknownModel {
                    model: model_id.to_string(),
                    provider: provider.to_string(),
                    accepted: list,
                })
            }
            _ => Ok(()),
        }
    }

    /// Wait until `id` settles, `timeout` passes, or `cancel` fires.
    pub async fn wait(
        &self,
        id: &str,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Option<ChildResult> {
        let mut rx = self.result_of(id)?;
        tokio::select! {
            r = settled(&mut rx) => r,
            _ = cancel.cancelled() => None,
            _ = sleep_or_forever(timeout) => None,
        }
    }

    /// Run `id`'s result channel, to wait on with [`settled`] (a caller waiting
    /// on many children keeps one channel each, not one [`Supervisor::wait`] each).
    pub(crate) fn result_of(&self, id: &str) -> Option<ResultRx> {
        Some(self.inner.board.handles(id)?.result)
    }

    /// `parent` took child `id`'s settled result itself (`agent_eval`,
    /// `agent_close`): it is not pushed into `parent`'s conversation again, and
    /// `parent` no longer waits for it. `true` if this was the first delivery.
    /// Only a run's own children can be claimed.
    pub(crate) fn claim(&self, parent: &RunCtx, id: &str) -> bool {
        match self.inner.board.handles(id) {
            Some(h) if h.parent_id.as_deref() == Some(parent.run_id.as_str()) => {
                let first = h.claim.take();
                parent.inbox.child_delivered(id);
                first
            }
            _ => false,
        }
    }

    /// Find a child of `parent` by id, name, or unique id prefix.
    pub(crate) fn lookup_child(&self, parent: &RunCtx, key: &str) -> Option<String> {
        self.inner.board.lookup_child(&parent.run_id, key)
    }

    /// Cancel a run (and everything below its turn). `false` if it already ended.
    pub fn cancel(&self, id: &str, reason: &str) -> bool {
        self.inner.board.cancel(id, reason)
    }

    /// Remember why child `id` is about to be cancelled (its record names
    /// `reason`; the first reason wins) without cancelling it yet: a caller that
    /// cancels its ancestors first keeps the reason it gives.
    pub fn note_cancel(&self, id: &str, reason: &str) -> bool {
        self.inner.board.note_reason(id, reason)
    }

    /// Remember why root run `id` (a [`Supervisor::run_root`]) is being cancelled:
    /// its record names `reason`. The first reason wins; the caller cancels the
    /// root's token.
    pub fn note_root_cancel(&self, id: &str, reason: &str) {
        self.inner.board.note_root_reason(id, reason);
    }

    /// The reason noted for root run `id`, forgotten once read (after the root ended).
    pub fn take_root_cancel(&self, id: &str) -> Option<String> {
        self.inner.board.take_root_reason(id)
    }

    /// Deliver a message to a running child at its next step.
    pub fn message(&self, id: &str, text: &str) -> bool {
        match self.inner.board.handles(id) {
            Some(h) if !h.status.is_terminal() => {
                h.inbox.push_note(crate::model::Message::user(format!(
                    "Message from your parent agent:\n{text}"
                )));
                self.inner.recorder.message_queued(id, text);
                true
            }
            _ => false,
        }
    }

    /// Find a run by id, unique id prefix, or name.
    pub fn lookup(&self, key: &str) -> Option<String> {
        self.inner.board.lookup(key)
    }

    /// Find a run below `ancestor` (its children, their children, …) by id, unique id
    /// prefix, or name.
    pub fn lookup_descendant(&self, ancestor: &str, key: &str) -> Option<String> {
        self.inner.board.lookup_descendant(ancestor, key)
    }

    /// Cancel every run of the session and wait until their records are final.
    pub async fn shutdown(&self) {
        for run in self.snapshot() {
            self.cancel(&run.agent_id, "the session ended");
        }
        self.inner.env.session_cancel.cancel();
        // Roots (not in the registry) stop on the session's token; a root whose
        // caller dropped its future is still writing its end.
        self.inner.roots.close();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.inner.roots.wait()).await;
        for run in self.snapshot() {
            if !run.status.is_terminal() {
                let _ = self
                    .wait(
                        &run.agent_id,
                        Some(Duration::from_secs(10)),
                        &CancellationToken::new(),
                    )
                    .await;
            }
        }
        self.inner.recorder.flush().await;
    }
}

impl SupervisorEnv {
    fn settings_limits(&self) -> Limits {
        let s = &self.settings;
        Limits {
            max_concurrent: s.max_concurrent,
            launch_concurrency: s.launch_concurrency,
            max_depth: s.max_depth,
            max_total: s.max_total as usize,
            heartbeat: s.heartbeat_timeout,
        }
    }

    /// Permissions of a session's root run: everything, less delegation when
    /// sub-agents are disabled.
    pub fn root_permissions(&self) -> Permissions {
        let mut p = Permissions::full("parent");
        if !self.settings.enabled {
            p.capabilities.remove(&crate::tool::Capability::Delegate);
        }
        p
    }
}

/// Where a run's result is published once it settles.
pub(crate) type ResultRx = watch::Receiver<Option<Box<ChildResult>>>;

/// The run's result once it has settled (`None`: its channel closed unsettled).
pub(crate) async fn settled(rx: &mut ResultRx) -> Option<ChildResult> {
    loop {
        if let Some(r) = rx.borrow_and_update().as_deref() {
            return Some(r.clone());
        }
        if rx.changed().await.is_err() {
            return rx.borrow().as_deref().cloned();
        }
    }
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Run ids sort by creation time (UUIDv7).
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}
