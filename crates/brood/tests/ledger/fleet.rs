//! The fleet's leases on a real PostgreSQL (docs/FLEET.md): runs enqueued by a parent
//! are claimed by workers with `FOR UPDATE SKIP LOCKED`, never twice; a run whose
//! lease expired is taken over under the same id, its worker dead or alive; a worker
//! that lost its lease cannot end the run nor write anything more into it; `max_attempts` ends a run that keeps losing its workers; enqueues and ends
//! are notified. An SQLite ledger refuses the fleet. Spilled messages are kept in
//! the database, so a run's full transcript and result read on any machine.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use brood::ledger::{
    EventKind, FleetChannel, Ledger, LedgerError, LedgerOptions, Placement, RunId, RunStatus,
    UsageDelta, DEFAULT_MAX_ATTEMPTS,
};
use serde_json::{json, Value};

use crate::common::pg::{brood_backends, listening, sql, terminate};
use crate::common::{kinds, named, progress, Place, Store};

const LEASE: Duration = Duration::from_secs(30);

fn place(max_attempts: u32) -> Placement {
    Placement {
        repo: "/srv/repo.git".into(),
        rev: Some("0123abcd".into()),
        max_attempts,
    }
}

/// Record `n` runs in `parent` and enqueue each; their ids, in order.
async fn enqueue(parent: &Ledger, n: usize, max_attempts: u32) -> Vec<RunId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = parent.create_run(named(&format!("c{i}"))).await.unwrap();
        parent.enqueue(&id, place(max_attempts)).await.unwrap();
        ids.push(id);
    }
    ids
}

fn open_blocking(ws: &Store) -> Ledger {
    ws.open_with(ws.options())
}

#[tokio::test]
async fn two_claimers_never_get_the_same_run() {
    let Some(ws) = Store::postgres("two_claimers_never_get_the_same_run") else {
        return;
    };
    let parent = open_blocking(&ws);
    let ids = enqueue(&parent, 40, DEFAULT_MAX_ATTEMPTS).await;
    let workers = [Arc::new(open_blocking(&ws)), Arc::new(open_blocking(&ws))];
    let tasks: Vec<_> = workers
        .iter()
        .map(|w| {
            let w = w.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(c) = w.claim(LEASE).await.unwrap() {
                    assert_eq!((c.attempt, c.from), (1, RunStatus::Queued));
                    assert_eq!(
                        (c.repo.as_str(), c.rev.as_deref()),
                        ("/srv/repo.git", Some("0123abcd"))
                    );
                    got.push(c.run);
                }
                got
            })
        })
        .collect();
    let mut claimed = Vec::new();
    for t in tasks {
        claimed.push(t.await.unwrap());
    }
    let (a, b): (BTreeSet<_>, BTreeSet<_>) = (
        claimed[0].iter().cloned().collect(),
        claimed[1].iter().cloned().collect(),
    );
    assert_eq!(a.len() + b.len(), 40, "a run was claimed twice");
    assert!(
        a.is_disjoint(&b),
        "both workers claimed {:?}",
        a.intersection(&b)
    );
    let all: BTreeSet<_> = a.union(&b).cloned().collect();
    assert_eq!(all, ids.iter().cloned().collect());
    // Each is running under the worker that claimed it.
    let reader = ws.reader();
    for (worker, mine) in workers.iter().zip([&a, &b]) {
        for id in mine {
            let run = reader.run(id).unwrap();
            assert_eq!(run.status, RunStatus::Running);
            assert_eq!(run.session_id, worker.session_id());
        }
    }
}

