//! Precise reply delays. Tokio's timer wheel rounds every sleep up to its next
//! millisecond tick, which put up to ~1.5 ms of the mock's own lateness into each
//! reply — and so into every latency figure of the benchmarks, charged to brood. A
//! [`Clock`] is one thread per server that sleeps until exact deadlines (an OS timed
//! wait, precise to its timer slack, ~0.05–0.1 ms) and wakes the waiting reply.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::oneshot;

/// A deadline and whom to wake at it.
struct Alarm {
    at: Instant,
    /// Arrival order, so equal deadlines fire first-come first-served.
    order: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Alarm {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Alarm {}
impl PartialOrd for Alarm {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Alarm {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// The alarms and whether the clock was dropped, under one lock.
#[derive(Default)]
struct State {
    alarms: BinaryHeap<Reverse<Alarm>>,
    order: u64,
    closed: bool,
}

/// What the server and the clock thread share. The thread is woken only when a new
/// alarm is due before every pending one (or the clock is dropped): a fan-out's
/// alarms come in deadline order, so one wake-up a burst instead of one an alarm.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The server's alarm clock. Dropping it ends its thread (pending waits then return
/// at once).
pub(crate) struct Clock {
    shared: Arc<Shared>,
}

impl Clock {
    /// Start the clock's thread.
    pub(crate) fn start(name: String) -> std::io::Result<Clock> {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || ring(&theirs))?;
        Ok(Clock { shared })
    }

    /// Wait until `at` (returns at once when it is past or the clock is gone).
    pub(crate) async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (wake, woken) = oneshot::channel();
        let earliest = {
            let mut state = self.shared.lock();
            if state.closed {
                return;
            }
            state.order += 1;
            let order = state.order;
            state.alarms.push(Reverse(Alarm { at, order, wake }));
            state.alarms.peek().is_some_and(|a| a.0.order == order)
        };
        if earliest {
            self.shared.changed.notify_one();
        }
        let _ = woken.await;
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        let alarms = {
            let mut state = self.shared.lock();
            state.closed = true;
            std::mem::take(&mut state.alarms)
        };
        self.shared.changed.notify_one();
        // Dropping the senders lets every pending wait return.
        drop(alarms);
    }
}

/// The clock thread: sleep until the earliest alarm (or a new earlier one), fire
/// every alarm that is due — outside the lock — and go on until the clock is dropped.
fn ring(shared: &Shared) {
    let mut due = Vec::new();
    let mut state = shared.lock();
    loop {
        if state.closed {
            return;
        }
        let now = Instant::now();
        while state.alarms.peek().is_some_and(|a| a.0.at <= now) {
            if let Some(Reverse(a)) = state.alarms.pop() {
                due.push(a.wake);
            }
        }
        if !due.is_empty() {
            drop(state);
            for wake in due.drain(..) {
                let _ = wake.send(());
            }
            state = shared.lock();
            continue;
        }
        state = match state.alarms.peek().map(|a| a.0.at) {
            Some(at) => {
                let wait = at.saturating_duration_since(now);
                match shared.changed.wait_timeout(state, wait) {
                    Ok((s, _)) => s,
                    Err(p) => p.into_inner().0,
                }
            }
            None => match shared.changed.wait(state) {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            },
        };
    }
}
