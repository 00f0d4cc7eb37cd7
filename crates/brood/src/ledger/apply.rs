//! How the writer applies one queued operation inside its group commit
//! (`super::writer`): each op atomically (so a rejected op does not undo the
//! others), with the writer's [`Memo`] of live runs, and its answer kept as an
//! [`Outcome`] until the batch's commit outcome is known ([`deliver`]). Ops are only
//! borrowed here, so a batch whose connection was lost, or whose op failed half-way
//! (below), can be applied again, whole.
//!
//! Atomic without a savepoint where it can be checked: on SQLite a failed statement
//! is backed out by itself, and the ops that fail in normal use (an invalid
//! transition, a duplicate id, an unknown run) fail before their first write. So
//! the writer's run ops (a spawn, a transition, usage) run bare, and the
//! connection's count of changed rows ([`Db::total_changes`]) tells whether an op
//! that failed had written anything. One that had (a crafted or damaged database)
//! marks the batch *torn*: the writer rolls it back and applies it again with a
//! savepoint per op, the way every batch was applied before (and every batch still
//! is on PostgreSQL, whose failed statement aborts the transaction). Maintenance ops
//! (cancel requests, prune, resume, the fleet's) keep their savepoint.

use super::db::Db;
use super::error::{LedgerError, SqlContext};
use super::fleet::{self, FleetAnswer};
use super::maintenance;
use super::memo::{Memo, RunFacts};
use super::op::{Op, Reply};
use super::ops::{self, Author};
use super::paths::LedgerPaths;
use super::reopen;
use super::shared::SpillDir;
use super::types::{CancelOutcome, LedgerStats, PruneReport, Reopened, RunId};

/// One applied op's answer, sent by [`deliver`] once its batch committed (or failed).
pub(crate) enum Outcome {
    /// Not applied: its batch's transaction could not begin.
    NotRun,
    /// Progress (events, messages, usage): nobody waits for an answer.
    Progress,
    Run(Result<RunId, LedgerError>),
    Unit(Result<(), LedgerError>),
    Cancel(Result<CancelOutcome, LedgerError>),
    Runs(Result<Vec<RunId>, LedgerError>),
    Pruned(Result<PruneReport, LedgerError>),
    Reopened(Result<Reopened, LedgerError>),
    Fleet(Result<FleetAnswer, LedgerError>),
    Shutdown,
}

impl Outcome {
    /// This answer with `err` in place of a success: for an op whose transaction
    /// the database ended, so nothing it did was kept.
    pub(crate) fn failed(self, err: &LedgerError) -> Outcome {
        let e = err.clone();
        match self {
            Outcome::Run(Ok(_)) => Outcome::Run(Err(e)),
            Outcome::Unit(Ok(())) => Outcome::Unit(Err(e)),
            Outcome::Cancel(Ok(_)) => Outcome::Cancel(Err(e)),
            Outcome::Runs(Ok(_)) => Outcome::Runs(Err(e)),
            Outcome::Pruned(Ok(_)) => Outcome::Pruned(Err(e)),
            Outcome::Reopened(Ok(_)) => Outcome::Reopened(Err(e)),
            Outcome::Fleet(Ok(_)) => Outcome::Fleet(Err(e)),
            other => other,
        }
    }
}

/// An op's answer given its batch's commit outcome: its own error first, else the
/// commit's.
fn after<T>(r: Result<T, LedgerError>, commit: &Result<(), LedgerError>) -> Result<T, LedgerError> {
    match (r, commit) {
        (Err(e), _) => Err(e),
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) => Err(e.clone()),
    }
}

