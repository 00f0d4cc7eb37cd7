//! `brood agents resume ID` end to end: a brood killed outright (SIGKILL) while a
//! child waits on its model leaves that child `interrupted`; a later brood resumes
//! it under the same id and lineage, from its recorded transcript, with its limits
//! counting what it spent; a run recorded in another directory is refused.

use brood_mock::{Answer, MockReply, MockServer};
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{command, local_flags, text, wait_for_requests, Fixture};

pub(super) const TASK: &str = "read notes.txt and report its second line";
/// A report that satisfies the output contract (no repair step).
pub(super) const REPORT: &str =
    "SUMMARY: the second line is beta\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none";

/// A workspace with `notes.txt` (`alpha`, `beta`) and an empty home.
pub(super) fn fixture() -> Fixture {
    Fixture::with_notes("alpha\nbeta\n")
}

/// `brood ARGS…` in `f` with stdin closed: exit code (-1 for a signal), stdout, stderr.
pub(super) fn brood(f: &Fixture, args: &[&str]) -> (i32, String, String) {
    let out = f
        .command()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run brood");
    let (stdout, stderr) = text(&out);
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

pub(super) fn with<'a>(head: &[&'a str], tail: &'a [String]) -> Vec<&'a str> {
    head.iter()
        .copied()
        .chain(tail.iter().map(String::as_str))
        .collect()
}

pub(super) fn usage(total: u64) -> Value {
    json!({"prompt_tokens": total - 10, "completion_tokens": 10, "total_tokens": total})
}

/// The parent delegates one `task`; the child reads notes.txt (100 tokens), then
/// its second request hangs until `resumed` is set — by then the first brood is
/// dead, and the answer goes to the resumed child. With `tool_again`, the resumed
/// child's first answer is one more tool call (100 tokens) and the next its report.
fn server(resumed: Arc<AtomicBool>, tool_again: bool) -> MockServer {
    server_with(
        resumed,
        json!({"description": TASK, "agent_type": "general"}),
        tool_again.then(|| ("list_dir", json!({}))),
    )
}

/// As [`server`], the parent's first call `task_args` (a `task`'s, or with a
/// `prompt` an `agent_open`'s), and the resumed child's first answer the tool call
/// `after_resume` (if any).
pub(super) fn server_with(
    resumed: Arc<AtomicBool>,
    task_args: Value,
    after_resume: Option<(&'static str, Value)>,
) -> MockServer {
    MockServer::start(move |req| {
        if is_the_child(req) {
            return match (req.assistant_turns(), &after_resume) {
                (0, _) => Answer::new()
                    .tool_call("read_file", json!({"path": "notes.txt"}))
                    .usage(usage(100))
                    .into(),
                (1, _) if !resumed.load(Ordering::SeqCst) => MockReply::Hang,
                (1, Some((tool, args))) => Answer::new()
                    .tool_call(*tool, args.clone())
                    .usage(usage(100))
                    .into(),
                _ => Answer::text(REPORT).usage(usage(50)).into(),
            };
        }
        let last = req.last_message().cloned().unwrap_or_default();
        if last["content"] == "what did we do?" {
            let saw = req.messages().iter().any(|m| m["content"] == "delegate");
            return MockReply::text(if saw { "remembered" } else { "forgot" });
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call(
                if task_args.get("prompt").is_some() {
                    "agent_open"
                } else {
                    "task"
                },
                task_args.clone(),
            ),
            _ => MockReply::text("parent done"),
        }
    })
}

/// A request of the child: its task first, or (a fork) the fork's tail after
/// the parent's conversation.
pub(super) fn is_the_child(req: &brood_mock::MockRequest) -> bool {
    req.first_user_text() == Some(TASK)
        || req.messages().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("--- fork:") && c.contains(TASK))
        })
}

