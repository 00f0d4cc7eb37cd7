//! Configuration of the sub-agent layer: the `[subagents]` and `[memory]` tables and
//! the top-level `[models.<alias>]` quick models, as they appear in `config.toml`, and
//! their validated, resolved form.
//!
//! The file structs ([`SubagentsConfig`], [`MemoryConfig`], [`QuickModelConfig`]) hold
//! only what a file said (every field optional, unknown keys rejected), so layers can
//! be merged ([`SubagentsConfig::merged`]: the later layer wins field by field).
//! [`SubagentsConfig::resolve`] applies defaults, range checks and clamps and returns
//! [`SubagentSettings`], or a [`ConfigError`] naming the key and the problem.
//!
//! | key | default | rule |
//! |---|---|---|
//! | `enabled` | true | `false` removes the delegation tools |
//! | `max_concurrent` | 10 | 1..=1024, else error |
//! | `launch_concurrency` | = max_concurrent | 1..=max_concurrent, else error |
//! | `max_depth` | 3 | 1..=8, else error |
//! | `max_total` | 100 | ≥ 1, else error |
//! | `max_turns` | per role (20 read-only, 50 others) | 1..=1000, else error |
//! | `wall_time_secs` | 1800 | 1..=86400, else error |
//! | `token_budget`, `tree_token_budget` | none | ≥ 1, else error |
//! | `cost_budget_usd`, `tree_cost_budget_usd` | none | USD > 0, else error; models need `[pricing]` |
//! | `api_timeout_secs` | 120 | 0 → 120; clamped to 1..=1800 |
//! | `heartbeat_timeout_secs` | 300 | clamped to 30..=3600, then raised to ≥ api_timeout_secs + 30 |
//! | `context_cap_bytes` | 4096 | 256..=1048576, else error |
//! | `*_model`, `models.*`, `subagent_model`, `subagent_provider` | none | non-empty |
//! | `tool_choice`, `first_tool_choice` | the session's | auto, required, none or a tool name; children only |
//! | `isolation` | none | none or worktree; writers get their own git worktree; a later layer cannot turn `worktree` off |
//! | `worktree_base` | the parent's HEAD | a branch, tag or commit id such worktrees branch from ([`super::worktree::check_base`]) |
//! | `placement` | local | local or fleet; fleet enqueues children for `brood worker`s (needs a PostgreSQL ledger) |
//! | `fleet_repository` | the repository's path | a URL (https, ssh, git), a remote's name or an absolute path fleet children's workers fetch from and push to ([`super::fleet_repo`]) |
//!
//! Clamps are not errors, but each one is written to [`SubagentSettings::adjustments`]
//! so the runtime can show it.

use super::worktree::{check_base, Isolation};
use crate::agent::ToolChoicePolicy;
use crate::model::ToolChoice;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

pub use super::config_error::ConfigError;
pub use super::quick_models::{QuickModelConfig, QuickModels};