/// Answer `op` with its `outcome` now that its batch's commit outcome is known.
/// Returns the reply of a `Shutdown` op (the writer answers it once it has closed).
pub(crate) fn deliver(
    op: Op,
    outcome: Outcome,
    commit: &Result<(), LedgerError>,
) -> Option<Reply<()>> {
    fn send<T>(reply: Reply<T>, r: Result<T, LedgerError>, commit: &Result<(), LedgerError>) {
        if let Some(tx) = reply {
            let _ = tx.send(after(r, commit));
        }
    }
    match (op, outcome) {
        (Op::Shutdown { reply }, _) => return Some(reply),
        (op, Outcome::NotRun) => {
            let err = match commit {
                Err(e) => e.clone(),
                Ok(()) => LedgerError::WriterStopped,
            };
            return fail_op(op, &err);
        }
        (Op::CreateRun { reply, .. }, Outcome::Run(r)) => send(reply, r, commit),
        (Op::Transition { reply, .. } | Op::Flush { reply }, Outcome::Unit(r)) => {
            send(reply, r, commit)
        }
        (Op::RequestCancel { reply, .. }, Outcome::Cancel(r)) => send(reply, r, commit),
        (Op::TakeCancelRequests { reply }, Outcome::Runs(r)) => send(reply, r, commit),
        (Op::Prune { reply, .. }, Outcome::Pruned(r)) => send(reply, r, commit),
        (Op::Reopen { reply, .. }, Outcome::Reopened(r)) => send(reply, r, commit),
        (Op::Fleet { reply, .. }, Outcome::Fleet(r)) => reply(after(r, commit)),
        (Op::Event { .. } | Op::Message { .. } | Op::Usage { .. }, _) => {}
        // `apply` answers each kind of op with its kind of outcome.
        (op, _) => {
            let err = LedgerError::Sqlite {
                context: "answering a ledger operation".into(),
                detail: "the writer paired it with another operation's answer".into(),
            };
            return fail_op(op, &err);
        }
    }
    None
}

pub(crate) struct ApplyCtx<'a> {
    pub paths: &'a LedgerPaths,
    pub author: Author<'a>,
    pub cap_bytes: usize,
    /// Run ops of several statements without a savepoint, checked by the
    /// connection's change count (only where it has one: [`Db::total_changes`]).
    pub bare: bool,
    /// Set when a bare op failed after writing: the batch must be rolled back and
    /// applied again with savepoints.
    pub torn: std::cell::Cell<bool>,
    /// Set when a fleet op was applied (`super::fleet_fence` remembers claims).
    pub fleet: std::cell::Cell<bool>,
}

