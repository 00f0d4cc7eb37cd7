//! The agent loop: model step → tool calls → results → … → final answer.
//!
//! [`run`] drives one conversation until the model answers without tool calls,
//! `max_turns` is reached, a [`Guard`] refuses another step (a budget), or the
//! cancellation token fires. Tool calls of one step run concurrently, at most
//! `tool_concurrency` at once, started one per poll of the run (see `calls`), and
//! their results go back in call order, each capped (see `tool_result`); a call naming no known tool is a tool error the model sees. On `max_turns` or a budget it makes one last
//! tool-less step asking the model to report what it has, so partial work is kept.
//! Every step and tool call is reported as an [`AgentEvent`].
//!
//! The loop knows nothing of sub-agents, except through two seams: an [`Inbox`]
//! that can push messages into the conversation before a step (completions of
//! background children, messages from a parent) and can hold a finished loop
//! open while work it is waiting for is still out; and tools that block a while.
//! A [`Pace`] awaited before every step lets what records the run hold it back.

mod budget;
mod calls;
mod event;
mod tool_result;

pub use budget::BudgetSpent;
pub use event::{AgentEvent, EventSink};
pub use tool_result::{DEFAULT_TOOL_CONCURRENCY, TOOL_RESULT_MAX_BYTES};

use crate::model::{
    Message, Model, ModelError, ModelRequest, Sampling, StreamEvent, ToolChoice, Usage,
};
use crate::tool::{ToolContext, Toolbox, Workspace};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Default turn limit of a top-level agent.
pub const DEFAULT_MAX_TURNS: u32 = 30;

/// The text of the last, tool-less step after a limit was hit.
pub const REPORT_PROMPT: &str = "You have reached the limit of this run ({reason}). Do not call \
any tools. Report now what you have: what you did, what you found, what is left undone.";

/// Messages pushed into a running conversation from outside it.
#[async_trait]
pub trait Inbox: Send + Sync {
    /// Messages to append before the next model step (each delivered once).
    fn drain(&self) -> Vec<Message>;
    /// Called when the model gave a final answer. Returns `true` once there are new
    /// messages to deliver (the loop then takes another turn); `false` when nothing
    /// is outstanding (the loop ends). Must return `false` promptly on `cancel`.
    async fn wait_for_more(&self, cancel: &CancellationToken) -> bool;
}

/// A check made before every model step (budgets, deadlines). `Err(reason)` stops
/// the loop with a final report step.
pub trait Guard: Send + Sync {
    /// Called before step `turn` with the run's usage so far; `Err` names the
    /// budget that is spent.
    fn before_step(&self, usage_so_far: &Usage, turn: u32) -> Result<(), BudgetSpent>;
}

/// Awaited before every model step: what records the run holds it back while its
/// records cannot keep up (the ledger's backpressure, `Ledger::ready`), so a run
/// makes no new work that could not be recorded. Cancellation ends the wait.
#[async_trait]
pub trait Pace: Send + Sync {
    /// Resolves when the run may take its next step.
    async fn before_step(&self);
}

/// How the model may use tools, per step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolChoicePolicy {
    /// For the first step only (e.g. force `read_file` with a small model).
    pub first: Option<ToolChoice>,
    /// For every step (after the first, when `first` is set).
    pub rest: Option<ToolChoice>,
}

impl ToolChoicePolicy {
    fn for_turn(&self, turn: u32) -> Option<ToolChoice> {
        if turn == 1 && self.first.is_some() {
            self.first.clone()
        } else {
            self.rest.clone()
        }
    }
}

/// Everything fixed for one agent run.
#[derive(Clone)]
pub struct AgentSpec {
    /// The run's id (passed to tools; used by observers).
    pub run_id: String,
    /// The system prompt; shared with every request of the run (a step copies a
    /// reference count, not the text).
    pub system: Arc<str>,
    /// Who answers the steps.
    pub model: Arc<dyn Model>,
    /// The model id each request names.
    pub model_id: String,
    /// Temperature and the like.
    pub sampling: Sampling,
    /// How the model may use tools, per step.
    pub tool_choice: ToolChoicePolicy,
    /// The tools, and the permissions every call is checked against.
    pub toolbox: Toolbox,
    /// The jail tool paths go through.
    pub workspace: Arc<Workspace>,
    /// Most model steps before the final report step.
    pub max_turns: u32,
    /// Tool specs to offer instead of the toolbox's own (a forked child is offered
    /// its parent's exact specs; its toolbox still decides what may run).
    pub offered_tools: Option<Arc<[crate::model::ToolSpec]>>,
    /// How many tool calls of one step run at once (the rest queue; 0 counts as 1).
    pub tool_concurrency: usize,
}

