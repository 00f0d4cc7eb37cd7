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
//! The machinery, in the order data flows (each imports only those before it):
//! - `board`: the registry of runs, their running slots, the heartbeat's
//!   progress clocks; `budgets`: a run's and its tree's token, cost and time limits;
//! - `ctx`: one run while it runs (`RunCtx`); [`result`]: what a settled run hands
//!   back, built in one place ([`ChildResult`]); `record`: what the ledger and the
//!   live bus hear about runs;
//! - [`Supervisor`] (`supervisor`): one per session; what every run shares, and its
//!   API (wait, cancel, message, look up, shut down);
//! - `spawn`: what opening a run takes and gives, and the `Spawner` the delegation
//!   [`tools`] open children through; [`agent_types`]: the agent types they name;
//! - `prompt`, `hooks`, `report`: a run's prompts, its loop's wiring to the
//!   ledger, budgets and inbox, and the output contract enforced on its answer;
//! - `drive` (a child) and `root` (the session's top-level run): one run from its
//!   plan to its terminal record;
//! - `open`: admission, grant, route and plan — then a driver; [`host`]: an outside
//!   parent (an MCP host) calling the delegation tools as a root run.
//!
//! [`inbox`] (completions and messages pushed into a run's next step), `gate`
//! (a child waits for its spawn record), [`tally`] (usage and cost, priced by
//! [`crate::model::pricing`]) and [`fork`] (forked context) serve them.

pub mod agent_types;
mod board;
mod budgets;
pub mod catalog;
pub mod config;
mod config_error;
pub mod contract;
mod ctx;
pub mod definition;
mod drive;
mod error;
pub mod evidence;
mod fleet;
pub mod fleet_repo;
mod fleet_wait;
pub mod fork;
pub mod front_matter;
mod gate;
pub mod git;
pub mod grant;
pub(crate) mod granted;
mod hooks;
pub mod host;
pub mod inbox;
mod last_made;
mod open;
mod prompt;
mod quick_models;
pub mod rebuild;
mod record;
mod report;
pub mod result;
mod resume;
pub mod role;
mod root;
pub mod routing;
mod spawn;
mod supervisor;
pub mod tally;
mod tool_list;
pub mod tools;
pub mod worktree;
pub mod worktrees;

pub use board::{Limits, LiveStatus, RunSnapshot};
pub use catalog::{AgentCatalog, AgentKind, Shadowed, Skipped, UnknownAgentType};
pub use config::{
    memory_enabled, ConfigError, MemoryConfig, ModelOverrides, Placement, QuickModelConfig,
    QuickModels, SubagentSettings, SubagentsConfig,
};
pub use contract::{ParsedResult, Section};
pub use definition::{AgentDefinition, DefinitionError, DefinitionSource, ModelChoice};
pub use error::SpawnError;
pub use evidence::{Evidence, EvidenceCheck};
pub use grant::{child_permissions, grant_for, Grant, GrantError, GrantRequest, SpawnSpec};
pub use host::HostRun;
pub use result::ChildResult;
pub use resume::{ResumeError, ResumeRequest};
pub use role::{Role, UnknownRole};
pub use routing::{resolve_route, Route};
pub use spawn::RootRequest;
pub use supervisor::{new_run_id, RouteBuilder, Supervisor, SupervisorEnv, ToolFactory};
pub use worktree::{Isolation, WorktreeError, WorktreeReport};
