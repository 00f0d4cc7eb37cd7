//! How a parent learns that its fleet children ended (docs/FLEET.md, "Completions
//! pushed through the database"): one connection per session `LISTEN`s on
//! `brood_run_done` (started on first use, on a thread of its own: the listener
//! blocks), and each notified run id is broadcast to the children's tasks waiting in
//! this process. A notification is only a wake-up: a waiter reads the run from the
//! ledger after subscribing, on each notification of its id, when it fell behind the
//! broadcast, and every [`SAFETY_POLL`] (a notification sent while the connection was
//! down is lost).

use crate::ledger::{FleetChannel, Ledger};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// How long a waiter trusts the notifications alone before it reads the ledger.
pub(crate) const SAFETY_POLL: Duration = Duration::from_secs(30);
/// Run ids buffered per waiter before it falls behind (and then reads the ledger).
const BACKLOG: usize = 1024;

/// The session's listener of ended fleet runs.
#[derive(Default)]
pub(crate) struct FleetWait {
    /// `None` until first use; `Err` when listening failed (waiters then poll).
    tx: Mutex<Option<Result<Arc<broadcast::Sender<String>>, String>>>,
}

impl FleetWait {
    /// A receiver of ended run ids, the listener started if it was not; `Err` (why)
    /// when the ledger cannot listen.
    pub fn subscribe(&self, ledger: &Arc<Ledger>) -> Result<broadcast::Receiver<String>, String> {
        let mut slot = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Ok(tx)) = slot.as_ref() {
            return Ok(tx.subscribe());
        }
        let started = start(ledger);
        let rx = started
            .as_ref()
            .map(|tx| tx.subscribe())
            .map_err(Clone::clone);
        *slot = Some(started);
        rx
    }
}

/// Start the listener thread. It holds the sender weakly: once the session's
/// supervisor (and its `FleetWait`) is gone, it ends within one [`SAFETY_POLL`].
fn start(ledger: &Arc<Ledger>) -> Result<Arc<broadcast::Sender<String>>, String> {
    let mut listener = ledger
        .listen(FleetChannel::Done)
        .map_err(|e| e.to_string())?;
    let tx = Arc::new(broadcast::channel(BACKLOG).0);
    let weak = Arc::downgrade(&tx);
    std::thread::Builder::new()
        .name("brood-fleet-done".into())
        .spawn(move || loop {
            let Some(out) = weak.upgrade() else { return };
            drop(out);
            match listener.wait(SAFETY_POLL) {
                Ok(runs) => {
                    let Some(out) = weak.upgrade() else { return };
                    for run in runs {
                        let _ = out.send(run.to_string());
                    }
                }
                // Waiters read the ledger every SAFETY_POLL without it.
                Err(_) => return,
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(tx)
}
