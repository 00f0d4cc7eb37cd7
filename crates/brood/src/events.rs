//! Live events: the session's typed, ordered stream of what its runs do, for UIs
//! and embedding programs ([`crate::Session::events`]).
//!
//! The events are published from the one place the runtime records runs in the
//! ledger (the sub-agent layer's recorder), so the stream states the same facts as
//! the ledger: a UI can draw the live agent tree from the stream and redraw it from
//! the ledger after a restart. Under the hood is a `tokio::sync::broadcast`
//! channel: publishing never waits, a subscriber that keeps up sees every event in
//! order, and one that falls behind gets an [`Event::Lagged`] marker saying how many
//! it missed, never blocking an agent. Nothing is built for an event while nobody
//! subscribes.

use chrono::{DateTime, Utc};
use futures::Stream;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::broadcast;

/// How many events a subscriber may fall behind before it lags.
const CAPACITY: usize = 1024;

/// One item of an event stream.
// Unboxed: each item is moved once to its subscriber; a box would be an allocation
// per event per subscriber for a variant that is almost never the other one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// Something a run did.
    Run(RunEvent),
    /// This subscriber fell behind and `missed` events were dropped for it (the
    /// agents never wait for a subscriber). The ledger still has all of them.
    Lagged {
        /// How many events this subscriber did not see.
        missed: u64,
    },
}

/// What happened in one run, with who the run is.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunEvent {
    /// Position in the session's stream: increases by one per event published.
    pub seq: u64,
    /// The run (its ledger id).
    pub run_id: String,
    /// Its parent run; `None` for a root (the session's top-level agent).
    pub parent_id: Option<String>,
    /// The root of its tree (the run itself for a root).
    pub root_id: String,
    /// Its role as recorded: `parent` for a root, else the child's role.
    pub role: String,
    /// The model it runs on.
    pub model: String,
    /// When the event was published.
    pub at: DateTime<Utc>,
    /// What happened.
    pub kind: RunEventKind,
}

/// The kinds of run events, in the order a run goes through them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunEventKind {
    /// The run was opened (recorded in the ledger).
    Spawned {
        /// Its name (`parent` for a root, else the child's).
        name: String,
        /// Its agent type (a role or a definition's name).
        agent_type: String,
        /// What it was asked to do.
        objective: String,
    },
    /// It waits for a running slot (`max_concurrent`).
    Queued,
    /// It got its slot and runs.
    Started,
    /// A model step is about to be sent (`turn` counts from 1).
    Step {
        /// The step's number.
        turn: u32,
    },
    /// A piece of the model's answer text as it streams in.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// What the model reported for one step.
    Usage {
        /// The step's number.
        turn: u32,
        /// Input tokens (cached ones included).
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Input tokens served from the provider's cache.
        cached_input_tokens: u64,
        /// What the step cost in USD, priced when it was recorded by the one cost
        /// function ([`crate::model::pricing::cost_usd`]) at the run's price
        /// (`[pricing]` or the endpoint's published list). `None` when the model has
        /// no price or the provider reported no usage: never 0, never a guess.
        cost_usd: Option<f64>,
    },
    /// A model step's request failed and is sent again after a pause (the same
    /// retry the ledger records as a `model_response` event with `retrying`).
    Retrying {
        /// The step's number.
        turn: u32,
        /// The attempt about to be made (2 for the first retry).
        attempt: u32,
        /// How long it waits first.
        delay_ms: u64,
        /// What went wrong with the previous attempt.
        error: String,
    },
    /// A tool call starts.
    ToolCall {
        /// The call's id (pairs it with its [`RunEventKind::ToolResult`]).
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments as the model sent them (JSON text, unchecked).
        arguments: String,
    },
    /// A tool call ended.
    ToolResult {
        /// The call's id.
        call_id: String,
        /// The tool's name.
        name: String,
        /// Whether it succeeded (a refusal or an error is `false`).
        ok: bool,
        /// What went back to the model.
        output: String,
        /// How long it took.
        duration_ms: u64,
    },
    /// The run ended with an answer (also after `max_turns` or a budget: its final
    /// report).
    Completed {
        /// Its final answer.
        final_text: String,
    },
    /// The run failed.
    Failed {
        /// Why.
        error: String,
    },
    /// The run was cancelled.
    Cancelled {
        /// Who or what cancelled it.
        reason: String,
    },
    /// The run was interrupted (its process went away).
    Interrupted {
        /// Why.
        reason: String,
    },
}

impl RunEventKind {
    /// Whether this is a run's last event.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            RunEventKind::Completed { .. }
                | RunEventKind::Failed { .. }
                | RunEventKind::Cancelled { .. }
                | RunEventKind::Interrupted { .. }
        )
    }
}

/// Who a run is, kept from its spawn for every later event.
#[derive(Debug, Clone)]
pub(crate) struct RunMeta {
    pub parent_id: Option<String>,
    pub root_id: String,
    pub role: String,
    pub agent_type: String,
    pub model: String,
}

/// The session's publisher. Cheap to share (`Arc`).
pub(crate) struct EventBus {
    tx: broadcast::Sender<RunEvent>,
    /// Every run of the session, from its spawn (a background child may outlive its
    /// parent and still open children of its own, so nothing is forgotten).
    runs: Mutex<HashMap<String, Arc<RunMeta>>>,
    /// The next `seq`; taken together with the send, so `seq` is stream order.
    seq: Mutex<u64>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            tx: broadcast::channel(CAPACITY).0,
            runs: Mutex::new(HashMap::new()),
            seq: Mutex::new(0),
        }
    }
}

