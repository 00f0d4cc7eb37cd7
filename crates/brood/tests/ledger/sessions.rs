//! The ledger across sessions and processes: cancel requests reach the live owner,
//! two live sessions leave each other alone, closing interrupts what is unfinished
//! (with the same event a transition writes), prune deletes only whole finished
//! trees, export is versioned.

use std::time::Duration;

use brood::ledger::{
    CancelOutcome, EventKind, Ledger, LedgerError, LedgerOptions, NewRun, RunId, RunStatus,
    EXPORT_SCHEMA,
};
use serde_json::json;
use tempfile::TempDir;

use crate::common::{named, open, Store};

async fn prune_deletes_only_whole_finished_trees_past_the_cutoff(ws: Store) {
    let ledger = open(&ws);
    let done_root = ledger.create_run(named("done")).await.unwrap();
    let done_child = ledger
        .create_run(NewRun {
            parent_id: Some(done_root.clone()),
            ..named("done-child")
        })
        .await
        .unwrap();
    let busy_root = ledger.create_run(named("busy")).await.unwrap();
    let busy_child = ledger
        .create_run(NewRun {
            parent_id: Some(busy_root.clone()),
            ..named("busy-child")
        })
        .await
        .unwrap();
    for id in [&done_root, &done_child, &busy_root] {
        ledger.mark_running(id).await.unwrap();
        ledger.complete(id, json!("ok")).await.unwrap();
    }
    ledger.mark_running(&busy_child).await.unwrap();

    // Nothing ended an hour ago.
    let none = ledger.prune(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(none.runs, 0);

    let report = ledger.prune(Duration::ZERO).await.unwrap();
    assert_eq!(report.runs, 2);
    assert_eq!(report.events, 6); // spawned, started, completed × 2
    let reader = ledger.reader().unwrap();
    assert!(matches!(
        reader.run(&done_root),
        Err(LedgerError::UnknownRun { .. })
    ));
    assert!(reader.events(&done_child).unwrap().is_empty());
    // The tree with a running child is kept whole, finished root included.
    assert_eq!(reader.run(&busy_root).unwrap().status, RunStatus::Completed);
    assert_eq!(reader.run(&busy_child).unwrap().status, RunStatus::Running);
}

async fn cancel_requests_reach_the_live_owner_once(ws: Store) {
    let owner = open(&ws);
    let id = owner.create_run(named("r")).await.unwrap();
    owner.mark_running(&id).await.unwrap();
    assert!(owner.take_cancel_requests().await.unwrap().is_empty());

    // From outside (as `brood agents cancel` does): the owner is alive, so ask it.
    let mut cli = ws.maintenance();
    let outcome = cli.request_cancel(&id).unwrap();
    assert_eq!(
        outcome,
        CancelOutcome::Requested {
            run_id: id.clone(),
            boot_id: owner.boot_id().to_string()
        }
    );
    // Nothing was marked: the owner decides.
    assert_eq!(
        owner.reader().unwrap().run(&id).unwrap().status,
        RunStatus::Running
    );
    assert_eq!(
        owner.take_cancel_requests().await.unwrap(),
        vec![id.clone()]
    );
    assert!(owner.take_cancel_requests().await.unwrap().is_empty());

    // A second session does not get the first one's requests.
    let other = open(&ws);
    owner.request_cancel(&id).await.unwrap();
    assert!(other.take_cancel_requests().await.unwrap().is_empty());
    assert_eq!(
        owner.take_cancel_requests().await.unwrap(),
        vec![id.clone()]
    );

    // Taking the requests changes no run: what the owner writes around it is
    // numbered on (the writer keeps what it knows of its live runs).
    owner
        .append_event(&id, EventKind::ModelRequest, json!({"n": 1}))
        .unwrap();
    let taken = owner.take_cancel_requests();
    owner
        .append_event(&id, EventKind::ModelResponse, json!({"n": 2}))
        .unwrap();
    owner
        .append_message(&id, "assistant", json!("after"))
        .unwrap();
    assert!(taken.await.unwrap().is_empty());

    owner.cancel(&id, "cancel requested").await.unwrap();
    let events = owner.reader().unwrap().events(&id).unwrap();
    let seqs: Vec<(u64, EventKind)> = events.iter().map(|e| (e.seq, e.kind)).collect();
    assert_eq!(
        seqs,
        vec![
            (0, EventKind::Spawned),
            (1, EventKind::Started),
            (2, EventKind::ModelRequest),
            (3, EventKind::ModelResponse),
            (4, EventKind::Cancelled)
        ]
    );
    assert!(matches!(
        cli.request_cancel(&id),
        Err(LedgerError::InvalidTransition {
            from: RunStatus::Cancelled,
            ..
        })
    ));
}

async fn two_live_ledgers_never_interrupt_each_other(ws: Store) {
    let first = open(&ws);
    let id = first.create_run(named("r")).await.unwrap();
    first.mark_running(&id).await.unwrap();

    let second = open(&ws);
    assert!(second.recovery().interrupted.is_empty());
    assert!(second
        .recovery()
        .live_boots
        .contains(&first.boot_id().to_string()));
    let theirs = second.create_run(named("theirs")).await.unwrap();
    second.mark_running(&theirs).await.unwrap();
    let reader = second.reader().unwrap();
    assert_eq!(reader.run(&id).unwrap().status, RunStatus::Running);

    // The first ledger goes away; its own close marks its run, not the other's.
    // SQLite: the boot's lock file goes with it (PostgreSQL: its advisory lock).
    let lock = (!ws.is_postgres()).then(|| first.boot_lock_path());
    assert!(lock.as_ref().is_none_or(|l| l.exists()));
    drop(first);
    assert!(lock.as_ref().is_none_or(|l| !l.exists()));
    let r = reader.run(&id).unwrap();
    assert_eq!(r.status, RunStatus::Interrupted);
    assert_eq!(reader.run(&theirs).unwrap().status, RunStatus::Running);
    let third = open(&ws);
    assert!(third.recovery().interrupted.is_empty());
    assert_eq!(reader.run(&theirs).unwrap().status, RunStatus::Running);
}

async fn export_is_versioned_and_carries_events(ws: Store) {
    let ledger = open(&ws);
    let a = ledger.create_run(named("a")).await.unwrap();
    ledger.mark_running(&a).await.unwrap();
    ledger.complete(&a, json!({"summary": "s"})).await.unwrap();
    let b = ledger.create_run(named("b")).await.unwrap();
    let export = ledger.reader().unwrap().export().unwrap();
    assert_eq!(export.schema, EXPORT_SCHEMA);
    let json = serde_json::to_value(&export).unwrap();
    assert_eq!(json["schema"], "brood.runs.v1");
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["id"], a.as_str());
    assert_eq!(runs[0]["status"], "completed");
    assert_eq!(runs[0]["result"], json!({"summary": "s"}));
    assert_eq!(runs[0]["input_tokens"], 0);
    let kinds: Vec<&str> = runs[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["spawned", "started", "completed"]);
    assert_eq!(runs[1]["id"], b.as_str());
    assert_eq!(runs[1]["events"].as_array().unwrap().len(), 1);
    assert!(runs[0].get("from_prior_session").is_none());
    // It reads back.
    let back: brood::ledger::Export = serde_json::from_value(json).unwrap();
    assert_eq!(back, export);
}

