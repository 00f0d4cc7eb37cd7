//! `brood run` end to end: the real binary against an in-process OpenAI-compatible
//! server. Output shape, streaming, exit codes, record/replay with the server gone.

use brood_mock::{MockReply, MockServer};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

#[path = "cli_run/degraded.rs"]
mod degraded;

#[path = "cli_run/chat.rs"]
mod chat;

#[path = "cli_run/chat_ui.rs"]
mod chat_ui;

/// Run the brood binary with a clean, isolated environment.
fn brood(home: &Path, ws: &Path, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    let mut cmd = brood_command(&[], home, ws);
    cmd.args(args);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().expect("run brood")
}

/// The brood binary, run through `wrapper` (e.g. `setpriv …` to drop root) when
/// given, in `ws` with only `HOME` and `PATH` set.
fn brood_command(wrapper: &[&str], home: &Path, ws: &Path) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(env!("CARGO_BIN_EXE_brood"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_brood")),
    };
    cmd.current_dir(ws)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd
}

/// `brood run --provider local --base-url <server> --model m ARGS…`.
fn run_local(f: &Fixture, server: &MockServer, args: &[&str]) -> Output {
    let base = server.base_url();
    let mut all = vec![
        "run",
        "--provider",
        "local",
        "--base-url",
        &base,
        "--model",
        "m",
    ];
    all.extend_from_slice(args);
    brood(f.home.path(), f.ws.path(), &all, &[])
}

struct Fixture {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let f = Fixture {
        home: tempfile::tempdir().unwrap(),
        ws: tempfile::tempdir().unwrap(),
    };
    std::fs::write(f.ws.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    f
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Answers: step 0 lists the directory, step 1 answers.
fn two_step_server() -> MockServer {
    MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::tool_call("list_dir", json!({})),
        _ => MockReply::text("the workspace has notes.txt"),
    })
}

#[test]
fn json_output_is_one_object_with_the_documented_fields() {
    let f = fixture();
    let server = two_step_server();
    let out = run_local(&f, &server, &["--json", "what is here?"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "stdout must be exactly one JSON object: {stdout}"
    );
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["final"], "the workspace has notes.txt");
    assert_eq!(v["turns"], 2);
    assert_eq!(v["tool_calls"], 1);
    assert!(v["run_id"].as_str().is_some_and(|s| !s.is_empty()));
    for k in ["input_tokens", "output_tokens", "cached_input_tokens"] {
        assert!(v["usage"][k].is_u64(), "usage.{k} missing: {v}");
    }
    // Tool activity goes to stderr, one line per call.
    assert!(
        stderr.contains("[tool] list_dir") && stderr.contains(" ok "),
        "{stderr}"
    );
}

/// `usage` is the whole tree's (the parent and its three children: every token and
/// request the mock answered) and `parent_usage` the parent's own.
#[test]
fn json_usage_counts_the_whole_tree_and_the_parent_apart() {
    use std::sync::{Arc, Mutex};
    let f = fixture();
    // (input, cached, output, requests) answered: to everyone, to the parent.
    let sums: Arc<Mutex<[[u64; 4]; 2]>> = Arc::default();
    let sums2 = sums.clone();
    let server = MockServer::start(move |req| {
        let mut s = sums2.lock().unwrap();
        // Distinct counts per answer so a missed or doubled one shows.
        let n = s[0][3] + 1;
        let (input, cached, output) = (100 * n + 7, 10 * n, n + 3);
        let is_child = req
            .first_user_text()
            .is_some_and(|t| t.starts_with("child "));
        for (i, add) in [input, cached, output, 1].into_iter().enumerate() {
            s[0][i] += add;
            if !is_child {
                s[1][i] += add;
            }
        }
        let answer = if is_child {
            brood_mock::Answer::text("SUMMARY: looked")
        } else {
            match req.assistant_turns() {
                0 => brood_mock::Answer::new().tool_call(
                    "task",
                    json!({"prompts": ["child one", "child two", "child three"]}),
                ),
                _ => brood_mock::Answer::text("done"),
            }
        };
        answer
            .usage(json!({
                "prompt_tokens": input,
                "completion_tokens": output,
                "prompt_tokens_details": {"cached_tokens": cached}
            }))
            .into()
    });
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let s = *sums.lock().unwrap();
    assert!(
        s[0][3] >= 5,
        "parent 2 + children 3 requests at least: {s:?}"
    );
    assert_eq!(server.request_count() as u64, s[0][3]);
    for (key, want) in [("usage", s[0]), ("parent_usage", s[1])] {
        let u = &v[key];
        let got = [
            u["input_tokens"].as_u64(),
            u["cached_input_tokens"].as_u64(),
            u["output_tokens"].as_u64(),
            u["requests"].as_u64(),
        ];
        assert_eq!(got, want.map(Some), "{key}: {v}");
    }
    assert!(
        s[1][3] < s[0][3],
        "the parent's own figures are not the tree's"
    );
}

