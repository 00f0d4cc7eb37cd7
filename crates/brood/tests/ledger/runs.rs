//! The ledger through its public API, in one process: durability of awaited
//! operations, transition validation, progress events, listings across sessions,
//! trees, transcripts and spill files, id prefixes. Sessions, cancel requests,
//! prune and export are in `sessions.rs`.

use std::time::Duration;

use brood::ledger::{
    EventKind, Ledger, LedgerError, LedgerOptions, ListFilter, NewRun, RunId, RunStatus, UsageDelta,
};
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::common::{kinds, named, open, open_session, Store};

async fn an_awaited_create_is_visible_to_a_fresh_connection(ws: Store) {
    let ledger = open(&ws);
    let id = ledger.create_run(named("first")).await.unwrap();
    // A brand-new read-only connection, not the writer's.
    let reader = ws.reader();
    let detail = reader.get_run(&id).unwrap();
    assert_eq!(detail.run.status, RunStatus::Pending);
    assert_eq!(detail.run.name.as_deref(), Some("first"));
    assert_eq!(detail.run.session_id, ledger.session_id());
    assert_eq!(detail.run.session_boot_id, ledger.boot_id());
    assert_eq!(detail.run.root_id, id);
    assert_eq!(detail.run.depth, 0);
    assert_eq!(
        detail.run.workspace,
        ws.path().canonicalize().unwrap().to_string_lossy()
    );
    assert_eq!(detail.events.len(), 1);
    assert_eq!(detail.events[0].kind, EventKind::Spawned);
    assert_eq!(detail.events[0].seq, 0);
    assert!(!detail.from_prior_session);
}

async fn transitions_are_validated_logged_and_never_half_written(ws: Store) {
    let ledger = open(&ws);
    let id = ledger.create_run(named("r")).await.unwrap();

    // Completing a run that never ran is rejected and writes nothing.
    let err = ledger.complete(&id, json!("x")).await.unwrap_err();
    assert_eq!(
        err,
        LedgerError::InvalidTransition {
            run: id.to_string(),
            from: RunStatus::Pending,
            to: RunStatus::Completed
        }
    );
    ledger.mark_queued(&id).await.unwrap();
    ledger.mark_running(&id).await.unwrap();
    ledger
        .complete(&id, json!({"summary": "done"}))
        .await
        .unwrap();
    // Terminal states never change.
    for err in [
        ledger.cancel(&id, "late").await.unwrap_err(),
        ledger.mark_running(&id).await.unwrap_err(),
        ledger.fail(&id, "boom", None).await.unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                LedgerError::InvalidTransition {
                    from: RunStatus::Completed,
                    ..
                }
            ),
            "{err:?}"
        );
    }
    let run = ledger.reader().unwrap().run(&id).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.result, Some(json!({"summary": "done"})));
    assert!(run.started_at.is_some() && run.ended_at.is_some());
    assert!(run.started_at <= run.ended_at);
    assert_eq!(
        kinds(&ledger, &id),
        vec![
            EventKind::Spawned,
            EventKind::Queued,
            EventKind::Started,
            EventKind::Completed
        ]
    );

    // A queued run can be cancelled; a pending one can fail.
    let q = ledger.create_run(named("q")).await.unwrap();
    ledger.mark_queued(&q).await.unwrap();
    ledger.cancel(&q, "user changed their mind").await.unwrap();
    let p = ledger.create_run(named("p")).await.unwrap();
    ledger.fail(&p, "could not start", None).await.unwrap();
    let reader = ledger.reader().unwrap();
    let q = reader.run(&q).unwrap();
    assert_eq!(q.status, RunStatus::Cancelled);
    assert_eq!(q.status_reason.as_deref(), Some("user changed their mind"));
    let p = reader.run(&p).unwrap();
    assert_eq!(p.status, RunStatus::Failed);
    assert_eq!(p.error.as_deref(), Some("could not start"));

    let unknown = RunId::from_string("no-such-run");
    assert_eq!(
        ledger.mark_running(&unknown).await.unwrap_err(),
        LedgerError::UnknownRun {
            id: "no-such-run".into()
        }
    );
}

