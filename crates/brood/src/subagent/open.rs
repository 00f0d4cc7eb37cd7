//! Opening runs: admission, the grant, the model route, the run's context and
//! toolbox, then handing it to its driver — a child through [`Spawner::open`]
//! (`task`, `agent_open`), the session's top-level run through
//! [`Supervisor::run_root`]. The data flows one way: request → grant and route →
//! [`RunCtx`] and plan → driver (`super::drive`, `super::root`) → result.

use super::board::{Entry, LiveStatus};
use super::budgets::{Budgets, RunLimits, TreeLimits};
use super::ctx::RunCtx;
use super::drive::{self, ChildPlan};
use super::error::SpawnError;
use super::gate::SpawnGate;
use super::grant::{self, SpawnSpec};
use super::inbox::{Claim, RunInbox};
use super::role::Role;
use super::root;
use super::routing;
use super::spawn::{Opened, RootRequest, SpawnMode, SpawnRequest, Spawner};
use super::supervisor::{new_run_id, Supervisor};
use super::tally::RootTallies;
use super::tools::delegation_tools;
use super::worktree::{self, Isolation, Worktree, WorktreeError};
use crate::agent::AgentOutcome;
use crate::model::Model;
use crate::tool::{Capability, ShellPolicy, Tool, Toolbox, Workspace};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

impl Supervisor {
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
        let ctx = root_ctx(self, id, &req.name, req.tallies.as_deref()).await;
        let toolbox = build_toolbox(self, &ctx);
        let task =
            self.spawn_root(async move { root::run(&sup, ctx, toolbox, req, on_start).await });
        let joined = task.await;
        guard.disarm();
        match joined {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Aborted: only by the runtime shutting down under us.
            Err(_) => Err(SpawnError::Closed),
        }
    }

    pub(crate) async fn route_for(
        &self,
        parent: &RunCtx,
        route: &routing::Route,
        keep_parent_route: bool,
        warnings: &mut Vec<String>,
    ) -> Result<(String, String, Arc<dyn Model>), SpawnError> {
        let env = self.env();
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
}

