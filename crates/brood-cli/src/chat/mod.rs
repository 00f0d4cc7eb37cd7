//! `brood chat`: an interactive session with the parent agent. One [`Session`]
//! for the whole chat; each prompt is a root run continuing the parent's
//! conversation ([`Session::run_continuing`]); slash commands inspect and steer
//! it. On a terminal the full-screen UI ([`ui`]) runs; otherwise plain mode
//! ([`plain`]) reads lines and prints text, for scripts.

mod approve;
mod plain;
mod slash;
mod tree;
mod ui;

use crate::SessionArgs;
use brood::model::Message;
use brood::runtime::config::{Config, Source};
use brood::runtime::session::{Session, SessionOptions};
use brood::runtime::Checked;
use brood::subagent::{resolve_route, AgentKind, Role};
use brood::Approver;
use clap::Args;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use tree::AgentTree;

#[derive(Args, Default)]
pub struct ChatArgs {
    #[command(flatten)]
    pub session: SessionArgs,
    /// Print every live event and each prompt's report as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Continue a recorded chat: SESSION's conversation (default: the most recent
    /// earlier session of this workspace); its unfinished runs are listed for /resume.
    #[arg(long, value_name = "SESSION", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
}

/// Start a chat: the full-screen UI when stdin and stdout are terminals (and no
/// `--json`), else plain mode, line by line on stdin.
pub async fn run(args: ChatArgs) -> u8 {
    if !args.json && std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        return ui::run(&args.session, args.resume.as_deref()).await;
    }
    // Plain mode on a terminal asks there about `ask` calls; reading prompts
    // from a pipe, nobody could answer, so they are refused naming the rule.
    let (approver, asks) = if std::io::stdin().is_terminal() {
        let (approver, asks) = approve::channel();
        (Some(Arc::new(approver) as Arc<dyn Approver>), Some(asks))
    } else {
        (None, None)
    };
    let mut chat = match Chat::open(&args.session, approver).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(session) = &args.resume {
        if let Err(e) = chat.resume_session(session).await {
            errln!("brood: {e}");
            chat.close("the chat could not resume").await;
            return 1;
        }
    }
    plain::run(chat, args.json, asks).await
}

/// Everything a chat keeps between prompts.
pub struct Chat {
    /// Shared with the turn in flight (the UI runs it on its own task).
    session: Arc<Session>,
    /// Who answers `ask` calls (the UI's prompt); `None`: they are refused.
    approver: Option<Arc<dyn Approver>>,
    /// Notes and warnings from opening the session, shown once at the start.
    notes: Vec<String>,
    config: Config,
    checked: Checked,
    env: BTreeMap<String, String>,
    ws: PathBuf,
    /// The parent's conversation so far.
    history: Vec<Message>,
    /// `/model-subagent` choices: canonical role → model.
    subagent_models: BTreeMap<String, String>,
    /// Whether `/model` set the parent's model.
    model_from_chat: bool,
    tree: AgentTree,
    /// What the model answered to every prompt of this chat.
    usage: ChatUsage,
}

impl Chat {
    async fn open(args: &SessionArgs, approver: Option<Arc<dyn Approver>>) -> Result<Chat, u8> {
        let ws = crate::workspace_dir(args.workspace.clone())?;
        let (config, env, checked) =
            crate::load_config(&ws, &args.provider, args.max_turns, args.trust)?;
        let mut notes: Vec<String> = checked
            .adjustments
            .iter()
            .map(|a| format!("note: {a}"))
            .collect();
        notes.extend(config.permission_notes.iter().map(|n| format!("note: {n}")));
        let session = open_session(&ws, &config, &env, approver.clone()).await?;
        notes.extend(
            session
                .startup_warnings()
                .into_iter()
                .map(|w| format!("warning: {w}")),
        );
        Ok(Chat {
            session: Arc::new(session),
            approver,
            notes,
            config,
            checked,
            env,
            ws,
            history: Vec::new(),
            subagent_models: BTreeMap::new(),
            model_from_chat: false,
            tree: AgentTree::default(),
            usage: ChatUsage::default(),
        })
    }

