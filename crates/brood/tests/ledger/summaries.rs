//! Narrow listings (`list_summaries`, what `brood agents list` shows) against the full
//! listing (`list_runs`): the same runs in the same order with the same statuses,
//! times, usage and session flags, over ledgers with prior sessions, several live
//! sessions at once, trees, every status, and objectives cut at a character boundary.

use brood::ledger::{
    Ledger, ListFilter, ListedRun, NewRun, RunId, RunSummaries, UsageDelta, SUMMARY_OBJECTIVE_CHARS,
};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};

const ALL: ListFilter = ListFilter {
    include_archived: true,
};
const CURRENT: ListFilter = ListFilter {
    include_archived: false,
};

use crate::common::{open_session, Store};

/// Every field a summary has, checked against the full record it summarizes, and the
/// same runs in the same order.
fn assert_same(summaries: &RunSummaries, full: &[ListedRun]) {
    assert_eq!(summaries.len(), full.len());
    assert_eq!(summaries.iter().len(), full.len());
    for (i, (s, l)) in summaries.iter().zip(full).enumerate() {
        let r = &l.run;
        assert_eq!(s.id, r.id.as_str(), "run {i}");
        assert_eq!(
            s.parent_id,
            r.parent_id.as_ref().map(RunId::as_str),
            "{}",
            s.id
        );
        assert_eq!(s.name, r.name.as_deref(), "{}", s.id);
        assert_eq!(s.role, r.role.as_deref(), "{}", s.id);
        assert_eq!(s.agent_type, r.agent_type.as_deref(), "{}", s.id);
        let start: String = r.objective.chars().take(SUMMARY_OBJECTIVE_CHARS).collect();
        assert_eq!(s.objective, start, "{}", s.id);
        assert_eq!(s.status, r.status, "{}", s.id);
        assert_eq!(s.created_at, r.created_at, "{}", s.id);
        assert_eq!(s.ended_at, r.ended_at, "{}", s.id);
        assert_eq!(s.steps, r.steps, "{}", s.id);
        assert_eq!(s.input_tokens, r.input_tokens, "{}", s.id);
        assert_eq!(s.output_tokens, r.output_tokens, "{}", s.id);
        assert_eq!(s.from_prior_session, l.from_prior_session, "{}", s.id);
        assert_eq!(summaries.get(i), Some(s));
    }
    assert_eq!(summaries.get(full.len()), None);
    // Back to front too (the tree view walks indices).
    let ids: Vec<&str> = summaries.iter().rev().map(|s| s.id).collect();
    let want: Vec<&str> = full.iter().rev().map(|l| l.run.id.as_str()).collect();
    assert_eq!(ids, want);
}

/// A fresh id that sorts after every earlier one, so that runs created within the same
/// millisecond are listed in creation order (fresh ids are random).
fn next_id(tag: &str) -> Option<RunId> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Some(RunId::from_string(format!("{tag}-{n:05}")))
}

/// Runs of one session in every status, with a tree, usage, and names, roles and types
/// present or not. Returns the ids created, oldest first.
async fn record_runs(ledger: &Ledger, tag: &str) -> Vec<RunId> {
    let long = format!("{tag}: ünïcödé objective ⏎ spanning\nlines, ").repeat(6);
    let root = ledger
        .create_run(NewRun {
            id: next_id(tag),
            name: Some(format!("{tag}-root")),
            role: Some("general".into()),
            ..NewRun::new(long)
        })
        .await
        .unwrap();
    let child = ledger
        .create_run(NewRun {
            id: next_id(tag),
            parent_id: Some(root.clone()),
            agent_type: Some("explore".into()),
            ..NewRun::new(format!("{tag}: dig"))
        })
        .await
        .unwrap();
    let grandchild = ledger
        .create_run(NewRun {
            id: next_id(tag),
            parent_id: Some(child.clone()),
            ..NewRun::new("")
        })
        .await
        .unwrap();
    let failed = ledger
        .create_run(NewRun {
            id: next_id(tag),
            ..NewRun::new("will fail")
        })
        .await
        .unwrap();
    let cancelled = ledger
        .create_run(NewRun {
            id: next_id(tag),
            ..NewRun::new("cancelled")
        })
        .await
        .unwrap();
    let queued = ledger
        .create_run(NewRun {
            id: next_id(tag),
            ..NewRun::new("queued")
        })
        .await
        .unwrap();
    ledger.mark_running(&root).await.unwrap();
    ledger.mark_running(&child).await.unwrap();
    ledger.mark_running(&failed).await.unwrap();
    ledger.mark_queued(&queued).await.unwrap();
    ledger
        .add_usage(
            &root,
            UsageDelta {
                steps: 3,
                input_tokens: 1_500_000,
                output_tokens: 700,
                cached_input_tokens: 1200,
                cost_usd: None,
            },
        )
        .unwrap();
    ledger
        .complete(&child, json!({"summary": "dug"}))
        .await
        .unwrap();
    ledger.fail(&failed, "boom", None).await.unwrap();
    ledger.cancel(&cancelled, "not needed").await.unwrap();
    ledger.flush().await.unwrap();
    vec![root, child, grandchild, failed, cancelled, queued]
}

