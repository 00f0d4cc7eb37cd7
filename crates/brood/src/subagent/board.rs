//! The supervisor: one per session. It admits runs (depth, total, cap), hands out
//! running slots (children beyond `launch_concurrency` wait in `queued`), tracks
//! progress for the heartbeat, and keeps the registry of live and settled runs.
//!
//! The registry is behind a `std::sync::Mutex` that is only ever held for a few
//! field updates — never across an `.await` or I/O. Listings copy a snapshot.
//! Progress is an atomic per run, so stream deltas never take the lock.

use super::inbox::{Claim, RunInbox};
use super::result::ChildResult;
use super::SpawnError;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Limits the supervisor enforces (resolved from `[subagents]`).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Running children at once across the session (`max_concurrent`).
    pub max_concurrent: usize,
    /// Children started at once; the rest wait in `queued` (`launch_concurrency`).
    pub launch_concurrency: usize,
    /// How deep the tree may grow; agents at the limit get no delegation tools (`max_depth`).
    pub max_depth: u32,
    /// Spawns per session (`max_total`).
    pub max_total: usize,
    /// No progress for this long cancels a run (`heartbeat_timeout_secs`).
    pub heartbeat: Duration,
}

/// A run's status: the ledger's lifecycle, shared so the supervisor and the
/// record can never disagree on what a status means.
pub use crate::ledger::RunStatus as LiveStatus;

/// Shared, lock-free progress clock of one run.
#[derive(Debug)]
pub struct Progress {
    epoch: Instant,
    last_ms: AtomicU64,
    /// While set (waiting on its own children, or queued), the heartbeat skips it.
    paused: AtomicBool,
    /// Tool calls executing now. Tools bound themselves (shell timeouts, waits on
    /// children), so a long `cargo test` is not mistaken for a stall.
    tools_in_flight: AtomicU32,
}

impl Progress {
    fn new(epoch: Instant) -> Self {
        Progress {
            epoch,
            last_ms: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            paused: AtomicBool::new(true),
            tools_in_flight: AtomicU32::new(0),
        }
    }
    /// Something happened: a stream delta, a tool event.
    pub fn touch(&self) {
        self.last_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    /// Stop (true) or resume (false) the heartbeat clock; resuming restarts it.
    pub fn pause(&self, paused: bool) {
        if !paused {
            self.touch();
        }
        self.paused.store(paused, Ordering::Relaxed);
    }
    pub fn tool_started(&self) {
        self.tools_in_flight.fetch_add(1, Ordering::Relaxed);
    }
    pub fn tool_finished(&self) {
        let _ = self
            .tools_in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        self.touch();
    }
    fn idle_for(&self) -> Option<Duration> {
        if self.paused.load(Ordering::Relaxed) || self.tools_in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let now = self.epoch.elapsed().as_millis() as u64;
        Some(Duration::from_millis(
            now.saturating_sub(self.last_ms.load(Ordering::Relaxed)),
        ))
    }
}

/// Everything the supervisor keeps about one run.
pub(crate) struct Entry {
    pub id: String,
    pub name: String,
    pub parent_id: Option<String>,
    pub depth: u32,
    pub role: String,
    pub background: bool,
    pub status: LiveStatus,
    pub cancel: CancellationToken,
    pub cancel_reason: Option<String>,
    pub progress: Arc<Progress>,
    pub inbox: Arc<RunInbox>,
    pub claim: Arc<Claim>,
    pub result: watch::Receiver<Option<Box<ChildResult>>>,
    pub transcript_handle: String,
}

/// A copy of one entry, for listings (never blocks the runs).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunSnapshot {
    /// The run's id.
    pub agent_id: String,
    /// Its name, unique among the live runs.
    pub name: String,
    /// The run that opened it (`None` for a root).
    pub parent_id: Option<String>,
    /// 0 for a root, 1 for its children, and so on.
    pub depth: u32,
    /// The agent type it runs as (definition or role name).
    pub role: String,
    /// Opened with `agent_open` (belongs to the session) rather than `task`.
    pub background: bool,
    /// Where it is in its lifecycle.
    pub status: LiveStatus,
    /// The handle `handle_read` takes to read its transcript.
    pub transcript_handle: String,
}

#[derive(Default)]
struct Registry {
    runs: HashMap<String, Entry>,
    /// Names of the live (non-terminal) runs: a name is unique among them.
    live_names: HashSet<String>,
    /// For a name that is taken, the last suffix handed out (`name-N`), so the next
    /// one starts there instead of trying `-2`, `-3`, … again: with a scan of every
    /// run per try, 200 unnamed `task` children cost O(N³) under the registry lock.
    last_suffix: HashMap<String, usize>,
    /// Live runs admitted against `max_concurrent` (pending, queued or running).
    admitted: usize,
    total_spawned: usize,
    /// Why a root run was cancelled (roots are not in `runs`: they hold no slot and
    /// count against no limit). The first reason wins; taken when the root ends.
    root_reasons: HashMap<String, String>,
}

