//! What one run is while it runs: its identity, grant, inbox, progress clock,
//! budgets, model, and the running slot it holds. Its delegation tools open
//! children of it; its driver and hooks read and update it.

use super::board::{Board, Progress};
use super::budgets::Budgets;
use super::inbox::RunInbox;
use super::result::Who;
use super::role::Role;
use super::worktree::Worktree;
use crate::model::{Model, ModelRequest};
use crate::tool::{Permissions, Workspace};
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

/// What a run's own tools need to know about it (its delegation tools open
/// children of it).
pub(crate) struct RunCtx {
    pub(crate) run_id: String,
    pub(crate) root_id: String,
    pub(crate) name: String,
    pub(crate) depth: u32,
    pub(crate) role: Role,
    pub(crate) kind_name: String,
    pub(crate) permissions: Arc<Permissions>,
    /// Permission rules of the agent definitions this run and its ancestors were
    /// opened from (the session's own rules are the gate's).
    pub rules: Arc<crate::tool::RuleSet>,
    /// The workspace its tools work in: the session's, or its own worktree's.
    pub workspace: Arc<Workspace>,
    /// Its git worktree when it runs isolated (settled when it ends).
    pub worktree: Option<Arc<Worktree>>,
    /// Names of the tools this run has (a custom child may only pick among them);
    /// set once its toolbox is built.
    /// Shared: siblings' are one list (`Supervisor::tool_name_lists`).
    pub tool_names: std::sync::OnceLock<Arc<[String]>>,
    pub(crate) inbox: Arc<RunInbox>,
    pub(crate) progress: Arc<Progress>,
    /// The registry and slots this run's slot comes from.
    pub(crate) board: Board,
    pub(crate) budgets: Budgets,
    pub(crate) provider_name: String,
    pub(crate) model_id: String,
    pub(crate) model: Arc<dyn Model>,
    /// The running slot this run holds (children only); yielded while it waits.
    pub(crate) slot: Mutex<Option<OwnedSemaphorePermit>>,
    pub(crate) last_request: Mutex<Option<Arc<ModelRequest>>>,
}

impl RunCtx {
    /// Run `fut` (a wait on children) with this run's running slot given back, and
    /// take a slot again afterwards — unless `cancel` (the run's token) fired.
    pub(crate) async fn without_slot<F: std::future::Future>(
        &self,
        cancel: &CancellationToken,
        fut: F,
    ) -> F::Output {
        let had = self
            .slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some();
        let out = fut.await;
        if had {
            if let Some(p) = self.board.acquire_slot(cancel).await {
                *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
            }
        }
        out
    }

    /// Who this run is, as its result names it.
    pub(crate) fn who(&self, warnings: Vec<String>) -> Who {
        Who {
            agent_id: self.run_id.clone(),
            name: self.name.clone(),
            role: self.kind_name.clone(),
            model: format!("{}/{}", self.provider_name, self.model_id),
            warnings,
            cost_usd: self.budgets.own_cost_usd(),
            tree_usage: Some(self.budgets.subtree()),
        }
    }

    /// Names of the tools in this run's toolbox (borrowed: every open of a
    /// child reads its parent's).
    pub fn tool_names(&self) -> &[String] {
        self.tool_names.get().map(|n| &**n).unwrap_or_default()
    }

    /// The request this run sent last (what a forked child continues from).
    pub fn last_request(&self) -> Option<Arc<ModelRequest>> {
        self.last_request
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
