//! Resuming a recorded run under its own id: the grant re-derived down its lineage
//! from the current configuration, the ledger row reopened (`resumed`), the
//! conversation continued from its rebuilt transcript with what it already spent
//! counted, and its end recorded like any run's.
//!
//! The grant is re-derived from its sources: the root's grant, then each
//! ancestor's agent type, then the run's own, each narrowing the one above
//! ([`grant::grant_for`], as at spawn), under today's configuration (which may be
//! narrower than the day it ran) — then narrowed to the grant recorded at its
//! spawn (`super::granted`: its tools after the call's `allowed_tools`, its
//! permissions), so it never gets more than it ran with; the `deny`/`ask` rules
//! it ran under that today's rules lack are kept as its own. A run recorded without a
//! grant, or whose agent type's definition is gone, is refused.
//! Limits count what was spent: steps against `max_turns`, tokens against the run's
//! and the tree's token budgets, and the wall time it ran against `wall_time_secs`.
//!
//! Its result goes to the ledger (and the caller): the process that opened it is
//! gone, so there is no live parent to deliver it to; `brood agents show` shows it.

use super::board::{Entry, LiveStatus};
use super::budgets::{Budgets, RunLimits};
use super::ctx::RunCtx;
use super::error::SpawnError;
use super::grant::{self, SpawnSpec};
use super::granted::RecordedGrant;
use super::hooks::hooks_for;
use super::inbox::{Claim, RunInbox};
use super::open::{build_toolbox, root_ctx};
use super::prompt::{child_instructions, root_system_prompt, with_project_instructions};
use super::report;
use super::result::{ChildResult, Settled};
use super::role::Role;
use super::supervisor::Supervisor;
use super::tally::RootTallies;
use crate::agent::{self, AgentOutcome, AgentSpec, EventSink, Spent};
use crate::ledger::{EventKind, EventRecord, LedgerError, RunId, RunRecord};
use crate::model::{Message, Usage};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why a run cannot be resumed. Each names the run, what is wrong, and the fix.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResumeError {
    /// It was recorded in another workspace (the directory moved, or another one).
    #[error("run {id} cannot be resumed here: it ran in workspace {recorded}, and this session is in {here}; its paths and files are there — resume it from that directory (move the workspace back if it moved)")]
    WorkspaceMoved {
        /// The run.
        id: String,
        /// The workspace it ran in.
        recorded: String,
        /// This session's workspace.
        here: String,
    },
    /// Its agent type (or an ancestor's) is defined no more.
    #[error("run {id} cannot be resumed: its agent type '{agent_type}' is not defined any more ({detail}); restore its definition file, then resume")]
    DefinitionGone {
        /// The run.
        id: String,
        /// The agent type it ran as.
        agent_type: String,
        /// Why the type cannot be resolved.
        detail: String,
    },
    /// It was recorded without its grant (by a brood from before grants were
    /// recorded): what it was allowed cannot be known, so it is not resumed.
    #[error("run {id} cannot be resumed: it was recorded by an older brood that did not record which tools it was granted, so resuming it could give it more than it ran with; start a new run for its objective instead (`brood agents show {id}` shows it and its transcript)")]
    NoRecordedGrant {
        /// The run.
        id: String,
    },
    /// Its grant cannot be built under today's configuration.
    #[error("run {id} cannot be resumed: {detail}")]
    Grant {
        /// The run.
        id: String,
        /// Why the grant cannot be built.
        detail: String,
    },
    /// A fleet worker cannot prepare the run's workspace (its repository and
    /// revision as enqueued).
    #[error("run {id} cannot run on this worker: preparing its workspace ({repo} at {rev}) failed: {detail}; check that this machine reaches the repository and that the revision exists there")]
    Workspace {
        /// The run.
        id: String,
        /// Its repository, as enqueued.
        repo: String,
        /// Its revision (`HEAD` when none was given).
        rev: String,
        /// What failed.
        detail: String,
    },
    /// Its transcript cannot be read back as a conversation.
    #[error("run {id} cannot be resumed: {detail}")]
    Transcript {
        /// The run.
        id: String,
        /// What is wrong with the transcript.
        detail: String,
    },
    /// The ledger refused (completed, still live elsewhere, unknown) or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The run could not be admitted or started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
}

