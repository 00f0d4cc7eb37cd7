//! The fleet's side of the ledger (docs/FLEET.md): runs placed in the fleet are
//! enqueued with a lease row in `run_leases` (schema version 6), claimed by workers
//! with `FOR UPDATE SKIP LOCKED`, kept by heartbeats, taken over when their worker
//! died, and ended exactly once — only by the worker holding the lease.
//!
//! - **Enqueue** ([`Ledger::enqueue`]): `pending → queued`, the lease row (no holder),
//!   and `NOTIFY brood_run_queued, '<run id>'` — in one transaction.
//! - **Claim** (`Ledger::claim`): the oldest run whose lease row has no holder (queued,
//!   or released by a worker that stopped) or whose holder's lease expired — dead or
//!   alive: a frozen holder fences itself (`super::fleet_fence`). A queued run goes to `running`
//!   under the claiming worker's session and boot (`started`); a taken-over one is
//!   reopened (`resumed`, as `brood agents resume` does). `attempt` counts claims; a
//!   run found past `max_attempts` is marked `failed` ("lost its worker N times").
//! - **Heartbeat** (`Ledger::renew_leases`): every lease of this boot gets
//!   `expires_at = now + lease`; the answer names the runs it still holds, so a
//!   worker learns which of its runs were taken over and stops them.
//! - **Exactly once.** A terminal transition of a run with a lease row locks that row
//!   (`FOR UPDATE`) in the writer's transaction and is refused
//!   ([`LedgerError::LeaseLost`]) when another worker holds it (and every other write
//!   of a worker into a run it claimed is fenced the same way, `super::fleet_fence`); otherwise it releases
//!   the row and, unless the run was only interrupted (it will be claimed again),
//!   issues `NOTIFY brood_run_done, '<run id>'`, delivered if it commits. This boot's
//!   close releases the leases it holds, so its interrupted runs are claimed at once.
//!
//! - **Cancel requests** (`super::maintenance::request_cancel`) on PostgreSQL issue
//!   `NOTIFY brood_run_cancel, '<run id>'`, so the holder's session takes them at once.
//!
//! All of this needs PostgreSQL: on an SQLite ledger enqueue and claim are refused
//! ([`LedgerError::FleetNeedsPostgres`]) and the terminal check is never made (the
//! table is empty there; its write path keeps its speed).

use serde_json::json;

use super::db::{args, query_row, query_vec, Db, Dialect, RowExt};
use super::error::{LedgerError, SqlContext};
use super::memo::RunFacts;
use super::ops::{self, Author};
use super::types::{EventKind, RunId, RunStatus, Transition};

/// The channel an enqueue notifies (payload: the run id).
pub const QUEUED_CHANNEL: &str = "brood_run_queued";
/// The channel a fleet run's end notifies (payload: the run id).
pub const DONE_CHANNEL: &str = "brood_run_done";
/// The channel a cancel request notifies (payload: the run id): the session of the
/// boot that holds the run takes its requests at once instead of at its next poll.
pub const CANCEL_CHANNEL: &str = "brood_run_cancel";

/// What a `FleetListener` listens for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetChannel {
    /// Runs enqueued ([`QUEUED_CHANNEL`]): idle workers.
    Queued,
    /// Fleet runs ended ([`DONE_CHANNEL`]): parents.
    Done,
    /// Cancel requests recorded ([`CANCEL_CHANNEL`]): the sessions holding runs
    /// (a worker holding a parent's child).
    Cancel,
}

/// Claims of one run before it is marked failed instead of claimed again.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Where a fleet run is to run, recorded with it when it is enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The repository the worker prepares a worktree of: a URL or a path reachable
    /// from the workers' machines.
    pub repo: String,
    /// The commit (or any revision `git` resolves) to run on; `None`: the
    /// repository's `HEAD` when the worker prepares it.
    pub rev: Option<String>,
    /// Claims before the run is marked failed ([`DEFAULT_MAX_ATTEMPTS`]).
    pub max_attempts: u32,
}

/// A run a worker claimed: it is `running` under the worker's session and boot, and
/// the worker holds its lease until it ends it or stops renewing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The run.
    pub run: RunId,
    /// Which claim this is (1 for the first).
    pub attempt: u32,
    /// Its status before the claim: `queued` for a first claim; `running` or
    /// `interrupted` for a run taken over from a worker that died or stopped.
    pub from: RunStatus,
    /// Where it runs (as enqueued).
    pub repo: String,
    /// The revision it runs on (as enqueued).
    pub rev: Option<String>,
}

/// A fleet operation for the writer thread.
pub(crate) enum FleetOp {
    Enqueue { run: RunId, placement: Placement },
    Claim { lease_ms: i64 },
    Renew { lease_ms: i64 },
}

/// Its answer.
pub(crate) enum FleetAnswer {
    Enqueued,
    Claimed(Option<Claimed>),
    /// The runs whose leases this boot still holds (and renewed).
    Renewed(Vec<RunId>),
}