/// What the loop is wired to while it runs.
#[derive(Clone, Default)]
pub struct AgentHooks {
    /// Sees every event as it happens.
    pub events: Option<EventSink>,
    /// Messages pushed into the next step (children's completions, notes).
    pub inbox: Option<Arc<dyn Inbox>>,
    /// Checked before every step (budgets).
    pub guard: Option<Arc<dyn Guard>>,
    /// Awaited before every step (backpressure from what records the run).
    pub pace: Option<Arc<dyn Pace>>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// The model gave a final answer.
    Completed,
    /// `max_turns` was reached; the answer is the final report.
    MaxTurns,
    /// A guard stopped it; the answer is the final report.
    Budget {
        /// Which budget, in words.
        reason: String,
    },
    /// The cancellation token fired.
    Cancelled,
    /// A model step failed (after its retries).
    Failed {
        /// The model error, in words.
        error: String,
    },
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    /// How the run ended.
    pub ending: Ending,
    /// The final assistant text (empty when cancelled or failed before any answer).
    pub final_text: String,
    /// The whole conversation, including the initial messages.
    pub messages: Vec<Message>,
    /// Model steps made.
    pub turns: u32,
    /// Tool calls executed.
    pub tool_calls: u32,
    /// What the model reported for the run's steps, summed.
    pub usage: Usage,
    /// The typed model error, when `ending` is `Failed`.
    pub error: Option<ModelError>,
}

impl Ending {
    /// The one definition of a run that succeeded: it ended with an answer —
    /// completed, or its final report after `max_turns` or after a budget that
    /// stopped it once it had made `turns > 0` steps. A budget that stopped it
    /// before its first request (a cost budget its model has no price for) left
    /// nothing to report: the run never started.
    pub fn answered(&self, turns: u32) -> bool {
        match self {
            Ending::Completed | Ending::MaxTurns => true,
            Ending::Budget { .. } => turns > 0,
            Ending::Cancelled | Ending::Failed { .. } => false,
        }
    }
}

impl AgentOutcome {
    /// It ended with an answer (see [`Ending::answered`]).
    pub fn succeeded(&self) -> bool {
        self.ending.answered(self.turns)
    }
}

/// Ask a finished run one more thing: push `prompt` and take exactly one more
/// model step with no tools (and so no tool choice), through the loop's own step
/// — same request, events and usage accounting as every other step. It is how a
/// caller's policy (the sub-agent output contract's format repair) continues a
/// conversation without a second copy of the step. A tool call in the answer is
/// dropped. On an answer, `outcome` gains the step (turns, usage, messages) and
/// its text is returned; on a failed or cancelled step `outcome` keeps only the
/// prompt and `None` is returned.
pub async fn follow_up(
    spec: &AgentSpec,
    outcome: &mut AgentOutcome,
    prompt: Message,
    hooks: &AgentHooks,
    cancel: &CancellationToken,
) -> Option<String> {
    let mut lp = Loop {
        spec,
        hooks,
        cancel,
        messages: std::mem::take(&mut outcome.messages),
        turns: outcome.turns,
        tool_calls: outcome.tool_calls,
        usage: outcome.usage,
    };
    lp.push(prompt);
    let answer = match lp.step(false, None).await {
        Ok(response) => {
            let mut message = response.message;
            message.tool_calls.clear();
            let text = message.content.clone();
            lp.push(message);
            outcome.turns = lp.turns;
            outcome.usage = lp.usage;
            Some(text)
        }
        Err(_) => None,
    };
    outcome.messages = lp.messages;
    answer
}

struct Loop<'a> {
    spec: &'a AgentSpec,
    hooks: &'a AgentHooks,
    cancel: &'a CancellationToken,
    messages: Vec<Message>,
    turns: u32,
    tool_calls: u32,
    usage: Usage,
}

