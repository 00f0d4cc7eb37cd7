//! A run's budgets: its own token, cost and wall-time limits and its tree's shared
//! token and cost counters, checked before every model request (as the loop's
//! [`Guard`]) and at every spawn. What each answer cost is counted here, from the
//! same hook that charges the budgets (see [`super::tally`]).

use super::error::SpawnError;
use super::tally::{RootTallies, Tally, TallyCell};
use crate::agent::{BudgetSpent, Guard};
use crate::model::pricing::Price;
use crate::model::Usage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tree-wide limits every run of a tree checks (`[subagents] tree_*`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeLimits {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// This run's own limits (`[subagents] token_budget`, `cost_budget_usd`,
/// `wall_time_secs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunLimits {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub wall_time: Option<Duration>,
}

/// Token, cost and time budgets of one run, and the shared counters of its tree.
pub struct Budgets {
    /// Tokens used by the whole tree (root and all descendants).
    tree_used: Arc<AtomicU64>,
    /// What the model answered to the whole tree, and to this run.
    tree_tally: Arc<TallyCell>,
    own_tally: Arc<TallyCell>,
    /// What the model answered to this run and its descendants (for the root: the
    /// tree's tally), and the same cell of each ancestor below the root, nearest
    /// first: each answer is counted in every subtree it belongs to (depth is small).
    subtree: Arc<TallyCell>,
    ancestors: Vec<Arc<TallyCell>>,
    tree: TreeLimits,
    run: RunLimits,
    /// The model this run talks to and its price (if the user set one).
    model_id: String,
    price: Option<Price>,
    started: std::sync::OnceLock<Instant>,
}

impl Budgets {
    pub fn root(
        tree: TreeLimits,
        tallies: Option<&RootTallies>,
        model_id: &str,
        price: Option<Price>,
    ) -> Self {
        let tallies = tallies.map(|t| (t.tree.clone(), t.own.clone()));
        let (tree_tally, own_tally) = tallies.unwrap_or_default();
        Budgets {
            tree_used: Arc::new(AtomicU64::new(0)),
            subtree: tree_tally.clone(),
            ancestors: Vec::new(),
            tree_tally,
            own_tally,
            tree,
            run: RunLimits::default(),
            model_id: model_id.to_string(),
            price,
            started: std::sync::OnceLock::new(),
        }
    }
    pub fn child(parent: &Budgets, run: RunLimits, model_id: &str, price: Option<Price>) -> Self {
        // The root's subtree is the tree's tally, counted already.
        let mut ancestors = Vec::with_capacity(parent.ancestors.len() + 1);
        if !Arc::ptr_eq(&parent.subtree, &parent.tree_tally) {
            ancestors.push(parent.subtree.clone());
        }
        ancestors.extend(parent.ancestors.iter().cloned());
        Budgets {
            tree_used: parent.tree_used.clone(),
            tree_tally: parent.tree_tally.clone(),
            own_tally: Arc::default(),
            subtree: Arc::default(),
            ancestors,
            tree: parent.tree,
            run,
            model_id: model_id.to_string(),
            price,
            started: std::sync::OnceLock::new(),
        }
    }
    /// The price of this run's model (`None`: unpriced).
    pub fn price(&self) -> Option<&Price> {
        self.price.as_ref()
    }
    /// The run got its slot: its wall time starts now (once).
    pub fn start(&self) {
        let _ = self.started.set(Instant::now());
    }
    /// A resumed run: its wall time counts `spent` already (what it ran before).
    pub(crate) fn start_after(&self, spent: Duration) {
        let now = Instant::now();
        let _ = self.started.set(now.checked_sub(spent).unwrap_or(now));
    }
    /// A resumed run: count what it was answered before (`steps` answers summing
    /// to `usage`, priced at today's price) for it and its tree.
    pub(crate) fn count_spent(&self, steps: u64, usage: &Usage) {
        self.tree_used.fetch_add(usage.total(), Ordering::Relaxed);
        let price = self.price.as_ref();
        self.tree_tally
            .add_many(&self.model_id, steps, Some(usage), price);
        self.own_tally
            .add_many(&self.model_id, steps, Some(usage), price);
    }
    /// Count one model answer (with its usage, if reported) for this run and its tree.
    pub(crate) fn add(&self, usage: Option<&Usage>) {
        if let Some(u) = usage {
            self.tree_used.fetch_add(u.total(), Ordering::Relaxed);
        }
        let price = self.price.as_ref();
        self.tree_tally.add(&self.model_id, usage, price);
        self.own_tally.add(&self.model_id, usage, price);
        if !Arc::ptr_eq(&self.subtree, &self.tree_tally) {
            self.subtree.add(&self.model_id, usage, price);
        }
        for a in &self.ancestors {
            a.add(&self.model_id, usage, price);
        }
    }
    /// What this run's own answers cost so far: `None` when its model has no price
    /// (even before any answer) or some answer reported no usage.
    pub fn own_cost_usd(&self) -> Option<f64> {
        self.price.and(self.own_tally.cost_usd())
    }
    /// What the model answered to this run and all its descendants so far.
    pub fn subtree(&self) -> Tally {
        self.subtree.get()
    }
    /// `Err` naming the budget once the tree's token or cost budget is spent (or
    /// its cost cannot be known under a cost budget).
    pub fn check_tree(&self) -> Result<(), SpawnError> {
        Ok(self.tree_spent()?)
    }

    /// The tree's budgets, as a [`Guard`] answers.
    fn tree_spent(&self) -> Result<(), BudgetSpent> {
        if let Some(budget) = self.tree.tokens {
            let used = self.tree_used.load(Ordering::Relaxed);
            if used >= budget {
                return Err(BudgetSpent::TreeTokens { budget, used });
            }
        }
        if let Some(budget_usd) = self.tree.cost_usd {
            match self.tree_tally.cost_usd() {
                Some(used_usd) if used_usd >= budget_usd => {
                    return Err(BudgetSpent::TreeCost {
                        budget_usd,
                        used_usd,
                    })
                }
                None => {
                    return Err(BudgetSpent::TreeCostUnpriced {
                        budget_usd,
                        model: None,
                    })
                }
                Some(_) => {}
            }
            if self.price.is_none() {
                return Err(BudgetSpent::TreeCostUnpriced {
                    budget_usd,
                    model: Some(self.model_id.clone()),
                });
            }
        }
        Ok(())
    }
}

impl Guard for Budgets {
    fn before_step(&self, usage: &Usage, _turn: u32) -> Result<(), BudgetSpent> {
        if let (Some(wall), Some(started)) = (self.run.wall_time, self.started.get()) {
            if started.elapsed() >= wall {
                return Err(BudgetSpent::WallTime {
                    limit_secs: wall.as_secs(),
                });
            }
        }
        if let Some(budget) = self.run.tokens {
            if usage.total() >= budget {
                return Err(BudgetSpent::RunTokens {
                    budget,
                    used: usage.total(),
                });
            }
        }
        if let Some(budget_usd) = self.run.cost_usd {
            match (self.price, self.own_tally.cost_usd()) {
                (Some(_), Some(used_usd)) if used_usd >= budget_usd => {
                    return Err(BudgetSpent::RunCost {
                        budget_usd,
                        used_usd,
                    })
                }
                (Some(_), Some(_)) => {}
                _ => {
                    return Err(BudgetSpent::RunCostUnpriced {
                        budget_usd,
                        model: self.model_id.clone(),
                    })
                }
            }
        }
        self.tree_spent()
    }
}