/// The registry and the slots. Cheap to clone.
#[derive(Clone)]
pub struct Board {
    limits: Arc<Limits>,
    registry: Arc<Mutex<Registry>>,
    slots: Arc<Semaphore>,
    epoch: Instant,
    /// Bumped after every admission and status change, so observers (a UI, tests)
    /// can wait for the next change instead of polling.
    changes: Arc<watch::Sender<u64>>,
}

impl Board {
    pub fn new(limits: Limits) -> Self {
        let slots = Arc::new(Semaphore::new(
            limits.launch_concurrency.min(limits.max_concurrent).max(1),
        ));
        Board {
            limits: Arc::new(limits),
            registry: Arc::new(Mutex::new(Registry::default())),
            slots,
            epoch: Instant::now(),
            changes: Arc::new(watch::channel(0).0),
        }
    }

    /// A receiver that sees a new value after every admission or status change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn new_progress(&self) -> Arc<Progress> {
        Arc::new(Progress::new(self.epoch))
    }

    /// Admit a new run: checks depth, the session total and (for background
    /// children) the cap. Task children are admitted beyond the cap and queue.
    pub(crate) fn admit(
        &self,
        mut entry: Entry,
        enforce_cap: bool,
    ) -> Result<(String, String), SpawnError> {
        let mut reg = self.lock();
        if entry.depth > self.limits.max_depth {
            return Err(SpawnError::DepthLimit {
                max_depth: self.limits.max_depth,
            });
        }
        if reg.total_spawned >= self.limits.max_total {
            return Err(SpawnError::TotalLimit {
                max_total: self.limits.max_total,
            });
        }
        if enforce_cap && reg.admitted >= self.limits.max_concurrent {
            return Err(SpawnError::CapReached {
                max_concurrent: self.limits.max_concurrent,
            });
        }
        // Names are unique among live runs only: suffix a taken name.
        if reg.live_names.contains(&entry.name) {
            let base = std::mem::take(&mut entry.name);
            let mut n = reg.last_suffix.get(&base).copied().unwrap_or(1);
            loop {
                n += 1;
                let candidate = format!("{base}-{n}");
                if !reg.live_names.contains(&candidate) {
                    entry.name = candidate;
                    break;
                }
            }
            reg.last_suffix.insert(base, n);
        } else {
            // The name itself is free again: its suffixes start over.
            reg.last_suffix.remove(&entry.name);
        }
        reg.live_names.insert(entry.name.clone());
        reg.admitted += 1;
        reg.total_spawned += 1;
        let out = (entry.id.clone(), entry.name.clone());
        reg.runs.insert(entry.id.clone(), entry);
        drop(reg);
        self.changed();
        Ok(out)
    }

    /// Wait for a running slot. Returns `None` if cancelled first.
    pub async fn acquire_slot(&self, cancel: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        // A run cancelled while it waited must not start, even when a slot came
        // free at the same moment.
        let permit = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            p = self.slots.clone().acquire_owned() => p.ok(),
        };
        permit.filter(|_| !cancel.is_cancelled())
    }

    /// Whether a slot is free right now (the run will not be queued).
    pub fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    pub fn set_status(&self, id: &str, status: LiveStatus) {
        let mut reg = self.lock();
        let mut release = None;
        let mut changed = false;
        if let Some(e) = reg.runs.get_mut(id) {
            if !e.status.is_terminal() {
                if status.is_terminal() {
                    release = Some(e.name.clone());
                }
                changed = e.status != status;
                e.status = status;
            }
        }
        if let Some(name) = release {
            reg.admitted = reg.admitted.saturating_sub(1);
            reg.live_names.remove(&name);
        }
        drop(reg);
        if changed {
            self.changed();
        }
    }

    /// Cancel a run, remembering why (the first reason wins).
    pub fn cancel(&self, id: &str, reason: &str) -> bool {
        let token = {
            let mut reg = self.lock();
            let Some(e) = reg.runs.get_mut(id) else {
                return false;
            };
            if e.status.is_terminal() {
                return false;
            }
            if e.cancel_reason.is_none() {
                e.cancel_reason = Some(reason.to_string());
            }
            e.cancel.clone()
        };
        token.cancel();
        true
    }

    /// Remember why live run `id` is about to be cancelled (the first reason
    /// wins) without cancelling it yet; `false` if it is unknown or ended.
    pub fn note_reason(&self, id: &str, reason: &str) -> bool {
        let mut reg = self.lock();
        match reg.runs.get_mut(id) {
            Some(e) if !e.status.is_terminal() => {
                e.cancel_reason.get_or_insert_with(|| reason.to_string());
                true
            }
            _ => false,
        }
    }

    /// Remember why root run `id` is being cancelled (the first reason wins); the
    /// caller cancels its token.
    pub fn note_root_reason(&self, id: &str, reason: &str) {
        self.lock()
            .root_reasons
            .entry(id.to_string())
            .or_insert_with(|| reason.to_string());
    }

    /// Why root run `id` was cancelled, if someone said.
    pub fn root_reason(&self, id: &str) -> Option<String> {
        self.lock().root_reasons.get(id).cloned()
    }

    /// As [`Board::root_reason`], and forgets it (the root has ended).
    pub fn take_root_reason(&self, id: &str) -> Option<String> {
        self.lock().root_reasons.remove(id)
    }

    pub fn cancel_reason(&self, id: &str) -> Option<String> {
        self.lock()
            .runs
            .get(id)
            .and_then(|e| e.cancel_reason.clone())
    }

    /// Fields a caller needs to wait on or talk to a run.
    pub(crate) fn handles(&self, id: &str) -> Option<RunHandles> {
        self.lock().runs.get(id).map(|e| RunHandles {
            parent_id: e.parent_id.clone(),
            status: e.status,
            inbox: e.inbox.clone(),
            claim: e.claim.clone(),
            result: e.result.clone(),
        })
    }

    /// Find a run by id, unique id prefix, or live name.
    pub fn lookup(&self, key: &str) -> Option<String> {
        let reg = self.lock();
        lookup_where(&reg, key, |_| true)
    }

    /// Find a child of `parent` by id, live name (else any name), or unique id prefix.
    pub fn lookup_child(&self, parent: &str, key: &str) -> Option<String> {
        let reg = self.lock();
        lookup_where(&reg, key, |e| e.parent_id.as_deref() == Some(parent))
    }

    /// Find a run below `ancestor` (a child, a grandchild, …) by id, live name (else
    /// any name), or unique id prefix.
    pub fn lookup_descendant(&self, ancestor: &str, key: &str) -> Option<String> {
        let reg = self.lock();
        lookup_where(&reg, key, |e| descends_from(&reg, e, ancestor))
    }

    pub fn snapshot(&self) -> Vec<RunSnapshot> {
        let reg = self.lock();
        let mut v: Vec<RunSnapshot> = reg
            .runs
            .values()
            .map(|e| RunSnapshot {
                agent_id: e.id.clone(),
                name: e.name.clone(),
                parent_id: e.parent_id.clone(),
                depth: e.depth,
                role: e.role.clone(),
                background: e.background,
                status: e.status,
                transcript_handle: e.transcript_handle.clone(),
            })
            .collect();
        v.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        v
    }

    /// Number of runs in `Running` (for tests and the cap).
    pub fn running(&self) -> usize {
        self.lock()
            .runs
            .values()
            .filter(|e| e.status == LiveStatus::Running)
            .count()
    }

    /// One heartbeat pass: cancel every running run idle longer than the window.
    pub fn sweep(&self) -> Vec<String> {
        let window = self.limits.heartbeat;
        let stale: Vec<(String, CancellationToken)> = {
            let mut reg = self.lock();
            let mut out = Vec::new();
            for e in reg.runs.values_mut() {
                if e.status != LiveStatus::Running {
                    continue;
                }
                if let Some(idle) = e.progress.idle_for() {
                    if idle > window && e.cancel_reason.is_none() {
                        e.cancel_reason = Some(format!(
                            "heartbeat: no progress for {} (heartbeat_timeout_secs)",
                            describe(window)
                        ));
                        out.push((e.id.clone(), e.cancel.clone()));
                    }
                }
            }
            out
        };
        for (_, t) in &stale {
            t.cancel();
        }
        stale.into_iter().map(|(id, _)| id).collect()
    }
}

