//! Operations nobody waits for: a queued (fire-and-forget) transition is ordered
//! before everything queued after it and lands with the next group commit; an
//! invalid one is refused and counted, never written.

use brood::ledger::{EventKind, Ledger, LedgerOptions, NewRun, RunStatus, Transition};
use tempfile::TempDir;

fn open(ws: &TempDir) -> Ledger {
    match Ledger::open(ws.path(), LedgerOptions::default()) {
        Ok(l) => l,
        Err(e) => panic!("opening the ledger: {e}"),
    }
}

#[tokio::test]
async fn a_queued_transition_lands_before_what_is_awaited_after_it() {
    let ws = TempDir::new().unwrap();
    let ledger = open(&ws);
    let a = ledger.create_run(NewRun::new("a")).await.unwrap();
    ledger.queue_transition(&a, Transition::Running).unwrap();
    // Awaiting a later op means everything queued before it is on disk too.
    let b = ledger.create_run(NewRun::new("b")).await.unwrap();
    let reader = Ledger::open_reader(ws.path()).unwrap();
    let detail = reader.get_run(&a).unwrap();
    assert_eq!(detail.run.status, RunStatus::Running);
    assert!(detail.run.started_at.is_some());
    let kinds: Vec<EventKind> = detail.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![EventKind::Spawned, EventKind::Started]);
    assert_eq!(reader.run(&b).unwrap().status, RunStatus::Pending);
}

#[tokio::test]
async fn an_invalid_queued_transition_is_counted_and_writes_nothing() {
    let ws = TempDir::new().unwrap();
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
    let reader = Ledger::open_reader(ws.path()).unwrap();
    let detail = reader.get_run(&a).unwrap();
    assert_eq!(detail.run.status, RunStatus::Pending);
    assert_eq!(detail.events.len(), 1);
}

#[tokio::test]
async fn the_ledgers_own_reads_see_what_it_queued() {
    let ws = TempDir::new().unwrap();
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
