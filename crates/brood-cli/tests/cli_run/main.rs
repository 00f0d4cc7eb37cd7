//! The `brood` command end to end: the real binary against an in-process
//! OpenAI-compatible server (brood-mock). One test binary for the command (link time
//! dominates a test build on 2 cores), one module per subject; the tests here are
//! `brood run` itself: output shape, streaming, record/replay with the server gone.
//! The helpers here (`brood`, `fixture`, `two_step_server`) serve the modules that
//! `use super::*`.
//!
//! `cargo test -p brood-cli --test cli_run` runs them all; a module alone:
//! `cargo test -p brood-cli --test cli_run faults::`.

use brood_mock::{MockReply, MockServer};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

#[path = "../common/mod.rs"]
mod common;

mod chat;
mod chat_ui;
mod config_show;
mod cost;
mod cost_recorded;
mod degraded;
mod exit_codes;
mod faults;
mod first_contact;
mod fleet;
mod fleet_frozen;
mod fleet_repo;
mod own_setup;
mod permissions;
mod resume;
mod resume_fork;
mod signals;
mod trust;
mod worktree;

use common::{command, command_via, local_flags, run_local, text, wait_for_requests, Fixture};

/// `brood ARGS…` in `ws` with only `HOME`, `PATH` and `extra_env` set.
fn brood(home: &Path, ws: &Path, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    command(home, ws)
        .args(args)
        .envs(extra_env.iter().copied())
        .output()
        .expect("run brood")
}

/// A workspace with `notes.txt` (`alpha`, `beta`) and an empty home.
fn fixture() -> Fixture {
    Fixture::with_notes("alpha\nbeta\n")
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
fn an_unreachable_endpoint_fails_with_exit_3_naming_the_url() {
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
    assert_eq!(out.status.code(), Some(3), "{stderr}");
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
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("replay") && stderr.contains("something else"),
        "{stderr}"
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
    let runs = f.runs();
    let run = runs
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
    let status = f
        .command()
        .arg("run")
        .args(local_flags(&server))
        .arg("what is here?")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(out_w)))
        .stderr(std::process::Stdio::from(std::os::fd::OwnedFd::from(err_w)))
        .status()
        .expect("run brood");
    assert_eq!(status.code(), Some(0), "{status:?}");
    // Both steps were asked for: the run went on after its first failed writes.
    assert_eq!(server.request_count(), 2);

    let runs = f.runs();
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
