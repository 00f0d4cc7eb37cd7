//! A session on one workspace: the wiring of config, providers, tools, ledger
//! and supervisor, and the entry point for running a parent agent.

use super::approval::ApprovalGate;
use super::config::Config;
use super::instructions::ProjectInstructions;
use super::models::build_models;
use super::provider::ProviderFactory;
use super::root::{FirstRunNotes, RootRunner};
use super::tools::{check_ask_before, check_extra_tools};
use crate::agent::EventSink;
use crate::ledger::{Ledger, LedgerOptions};
use crate::subagent::tally::{RootTallies, Tally};
use crate::subagent::AgentCatalog;
use crate::subagent::{Supervisor, SupervisorEnv, ToolFactory};
use crate::tool::{self, Workspace};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use super::error::SessionError;
pub use super::options::{ModelSource, SessionOptions};
pub use super::root::RunReport;
pub use super::tools::sandbox_options;

/// An open session on a workspace: its configuration, ledger, providers and the
/// supervisor of its runs. Open one with [`Session::builder`]; run parents with
/// [`Session::ask`] (to the end) or [`Session::run`] (a handle); watch every run
/// with [`Session::events`]; end with [`Session::close`].
///
/// ```no_run
/// # async fn demo() -> Result<(), brood::Error> {
/// let session = brood::Session::builder(".")
///     .env(std::env::vars()) // DEEPSEEK_API_KEY, BROOD_* settings
///     .build()
///     .await?;
/// let report = session
///     .ask("Use task to have two explore agents map the crates and the tests.")
///     .await?;
/// println!("{}\n({} tool calls)", report.final_text, report.tool_calls);
/// session.close().await;
/// # Ok(()) }
/// ```
pub struct Session {
    config: Arc<Config>,
    workspace: Arc<Workspace>,
    ledger: Arc<Ledger>,
    supervisor: Supervisor,
    cancel: CancellationToken,
    /// The root runs in flight, each with its token: what `cancel_all` and
    /// `brood agents cancel` (the cancel poller) stop a root by.
    pub(super) roots: Arc<Mutex<HashMap<String, CancellationToken>>>,
    sandbox: Arc<tool::Sandbox>,
    session_warned: std::sync::atomic::AtomicBool,
    definition_warnings: Vec<String>,
    orphaned_worktrees: Vec<String>,
    /// The project instruction files in the prompts, for the ledger (`None`: none).
    instruction_files: Option<serde_json::Value>,
    /// The tallies of the latest root run, readable while it runs (a status line).
    live: Arc<Mutex<Option<Arc<RootTallies>>>>,
    /// The session's MCP servers (one connection each, shared by every run).
    mcp: Arc<tool::mcp::McpServers>,
    /// Permission rules and approvals (every tool call of every run).
    gate: Arc<ApprovalGate>,
}