/// What a run had spent before this loop took it over (a resumed run): its steps
/// count against `max_turns` and its usage is what the [`Guard`] is shown, so a
/// resumed run stops where the run would have stopped had it never been interrupted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Model steps already made.
    pub turns: u32,
    /// Usage already reported for them.
    pub usage: Usage,
}

/// Run the loop from `messages` (usually one user message) until it ends.
pub async fn run(
    spec: &AgentSpec,
    messages: Vec<Message>,
    hooks: &AgentHooks,
    cancel: &CancellationToken,
) -> AgentOutcome {
    run_after(spec, messages, Spent::default(), hooks, cancel).await
}

/// As [`run`], continuing a run that already spent `spent` (its conversation so far
/// is `messages`): the outcome's turns and usage include what was spent before.
pub async fn run_after(
    spec: &AgentSpec,
    messages: Vec<Message>,
    spent: Spent,
    hooks: &AgentHooks,
    cancel: &CancellationToken,
) -> AgentOutcome {
    let mut lp = Loop {
        spec,
        hooks,
        cancel,
        messages,
        turns: spent.turns,
        tool_calls: 0,
        usage: spent.usage,
    };
    let (ending, final_text, error) = lp.drive().await;
    lp.emit(AgentEvent::Finished {
        ending: ending.clone(),
        turns: lp.turns,
        usage: lp.usage,
    });
    AgentOutcome {
        ending,
        final_text,
        messages: lp.messages,
        turns: lp.turns,
        tool_calls: lp.tool_calls,
        usage: lp.usage,
        error,
    }
}