#[async_trait]
impl Spawner for Supervisor {
    /// Open a child of `parent`. Returns at once; the child runs in the background
    /// (for `task` the caller then waits with [`Supervisor::wait`]).
    async fn open(&self, parent: &Arc<RunCtx>, req: SpawnRequest) -> Result<Opened, SpawnError> {
        if self.env().session_cancel.is_cancelled() {
            return Err(SpawnError::Closed);
        }
        let depth = parent.depth + 1;
        if depth > self.board().limits().max_depth {
            return Err(SpawnError::DepthLimit {
                max_depth: self.board().limits().max_depth,
            });
        }
        parent.budgets.check_tree()?;
        // What kind of agent: a definition, else a role or alias.
        let kind = self
            .env()
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
                parent_tools,
                allowed_tools: req.allowed_tools.as_deref(),
                model: req.model.as_deref(),
                fork_context: Some(req.fork_from.is_some()).filter(|f| *f),
                read_only_shell_available: self.env().read_only_shell,
                mcp_read_only: &self.env().mcp.read_only(),
            },
            &self.env().settings,
            &self.env().quick_models,
            (&self.env().main_provider, &self.env().main_model_id),
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
        // Isolation: the strictest of config, definition and call; a writer only.
        let isolation = self
            .env()
            .settings
            .isolation
            .strictest(
                definition
                    .as_ref()
                    .and_then(|d| d.isolation)
                    .unwrap_or_default(),
            )
            .strictest(req.isolation.unwrap_or_default());
        let writes = granted
            .permissions
            .capabilities
            .contains(&Capability::Write)
            || granted.permissions.shell == ShellPolicy::Full;
        // A fleet child runs in its worker's own worktree (`runtime::fleet`): none here.
        let local = self.env().settings.placement == super::config::Placement::Local;
        let (workspace, worktree) = if isolation == Isolation::Worktree && writes && local {
            // The definition's base over the config's; else the parent's HEAD.
            let base = definition
                .as_ref()
                .and_then(|d| d.worktree_base.clone())
                .or_else(|| self.env().settings.worktree_base.clone());
            let (tree, workspace) = self.make_worktree(parent, &id, base).await?;
            warnings.extend(tree.warnings.iter().cloned());
            (workspace, Some(tree))
        } else {
            (parent.workspace.clone(), None)
        };
        let abandon = |tree: &Option<Arc<Worktree>>| {
            if let Some(t) = tree.clone() {
                tokio::task::spawn_blocking(move || t.abandon());
            }
        };
        let cancel = match &req.mode {
            SpawnMode::Task { turn_cancel } => turn_cancel.child_token(),
            SpawnMode::Background => self.env().session_cancel.child_token(),
        };
        let background = matches!(req.mode, SpawnMode::Background);
        let (result_tx, result_rx) = watch::channel(None);
        let inbox = RunInbox::new();
        let claim = Arc::new(Claim::default());
        let progress = self.board().new_progress();
        let transcript_handle = format!("transcript:{id}");
        let (settle_spawn, spawned) = SpawnGate::new();
        let admitted = self.board().admit(
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
        );
        let (id, name) = match admitted {
            Ok(v) => v,
            Err(e) => {
                abandon(&worktree);
                return Err(e);
            }
        };
        let ctx = Arc::new(RunCtx {
            run_id: id.clone(),
            root_id: parent.root_id.clone(),
            name: name.clone(),
            depth,
            role,
            kind_name: kind_name.clone(),
            // Siblings granted the same (equal in every field) share one.
            permissions: self.grants().share(granted.permissions),
            rules: {
                // The parent's definition rules, and this definition's: only added to.
                let mut rules = (*parent.rules).clone();
                if let Some(d) = &definition {
                    rules.extend(&d.rule_set());
                }
                Arc::new(rules)
            },
            workspace,
            worktree: worktree.clone(),
            tool_names: std::sync::OnceLock::new(),
            inbox,
            progress,
            board: self.board().clone(),
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
            warnings: warnings.clone(),
            spawned,
            // Built now, so the spawn record names its tools; a panic while
            // building it (a tool factory's) is the child's crash, recorded.
            toolbox: std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                build_toolbox(self, &ctx)
            }))
            .map_err(|p| crate::tool::panic_message(&p)),
        };
        // The spawn is on disk before the child does anything that counts and
        // before we report it; the child sends its first request meanwhile.
        let durable = drive::record_spawn(self, &plan);
        // What was accepted but changed (definition keys without effect, limits
        // lowered, the route) is kept with the run, not only told to the parent.
        if !warnings.is_empty() {
            self.recorder()
                .warning(&id, serde_json::json!({ "spawn": warnings }));
        }
        match self.env().settings.placement {
            super::config::Placement::Local => drive::start_child(self.clone(), plan),
            super::config::Placement::Fleet => super::fleet::start_fleet_child(self.clone(), plan),
        }
        if let Err(e) = durable.await {
            abandon(&worktree);
            let _ = settle_spawn.send(Some(false));
            self.board().set_status(&id, LiveStatus::Failed);
            return Err(e);
        }
        if let Some(t) = &worktree {
            self.recorder().worktree(
                &id,
                serde_json::json!({ "created": {
                    "branch": t.branch,
                    "path": t.path,
                    "base": t.base,
                    "target": t.target,
                }}),
            );
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
            branch: worktree.as_ref().map(|t| t.branch.clone()),
            warnings,
        })
    }
}

