//! The ledger's vocabulary: run ids, statuses and their allowed transitions, event
//! kinds, and the records that go in and come out. Payloads are plain JSON; the
//! ledger knows nothing about models, tools or agents.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::json_text::JsonText;

/// The id of one run: a random (v4) UUID in its hyphenated form. Random rather than
/// time-ordered so that a short prefix (as the CLI accepts) is already unique.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    /// A fresh id. Pass it in [`NewRun::id`] when the caller needs the id before the
    /// run is written.
    pub fn new() -> Self {
        // Version 7: ordered by creation within the process, so runs created in the
        // same millisecond still list in creation order (`ORDER BY created_at, id`).
        RunId(uuid::Uuid::now_v7().hyphenated().to_string())
    }
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// Wrap a stored id. Not validated: an id that names no run fails at use with
    /// [`LedgerError::UnknownRun`](super::LedgerError::UnknownRun).
    pub fn from_string(id: impl Into<String>) -> Self {
        RunId(id.into())
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a run is in its life.
///
/// ```text
/// Pending ──► Queued ──► Running ──► Completed
///    │          │  ▲        │
///    └──────────┼──┘ (Pending → Running directly)
///    │          │           │
///    └──────────┴───────────┴──► Failed | Cancelled | Interrupted
/// ```
///
/// `Completed` is only reachable from `Running` (a run that never started produced
/// nothing). `Failed`, `Cancelled` and `Interrupted` are reachable from every
/// non-terminal state: a queued run can be cancelled, can fail to start, and is
/// interrupted if its process exits. Terminal states never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Recorded, not yet given a slot.
    Pending,
    /// Waiting for a slot (the concurrency limit is reached).
    Queued,
    /// Running: its steps are being taken.
    Running,
    /// Ended with an answer.
    Completed,
    /// Ended with an error.
    Failed,
    /// Stopped on request (a reason is recorded).
    Cancelled,
    /// Cut short when its process died (found by the next open).
    Interrupted,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Pending,
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Interrupted,
    ];

    /// The stored (and printed) name: `pending`, `queued`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// Whether the status never changes again (completed, failed, cancelled, interrupted).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed
                | RunStatus::Failed
                | RunStatus::Cancelled
                | RunStatus::Interrupted
        )
    }

    /// Whether the lifecycle allows `self → to` (see the diagram on [`RunStatus`]).
    pub fn can_transition_to(self, to: RunStatus) -> bool {
        use RunStatus::*;
        matches!(
            (self, to),
            (Pending, Queued | Running)
                | (Queued, Running)
                | (Running, Completed)
                | (Pending | Queued | Running, Failed | Cancelled | Interrupted)
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown run status '{s}'"))
    }
}

