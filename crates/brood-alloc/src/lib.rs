//! The allocator brood's binaries run on (mimalloc), and the memory it gives back
//! when a runtime thread goes idle.
//!
//! mimalloc keeps the pages a free empties for `purge_delay` (1 s) and returns
//! them to the system only at a later allocation or free past that delay. A tree
//! whose children all wait for their model allocates next to nothing, so the
//! pages its start freed (a thousand request bodies serialized and written, the
//! spawns' scratch) stayed resident for as long as it waited — ~7 KiB per waiting
//! child over HTTP/2 (BENCHMARKS.md, section 3, "fourth round"). Purging at once
//! (`purge_delay` 0) returns them but pays an `madvise` on every emptied page in
//! the hot paths (the ledger lost 20–40 % of its throughput). Here the binaries'
//! Tokio runtimes purge instead when one of their threads runs out of work
//! ([`purge_when_idle`], given to `on_thread_park`): a thread parks only once it
//! has no task left to run, so no request, record or tool call waits on a purge,
//! and a thread that parks often purges at most once per [`IDLE_PURGE_EVERY`].
//!
//! This is the binaries' choice (their `#[global_allocator]`), not the library's:
//! `brood` itself assumes no allocator and keeps no process-wide state.

use std::cell::Cell;
use std::time::{Duration, Instant};

pub use mimalloc::MiMalloc;

/// At most one purge per runtime thread per this long: a thread that parks and
/// wakes thousands of times a second (a ledger under load) pays for one every
/// 10 ms, not at every park.
pub const IDLE_PURGE_EVERY: Duration = Duration::from_millis(10);

thread_local! {
    /// When this thread last purged.
    static LAST_PURGE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// For `tokio::runtime::Builder::on_thread_park`: the thread is out of work, so
/// give back the memory freed since the last purge — this thread's empty pages,
/// and every arena's freed ranges (mimalloc's `mi_collect(true)`: forced, so
/// without waiting out `purge_delay`) — unless this thread purged within
/// [`IDLE_PURGE_EVERY`].
///
/// Only for a process whose global allocator is [`MiMalloc`]; with another
/// allocator it walks mimalloc's (empty) heap for nothing.
pub fn purge_when_idle() {
    LAST_PURGE.with(|last| {
        let now = Instant::now();
        if last
            .get()
            .is_none_or(|t| now.duration_since(t) >= IDLE_PURGE_EVERY)
        {
            last.set(Some(now));
            // SAFETY: `mi_collect` takes no pointer and may be called from any
            // thread at any time; it touches this thread's heap and, under
            // mimalloc's own lock, the arenas.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
    });
}
