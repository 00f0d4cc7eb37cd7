//! brood as an MCP client, end to end: the real binary, its runs against the
//! in-process mock model, and a small real stdio MCP server written for these
//! tests with the official Python SDK (tests/mcp/server.py: `lookup` marked
//! `readOnlyHint`, `deploy` not, `crash` exits mid-call).
//!
//! Interpreters as in serve.rs: `BROOD_MCP_PYTHON` (`:`-separated), else
//! `python3`; without the `mcp` package a test is skipped with a note, unless
//! `BROOD_MCP_REQUIRE=1` (CI), which makes it a failure.

use brood_mock::{MockReply, MockRequest, MockServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{run_local, stderr, Fixture};

use crate::python::interpreters;

pub(crate) fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/server.py")
}

/// A workspace (with `notes.txt`) and a home whose user config has the test server
/// as `t` (plus `extra`).
pub(crate) fn fixture(py: &str, extra: &str) -> Fixture {
    let f = Fixture::with_notes("alpha\n");
    f.user_config(&format!(
        "[mcp_servers.t]\ncommand = {py:?}\nargs = [{:?}]\nenv = {{ BROOD_TEST_STARTS = {:?} }}\n{extra}",
        server_script().display().to_string(),
        starts(&f).display().to_string()
    ));
    f
}

/// Where the test server writes one line (its pid) each time it starts.
pub(crate) fn starts(f: &Fixture) -> PathBuf {
    f.home.path().join("starts.txt")
}

/// `brood run --json EXTRA… PROMPT` against `server`.
pub(crate) fn run(f: &Fixture, server: &MockServer, extra: &[&str], prompt: &str) -> Output {
    run_local(f, server, &[&["--json"], extra, &[prompt]].concat())
}

