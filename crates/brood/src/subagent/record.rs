//! What the ledger hears about runs: spawns, the root's terminal record and `queued`
//! (awaited until durable), `running` and children's terminal records (queued in
//! order, not waited for), and every agent event as progress (batched by the
//! ledger's group commit). The only place the sub-agent layer talks to the ledger,
//! and so also where the session's live events ([`crate::events`]) are published:
//! the stream states what the ledger records.

use super::board::LiveStatus;
use super::result::ChildResult;
use crate::agent::AgentEvent;
use crate::events::{EventBus, RunEventKind};
use crate::ledger::{
    EventKind, JsonText, Ledger, LedgerError, ListFilter, NewRun, RunId, Transition, UsageDelta,
};
use crate::model::pricing::{cost_usd, Price};
use crate::model::StreamEvent;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The fields of a run at spawn.
pub(crate) struct SpawnRecord<'a> {
    pub id: &'a str,
    pub parent_id: Option<&'a str>,
    pub name: &'a str,
    pub role: &'a str,
    pub agent_type: &'a str,
    pub objective: &'a str,
    pub model: &'a str,
    pub provider: &'a str,
    pub workspace: &'a Path,
    /// The run's model has no price (its cost stays unknown).
    pub unpriced: bool,
    /// What it was granted (see `super::granted`).
    pub grant: Option<JsonText>,
}

/// Writes runs to the ledger. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Recorder {
    ledger: Arc<Ledger>,
    /// The branch each spawn record names, read again only when `.git/HEAD` changed.
    head: Arc<HeadCache>,
    /// Progress writes the ledger refused (kept visible rather than silent).
    dropped: Arc<AtomicU64>,
    /// The session's live events, published next to each record.
    bus: Arc<EventBus>,
}

impl Recorder {
    pub fn new(ledger: Arc<Ledger>) -> Self {
        Recorder {
            ledger,
            head: Arc::default(),
            dropped: Arc::new(AtomicU64::new(0)),
            bus: Arc::default(),
        }
    }

    /// The session's live events.
    pub fn bus(&self) -> &Arc<EventBus> {
        &self.bus
    }

