//! The gate between a child's spawn and its first act: `open` queues the spawn
//! record, starts the child and settles the gate once the record has committed
//! (or failed). Meanwhile the child does only CPU work (its first context and
//! toolbox), so a fan-out's preparation overlaps the commit's disk wait.

use tokio::sync::watch;

/// Whether a child's spawn record is on disk. `open` queues the record, starts the
/// child — which builds its toolbox and first context meanwhile, CPU work that
/// overlaps the commit — and settles the gate with the commit's outcome. Before
/// the gate opens a child records nothing, sends no request and calls no tool; a
/// child whose spawn did not commit (or whose `open` was dropped) never runs.
#[derive(Clone)]
pub(crate) struct SpawnGate(watch::Receiver<Option<bool>>);

impl SpawnGate {
    /// The gate and what settles it (`Some(true)`: on disk).
    pub fn new() -> (watch::Sender<Option<bool>>, SpawnGate) {
        let (tx, rx) = watch::channel(None);
        (tx, SpawnGate(rx))
    }

    /// Wait until settled and say how. A sender dropped unsettled means the `open`
    /// that queued the spawn record was cancelled (its future dropped) while the
    /// record waited for the ledger: the record is still queued, so the child must
    /// record an end of its own (`cancelled`) and give back its slot and name.
    pub async fn settled(&mut self) -> Settled {
        match self.0.wait_for(Option::is_some).await {
            Ok(v) if *v == Some(true) => Settled::OnDisk,
            Ok(_) => Settled::NotRecorded,
            Err(_) => Settled::Abandoned,
        }
    }
}

/// How a child's spawn settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The spawn record committed; the child may run.
    OnDisk,
    /// The spawn record failed; the child has no record and never runs.
    NotRecorded,
    /// The `open` was dropped before the record committed; the record is queued.
    Abandoned,
}
