//! `Ledger::reopen` (what `brood agents resume` records): a run that ended without
//! finishing goes back to `running` under the reopening boot, with a `resumed`
//! event, keeping its id, lineage and history; a completed run, or one still
//! running in a live boot, is refused and nothing is written.

use brood::ledger::{EventKind, LedgerError, NewRun, RunStatus};
use serde_json::json;

use crate::common::{kinds, named, open, Store};

async fn an_interrupted_child_is_reopened_under_the_new_boot_with_its_history(ws: Store) {
    let first = open(&ws);
    let root = first.create_run(named("parent")).await.unwrap();
    let kid = first
        .create_run(NewRun {
            parent_id: Some(root.clone()),
            ..named("child")
        })
        .await
        .unwrap();
    first.mark_running(&kid).await.unwrap();
    first
        .append_message(&kid, "user", json!({"role": "user", "content": "task"}))
        .unwrap();
    first.interrupt(&kid, "process exited").await.unwrap();
    drop(first);

    let second = open(&ws);
    let reopened = second.reopen(&kid).await.unwrap();
    assert_eq!(reopened.from, RunStatus::Interrupted);
    assert_eq!(reopened.reason.as_deref(), Some("process exited"));
    let detail = second.get_run(&kid).await.unwrap();
    assert_eq!(detail.run.status, RunStatus::Running);
    assert_eq!(detail.run.status_reason, None);
    assert_eq!(detail.run.ended_at, None);
    assert_eq!(detail.run.parent_id.as_ref(), Some(&root));
    assert_eq!(detail.run.root_id, root);
    assert_eq!(detail.run.depth, 1);
    assert_eq!(detail.run.session_boot_id, second.boot_id());
    assert_eq!(detail.run.session_id, second.session_id());
    let resumed = detail.events.last().unwrap();
    assert_eq!(resumed.kind, EventKind::Resumed);
    assert_eq!(resumed.payload["from"], "interrupted");
    assert_eq!(resumed.payload["boot_id"], second.boot_id());
    // Its transcript stays; the reopened run writes on after it and ends normally.
    second
        .append_message(
            &kid,
            "assistant",
            json!({"role": "assistant", "content": "done"}),
        )
        .unwrap();
    second
        .complete(&kid, json!({"final_text": "done"}))
        .await
        .unwrap();
    let slice = second.transcript(&kid, 0, 10).await.unwrap();
    assert_eq!(slice.total, 2);
    second.flush().await.unwrap();
    assert_eq!(
        kinds(&second, &kid),
        vec![
            EventKind::Spawned,
            EventKind::Started,
            EventKind::Interrupted,
            EventKind::Resumed,
            EventKind::Completed
        ]
    );
    // Resumed events are written by reopen only.
    assert!(matches!(
        second.append_event(&kid, EventKind::Resumed, json!({})),
        Err(LedgerError::ReservedEventKind { .. })
    ));
}

async fn a_completed_run_or_one_live_in_another_boot_is_refused_and_untouched(ws: Store) {
    let owner = open(&ws);
    let done = owner.create_run(named("done")).await.unwrap();
    owner.mark_running(&done).await.unwrap();
    owner.complete(&done, json!("ok")).await.unwrap();
    let live = owner.create_run(named("live")).await.unwrap();
    owner.mark_running(&live).await.unwrap();

    // Another boot on the same workspace (its own lock; the owner's is held).
    let other = open(&ws);
    let err = other.reopen(&done).await.unwrap_err();
    assert!(
        matches!(&err, LedgerError::NotResumable { why, .. } if why.contains("completed")),
        "{err}"
    );
    let err = other.reopen(&live).await.unwrap_err();
    assert!(
        matches!(&err, LedgerError::NotResumable { why, .. } if why.contains("still running in another brood process")),
        "{err}"
    );
    // Its own boot's run is running here already.
    let err = owner.reopen(&live).await.unwrap_err();
    assert!(
        matches!(&err, LedgerError::NotResumable { why, .. } if why.contains("already running in this session")),
        "{err}"
    );
    let reader = ws.reader();
    let detail = reader.get_run(&live).unwrap();
    assert_eq!(detail.run.session_boot_id, owner.boot_id());
    assert!(!detail.events.iter().any(|e| e.kind == EventKind::Resumed));
    // Once the owner is gone (its close marks the run interrupted), it may be.
    // (Its refused reopen counts as a rejected write, as any refused op does.)
    assert_eq!(
        owner.close().await,
        Err(LedgerError::Unwritten { failed: 1 })
    );
    other.reopen(&live).await.unwrap();
}

crate::both!(
    an_interrupted_child_is_reopened_under_the_new_boot_with_its_history,
    a_completed_run_or_one_live_in_another_boot_is_refused_and_untouched,
);