/// The `[subagents]` table as written in one config file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubagentsConfig {
    /// `false` removes the delegation tools.
    pub enabled: Option<bool>,
    /// Running children at once (1..=1024).
    pub max_concurrent: Option<u64>,
    /// Children started at once; the rest wait in `queued`.
    pub launch_concurrency: Option<u64>,
    /// How deep the tree may grow (1..=8).
    pub max_depth: Option<u64>,
    /// Spawns per session.
    pub max_total: Option<u64>,
    /// Turns per child (the role's default when unset).
    pub max_turns: Option<u64>,
    /// Seconds one child may run.
    pub wall_time_secs: Option<u64>,
    /// Tokens (input + output) one child may use.
    pub token_budget: Option<u64>,
    /// Tokens the whole tree (the parent and every descendant) may use.
    pub tree_token_budget: Option<u64>,
    /// USD per child / per tree (needs `[pricing]` for the models used).
    pub cost_budget_usd: Option<f64>,
    /// USD the whole tree may spend (needs `[pricing]`).
    pub tree_cost_budget_usd: Option<f64>,
    /// The model-step bound children's heartbeat is measured against (0 = 120).
    pub api_timeout_secs: Option<u64>,
    /// Seconds without model progress before a child is cancelled.
    pub heartbeat_timeout_secs: Option<u64>,
    /// How many bytes of a child's result enter the parent's context.
    pub context_cap_bytes: Option<u64>,
    /// Model for children when no role key or definition names one.
    pub default_model: Option<String>,
    /// Model for `general`, `implementer` and `verifier` children.
    pub worker_model: Option<String>,
    /// Model for `explore` children.
    pub explorer_model: Option<String>,
    /// Model for `plan` children.
    pub awaiter_model: Option<String>,
    /// Model for `review` children.
    pub review_model: Option<String>,
    /// Model for `custom` children.
    pub custom_model: Option<String>,
    /// Role, alias or definition name → model (keys case-insensitive).
    pub models: Option<BTreeMap<String, String>>,
    /// Another tool's model name in an agent file (`sonnet`, `haiku`…) → the model
    /// to use (keys case-insensitive).
    pub model_aliases: Option<BTreeMap<String, String>>,
    /// Model (or quick-model name) for children when nothing more specific applies.
    pub subagent_model: Option<String>,
    /// Provider for children when nothing more specific applies.
    pub subagent_provider: Option<String>,
    /// Children's `tool_choice` for every step (after the first when
    /// `first_tool_choice` applies), instead of the session's.
    pub tool_choice: Option<String>,
    /// Children's `tool_choice` for their first step, instead of the session's
    /// (e.g. force `read_file` on a small local model while the parent runs free).
    pub first_tool_choice: Option<String>,
    /// `worktree`: every writer child runs in its own git worktree (see
    /// [`super::worktree`]); `none` (default): in the workspace.
    pub isolation: Option<String>,
    /// What isolated children's worktrees branch from (default: the `HEAD` of the
    /// workspace they are opened from).
    pub worktree_base: Option<String>,
    /// `fleet`: children are enqueued in the PostgreSQL ledger for `brood worker`s
    /// (docs/FLEET.md); `local` (default): they run in this process.
    pub placement: Option<String>,
    /// The repository fleet children name (docs/FLEET.md "Repositories"): a URL
    /// workers fetch from and push their branches to, a remote's name (its URL),
    /// or a path; default: the path of the workspace's repository.
    pub fleet_repository: Option<String>,
}

/// Where children run (`[subagents] placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// In this process (the default).
    #[default]
    Local,
    /// Enqueued in the PostgreSQL ledger and run by `brood worker`s (docs/FLEET.md).
    Fleet,
}

/// The `[memory]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// `true` turns on memory files and the memory tools (default off).
    pub enabled: Option<bool>,
}

/// Model overrides from `[subagents]`, validated; map keys lowercased.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModelOverrides {
    pub(crate) default_model: Option<String>,
    pub(crate) worker_model: Option<String>,
    pub(crate) explorer_model: Option<String>,
    pub(crate) awaiter_model: Option<String>,
    pub(crate) review_model: Option<String>,
    pub(crate) custom_model: Option<String>,
    /// `[subagents.models]` with lowercase keys.
    pub map: BTreeMap<String, String>,
    /// `[subagents.model_aliases]` with lowercase keys.
    pub aliases: BTreeMap<String, String>,
    pub(crate) subagent_model: Option<String>,
    pub(crate) subagent_provider: Option<String>,
}

/// `[subagents]` after defaults, checks and clamps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubagentSettings {
    /// Whether children can be opened at all.
    pub enabled: bool,
    /// Running children at once.
    pub max_concurrent: usize,
    /// Children started at once; the rest wait in `queued`.
    pub launch_concurrency: usize,
    /// How deep the tree may grow.
    pub max_depth: u32,
    /// Spawns per session.
    pub max_total: u64,
    /// Overrides the per-role default when set.
    pub max_turns: Option<u32>,
    /// How long one child may run.
    pub wall_time: Duration,
    /// Tokens one child may use, if bounded.
    pub token_budget: Option<u64>,
    /// Tokens the whole tree may use, if bounded.
    pub tree_token_budget: Option<u64>,
    /// USD per child / per tree (needs `[pricing]` for the models used).
    pub cost_budget_usd: Option<f64>,
    /// USD the whole tree may spend, if bounded.
    pub tree_cost_budget_usd: Option<f64>,
    /// The model-step bound children's heartbeat is measured against.
    pub api_timeout: Duration,
    /// No model progress for this long cancels a child.
    pub heartbeat_timeout: Duration,
    /// How many bytes of a child's result enter the parent's context.
    pub context_cap_bytes: usize,
    /// Which model each role, alias or definition runs on.
    pub models: ModelOverrides,
    /// Children's tool choice for every step, over the session's (`None`: inherit).
    pub tool_choice: Option<ToolChoice>,
    /// Children's tool choice for their first step, over the session's.
    pub first_tool_choice: Option<ToolChoice>,
    /// Whether writer children run in their own git worktree.
    pub isolation: Isolation,
    /// What isolated children's worktrees branch from (`None`: the parent's `HEAD`).
    pub worktree_base: Option<String>,
    /// Whether children run in this process or are enqueued for the fleet.
    pub placement: Placement,
    /// The repository fleet children name, as configured (checked): `None` is the
    /// path of the workspace's repository.
    pub fleet_repository: Option<String>,
    /// Values that were clamped, in words (e.g. for a startup notice).
    pub adjustments: Vec<String>,
}

