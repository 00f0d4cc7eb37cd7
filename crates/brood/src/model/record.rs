//! Recording model steps to a file and answering from it later (`--record` / `--replay`).
//!
//! [`Recorder`] wraps any [`Model`] and appends one JSON line per step:
//! `{"seq": N, "provider": "...", "request": {...}, "response": {...}}` (or `"error"`
//! instead of `"response"` for a failed step). Lines are written by one writer thread,
//! flushed one by one, so concurrent steps never interleave and no lock is held while
//! anything waits.
//!
//! [`Replayer`] answers from such a file without network, for whole trees of
//! agents. Concurrent children make the order of requests nondeterministic, so a
//! request is matched per agent — its system prompt and task (the first user
//! message), and its step (how many answers it has had) — against the recorded
//! requests not used yet, never by arrival order. Run-specific values are
//! normalized before comparing (generated ids such as a child's run id in a `task`
//! result, timestamps; see `normalize`), and a recorded id inside a replayed answer
//! (a model waiting on a background child by id) is re-issued as the id this run
//! generated in its place. A request without a match fails with
//! [`ModelError::ReplayMismatch`] naming the agent, its step and the first field in
//! which it differs from the nearest recorded request.

use super::{
    emit_response_events, EventFn, Message, Model, ModelError, ModelRequest, ModelResponse,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use thiserror::Error;
use tokio::sync::oneshot;

mod normalize;
use normalize::Normalized;

/// A recording file that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    #[error("cannot open the recording {path}: {detail}")]
    /// The recording could not be opened.
    Open {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    #[error("{path}:{line}: not a recorded model step ({detail}); was it written by --record?")]
    /// A line is not a recorded step.
    BadLine {
        /// The file.
        path: PathBuf,
        /// The line (from 1).
        line: usize,
        /// What went wrong.
        detail: String,
    },
    #[error("{path} holds no recorded model steps; record a run with --record first")]
    /// The recording has no steps.
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// One line of a recording.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    seq: u64,
    provider: String,
    request: ModelRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response: Option<ModelResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ModelError>,
}

type WriteJob = (String, oneshot::Sender<Result<(), String>>);

/// Records every step of an inner model (see the module docs).
pub struct Recorder {
    inner: Arc<dyn Model>,
    sink: Arc<Sink>,
}

/// The file's one writer and step counter, shared by every model of a session.
struct Sink {
    path: PathBuf,
    jobs: mpsc::Sender<WriteJob>,
    seq: AtomicU64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("inner", &self.inner.provider_name())
            .field("path", &self.sink.path)
            .finish()
    }
}

impl Recorder {
    /// Wrap `inner`, appending to `path` (created when missing).
    pub fn create(inner: Arc<dyn Model>, path: impl AsRef<Path>) -> Result<Recorder, RecordError> {
        let path = path.as_ref().to_path_buf();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| RecordError::Open {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        let (jobs, rx) = mpsc::channel::<WriteJob>();
        std::thread::Builder::new()
            .name("brood-record".into())
            .spawn(move || {
                // Ends when the Recorder (the only sender) is dropped.
                for (line, done) in rx {
                    let r = file
                        .write_all(line.as_bytes())
                        .and_then(|_| file.flush())
                        .map_err(|e| e.to_string());
                    let _ = done.send(r);
                }
            })
            .map_err(|e| RecordError::Open {
                path: path.clone(),
                detail: format!("cannot start the writer: {e}"),
            })?;
        Ok(Recorder {
            inner,
            sink: Arc::new(Sink {
                path,
                jobs,
                seq: AtomicU64::new(0),
            }),
        })
    }

    /// Record `inner` into the same file through the same writer and step
    /// counter (a child's provider in a session that records): lines never
    /// interleave and `seq` stays one sequence.
    pub fn share(&self, inner: Arc<dyn Model>) -> Recorder {
        Recorder {
            inner,
            sink: self.sink.clone(),
        }
    }

    /// The recording file.
    pub fn path(&self) -> &Path {
        &self.sink.path
    }

    async fn write(&self, entry: &Entry) -> Result<(), ModelError> {
        let fail = |d: String| ModelError::Record(format!("{}: {d}", self.sink.path.display()));
        let mut line = serde_json::to_string(entry).map_err(|e| fail(e.to_string()))?;
        line.push('\n');
        let (tx, rx) = oneshot::channel();
        self.sink
            .jobs
            .send((line, tx))
            .map_err(|_| fail("the writer stopped".into()))?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(fail(e)),
            Err(_) => Err(fail("the writer stopped".into())),
        }
    }
}