#[tokio::test]
async fn a_rejected_op_does_not_undo_the_rest_of_its_group_commit() {
    let ws = TempDir::new().unwrap();
    let ledger = open(&ws);
    // Hold the write lock elsewhere while queuing, so that everything queued after the
    // writer's first pick lands in one group commit.
    let blocker = rusqlite::Connection::open(ledger.db_path()).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let a = ledger.create_run(named("a"));
    let id = RunId::new();
    let b = ledger.create_run(NewRun {
        id: Some(id.clone()),
        ..named("b")
    });
    let bad = ledger.complete(&id, json!(1)); // pending -> completed: invalid
    let good = ledger.mark_running(&id);
    ledger
        .append_event(&id, EventKind::ToolStarted, json!({"tool": "grep"}))
        .unwrap();
    let flushed = ledger.flush();
    blocker.execute_batch("ROLLBACK").unwrap();
    flushed.await.unwrap();
    let a = a.await.unwrap();
    assert_eq!(b.await.unwrap(), id);
    assert!(matches!(
        bad.await,
        Err(LedgerError::InvalidTransition { .. })
    ));
    good.await.unwrap();
    let reader = ledger.reader().unwrap();
    assert_eq!(reader.run(&a).unwrap().status, RunStatus::Pending);
    assert_eq!(reader.run(&id).unwrap().status, RunStatus::Running);
    assert_eq!(
        kinds(&ledger, &id),
        vec![
            EventKind::Spawned,
            EventKind::Started,
            EventKind::ToolStarted
        ]
    );
    let stats = ledger.stats();
    assert_eq!(stats.ops_failed, 1);
    assert_eq!(stats.runs_created, 2);
    assert!(stats.batches_committed <= 2, "{stats:?}");
}

async fn progress_events_and_usage_are_numbered_summed_and_counted(ws: Store) {
    let ledger = open(&ws);
    let id = ledger.create_run(named("r")).await.unwrap();
    ledger.mark_running(&id).await.unwrap();
    for i in 0..50 {
        ledger
            .append_event(&id, EventKind::ModelRequest, json!({"step": i}))
            .unwrap();
    }
    let delta = UsageDelta {
        steps: 1,
        input_tokens: 100,
        output_tokens: 20,
        cached_input_tokens: 60,
        cost_usd: None,
    };
    ledger.add_usage(&id, delta).unwrap();
    ledger.add_usage(&id, delta).unwrap();
    assert_eq!(
        ledger
            .append_event(&id, EventKind::Completed, json!({}))
            .unwrap_err(),
        LedgerError::ReservedEventKind {
            kind: "completed".into()
        }
    );
    ledger.flush().await.unwrap();

    let reader = ledger.reader().unwrap();
    let run = reader.run(&id).unwrap();
    assert_eq!(
        (
            run.steps,
            run.input_tokens,
            run.output_tokens,
            run.cached_input_tokens
        ),
        (2, 200, 40, 120)
    );
    let events = reader.events(&id).unwrap();
    assert_eq!(events.len(), 2 + 50 + 2);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "seqs start at 0 without gaps");
    }
    assert_eq!(events[2].payload, json!({"step": 0}));
    assert_eq!(events[51].payload, json!({"step": 49}));
    assert_eq!(events[52].kind, EventKind::Usage);
    assert_eq!(events[52].payload["input_tokens"], 100);
    let stats = ledger.stats();
    assert_eq!(stats.events_written, 54);
    assert_eq!(stats.runs_created, 1);
    assert_eq!(stats.transitions, 1);
    assert!(stats.batches_committed >= 1);

    // An event for an unknown run is dropped and counted, not written.
    let before = ledger.stats().ops_failed;
    ledger
        .append_event(
            &RunId::from_string("ghost"),
            EventKind::ToolFinished,
            json!({}),
        )
        .unwrap();
    ledger.flush().await.unwrap();
    assert_eq!(ledger.stats().ops_failed, before + 1);
    assert!(reader
        .events(&RunId::from_string("ghost"))
        .unwrap()
        .is_empty());
    // Closing says how many writes did not make it, rather than a bare Ok.
    match ledger.close().await {
        Err(LedgerError::Unwritten { failed }) => assert_eq!(failed, before + 1),
        other => panic!("close hid the failed write: {other:?}"),
    }
}

