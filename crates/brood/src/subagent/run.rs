//! The [`Supervisor`]'s public face: opening children (and the session's root
//! run), waiting for them, cancelling them. The per-run driver lives in
//! `drive.rs`; the registry and slots in `supervisor.rs`.

use super::catalog::AgentCatalog;
use super::config::SubagentSettings;
use super::drive::{self, Budgets, ChildPlan, RunCtx, RunLimits};
use super::grant::SpawnSpec;
use super::inbox::{Claim, RunInbox};
use super::record::Recorder;
use super::result::ChildResult;
use super::supervisor::{Board, Entry, Limits, LiveStatus, RunSnapshot};
use super::{grant, routing, SpawnError};
use crate::agent::{AgentOutcome, EventSink, ToolChoicePolicy};
use crate::ledger::Ledger;
use crate::model::pricing::{Price, Pricing, PUBLISHES_PRICES};
use crate::model::{Model, ModelError, ModelRequest, Sampling};
use crate::tool::{Permissions, Tool, Workspace};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Builds a fresh set of workspace tools for one run (todo lists are per run).
pub type ToolFactory = Arc<dyn Fn(&str) -> Vec<Arc<dyn Tool>> + Send + Sync>;

/// Builds a provider for `(provider, model)` routes other than the main one.
pub type RouteBuilder = Arc<dyn Fn(&str, &str) -> Result<Arc<dyn Model>, ModelError> + Send + Sync>;

/// What the supervisor needs from the session.
#[derive(Clone)]
pub struct SupervisorEnv {
    pub workspace: Arc<Workspace>,
    pub ledger: Arc<Ledger>,
    pub catalog: Arc<AgentCatalog>,
    pub settings: SubagentSettings,
    /// Quick models (`[models.<alias>]`) for routing.
    pub quick_models: super::config::QuickModels,
    /// The session's main provider name, model id and model.
    pub main_provider: String,
    pub main_model_id: String,
    pub main_model: Arc<dyn Model>,
    pub routes: RouteBuilder,
    pub tools: ToolFactory,
    /// Whether read-only shells can be sandboxed here (landlock).
    pub read_only_shell: bool,
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
}

/// How a child belongs to its parent.
#[derive(Clone)]
pub enum SpawnMode {
    /// `task`: belongs to the parent's turn; cancelling the turn cancels it.
    Task { turn_cancel: CancellationToken },
    /// `agent_open`: belongs to the session; its completion is pushed to the parent.
    Background,
}

/// One child to open.
#[derive(Clone)]
pub struct SpawnRequest {
    pub prompt: String,
    pub agent_type: Option<String>,
    pub name: Option<String>,
    pub model: Option<String>,
    /// When set, the child continues from this parent request (`fork_context`).
    pub fork_from: Option<Arc<ModelRequest>>,
    pub allowed_tools: Option<Vec<String>>,
    pub mode: SpawnMode,
}

/// The session's top-level run (`brood run`).
pub struct RootRequest {
    pub prompt: String,
    pub system: Option<String>,
    pub max_turns: u32,
    /// Extra observer (the CLI's live output).
    pub events: Option<EventSink>,
    /// The turn's token.
    pub cancel: CancellationToken,
    pub name: String,
    /// Where the run counts what the model answered to it and to its tree (read
    /// them when it ends); `None` when the caller does not want them.
    pub tallies: Option<Arc<super::tally::RootTallies>>,
    /// The conversation so far (an interactive session's earlier turns): the run
    /// continues it with `prompt` as the next user message. Empty for a fresh run.
    pub history: Vec<crate::model::Message>,
}

/// What `agent_open` returns at once.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Opened {
    pub agent_id: String,
    pub name: String,
    pub status: LiveStatus,
    pub transcript_handle: String,
    pub role: String,
    pub model: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