#[tokio::test]
async fn enqueues_wake_listening_workers_and_ends_wake_the_parent() {
    let Some(ws) = Store::postgres("enqueues_wake_listening_workers") else {
        return;
    };
    let parent = open_blocking(&ws);
    let worker = open_blocking(&ws);
    let mut queued = listening(&worker, FleetChannel::Queued).await;
    let mut done = listening(&parent, FleetChannel::Done).await;
    let ids = enqueue(&parent, 1, DEFAULT_MAX_ATTEMPTS).await;
    let woke = tokio::task::spawn_blocking(move || queued.wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap()
        .runs;
    assert_eq!(woke, ids);
    let c = worker.claim(LEASE).await.unwrap().unwrap();
    worker.complete(&c.run, json!("the answer")).await.unwrap();
    let ended = tokio::task::spawn_blocking(move || done.wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap()
        .runs;
    assert_eq!(ended, ids);
}

#[tokio::test]
async fn a_dead_workers_run_is_taken_over_under_the_same_id() {
    let Some(ws) = Store::postgres("a_dead_workers_run_is_taken_over") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let parent = open_blocking(&ws);
    let ids = enqueue(&parent, 2, DEFAULT_MAX_ATTEMPTS).await;
    let before = brood_backends(&url);
    let a = open_blocking(&ws);
    let a_conns: Vec<String> = brood_backends(&url).difference(&before).cloned().collect();
    assert!(!a_conns.is_empty());
    // A lease of zero: expired as soon as it is taken; the other one's runs on.
    let c = a.claim(Duration::ZERO).await.unwrap().unwrap();
    assert_eq!(c.run, ids[0]);
    assert_eq!(a.claim(LEASE).await.unwrap().unwrap().run, ids[1]);
    let b = open_blocking(&ws);
    // The worker dies: the server ends its connection, and its advisory lock with it.
    terminate(&url, &a_conns);
    let taken = b
        .claim(LEASE)
        .await
        .unwrap()
        .expect("the dead worker's run");
    assert_eq!(taken.run, ids[0], "the same run, not a copy");
    // Its other run's lease has not expired: its worker's death alone frees nothing.
    assert_eq!(b.claim(LEASE).await.unwrap(), None);
    assert_eq!((taken.attempt, taken.from), (2, RunStatus::Running));
    let run = ws.reader().run(&ids[0]).unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.session_id, b.session_id());
    assert_eq!(run.parent_id, None);
    assert_eq!(
        kinds(&b, &ids[0]),
        [
            EventKind::Spawned,
            EventKind::Queued,
            EventKind::Started,
            EventKind::Resumed
        ]
    );
    b.complete(&ids[0], json!("done")).await.unwrap();
    drop(a);
}

#[tokio::test]
async fn a_worker_that_lost_its_lease_cannot_end_the_run() {
    let Some(ws) = Store::postgres("a_worker_that_lost_its_lease") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let parent = open_blocking(&ws);
    let ids = enqueue(&parent, 1, DEFAULT_MAX_ATTEMPTS).await;
    let a = open_blocking(&ws);
    let b = open_blocking(&ws);
    let c = a.claim(LEASE).await.unwrap().unwrap();
    assert_eq!(c.run, ids[0]);
    // As if A's lease had lapsed and B had claimed the run.
    sql(
        &url,
        &[&format!(
            "UPDATE run_leases SET worker_boot_id = '{}' WHERE run_id = '{}'",
            b.boot_id(),
            c.run
        )],
    );
    let err = a.complete(&c.run, json!("stale answer")).await.unwrap_err();
    assert!(
        matches!(&err, LedgerError::LeaseLost { holder, .. } if holder == b.boot_id()),
        "{err:?}"
    );
    let err = a.fail(&c.run, "stale failure", None).await.unwrap_err();
    assert!(matches!(err, LedgerError::LeaseLost { .. }), "{err:?}");
    assert_eq!(ws.reader().run(&c.run).unwrap().status, RunStatus::Running);
    b.complete(&c.run, json!("the answer")).await.unwrap();
    let ended: Vec<EventKind> = kinds(&b, &c.run)
        .into_iter()
        .filter(|k| matches!(k, EventKind::Completed | EventKind::Failed))
        .collect();
    assert_eq!(ended, [EventKind::Completed], "ended exactly once");
    // Released: nobody holds it, and it is not claimable (it completed).
    assert_eq!(a.claim(LEASE).await.unwrap(), None);
}

/// A worker that stopped heartbeating but is alive (frozen: SIGSTOP, hung, a suspended
/// machine — its session and advisory lock kept) loses its run once the lease
/// expired, and when it continues nothing it writes into that run lands: not its
/// events, messages, usage or transitions, while its writes into the runs it still
/// holds, and into runs outside the fleet, do — in the same batch.
#[tokio::test]
async fn a_live_workers_expired_lease_is_taken_over_and_it_writes_nothing_more_into_the_run() {
    let Some(ws) = Store::postgres("a_live_workers_expired_lease") else {
        return;
    };
    let parent = open_blocking(&ws);
    let ids = enqueue(&parent, 2, DEFAULT_MAX_ATTEMPTS).await;
    let a = open_blocking(&ws);
    // Its first run's lease expires at once (as a frozen worker's does); not the second's.
    let lost = a.claim(Duration::ZERO).await.unwrap().unwrap().run;
    let kept = a.claim(LEASE).await.unwrap().unwrap().run;
    assert_eq!([&lost, &kept], [&ids[0], &ids[1]]);
    let local = a.create_run(named("local")).await.unwrap();
    let note = |i: i64| json!({"i": i});
    a.append_event(&lost, EventKind::Warning, note(1)).unwrap();
    a.flush().await.unwrap();
    // A is alive (its session open): its expired lease is taken over all the same.
    let b = open_blocking(&ws);
    let taken = b.claim(LEASE).await.unwrap().unwrap();
    assert_eq!(taken.run, lost);
    assert_eq!((taken.attempt, taken.from), (2, RunStatus::Running));
    // A continues: one batch with writes into the run it lost and into the others.
    a.append_event(&lost, EventKind::Warning, note(2)).unwrap();
    a.append_message(&lost, "assistant", json!("stale step"))
        .unwrap();
    a.add_usage(
        &lost,
        UsageDelta {
            steps: 1,
            ..UsageDelta::default()
        },
    )
    .unwrap();
    a.append_event(&kept, EventKind::Warning, note(3)).unwrap();
    a.append_event(&local, EventKind::Warning, note(4)).unwrap();
    let err = a.complete(&lost, json!("stale answer")).await.unwrap_err();
    assert!(
        matches!(&err, LedgerError::LeaseLost { holder, .. } if holder == b.boot_id()),
        "{err:?}"
    );
    let err = a.mark_running(&lost).await.unwrap_err();
    assert!(matches!(err, LedgerError::LeaseLost { .. }), "{err:?}");
    assert_eq!(a.stats().ops_failed, 5, "{:?}", a.stats());
    // Its heartbeat names the runs it still holds: the lost one is not among them.
    assert_eq!(
        a.renew_leases(LEASE).await.unwrap(),
        std::slice::from_ref(&kept)
    );
    assert_eq!(progress(&ws, &kept), [3]);
    assert_eq!(progress(&ws, &local), [4]);
    // The run taken over holds what A wrote while it held it, then B's records only.
    b.append_message(&lost, "assistant", json!("b's step"))
        .unwrap();
    b.complete(&lost, json!("the answer")).await.unwrap();
    assert_eq!(progress(&ws, &lost), [1]);
    let reader = ws.reader();
    let said: Vec<Value> = reader
        .transcript(&lost, 0, 100)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.content)
        .collect();
    assert_eq!(said, [json!("b's step")]);
    let run = reader.run(&lost).unwrap();
    assert_eq!((run.status, run.steps), (RunStatus::Completed, 0));
    assert_eq!(run.session_boot_id, b.boot_id());
    // A's other run is still its own, and ends as usual.
    a.complete(&kept, json!("kept")).await.unwrap();
    assert_eq!(reader.run(&kept).unwrap().status, RunStatus::Completed);
}