#[async_trait]
impl Model for Recorder {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    /// Run the inner step, then record it. A step that succeeded but could not be
    /// recorded fails with [`ModelError::Record`].
    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let result = self.inner.step(request, on_event).await;
        let entry = Entry {
            seq: self.sink.seq.fetch_add(1, Ordering::SeqCst),
            provider: self.inner.provider_name().to_string(),
            request: request.clone(),
            response: result.as_ref().ok().cloned(),
            error: result.as_ref().err().cloned(),
        };
        let written = self.write(&entry).await;
        let response = result?;
        written?;
        Ok(response)
    }

    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        self.inner.list_models().await
    }

    async fn published_prices(&self) -> Result<super::pricing::Pricing, ModelError> {
        self.inner.published_prices().await
    }
}

/// Names the agent a request comes from (e.g. `explore child "find the parsers"`)
/// for a mismatch message. The runtime supplies it: this layer knows no roles.
pub(crate) type AgentNamer = Arc<dyn Fn(&ModelRequest) -> String + Send + Sync>;

#[derive(Debug, Clone)]
struct Recorded {
    line: usize,
    request: ModelRequest,
    norm: Normalized,
    /// Which agent asked: its system prompt and first user message, normalized.
    agent: (Value, Value),
    /// How many model steps that agent had taken before (its assistant messages).
    step: usize,
    outcome: Result<ModelResponse, ModelError>,
}

/// Answers from a recording (see the module docs).
pub struct Replayer {
    path: PathBuf,
    entries: Vec<Recorded>,
    used: Mutex<Vec<bool>>,
    /// Recorded id → the id this run issued in its place.
    reissued: Mutex<HashMap<String, String>>,
    arrivals: AtomicUsize,
    namer: Option<AgentNamer>,
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("path", &self.path)
            .field("entries", &self.entries.len())
            .finish()
    }
}