#[test]
fn streaming_prints_the_answer_to_stdout() {
    let f = fixture();
    let server = two_step_server();
    let out = run_local(&f, &server, &["hi"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(stdout.contains("the workspace has notes.txt"), "{stdout}");
    assert!(
        !stdout.contains("[tool]"),
        "tool lines belong on stderr: {stdout}"
    );
}

#[test]
fn usage_and_config_errors_exit_2_with_a_clear_message() {
    let f = fixture();
    // Unknown flag.
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["run", "--no-such-flag", "x"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    // Missing API key names the variable.
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["run", "--provider", "deepseek", "x"],
        &[],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("DEEPSEEK_API_KEY"), "{stderr}");
    // Unknown provider lists the presets.
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["run", "--provider", "nosuch", "x"],
        &[],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("nosuch") && stderr.contains("openrouter"),
        "{stderr}"
    );
    // A bad config file names the key and the file.
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(f.ws.path().join(".brood/config.toml"), "max_turnz = 3\n").unwrap();
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["run", "--provider", "local", "--model", "m", "x"],
        &[],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("max_turnz") && stderr.contains("config.toml"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn an_unreachable_endpoint_fails_with_exit_1_naming_the_url() {
    let f = fixture();
    // Bind then drop a listener: the port is free and refuses connections.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(f.ws.path().join(".brood/config.toml"), "max_attempts = 2\n").unwrap();
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &[
            "run",
            "--provider",
            "local",
            "--base-url",
            &url,
            "--model",
            "m",
            "x",
        ],
        &[],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn record_then_replay_without_the_server() {
    let f = fixture();
    let rec = f.home.path().join("run.jsonl");
    let rec_s = rec.to_str().unwrap();
    let mut server = two_step_server();
    let base = server.base_url();
    let args = |extra: &[&str]| {
        let mut v = vec![
            "run",
            "--provider",
            "local",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
        ];
        v.extend_from_slice(extra);
        v.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let a = args(&["--record", rec_s, "what is here?"]);
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let recorded: Value = serde_json::from_str(stdout.trim()).unwrap();
    server.stop();

    let a = args(&["--replay", rec_s, "what is here?"]);
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let replayed: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(replayed["final"], recorded["final"]);
    assert_eq!(replayed["turns"], recorded["turns"]);

    // A different prompt is not in the recording: a clear error naming the request.
    let a = args(&["--replay", rec_s, "something else"]);
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("replay") && stderr.contains("something else"),
        "{stderr}"
    );
}

#[test]
fn config_show_prints_values_with_their_sources() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "model = \"ws-model\"\n",
    )
    .unwrap();
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["config", "show", "--provider", "openai"],
        &[("BROOD_MAX_TURNS", "7")],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("provider = \"openai\"    # flag --provider"),
        "{stdout}"
    );
    assert!(
        stdout.contains("model = \"ws-model\"") && stdout.contains(".brood/config.toml"),
        "{stdout}"
    );
    assert!(
        stdout.contains("max_turns = 7    # env BROOD_MAX_TURNS"),
        "{stdout}"
    );
    assert!(
        stdout.contains("api_timeout_secs = 120    # default"),
        "{stdout}"
    );
}

#[test]
fn a_run_is_recorded_and_inspectable_with_brood_agents() {
    let f = fixture();
    let server = two_step_server();
    let out = run_local(&f, &server, &["--json", "what is here?"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let run_id = serde_json::from_str::<Value>(stdout.trim()).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();

    // The run belongs to a session that has ended: it shows with --all.
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--all", "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Value = serde_json::from_str(&stdout).unwrap();
    let run = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == run_id.as_str())
        .expect("run listed");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps"], 2, "{run}");
    assert_eq!(run["objective"], "what is here?");
    // Listings leave results out; `show` has them.
    assert!(run["result"].is_null(), "{run}");

    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "show", &run_id[..12], "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let detail: Value = serde_json::from_str(&stdout).unwrap();
    assert!(detail["result"].is_object(), "{detail}");
    let kinds: Vec<&str> = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    for k in [
        "spawned",
        "started",
        "model_request",
        "model_response",
        "tool_started",
        "tool_finished",
        "completed",
    ] {
        assert!(kinds.contains(&k), "missing {k} in {kinds:?}");
    }

    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "transcript", &run_id, "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let slice: Value = serde_json::from_str(&stdout).unwrap();
    let roles: Vec<&str> = slice["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"], "{slice}");
}

#[test]
fn a_model_driven_shell_never_sees_api_keys() {
    // Variables pass into a shell only by the allow list: the key never, an
    // ordinary variable only once the user's `[sandbox] env_allow` names it.
    for allowed in [false, true] {
        let f = fixture();
        if allowed {
            let dir = f.home.path().join(".config/brood");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("config.toml"),
                "[sandbox]\nenv_allow = [\"PLAIN_*\", \"DEEPSEEK_API_KEY\"]\n",
            )
            .unwrap();
        }
        let server = MockServer::start(|req| match req.assistant_turns() {
            0 => MockReply::tool_call(
                "bash",
                json!({"command": "echo key=[$DEEPSEEK_API_KEY] token=[$GH_TOKEN] other=[$PLAIN_VAR]"}),
            ),
            _ => MockReply::text("done"),
        });
        let out = brood(
            f.home.path(),
            f.ws.path(),
            &[
                "run",
                "--provider",
                "deepseek",
                "--base-url",
                &server.base_url(),
                "--json",
                "x",
            ],
            &[
                ("DEEPSEEK_API_KEY", "sk-very-secret"),
                ("GH_TOKEN", "gh-secret"),
                ("PLAIN_VAR", "visible"),
            ],
        );
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let bodies = server.requests();
        let second = serde_json::to_string(&bodies[1]).unwrap();
        assert!(
            second.contains("key=[] token=[]"),
            "no key or token reaches the shell: {second}"
        );
        let other = if allowed {
            "other=[visible]"
        } else {
            "other=[]"
        };
        assert!(second.contains(other), "allow list ({allowed}): {second}");
        assert!(!second.contains("sk-very-secret"));
    }
}