async fn summaries_list_what_the_full_listing_lists_across_sessions(ws: Store) {
    // A prior session, closed: its unfinished runs were interrupted.
    let old = open_session(&ws, "session-old");
    let old_ids = record_runs(&old, "old").await;
    old.close().await.unwrap();
    // Two live sessions at once, their runs interleaved in time.
    let a = open_session(&ws, "session-a");
    let b = open_session(&ws, "session-b");
    let mut a_ids = Vec::new();
    let mut b_ids = Vec::new();
    for _ in 0..3 {
        a_ids.extend(record_runs(&a, "a").await);
        b_ids.extend(record_runs(&b, "b").await);
    }
    // A child in session b of a run of session a: listed under b, its parent not.
    let across = b
        .create_run(NewRun {
            id: next_id("b"),
            parent_id: Some(a_ids[0].clone()),
            name: Some("across".into()),
            ..NewRun::new("child of another session")
        })
        .await
        .unwrap();
    b_ids.push(across.clone());

    // An outside reader (the CLI): both live sessions are current.
    let outside = ws.reader();
    for filter in [CURRENT, ALL] {
        let full = outside.list_runs(filter).unwrap();
        assert_same(&outside.list_summaries(filter).unwrap(), &full);
    }
    let current = outside.list_summaries(CURRENT).unwrap();
    assert_eq!(current.len(), a_ids.len() + b_ids.len());
    assert!(current.iter().all(|s| !s.from_prior_session));
    let mut listed: Vec<&str> = current.iter().map(|s| s.id).collect();
    let mut want: Vec<&str> = a_ids.iter().chain(&b_ids).map(RunId::as_str).collect();
    listed.sort_unstable();
    want.sort_unstable();
    assert_eq!(listed, want);
    // Oldest first, ties by id: the two sessions merged.
    let keys: Vec<_> = current.iter().map(|s| (s.created_at, s.id)).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");

    let all = outside.list_summaries(ALL).unwrap();
    assert_eq!(all.len(), old_ids.len() + a_ids.len() + b_ids.len());
    let prior: Vec<&str> = all
        .iter()
        .filter(|s| s.from_prior_session)
        .map(|s| s.id)
        .collect();
    assert_eq!(prior, old_ids.iter().map(RunId::as_str).collect::<Vec<_>>());

    // A session's own reader: only its runs are current; the other live one is prior.
    for (ledger, own) in [(&a, &a_ids), (&b, &b_ids)] {
        for filter in [CURRENT, ALL] {
            let full = ledger.list_runs(filter).await.unwrap();
            let summaries = ledger.list_summaries(filter).await.unwrap();
            assert_same(&summaries, &full);
            let reader = ledger.reader().unwrap();
            assert_same(&reader.list_summaries(filter).unwrap(), &full);
        }
        let mine: Vec<String> = ledger
            .list_summaries(CURRENT)
            .await
            .unwrap()
            .iter()
            .map(|s| s.id.to_string())
            .collect();
        assert_eq!(
            mine,
            own.iter().map(|id| id.to_string()).collect::<Vec<_>>()
        );
    }
    let across_summary = outside
        .list_summaries(CURRENT)
        .unwrap()
        .iter()
        .find(|s| s.id == across.as_str())
        .map(|s| s.parent_id.map(str::to_string));
    assert_eq!(
        across_summary,
        Some(Some(a_ids[0].to_string())),
        "a child keeps its parent from another session"
    );

    // With no live session, the latest one is current, as for list_runs.
    b.close().await.unwrap();
    a.close().await.unwrap();
    for filter in [CURRENT, ALL] {
        let full = outside.list_runs(filter).unwrap();
        assert_same(&outside.list_summaries(filter).unwrap(), &full);
    }
}