impl ApplyCtx<'_> {
    /// Apply one op atomically; its answer, to be sent once the batch's commit
    /// outcome is known ([`deliver`]). The op is only borrowed: a batch whose
    /// connection was lost, or that was torn ([`ApplyCtx::atomic`]), is applied
    /// again, whole.
    pub fn apply(
        &self,
        tx: &dyn Db,
        memo: &mut Memo,
        op: &Op,
        tally: &mut LedgerStats,
        spills: &mut SpillFiles,
    ) -> Outcome {
        match op {
            Op::CreateRun { id, run, at, .. } => {
                let parent = run.parent_id.as_ref().and_then(|p| memo.get(p.as_str()));
                let r = self
                    .atomic(tx, |c| {
                        ops::insert_run(c, &self.author, id, run, *at, parent)
                    })
                    .map(|facts| {
                        memo.put(id.as_str(), facts);
                        id.clone()
                    });
                count(tally, &r, |t| {
                    t.runs_created += 1;
                    t.events_written += 1;
                });
                Outcome::Run(r)
            }
            Op::Transition {
                run, change, at, ..
            } => {
                let to = change.target();
                let r = self.write_run(tx, memo, run.as_str(), Statements::Several, |c, known| {
                    let spill = SpillDir {
                        paths: self.paths,
                        cap_bytes: self.cap_bytes,
                    };
                    // A fleet run ends once, by its lease holder.
                    let leased = match to.is_terminal() {
                        true => fleet::before_end(c, run.as_str(), self.author.boot_id)?,
                        false => None,
                    };
                    let facts = ops::transition(c, Some(&spill), run.as_str(), change, *at, known)?;
                    if leased.is_some() {
                        fleet::after_end(c, run.as_str(), to)?;
                    }
                    Ok(facts)
                });
                count(tally, &r, |t| {
                    t.transitions += 1;
                    t.events_written += 1;
                });
                Outcome::Unit(r)
            }
            Op::Event {
                run,
                kind,
                payload,
                at,
            } => {
                let r = self.write_run(tx, memo, run.as_str(), Statements::One, |c, known| {
                    ops::append_event(c, run.as_str(), *kind, payload, *at, known)
                });
                count(tally, &r, |t| t.events_written += 1);
                Outcome::Progress
            }
            Op::Message {
                run,
                role,
                content,
                at,
            } => {
                let written = std::cell::RefCell::new(Vec::new());
                let r = self.write_run(tx, memo, run.as_str(), Statements::One, |c, known| {
                    ops::append_message(
                        c,
                        &ops::SpillTo {
                            paths: self.paths,
                            cap_bytes: self.cap_bytes,
                            written: &written,
                        },
                        run.as_str(),
                        role,
                        content,
                        *at,
                        known,
                    )
                });
                count(tally, &r, |t| t.transcript_entries_written += 1);
                spills.settle_written(written.into_inner(), r.is_ok());
                Outcome::Progress
            }
            Op::Usage { run, delta, at } => {
                let r = self.write_run(tx, memo, run.as_str(), Statements::Several, |c, known| {
                    ops::add_usage(c, run.as_str(), delta, *at, known)
                });
                count(tally, &r, |t| t.events_written += 1);
                Outcome::Progress
            }
            Op::RequestCancel { run, at, .. } => {
                // Maintenance changes runs behind the memo's back.
                memo.clear();
                let r = in_savepoint(tx, |c| {
                    maintenance::request_cancel(c, Some(self.author.boot_id), run.as_str(), *at)
                });
                count(tally, &r, |t| {
                    if matches!(r, Ok(CancelOutcome::MarkedCancelled { .. })) {
                        t.transitions += 1;
                        t.events_written += 1;
                    }
                });
                Outcome::Cancel(r)
            }
            Op::TakeCancelRequests { .. } => {
                // Only this boot's request rows are deleted: no run changes, so the
                // memo stands (the session polls every 500 ms; clearing it made every
                // live run's next op read its run back, ~20 k instructions each).
                let r = in_savepoint(tx, |c| {
                    maintenance::take_cancel_requests(c, self.author.boot_id)
                });
                count(tally, &r, |_| {});
                Outcome::Runs(r)
            }
            Op::Prune { cutoff_ms, .. } => {
                memo.clear();
                let r = in_savepoint(tx, |c| maintenance::prune(c, self.paths, *cutoff_ms));
                count(tally, &r, |_| {});
                // Spill files go once the deletion is committed.
                let r = r.map(|(report, files)| {
                    spills.obsolete.extend(files);
                    report
                });
                Outcome::Pruned(r)
            }
            Op::Reopen { run, at, .. } => {
                // Read from the database, not the memo: the run may be another
                // boot's, and it leaves the memo's "ended" state.
                let r = in_savepoint(tx, |c| reopen::reopen(c, &self.author, run.as_str(), *at))
                    .map(|(reopened, facts)| {
                        memo.put(run.as_str(), facts);
                        reopened
                    });
                count(tally, &r, |t| {
                    t.transitions += 1;
                    t.events_written += 1;
                });
                Outcome::Reopened(r)
            }
            Op::Flush { .. } => Outcome::Unit(Ok(())),
            Op::Fleet { op, at, .. } => {
                self.fleet.set(true);
                let r = in_savepoint(tx, |c| fleet::apply(c, &self.author, op, *at)).map(
                    |(answer, facts)| {
                        if let Some((run, facts)) = facts {
                            memo.put(run.as_str(), facts);
                        }
                        answer
                    },
                );
                count(tally, &r, |_| {});
                Outcome::Fleet(r)
            }
            Op::Shutdown { .. } => Outcome::Shutdown,
        }
    }

    /// Apply an op on `run` with what the memo knows of it, and remember the
    /// result. When the memo does not know the run, or the op fails with what it
    /// knew (the memo could only be stale if something else wrote the run), the run
    /// is read from the database and the op tried once more that way, so a stale
    /// memo never loses a record.
    fn write_run(
        &self,
        tx: &dyn Db,
        memo: &mut Memo,
        run: &str,
        statements: Statements,
        f: impl Fn(&dyn Db, Option<&RunFacts>) -> Result<RunFacts, LedgerError>,
    ) -> Result<(), LedgerError> {
        let fast = match memo.get(run) {
            Some(known) if statements == Statements::One && tx.statement_atomic() => {
                f(tx, Some(known)).ok()
            }
            Some(known) => self.atomic(tx, |c| f(c, Some(known))).ok(),
            None => None,
        };
        let facts = match fast {
            Some(facts) => facts,
            None => self.atomic(tx, |c| f(c, None))?,
        };
        memo.put(run, facts);
        Ok(())
    }

    /// Run `f`, an op of several statements, so that it writes all or nothing:
    /// bare when [`ApplyCtx::bare`] — an op that failed with the connection's change
    /// count unchanged wrote nothing; one that failed after a write marks the batch
    /// [`ApplyCtx::torn`] (its writes are undone with the batch) — else in a
    /// savepoint.
    fn atomic<T>(
        &self,
        tx: &dyn Db,
        f: impl FnOnce(&dyn Db) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let before = match self.bare {
            true => tx.total_changes(),
            false => None,
        };
        let Some(before) = before else {
            return in_savepoint(tx, f);
        };
        let r = f(tx);
        if r.is_err() && tx.total_changes() != Some(before) {
            self.torn.set(true);
        }
        r
    }
}

