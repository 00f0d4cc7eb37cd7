//! How a parent learns that its fleet children ended (docs/FLEET.md, "Completions
//! pushed through the database"): one connection per session `LISTEN`s on
//! `brood_run_done` (started on first use, on a thread of its own that also makes
//! the connection: registering never waits on the database, and no lock is held
//! while it connects), and each notified run id wakes only the task waiting on that run — the
//! waiters are a map by run id, so an end costs one wake-up however many children
//! wait. A notification is only a wake-up: a waiter reads the run from the ledger
//! after registering, on each wake-up, and every [`SAFETY_POLL`]. When the listener's
//! connection was made (first, or again after it was lost), every waiter is woken to
//! read its run (an end notified before it listened is not heard).

use crate::ledger::{FleetChannel, Heard, Ledger};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How long a waiter trusts the notifications alone before it reads the ledger.
pub(crate) const SAFETY_POLL: Duration = Duration::from_secs(30);

/// The session's listener of ended fleet runs.
#[derive(Default)]
pub(crate) struct FleetWait {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// `None` until first use; `Err` (why) when listening failed (waiters then poll,
    /// and the next registration tries again).
    listener: Option<Result<(), String>>,
    /// The waiter of each run id.
    waiters: HashMap<String, Arc<Notify>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One task's registration for one run's end; unregistered when dropped.
pub(crate) struct EndWaiter {
    run: String,
    wake: Arc<Notify>,
    shared: Weak<Shared>,
}

impl EndWaiter {
    /// Resolves once the run's end may have been recorded (its notification, or the
    /// listener came back after a lost connection). A wake-up that came while
    /// nobody awaited this is kept for the next call.
    pub async fn woken(&self) {
        self.wake.notified().await
    }
}

impl Drop for EndWaiter {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut state = shared.lock();
            if state
                .waiters
                .get(&self.run)
                .is_some_and(|w| Arc::ptr_eq(w, &self.wake))
            {
                state.waiters.remove(&self.run);
            }
        }
    }
}

impl FleetWait {
    /// Register for the end of `run`, the listener started if it was not. The
    /// waiter is returned even when the ledger cannot listen (then with why, and it
    /// is never woken: read the ledger every [`SAFETY_POLL`]).
    pub fn register(&self, ledger: &Arc<Ledger>, run: &str) -> (EndWaiter, Option<String>) {
        let mut state = self.shared.lock();
        if !matches!(state.listener, Some(Ok(()))) {
            state.listener = Some(start(ledger, Arc::downgrade(&self.shared)));
        }
        let wake = Arc::new(Notify::new());
        state.waiters.insert(run.to_string(), wake.clone());
        let why = state.listener.as_ref().and_then(|l| l.clone().err());
        let waiter = EndWaiter {
            run: run.to_string(),
            wake,
            shared: Arc::downgrade(&self.shared),
        };
        (waiter, why)
    }
}

/// Wake the waiter of each notified run — only those — and, when the listener
/// connected (first, or back after a lost connection), every waiter (an end
/// notified before it listened was not heard).
fn dispatch(shared: &Shared, heard: &Heard) {
    let state = shared.lock();
    if heard.reconnected {
        state.waiters.values().for_each(|w| w.notify_one());
    }
    for run in &heard.runs {
        if let Some(w) = state.waiters.get(run.as_str()) {
            w.notify_one();
        }
    }
}

/// Start the listener thread; it connects on its first wait ([`Ledger::listen`]
/// connects nothing), so this returns at once. It holds the waiters weakly: once
/// the session's supervisor (and its `FleetWait`) is gone, it ends within one
/// [`SAFETY_POLL`].
fn start(ledger: &Arc<Ledger>, shared: Weak<Shared>) -> Result<(), String> {
    let mut listener = ledger
        .listen(FleetChannel::Done)
        .map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("brood-fleet-done".into())
        .spawn(move || loop {
            if shared.strong_count() == 0 {
                return;
            }
            match listener.wait(SAFETY_POLL) {
                Ok(heard) => {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    dispatch(&shared, &heard);
                }
                // The server stayed out of reach for the ledger's `reconnect_for`:
                // waiters read the ledger every SAFETY_POLL meanwhile; try again.
                Err(_) => std::thread::sleep(Duration::from_secs(1)),
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::RunId;
    use futures::FutureExt;

    /// A registered waiter, without a listener (no database needed).
    fn waiter(w: &FleetWait, run: &str) -> EndWaiter {
        let wake = Arc::new(Notify::new());
        w.shared
            .lock()
            .waiters
            .insert(run.to_string(), wake.clone());
        EndWaiter {
            run: run.to_string(),
            wake,
            shared: Arc::downgrade(&w.shared),
        }
    }

    fn woken(w: &EndWaiter) -> bool {
        w.woken().now_or_never().is_some()
    }

    fn heard(runs: &[&str], reconnected: bool) -> Heard {
        Heard {
            runs: runs.iter().map(|r| RunId::from_string(*r)).collect(),
            reconnected,
        }
    }

    #[test]
    fn an_end_wakes_only_its_waiter_and_a_reconnection_wakes_all() {
        let w = FleetWait::default();
        let waiters: Vec<EndWaiter> = (0..1000).map(|i| waiter(&w, &format!("r{i}"))).collect();
        dispatch(&w.shared, &heard(&["r7"], false));
        let woke: Vec<usize> = (0..1000).filter(|&i| woken(&waiters[i])).collect();
        assert_eq!(woke, [7], "one end, one wake-up");
        // An end of a run nobody here waits on wakes nobody.
        dispatch(&w.shared, &heard(&["elsewhere"], false));
        assert!(waiters.iter().all(|x| !woken(x)));
        // Back after a lost connection: every waiter reads its run.
        dispatch(&w.shared, &heard(&[], true));
        assert!(waiters.iter().all(woken));
        // A dropped waiter is unregistered.
        drop(waiters);
        assert!(w.shared.lock().waiters.is_empty());
    }
}
