//! Sub-agent runtime records while another process holds the ledger's write lock:
//! spawn records and end-of-run records wait the lock out instead of being lost
//! (what a child may do meanwhile: `runtime_spawn_gate`).

use crate::common::hand_built::*;
use crate::common::*;
use async_trait::async_trait;
use brood::agent::AgentOutcome;
use brood::ledger::{Ledger, LedgerOptions};
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::model::{Model, ModelError};
use serde_json::{json, Value};
use std::sync::Arc;

/// Holds the ledger's write lock from outside during the parent's first step (the
/// one that opens the children), and notes when each child's model step starts.
struct LockDuringSpawn {
    inner: ScriptedModel,
    db: std::path::PathBuf,
    /// The thread holding the lock; it returns when it released it.
    holder: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<std::time::Instant>>>>,
    child_steps: Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
}

#[async_trait]
impl Model for LockDuringSpawn {
    fn provider_name(&self) -> &str {
        "lock-during-spawn"
    }
    async fn step(
        &self,
        request: &brood::model::ModelRequest,
        on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, ModelError> {
        let first = request.messages.first().map(|m| m.content.as_str());
        let is_parent = first.is_some_and(|t| t.starts_with("parent:"));
        if is_parent && request.messages.len() == 1 {
            let (locked_tx, locked_rx) = std::sync::mpsc::channel();
            let db = self.db.clone();
            let holder = std::thread::spawn(move || {
                let conn = rusqlite::Connection::open(db).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                locked_tx.send(()).unwrap();
                // The stall every spawn record has to wait out.
                std::thread::sleep(std::time::Duration::from_millis(300));
                let released = std::time::Instant::now();
                conn.execute_batch("ROLLBACK").unwrap();
                released
            });
            *self.holder.lock().unwrap() = Some(holder);
            locked_rx.recv().unwrap();
        } else if !is_parent {
            self.child_steps
                .lock()
                .unwrap()
                .push(std::time::Instant::now());
        }
        self.inner.step(request, on_event).await
    }
}

/// The parent opens three children while the ledger is locked from outside for
/// 300 ms; returns the parent's outcome, when the lock was released and when each
/// child's model step started.
async fn open_children_under_a_locked_ledger(
    options: LedgerOptions,
) -> (AgentOutcome, std::time::Instant, Vec<std::time::Instant>) {
    let ws = workspace("");
    let db = Ledger::open(ws.path(), LedgerOptions::default())
        .unwrap()
        .db_path()
        .to_path_buf();
    let holder = Arc::new(std::sync::Mutex::new(None));
    let child_steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let model = LockDuringSpawn {
        inner: ScriptedModel::new()
            .on(
                "parent:",
                vec![
                    ScriptStep::tool_call("task", json!({"prompts": ["c0", "c1", "c2"]})),
                    ScriptStep::text("parent fine"),
                ],
            )
            .otherwise(vec![ScriptStep::text(report("child fine"))]),
        db,
        holder: holder.clone(),
        child_steps: child_steps.clone(),
    };
    let sup = supervisor_with(ws.path(), Arc::new(model), builtin_plus(Vec::new), options);
    let (_, outcome) = run_root(&sup, "parent: three").await;
    sup.shutdown().await;
    let holder = holder.lock().unwrap().take().expect("the lock was taken");
    let released = holder.join().unwrap();
    let steps = child_steps.lock().unwrap().clone();
    (outcome, released, steps)
}

/// The text of the parent's first tool result (its `task` call's).
fn first_tool_result(outcome: &AgentOutcome) -> String {
    outcome
        .messages
        .iter()
        .find(|m| m.role == brood::model::Role::Tool)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_spawn_record_waits_out_a_lock_held_past_the_busy_timeout() {
    // The writer's busy timeout ends long before the lock is released: it waits and
    // tries again instead of failing the spawns, and the children run once recorded.
    let options = LedgerOptions {
        busy_timeout: std::time::Duration::from_millis(50),
        ..LedgerOptions::default()
    };
    let (outcome, _, steps) = open_children_under_a_locked_ledger(options).await;
    assert_eq!(outcome.final_text, "parent fine");
    assert_eq!(steps.len(), 3, "each child made its step");
    let task_result: Value = serde_json::from_str(&first_tool_result(&outcome)).unwrap();
    assert_eq!(task_result["results"].as_array().map(Vec::len), Some(3));
    assert_eq!(task_result.to_string(), first_tool_result(&outcome));
    for r in task_result["results"].as_array().unwrap() {
        assert_eq!(r["status"], "completed", "{task_result}");
    }
}

/// Takes the ledger's write lock from outside when the first child asks its model,
/// and holds it until the writer has been seen retrying `retries` times: the
/// children's and the parent's end-of-run records all meet the lock.
struct LockAcrossTheEnd {
    inner: ScriptedModel,
    db: std::path::PathBuf,
    ledger: Arc<Ledger>,
    retries: u64,
    holder: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<u64>>>>,
}

#[async_trait]
impl Model for LockAcrossTheEnd {
    fn provider_name(&self) -> &str {
        "lock-across-the-end"
    }
    async fn step(
        &self,
        request: &brood::model::ModelRequest,
        on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, ModelError> {
        let first = request.messages.first().map(|m| m.content.as_str());
        let is_child = !first.is_some_and(|t| t.starts_with("parent:"));
        let locked = {
            let mut holder = self.holder.lock().unwrap();
            if is_child && holder.is_none() {
                let (locked_tx, locked_rx) = std::sync::mpsc::channel();
                let (db, ledger, want) = (self.db.clone(), self.ledger.clone(), self.retries);
                *holder = Some(std::thread::spawn(move || {
                    let conn = rusqlite::Connection::open(db).unwrap();
                    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                    locked_tx.send(()).unwrap();
                    // Release once the writer has been seen waiting (or give up).
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                    let mut seen = ledger.stats();
                    while (seen.busy_retries < want || seen.waiting_since_ms.is_none())
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        seen = ledger.stats();
                    }
                    conn.execute_batch("ROLLBACK").unwrap();
                    seen.busy_retries
                }));
                Some(locked_rx)
            } else {
                None
            }
        };
        if let Some(rx) = locked {
            rx.recv().unwrap();
        }
        self.inner.step(request, on_event).await
    }
}

#[tokio::test]
async fn end_of_run_records_wait_out_a_lock_held_across_the_end_of_a_fan_out() {
    let ws = workspace("");
    let options = LedgerOptions {
        busy_timeout: std::time::Duration::from_millis(200),
        ..LedgerOptions::default()
    };
    let ledger = Arc::new(Ledger::open(ws.path(), options).unwrap());
    let holder = Arc::new(std::sync::Mutex::new(None));
    let model = LockAcrossTheEnd {
        inner: ScriptedModel::new()
            .on(
                "parent:",
                vec![
                    ScriptStep::tool_call("task", json!({"prompts": ["c0", "c1", "c2"]})),
                    ScriptStep::text("parent fine"),
                ],
            )
            .otherwise(vec![ScriptStep::text(report("child fine"))]),
        db: ledger.db_path().to_path_buf(),
        ledger: ledger.clone(),
        // About 2 s at a 200 ms busy timeout with the writer's backoff.
        retries: 5,
        holder: holder.clone(),
    };
    let sup = supervisor_on(
        ws.path(),
        ledger.clone(),
        Arc::new(model),
        builtin_plus(Vec::new),
    );
    let (_, outcome) = run_root(&sup, "parent: three").await;
    assert_eq!(outcome.final_text, "parent fine");
    let handle = holder.lock().unwrap().take().expect("the lock was taken");
    let retries = handle.join().unwrap();
    within("the flush", ledger.flush()).await.unwrap();
    let runs = ledger.list_runs(Default::default()).await.unwrap();
    assert_eq!(runs.len(), 4, "{runs:?}");
    for r in &runs {
        assert_eq!(
            r.run.status,
            brood::ledger::RunStatus::Completed,
            "{:?}: {:?}",
            r.run.name,
            r.run.status_reason
        );
        let detail = ledger.get_run(&r.run.id).await.unwrap();
        assert!(
            detail.run.result.is_some(),
            "{:?} lost its result",
            r.run.name
        );
    }
    let stats = ledger.stats();
    assert_eq!(stats.ops_failed, 0, "{stats:?}");
    assert!(
        retries >= 5,
        "the writer was never seen waiting ({retries})"
    );

    assert_eq!(stats.waiting_since_ms, None, "the wait is over");
    assert_eq!(sup.ledger_write_failures(), 0);
    sup.shutdown().await;
}