    /// Open the session again on the changed configuration (after `/model` or
    /// `/model-subagent`); the old one is closed once the new one is open (its
    /// background children are stopped and recorded). The conversation and the
    /// tree are kept.
    async fn reopen(&mut self, mut config: Config) -> Result<(), String> {
        let checked = config.check(&self.env).map_err(|e| e.to_string())?;
        // Rules added or removed with /permissions stay for the chat.
        config.permissions = self.session.rules();
        let mut opts = SessionOptions::new(self.ws.clone(), config.clone());
        // AGENTS.md files from the workspace root down to where the user is.
        opts.working_dir = std::env::current_dir().ok();
        opts.env = self.env.clone();
        opts.approver = self.approver.clone();
        // The new session first: if it cannot open, the chat goes on as it was.
        // Each session is its own boot of the ledger, so both may be open a moment.
        let fresh = Session::open(opts).await.map_err(|e| e.to_string())?;
        let old = std::mem::replace(&mut self.session, Arc::new(fresh));
        close_session(old).await;
        self.config = config;
        self.checked = checked;
        Ok(())
    }

    /// The main provider and model, as runs resolve them.
    fn main_model(&self) -> (String, String) {
        let model = brood::runtime::provider::main_endpoint(&self.config)
            .map(|e| e.model.0)
            .unwrap_or_else(|_| self.config.model.clone().unwrap_or_default());
        (self.config.provider.clone(), model)
    }

    /// `--resume [SESSION]`: take SESSION's conversation (empty: the latest
    /// earlier session's) as this chat's, and note its unfinished runs.
    async fn resume_session(&mut self, session: &str) -> Result<(), String> {
        let wanted = (!session.is_empty()).then_some(session);
        let conv = self
            .session
            .conversation(wanted)
            .await
            .map_err(|e| e.to_string())?;
        self.notes.push(format!(
            "resumed session {}: {} messages of conversation",
            conv.session_id,
            conv.history.len()
        ));
        for run in &conv.unfinished {
            self.notes.push(format!(
                "unfinished: {} {} ({}) — /resume {} continues it",
                run.id,
                run.name.as_deref().unwrap_or("run"),
                run.status,
                run.id
            ));
        }
        self.tree.restore(&conv.runs);
        self.history = conv.history;
        Ok(())
    }

