//! Operations nobody waits for: a queued (fire-and-forget) transition is ordered
//! before everything queued after it and lands with the next group commit; an
//! invalid one is refused and counted, never written. Numbering stays gap-free
//! around refused ops and when another writer touched the run.

use brood::ledger::{EventKind, Ledger, NewRun, RunStatus, Transition, UsageDelta};
use serde_json::json;
use tempfile::TempDir;

use crate::common::{open, Store};

async fn a_queued_transition_lands_before_what_is_awaited_after_it(ws: Store) {
    let ledger = open(&ws);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    ledger.queue_transition(&a, Transition::Running).unwrap();
    // Awaiting a later op means everything queued before it is on disk too.
    let b = ledger.create_run(NewRun::new("b")).await.unwrap();
    let reader = ws.reader();
    let detail = reader.get_run(&a).unwrap();
    assert_eq!(detail.run.status, RunStatus::Running);
    assert!(detail.run.started_at.is_some());
    let kinds: Vec<EventKind> = detail.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![EventKind::Spawned, EventKind::Started]);
    assert_eq!(reader.run(&b).unwrap().status, RunStatus::Pending);
}

async fn an_invalid_queued_transition_is_counted_and_writes_nothing(ws: Store) {
    let ledger = open(&ws);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    let failed_before = ledger.stats().ops_failed;
    // pending → completed skips running: refused by the writer, not by the call.
    ledger
        .queue_transition(
            &a,
            Transition::Completed {
                result: serde_json::json!("x"),
            },
        )
        .unwrap();
    ledger.flush().await.unwrap();
    assert_eq!(ledger.stats().ops_failed, failed_before + 1);
    let reader = ws.reader();
    let detail = reader.get_run(&a).unwrap();
    assert_eq!(detail.run.status, RunStatus::Pending);
    assert_eq!(detail.events.len(), 1);
}

async fn the_ledgers_own_reads_see_what_it_queued(ws: Store) {
    let ledger = open(&ws);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    // Neither is awaited: both would linger in the writer's queue for a while.
    ledger.queue_transition(&a, Transition::Running).unwrap();
    ledger
        .append_message(&a, "user", serde_json::json!("hello"))
        .unwrap();
    let detail = ledger.get_run(&a).await.unwrap();
    assert_eq!(detail.run.status, RunStatus::Running);
    let slice = ledger.transcript(&a, 0, 10).await.unwrap();
    assert_eq!(slice.entries.len(), 1);
}

async fn refused_ops_in_a_batch_leave_no_gap_in_the_numbering(ws: Store) {
    let ledger = open(&ws);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    let failed_before = ledger.stats().ops_failed;
    // Nothing awaited in between: all of it lands in one group commit.
    ledger
        .append_event(&a, EventKind::ModelRequest, json!({"n": 1}))
        .unwrap();
    ledger
        .queue_transition(&a, Transition::Completed { result: json!("x") })
        .unwrap();
    ledger.append_message(&a, "user", json!("one")).unwrap();
    ledger.queue_transition(&a, Transition::Running).unwrap();
    ledger
        .add_usage(
            &a,
            UsageDelta {
                steps: 1,
                ..UsageDelta::default()
            },
        )
        .unwrap();
    ledger
        .append_event(&a, EventKind::ModelResponse, json!({"n": 2}))
        .unwrap();
    ledger
        .append_message(&a, "assistant", json!("two"))
        .unwrap();
    ledger.flush().await.unwrap();
    assert_eq!(ledger.stats().ops_failed, failed_before + 1);

    let detail = ledger.get_run(&a).await.unwrap();
    let seqs: Vec<u64> = detail.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    let kinds: Vec<EventKind> = detail.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::Spawned,
            EventKind::ModelRequest,
            EventKind::Started,
            EventKind::Usage,
            EventKind::ModelResponse
        ]
    );
    assert_eq!(detail.run.status, RunStatus::Running);
    assert_eq!(detail.run.steps, 1);
    let slice = ledger.transcript(&a, 0, 10).await.unwrap();
    let seqs: Vec<u64> = slice.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1]);
}

