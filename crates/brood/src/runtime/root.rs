//! A root (parent) run: what it needs of the session ([`RootRunner`]) and what it
//! reports when it ends ([`RunReport`]).

use super::error::{ErrorClass, SessionError};
use crate::agent::{AgentOutcome, Ending, EventSink};
use crate::ledger::Ledger;
use crate::subagent::tally::{RootTallies, Tally};
use crate::subagent::{RootRequest, Supervisor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Events recorded on a session's first root run: (kind, data).
pub(super) type FirstRunNotes = Vec<(crate::ledger::EventKind, serde_json::Value)>;

/// What a finished parent run reports (`brood run --json` prints this).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    /// The root run's id in the ledger.
    pub run_id: String,
    /// Its final answer.
    #[serde(rename = "final")]
    pub final_text: String,
    /// Model steps it took.
    pub turns: u32,
    /// Tool calls it made (its children's not counted).
    pub tool_calls: u32,
    /// What the model answered to the whole tree: this run and every descendant.
    pub usage: Tally,
    /// What it answered to this run alone.
    pub parent_usage: Tally,
    /// How it ended.
    #[serde(skip)]
    pub ending: Ending,
    /// Why it failed or was cancelled, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The parent's whole conversation after this run (the history given to
    /// [`Session::run_continuing`](super::Session::run_continuing), the prompt, every step): pass it to the next
    /// `run_continuing` to go on talking.
    #[serde(skip)]
    pub messages: Vec<crate::model::Message>,
}

impl RunReport {
    /// It answered: completed, or its final report after `max_turns` or a budget
    /// that stopped it after some work. A budget that stopped it before its first
    /// request (a cost budget its model has no price for) is a failure.
    pub fn succeeded(&self) -> bool {
        self.ending.answered(self.turns)
    }

    /// Why it did not succeed (`None` when it did): a model step that failed after
    /// its retries is [`ErrorClass::Provider`], a budget that stopped it before any
    /// answer [`ErrorClass::Limit`], a cancellation [`ErrorClass::Cancelled`].
    pub fn failure(&self) -> Option<ErrorClass> {
        if self.succeeded() {
            return None;
        }
        Some(match self.ending {
            Ending::Failed { .. } => ErrorClass::Provider,
            Ending::Budget { .. } => ErrorClass::Limit,
            Ending::Cancelled => ErrorClass::Cancelled,
            Ending::Completed | Ending::MaxTurns => ErrorClass::Failed,
        })
    }
}

/// A root run's share of the session.
pub(super) struct RootRunner {
    pub(super) supervisor: Supervisor,
    pub(super) roots: Arc<Mutex<HashMap<String, CancellationToken>>>,
    pub(super) max_turns: u32,
    /// Events recorded on the session's first run (see `Session::root_runner`).
    pub(super) warn: Option<(Arc<Ledger>, FirstRunNotes)>,
    pub(super) live: Arc<Mutex<Option<Arc<RootTallies>>>>,
}

impl RootRunner {
    /// Run the root `id` on `prompt` to its end and report it.
    pub(super) async fn run(
        self,
        id: String,
        prompt: String,
        history: Vec<crate::model::Message>,
        events: Option<EventSink>,
        turn: CancellationToken,
    ) -> Result<RunReport, SessionError> {
        let tallies = Arc::new(RootTallies::default());
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = Some(tallies.clone());
        let req = RootRequest {
            prompt,
            system: None,
            max_turns: self.max_turns,
            events,
            cancel: turn.clone(),
            name: "parent".into(),
            tallies: Some(tallies.clone()),
            history,
        };
        let roots = self.roots.clone();
        let warn = self.warn;
        let (id, outcome): (String, AgentOutcome) = self
            .supervisor
            .run_root_as(id, req, move |id| {
                if let Some((ledger, notes)) = &warn {
                    for (kind, data) in notes {
                        // Fire-and-forget like every progress event; a failure is
                        // counted in the ledger's stats.
                        let _ = ledger.append_event(
                            &crate::ledger::RunId::from_string(id),
                            *kind,
                            data.clone(),
                        );
                    }
                }
                roots
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.to_string(), turn.clone());
            })
            .await?;
        self.roots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        let cancel_reason = self.supervisor.take_root_cancel(&id);
        Ok(RunReport {
            run_id: id,
            final_text: outcome.final_text,
            turns: outcome.turns,
            tool_calls: outcome.tool_calls,
            usage: tallies.tree.get(),
            parent_usage: tallies.own.get(),
            error: outcome
                .error
                .map(|e| e.to_string())
                .or(match &outcome.ending {
                    Ending::Cancelled => Some(match cancel_reason {
                        Some(r) => format!("cancelled: {r}"),
                        None => "cancelled".into(),
                    }),
                    Ending::Budget { reason } if outcome.turns == 0 => {
                        Some(format!("stopped before its first request: {reason}"))
                    }
                    _ => None,
                }),
            ending: outcome.ending,
            messages: outcome.messages,
        })
    }
}
