//! `brood chat` in plain mode: prompts and slash commands piped on stdin, one
//! session whose parent conversation continues across prompts.

use super::*;
use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

/// `brood chat --provider local --base-url <server> --model m ARGS…` with `input`
/// on stdin; waits for it to end (bounded).
fn chat(f: &Fixture, server: &MockServer, args: &[&str], input: &str) -> Output {
    let mut cmd = f.command();
    cmd.arg("chat")
        .args(local_flags(server))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn brood chat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    wait_bounded(child)
}

fn content(m: &Value) -> &str {
    m.get("content").and_then(Value::as_str).unwrap_or("")
}

/// The parent: `first question` → `answer one`; `second question` → whether the
/// request still carries the first exchange; `fan out` → three explore children.
/// Children answer and the model each one asked for is kept.
fn chat_server(child_models: Arc<Mutex<Vec<String>>>) -> MockServer {
    MockServer::start(move |req| {
        if req
            .first_user_text()
            .is_some_and(|t| t.starts_with("child "))
        {
            child_models.lock().unwrap().push(req.model().to_string());
            return MockReply::text("SUMMARY: looked");
        }
        let last = req.last_message().cloned().unwrap_or_default();
        if last.get("role").and_then(Value::as_str) == Some("tool") {
            return MockReply::text("fanned out");
        }
        match content(&last) {
            "first question" => MockReply::text("answer one"),
            "second question" => {
                let msgs = req.messages();
                let saw = msgs.iter().any(|m| content(m) == "first question")
                    && msgs.iter().any(|m| content(m) == "answer one");
                MockReply::text(if saw { "remembered" } else { "forgot" })
            }
            "fan out" => MockReply::tool_call(
                "task",
                json!({"prompts": ["child a", "child b", "child c"], "agent_type": "explore"}),
            ),
            other => MockReply::text(format!("echo {other}")),
        }
    })
}

#[test]
fn chat_keeps_the_conversation_and_answers_slash_commands() {
    let f = fixture();
    let models = Arc::new(Mutex::new(Vec::new()));
    let server = chat_server(models.clone());
    let input = "first question\nsecond question\n/models-subagent\n\
                 /model-subagent explore kid-model\n/models-subagent\nfan out\n/agents\n\
                 /status\n/bogus\n/model-subagent explore\n/model-subagent nobody m\n/quit\n\
                 never sent\n";
    let out = chat(&f, &server, &[], input);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // The second prompt's request carried the first exchange.
    assert!(stdout.contains("answer one"), "{stdout}");
    assert!(stdout.contains("remembered"), "{stdout}\n{stderr}");
    // /model-subagent: every explore child asked the mock for kid-model.
    let asked = models.lock().unwrap().clone();
    assert!(
        asked.len() >= 3 && asked.iter().all(|m| m == "kid-model"),
        "{asked:?}\n{stderr}"
    );
    assert!(stdout.contains("fanned out"), "{stdout}");
    // /models-subagent, before and after.
    let explore: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("explore  "))
        .collect();
    assert_eq!(explore.len(), 2, "{stdout}");
    assert!(
        explore[0].contains("m on local (the main model)"),
        "{}",
        explore[0]
    );
    assert!(
        explore[1].contains("kid-model on local (/model-subagent in this chat)"),
        "{}",
        explore[1]
    );
    // /agents: the three children under the fan-out's parent, completed.
    let kids: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("[explore · kid-model]"))
        .collect();
    assert_eq!(kids.len(), 3, "{stdout}");
    assert!(kids.iter().all(|l| l.contains("— completed")), "{stdout}");
    assert!(
        kids[0].starts_with("├─ ") && kids[2].starts_with("└─ "),
        "{stdout}"
    );
    // /status.
    assert!(stdout.contains("children: 0 running, 0 queued"), "{stdout}");
    assert!(stdout.contains("limits: max_concurrent "), "{stdout}");
    assert!(stdout.contains("brood.db"), "{stdout}");
    // Errors name what is accepted; /quit ends before "never sent".
    assert!(
        stderr.contains("unknown command /bogus (accepted: /help, /agents"),
        "{stderr}"
    );
    assert!(
        stderr.contains("usage: /model-subagent ROLE MODEL"),
        "{stderr}"
    );
    assert!(
        stderr.contains("unknown role \"nobody\" (accepted: general"),
        "{stderr}"
    );
    assert!(!stdout.contains("never sent"), "{stdout}");
    // The parent's 4 requests and the children's.
    assert_eq!(server.request_count(), 4 + asked.len());
}

#[test]
fn chat_json_prints_events_and_a_report_per_prompt() {
    let f = fixture();
    let server = chat_server(Arc::default());
    let out = chat(&f, &server, &["--json"], "first question\n");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines
        .iter()
        .any(|v| v["event"] == "spawned" && v["role"] == "parent" && v["model"] == "m"));
    assert!(lines
        .iter()
        .any(|v| v["event"] == "completed" && v["final"] == "answer one"));
    assert_eq!(
        lines.last().unwrap()["report"]["final"],
        "answer one",
        "{stdout}"
    );
}

