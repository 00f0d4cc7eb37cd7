//! What the writer knows of the runs it is writing: each live run's status and its
//! next event and transcript numbers, plus its root and depth for its children. With
//! them the hot operations (an event, a message, a transition, a child's creation)
//! skip the lookups they would otherwise make before every write — about half the
//! statements a child costs. The memo only ever holds what this writer wrote, or read,
//! inside its own transactions; it is forgotten whenever that could stop being true (a
//! batch that failed to commit, a maintenance operation), and then the ops read the
//! database as before. A run leaves the memo when it ends.

use std::collections::HashMap;
use std::sync::Arc;

use super::types::RunStatus;

/// One run as its last committed (or batch-pending) write left it.
#[derive(Debug, Clone)]
pub(crate) struct RunFacts {
    pub status: RunStatus,
    /// The seq the run's next event gets.
    pub next_event: u64,
    /// The seq the run's next transcript message gets.
    pub next_message: u64,
    /// Shared: the facts are copied for every op, the root id never changes.
    pub root_id: Arc<str>,
    pub depth: u32,
}

/// The writer's memo of live runs, by id.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    runs: HashMap<String, RunFacts>,
}

impl Memo {
    pub fn get(&self, run: &str) -> Option<&RunFacts> {
        self.runs.get(run)
    }

    /// Remember `facts` for `run`, or forget the run once it has ended.
    pub fn put(&mut self, run: &str, facts: RunFacts) {
        if facts.status.is_terminal() {
            self.runs.remove(run);
        } else if let Some(slot) = self.runs.get_mut(run) {
            *slot = facts;
        } else {
            self.runs.insert(run.to_string(), facts);
        }
    }

    /// Forget everything: the database may no longer match.
    pub fn clear(&mut self) {
        self.runs.clear();
    }
}
