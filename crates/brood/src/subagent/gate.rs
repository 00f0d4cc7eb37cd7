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

    /// Wait until settled: `true` when the spawn is on disk.
    pub async fn passed(&mut self) -> bool {
        self.0
            .wait_for(Option::is_some)
            .await
            .map(|v| *v == Some(true))
            .unwrap_or(false)
    }
}