/// The names of the tools a request offers, sorted.
fn offered(req: &brood_mock::MockRequest) -> Vec<String> {
    let mut names: Vec<String> = req.body()["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Start `brood run`, wait until the child's second request is at the mock, SIGKILL
/// brood. Returns the child's run id (from the ledger).
pub(super) fn run_and_kill(f: &Fixture, server: &MockServer) -> (String, String) {
    run_and_kill_after(f, server, 3)
}

/// As [`run_and_kill`], once the mock has `requests` requests.
fn run_and_kill_after(f: &Fixture, server: &MockServer, requests: usize) -> (String, String) {
    let p = local_flags(server);
    let mut child = f
        .command()
        .args(["run", "--json"])
        .args(&p)
        .arg("delegate")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn brood");
    // The parent's step, the child's two steps (and for `agent_open` the parent's
    // second): the child waits on its model.
    wait_for_requests(server, requests);
    let waiting = server
        .captured()
        .iter()
        .any(|r| is_the_child(r) && r.assistant_turns() == 1);
    assert!(waiting, "the child's second request is at the mock");
    // Its first step's record (usage, tool call and result) is progress, committed
    // a moment after the next request went out: kill once it is on disk.
    wait_until_recorded(f);
    child.kill().expect("SIGKILL brood");
    child.wait().expect("reap brood");
    let runs = f.runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let kid = runs.iter().find(|r| !r["parent_id"].is_null()).unwrap();
    assert_eq!(kid["status"], "interrupted", "{kid}");
    (
        kid["id"].as_str().unwrap().to_string(),
        kid["parent_id"].as_str().unwrap().to_string(),
    )
}

/// Poll the ledger (a condition, with a deadline) until the child's first step is
/// committed: its 100 tokens and three transcript messages (task, call, result).
pub(super) fn wait_until_recorded(f: &Fixture) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, out, _) = brood(f, &["agents", "list", "--json"]);
        let runs: Vec<Value> = serde_json::from_str(&out).unwrap_or_default();
        let kid = runs.iter().find(|r| !r["parent_id"].is_null());
        if let Some(kid) = kid {
            let tokens = kid["input_tokens"].as_u64().unwrap_or(0)
                + kid["output_tokens"].as_u64().unwrap_or(0);
            let id = kid["id"].as_str().unwrap_or_default();
            let (_, out, _) = brood(f, &["agents", "transcript", id, "--json"]);
            let slice: Value = serde_json::from_str(&out).unwrap_or_default();
            if tokens == 100 && slice["total"].as_u64() >= Some(3) {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child's first step was never recorded"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub(super) fn show(f: &Fixture, id: &str) -> Value {
    let (code, out, err) = brood(f, &["agents", "show", id, "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn a_child_killed_while_it_waits_on_its_model_resumes_under_its_id() {
    let f = fixture();
    let resumed = Arc::new(AtomicBool::new(false));
    let server = server(resumed.clone(), false);
    let (kid, parent) = run_and_kill(&f, &server);
    let before = server.request_count();

    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let short = &kid[..12];
    let (code, out, err) = brood(&f, &with(&["agents", "resume", short, "--json"], &p));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let report: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("stdout must be the JSON report ({e}): {out}"));
    assert_eq!(report["run_id"], kid.as_str(), "{report}");
    assert!(
        report["final"].as_str().unwrap().contains("beta"),
        "{report}"
    );
    // Its earlier step counts: two steps in all.
    assert_eq!(report["turns"], 2, "{report}");

    // The resumed request carries the earlier transcript: the task, the tool call
    // and its result (the file's text), under the same system prompt.
    let captured = server.captured();
    assert_eq!(
        captured.len(),
        before + 1,
        "one request for the resumed child"
    );
    let resumed_req = captured.last().unwrap();
    assert_eq!(resumed_req.first_user_text(), Some(TASK));
    assert_eq!(resumed_req.assistant_turns(), 1);
    let messages = resumed_req.messages();
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result in {messages:?}"));
    assert!(tool["content"].as_str().unwrap().contains("beta"), "{tool}");
    let killed_req = &captured[before - 1];
    assert_eq!(
        killed_req.messages(),
        messages,
        "the resumed request repeats the interrupted one"
    );
    // Not narrowed when it was opened: it keeps its role's full grant.
    assert_eq!(offered(resumed_req), offered(killed_req));
    assert!(
        offered(resumed_req).contains(&"write_file".to_string()),
        "{:?}",
        offered(resumed_req)
    );

    // One lineage: the same two runs, the child completed under its parent, its
    // log one history (spawned … interrupted, resumed … completed).
    let runs = f.runs();
    assert_eq!(runs.len(), 2, "no new run: {runs:?}");
    let shown = show(&f, &kid);
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["parent_id"], parent.as_str(), "{shown}");
    assert_eq!(shown["root_id"], parent.as_str(), "{shown}");
    let kinds: Vec<&str> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap_or(usize::MAX);
    assert_eq!(
        kinds.iter().filter(|k| **k == "spawned").count(),
        1,
        "{kinds:?}"
    );
    assert!(at("spawned") < at("interrupted"), "{kinds:?}");
    assert!(at("interrupted") < at("resumed"), "{kinds:?}");
    assert!(at("resumed") < at("completed"), "{kinds:?}");
    let ev = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "resumed")
        .unwrap();
    assert_eq!(ev["payload"]["from"], "interrupted", "{ev}");
    // Its tokens: the 100 before and the 50 after.
    assert_eq!(
        shown["input_tokens"].as_u64().unwrap() + shown["output_tokens"].as_u64().unwrap(),
        150,
        "{shown}"
    );
    // The text view names the resumption too.
    let (code, out, err) = brood(&f, &["agents", "show", &kid]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("resumed"), "{out}");

    // Completed: resuming it again is refused, saying why.
    let (code, _, err) = brood(&f, &with(&["agents", "resume", &kid], &p));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot be resumed") && err.contains("completed"),
        "{err}"
    );
}