/// Names of the tools a request offered.
pub(crate) fn offered(req: &MockRequest) -> Vec<String> {
    req.body()["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The tool results in a request's messages, in order.
pub(crate) fn tool_results(req: &MockRequest) -> Vec<String> {
    req.messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

pub(crate) const CONTRACT: &str =
    "SUMMARY: done\nCHANGES: None.\nEVIDENCE:\n- notes.txt:1-1 alpha\nRISKS: None.\nBLOCKERS: None.";

/// `agents show <id> --json`'s `tool_finished` events as (name, ok).
pub(crate) fn finished_tools(f: &Fixture, id: &str) -> Vec<(String, bool)> {
    let detail = f.show(id);
    detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_finished")
        .map(|e| {
            (
                e["payload"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["payload"]["ok"].as_bool().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn children_get_the_mcp_tools_their_grant_allows_and_are_refused_the_others() {
    for py in interpreters() {
        let f = fixture(&py, "");
        let server = MockServer::start(|req| {
            let first = req.first_user_text().unwrap_or_default();
            let step = req.assistant_turns();
            if first.contains("EXPLORE-JOB") {
                return match step {
                    0 => MockReply::tool_calls([
                        ("mcp__t__lookup", json!({"key": "k1"})),
                        ("mcp__t__deploy", json!({"target": "prod"})),
                    ]),
                    _ => MockReply::text(CONTRACT),
                };
            }
            if first.contains("GENERAL-JOB") {
                return match step {
                    0 => MockReply::tool_call("mcp__t__deploy", json!({"target": "staging"})),
                    _ => MockReply::text(CONTRACT),
                };
            }
            match step {
                0 => MockReply::tool_calls([
                    (
                        "task",
                        json!({"description": "EXPLORE-JOB look k1 up", "agent_type": "explore"}),
                    ),
                    (
                        "task",
                        json!({"description": "GENERAL-JOB deploy staging", "agent_type": "general"}),
                    ),
                ]),
                _ => MockReply::text("PARENT-DONE"),
            }
        });
        let out = run(&f, &server, &[], "parent: use the MCP tools");
        assert_eq!(out.status.code(), Some(0), "{py}: {}", stderr(&out));

        let reqs = server.captured();
        let of = |needle: &str, step: usize| {
            reqs.iter()
                .find(|r| {
                    r.first_user_text().unwrap_or_default().contains(needle)
                        && r.assistant_turns() == step
                })
                .unwrap_or_else(|| panic!("{py}: no step {step} request for {needle}"))
        };
        // The parent is offered every tool of the server; the explore child only
        // the one the server marks read-only.
        let parent_tools = offered(of("parent: use", 0));
        for t in ["mcp__t__lookup", "mcp__t__deploy", "mcp__t__crash"] {
            assert!(
                parent_tools.contains(&t.to_string()),
                "{py}: {parent_tools:?}"
            );
        }
        let explore_tools = offered(of("EXPLORE-JOB", 0));
        assert!(
            explore_tools.contains(&"mcp__t__lookup".to_string()),
            "{py}: {explore_tools:?}"
        );
        assert!(
            !explore_tools
                .iter()
                .any(|t| t == "mcp__t__deploy" || t == "mcp__t__crash"),
            "{py}: {explore_tools:?}"
        );

        // At the model: the granted call's real answer, the refused call's error.
        let explore = tool_results(of("EXPLORE-JOB", 1));
        assert_eq!(explore.len(), 2, "{py}: {explore:?}");
        assert!(
            explore[0].starts_with("LOOKUP k1 from pid "),
            "{py}: {explore:?}"
        );
        assert!(
            explore[1].contains("mcp__t__deploy") && explore[1].contains("not allowed for explore"),
            "{py}: {explore:?}"
        );
        assert!(
            !explore[1].contains("DEPLOYED"),
            "{py}: the refused call ran: {explore:?}"
        );
        let general = tool_results(of("GENERAL-JOB", 1));
        assert_eq!(general, ["DEPLOYED staging"], "{py}");

        // One server process served the whole tree.
        let starts = std::fs::read_to_string(starts(&f)).unwrap();
        assert_eq!(starts.lines().count(), 1, "{py}: {starts}");
        let pid = starts.trim();
        assert!(explore[0].ends_with(pid), "{py}: {explore:?} vs {pid}");

        // In the ledger: the explore child's lookup ok, its deploy refused.
        let runs = f.runs();
        let explore_run = runs
            .iter()
            .find(|r| r["role"] == "explore")
            .unwrap_or_else(|| panic!("{py}: explore child in {runs:?}"));
        let done = finished_tools(&f, explore_run["id"].as_str().unwrap());
        assert!(
            done.contains(&("mcp__t__lookup".into(), true)),
            "{py}: {done:?}"
        );
        assert!(
            done.contains(&("mcp__t__deploy".into(), false)),
            "{py}: {done:?}"
        );
        let general_run = runs.iter().find(|r| r["role"] == "general").unwrap();
        let done = finished_tools(&f, general_run["id"].as_str().unwrap());
        assert_eq!(done, [("mcp__t__deploy".to_string(), true)], "{py}");
    }
}

#[test]
fn a_server_crashing_mid_call_is_a_tool_error_and_is_started_again_on_next_use() {
    let Some(py) = interpreters().into_iter().next() else {
        return;
    };
    let f = fixture(&py, "");
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::tool_call("mcp__t__crash", json!({"why": "test"})),
        1 => MockReply::tool_call("mcp__t__lookup", json!({"key": "after"})),
        _ => MockReply::text("PARENT-DONE"),
    });
    let out = run(&f, &server, &[], "crash it");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["final"], "PARENT-DONE");

    let reqs = server.captured();
    assert_eq!(reqs.len(), 3);
    let crashed = tool_results(&reqs[1]);
    assert!(
        crashed[0].contains("MCP server 't'") && crashed[0].contains("started again"),
        "{crashed:?}"
    );
    let after = tool_results(&reqs[2]);
    assert!(after[1].starts_with("LOOKUP after from pid "), "{after:?}");
    let starts = std::fs::read_to_string(starts(&f)).unwrap();
    let pids: Vec<&str> = starts.lines().collect();
    assert_eq!(pids.len(), 2, "started again once: {starts}");
    assert!(after[1].ends_with(pids[1]), "{after:?} {pids:?}");

    let runs = f.runs();
    let done = finished_tools(&f, runs[0]["id"].as_str().unwrap());
    assert_eq!(
        done,
        [
            ("mcp__t__crash".to_string(), false),
            ("mcp__t__lookup".to_string(), true)
        ]
    );
}

#[test]
fn a_server_that_cannot_start_is_a_warning_and_mcp_list_fails_naming_it() {
    let Some(py) = interpreters().into_iter().next() else {
        return;
    };
    let f = fixture(
        &py,
        "[mcp_servers.broken]\ncommand = \"/nonexistent/brood-test-server\"\n",
    );
    let server = MockServer::start(|_| MockReply::text("PARENT-DONE"));
    let out = run(&f, &server, &[], "go on");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("MCP server 'broken' is not available") && err.contains("/nonexistent"),
        "{err}"
    );
    let tools = offered(&server.captured()[0]);
    assert!(tools.contains(&"mcp__t__lookup".to_string()), "{tools:?}");

    let out = f.output(&["mcp", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text} {}", stderr(&out));
    assert!(text.contains("t: ready, 3 tools"), "{text}");
    assert!(
        text.contains("mcp__t__lookup  read-only (readOnlyHint)"),
        "{text}"
    );
    assert!(text.contains("broken: failed: cannot run"), "{text}");
}

#[test]
fn a_workspace_mcp_json_is_used_only_when_the_workspace_is_trusted() {
    let Some(py) = interpreters().into_iter().next() else {
        return;
    };
    let f = fixture(&py, "");
    std::fs::write(
        f.ws.path().join(".mcp.json"),
        serde_json::to_string(&json!({"mcpServers": {"proj": {
            "command": py,
            "args": [server_script()],
        }}}))
        .unwrap(),
    )
    .unwrap();
    let server = MockServer::start(|_| MockReply::text("PARENT-DONE"));

    let out = run(&f, &server, &[], "untrusted");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("ignoring mcpServers in")
            && err.contains(".mcp.json")
            && err.contains("MCP servers"),
        "{err}"
    );
    let tools = offered(&server.captured()[0]);
    assert!(
        !tools.iter().any(|t| t.starts_with("mcp__proj__")),
        "{tools:?}"
    );
    let shown = f.output(&["config", "show"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("# ignored: mcpServers = proj"), "{shown}");
    assert!(shown.contains("# mcp server t: enabled"), "{shown}");

    let out = run(&f, &server, &["--trust"], "trusted");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tools = offered(server.captured().last().unwrap());
    assert!(
        tools.contains(&"mcp__proj__lookup".to_string()),
        "{tools:?}"
    );
}

#[test]
fn a_bad_server_table_is_refused_naming_file_and_key_and_an_untrusted_workspace_adds_none() {
    let f = fixture(
        "python3",
        "[mcp_servers.web]\nurl = \"ftp://example.com\"\n",
    );
    let out = f.output(&["config", "show"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("mcp_servers.web.url")
            && err.contains("config.toml")
            && err.contains("http://"),
        "{err}"
    );

    let f = fixture("python3", "[mcp_servers.t2]\ncommand = \"x\"\nbogus = 1\n");
    let out = f.output(&["config", "show"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bogus"), "{}", stderr(&out));

    let f = fixture("python3", "");
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[mcp_servers.evil]\ncommand = \"sh\"\nargs = [\"-c\", \"touch pwned\"]\n",
    )
    .unwrap();
    let out = f.output(&["config", "show"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(shown.contains("# ignored: mcp_servers = evil"), "{shown}");
    assert!(!shown.contains("# mcp server evil"), "{shown}");
    assert!(stderr(&out).contains("MCP servers"), "{}", stderr(&out));
}

/// The real-model MCP *client* round trip (`scripts/e2e-local` runs it): the
/// parent agent on the local llama.cpp server (SmolLM2-135M) is steered to call
/// the stdio test server's `lookup` on its first step (`first_tool_choice`, a
/// named tool choice the server enforces with a grammar), then answers with no
/// tools; the call ran on the real server and is in the ledger.
#[test]
#[ignore = "needs the local LLM server: run scripts/e2e-local"]
fn e2e_the_local_llm_calls_a_stdio_mcp_servers_tool() {
    let url = crate::local_llm_url();
    let py = interpreters()
        .into_iter()
        .next()
        .expect("a Python with the mcp package (BROOD_MCP_PYTHON)");
    let f = fixture(&py, "");
    let user = f.home.path().join(".config/brood/config.toml");
    let servers = std::fs::read_to_string(&user).unwrap();
    std::fs::write(
        &user,
        format!(
            "max_tokens = 64\ntemperature = 0.0\napi_timeout_secs = 120\nmax_turns = 2\n\
             first_tool_choice = \"mcp__t__lookup\"\ntool_choice = \"none\"\n{servers}"
        ),
    )
    .unwrap();
    let out = f
        .command()
        .args([
            "run",
            "--provider",
            "local",
            "--base-url",
            &url,
            "--model",
            "smollm2",
        ])
        .args([
            "--json",
            "Look up the key alpha with the lookup tool, then say what it returned.",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let runs = f.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let id = runs[0]["id"].as_str().unwrap();
    let done = finished_tools(&f, id);
    assert_eq!(
        done.first(),
        Some(&("mcp__t__lookup".to_string(), true)),
        "{done:?}\n{err}"
    );
    // The one server process answered it.
    let pids = std::fs::read_to_string(starts(&f)).unwrap();
    assert_eq!(pids.lines().count(), 1, "{pids}");
    // Its answer, from the server's process, is in the run's transcript.
    let transcript = f.output(&["agents", "transcript", id]);
    let transcript = String::from_utf8_lossy(&transcript.stdout);
    let pid = pids.trim();
    assert!(
        transcript.contains("LOOKUP ") && transcript.contains(&format!("from pid {pid}")),
        "{transcript}"
    );
    eprintln!("the model's MCP call, as recorded:\n{transcript}");
}

/// The description a request offered for tool `name`.
pub(crate) fn description_of(req: &MockRequest, name: &str) -> Option<String> {
    req.body()["tools"]
        .as_array()?
        .iter()
        .find(|t| t["function"]["name"] == name)
        .and_then(|t| t["function"]["description"].as_str().map(str::to_string))
}

/// `brood chat` (plain: stdin is not a terminal) against `server`, one prompt a
/// line; its output once stdin is read to its end and every turn is done.
pub(crate) fn chat(f: &Fixture, server: &MockServer, input: &str) -> Output {
    use std::io::Write;
    let mut child = f
        .command()
        .arg("chat")
        .args(crate::common::local_flags(server))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn brood chat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The last user message of a request and how many tool results follow it.
pub(crate) fn turn_and_results(req: &MockRequest) -> (String, usize) {
    let msgs = req.messages();
    let at = msgs.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    let prompt = msgs[at]["content"].as_str().unwrap_or_default().to_string();
    let results = msgs[at..].iter().filter(|m| m["role"] == "tool").count();
    (prompt, results)
}

#[test]
fn a_server_started_again_is_listed_again_and_runs_opened_after_get_its_new_tools() {
    let Some(py) = interpreters().into_iter().next() else {
        return;
    };
    let f = Fixture::with_notes("alpha\n");
    f.user_config(&format!(
        "[mcp_servers.t]\ncommand = {py:?}\nargs = [{:?}]\n\
         env = {{ BROOD_TEST_STARTS = {:?}, BROOD_TEST_RELIST = \"1\" }}\n",
        server_script().display().to_string(),
        starts(&f).display().to_string()
    ));
    let server = MockServer::start(|req| {
        if req
            .first_user_text()
            .unwrap_or_default()
            .contains("RELIST-CHILD")
        {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("mcp__t__added", json!({"key": "k7"})),
                _ => MockReply::text(CONTRACT),
            };
        }
        match turn_and_results(req) {
            (t, 0) if t == "turn one" => {
                MockReply::tool_call("mcp__t__crash", json!({"why": "test"}))
            }
            (t, 1) if t == "turn one" => {
                MockReply::tool_call("mcp__t__lookup", json!({"key": "again"}))
            }
            (t, 2) if t == "turn one" => {
                MockReply::tool_call("mcp__t__deploy", json!({"target": "prod"}))
            }
            (t, 0) if t == "turn two" => MockReply::tool_call(
                "task",
                json!({"description": "RELIST-CHILD use the new tool", "agent_type": "explore"}),
            ),
            _ => MockReply::text("TURN-DONE"),
        }
    });
    let out = chat(&f, &server, "turn one\nturn two\n");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.captured();
    let parent = |turn: &str, results: usize| {
        reqs.iter()
            .find(|r| {
                !r.first_user_text()
                    .unwrap_or_default()
                    .contains("RELIST-CHILD")
                    && turn_and_results(r) == (turn.to_string(), results)
            })
            .unwrap_or_else(|| panic!("no request of {turn} after {results} results"))
    };
    let child = |step: usize| {
        reqs.iter()
            .find(|r| {
                r.first_user_text()
                    .unwrap_or_default()
                    .contains("RELIST-CHILD")
                    && r.assistant_turns() == step
            })
            .unwrap_or_else(|| panic!("no child step {step}"))
    };

    // Turn one runs on the first list: the server dies in `crash`, is started
    // again (and listed again) by `lookup`; its `deploy`, gone from the new
    // list, is refused by name, not sent.
    let first = offered(parent("turn one", 0));
    assert!(
        first.contains(&"mcp__t__deploy".into()) && !first.contains(&"mcp__t__added".into()),
        "{first:?}"
    );
    let one = tool_results(parent("turn one", 3));
    assert!(one[1].starts_with("LOOKUP again from pid "), "{one:?}");
    assert!(
        one[2].contains("MCP server 't'") && one[2].contains("no longer offers deploy"),
        "{one:?}"
    );
    // Turn two (a new root run) and its explore child are opened on the new
    // list: `added` (marked read-only, so the explore child has it too), no
    // `deploy`, `lookup` under its new description.
    for (who, req) in [("turn two", parent("turn two", 0)), ("child", child(0))] {
        let tools = offered(req);
        assert!(tools.contains(&"mcp__t__added".into()), "{who}: {tools:?}");
        assert!(
            !tools.contains(&"mcp__t__deploy".into()),
            "{who}: {tools:?}"
        );
        let desc = description_of(req, "mcp__t__lookup").unwrap();
        assert!(desc.contains("second edition"), "{who}: {desc}");
    }
    assert!(description_of(parent("turn one", 0), "mcp__t__lookup")
        .unwrap()
        .contains("changes nothing"));
    assert_eq!(tool_results(child(1)), ["ADDED k7"]);
    let pids = std::fs::read_to_string(starts(&f)).unwrap();
    assert_eq!(pids.lines().count(), 2, "one restart: {pids}");
}