    /// Record a new run: queued to the ledger now (so it is ordered before anything
    /// the run records later); the returned future resolves once it is on disk.
    pub fn spawn(
        &self,
        r: SpawnRecord<'_>,
    ) -> impl std::future::Future<Output = Result<(), LedgerError>> + Send + 'static {
        self.bus
            .spawned(r.id, r.parent_id, r.role, r.agent_type, r.model, || {
                RunEventKind::Spawned {
                    name: r.name.to_string(),
                    agent_type: r.agent_type.to_string(),
                    objective: r.objective.to_string(),
                }
            });
        let run = NewRun {
            id: Some(RunId::from_string(r.id)),
            parent_id: r.parent_id.map(RunId::from_string),
            name: Some(r.name.to_string()),
            role: Some(r.role.to_string()),
            agent_type: Some(r.agent_type.to_string()),
            objective: r.objective.to_string(),
            model: Some(r.model.to_string()),
            provider: Some(r.provider.to_string()),
            workspace: Some(r.workspace.display().to_string()),
            git_branch: self.head.branch(r.workspace),
            unpriced: r.unpriced,
            grant: r.grant,
        };
        let durable = self.ledger.create_run(run);
        async move { durable.await.map(|_| ()) }
    }

    /// `queued` or `running`; resolves once on disk.
    pub async fn status(&self, id: &str, status: LiveStatus) {
        let run = RunId::from_string(id);
        let change = match status {
            LiveStatus::Queued => Transition::Queued,
            LiveStatus::Running => Transition::Running,
            _ => return,
        };
        self.publish_status(id, status);
        if let Err(e) = self.ledger.transition(&run, change).await {
            self.count(&e);
        }
    }

    /// `queued` or `running`, queued to the ledger now (so it is ordered before
    /// anything the run records next) without waiting for its commit: a run need not
    /// have its start on disk to proceed, since a run left `pending` by a crash is
    /// marked interrupted just like a `running` one. Spares every spawn a second
    /// commit wait before the child's first request. A refused write is counted.
    pub fn status_queued(&self, id: &str, status: LiveStatus) {
        let run = RunId::from_string(id);
        let change = match status {
            LiveStatus::Queued => Transition::Queued,
            LiveStatus::Running => Transition::Running,
            _ => return,
        };
        self.publish_status(id, status);
        if self.ledger.queue_transition(&run, change).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The terminal record, with the whole result; resolves once on disk.
    pub async fn finish(&self, r: &ChildResult) {
        self.publish_end(r);
        let durable = self
            .ledger
            .transition(&RunId::from_string(&r.agent_id), terminal(r));
        if let Err(e) = durable.await {
            self.count(&e);
        }
    }

    /// The terminal record, queued now (ordered before everything recorded after it)
    /// and committed with the next group commit (within the writer's linger, ~1 ms),
    /// without waiting for it: what a parent does next with the result is recorded
    /// after it, and a crash before the commit leaves the run interrupted, never a
    /// later record without it. It does not make the writer commit at once, so the
    /// ends of a fan-out's children share commits instead of forcing one each. A
    /// failed write is counted (see [`Recorder::write_failures`]).
    pub fn finish_queued(&self, r: &ChildResult) {
        self.publish_end(r);
        if self
            .ledger
            .queue_transition(&RunId::from_string(&r.agent_id), terminal(r))
            .is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes that failed so far (shown by the CLI; never silent): those that never
    /// reached the writer, and those the writer could not apply or commit (it counts
    /// them itself: queued writes — progress, `running`, terminal records — fail
    /// there, where nobody waits).
    pub fn write_failures(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed) + self.ledger.stats().ops_failed
    }

    fn publish_status(&self, id: &str, status: LiveStatus) {
        self.bus.publish(id, || match status {
            LiveStatus::Queued => RunEventKind::Queued,
            _ => RunEventKind::Started,
        });
    }

    /// A run's terminal event, worded as its terminal record.
    pub(crate) fn publish_end(&self, r: &ChildResult) {
        self.bus.publish(&r.agent_id, || {
            let reason = r.reason.clone().unwrap_or_default();
            match r.status {
                LiveStatus::Completed => RunEventKind::Completed {
                    final_text: r.final_text.clone(),
                },
                LiveStatus::Failed => RunEventKind::Failed {
                    error: r.error.clone().unwrap_or(reason),
                },
                LiveStatus::Interrupted => RunEventKind::Interrupted { reason },
                _ => RunEventKind::Cancelled { reason },
            }
        });
    }

    /// One agent event as a live event (steps, text, usage and its cost, tool calls).
    fn publish_agent_event(&self, id: &str, event: &AgentEvent, price: Option<&Price>) {
        let kind = match event {
            AgentEvent::ModelRequest { turn, .. } => RunEventKind::Step { turn: *turn },
            AgentEvent::Stream {
                event: StreamEvent::TextDelta { text },
                ..
            } => RunEventKind::TextDelta { text: text.clone() },
            AgentEvent::ModelResponse { turn, response, .. } => {
                let Some(u) = response.usage else { return };
                RunEventKind::Usage {
                    turn: *turn,
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                    cached_input_tokens: u.cached_input_tokens,
                    cost_usd: price.map(|p| cost_usd(p, &u)),
                }
            }
            AgentEvent::Stream {
                turn,
                event:
                    StreamEvent::Retrying {
                        attempt,
                        delay_ms,
                        error,
                    },
            } => RunEventKind::Retrying {
                turn: *turn,
                attempt: *attempt,
                delay_ms: *delay_ms,
                error: error.clone(),
            },
            AgentEvent::ToolStarted { call } => RunEventKind::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
            AgentEvent::ToolFinished {
                call,
                ok,
                output,
                duration_ms,
            } => RunEventKind::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                ok: *ok,
                output: output.clone(),
                duration_ms: *duration_ms,
            },
            _ => return,
        };
        self.bus.publish(id, || kind);
    }

    /// Count a failed write once: the writer already counted those it saw.
    fn count(&self, e: &LedgerError) {
        if matches!(e, LedgerError::WriterStopped) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A message sent to a running child (`agent_eval` with `message`).
    pub fn message_queued(&self, id: &str, text: &str) {
        self.progress(id, EventKind::MessageQueued, json!({ "text": text }));
    }

    /// Something accepted but changed or not applied, for the run's record.
    pub fn warning(&self, id: &str, payload: Value) {
        self.progress(id, EventKind::Warning, payload);
    }

    /// What happened to a run's worktree (`{"created": …}`, `{"settled": …}`).
    pub fn worktree(&self, id: &str, payload: Value) {
        self.progress(id, EventKind::Worktree, payload);
    }

    fn progress(&self, id: &str, kind: EventKind, payload: Value) {
        if self
            .ledger
            .append_event(&RunId::from_string(id), kind, payload)
            .is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One agent event, as progress (never blocks). `price` is the run's model's
    /// (`None`: unpriced): a model answer's cost is computed here, once, when it is
    /// recorded.
    pub fn observe(&self, id: &str, event: &AgentEvent, price: Option<&Price>) {
        if self.bus.listened() {
            self.publish_agent_event(id, event, price);
        }
        let run = RunId::from_string(id);
        match event {
            AgentEvent::Message { message } => {
                let role = match message.role {
                    crate::model::Role::System => "system",
                    crate::model::Role::User => "user",
                    crate::model::Role::Assistant => "assistant",
                    crate::model::Role::Tool => "tool",
                };
                let content = serde_json::to_value(message).unwrap_or(Value::Null);
                if self.ledger.append_message(&run, role, content).is_err() {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            AgentEvent::ModelRequest { turn, request } => self.progress(
                id,
                EventKind::ModelRequest,
                json!({
                    "turn": turn,
                    "model": request.model,
                    "messages": request.messages.len(),
                    "tools": request.tools.len(),
                    "tool_choice": request.tool_choice,
                }),
            ),
            AgentEvent::ModelResponse {
                turn,
                response,
                duration_ms,
            } => {
                self.progress(
                    id,
                    EventKind::ModelResponse,
                    json!({
                        "turn": turn,
                        "finish_reason": response.finish_reason,
                        "duration_ms": duration_ms,
                        "tool_calls": response.message.tool_calls.iter().map(|c| &c.name).collect::<Vec<_>>(),
                        "usage": response.usage,
                    }),
                );
                // Priced now, by the one cost function: the ledger keeps what the
                // step cost at the price in force, whatever prices say later.
                let u = response.usage.unwrap_or_default();
                let delta = UsageDelta {
                    steps: 1,
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                    cached_input_tokens: u.cached_input_tokens,
                    cost_usd: response.usage.and(price).map(|p| cost_usd(p, &u)),
                };
                if self.ledger.add_usage(&run, delta).is_err() {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            AgentEvent::ModelFailed { turn, error } => self.progress(
                id,
                EventKind::ModelResponse,
                json!({ "turn": turn, "error": error }),
            ),
            AgentEvent::ToolStarted { call } => self.progress(
                id,
                EventKind::ToolStarted,
                json!({ "call_id": call.id, "name": call.name, "arguments": call.arguments }),
            ),
            AgentEvent::ToolFinished {
                call,
                ok,
                output,
                duration_ms,
            } => self.progress(
                id,
                EventKind::ToolFinished,
                json!({
                    "call_id": call.id,
                    "name": call.name,
                    "ok": ok,
                    "duration_ms": duration_ms,
                    "output_bytes": output.len(),
                }),
            ),
            // A retry and a rejected usage are recorded (audit: why a step took
            // long, which counts a server sent that were not believed); deltas are
            // not (the assembled message is).
            AgentEvent::Stream {
                turn,
                event:
                    StreamEvent::Retrying {
                        attempt,
                        delay_ms,
                        error,
                    },
            } => self.progress(
                id,
                EventKind::ModelResponse,
                json!({
                    "turn": turn,
                    "retrying": { "attempt": attempt, "delay_ms": delay_ms, "error": error },
                }),
            ),
            AgentEvent::Stream {
                turn,
                event: StreamEvent::UsageRejected { fields, raw },
            } => self.progress(
                id,
                EventKind::Usage,
                json!({ "turn": turn, "rejected": fields, "raw": raw }),
            ),
            AgentEvent::Injected { .. }
            | AgentEvent::Stream { .. }
            | AgentEvent::Finished { .. } => {}
        }
    }

    /// Everything queued so far is on disk once this resolves.
    pub async fn flush(&self) {
        let _ = self.ledger.flush().await;
    }

    /// Prior sessions' runs, for `agent_list {include_archived}`.
    pub async fn archived_runs(&self) -> Result<Vec<Value>, String> {
        let runs = self
            .ledger
            .list_runs(ListFilter {
                include_archived: true,
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(runs
            .into_iter()
            .filter(|r| r.from_prior_session)
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect())
    }

    /// A slice of a run's transcript.
    pub async fn transcript(&self, id: &str, from: u64, limit: u64) -> Result<Value, String> {
        let slice = self
            .ledger
            .transcript(&RunId::from_string(id), from, limit as usize)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(slice).map_err(|e| e.to_string())
    }
}

/// A run takes its next model step only while the ledger's queue has room: while the
/// writer waits (another process holds the write lock), runs wait with it instead of
/// queueing records without bound.
#[async_trait::async_trait]
impl crate::agent::Pace for Recorder {
    async fn before_step(&self) {
        self.ledger.ready().await
    }
}

/// The terminal transition for a settled result (the result rides along).
fn terminal(r: &ChildResult) -> Transition {
    let result = serde_json::to_value(r).unwrap_or(Value::Null);
    let reason = r.reason.clone().unwrap_or_default();
    match r.status {
        LiveStatus::Completed => Transition::Completed { result },
        LiveStatus::Failed => Transition::Failed {
            error: r.error.clone().unwrap_or(reason),
            result: Some(result),
        },
        LiveStatus::Interrupted => Transition::Interrupted { reason },
        _ => Transition::Cancelled { reason },
    }
}

/// The workspace's git branch as of the last spawn, with what `.git/HEAD` was then
/// (its inode, length and modification time): every spawn records the session
/// workspace's branch, and reading the file each time was five system calls on the
/// parent's open path where checking it is one `statx`. git rewrites `HEAD` by
/// renaming a new file over it, so a checkout changes the inode and the time.
#[derive(Default)]
struct HeadCache(Mutex<Option<(PathBuf, HeadStamp, Option<String>)>>);

type HeadStamp = (u64, u64, Option<std::time::SystemTime>);

impl HeadCache {
    fn branch(&self, workspace: &Path) -> Option<String> {
        let head = workspace.join(".git").join("HEAD");
        let meta = std::fs::metadata(&head).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        let stamp = (inode, meta.len(), meta.modified().ok());
        if let Some((path, seen, branch)) = &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            if *path == head && *seen == stamp {
                return branch.clone();
            }
        }
        // Read outside the lock, so concurrent spawns do not wait on the file. One
        // rewritten between the stamp and the read: the next spawn sees a new stamp
        // and reads it again.
        let branch = git_branch(workspace);
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((head, stamp, branch.clone()));
        branch
    }
}

/// The workspace's current git branch, read from `.git/HEAD` (no git process).
fn git_branch(workspace: &Path) -> Option<String> {
    let head = std::fs::read_to_string(workspace.join(".git").join("HEAD")).ok()?;
    head.trim()
        .strip_prefix("ref: refs/heads/")
        .map(str::to_string)
}