impl SubagentSettings {
    /// A child's tool-choice policy: each of `[subagents] first_tool_choice` and
    /// `tool_choice` that is set, else the session's value for that step.
    pub fn child_tool_choice(&self, session: &ToolChoicePolicy) -> ToolChoicePolicy {
        ToolChoicePolicy {
            first: self
                .first_tool_choice
                .clone()
                .or_else(|| session.first.clone()),
            rest: self.tool_choice.clone().or_else(|| session.rest.clone()),
        }
    }
}

impl Default for SubagentSettings {
    /// The settings of an empty `[subagents]` table (the same as resolving it; a
    /// unit test holds the two together).
    fn default() -> Self {
        SubagentSettings {
            enabled: true,
            max_concurrent: DEFAULT_MAX_CONCURRENT as usize,
            launch_concurrency: DEFAULT_MAX_CONCURRENT as usize,
            max_depth: DEFAULT_MAX_DEPTH as u32,
            max_total: DEFAULT_MAX_TOTAL,
            max_turns: None,
            wall_time: Duration::from_secs(DEFAULT_WALL_TIME_SECS),
            token_budget: None,
            tree_token_budget: None,
            cost_budget_usd: None,
            tree_cost_budget_usd: None,
            api_timeout: Duration::from_secs(DEFAULT_API_TIMEOUT_SECS),
            heartbeat_timeout: Duration::from_secs(DEFAULT_HEARTBEAT_SECS),
            context_cap_bytes: DEFAULT_CONTEXT_CAP as usize,
            models: ModelOverrides::default(),
            tool_choice: None,
            first_tool_choice: None,
            isolation: Isolation::None,
            worktree_base: None,
            placement: Placement::Local,
            fleet_repository: None,
            adjustments: Vec::new(),
        }
    }
}

pub(crate) const DEFAULT_MAX_CONCURRENT: u64 = 10;
pub(crate) const MAX_CONCURRENT_LIMIT: u64 = 1024;
pub(crate) const DEFAULT_MAX_DEPTH: u64 = 3;
pub(crate) const MAX_DEPTH_LIMIT: u64 = 8;
pub(crate) const DEFAULT_MAX_TOTAL: u64 = 100;
pub(crate) const MAX_TURNS_LIMIT: u64 = 1000;
pub(crate) const DEFAULT_WALL_TIME_SECS: u64 = 1800;
pub(crate) const WALL_TIME_LIMIT_SECS: u64 = 86_400;
pub(crate) const DEFAULT_API_TIMEOUT_SECS: u64 = 120;
pub(crate) const API_TIMEOUT_RANGE: (u64, u64) = (1, 1800);
pub(crate) const DEFAULT_HEARTBEAT_SECS: u64 = 300;
pub(crate) const HEARTBEAT_RANGE: (u64, u64) = (30, 3600);
/// The heartbeat is kept at least this much above the API timeout.
pub const HEARTBEAT_MARGIN_SECS: u64 = 30;
pub(crate) const DEFAULT_CONTEXT_CAP: u64 = 4096;
pub(crate) const CONTEXT_CAP_RANGE: (u64, u64) = (256, 1_048_576);

fn in_range(key: &str, v: u64, lo: u64, hi: u64, hint: &str) -> Result<u64, ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(ConfigError::new(
            format!("subagents.{key}"),
            format!("{v} is out of range; use a value from {lo} to {hi}{hint}"),
        ))
    }
}

fn model_value(key: &str, v: &Option<String>) -> Result<Option<String>, ConfigError> {
    match v {
        None => Ok(None),
        Some(s) if s.trim().is_empty() => Err(ConfigError::new(
            format!("subagents.{key}"),
            "must not be empty; remove the key to use the default",
        )),
        Some(s) => Ok(Some(s.trim().to_string())),
    }
}