/// A child whose recorded tool result was spilled (over the transcript cap) and
/// whose spill file is gone — deleted, or on another machine — still resumes: from
/// the result's capped text, under its id, instead of failing on the missing file.
#[test]
fn a_child_whose_spill_file_is_gone_resumes_from_the_capped_text() {
    // alpha, beta, then ~100 KB: the read's result is over the 64 KiB cap.
    let filler: String = (0..100)
        .map(|i| format!("{i:04}{}\n", "x".repeat(1000)))
        .collect();
    let f = Fixture::with_notes(&format!("alpha\nbeta\n{filler}"));
    let resumed = Arc::new(AtomicBool::new(false));
    let server = server(resumed.clone(), false);
    let (kid, _) = run_and_kill(&f, &server);
    let spill = f.ws.path().join(".brood/state/spill");
    let files: Vec<_> = std::fs::read_dir(&spill)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(!files.is_empty(), "the read's result was spilled");
    for file in &files {
        std::fs::remove_file(file).unwrap();
    }
    let before = server.request_count();

    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let (code, out, err) = brood(&f, &with(&["agents", "resume", &kid, "--json"], &p));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["run_id"], kid.as_str(), "{report}");
    let captured = server.captured();
    assert_eq!(
        captured.len(),
        before + 1,
        "one request for the resumed child"
    );
    let messages = captured.last().unwrap().messages();
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result in {messages:?}"));
    let content = tool["content"].as_str().unwrap();
    assert!(
        content.contains("beta"),
        "the capped text's start: {content:.200}"
    );
    assert!(
        content.len() < 90 * 1024,
        "the capped text, not the whole file: {} bytes",
        content.len()
    );
    assert_eq!(show(&f, &kid)["status"], "completed");
}

/// A child opened by `agent_open` with `allowed_tools` (no `write_file`) resumes with exactly
/// those tools — the grant recorded at its spawn, not its role's full one — and a
/// `write_file` its model asks for after the resume is refused.
#[test]
fn a_child_narrowed_by_allowed_tools_resumes_with_no_more_than_it_had() {
    let f = fixture();
    let resumed = Arc::new(AtomicBool::new(false));
    let narrowed = ["read_file", "list_dir", "grep"];
    let server = server_with(
        resumed.clone(),
        json!({"prompt": TASK, "agent_type": "general", "allowed_tools": narrowed}),
        Some((
            "write_file",
            json!({"path": "pwned.txt", "content": "written after the resume"}),
        )),
    );
    let (kid, _) = run_and_kill_after(&f, &server, 4);
    let before = server.request_count();
    let killed_req = server
        .captured()
        .into_iter()
        .rfind(|r| r.first_user_text() == Some(TASK))
        .unwrap();
    let mut expected: Vec<String> = narrowed.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(offered(&killed_req), expected, "the grant it ran with");

    // The spawn record keeps the tools it was granted.
    let shown = show(&f, &kid);
    let spawned = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "spawned")
        .unwrap();
    assert_eq!(
        spawned["payload"]["grant"]["tools"],
        json!(expected),
        "{spawned}"
    );

    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let (code, out, err) = brood(&f, &with(&["agents", "resume", &kid, "--json"], &p));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let captured = server.captured();
    assert_eq!(
        captured.len(),
        before + 2,
        "the resumed step, then the report"
    );
    assert_eq!(
        offered(&captured[before]),
        expected,
        "the resumed child's first request offers exactly the original tools"
    );
    // The write_file its model asked for was refused, and nothing was written.
    let result = captured[before + 1]
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_default();
    let text = result["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("write_file") && text.contains("not allowed"),
        "the call must be refused: {result}"
    );
    assert!(!f.ws.path().join("pwned.txt").exists());
    assert_eq!(show(&f, &kid)["status"], "completed");
}

