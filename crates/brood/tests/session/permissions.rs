//! Permission rules at the one decision point every tool call goes through: every
//! built-in tool, `task` and an MCP-style tool, for the parent and for a child; an
//! `ask` reaching the approver naming the agent and the rule; an agent file's rules
//! narrowing only its own runs; rules added and removed for the session.

use crate::common::report;
use async_trait::async_trait;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::tool::RuleKind;
use brood::{Capability, Session, Tool, ToolContext, ToolError};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// A step that keeps the tool results the model was shown, then answers `text`.
fn remember_tool_results(seen: Arc<Mutex<Vec<String>>>, text: String) -> ScriptStep {
    ScriptStep::func(move |req| {
        let mut seen = seen.lock().unwrap();
        seen.clear();
        seen.extend(
            req.messages
                .iter()
                .filter(|m| m.role == brood::model::Role::Tool)
                .map(|m| m.content.clone()),
        );
        Ok(brood::ModelResponse {
            message: brood::model::Message::assistant(text.clone()),
            usage: None,
            finish_reason: brood::model::FinishReason::Stop,
        })
    })
}

/// An MCP server's tool, as an embedder (or MCP client support) names it.
struct McpIssue;

#[async_trait]
impl Tool for McpIssue {
    fn name(&self) -> &str {
        "mcp__github__create_issue"
    }
    fn description(&self) -> &str {
        "Opens an issue."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"title": {"type": "string"}}})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok("issue opened".into())
    }
}

/// One call of each tool, each forbidden by its own rule below, and a control.
fn forbidden_calls() -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"path": "secret/key.txt"})),
        ("list_dir", json!({"path": "./secret"})),
        ("find_files", json!({"pattern": "*.txt", "path": "secret"})),
        ("grep", json!({"pattern": "hunter2"})),
        ("write_file", json!({"path": "src/new.rs", "content": "x"})),
        (
            "edit_file",
            json!({"path": "deps/Cargo.lock", "old_string": "v1", "new_string": "v2"}),
        ),
        ("bash", json!({"command": "  env A=1 sh -c 'touch pwned'"})),
        ("todo_write", json!({"items": []})),
        ("todo_read", json!({})),
        ("mcp__github__create_issue", json!({"title": "x"})),
        (
            "task",
            json!({"agent_type": "implementer", "description": "change it"}),
        ),
        ("read_file", json!({"path": "notes.txt"})),
    ]
}

const DENY_ALL: &str = r#"
[permissions]
deny = [
  "list_dir(secret/**)", "find_files(secret/**)", "grep(secret/**)",
  "write_file(src/**)", "edit_file(*.lock)", "bash(touch:*)", "todo_write", "todo_read",
  "mcp__github__*", "task(implementer)",
  # Last: it governs list_dir, find_files and grep too, and the first match names its rule.
  "read_file(secret/**)",
]
"#;

/// Every result but the control's names its rule; nothing forbidden happened.
fn assert_all_refused(who: &str, seen: &[String], ws: &std::path::Path) {
    let rules = [
        "read_file(secret/**)",
        "list_dir(secret/**)",
        "find_files(secret/**)",
        "grep(secret/**)",
        "write_file(src/**)",
        "edit_file(*.lock)",
        "bash(touch:*)",
        "todo_write",
        "todo_read",
        "mcp__github__*",
        "task(implementer)",
    ];
    assert_eq!(seen.len(), rules.len() + 1, "{who}: {seen:#?}");
    for (result, rule) in seen.iter().zip(rules) {
        assert!(
            result.contains("forbids") && result.contains(&format!("{rule:?}")),
            "{who}: the result names the deny rule {rule}: {result}"
        );
    }
    assert!(
        seen[rules.len()].contains("alpha"),
        "{who}: the control read ran: {seen:?}"
    );
    assert!(!ws.join("pwned").exists() && !ws.join("src/new.rs").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("deps/Cargo.lock")).unwrap(),
        "v1"
    );
}

fn workspace_with_secrets(config: &str) -> tempfile::TempDir {
    let ws = crate::common::workspace(config);
    std::fs::create_dir_all(ws.path().join("secret")).unwrap();
    std::fs::create_dir_all(ws.path().join("deps")).unwrap();
    std::fs::write(ws.path().join("secret/key.txt"), "hunter2").unwrap();
    std::fs::write(ws.path().join("deps/Cargo.lock"), "v1").unwrap();
    std::fs::write(ws.path().join("notes.txt"), "alpha").unwrap();
    ws
}