/// A ledger row whose counts are odd (a REAL, a negative, text — as an older brood or a
/// crafted file could leave them) never fails a listing: list, show and export all
/// succeed, and `show` names the unknown fields.
#[test]
fn odd_ledger_rows_are_listed_with_the_field_unknown() {
    let f = fixture();
    let server = two_step_server();
    let out = run_local(&f, &server, &["--json", "what is here?"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let run_id = serde_json::from_str::<Value>(stdout.trim()).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let db = f.ws.path().join(".brood/state/brood.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "UPDATE runs SET input_tokens = 1.0e19, output_tokens = -2, steps = 'x' WHERE id = ?1",
        [run_id.as_str()],
    )
    .unwrap();
    drop(conn);

    for args in [
        &["agents", "list", "--all", "--json"][..],
        &["agents", "list", "--all"][..],
        &["agents", "export", "--json"][..],
        &["agents", "show", &run_id][..],
    ] {
        let out = brood(f.home.path(), f.ws.path(), args, &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stdout.contains(&run_id[..8]), "{args:?}: {stdout}");
    }
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "show", &run_id, "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let detail: Value = serde_json::from_str(&stdout).unwrap();
    let notes = detail["notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 3, "{detail}");
    assert_eq!(detail["output_tokens"], 0, "{detail}");
}

#[test]
fn config_show_prints_token_counts_and_key_variable_names() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "max_tokens = 128\napi_key_env = \"MY_KEY_VAR\"\n[subagents]\ntoken_budget = 5000\n",
    )
    .unwrap();
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["config", "show"],
        &[("MY_KEY_VAR", "sk-never-printed")],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("max_tokens = 128"), "{stdout}");
    assert!(stdout.contains("subagents.token_budget = 5000"), "{stdout}");
    assert!(stdout.contains("api_key_env = \"MY_KEY_VAR\""), "{stdout}");
    assert!(!stdout.contains("<redacted>"), "{stdout}");
    assert!(!stdout.contains("sk-never-printed") && !stderr.contains("sk-never-printed"));
}