async fn closing_interrupts_each_unfinished_run_with_the_event_a_transition_writes(ws: Store) {
    let ledger = open(&ws);
    let pending = ledger.create_run(named("pending")).await.unwrap();
    let queued = ledger.create_run(named("queued")).await.unwrap();
    ledger.mark_queued(&queued).await.unwrap();
    let running = ledger.create_run(named("running")).await.unwrap();
    ledger.mark_running(&running).await.unwrap();
    for step in 0..3 {
        ledger
            .append_event(&running, EventKind::ModelRequest, json!({ "step": step }))
            .unwrap();
    }
    let done = ledger.create_run(named("done")).await.unwrap();
    ledger.mark_running(&done).await.unwrap();
    ledger.complete(&done, json!({"ok": true})).await.unwrap();
    ledger.flush().await.unwrap();
    let reader = ledger.reader().unwrap();
    let before: Vec<(RunId, Vec<u64>, Option<chrono::DateTime<chrono::Utc>>)> =
        [&pending, &queued, &running, &done]
            .into_iter()
            .map(|id| {
                let events = reader.events(id).unwrap();
                let seqs = events.iter().map(|e| e.seq).collect();
                (id.clone(), seqs, reader.run(id).unwrap().started_at)
            })
            .collect();
    ledger.close().await.unwrap();

    for ((id, seqs_before, started), from) in before.iter().zip(["pending", "queued", "running"]) {
        let run = reader.run(id).unwrap();
        assert_eq!(run.status, RunStatus::Interrupted, "{from}");
        assert_eq!(
            run.status_reason.as_deref(),
            Some("session ended before the run finished")
        );
        assert!(run.ended_at.is_some());
        assert_eq!(&run.started_at, started, "started_at is kept");
        let events = reader.events(id).unwrap();
        // Exactly one new event, numbered right after the run's last one.
        assert_eq!(events.len(), seqs_before.len() + 1, "{from}");
        let last = events.last().unwrap();
        assert_eq!(last.seq, *seqs_before.last().unwrap() + 1);
        assert_eq!(last.kind, EventKind::Interrupted);
        assert_eq!(
            last.payload,
            json!({"from": from, "reason": "session ended before the run finished"})
        );
        assert_eq!(last.at, run.ended_at.unwrap());
    }
    // The finished run is untouched.
    let (done_id, done_seqs, _) = &before[3];
    assert_eq!(reader.run(done_id).unwrap().status, RunStatus::Completed);
    assert_eq!(reader.events(done_id).unwrap().len(), done_seqs.len());
}