/// The permission rules a child ran under stay with it: a `deny` in the workspace
/// config when it ran still refuses its call after the rule was removed from the
/// config and the child resumed.
#[test]
fn a_resumed_child_keeps_the_deny_rules_it_ran_under() {
    let f = fixture();
    f.write(
        ".brood/config.toml",
        "[permissions]\ndeny = [\"write_file(pwned.txt)\"]\n",
    );
    let resumed = Arc::new(AtomicBool::new(false));
    let server = server_with(
        resumed.clone(),
        json!({"description": TASK, "agent_type": "general"}),
        Some((
            "write_file",
            json!({"path": "pwned.txt", "content": "written after the resume"}),
        )),
    );
    let (kid, _) = run_and_kill(&f, &server);
    let before = server.request_count();
    std::fs::remove_file(f.ws.path().join(".brood/config.toml")).unwrap();
    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let (code, out, err) = brood(&f, &with(&["agents", "resume", &kid, "--json"], &p));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let captured = server.captured();
    assert_eq!(
        captured.len(),
        before + 2,
        "the resumed step, then the report"
    );
    let result = captured[before + 1]
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_default();
    let text = result["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("write_file(pwned.txt)") && text.contains("recorded when it ran"),
        "the recorded deny must refuse it: {result}"
    );
    assert!(!f.ws.path().join("pwned.txt").exists());
}

/// `brood agents resume --allow RULE` lets through a call an `ask` rule stops, as
/// `brood run --allow` does.
#[test]
fn agents_resume_takes_allow_for_ask_rules() {
    let f = fixture();
    f.write(
        ".brood/config.toml",
        "[permissions]\nask = [\"write_file(out.txt)\"]\n",
    );
    let resumed = Arc::new(AtomicBool::new(false));
    let server = server_with(
        resumed.clone(),
        json!({"description": TASK, "agent_type": "general"}),
        Some((
            "write_file",
            json!({"path": "out.txt", "content": "approved"}),
        )),
    );
    let (kid, _) = run_and_kill(&f, &server);
    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let (code, out, err) = brood(
        &f,
        &with(
            &[
                "agents",
                "resume",
                &kid,
                "--allow",
                "write_file(out.txt)",
                "--json",
            ],
            &p,
        ),
    );
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let written = std::fs::read_to_string(f.ws.path().join("out.txt")).unwrap_or_default();
    assert_eq!(written, "approved", "the --allow let the asked call run");
}

/// A run recorded without its grant (by a brood from before grants were recorded)
/// is refused, saying why and what to do, and nothing is written.
#[test]
fn a_run_recorded_without_its_grant_is_not_resumed() {
    use brood::ledger::{Ledger, LedgerOptions, NewRun};
    let f = fixture();
    let kid = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ws = std::fs::canonicalize(f.ws.path()).unwrap();
            let ledger = Ledger::open(&ws, LedgerOptions::default()).unwrap();
            let root = ledger.create_run(NewRun::new("delegate")).await.unwrap();
            let kid = ledger
                .create_run(NewRun {
                    parent_id: Some(root.clone()),
                    role: Some("general".into()),
                    agent_type: Some("general".into()),
                    ..NewRun::new(TASK)
                })
                .await
                .unwrap();
            ledger.mark_running(&kid).await.unwrap();
            ledger.interrupt(&kid, "process exited").await.unwrap();
            kid.to_string()
        })
    };
    let server = server(Arc::new(AtomicBool::new(true)), false);
    let p = local_flags(&server);
    let (code, _, err) = brood(&f, &with(&["agents", "resume", &kid], &p));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("did not record which tools it was granted")
            && err.contains("start a new run"),
        "{err}"
    );
    assert_eq!(server.request_count(), 0, "nothing was asked of the model");
    let shown = show(&f, &kid);
    assert_eq!(shown["status"], "interrupted", "{shown}");
}

#[test]
fn a_resumed_child_counts_the_tokens_it_spent_against_its_budget() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    // 100 tokens spent before the kill; one more 100-token step leaves it over.
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[subagents]\ntoken_budget = 150\n",
    )
    .unwrap();
    let resumed = Arc::new(AtomicBool::new(false));
    let server = server(resumed.clone(), true);
    let (kid, _) = run_and_kill(&f, &server);
    let before = server.request_count();
    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let (code, out, err) = brood(&f, &with(&["agents", "resume", &kid, "--json"], &p));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let captured = server.captured();
    // The resumed step (with tools: 100 < 150), then the final report step —
    // without tools, because 100 + 100 is past the budget. Counting from zero, the
    // child would have had a third full step.
    assert_eq!(captured.len(), before + 2, "{}", captured.len());
    assert!(
        captured[before].body()["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "the resumed step offers tools"
    );
    let last = &captured[before + 1];
    assert!(
        last.body()["tools"].as_array().is_none_or(|t| t.is_empty()),
        "the step after the budget is spent is the tool-less report: {}",
        last.body()
    );
    let text = last.last_message().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("token budget"), "{text}");
    let shown = show(&f, &kid);
    assert_eq!(shown["status"], "completed", "{shown}");
}

