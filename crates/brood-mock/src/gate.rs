//! A gate a test opens: replies made with [`crate::MockReply::until`] wait behind it,
//! so a test can hold requests in flight (children observably running) and let
//! them go when it has seen what it wanted — no sleeps.

use std::sync::Arc;
use tokio::sync::watch;

/// Closed until [`Gate::open`]; clones share one gate.
#[derive(Clone)]
pub struct Gate(Arc<watch::Sender<bool>>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate(Arc::new(watch::channel(false).0))
    }

    /// Let every reply waiting behind it (and every later one) through.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    /// Whether it was opened.
    pub fn is_open(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolve once the gate is open.
    pub(crate) async fn opened(&self) {
        let mut rx = self.0.subscribe();
        // `wait_for` fails only when the sender is gone, and we hold it.
        let _ = rx.wait_for(|open| *open).await;
    }
}

impl Default for Gate {
    fn default() -> Gate {
        Gate::new()
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Gate").field(&self.is_open()).finish()
    }
}