#[test]
fn completions_for_every_shell_and_a_man_page() {
    let f = fixture();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = brood(f.home.path(), f.ws.path(), &["completions", shell], &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{shell}: {stderr}");
        assert!(stdout.contains("agents"), "{shell}: {stdout}");
    }
    let out = brood(f.home.path(), f.ws.path(), &["completions", "tcsh"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = brood(f.home.path(), f.ws.path(), &["man"], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains(".TH"), "{stdout}");
    assert!(
        stdout.contains("completions") && stdout.contains("agents"),
        "{stdout}"
    );
}

#[test]
fn config_show_prints_the_sandbox_each_role_gets() {
    let f = fixture();
    let out = brood(f.home.path(), f.ws.path(), &["config", "show"], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let line = |role: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("# {role}")))
            .unwrap_or_else(|| panic!("no line for {role}: {stdout}"))
            .to_string()
    };
    let ro = line("explore, plan");
    assert!(
        ro.contains("landlock ABI v") && ro.contains("network none"),
        "{ro}"
    );
    assert!(ro.contains("writes private tmp"), "{ro}");
    let w = line("parent, general");
    assert!(w.contains(".git/hooks") && w.contains("+net"), "{w}");
    assert!(line("review").ends_with("no shell"));
    // A definition's network: false is shown where the user grants network; its
    // network: true where the user does not.
    let agents = f.ws.path().join(".brood/agents");
    std::fs::create_dir_all(&agents).unwrap();
    for (name, network) in [("offline", false), ("online", true)] {
        std::fs::write(
            agents.join(format!("{name}.md")),
            format!("---\ndescription: d\nrole: implementer\nnetwork: {network}\n---\nGo.\n"),
        )
        .unwrap();
    }
    let user_dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&user_dir).unwrap();
    for (user_network, shown, hidden) in [(true, "offline", "online"), (false, "online", "offline")]
    {
        std::fs::write(
            user_dir.join("config.toml"),
            format!("[sandbox]\nnetwork = {user_network}\n"),
        )
        .unwrap();
        let out = brood(f.home.path(), f.ws.path(), &["config", "show"], &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let agent = |name: &str| {
            stdout
                .lines()
                .find(|l| l.starts_with(&format!("# agent {name} ")))
                .map(str::to_string)
        };
        let line = agent(shown).unwrap_or_else(|| panic!("no line for {shown}: {stdout}"));
        assert!(line.contains("network none"), "{line}");
        assert_eq!(agent(hidden), None, "{stdout}");
    }
    // A workspace may not widen what shells reach.
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[sandbox]\nnetwork = true\n",
    )
    .unwrap();
    let out = brood(f.home.path(), f.ws.path(), &["config", "show"], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[sandbox] may only be set in the user's config"),
        "{stderr}"
    );
}

/// `brood run ARGS…` against `server`, started (not waited for), stdout and stderr piped.
fn spawn_local(f: &Fixture, server: &MockServer, args: &[&str]) -> std::process::Child {
    let base = server.base_url();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_brood"));
    cmd.args([
        "run",
        "--provider",
        "local",
        "--base-url",
        &base,
        "--model",
        "m",
    ])
    .args(args)
    .current_dir(f.ws.path())
    .env_clear()
    .env("HOME", f.home.path())
    .env("PATH", std::env::var("PATH").unwrap_or_default())
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    cmd.spawn().expect("spawn brood")
}

