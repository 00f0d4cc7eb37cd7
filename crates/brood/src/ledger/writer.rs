//! The single writer: a dedicated OS thread that owns the read-write connection and
//! applies queued operations with *group commit*: it takes everything waiting in its
//! channel (up to `max_batch`), applies each operation atomically (so one rejected
//! operation does not undo the others: on SQLite without savepoints, checked, and
//! again with a savepoint per op should one fail half-way — `super::apply`), commits
//! once, and only then answers
//! the callers that wait for durability ([`Durable`]). It keeps a [`Memo`] of the
//! live runs it writes so their ops skip their lookups. Writes wait, never vanish: a
//! `BEGIN IMMEDIATE` or `COMMIT` refused for a lock held past the busy timeout (or a
//! transient I/O error) is retried with backoff for as long as the ledger lives
//! (counted in `busy_retries`, `waiting_since_ms` set meanwhile); only an op that
//! itself fails (its savepoint rolled back) is rejected, alone. A batch whose
//! connection was lost (PostgreSQL) is committed once on a new connection: applied
//! again only if its COMMIT did not take effect (`Db::reconnect`, counted in
//! `reconnects`). Applying the ops is `super::apply`; the ops are `super::op`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::apply::{deliver, ApplyCtx, Outcome, SpillFiles};
use super::db::{Db, Tuning};
use super::error::{LedgerError, SqlContext};
use super::fleet;
use super::fleet_fence::Fence;
use super::maintenance;
use super::memo::Memo;
use super::op::{Op, Reply};
use super::ops::{self, Author};
use super::paths::LedgerPaths;
use super::queue::{CloseOnDrop, Gauge};
use super::store::now_ms;
use super::types::LedgerStats;

/// Reason written on this boot's unfinished runs when the ledger closes.
const SESSION_ENDED_REASON: &str = "session ended before the run finished";

/// How long a batch nobody waits on may wait for more ops before it commits: about
/// the gap between a run's progress events and the awaited record that follows them.
/// Progress is never more than this late on disk.
const LINGER: Duration = Duration::from_millis(1);

/// A future that resolves once the operation's transaction has committed (or failed).
/// The operation is queued when the method returning this is called, not when the
/// future is first polled, so queue order is call order.
#[must_use = "the operation is queued either way; await this to know it is on disk"]
pub struct Durable<T> {
    state: DurableState<T>,
}

enum DurableState<T> {
    Waiting(oneshot::Receiver<Result<T, LedgerError>>),
    Done(Option<LedgerError>),
}

impl<T> Durable<T> {
    pub(crate) fn waiting(rx: oneshot::Receiver<Result<T, LedgerError>>) -> Self {
        Durable {
            state: DurableState::Waiting(rx),
        }
    }
    pub(crate) fn failed(err: LedgerError) -> Self {
        Durable {
            state: DurableState::Done(Some(err)),
        }
    }
}

// Nothing in a Durable is structurally pinned.
impl<T> Unpin for Durable<T> {}

impl<T> Future for Durable<T> {
    type Output = Result<T, LedgerError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            DurableState::Waiting(rx) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(_)) => Poll::Ready(Err(LedgerError::WriterStopped)),
                Poll::Pending => Poll::Pending,
            },
            DurableState::Done(err) => {
                Poll::Ready(Err(err.take().unwrap_or(LedgerError::WriterStopped)))
            }
        }
    }
}

/// The writer's counters, shared with the `Ledger` handle for [`LedgerStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    runs_created: AtomicU64,
    events_written: AtomicU64,
    transcript_entries_written: AtomicU64,
    transitions: AtomicU64,
    batches_committed: AtomicU64,
    ops_committed: AtomicU64,
    ops_failed: AtomicU64,
    busy_retries: AtomicU64,
    /// Connections made again after one was lost (PostgreSQL).
    pub reconnects: AtomicU64,
    /// Unix ms the current wait began; 0 when the writer is not waiting.
    waiting_since_ms: AtomicI64,
}