async fn a_run_another_writer_appended_to_loses_nothing(ws: Store) {
    // Each session writes its own runs; should a second writer touch one anyway, the
    // owner's next records still land, numbered after it.
    let owner = open(&ws);
    let a = owner.create_run(NewRun::new("a")).await.unwrap();
    owner.mark_running(&a).await.unwrap();
    owner.append_message(&a, "user", json!("first")).unwrap();
    owner.flush().await.unwrap();
    let other = open(&ws);
    other
        .append_event(&a, EventKind::ModelRequest, json!({"by": "other"}))
        .unwrap();
    other.append_message(&a, "user", json!("second")).unwrap();
    other.flush().await.unwrap();

    let failed_before = owner.stats().ops_failed;
    owner
        .append_event(&a, EventKind::ModelResponse, json!({"by": "owner"}))
        .unwrap();
    owner
        .append_message(&a, "assistant", json!("third"))
        .unwrap();
    owner.complete(&a, json!("done")).await.unwrap();
    assert_eq!(owner.stats().ops_failed, failed_before);

    let detail = owner.get_run(&a).await.unwrap();
    let kinds: Vec<EventKind> = detail.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::Spawned,
            EventKind::Started,
            EventKind::ModelRequest,
            EventKind::ModelResponse,
            EventKind::Completed
        ]
    );
    let seqs: Vec<u64> = detail.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    let slice = owner.transcript(&a, 0, 10).await.unwrap();
    let texts: Vec<String> = slice
        .entries
        .iter()
        .map(|e| e.content.to_string())
        .collect();
    assert_eq!(texts, vec!["\"first\"", "\"second\"", "\"third\""]);
}

#[cfg(target_os = "linux")]
/// Nice values of this process's ledger writer threads.
fn writer_nice_values() -> Vec<i64> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap_or_default();
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with("brood-ledger") {
            continue;
        }
        // After the name: state is field 3, nice field 19.
        if let Some(nice) = stat[close + 1..].split_whitespace().nth(16) {
            out.push(nice.parse().unwrap());
        }
    }
    out
}

/// (One backend only: the writer thread is the same for both, and two writers at
/// nice 7 at once would blur what is measured.)
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_writer_runs_at_its_nice_value_and_still_commits() {
    let ws = Store::sqlite();
    let options = brood::ledger::LedgerOptions {
        writer_niceness: 7,
        ..Default::default()
    };
    let ledger = ws.open_with(options);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    // No other test picks 7: this writer is the one at it.
    assert!(
        writer_nice_values().contains(&7),
        "{:?}",
        writer_nice_values()
    );
    let reader = ws.reader();
    assert_eq!(reader.run(&a).unwrap().status, RunStatus::Pending);
    drop(ledger);
    // The drop joined the writer thread; the kernel reaps a joined thread's task a
    // moment after the join returns (the join wakes when the thread clears its tid,
    // before it leaves /proc/self/task), and nothing signals that reaping: look again
    // until it is gone, for at most 10 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while writer_nice_values().contains(&7) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(
        !writer_nice_values().contains(&7),
        "the writer ended with its ledger"
    );
}

