//! Reopening a run that ended without finishing, so a new boot can continue it under
//! the same id (`brood agents resume`): the one way a run leaves a terminal status.
//!
//! Allowed from `interrupted`, `cancelled` and `failed`, and from an unfinished
//! status whose boot is dead (its process died and no open has recorded that yet) —
//! or, for a fleet run taken over (`take_over`), whose lease expired.
//! Refused ([`LedgerError::NotResumable`]) for a `completed` run and for a run still
//! running in a live boot — another process, or this one. The run goes back to
//! `running` under this boot and session (so this boot's close or crash marks it
//! again), its end fields are cleared, and a `resumed` event records where it was:
//! `{"from", "reason", "previous_session_id", "previous_boot_id", "session_id",
//! "boot_id"}`. Earlier events, transcript and counters stay as they were.

use serde_json::json;

use super::db::{args, query_row, Db, RowExt};
use super::error::{LedgerError, SqlContext};
use super::liveness::Liveness;
use super::memo::RunFacts;
use super::ops::{self, Author};
use super::types::{EventKind, Reopened, RunStatus};

/// Reopen `run` for this boot (see the module doc). Returns what it was and the
/// run's facts after the change (for the writer's memo).
pub(crate) fn reopen(
    db: &dyn Db,
    author: &Author<'_>,
    run: &str,
    at: i64,
) -> Result<(Reopened, RunFacts), LedgerError> {
    reopen_as(db, author, run, at, Whose::ByLiveness)
}

/// Reopen a fleet run whose lease this boot just took over (`super::fleet`): its
/// lease expired, which decides — its previous worker may still be alive (frozen)
/// and is fenced (`super::fleet_fence`), so its liveness is not asked.
pub(crate) fn take_over(
    db: &dyn Db,
    author: &Author<'_>,
    run: &str,
    at: i64,
) -> Result<(Reopened, RunFacts), LedgerError> {
    reopen_as(db, author, run, at, Whose::ByLease)
}

/// Who decides that an unfinished run's boot no longer has it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Whose {
    /// Its boot's liveness: a live boot keeps it.
    ByLiveness,
    /// Its fleet lease, expired (checked by the claim).
    ByLease,
}

fn reopen_as(
    db: &dyn Db,
    author: &Author<'_>,
    run: &str,
    at: i64,
    whose: Whose,
) -> Result<(Reopened, RunFacts), LedgerError> {
    let row: Option<(String, Option<String>, String, String)> = query_row(
        db,
        "SELECT status, status_reason, session_id, session_boot_id FROM runs WHERE id = ?1",
        args![run],
        |r| Ok((r.string(0)?, r.opt_string(1)?, r.string(2)?, r.string(3)?)),
    )
    .ctx("reading the run to resume")?;
    let (status, reason, session_id, boot_id) = row.ok_or_else(|| LedgerError::UnknownRun {
        id: run.to_string(),
    })?;
    let from: RunStatus = status.parse().map_err(|detail| LedgerError::Sqlite {
        context: format!("reading the status of run {run}"),
        detail,
    })?;
    let refuse = |why: String| LedgerError::NotResumable {
        id: run.to_string(),
        why,
    };
    match from {
        RunStatus::Completed => {
            return Err(refuse(format!(
                "it completed; its result is shown by `brood agents show {run}`"
            )))
        }
        RunStatus::Interrupted | RunStatus::Cancelled | RunStatus::Failed => {}
        RunStatus::Pending | RunStatus::Queued | RunStatus::Running => {
            if boot_id == author.boot_id {
                return Err(refuse("it is already running in this session".into()));
            }
            // Only a well-formed id names a lock file (the database is untrusted).
            let alive = whose == Whose::ByLiveness
                && ops::validate_id("boot id", &boot_id).is_ok()
                && matches!(db.probe_boot(&boot_id)?, Liveness::Alive);
            if alive {
                return Err(refuse(format!(
                    "it is still running in another brood process (boot {boot_id}); wait \
                     for it, or stop it with `brood agents cancel {run}` and resume then"
                )));
            }
        }
    }
    db.execute(
        "UPDATE runs SET status = 'running', status_reason = NULL, ended_at = NULL,
             error = NULL, session_id = ?2, session_boot_id = ?3
         WHERE id = ?1",
        args![run, author.session_id, author.boot_id],
    )
    .ctx("reopening a run")?;
    let mut facts = ops::read_facts(db, run)?;
    let payload = json!({
        "from": from.as_str(),
        "reason": reason,
        "previous_session_id": session_id,
        "previous_boot_id": boot_id,
        "session_id": author.session_id,
        "boot_id": author.boot_id,
    });
    ops::insert_event_value(db, run, facts.next_event, EventKind::Resumed, &payload, at)?;
    facts.next_event += 1;
    Ok((
        Reopened {
            from,
            reason,
            previous_session_id: session_id,
            previous_boot_id: boot_id,
        },
        facts,
    ))
}