#[tokio::test]
async fn a_run_that_keeps_losing_its_workers_fails_after_max_attempts() {
    let Some(ws) = Store::postgres("a_run_that_keeps_losing_its_workers") else {
        return;
    };
    let parent = open_blocking(&ws);
    let ids = enqueue(&parent, 1, 2).await;
    for attempt in 1..=2 {
        // A worker claims it and stops (its close interrupts the run and releases it).
        let w = open_blocking(&ws);
        let c = w.claim(LEASE).await.unwrap().unwrap();
        assert_eq!(c.run, ids[0]);
        assert_eq!(c.attempt, attempt);
        w.close().await.unwrap();
        assert_eq!(
            ws.reader().run(&ids[0]).unwrap().status,
            RunStatus::Interrupted
        );
    }
    let w = open_blocking(&ws);
    assert_eq!(w.claim(LEASE).await.unwrap(), None);
    let run = ws.reader().run(&ids[0]).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.error
            .as_deref()
            .unwrap_or("")
            .contains("lost its worker 2 times"),
        "{run:?}"
    );
}

#[tokio::test]
async fn a_queued_fleet_run_can_be_cancelled_by_its_parent() {
    let Some(ws) = Store::postgres("a_queued_fleet_run_can_be_cancelled") else {
        return;
    };
    let parent = open_blocking(&ws);
    let ids = enqueue(&parent, 1, DEFAULT_MAX_ATTEMPTS).await;
    parent.cancel(&ids[0], "not needed").await.unwrap();
    let w = open_blocking(&ws);
    assert_eq!(w.claim(LEASE).await.unwrap(), None);
}

