//! The spawn gate: a child's first request leaves while its spawn record commits,
//! but the child records nothing, reports nothing and calls no tool until the
//! record is on disk — and a spawn whose record fails leaves no trace and its
//! answer never reaches anyone. The ledger's write lock is held from outside (as
//! another brood process would) until the children's first requests reach the mock.

use crate::common::hand_built::*;
use crate::common::*;
use async_trait::async_trait;
use brood::ledger::{EventKind, Ledger, LedgerOptions, RunId};
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::Model;
use brood::subagent::Supervisor;
use brood::tool::{Capability, Tool, ToolContext, ToolError};
use brood_mock::{MockReply, MockServer};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A tool that notes, for each call, whether its run's spawn record was committed.
struct Probe {
    db: PathBuf,
    calls: Arc<Mutex<Vec<(String, bool)>>>,
}

#[async_trait]
impl Tool for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn description(&self) -> &str {
        "Notes whether its run is on disk."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let on_disk = spawn_committed(&self.db, &ctx.run_id);
        self.calls
            .lock()
            .unwrap()
            .push((ctx.run_id.clone(), on_disk));
        Ok("probed".into())
    }
}

/// Whether run `id` is committed, read as another process would (WAL: committed
/// data only, never blocked by the writer's lock).
fn spawn_committed(db: &std::path::Path, id: &str) -> bool {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT count(*) FROM runs WHERE id = ?1", [id], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap()
        == 1
}

/// Takes the ledger's write lock from another connection and holds it until `n`
/// children's first requests have reached the mock (or 10 s, a failure). Returns
/// whether they all came while it was held, and when it let go.
fn hold_lock_until_children_ask(db: PathBuf, n: usize, asked: mpsc::Receiver<()>) -> Holder {
    let (locked_tx, locked_rx) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked_tx.send(()).unwrap();
        let all = (0..n).all(|_| asked.recv_timeout(Duration::from_secs(10)).is_ok());
        let released = Instant::now();
        conn.execute_batch("ROLLBACK").unwrap();
        (all, released)
    });
    locked_rx.recv().unwrap();
    holder
}

/// The thread holding the ledger's lock (see [`hold_lock_until_children_ask`]).
type Holder = std::thread::JoinHandle<(bool, Instant)>;

