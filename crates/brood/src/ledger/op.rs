//! One operation queued to the ledger's writer thread (`super::writer`), with where
//! its answer goes: made by the `Ledger` handle's methods, applied by
//! `super::apply`, committed in the writer's group commit.

use serde_json::Value;
use tokio::sync::oneshot;

use super::error::LedgerError;
use super::fleet::{FleetOp, FleetReply};
use super::types::{CancelOutcome, PruneReport, Reopened};
use super::types::{EventKind, NewRun, RunId, Transition, UsageDelta};

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
    pub(crate) fn awaited(&self) -> bool {
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