async fn listings_show_the_current_session_and_flag_prior_ones(ws: Store) {
    let first = open_session(&ws, "session-one");
    let r1 = first.create_run(named("r1")).await.unwrap();
    first.mark_running(&r1).await.unwrap();
    let r2 = first.create_run(named("r2")).await.unwrap();
    first.close().await.unwrap();

    let second = open_session(&ws, "session-two");
    let r3 = second.create_run(named("r3")).await.unwrap();

    let current = second.list_runs(ListFilter::default()).await.unwrap();
    assert_eq!(
        current.iter().map(|r| &r.run.id).collect::<Vec<_>>(),
        vec![&r3]
    );
    assert!(!current[0].from_prior_session);

    let all = second
        .list_runs(ListFilter {
            include_archived: true,
        })
        .await
        .unwrap();
    let flags: Vec<(RunId, bool)> = all
        .iter()
        .map(|r| (r.run.id.clone(), r.from_prior_session))
        .collect();
    assert_eq!(
        flags,
        vec![(r1.clone(), true), (r2.clone(), true), (r3.clone(), false)]
    );
    // Closing the first session interrupted its unfinished runs.
    for r in &all[..2] {
        assert_eq!(r.run.status, RunStatus::Interrupted);
        assert!(r
            .run
            .status_reason
            .as_deref()
            .unwrap()
            .contains("session ended"));
    }

    // An outside reader (the CLI) counts the live session as current.
    let outside = ws.reader();
    assert_eq!(outside.current_sessions().unwrap(), vec!["session-two"]);
    let listed = outside.list_runs(ListFilter::default()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].run.id, r3);
    drop(second);
    // With no live session, the most recent one is current.
    let listed = outside.list_runs(ListFilter::default()).unwrap();
    assert_eq!(
        listed.iter().map(|r| &r.run.id).collect::<Vec<_>>(),
        vec![&r3]
    );

    // Continuing session one makes its runs current again.
    let again = open_session(&ws, "session-one");
    let ids: Vec<RunId> = again
        .list_runs(ListFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(ids, vec![r1, r2]);
}

async fn runs_form_trees(ws: Store) {
    let ledger = open(&ws);
    let root = ledger.create_run(named("root")).await.unwrap();
    let child = ledger
        .create_run(NewRun {
            parent_id: Some(root.clone()),
            ..named("child")
        })
        .await
        .unwrap();
    let grandchild = ledger
        .create_run(NewRun {
            parent_id: Some(child.clone()),
            ..named("grandchild")
        })
        .await
        .unwrap();
    let sibling = ledger
        .create_run(NewRun {
            parent_id: Some(root.clone()),
            ..named("sibling")
        })
        .await
        .unwrap();
    let reader = ledger.reader().unwrap();
    let g = reader.run(&grandchild).unwrap();
    assert_eq!((g.depth, &g.root_id), (2, &root));
    assert_eq!(g.parent_id.as_ref(), Some(&child));
    let kids: Vec<RunId> = reader
        .children(&root)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(kids, vec![child, sibling]);
    let orphan = ledger
        .create_run(NewRun {
            parent_id: Some(RunId::from_string("missing-parent")),
            ..named("orphan")
        })
        .await
        .unwrap_err();
    assert_eq!(
        orphan,
        LedgerError::UnknownRun {
            id: "missing-parent".into()
        }
    );
}

async fn transcripts_are_sliced_by_seq(ws: Store) {
    let ledger = open(&ws);
    let id = ledger.create_run(named("r")).await.unwrap();
    for i in 0..10 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        ledger
            .append_message(&id, role, json!({"role": role, "content": format!("m{i}")}))
            .unwrap();
    }
    ledger.flush().await.unwrap();
    let reader = ledger.reader().unwrap();
    let s = reader.transcript(&id, 0, 4).unwrap();
    assert_eq!(s.total, 10);
    assert_eq!(
        s.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(s.next_from, Some(4));
    assert_eq!(s.entries[1].role, "assistant");
    assert_eq!(s.entries[1].content["content"], "m1");
    let s = reader.transcript(&id, 8, 4).unwrap();
    assert_eq!(
        s.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![8, 9]
    );
    assert_eq!(s.next_from, None);
    let s = reader.transcript(&id, 20, 5).unwrap();
    assert!(s.entries.is_empty());
    assert_eq!(s.next_from, None);
    let s = ledger.transcript(&id, 3, 1).await.unwrap();
    assert_eq!(s.entries[0].content["content"], "m3");
    assert_eq!(s.next_from, Some(4));
    assert!(matches!(
        reader.transcript(&RunId::from_string("nope"), 0, 5),
        Err(LedgerError::UnknownRun { .. })
    ));
}