#[tokio::test]
async fn an_sqlite_ledger_refuses_the_fleet() {
    let ws = Store::sqlite();
    let ledger = open_blocking(&ws);
    let id = ledger.create_run(named("c")).await.unwrap();
    for err in [
        ledger.enqueue(&id, place(3)).await.unwrap_err(),
        ledger.claim(LEASE).await.map(|_| ()).unwrap_err(),
        ledger.renew_leases(LEASE).await.map(|_| ()).unwrap_err(),
        ledger.listen(FleetChannel::Done).map(|_| ()).unwrap_err(),
    ] {
        assert!(
            matches!(err, LedgerError::FleetNeedsPostgres { .. }),
            "{err:?}"
        );
    }
    // Nothing changed: the run is still pending, and ends as any run does.
    assert_eq!(ws.reader().run(&id).unwrap().status, RunStatus::Pending);
}

#[tokio::test]
async fn heartbeats_renew_only_this_workers_leases() {
    let Some(ws) = Store::postgres("heartbeats_renew_only_this_workers_leases") else {
        return;
    };
    let parent = open_blocking(&ws);
    enqueue(&parent, 3, DEFAULT_MAX_ATTEMPTS).await;
    let a = open_blocking(&ws);
    let b = open_blocking(&ws);
    a.claim(LEASE).await.unwrap().unwrap();
    a.claim(LEASE).await.unwrap().unwrap();
    b.claim(LEASE).await.unwrap().unwrap();
    assert_eq!(a.renew_leases(LEASE).await.unwrap().len(), 2);
    assert_eq!(b.renew_leases(LEASE).await.unwrap().len(), 1);
    assert_eq!(parent.renew_leases(LEASE).await.unwrap(), []);
}

#[tokio::test]
async fn a_version_5_postgres_ledger_is_migrated_to_the_lease_and_spill_tables() {
    let Some(ws) = Store::postgres("a_version_5_postgres_ledger_is_migrated") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let first = open_blocking(&ws);
    let id = first.create_run(named("old")).await.unwrap();
    first.close().await.unwrap();
    // As the PostgreSQL backend of schema version 5 left it.
    sql(
        &url,
        &[
            "DROP TABLE run_leases",
            "DROP TABLE spills",
            "UPDATE brood_meta SET value = '5' WHERE key = 'version'",
        ],
    );
    let parent = open_blocking(&ws);
    let version = sql(
        &url,
        &["SELECT value FROM brood_meta WHERE key = 'version'"],
    );
    assert_eq!(version, [[brood::ledger::SCHEMA_VERSION.to_string()]]);
    assert_eq!(ws.reader().run(&id).unwrap().status, RunStatus::Interrupted);
    let ids = enqueue(&parent, 1, DEFAULT_MAX_ATTEMPTS).await;
    let w = open_blocking(&ws);
    assert_eq!(
        w.claim(LEASE).await.unwrap().map(|c| c.run),
        Some(ids[0].clone())
    );
    // Version 6 (leases, no spill table) gets the spill table too.
    w.close().await.unwrap();
    sql(
        &url,
        &[
            "DROP TABLE spills",
            "UPDATE brood_meta SET value = '6' WHERE key = 'version'",
        ],
    );
    let again = open_blocking(&ws);
    let big = "x".repeat(100_000);
    again
        .append_message(&ids[0], "tool", Value::String(big.clone()))
        .unwrap();
    again.flush().await.unwrap();
    let reader = again.reader().unwrap();
    let entries = reader.transcript(&ids[0], 0, 10).unwrap().entries;
    assert_eq!(reader.read_spill(&entries[0]).unwrap(), Some(big));
}