/// Block until the mock has received `n` requests (a condition, not a delay); fails
/// the test after a minute.
fn wait_for_requests(server: &MockServer, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            server.wait_for_requests(n),
        )
        .await
        .unwrap_or_else(|_| panic!("the mock never received {n} requests"));
    });
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// Wait for `child` to exit, killing it if it takes more than a minute (so a brood
/// that ignores the signal fails the test instead of hanging it).
fn wait_bounded(child: std::process::Child) -> Output {
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .is_err()
        {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    let out = child.wait_with_output().expect("wait for brood");
    let _ = done_tx.send(());
    let _ = watchdog.join();
    out
}

/// The parent delegates one `task` whose child's request never gets an answer.
fn hanging_child_server() -> MockServer {
    MockServer::start(|req| {
        if req.first_user_text() == Some("look at notes.txt slowly") {
            return MockReply::Hang;
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"description": "look at notes.txt slowly"})),
            _ => MockReply::text("done"),
        }
    })
}

/// SIGTERM (what `timeout`, CI runners and supervisors send) is a cancellation like
/// Ctrl-C: the JSON report is printed, the exit code is 1, and the parent and its
/// child are recorded `cancelled` with a reason naming the signal.
#[test]
fn sigterm_cancels_the_run_and_its_children_and_records_why() {
    let f = fixture();
    let server = hanging_child_server();
    let child = spawn_local(&f, &server, &["--json", "delegate"]);
    // The parent's first step, then the child's request: the child is running.
    wait_for_requests(&server, 2);
    let captured = server.captured();
    assert_eq!(
        captured[1].first_user_text(),
        Some("look at notes.txt slowly"),
        "the second request must be the child's"
    );
    send_signal(child.id(), "TERM");
    let out = wait_bounded(child);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout must be the JSON report ({e}): {stdout}"));
    assert!(
        report["error"]
            .as_str()
            .is_some_and(|e| e.contains("cancelled") && e.contains("SIGTERM")),
        "{report}"
    );
    let run_id = report["run_id"].as_str().unwrap().to_string();

    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--all", "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Value = serde_json::from_str(&stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "the parent and its child: {runs:?}");
    let parent = runs.iter().find(|r| r["id"] == run_id.as_str()).unwrap();
    let kid = runs.iter().find(|r| r["id"] != run_id.as_str()).unwrap();
    assert_eq!(kid["parent_id"], run_id.as_str(), "{kid}");
    for r in [parent, kid] {
        assert_eq!(r["status"], "cancelled", "{r}");
        assert!(
            r["status_reason"]
                .as_str()
                .is_some_and(|s| s.contains("SIGTERM")),
            "{r}"
        );
    }
}