    /// `/resume`: the runs of this workspace that can be resumed, newest first.
    async fn resumable(&self) -> Result<Vec<String>, String> {
        use brood::ledger::{ListFilter, RunStatus};
        let runs = self
            .session
            .ledger()
            .list_runs(ListFilter {
                include_archived: true,
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut lines: Vec<String> = runs
            .iter()
            .rev()
            .filter(|l| {
                matches!(
                    l.run.status,
                    RunStatus::Interrupted | RunStatus::Cancelled | RunStatus::Failed
                )
            })
            .take(20)
            .map(|l| {
                let objective: String = l.run.objective.chars().take(60).collect();
                format!(
                    "  {} {:<11} {:<12} {objective}",
                    l.run.id,
                    l.run.status.to_string(),
                    l.run.name.as_deref().unwrap_or("-")
                )
            })
            .collect();
        if lines.is_empty() {
            return Ok(vec!["no run of this workspace can be resumed".into()]);
        }
        lines.insert(0, "runs that can be resumed (/resume ID):".into());
        Ok(lines)
    }

    /// `/resume ID` in plain mode: continue the run in this chat's session until
    /// it ends; a root of this workspace's chats also becomes this chat's
    /// conversation. (The full-screen UI runs [`resume_in`] on its own task.)
    async fn resume_run(&mut self, id: &str) -> Result<Vec<String>, String> {
        let token = tokio_util::sync::CancellationToken::new();
        let resumed = resume_in(self.session.clone(), id.to_string(), token).await?;
        let mut out = self.resumed(&resumed);
        out.extend(resumed.report.final_text.lines().map(str::to_string));
        Ok(out)
    }

    /// Take a resumed run's end into the chat: its usage, and its conversation
    /// when it is a root; the lines that say how it ended.
    fn resumed(&mut self, resumed: &Resumed) -> Vec<String> {
        let report = &resumed.report;
        self.usage.add(&report.usage);
        if resumed.is_root && !report.messages.is_empty() {
            self.history = report.messages.clone();
        }
        let mut out = vec![format!(
            "resumed run {} ({} steps in all)",
            report.run_id, report.turns
        )];
        if let Some(e) = &report.error {
            out.push(format!("run {} ended: {e}", report.run_id));
        }
        out
    }

    /// The notes and warnings of opening the session (once).
    fn startup_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Leave: cancel what still runs (background children), record it, close.
    async fn close(self, reason: &str) {
        self.session.cancel_all(reason);
        close_session(self.session).await;
    }

    /// `/help`: every command.
    fn help(&self) -> Vec<String> {
        let mut out = vec!["commands:".to_string()];
        out.extend(
            slash::HELP
                .iter()
                .map(|(c, what)| format!("  {c:<28} {what}")),
        );
        out.push("anything else is a prompt for the parent agent".into());
        out
    }

    /// Run one slash command; its output lines.
    async fn command(&mut self, cmd: slash::Slash) -> Result<Vec<String>, String> {
        use slash::Slash;
        Ok(match cmd {
            Slash::Help => self.help(),
            Slash::Agents => {
                if self.tree.is_empty() {
                    vec!["no agents yet in this chat".into()]
                } else {
                    self.tree.lines()
                }
            }
            Slash::Model(None) => {
                let (p, m) = self.main_model();
                let from = if self.model_from_chat {
                    "/model in this chat".to_string()
                } else {
                    crate::config_show::origin(&self.config, &self.config.source_of("model"))
                };
                vec![format!("model: {m} on {p} ({from})")]
            }
            Slash::Model(Some(name)) => {
                let mut config = self.config.clone();
                config.model = Some(name.clone());
                self.reopen(config).await?;
                self.model_from_chat = true;
                vec![format!("model: the next prompts run on {name}")]
            }
            Slash::ModelSubagent { role, model } => {
                let role = Role::parse(&role).map_err(|_| {
                    let names: Vec<&str> =
                        Role::accepted_names().into_iter().map(|(n, _)| n).collect();
                    format!("unknown role {role:?} (accepted: {})", names.join(", "))
                })?;
                let mut config = self.config.clone();
                config
                    .subagents
                    .models
                    .get_or_insert_with(BTreeMap::new)
                    .insert(role.as_str().to_string(), model.clone());
                self.reopen(config).await?;
                self.subagent_models
                    .insert(role.as_str().to_string(), model.clone());
                vec![format!(
                    "{} children: the next ones run on {model}",
                    role.as_str()
                )]
            }
            Slash::ModelsSubagent => self.models_subagent(),
            Slash::Permissions(change) => self.permissions(change)?,
            Slash::Status => self.status(),
            Slash::Resume(None) => self.resumable().await?,
            Slash::Resume(Some(id)) => self.resume_run(&id).await?,
            Slash::Clear => {
                self.history.clear();
                self.tree.clear();
                vec!["new conversation (the ledger keeps the old one)".into()]
            }
            Slash::Quit => Vec::new(),
        })
    }

    /// `/permissions`: list the session's rules with their sources, or add or
    /// remove one for the rest of this chat.
    fn permissions(&mut self, change: Option<(String, String)>) -> Result<Vec<String>, String> {
        use brood::tool::RuleKind;
        if let Some((action, rule)) = change {
            if action == "remove" {
                return match self.session.remove_rule(&rule) {
                    0 => Err(format!(
                        "no rule is written {rule:?} (/permissions lists them as written)"
                    )),
                    n => Ok(vec![format!(
                        "removed {rule} for this session ({n} {})",
                        if n == 1 { "rule" } else { "rules" }
                    )]),
                };
            }
            let kind = RuleKind::parse(&action).ok_or_else(|| format!("unknown list {action}"))?;
            self.session
                .add_rule(kind, &rule)
                .map_err(|e| e.to_string())?;
            return Ok(vec![format!("added {action} {rule} for this session")]);
        }
        let mut out = vec![
            "permission rules (deny beats ask beats allow; agent files add their own):".to_string(),
        ];
        out.extend(crate::agents_check::rule_lines(
            &self.session.rules(),
            &self.config.permission_notes,
        ));
        Ok(out)
    }

    /// `/models-subagent`: each role's route and the row that chose it.
    fn models_subagent(&self) -> Vec<String> {
        let (provider, model) = self.main_model();
        let settings = &self.checked.settings;
        Role::ALL
            .iter()
            .map(|role| {
                let kind = AgentKind::Role {
                    role: *role,
                    name_used: role.as_str().to_string(),
                };
                let route = resolve_route(
                    &settings.models,
                    &self.checked.quick_models,
                    &kind,
                    None,
                    (&provider, &model),
                );
                let from = match route.source {
                    "subagents.models" if self.subagent_models.contains_key(role.as_str()) => {
                        "/model-subagent in this chat".to_string()
                    }
                    "main" => "the main model".to_string(),
                    key => {
                        let key = if key == "subagents.models" {
                            format!("subagents.models.{}", role.as_str())
                        } else {
                            key.to_string()
                        };
                        match self.config.source_of(&key) {
                            Source::Default => key,
                            s => format!("{key}, {}", crate::config_show::origin(&self.config, &s)),
                        }
                    }
                };
                format!(
                    "{:<12} {} on {} ({from})",
                    role.as_str(),
                    route.model,
                    route.provider
                )
            })
            .collect()
    }

    /// `/status`: what this chat runs on and may spend, what runs now.
    fn status(&self) -> Vec<String> {
        let s = &self.checked.settings;
        let (provider, model) = self.main_model();
        let (running, queued) = self.tree.counts();
        let opt = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |n| n.to_string());
        let usd = |v: Option<f64>| v.map_or_else(|| "none".to_string(), |n| format!("${n}"));
        let u = &self.usage;
        vec![
            format!("provider: {provider}, model: {model}"),
            format!(
                "limits: max_concurrent {}, max_depth {}, max_total {}, wall_time {}s",
                s.max_concurrent,
                s.max_depth,
                s.max_total,
                s.wall_time.as_secs()
            ),
            format!(
                "budgets: token_budget {}, tree_token_budget {}, cost_budget_usd {}, tree_cost_budget_usd {}",
                opt(s.token_budget),
                opt(s.tree_token_budget),
                usd(s.cost_budget_usd),
                usd(s.tree_cost_budget_usd)
            ),
            format!("children: {running} running, {queued} queued"),
            format!(
                "this chat: {} requests, {} input tokens, {} output tokens, cost {}",
                u.requests,
                u.input_tokens,
                u.output_tokens,
                u.cost_usd().map_or_else(|| "unknown".to_string(), |c| format!("${c:.4}"))
            ),
            format!(
                "agents so far: {} (every run of this chat, live)",
                self.tree.total().text()
            ),
            format!("ledger: {}", self.session.ledger().db_path().display()),
        ]
    }
}

/// A run `/resume` continued, at its end.
pub struct Resumed {
    pub report: brood::RunReport,
    /// It is a root (a chat's turn): its conversation becomes the chat's.
    pub is_root: bool,
}

/// `/resume ID`: continue run ID in `session` until it ends or `token` is
/// cancelled. Takes the session, not the chat, so the UI can run it on a task
/// of its own like a turn (the tree, the keys and the commands stay live).
pub async fn resume_in(
    session: Arc<Session>,
    id: String,
    token: tokio_util::sync::CancellationToken,
) -> Result<Resumed, String> {
    let report = session
        .resume(&id, None, token)
        .await
        .map_err(|e| e.to_string())?;
    let run = brood::ledger::RunId::from_string(&report.run_id);
    let is_root = session
        .ledger()
        .get_run(&run)
        .await
        .is_ok_and(|d| d.run.parent_id.is_none());
    Ok(Resumed { report, is_root })
}

/// What the model answered to a chat's prompts (their whole trees), summed.
#[derive(Default)]
pub struct ChatUsage {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    cost: f64,
    /// Some answer had no price: the cost is unknown, never guessed.
    unpriced: bool,
}

impl ChatUsage {
    fn add(&mut self, t: &brood::subagent::tally::Tally) {
        self.requests += t.requests;
        self.input_tokens += t.usage.input_tokens;
        self.output_tokens += t.usage.output_tokens;
        match t.cost_usd {
            Some(c) => self.cost += c,
            None if t.requests > 0 => self.unpriced = true,
            None => {}
        }
    }

