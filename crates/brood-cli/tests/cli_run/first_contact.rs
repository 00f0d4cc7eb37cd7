//! What a newcomer runs first, through the real binary: `brood doctor` (against
//! the mock server, with and without the key) and `brood config show` as the truth
//! (defaults, sources, the resolved endpoint, range errors shared with `run`, clamps).

use brood_mock::{MockReply, MockServer};
use std::path::Path;

use crate::common::Fixture;

const KEY: &str = "sk-doctor-never-printed";

/// `--provider openai --base-url <mock> --api-key-env MOCK_KEY --model MODEL`.
fn provider_flags(base: &str, model: &str) -> Vec<String> {
    [
        "--provider",
        "openai",
        "--base-url",
        base,
        "--api-key-env",
        "MOCK_KEY",
        "--model",
        model,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn line<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{stdout}"))
}

fn mock() -> MockServer {
    let s = MockServer::start(|_| MockReply::text("hello from the mock"));
    s.set_models(["m", "other"]);
    s
}

#[test]
fn doctor_passes_with_the_key_and_then_a_run_starts() {
    let f = Fixture::new();
    let server = mock();
    let base = server.base_url();
    let mut args = vec!["doctor".to_string()];
    args.extend(provider_flags(&base, "m"));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = f.brood(&a, &[("MOCK_KEY", KEY)]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        line(&stdout, "✓ key").contains("MOCK_KEY is set"),
        "{stdout}"
    );
    assert!(line(&stdout, "✓ endpoint").contains("lists 2"), "{stdout}");
    assert!(
        line(&stdout, "✓ model").contains("\"m\" is served"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "✓ config").contains("no workspace file"),
        "{stdout}"
    );
    assert!(
        line(&stdout, "✓ ledger").contains("not created yet"),
        "{stdout}"
    );
    assert!(
        stdout.contains("✓ sandbox") || stdout.contains("! sandbox"),
        "{stdout}"
    );
    assert!(stdout.contains("a run would start"), "{stdout}");
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "key printed"
    );
    // Doctor wrote nothing: the ledger is created by the first run.
    assert!(!f.ws.path().join(".brood").exists());

    // What doctor approved, `run` does.
    let mut args = vec!["run".to_string()];
    args.extend(provider_flags(&base, "m"));
    args.push("say hello".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = f.brood(&a, &[("MOCK_KEY", KEY)]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("hello from the mock"), "{stdout}");
    let mut args = vec!["doctor".to_string()];
    args.extend(provider_flags(&base, "m"));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, _) = f.brood(&a, &[("MOCK_KEY", KEY)]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(line(&stdout, "✓ ledger").contains("schema v"), "{stdout}");
}

#[test]
fn doctor_without_the_key_names_the_variable_and_fails() {
    let f = Fixture::new();
    let server = mock();
    let mut args = vec!["doctor".to_string()];
    args.extend(provider_flags(&server.base_url(), "m"));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, _) = f.brood(&a, &[]);
    assert_eq!(code, Some(1), "{stdout}");
    let key = line(&stdout, "✗ key");
    assert!(
        key.contains("MOCK_KEY is not set") && key.contains("--api-key-env"),
        "{stdout}"
    );
    assert!(stdout.contains("export MOCK_KEY="), "{stdout}");
    // The route itself is still probed.
    assert!(line(&stdout, "✓ endpoint").contains("answers"), "{stdout}");
    assert!(stdout.contains("a run would not start"), "{stdout}");
    // And `run` agrees: it refuses to start.
    let mut args = vec!["run".to_string()];
    args.extend(provider_flags(&server.base_url(), "m"));
    args.push("x".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, stderr) = f.brood(&a, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("MOCK_KEY"), "{stderr}");
}

