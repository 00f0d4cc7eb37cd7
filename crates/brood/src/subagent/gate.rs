//! The gate between a child's spawn and what it may do before its spawn record is
//! on disk. `open` queues the spawn record, starts the child and settles the gate
//! once the record has committed (or failed). Meanwhile the child builds its first
//! context and **sends its first model request**; its [`Hold`] keeps everything
//! else back: the child records nothing, reports nothing, calls no tool and
//! delivers no result until the gate says on disk, and then records what it held,
//! in order (docs/ARCHITECTURE.md, "What a spawn waits for").

use crate::agent::{AgentEvent, EventSink};
use crate::model::{EventFn, Model, ModelError, ModelRequest, ModelResponse};
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Whether a child's spawn record is on disk. `open` queues the record, starts the
/// child — which prepares and sends its first request meanwhile, held by its
/// [`Hold`] — and settles the gate with the commit's outcome.
#[derive(Clone)]
pub(crate) struct SpawnGate(watch::Receiver<Option<bool>>);

impl SpawnGate {
    /// The gate and what settles it (`Some(true)`: on disk).
    pub fn new() -> (watch::Sender<Option<bool>>, SpawnGate) {
        let (tx, rx) = watch::channel(None);
        (tx, SpawnGate(rx))
    }

    /// Wait until settled and say how. A sender dropped unsettled means the `open`
    /// that queued the spawn record was cancelled (its future dropped) while the
    /// record waited for the ledger: the record is still queued, so the child must
    /// record an end of its own (`cancelled`) and give back its slot and name.
    pub async fn settled(&mut self) -> Settled {
        match self.0.wait_for(Option::is_some).await {
            Ok(v) if *v == Some(true) => Settled::OnDisk,
            Ok(_) => Settled::NotRecorded,
            Err(_) => Settled::Abandoned,
        }
    }
}

/// How a child's spawn settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The spawn record committed; the child may run.
    OnDisk,
    /// The spawn record failed; the child has no record and never runs.
    NotRecorded,
    /// The `open` was dropped before the record committed; the record is queued.
    Abandoned,
}

/// What a child started before its gate opened is held here: the events of its
/// loop (its first request, the answer's stream, …) are kept in order instead of
/// being recorded or published, and the answer to its first request is not handed
/// to its loop — so no tool runs and nothing is delivered — until the gate settles.
/// On disk: what the child records first (its `running`, its first message) is
/// recorded, then the held events, and from then on everything passes through. Not
/// recorded or abandoned: the held events and the answer are dropped.
pub(crate) struct Hold {
    gate: SpawnGate,
    /// Set (under the lock, after the flush) once everything passes through.
    open: AtomicBool,
    state: Mutex<State>,
    sink: Option<EventSink>,
}

enum State {
    Held {
        events: Vec<AgentEvent>,
        first: Option<Box<dyn FnOnce() + Send>>,
    },
    Open,
    Dropped,
}

impl Hold {
    /// A hold on `gate` for the events bound for `sink`; `first` is recorded once
    /// the gate says on disk, before the held events.
    pub fn new(
        gate: SpawnGate,
        sink: Option<EventSink>,
        first: impl FnOnce() + Send + 'static,
    ) -> Arc<Hold> {
        Arc::new(Hold {
            gate,
            open: AtomicBool::new(false),
            state: Mutex::new(State::Held {
                events: Vec::new(),
                first: Some(Box::new(first)),
            }),
            sink,
        })
    }

    /// The sink the child's loop reports to: held until the gate opens.
    pub fn sink(self: &Arc<Self>) -> EventSink {
        let hold = self.clone();
        Arc::new(move |event: &AgentEvent| hold.event(event))
    }

    /// The child's model: its first request leaves at once, its answer waits for
    /// the gate (see [`Held`]).
    pub fn model(self: &Arc<Self>, inner: Arc<dyn Model>) -> Arc<dyn Model> {
        Arc::new(Held {
            inner,
            hold: self.clone(),
        })
    }

    fn event(&self, event: &AgentEvent) {
        if !self.open.load(Ordering::Acquire) {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match &mut *state {
                State::Held { events, .. } => return events.push(event.clone()),
                State::Dropped => return,
                State::Open => {}
            }
        }
        if let Some(sink) = &self.sink {
            sink(event);
        }
    }

    /// Wait for the gate; on disk, record what was held (once). Idempotent.
    pub async fn settled(&self) -> Settled {
        let how = self.gate.clone().settled().await;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let held = std::mem::replace(
            &mut *state,
            match how {
                Settled::OnDisk => State::Open,
                _ => State::Dropped,
            },
        );
        if let State::Held { events, first } = held {
            if how == Settled::OnDisk {
                // Under the lock: nothing the child reports can pass the held events.
                if let Some(first) = first {
                    first();
                }
                if let Some(sink) = &self.sink {
                    events.iter().for_each(|e| sink(e));
                }
                self.open.store(true, Ordering::Release);
            }
        } else {
            // Settled before: keep what was decided then.
            *state = held;
        }
        how
    }
}

/// A child's model behind its [`Hold`]: a step taken before the gate opens is sent
/// at once and its answer returned only once the spawn is on disk; a spawn that is
/// not recorded (or abandoned) drops the step, so the loop ends with nothing done.
struct Held {
    inner: Arc<dyn Model>,
    hold: Arc<Hold>,
}

#[async_trait]
impl Model for Held {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if self.hold.open.load(Ordering::Acquire) {
            return self.inner.step(request, on_event).await;
        }
        // Every waiting child holds this future, so it is sized by what it holds
        // while it waits: the step is already a box (`async_trait`), an answer
        // that comes before the gate settles waits in a box of its own, and the
        // second wait for the gate is outside the `select!` (whose futures stay
        // in place through its branches' code). BENCHMARKS.md section 9, the
        // seventh round.
        let mut step = self.inner.step(request, on_event);
        let first = tokio::select! {
            how = self.hold.settled() => Ok(how),
            a = &mut step => Err(Box::new(a)),
        };
        let (how, answer) = match first {
            Ok(how) => (how, None),
            Err(a) => (self.hold.settled().await, Some(a)),
        };
        match (how, answer) {
            (Settled::OnDisk, Some(a)) => *a,
            (Settled::OnDisk, None) => step.await,
            // Never seen: the hold dropped the loop's events, and the child ends
            // without a record of this step (`drive`).
            _ => Err(ModelError::Config(
                "the run's spawn was not recorded: its first answer is dropped".into(),
            )),
        }
    }

    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        self.inner.list_models().await
    }

    async fn published_prices(&self) -> Result<crate::model::pricing::Pricing, ModelError> {
        self.inner.published_prices().await
    }
}
