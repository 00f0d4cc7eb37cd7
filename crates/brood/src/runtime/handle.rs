//! A running root: [`RunHandle`], what [`Session::run`] returns — await it for the
//! report, cancel it, read its id, watch its tree's events.

use super::error::SessionError;
use super::root::RunReport;
use super::session::Session;
use crate::events::{EventBus, EventStream};
use crate::subagent::Supervisor;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

/// A parent run started by [`Session::run`]. Await it (or [`RunHandle::report`])
/// for its [`RunReport`]. Dropping the handle before the run ended cancels the run
/// (like dropping any future); its records end `cancelled`.
#[must_use = "dropping a run handle cancels the run; await it for the report"]
pub struct RunHandle {
    id: String,
    turn: CancellationToken,
    supervisor: Supervisor,
    bus: Arc<EventBus>,
    /// Subscribed before the run started, so the first `events()` sees its spawn.
    first_events: Option<EventStream>,
    task: JoinHandle<Result<RunReport, SessionError>>,
    /// Cancels the run when the handle goes away unawaited.
    _cancel_on_drop: DropGuard,
}

impl Session {
    /// Start a parent agent on `prompt` and return at once with its handle. Must be
    /// called inside the tokio runtime the session was built in.
    ///
    /// ```no_run
    /// # async fn demo(session: brood::Session) -> Result<(), brood::Error> {
    /// use futures::StreamExt;
    /// let mut run = session.run("Review the last commit.");
    /// let mut events = run.events();
    /// tokio::spawn(async move {
    ///     while let Some(event) = events.next().await {
    ///         println!("{event:?}");
    ///     }
    /// });
    /// println!("run {}", run.id());
    /// let report = run.await?;
    /// println!("{}", report.final_text);
    /// # Ok(()) }
    /// ```
    pub fn run(&self, prompt: &str) -> RunHandle {
        let id = crate::subagent::new_run_id();
        let bus = self.supervisor().bus().clone();
        let first_events = bus.subscribe(Some(id.clone()));
        let turn = self.cancel_token().child_token();
        let runner = self.root_runner();
        let supervisor = runner.supervisor.clone();
        let task = tokio::spawn(runner.run(
            id.clone(),
            prompt.to_string(),
            Vec::new(),
            None,
            turn.clone(),
        ));
        RunHandle {
            id,
            _cancel_on_drop: turn.clone().drop_guard(),
            turn,
            supervisor,
            bus,
            first_events: Some(first_events),
            task,
        }
    }
}

impl RunHandle {
    /// The run's id (its ledger id; `brood agents show ID` reads it).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Cancel the run and every child of its turn; it still reports (ending
    /// cancelled) when awaited. Background children it opened belong to the
    /// session and go on ([`Session::cancel_all`] stops them too).
    pub fn cancel(&self) {
        self.supervisor
            .note_root_cancel(&self.id, "cancelled by the embedding program");
        self.turn.cancel();
    }

    /// The live events of this run and its descendants (see [`Session::events`]).
    /// The first call sees the run from its spawn; later calls, from the call on.
    pub fn events(&mut self) -> EventStream {
        self.first_events
            .take()
            .unwrap_or_else(|| self.bus.subscribe(Some(self.id.clone())))
    }

    /// Wait for the run's end and its report.
    pub async fn report(self) -> Result<RunReport, SessionError> {
        let RunHandle {
            task,
            _cancel_on_drop: guard,
            ..
        } = self;
        let joined = task.await;
        guard.disarm();
        match joined {
            Ok(report) => report,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(SessionError::TaskFailed {
                task: "the run",
                detail: e.to_string(),
            }),
        }
    }
}

impl IntoFuture for RunHandle {
    type Output = Result<RunReport, SessionError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.report())
    }
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle").field("id", &self.id).finish()
    }
}