fn needs_postgres(db: &dyn Db, what: &str) -> Result<(), LedgerError> {
    match db.dialect() {
        Dialect::Postgres => Ok(()),
        Dialect::Sqlite => Err(LedgerError::FleetNeedsPostgres { what: what.into() }),
    }
}

/// Apply one fleet op inside the writer's transaction. Returns the answer and, for an
/// enqueue or a claim, the run's facts for the writer's memo.
pub(crate) fn apply(
    db: &dyn Db,
    author: &Author<'_>,
    op: &FleetOp,
    at: i64,
) -> Result<(FleetAnswer, Option<(RunId, RunFacts)>), LedgerError> {
    match op {
        FleetOp::Enqueue { run, placement } => {
            needs_postgres(db, "enqueueing a run for a worker")?;
            let facts = ops::transition(db, None, run.as_str(), &Transition::Queued, at, None)?;
            db.execute(
                "INSERT INTO run_leases (run_id, attempt, max_attempts, repo, rev, enqueued_at)
                 VALUES (?1, 0, ?2, ?3, ?4, ?5)",
                args![
                    run.as_str(),
                    placement.max_attempts.max(1),
                    &placement.repo,
                    &placement.rev,
                    at
                ],
            )
            .ctx("recording a queued run's lease")?;
            notify(db, QUEUED_CHANNEL, run.as_str())?;
            Ok((FleetAnswer::Enqueued, Some((run.clone(), facts))))
        }
        FleetOp::Claim { lease_ms } => {
            needs_postgres(db, "claiming a queued run")?;
            match claim(db, author, at, *lease_ms)? {
                Some((claimed, facts)) => {
                    let run = claimed.run.clone();
                    Ok((FleetAnswer::Claimed(Some(claimed)), Some((run, facts))))
                }
                None => Ok((FleetAnswer::Claimed(None), None)),
            }
        }
        FleetOp::Renew { lease_ms } => {
            needs_postgres(db, "renewing leases")?;
            let held = query_vec(
                db,
                "UPDATE run_leases SET expires_at = ?2 WHERE worker_boot_id = ?1
                 RETURNING run_id",
                args![author.boot_id, at.saturating_add(*lease_ms)],
                |r| r.string(0),
            )
            .ctx("renewing this worker's leases")?;
            let held = held.into_iter().map(RunId::from_string).collect();
            Ok((FleetAnswer::Renewed(held), None))
        }
    }
}

/// A candidate for a claim, as selected (and row-locked).
struct Candidate {
    run: String,
    holder: Option<String>,
    attempt: u32,
    max_attempts: u32,
    status: RunStatus,
    repo: String,
    rev: Option<String>,
}

/// How many candidates one claim looks at (the ones skipped are leased to live workers).
const CANDIDATES: i64 = 16;

fn claim(
    db: &dyn Db,
    author: &Author<'_>,
    at: i64,
    lease_ms: i64,
) -> Result<Option<(Claimed, RunFacts)>, LedgerError> {
    let candidates = query_vec(
        db,
        "SELECT l.run_id, l.worker_boot_id, l.attempt, l.max_attempts, r.status, l.repo, l.rev
         FROM run_leases l JOIN runs r ON r.id = l.run_id
         WHERE r.status IN ('queued', 'running', 'interrupted')
           AND (l.worker_boot_id IS NULL OR l.expires_at <= ?1)
         ORDER BY r.created_at, r.id
         LIMIT ?2
         FOR UPDATE OF l SKIP LOCKED",
        args![at, CANDIDATES],
        |r| {
            Ok((
                r.string(0)?,
                r.opt_string(1)?,
                r.u32(2)?,
                r.u32(3)?,
                r.string(4)?,
                r.string(5)?,
                r.opt_string(6)?,
            ))
        },
    )
    .ctx("looking for a run to claim")?;
    for (run, holder, attempt, max_attempts, status, repo, rev) in candidates {
        let status: RunStatus = status.parse().map_err(|detail| LedgerError::Sqlite {
            context: format!("reading the status of run {run}"),
            detail,
        })?;
        let c = Candidate {
            run,
            holder,
            attempt,
            max_attempts,
            status,
            repo,
            rev,
        };
        // An expired lease is taken over whether or not its holder is alive: a
        // worker that stopped heartbeating (killed, or frozen: SIGSTOP, hung, a
        // suspended machine — which keeps its session and its advisory lock) has lost
        // it, and its writer fences itself (`super::fleet_fence`). This boot's own
        // expired lease is not taken again: it still runs the run.
        if c.holder.as_deref() == Some(author.boot_id) {
            continue;
        }
        if c.attempt >= c.max_attempts {
            give_up(db, &c, at)?;
            continue;
        }
        return take(db, author, c, at, lease_ms).map(Some);
    }
    Ok(None)
}

