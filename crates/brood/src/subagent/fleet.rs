//! Children placed in the fleet (`[subagents] placement = "fleet"`, docs/FLEET.md):
//! opened as any child (admitted, its grant decided and recorded with its spawn),
//! then, instead of running here, **enqueued** in the PostgreSQL ledger with its
//! workspace (the repository of this session's workspace and its `HEAD` commit) for
//! a `brood worker` to claim. Its task here waits for the run's end — woken by
//! `NOTIFY brood_run_done` (`super::fleet_wait`), reading the ledger as the truth —
//! and delivers the recorded result exactly as a local child's
//! (`drive::publish`: its waiters, a background child's completion pushed into its
//! parent's next step). The worker records the end; this process records nothing
//! of it, so each run ends once.
//!
//! Cancelling such a child here cancels its record while it is still queued; once a
//! worker holds it, a cancel request is left for that worker and the child is
//! reported cancelled here at once.

use super::board::LiveStatus;
use super::drive::{self, ChildPlan, Delivery};
use super::fleet_repo::remote_placement;
use super::fleet_wait::SAFETY_POLL;
use super::git::Git;
use super::result::{ChildResult, Settled};
use super::supervisor::Supervisor;
use crate::ledger::{LedgerError, Placement, RunId, RunStatus, DEFAULT_MAX_ATTEMPTS};
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Enqueue the planned child and deliver its end when a worker has recorded it.
pub(crate) fn start_fleet_child(sup: Supervisor, plan: ChildPlan) {
    tokio::spawn(async move {
        let delivery = plan.delivery();
        let mut gate = plan.spawned.clone();
        let cancel = plan.cancel.clone();
        // Its toolbox and first context are the worker's to build.
        drop(plan);
        if !drive::spawn_on_disk(&sup, &delivery, &mut gate).await {
            return;
        }
        let run = RunId::from_string(&delivery.ctx.run_id);
        let enqueued = match placement(&sup).await {
            Ok(placement) => sup
                .env()
                .ledger
                .enqueue(&run, placement)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if let Err(e) = enqueued {
            let detail = if e.starts_with("enqueueing") {
                e
            } else {
                format!("enqueueing it for the fleet failed: {e}")
            };
            let result = delivery.result(&sup, Settled::Crashed { detail });
            drive::finish(&sup, &delivery, result).await;
            return;
        }
        sup.board()
            .set_status(&delivery.ctx.run_id, LiveStatus::Queued);
        let result = match wait_for_end(&sup, &delivery, &run, &cancel).await {
            Some(result) => result,
            None => cancel_it(&sup, &delivery, &run).await,
        };
        sup.recorder().publish_end(&result);
        drive::publish(&sup, &delivery, result);
    });
}

/// Where this session's fleet children run: `[subagents] fleet_repository` (a URL
/// or remote whose tips must hold the workspace's `HEAD` — else refused, saying to
/// push it — or a path), by default the top of the git repository holding the
/// workspace (the workspace itself, and the worker's `HEAD`, when it is in none),
/// with that `HEAD` commit.
async fn placement(sup: &Supervisor) -> Result<Placement, String> {
    let root = sup.env().workspace.root().to_path_buf();
    let at = root.clone();
    let (top, rev) = tokio::task::spawn_blocking(move || head_of(&at))
        .await
        .map_err(|e| format!("finding its repository failed: {e}"))?;
    let repo = match (sup.env().settings.fleet_repository.clone(), top, &rev) {
        (None, top, _) => top.unwrap_or_else(|| root.to_string_lossy().into_owned()),
        (Some(configured), Some(top), Some(head)) => {
            let cell = {
                let mut slot = sup
                    .fleet_checked()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                match &*slot {
                    Some((c, h, cell)) if *c == configured && h == head => cell.clone(),
                    _ => {
                        let cell = Arc::new(tokio::sync::OnceCell::new());
                        *slot = Some((configured.clone(), head.clone(), cell.clone()));
                        cell
                    }
                }
            };
            let head = head.clone();
            cell.get_or_try_init(|| async move {
                tokio::task::spawn_blocking(move || {
                    let git = Git::open(Path::new(&top)).map_err(|e| e.to_string())?;
                    remote_placement(&git, Path::new(&top), &configured, &head)
                        .map(|source| source.as_git_arg())
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("enqueueing it for the fleet was refused: {e}"))
            })
            .await?
            .clone()
        }
        (Some(configured), ..) => {
            return Err(format!(
                "enqueueing it for the fleet was refused: [subagents] fleet_repository = \
                 {configured:?} needs the workspace {} to be in a git repository with a \
                 commit (the commit the workers check out)",
                root.display()
            ))
        }
    };
    Ok(Placement {
        repo,
        rev,
        max_attempts: DEFAULT_MAX_ATTEMPTS,
    })
}

/// The top of the git repository holding `root` and its `HEAD` commit. Blocking.
fn head_of(root: &Path) -> (Option<String>, Option<String>) {
    let git = Git::open(root).ok();
    let ask = |args: &[&str]| {
        git.as_ref()
            .and_then(|g| g.run(args).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    (
        ask(&["rev-parse", "--show-toplevel"]),
        ask(&["rev-parse", "--verify", "HEAD"]),
    )
}

/// Wait until the ledger records the run's end; `None` when `cancel` fired first.
async fn wait_for_end(
    sup: &Supervisor,
    d: &Delivery,
    run: &RunId,
    cancel: &CancellationToken,
) -> Option<ChildResult> {
    let ledger = sup.env().ledger.clone();
    // Registered before the first read: an end committed after it wakes this task.
    let (waiter, _) = sup.fleet_wait().register(&ledger, run.as_str());
    loop {
        if let Some(result) = read_end(sup, d, run).await {
            return Some(result);
        }
        tokio::select! {
            () = cancel.cancelled() => return None,
            () = tokio::time::sleep(SAFETY_POLL) => {}
            () = waiter.woken() => {}
        }
    }
}

/// The run's result when the ledger has its end (`completed`, `failed`,
/// `cancelled`); `None` while it is queued, running, or interrupted (to be claimed
/// again), or when the ledger cannot be read now.
async fn read_end(sup: &Supervisor, d: &Delivery, run: &RunId) -> Option<ChildResult> {
    let id = run.clone();
    let record = sup
        .env()
        .ledger
        .read(move |r| r.get_run(&id))
        .await
        .ok()?
        .run;
    if !matches!(
        record.status,
        RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
    ) {
        return None;
    }
    // The worker's result as it recorded it; a run ended without one (cancelled
    // while queued, failed after losing its workers) is described from its row.
    let recorded = record
        .result
        .clone()
        .and_then(|v| serde_json::from_value::<ChildResult>(v).ok())
        .filter(|r| r.agent_id == run.as_str());
    Some(match recorded {
        Some(r) => r,
        None => {
            let mut r = d.result(
                sup,
                Settled::Cancelled {
                    reason: record.status_reason.clone(),
                },
            );
            r.status = record.status;
            r.error = record.error.clone();
            r.turns = u32::try_from(record.steps).unwrap_or(u32::MAX);
            r
        }
    })
}

/// The child was cancelled here: cancel its record if it is still queued, else ask
/// its worker to (a cancel request for the worker's boot). Its end as reported here.
async fn cancel_it(sup: &Supervisor, d: &Delivery, run: &RunId) -> ChildResult {
    let reason = sup
        .board()
        .cancel_reason(run.as_str())
        .unwrap_or_else(|| "cancelled by its parent".into());
    match sup.env().ledger.cancel(run, reason.clone()).await {
        Ok(()) => {}
        Err(LedgerError::LeaseLost { .. }) => {
            let _ = sup.env().ledger.request_cancel(run).await;
        }
        // It ended meanwhile: that end is the one to deliver.
        Err(_) => {
            if let Some(result) = read_end(sup, d, run).await {
                return result;
            }
        }
    }
    d.result(
        sup,
        Settled::Cancelled {
            reason: Some(reason),
        },
    )
}