/// Spilled text lives in the database on PostgreSQL (docs/LEDGER.md "Transcripts and
/// spill files"): a message over the cap recorded by one worker reads in full on
/// another machine — another workspace directory, nothing shared but the database —
/// when a second worker takes the run over, and so does the result that refers to
/// the spilled answer, from a third. No spill file is written anywhere.
#[tokio::test]
async fn spilled_messages_and_results_read_in_full_on_another_machine() {
    let Some(ws) = Store::postgres("spilled_messages_read_on_another_machine") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let on = |dir: &std::path::Path| {
        Ledger::open(
            dir,
            LedgerOptions {
                url: Some(url.clone()),
                transcript_cap_bytes: 1024,
                ..LedgerOptions::default()
            },
        )
        .unwrap()
    };
    let parent = on(ws.path());
    let ids = enqueue(&parent, 1, DEFAULT_MAX_ATTEMPTS).await;
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );

    // The first worker records the run's answer, over the cap, and stops.
    let first = on(a.path());
    let claim = first.claim(LEASE).await.unwrap().unwrap();
    assert_eq!(claim.run, ids[0]);
    // Quotes, newlines and non-ASCII: the stored text is the message's JSON.
    let answer = "SUMMARY: a \"quoted\" line — é\n".repeat(200);
    let message = json!({"role": "assistant", "content": answer});
    first
        .append_message(&claim.run, "assistant", message.clone())
        .unwrap();
    first.close().await.unwrap();

    // The second, on another machine, takes it over and reads its transcript whole.
    let second = on(b.path());
    let taken = second.claim(LEASE).await.unwrap().unwrap();
    assert_eq!((taken.run.clone(), taken.attempt), (ids[0].clone(), 2));
    let reader = second.reader().unwrap();
    let entries = reader.transcript(&taken.run, 0, 10).unwrap().entries;
    let spilled = &entries[0];
    assert!(spilled.truncated, "{spilled:?}");
    assert_eq!(
        spilled.spill_path.as_deref(),
        Some(format!("ledger:spills/{}/0", taken.run).as_str())
    );
    let full = reader.read_spill(spilled).unwrap().unwrap();
    assert_eq!(serde_json::from_str::<Value>(&full).unwrap(), message);

    // Its result refers to the spilled answer (stored once) and reads back whole.
    let result = json!({"final_text": answer, "turns": 2});
    second.complete(&taken.run, result.clone()).await.unwrap();
    let row = sql(
        &url,
        &[&format!(
            "SELECT result FROM run_results WHERE run_id = '{}'",
            taken.run
        )],
    );
    assert!(
        row[0][0].len() < 1024 && row[0][0].contains("ledger:spills/"),
        "the answer was stored again: {}",
        row[0][0]
    );
    let elsewhere = Ledger::open_reader_at(c.path(), Some(&url)).unwrap();
    let run = elsewhere.run(&taken.run).unwrap();
    assert_eq!(run.result, Some(result));
    assert!(run.notes.is_empty(), "{:?}", run.notes);

    for dir in [ws.path(), a.path(), b.path(), c.path()] {
        let spill = dir.join(".brood/state/spill");
        let files: Vec<_> = std::fs::read_dir(&spill)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            files.is_empty(),
            "spill files in {}: {files:?}",
            dir.display()
        );
    }
}

#[tokio::test]
async fn a_cancel_request_for_a_held_run_is_notified_to_its_holder() {
    let Some(ws) = Store::postgres("a_cancel_request_is_notified") else {
        return;
    };
    let parent = open_blocking(&ws);
    let worker = open_blocking(&ws);
    let mut cancels = listening(&worker, FleetChannel::Cancel).await;
    let ids = enqueue(&parent, 1, DEFAULT_MAX_ATTEMPTS).await;
    let c = worker.claim(LEASE).await.unwrap().unwrap();
    // The parent cannot end a run another boot holds; it asks the holder.
    let err = parent.cancel(&c.run, "not needed").await.unwrap_err();
    assert!(matches!(err, LedgerError::LeaseLost { .. }), "{err:?}");
    let asked = parent.request_cancel(&c.run).await.unwrap();
    assert!(
        matches!(&asked, brood::ledger::CancelOutcome::Requested { boot_id, .. } if boot_id == worker.boot_id()),
        "{asked:?}"
    );
    let heard = tokio::task::spawn_blocking(move || cancels.wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(heard.runs, ids);
    assert_eq!(worker.take_cancel_requests().await.unwrap(), ids);
    worker.cancel(&c.run, "cancelled on request").await.unwrap();
    assert_eq!(
        ws.reader().run(&ids[0]).unwrap().status,
        RunStatus::Cancelled
    );
}