    fn cost_usd(&self) -> Option<f64> {
        (!self.unpriced && self.requests > 0).then_some(self.cost)
    }
}

/// Close a session the chat no longer uses: wait for its runs' final records.
/// Nothing else holds it then (a turn in flight is awaited before); if something
/// still did, its runs are cancelled and recorded when the last holder lets go.
async fn close_session(session: Arc<Session>) {
    match Arc::try_unwrap(session) {
        Ok(s) => s.close().await,
        // Another task still holds it: cancel with the chat's reason, then wait
        // for every run's final record all the same (returning at once let the
        // process exit before a child's `cancelled` was written).
        Err(shared) => {
            shared.cancel_all("the chat closed this session");
            shared.shutdown().await;
        }
    }
}

async fn open_session(
    ws: &std::path::Path,
    config: &Config,
    env: &BTreeMap<String, String>,
    approver: Option<Arc<dyn Approver>>,
) -> Result<Session, u8> {
    let mut opts = SessionOptions::new(ws.to_path_buf(), config.clone());
    // AGENTS.md files from the workspace root down to where the user is.
    opts.working_dir = std::env::current_dir().ok();
    opts.env = env.clone();
    opts.approver = approver;
    Session::open(opts).await.map_err(|e| {
        errln!("brood: {e}");
        crate::exit::of_error(&e)
    })
}
