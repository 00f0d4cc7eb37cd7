//! Durable event log (SQLite, WAL, one group-committing writer) and its projections.
//!
//! Every run — the parent of `brood run` and each sub-agent — is a row in `runs` (the
//! projection) plus an append-only log in `events`, and its messages in `transcripts`,
//! all in `<workspace>/.brood/state/brood.db`. See `docs/LEDGER.md` for the schema,
//! the lifecycle and the export format.
//!
//! - [`Ledger::open`] starts a *boot* of a session: it takes this boot's lock, marks
//!   the unfinished runs of dead boots `interrupted`, and starts the writer thread.
//!   Writes are queued to that thread; progress (`append_event`, `append_message`,
//!   `add_usage`) is fire-and-forget, while run creation, status transitions, cancel
//!   requests and prunes return a [`Durable`] that resolves once committed.
//! - [`Ledger::open_reader`] gives a [`LedgerReader`] that registers nothing and
//!   recovers nothing: inspecting a workspace never disturbs the sessions in it.
//! - [`Ledger::open_maintenance`] gives [`LedgerMaintenance`] (cancel, prune) for a
//!   process without a boot, such as the `brood agents` CLI.
//!
//! The ledger stores JSON and strings only; it knows nothing of models, tools or agents.

mod apply;
mod boot;
mod columns;
mod db;
mod error;
mod export;
mod fleet;
mod fleet_fence;
mod fleet_handle;
mod json_text;
mod liveness;
mod maintenance;
mod memo;
mod op;
mod ops;
mod paths;
#[cfg(feature = "postgres")]
mod pg;
mod pg_url;
mod query_only;
mod queue;
mod reader;
mod reopen;
mod schema;
mod shared;
mod spill;
mod sqlite;
mod store;
mod summary;
mod types;
mod writer;

pub use error::LedgerError;
pub use export::{Export, ExportedRun, EXPORT_SCHEMA};
pub use fleet::{
    Claimed, FleetChannel, Placement, CANCEL_CHANNEL, DEFAULT_MAX_ATTEMPTS, DONE_CHANNEL,
    QUEUED_CHANNEL,
};
pub use fleet_handle::{FleetListener, Heard};
pub use json_text::JsonText;
pub use maintenance::LedgerMaintenance;
pub use pg_url::redact as redact_url;
pub use reader::LedgerReader;
pub use schema::SCHEMA_VERSION;
pub use summary::{RunSummaries, RunSummary, SUMMARY_OBJECTIVE_CHARS};
pub use types::{
    CancelOutcome, Durability, EventKind, EventRecord, LedgerOptions, LedgerStats, ListFilter,
    ListedRun, NewRun, PruneReport, RecoveryReport, Reopened, RunDetail, RunId, RunRecord,
    RunStatus, TranscriptEntry, TranscriptSlice, Transition, UsageDelta,
};
pub use writer::Durable;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;

use db::Db;
use op::Op;
use paths::LedgerPaths;
use queue::Gauge;
use reader::Current;
use store::{now_ms, Location};
use writer::{Counters, Writer};

/// One boot of a session on a workspace's ledger. Share it with `Arc`; every method
/// takes `&self` and none blocks on the database (writes are queued to the writer
/// thread). Dropping it (or [`Ledger::close`]) marks this boot's unfinished runs
/// `interrupted`, stops the writer, and releases the boot lock.
pub struct Ledger {
    paths: LedgerPaths,
    location: Location,
    session_id: String,
    boot_id: String,
    options: LedgerOptions,
    ops: Option<mpsc::Sender<Op>>,
    writer: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    /// The bound on the writer's queue (`LedgerOptions::max_queued`).
    gauge: Arc<Gauge>,
    recovery: RecoveryReport,
    /// Dropped after the writer has stopped (see `Drop`). None when the boot's
    /// liveness is held by the writer's connection (PostgreSQL's advisory lock).
    _boot_lock: Option<liveness::BootLock>,
}

