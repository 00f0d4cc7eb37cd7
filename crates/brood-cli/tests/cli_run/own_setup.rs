//! Bring your own setup (issue 20), through the `brood` binary against brood-mock:
//! agent files as they come from public collections (not strict YAML, foreign keys,
//! models and tools), `~/.claude/agents/`, a broken file that must not stop a run,
//! `brood agents check`, and AGENTS.md in every system prompt.

use brood_mock::{Answer, MockRequest, MockServer};
use serde_json::{json, Value};
use std::process::Output;

use crate::common::{is_child, text, write, Fixture};

const REPORT: &str = "SUMMARY: done\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none";

/// An empty workspace, and a home with `user_config` as its brood config.
fn fixture(user_config: &str) -> Fixture {
    let f = Fixture::new();
    f.user_config(user_config);
    f
}

fn run(f: &Fixture, server: &MockServer, prompt: &str) -> Output {
    f.command()
        .args(["run", "--json", "--provider", "local", "--base-url"])
        .arg(server.base_url())
        .args(["--model", "main-model", prompt])
        .output()
        .expect("run brood")
}

fn system_prompt(req: &MockRequest) -> String {
    req.messages()
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// A parent that calls `task` once per agent type (in one step), then finishes;
/// children report.
fn delegating_server(agent_types: &'static [&'static str]) -> MockServer {
    MockServer::start(move |req| {
        if is_child(req) {
            Answer::text(REPORT).into()
        } else if req.assistant_turns() == 0 {
            let mut a = Answer::new();
            for t in agent_types {
                a = a.tool_call(
                    "task",
                    json!({ "description": format!("child {t}"), "agent_type": t }),
                );
            }
            a.into()
        } else {
            Answer::text("all done").into()
        }
    })
}

/// Files shaped like the ones in public Claude Code collections.
fn wild_agent_files(f: &Fixture) {
    // An unquoted colon inside the description (not YAML), `<example>` tags.
    write(&f.ws.path().join(".claude/agents/stats.md"),
        "---\nname: stats\ndescription: Use when analysing data. Triggers on: 'p-value', 'anova' <example>user: run it</example>\ntools: Read, Grep, Glob\nmodel: sonnet\n---\nYou are a statistician.\n",
    );
    // A description starting with `**` (a YAML alias), a YAML list of tools,
    // unknown keys, tools brood lacks.
    write(&f.ws.path().join(".claude/agents/bold.md"),
        "---\nname: bold\ndescription: **Expert** reviewer of diffs\ntools:\n  - Read\n  - WebFetch\n  - NotebookEdit\ncategory: quality\nversion: 2\n---\nReview.\n",
    );
    // Truly broken: no `key: value` shape at all. Not used by the run.
    write(
        &f.ws.path().join(".claude/agents/broken.md"),
        "---\nname: broken\ndescription: [\nthis line is not a key\n---\nBody.\n",
    );
    // The user's personal Claude Code agents.
    write(
        &f.home.path().join(".claude/agents/personal.md"),
        "---\nname: personal\ndescription: my own helper\nmodel: haiku\ntools: Read\n---\nHelp.\n",
    );
}