async fn oversized_transcript_contents_are_capped_and_spilled(ws: Store) {
    let opts = LedgerOptions {
        transcript_cap_bytes: 1024,
        ..LedgerOptions::default()
    };
    let ledger = ws.open_with(opts);
    let id = ledger.create_run(named("r")).await.unwrap();
    let big: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    ledger.append_message(&id, "tool", json!("small")).unwrap();
    ledger
        .append_message(&id, "tool", Value::String(big.clone()))
        .unwrap();
    let message = json!({"role": "tool", "tool_call_id": "call-1", "content": big});
    ledger.append_message(&id, "tool", message.clone()).unwrap();
    ledger.flush().await.unwrap();

    let reader = ledger.reader().unwrap();
    let entries = reader.transcript(&id, 0, 10).unwrap().entries;
    assert!(!entries[0].truncated);
    assert_eq!(entries[0].spill_path, None);

    let text = &entries[1];
    assert!(text.truncated);
    assert_eq!(text.full_bytes, big.len() as u64);
    let rel = text.spill_path.clone().unwrap();
    let stored = text.content.as_str().unwrap();
    assert!(stored.len() < 1200, "stored {} bytes", stored.len());
    assert!(stored.starts_with("line 0\nline 1\n"));
    assert!(stored.contains(&rel));
    // SQLite spills to a file in the workspace; PostgreSQL keeps the text in the
    // database, which machines share (docs/LEDGER.md "Transcripts and spill files").
    if ws.is_postgres() {
        assert_eq!(rel, format!("ledger:spills/{id}/1"));
        assert!(!ws
            .path()
            .join(".brood/state/spill")
            .join(format!("{id}-1.txt"))
            .exists());
    } else {
        assert_eq!(rel, format!(".brood/state/spill/{id}-1.txt"));
        assert_eq!(std::fs::read_to_string(ws.path().join(&rel)).unwrap(), big);
    }
    assert_eq!(
        reader.read_spill(text).unwrap().as_deref(),
        Some(big.as_str())
    );

    let obj = &entries[2];
    assert!(obj.truncated);
    assert_eq!(obj.content["tool_call_id"], "call-1");
    assert!(obj.content["content"].as_str().unwrap().len() < 1200);
    let spilled: Value = serde_json::from_str(&reader.read_spill(obj).unwrap().unwrap()).unwrap();
    assert_eq!(spilled, message);

    // Pruning the run removes its spill files too.
    ledger.mark_running(&id).await.unwrap();
    ledger.complete(&id, json!(null)).await.unwrap();
    let report = ledger.prune(Duration::ZERO).await.unwrap();
    assert_eq!(report.runs, 1);
    assert_eq!(report.transcript_entries, 3);
    assert_eq!(report.spill_files, 2);
    assert!(!ws.path().join(&rel).exists());
    assert!(!ws.path().join(obj.spill_path.as_ref().unwrap()).exists());
    if let Some(url) = crate::common::Place::url(&ws) {
        let left = crate::common::pg::sql(url, &["SELECT count(*) FROM spills"]);
        assert_eq!(left, [["0"]], "the pruned run's spilled text is deleted");
    }
}

/// A spill file is written before its row: when the row's insert is rolled back,
/// the file goes too (nothing in `.brood/state/spill/` that no row names).
#[tokio::test]
async fn a_spill_file_whose_row_rolls_back_is_removed() {
    let ws = TempDir::new().unwrap();
    let opts = LedgerOptions {
        transcript_cap_bytes: 1024,
        ..LedgerOptions::default()
    };
    let ledger = Ledger::open(ws.path(), opts).unwrap();
    let id = ledger.create_run(named("r")).await.unwrap();
    // Another program refuses every transcript insert (after brood wrote the file).
    let other = rusqlite::Connection::open(ledger.db_path()).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON transcripts \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        )
        .unwrap();
    let big: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    ledger
        .append_message(&id, "tool", Value::String(big.clone()))
        .unwrap();
    ledger.flush().await.unwrap();
    assert_eq!(ledger.stats().ops_failed, 1, "{:?}", ledger.stats());
    let spill_dir = ws.path().join(".brood/state/spill");
    let left: Vec<_> = std::fs::read_dir(&spill_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "orphaned spill files: {left:?}");

    // Once inserts are allowed again, a spill file stays with its row.
    other.execute_batch("DROP TRIGGER refuse").unwrap();
    ledger
        .append_message(&id, "tool", Value::String(big.clone()))
        .unwrap();
    ledger.flush().await.unwrap();
    let reader = ledger.reader().unwrap();
    let entries = reader.transcript(&id, 0, 10).unwrap().entries;
    assert_eq!(entries.len(), 1);
    assert_eq!(
        reader.read_spill(&entries[0]).unwrap().as_deref(),
        Some(big.as_str())
    );
    assert_eq!(std::fs::read_dir(&spill_dir).unwrap().count(), 1);
}

