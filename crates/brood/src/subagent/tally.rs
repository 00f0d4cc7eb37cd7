//! Usage tallies: the tokens and requests the model answered to one run and to its
//! whole tree, counted as each answer arrives. This is the one place brood sums
//! usage across a tree (`brood run --json` reports these figures).

use crate::model::Usage;
use std::sync::{Arc, Mutex};

/// What the model answered: tokens (as the provider reported them) and how many
/// answers it gave. An answer without usage still counts as a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    #[serde(flatten)]
    pub usage: Usage,
    pub requests: u64,
}

/// A tally several runs add to at once.
#[derive(Debug, Default)]
pub struct TallyCell(Mutex<Tally>);

impl TallyCell {
    /// Count one answer and its usage (if the provider reported any).
    pub fn add(&self, usage: Option<&Usage>) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.requests = t.requests.saturating_add(1);
        if let Some(u) = usage {
            t.usage.add(u);
        }
    }
    /// The figures so far.
    pub fn get(&self) -> Tally {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The tallies of a root run: its own answers and those of its whole tree (itself
/// and every descendant). Give one to a root run to read them when it ends.
#[derive(Debug, Default)]
pub struct RootTallies {
    pub tree: Arc<TallyCell>,
    pub own: Arc<TallyCell>,
}
