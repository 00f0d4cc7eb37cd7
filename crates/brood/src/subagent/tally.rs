//! Usage tallies: the tokens, requests and cost the model answered to one run and
//! to its whole tree, counted as each answer arrives, per model. This is the one
//! place brood sums usage across a tree (`brood run --json` reports these figures);
//! the cost of each answer comes from [`cost_usd`].

use crate::model::pricing::{cost_usd, Price};
use crate::model::Usage;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What the model answered: tokens (as the provider reported them), how many
/// answers it gave, and what they cost. An answer without usage still counts as a
/// request.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    #[serde(flatten)]
    /// Tokens, summed as the provider reported them.
    pub usage: Usage,
    /// Model answers counted, with or without usage.
    pub requests: u64,
    /// USD; `None` (`null`) once any answer counted here had no price (its model is
    /// not in `[pricing]`) or reported no usage: a cost is never guessed.
    pub cost_usd: Option<f64>,
    /// The same figures per model id (empty inside a per-model entry).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, Tally>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            usage: Usage::default(),
            requests: 0,
            cost_usd: Some(0.0),
            models: BTreeMap::new(),
        }
    }
}

impl Tally {
    /// Count `requests` answers whose usage (if reported) sums to `usage`, priced at
    /// `price` (if known).
    fn count_many(&mut self, requests: u64, usage: Option<&Usage>, price: Option<&Price>) {
        self.requests = self.requests.saturating_add(requests);
        if let Some(u) = usage {
            self.usage.add(u);
        }
        self.cost_usd = match (self.cost_usd, usage, price) {
            (Some(sum), Some(u), Some(p)) => Some(sum + cost_usd(p, u)),
            _ => None,
        };
    }
}

/// A tally several runs add to at once.
#[derive(Debug, Default)]
pub struct TallyCell(Mutex<Tally>);

impl TallyCell {
    /// Count one answer of `model` and its usage (if the provider reported any),
    /// priced at `price` (if the model has one).
    pub fn add(&self, model: &str, usage: Option<&Usage>, price: Option<&Price>) {
        self.add_many(model, 1, usage, price);
    }
    /// Count `requests` answers of `model` whose usage sums to `usage` (what a
    /// resumed run had been answered before it was interrupted).
    pub fn add_many(
        &self,
        model: &str,
        requests: u64,
        usage: Option<&Usage>,
        price: Option<&Price>,
    ) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.count_many(requests, usage, price);
        match t.models.get_mut(model) {
            Some(m) => m.count_many(requests, usage, price),
            None => {
                let mut m = Tally::default();
                m.count_many(requests, usage, price);
                t.models.insert(model.to_string(), m);
            }
        }
    }
    /// The figures so far.
    pub fn get(&self) -> Tally {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// The cost so far (`None` when some answer could not be priced).
    pub fn cost_usd(&self) -> Option<f64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).cost_usd
    }
}

/// The tallies of a root run: its own answers and those of its whole tree (itself
/// and every descendant). Give one to a root run to read them when it ends.
#[derive(Debug, Default)]
pub struct RootTallies {
    pub(crate) tree: Arc<TallyCell>,
    pub(crate) own: Arc<TallyCell>,
}