fn tool_choice_value(key: &str, v: &Option<String>) -> Result<Option<ToolChoice>, ConfigError> {
    match v {
        None => Ok(None),
        Some(s) if s.trim().is_empty() => Err(ConfigError::new(
            format!("subagents.{key}"),
            "must not be empty; use auto, required, none or a tool name, or remove the key \
             to use the session's",
        )),
        Some(s) => Ok(Some(ToolChoice::parse(s))),
    }
}

impl SubagentsConfig {
    /// `self` overridden by `over`: every field `over` sets wins; the `models` maps
    /// are merged key by key (case-insensitively), `over` winning.
    pub fn merged(&self, over: &SubagentsConfig) -> SubagentsConfig {
        fn pick<T: Clone>(a: &Option<T>, b: &Option<T>) -> Option<T> {
            b.clone().or_else(|| a.clone())
        }
        fn merge_map(
            a: &Option<BTreeMap<String, String>>,
            b: &Option<BTreeMap<String, String>>,
        ) -> Option<BTreeMap<String, String>> {
            match (a, b) {
                (None, None) => None,
                (a, b) => {
                    let mut m: BTreeMap<String, String> = a.clone().unwrap_or_default();
                    for (k, v) in b.iter().flatten() {
                        let lower = k.to_ascii_lowercase();
                        m.retain(|old, _| old.to_ascii_lowercase() != lower);
                        m.insert(k.clone(), v.clone());
                    }
                    Some(m)
                }
            }
        }
        let models = merge_map(&self.models, &over.models);
        let model_aliases = merge_map(&self.model_aliases, &over.model_aliases);
        SubagentsConfig {
            enabled: pick(&self.enabled, &over.enabled),
            max_concurrent: pick(&self.max_concurrent, &over.max_concurrent),
            launch_concurrency: pick(&self.launch_concurrency, &over.launch_concurrency),
            max_depth: pick(&self.max_depth, &over.max_depth),
            max_total: pick(&self.max_total, &over.max_total),
            max_turns: pick(&self.max_turns, &over.max_turns),
            wall_time_secs: pick(&self.wall_time_secs, &over.wall_time_secs),
            token_budget: pick(&self.token_budget, &over.token_budget),
            tree_token_budget: pick(&self.tree_token_budget, &over.tree_token_budget),
            cost_budget_usd: pick(&self.cost_budget_usd, &over.cost_budget_usd),
            tree_cost_budget_usd: pick(&self.tree_cost_budget_usd, &over.tree_cost_budget_usd),
            api_timeout_secs: pick(&self.api_timeout_secs, &over.api_timeout_secs),
            heartbeat_timeout_secs: pick(
                &self.heartbeat_timeout_secs,
                &over.heartbeat_timeout_secs,
            ),
            context_cap_bytes: pick(&self.context_cap_bytes, &over.context_cap_bytes),
            default_model: pick(&self.default_model, &over.default_model),
            worker_model: pick(&self.worker_model, &over.worker_model),
            explorer_model: pick(&self.explorer_model, &over.explorer_model),
            awaiter_model: pick(&self.awaiter_model, &over.awaiter_model),
            review_model: pick(&self.review_model, &over.review_model),
            custom_model: pick(&self.custom_model, &over.custom_model),
            models,
            model_aliases,
            subagent_model: pick(&self.subagent_model, &over.subagent_model),
            subagent_provider: pick(&self.subagent_provider, &over.subagent_provider),
            tool_choice: pick(&self.tool_choice, &over.tool_choice),
            first_tool_choice: pick(&self.first_tool_choice, &over.first_tool_choice),
            // Isolation only tightens: a later layer cannot turn `worktree` off.
            isolation: match (&self.isolation, &over.isolation) {
                (Some(a), _) if a.trim().eq_ignore_ascii_case("worktree") => Some(a.clone()),
                (a, b) => pick(a, b),
            },
            worktree_base: pick(&self.worktree_base, &over.worktree_base),
            placement: pick(&self.placement, &over.placement),
            fleet_repository: pick(&self.fleet_repository, &over.fleet_repository),
        }
    }