async fn run_ids_resolve_from_unique_prefixes(ws: Store) {
    let ledger = open(&ws);
    for id in ["abc-1", "abc-2", "abd"] {
        ledger
            .create_run(NewRun {
                id: Some(RunId::from_string(id)),
                ..named(id)
            })
            .await
            .unwrap();
    }
    let reader = ws.reader();
    assert_eq!(reader.resolve_id("abd").unwrap().as_str(), "abd");
    assert_eq!(reader.resolve_id("abc-2").unwrap().as_str(), "abc-2");
    assert_eq!(
        reader.resolve_id("abc").unwrap_err(),
        LedgerError::AmbiguousId {
            prefix: "abc".into(),
            candidates: vec!["abc-1".into(), "abc-2".into()]
        }
    );
    assert!(matches!(
        reader.resolve_id("ab"),
        Err(LedgerError::AmbiguousId { .. })
    ));
    assert!(matches!(
        reader.resolve_id("zzz"),
        Err(LedgerError::UnknownRun { .. })
    ));
    assert!(matches!(
        reader.resolve_id("a%"),
        Err(LedgerError::UnknownRun { .. })
    ));

    // Ids name files, so path characters are refused up front; duplicates too.
    let bad = ledger
        .create_run(NewRun {
            id: Some(RunId::from_string("../escape")),
            ..named("bad")
        })
        .await
        .unwrap_err();
    assert!(matches!(bad, LedgerError::InvalidId { .. }), "{bad:?}");
    let dup = ledger
        .create_run(NewRun {
            id: Some(RunId::from_string("abd")),
            ..named("dup")
        })
        .await
        .unwrap_err();
    assert_eq!(dup, LedgerError::DuplicateRun { id: "abd".into() });
}

#[tokio::test]
async fn queued_operations_share_group_commits() {
    let ws = TempDir::new().unwrap();
    let ledger = open(&ws);
    let id = ledger.create_run(named("r")).await.unwrap();
    let before = ledger.stats();

    // Another connection holds the write lock, so the writer cannot commit while we
    // queue: everything queued meanwhile must go out in (at most) two transactions.
    let blocker = rusqlite::Connection::open(ledger.db_path()).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    for i in 0..1000 {
        ledger
            .append_event(&id, EventKind::ToolFinished, json!({ "i": i }))
            .unwrap();
    }
    let flushed = ledger.flush();
    blocker.execute_batch("ROLLBACK").unwrap();
    flushed.await.unwrap();

    let after = ledger.stats();
    assert_eq!(after.events_written - before.events_written, 1000);
    let batches = after.batches_committed - before.batches_committed;
    assert!(
        (1..=2).contains(&batches),
        "{batches} batches for 1000 events"
    );
    assert_eq!(ledger.reader().unwrap().events(&id).unwrap().len(), 1001);
}

#[tokio::test]
async fn an_open_read_transaction_does_not_block_the_writer() {
    let ws = TempDir::new().unwrap();
    let ledger = open(&ws);
    let first = ledger.create_run(named("first")).await.unwrap();
    // A reader in the middle of a read transaction (holding its snapshot).
    let reader = rusqlite::Connection::open(ledger.db_path()).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let n: i64 = reader
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    // The writer commits regardless (bounded wait, far below the busy timeout).
    let second = tokio::time::timeout(Duration::from_secs(5), async {
        let id = ledger.create_run(named("second")).await.unwrap();
        ledger.mark_running(&first).await.unwrap();
        id
    })
    .await
    .expect("the writer was blocked by a reader");
    // The reader's snapshot is stable; a new read sees the new run.
    let n: i64 = reader
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    reader.execute_batch("COMMIT").unwrap();
    assert!(Ledger::open_reader(ws.path()).unwrap().run(&second).is_ok());
}

#[test]
fn handles_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    fn sendable<T: Send>() {}
    shareable::<Ledger>();
    sendable::<brood::ledger::Durable<RunId>>();
    sendable::<brood::ledger::LedgerReader>();
}

