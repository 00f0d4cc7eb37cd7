//! Writes that act on runs from outside their normal life: asking for a run to be
//! cancelled (a request row its live owner polls, or a direct mark when the owner is
//! dead), handing those requests to the owner, and pruning old finished runs.
//! Each runs inside a caller's transaction; [`LedgerMaintenance`] offers them to a
//! process that has no boot of its own (the `brood agents` CLI).

use std::path::PathBuf;
use std::time::Duration;

use super::db::{args, query_one, query_vec, Db, RowExt};
use super::error::{LedgerError, SqlContext};
use super::liveness::Liveness;
use super::ops;
use super::paths::LedgerPaths;
use super::spill;
use super::store::{self, now_ms, Location};
use super::types::{
    CancelOutcome, Durability, EventKind, PruneReport, RunId, RunStatus, Transition,
};

/// Reason written when a run of a dead process is cancelled on request.
const CANCEL_DEAD_REASON: &str = "cancelled on request; its process had already exited";

/// Ask for `run` to be cancelled. `own_boot` is the caller's boot, if it has one: a
/// request for one of its own runs is queued like any other (the owner polls).
pub(crate) fn request_cancel(
    db: &dyn Db,
    own_boot: Option<&str>,
    run: &str,
    at: i64,
) -> Result<CancelOutcome, LedgerError> {
    let status = ops::status_of(db, run)?;
    if status.is_terminal() {
        return Err(LedgerError::InvalidTransition {
            run: run.to_string(),
            from: status,
            to: RunStatus::Cancelled,
        });
    }
    let boot_id: String = query_one(
        db,
        "SELECT session_boot_id FROM runs WHERE id = ?1",
        args![run],
        |r| r.string(0),
    )
    .ctx("reading a run's boot")?;
    let alive = own_boot == Some(boot_id.as_str())
        || (ops::validate_id("boot id", &boot_id).is_ok()
            && matches!(db.probe_boot(&boot_id)?, Liveness::Alive));
    if alive {
        db.execute(
            "INSERT INTO cancel_requests (run_id, boot_id, requested_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_id) DO UPDATE SET requested_at = excluded.requested_at",
            args![run, &boot_id, at],
        )
        .ctx("recording a cancel request")?;
        super::fleet::notify_cancel(db, run)?;
        Ok(CancelOutcome::Requested {
            run_id: RunId::from_string(run),
            boot_id,
        })
    } else {
        let change = Transition::Cancelled {
            reason: CANCEL_DEAD_REASON.to_string(),
        };
        ops::transition(db, None, run, &change, at, None)?;
        Ok(CancelOutcome::MarkedCancelled {
            run_id: RunId::from_string(run),
        })
    }
}

/// Remove and return the pending cancel requests for runs of `boot_id`.
pub(crate) fn take_cancel_requests(db: &dyn Db, boot_id: &str) -> Result<Vec<RunId>, LedgerError> {
    let mut ids: Vec<String> = query_vec(
        db,
        "DELETE FROM cancel_requests WHERE boot_id = ?1 RETURNING run_id",
        args![boot_id],
        |r| r.string(0),
    )
    .ctx("taking cancel requests")?;
    ids.sort();
    Ok(ids.into_iter().map(RunId::from_string).collect())
}

/// Delete every run tree whose runs all ended (terminal) before `cutoff_ms`, with
/// their events, transcripts and cancel requests, and boots left without runs.
/// Returns the report and the spill files to remove once the transaction committed.
pub(crate) fn prune(
    db: &dyn Db,
    paths: &LedgerPaths,
    cutoff_ms: i64,
) -> Result<(PruneReport, Vec<PathBuf>), LedgerError> {
    let roots: Vec<String> = query_vec(
        db,
        &format!(
            "SELECT root_id FROM runs GROUP BY root_id
             HAVING SUM(CASE WHEN status NOT IN {} AND ended_at IS NOT NULL AND ended_at <= ?1
                        THEN 0 ELSE 1 END) = 0",
            ops::NON_TERMINAL_SQL
        ),
        args![cutoff_ms],
        |r| r.string(0),
    )
    .ctx("finding prunable runs")?;
    let mut report = PruneReport::default();
    let mut files = Vec::new();
    for root in &roots {
        let runs: Vec<String> = query_vec(
            db,
            "SELECT id FROM runs WHERE root_id = ?1",
            args![root],
            |r| r.string(0),
        )
        .ctx("listing a run tree")?;
        for run in &runs {
            let spills: Vec<(i64, String)> = query_vec(
                db,
                "SELECT seq, spill_path FROM transcripts WHERE run_id = ?1 AND spill_path IS NOT NULL",
                args![run],
                |r| Ok((r.i64(0)?, r.string(1)?)),
            )
            .ctx("listing spill files")?;
            for (seq, rel) in spills {
                // Text kept in the ledger goes with its rows, below.
                if spill::in_ledger(&rel).is_some() {
                    continue;
                }
                // Only the file this entry's own spill is written to: a row naming
                // another run's file (crafted, or another machine's on a shared
                // ledger) must not delete that run's only full copy.
                let own = u64::try_from(seq).map(|seq| paths.spill_file(run, seq).1);
                match paths.resolve_relative(&rel) {
                    Ok(path) if own.as_deref() == Ok(rel.as_str()) => files.push(path),
                    Ok(_) => report.refused_spill_paths.push(format!(
                        "transcript entry {seq} of run {run}: spill path {rel:?} is not \
                         this entry's own spill file; not removed"
                    )),
                    Err(reason) => report.refused_spill_paths.push(format!(
                        "transcript entry {seq} of run {run}: {reason}; not removed"
                    )),
                }
            }
            report.events += delete(db, "DELETE FROM events WHERE run_id = ?1", run)?;
            report.transcript_entries +=
                delete(db, "DELETE FROM transcripts WHERE run_id = ?1", run)?;
            report.spill_files += delete(db, "DELETE FROM spills WHERE run_id = ?1", run)?;
            delete(db, "DELETE FROM cancel_requests WHERE run_id = ?1", run)?;
            delete(db, "DELETE FROM run_results WHERE run_id = ?1", run)?;
            report.runs += delete(db, "DELETE FROM runs WHERE id = ?1", run)?;
        }
    }
    report.spill_files += files.len() as u64;
    db.execute(
        "DELETE FROM boots WHERE ended_at IS NOT NULL AND ended_at <= ?1
           AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.session_boot_id = boots.boot_id)",
        args![cutoff_ms],
    )
    .ctx("pruning old boots")?;
    Ok((report, files))
}

