//! Permission rules through the `brood` binary against brood-mock: a child trying a
//! denied command under other spellings, `brood run` refusing an `ask` unless
//! `--allow` covers it, a Claude Code `deny` from `.claude/settings.json` refusing a
//! child's command, and malformed rules as configuration errors.

use brood_mock::{MockReply, MockRequest, MockServer};
use serde_json::json;
use std::path::Path;

use crate::common::{run_local, stderr, write, Fixture};

/// A workspace with `notes.txt` and an empty home.
fn fixture() -> Fixture {
    Fixture::with_notes("alpha\n")
}

/// The tool result the model was shown last in `req`.
fn last_result(req: &MockRequest) -> String {
    req.last_message()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

const SPELLINGS: &[&str] = &[
    "touch pwned",
    "   touch pwned",
    "bash -c 'touch pwned'",
    "sh -c \"touch pwned\"",
    "env X=1 touch pwned",
    "true && touch pwned",
    "echo $(touch pwned)",
    "/usr/bin/env touch pwned",
];

/// Parent: one `task` with a child per spelling (and the parent tries the first
/// spelling itself); each child runs its spelling once.
fn spelling_server() -> MockServer {
    MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if let Some(i) = first.strip_prefix("CHILD ") {
            let i: usize = i.trim().parse().unwrap_or(0);
            return match req.assistant_turns() {
                0 => MockReply::tool_call("bash", json!({ "command": SPELLINGS[i] })),
                _ => MockReply::text(
                    "SUMMARY: tried.\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: None.",
                ),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("bash", json!({ "command": "   touch pwned" })),
            1 => MockReply::tool_call(
                "task",
                json!({ "prompts": (0..SPELLINGS.len()).map(|i| format!("CHILD {i}")).collect::<Vec<_>>() }),
            ),
            _ => MockReply::text("done"),
        }
    })
}

/// Every child's (and the parent's) attempt came back refused naming the rule.
fn assert_every_spelling_refused(server: &MockServer, rule: &str, ws: &Path) {
    let captured = server.captured();
    let mut children = 0;
    for req in &captured {
        let first = req.first_user_text().unwrap_or_default();
        let child = first.starts_with("CHILD ");
        let parent_after_bash = !child && req.assistant_turns() == 1;
        if (child && req.assistant_turns() == 1) || parent_after_bash {
            let r = last_result(req);
            assert!(
                r.contains("forbids") && r.contains(rule),
                "{first}: the result names the rule {rule}: {r}"
            );
            children += usize::from(child);
        }
    }
    assert_eq!(children, SPELLINGS.len(), "every child tried");
    assert!(!ws.join("pwned").exists(), "no spelling ran the command");
}

#[test]
fn a_denied_command_is_refused_to_parent_and_children_under_every_spelling() {
    let f = fixture();
    write(
        &f.home.path().join(".config/brood/config.toml"),
        "[permissions]\ndeny = [\"bash(touch:*)\"]\n",
    );
    let server = spelling_server();
    let out = run_local(&f, &server, &["go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_every_spelling_refused(&server, "bash(touch:*)", f.ws.path());
}

#[test]
fn a_claude_code_deny_in_the_workspace_refuses_a_childs_command_and_its_allow_is_ignored() {
    let f = fixture();
    write(
        &f.ws.path().join(".claude/settings.json"),
        r#"{"permissions": {"allow": ["Bash"], "deny": ["Bash(touch:*)", "WebFetch(domain:example.com)"]}}"#,
    );
    let server = spelling_server();
    let out = run_local(&f, &server, &["go"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_every_spelling_refused(&server, "bash(touch:*)", f.ws.path());
    assert!(
        err.contains("allow \"Bash\" ignored") && err.contains("WebFetch(domain:example.com)"),
        "the ignored rules are listed: {err}"
    );
}

/// The parent writes `src/a.rs`, then answers with what it was told.
fn write_server() -> MockServer {
    MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::tool_call("write_file", json!({"path": "src/a.rs", "content": "x"})),
        _ => MockReply::text("done"),
    })
}

#[test]
fn run_refuses_an_ask_naming_the_rule_unless_allow_covers_it() {
    let f = fixture();
    write(
        &f.ws.path().join(".brood/config.toml"),
        "[permissions]\nask = [\"write_file(src/**)\"]\n",
    );
    let target = f.ws.path().join("src/a.rs");

    let server = write_server();
    let out = run_local(&f, &server, &["write"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = last_result(&server.captured()[1]);
    assert!(
        r.contains("write_file(src/**)") && r.contains("--allow 'write_file(src/**)'"),
        "the refusal names the rule and the flag: {r}"
    );
    assert!(!target.exists());

    // A rule that does not cover the call approves nothing.
    let server = write_server();
    let out = run_local(&f, &server, &["--allow", "write_file(docs/**)", "write"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!target.exists());

    let server = write_server();
    let out = run_local(&f, &server, &["--allow", "write_file(src/**)", "write"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(target.exists(), "{}", last_result(&server.captured()[1]));

    let server = write_server();
    let out = run_local(&f, &server, &["--allow", "write_file(", "write"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--allow") && stderr(&out).contains("write_file("));
}

#[test]
fn a_malformed_rule_is_a_config_error_naming_file_and_rule() {
    let f = fixture();
    write(
        &f.ws.path().join(".brood/config.toml"),
        "[permissions]\ndeny = [\"bash(git push:*\"]\n",
    );
    let server = write_server();
    let out = run_local(&f, &server, &["x"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(".brood/config.toml") && err.contains("bash(git push:*"),
        "{err}"
    );
    assert_eq!(server.request_count(), 0);
}