async fn statuses_times_and_usage_are_those_of_the_records(ws: Store) {
    let ledger = open_session(&ws, "only");
    let ids = record_runs(&ledger, "one").await;
    let summaries = ledger.list_summaries(CURRENT).await.unwrap();
    let status: Vec<&str> = summaries.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(
        status,
        [
            "running",
            "completed",
            "pending",
            "failed",
            "cancelled",
            "queued"
        ]
    );
    let root = summaries.get(0).unwrap();
    assert_eq!(root.id, ids[0].as_str());
    assert_eq!(root.name, Some("one-root"));
    assert_eq!(root.role, Some("general"));
    assert_eq!(
        (root.steps, root.input_tokens, root.output_tokens,),
        (3, 1_500_000, 700)
    );
    assert_eq!(root.ended_at, None);
    let child = summaries.get(1).unwrap();
    assert_eq!(child.parent_id, Some(ids[0].as_str()));
    assert_eq!((child.name, child.agent_type), (None, Some("explore")));
    assert!(child.ended_at.is_some_and(|t| t >= child.created_at));
    let grandchild = summaries.get(2).unwrap();
    assert_eq!(grandchild.parent_id, Some(ids[1].as_str()));
    assert_eq!(grandchild.objective, "");
    // Closing interrupts the unfinished runs; the summaries follow.
    drop(summaries);
    ledger.close().await.unwrap();
    let reader = ws.reader();
    let after = reader.list_summaries(CURRENT).unwrap();
    let status: Vec<&str> = after.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(
        status,
        [
            "interrupted",
            "completed",
            "interrupted",
            "failed",
            "cancelled",
            "interrupted"
        ]
    );
    assert_same(&after, &reader.list_runs(CURRENT).unwrap());
}

async fn objectives_are_cut_to_their_first_characters(ws: Store) {
    let ledger = open_session(&ws, "cut");
    let exact = "é".repeat(SUMMARY_OBJECTIVE_CHARS);
    let longer = format!("{exact}ü and more");
    let short = "short ⏎ one".to_string();
    for objective in [&exact, &longer, &short] {
        ledger
            .create_run(NewRun {
                id: next_id("cut"),
                ..NewRun::new(objective.clone())
            })
            .await
            .unwrap();
    }
    let summaries = ledger.list_summaries(CURRENT).await.unwrap();
    let objectives: Vec<&str> = summaries.iter().map(|s| s.objective).collect();
    assert_eq!(objectives, [exact.as_str(), exact.as_str(), short.as_str()]);
    // The whole objective is one `run` away.
    let id = RunId::from_string(summaries.get(1).unwrap().id);
    assert_eq!(ledger.reader().unwrap().run(&id).unwrap().objective, longer);
}

async fn an_empty_ledger_lists_no_summaries(ws: Store) {
    let ledger = open_session(&ws, "empty");
    for filter in [CURRENT, ALL] {
        let summaries = ledger.list_summaries(filter).await.unwrap();
        assert!(summaries.is_empty());
        assert_eq!(summaries.iter().next(), None);
        assert_eq!(summaries.get(0), None);
    }
    assert!(RunSummaries::default().is_empty());
}

crate::both!(
    summaries_list_what_the_full_listing_lists_across_sessions,
    statuses_times_and_usage_are_those_of_the_records,
    objectives_are_cut_to_their_first_characters,
    an_empty_ledger_lists_no_summaries,
);