#[tokio::test]
async fn deny_rules_hold_for_every_builtin_tool_task_and_an_mcp_tool_in_parent_and_child() {
    let ws = workspace_with_secrets(DENY_ALL);
    let parent_seen = Arc::new(Mutex::new(Vec::new()));
    let child_seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .on(
            "CHILD",
            vec![
                ScriptStep::tool_calls(forbidden_calls()),
                remember_tool_results(child_seen.clone(), report("all refused")),
            ],
        )
        .otherwise(vec![
            ScriptStep::tool_calls(forbidden_calls()),
            ScriptStep::tool_call("task", json!({"prompts": ["CHILD: try everything"]})),
            remember_tool_results(parent_seen.clone(), "done".into()),
        ]);
    let session = Session::builder(ws.path())
        .config(crate::common::load_config(ws.path(), &Default::default()))
        .model(model)
        .tool(McpIssue)
        .build()
        .await
        .unwrap();
    let r = session.ask("PARENT: try everything").await.unwrap();
    assert!(r.succeeded(), "{r:?}");
    let parent: Vec<String> = parent_seen.lock().unwrap().clone();
    // The parent's last step saw its own 12 results and the task's.
    assert_all_refused("parent", &parent[..12], ws.path());
    assert_all_refused("child", &child_seen.lock().unwrap(), ws.path());
    session.close().await;
}

/// A `read_file(...)` rule also governs `grep`, `find_files` and `list_dir` on the
/// same paths (a search from above them reaches them too); a search elsewhere runs.
#[tokio::test]
async fn a_read_file_rule_governs_grep_find_files_and_list_dir() {
    let ws = workspace_with_secrets("[permissions]\ndeny = [\"read_file(secret/**)\"]\n");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new().otherwise(vec![
        ScriptStep::tool_calls(vec![
            ("grep", json!({"pattern": "hunter2", "path": "secret"})),
            ("grep", json!({"pattern": "hunter2"})),
            ("find_files", json!({"pattern": "*.txt", "path": "secret"})),
            ("list_dir", json!({"path": "secret"})),
            ("grep", json!({"pattern": "alpha", "path": "notes.txt"})),
        ]),
        remember_tool_results(seen.clone(), "done".into()),
    ]);
    let session = Session::builder(ws.path())
        .config(crate::common::load_config(ws.path(), &Default::default()))
        .model(model)
        .build()
        .await
        .unwrap();
    let r = session.ask("search").await.unwrap();
    assert!(r.succeeded(), "{r:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "{seen:#?}");
    for result in &seen[..4] {
        assert!(
            result.contains("forbids") && result.contains("read_file(secret/**)"),
            "refused by the read rule: {result}"
        );
        assert!(!result.contains("hunter2") || result.contains("forbids"));
    }
    assert!(
        seen[4].contains("alpha"),
        "the search elsewhere ran: {}",
        seen[4]
    );
    session.close().await;
}

/// Answers from a list and keeps every request it was asked.
struct Scripted {
    asked: Arc<Mutex<Vec<brood::ApprovalRequest>>>,
    answers: Mutex<Vec<brood::Approval>>,
}

#[async_trait]
impl brood::Approver for Scripted {
    async fn approve(&self, request: &brood::ApprovalRequest) -> brood::Approval {
        self.asked.lock().unwrap().push(request.clone());
        self.answers.lock().unwrap().remove(0)
    }
}

#[tokio::test]
async fn an_ask_rule_reaches_the_approver_naming_agent_and_rule_and_each_answer_holds() {
    let ws = workspace_with_secrets("[permissions]\nask = [\"bash(touch:*)\"]\n");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .on(
            "CHILD",
            vec![
                // Asked: allowed once.
                ScriptStep::tool_call("bash", json!({"command": "touch once"})),
                // Asked again (once is once): denied with a reason.
                ScriptStep::tool_call("bash", json!({"command": "bash -c 'touch twice'"})),
                // Asked: allowed for the session.
                ScriptStep::tool_call("bash", json!({"command": "touch three"})),
                // Not asked again: the same rule was allowed for the session.
                ScriptStep::tool_call("bash", json!({"command": "touch four"})),
                // No rule matches: not asked.
                ScriptStep::tool_call("bash", json!({"command": "echo hi"})),
                remember_tool_results(seen.clone(), report("done")),
            ],
        )
        .otherwise(vec![
            ScriptStep::tool_call("task", json!({"prompts": ["CHILD: touch things"]})),
            ScriptStep::text("done"),
        ]);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let session = Session::builder(ws.path())
        .config(crate::common::load_config(ws.path(), &Default::default()))
        .model(model)
        .approver(Scripted {
            asked: asked.clone(),
            answers: Mutex::new(vec![
                brood::Approval::AllowOnce,
                brood::Approval::Deny {
                    reason: "not twice, says the user".into(),
                },
                brood::Approval::AllowForSession,
            ]),
        })
        .build()
        .await
        .unwrap();
    let r = session.ask("PARENT: delegate").await.unwrap();
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3, "{asked:#?}");
    for q in &asked {
        assert_ne!(q.run_id, r.run_id, "the child asks");
        assert_eq!(q.lineage, vec![r.run_id.clone()]);
        assert_eq!(q.tool, "bash");
        let (rule, source) = q.rule.clone().expect("the asking rule is named");
        assert_eq!(rule, "bash(touch:*)");
        assert!(source.ends_with("config.toml"), "{source}");
    }
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|s| s.contains("not twice, says the user")),
        "the denial's reason reaches the model: {seen:?}"
    );
    for (file, ran) in [
        ("once", true),
        ("twice", false),
        ("three", true),
        ("four", true),
    ] {
        assert_eq!(ws.path().join(file).exists(), ran, "{file}");
    }
    session.close().await;
}