#[test]
fn a_run_recorded_in_another_directory_is_refused_with_the_reason() {
    let f = fixture();
    let resumed = Arc::new(AtomicBool::new(false));
    let server = server(resumed, false);
    let (kid, _) = run_and_kill(&f, &server);
    // The workspace moves: the ledger comes along, its runs name the old path.
    let moved = tempfile::tempdir().unwrap();
    let to = moved.path().join("project");
    std::fs::rename(f.ws.path(), &to).unwrap();
    let moved_fixture = Fixture {
        home: tempfile::tempdir().unwrap(),
        ws: tempfile::TempDir::new_in(moved.path()).unwrap(),
    };
    let p = local_flags(&server);
    let out = command(moved_fixture.home.path(), &to)
        .args(["agents", "resume", &kid])
        .args(&p)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot be resumed here") && err.contains("resume it from that directory"),
        "{err}"
    );
    // Nothing was written: the child is still interrupted, with no `resumed` event.
    let out = command(moved_fixture.home.path(), &to)
        .args(["agents", "show", &kid, "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["status"], "interrupted", "{shown}");
    assert!(
        !shown["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "resumed"),
        "{shown}"
    );
    // Move it back so the temp dir cleans up.
    std::fs::rename(&to, f.ws.path()).unwrap();
}

/// `brood chat --resume` (plain mode) takes the killed session's conversation —
/// the next prompt's request carries it — draws its agent tree again from the
/// ledger (`/agents`: the parent and its child, each with its recorded state and
/// tokens), lists what can be resumed, and `/resume ID` finishes the interrupted
/// child under its id.
#[test]
fn chat_resume_reopens_the_conversation_and_finishes_the_child() {
    use std::io::Write;
    let f = fixture();
    let resumed = Arc::new(AtomicBool::new(false));
    let server = server(resumed.clone(), false);
    let (kid, parent) = run_and_kill(&f, &server);
    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let mut child = f
        .command()
        .args(["chat", "--resume"])
        .args(&p)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn brood chat");
    let input = format!("/agents\n/resume\n/resume {kid}\nwhat did we do?\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("resumed session"), "{stderr}");
    assert!(
        stderr.contains(&format!("/resume {kid} continues it")),
        "the unfinished child is named: {stderr}"
    );
    // The tree of the killed session, as recorded: the root's line names its id,
    // the child's line (the only tree branch printed) its state and tokens.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(&parent) && l.contains("interrupted") && l.contains("tree: 1")),
        "the root is drawn again: {stdout}"
    );
    let branch = stdout
        .lines()
        .find(|l| l.starts_with("└─ ") || l.starts_with("├─ "))
        .unwrap_or_else(|| panic!("the child is drawn again: {stdout}"));
    assert!(
        branch.contains("interrupted") && branch.contains(" 100 tokens"),
        "{branch}"
    );
    assert!(
        stdout.contains("runs that can be resumed") && stdout.contains(&kid),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("resumed run {kid}")), "{stdout}");
    assert!(stdout.contains("the second line is beta"), "{stdout}");
    assert!(
        stdout.contains("remembered"),
        "the old conversation goes on: {stdout}"
    );
    let shown = show(&f, &kid);
    assert_eq!(shown["status"], "completed", "{shown}");
}

/// A resumed root is one of its session's roots while it runs: `brood agents
/// cancel ROOT` from another process stops it, recorded cancelled. Before, the
/// resumed root was not registered there, so the cancel request found nothing to
/// stop and the resume went on waiting for its model.
#[test]
fn agents_cancel_stops_a_resumed_root() {
    let f = fixture();
    let server = server(Arc::new(AtomicBool::new(false)), false);
    let (_kid, parent) = run_and_kill(&f, &server);
    // The resumed parent's next step never gets an answer.
    let hang = MockServer::start(|_| MockReply::Hang);
    let p = local_flags(&hang);
    let mut resume = f
        .command()
        .args(with(&["agents", "resume", &parent], &p))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn brood agents resume");
    wait_for_requests(&hang, 1);
    let (code, _, err) = brood(&f, &["agents", "cancel", &parent]);
    assert_eq!(code, 0, "{err}");
    // The resume ends once its session has taken the request (polled, bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = resume.try_wait().expect("wait for brood") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = resume.kill();
            panic!("brood agents resume did not stop after brood agents cancel");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success(), "a cancelled resume does not exit 0");
    let shown = show(&f, &parent);
    assert_eq!(shown["status"], "cancelled", "{shown}");
}
