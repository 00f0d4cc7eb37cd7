//! Which budget stopped a run: a [`super::Guard`]'s answer, with the limit and what
//! was used, so a caller can match on it and the model reads what to do.

use thiserror::Error;

/// A spent budget (see `[subagents]` in the README): which one, its limit, its use.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum BudgetSpent {
    /// The run worked for `wall_time_secs` (queued time not counted).
    #[error("wall time exhausted (wall_time_secs = {limit_secs})")]
    WallTime {
        /// The limit, in seconds.
        limit_secs: u64,
    },
    /// The run's tokens reached `token_budget`.
    #[error("token budget exhausted (token_budget = {budget}, {used} used)")]
    RunTokens {
        /// The limit.
        budget: u64,
        /// Tokens the run used.
        used: u64,
    },
    /// The run's cost reached `cost_budget_usd`.
    #[error("cost budget exhausted (cost_budget_usd = {budget_usd}, ${used_usd:.6} used)")]
    RunCost {
        /// The limit, USD.
        budget_usd: f64,
        /// What the run cost, USD.
        used_usd: f64,
    },
    /// The run has a cost budget but its model has no price.
    #[error("cost budget cannot be held (cost_budget_usd = {budget_usd}): model {model} has no price; set [pricing.\"{model}\"] in your user config")]
    RunCostUnpriced {
        /// The limit, USD.
        budget_usd: f64,
        /// The model without a price.
        model: String,
    },
    /// The tree's tokens reached `tree_token_budget`.
    #[error("tree token budget exhausted (tree_token_budget = {budget}, {used} used)")]
    TreeTokens {
        /// The limit.
        budget: u64,
        /// Tokens the tree used.
        used: u64,
    },
    /// The tree's cost reached `tree_cost_budget_usd`.
    #[error(
        "tree cost budget exhausted (tree_cost_budget_usd = {budget_usd}, ${used_usd:.6} used)"
    )]
    TreeCost {
        /// The limit, USD.
        budget_usd: f64,
        /// What the tree cost, USD.
        used_usd: f64,
    },
    /// The tree has a cost budget but one of its answers (or its next model) has no
    /// price, so its cost cannot be known.
    #[error("tree cost budget cannot be held (tree_cost_budget_usd = {budget_usd}): {}", match model {
        Some(m) => format!("model {m} has no price; set [pricing.\"{m}\"] in your user config"),
        None => "an answer of the tree has no price; set [pricing.\"<model>\"] in your user config for every model the tree uses".to_string(),
    })]
    TreeCostUnpriced {
        /// The limit, USD.
        budget_usd: f64,
        /// The model without a price, when known.
        model: Option<String>,
    },
}