impl Counters {
    pub fn snapshot(&self) -> LedgerStats {
        LedgerStats {
            runs_created: self.runs_created.load(Ordering::Relaxed),
            events_written: self.events_written.load(Ordering::Relaxed),
            transcript_entries_written: self.transcript_entries_written.load(Ordering::Relaxed),
            transitions: self.transitions.load(Ordering::Relaxed),
            batches_committed: self.batches_committed.load(Ordering::Relaxed),
            ops_committed: self.ops_committed.load(Ordering::Relaxed),
            ops_failed: self.ops_failed.load(Ordering::Relaxed),
            busy_retries: self.busy_retries.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            waiting_since_ms: match self.waiting_since_ms.load(Ordering::Relaxed) {
                0 => None,
                ms => Some(ms),
            },
            // The queue is the Ledger's to report.
            queued: 0,
            queue_peak: 0,
        }
    }

    fn add(&self, t: &LedgerStats) {
        let pairs = [
            (&self.runs_created, t.runs_created),
            (&self.events_written, t.events_written),
            (
                &self.transcript_entries_written,
                t.transcript_entries_written,
            ),
            (&self.transitions, t.transitions),
            (&self.batches_committed, t.batches_committed),
            (&self.ops_committed, t.ops_committed),
            (&self.ops_failed, t.ops_failed),
            (&self.busy_retries, t.busy_retries),
        ];
        for (counter, n) in pairs {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// The writer thread's state.
pub(crate) struct Writer {
    pub db: Box<dyn Db + Send>,
    pub paths: LedgerPaths,
    pub session_id: String,
    pub boot_id: String,
    pub workspace: String,
    pub cap_bytes: usize,
    pub max_batch: usize,
    pub counters: Arc<Counters>,
    /// The queue's bound: ops are counted out once their batch is settled.
    pub gauge: Arc<Gauge>,
    pub memo: Memo,
    /// The fleet runs this boot claimed and has not ended (`super::fleet_fence`).
    pub fence: Fence,
}

impl Writer {
    /// Run until a `Shutdown` op arrives or every sender is gone, with the
    /// statements of the writer's every-run ops held prepared where the backend
    /// can (`Db::hold`).
    pub fn run(self, rx: Receiver<Op>) {
        let Writer {
            db,
            paths,
            session_id,
            boot_id,
            workspace,
            cap_bytes,
            max_batch,
            counters,
            gauge,
            memo,
            fence,
        } = self;
        let held = db.hold(&ops::WRITER_STATEMENTS);
        Running {
            db: held.as_deref().unwrap_or(&*db),
            paths,
            session_id,
            boot_id,
            workspace,
            cap_bytes,
            max_batch,
            counters,
            gauge,
            memo,
            fence,
        }
        .run(rx);
    }
}

/// The writer thread at work: [`Writer`] with its connection lent.
struct Running<'d> {
    db: &'d dyn Db,
    paths: LedgerPaths,
    session_id: String,
    boot_id: String,
    workspace: String,
    cap_bytes: usize,
    max_batch: usize,
    counters: Arc<Counters>,
    gauge: Arc<Gauge>,
    memo: Memo,
    fence: Fence,
}

impl Running<'_> {
    fn run(mut self, rx: Receiver<Op>) {
        // Producers waiting for room stop waiting once the writer is gone.
        let _close = CloseOnDrop(Arc::clone(&self.gauge));
        // `Ledger::open` commits its boot row and any recovery without checkpointing;
        // fold the WAL into the database now, before the first batch. A failure here
        // only leaves the WAL for the next automatic checkpoint.
        let _ = self.db.tune(Tuning::CheckpointPassive);
        loop {
            let Ok(first) = rx.recv() else {
                self.shutdown(None);
                return;
            };
            let mut batch = vec![first];
            let max = self.max_batch.max(1);
            take_waiting(&rx, &mut batch, max);
            // Nobody waits on a batch of progress alone: let it linger a moment, so
            // the awaited operation that usually follows (a spawn, a terminal record)
            // joins it instead of waiting behind its fsync. An awaited op ends the
            // linger at once.
            if !batch.iter().any(Op::awaited) {
                let until = Instant::now() + LINGER;
                while batch.len() < max {
                    let left = until.saturating_duration_since(Instant::now());
                    let Ok(op) = rx.recv_timeout(left) else { break };
                    let awaited = op.awaited();
                    batch.push(op);
                    if awaited {
                        take_waiting(&rx, &mut batch, max);
                        break;
                    }
                }
            }
            if let Some(reply) = self.commit_batch(batch) {
                self.shutdown(reply);
                return;
            }
        }
    }

    /// Apply and commit one batch. Returns the shutdown reply if the batch asked to stop.
    ///
    /// A batch whose connection was lost (PostgreSQL: a server restart, a network
    /// drop, `pg_terminate_backend`) is not failed: the writer connects again
    /// ([`Db::reconnect`], bounded by `LedgerOptions::reconnect_for`), learns whether
    /// the batch's COMMIT took effect before the connection went (its
    /// acknowledgement may be what was lost), and applies the batch again, whole,
    /// only when it did not — so each op is committed once.
    fn commit_batch(&mut self, batch: Vec<Op>) -> Option<Reply<()>> {
        let ops = batch.len();
        let mut reconnects = 0;
        let mut attempt = loop {
            let mut attempt = self.attempt(&batch);
            if attempt.commit.is_ok() || !self.db.connection_lost() {
                break attempt;
            }
            reconnects += 1;
            self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
            match self.db.reconnect() {
                Ok(true) => {
                    attempt.commit = Ok(());
                    break attempt;
                }
                Ok(false) if reconnects < MAX_RECONNECTS => {
                    self.forget(&attempt.spills);
                }
                Ok(false) => break attempt,
                Err(e) => {
                    attempt.commit = Err(e);
                    break attempt;
                }
            }
        };
        let Attempt {
            outcomes,
            commit,
            ref mut tally,
            spills,
            fleet,
            ..
        } = attempt;
        match &commit {
            Ok(()) => {
                if fleet || !self.fence.is_empty() {
                    self.fence.settle(&batch, &outcomes);
                }
                tally.batches_committed = 1;
                maintenance::remove_spill_files(&spills.obsolete);
                self.counters.add(tally);
            }
            Err(_) => {
                self.forget(&spills);
                let lost = tally.ops_committed;
                self.counters.add(&LedgerStats {
                    ops_failed: tally.ops_failed + lost,
                    ..LedgerStats::default()
                });
            }
        }
        // Counted out before anyone hears back, so a caller that awaited an op sees
        // the queue without it.
        self.gauge.settled(ops);
        let mut shutdown = None;
        for (op, outcome) in batch.into_iter().zip(outcomes) {
            if let Some(reply) = deliver(op, outcome, &commit) {
                shutdown = Some(reply);
            }
        }
        shutdown
    }

    /// Begin, apply every op of `batch` and commit: its run ops without savepoints
    /// where the database lets that be checked, and should one of them fail after
    /// writing (the batch is *torn*, `super::apply`), once more with a savepoint
    /// per op.
    ///
    /// Should the database end the transaction itself at an op (SQLite rolls the
    /// whole transaction back on a trigger's `RAISE(ROLLBACK)`, and may on an I/O
    /// error, a full disk or out of memory), the ops after it would otherwise run
    /// outside any transaction, each committed alone yet answered with the batch's
    /// failure: that op is answered with its error and the rest of the batch is
    /// applied again without it.
    fn attempt(&mut self, batch: &[Op]) -> Attempt {
        let mut ops: Vec<&Op> = batch.iter().collect();
        // Where each of `ops` is in `batch`, and the ops left out with their answers.
        let mut at: Vec<usize> = (0..batch.len()).collect();
        let mut left_out: Vec<(usize, Outcome)> = Vec::new();
        loop {
            let bare = self.db.total_changes().is_some();
            let mut attempt = self.attempt_once(&ops, bare);
            if attempt.torn {
                self.forget(&attempt.spills);
                attempt = self.attempt_once(&ops, false);
            }
            let Some(k) = attempt.ended_at else {
                left_out.sort_by_key(|(i, _)| *i);
                attempt.tally.ops_failed += left_out.len() as u64;
                for (i, outcome) in left_out {
                    attempt.outcomes.insert(i, outcome);
                }
                return attempt;
            };
            self.forget(&attempt.spills);
            let err = LedgerError::Sqlite {
                context: "applying a group commit".into(),
                detail: "the database rolled the transaction back at this operation".into(),
            };
            let outcome = attempt
                .outcomes
                .pop()
                .map_or(Outcome::NotRun, |o| o.failed(&err));
            left_out.push((at.remove(k), outcome));
            ops.remove(k);
        }
    }

    /// Forget a try that is not in the database (rolled back, or its commit
    /// failed): the spill files its rows named, and what the memo learned from it.
    fn forget(&mut self, spills: &SpillFiles) {
        maintenance::remove_spill_files(&spills.written);
        self.memo.clear();
    }

    /// Begin, apply every op of `batch` and commit, once; a torn try (only when
    /// `bare`) is rolled back instead of committed.
    fn attempt_once(&mut self, batch: &[&Op], bare: bool) -> Attempt {
        let mut torn = false;
        let mut ended_at = None;
        let mut fleet = false;
        let mut tally = LedgerStats::default();
        let mut spills = SpillFiles::default();
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut wait = Wait::new(&self.counters);
        let db = self.db;
        let begun = loop {
            match db.begin() {
                Err(e) if e.transient() => wait.again(),
                other => break other.ctx("starting a group commit"),
            }
        };
        // A worker writes into a fleet run only while it holds its lease, checked
        // in this transaction (`super::fleet_fence`); a check that failed fails the
        // batch as a BEGIN that failed does.
        let begun = begun.and_then(|()| {
            self.fence.check(db, &self.boot_id, batch).inspect_err(|_| {
                let _ = db.rollback();
            })
        });
        let commit = match begun {
            Err(e) => {
                let unanswered = batch
                    .iter()
                    .filter(|op| !matches!(op, Op::Shutdown { .. }))
                    .count();
                tally.ops_failed = unanswered as u64;
                outcomes.extend(batch.iter().map(|_| Outcome::NotRun));
                Err(e)
            }
            Ok(lost) => {
                let ctx = ApplyCtx {
                    paths: &self.paths,
                    author: Author {
                        session_id: &self.session_id,
                        boot_id: &self.boot_id,
                        workspace: &self.workspace,
                    },
                    cap_bytes: self.cap_bytes,
                    bare,
                    torn: std::cell::Cell::new(false),
                    fleet: std::cell::Cell::new(false),
                };
                for (k, op) in batch.iter().enumerate() {
                    if let Some(refused) = lost.refuse(op, &mut tally) {
                        outcomes.push(refused);
                        continue;
                    }
                    outcomes.push(ctx.apply(db, &mut self.memo, op, &mut tally, &mut spills));
                    if ctx.torn.get() {
                        torn = true;
                        break;
                    }
                    if !db.in_transaction() && db.statement_atomic() {
                        ended_at = Some(k);
                        break;
                    }
                }
                fleet = ctx.fleet.get();
                if torn || ended_at.is_some() {
                    let rolled_back = db.rollback().ctx("rolling back a torn group commit");
                    wait.done();
                    return Attempt {
                        outcomes,
                        commit: rolled_back,
                        tally,
                        spills,
                        torn,
                        ended_at,
                        fleet,
                    };
                }
                // A COMMIT refused for a lock (or a transient I/O error) leaves the
                // transaction open, and it can be committed later: wait, never drop.
                let committed = loop {
                    match db.commit() {
                        Err(e) if e.transient() && db.in_transaction() => wait.again(),
                        other => break other.ctx("committing a group commit"),
                    }
                };
                // Rolls back only what a failed COMMIT left open (a no-op after COMMIT).
                let _ = db.rollback();
                committed
            }
        };
        wait.done();
        Attempt {
            outcomes,
            commit,
            tally,
            spills,
            torn,
            ended_at,
            fleet,
        }
    }

    /// Mark this boot's unfinished runs interrupted and the boot ended (again on a
    /// new connection if the one it had was lost).
    fn shutdown(&mut self, reply: Reply<()>) {
        let mut reconnects = 0;
        let result = loop {
            match self.close_boot() {
                Err(_) if self.db.connection_lost() && reconnects < MAX_RECONNECTS => {
                    reconnects += 1;
                    self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                    match self.db.reconnect() {
                        Ok(true) => break Ok(()),
                        Ok(false) => {}
                        Err(e) => break Err(e),
                    }
                }
                other => break other,
            }
        };
        if let Some(tx) = reply {
            let _ = tx.send(result);
        }
    }

    fn close_boot(&mut self) -> Result<(), LedgerError> {
        let mut wait = Wait::new(&self.counters);
        let db = self.db;
        loop {
            match db.begin() {
                Err(e) if e.transient() => wait.again(),
                other => break other.ctx("starting the closing transaction")?,
            }
        }
        let runs = match ops::interrupt_boot(db, &self.boot_id, SESSION_ENDED_REASON, now_ms())
            .and_then(|runs| fleet::release_boot(db, &self.boot_id).map(|()| runs))
        {
            Ok(runs) => runs,
            Err(e) => {
                let _ = db.rollback();
                return Err(e);
            }
        };
        let committed = loop {
            match db.commit() {
                Err(e) if e.transient() && db.in_transaction() => wait.again(),
                other => break other.ctx("committing the closing transaction"),
            }
        };
        let _ = db.rollback();
        wait.done();
        committed?;
        self.counters.add(&LedgerStats {
            transitions: runs.len() as u64,
            events_written: runs.len() as u64,
            batches_committed: 1,
            ..LedgerStats::default()
        });
        Ok(())
    }
}

/// One try at a batch: each op's answer, the commit's outcome, what it counted and
/// the spill files it touched.
struct Attempt {
    outcomes: Vec<Outcome>,
    commit: Result<(), LedgerError>,
    tally: LedgerStats,
    spills: SpillFiles,
    /// An op failed after writing, so the try was rolled back (`super::apply`).
    torn: bool,
    /// The database ended the transaction itself at this op (of those tried), so
    /// the try stopped there.
    ended_at: Option<usize>,
    /// A fleet op was applied (a claim may have to be remembered by the fence).
    fleet: bool,
}

/// Reconnections one batch may take before its ops are failed (each bounded by
/// `LedgerOptions::reconnect_for`): a batch that loses its connection every time it
/// runs is not tried forever.
const MAX_RECONNECTS: u32 = 5;

/// A writer waiting for the database: counts each retry, marks since when it waits
/// (shown in [`LedgerStats`]), and backs off between attempts (the busy timeout
/// already waited inside SQLite).
struct Wait<'a> {
    counters: &'a Counters,
    attempts: u32,
}

/// Longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl<'a> Wait<'a> {
    fn new(counters: &'a Counters) -> Self {
        Wait {
            counters,
            attempts: 0,
        }
    }

    fn again(&mut self) {
        if self.attempts == 0 {
            self.counters
                .waiting_since_ms
                .store(now_ms().max(1), Ordering::Relaxed);
        }
        self.attempts = self.attempts.saturating_add(1);
        self.counters.busy_retries.fetch_add(1, Ordering::Relaxed);
        let pause = Duration::from_millis(10u64 << self.attempts.min(7));
        std::thread::sleep(pause.min(MAX_BACKOFF));
    }

    fn done(self) {
        if self.attempts > 0 {
            self.counters.waiting_since_ms.store(0, Ordering::Relaxed);
        }
    }
}

/// Move the ops already queued into `batch`, up to `max` in all.
fn take_waiting(rx: &Receiver<Op>, batch: &mut Vec<Op>, max: usize) {
    while batch.len() < max {
        match rx.try_recv() {
            Ok(op) => batch.push(op),
            Err(_) => break,
        }
    }
}