/// A brood killed outright (SIGKILL: no chance to record anything) leaves its runs
/// `running` in the ledger; `brood agents list` and `show` probe the session's boot
/// lock themselves and show them `interrupted` at once, before any later session
/// records it — and say why.
#[test]
fn a_killed_sessions_runs_are_listed_interrupted_at_once() {
    let f = fixture();
    let server = hanging_child_server();
    let mut child = spawn_local(&f, &server, &["--json", "delegate"]);
    wait_for_requests(&server, 2);
    // Still alive: the listing reads the runs as they are recorded.
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Value = serde_json::from_str(&stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    // The child's request can reach the mock before its `started` record is
    // committed (the ledger writes in batches): live runs read pending or running,
    // never interrupted.
    assert!(
        runs.iter()
            .all(|r| r["status"] == "running" || r["status"] == "pending"),
        "{runs:?}"
    );

    child.kill().expect("SIGKILL brood");
    child.wait().expect("reap brood");
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Value = serde_json::from_str(&stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in runs {
        assert_eq!(r["status"], "interrupted", "{r}");
        assert!(
            r["status_reason"]
                .as_str()
                .is_some_and(|s| s.contains("process exited")),
            "{r}"
        );
    }
    let id = runs[0]["id"].as_str().unwrap();
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "show", id, "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    let status = shown["status"].clone();
    let status = if status.is_null() {
        shown["run"]["status"].clone()
    } else {
        status
    };
    assert_eq!(status, "interrupted", "{shown}");
}

/// A reader that has gone away (`brood run … | head -c0`, a closed terminal) ends the
/// output, not the run: with stdout and stderr both connected to sockets whose other
/// end was closed before brood started, every write fails with EPIPE, and the run
/// still completes, is recorded `completed`, and exits 0.
#[test]
fn closed_stdout_and_stderr_do_not_end_the_run() {
    use std::os::unix::net::UnixStream;
    let f = fixture();
    let server = two_step_server();
    let (out_w, out_r) = UnixStream::pair().unwrap();
    let (err_w, err_r) = UnixStream::pair().unwrap();
    drop(out_r);
    drop(err_r);
    let base = server.base_url();
    let status = Command::new(env!("CARGO_BIN_EXE_brood"))
        .args([
            "run",
            "--provider",
            "local",
            "--base-url",
            &base,
            "--model",
            "m",
            "what is here?",
        ])
        .current_dir(f.ws.path())
        .env_clear()
        .env("HOME", f.home.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(out_w)))
        .stderr(std::process::Stdio::from(std::os::fd::OwnedFd::from(err_w)))
        .status()
        .expect("run brood");
    assert_eq!(status.code(), Some(0), "{status:?}");
    // Both steps were asked for: the run went on after its first failed writes.
    assert_eq!(server.request_count(), 2);

    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--all", "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Value = serde_json::from_str(&stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "completed", "{runs:?}");
    assert_eq!(runs[0]["steps"], 2, "{runs:?}");
}

/// The live tool lines tell the truth: a `task` with a failed child is not `ok`, and a
/// failed tool reads `error: …` once, not `error: error: …`.
#[test]
fn tool_lines_report_failed_children_and_errors_once() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(f.ws.path().join(".brood/config.toml"), "max_attempts = 1\n").unwrap();
    let server = MockServer::start(|req| {
        match req.first_user_text() {
            Some("child that works") => return MockReply::text("SUMMARY: fine"),
            Some("child that breaks") => return MockReply::status(400, "refused on purpose"),
            _ => {}
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call(
                "task",
                json!({"prompts": ["child that works", "child that breaks"]}),
            ),
            1 => MockReply::tool_call("read_file", json!({"path": "no-such-file.txt"})),
            _ => MockReply::text("done"),
        }
    });
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let task_line = stderr
        .lines()
        .find(|l| l.contains("[tool] task"))
        .unwrap_or_else(|| panic!("no task line: {stderr}"));
    assert!(task_line.contains("1 of 2 failed"), "{task_line}");
    assert!(!task_line.contains(" ok"), "{task_line}");
    let read_line = stderr
        .lines()
        .find(|l| l.contains("[tool] read_file"))
        .unwrap_or_else(|| panic!("no read_file line: {stderr}"));
    assert!(read_line.contains("error: "), "{read_line}");
    assert!(!read_line.contains("error: error"), "{read_line}");
}

/// As a user without privileges (uid 65534) the sandbox is the same as root's: the
/// namespaces come from a user namespace. Shells read the workspace, write it, and
/// still cannot change `.git/config` (writable for that user on disk), write outside
/// the workspace, or keep a daemon running.
#[test]
fn without_privileges_every_shell_is_still_sandboxed() {
    let f = fixture();
    let status = Command::new("git")
        .args(["init", "-q"])
        .current_dir(f.ws.path())
        .status()
        .unwrap();
    assert!(status.success());
    let outside = tempfile::tempdir().unwrap();
    for root in [f.home.path(), f.ws.path(), outside.path()] {
        let st = Command::new("chmod")
            .args(["-R", "a+rwX"])
            .arg(root)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let config_before = std::fs::read_to_string(f.ws.path().join(".git/config")).unwrap();
    let escape = outside.path().join("escaped");
    let command = format!(
        "cat notes.txt; echo new > made.txt; echo x > {}; echo '[x]' >> .git/config; \
         setsid -f sleep 300.4242; echo done",
        escape.display()
    );
    let server = MockServer::start(move |req| match req.assistant_turns() {
        0 => MockReply::tool_call("bash", json!({ "command": command })),
        _ => MockReply::text("done"),
    });
    let base = server.base_url();
    let out = brood_command(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        f.home.path(),
        f.ws.path(),
    )
    .args([
        "run",
        "--provider",
        "local",
        "--base-url",
        &base,
        "--model",
        "m",
        "x",
    ])
    .output()
    .expect("run setpriv");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("namespaces unavailable"), "{stderr}");
    let second = serde_json::to_string(&server.requests()[1]).unwrap();
    assert!(
        second.contains("alpha") && second.contains("done"),
        "{second}"
    );
    assert!(!escape.exists(), "a shell wrote outside the workspace");
    assert!(f.ws.path().join("made.txt").exists(), "{second}");
    assert_eq!(
        std::fs::read_to_string(f.ws.path().join(".git/config")).unwrap(),
        config_before,
        "{second}"
    );
    let alive = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x00300.4242\x00")
    });
    assert!(!alive, "a detached daemon outlived the call");
}