    /// Check every value and apply defaults and clamps.
    pub fn resolve(&self) -> Result<SubagentSettings, ConfigError> {
        let mut adjustments = Vec::new();
        let max_concurrent = in_range(
            "max_concurrent",
            self.max_concurrent.unwrap_or(DEFAULT_MAX_CONCURRENT),
            1,
            MAX_CONCURRENT_LIMIT,
            "",
        )?;
        let launch_concurrency = in_range(
            "launch_concurrency",
            self.launch_concurrency.unwrap_or(max_concurrent),
            1,
            max_concurrent,
            " (it cannot exceed max_concurrent)",
        )?;
        let max_depth = in_range(
            "max_depth",
            self.max_depth.unwrap_or(DEFAULT_MAX_DEPTH),
            1,
            MAX_DEPTH_LIMIT,
            " (set `enabled = false` to turn sub-agents off)",
        )?;
        let max_total = in_range(
            "max_total",
            self.max_total.unwrap_or(DEFAULT_MAX_TOTAL),
            1,
            u64::MAX,
            "",
        )?;
        let max_turns = self
            .max_turns
            .map(|v| in_range("max_turns", v, 1, MAX_TURNS_LIMIT, ""))
            .transpose()?;
        let wall_time = in_range(
            "wall_time_secs",
            self.wall_time_secs.unwrap_or(DEFAULT_WALL_TIME_SECS),
            1,
            WALL_TIME_LIMIT_SECS,
            "",
        )?;
        let token_budget = self
            .token_budget
            .map(|v| {
                in_range(
                    "token_budget",
                    v,
                    1,
                    u64::MAX,
                    "; remove the key for no budget",
                )
            })
            .transpose()?;
        let tree_token_budget = self
            .tree_token_budget
            .map(|v| {
                in_range(
                    "tree_token_budget",
                    v,
                    1,
                    u64::MAX,
                    "; remove the key for no budget",
                )
            })
            .transpose()?;
        let cost_budget_usd = usd_budget("cost_budget_usd", self.cost_budget_usd)?;
        let tree_cost_budget_usd = usd_budget("tree_cost_budget_usd", self.tree_cost_budget_usd)?;

        let api_timeout = match self.api_timeout_secs {
            None | Some(0) => DEFAULT_API_TIMEOUT_SECS,
            Some(v) => clamp("api_timeout_secs", v, API_TIMEOUT_RANGE, &mut adjustments),
        };
        let heartbeat = clamp(
            "heartbeat_timeout_secs",
            self.heartbeat_timeout_secs
                .unwrap_or(DEFAULT_HEARTBEAT_SECS),
            HEARTBEAT_RANGE,
            &mut adjustments,
        );
        let heartbeat = if heartbeat < api_timeout + HEARTBEAT_MARGIN_SECS {
            let raised = api_timeout + HEARTBEAT_MARGIN_SECS;
            adjustments.push(format!(
                "subagents.heartbeat_timeout_secs raised from {heartbeat} to {raised} \
                 (at least api_timeout_secs + {HEARTBEAT_MARGIN_SECS})"
            ));
            raised
        } else {
            heartbeat
        };
        let context_cap = in_range(
            "context_cap_bytes",
            self.context_cap_bytes.unwrap_or(DEFAULT_CONTEXT_CAP),
            CONTEXT_CAP_RANGE.0,
            CONTEXT_CAP_RANGE.1,
            "",
        )?;

        let mut map: BTreeMap<String, String> = BTreeMap::new();
        let mut original: BTreeMap<String, &str> = BTreeMap::new();
        for (k, v) in self.models.iter().flatten() {
            let key = format!("models.{k}");
            let lower = k.trim().to_ascii_lowercase();
            if lower.is_empty() {
                return Err(ConfigError::new("subagents.models", "a key is empty"));
            }
            let Some(v) = model_value(&key, &Some(v.clone()))? else {
                continue;
            };
            if let Some(prev) = original.insert(lower.clone(), k) {
                return Err(ConfigError::new(
                    format!("subagents.{key}"),
                    format!("keys are case-insensitive and `subagents.models.{prev}` names the same agent type"),
                ));
            }
            map.insert(lower, v);
        }
        let mut aliases: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in self.model_aliases.iter().flatten() {
            let key = format!("model_aliases.{k}");
            let lower = k.trim().to_ascii_lowercase();
            if lower.is_empty() {
                return Err(ConfigError::new(
                    "subagents.model_aliases",
                    "a key is empty",
                ));
            }
            let Some(v) = model_value(&key, &Some(v.clone()))? else {
                continue;
            };
            if aliases.insert(lower, v).is_some() {
                return Err(ConfigError::new(
                    format!("subagents.{key}"),
                    "keys are case-insensitive and another key names the same model",
                ));
            }
        }
        let models = ModelOverrides {
            aliases,
            default_model: model_value("default_model", &self.default_model)?,
            worker_model: model_value("worker_model", &self.worker_model)?,
            explorer_model: model_value("explorer_model", &self.explorer_model)?,
            awaiter_model: model_value("awaiter_model", &self.awaiter_model)?,
            review_model: model_value("review_model", &self.review_model)?,
            custom_model: model_value("custom_model", &self.custom_model)?,
            map,
            subagent_model: model_value("subagent_model", &self.subagent_model)?,
            subagent_provider: model_value("subagent_provider", &self.subagent_provider)?,
        };

        Ok(SubagentSettings {
            enabled: self.enabled.unwrap_or(true),
            max_concurrent: max_concurrent as usize,
            launch_concurrency: launch_concurrency as usize,
            max_depth: max_depth as u32,
            max_total,
            max_turns: max_turns.map(|v| v as u32),
            wall_time: Duration::from_secs(wall_time),
            token_budget,
            tree_token_budget,
            cost_budget_usd,
            tree_cost_budget_usd,
            api_timeout: Duration::from_secs(api_timeout),
            heartbeat_timeout: Duration::from_secs(heartbeat),
            context_cap_bytes: context_cap as usize,
            models,
            tool_choice: tool_choice_value("tool_choice", &self.tool_choice)?,
            first_tool_choice: tool_choice_value("first_tool_choice", &self.first_tool_choice)?,
            isolation: match &self.isolation {
                None => Isolation::None,
                Some(v) => {
                    Isolation::parse(v).map_err(|p| ConfigError::new("subagents.isolation", p))?
                }
            },
            worktree_base: match &self.worktree_base {
                None => None,
                Some(v) => Some(
                    check_base(v).map_err(|p| ConfigError::new("subagents.worktree_base", p))?,
                ),
            },
            placement: match self.placement.as_deref().map(str::trim) {
                None | Some("local") => Placement::Local,
                Some("fleet") => Placement::Fleet,
                Some(other) => {
                    return Err(ConfigError::new(
                        "subagents.placement",
                        format!("{other:?} is not a placement: give \"local\" (children run in this process) or \"fleet\" (enqueued for `brood worker`s; needs a PostgreSQL ledger)"),
                    ))
                }
            },
            fleet_repository: match self.fleet_repository.as_deref().map(str::trim) {
                None => None,
                Some(v) => Some(
                    super::fleet_repo::check_configured(v)
                        .map_err(|p| ConfigError::new("subagents.fleet_repository", p))?,
                ),
            },
            adjustments,
        })
    }
}

