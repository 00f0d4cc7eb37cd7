//! Recording model steps to a file and answering from it later (`--record` / `--replay`).
//!
//! [`Recorder`] wraps any [`Model`] and appends one JSON line per step:
//! `{"seq": N, "provider": "...", "request": {...}, "response": {...}}` (or `"error"`
//! instead of `"response"` for a failed step). Lines are written by one writer thread,
//! flushed one by one, so concurrent steps never interleave and no lock is held while
//! anything waits.
//!
//! [`Replayer`] answers from such a file without network. Concurrent children make
//! the order of requests nondeterministic, so each request is matched against the
//! recorded requests not used yet, by exact equality; a request without a match fails
//! with [`ModelError::ReplayMismatch`] saying how it differs from the nearest recorded
//! one.

use super::{
    emit_response_events, EventFn, Message, Model, ModelError, ModelRequest, ModelResponse,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use thiserror::Error;
use tokio::sync::oneshot;

/// A recording file that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RecordError {
    #[error("cannot open the recording {path}: {detail}")]
    Open { path: PathBuf, detail: String },
    #[error("{path}:{line}: not a recorded model step ({detail}); was it written by --record?")]
    BadLine {
        path: PathBuf,
        line: usize,
        detail: String,
    },
    #[error("{path} holds no recorded model steps; record a run with --record first")]
    Empty { path: PathBuf },
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
    path: PathBuf,
    jobs: mpsc::Sender<WriteJob>,
    seq: AtomicU64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("inner", &self.inner.provider_name())
            .field("path", &self.path)
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
            path,
            jobs,
            seq: AtomicU64::new(0),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn write(&self, entry: &Entry) -> Result<(), ModelError> {
        let fail = |d: String| ModelError::Record(format!("{}: {d}", self.path.display()));
        let mut line = serde_json::to_string(entry).map_err(|e| fail(e.to_string()))?;
        line.push('\n');
        let (tx, rx) = oneshot::channel();
        self.jobs
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
            seq: self.seq.fetch_add(1, Ordering::SeqCst),
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
}

#[derive(Debug, Clone)]
struct Recorded {
    line: usize,
    request: ModelRequest,
    outcome: Result<ModelResponse, ModelError>,
}

/// Answers from a recording (see the module docs).
#[derive(Debug)]
pub struct Replayer {
    path: PathBuf,
    entries: Vec<Recorded>,
    used: Mutex<Vec<bool>>,
    arrivals: AtomicUsize,
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
            entries.push(Recorded {
                line: i + 1,
                request: e.request,
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
            arrivals: AtomicUsize::new(0),
        })
    }

    /// Recorded steps in the file.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

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

    /// Claim the first unused entry equal to `request`.
    fn claim(&self, request: &ModelRequest) -> Option<usize> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let i =
            (0..self.entries.len()).find(|&i| !used[i] && self.entries[i].request == *request)?;
        used[i] = true;
        Some(i)
    }

    fn mismatch(&self, index: usize, request: &ModelRequest) -> ModelError {
        let used = self.used_flags();
        let unused: Vec<&Recorded> = self
            .entries
            .iter()
            .zip(&used)
            .filter(|(_, u)| !**u)
            .map(|(e, _)| e)
            .collect();
        let pool: Vec<&Recorded> = if unused.is_empty() {
            self.entries.iter().collect()
        } else {
            unused.clone()
        };
        let nearest = pool
            .iter()
            .max_by_key(|e| closeness(&e.request, request))
            .copied();
        let mut detail = format!(
            "request for model '{}' ending with {} matches no {}recorded request in {}",
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
        }
        if let Some(n) = nearest {
            detail.push_str(&format!(
                "; nearest is line {}: {}",
                n.line,
                differences(&n.request, request)
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
        let Some(i) = self.claim(request) else {
            return Err(self.mismatch(index, request));
        };
        let response = self.entries[i].outcome.clone()?;
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
