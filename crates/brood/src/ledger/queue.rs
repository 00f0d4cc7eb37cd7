//! The bound on the writer's queue: how many operations are queued or in the batch
//! being committed, and an async wait for room (backpressure, never loss).
//!
//! Enqueueing never blocks and never drops: the `append_*` calls are synchronous and
//! run on the async worker threads, so they only count what they queue. The bound is
//! kept where a producer can wait: [`Gauge::room`] (behind `Ledger::ready`) resolves
//! while fewer than `bound` ops are outstanding, else once the writer has committed
//! enough of them, or at once when the writer has stopped. The agent loop awaits it
//! before every model step, so while the writer waits (another process holds the
//! write lock) runs stop taking steps instead of growing the queue; the queue then
//! holds at most `bound` plus one step's records per run that was mid-step.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Outstanding operations (queued, or taken into the batch being committed) and the
/// producers waiting for room.
#[derive(Debug)]
pub(crate) struct Gauge {
    depth: AtomicUsize,
    peak: AtomicUsize,
    bound: usize,
    closed: AtomicBool,
    room: Notify,
}

impl Gauge {
    /// A gauge that has room while fewer than `bound` ops are outstanding (0 counts as 1).
    pub fn new(bound: usize) -> Self {
        Gauge {
            depth: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            bound: bound.max(1),
            closed: AtomicBool::new(false),
            room: Notify::new(),
        }
    }

    /// One op is about to be queued.
    pub fn queued(&self) {
        let depth = self.depth.fetch_add(1, Ordering::SeqCst).saturating_add(1);
        self.peak.fetch_max(depth, Ordering::Relaxed);
    }

    /// `n` ops are settled (committed, rejected, or never sent): wake the producers
    /// waiting for room when this brings the queue below its bound.
    pub fn settled(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.depth.fetch_sub(n, Ordering::SeqCst);
        if before >= self.bound && before.saturating_sub(n) < self.bound {
            self.room.notify_waiters();
        }
    }

    /// The writer has stopped: nobody will make room again, so nobody waits for it.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.room.notify_waiters();
    }

    /// Ops outstanding now.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::SeqCst)
    }

    /// The most ops ever outstanding at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    fn has_room(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || self.depth.load(Ordering::SeqCst) < self.bound
    }

    /// Resolves once the queue is below its bound (at once if it is), or the writer
    /// has stopped.
    pub async fn room(&self) {
        loop {
            if self.has_room() {
                return;
            }
            // Registered before the second look, so a wake-up between the look and
            // the wait is not missed.
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }
}

/// Closes the gauge when the writer thread ends, however it ends.
pub(crate) struct CloseOnDrop(pub std::sync::Arc<Gauge>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn poll_once(f: std::pin::Pin<&mut impl Future<Output = ()>>) -> Poll<()> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn room_waits_at_the_bound_and_wakes_when_it_drains_or_closes() {
        let g = Gauge::new(2);
        g.queued();
        assert_eq!(poll_once(pin!(g.room())), Poll::Ready(()));
        g.queued();
        let mut waiting = pin!(g.room());
        assert_eq!(poll_once(waiting.as_mut()), Poll::Pending);
        g.queued(); // a producer that did not wait: counted, never refused
        assert_eq!((g.depth(), g.peak()), (3, 3));
        g.settled(1); // 3 → 2: still at the bound
        assert_eq!(poll_once(waiting.as_mut()), Poll::Pending);
        g.settled(1);
        assert_eq!(poll_once(waiting.as_mut()), Poll::Ready(()));
        g.queued();
        let mut waiting = pin!(g.room());
        assert_eq!(poll_once(waiting.as_mut()), Poll::Pending);
        g.close();
        assert_eq!(poll_once(waiting.as_mut()), Poll::Ready(()));
        assert_eq!(g.peak(), 3);
    }
}
