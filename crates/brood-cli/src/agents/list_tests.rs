//! `brood agents list` prints, from the narrow listing, exactly the table and tree the
//! earlier renderer printed from full records. That renderer is kept here as the
//! reference (`reference_list`), fed by `list_runs`, and compared byte for byte.
use super::*;
use brood::ledger::{Ledger, LedgerOptions, ListedRun, NewRun, RunId, UsageDelta};
use serde_json::json;
use std::collections::BTreeMap;
use tempfile::TempDir;

/// The table as the renderer before `list_summaries` printed it.
fn reference_list(runs: &[ListedRun], all: bool, tree: bool, now: DateTime<Utc>) -> String {
    let rows: Vec<(usize, &ListedRun)> = if tree {
        reference_tree(runs)
    } else {
        runs.iter().map(|r| (0, r)).collect()
    };
    let mut table = vec![["ID", "NAME", "ROLE", "STATUS", "AGE", "STEPS", "TOKENS"]
        .map(String::from)
        .to_vec()];
    if all {
        table[0].push("SESSION".to_string());
    }
    let width = id_width(runs.iter().map(|l| l.run.id.as_str()));
    for (indent, listed) in rows {
        let r = &listed.run;
        let name = display_name(r);
        let name = if indent > 0 {
            format!("{}└ {name}", "  ".repeat(indent - 1))
        } else {
            name
        };
        let tokens = match r.input_tokens + r.output_tokens {
            n @ 0..=999 => n.to_string(),
            n @ 1000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
            n => format!("{:.1}M", n as f64 / 1_000_000.0),
        };
        let mut row = vec![
            short_id(r.id.as_str(), width).to_string(),
            name,
            r.role.clone().unwrap_or_else(|| "-".into()),
            r.status.to_string(),
            age(r.created_at, now),
            r.steps.to_string(),
            tokens,
        ];
        if all {
            let session = if listed.from_prior_session {
                "prior"
            } else {
                "current"
            };
            row.push(session.to_string());
        }
        table.push(row);
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|c| table.iter().map(|r| r[c].chars().count()).max().unwrap())
        .collect();
    let mut out = String::new();
    for row in &table {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn reference_tree(runs: &[ListedRun]) -> Vec<(usize, &ListedRun)> {
    let listed: HashSet<&str> = runs.iter().map(|r| r.run.id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<&ListedRun>> = BTreeMap::new();
    let mut roots = Vec::new();
    for r in runs {
        match r.run.parent_id.as_ref().map(RunId::as_str) {
            Some(p) if listed.contains(p) => children.entry(p).or_default().push(r),
            _ => roots.push(r),
        }
    }
    let mut order = Vec::new();
    let mut stack: Vec<(usize, &ListedRun)> = roots.into_iter().rev().map(|r| (0, r)).collect();
    while let Some((depth, r)) = stack.pop() {
        order.push((depth, r));
        if let Some(kids) = children.get(r.run.id.as_str()) {
            stack.extend(kids.iter().rev().map(|k| (depth + 1, *k)));
        }
    }
    order
}

/// A prior session and two live ones, with nested trees (a grandchild, a child whose
/// parent is in another session), runs known by name, by type or by a long multi-line
/// objective with wide characters, every status, and token counts in each unit.
async fn rich_workspace() -> (TempDir, Vec<Ledger>) {
    let ws = TempDir::new().unwrap();
    let open = |session: &str| {
        let opts = LedgerOptions {
            session_id: Some(session.into()),
            ..LedgerOptions::default()
        };
        Ledger::open(ws.path(), opts).unwrap()
    };
    let old = open("old");
    let old_root = old
        .create_run(NewRun::new("old work\nwith a second line"))
        .await
        .unwrap();
    old.mark_running(&old_root).await.unwrap();
    old.close().await.unwrap();
    let (a, b) = (open("a"), open("b"));
    let mut last: Option<RunId> = None;
    for (i, ledger) in [&a, &b, &a, &b, &a].into_iter().enumerate() {
        let root = ledger
            .create_run(NewRun {
                name: (i % 2 == 0).then(|| format!("plänner-{i}")),
                role: Some("general".into()),
                ..NewRun::new(format!("{i}: ünïcödé objective\nthat goes on ").repeat(4))
            })
            .await
            .unwrap();
        let child = ledger
            .create_run(NewRun {
                parent_id: Some(root.clone()),
                agent_type: Some("explore".into()),
                role: Some("explore".into()),
                ..NewRun::new("dig")
            })
            .await
            .unwrap();
        let grandchild = ledger
            .create_run(NewRun {
                parent_id: Some(child.clone()),
                ..NewRun::new("short")
            })
            .await
            .unwrap();
        if let Some(other) = last.replace(root.clone()) {
            ledger
                .create_run(NewRun {
                    parent_id: Some(other),
                    name: Some("across".into()),
                    ..NewRun::new("child of a run of the other session")
                })
                .await
                .unwrap();
        }
        ledger.mark_running(&root).await.unwrap();
        ledger.mark_running(&child).await.unwrap();
        let usage = UsageDelta {
            steps: i as u64 * 7,
            input_tokens: [5, 999, 1_499, 999_999, 3_250_000][i],
            output_tokens: [0, 0, 1, 1, 1][i],
            cached_input_tokens: 0,
            cost_usd: None,
        };
        ledger.add_usage(&root, usage).unwrap();
        ledger.complete(&child, json!({"ok": i})).await.unwrap();
        match i {
            1 => ledger.fail(&root, "boom", None).await.unwrap(),
            2 => ledger.cancel(&grandchild, "enough").await.unwrap(),
            _ => {}
        }
        ledger.flush().await.unwrap();
    }
    (ws, vec![a, b])
}

#[tokio::test]
async fn the_table_and_tree_are_those_of_the_full_records() {
    let (ws, live) = rich_workspace().await;
    let reader = Ledger::open_reader(ws.path()).unwrap();
    let now = Utc::now() + chrono::Duration::seconds(3 * 3600 + 5);
    for all in [false, true] {
        let filter = ListFilter {
            include_archived: all,
        };
        let full = reader.list_runs(filter).unwrap();
        let summaries = reader.list_summaries(filter).unwrap();
        assert_eq!(full.len(), if all { 20 } else { 19 });
        for tree in [false, true] {
            let mut out = String::new();
            render_list(&summaries, all, tree, now, &mut out);
            assert_eq!(
                out,
                reference_list(&full, all, tree, now),
                "all {all}, tree {tree}"
            );
        }
    }
    // Some of what the comparison covers, spelled out.
    let mut out = String::new();
    let summaries = reader.list_summaries(ListFilter::default()).unwrap();
    render_list(&summaries, false, true, now, &mut out);
    assert!(out.contains("    └ short"), "{out}");
    assert!(out.contains("3h"), "{out}");
    assert!(out.contains("3.3M") && out.contains("1.5k") && out.contains("999\n"));
    assert!(out.contains("1: ünïcödé objective⏎that goes on 1: ün…"));
    drop(live);
}

#[tokio::test]
async fn the_command_prints_that_table() {
    let (ws, live) = rich_workspace().await;
    let reader = Ledger::open_reader(ws.path()).unwrap();
    for (all, tree) in [(false, false), (true, true)] {
        let full = reader
            .list_runs(ListFilter {
                include_archived: all,
            })
            .unwrap();
        // The command reads the clock itself: its table is the reference as of a
        // moment between these two.
        let before = reference_list(&full, all, tree, Utc::now());
        let (code, out, err) = exec_list(ws.path(), all, tree);
        let after = reference_list(&full, all, tree, Utc::now());
        assert_eq!((code, err.as_str()), (0, ""));
        assert!(out == before || out == after, "{out}\n---\n{before}");
    }
    drop(live);
}

fn exec_list(ws: &Path, all: bool, tree: bool) -> (i32, String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    let cmd = AgentsCmd::List {
        all,
        json: false,
        tree,
    };
    let code = execute(&cmd, ws, &mut out, &mut err);
    (code, out, err)
}