/// The ledger file is untrusted input: a repository can ship a crafted
/// `.brood/state/brood.db` whose spill paths point anywhere, and files under
/// `.brood/state/spill/` that are symlinks. Prune must not delete a file outside
/// `.brood/state/spill/`, and a reader must not read one, nor follow a symlink there.
#[tokio::test]
async fn prune_and_read_spill_refuse_spill_paths_outside_the_spill_directory() {
    let ws = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    let victim = outside.path().join("id_ed25519");
    std::fs::write(&victim, "secret").unwrap();
    let inside_victim = ws.path().join("precious.txt");
    std::fs::write(&inside_victim, "keep").unwrap();

    let ledger = open(&ws);
    let id = ledger.create_run(named("crafted")).await.unwrap();
    for text in ["a", "b", "c", "d"] {
        ledger.append_message(&id, "tool", json!(text)).unwrap();
    }
    ledger.mark_running(&id).await.unwrap();
    ledger.complete(&id, json!("ok")).await.unwrap();
    ledger.flush().await.unwrap();

    // A plain name under the spill directory that the repository shipped as a
    // symlink (git keeps symlinks) to a file outside it.
    let link = ws.path().join(".brood/state/spill/shipped.txt");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let conn = rusqlite::Connection::open(ws.path().join(".brood/state/brood.db")).unwrap();
    let crafted = [
        victim.to_str().unwrap().to_string(),
        ".brood/state/spill/../../../precious.txt".to_string(),
        "precious.txt".to_string(),
        ".brood/state/spill/shipped.txt".to_string(),
    ];
    for (seq, path) in crafted.iter().enumerate() {
        conn.execute(
            "UPDATE transcripts SET spill_path = ?1, truncated = 1 WHERE run_id = ?2 AND seq = ?3",
            rusqlite::params![path, id.as_str(), seq as i64],
        )
        .unwrap();
    }
    drop(conn);

    let reader = ledger.reader().unwrap();
    let entries = reader.transcript(&id, 0, 10).unwrap().entries;
    for entry in &entries {
        match reader.read_spill(entry) {
            Err(LedgerError::UntrustedPath { row, .. }) => {
                assert!(row.contains(id.as_str()), "{row}")
            }
            other => panic!("read_spill followed a crafted path: {other:?}"),
        }
    }

    let report = ledger.prune(Duration::ZERO).await.unwrap();
    assert_eq!(report.runs, 1);
    // The shipped name is not the entry's own spill file: left alone too.
    assert_eq!(report.spill_files, 0);
    assert_eq!(report.refused_spill_paths.len(), 4, "{report:?}");
    assert!(report.refused_spill_paths[0].contains(id.as_str()));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    assert_eq!(std::fs::read_to_string(&inside_victim).unwrap(), "keep");
}

