//! Sub-agent runtime, end to end through a session: each role's enforced posture,
//! custom `allowed_tools`, aliases and the unknown-type error.

use crate::common::*;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use serde_json::{json, Value};
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// The three mutations every posture test asks the child to attempt.
fn mutations() -> ScriptStep {
    ScriptStep::tool_calls([
        ("write_file", json!({"path": "new.txt", "content": "x"})),
        (
            "edit_file",
            json!({"path": "keep.txt", "old_string": "original", "new_string": "changed"}),
        ),
        ("bash", json!({"command": "touch touched.txt"})),
    ])
}

fn seed(ws: &Path) {
    std::fs::write(ws.join("keep.txt"), "original\n").unwrap();
}

/// A parent that runs one `task` child of `role` on `prompt`, then says done.
fn parent_script(model: ScriptedModel, role: &str, prompt: &str) -> ScriptedModel {
    model.on(
        "parent:",
        vec![
            ScriptStep::tool_call("task", json!({"prompts": [prompt], "agent_type": role})),
            ScriptStep::text("done"),
        ],
    )
}

/// Run the posture scenario for `role`; returns the child's tool results and the
/// tools its first request offered.
async fn attempt_mutations(ws: &Path, role: &str) -> (Vec<String>, Vec<String>) {
    seed(ws);
    let prompt = format!("{role}-child: try to change files");
    let model = parent_script(
        ScriptedModel::new().on(
            "try to change files",
            vec![mutations(), ScriptStep::text(report("tried"))],
        ),
        role,
        &prompt,
    );
    let probe = Probe::new(model);
    let session = session_with(ws, probe.arc(), None).await;
    let out = session
        .run_with("parent: delegate", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done", "{out:?}");
    let child = probe.requests_for("try to change files");
    assert_eq!(child.len(), 2, "the child makes two steps");
    let results = tool_results(&child[1])
        .into_iter()
        .map(str::to_string)
        .collect();
    let offered = tool_names(&child[0]);
    session.close().await;
    (results, offered)
}

#[tokio::test]
async fn explore_child_cannot_write_edit_or_touch() {
    let ws = workspace("");
    let (results, offered) = attempt_mutations(ws.path(), "explore").await;
    for t in ["write_file", "edit_file"] {
        assert!(
            !offered.contains(&t.to_string()),
            "{t} offered: {offered:?}"
        );
    }
    assert!(offered.contains(&"read_file".to_string()), "{offered:?}");
    assert!(
        !offered.iter().any(|t| t == "task" || t == "agent_open"),
        "explore is a leaf: {offered:?}"
    );
    assert!(
        results[0].starts_with("error:") && results[0].contains("not allowed for explore"),
        "write_file: {}",
        results[0]
    );
    assert!(
        results[1].starts_with("error:") && results[1].contains("not allowed for explore"),
        "edit_file: {}",
        results[1]
    );
    // Without landlock the read-only role has no shell; with it, the sandbox denies
    // the write. Either way the call says so.
    let bash = &results[2];
    assert!(
        bash.contains("not allowed for explore")
            || bash.to_lowercase().contains("permission denied")
            || bash.to_lowercase().contains("read-only"),
        "bash: {bash}"
    );
    assert!(!ws.path().join("new.txt").exists());
    assert!(!ws.path().join("touched.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("keep.txt")).unwrap(),
        "original\n"
    );
}

#[tokio::test]
async fn review_child_has_no_shell_and_no_writes() {
    let ws = workspace("");
    let (results, offered) = attempt_mutations(ws.path(), "review").await;
    for t in ["write_file", "edit_file", "bash"] {
        assert!(
            !offered.contains(&t.to_string()),
            "{t} offered: {offered:?}"
        );
    }
    for (i, r) in results.iter().enumerate() {
        assert!(
            r.starts_with("error:") && r.contains("not allowed for review"),
            "call {i}: {r}"
        );
    }
    assert!(results[2].contains("bash"), "{}", results[2]);
    assert!(!ws.path().join("new.txt").exists());
    assert!(!ws.path().join("touched.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("keep.txt")).unwrap(),
        "original\n"
    );
}

#[tokio::test]
async fn implementer_child_can_write_edit_and_run_the_shell() {
    let ws = workspace("");
    let (results, offered) = attempt_mutations(ws.path(), "implementer").await;
    for t in ["write_file", "edit_file", "bash"] {
        assert!(offered.contains(&t.to_string()), "{t} missing: {offered:?}");
    }
    for (i, r) in results.iter().enumerate() {
        assert!(!r.starts_with("error:"), "call {i} failed: {r}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("new.txt")).unwrap(),
        "x"
    );
    assert!(ws.path().join("touched.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("keep.txt")).unwrap(),
        "changed\n"
    );
}

/// The parent opens children with these `agent_open` argument sets in one step;
/// returns each call's result text and the session's snapshot roles.
async fn open_all(ws: &Path, calls: Vec<Value>) -> (Vec<String>, Probe, Vec<String>) {
    let n = calls.len();
    let mut parent = vec![ScriptStep::tool_calls(
        calls.into_iter().map(|a| ("agent_open", a)),
    )];
    parent.extend((0..=n).map(|_| ScriptStep::text("done")));
    let model = ScriptedModel::new()
        .on("parent:", parent)
        .otherwise(vec![ScriptStep::text(report("child done"))]);
    let probe = Probe::new(model);
    let session = session_with(ws, probe.arc(), None).await;
    let out = session
        .run_with("parent: open children", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done", "{out:?}");
    let parent_reqs = probe.requests_for("parent:");
    let results = tool_results(&parent_reqs[1])
        .into_iter()
        .map(str::to_string)
        .collect();
    let roles = session
        .supervisor()
        .snapshot()
        .into_iter()
        .map(|r| r.role)
        .collect();
    session.close().await;
    (results, probe, roles)
}

#[tokio::test]
async fn custom_allowed_tools_are_checked_against_the_parent_at_spawn() {
    let ws = workspace("");
    let (results, probe, roles) = open_all(
        ws.path(),
        vec![
            // `remember` exists only with memory enabled: this parent lacks it.
            json!({"prompt": "c1", "agent_type": "custom", "allowed_tools": ["read_file", "remember"]}),
            json!({"prompt": "c2", "agent_type": "custom", "allowed_tools": ["read_file", "deploy"]}),
            json!({"prompt": "c3", "agent_type": "custom"}),
            json!({"prompt": "c4: custom reader", "agent_type": "custom", "allowed_tools": ["read_file"]}),
        ],
    )
    .await;
    assert!(
        results[0].starts_with("error:")
            && results[0].contains("'remember'")
            && results[0].contains("parent does not have"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("'deploy'") && results[1].contains("parent does not have"),
        "{}",
        results[1]
    );
    assert!(
        results[2].starts_with("error:") && results[2].contains("allowed_tools"),
        "{}",
        results[2]
    );
    let opened: Value = serde_json::from_str(&results[3]).unwrap();
    assert_eq!(opened["role"], "custom", "{opened}");
    // Only the valid spawn made a run, and it is offered exactly its list.
    assert_eq!(roles, vec!["custom".to_string()]);
    let child = probe.requests_for("c4: custom reader");
    assert_eq!(tool_names(&child[0]), vec!["read_file".to_string()]);
}

#[tokio::test]
async fn aliases_resolve_and_an_unknown_type_lists_every_accepted_name() {
    let ws = workspace("");
    std::fs::create_dir_all(ws.path().join(".brood/agents")).unwrap();
    std::fs::write(
        ws.path().join(".brood/agents/scout.md"),
        "---\nname: scout\ndescription: Looks around.\nrole: explore\n---\nYou look around.\n",
    )
    .unwrap();
    let (results, probe, mut roles) = open_all(
        ws.path(),
        vec![
            json!({"prompt": "a1: alias explorer", "agent_type": "Explorer"}),
            json!({"prompt": "a2: alias review", "type": "code_review"}),
            json!({"prompt": "a3", "agent_type": "wizard"}),
        ],
    )
    .await;
    let a1: Value = serde_json::from_str(&results[0]).unwrap();
    let a2: Value = serde_json::from_str(&results[1]).unwrap();
    assert_eq!(a1["role"], "explore", "{a1}");
    assert_eq!(a2["role"], "review", "{a2}");
    let err = &results[2];
    assert!(err.starts_with("error:") && err.contains("wizard"), "{err}");
    for name in [
        "general",
        "explore",
        "review",
        "implementer",
        "reviewer",
        "scout",
    ] {
        assert!(err.contains(name), "{name} missing from: {err}");
    }
    roles.sort();
    assert_eq!(roles, vec!["explore".to_string(), "review".to_string()]);
    // The alias gets the role's posture, not just its name.
    let explorer = probe.requests_for("a1: alias explorer");
    assert!(!tool_names(&explorer[0]).contains(&"write_file".to_string()));
    let reviewer = probe.requests_for("a2: alias review");
    assert!(!tool_names(&reviewer[0]).contains(&"bash".to_string()));
}

/// A definition file that is not used (it takes a built-in role's name) and a
/// definition whose limits were lowered are kept in the ledger as `warning` events
/// (the session's on its first root run, the child's on its own run), not only
/// printed.
#[tokio::test]
async fn refused_definitions_and_lowered_limits_are_warnings_in_the_ledger() {
    let ws = workspace("[subagents]\nmax_turns = 3\n");
    let agents = ws.path().join(".brood/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("explore.md"),
        "---\nname: explore\ndescription: x\ntools: read_file, write_file\n---\nWrite!\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("greedy.md"),
        "---\nname: greedy\ndescription: Wants more.\nrole: explore\nmax_turns: 500\n---\nLook.\n",
    )
    .unwrap();
    let model = parent_script(
        ScriptedModel::new().on("greedy-child", vec![ScriptStep::text(report("ok"))]),
        "greedy",
        "greedy-child: look",
    );
    let probe = Probe::new(model);
    let session = session_with(ws.path(), probe.arc(), None).await;
    let out = session
        .run_with("parent: delegate", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.final_text, "done", "{out:?}");
    flushed(&session).await;
    let warnings = |events: &[brood::ledger::EventRecord]| -> Vec<Value> {
        events
            .iter()
            .filter(|e| e.kind == brood::ledger::EventKind::Warning)
            .map(|e| e.payload.clone())
            .collect()
    };

    let root = run_detail(&session, &out.run_id).await;
    let root_warnings = warnings(&root.events);
    assert_eq!(root_warnings.len(), 1, "{root_warnings:?}");
    let refused = root_warnings[0]["definitions"].to_string();
    assert!(
        refused.contains("explore.md") && refused.contains("built-in role explore"),
        "{refused}"
    );

    let parent_requests = probe.requests_for("parent: delegate");
    let task = last_tool_json(parent_requests.last().unwrap());
    let child_id = task["results"][0]["agent_id"].as_str().unwrap().to_string();
    let child = run_detail(&session, &child_id).await;
    let child_warnings = warnings(&child.events);
    assert_eq!(child_warnings.len(), 1, "{:?}", child.events);
    let spawn = child_warnings[0]["spawn"].to_string();
    assert!(
        spawn.contains("max_turns = 500")
            && spawn.contains("greedy.md")
            && spawn.contains("lowered to 3"),
        "{spawn}"
    );
    // A second run of the session does not repeat the session's warning.
    let again = session
        .run_with("parent: delegate", None, CancellationToken::new())
        .await
        .unwrap();
    flushed(&session).await;
    let second = run_detail(&session, &again.run_id).await;
    assert!(warnings(&second.events).is_empty(), "{:?}", second.events);
    session.close().await;
}