/// What an event records. Lifecycle kinds (`spawned`, `queued`, `started`,
/// `completed`, `failed`, `cancelled`, `interrupted`) are written by the ledger itself
/// with the matching run creation or status transition; the others are appended by
/// the caller as progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// The run was recorded.
    Spawned,
    /// The run waits for a slot.
    Queued,
    /// The run got its slot and started.
    Started,
    /// A model request was sent.
    ModelRequest,
    /// A model answer came back.
    ModelResponse,
    /// A tool call started.
    ToolStarted,
    /// A tool call finished.
    ToolFinished,
    /// Tokens (and cost) a step was charged.
    Usage,
    /// A message was queued for the run (delivered at its next step).
    MessageQueued,
    /// Something the session could not give as configured (e.g. a sandbox feature
    /// this kernel lacks), recorded once per session on its first root run.
    Warning,
    /// The project instruction files (AGENTS.md …) the session's prompts carry,
    /// recorded once per session on its first root run.
    Instructions,
    /// A run's git worktree (`isolation = "worktree"`): created, settled, merged,
    /// discarded, orphaned or pruned (see docs/LEDGER.md).
    Worktree,
    /// The run completed.
    Completed,
    /// The run failed.
    Failed,
    /// The run was cancelled.
    Cancelled,
    /// The run was interrupted.
    Interrupted,
    /// A run that had ended without finishing (interrupted, cancelled, failed) was
    /// reopened to continue under a new boot (`Ledger::reopen`, `brood agents resume`).
    Resumed,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 17] = [
        EventKind::Spawned,
        EventKind::Queued,
        EventKind::Started,
        EventKind::ModelRequest,
        EventKind::ModelResponse,
        EventKind::ToolStarted,
        EventKind::ToolFinished,
        EventKind::Usage,
        EventKind::MessageQueued,
        EventKind::Warning,
        EventKind::Instructions,
        EventKind::Worktree,
        EventKind::Completed,
        EventKind::Failed,
        EventKind::Cancelled,
        EventKind::Interrupted,
        EventKind::Resumed,
    ];

    /// The stored (and printed) name: `spawned`, `model_request`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Spawned => "spawned",
            EventKind::Queued => "queued",
            EventKind::Started => "started",
            EventKind::ModelRequest => "model_request",
            EventKind::ModelResponse => "model_response",
            EventKind::ToolStarted => "tool_started",
            EventKind::ToolFinished => "tool_finished",
            EventKind::Usage => "usage",
            EventKind::MessageQueued => "message_queued",
            EventKind::Warning => "warning",
            EventKind::Instructions => "instructions",
            EventKind::Worktree => "worktree",
            EventKind::Completed => "completed",
            EventKind::Failed => "failed",
            EventKind::Cancelled => "cancelled",
            EventKind::Interrupted => "interrupted",
            EventKind::Resumed => "resumed",
        }
    }

    /// Kinds written only by run creation and status transitions.
    pub fn is_lifecycle(self) -> bool {
        matches!(
            self,
            EventKind::Spawned
                | EventKind::Queued
                | EventKind::Started
                | EventKind::Completed
                | EventKind::Failed
                | EventKind::Cancelled
                | EventKind::Interrupted
                | EventKind::Resumed
        )
    }

    /// The event a transition into `status` writes.
    pub fn for_status(status: RunStatus) -> EventKind {
        match status {
            RunStatus::Pending => EventKind::Spawned,
            RunStatus::Queued => EventKind::Queued,
            RunStatus::Running => EventKind::Started,
            RunStatus::Completed => EventKind::Completed,
            RunStatus::Failed => EventKind::Failed,
            RunStatus::Cancelled => EventKind::Cancelled,
            RunStatus::Interrupted => EventKind::Interrupted,
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown event kind '{s}'"))
    }
}

/// A run to record. `objective` is required; everything else is optional. Session,
/// boot, root and depth are filled in by the ledger (root and depth from the parent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// Pre-allocated id (see [`RunId::new`]); a fresh one is made when `None`.
    pub id: Option<RunId>,
    /// The parent run; it must already be recorded (or queued before this one).
    pub parent_id: Option<RunId>,
    /// A short name for the run.
    pub name: Option<String>,
    /// Its role (explore, plan, …).
    pub role: Option<String>,
    /// Its agent type (a definition's name).
    pub agent_type: Option<String>,
    /// What it was asked to do.
    pub objective: String,
    /// The model it runs on.
    pub model: Option<String>,
    /// The provider it talks to.
    pub provider: Option<String>,
    /// The run's working directory; the ledger's workspace when `None`.
    pub workspace: Option<String>,
    /// The git branch it works on, if any.
    pub git_branch: Option<String>,
    /// Its model has no price: its cost is unknown (`RunRecord::cost_usd` stays
    /// `None`, also while it has made no request).
    pub unpriced: bool,
    /// What the run was granted, as the layer above records it (the sub-agent
    /// layer: its tool names after every narrowing, its permissions and rules),
    /// kept in its `spawned` event's payload under `grant` so a resume can never
    /// grant it more. `None`: not recorded. Carried as encoded JSON, written as it is.
    #[serde(default)]
    pub grant: Option<JsonText>,
}

impl NewRun {
    /// A run with `objective` and nothing else set.
    pub fn new(objective: impl Into<String>) -> Self {
        NewRun {
            objective: objective.into(),
            ..Default::default()
        }
    }
}

/// A status change, with what it carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// Waiting for a slot.
    Queued,
    /// Started.
    Running,
    /// Ended with an answer.
    Completed {
        /// The run's structured result.
        result: Value,
    },
    /// Ended with an error.
    Failed {
        /// What went wrong.
        error: String,
        /// Whatever result it had.
        result: Option<Value>,
    },
    /// Stopped on request.
    Cancelled {
        /// Who asked, and why.
        reason: String,
    },
    /// Cut short by its process's death.
    Interrupted {
        /// What was found.
        reason: String,
    },
}

