//! Resuming a fork (`fork_context: true`): it continues after the parent's
//! conversation it ran with, re-derived from the ledger (its transcript holds
//! only the fork's tail onward).

use super::resume::{
    brood, fixture, is_the_child, run_and_kill, server_with, show, usage, wait_until_recorded,
    with, REPORT, TASK,
};
use brood_mock::{Answer, MockReply, MockServer};
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{local_flags, wait_for_requests};

/// A fork (`fork_context: true`) killed while it waits on its model resumes
/// after its parent's conversation, as it ran: its next request starts with the
/// parent's prompt, then the fork's tail, its call and its result. Its transcript
/// holds only the tail onward, so without the prefix re-derived from the parent's
/// it would start at a tail that speaks of "the conversation above" — not there.
#[test]
fn a_forked_child_resumes_after_its_parents_conversation() {
    let f = fixture();
    let resumed = Arc::new(AtomicBool::new(false));
    let task = json!({"description": TASK, "agent_type": "general", "fork_context": true});
    let server = server_with(resumed.clone(), task, None);
    let (kid, _parent) = run_and_kill(&f, &server);
    let before = server.request_count();
    resumed.store(true, Ordering::SeqCst);
    let p = local_flags(&server);
    let (code, out, err) = brood(&f, &with(&["agents", "resume", &kid], &p));
    assert_eq!(code, 0, "{out}\n{err}");
    let after = &server.captured()[before..];
    let first = after.first().expect("the resumed child asked its model");
    // After the system prompt (the wire's first message).
    let messages = &first.messages()[1..];
    assert_eq!(messages[0]["role"], "user", "{messages:#?}");
    assert_eq!(
        messages[0]["content"], "delegate",
        "the parent's prompt comes first: {messages:#?}"
    );
    let tail = messages[1]["content"].as_str().unwrap_or_default();
    assert!(
        tail.starts_with("--- fork:") && tail.contains(TASK),
        "then the fork's tail: {messages:#?}"
    );
    assert_eq!(
        messages.len(),
        4,
        "prompt, tail, call, result: {messages:#?}"
    );
    assert_eq!(show(&f, &kid)["status"], "completed");
}

/// A fork opened in a chat's second turn resumes after the whole conversation it
/// ran with: the first turn too, which the second turn's root did not record (a
/// turn's root records its own prompt and steps, not the history it was given).
#[test]
fn a_fork_from_a_chats_second_turn_resumes_after_the_whole_conversation() {
    use std::io::Write;
    let f = fixture();
    let resumed = Arc::new(AtomicBool::new(false));
    let go = resumed.clone();
    let server = MockServer::start(move |req| {
        if is_the_child(req) {
            // Its own turns: those after the fork's tail.
            let own = req
                .messages()
                .iter()
                .skip_while(|m| {
                    !m["content"]
                        .as_str()
                        .is_some_and(|c| c.contains("--- fork:"))
                })
                .filter(|m| m["role"] == "assistant")
                .count();
            return match own {
                0 => Answer::new()
                    .tool_call("read_file", json!({"path": "notes.txt"}))
                    .usage(usage(100))
                    .into(),
                _ if !go.load(Ordering::SeqCst) => MockReply::Hang,
                _ => Answer::text(REPORT).usage(usage(50)).into(),
            };
        }
        let last = req.last_message().cloned().unwrap_or_default();
        match last["content"].as_str() {
            Some("hello") => MockReply::text("hi there"),
            Some("delegate") => MockReply::tool_call(
                "task",
                json!({"description": TASK, "agent_type": "general", "fork_context": true}),
            ),
            _ => MockReply::text("parent done"),
        }
    });
    let p = local_flags(&server);
    let mut chat = f
        .command()
        .arg("chat")
        .args(&p)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn brood chat");
    let mut stdin = chat.stdin.take().unwrap();
    stdin.write_all(b"hello\ndelegate\n").unwrap();
    // Two parent steps, the fork's first step, its second waiting on its model.
    wait_for_requests(&server, 4);
    wait_until_recorded(&f);
    chat.kill().expect("SIGKILL brood chat");
    chat.wait().expect("reap brood chat");
    drop(stdin);
    let (_, out, _) = brood(&f, &["agents", "list", "--all", "--json"]);
    let runs: Vec<Value> = serde_json::from_str(&out).unwrap();
    let kid = runs
        .iter()
        .find(|r| !r["parent_id"].is_null())
        .and_then(|r| r["id"].as_str())
        .unwrap_or_else(|| panic!("the fork: {runs:?}"))
        .to_string();

    let before = server.request_count();
    resumed.store(true, Ordering::SeqCst);
    let (code, out, err) = brood(&f, &with(&["agents", "resume", &kid], &p));
    assert_eq!(code, 0, "{out}\n{err}");
    let first = server.captured()[before..]
        .first()
        .cloned()
        .expect("the resumed fork asked its model");
    let said: Vec<String> = first.messages()[1..]
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(20)
                .collect()
        })
        .collect();
    assert_eq!(
        said[..3],
        ["hello", "hi there", "delegate"],
        "the first turn, then the second's prompt: {said:?}"
    );
    assert!(said[3].starts_with("--- fork:"), "{said:?}");
    assert_eq!(
        said.len(),
        6,
        "then the tail, its call and result: {said:?}"
    );
}