/// Claim `c` for this worker.
fn take(
    db: &dyn Db,
    author: &Author<'_>,
    c: Candidate,
    at: i64,
    lease_ms: i64,
) -> Result<(Claimed, RunFacts), LedgerError> {
    db.execute(
        "UPDATE run_leases SET worker_boot_id = ?2, claimed_at = ?3, expires_at = ?4,
             attempt = attempt + 1
         WHERE run_id = ?1",
        args![
            c.run.as_str(),
            author.boot_id,
            at,
            at.saturating_add(lease_ms)
        ],
    )
    .ctx("taking a run's lease")?;
    let facts = match c.status {
        RunStatus::Queued => {
            let facts = ops::transition(db, None, &c.run, &Transition::Running, at, None)?;
            db.execute(
                "UPDATE runs SET session_id = ?2, session_boot_id = ?3 WHERE id = ?1",
                args![c.run.as_str(), author.session_id, author.boot_id],
            )
            .ctx("moving a claimed run to this worker")?;
            facts
        }
        _ => super::reopen::take_over(db, author, &c.run, at)?.1,
    };
    Ok((
        Claimed {
            run: RunId::from_string(&c.run),
            attempt: c.attempt + 1,
            from: c.status,
            repo: c.repo,
            rev: c.rev,
        },
        facts,
    ))
}

/// Mark a run that lost its worker `max_attempts` times failed, release its lease and
/// tell its parent.
fn give_up(db: &dyn Db, c: &Candidate, at: i64) -> Result<(), LedgerError> {
    let error = format!(
        "lost its worker {} times (max_attempts {}); it is not claimed again",
        c.attempt, c.max_attempts
    );
    db.execute(
        "UPDATE runs SET status = 'failed', status_reason = ?2, error = ?2, ended_at = ?3
         WHERE id = ?1",
        args![c.run.as_str(), error.as_str(), at],
    )
    .ctx("failing a run that lost its workers")?;
    let seq = ops::next_seq(db, ops::Numbered::Events, &c.run)?;
    let payload = json!({"from": c.status.as_str(), "error": error, "result": null});
    ops::insert_event_value(db, &c.run, seq, EventKind::Failed, &payload, at)?;
    release(db, &c.run)?;
    notify(db, DONE_CHANNEL, &c.run)
}

/// Before a terminal transition of `run` by boot `me`: `Ok(None)` when the run is not
/// a fleet run (no lease row), `Ok(Some(()))` when it is and `me` may end it (it holds
/// the lease, or nobody does: a queued run cancelled), [`LedgerError::LeaseLost`] when
/// another worker holds it. The row stays locked until the transaction ends.
pub(crate) fn before_end(db: &dyn Db, run: &str, me: &str) -> Result<Option<()>, LedgerError> {
    if db.dialect() != Dialect::Postgres {
        return Ok(None);
    }
    let row = query_row(
        db,
        "SELECT worker_boot_id FROM run_leases WHERE run_id = ?1 FOR UPDATE",
        args![run],
        |r| r.opt_string(0),
    )
    .ctx("checking a fleet run's lease")?;
    match row {
        None => Ok(None),
        Some(Some(holder)) if holder != me => Err(LedgerError::LeaseLost {
            run: run.to_string(),
            holder,
        }),
        Some(_) => Ok(Some(())),
    }
}

/// After a terminal transition of a fleet run: release its lease, and unless it was
/// only interrupted (to be claimed again), notify its end.
pub(crate) fn after_end(db: &dyn Db, run: &str, to: RunStatus) -> Result<(), LedgerError> {
    release(db, run)?;
    if to != RunStatus::Interrupted {
        notify(db, DONE_CHANNEL, run)?;
    }
    Ok(())
}

/// At this boot's close: release every lease it holds (its runs were just marked
/// interrupted), so other workers claim them at once.
pub(crate) fn release_boot(db: &dyn Db, boot_id: &str) -> Result<(), LedgerError> {
    if db.dialect() != Dialect::Postgres {
        return Ok(());
    }
    db.execute(
        "UPDATE run_leases SET worker_boot_id = NULL, expires_at = NULL
         WHERE worker_boot_id = ?1",
        args![boot_id],
    )
    .ctx("releasing this worker's leases")
    .map(|_| ())
}

fn release(db: &dyn Db, run: &str) -> Result<(), LedgerError> {
    db.execute(
        "UPDATE run_leases SET worker_boot_id = NULL, expires_at = NULL WHERE run_id = ?1",
        args![run],
    )
    .ctx("releasing a run's lease")
    .map(|_| ())
}

/// After a cancel request for `run` was recorded: wake its holder (PostgreSQL; an
/// SQLite ledger's sessions poll).
pub(crate) fn notify_cancel(db: &dyn Db, run: &str) -> Result<(), LedgerError> {
    match db.dialect() {
        Dialect::Postgres => notify(db, CANCEL_CHANNEL, run),
        Dialect::Sqlite => Ok(()),
    }
}

fn notify(db: &dyn Db, channel: &str, run: &str) -> Result<(), LedgerError> {
    db.execute("SELECT pg_notify(?1, ?2)", args![channel, run])
        .ctx("notifying the fleet")
        .map(|_| ())
}

/// The writer answers every fleet op with a [`FleetAnswer`]; each caller wants one
/// kind of it. A sender that maps the answer onto the caller's reply.
pub(crate) type FleetReply = Box<dyn FnOnce(Result<FleetAnswer, LedgerError>) + Send + 'static>;