/// Prune removes a run's own spill files only: a row of a pruned run naming another
/// run's file (a crafted ledger, or on a shared PostgreSQL ledger a row another
/// machine wrote, whose runs' ids it can read) must not delete that run's only full
/// copy of its message — here a live run's.
#[tokio::test]
async fn prune_does_not_remove_another_runs_spill_file() {
    let ws = TempDir::new().unwrap();
    let opts = LedgerOptions {
        transcript_cap_bytes: 64,
        ..LedgerOptions::default()
    };
    let ledger = Ledger::open(ws.path(), opts).unwrap();
    let live = ledger.create_run(named("live")).await.unwrap();
    ledger.mark_running(&live).await.unwrap();
    let long = "the live run's only full copy ".repeat(20);
    ledger.append_message(&live, "tool", json!(long)).unwrap();
    let old = ledger.create_run(named("old")).await.unwrap();
    ledger.append_message(&old, "tool", json!("x")).unwrap();
    ledger.mark_running(&old).await.unwrap();
    ledger.complete(&old, json!("ok")).await.unwrap();
    ledger.flush().await.unwrap();

    let reader = ledger.reader().unwrap();
    let entry = reader.transcript(&live, 0, 1).unwrap().entries.remove(0);
    let victim = entry
        .spill_path
        .clone()
        .expect("the live run's message spilled");
    let conn = rusqlite::Connection::open(ws.path().join(".brood/state/brood.db")).unwrap();
    conn.execute(
        "UPDATE transcripts SET spill_path = ?1, truncated = 1 WHERE run_id = ?2 AND seq = 0",
        rusqlite::params![victim, old.as_str()],
    )
    .unwrap();
    drop(conn);

    let report = ledger.prune(Duration::ZERO).await.unwrap();
    assert_eq!(report.runs, 1, "{report:?}");
    assert_eq!(report.spill_files, 0, "{report:?}");
    assert_eq!(report.refused_spill_paths.len(), 1, "{report:?}");
    assert!(report.refused_spill_paths[0].contains(old.as_str()));
    assert_eq!(reader.read_spill(&entry).unwrap(), Some(long));
}