impl Session {
    /// What the model answered so far to the tree of the latest (or current) root
    /// run: tokens, requests, cost. `None` before the first run.
    pub fn live_usage(&self) -> Option<Tally> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.as_ref().map(|t| t.tree.get())
    }

    /// What the shell sandbox cannot enforce on this kernel, one line each (empty:
    /// everything). The CLI prints these once per session.
    pub(crate) fn sandbox_degradations(&self) -> Vec<String> {
        self.sandbox.degradations()
    }

    /// The session's permission rules now, each with where it came from (config
    /// files, Claude Code settings, [`Session::add_rule`]). Agent definitions'
    /// rules apply on top of these to their runs.
    pub fn rules(&self) -> tool::RuleSet {
        self.gate.rules()
    }

    /// Add a permission rule for the rest of the session (every run, from its next
    /// call on). A malformed rule is refused, saying why.
    pub fn add_rule(&self, kind: tool::RuleKind, rule: &str) -> Result<(), tool::RuleError> {
        self.gate.add_rule(kind, rule)
    }

    /// Remove every session rule written `rule` (any list, any source) for the
    /// rest of the session; how many were removed.
    pub fn remove_rule(&self, rule: &str) -> usize {
        self.gate.remove_rule(rule)
    }

    /// Agent definition files this session did not take, one line each (file, why).
    pub fn definition_warnings(&self) -> &[String] {
        &self.definition_warnings
    }

    /// MCP servers that did not start and MCP tools left out, one line each.
    pub(crate) fn mcp_warnings(&self) -> &[String] {
        self.mcp.warnings()
    }

    /// The session's MCP servers and how each one's start went.
    pub fn mcp_servers(&self) -> &[tool::mcp::ServerReport] {
        self.mcp.reports()
    }

    /// Worktrees of runs that never settled them (a killed session's), found at
    /// start and listed in the ledger; `brood agents prune` removes them.
    pub fn orphaned_worktrees(&self) -> &[String] {
        &self.orphaned_worktrees
    }

    /// Everything the session found wrong at start that a person should be told, one
    /// line each, in one order: shell sandbox degradations, skipped or partial agent
    /// definitions, MCP servers that did not start, orphaned worktrees. Every front
    /// end (`run`, `chat`, `mcp`) prints these, so none of them can forget one.
    pub fn startup_warnings(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .sandbox_degradations()
            .into_iter()
            .map(|d| format!("shell sandbox: {d}"))
            .collect();
        lines.extend(
            self.definition_warnings
                .iter()
                .map(|w| format!("agent definition {w}")),
        );
        lines.extend(self.mcp_warnings().iter().cloned());
        lines.extend(self.orphaned_worktrees.iter().cloned());
        lines
    }

    /// Open the workspace: ledger (recovering dead sessions' runs), providers,
    /// agent definitions, supervisor.
    pub async fn open(opts: SessionOptions) -> Result<Session, SessionError> {
        let workspace = Workspace::open(&opts.workspace).map_err(|e| SessionError::Workspace {
            path: opts.workspace.clone(),
            detail: format!("{e} (it must be an existing directory)"),
        })?;
        let workspace = Arc::new(workspace);
        let config = Arc::new(opts.config);
        let env = Arc::new(opts.env);
        // The same checks `brood config show` and `brood doctor` run.
        let checked = config.check(&env)?;
        let settings = checked.settings;
        let quick_models = checked.quick_models;
        let memory = checked.memory;

        let factory = ProviderFactory::new(config.clone(), env.clone());
        let (main_provider, main_model_id, main_model, routes) =
            build_models(&config, &factory, &opts.models, opts.route_builder)?;

        let root = workspace.root().to_path_buf();
        let ledger_options = LedgerOptions {
            url: config.ledger_url.clone(),
            ..LedgerOptions::default()
        };
        let ledger = tokio::task::spawn_blocking(move || Ledger::open(&root, ledger_options))
            .await
            .map_err(|e| SessionError::TaskFailed {
                task: "opening the ledger",
                detail: e.to_string(),
            })??;
        let ledger = Arc::new(ledger);
        // Worktrees a killed session left behind are listed in the ledger.
        let orphaned_worktrees = {
            let ledger = ledger.clone();
            tokio::task::spawn_blocking(move || crate::subagent::worktrees::record_orphans(&ledger))
                .await
                .unwrap_or_default()
        };
        // The user's definitions are in `~/.config/brood/agents/` (as documented),
        // not beside config.toml.
        // ~/.claude/agents/ holds the user's personal Claude Code agents.
        let user_agents = AgentCatalog::user_dirs(config.user_dir.as_deref(), &env);
        let catalog = AgentCatalog::load(workspace.root(), &user_agents);
        let definition_warnings: Vec<String> = catalog
            .refused()
            .iter()
            .map(|r| format!("{}: not used: {}", r.path.display(), r.why))
            .chain(
                catalog
                    .skipped()
                    .iter()
                    .map(|k| format!("agent file skipped: {}", k.error)),
            )
            .collect();

        // AGENTS.md (else CLAUDE.md) and the user's own, for every system prompt.
        let instructions = {
            let root = workspace.root().to_path_buf();
            let user = config.user_dir.as_ref().map(|d| d.join("AGENTS.md"));
            let here = opts.working_dir.clone();
            let max = config.instructions_max_bytes;
            tokio::task::spawn_blocking(move || {
                ProjectInstructions::load(&root, here.as_deref(), user.as_deref(), max)
            })
            .await
            .map_err(|e| SessionError::TaskFailed {
                task: "reading the project instructions",
                detail: e.to_string(),
            })?
        };
        let instruction_files = (!instructions.files.is_empty())
            .then(|| serde_json::json!({ "files": instructions.files }));
        let definition_warnings: Vec<String> = definition_warnings
            .into_iter()
            .chain(instructions.refused.iter().map(|(p, why)| {
                format!("{}: not read as project instructions: {why}", p.display())
            }))
            .collect();
        // One sandbox per session: its landlock probe runs once.
        let sandbox = Arc::new(tool::Sandbox::with_options(sandbox_options(&config)));
        let read_only_shell = sandbox.read_only_shell_available();
        let memory_files = memory.then(|| {
            tool::MemoryFiles::for_workspace(
                workspace.root(),
                config.user_dir.as_ref().map(|d| d.join("memory.md")),
            )
        });
        let tool_sandbox = sandbox.clone();
        let extra = check_extra_tools(opts.tools)?;
        check_ask_before(&opts.ask_before, &extra)?;
        let mcp = Arc::new(
            super::mcp_start::start(
                checked.mcp_servers,
                &sandbox_options(&config).env.deny,
                &env,
                workspace.root(),
                &extra,
            )
            .await,
        );
        let mcp_tools = mcp.clone();
        let gate = Arc::new(ApprovalGate::new(
            opts.approver,
            config.permissions.clone(),
            opts.ask_before,
            workspace.root().to_path_buf(),
        ));
        let tools: ToolFactory = Arc::new(move |_run_id: &str| {
            let mut tools = tool::builtin_tools(&tool::BuiltinOptions {
                memory: memory_files.clone(),
                sandbox: Some(tool_sandbox.clone()),
            });
            tools.extend(extra.iter().cloned());
            tools.extend(mcp_tools.tools());
            tools
        });
        let cancel = CancellationToken::new();
        let env = SupervisorEnv {
            workspace: workspace.clone(),
            ledger: ledger.clone(),
            catalog: Arc::new(catalog),
            settings,
            quick_models,
            main_provider,
            main_model_id,
            main_model,
            routes,
            tools,
            read_only_shell,
            sampling: config.sampling.clone(),
            tool_choice: config.tool_choice.clone(),
            tool_concurrency: config.tool_concurrency,
            session_cancel: cancel.clone(),
            session_id: ledger.session_id().to_string(),
            pricing: Arc::new(config.pricing.clone()),
            project_instructions: Arc::from(instructions.text.as_str()),
            mcp: mcp.clone(),
        };
        let supervisor = match opts.limits {
            Some(l) => Supervisor::with_limits(l, env),
            None => Supervisor::new(env),
        };
        let _ = gate.bus.set(supervisor.bus().clone());
        supervisor.set_call_gate(gate.clone());
        let session = Session {
            config,
            workspace,
            ledger,
            supervisor,
            cancel,
            roots: Arc::new(Mutex::new(HashMap::new())),
            sandbox,
            session_warned: std::sync::atomic::AtomicBool::new(false),
            definition_warnings,
            orphaned_worktrees,
            instruction_files,
            live: Arc::new(Mutex::new(None)),
            mcp,
            gate,
        };
        session.start_cancel_poller();
        Ok(session)
    }

    /// `brood agents cancel` from another process, or a parent cancelling a fleet
    /// child this session (a worker) holds, writes a request row; this session polls
    /// for requests addressed to it — and, on a PostgreSQL ledger, takes them at once
    /// when `NOTIFY brood_run_cancel` says one was recorded ([`cancel_wake`]).
    fn start_cancel_poller(&self) {
        let ledger = self.ledger.clone();
        let sup = self.supervisor.clone();
        let roots = self.roots.clone();
        let cancel = self.cancel.clone();
        let wake = cancel_wake(&ledger, &cancel);
        tokio::spawn(async move {
            // No poll at once: requests are addressed to runs of this session, and at
            // its start there are none yet (an immediate poll only added a commit
            // to the first run's start).
            let period = Duration::from_millis(500);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = wake.notified() => {}
                    _ = cancel.cancelled() => break,
                }
                let Ok(ids) = ledger.take_cancel_requests().await else {
                    continue;
                };
                for id in ids {
                    let id = id.as_str().to_string();
                    let root = roots
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&id)
                        .cloned();
                    match root {
                        Some(token) => {
                            sup.note_root_cancel(
                                &id,
                                "cancelled on request (by its parent, or `brood agents cancel`)",
                            );
                            token.cancel();
                        }
                        None => {
                            sup.cancel(
                                &id,
                                "cancelled on request (by its parent, or `brood agents cancel`)",
                            );
                        }
                    }
                }
            }
        });
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// The workspace jail every tool path goes through.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }
    /// The session's ledger (every run's record).
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
    /// The supervisor of the session's runs (snapshots, limits, cancellation).
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }
    /// The session's live events: every run's spawn, start, steps, streamed text,
    /// usage, tool calls and end, in order, from now on (see [`crate::events`]).
    /// Publishing never waits for a subscriber; one that falls behind gets an
    /// [`Event::Lagged`](crate::Event::Lagged) marker. The stream ends when the
    /// session is gone.
    ///
    /// ```no_run
    /// # async fn demo(session: &brood::Session) {
    /// use futures::StreamExt;
    /// let mut events = session.events();
    /// while let Some(event) = events.next().await {
    ///     if let brood::Event::Run(e) = event {
    ///         println!("{} {:?} {:?}", e.run_id, e.parent_id, e.kind);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn events(&self) -> crate::events::EventStream {
        self.supervisor.bus().subscribe(None)
    }

    /// The session's token: cancelling it stops every run.
    pub(crate) fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Cancel every live run of this session — its roots (their turns) and every
    /// child, background ones included — each recorded `cancelled` with `reason`
    /// (unless it already had one). The runs settle on their own; a run ([`Session::run`])
    /// returns once its root has. A signal handler calls this.
    ///
    /// The roots go first: a root whose children were cancelled before it would
    /// read their cancelled results and could take one more step — a model call
    /// nobody wants, and a turn recorded `completed` by a user who quit. Every
    /// live child's reason is noted before that, so a child the root's cancel
    /// reaches first is still recorded with `reason`.
    pub fn cancel_all(&self, reason: &str) {
        let live: Vec<String> = self
            .supervisor
            .snapshot()
            .into_iter()
            .filter(|run| !run.status.is_terminal())
            .map(|run| run.agent_id)
            .collect();
        for id in &live {
            self.supervisor.note_cancel(id, reason);
        }
        let roots: Vec<(String, CancellationToken)> = self
            .roots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, t)| (id.clone(), t.clone()))
            .collect();
        for (id, token) in roots {
            self.supervisor.note_root_cancel(&id, reason);
            token.cancel();
        }
        for run in self.supervisor.snapshot() {
            if !run.status.is_terminal() {
                self.supervisor.cancel(&run.agent_id, reason);
            }
        }
    }

    /// Run a parent agent on `prompt` until it ends (and, if it opened background
    /// children, until their completions were delivered to it). `events` sees every
    /// event of the root run as it happens (the CLI's live lines); `turn` cancels it;
    /// so does dropping the returned future — the root and its `task` children stop
    /// and record their end `cancelled` ([`Session::close`] waits for those records).
    /// [`Session::run`] is the same as a handle; [`Session::ask`] the simplest call.
    pub async fn run_with(
        &self,
        prompt: &str,
        events: Option<EventSink>,
        turn: CancellationToken,
    ) -> Result<RunReport, SessionError> {
        self.root_runner()
            .run(
                crate::subagent::new_run_id(),
                prompt.to_string(),
                Vec::new(),
                events,
                turn,
            )
            .await
    }

    /// As [`Session::run_with`], continuing a conversation: `history` is what an
    /// earlier report's [`RunReport::messages`] returned (`brood chat` keeps the
    /// parent's conversation across prompts this way). Each prompt is its own root
    /// run in the ledger; its model requests carry the whole conversation.
    pub async fn run_continuing(
        &self,
        history: Vec<crate::model::Message>,
        prompt: &str,
        events: Option<EventSink>,
        turn: CancellationToken,
    ) -> Result<RunReport, SessionError> {
        self.root_runner()
            .run(
                crate::subagent::new_run_id(),
                prompt.to_string(),
                history,
                events,
                turn,
            )
            .await
    }

    /// What a root run needs of the session, owned (a handle's task outlives the
    /// borrow of the session).
    pub(super) fn root_runner(&self) -> RootRunner {
        // What the sandbox cannot enforce here and the definition files not used
        // (a `warning`), and the project instruction files (`instructions`), go into
        // the ledger once per session, on its first root run (the CLI also prints
        // the warnings).
        let first = !self
            .session_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        let mut notes: FirstRunNotes = Vec::new();
        if first {
            let mut payload = serde_json::Map::new();
            let degradations = self.sandbox.degradations();
            if !degradations.is_empty() {
                payload.insert("sandbox".into(), degradations.into());
            }
            if !self.definition_warnings.is_empty() {
                payload.insert(
                    "definitions".into(),
                    self.definition_warnings.clone().into(),
                );
            }
            if !self.mcp.warnings().is_empty() {
                payload.insert("mcp".into(), self.mcp.warnings().to_vec().into());
            }
            if !payload.is_empty() {
                notes.push((
                    crate::ledger::EventKind::Warning,
                    serde_json::Value::Object(payload),
                ));
            }
            if let Some(files) = &self.instruction_files {
                notes.push((crate::ledger::EventKind::Instructions, files.clone()));
            }
        }
        let warn = (!notes.is_empty()).then(|| (self.ledger.clone(), notes));
        RootRunner {
            supervisor: self.supervisor.clone(),
            roots: self.roots.clone(),
            max_turns: self.config.max_turns,
            warn,
            live: self.live.clone(),
        }
    }

    /// A root run for an outside parent (an MCP host through `brood mcp`): it calls
    /// the delegation tools by name, and every child it opens runs under this
    /// session's grants, limits and ledger exactly as a parent agent's would.
    pub async fn host(
        &self,
        name: &str,
        objective: &str,
    ) -> Result<crate::subagent::HostRun, SessionError> {
        self.supervisor
            .open_host(name, objective)
            .await
            .map_err(SessionError::Spawn)
    }

    /// Stop every run, wait for their final records, flush the ledger.
    pub async fn close(self) {
        self.shutdown().await;
    }

    /// [`Session::close`] through a shared reference, for a session other tasks
    /// still hold (an `Arc<Session>` a UI's tasks share): every run is stopped and
    /// its final record written and flushed before this returns, so a process that
    /// exits next loses nothing. Afterwards the session can still be read (its
    /// ledger, its runs), but it runs nothing more.
    pub async fn shutdown(&self) {
        self.supervisor.shutdown().await;
        self.mcp.stop();
        let _ = self.ledger.flush().await;
    }
}

