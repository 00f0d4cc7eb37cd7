//! Sub-agents: roles, definitions, grants, the supervisor, model-facing tools,
//! fork, the output contract, model routing.
//!
//! A parent opens children through the model-facing tools ([`tools`]): `task`
//! (blocking fan-out, children belong to the parent's turn) and `agent_open`
//! (background, children belong to the session), then `agent_eval`,
//! `agent_close`, `agent_list`, `handle_read`. The [`Supervisor`] admits and runs
//! them under the session's limits; every lifecycle transition and every child's
//! transcript goes to the ledger.
//!
//! The pure logic:
//! - [`role`]: the built-in roles, their aliases, postures and stance prompts;
//! - [`definition`]: user agent definition files (brood's and Claude Code's format);
//! - [`catalog`]: where definitions are found (`.brood/agents`, `.claude/agents`, the
//!   user directory) and the [`AgentCatalog`] that resolves an `agent_type`;
//! - [`grant`]: a child's permissions and limits, only ever narrower than the parent's;
//! - [`contract`] and [`evidence`]: the SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS report,
//!   its parser, repair prompt, citation check and capped rendering;
//! - [`config`] and [`routing`]: the `[subagents]`, `[memory]` and `[models.*]`
//!   configuration and which provider/model a child runs on.
//!
//! The machinery:
//! - [`supervisor`]: the registry, running slots, the heartbeat;
//! - [`run`]: the [`Supervisor`] API (open, wait, cancel, the session's root run);
//! - `drive`: one run from spawn to its terminal record;
//! - [`inbox`]: completions and messages pushed into a run's next step;
//! - [`tally`]: the usage and cost of a run and of its tree (priced by
//!   [`crate::model::pricing`]);
//! - [`tools`]: the model-facing delegation tools; [`agent_types`]: the agent types
//!   they name (and the tool listing the rest); [`fork`]: forked context;
//! - [`host`]: an outside parent (an MCP host) calling those tools as a root run.

pub mod agent_types;
pub mod catalog;
pub mod config;
pub mod contract;
pub mod definition;
mod drive;
pub mod evidence;
pub mod fork;
pub mod front_matter;
mod gate;
pub mod grant;
pub mod host;
pub mod inbox;
mod record;
pub mod result;
pub mod role;
pub mod routing;
pub mod run;
pub mod supervisor;
pub mod tally;
pub mod tools;

pub use catalog::{AgentCatalog, AgentKind, Shadowed, Skipped, UnknownAgentType};
pub use config::{
    memory_enabled, ConfigError, MemoryConfig, ModelOverrides, QuickModelConfig, QuickModels,
    SubagentSettings, SubagentsConfig,
};
pub use contract::{ParsedResult, Section};
pub use definition::{AgentDefinition, DefinitionError, DefinitionSource, ModelChoice};
pub use drive::RunCtx;
pub use evidence::{Evidence, EvidenceCheck};
pub use grant::{child_permissions, grant_for, Grant, GrantError, GrantRequest, SpawnSpec};
pub use host::HostRun;
pub use result::ChildResult;
pub use role::{Role, UnknownRole};
pub use routing::{resolve_route, Route};
pub use run::{
    Opened, RootRequest, RouteBuilder, SpawnMode, SpawnRequest, Supervisor, SupervisorEnv,
    ToolFactory,
};
pub use supervisor::{Limits, LiveStatus, RunSnapshot};

use thiserror::Error;

/// Why a child could not be opened. Goes back to the model as the tool result,
/// so each says what to do instead.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum SpawnError {
    #[error("max_concurrent = {max_concurrent} children are already running or queued; wait for one with agent_eval, or close one with agent_close, then open again")]
    /// `max_concurrent` children are already running or queued.
    CapReached {
        /// The limit.
        max_concurrent: usize,
    },
    #[error(
        "max_depth = {max_depth} reached: this agent may not open sub-agents; do the work yourself"
    )]
    /// The parent is at `max_depth`.
    DepthLimit {
        /// The limit.
        max_depth: u32,
    },
    #[error("max_total = {max_total} sub-agents were already opened in this session; do the remaining work yourself")]
    /// The session already opened `max_total` children.
    TotalLimit {
        /// The limit.
        max_total: usize,
    },
    /// `agent_type` names no definition, role or alias (the accepted ones inside).
    #[error(transparent)]
    UnknownType(#[from] UnknownAgentType),
    /// The child's tool grant cannot be built (which tool, for whom, what is available).
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The model asked for is not one the provider serves.
    #[error("unknown model '{model}' for provider {provider}; it accepts: {}", accepted.join(", "))]
    UnknownModel {
        /// The model asked for.
        model: String,
        /// The provider asked.
        provider: String,
        /// The models it lists.
        accepted: Vec<String>,
    },
    /// The tree spent a budget (tokens or cost), or its cost cannot be known.
    #[error("{0}; no more sub-agents for this tree")]
    Budget(#[from] crate::agent::BudgetSpent),
    /// The ledger refused the spawn record.
    #[error("the ledger could not record the run: {0}")]
    Ledger(#[from] crate::ledger::LedgerError),
    /// The session is shutting down.
    #[error("the session is shutting down")]
    Closed,
}