#[test]
fn agent_files_from_the_wild_load_and_work_and_a_broken_one_is_skipped() {
    let f = fixture("[subagents.model_aliases]\nsonnet = \"mapped-sonnet\"\n");
    wild_agent_files(&f);
    let server = delegating_server(&["stats", "bold", "personal"]);
    let out = run(&f, &server, "delegate");
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("broken.md") && stderr.contains("line 4"),
        "the broken file is named once, with its line:\n{stderr}"
    );

    let children: Vec<MockRequest> = server.captured().into_iter().filter(is_child).collect();
    let by = |name: &str| {
        children
            .iter()
            .find(|r| {
                r.first_user_text()
                    .is_some_and(|t| t == format!("child {name}"))
            })
            .unwrap_or_else(|| panic!("no request of child {name}"))
    };
    // The bodies became the children's system prompts.
    assert!(system_prompt(by("stats")).contains("You are a statistician."));
    assert!(system_prompt(by("bold")).contains("Review."));
    // Foreign models: a mapped alias goes to its mapping; an unmapped one to the
    // parent's model.
    assert_eq!(by("stats").model(), "mapped-sonnet");
    assert_eq!(by("personal").model(), "main-model");
    // Tools: read-only grants as written; tools brood lacks are simply absent.
    let tools = |r: &MockRequest| -> Vec<String> {
        r.body()["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| {
                        t["function"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(tools(by("bold")), ["read_file"]);
    let stats_tools = tools(by("stats"));
    assert!(
        stats_tools.contains(&"grep".to_string()) && !stats_tools.contains(&"bash".to_string()),
        "{stats_tools:?}"
    );

    let report: Value = serde_json::from_str(&stdout).expect("--json output");
    assert_eq!(report["final"], "all done", "{report}");

    // Asking for the broken one by name is a clear error the model sees.
    let server = delegating_server(&["broken"]);
    let out = run(&f, &server, "delegate");
    assert_eq!(out.status.code(), Some(0));
    let second = server
        .captured()
        .into_iter()
        .find(|r| !is_child(r) && r.assistant_turns() == 1)
        .expect("the parent's second request");
    let tool_result = second
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        tool_result.contains("cannot be used") && tool_result.contains("line 4"),
        "{tool_result}"
    );
}

#[test]
fn agents_check_lists_sources_tools_models_and_problems() {
    let f = fixture("[subagents.model_aliases]\nsonnet = \"mapped-sonnet\"\n");
    wild_agent_files(&f);
    write(
        &f.ws.path().join(".brood/config.toml"),
        "model = \"main-model\"\n",
    );
    let out = f.command().args(["agents", "check"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "problems exit 1:\n{stdout}\n{stderr}"
    );
    for want in [
        "stats [general]",
        ".claude/agents (workspace)",
        "~/.claude/agents (user)",
        "tools: read_file, grep, find_files",
        "model: deepseek/mapped-sonnet (definition)",
        "model: deepseek/main-model (definition:unmapped)",
        "model 'haiku' is another tool's name with no mapping",
        "tool 'WebFetch' dropped",
        "key `category` is not used by brood",
        "not strict YAML",
        "skipped: ",
        "broken.md",
        "3 definitions in use, 1 skipped",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }

    // A clean setup exits 0.
    let clean = fixture("");
    write(
        &clean.ws.path().join(".brood/agents/mapper.md"),
        "---\ndescription: maps routes\ntools: read_file\n---\nMap.\n",
    );
    let out = clean.command().args(["agents", "check"]).output().unwrap();
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("1 definition in use") && stdout.contains("0 problems"),
        "{stdout}"
    );
    assert!(
        stdout.contains("permission rules") && stdout.contains("(none)"),
        "{stdout}"
    );
}

/// `brood agents check` lists the permission rules in effect, each with where it
/// came from — brood's config, Claude Code's settings (translated) — the ones not
/// taken, and a definition's own rules.
#[test]
fn agents_check_lists_the_permission_rules_and_their_sources() {
    let f = fixture("[permissions]\nask = [\"bash(git push:*)\"]\n");
    write(
        &f.ws.path().join(".brood/config.toml"),
        "[permissions]\ndeny = [\"write_file(*.lock)\"]\nallow = [\"bash(rm:*)\"]\n",
    );
    write(
        &f.ws.path().join(".claude/settings.json"),
        r#"{"permissions": {"deny": ["Bash(curl:*)"]}}"#,
    );
    write(
        &f.ws.path().join(".brood/agents/careful.md"),
        "---\ndescription: careful\npermissions:\n  deny: [\"bash(make:*)\"]\n---\nBe careful.\n",
    );
    let out = f.command().args(["agents", "check"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.code().is_some(), "{stderr}");
    let line = |kind: &str, rule: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(kind) && l.contains(rule))
            .unwrap_or_else(|| panic!("no {kind} {rule} line in:\n{stdout}\n{stderr}"))
            .to_string()
    };
    assert!(
        line("ask", "bash(git push:*)").contains("config.toml"),
        "{stdout}"
    );
    assert!(
        line("deny", "write_file(*.lock)").contains(".brood/config.toml"),
        "{stdout}"
    );
    assert!(
        line("deny", "bash(curl:*)").contains("settings.json"),
        "{stdout}"
    );
    // A workspace may not allow: named as not taken, never listed as a rule.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("ignored:") && l.contains("bash(rm:*)")),
        "{stdout}"
    );
    assert!(
        !stdout.lines().any(|l| l.trim_start().starts_with("allow")),
        "{stdout}"
    );
    assert!(
        stdout.contains("rules (its runs only): deny bash(make:*)"),
        "{stdout}"
    );
}