impl Supervisor {
    /// Make run `id`'s worktree from `parent`'s workspace (from `base` when set,
    /// else its `HEAD`), and the jail rooted in it.
    async fn make_worktree(
        &self,
        parent: &RunCtx,
        id: &str,
        base: Option<String>,
    ) -> Result<(Arc<Worktree>, Arc<Workspace>), SpawnError> {
        let session_ws = self.env().workspace.root().to_path_buf();
        let parent_ws = parent.workspace.root().to_path_buf();
        let run = id.to_string();
        let made = tokio::task::spawn_blocking(move || {
            let tree = worktree::create(&session_ws, &parent_ws, &run, base.as_deref())?;
            match Workspace::open(&tree.workspace) {
                Ok(ws) => Ok((Arc::new(tree), Arc::new(ws))),
                Err(e) => {
                    let _ = tree.abandon();
                    Err(WorktreeError::Io {
                        what: "opening the worktree as the child's workspace",
                        path: tree.workspace.clone(),
                        detail: e.to_string(),
                    })
                }
            }
        })
        .await
        .map_err(|_| SpawnError::Closed)?;
        Ok(made?)
    }
}

/// The context of a root run `id` (the session's top-level run, or an outside
/// host's): depth 0, the full grant, the session's main model, the tree's budgets
/// (counted into `tallies` when given).
pub(crate) async fn root_ctx(
    sup: &Supervisor,
    id: String,
    name: &str,
    tallies: Option<&RootTallies>,
) -> Arc<RunCtx> {
    let env = sup.env();
    let price = sup
        .price_for(
            &env.main_provider,
            &env.main_model_id,
            env.main_model.as_ref(),
        )
        .await;
    Arc::new(RunCtx {
        run_id: id.clone(),
        root_id: id,
        name: name.to_string(),
        depth: 0,
        role: Role::General,
        kind_name: "parent".into(),
        tool_names: std::sync::OnceLock::new(),
        permissions: Arc::new(env.root_permissions()),
        rules: Arc::new(crate::tool::RuleSet::new()),
        workspace: env.workspace.clone(),
        worktree: None,
        inbox: RunInbox::new(),
        progress: sup.board().new_progress(),
        board: sup.board().clone(),
        budgets: Budgets::root(
            TreeLimits {
                tokens: env.settings.tree_token_budget,
                cost_usd: env.settings.tree_cost_budget_usd,
            },
            tallies,
            &env.main_model_id,
            price,
        ),
        provider_name: env.main_provider.clone(),
        model_id: env.main_model_id.clone(),
        model: env.main_model.clone(),
        slot: Mutex::new(None),
        last_request: Mutex::new(None),
    })
}

/// The run's toolbox: fresh workspace tools, plus delegation tools unless the run
/// is at the depth limit (then still candidates, refused as not granted).
pub(crate) fn build_toolbox(sup: &Supervisor, ctx: &Arc<RunCtx>) -> Toolbox {
    let mut tools: Vec<Arc<dyn Tool>> = (sup.env().tools)(&ctx.run_id);
    let can_delegate = sup.env().settings.enabled && ctx.depth < sup.limits().max_depth;
    // The toolbox checks calls against the run's own grant (one `Arc`), less
    // delegation where the run may not delegate: the delegation tools stay
    // candidates, so a call to one (a forked child is offered its parent's specs)
    // is refused as not granted, naming the tool and role.
    let permissions =
        if can_delegate || !ctx.permissions.capabilities.contains(&Capability::Delegate) {
            ctx.permissions.clone()
        } else {
            let mut narrowed = (*ctx.permissions).clone();
            narrowed.capabilities.remove(&Capability::Delegate);
            Arc::new(narrowed)
        };
    tools.extend(delegation_tools(sup, ctx));
    let mut toolbox = Toolbox::with_cache(tools, permissions, sup.specs());
    if let Some(gate) = sup.call_gate() {
        toolbox = toolbox.with_gate(gate.clone(), ctx.rules.clone());
    }
    let _ = ctx
        .tool_names
        .set(sup.tool_name_lists().share(toolbox.names()));
    toolbox
}
