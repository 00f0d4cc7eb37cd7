//! Running one step's tool calls: at most `limit` at once, their results in call
//! order — and **one call started per poll of the run's task**.
//!
//! A call that opens a child (`agent_open`, `task`) spawns the child's task and
//! then waits for its spawn record; the child's first request is built and sent
//! by that task. Started all in one poll (as `buffered` does), a step's calls
//! kept the worker until the last of them was waiting, so each child spawned on
//! the way sat in the worker's queue behind the rest of its siblings' opens —
//! unless the other worker woke in time to steal it, which on a busy machine it
//! often does not (BENCHMARKS.md, spawn latency, "the start round"). Between two
//! starts the task now steps aside once (to the back of its worker's queue), so
//! what the last call started runs first.

use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Run `calls`, at most `limit` at once, starting one per poll of the task;
/// their outputs in the order of `calls`.
pub(super) async fn run_ordered<T>(calls: Vec<BoxFuture<'_, T>>, limit: usize) -> Vec<T> {
    let limit = limit.max(1);
    let mut results = Vec::with_capacity(calls.len());
    let mut waiting = calls.into_iter().peekable();
    let mut running = FuturesOrdered::new();
    loop {
        while running.len() < limit {
            let Some(call) = waiting.next() else { break };
            running.push_back(call);
            // Start it (and collect whatever is done, in order) ...
            while let Poll::Ready(Some(done)) = futures::poll!(running.next()) {
                results.push(done);
            }
            // ... and let what it started run before the next one starts.
            if waiting.peek().is_some() {
                StepAside(false).await;
            }
        }
        match running.next().await {
            Some(done) => results.push(done),
            None if waiting.peek().is_none() => return results,
            None => {}
        }
    }
}

/// Pending once, waking itself: the task goes to the back of its worker's queue
/// (not to the end of the worker's tick, as `tokio::task::yield_now` does), so it
/// resumes as soon as what was queued before it has run.
struct StepAside(bool);

impl Future for StepAside {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