/// The writer's queue is bounded: with another connection holding the write lock, a
/// producer that awaits `ready` before each write stops at the bound (and the memory
/// with it) instead of queueing without end; once the lock is released every record
/// it wrote is there.
#[tokio::test]
async fn a_producer_past_the_queue_bound_waits_and_loses_nothing() {
    use futures::FutureExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const BOUND: usize = 64;
    let ws = TempDir::new().unwrap();
    let options = brood::ledger::LedgerOptions {
        max_queued: BOUND,
        max_batch: 16,
        ..Default::default()
    };
    let ledger = Arc::new(Ledger::open(ws.path(), options).unwrap());
    let run = ledger.create_run(NewRun::new("busy")).await.unwrap();
    ledger.mark_running(&run).await.unwrap();
    assert_eq!(ledger.stats().queued, 0, "awaited ops are counted out");

    let blocker = rusqlite::Connection::open(ledger.db_path()).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Fill the queue as a producer does: room first, then the write.
    let mut written = 0;
    while ledger.ready().now_or_never().is_some() {
        ledger
            .append_event(&run, EventKind::ToolFinished, json!({ "i": written }))
            .unwrap();
        written += 1;
        assert!(
            written <= BOUND,
            "{written} ops queued past a bound of {BOUND}"
        );
    }
    assert_eq!(written, BOUND);
    assert_eq!(ledger.stats().queued, BOUND as u64);

    // A producer with ten times the bound to write parks on its first write.
    let asked = Arc::new(AtomicUsize::new(0));
    let producer = tokio::spawn({
        let (ledger, run, asked) = (ledger.clone(), run.clone(), asked.clone());
        async move {
            for i in BOUND..11 * BOUND {
                asked.fetch_add(1, Ordering::SeqCst);
                ledger.ready().await;
                ledger
                    .append_event(&run, EventKind::ToolFinished, json!({ "i": i }))
                    .unwrap();
            }
        }
    });
    for _ in 0..1000 {
        if asked.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the producer did not wait");
    assert!(!producer.is_finished());
    assert_eq!(ledger.stats().queued, BOUND as u64);

    blocker.execute_batch("ROLLBACK").unwrap();
    producer.await.unwrap();
    let stats = ledger.stats();
    assert_eq!(stats.queue_peak, BOUND as u64, "{stats:?}");
    ledger.flush().await.unwrap();
    let events = ledger.reader().unwrap().events(&run).unwrap();
    let progress: Vec<u64> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolFinished)
        .map(|e| e.payload["i"].as_u64().unwrap())
        .collect();
    assert_eq!(progress, (0..11 * BOUND as u64).collect::<Vec<_>>());
    assert_eq!(ledger.stats().ops_failed, 0);
}

/// A run op that fails after its first write — possible only in a damaged or
/// crafted database: here an orphan event already holds the new run's seq 0 — is
/// undone alone: no `runs` row is left without its `spawned` event, and the ops
/// queued around it stand. (SQLite applies the writer's run ops without a
/// savepoint; this is the case where it must apply the batch again with one per op.)
#[tokio::test]
async fn a_run_op_that_fails_after_writing_is_undone_alone() {
    use brood::ledger::{LedgerError, RunId};
    let ws = TempDir::new().unwrap();
    let ledger = crate::common::open(&ws);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    ledger.mark_running(&a).await.unwrap();
    let planted = rusqlite::Connection::open(ledger.db_path()).unwrap();
    planted
        .execute(
            "INSERT INTO events (run_id, seq, at, kind, payload)
             VALUES ('torn', 0, 0, 'spawned', '{\"planted\":true}')",
            [],
        )
        .unwrap();
    drop(planted);
    let failed_before = ledger.stats().ops_failed;

    // Each op is queued when called: nothing awaited in between, so they share
    // group commits with the torn one.
    let before: Vec<_> = (0..10)
        .map(|i| ledger.create_run(crate::common::named(&format!("before-{i}"))))
        .collect();
    ledger
        .append_event(&a, EventKind::ModelRequest, json!({"n": 1}))
        .unwrap();
    let torn = ledger.create_run(NewRun {
        id: Some(RunId::from_string("torn")),
        ..crate::common::named("torn")
    });
    ledger
        .add_usage(
            &a,
            UsageDelta {
                steps: 1,
                ..UsageDelta::default()
            },
        )
        .unwrap();
    ledger.append_message(&a, "user", json!("kept")).unwrap();
    let after: Vec<_> = (0..10)
        .map(|i| ledger.create_run(crate::common::named(&format!("after-{i}"))))
        .collect();
    let done = ledger.complete(&a, json!("done"));

    let err = torn.await.unwrap_err();
    assert!(
        matches!(&err, LedgerError::Sqlite { context, .. } if context == "appending an event"),
        "{err:?}"
    );
    let mut ids = Vec::new();
    for run in futures::future::join_all(before.into_iter().chain(after)).await {
        ids.push(run.unwrap());
    }
    done.await.unwrap();
    assert_eq!(ledger.stats().ops_failed, failed_before + 1);

    let reader = ledger.reader().unwrap();
    let gone = reader.run(&RunId::from_string("torn"));
    assert!(
        matches!(gone, Err(LedgerError::UnknownRun { .. })),
        "{gone:?}"
    );
    let orphan = reader.events(&RunId::from_string("torn")).unwrap();
    assert_eq!(orphan.len(), 1);
    assert_eq!(orphan[0].payload, json!({"planted": true}));
    for id in &ids {
        assert_eq!(reader.run(id).unwrap().status, RunStatus::Pending);
        assert_eq!(crate::common::kinds(&ledger, id), vec![EventKind::Spawned]);
    }
    let detail = reader.get_run(&a).unwrap();
    assert_eq!(detail.run.status, RunStatus::Completed);
    assert_eq!(detail.run.steps, 1);
    let kinds: Vec<EventKind> = detail.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::Spawned,
            EventKind::Started,
            EventKind::ModelRequest,
            EventKind::Usage,
            EventKind::Completed
        ]
    );
    assert_eq!(ledger.transcript(&a, 0, 10).await.unwrap().entries.len(), 1);
}

