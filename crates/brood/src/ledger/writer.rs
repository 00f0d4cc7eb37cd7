//! The single writer: a dedicated OS thread that owns the read-write connection and
//! applies queued operations with *group commit*: it takes everything waiting in its
//! channel (up to `max_batch`), applies each operation in its own savepoint (so one
//! rejected operation does not undo the others; an op of one statement needs none, as
//! SQLite backs out a failed statement by itself), commits once, and only then answers
//! the callers that wait for durability ([`Durable`]). It keeps a [`Memo`] of the
//! live runs it writes so their ops skip their lookups. Writes wait, never vanish: a
//! `BEGIN IMMEDIATE` or `COMMIT` refused for a lock held past the busy timeout (or a
//! transient I/O error) is retried with backoff for as long as the ledger lives
//! (counted in `busy_retries`, `waiting_since_ms` set meanwhile); only an op that
//! itself fails (its savepoint rolled back) is rejected, alone.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;

use super::db::{Db, Tuning};
use super::error::{LedgerError, SqlContext};
use super::fleet::{self, FleetOp, FleetReply};
use super::maintenance;
use super::memo::{Memo, RunFacts};
use super::ops::{self, Author};
use super::paths::LedgerPaths;
use super::queue::{CloseOnDrop, Gauge};
use super::reopen;
use super::shared::SpillDir;
use super::store::now_ms;
use super::types::{
    CancelOutcome, EventKind, LedgerStats, NewRun, PruneReport, Reopened, RunId, Transition,
    UsageDelta,
};

/// Reason written on this boot's unfinished runs when the ledger closes.
const SESSION_ENDED_REASON: &str = "session ended before the run finished";

/// Where a durable operation's answer goes (None for fire-and-forget).
pub(crate) type Reply<T> = Option<oneshot::Sender<Result<T, LedgerError>>>;

/// One queued operation. `at` is when the caller asked (Unix ms).
pub(crate) enum Op {
    CreateRun {
        id: RunId,
        run: Box<NewRun>,
        at: i64,
        reply: Reply<RunId>,
    },
    Transition {
        run: RunId,
        change: Transition,
        at: i64,
        reply: Reply<()>,
    },
    Event {
        run: RunId,
        kind: EventKind,
        payload: Value,
        at: i64,
    },
    Message {
        run: RunId,
        role: String,
        content: Value,
        at: i64,
    },
    Usage {
        run: RunId,
        delta: UsageDelta,
        at: i64,
    },
    RequestCancel {
        run: RunId,
        at: i64,
        reply: Reply<CancelOutcome>,
    },
    TakeCancelRequests {
        reply: Reply<Vec<RunId>>,
    },
    Prune {
        cutoff_ms: i64,
        reply: Reply<PruneReport>,
    },
    Reopen {
        run: RunId,
        at: i64,
        reply: Reply<Reopened>,
    },
    Flush {
        reply: Reply<()>,
    },
    /// Enqueue, claim, lease renewal (`super::fleet`).
    Fleet {
        op: FleetOp,
        at: i64,
        reply: FleetReply,
    },
    /// Mark this boot's unfinished runs interrupted, end the boot, stop the thread.
    Shutdown {
        reply: Reply<()>,
    },
}

impl Op {
    /// Whether someone waits for this op's commit (or it stops the writer).
    fn awaited(&self) -> bool {
        match self {
            Op::CreateRun { reply, .. } => reply.is_some(),
            Op::Transition { reply, .. } => reply.is_some(),
            Op::RequestCancel { reply, .. } => reply.is_some(),
            Op::TakeCancelRequests { reply } => reply.is_some(),
            Op::Prune { reply, .. } => reply.is_some(),
            Op::Flush { reply } => reply.is_some(),
            Op::Reopen { reply, .. } => reply.is_some(),
            Op::Shutdown { .. } | Op::Fleet { .. } => true,
            Op::Event { .. } | Op::Message { .. } | Op::Usage { .. } => false,
        }
    }
}

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

/// Sends one operation's answer once the commit outcome is known.
type Settle = Box<dyn FnOnce(&Result<(), LedgerError>) + Send>;

fn settle<T: Send + 'static>(
    settles: &mut Vec<Settle>,
    reply: Reply<T>,
    result: Result<T, LedgerError>,
) {
    if let Some(tx) = reply {
        settles.push(Box::new(move |commit| {
            let answer = match (result, commit) {
                (Err(e), _) => Err(e),
                (Ok(v), Ok(())) => Ok(v),
                (Ok(_), Err(e)) => Err(e.clone()),
            };
            let _ = tx.send(answer);
        }));
    }
}

/// The writer thread's state.
pub(crate) struct Writer {
    pub db: Box<dyn Db>,
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
}