impl Transition {
    /// The status it leads to.
    pub fn target(&self) -> RunStatus {
        match self {
            Transition::Queued => RunStatus::Queued,
            Transition::Running => RunStatus::Running,
            Transition::Completed { .. } => RunStatus::Completed,
            Transition::Failed { .. } => RunStatus::Failed,
            Transition::Cancelled { .. } => RunStatus::Cancelled,
            Transition::Interrupted { .. } => RunStatus::Interrupted,
        }
    }
}

/// Progress to add to a run's counters (all deltas, not totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageDelta {
    /// Model steps.
    pub steps: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens served from the provider's cache.
    pub cached_input_tokens: u64,
    /// What these steps cost in USD, priced now (when they are recorded); `None`
    /// when they have no price (the model is unpriced or reported no usage), which
    /// leaves the run's recorded cost unknown ([`RunRecord::cost_usd`]).
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// One run as stored (the projection of its events).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub id: RunId,
    /// Its parent's id (`None`: a root).
    pub parent_id: Option<RunId>,
    /// The root of its tree.
    pub root_id: RunId,
    /// How deep it is (a root is 0).
    pub depth: u32,
    /// The session that recorded it.
    pub session_id: String,
    /// The boot (process) that ran it.
    pub session_boot_id: String,
    /// A short name.
    pub name: Option<String>,
    /// Its role (explore, plan, …).
    pub role: Option<String>,
    /// Its agent type (a definition's name).
    pub agent_type: Option<String>,
    /// What it was asked to do.
    pub objective: String,
    /// The model it ran on.
    pub model: Option<String>,
    /// The provider it talked to.
    pub provider: Option<String>,
    /// Its working directory.
    pub workspace: String,
    /// The git branch it worked on, if any.
    pub git_branch: Option<String>,
    /// Its status now.
    pub status: RunStatus,
    /// Why it has that status (a cancel or interrupt reason, an error).
    pub status_reason: Option<String>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// Model steps it took.
    pub steps: u64,
    /// Input tokens it was charged.
    pub input_tokens: u64,
    /// Output tokens it was charged.
    pub output_tokens: u64,
    /// Input tokens served from the provider's cache.
    pub cached_input_tokens: u64,
    /// What the run's model answers cost in USD, each priced when it was recorded
    /// (a later change of prices does not change it). `None` when some answer had
    /// no price, or when the cost was never recorded (`cost_recorded: false`).
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Whether the ledger recorded this run's cost as it went: `false` for runs
    /// recorded before ledger schema 4, whose cost a reader can only price at
    /// today's prices (and says so).
    #[serde(default)]
    pub cost_recorded: bool,
    /// Its result (completed runs, and failed ones that had one).
    pub result: Option<Value>,
    /// Its error, if it failed.
    pub error: Option<String>,
    /// What the reader could not make sense of in this row (a count stored as a REAL,
    /// a negative or text): that field is shown as 0 and named here, so one odd row
    /// never fails a whole listing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What [`crate::ledger::Ledger::reopen`] found and changed: the run is `running`
/// again under this boot and session, with a `resumed` event saying where it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reopened {
    /// The status it had (`interrupted`, `cancelled`, `failed`; or unfinished, when
    /// its process died and no open had recorded that yet).
    pub from: RunStatus,
    /// Why it had ended (its `status_reason`), if recorded.
    pub reason: Option<String>,
    /// The session it belonged to before.
    pub previous_session_id: String,
    /// The boot it belonged to before.
    pub previous_boot_id: String,
}

/// A run as listed: the record plus whether it belongs to an earlier session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedRun {
    #[serde(flatten)]
    /// The run.
    pub run: RunRecord,
    /// Whether it belongs to an earlier session.
    pub from_prior_session: bool,
}

/// A run with its full event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    #[serde(flatten)]
    /// The run.
    pub run: RunRecord,
    /// Whether it belongs to an earlier session.
    pub from_prior_session: bool,
    /// Its events, in order.
    pub events: Vec<EventRecord>,
}