/// 21.3: a result whose long strings are already in the run's spill file (its final
/// answer is its last assistant message) is stored once — the row refers to the
/// spill file — and reads back whole. A crafted row that refers outside the spill
/// directory, or a result that is not JSON, reads with a placeholder or nothing and
/// a note, never a failed read; a result that merely looks like the stored form
/// reads back as itself.
#[tokio::test]
async fn a_result_refers_to_its_spilled_answer_and_reads_back_whole() {
    let ws = TempDir::new().unwrap();
    let opts = LedgerOptions {
        transcript_cap_bytes: 1024,
        ..LedgerOptions::default()
    };
    let ledger = Ledger::open(ws.path(), opts).unwrap();
    let id = ledger.create_run(named("big")).await.unwrap();
    ledger.mark_running(&id).await.unwrap();
    // Quotes, newlines and non-ASCII: the spill file holds the JSON-escaped text.
    let answer = "SUMMARY: a \"quoted\" line — é\n".repeat(400);
    ledger
        .append_message(
            &id,
            "assistant",
            json!({"role": "assistant", "content": answer}),
        )
        .unwrap();
    let result = json!({
        "final_text": answer,
        "report": {"summary": answer.trim_end(), "changes": ["short"]},
        "turns": 3,
    });
    ledger.complete(&id, result.clone()).await.unwrap();
    let db = rusqlite::Connection::open(ledger.db_path()).unwrap();
    let stored = |id: &RunId| -> String {
        db.query_row(
            "SELECT result FROM run_results WHERE run_id = ?1",
            [id.as_str()],
            |r| r.get(0),
        )
        .unwrap()
    };
    let row = stored(&id);
    assert!(
        row.len() < 1024,
        "the answer was stored again: {} B",
        row.len()
    );
    let reader = ledger.reader().unwrap();
    let run = reader.run(&id).unwrap();
    assert_eq!(run.result.as_ref(), Some(&result));
    assert!(run.notes.is_empty(), "{:?}", run.notes);

    // A crafted reference outside the spill directory is not followed.
    let crafted = row.replace(".brood/state/spill/", ".brood/state/spill/../../");
    db.execute(
        "UPDATE run_results SET result = ?2 WHERE run_id = ?1",
        [id.as_str(), crafted.as_str()],
    )
    .unwrap();
    let run = reader.run(&id).unwrap();
    let shown = run.result.unwrap();
    let text = shown["final_text"].as_str().unwrap();
    assert!(text.starts_with("[brood: text not readable"), "{text}");
    assert_eq!(shown["report"]["changes"], json!(["short"]));
    assert!(
        run.notes.iter().any(|n| n.contains("/final_text")),
        "{:?}",
        run.notes
    );

    // A result that is not JSON: the run reads, the note says so.
    db.execute(
        "UPDATE run_results SET result = 'not json' WHERE run_id = ?1",
        [id.as_str()],
    )
    .unwrap();
    let run = reader.run(&id).unwrap();
    assert_eq!(run.result, None);
    assert!(run.notes.iter().any(|n| n.contains("result unreadable")));

    // A result of its own with the marker key reads back as given.
    let lookalike = json!({"$brood_stored": 7, "value": "mine", "refs": "none"});
    let other = ledger.create_run(named("lookalike")).await.unwrap();
    ledger.mark_running(&other).await.unwrap();
    ledger.complete(&other, lookalike.clone()).await.unwrap();
    assert_eq!(reader.run(&other).unwrap().result, Some(lookalike));
}

/// `reconnect_for` is a library option; `Duration::MAX` ("keep trying") is a
/// deadline far away, not an overflow: the open and its boot registration (retried
/// within it on PostgreSQL) panicked computing it.
async fn an_open_told_to_reconnect_for_ever_opens_and_records(ws: Store) {
    let ledger = ws
        .try_open_with(LedgerOptions {
            reconnect_for: Duration::MAX,
            ..LedgerOptions::default()
        })
        .unwrap();
    let run = ledger.create_run(named("for ever")).await.unwrap();
    ledger.mark_running(&run).await.unwrap();
    ledger.complete(&run, json!("done")).await.unwrap();
    ledger.close().await.unwrap();
    assert_eq!(ws.reader().run(&run).unwrap().status, RunStatus::Completed);
}

crate::both!(
    prune_deletes_only_whole_finished_trees_past_the_cutoff,
    cancel_requests_reach_the_live_owner_once,
    two_live_ledgers_never_interrupt_each_other,
    export_is_versioned_and_carries_events,
    closing_interrupts_each_unfinished_run_with_the_event_a_transition_writes,
    an_open_told_to_reconnect_for_ever_opens_and_records,
);
