//! Tests of `brood agents` against real ledgers in temporary workspaces.
use super::*;
use brood::ledger::{Ledger, LedgerOptions, NewRun, RunId, UsageDelta};
use serde_json::json;
use tempfile::TempDir;

/// `brood agents list` (no flags) in `ws`.
fn list(ws: &Path) -> (i32, String, String) {
    exec(
        AgentsCmd::List {
            all: false,
            json: false,
            tree: false,
        },
        ws,
    )
}

fn exec(cmd: AgentsCmd, ws: &Path) -> (i32, String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    let code = execute(&cmd, ws, &mut out, &mut err);
    (code, out, err)
}

#[test]
fn ages_parse_with_units_and_reject_the_rest() {
    assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
    assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3600)));
    assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
    assert_eq!(parse_age("0s"), Ok(Duration::ZERO));
    for bad in ["7", "d", "7w", "-1d", "1.5h", "", "99999999999999999999d"] {
        let e = parse_age(bad).unwrap_err();
        assert!(e.contains("e.g. 90s, 30m, 12h, 7d"), "{bad}: {e}");
    }
}

/// A workspace with a finished parent, a running child and a prior-session run.
/// The ledger is returned so that its session stays alive (current) in the test.
async fn populated() -> (TempDir, Ledger, RunId, RunId, RunId) {
    let ws = TempDir::new().unwrap();
    let old = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
    let prior = old.create_run(NewRun::new("old work")).await.unwrap();
    old.close().await.unwrap();
    let ledger = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
    let parent = ledger
        .create_run(NewRun {
            name: Some("planner".into()),
            role: Some("plan".into()),
            ..NewRun::new("plan the work")
        })
        .await
        .unwrap();
    let child = ledger
        .create_run(NewRun {
            parent_id: Some(parent.clone()),
            name: Some("digger".into()),
            role: Some("explore".into()),
            ..NewRun::new("dig")
        })
        .await
        .unwrap();
    ledger.mark_running(&parent).await.unwrap();
    ledger.mark_running(&child).await.unwrap();
    ledger
        .add_usage(
            &parent,
            UsageDelta {
                steps: 2,
                input_tokens: 1500,
                output_tokens: 700,
                cached_input_tokens: 0,
                cost_usd: None,
            },
        )
        .unwrap();
    for i in 0..5 {
        ledger
            .append_message(&child, "assistant", json!(format!("message {i}")))
            .unwrap();
    }
    ledger
        .complete(&parent, json!({"summary": "planned"}))
        .await
        .unwrap();
    ledger.flush().await.unwrap();
    (ws, ledger, prior, parent, child)
}

#[tokio::test]
async fn list_shows_the_current_session_as_a_table_tree_or_json() {
    let (ws, _session, prior, parent, child) = populated().await;
    let (code, out, _) = list(ws.path());
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("ID") && lines[0].contains("TOKENS"));
    let width = id_width([parent.as_str(), child.as_str()].into_iter());
    assert!(lines[1].starts_with(short_id(parent.as_str(), width)));
    assert!(lines[1].contains("planner") && lines[1].contains("completed"));
    assert!(lines[1].contains("2.2k"), "{}", lines[1]);
    assert!(lines[2].contains("digger") && lines[2].contains("running"));
    // The prior session's run ("old work") is not listed.
    assert!(!out.contains("old work"), "{out}");

    let (_, out, _) = exec(
        AgentsCmd::List {
            all: true,
            json: false,
            tree: true,
        },
        ws.path(),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].ends_with("SESSION"));
    assert!(lines[1].contains("old work") && lines[1].ends_with("prior"));
    assert!(lines[2].contains("planner") && lines[2].ends_with("current"));
    assert!(lines[3].contains("└ digger"));

    let (code, out, _) = exec(
        AgentsCmd::List {
            all: true,
            json: true,
            tree: false,
        },
        ws.path(),
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["id"], prior.as_str());
    assert_eq!(runs[0]["from_prior_session"], true);
    assert_eq!(runs[0]["status"], "interrupted");
    assert_eq!(runs[2]["id"], child.as_str());
    assert_eq!(runs[2]["parent_id"], parent.as_str());
    assert_eq!(runs[2]["from_prior_session"], false);
}