#[test]
fn doctor_names_an_unserved_model_an_unreachable_endpoint_and_a_bad_config() {
    let f = Fixture::new();
    let mut server = mock();
    let base = server.base_url();
    let run = |model: &str| {
        let mut args = vec!["doctor".to_string()];
        args.extend(provider_flags(&base, model));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        f.brood(&a, &[("MOCK_KEY", KEY)])
    };
    let (code, stdout, _) = run("gpt-nope");
    assert_eq!(code, Some(1), "{stdout}");
    let model = line(&stdout, "✗ model");
    assert!(
        model.contains("gpt-nope") && model.contains("m, other"),
        "{stdout}"
    );

    f.write(".brood/config.toml", "[subagents]\nmax_concurrent = 2000\n");
    let (code, stdout, _) = run("m");
    assert_eq!(code, Some(1), "{stdout}");
    let config = line(&stdout, "✗ config");
    assert!(
        config.contains("subagents.max_concurrent") && config.contains(".brood/config.toml"),
        "{stdout}"
    );
    // A clamped value starts the run, and doctor says what was clamped.
    f.write(".brood/config.toml", "api_timeout_secs = 5000\n");
    let (code, stdout, _) = run("m");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        line(&stdout, "! config").contains("clamped: api_timeout_secs = 5000"),
        "{stdout}"
    );
    std::fs::remove_file(f.ws.path().join(".brood/config.toml")).unwrap();

    server.stop();
    let (code, stdout, _) = run("m");
    assert_eq!(code, Some(1), "{stdout}");
    assert!(line(&stdout, "✗ endpoint").contains(&base), "{stdout}");
}