impl Loop<'_> {
    fn emit(&self, event: AgentEvent) {
        if let Some(sink) = &self.hooks.events {
            sink(&event);
        }
    }

    fn push(&mut self, message: Message) {
        self.emit(AgentEvent::Message {
            message: message.clone(),
        });
        self.messages.push(message);
    }

    fn take_inbox(&mut self) {
        if let Some(inbox) = &self.hooks.inbox {
            for m in inbox.drain() {
                self.emit(AgentEvent::Injected { message: m.clone() });
                self.push(m);
            }
        }
    }

    async fn drive(&mut self) -> (Ending, String, Option<ModelError>) {
        loop {
            if self.cancel.is_cancelled() {
                return (Ending::Cancelled, String::new(), None);
            }
            self.take_inbox();
            if self.turns >= self.spec.max_turns {
                let reason = format!("max_turns = {}", self.spec.max_turns);
                return self.final_report(Ending::MaxTurns, &reason).await;
            }
            if let Some(guard) = &self.hooks.guard {
                if let Err(spent) = guard.before_step(&self.usage, self.turns + 1) {
                    let reason = spent.to_string();
                    // Nothing done yet, nothing to report: no request at all.
                    if self.turns == 0 {
                        return (Ending::Budget { reason }, String::new(), None);
                    }
                    return self
                        .final_report(
                            Ending::Budget {
                                reason: reason.clone(),
                            },
                            &reason,
                        )
                        .await;
                }
            }
            let tool_choice = self.spec.tool_choice.for_turn(self.turns + 1);
            let response = match self.step(true, tool_choice).await {
                Ok(r) => r,
                Err(StepError::Cancelled) => return (Ending::Cancelled, String::new(), None),
                Err(StepError::Model(e)) => {
                    return (
                        Ending::Failed {
                            error: e.to_string(),
                        },
                        String::new(),
                        Some(e),
                    )
                }
            };
            let mut message = response.message;
            let calls = message.tool_calls.clone();
            let text = message.content.clone();
            message
                .tool_calls
                .iter_mut()
                .for_each(tool_result::for_history);
            self.push(message);
            if calls.is_empty() {
                if let Some(inbox) = self.hooks.inbox.clone() {
                    if inbox.wait_for_more(self.cancel).await {
                        continue;
                    }
                }
                if self.cancel.is_cancelled() {
                    return (Ending::Cancelled, text, None);
                }
                return (Ending::Completed, text, None);
            }
            self.run_tools(&calls).await;
        }
    }

    /// One model step. `with_tools = false` sends no tool specs.
    async fn step(
        &mut self,
        with_tools: bool,
        tool_choice: Option<ToolChoice>,
    ) -> Result<crate::model::ModelResponse, StepError> {
        if let Some(pace) = &self.hooks.pace {
            tokio::select! {
                () = pace.before_step() => {}
                _ = self.cancel.cancelled() => return Err(StepError::Cancelled),
            }
        }
        self.turns += 1;
        let turn = self.turns;
        let tools = if with_tools {
            match &self.spec.offered_tools {
                Some(specs) => specs.clone(),
                None => self.spec.toolbox.specs(),
            }
        } else {
            Arc::default()
        };
        // A policy is about tools: a step that offers none (a tool-less contract
        // repair, an empty toolbox) sends no tool_choice, or a forced first tool
        // would make the request invalid.
        let tool_choice = if tools.is_empty() { None } else { tool_choice };
        let request = Arc::new(ModelRequest {
            model: self.spec.model_id.clone(),
            system: self.spec.system.clone(),
            messages: self.messages.clone(),
            tools,
            tool_choice,
            sampling: self.spec.sampling.clone(),
        });
        self.emit(AgentEvent::ModelRequest {
            turn,
            request: request.clone(),
        });
        let sink = self.hooks.events.clone();
        let on_event = move |e: StreamEvent| {
            if let Some(s) = &sink {
                s(&AgentEvent::Stream { turn, event: e });
            }
        };
        let started = Instant::now();
        let result = tokio::select! {
            r = self.spec.model.step(&request, &on_event) => r,
            _ = self.cancel.cancelled() => return Err(StepError::Cancelled),
        };
        match result {
            Ok(response) => {
                if let Some(u) = &response.usage {
                    self.usage.add(u);
                }
                self.emit(AgentEvent::ModelResponse {
                    turn,
                    response: response.clone(),
                    duration_ms: started.elapsed().as_millis() as u64,
                });
                Ok(response)
            }
            Err(e) => {
                self.emit(AgentEvent::ModelFailed {
                    turn,
                    error: e.to_string(),
                });
                Err(StepError::Model(e))
            }
        }
    }

    /// Run one step's calls, at most `tool_concurrency` at once; append the (capped)
    /// results in call order.
    async fn run_tools(&mut self, calls: &[crate::model::ToolCall]) {
        let ctx = ToolContext {
            workspace: self.spec.workspace.clone(),
            permissions: self.spec.toolbox.permissions().clone(),
            cancel: self.cancel.clone(),
            run_id: self.spec.run_id.clone(),
        };
        let this = &*self;
        // Boxed and collected first: a lazy `map` of borrowing closures trips
        // the compiler's `Send` proof for the spawned run.
        let futures: Vec<futures::future::BoxFuture<'_, Message>> = calls
            .iter()
            .map(|call| {
                let ctx = &ctx;
                Box::pin(async move {
                    this.emit(AgentEvent::ToolStarted { call: call.clone() });
                    let started = Instant::now();
                    let result = this.spec.toolbox.call(call, ctx).await;
                    let duration_ms = started.elapsed().as_millis() as u64;
                    let (ok, output) = match result {
                        Ok(text) => (true, text),
                        Err(e) => (false, format!("error: {e}")),
                    };
                    let output = tool_result::cap(output, TOOL_RESULT_MAX_BYTES);
                    this.emit(AgentEvent::ToolFinished {
                        call: call.clone(),
                        ok,
                        output: output.clone(),
                        duration_ms,
                    });
                    Message::tool_result(call.id.clone(), output)
                }) as futures::future::BoxFuture<'_, Message>
            })
            .collect();
        let results = calls::run_ordered(futures, self.spec.tool_concurrency).await;
        self.tool_calls += calls.len() as u32;
        for m in results {
            self.push(m);
        }
    }

    /// The last, tool-less step after a limit: keep partial work.
    async fn final_report(
        &mut self,
        ending: Ending,
        reason: &str,
    ) -> (Ending, String, Option<ModelError>) {
        self.push(Message::user(REPORT_PROMPT.replace("{reason}", reason)));
        match self.step(false, None).await {
            Ok(response) => {
                let text = response.message.content.clone();
                let mut message = response.message;
                // A model that still asks for tools gets no more turns; keep its text.
                message.tool_calls.clear();
                self.push(message);
                (ending, text, None)
            }
            Err(StepError::Cancelled) => (Ending::Cancelled, String::new(), None),
            Err(StepError::Model(e)) => (
                Ending::Failed {
                    error: e.to_string(),
                },
                String::new(),
                Some(e),
            ),
        }
    }
}

enum StepError {
    Cancelled,
    Model(ModelError),
}