/// What resuming a run takes.
pub struct ResumeRequest {
    /// The run's lineage as recorded: the root first, the run itself last.
    pub lineage: Vec<RunRecord>,
    /// The run's events (for the wall time it already ran).
    pub events: Vec<EventRecord>,
    /// Its conversation, rebuilt from its transcript (see [`super::rebuild`]).
    pub messages: Vec<Message>,
    /// The top-level run's turn limit (when the run resumed is a root).
    pub root_max_turns: u32,
    /// Extra observer (the CLI's live output).
    pub observer: Option<EventSink>,
    /// Cancels the resumed run.
    pub cancel: CancellationToken,
    /// Where its usage and cost are counted (what was spent before included).
    pub tallies: Option<Arc<RootTallies>>,
    /// Where it runs: `None` is the session's workspace (or, for an isolated run,
    /// the worktree it left); a fleet worker gives the worktree it prepared.
    pub workspace: Option<Arc<crate::tool::Workspace>>,
    /// The worktree `workspace` is in, settled (committed, and for a fleet run
    /// pushed) before its end is recorded, as a local isolated child's is.
    pub worktree: Option<Arc<super::worktree::Worktree>>,
    /// Its record was already moved to this session by a fleet claim
    /// (`Ledger::claim`): it is not reopened again.
    pub claimed: bool,
    /// Its transcript was empty (`messages` is its task alone): the task is
    /// recorded as its first message, so a later resume finds it.
    pub task_unrecorded: bool,
}

/// How a resumed run is set up, decided before anything is written.
struct Plan {
    role: Role,
    kind_name: String,
    permissions: crate::tool::Permissions,
    system: String,
    max_turns: u32,
    limits: RunLimits,
    route: Option<super::routing::Route>,
    warnings: Vec<String>,
    /// The permission rules of the definitions down its lineage.
    rules: crate::tool::RuleSet,
}