impl Ledger {
    /// Open (creating or migrating) the ledger of `workspace` as a new boot. Blocking:
    /// from async code call it through `spawn_blocking` if the open may be slow.
    ///
    /// Fails with [`LedgerError::NotALedger`] (file untouched) when something other than
    /// a brood ledger sits at `.brood/state/brood.db`.
    pub fn open(workspace: &Path, options: LedgerOptions) -> Result<Ledger, LedgerError> {
        let paths = LedgerPaths::new(workspace);
        let session_id = match &options.session_id {
            Some(s) => {
                ops::validate_id("session id", s)?;
                s.clone()
            }
            None => uuid::Uuid::now_v7().to_string(),
        };
        let boot_id = uuid::Uuid::now_v7().to_string();
        let location = Location::from_url(options.url.as_deref())?;
        let db: Box<dyn Db + Send> = match &location {
            Location::Workspace => {
                store::open_writer(&paths, options.durability, options.busy_timeout)?
            }
            #[cfg(feature = "postgres")]
            Location::Postgres(url) => {
                pg::open_writer(url, &paths, options.durability, options.reconnect_for)?
            }
        };
        let (lock, recovery) =
            boot::start(&*db, &paths, &boot_id, &session_id, options.reconnect_for)?;

        let counters = Arc::new(Counters::default());
        let gauge = Arc::new(Gauge::new(options.max_queued));
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            db,
            paths: paths.clone(),
            session_id: session_id.clone(),
            boot_id: boot_id.clone(),
            workspace: paths.workspace.to_string_lossy().into_owned(),
            cap_bytes: options.transcript_cap_bytes,
            max_batch: options.max_batch,
            counters: Arc::clone(&counters),
            gauge: Arc::clone(&gauge),
            memo: Default::default(),
            fence: Default::default(),
        };
        let niceness = options.writer_niceness;
        let handle = std::thread::Builder::new()
            .name("brood-ledger-writer".into())
            .spawn(move || {
                lower_priority(niceness);
                writer.run(rx)
            })
            .map_err(|e| LedgerError::io(&paths.db, e))?;
        Ok(Ledger {
            paths,
            location,
            session_id,
            boot_id,
            options,
            ops: Some(tx),
            writer: Some(handle),
            counters,
            gauge,
            recovery,
            _boot_lock: lock,
        })
    }

    /// A read-only view for a process that is not a session (the CLI): no boot is
    /// registered and nothing is recovered. "Current session" means the sessions with
    /// a live boot, or the most recent one when none is alive. A workspace without a
    /// ledger gives [`LedgerError::Missing`]; nothing is created.
    pub fn open_reader(workspace: &Path) -> Result<LedgerReader, LedgerError> {
        Self::open_reader_at(workspace, None)
    }

    /// [`Ledger::open_reader`] of the ledger at `url` (`None`: the workspace's SQLite
    /// file; `postgres://…`: that database). A database without a ledger gives
    /// [`LedgerError::Missing`].
    pub fn open_reader_at(
        workspace: &Path,
        url: Option<&str>,
    ) -> Result<LedgerReader, LedgerError> {
        let location = Location::from_url(url)?;
        LedgerReader::open(LedgerPaths::new(workspace), &location, Current::Live)
    }

    /// Look at the ledger of `workspace` without writing anything (`brood doctor`):
    /// its database path and schema version, `None` when there is no ledger yet.
    /// Fails like [`Ledger::open`] would on a file that is not ours or too new.
    pub fn inspect(workspace: &Path) -> Result<(std::path::PathBuf, Option<i64>), LedgerError> {
        let paths = LedgerPaths::new(workspace);
        let version = match schema::inspect(&paths.db)? {
            schema::Found::Ledger(v) => Some(v),
            schema::Found::Absent | schema::Found::Empty => None,
        };
        Ok((paths.db, version))
    }

    /// [`Ledger::inspect`] of the ledger at `url` (`None`: the workspace's SQLite file,
    /// as `inspect`): where it is, as shown to people (a PostgreSQL URL with its
    /// password hidden), and its schema version, `None` when there is no ledger yet.
    /// For PostgreSQL this connects and reads the version; nothing is created.
    pub fn inspect_at(
        workspace: &Path,
        url: Option<&str>,
    ) -> Result<(String, Option<i64>), LedgerError> {
        match Location::from_url(url)? {
            Location::Workspace => {
                let (db, version) = Self::inspect(workspace)?;
                Ok((db.display().to_string(), version))
            }
            #[cfg(feature = "postgres")]
            Location::Postgres(target) => Ok((target.shown(), pg::inspect(&target)?)),
        }
    }

    /// How connections to the ledger at `url` use TLS, in words (`brood doctor`;
    /// docs/LEDGER.md "TLS"), `None` for the workspace's SQLite file. Connects to
    /// nothing; fails as [`Ledger::open`] would on a bad `sslmode` or root file.
    pub fn tls_at(url: Option<&str>) -> Result<Option<String>, LedgerError> {
        match Location::from_url(url)? {
            Location::Workspace => Ok(None),
            #[cfg(feature = "postgres")]
            Location::Postgres(target) => Ok(Some(target.tls_state())),
        }
    }

    /// Cancel and prune for a process that is not a session (the CLI). Registers no
    /// boot and recovers nothing. A workspace without a ledger gives `Missing`.
    pub fn open_maintenance(workspace: &Path) -> Result<LedgerMaintenance, LedgerError> {
        Self::open_maintenance_at(workspace, None)
    }

    /// [`Ledger::open_maintenance`] of the ledger at `url` (see
    /// [`Ledger::open_reader_at`]).
    pub fn open_maintenance_at(
        workspace: &Path,
        url: Option<&str>,
    ) -> Result<LedgerMaintenance, LedgerError> {
        let location = Location::from_url(url)?;
        LedgerMaintenance::open(LedgerPaths::new(workspace), &location)
    }

    /// This session's id (its runs carry it).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }
    /// This process's boot id (a crashed boot's runs are recovered by the next open).
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }
    /// The workspace root (canonicalized when it exists).
    pub fn workspace(&self) -> &Path {
        &self.paths.workspace
    }
    /// The database file.
    pub fn db_path(&self) -> &Path {
        &self.paths.db
    }
    /// The options it was opened with.
    pub fn options(&self) -> &LedgerOptions {
        &self.options
    }
    /// What this open found and repaired from dead boots.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }
    /// What the writer has committed so far (events written, batches, …).
    pub fn stats(&self) -> LedgerStats {
        LedgerStats {
            queued: self.gauge.depth() as u64,
            queue_peak: self.gauge.peak() as u64,
            ..self.counters.snapshot()
        }
    }

    /// Backpressure: resolves at once while the writer's queue holds fewer than
    /// [`LedgerOptions::max_queued`] operations, else once the writer has committed
    /// enough of them (for as long as another process holds the write lock), or when
    /// the writer has stopped (the next write then says so). Writes themselves never
    /// wait and are never dropped: a producer of progress awaits this before each
    /// burst of writes (the agent loop does, before every model step), which keeps the
    /// queue, and the memory it holds, bounded. See docs/ARCHITECTURE.md, "Failure
    /// model".
    pub async fn ready(&self) {
        self.gauge.room().await
    }

    /// Record a new run (status `pending`, with its `spawned` event). Resolves with the
    /// run's id once it is on disk: await it before starting a child that may write.
    pub fn create_run(&self, run: NewRun) -> Durable<RunId> {
        let id = run.id.clone().unwrap_or_default();
        if let Err(e) = ops::validate_id("run id", id.as_str()) {
            return Durable::failed(e);
        }
        self.durable(|reply| Op::CreateRun {
            id,
            run: Box::new(run),
            at: now_ms(),
            reply,
        })
    }

    /// Change a run's status (validated against the lifecycle, see [`RunStatus`]) and
    /// append the matching event. An invalid change resolves to
    /// [`LedgerError::InvalidTransition`] and writes nothing.
    pub fn transition(&self, run: &RunId, change: Transition) -> Durable<()> {
        self.durable(|reply| Op::Transition {
            run: run.clone(),
            change,
            at: now_ms(),
            reply,
        })
    }

    /// Queue a transition without waiting for it (fire-and-forget): it is ordered
    /// before every operation queued after it and committed with the next group, but
    /// it does not make the writer commit at once. An invalid or failed transition is
    /// counted in `stats().ops_failed`.
    pub fn queue_transition(&self, run: &RunId, change: Transition) -> Result<(), LedgerError> {
        self.send(Op::Transition {
            run: run.clone(),
            change,
            at: now_ms(),
            reply: None,
        })
    }

    /// `pending → queued`.
    pub fn mark_queued(&self, run: &RunId) -> Durable<()> {
        self.transition(run, Transition::Queued)
    }
    /// `pending | queued → running`.
    pub fn mark_running(&self, run: &RunId) -> Durable<()> {
        self.transition(run, Transition::Running)
    }
    /// `running → completed` with its result.
    pub fn complete(&self, run: &RunId, result: Value) -> Durable<()> {
        self.transition(run, Transition::Completed { result })
    }
    /// `→ failed` with the error (and a partial result, if any).
    pub fn fail(
        &self,
        run: &RunId,
        error: impl Into<String>,
        result: Option<Value>,
    ) -> Durable<()> {
        self.transition(
            run,
            Transition::Failed {
                error: error.into(),
                result,
            },
        )
    }
    /// `→ cancelled` with a reason.
    pub fn cancel(&self, run: &RunId, reason: impl Into<String>) -> Durable<()> {
        self.transition(
            run,
            Transition::Cancelled {
                reason: reason.into(),
            },
        )
    }
    /// `→ interrupted` with a reason.
    pub fn interrupt(&self, run: &RunId, reason: impl Into<String>) -> Durable<()> {
        self.transition(
            run,
            Transition::Interrupted {
                reason: reason.into(),
            },
        )
    }

    /// Reopen a run that ended without finishing — `interrupted`, `cancelled` or
    /// `failed`, or still unfinished in a boot whose process died — so that this
    /// boot continues it under the same id: it goes back to `running` in this
    /// session and boot (so this boot's close or crash marks it again), its
    /// `status_reason`, `ended_at` and `error` are cleared, and a `resumed` event
    /// records where it was (the earlier events stay). A `completed` run, or one
    /// still running in a live process (this one included), is
    /// [`LedgerError::NotResumable`] and nothing is written.
    pub fn reopen(&self, run: &RunId) -> Durable<Reopened> {
        self.durable(|reply| Op::Reopen {
            run: run.clone(),
            at: now_ms(),
            reply,
        })
    }

    /// Append a progress event (fire-and-forget; committed with the next group).
    /// Lifecycle kinds are refused with [`LedgerError::ReservedEventKind`]: they are
    /// written by [`Ledger::create_run`] and [`Ledger::transition`]. An event for an
    /// unknown run is dropped by the writer and counted in `stats().ops_failed`.
    pub fn append_event(
        &self,
        run: &RunId,
        kind: EventKind,
        payload: Value,
    ) -> Result<(), LedgerError> {
        if kind.is_lifecycle() {
            return Err(LedgerError::ReservedEventKind {
                kind: kind.as_str().to_string(),
            });
        }
        self.send(Op::Event {
            run: run.clone(),
            kind,
            payload,
            at: now_ms(),
        })
    }

    /// Append a transcript message (fire-and-forget). A content over
    /// `transcript_cap_bytes` is stored capped and spilled in full to
    /// `.brood/state/spill/<run>-<seq>.txt`.
    pub fn append_message(
        &self,
        run: &RunId,
        role: &str,
        content: Value,
    ) -> Result<(), LedgerError> {
        self.send(Op::Message {
            run: run.clone(),
            role: role.to_string(),
            content,
            at: now_ms(),
        })
    }

    /// Add steps and token usage to a run's counters and append a `usage` event with
    /// the delta (fire-and-forget).
    pub fn add_usage(&self, run: &RunId, delta: UsageDelta) -> Result<(), LedgerError> {
        self.send(Op::Usage {
            run: run.clone(),
            delta,
            at: now_ms(),
        })
    }

    /// Ask for a run to be cancelled. If its boot is alive (this one included), a cancel
    /// request is recorded for the owner to pick up with
    /// [`Ledger::take_cancel_requests`]; if its boot is dead, the run is marked
    /// `cancelled` directly. A finished run gives `InvalidTransition`.
    pub fn request_cancel(&self, run: &RunId) -> Durable<CancelOutcome> {
        self.durable(|reply| Op::RequestCancel {
            run: run.clone(),
            at: now_ms(),
            reply,
        })
    }

    /// Take (and delete) the cancel requests for runs of this boot. Poll it (e.g. every
    /// second) and cancel the runs it returns.
    pub fn take_cancel_requests(&self) -> Durable<Vec<RunId>> {
        self.durable(|reply| Op::TakeCancelRequests { reply })
    }

    /// Delete every run tree whose runs all finished more than `older_than` ago, with
    /// events, transcripts and spill files. Trees with an unfinished run are kept whole.
    pub fn prune(&self, older_than: Duration) -> Durable<PruneReport> {
        let cutoff_ms = maintenance::cutoff(older_than);
        self.durable(|reply| Op::Prune { cutoff_ms, reply })
    }

    /// Resolves once everything queued before it is committed.
    pub fn flush(&self) -> Durable<()> {
        self.durable(|reply| Op::Flush { reply })
    }

    /// Mark this boot's unfinished runs `interrupted` ("session ended …"), commit
    /// everything queued (waiting out another connection's lock as long as it takes),
    /// and stop the writer. Ok only if every write of this ledger is on disk; else
    /// [`LedgerError::Unwritten`] says how many were not. Dropping the ledger does the
    /// same but cannot report a failure.
    pub async fn close(mut self) -> Result<(), LedgerError> {
        let (tx, rx) = oneshot::channel();
        let sent = self.send(Op::Shutdown { reply: Some(tx) });
        self.ops = None;
        sent?;
        Durable::waiting(rx).await?;
        match self.counters.snapshot().ops_failed {
            0 => Ok(()),
            failed => Err(LedgerError::Unwritten { failed }),
        }
    }

    /// A reader on its own connection whose "current session" is this ledger's session.
    /// Blocking; see [`Ledger::read`] for async code.
    pub fn reader(&self) -> Result<LedgerReader, LedgerError> {
        LedgerReader::open(
            self.paths.clone(),
            &self.location,
            Current::Session(self.session_id.clone()),
        )
    }

    /// Run a read on a fresh reader in a blocking task (needs a Tokio runtime), e.g.
    /// `ledger.read(move |r| r.transcript(&id, 0, 50)).await`. It reads this ledger's
    /// own writes: everything queued before the call (fire-and-forget progress, a
    /// child's queued terminal record) is committed first.
    pub async fn read<T, F>(&self, f: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&LedgerReader) -> Result<T, LedgerError> + Send + 'static,
    {
        // A writer that has stopped cannot flush; the read still shows what is on disk.
        let _ = self.flush().await;
        let paths = self.paths.clone();
        let location = self.location.clone();
        let current = Current::Session(self.session_id.clone());
        tokio::task::spawn_blocking(move || f(&LedgerReader::open(paths, &location, current)?))
            .await
            .map_err(|e| LedgerError::ReadTask {
                detail: e.to_string(),
            })?
    }

    /// Listing of this session's runs (or all, with `include_archived`).
    pub async fn list_runs(&self, filter: ListFilter) -> Result<Vec<ListedRun>, LedgerError> {
        self.read(move |r| r.list_runs(filter)).await
    }

    /// The same listing as [`RunSummaries`] (see [`LedgerReader::list_summaries`]).
    pub async fn list_summaries(&self, filter: ListFilter) -> Result<RunSummaries, LedgerError> {
        self.read(move |r| r.list_summaries(filter)).await
    }

    /// One run with its events.
    pub async fn get_run(&self, id: &RunId) -> Result<RunDetail, LedgerError> {
        let id = id.clone();
        self.read(move |r| r.get_run(&id)).await
    }

    /// A transcript slice (see [`LedgerReader::transcript`]).
    pub async fn transcript(
        &self,
        id: &RunId,
        from: u64,
        limit: usize,
    ) -> Result<TranscriptSlice, LedgerError> {
        let id = id.clone();
        self.read(move |r| r.transcript(&id, from, limit)).await
    }

    /// The path of the lock file this boot holds (for diagnostics).
    pub fn boot_lock_path(&self) -> PathBuf {
        self.paths.boot_lock(&self.boot_id)
    }

    fn send(&self, op: Op) -> Result<(), LedgerError> {
        let Some(ops) = &self.ops else {
            return Err(LedgerError::WriterStopped);
        };
        // Counted before it is sent, so the writer never counts out an op not yet in.
        self.gauge.queued();
        ops.send(op).map_err(|_| {
            self.gauge.settled(1);
            LedgerError::WriterStopped
        })
    }

    fn durable<T>(&self, make: impl FnOnce(op::Reply<T>) -> Op) -> Durable<T> {
        let (tx, rx) = oneshot::channel();
        match self.send(make(Some(tx))) {
            Ok(()) => Durable::waiting(rx),
            Err(e) => Durable::failed(e),
        }
    }
}

/// Give the calling thread (only it: on Linux a thread has its own nice value) the
/// nice value `niceness`, when above 0. Best effort: a refusal leaves it as it was.
fn lower_priority(niceness: i32) {
    #[cfg(target_os = "linux")]
    if niceness > 0 {
        // SAFETY: plain syscalls on the calling thread's own id; no memory is passed.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, niceness.min(19));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = niceness;
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if self.ops.is_some() {
            let _ = self.send(Op::Shutdown { reply: None });
            self.ops = None;
        }
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
        // `_boot_lock` is dropped after this: the lock is held until the writer is done.
    }
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("db", &self.paths.db)
            .field("session_id", &self.session_id)
            .field("boot_id", &self.boot_id)
            .finish()
    }
}