/// One event of a run's append-only log. `seq` starts at 0 and has no gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The run it belongs to.
    pub run_id: RunId,
    /// Its place in the run's log (0, 1, 2, …).
    pub seq: u64,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// What it records.
    pub kind: EventKind,
    /// Its data (JSON; the ledger does not interpret it).
    pub payload: Value,
}

/// One transcript message. `seq` starts at 0 and has no gaps. When the content was
/// larger than the cap, `content` holds a capped copy (`truncated: true`), `full_bytes`
/// the original size and `spill_path` (relative to the workspace) the full text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// The run it belongs to.
    pub run_id: RunId,
    /// Its place in the transcript (0, 1, 2, …).
    pub seq: u64,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// Who spoke (system, user, assistant, tool).
    pub role: String,
    /// What was said (capped when `truncated`).
    pub content: Value,
    /// Whether `content` is a capped copy.
    pub truncated: bool,
    /// The original size in bytes.
    pub full_bytes: u64,
    /// The file holding the full text, relative to the workspace.
    pub spill_path: Option<String>,
}

/// A window of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptSlice {
    /// The run.
    pub run_id: RunId,
    /// The first seq asked for.
    pub from: u64,
    /// The messages, from `from` on.
    pub entries: Vec<TranscriptEntry>,
    /// How many messages the transcript has in all.
    pub total: u64,
    /// The seq to ask for next, if there is more after this slice.
    pub next_from: Option<u64>,
}

/// Which runs a listing returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Also return runs of earlier sessions (marked `from_prior_session`).
    pub include_archived: bool,
}

/// What `request_cancel` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CancelOutcome {
    /// The owning process is alive; it was asked (a cancel-request row it polls).
    Requested {
        /// The run.
        run_id: RunId,
        /// The boot that owns it.
        boot_id: String,
    },
    /// The owning process is gone; the run was marked cancelled directly.
    MarkedCancelled {
        /// The run.
        run_id: RunId,
    },
}

/// What `prune` deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Runs deleted.
    pub runs: u64,
    /// Events deleted.
    pub events: u64,
    /// Transcript entries deleted.
    pub transcript_entries: u64,
    /// Spilled messages of the deleted transcript entries: their files (removed after
    /// commit) or, on PostgreSQL, their rows in the ledger.
    pub spill_files: u64,
    /// Spill paths read from the database that were refused (not a file directly under
    /// `.brood/state/spill/`) and so not removed, each naming its row and the reason.
    #[serde(default)]
    pub refused_spill_paths: Vec<String>,
}

/// What `Ledger::open` found and repaired from boots that had died.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// Boots found dead (their lock was free).
    pub dead_boots: Vec<String>,
    /// Runs of those boots that were left non-terminal and are now `interrupted`.
    pub interrupted: Vec<RunId>,
    /// Boots found alive and left alone.
    pub live_boots: Vec<String>,
}

/// Counters of what this ledger's writer has committed, for benchmarks and health.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerStats {
    /// Runs recorded.
    pub runs_created: u64,
    /// Every event row written (lifecycle and progress).
    pub events_written: u64,
    /// Transcript entries written.
    pub transcript_entries_written: u64,
    /// Status transitions written.
    pub transitions: u64,
    /// Group-commit transactions committed.
    pub batches_committed: u64,
    /// Operations committed (sum of batch sizes).
    pub ops_committed: u64,
    /// Operations rejected (invalid transition, unknown run, …) or lost to a commit
    /// that failed for a reason other than waiting (a lock, a transient I/O error).
    pub ops_failed: u64,
    /// Times the writer found the database locked by another connection (or a
    /// transient I/O error) past the busy timeout and tried again: writes wait, they
    /// are never dropped for it.
    #[serde(default)]
    pub busy_retries: u64,
    /// Times the writer lost its connection (PostgreSQL: a server restart, a network
    /// drop) and connected again; the batch it held was committed once either way.
    #[serde(default)]
    pub reconnects: u64,
    /// Since when (Unix ms) the writer has been waiting for the database, if it is
    /// waiting now.
    #[serde(default)]
    pub waiting_since_ms: Option<i64>,
    /// Operations queued or in the batch being committed, now (see
    /// [`Ledger::ready`](super::Ledger::ready)).
    #[serde(default)]
    pub queued: u64,
    /// The most operations ever outstanding at once.
    #[serde(default)]
    pub queue_peak: u64,
}