/// A run among those `keep` accepts, by id, live name (else any name), or unique id
/// prefix.
fn lookup_where(reg: &Registry, key: &str, keep: impl Fn(&Entry) -> bool) -> Option<String> {
    if let Some(e) = reg.runs.get(key).filter(|e| keep(e)) {
        return Some(e.id.clone());
    }
    let runs: Vec<&Entry> = reg.runs.values().filter(|e| keep(e)).collect();
    let by_name: Vec<&&Entry> = runs.iter().filter(|e| e.name == key).collect();
    if let Some(e) = by_name
        .iter()
        .find(|e| !e.status.is_terminal())
        .or(by_name.first())
    {
        return Some(e.id.clone());
    }
    let by_prefix: Vec<&&Entry> = runs.iter().filter(|e| e.id.starts_with(key)).collect();
    match by_prefix.as_slice() {
        [only] => Some(only.id.clone()),
        _ => None,
    }
}

/// Whether `e` sits below `ancestor` in the tree.
fn descends_from(reg: &Registry, e: &Entry, ancestor: &str) -> bool {
    let mut parent = e.parent_id.as_deref();
    while let Some(p) = parent {
        if p == ancestor {
            return true;
        }
        parent = reg.runs.get(p).and_then(|x| x.parent_id.as_deref());
    }
    false
}

/// A window in words: whole seconds, or milliseconds below a second.
fn describe(d: Duration) -> String {
    if d >= Duration::from_secs(1) && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Handles of one run, copied out of the registry.
#[derive(Clone)]
pub(crate) struct RunHandles {
    pub parent_id: Option<String>,
    pub status: LiveStatus,
    pub inbox: Arc<RunInbox>,
    pub claim: Arc<Claim>,
    pub result: watch::Receiver<Option<Box<ChildResult>>>,
}