/// `/model NAME`: the next prompts ask the mock for NAME, and the conversation
/// goes on; `/clear` forgets it.
#[test]
fn chat_model_switches_the_parent_and_clear_forgets_the_conversation() {
    let f = fixture();
    let server = chat_server(Arc::default());
    let input =
        "first question\n/model big-model\n/model\nsecond question\n/clear\nsecond question\n";
    let out = chat(&f, &server, &[], input);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let models: Vec<String> = server
        .captured()
        .iter()
        .map(|r| r.model().to_string())
        .collect();
    assert_eq!(models, ["m", "big-model", "big-model"], "{stderr}");
    assert!(
        stdout.contains("model: big-model on local (/model in this chat)"),
        "{stdout}"
    );
    let answers: Vec<&str> = stdout
        .lines()
        .filter(|l| *l == "remembered" || *l == "forgot")
        .collect();
    assert_eq!(answers, ["remembered", "forgot"], "{stdout}");
}

/// With a price for `m` and every answer 1000 input + 100 output tokens at $2 / $8
/// per million ($0.0028 an answer): `/agents` shows each child's tokens and cost and
/// the tree's total on its root; `/status` the chat's.
#[test]
fn chat_shows_each_agents_tokens_and_cost_and_the_trees() {
    let f = fixture();
    let dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[pricing.\"m\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n",
    )
    .unwrap();
    let server = MockServer::start(|req| {
        let answer = if req
            .first_user_text()
            .is_some_and(|t| t.starts_with("child "))
        {
            brood_mock::Answer::text(
                "SUMMARY: looked\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none",
            )
        } else if req.assistant_turns() == 0 {
            brood_mock::Answer::new().tool_call(
                "task",
                json!({"prompts": ["child a", "child b"], "agent_type": "explore"}),
            )
        } else {
            brood_mock::Answer::text("fanned out")
        };
        answer
            .usage(json!({"prompt_tokens": 1000, "completion_tokens": 100}))
            .into()
    });
    let out = chat(&f, &server, &[], "fan out\n/agents\n/status\n/quit\n");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // Two parent answers and one per child.
    assert_eq!(server.request_count(), 4, "{stderr}");
    let kids: Vec<&str> = stdout
        .lines()
        .filter(|l| (l.starts_with("├─ ") || l.starts_with("└─ ")) && l.contains("[explore · m]"))
        .collect();
    assert_eq!(kids.len(), 2, "{stdout}");
    for k in &kids {
        assert!(k.ends_with(", 1100 tokens, $0.0028"), "{k}");
    }
    let root = stdout
        .lines()
        .find(|l| l.starts_with("parent [parent · m]"))
        .unwrap_or_else(|| panic!("the root's line: {stdout}"));
    assert!(
        root.contains(", 2200 tokens, $0.0056") && root.ends_with("— tree: 4400 tokens, $0.0112"),
        "{root}"
    );
    assert!(
        stdout
            .contains("this chat: 4 requests, 4000 input tokens, 400 output tokens, cost $0.0112"),
        "{stdout}"
    );
    assert!(
        stdout.contains("agents so far: 4400 tokens, $0.0112"),
        "{stdout}"
    );
}

/// `/permissions` lists the session's rules with their sources and the rules not
/// taken; `/permissions ask RULE` adds one for the session and the list shows it.
#[test]
fn chat_permissions_lists_rules_with_sources_and_adds_one() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[permissions]\ndeny = [\"write_file(*.lock)\"]\nallow = [\"bash(rm:*)\"]\n",
    )
    .unwrap();
    let server = two_step_server();
    let input = "/permissions\n/permissions ask bash(git push:*)\n/permissions\n/quit\n";
    let out = chat(&f, &server, &[], input);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.trim_start().starts_with("deny")
            && l.contains("write_file(*.lock)")
            && l.contains(".brood/config.toml")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("ignored:") && l.contains("bash(rm:*)")),
        "a workspace's allow is not taken: {stdout}"
    );
    assert!(
        stdout.contains("added ask bash(git push:*) for this session"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.trim_start().starts_with("ask") && l.contains("bash(git push:*)")),
        "{stdout}"
    );
}

/// Prompts piped in, nobody can answer an `ask` rule's question: the call is
/// refused with a tool error naming the rule and saying nobody could be asked
/// (the model reads it; checked at the mock), and the file is not touched. (On
/// a terminal plain mode asks: chat_ui.rs.)
#[test]
fn chat_from_a_pipe_refuses_an_ask_rules_call_naming_the_rule() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[permissions]\nask = [\"bash(touch:*)\"]\n",
    )
    .unwrap();
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::tool_call("bash", json!({"command": "touch made.txt"})),
        _ => MockReply::text("done"),
    });
    let out = chat(&f, &server, &[], "touch it\n/quit\n");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!f.ws.path().join("made.txt").exists(), "the call ran");
    let refusal = server
        .captured()
        .iter()
        .filter_map(|r| r.last_message().cloned())
        .find(|m| m["role"] == "tool")
        .unwrap_or_default();
    let refusal = content(&refusal);
    assert!(
        refusal.contains(r#"the permission rule ask "bash(touch:*)""#)
            && refusal.contains("no approver to ask"),
        "{refusal}"
    );
}