impl Supervisor {
    /// Resume the last run of `req.lineage` under its own id (see the module doc).
    /// Refusals ([`ResumeError`]) write nothing. Returns its id and outcome once its
    /// end is recorded.
    pub async fn resume(
        &self,
        req: ResumeRequest,
    ) -> Result<(String, AgentOutcome, Option<ChildResult>), ResumeError> {
        let record = req
            .lineage
            .last()
            .cloned()
            .ok_or_else(|| ResumeError::Transcript {
                id: String::new(),
                detail: "no run given".into(),
            })?;
        let id = record.id.as_str().to_string();
        // A stand-in for its parent: the root's grant and the tree's budgets.
        let parent_id = record
            .parent_id
            .as_ref()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| id.clone());
        let parent = root_ctx(self, parent_id, "parent", req.tallies.as_deref()).await;
        let _ = build_toolbox(self, &parent);
        let plan = self.plan_resume(&req, &record, &parent)?;
        let (provider_name, model_id, model) = match &plan.route {
            None => {
                let env = self.env();
                (
                    env.main_provider.clone(),
                    env.main_model_id.clone(),
                    env.main_model.clone(),
                )
            }
            Some(route) => {
                let mut warnings = Vec::new();
                self.route_for(&parent, route, false, &mut warnings).await?
            }
        };
        let price = self
            .price_for(&provider_name, &model_id, model.as_ref())
            .await;
        // Everything checked: reopen the record (refused if completed or live),
        // unless a fleet claim already did.
        if !req.claimed {
            self.env().ledger.reopen(&RunId::from_string(&id)).await?;
        }
        let spent = Spent {
            turns: u32::try_from(record.steps).unwrap_or(u32::MAX),
            usage: Usage {
                input_tokens: record.input_tokens,
                output_tokens: record.output_tokens,
                cached_input_tokens: record.cached_input_tokens,
            },
        };
        let budgets = if record.parent_id.is_none() {
            Budgets::root(
                super::budgets::TreeLimits {
                    tokens: self.env().settings.tree_token_budget,
                    cost_usd: self.env().settings.tree_cost_budget_usd,
                },
                req.tallies.as_deref(),
                &model_id,
                price,
            )
        } else {
            Budgets::child(&parent.budgets, plan.limits, &model_id, price)
        };
        budgets.count_spent(record.steps, &spent.usage);
        let cancel = req.cancel.child_token();
        let (result_tx, result_rx) = watch::channel(None);
        let inbox = RunInbox::new();
        let progress = self.board().new_progress();
        let name = record
            .name
            .clone()
            .unwrap_or_else(|| plan.kind_name.clone());
        let is_child = record.parent_id.is_some();
        if is_child {
            self.board().admit(
                Entry {
                    id: id.clone(),
                    name: name.clone(),
                    parent_id: record.parent_id.as_ref().map(|p| p.as_str().to_string()),
                    depth: record.depth,
                    role: plan.role.as_str().to_string(),
                    background: false,
                    status: LiveStatus::Running,
                    cancel: cancel.clone(),
                    cancel_reason: None,
                    progress: progress.clone(),
                    inbox: inbox.clone(),
                    claim: Arc::new(Claim::default()),
                    result: result_rx,
                    transcript_handle: format!("transcript:{id}"),
                },
                false,
            )?;
        }
        // An isolated run resumes in the worktree it left (its branch keeps what
        // it writes; the worktree is then settled by `brood agents prune`).
        let workspace = match &req.workspace {
            Some(w) => w.clone(),
            None => {
                let dir = crate::subagent::worktree::dir_of(self.env().workspace.root(), &id);
                match dir.join(".git").exists() {
                    true => crate::tool::Workspace::open(&dir)
                        .map(Arc::new)
                        .unwrap_or_else(|_| self.env().workspace.clone()),
                    false => self.env().workspace.clone(),
                }
            }
        };
        let ctx = Arc::new(RunCtx {
            run_id: id.clone(),
            root_id: record.root_id.as_str().to_string(),
            name,
            depth: record.depth,
            role: plan.role,
            kind_name: plan.kind_name.clone(),
            permissions: Arc::new(plan.permissions.clone()),
            rules: Arc::new(plan.rules.clone()),
            workspace: workspace.clone(),
            worktree: req.worktree.clone(),
            tool_names: std::sync::OnceLock::new(),
            inbox,
            progress,
            board: self.board().clone(),
            budgets,
            provider_name,
            model_id,
            model,
            slot: Mutex::new(None),
            last_request: Mutex::new(None),
        });
        let toolbox = build_toolbox(self, &ctx);
        // Live in this session again: its events reach the session's stream (a
        // UI's agent tree, its approval prompts) as a new run's would.
        self.recorder().bus().reopened(
            &id,
            crate::events::RunMeta {
                parent_id: record.parent_id.as_ref().map(|p| p.as_str().to_string()),
                root_id: record.root_id.as_str().to_string(),
                role: if is_child {
                    plan.role.as_str().to_string()
                } else {
                    "parent".into()
                },
                agent_type: plan.kind_name.clone(),
                model: ctx.model_id.clone(),
            },
            || crate::events::RunEventKind::Spawned {
                name: ctx.name.clone(),
                agent_type: plan.kind_name.clone(),
                objective: record.objective.clone(),
            },
        );
        if is_child {
            match self.board().acquire_slot(&cancel).await {
                Some(p) => *ctx.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(p),
                None => {
                    let result = ChildResult::settled(
                        ctx.who(plan.warnings.clone()),
                        Settled::Cancelled { reason: None },
                        self.board().cancel_reason(&id),
                    );
                    self.recorder().finish(&result).await;
                    self.board().set_status(&id, result.status);
                    let _ = result_tx.send(Some(Box::new(result.clone())));
                    return Err(ResumeError::Spawn(SpawnError::Closed));
                }
            }
        }
        ctx.budgets.start_after(wall_time_spent(&req.events));
        let env = self.env();
        let spec = AgentSpec {
            run_id: id.clone(),
            system: plan.system.as_str().into(),
            model: ctx.model.clone(),
            model_id: ctx.model_id.clone(),
            sampling: env.sampling.clone(),
            tool_choice: if is_child {
                env.settings.child_tool_choice(&env.tool_choice)
            } else {
                env.tool_choice.clone()
            },
            toolbox,
            workspace: workspace.clone(),
            max_turns: plan.max_turns,
            offered_tools: None,
            tool_concurrency: env.tool_concurrency,
        };
        if req.task_unrecorded {
            if let Some(task) = req.messages.first() {
                super::hooks::record_message(self, &ctx, task);
            }
        }
        let hooks = hooks_for(self, &ctx, req.observer.clone());
        let mut outcome = agent::run_after(&spec, req.messages, spent, &hooks, &cancel).await;
        let parsed = if is_child {
            report::enforce(self, &ctx, &spec, &hooks, &mut outcome, &cancel).await
        } else {
            None
        };
        drop(ctx.slot.lock().unwrap_or_else(|p| p.into_inner()).take());
        let how = Settled::Ran {
            outcome: &outcome,
            max_turns: plan.max_turns,
        };
        let reason = if is_child {
            self.board().cancel_reason(&id)
        } else {
            self.board().root_reason(&id)
        };
        let mut result = ChildResult::settled(ctx.who(plan.warnings.clone()), how, reason);
        result.report = parsed;
        if let Some(tree) = ctx.worktree.clone() {
            result.worktree = Some(super::drive::settle_worktree(self, &id, &ctx.name, tree).await);
        }
        self.recorder().finish(&result).await;
        if is_child {
            self.board().set_status(&id, result.status);
        }
        let _ = result_tx.send(Some(Box::new(result.clone())));
        Ok((id, outcome, is_child.then_some(result)))
    }

    /// The resumed run's grant, prompt and limits, re-derived down its lineage.
    fn plan_resume(
        &self,
        req: &ResumeRequest,
        record: &RunRecord,
        parent: &RunCtx,
    ) -> Result<Plan, ResumeError> {
        let env = self.env();
        let id = record.id.as_str().to_string();
        // What it ran with: today's grant is narrowed to it below.
        let recorded = match RecordedGrant::from_events(&req.events) {
            None => return Err(ResumeError::NoRecordedGrant { id }),
            Some(Err(detail)) => return Err(ResumeError::Grant { id, detail }),
            Some(Ok(g)) => g,
        };
        // The rules it ran under that the resumed run would not get: kept.
        let keep_rules = |run_rules: crate::tool::RuleSet| {
            let mut today = self
                .call_gate()
                .map(|g| g.session_rules())
                .unwrap_or_default();
            today.extend(&run_rules);
            let mut rules = run_rules;
            let missing = recorded
                .missing_rules(&today)
                .map_err(|detail| ResumeError::Grant {
                    id: id.clone(),
                    detail,
                })?;
            rules.extend(&missing);
            Ok::<_, ResumeError>(rules)
        };
        if record.parent_id.is_none() {
            return Ok(Plan {
                role: Role::General,
                kind_name: "parent".into(),
                permissions: recorded.narrow(&env.root_permissions()),
                system: with_project_instructions(
                    root_system_prompt(env.settings.enabled),
                    &env.project_instructions,
                ),
                max_turns: req.root_max_turns,
                limits: RunLimits::default(),
                route: None,
                warnings: Vec::new(),
                rules: keep_rules(crate::tool::RuleSet::new())?,
            });
        }
        let parent_tools = parent.tool_names();
        let mut permissions = env.root_permissions();
        let mut last = None;
        let mut rules = crate::tool::RuleSet::new();
        for run in req.lineage.iter().filter(|r| r.parent_id.is_some()) {
            let agent_type = run
                .agent_type
                .clone()
                .or_else(|| run.role.clone())
                .unwrap_or_else(|| "general".into());
            let kind =
                env.catalog
                    .resolve(&agent_type)
                    .map_err(|e| ResumeError::DefinitionGone {
                        id: id.clone(),
                        agent_type: agent_type.clone(),
                        detail: e.to_string(),
                    })?;
            let granted = grant::grant_for(
                &SpawnSpec {
                    kind: &kind,
                    parent: &permissions,
                    parent_tools,
                    allowed_tools: None,
                    model: None,
                    fork_context: None,
                    read_only_shell_available: env.read_only_shell,
                    mcp_read_only: &env.mcp.read_only(),
                },
                &env.settings,
                &env.quick_models,
                (&env.main_provider, &env.main_model_id),
            )
            .map_err(|e| ResumeError::Grant {
                id: id.clone(),
                detail: e.to_string(),
            })?;
            permissions = granted.permissions.clone();
            if let Some(d) = kind.definition() {
                rules.extend(&d.rule_set());
            }
            last = Some((kind, granted));
        }
        let Some((kind, granted)) = last else {
            return Err(ResumeError::Grant {
                id,
                detail: "its lineage as given does not include it".into(),
            });
        };
        Ok(Plan {
            role: kind.role(),
            kind_name: kind.name().to_string(),
            permissions: recorded.narrow(&permissions),
            system: with_project_instructions(
                child_instructions(&granted.system_prompt),
                &env.project_instructions,
            ),
            max_turns: granted.max_turns,
            limits: RunLimits {
                tokens: granted.token_budget,
                cost_usd: granted.cost_budget_usd,
                wall_time: Some(granted.wall_time),
            },
            route: Some(granted.route),
            warnings: granted.adjustments,
            rules: keep_rules(rules)?,
        })
    }
}

/// How long the run ran before: from each `started` or `resumed` to the end event
/// that followed it.
fn wall_time_spent(events: &[EventRecord]) -> Duration {
    let mut total = Duration::ZERO;
    let mut since = None;
    for e in events {
        match e.kind {
            EventKind::Started | EventKind::Resumed => since = Some(e.at),
            EventKind::Completed
            | EventKind::Failed
            | EventKind::Cancelled
            | EventKind::Interrupted => {
                if let Some(start) = since.take() {
                    total += (e.at - start).to_std().unwrap_or_default();
                }
            }
            _ => {}
        }
    }
    total
}
