//! Sub-agents: roles, definitions, grants, the supervisor, model-facing tools,
//! fork, the output contract, model routing.
//!
//! A parent opens children through the model-facing tools ([`tools`]): `task`
//! (blocking fan-out, children belong to the parent's turn) and `agent_open`
//! (background, children belong to the session), then `agent_eval`,
//! `agent_close`, `agent_list`, `handle_read`. The [`Supervisor`] admits and runs
//! them under the session's limits; every lifecycle transition and every child's
//! transcript goes to the ledger.

pub mod config;
pub mod contract;
pub mod definition;
pub mod fork;
pub mod grant;
pub mod inbox;
mod record;
pub mod result;
pub mod role;
pub mod routing;
mod drive;
pub mod run;
pub mod supervisor;
pub mod tools;

pub use result::ChildResult;
pub use drive::RunCtx;
pub use run::{Opened, RootRequest, RouteBuilder, SpawnMode, SpawnRequest, Supervisor, SupervisorEnv, ToolFactory};
pub use supervisor::{Limits, LiveStatus, RunSnapshot};

use thiserror::Error;

/// Why a child could not be opened. Goes back to the model as the tool result,
/// so each says what to do instead.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SpawnError {
    #[error("max_concurrent = {max_concurrent} children are already running or queued; wait for one with agent_eval, or close one with agent_close, then open again")]
    CapReached { max_concurrent: usize },
    #[error("max_depth = {max_depth} reached: this agent may not open sub-agents; do the work yourself")]
    DepthLimit { max_depth: u32 },
    #[error("max_total = {max_total} sub-agents were already opened in this session; do the remaining work yourself")]
    TotalLimit { max_total: usize },
    #[error("{0}")]
    UnknownType(String),
    #[error("{0}")]
    Grant(String),
    #[error("{0}")]
    Model(String),
    #[error("tree token budget exhausted ({used} of {budget} tokens); no more sub-agents for this tree")]
    TreeBudget { used: u64, budget: u64 },
    #[error("the ledger could not record the run: {0}")]
    Ledger(String),
    #[error("the session is shutting down")]
    Closed,
}