#[tokio::test]
async fn an_agent_files_rules_narrow_its_own_runs_and_its_allow_is_ignored() {
    let ws = workspace_with_secrets("");
    std::fs::create_dir_all(ws.path().join(".brood/agents")).unwrap();
    std::fs::write(
        ws.path().join(".brood/agents/careful.md"),
        "---\ndescription: Careful.\npermissions:\n  deny: [\"bash(touch:*)\"]\n  allow: [\"bash\"]\n---\nBe careful.\n",
    )
    .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .on(
            "CHILD",
            vec![
                ScriptStep::tool_call("bash", json!({"command": "touch by-child"})),
                remember_tool_results(seen.clone(), report("refused")),
            ],
        )
        .otherwise(vec![
            ScriptStep::tool_call("bash", json!({"command": "touch by-parent"})),
            ScriptStep::tool_call(
                "task",
                json!({"prompts": ["CHILD: touch"], "agent_type": "careful"}),
            ),
            ScriptStep::text("done"),
        ]);
    let session = Session::builder(ws.path())
        .config(crate::common::load_config(ws.path(), &Default::default()))
        .model(model)
        .build()
        .await
        .unwrap();
    session.ask("PARENT: go").await.unwrap();
    assert!(
        ws.path().join("by-parent").exists(),
        "the parent is not narrowed"
    );
    assert!(!ws.path().join("by-child").exists(), "the careful child is");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|s| s.contains("bash(touch:*)") && s.contains("careful.md")),
        "{seen:?}"
    );
    session.close().await;
}

#[tokio::test]
async fn rules_added_and_removed_for_the_session_apply_from_the_next_call() {
    let ws = workspace_with_secrets("");
    let model = ScriptedModel::new()
        .on(
            "first",
            vec![
                ScriptStep::tool_call("bash", json!({"command": "touch a"})),
                ScriptStep::text("one"),
            ],
        )
        .on(
            "second",
            vec![
                ScriptStep::tool_call("bash", json!({"command": "touch b"})),
                ScriptStep::text("two"),
            ],
        );
    let session = Session::builder(ws.path())
        .config(crate::common::load_config(ws.path(), &Default::default()))
        .model(model)
        .build()
        .await
        .unwrap();
    session.add_rule(RuleKind::Deny, "bash(touch:*)").unwrap();
    assert!(session.add_rule(RuleKind::Deny, "bash(").is_err());
    assert_eq!(session.rules().rules().len(), 1);
    assert_eq!(session.rules().rules()[0].source, "this session");
    session.ask("PARENT: first").await.unwrap();
    assert!(!ws.path().join("a").exists());
    assert_eq!(session.remove_rule("bash(touch:*)"), 1);
    session.ask("PARENT: second").await.unwrap();
    assert!(ws.path().join("b").exists());
    session.close().await;
}

#[test]
fn a_malformed_rule_is_a_config_error_naming_file_and_rule_and_a_workspace_allow_is_ignored() {
    let ws = crate::common::workspace("[permissions]\ndeny = [\"Bash(rm:*)\"]\n");
    let err = brood::runtime::config::Config::load(
        &brood::runtime::config::ConfigPaths {
            user_dir: None,
            workspace: ws.path().to_path_buf(),
        },
        &Default::default(),
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(".brood/config.toml")
            && err.contains("Bash(rm:*)")
            && err.contains("bash(rm:*)"),
        "{err}"
    );
    let ws =
        crate::common::workspace("[permissions]\nallow = [\"bash\"]\ndeny = [\"bash(rm:*)\"]\n");
    let config = crate::common::load_config(ws.path(), &Default::default());
    let kinds: Vec<RuleKind> = config.permissions.rules().iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [RuleKind::Deny]);
    assert!(
        config
            .permission_notes
            .iter()
            .any(|n| n.contains("allow ignored")),
        "{:?}",
        config.permission_notes
    );
}