#[test]
fn agents_md_reaches_the_parent_and_every_child_and_is_bounded() {
    let f = fixture("");
    write(
        &f.ws.path().join("AGENTS.md"),
        "CANARY-7731: run `make check` before you finish.\n",
    );
    write(&f.ws.path().join("CLAUDE.md"), "CLAUDE-ONLY-CANARY\n");
    write(
        &f.home.path().join(".config/brood/AGENTS.md"),
        "USER-CANARY: answer in English.\n",
    );
    let server = delegating_server(&["explore", "review"]);
    let out = run(&f, &server, "delegate");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let reqs = server.captured();
    let parent = reqs.iter().find(|r| !is_child(r)).unwrap();
    let kids: Vec<&MockRequest> = reqs.iter().filter(|r| is_child(r)).collect();
    assert_eq!(kids.len(), 2);
    for r in std::iter::once(parent).chain(kids.iter().copied()) {
        let sys = system_prompt(r);
        assert!(
            sys.contains("CANARY-7731") && sys.contains("USER-CANARY"),
            "{sys}"
        );
        assert!(
            !sys.contains("CLAUDE-ONLY-CANARY"),
            "AGENTS.md wins over CLAUDE.md"
        );
        // The same block ends every prompt, so siblings' prefixes stay identical.
        assert!(sys.trim_end().ends_with("before you finish."), "{sys}");
    }

    // Recorded in the ledger as the files used.
    let export = f
        .command()
        .args(["agents", "export", "--json"])
        .output()
        .unwrap();
    let export = String::from_utf8_lossy(&export.stdout);
    assert!(
        export.contains("\"instructions\"") && export.contains("AGENTS.md"),
        "{export}"
    );

    // Past the bound the rest is cut, with a note the model sees.
    let big = fixture("");
    let mut body = String::from("BIG-START\n");
    body.push_str(&"x".repeat(40 * 1024));
    body.push_str("\nBIG-END-CANARY\n");
    write(&big.ws.path().join("AGENTS.md"), &body);
    let server = MockServer::start(|_| Answer::text("ok").into());
    let out = run(&big, &server, "hi");
    assert_eq!(out.status.code(), Some(0));
    let sys = system_prompt(&server.captured()[0]);
    assert!(sys.contains("BIG-START") && !sys.contains("BIG-END-CANARY"));
    assert!(
        sys.contains("more bytes of") && sys.contains("bounded to 32768 bytes"),
        "{}",
        &sys[sys.len().saturating_sub(400)..]
    );
}

/// Run from a subdirectory of the workspace, brood reads the `AGENTS.md` of every
/// directory from the root down to it (root first, the nearest last), and
/// `instructions_max_bytes` bounds them all (0: none).
#[test]
fn nested_agents_md_files_are_read_down_to_the_working_directory_and_bounded_by_config() {
    let f = fixture("");
    write(&f.ws.path().join("AGENTS.md"), "ROOT-CANARY\n");
    write(&f.ws.path().join("svc/CLAUDE.md"), "SVC-CANARY\n");
    write(&f.ws.path().join("svc/api/AGENTS.md"), "API-CANARY\n");
    write(&f.ws.path().join("other/AGENTS.md"), "OTHER-CANARY\n");
    let server = MockServer::start(|_| Answer::text("ok").into());
    let out = f
        .command()
        .current_dir(f.ws.path().join("svc/api"))
        .args(["run", "--workspace"])
        .arg(f.ws.path())
        .args(["--json", "--provider", "local", "--base-url"])
        .arg(server.base_url())
        .args(["--model", "main-model", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sys = system_prompt(&server.captured()[0]);
    let at = |c: &str| sys.find(c).unwrap_or_else(|| panic!("{c} missing: {sys}"));
    assert!(at("ROOT-CANARY") < at("SVC-CANARY") && at("SVC-CANARY") < at("API-CANARY"));
    assert!(
        !sys.contains("OTHER-CANARY"),
        "a sibling directory is not on the path"
    );

    // The bound is the user's to set; 0 reads none.
    let small = fixture("instructions_max_bytes = 0\n");
    write(&small.ws.path().join("AGENTS.md"), "ROOT-CANARY\n");
    let server = MockServer::start(|_| Answer::text("ok").into());
    let out = run(&small, &server, "hi");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert!(!system_prompt(&server.captured()[0]).contains("ROOT-CANARY"));
    // Past the largest accepted value: a config error naming the key.
    let bad = fixture("instructions_max_bytes = 999999999\n");
    let out = run(&bad, &server, "hi");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("instructions_max_bytes"),
        "{}",
        text(&out).1
    );
}

#[test]
fn a_symlinked_agents_md_pointing_outside_is_not_read() {
    let f = fixture("");
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret.txt"), "OUTSIDE-SECRET\n");
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        f.ws.path().join("AGENTS.md"),
    )
    .unwrap();
    let server = MockServer::start(|_| Answer::text("ok").into());
    let out = run(&f, &server, "hi");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!system_prompt(&server.captured()[0]).contains("OUTSIDE-SECRET"));
    assert!(
        stderr.contains("AGENTS.md") && stderr.contains("symlink"),
        "{stderr}"
    );
}