/// An op at which the database ends the whole transaction itself (SQLite does on a
/// trigger's `RAISE(ROLLBACK)`, and may on an I/O error or a full disk) fails alone:
/// the ops queued after it are not run outside the transaction (each committed yet
/// answered with the batch's failure) — every op answered Ok is on disk, every op
/// answered with an error is not, and only the one op fails.
#[tokio::test]
async fn an_op_whose_transaction_the_database_ends_fails_alone() {
    use brood::ledger::{LedgerError, RunId};
    let ws = TempDir::new().unwrap();
    let ledger = crate::common::open(&ws);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    let planted = rusqlite::Connection::open(ledger.db_path()).unwrap();
    planted
        .execute_batch(
            "CREATE TRIGGER ends_it BEFORE INSERT ON runs WHEN NEW.id = 'ends-it'
             BEGIN SELECT RAISE(ROLLBACK, 'planted: ends the transaction'); END;",
        )
        .unwrap();
    drop(planted);
    let failed_before = ledger.stats().ops_failed;

    // Queued without an await in between, so they share group commits with it.
    let before: Vec<_> = (0..10)
        .map(|i| ledger.create_run(crate::common::named(&format!("before-{i}"))))
        .collect();
    let ends_it = ledger.create_run(NewRun {
        id: Some(RunId::from_string("ends-it")),
        ..crate::common::named("ends-it")
    });
    ledger
        .append_event(&a, EventKind::ModelRequest, json!({"n": 1}))
        .unwrap();
    let after: Vec<_> = (0..10)
        .map(|i| ledger.create_run(crate::common::named(&format!("after-{i}"))))
        .collect();
    let done = ledger.mark_running(&a);

    let err = ends_it.await.unwrap_err();
    assert!(matches!(&err, LedgerError::Sqlite { .. }), "{err:?}");
    let mut ids = Vec::new();
    for run in futures::future::join_all(before.into_iter().chain(after)).await {
        ids.push(run.expect("an op queued beside the one that ended the transaction"));
    }
    done.await.unwrap();
    assert_eq!(ledger.stats().ops_failed, failed_before + 1);

    let reader = ledger.reader().unwrap();
    assert!(matches!(
        reader.run(&RunId::from_string("ends-it")),
        Err(LedgerError::UnknownRun { .. })
    ));
    for id in &ids {
        assert_eq!(reader.run(id).unwrap().status, RunStatus::Pending);
        assert_eq!(crate::common::kinds(&ledger, id), vec![EventKind::Spawned]);
    }
    assert_eq!(
        crate::common::kinds(&ledger, &a),
        vec![
            EventKind::Spawned,
            EventKind::ModelRequest,
            EventKind::Started
        ]
    );
}

crate::both!(
    a_queued_transition_lands_before_what_is_awaited_after_it,
    an_invalid_queued_transition_is_counted_and_writes_nothing,
    the_ledgers_own_reads_see_what_it_queued,
    refused_ops_in_a_batch_leave_no_gap_in_the_numbering,
    a_run_another_writer_appended_to_loses_nothing,
);