#[test]
fn config_show_resolves_the_endpoint_and_every_subagent_default_with_sources() {
    let f = Fixture::new();
    let user = f.user_config("max_attempts = 2\n[subagents]\nmax_depth = 2\n");
    f.write(".brood/config.toml", "[subagents]\nmax_total = 7\n");
    let (code, stdout, stderr) = f.brood(
        &["config", "show", "--model", "flag-model"],
        &[("BROOD_MAX_CONCURRENT", "5"), ("DEEPSEEK_API_KEY", KEY)],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let ws_file = f.ws.path().join(".brood/config.toml");
    for (want, why) in [
        (
            "base_url = \"https://api.deepseek.com\"    # preset deepseek",
            "resolved endpoint",
        ),
        ("model = \"flag-model\"    # flag --model", "flag"),
        (
            "api_key_env = \"DEEPSEEK_API_KEY\"    # preset deepseek",
            "key variable",
        ),
        (
            &format!("max_attempts = 2    # user file {}", user.display()),
            "user file",
        ),
        (
            &format!("subagents.max_depth = 2    # user file {}", user.display()),
            "user file",
        ),
        (
            &format!(
                "subagents.max_total = 7    # workspace file {}",
                ws_file.display()
            ),
            "workspace file",
        ),
        (
            "subagents.max_concurrent = 5    # env BROOD_MAX_CONCURRENT",
            "env",
        ),
        (
            "subagents.launch_concurrency = 5    # default",
            "derived default",
        ),
        (
            "subagents.wall_time_secs = 1800    # default",
            "subagent default",
        ),
        (
            "subagents.context_cap_bytes = 4096    # default",
            "subagent default",
        ),
        ("memory.enabled = false    # default", "memory"),
        ("# role explore: max_turns 20 (role default)", "role"),
        ("# role implementer: max_turns 50 (role default)", "role"),
    ] {
        assert!(stdout.contains(want), "{why}: no {want:?} in\n{stdout}");
    }
    assert!(!stdout.contains("(preset)"), "{stdout}");
    assert!(
        !stdout.contains(KEY) && !stdout.contains("<redacted>"),
        "{stdout}"
    );
}

#[test]
fn config_show_refuses_what_run_refuses_naming_file_and_key_and_reports_clamps() {
    let f = Fixture::new();
    f.write(".brood/config.toml", "[subagents]\nmax_concurrent = 2000\n");
    let (code, _, show_err) = f.brood(&["config", "show"], &[]);
    assert_eq!(code, Some(2), "{show_err}");
    let file = f.ws.path().join(".brood/config.toml");
    assert!(
        show_err.contains(&file.display().to_string())
            && show_err.contains("subagents.max_concurrent")
            && show_err.contains("1 to 1024"),
        "{show_err}"
    );
    let (code, _, run_err) = f.brood(&["run", "--provider", "local", "--model", "m", "x"], &[]);
    assert_eq!(code, Some(2), "{run_err}");
    assert_eq!(run_err.trim(), show_err.trim(), "one validation path");

    // A clamped value is accepted and reported where it is clamped.
    f.write(
        ".brood/config.toml",
        "api_timeout_secs = 5000\n[subagents]\nheartbeat_timeout_secs = 5\n",
    );
    let (code, stdout, stderr) = f.brood(&["config", "show"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("api_timeout_secs = 1800    # workspace file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("# clamped: api_timeout_secs = 5000") && stdout.contains("clamped to 1800"),
        "{stdout}"
    );
    assert!(
        stdout.contains("# clamped: subagents.heartbeat_timeout_secs = 5 clamped to 30"),
        "{stdout}"
    );
    let server = MockServer::start(|_| MockReply::text("done"));
    let base = server.base_url();
    let (code, _, stderr) = f.brood(
        &[
            "run",
            "--provider",
            "local",
            "--base-url",
            &base,
            "--model",
            "m",
            "x",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("note: api_timeout_secs = 5000") && stderr.contains("clamped to 1800"),
        "{stderr}"
    );
}

/// `brood run --json --record FILE` with the server up, then `--replay FILE` with it
/// gone: the same final answer, turns and tool calls. Returns both reports.
fn record_then_replay(
    f: &Fixture,
    server: &mut MockServer,
    prompt: &str,
) -> (serde_json::Value, serde_json::Value, std::path::PathBuf) {
    let rec = f.home.path().join("tree.jsonl");
    let base = server.base_url();
    let common = [
        "--provider",
        "local",
        "--base-url",
        &base,
        "--model",
        "m",
        "--json",
    ];
    let mut a: Vec<&str> = vec!["run"];
    a.extend(common);
    let rec_s = rec.to_str().unwrap().to_string();
    a.extend(["--record", &rec_s, prompt]);
    let (code, stdout, stderr) = f.brood(&a, &[]);
    assert_eq!(code, Some(0), "record: {stderr}");
    let recorded: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let lines = std::fs::read_to_string(&rec).unwrap().lines().count();
    assert_eq!(
        lines,
        server.request_count(),
        "every step of the tree recorded once"
    );
    server.stop();
    let mut a: Vec<&str> = vec!["run"];
    a.extend(common);
    a.extend(["--replay", &rec_s, prompt]);
    let (code, stdout, stderr) = f.brood(&a, &[]);
    assert_eq!(code, Some(0), "replay: {stderr}");
    let replayed: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for k in ["final", "turns", "tool_calls"] {
        assert_eq!(replayed[k], recorded[k], "{k}: {recorded} vs {replayed}");
    }
    assert_eq!(
        replayed["usage"]["requests"], recorded["usage"]["requests"],
        "every recorded step answered once"
    );
    (recorded, replayed, rec)
}

fn is_child(req: &brood_mock::MockRequest, prefix: &str) -> bool {
    req.first_user_text().is_some_and(|t| t.starts_with(prefix))
}

#[test]
fn a_fan_out_of_three_replays_whatever_the_order() {
    let f = Fixture::new();
    f.write("notes.txt", "alpha\n");
    let mut server = MockServer::start(|req| {
        if is_child(req, "child ") {
            // Each child reads a file first, so children interleave their steps.
            return match req.assistant_turns() {
                0 => MockReply::tool_call("read_file", serde_json::json!({"path": "notes.txt"})),
                _ => MockReply::text(format!(
                    "SUMMARY: {} read notes.txt",
                    req.first_user_text().unwrap_or_default()
                )),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call(
                "task",
                serde_json::json!({"prompts": ["child one", "child two", "child three"]}),
            ),
            _ => MockReply::text("all three done"),
        }
    });
    let (recorded, _, _) = record_then_replay(&f, &mut server, "fan out");
    assert_eq!(recorded["final"], "all three done");
    // The parent's two steps, and three per child (the last one completes its report).
    assert_eq!(recorded["usage"]["requests"], 11, "{recorded}");
}

#[test]
fn a_nested_delegation_replays() {
    let f = Fixture::new();
    let mut server = MockServer::start(|req| {
        let task = req.first_user_text().unwrap_or_default().to_string();
        let turns = req.assistant_turns();
        if task.starts_with("grandchild") {
            return MockReply::text("SUMMARY: the grandchild looked");
        }
        if task.starts_with("child outer") {
            return match turns {
                0 => MockReply::tool_call(
                    "task",
                    serde_json::json!({"prompts": ["grandchild look"]}),
                ),
                _ => MockReply::text("SUMMARY: the child delegated"),
            };
        }
        match turns {
            0 => MockReply::tool_call("task", serde_json::json!({"prompts": ["child outer"]})),
            _ => MockReply::text("nested done"),
        }
    });
    let (recorded, _, rec) = record_then_replay(&f, &mut server, "nest");
    assert_eq!(recorded["final"], "nested done");
    // The grandchild's result carried its run id into the child's request.
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(
        text.contains("grandchild look"),
        "no grandchild in the recording: {text}"
    );

    // A recording that does not fit names the agent, its step and the field.
    let changed = text.replacen(
        "SUMMARY: the grandchild looked",
        "SUMMARY: something else",
        1,
    );
    let edited = f.home.path().join("edited.jsonl");
    std::fs::write(&edited, changed).unwrap();
    let base = "http://127.0.0.1:9";
    let (code, _, stderr) = f.brood(
        &[
            "run",
            "--provider",
            "local",
            "--base-url",
            base,
            "--model",
            "m",
            "--replay",
            edited.to_str().unwrap(),
            "nest",
        ],
        &[],
    );
    assert_eq!(code, Some(3), "{stderr}");
    // The child whose step does not fit fails naming itself, its step and the field;
    // the parent then fails on that child's different result.
    let errors = failed_run_errors(&f);
    assert!(
        errors.iter().any(
            |e| e.contains("general child with task \"child outer\", step 2")
                && e.contains("messages[")
                && e.contains("something else")
        ),
        "{errors:?}\n{stderr}"
    );
}

/// The `error` of every failed run in the workspace's ledger.
fn failed_run_errors(f: &Fixture) -> Vec<String> {
    let runs = f.runs();
    runs.iter()
        .filter(|r| r["status"] == "failed")
        .filter_map(|r| {
            let id = r["id"].as_str().or_else(|| r["run_id"].as_str())?;
            let (_, out, _) = f.brood(&["agents", "show", id, "--json"], &[]);
            let d: serde_json::Value = serde_json::from_str(out.trim()).ok()?;
            let e = d["error"].as_str().or_else(|| d["run"]["error"].as_str())?;
            Some(e.to_string())
        })
        .collect()
}

#[test]
fn a_failing_child_and_a_background_child_waited_on_by_id_replay() {
    let f = Fixture::new();
    let mut server = MockServer::start(|req| {
        let task = req.first_user_text().unwrap_or_default().to_string();
        if task.starts_with("child doomed") {
            return MockReply::status(400, "bad request: the model refuses this child");
        }
        if task.starts_with("child background") {
            return MockReply::text("SUMMARY: background work done");
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call(
                "agent_open",
                serde_json::json!({"prompt": "child background"}),
            ),
            1 => {
                // Wait on the child by the id this run issued.
                let result = req
                    .last_message()
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or("");
                let v: serde_json::Value = serde_json::from_str(result).unwrap_or_default();
                let id = v["agent_id"].as_str().unwrap_or("no-id").to_string();
                MockReply::tool_call(
                    "agent_eval",
                    serde_json::json!({"agent_id": id, "timeout_ms": 60000}),
                )
            }
            2 => MockReply::tool_call("task", serde_json::json!({"prompts": ["child doomed"]})),
            _ => MockReply::text("one child failed, one finished"),
        }
    });
    let (recorded, replayed, rec) = record_then_replay(&f, &mut server, "mixed");
    assert_eq!(recorded["final"], "one child failed, one finished");
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(
        text.contains("\"error\""),
        "the failed step is recorded as an error: {text}"
    );
    // The replayed wait named the replay's child, not the recorded one: it found
    // it settled (a wrong id would be an error result and a different request).
    assert_ne!(recorded["run_id"], replayed["run_id"]);
    // The doomed child failed in both runs, with the same recorded error.
    let errors = failed_run_errors(&f);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("the model refuses this child")),
        "{errors:?}"
    );
}

/// The scripted model behind README's *First run*: the parent fans out two
/// `explore` children, each greps and reports with evidence, the parent answers.
fn readme_demo_server() -> MockServer {
    use brood_mock::Answer;
    use serde_json::json;
    let server = MockServer::start(|req| {
        let task = req.first_user_text().unwrap_or_default().to_string();
        let turns = req.assistant_turns();
        let usage = json!({"prompt_tokens": 1200 + 300 * turns as u64, "completion_tokens": 90});
        let answer = if task.starts_with("Find where config files") {
            match turns {
                0 => Answer::new().tool_call(
                    "grep",
                    json!({"pattern": "toml::from_str|parse_config", "path": "src"}),
                ),
                _ => Answer::text(
                    "SUMMARY: Config files are parsed in one place: `parse_config` reads the file and deserializes it with toml.\nCHANGES: none\nEVIDENCE: src/config.rs:5-8 parse_config reads and parses the file\nRISKS: none\nBLOCKERS: none",
                ),
            }
        } else if task.starts_with("Find where environment") {
            match turns {
                0 => Answer::new().tool_call("grep", json!({"pattern": "env::var", "path": "src"})),
                _ => Answer::text(
                    "SUMMARY: Two environment variables override the file: APP_PORT and APP_LOG.\nCHANGES: none\nEVIDENCE: src/main.rs:5-6 env::var reads APP_PORT and APP_LOG\nRISKS: an unparsable APP_PORT is ignored silently\nBLOCKERS: none",
                ),
            }
        } else {
            match turns {
                0 => Answer::new().tool_call(
                    "task",
                    json!({
                        "agent_type": "explore",
                        "prompts": [
                            "Find where config files are parsed; cite path:line.",
                            "Find where environment variables override config; cite path:line."
                        ]
                    }),
                ),
                _ => Answer::text(
                    "Config is parsed in one place, `parse_config` (src/config.rs:5-8), which reads the file and deserializes it with toml. Two environment variables then override it in src/main.rs:5-6: APP_PORT and APP_LOG (an unparsable APP_PORT is silently ignored).",
                ),
            }
        };
        answer.usage(usage).into()
    });
    server.set_models(["deepseek-chat"]);
    server
}

/// README's *First run* output, block by block (the ```text blocks of the section).
fn readme_first_run_blocks() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let start = readme
        .find("## First run")
        .expect("README has a First run section");
    let end = start
        + readme[start..]
            .find("\n## How it works")
            .expect("then How it works");
    readme[start..end]
        .split("```text\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or_default().to_string())
        .collect()
}

/// Output as compared: ids, the port, durations, ages and column padding made equal.
fn comparable(text: &str, ws: &Path, home: &Path) -> Vec<String> {
    let text = text
        .replace(&ws.display().to_string(), "/tmp/demo")
        .replace(&home.display().to_string(), "/root");
    text.lines()
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    // Run ids, printed as their shortest unique prefix (8 or more).
                    let hexy = w.len() >= 8
                        && w.chars().all(|c| c.is_ascii_hexdigit())
                        && w.chars().any(|c| c.is_ascii_digit());
                    let w = if hexy { "<id>" } else { w };
                    match w.find("127.0.0.1:") {
                        Some(i) => {
                            let rest: String = w[i + 10..]
                                .chars()
                                .skip_while(char::is_ascii_digit)
                                .collect();
                            format!("{}127.0.0.1:<port>{rest}", &w[..i])
                        }
                        None if w.ends_with('s')
                            && w[..w.len() - 1].chars().all(|c| c.is_ascii_digit())
                            && !w.is_empty()
                            && w.len() > 1 =>
                        {
                            "<age>".into()
                        }
                        None if w.starts_with('(')
                            && w[1..].chars().all(|c| c.is_ascii_digit()) =>
                        {
                            "(<n>".into()
                        }
                        None => w.to_string(),
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|l| !l.is_empty())
        // What the sandbox gets depends on the kernel (and on privileges): the
        // README shows one machine's line; here only that there is one.
        .map(|l| {
            if l.starts_with("✓ sandbox:") || l.starts_with("! sandbox:") {
                "<the sandbox on this kernel>".to_string()
            } else {
                l
            }
        })
        .fold(Vec::new(), |mut v: Vec<String>, l| {
            if v.last() != Some(&l) {
                v.push(l);
            }
            v
        })
}

#[test]
fn the_readme_first_run_shows_real_output() {
    let f = Fixture::new();
    f.write(
        "src/config.rs",
        "use serde::Deserialize;\n\n#[derive(Deserialize)]\npub struct Config { pub port: u16, pub log: String }\npub fn parse_config(path: &str) -> Config {\n    let text = std::fs::read_to_string(path).expect(\"config\");\n    toml::from_str(&text).expect(\"valid config\")\n}\n",
    );
    f.write(
        "src/main.rs",
        "mod config;\n\nfn main() {\n    let mut c = config::parse_config(\"app.toml\");\n    if let Ok(p) = std::env::var(\"APP_PORT\") { if let Ok(p) = p.parse() { c.port = p; } }\n    if let Ok(l) = std::env::var(\"APP_LOG\") { c.log = l; }\n    println!(\"{}:{}\", c.port, c.log);\n}\n",
    );
    let server = readme_demo_server();
    let base = server.base_url();
    let blocks = readme_first_run_blocks();
    assert_eq!(
        blocks.len(),
        3,
        "doctor+run, the children's results, the tree"
    );
    let env = [("DEEPSEEK_API_KEY", KEY)];
    // Each `$ brood …` line, run for real, gives the lines below it.
    let mut got = String::new();
    for cmd in blocks[0]
        .lines()
        .chain(blocks[2].lines())
        .filter_map(|l| l.strip_prefix("$ brood "))
    {
        let mut args: Vec<String> = Vec::new();
        let (head, prompt) = match cmd.split_once(" \"") {
            Some((h, p)) => (h, Some(p.trim_end_matches('"'))),
            None => (cmd, None),
        };
        for w in head.split_whitespace() {
            args.push(if w.starts_with("http://127.0.0.1:") {
                base.clone()
            } else {
                w.to_string()
            });
        }
        args.extend(prompt.map(str::to_string));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = f.brood(&a, &env);
        assert_eq!(code, Some(0), "brood {cmd}: {stderr}");
        got.push_str(&format!("$ brood {cmd}\n{stderr}{stdout}\n"));
    }
    let want = format!("{}{}", blocks[0], blocks[2]);
    assert_eq!(
        comparable(&got, f.ws.path(), f.home.path()),
        comparable(&want, f.ws.path(), f.home.path()),
        "README's First run output is no longer what brood prints; paste this:\n{got}"
    );
    // The children's reports as the parent got them.
    let (_, list, _) = f.brood(&["agents", "list", "--json"], &[]);
    let runs: serde_json::Value = serde_json::from_str(list.trim()).unwrap();
    let runs = runs
        .as_array()
        .or_else(|| runs["runs"].as_array())
        .cloned()
        .unwrap_or_default();
    let parent = runs
        .iter()
        .find(|r| r["role"] == "parent")
        .and_then(|r| r["id"].as_str().or_else(|| r["run_id"].as_str()))
        .expect("the parent run")
        .to_string();
    let (_, t, _) = f.brood(&["agents", "transcript", &parent, "--json"], &[]);
    let t: serde_json::Value = serde_json::from_str(t.trim()).unwrap();
    let tool = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["role"] == "tool")
        .expect("the task result");
    let results: serde_json::Value =
        serde_json::from_str(tool["content"]["content"].as_str().unwrap()).unwrap();
    let reports: Vec<String> = results["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["result"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        comparable(&reports.join("\n\n"), f.ws.path(), f.home.path()),
        comparable(&blocks[1], f.ws.path(), f.home.path()),
        "README's children's reports are no longer what brood hands the parent; paste:\n{}",
        reports.join("\n\n")
    );
}