/// How hard a commit pushes data to the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: every group commit fsyncs the WAL, so a committed (awaited)
    /// operation survives a power loss as well as a process kill. The default: group
    /// commit pays one fsync per batch, not per operation.
    #[default]
    Full,
    /// `synchronous=NORMAL`: committed operations survive a process kill (the WAL is in
    /// the OS page cache) but the last commits may be lost on power loss. For benchmarks
    /// and throwaway workspaces.
    Normal,
}

/// Knobs for [`Ledger::open`](super::Ledger::open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerOptions {
    /// The session this boot belongs to; a fresh one (UUID v7) when `None`. Pass the
    /// id of an earlier session to continue it: its runs then count as current.
    pub session_id: Option<String>,
    /// Transcript contents larger than this many bytes are capped and spilled to a file.
    pub transcript_cap_bytes: usize,
    /// How hard commits push to disk.
    pub durability: Durability,
    /// How long a write waits for another process's write transaction.
    pub busy_timeout: Duration,
    /// Most operations one group commit takes.
    pub max_batch: usize,
    /// The writer thread's nice value (Linux; 0 leaves it at the process's). The
    /// writer is bookkeeping: when the machine is busy, the runs it records — their
    /// requests, tools and parsing — get the CPU first, and the writer catches up in
    /// the model's latency (batches grow by themselves meanwhile). Awaited writes
    /// (spawns) still go ahead as soon as a core is free.
    pub writer_niceness: i32,
    /// The bound on the writer's queue, in operations (queued or being committed):
    /// [`Ledger::ready`](super::Ledger::ready) waits while this many are
    /// outstanding. Twice `max_batch` by default, so the writer always has a full
    /// batch waiting while it commits one.
    pub max_queued: usize,
    /// Where the database is: `None`, the workspace's SQLite file
    /// (`.brood/state/brood.db`); `postgres://…` (or `postgresql://…`), a PostgreSQL
    /// database (docs/LEDGER.md, "PostgreSQL"). Spill files stay in the workspace.
    pub url: Option<String>,
    /// How long a PostgreSQL ledger tries to connect again after losing its
    /// connection (a server restart, a network drop) before the writes it holds
    /// fail with [`LedgerError::Disconnected`](super::LedgerError::Disconnected)
    /// (docs/LEDGER.md, "Lost connections").
    pub reconnect_for: Duration,
}

/// The instant `within` from now, saturating: a `reconnect_for` of `Duration::MAX` (a
/// library caller's "keep trying") is a deadline a century away, not a panic.
pub(crate) fn deadline_after(within: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(within.min(CENTURY)).unwrap_or(now)
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            session_id: None,
            transcript_cap_bytes: 64 * 1024,
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(10),
            max_batch: 4096,
            writer_niceness: 5,
            max_queued: 8192,
            url: None,
            reconnect_for: Duration::from_secs(60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_follow_the_lifecycle() {
        use RunStatus::*;
        let allowed: Vec<(RunStatus, RunStatus)> = RunStatus::ALL
            .into_iter()
            .flat_map(|a| RunStatus::ALL.into_iter().map(move |b| (a, b)))
            .filter(|(a, b)| a.can_transition_to(*b))
            .collect();
        let expected = vec![
            (Pending, Queued),
            (Pending, Running),
            (Pending, Failed),
            (Pending, Cancelled),
            (Pending, Interrupted),
            (Queued, Running),
            (Queued, Failed),
            (Queued, Cancelled),
            (Queued, Interrupted),
            (Running, Completed),
            (Running, Failed),
            (Running, Cancelled),
            (Running, Interrupted),
        ];
        assert_eq!(allowed, expected);
    }

    #[test]
    fn names_round_trip_through_serde_and_from_str() {
        for k in EventKind::ALL {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json, Value::String(k.as_str().to_string()));
            assert_eq!(k.as_str().parse::<EventKind>().unwrap(), k);
        }
        for s in RunStatus::ALL {
            let json = serde_json::to_value(s).unwrap();
            assert_eq!(json, Value::String(s.as_str().to_string()));
            assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), s);
        }
        assert!("done".parse::<RunStatus>().is_err());
    }
}