/// The shortest prefix of `id` no other of `others` shares.
fn short_len(id: &RunId, others: &[&RunId]) -> usize {
    let shared = others
        .iter()
        .map(|o| {
            id.as_str()
                .chars()
                .zip(o.as_str().chars())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    shared + 1
}

#[tokio::test]
async fn show_transcript_cancel_export_and_prune() {
    let (ws, _session, prior, parent, child) = populated().await;
    let (code, out, _) = exec(
        AgentsCmd::Show {
            id: parent.as_str()[..short_len(&parent, &[&prior, &child])].to_string(),
            json: false,
        },
        ws.path(),
    );
    assert_eq!(code, 0);
    assert!(out.contains(&format!("run        {parent}")), "{out}");
    assert!(out.contains("events (4):"));
    assert!(out.contains("completed"));
    assert!(out.contains("1500 input tokens"));

    let (_, out, _) = exec(
        AgentsCmd::Show {
            id: child.to_string(),
            json: true,
        },
        ws.path(),
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["id"], child.as_str());
    assert_eq!(v["depth"], 1);
    assert_eq!(v["events"][0]["kind"], "spawned");

    let (code, out, _) = exec(
        AgentsCmd::Transcript {
            id: child.to_string(),
            from: 1,
            limit: 2,
            json: false,
            full: false,
        },
        ws.path(),
    );
    assert_eq!(code, 0);
    assert!(out.contains("message 1") && out.contains("message 2"));
    assert!(!out.contains("message 0") && !out.contains("message 3"));
    assert!(
        out.contains("messages #1–#2 of 5; more with --from 3"),
        "{out}"
    );

    let (code, _, err) = exec(
        AgentsCmd::Show {
            id: "zzzz".into(),
            json: false,
        },
        ws.path(),
    );
    assert_eq!(code, 1);
    assert!(err.contains("no run with id 'zzzz'"), "{err}");

    // The child's session is alive: cancel asks it.
    let (code, out, _) = exec(
        AgentsCmd::Cancel {
            id: child.to_string(),
        },
        ws.path(),
    );
    assert_eq!(code, 0);
    assert!(out.contains("cancel requested"), "{out}");
    let reader = Ledger::open_reader(ws.path()).unwrap();
    assert_eq!(reader.run(&child).unwrap().status, RunStatus::Running);
    // A finished run cannot be cancelled.
    let (code, _, err) = exec(
        AgentsCmd::Cancel {
            id: prior.to_string(),
        },
        ws.path(),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("already finished (interrupted); nothing to cancel"),
        "{err}"
    );

    let (code, _, err) = exec(AgentsCmd::Export { json: false }, ws.path());
    assert_eq!(code, 2);
    assert!(err.contains("--json"));
    let (code, out, _) = exec(AgentsCmd::Export { json: true }, ws.path());
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "brood.runs.v1");
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);

    // Only the prior run's tree is finished; the planner tree has a running child.
    let (code, out, _) = exec(
        AgentsCmd::Prune {
            older_than: Some(Duration::ZERO),
        },
        ws.path(),
    );
    assert_eq!(code, 0);
    assert!(out.starts_with("pruned 1 run ("), "{out}");
    assert!(matches!(
        reader.run(&prior),
        Err(LedgerError::UnknownRun { .. })
    ));
    assert_eq!(reader.run(&parent).unwrap().status, RunStatus::Completed);
}

#[test]
fn an_empty_workspace_lists_nothing_and_creates_nothing() {
    let ws = TempDir::new().unwrap();
    let (code, out, _) = exec(
        AgentsCmd::List {
            all: false,
            json: true,
            tree: false,
        },
        ws.path(),
    );
    assert_eq!((code, out.trim()), (0, "[]"));
    let (code, out, _) = exec(
        AgentsCmd::List {
            all: true,
            json: false,
            tree: false,
        },
        ws.path(),
    );
    assert_eq!(code, 0);
    assert!(out.contains("no runs recorded"));
    let (code, _, err) = exec(
        AgentsCmd::Show {
            id: "abc".into(),
            json: false,
        },
        ws.path(),
    );
    assert_eq!(code, 1);
    assert!(err.contains("no ledger at"), "{err}");
    let (code, out, _) = exec(AgentsCmd::Export { json: true }, ws.path());
    assert_eq!(code, 0);
    assert!(out.contains("\"runs\": []"));
    assert!(!ws.path().join(".brood").exists());
}

#[tokio::test]
async fn runs_made_in_the_same_minute_get_distinct_short_ids_that_resolve() {
    let ws = TempDir::new().unwrap();
    let ledger = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            ledger
                .create_run(NewRun::new(format!("fan {i}")))
                .await
                .unwrap(),
        );
    }
    ledger.flush().await.unwrap();
    let (code, out, _) = list(ws.path());
    assert_eq!(code, 0, "{out}");
    let shown: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(shown.len(), 5, "{out}");
    let distinct: std::collections::HashSet<&&str> = shown.iter().collect();
    assert_eq!(distinct.len(), 5, "short ids repeat:\n{out}");
    for (short, id) in shown.iter().zip(&ids) {
        assert!(
            id.as_str().starts_with(short),
            "{short} is not a prefix of {id}"
        );
        let (code, out, err) = exec(
            AgentsCmd::Show {
                id: short.to_string(),
                json: false,
            },
            ws.path(),
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(id.as_str()), "{out}");
    }
}
