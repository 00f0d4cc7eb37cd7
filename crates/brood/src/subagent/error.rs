//! Why a child could not be opened: the typed error every spawn path returns.

use super::catalog::UnknownAgentType;
use super::grant::GrantError;
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
    /// `isolation = "worktree"` asked for a worktree that could not be made (not a
    /// git repository, no commit yet, git missing or refusing).
    #[error(transparent)]
    Worktree(#[from] super::worktree::WorktreeError),
    /// The session is shutting down.
    #[error("the session is shutting down")]
    Closed,
}
