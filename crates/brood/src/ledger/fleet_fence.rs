//! The fleet's fence on a worker's writer (docs/FLEET.md "Lease rules", "Fencing"): a
//! worker writes into a fleet run only while its boot holds the run's lease. A lease
//! is taken over once it has expired, whether or not its holder is still alive (a
//! worker stopped with SIGSTOP, hung, or on a suspended machine keeps its database
//! session but stops heartbeating), so the holder checks, in each transaction that
//! writes into a run it claimed, that the run is still its own — and drops what it
//! would have written into a run it lost.
//!
//! - The writer remembers the runs this boot claimed and has not ended
//!   ([`Fence::settle`], after each commit). Nothing else is ever fenced: a writer
//!   that claimed nothing (every SQLite ledger, every parent) pays one emptiness
//!   check per batch.
//! - A batch with an op on such a run first reads, in its own transaction, which of
//!   this boot's lease rows are still its own (`SELECT run_id FROM run_leases WHERE
//!   worker_boot_id = $boot FOR SHARE`, [`Fence::check`]). The row locks hold until
//!   the batch commits: another worker's claim (`FOR UPDATE … SKIP LOCKED`) skips
//!   those rows meanwhile, and a claim that took a row first has committed by the
//!   time this read gets it (it waits for that claim, then sees the row no longer
//!   names this boot). So a run is either still this boot's for the whole batch, or
//!   lost — never both, whatever the clocks say.
//! - An op on a lost run ([`Lost::refuse`]) is not applied: progress (an event, a
//!   message, usage) is dropped, counted in `ops_failed`; a transition is refused with
//!   [`LedgerError::LeaseLost`] naming the run's holder now. The run stays fenced for
//!   as long as the ledger lives (its new holder writes it; this boot never again).

use std::collections::{HashMap, HashSet};

use super::apply::Outcome;
use super::db::{args, query_row, query_vec, Db, RowExt};
use super::error::{LedgerError, SqlContext};
use super::fleet::{FleetAnswer, FleetOp};
use super::op::Op;
use super::types::LedgerStats;

/// The runs this boot claimed and has not ended.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    claimed: HashSet<String>,
}

/// The runs of one batch this boot no longer holds, with their holders now
/// (empty: nothing is fenced, the usual case).
#[derive(Debug, Default)]
pub(crate) struct Lost {
    runs: HashMap<String, String>,
}

/// The run an op writes into, for the ops that are fenced.
fn written_run(op: &Op) -> Option<&str> {
    match op {
        Op::Event { run, .. }
        | Op::Message { run, .. }
        | Op::Usage { run, .. }
        | Op::Transition { run, .. } => Some(run.as_str()),
        _ => None,
    }
}

impl Fence {
    /// Inside the batch's transaction, before its ops: which runs it writes into
    /// are no longer this boot's. Reads the database only when the batch writes into
    /// a run this boot claimed.
    pub fn check(&self, db: &dyn Db, boot_id: &str, batch: &[&Op]) -> Result<Lost, LedgerError> {
        if self.claimed.is_empty() {
            return Ok(Lost::default());
        }
        let touched: HashSet<&str> = batch
            .iter()
            .filter_map(|op| written_run(op))
            .filter(|run| self.claimed.contains(*run))
            .collect();
        if touched.is_empty() {
            return Ok(Lost::default());
        }
        let mine: HashSet<String> = query_vec(
            db,
            "SELECT run_id FROM run_leases WHERE worker_boot_id = ?1 FOR SHARE",
            args![boot_id],
            |r| r.string(0),
        )
        .ctx("checking this worker's leases")?
        .into_iter()
        .collect();
        let mut lost = Lost::default();
        for run in touched.into_iter().filter(|r| !mine.contains(*r)) {
            let holder = query_row(
                db,
                "SELECT worker_boot_id FROM run_leases WHERE run_id = ?1",
                args![run],
                |r| r.opt_string(0),
            )
            .ctx("reading a lost run's lease")?
            .flatten()
            .unwrap_or_else(|| "none: the run was ended or released".into());
            lost.runs.insert(run.to_string(), holder);
        }
        Ok(lost)
    }

    /// After a batch committed: remember the runs it claimed, forget the runs this
    /// boot ended (their leases were released with their end).
    pub fn settle(&mut self, batch: &[Op], outcomes: &[Outcome]) {
        for (op, outcome) in batch.iter().zip(outcomes) {
            match (op, outcome) {
                (
                    Op::Fleet {
                        op: FleetOp::Claim { .. },
                        ..
                    },
                    Outcome::Fleet(Ok(FleetAnswer::Claimed(Some(c)))),
                ) => {
                    self.claimed.insert(c.run.as_str().to_string());
                }
                (Op::Transition { run, change, .. }, Outcome::Unit(Ok(())))
                    if change.target().is_terminal() =>
                {
                    self.claimed.remove(run.as_str());
                }
                _ => {}
            }
        }
    }

    /// Whether this boot holds (or held and lost) any run: only then can a batch
    /// need [`Fence::settle`] without a fleet op in it.
    pub fn is_empty(&self) -> bool {
        self.claimed.is_empty()
    }
}

impl Lost {
    /// `op`'s answer when it writes into a run this boot lost (it is then not
    /// applied); `None` for every other op.
    pub fn refuse(&self, op: &Op, tally: &mut LedgerStats) -> Option<Outcome> {
        if self.runs.is_empty() {
            return None;
        }
        let run = written_run(op)?;
        let holder = self.runs.get(run)?;
        tally.ops_failed += 1;
        Some(match op {
            Op::Transition { .. } => Outcome::Unit(Err(LedgerError::LeaseLost {
                run: run.to_string(),
                holder: holder.clone(),
            })),
            _ => Outcome::Progress,
        })
    }
}