pub(crate) struct Inner {
    pub env: SupervisorEnv,
    /// Tool specs derived once per session.
    pub specs: crate::tool::SpecCache,
    /// The agent types delegating runs are told about (made on first use).
    pub directory: std::sync::OnceLock<Arc<super::agent_types::Directory>>,
    pub board: Board,
    pub recorder: Recorder,
    /// The root runs' tasks: shutdown waits for their end records.
    roots: tokio_util::task::TaskTracker,
    /// Models each provider accepts, once asked (`None`: it does not say).
    known_models: Mutex<HashMap<String, Option<Vec<String>>>>,
    /// Prices each provider publishes, once asked (see [`Supervisor::price_for`]).
    published_prices: Mutex<HashMap<String, Arc<Pricing>>>,
}

/// One per session: admits, runs, bounds and records every run.
#[derive(Clone)]
pub struct Supervisor {
    pub(crate) inner: Arc<Inner>,
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
                specs: crate::tool::SpecCache::default(),
                directory: Default::default(),
                board,
                recorder,
                roots: tokio_util::task::TaskTracker::new(),
                known_models: Mutex::new(HashMap::new()),
                published_prices: Mutex::new(HashMap::new()),
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

    pub fn limits(&self) -> &Limits {
        self.inner.board.limits()
    }