struct Harness {
    _ws: tempfile::TempDir,
    _mock: MockServer,
    ledger: Arc<Ledger>,
    sup: Supervisor,
    probes: Arc<Mutex<Vec<(String, bool)>>>,
    holder: Arc<Mutex<Option<Holder>>>,
    /// The live status of every child when its first request reached the mock.
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

/// What a child's first request gets.
#[derive(Clone, Copy, PartialEq)]
enum First {
    /// A call of `probe` (then the child reports).
    Probe,
    /// The child is cancelled while the request is out, which is never answered.
    Cancelled,
}

/// A parent whose first step makes `open` (`task` or `agent_open` calls) while
/// the ledger is locked until `children` first requests arrived; each child's
/// first request gets `first`. `prepare` runs on the database before the session.
fn harness(open: MockReply, children: usize, prepare: &str, first_reply: First) -> Harness {
    let ws = workspace("");
    let ledger = Arc::new(Ledger::open(ws.path(), LedgerOptions::default()).unwrap());
    let db = ledger.db_path().to_path_buf();
    if !prepare.is_empty() {
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch(prepare)
            .unwrap();
    }
    let (asked_tx, asked_rx) = mpsc::channel();
    let asked_rx = Mutex::new(Some(asked_rx));
    let asked_tx = Mutex::new(asked_tx);
    let holder = Arc::new(Mutex::new(None));
    let sup_cell: Arc<OnceLock<Supervisor>> = Arc::new(OnceLock::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (h, cell, s, lock_db) = (holder.clone(), sup_cell.clone(), seen.clone(), db.clone());
    let mock = MockServer::start(move |req| {
        let first = req.first_user_text().unwrap_or("").to_string();
        match (first.starts_with("parent:"), req.assistant_turns()) {
            (true, 0) => {
                let rx = asked_rx.lock().unwrap().take().expect("one first step");
                let holding = hold_lock_until_children_ask(lock_db.clone(), children, rx);
                *h.lock().unwrap() = Some(holding);
                open.clone()
            }
            (true, _) => MockReply::text("parent fine"),
            (false, 0) => {
                if let Some(sup) = cell.get() {
                    for r in sup.snapshot() {
                        if r.name != "parent" {
                            s.lock()
                                .unwrap()
                                .push((r.agent_id.clone(), r.status.as_str().to_string()));
                            if first_reply == First::Cancelled {
                                sup.cancel(
                                    &r.agent_id,
                                    "cancelled while its first request was out",
                                );
                            }
                        }
                    }
                }
                // The lock goes once every child asked (and was cancelled).
                let _ = asked_tx.lock().unwrap().send(());
                match first_reply {
                    First::Probe => MockReply::tool_call("probe", json!({})),
                    First::Cancelled => MockReply::Hang,
                }
            }
            (false, _) => MockReply::text(report(&format!("{first} finished"))),
        }
    });
    let model: Arc<dyn Model> =
        Arc::new(OpenAiProvider::new(ProviderConfig::new("local", mock.base_url())).unwrap());
    let probes = Arc::new(Mutex::new(Vec::new()));
    let p = probes.clone();
    let sup = supervisor_on(
        ws.path(),
        ledger.clone(),
        model,
        builtin_plus(move || {
            vec![Arc::new(Probe {
                db: db.clone(),
                calls: p.clone(),
            }) as Arc<dyn Tool>]
        }),
    );
    let _ = sup_cell.set(sup.clone());
    Harness {
        _ws: ws,
        _mock: mock,
        ledger,
        sup,
        probes,
        holder,
        seen,
    }
}

impl Harness {
    fn released(&self) -> (bool, Instant) {
        let holder = self
            .holder
            .lock()
            .unwrap()
            .take()
            .expect("the lock was taken");
        holder.join().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_first_request_leaves_while_its_spawn_commits_and_it_acts_only_once_on_disk() {
    let open = MockReply::tool_call("task", json!({"prompts": ["c0", "c1", "c2"]}));
    let h = harness(open, 3, "", First::Probe);
    let (_, outcome) = run_root(&h.sup, "parent: three").await;
    assert_eq!(
        outcome.final_text,
        "parent fine",
        "{}",
        dump(&outcome.messages)
    );
    let (all_asked_while_locked, _) = h.released();
    assert!(
        all_asked_while_locked,
        "the children's first requests did not leave before their spawn records could commit"
    );
    // While their first requests were out, nobody was told they run.
    let seen = h.seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for (id, status) in &seen {
        assert_eq!(
            status, "pending",
            "{id} reported {status} before its spawn was on disk"
        );
    }
    // Their answers (a tool call each) waited for the gate: every tool ran on disk.
    let probes = h.probes.lock().unwrap().clone();
    assert_eq!(probes.len(), 3, "{probes:?}");
    for (id, on_disk) in &probes {
        assert!(on_disk, "{id} ran a tool before its spawn was on disk");
    }
    // What was held is recorded in the order of a child that waited: spawned,
    // started, its first message, then the request and its answer.
    within("the flush", h.ledger.flush()).await.unwrap();
    for (id, _) in &probes {
        let run = RunId::from_string(id);
        let detail = h.ledger.get_run(&run).await.unwrap();
        let kinds: Vec<EventKind> = detail.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds[..6],
            [
                EventKind::Spawned,
                EventKind::Started,
                EventKind::ModelRequest,
                EventKind::ModelResponse,
                EventKind::Usage,
                EventKind::ToolStarted
            ],
            "{id}: {kinds:?}"
        );
        assert_eq!(detail.run.status, brood::ledger::RunStatus::Completed);
        let transcript = h.ledger.transcript(&run, 0, 100).await.unwrap().entries;
        assert_eq!(transcript[0].role, "user", "{transcript:?}");
        assert_eq!(
            transcript[0].content["content"],
            detail.run.objective.as_str()
        );
    }
    h.sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_whose_record_fails_leaves_no_trace_and_its_answer_reaches_nobody() {
    // The ledger refuses this one spawn (as a full disk or a broken database would).
    let refuse = "CREATE TRIGGER refuse_doomed BEFORE INSERT ON runs \
                  WHEN NEW.objective = 'DOOMED' \
                  BEGIN SELECT RAISE(ABORT, 'this test refuses the spawn'); END;";
    let open = MockReply::tool_call("agent_open", json!({"prompt": "DOOMED"}));
    let h = harness(open, 1, refuse, First::Probe);
    let (_, outcome) = run_root(&h.sup, "parent: one").await;
    let (asked_while_locked, _) = h.released();
    assert!(
        asked_while_locked,
        "the child's first request did not leave before its spawn record could commit"
    );
    assert_eq!(
        outcome.final_text,
        "parent fine",
        "{}",
        dump(&outcome.messages)
    );
    let told = tool_results_of(&outcome.messages);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].starts_with("error:") && told[0].contains("refuses the spawn"),
        "the parent is told the spawn failed: {told:?}"
    );
    h.sup.shutdown().await;
    // Its answer (a tool call) was dropped: no tool ran, nothing was pushed to the
    // parent, nothing of it is in the ledger.
    assert!(
        h.probes.lock().unwrap().is_empty(),
        "a tool ran for a spawn that failed"
    );
    assert!(
        !outcome
            .messages
            .iter()
            .any(|m| m.content.contains("Background sub-agent")),
        "{}",
        dump(&outcome.messages)
    );
    within("the flush", h.ledger.flush()).await.unwrap();
    let runs = h.ledger.list_runs(Default::default()).await.unwrap();
    assert_eq!(runs.len(), 1, "only the parent is recorded: {runs:?}");
    let conn = rusqlite::Connection::open(h.ledger.db_path()).unwrap();
    let stray: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM events WHERE run_id NOT IN (SELECT id FROM runs)) \
                  + (SELECT count(*) FROM transcripts WHERE run_id NOT IN (SELECT id FROM runs))",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stray, 0, "records of a run that was never spawned");
}

fn tool_results_of(messages: &[brood::model::Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == brood::model::Role::Tool)
        .map(|m| m.content.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_cancelled_before_its_spawn_commits_records_what_it_held_then_its_end() {
    let open = MockReply::tool_call("agent_open", json!({"prompt": "c0"}));
    let h = harness(open, 1, "", First::Cancelled);
    let (_, outcome) = run_root(&h.sup, "parent: one").await;
    assert_eq!(
        outcome.final_text,
        "parent fine",
        "{}",
        dump(&outcome.messages)
    );
    let (asked_while_locked, _) = h.released();
    assert!(asked_while_locked);
    let seen = h.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    h.sup.shutdown().await;
    within("the flush", h.ledger.flush()).await.unwrap();
    let run = RunId::from_string(&seen[0].0);
    let detail = h.ledger.get_run(&run).await.unwrap();
    let kinds: Vec<EventKind> = detail.events.iter().map(|e| e.kind).collect();
    // Once on disk, what it held — it started, its request — then its end; no
    // answer, no tool.
    assert_eq!(
        kinds[..3],
        [
            EventKind::Spawned,
            EventKind::Started,
            EventKind::ModelRequest
        ],
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&EventKind::Cancelled), "{kinds:?}");
    assert!(!kinds.contains(&EventKind::ModelResponse), "{kinds:?}");
    assert_eq!(detail.run.status, brood::ledger::RunStatus::Cancelled);
    assert!(h.probes.lock().unwrap().is_empty());
    let transcript = h.ledger.transcript(&run, 0, 100).await.unwrap().entries;
    assert_eq!(transcript[0].content["content"], "c0", "{transcript:?}");
}