impl EventBus {
    /// Remember a new run (its root is its parent's root) and publish its spawn.
    pub fn spawned(
        &self,
        run_id: &str,
        parent_id: Option<&str>,
        role: &str,
        agent_type: &str,
        model: &str,
        spawned: impl FnOnce() -> RunEventKind,
    ) {
        {
            let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            let root_id = parent_id
                .and_then(|p| runs.get(p).map(|m| m.root_id.clone()))
                .unwrap_or_else(|| parent_id.unwrap_or(run_id).to_string());
            runs.insert(
                run_id.to_string(),
                Arc::new(RunMeta {
                    parent_id: parent_id.map(str::to_string),
                    root_id,
                    role: role.to_string(),
                    agent_type: agent_type.to_string(),
                    model: model.to_string(),
                }),
            );
        }
        self.publish(run_id, spawned);
    }

    /// Remember a recorded run this session continues (a resumed one, which it did
    /// not spawn: `meta.root_id` is the recorded root) and publish `spawned` — so a
    /// subscriber that never saw the run learns who it is — then `started`. Without
    /// it every event of the resumed run would be dropped as a stranger's.
    pub fn reopened(&self, run_id: &str, meta: RunMeta, spawned: impl FnOnce() -> RunEventKind) {
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.to_string(), Arc::new(meta));
        self.publish(run_id, spawned);
        self.publish(run_id, || RunEventKind::Started);
    }

    /// Who `run_id` is, if this session opened it.
    pub fn meta(&self, run_id: &str) -> Option<Arc<RunMeta>> {
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .cloned()
    }

    /// The run's ancestors, nearest first (its parent, …, its root).
    pub fn lineage(&self, run_id: &str) -> Vec<String> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut at = runs.get(run_id).and_then(|m| m.parent_id.clone());
        while let Some(id) = at {
            if out.contains(&id) {
                break;
            }
            at = runs.get(&id).and_then(|m| m.parent_id.clone());
            out.push(id);
        }
        out
    }

    /// Whether anyone subscribes now (events are built only then).
    pub fn listened(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Publish one event of `run_id`; `kind` is built only when someone listens.
    pub fn publish(&self, run_id: &str, kind: impl FnOnce() -> RunEventKind) {
        if !self.listened() {
            return;
        }
        let Some(meta) = self.meta(run_id) else {
            return;
        };
        let kind = kind();
        let mut seq = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        // Err: every subscriber left since the check; nothing to do.
        let _ = self.tx.send(RunEvent {
            seq: *seq,
            run_id: run_id.to_string(),
            parent_id: meta.parent_id.clone(),
            root_id: meta.root_id.clone(),
            role: meta.role.clone(),
            model: meta.model.clone(),
            at: Utc::now(),
            kind,
        });
    }

    /// A stream of every event published from now on; `root` keeps only one tree's.
    pub fn subscribe(&self, root: Option<String>) -> EventStream {
        EventStream::new(self.tx.subscribe(), root)
    }
}

/// A subscriber's stream of [`Event`]s (see [`crate::Session::events`]). It ends
/// when the session and all its runs are gone.
#[must_use = "a stream does nothing unless polled"]
pub struct EventStream {
    inner: Pin<Box<dyn Stream<Item = Event> + Send>>,
}

impl EventStream {
    fn new(rx: broadcast::Receiver<RunEvent>, root: Option<String>) -> Self {
        let stream = futures::stream::unfold((rx, root), |(mut rx, root)| async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => {
                        if root.as_deref().is_some_and(|r| r != ev.root_id) {
                            continue;
                        }
                        return Some((Event::Run(ev), (rx, root)));
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        return Some((Event::Lagged { missed }, (rx, root)));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        EventStream {
            inner: Box::pin(stream),
        }
    }
}

impl Stream for EventStream {
    type Item = Event;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventStream")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_gets_one_lag_marker_then_the_newest_events() {
        let bus = EventBus::default();
        bus.spawned("root", None, "parent", "parent", "m", || {
            RunEventKind::Started
        });
        let mut slow = bus.subscribe(None);
        let extra = 10u32;
        for turn in 0..(CAPACITY as u32 + extra) {
            bus.publish("root", || RunEventKind::Step { turn });
        }
        assert_eq!(
            slow.next().await,
            Some(Event::Lagged {
                missed: u64::from(extra)
            })
        );
        match slow.next().await {
            Some(Event::Run(e)) => {
                assert_eq!(e.kind, RunEventKind::Step { turn: extra });
                assert_eq!(e.root_id, "root");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_tree_filter_keeps_only_that_roots_descendants() {
        let bus = EventBus::default();
        let mut one = bus.subscribe(Some("a".into()));
        bus.spawned("a", None, "parent", "parent", "m", || RunEventKind::Started);
        bus.spawned("b", None, "parent", "parent", "m", || RunEventKind::Started);
        bus.spawned("a1", Some("a"), "explore", "explore", "m", || {
            RunEventKind::Started
        });
        bus.spawned("a11", Some("a1"), "explore", "explore", "m", || {
            RunEventKind::Started
        });
        bus.publish("b", || RunEventKind::Queued);
        bus.publish("a11", || RunEventKind::Queued);
        drop(bus);
        let ids: Vec<String> = one
            .by_ref()
            .map(|e| match e {
                Event::Run(e) => format!("{}<{}", e.run_id, e.root_id),
                other => panic!("{other:?}"),
            })
            .collect()
            .await;
        assert_eq!(ids, ["a<a", "a1<a", "a11<a", "a11<a"]);
    }
}