async fn listings_leave_results_out_and_show_returns_them(ws: Store) {
    let ledger = open(&ws);
    let id = ledger.create_run(named("r")).await.unwrap();
    ledger.mark_running(&id).await.unwrap();
    let failed = ledger.create_run(named("f")).await.unwrap();
    ledger.mark_running(&failed).await.unwrap();
    ledger
        .complete(&id, json!({"summary": "done"}))
        .await
        .unwrap();
    ledger
        .fail(&failed, "boom", Some(json!({"partial": 1})))
        .await
        .unwrap();
    for filter in [
        ListFilter::default(),
        ListFilter {
            include_archived: true,
        },
    ] {
        let listed = ledger.list_runs(filter).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|l| l.run.result.is_none()));
        let find = |want: &RunId| listed.iter().find(|l| &l.run.id == want).unwrap();
        assert_eq!(find(&id).run.status, RunStatus::Completed);
        assert_eq!(find(&failed).run.error.as_deref(), Some("boom"));
    }
    let shown = ledger.get_run(&id).await.unwrap();
    assert_eq!(shown.run.result, Some(json!({"summary": "done"})));
    let reader = ledger.reader().unwrap();
    assert_eq!(
        reader.run(&failed).unwrap().result,
        Some(json!({"partial": 1}))
    );
}

/// Absurd usage numbers (u64 past i64::MAX, or sums that overflow) are clamped at the
/// write boundary: the columns stay integers and the run stays listable.
#[tokio::test]
async fn absurd_usage_numbers_are_clamped_and_the_run_stays_listable() {
    let ws = TempDir::new().unwrap();
    let ledger = open(&ws);
    let id = ledger.create_run(named("absurd")).await.unwrap();
    let huge = UsageDelta {
        steps: 1,
        input_tokens: u64::MAX,
        output_tokens: 1u64 << 63,
        cached_input_tokens: 5_000_000_000_000_000_000,
        cost_usd: None,
    };
    ledger.add_usage(&id, huge).unwrap();
    ledger.add_usage(&id, huge).unwrap();
    ledger.flush().await.unwrap();

    let conn = rusqlite::Connection::open(ws.path().join(".brood/state/brood.db")).unwrap();
    let types: (String, String, String) = conn
        .query_row(
            "SELECT typeof(input_tokens), typeof(output_tokens), typeof(cached_input_tokens)
             FROM runs WHERE id = ?1",
            [id.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        types,
        ("integer".into(), "integer".into(), "integer".into())
    );

    let reader = ledger.reader().unwrap();
    let run = reader.run(&id).unwrap();
    let max = i64::MAX as u64;
    assert_eq!(
        (
            run.steps,
            run.input_tokens,
            run.output_tokens,
            run.cached_input_tokens
        ),
        (2, max, max, max)
    );
    assert_eq!(reader.list_runs(Default::default()).unwrap().len(), 1);
}

/// A row whose count columns hold a REAL, a negative or text (as an older brood could
/// leave them) is listed with the field unknown and a note; the listing never fails.
#[tokio::test]
async fn odd_count_columns_are_read_as_unknown_with_a_note() {
    let ws = TempDir::new().unwrap();
    let ledger = open(&ws);
    let odd = ledger.create_run(named("odd")).await.unwrap();
    let fine = ledger.create_run(named("fine")).await.unwrap();
    ledger.flush().await.unwrap();
    let conn = rusqlite::Connection::open(ws.path().join(".brood/state/brood.db")).unwrap();
    conn.execute(
        "UPDATE runs SET input_tokens = 1.0e19, output_tokens = -2, steps = 'many' WHERE id = ?1",
        [odd.as_str()],
    )
    .unwrap();
    drop(conn);

    let reader = ledger.reader().unwrap();
    let listed = reader.list_runs(Default::default()).unwrap();
    assert_eq!(listed.len(), 2);
    let run = reader.run(&odd).unwrap();
    assert_eq!((run.steps, run.input_tokens, run.output_tokens), (0, 0, 0));
    assert_eq!(run.notes.len(), 3, "{:?}", run.notes);
    assert!(run
        .notes
        .iter()
        .any(|n| n.contains("output_tokens") && n.contains("-2")));
    assert!(reader.run(&fine).unwrap().notes.is_empty());
    let summaries = reader.list_summaries(Default::default()).unwrap();
    assert_eq!(summaries.len(), 2);
}

crate::both!(
    an_awaited_create_is_visible_to_a_fresh_connection,
    transitions_are_validated_logged_and_never_half_written,
    progress_events_and_usage_are_numbered_summed_and_counted,
    listings_show_the_current_session_and_flag_prior_ones,
    runs_form_trees,
    transcripts_are_sliced_by_seq,
    oversized_transcript_contents_are_capped_and_spilled,
    run_ids_resolve_from_unique_prefixes,
    listings_leave_results_out_and_show_returns_them,
);