/// The spill files one batch touches.
#[derive(Default)]
pub(crate) struct SpillFiles {
    /// Files whose rows the batch deletes: removed once it commits.
    pub obsolete: Vec<std::path::PathBuf>,
    /// Files the batch wrote for rows it inserted: removed if it rolls back.
    pub written: Vec<std::path::PathBuf>,
}

impl SpillFiles {
    /// After one message op: keep the file its committed row names (the last one
    /// written, when it succeeded); remove any written by an attempt that was
    /// rolled back (a failed op, or a first try on stale facts) at once.
    fn settle_written(&mut self, mut files: Vec<std::path::PathBuf>, ok: bool) {
        let kept = if ok { files.pop() } else { None };
        files.retain(|f| Some(f) != kept.as_ref());
        maintenance::remove_spill_files(&files);
        self.written.extend(kept);
    }
}

fn count<T>(
    tally: &mut LedgerStats,
    r: &Result<T, LedgerError>,
    on_ok: impl FnOnce(&mut LedgerStats),
) {
    match r {
        Ok(_) => {
            tally.ops_committed += 1;
            on_ok(tally);
        }
        Err(_) => tally.ops_failed += 1,
    }
}

/// How many statements an op on a known run makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Statements {
    /// One: SQLite backs a failed statement out by itself, no savepoint needed.
    One,
    /// Several: in a savepoint, so a failure undoes all of them.
    Several,
}

fn in_savepoint<T>(
    conn: &dyn Db,
    f: impl FnOnce(&dyn Db) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    // Cached statements, not rusqlite's `Savepoint` (which parses its SQL anew for
    // every op: two parses per event were a visible share of the writer's time).
    let run = |sql: &str, what: &str| conn.execute(sql, &[]).map(|_| ()).ctx(what);
    run("SAVEPOINT op", "opening a savepoint")?;
    match f(conn) {
        Ok(value) => {
            run("RELEASE op", "releasing a savepoint")?;
            Ok(value)
        }
        Err(e) => {
            // Undo this op only; the batch's other ops stay.
            run("ROLLBACK TO op", "rolling back a savepoint")?;
            run("RELEASE op", "releasing a savepoint")?;
            Err(e)
        }
    }
}

/// Answer an op that could not even start (the batch's transaction failed to begin).
/// (Counted as failed by the caller.)
fn fail_op(op: Op, err: &LedgerError) -> Option<Reply<()>> {
    fn send<T>(reply: Reply<T>, err: &LedgerError) {
        if let Some(tx) = reply {
            let _ = tx.send(Err(err.clone()));
        }
    }
    match op {
        Op::CreateRun { reply, .. } => send(reply, err),
        Op::Transition { reply, .. } => send(reply, err),
        Op::RequestCancel { reply, .. } => send(reply, err),
        Op::TakeCancelRequests { reply } => send(reply, err),
        Op::Prune { reply, .. } => send(reply, err),
        Op::Flush { reply } => send(reply, err),
        Op::Reopen { reply, .. } => send(reply, err),
        Op::Fleet { reply, .. } => reply(Err(err.clone())),
        Op::Event { .. } | Op::Message { .. } | Op::Usage { .. } => {}
        Op::Shutdown { reply } => return Some(reply),
    }
    None
}