/// The agent key and step of a normalized request.
fn agent_and_step(norm: &Value) -> ((Value, Value), usize) {
    let messages = norm.get("messages").and_then(Value::as_array);
    let first_user = messages
        .and_then(|m| {
            m.iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get("content"))
        .cloned()
        .unwrap_or(Value::Null);
    let steps = messages.map_or(0, |m| {
        m.iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .count()
    });
    let system = norm.get("system").cloned().unwrap_or(Value::Null);
    ((system, first_user), steps)
}

impl Replayer {
    /// Load a recording. Errors name the file and, for a bad line, its number.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Replayer, RecordError> {
        let path = path.as_ref().to_path_buf();
        let open_err = |e: std::io::Error| RecordError::Open {
            path: path.clone(),
            detail: e.to_string(),
        };
        let file = std::fs::File::open(&path).map_err(open_err)?;
        let mut entries = Vec::new();
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(open_err)?;
            if line.trim().is_empty() {
                continue;
            }
            let bad = |detail: String| RecordError::BadLine {
                path: path.clone(),
                line: i + 1,
                detail,
            };
            let e: Entry = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
            let outcome = match (e.response, e.error) {
                (Some(r), None) => Ok(r),
                (None, Some(err)) => Err(err),
                _ => return Err(bad("needs exactly one of 'response' and 'error'".into())),
            };
            let norm = Normalized::of(&e.request);
            let (agent, step) = agent_and_step(&norm.value);
            entries.push(Recorded {
                line: i + 1,
                request: e.request,
                norm,
                agent,
                step,
                outcome,
            });
        }
        if entries.is_empty() {
            return Err(RecordError::Empty { path });
        }
        let used = Mutex::new(vec![false; entries.len()]);
        Ok(Replayer {
            path,
            entries,
            used,
            reissued: Mutex::new(HashMap::new()),
            arrivals: AtomicUsize::new(0),
            namer: None,
        })
    }

    /// Name agents in mismatch messages with `namer` (default: by their task).
    pub(crate) fn with_agent_namer(mut self, namer: AgentNamer) -> Replayer {
        self.namer = Some(namer);
        self
    }

    /// Recorded steps in the file.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No steps recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Recorded steps not answered yet.
    pub fn remaining(&self) -> usize {
        self.used_flags().iter().filter(|u| !**u).count()
    }

    fn used_flags(&self) -> Vec<bool> {
        self.used.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Claim the first unused entry of the same agent and step whose normalized
    /// request equals `norm`, and learn which recorded ids this run re-issued.
    fn claim(&self, norm: &Normalized) -> Option<&Recorded> {
        let (agent, step) = agent_and_step(&norm.value);
        let entry = {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            let (entry, flag) = self.entries.iter().zip(used.iter_mut()).find(|(e, used)| {
                !**used && e.step == step && e.agent == agent && e.norm.value == norm.value
            })?;
            *flag = true;
            entry
        };
        let mut map = self.reissued.lock().unwrap_or_else(|e| e.into_inner());
        for (old, new) in entry.norm.ids.iter().zip(&norm.ids) {
            if old != new {
                map.insert(old.clone(), new.clone());
            }
        }
        Some(entry)
    }

    /// The recorded response with the ids this run re-issued in place of recorded ones.
    fn answer(&self, entry: &Recorded) -> Result<ModelResponse, ModelError> {
        let response = entry.outcome.clone()?;
        let map = self
            .reissued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if map.is_empty() {
            return Ok(response);
        }
        let Ok(mut v) = serde_json::to_value(&response) else {
            return Ok(response);
        };
        normalize::reissue(&mut v, &map);
        Ok(serde_json::from_value(v).unwrap_or(response))
    }

    fn agent_name(&self, request: &ModelRequest) -> String {
        match &self.namer {
            Some(n) => n(request),
            None => {
                let task = request
                    .messages
                    .iter()
                    .find(|m| m.role == super::Role::User)
                    .map(|m| m.content.chars().take(40).collect::<String>())
                    .unwrap_or_default();
                format!("the agent with task {task:?}")
            }
        }
    }

    fn mismatch(&self, index: usize, request: &ModelRequest, norm: &Normalized) -> ModelError {
        let used = self.used_flags();
        let (agent, step) = agent_and_step(&norm.value);
        let unused: Vec<&Recorded> = self
            .entries
            .iter()
            .zip(&used)
            .filter(|(_, u)| !**u)
            .map(|(e, _)| e)
            .collect();
        let same_agent: Vec<&Recorded> = unused
            .iter()
            .copied()
            .filter(|e| e.agent == agent)
            .collect();
        let same_step: Vec<&Recorded> = same_agent
            .iter()
            .copied()
            .filter(|e| e.step == step)
            .collect();
        let pool: Vec<&Recorded> = [&same_step, &same_agent, &unused]
            .into_iter()
            .find(|p| !p.is_empty())
            .cloned()
            .unwrap_or_else(|| self.entries.iter().collect());
        let got = norm.request().unwrap_or_else(|| request.clone());
        let nearest = pool
            .iter()
            .map(|e| (e, e.norm.request().unwrap_or_else(|| e.request.clone())))
            .max_by_key(|(_, r)| closeness(r, &got));
        let mut detail = format!(
            "{}, step {}: request for model '{}' ending with {} matches no {}recorded request in {}",
            self.agent_name(request),
            step + 1,
            request.model,
            describe_message(request.messages.last()),
            if unused.is_empty() { "" } else { "unused " },
            self.path.display()
        );
        if unused.is_empty() {
            detail.push_str(&format!(
                " (all {} recorded requests were already answered)",
                self.entries.len()
            ));
        } else if same_agent.is_empty() {
            detail.push_str(" (no recorded agent has this system prompt and task)");
        } else if same_step.is_empty() {
            let mut steps: Vec<usize> = same_agent.iter().map(|e| e.step + 1).collect();
            steps.sort_unstable();
            steps.dedup();
            detail.push_str(&format!(
                " (this agent's unanswered recorded steps: {steps:?})"
            ));
        }
        if let Some((n, r)) = nearest {
            detail.push_str(&format!(
                "; nearest is line {} ({}, step {}): {}",
                n.line,
                self.agent_name(&n.request),
                n.step + 1,
                differences(&r, &got)
            ));
        }
        ModelError::ReplayMismatch { index, detail }
    }
}