/// A budget in USD: a finite number above 0 (and at most a billion).
fn usd_budget(key: &str, v: Option<f64>) -> Result<Option<f64>, ConfigError> {
    match v {
        Some(v) if !(v.is_finite() && v > 0.0 && v <= 1e9) => Err(ConfigError::new(
            format!("subagents.{key}"),
            format!(
                "{v} is not a budget: give USD above 0 (e.g. 0.50); remove the key for no budget"
            ),
        )),
        v => Ok(v),
    }
}

fn clamp(key: &str, v: u64, (lo, hi): (u64, u64), adjustments: &mut Vec<String>) -> u64 {
    let c = v.clamp(lo, hi);
    if c != v {
        adjustments.push(format!(
            "subagents.{key} = {v} clamped to {c} (accepted range {lo}..={hi})"
        ));
    }
    c
}

/// The environment variable that turns memory on or off, over the config file.
pub const MEMORY_ENV: &str = "BROOD_MEMORY";

/// Whether memory is on: `BROOD_MEMORY` (passed in by the caller, who reads the
/// environment) wins over `[memory] enabled`; the default is off.
/// Accepted env values: on/true/1/yes and off/false/0/no (any case); an empty value
/// counts as unset.
pub fn memory_enabled(cfg: &MemoryConfig, env_value: Option<&str>) -> Result<bool, ConfigError> {
    if let Some(raw) = env_value {
        match raw.trim().to_ascii_lowercase().as_str() {
            "" => {}
            "on" | "true" | "1" | "yes" => return Ok(true),
            "off" | "false" | "0" | "no" => return Ok(false),
            _ => {
                return Err(ConfigError::new(
                    MEMORY_ENV,
                    format!("'{raw}' is not a switch; use on or off"),
                ))
            }
        }
    }
    Ok(cfg.enabled.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let s = SubagentsConfig::default().resolve().unwrap();
        assert!(s.enabled);
        assert_eq!(s.max_concurrent, 10);
        assert_eq!(s.launch_concurrency, 10);
        assert_eq!(s.max_depth, 3);
        assert_eq!(s.max_total, 100);
        assert_eq!(s.max_turns, None);
        assert_eq!(s.wall_time, Duration::from_secs(1800));
        assert_eq!(s.api_timeout, Duration::from_secs(120));
        assert_eq!(s.heartbeat_timeout, Duration::from_secs(300));
        assert_eq!(s.context_cap_bytes, 4096);
        assert!(s.adjustments.is_empty());
        assert_eq!(SubagentSettings::default(), s);
    }

    #[test]
    fn launch_concurrency_follows_max_concurrent() {
        let c = SubagentsConfig {
            max_concurrent: Some(4),
            ..Default::default()
        };
        assert_eq!(c.resolve().unwrap().launch_concurrency, 4);
    }

    #[test]
    fn max_concurrent_reaches_1024_and_not_past_it() {
        let at = |n| SubagentsConfig {
            max_concurrent: Some(n),
            ..Default::default()
        };
        let s = at(1024).resolve().unwrap();
        assert_eq!((s.max_concurrent, s.launch_concurrency), (1024, 1024));
        let e = at(1025).resolve().unwrap_err();
        assert_eq!(e.key, "subagents.max_concurrent");
        assert!(e.problem.contains("1024"), "{e}");
        assert!(at(0).resolve().is_err());
    }

    #[test]
    fn merge_later_layer_wins_and_maps_merge_case_insensitively() {
        let user = SubagentsConfig {
            max_depth: Some(2),
            worker_model: Some("a".into()),
            models: Some(
                [
                    ("Explore".to_string(), "x".to_string()),
                    ("plan".into(), "p".into()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        let ws = SubagentsConfig {
            worker_model: Some("b".into()),
            models: Some([("explore".to_string(), "y".to_string())].into()),
            ..Default::default()
        };
        let m = user.merged(&ws);
        assert_eq!(m.max_depth, Some(2));
        assert_eq!(m.worker_model.as_deref(), Some("b"));
        let s = m.resolve().unwrap();
        assert_eq!(s.models.map.get("explore").map(String::as_str), Some("y"));
        assert_eq!(s.models.map.get("plan").map(String::as_str), Some("p"));
    }

    #[test]
    fn children_tool_choice_overrides_the_session_key_by_key() {
        let session = ToolChoicePolicy {
            first: Some(ToolChoice::Named("grep".into())),
            rest: Some(ToolChoice::Auto),
        };
        assert_eq!(
            SubagentsConfig::default()
                .resolve()
                .unwrap()
                .child_tool_choice(&session),
            session
        );
        let c = SubagentsConfig {
            first_tool_choice: Some(" read_file ".into()),
            ..Default::default()
        };
        assert_eq!(
            c.resolve().unwrap().child_tool_choice(&session),
            ToolChoicePolicy {
                first: Some(ToolChoice::Named("read_file".into())),
                rest: Some(ToolChoice::Auto),
            }
        );
        let c = SubagentsConfig {
            tool_choice: Some("none".into()),
            ..Default::default()
        };
        let p = c
            .resolve()
            .unwrap()
            .child_tool_choice(&ToolChoicePolicy::default());
        assert_eq!((p.first, p.rest), (None, Some(ToolChoice::None)));
        let e = SubagentsConfig {
            first_tool_choice: Some("  ".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert_eq!(e.key, "subagents.first_tool_choice");
    }

    #[test]
    fn memory_switch() {
        let on = MemoryConfig {
            enabled: Some(true),
        };
        assert!(!memory_enabled(&MemoryConfig::default(), None).unwrap());
        assert!(memory_enabled(&on, None).unwrap());
        assert!(!memory_enabled(&on, Some("off")).unwrap());
        assert!(memory_enabled(&MemoryConfig::default(), Some("ON")).unwrap());
        assert!(memory_enabled(&on, Some("")).unwrap());
        let e = memory_enabled(&on, Some("maybe")).unwrap_err();
        assert_eq!(e.key, "BROOD_MEMORY");
    }
}
