//! Cost you can see and cap (issue 19), through the `brood` binary against
//! brood-mock: budgets that hold, prices, what the parent's requests name, request
//! sizes per role, the status line.

use brood_mock::{Answer, MockRequest, MockServer};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

struct Fixture {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

fn fixture(user_config: &str) -> Fixture {
    let f = Fixture {
        home: tempfile::tempdir().unwrap(),
        ws: tempfile::tempdir().unwrap(),
    };
    std::fs::write(f.ws.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), user_config).unwrap();
    f
}

/// The brood binary in `ws` with only `HOME` and `PATH` set.
fn brood_cmd(home: &Path, ws: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_brood"));
    cmd.current_dir(ws)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd
}

/// `brood run --provider local --base-url <server> --model m ARGS…`.
fn run_local(f: &Fixture, server: &MockServer, args: &[&str]) -> Output {
    brood_cmd(f.home.path(), f.ws.path())
        .args(["run", "--provider", "local", "--base-url"])
        .arg(server.base_url())
        .args(["--model", "m"])
        .args(args)
        .output()
        .expect("run brood")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn is_child(req: &MockRequest) -> bool {
    req.first_user_text()
        .is_some_and(|t| t.starts_with("child "))
}

/// The JSON of the last tool result in a request.
fn last_tool_result(req: &Value) -> Value {
    let msgs = req["messages"].as_array().unwrap();
    let tool = msgs.iter().rev().find(|m| m["role"] == "tool").unwrap();
    serde_json::from_str(tool["content"].as_str().unwrap()).unwrap()
}

/// The reproduction: one slot, a 60-token tree budget, ten `task`
/// children, 15 tokens an answer. Once the budget is spent no child starts (each
/// is recorded cancelled naming the budget), the running one makes no repair
/// request past it, and the parent's tool result names the budget.
#[test]
fn a_tree_token_budget_holds_with_ten_children() {
    let f = fixture("[subagents]\nmax_concurrent = 1\ntree_token_budget = 60\n");
    let server = MockServer::start(|req| {
        let answer = if is_child(req) {
            // Missing sections: a child under budget would be asked to repair.
            Answer::text("SUMMARY: looked")
        } else if req.assistant_turns() == 0 {
            let prompts: Vec<String> = (0..10).map(|i| format!("child {i}")).collect();
            Answer::new().tool_call("task", json!({ "prompts": prompts }))
        } else {
            Answer::text("parent done")
        };
        answer
            .usage(json!({"prompt_tokens": 10, "completion_tokens": 5}))
            .into()
    });
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let reqs = server.requests();
    // Parent 1 + children until 60 tokens + the parent's one final report.
    assert!(
        reqs.len() <= 6,
        "the model got {} requests for a 60-token budget",
        reqs.len()
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["usage"]["requests"], reqs.len() as u64);
    // The parent's last request carries the task result.
    let last_parent = reqs
        .iter()
        .rev()
        .find(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "tool")
        })
        .expect("the parent saw its task result");
    let task = last_tool_result(last_parent);
    assert!(
        task["budget"]
            .as_str()
            .is_some_and(|b| b.contains("tree_token_budget = 60")),
        "{task}"
    );
    let results = task["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    let cancelled: Vec<&Value> = results
        .iter()
        .filter(|r| r["status"] == "cancelled")
        .collect();
    assert!(cancelled.len() >= 7, "{task}");
    for r in &cancelled {
        assert!(
            r["result"]
                .as_str()
                .is_some_and(|t| t.contains("tree_token_budget = 60")),
            "{r}"
        );
    }
    // The ledger says the same: the cancelled children never made a request.
    let list = brood_cmd(f.home.path(), f.ws.path())
        .args(["agents", "list", "--json"])
        .output()
        .unwrap();
    let (listed, err) = text(&list);
    assert_eq!(list.status.code(), Some(0), "{err}");
    let runs: Value = serde_json::from_str(listed.trim()).unwrap();
    let runs = runs.as_array().or(runs["runs"].as_array()).unwrap().clone();
    let n_cancelled = runs.iter().filter(|r| r["status"] == "cancelled").count();
    assert_eq!(n_cancelled, cancelled.len(), "{runs:?}");
}