/// A second signal does not wait for the cancellation to settle: with the ledger's
/// write lock held by another process (so the cancelled runs cannot commit their
/// ends), the second SIGTERM goes to the final flush, a third skips even that, and
/// brood exits 143 (128 + SIGTERM) at once.
#[test]
fn a_second_signal_exits_at_once_with_128_plus_the_signal() {
    use std::io::BufRead;
    let f = fixture();
    let server = hanging_child_server();
    let mut child = spawn_local(&f, &server, &["--json", "delegate"]);
    wait_for_requests(&server, 2);
    // Each stderr line as it comes, so the test sends the next signal only once
    // brood has acted on the previous one (signals sent together may merge).
    let (line_tx, lines) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_line = |needle: &str| -> String {
        loop {
            match lines.recv_timeout(std::time::Duration::from_secs(60)) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(e) => panic!("brood never printed '{needle}': {e}"),
            }
        }
    };
    let db = rusqlite::Connection::open(f.ws.path().join(".brood/state/brood.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    send_signal(child.id(), "TERM");
    wait_line("SIGTERM received; cancelling");
    send_signal(child.id(), "TERM");
    wait_line("received again; exiting now");
    send_signal(child.id(), "TERM");
    let out = wait_bounded(child);
    let _ = reader.join();
    db.execute_batch("ROLLBACK").unwrap();
    assert_eq!(out.status.code(), Some(143));
}

/// After a run, `git status` shows nothing of brood's ledger, while a workspace
/// config stays committable.
#[test]
fn the_ledger_stays_out_of_git_status() {
    let f = fixture();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(f.ws.path())
            .output()
            .expect("run git");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(f.ws.path().join(".brood/config.toml"), "max_turns = 5\n").unwrap();
    let server = two_step_server();
    let out = run_local(&f, &server, &["hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert!(f.ws.path().join(".brood/state/brood.db").exists());
    let status = git(&["status", "--porcelain", "--untracked-files=all"]);
    assert!(!status.contains(".brood/state"), "{status}");
    assert!(status.contains(".brood/config.toml"), "{status}");
}

/// Issue 13.6: a workspace `.brood/config.toml` cannot choose the endpoint or the
/// key variable unless the user trusts the workspace (`trusted_workspaces` in the
/// user config, or `--trust`). Also: an empty `XDG_CONFIG_HOME` means unset, so
/// the user config under `$HOME/.config` is still read.
#[test]
fn an_untrusted_workspace_cannot_choose_the_endpoint_a_trusted_one_can() {
    let f = fixture();
    let server = MockServer::start(|_| MockReply::text("reached the mock"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let user_dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&user_dir).unwrap();
    let user_cfg = format!(
        "provider = \"local\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_attempts = 1\n",
        server.base_url()
    );
    std::fs::write(user_dir.join("config.toml"), &user_cfg).unwrap();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    let ws_file = f.ws.path().join(".brood/config.toml");
    std::fs::write(
        &ws_file,
        format!(
            "base_url = \"http://127.0.0.1:{closed}/v1\"\napi_key_env = \"BROOD_TEST_SECRET\"\n\
             [providers.local]\nbase_url = \"http://127.0.0.1:{closed}/v1\"\n"
        ),
    )
    .unwrap();
    let env = [("XDG_CONFIG_HOME", ""), ("BROOD_TEST_SECRET", "s3cret")];

    let out = brood(f.home.path(), f.ws.path(), &["run", "go"], &env);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("reached the mock"), "{stdout}");
    assert_eq!(server.requests().len(), 1);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("ignoring")).collect();
    assert_eq!(warnings.len(), 1, "one warning line: {stderr}");
    for needle in [
        "base_url",
        "api_key_env",
        "providers",
        "config.toml",
        "--trust",
    ] {
        assert!(warnings[0].contains(needle), "{needle}: {}", warnings[0]);
    }

    let show = brood(f.home.path(), f.ws.path(), &["config", "show"], &env);
    let (shown, _) = text(&show);
    assert!(
        shown.contains("# ignored: base_url") && shown.contains("# ignored: api_key_env"),
        "{shown}"
    );

    // `--trust`: the workspace's endpoint is used (and refuses connections).
    let out = brood(f.home.path(), f.ws.path(), &["run", "--trust", "go"], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{closed}")), "{stderr}");

    // Listed in the user's trusted_workspaces (by another spelling of the path).
    let listed = format!("{}/.", f.ws.path().display());
    std::fs::write(
        user_dir.join("config.toml"),
        format!("{user_cfg}trusted_workspaces = [{listed:?}]\n"),
    )
    .unwrap();
    let out = brood(f.home.path(), f.ws.path(), &["run", "go"], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{closed}")), "{stderr}");
    assert!(!stderr.contains("ignoring"), "{stderr}");
    assert_eq!(server.requests().len(), 1, "the mock was not asked again");
}

/// `[subagents] subagent_provider` chooses where every child's requests (and the
/// user's key for that provider) go: from an untrusted workspace it is ignored with
/// the same warning as the other endpoint keys; `--trust` lets it apply.
#[test]
fn an_untrusted_workspace_cannot_choose_the_childrens_provider() {
    let f = fixture();
    let reply = |answer: &'static str| {
        move |req: &brood_mock::MockRequest| {
            if req.first_user_text() == Some("look at notes.txt") {
                return MockReply::text(answer);
            }
            match req.assistant_turns() {
                0 => MockReply::tool_call("task", json!({"description": "look at notes.txt"})),
                _ => MockReply::text("done"),
            }
        }
    };
    let main = MockServer::start(reply("SUMMARY: child on the user's endpoint"));
    let other = MockServer::start(reply("SUMMARY: child on the workspace's choice"));
    let user_dir = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(
        user_dir.join("config.toml"),
        format!(
            "provider = \"local\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_attempts = 1\n\
             [providers.llamacpp]\nbase_url = \"{}\"\n",
            main.base_url(),
            other.base_url()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[subagents]\nsubagent_provider = \"llamacpp\"\nmax_depth = 1\n",
    )
    .unwrap();
    let env = [("XDG_CONFIG_HOME", "")];

    let out = brood(f.home.path(), f.ws.path(), &["run", "go"], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        other.requests().len(),
        0,
        "the workspace chose the provider"
    );
    let child_requests = |server: &MockServer| {
        server
            .captured()
            .iter()
            .filter(|r| r.first_user_text() == Some("look at notes.txt"))
            .count()
    };
    assert!(
        child_requests(&main) > 0,
        "the child ran elsewhere: {stderr}"
    );
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("ignoring")).collect();
    assert_eq!(warnings.len(), 1, "one warning line: {stderr}");
    assert!(
        warnings[0].contains("subagents.subagent_provider") && warnings[0].contains("--trust"),
        "{}",
        warnings[0]
    );
    let show = brood(f.home.path(), f.ws.path(), &["config", "show"], &env);
    let (shown, _) = text(&show);
    assert!(
        shown.contains("# ignored: subagents.subagent_provider = \"llamacpp\""),
        "{shown}"
    );

    // Trusted this once: the child goes where the workspace says.
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["run", "--trust", "--json", "go"],
        &env,
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("ignoring"), "{stderr}");
    assert!(child_requests(&other) > 0, "{stdout}");
}
