//! A run's inbox: what gets pushed into its conversation from outside — completions
//! of its background children (exactly once), and messages from its parent.
//!
//! A completion is a *claim*: whoever takes it first (the inbox at the run's next
//! step, or an `agent_eval`/`agent_close` that returned the result) delivers it; the
//! other sees it already claimed. The inbox also tells the agent loop whether any
//! background child is still out, so a parent does not end while children run.

use crate::agent::Inbox;
use crate::model::Message;
use async_trait::async_trait;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A one-shot delivery flag shared by everyone who might deliver a child's result.
#[derive(Debug, Default)]
pub struct Claim(AtomicBool);

impl Claim {
    /// `true` for the first caller only.
    pub fn take(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }
    pub(crate) fn is_taken(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

enum Item {
    Note(Message),
    Completion {
        child: String,
        message: Message,
        claim: Arc<Claim>,
    },
}

#[derive(Default)]
struct State {
    items: Vec<Item>,
    /// Background children opened by this run whose completion is not yet claimed.
    outstanding: HashSet<String>,
}

/// The inbox of one run. Cheap to share (`Arc`).
#[derive(Default)]
pub struct RunInbox {
    state: Mutex<State>,
    notify: Notify,
}

impl RunInbox {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(RunInbox::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A background child was opened by this run.
    pub fn expect_child(&self, child: &str) {
        self.lock().outstanding.insert(child.to_string());
    }

    /// The child's result was delivered some other way (e.g. `agent_eval`).
    pub fn child_delivered(&self, child: &str) {
        self.lock().outstanding.remove(child);
        self.notify.notify_waiters();
    }

    /// A background child settled: deliver `message` at the next step unless
    /// someone claims it first.
    pub fn push_completion(&self, child: &str, message: Message, claim: Arc<Claim>) {
        self.lock().items.push(Item::Completion {
            child: child.to_string(),
            message,
            claim,
        });
        self.notify.notify_waiters();
    }

    /// A note (e.g. from the parent through `agent_eval`), delivered at the next step.
    pub fn push_note(&self, message: Message) {
        self.lock().items.push(Item::Note(message));
        self.notify.notify_waiters();
    }

    /// Number of background children still out.
    pub fn outstanding(&self) -> usize {
        self.lock().outstanding.len()
    }

    /// Whether [`Inbox::wait_for_more`] would block now: nothing to deliver, but
    /// background children still out.
    pub fn would_wait(&self) -> bool {
        let state = self.lock();
        !Self::deliverable(&state) && !state.outstanding.is_empty()
    }

    fn deliverable(state: &State) -> bool {
        state.items.iter().any(|i| match i {
            Item::Note(_) => true,
            Item::Completion { claim, .. } => !claim.is_taken(),
        })
    }
}

#[async_trait]
impl Inbox for RunInbox {
    fn drain(&self) -> Vec<Message> {
        let mut state = self.lock();
        let items = std::mem::take(&mut state.items);
        let mut out = Vec::new();
        for item in items {
            match item {
                Item::Note(m) => out.push(m),
                Item::Completion {
                    child,
                    message,
                    claim,
                } => {
                    state.outstanding.remove(&child);
                    if claim.take() {
                        out.push(message);
                    }
                }
            }
        }
        out
    }

    async fn wait_for_more(&self, cancel: &CancellationToken) -> bool {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.lock();
                if Self::deliverable(&state) {
                    return true;
                }
                if state.outstanding.is_empty() {
                    return false;
                }
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = cancel.cancelled() => return false,
            }
        }
    }
}
