//! The examples in `crates/brood/examples/` build and do what they say, run as a
//! user runs them (`--workspace --base-url --model --api-key-env`) against brood's
//! own mock server.

use crate::common::report;
use brood_mock::{MockReply, MockRequest, MockServer};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// `target/<profile>/examples/`, with the examples built (once per test binary).
fn examples_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                // `--workspace`: the same feature set as `cargo build/test --workspace` (CI), so
                // this is a no-op there instead of a rebuild of brood with other features.
                .args(["build", "--workspace", "--examples"])
                .status()
                .expect("cargo runs");
            assert!(status.success(), "the examples build");
            // This test is target/<profile>/deps/examples-<hash>.
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().parent().unwrap().join("examples")
        })
        .clone()
}

fn is_child(req: &MockRequest) -> bool {
    req.first_user_text().is_some_and(|t| t.contains("CHILD"))
}

/// Run example `name` on a fresh workspace against `server`, with `stdin`.
fn run_example(name: &str, server: &MockServer, stdin: &str) -> String {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(examples_dir().join(name))
        .args(["--workspace"])
        .arg(ws.path())
        .args(["--base-url", &server.base_url()])
        .args(["--model", "mock-model", "--api-key-env", "MOCK_KEY"])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("MOCK_KEY", "not-a-secret")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A parent that delegates `prompts` with `task`, then answers `answer`; children
/// answer with a report.
fn delegating_server(prompts: Value, answer: &'static str) -> MockServer {
    MockServer::start(move |req| {
        if is_child(req) {
            MockReply::text(report("the workspace holds notes.txt."))
        } else if req.assistant_turns() == 0 {
            MockReply::tool_call("task", json!({"prompts": prompts.clone()}))
        } else {
            MockReply::text(answer)
        }
    })
}

#[test]
fn quickstart_prints_each_childs_summary_and_the_parents_answer() {
    let server = delegating_server(
        json!(["CHILD: list the files", "CHILD: find the manifest"]),
        "A test workspace.",
    );
    let out = run_example("quickstart", &server, "");
    assert_eq!(out.matches("== child ").count(), 2, "{out}");
    assert_eq!(
        out.matches("SUMMARY\n  the workspace holds notes.txt.")
            .count(),
        2,
        "{out}"
    );
    assert!(
        out.contains("== parent ") && out.contains("A test workspace."),
        "{out}"
    );
}

#[test]
fn custom_tool_shows_the_child_calling_the_users_tool() {
    let server = MockServer::start(|req| {
        if is_child(req) {
            match req.assistant_turns() {
                0 => MockReply::tool_call("line_count", json!({"path": "notes.txt"})),
                _ => MockReply::text(report("notes.txt has 2 lines.")),
            }
        } else if req.assistant_turns() == 0 {
            MockReply::tool_call("task", json!({"prompts": ["CHILD: count notes.txt"]}))
        } else {
            MockReply::text("2 lines.")
        }
    });
    let out = run_example("custom_tool", &server, "");
    let call = out
        .lines()
        .find(|l| l.contains("called line_count"))
        .unwrap_or_else(|| panic!("no call of the tool: {out}"));
    assert!(call.starts_with("child "), "a child called it: {call}");
    assert!(out.contains("got (true): notes.txt: 2 lines"), "{out}");
}

#[test]
fn events_prints_the_live_tree_with_spawned_and_completed_children() {
    let server = delegating_server(
        json!(["CHILD: the layout", "CHILD: the tests"]),
        "Layout and tests.",
    );
    let out = run_example("events", &server, "");
    let lines: Vec<&str> = out.lines().collect();
    let spawned = lines.iter().filter(|l| l.starts_with("  spawned ")).count();
    let completed = lines
        .iter()
        .filter(|l| l.starts_with("  completed "))
        .count();
    assert_eq!((spawned, completed), (2, 2), "{out}");
    assert!(
        lines[0].starts_with("spawned parent"),
        "the root first: {out}"
    );
    assert!(out.contains("completed parent"), "{out}");
}

#[test]
fn approver_denies_a_call_and_the_model_reads_the_reason() {
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::tool_call("bash", json!({"command": "find . -name '*.rs' | wc -l"})),
        _ => MockReply::text("could not count"),
    });
    let out = run_example("approver", &server, "n\n");
    assert!(out.contains("wants to run bash"), "asked on stdin: {out}");
    assert!(out.contains("denied bash"), "{out}");
    let second = server
        .captured()
        .into_iter()
        .find(|r| r.assistant_turns() == 1)
        .expect("a second step");
    let tool_result = second
        .messages()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        tool_result.contains("the user denied this call"),
        "the model reads the reason: {tool_result}"
    );
}