    pub fn env(&self) -> &SupervisorEnv {
        &self.inner.env
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

    /// Run the session's top-level agent to its end. Its children, grandchildren
    /// and their records hang off it.
    pub async fn run_root(&self, req: RootRequest) -> Result<(String, AgentOutcome), SpawnError> {
        self.run_root_with(req, |_| {}).await
    }

    /// As [`Supervisor::run_root`], telling `on_start` the run id once it is recorded
    /// (so the caller can route cancel requests to it).
    ///
    /// The root runs as a task of the runtime, like its children, wherever the
    /// caller awaits it: a caller on `block_on`'s thread (a CLI's `main`) would
    /// otherwise run the parent — its parsing, its opens, its next request — on a
    /// thread outside the runtime's workers, and every child it spawns and every
    /// wake between them would cross threads (on the fan-out benchmark: N = 200
    /// 1.188× → 1.179×, brood's CPU 50.7 → 47.4 ms). A panic in it reaches the
    /// caller as before.
    ///
    /// Dropping the returned future cancels the run's tree (a drop guard on its
    /// token): the root stops at its next await, its `task` children are cancelled,
    /// and each records its end `cancelled`; [`Supervisor::shutdown`] waits for those
    /// records.
    pub async fn run_root_with(
        &self,
        req: RootRequest,
        on_start: impl FnOnce(&str) + Send + 'static,
    ) -> Result<(String, AgentOutcome), SpawnError> {
        self.run_root_as(new_run_id(), req, on_start).await
    }

    /// As [`Supervisor::run_root_with`], under the run id `id` (from
    /// [`new_run_id`]; a caller that must name the run before it starts).
    pub(crate) async fn run_root_as(
        &self,
        id: String,
        mut req: RootRequest,
        on_start: impl FnOnce(&str) + Send + 'static,
    ) -> Result<(String, AgentOutcome), SpawnError> {
        let sup = self.clone();
        let token = req.cancel.child_token();
        req.cancel = token.clone();
        let guard = token.drop_guard();
        let task = self
            .inner
            .roots
            .spawn(async move { drive::run_root(&sup, id, req, on_start).await });
        let joined = task.await;
        guard.disarm();
        match joined {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Aborted: only by the runtime shutting down under us.
            Err(_) => Err(SpawnError::Closed),
        }
    }

    /// Open a child of `parent`. Returns at once; the child runs in the background
    /// (for `task` the caller then waits with [`Supervisor::wait`]).
    pub async fn open(
        &self,
        parent: &Arc<RunCtx>,
        req: SpawnRequest,
    ) -> Result<Opened, SpawnError> {
        let inner = &self.inner;
        if inner.env.session_cancel.is_cancelled() {
            return Err(SpawnError::Closed);
        }
        let depth = parent.depth + 1;
        if depth > inner.board.limits().max_depth {
            return Err(SpawnError::DepthLimit {
                max_depth: inner.board.limits().max_depth,
            });
        }
        parent.budgets.check_tree()?;
        // What kind of agent: a definition, else a role or alias.
        let kind = inner
            .env
            .catalog
            .resolve(req.agent_type.as_deref().unwrap_or("general"))?;
        let role = kind.role();
        let definition = kind.definition().cloned();
        // The grant: parent ∩ role posture ∩ definition list (∩ custom allowlist),
        // limits and the prompt.
        let parent_tools = parent.tool_names();
        let granted = grant::grant_for(
            &SpawnSpec {
                kind: &kind,
                parent: &parent.permissions,
                parent_tools: &parent_tools,
                allowed_tools: req.allowed_tools.as_deref(),
                model: req.model.as_deref(),
                fork_context: Some(req.fork_from.is_some()).filter(|f| *f),
                read_only_shell_available: inner.env.read_only_shell,
            },
            &inner.env.settings,
            &inner.env.quick_models,
            (&inner.env.main_provider, &inner.env.main_model_id),
        )?;
        // The model route.
        let mut warnings: Vec<String> = definition
            .as_ref()
            .map(|d| d.warnings.clone())
            .unwrap_or_default();
        warnings.extend(granted.adjustments.iter().cloned());
        let fork_from = match (&req.fork_from, granted.fork_context) {
            (Some(f), _) => Some(f.clone()),
            (None, true) => parent.last_request(),
            _ => None,
        };
        let (provider_name, model_id, model) = self
            .route_for(
                parent,
                &granted.route,
                fork_from.is_some() && req.model.is_none(),
                &mut warnings,
            )
            .await?;
        let price = self
            .price_for(&provider_name, &model_id, model.as_ref())
            .await;
        let max_turns = granted.max_turns;
        let kind_name = kind.name().to_string();
        let name = req.name.clone().unwrap_or_else(|| kind_name.clone());
        let id = new_run_id();
        let cancel = match &req.mode {
            SpawnMode::Task { turn_cancel } => turn_cancel.child_token(),
            SpawnMode::Background => inner.env.session_cancel.child_token(),
        };
        let background = matches!(req.mode, SpawnMode::Background);
        let (result_tx, result_rx) = watch::channel(None);
        let inbox = RunInbox::new();
        let claim = Arc::new(Claim::default());
        let progress = inner.board.new_progress();
        let transcript_handle = format!("transcript:{id}");
        let (settle_spawn, spawned) = super::gate::SpawnGate::new();
        let (id, name) = inner.board.admit(
            Entry {
                id: id.clone(),
                name,
                parent_id: Some(parent.run_id.clone()),
                depth,
                role: role.as_str().to_string(),
                background,
                status: LiveStatus::Pending,
                cancel: cancel.clone(),
                cancel_reason: None,
                progress: progress.clone(),
                inbox: inbox.clone(),
                claim: claim.clone(),
                result: result_rx,
                transcript_handle: transcript_handle.clone(),
            },
            background,
        )?;
        let ctx = Arc::new(RunCtx {
            run_id: id.clone(),
            root_id: parent.root_id.clone(),
            name: name.clone(),
            depth,
            role,
            kind_name: kind_name.clone(),
            permissions: Arc::new(granted.permissions.clone()),
            tool_names: std::sync::OnceLock::new(),
            inbox,
            progress,
            budgets: Budgets::child(
                &parent.budgets,
                RunLimits {
                    tokens: granted.token_budget,
                    cost_usd: granted.cost_budget_usd,
                    wall_time: Some(granted.wall_time),
                },
                &model_id,
                price,
            ),
            provider_name: provider_name.clone(),
            model_id: model_id.clone(),
            model,
            slot: Mutex::new(None),
            last_request: Mutex::new(None),
        });
        let plan = ChildPlan {
            ctx: ctx.clone(),
            parent_id: parent.run_id.clone(),
            parent_inbox: parent.inbox.clone(),
            prompt: req.prompt,
            system_prompt: granted.system_prompt.clone(),
            fork_from,
            max_turns,
            background,
            cancel,
            result_tx,
            claim,
            transcript_handle: transcript_handle.clone(),
            warnings: warnings.clone(),
            spawned,
        };
        // The spawn is on disk before the child does anything that counts and
        // before we report it; the child prepares its first request meanwhile.
        let durable = drive::record_spawn(self, &plan);
        // What was accepted but changed (definition keys without effect, limits
        // lowered, the route) is kept with the run, not only told to the parent.
        if !warnings.is_empty() {
            inner
                .recorder
                .warning(&id, serde_json::json!({ "spawn": warnings }));
        }
        drive::start_child(self.clone(), plan);
        if let Err(e) = durable.await {
            let _ = settle_spawn.send(Some(false));
            inner.board.set_status(&id, LiveStatus::Failed);
            return Err(e);
        }
        if background {
            parent.inbox.expect_child(&id);
        }
        let _ = settle_spawn.send(Some(true));
        Ok(Opened {
            agent_id: id,
            name,
            status: LiveStatus::Pending,
            transcript_handle,
            role: kind_name,
            model: format!("{provider_name}/{model_id}"),
            warnings,
        })
    }

    async fn route_for(
        &self,
        parent: &RunCtx,
        route: &routing::Route,
        keep_parent_route: bool,
        warnings: &mut Vec<String>,
    ) -> Result<(String, String, Arc<dyn Model>), SpawnError> {
        let env = &self.inner.env;
        // A forked child keeps the parent's route (so prefix caches can hit)
        // unless the call names a model.
        if keep_parent_route {
            return Ok((
                parent.provider_name.clone(),
                parent.model_id.clone(),
                parent.model.clone(),
            ));
        }
        let same_provider = route.provider.eq_ignore_ascii_case(&env.main_provider);
        if same_provider && route.model == env.main_model_id {
            return Ok((
                route.provider.clone(),
                route.model.clone(),
                env.main_model.clone(),
            ));
        }
        let model = if same_provider {
            Ok(env.main_model.clone())
        } else {
            (env.routes)(&route.provider, &route.model)
        };
        let model = match model {
            Ok(m) => m,
            Err(e) => {
                warnings.push(format!(
                    "provider '{}' could not be built ({e}); the child runs on the main provider {}/{}",
                    route.provider, env.main_provider, env.main_model_id
                ));
                return Ok((
                    env.main_provider.clone(),
                    env.main_model_id.clone(),
                    env.main_model.clone(),
                ));
            }
        };
        self.check_model_known(&route.provider, &route.model, model.as_ref())
            .await?;
        Ok((route.provider.clone(), route.model.clone(), model))
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
    async fn check_model_known(
        &self,
        provider: &str,
        model_id: &str,
        model: &dyn Model,
    ) -> Result<(), SpawnError> {
        let cached = self
            .inner
            .known_models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(provider)
            .cloned();
        let known = match cached {
            Some(k) => k,
            None => {
                // A provider that cannot list its models is the authority itself.
                let k = model.list_models().await.unwrap_or(None);
                self.inner
                    .known_models
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(provider.to_string(), k.clone());
                k
            }
        };
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
        let mut rx = self.inner.board.handles(id)?.result;
        let settled = async {
            loop {
                if let Some(r) = rx.borrow_and_update().clone() {
                    return Some(r);
                }
                if rx.changed().await.is_err() {
                    return rx.borrow().clone();
                }
            }
        };
        tokio::select! {
            r = settled => r,
            _ = cancel.cancelled() => None,
            _ = sleep_or_forever(timeout) => None,
        }
    }

    /// `parent` took child `id`'s settled result itself (`agent_eval`,
    /// `agent_close`): it is not pushed into `parent`'s conversation again, and
    /// `parent` no longer waits for it. `true` if this was the first delivery.
    /// Only a run's own children can be claimed.
    pub fn claim(&self, parent: &RunCtx, id: &str) -> bool {
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
    pub fn lookup_child(&self, parent: &RunCtx, key: &str) -> Option<String> {
        self.inner.board.lookup_child(&parent.run_id, key)
    }

    /// Cancel a run (and everything below its turn). `false` if it already ended.
    pub fn cancel(&self, id: &str, reason: &str) -> bool {
        self.inner.board.cancel(id, reason)
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