impl Writer {
    /// Run until a `Shutdown` op arrives or every sender is gone.
    pub fn run(mut self, rx: Receiver<Op>) {
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
    fn commit_batch(&mut self, batch: Vec<Op>) -> Option<Reply<()>> {
        let ops = batch.len();
        let mut settles: Vec<Settle> = Vec::with_capacity(batch.len());
        let mut tally = LedgerStats::default();
        let mut shutdown = None;
        let mut spills = SpillFiles::default();
        let mut wait = Wait::new(&self.counters);
        let db = &*self.db;
        let begun = loop {
            match db.begin() {
                Err(e) if e.transient() => wait.again(),
                other => break other.ctx("starting a group commit"),
            }
        };
        let commit = match begun {
            Err(e) => {
                for op in batch {
                    if let Some(reply) = fail_op(op, &e, &mut tally) {
                        shutdown = Some(reply);
                    }
                }
                Err(e)
            }
            Ok(()) => {
                let ctx = ApplyCtx {
                    paths: &self.paths,
                    author: Author {
                        session_id: &self.session_id,
                        boot_id: &self.boot_id,
                        workspace: &self.workspace,
                    },
                    cap_bytes: self.cap_bytes,
                };
                for op in batch {
                    if let Some(reply) = ctx.apply(
                        db,
                        &mut self.memo,
                        op,
                        &mut settles,
                        &mut tally,
                        &mut spills,
                    ) {
                        shutdown = Some(reply);
                    }
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
        match &commit {
            Ok(()) => {
                tally.batches_committed = 1;
                maintenance::remove_spill_files(&spills.obsolete);
                self.counters.add(&tally);
            }
            Err(_) => {
                // The rows that named this batch's spill files were rolled back.
                maintenance::remove_spill_files(&spills.written);
                // What the memo learned from this batch was never committed.
                self.memo.clear();
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
        for s in settles {
            s(&commit);
        }
        shutdown
    }

    /// Mark this boot's unfinished runs interrupted and the boot ended.
    fn shutdown(&mut self, reply: Reply<()>) {
        let result = (|| {
            let mut wait = Wait::new(&self.counters);
            let db = &*self.db;
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
        })();
        if let Some(tx) = reply {
            let _ = tx.send(result);
        }
    }
}

struct ApplyCtx<'a> {
    paths: &'a LedgerPaths,
    author: Author<'a>,
    cap_bytes: usize,
}

impl ApplyCtx<'_> {
    /// Apply one op in its own savepoint and queue its answer.
    fn apply(
        &self,
        tx: &dyn Db,
        memo: &mut Memo,
        op: Op,
        settles: &mut Vec<Settle>,
        tally: &mut LedgerStats,
        spills: &mut SpillFiles,
    ) -> Option<Reply<()>> {
        match op {
            Op::CreateRun { id, run, at, reply } => {
                let parent = run.parent_id.as_ref().and_then(|p| memo.get(p.as_str()));
                let r = in_savepoint(tx, |c| {
                    ops::insert_run(c, &self.author, &id, &run, at, parent)
                })
                .map(|facts| {
                    memo.put(id.as_str(), facts);
                    id
                });
                count(tally, &r, |t| {
                    t.runs_created += 1;
                    t.events_written += 1;
                });
                settle(settles, reply, r);
            }
            Op::Transition {
                run,
                change,
                at,
                reply,
            } => {
                let to = change.target();
                let r = write_run(tx, memo, run.as_str(), Statements::Several, |c, known| {
                    let spill = SpillDir {
                        paths: self.paths,
                        cap_bytes: self.cap_bytes,
                    };
                    // A fleet run ends once, by its lease holder.
                    let leased = match to.is_terminal() {
                        true => fleet::before_end(c, run.as_str(), self.author.boot_id)?,
                        false => None,
                    };
                    let facts = ops::transition(c, Some(&spill), run.as_str(), &change, at, known)?;
                    if leased.is_some() {
                        fleet::after_end(c, run.as_str(), to)?;
                    }
                    Ok(facts)
                });
                count(tally, &r, |t| {
                    t.transitions += 1;
                    t.events_written += 1;
                });
                settle(settles, reply, r);
            }
            Op::Event {
                run,
                kind,
                payload,
                at,
            } => {
                let r = write_run(tx, memo, run.as_str(), Statements::One, |c, known| {
                    ops::append_event(c, run.as_str(), kind, &payload, at, known)
                });
                count(tally, &r, |t| t.events_written += 1);
            }
            Op::Message {
                run,
                role,
                content,
                at,
            } => {
                let written = std::cell::RefCell::new(Vec::new());
                let r = write_run(tx, memo, run.as_str(), Statements::One, |c, known| {
                    ops::append_message(
                        c,
                        &ops::SpillTo {
                            paths: self.paths,
                            cap_bytes: self.cap_bytes,
                            written: &written,
                        },
                        run.as_str(),
                        &role,
                        &content,
                        at,
                        known,
                    )
                });
                count(tally, &r, |t| t.transcript_entries_written += 1);
                spills.settle_written(written.into_inner(), r.is_ok());
            }
            Op::Usage { run, delta, at } => {
                let r = write_run(tx, memo, run.as_str(), Statements::Several, |c, known| {
                    ops::add_usage(c, run.as_str(), &delta, at, known)
                });
                count(tally, &r, |t| t.events_written += 1);
            }
            Op::RequestCancel { run, at, reply } => {
                // Maintenance changes runs behind the memo's back.
                memo.clear();
                let r = in_savepoint(tx, |c| {
                    maintenance::request_cancel(c, Some(self.author.boot_id), run.as_str(), at)
                });
                count(tally, &r, |t| {
                    if matches!(r, Ok(CancelOutcome::MarkedCancelled { .. })) {
                        t.transitions += 1;
                        t.events_written += 1;
                    }
                });
                settle(settles, reply, r);
            }
            Op::TakeCancelRequests { reply } => {
                memo.clear();
                let r = in_savepoint(tx, |c| {
                    maintenance::take_cancel_requests(c, self.author.boot_id)
                });
                count(tally, &r, |_| {});
                settle(settles, reply, r);
            }
            Op::Prune { cutoff_ms, reply } => {
                memo.clear();
                let r = in_savepoint(tx, |c| maintenance::prune(c, self.paths, cutoff_ms));
                count(tally, &r, |_| {});
                // Spill files go once the deletion is committed.
                let r = r.map(|(report, files)| {
                    spills.obsolete.extend(files);
                    report
                });
                settle(settles, reply, r);
            }
            Op::Reopen { run, at, reply } => {
                // Read from the database, not the memo: the run may be another
                // boot's, and it leaves the memo's "ended" state.
                let r = in_savepoint(tx, |c| reopen::reopen(c, &self.author, run.as_str(), at))
                    .map(|(reopened, facts)| {
                        memo.put(run.as_str(), facts);
                        reopened
                    });
                count(tally, &r, |t| {
                    t.transitions += 1;
                    t.events_written += 1;
                });
                settle(settles, reply, r);
            }
            Op::Flush { reply } => settle(settles, reply, Ok(())),
            Op::Fleet { op, at, reply } => {
                let r = in_savepoint(tx, |c| fleet::apply(c, &self.author, &op, at)).map(
                    |(answer, facts)| {
                        if let Some((run, facts)) = facts {
                            memo.put(run.as_str(), facts);
                        }
                        answer
                    },
                );
                count(tally, &r, |_| {});
                settles.push(Box::new(move |commit| {
                    reply(match (r, commit) {
                        (Err(e), _) => Err(e),
                        (Ok(v), Ok(())) => Ok(v),
                        (Ok(_), Err(e)) => Err(e.clone()),
                    })
                }));
            }
            Op::Shutdown { reply } => return Some(reply),
        }
        None
    }
}

/// The spill files one batch touches.
#[derive(Default)]
struct SpillFiles {
    /// Files whose rows the batch deletes: removed once it commits.
    obsolete: Vec<std::path::PathBuf>,
    /// Files the batch wrote for rows it inserted: removed if it rolls back.
    written: Vec<std::path::PathBuf>,
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

/// Apply an op on `run` with what the memo knows of it, and remember the result. When
/// the memo does not know the run, or the op fails with what it knew (the memo could
/// only be stale if something else wrote the run), the run is read from the database
/// and the op tried once more that way, so a stale memo never loses a record.
fn write_run(
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
        Some(known) => in_savepoint(tx, |c| f(c, Some(known))).ok(),
        None => None,
    };
    let facts = match fast {
        Some(facts) => facts,
        None => in_savepoint(tx, |c| f(c, None))?,
    };
    memo.put(run, facts);
    Ok(())
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

/// Answer an op that could not even start (the batch's transaction failed to begin).
fn fail_op(op: Op, err: &LedgerError, tally: &mut LedgerStats) -> Option<Reply<()>> {
    fn send<T>(reply: Reply<T>, err: &LedgerError) {
        if let Some(tx) = reply {
            let _ = tx.send(Err(err.clone()));
        }
    }
    tally.ops_failed += 1;
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
        Op::Shutdown { reply } => {
            tally.ops_failed -= 1;
            return Some(reply);
        }
    }
    None
}
