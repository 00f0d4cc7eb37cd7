//! Precise reply delays. Tokio's timer wheel rounds every sleep up to its next
//! millisecond tick, which put up to ~1.5 ms of the mock's own lateness into each
//! reply — and so into every latency figure of the benchmarks, charged to brood. A
//! [`Clock`] is one thread per server that sleeps until exact deadlines (an OS timed
//! wait, precise to its timer slack, ~0.05–0.1 ms) and wakes the waiting reply.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
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

/// The server's alarm clock. Dropping it ends its thread (pending waits then return
/// at once).
pub(crate) struct Clock {
    tx: Mutex<mpsc::Sender<(Instant, oneshot::Sender<()>)>>,
}

impl Clock {
    /// Start the clock's thread.
    pub(crate) fn start(name: String) -> std::io::Result<Clock> {
        let (tx, rx) = mpsc::channel::<(Instant, oneshot::Sender<()>)>();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || ring(rx))?;
        Ok(Clock { tx: Mutex::new(tx) })
    }

    /// Wait until `at` (returns at once when it is past or the clock is gone).
    pub(crate) async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (wake, woken) = oneshot::channel();
        let sent = {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            tx.send((at, wake)).is_ok()
        };
        if sent {
            let _ = woken.await;
        }
    }
}

/// The clock thread: keep the alarms in deadline order, sleep until the next one
/// (or a new alarm), fire every alarm that is due.
fn ring(rx: mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
    let mut alarms: BinaryHeap<Reverse<Alarm>> = BinaryHeap::new();
    let mut order = 0u64;
    loop {
        let now = Instant::now();
        while alarms.peek().is_some_and(|a| a.0.at <= now) {
            if let Some(Reverse(a)) = alarms.pop() {
                let _ = a.wake.send(());
            }
        }
        let next = match alarms.peek() {
            Some(a) => rx.recv_timeout(a.0.at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, wake)) => {
                order += 1;
                alarms.push(Reverse(Alarm { at, order, wake }));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