fn delete(db: &dyn Db, sql: &str, run: &str) -> Result<u64, LedgerError> {
    db.execute(sql, args![run]).ctx("pruning")
}

/// Remove the spill files of pruned runs (best effort: a file already gone, or one
/// that cannot be removed, is left to the user; the rows are already deleted).
pub(crate) fn remove_spill_files(files: &[PathBuf]) {
    for f in files {
        let _ = spill::remove(f);
    }
}

/// The cutoff for "older than `age`", in Unix ms.
pub(crate) fn cutoff(age: Duration) -> i64 {
    now_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX))
}

/// Cancel and prune for a process without a boot of its own (the CLI). Each call is
/// one short write transaction on its own connection; nothing else is written (no
/// boot, no recovery), so inspecting a workspace never disturbs the sessions in it.
pub struct LedgerMaintenance {
    paths: LedgerPaths,
    db: Box<dyn Db + Send>,
}

impl LedgerMaintenance {
    pub(crate) fn open(paths: LedgerPaths, at: &Location) -> Result<Self, LedgerError> {
        let db = match at {
            Location::Workspace => {
                if !paths.db.exists() {
                    return Err(LedgerError::Missing { path: paths.db });
                }
                store::open_writer(&paths, Durability::Full, Duration::from_secs(10))?
            }
            #[cfg(feature = "postgres")]
            Location::Postgres(url) => super::pg::open_existing(url)?,
        };
        Ok(LedgerMaintenance { paths, db })
    }

    /// Run `f` in one write transaction: committed when it succeeds, rolled back
    /// when it fails.
    fn in_transaction<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&dyn Db, &LedgerPaths) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let db = &*self.db;
        db.begin().ctx(&format!("starting {what}"))?;
        match f(db, &self.paths) {
            Ok(v) => {
                if let Err(e) = db.commit() {
                    let _ = db.rollback();
                    return Err(e).ctx(&format!("committing {what}"));
                }
                Ok(v)
            }
            Err(e) => {
                let _ = db.rollback();
                Err(e)
            }
        }
    }

    /// See [`Ledger::request_cancel`](super::Ledger::request_cancel).
    pub fn request_cancel(&mut self, run: &RunId) -> Result<CancelOutcome, LedgerError> {
        self.in_transaction("a cancel request", |db, _| {
            request_cancel(db, None, run.as_str(), now_ms())
        })
    }

    /// See [`Ledger::prune`](super::Ledger::prune).
    pub fn prune(&mut self, older_than: Duration) -> Result<PruneReport, LedgerError> {
        let (report, files) =
            self.in_transaction("a prune", |db, paths| prune(db, paths, cutoff(older_than)))?;
        remove_spill_files(&files);
        Ok(report)
    }

    /// Append one progress event to `run` (what `brood agents merge`, `close
    /// --discard` and `prune` did to its worktree). Lifecycle kinds are refused
    /// as in [`Ledger::append_event`](super::Ledger::append_event).
    pub fn append_event(
        &mut self,
        run: &RunId,
        kind: EventKind,
        payload: &serde_json::Value,
    ) -> Result<(), LedgerError> {
        if kind.is_lifecycle() {
            return Err(LedgerError::ReservedEventKind {
                kind: kind.as_str().to_string(),
            });
        }
        self.in_transaction("an event", |db, _| {
            ops::status_of(db, run.as_str())?;
            let seq = ops::next_seq(db, ops::Numbered::Events, run.as_str())?;
            ops::insert_event_value(db, run.as_str(), seq, kind, payload, now_ms())
        })
    }
}