#[async_trait]
impl Model for Replayer {
    fn provider_name(&self) -> &str {
        "replay"
    }

    async fn step(
        &self,
        request: &ModelRequest,
        on_event: EventFn<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let index = self.arrivals.fetch_add(1, Ordering::SeqCst);
        let norm = Normalized::of(request);
        let Some(entry) = self.claim(&norm) else {
            return Err(self.mismatch(index, request, &norm));
        };
        let response = self.answer(entry)?;
        emit_response_events(&response, on_event);
        Ok(response)
    }
}

/// How alike two requests are: the common prefix of messages first, then model,
/// system prompt and tools.
fn closeness(a: &ModelRequest, b: &ModelRequest) -> (usize, bool, bool, bool) {
    let prefix = a
        .messages
        .iter()
        .zip(&b.messages)
        .take_while(|(x, y)| x == y)
        .count();
    (
        prefix,
        a.model == b.model,
        a.system == b.system,
        a.tools == b.tools,
    )
}

/// The first way `got` differs from `recorded`.
fn differences(recorded: &ModelRequest, got: &ModelRequest) -> String {
    if recorded.model != got.model {
        return format!("model: recorded '{}', got '{}'", recorded.model, got.model);
    }
    if recorded.system != got.system {
        return format!(
            "system prompt: {}",
            text_diff(&recorded.system, &got.system)
        );
    }
    for (i, (r, g)) in recorded.messages.iter().zip(&got.messages).enumerate() {
        if r != g {
            let what = if r.role != g.role {
                format!("role: recorded {:?}, got {:?}", r.role, g.role)
            } else if r.content != g.content {
                text_diff(&r.content, &g.content)
            } else {
                format!(
                    "recorded {}, got {}",
                    describe_message(Some(r)),
                    describe_message(Some(g))
                )
            };
            return format!("messages[{i}] differs: {what}");
        }
    }
    if recorded.messages.len() != got.messages.len() {
        return format!(
            "recorded {} messages, got {} (first extra: {})",
            recorded.messages.len(),
            got.messages.len(),
            if got.messages.len() > recorded.messages.len() {
                describe_message(got.messages.get(recorded.messages.len()))
            } else {
                describe_message(recorded.messages.get(got.messages.len()))
            }
        );
    }
    if recorded.tools != got.tools {
        let names = |r: &ModelRequest| {
            r.tools
                .iter()
                .map(|t| &*t.name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        return format!(
            "tools: recorded [{}], got [{}]",
            names(recorded),
            names(got)
        );
    }
    if recorded.tool_choice != got.tool_choice {
        return format!(
            "tool_choice: recorded {:?}, got {:?}",
            recorded.tool_choice, got.tool_choice
        );
    }
    if recorded.sampling != got.sampling {
        return format!(
            "sampling: recorded {:?}, got {:?}",
            recorded.sampling, got.sampling
        );
    }
    "identical, but already answered".to_string()
}

/// Where two texts first differ, with a little context.
fn text_diff(recorded: &str, got: &str) -> String {
    let at = recorded
        .chars()
        .zip(got.chars())
        .take_while(|(a, b)| a == b)
        .count();
    let around = |s: &str| {
        let tail: String = s.chars().skip(at.saturating_sub(20)).take(60).collect();
        format!("{tail:?}")
    };
    format!(
        "text differs at character {at}: recorded …{}, got …{}",
        around(recorded),
        around(got)
    )
}

fn describe_message(m: Option<&Message>) -> String {
    let Some(m) = m else {
        return "no message".to_string();
    };
    let role = format!("{:?}", m.role).to_lowercase();
    if m.content.is_empty() && !m.tool_calls.is_empty() {
        let names: Vec<&str> = m.tool_calls.iter().map(|c| c.name.as_str()).collect();
        return format!("{role} message calling {}", names.join(", "));
    }
    let preview: String = m.content.chars().take(80).collect();
    let more = if m.content.chars().count() > 80 {
        "…"
    } else {
        ""
    };
    format!("{role} message {preview:?}{more}")
}