/// A session dropped without [`Session::close`] still ends: its runs are cancelled
/// (children record `cancelled`), the cancel poller and heartbeat stop, and the
/// ledger closes — writer thread ended, boot lock released — once the last task
/// holding it has written its end. `close` waits for all that; a drop cannot.
impl Drop for Session {
    fn drop(&mut self) {
        for run in self.supervisor.snapshot() {
            if !run.status.is_terminal() {
                self.supervisor
                    .cancel(&run.agent_id, "the session was dropped");
            }
        }
        self.cancel.cancel();
    }
}

/// Woken when a cancel request is recorded in a PostgreSQL ledger (`LISTEN
/// brood_run_cancel` on a connection of its own, from a thread: the listener
/// blocks), and when that connection came back after being lost (a request recorded
/// meanwhile was not heard). Never woken on an SQLite ledger: its sessions poll.
/// The thread ends within a few seconds of `cancel` (the session's close).
fn cancel_wake(ledger: &Ledger, cancel: &CancellationToken) -> Arc<tokio::sync::Notify> {
    let wake = Arc::new(tokio::sync::Notify::new());
    let Ok(mut listener) = ledger.listen(crate::ledger::FleetChannel::Cancel) else {
        return wake;
    };
    let (out, cancel) = (wake.clone(), cancel.clone());
    let _ = std::thread::Builder::new()
        .name("brood-cancel-wake".into())
        .spawn(move || {
            while !cancel.is_cancelled() {
                match listener.wait(Duration::from_secs(2)) {
                    Ok(heard) if heard.reconnected || !heard.runs.is_empty() => out.notify_one(),
                    Ok(_) => {}
                    // Out of reach past the ledger's reconnect_for: the poll goes on.
                    Err(_) => std::thread::sleep(Duration::from_secs(1)),
                }
            }
        });
    wake
}
