//! The fault suite: the real `brood` binary against brood-mock serving broken and
//! hostile answers (issue 21). For each fault: the exit code, the message naming the
//! problem, the `--json` result, and the ledger afterwards — every run listable,
//! nothing left `running`. Faults are served to the parent and, where it matters, to
//! one child of two while its sibling and the parent carry on.
//!
//! Timeouts are short (`BROOD_API_TIMEOUT_SECS=2`, `BROOD_MAX_ATTEMPTS=2`) so hanging
//! and dripping servers cost seconds; nothing here sleeps to synchronize.

use brood_mock::{Answer, MockReply, MockServer};
use serde_json::{json, Value};
use std::process::{Command, Output};

use crate::common::{is_child, local_flags, outcome, Fixture};
use std::time::Duration;

/// A workspace with `notes.txt` and an empty home; brood runs there with short
/// timeouts.
struct Case {
    f: Fixture,
}

impl Case {
    fn new() -> Case {
        Case {
            f: Fixture::with_notes("alpha\nbeta\n"),
        }
    }

    fn brood(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(args, env).output().expect("run brood")
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = self.f.command();
        cmd.env("BROOD_API_TIMEOUT_SECS", "2")
            .env("BROOD_MAX_ATTEMPTS", "2")
            .args(args)
            .envs(env.iter().copied());
        cmd
    }

    fn run_args(server: &MockServer) -> Vec<String> {
        let mut args = vec!["run".to_string()];
        args.extend(local_flags(server));
        args.extend(["--json", "look around"].map(str::to_string));
        args
    }

    /// `brood run --json` against `server`: exit code, the `--json` object (when
    /// stdout holds one), stderr.
    fn run(&self, server: &MockServer, env: &[(&str, &str)]) -> (Option<i32>, Value, String) {
        let args = Case::run_args(server);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = outcome(&self.brood(&args, env));
        let v = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
        (code, v, stderr)
    }

    /// Every run of the workspace, through `brood agents list --all --json` (which
    /// must succeed), checked to have none left `running`, and `show` working on each.
    fn ledger(&self) -> Vec<Value> {
        let runs = self.f.runs();
        assert!(!runs.is_empty(), "no run recorded");
        for r in &runs {
            assert_ne!(r["status"], "running", "left running: {r}");
            self.f.show(r["id"].as_str().unwrap());
        }
        runs
    }
}

/// A parent that fans out to `child ok` and `child faulty`, then answers; the faulty
/// child gets `fault`, the other children and the parent sane answers.
fn tree_server(fault: MockReply) -> MockServer {
    MockServer::start(move |req| {
        if is_child(req) {
            if req.first_user_text() == Some("child faulty") {
                return fault.clone();
            }
            return MockReply::text("SUMMARY: all fine");
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"prompts": ["child ok", "child faulty"]})),
            _ => MockReply::text("parent done"),
        }
    })
}

/// The fault served to the parent's first step: the run fails (exit 3, the provider failed) with a
/// message naming `names`, the `--json` object says failed, the ledger holds one
/// failed run. Returns stderr and the server for further checks.
fn parent_fails(fault: MockReply, names: &[&str], env: &[(&str, &str)]) -> (String, MockServer) {
    let case = Case::new();
    let server = MockServer::start(move |_| fault.clone());
    let (code, v, stderr) = case.run(&server, env);
    assert_eq!(code, Some(3), "stderr: {stderr}\njson: {v}");
    let error = v["error"].as_str().unwrap_or_default().to_string();
    for n in names {
        assert!(
            stderr.contains(n) && error.contains(n),
            "{n:?} not named\nstderr: {stderr}\njson: {v}"
        );
    }
    let runs = case.ledger();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "failed", "{:?}", runs[0]);
    // Retries are bounded: at most BROOD_MAX_ATTEMPTS requests.
    assert!(
        server.request_count() <= 2,
        "{} requests",
        server.request_count()
    );
    (stderr, server)
}

#[test]
fn statuses_name_the_status_and_the_providers_message() {
    parent_fails(
        MockReply::status(503, "overloaded, try later"),
        &["503", "overloaded"],
        &[],
    );
    parent_fails(
        MockReply::status_raw(500, "<html>bad gateway</html>"),
        &["500"],
        &[],
    );
    // Not retried: a client error.
    let (_, server) = parent_fails(
        MockReply::status(400, "bad model"),
        &["400", "bad model"],
        &[],
    );
    assert_eq!(server.request_count(), 1);
}

#[test]
fn a_retry_after_past_the_step_budget_fails_at_once_naming_it() {
    let (stderr, server) = parent_fails(
        MockReply::status(429, "rate limited").retry_after("3600"),
        &["429", "3600"],
        &[],
    );
    assert_eq!(server.request_count(), 1, "{stderr}");
}

#[test]
fn a_transient_status_is_retried_on_stderr_and_in_the_ledger() {
    for first in [
        MockReply::status(429, "slow down").retry_after("0"),
        MockReply::status(502, "bad gateway"),
    ] {
        let case = Case::new();
        let server = MockServer::start_sequence(vec![first, MockReply::text("fine")]);
        let (code, v, stderr) = case.run(&server, &[]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(v["final"], "fine");
        assert!(stderr.contains("[retry] attempt"), "{stderr}");
        let runs = case.ledger();
        let detail = case.f.show(runs[0]["id"].as_str().unwrap());
        let retried = detail["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.to_string().contains("retrying"));
        assert!(retried, "no retry event: {detail}");
    }
}

#[test]
fn bodies_that_are_not_an_answer_name_what_came() {
    // Garbage where JSON or SSE was expected, an empty body, HTML from a proxy,
    // invalid UTF-8 in the stream: each fails the run, nothing hangs.
    for fault in [
        MockReply::body("application/json", "{not json"),
        MockReply::body("application/json", ""),
        MockReply::body("text/html", "<html><body>Welcome to nginx</body></html>"),
        MockReply::Raw {
            parts: vec![
                b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n".to_vec(),
            ],
        },
        MockReply::Raw {
            parts: vec![b"data: {\"choices\": [{\"delta\": \n\n".to_vec()],
        },
    ] {
        let case = Case::new();
        let server = MockServer::start(move |_| fault.clone());
        let (code, v, stderr) = case.run(&server, &[]);
        assert_eq!(code, Some(3), "stderr: {stderr}\njson: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
        assert!(
            stderr.contains("brood:") || stderr.contains("error"),
            "{stderr}"
        );
        let runs = case.ledger();
        assert_eq!(runs[0]["status"], "failed");
    }
}

#[test]
fn cut_unfinished_and_stalled_streams_fail_bounded() {
    let answer = Answer::text("a sentence that will not finish").fragment(4);
    for fault in [
        answer.clone().cut_after(3),
        answer.clone().stall_after(3),
        MockReply::Hang,
        MockReply::endless_text("drip ", Duration::from_millis(100)),
    ] {
        let case = Case::new();
        let server = MockServer::start(move |_| fault.clone());
        let started = std::time::Instant::now();
        let (code, v, stderr) = case.run(&server, &[]);
        assert_eq!(code, Some(3), "stderr: {stderr}\njson: {v}");
        // Two attempts of at most two seconds each, plus a backoff.
        assert!(started.elapsed() < Duration::from_secs(15), "{stderr}");
        assert_eq!(case.ledger()[0]["status"], "failed");
    }
}

#[test]
fn an_endless_answer_stops_at_the_cap_naming_it() {
    let case = Case::new();
    let server = MockServer::start(|_| MockReply::endless_text("x", Duration::ZERO));
    let (code, v, stderr) = case.run(
        &server,
        &[
            ("BROOD_MAX_ANSWER_BYTES", "65536"),
            ("BROOD_API_TIMEOUT_SECS", "30"),
        ],
    );
    assert_eq!(code, Some(3), "stderr: {stderr}\njson: {v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("65536") || error.contains("64 KiB"), "{v}");
    // Not retried.
    assert_eq!(server.request_count(), 1);
    assert_eq!(case.ledger()[0]["status"], "failed");
}

#[test]
fn absurd_usage_keeps_the_ledger_readable() {
    let case = Case::new();
    let server = MockServer::start(|_| {
        MockReply::Answer(Answer::text("done").usage(json!({
            "prompt_tokens": 1180591620717411303424.0_f64,
            "completion_tokens": -5,
            "total_tokens": "many",
        })))
    });
    let (code, v, stderr) = case.run(&server, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(v["final"], "done");
    let runs = case.ledger();
    assert_eq!(runs[0]["status"], "completed");
    // A second session on the same workspace still lists it.
    let (code, _, stderr) = case.run(&server, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(case.ledger().len(), 2);
}

#[test]
fn a_faulted_child_fails_alone_and_the_parent_goes_on() {
    let faults = [
        ("status", MockReply::status(500, "child boom")),
        (
            "cut",
            Answer::text("half an answer").fragment(3).cut_after(2),
        ),
        ("hang", MockReply::Hang),
        ("garbage", MockReply::body("application/json", "]]")),
    ];
    for (name, fault) in faults {
        let case = Case::new();
        let server = tree_server(fault);
        let (code, v, stderr) = case.run(&server, &[]);
        assert_eq!(code, Some(0), "{name}: {stderr}\njson: {v}");
        assert_eq!(v["final"], "parent done", "{name}");
        assert!(stderr.contains("1 of 2 failed"), "{name}: {stderr}");
        let runs = case.ledger();
        assert_eq!(runs.len(), 3, "{name}: {runs:?}");
        let status = |obj: &str| {
            runs.iter()
                .find(|r| r["objective"] == obj)
                .map(|r| r["status"].clone())
        };
        assert_eq!(status("child ok"), Some(json!("completed")), "{name}");
        assert_eq!(status("child faulty"), Some(json!("failed")), "{name}");
        assert_eq!(status("look around"), Some(json!("completed")), "{name}");
    }
}

#[test]
fn a_childs_retries_are_printed_naming_the_child() {
    let case = Case::new();
    let server = tree_server(MockReply::status(503, "child overloaded"));
    let (code, _, stderr) = case.run(&server, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("[retry]") && l.contains("503"))
        .unwrap_or_else(|| panic!("no retry line: {stderr}"));
    // Named by the faulty child's name as the ledger has it.
    let runs = case.ledger();
    let child = runs
        .iter()
        .find(|r| r["objective"] == "child faulty")
        .expect("child recorded");
    let name = child["name"].as_str().expect("child has a name");
    assert!(
        line.contains(&format!("[retry] child {name}: attempt ")),
        "{line}\n{child}"
    );
    // Only the faulty child retried.
    assert_eq!(stderr.matches("[retry]").count(), 1, "{stderr}");
}

#[test]
fn hostile_tool_calls_are_refused_and_bounded() {
    let case = Case::new();
    let huge = "A".repeat(2 << 20);
    let server = MockServer::start(move |req| match req.assistant_turns() {
        0 => MockReply::Answer(
            Answer::new()
                .tool_call_with_id("c0", "rm_rf_everything", "{}")
                .tool_call_with_id("c1", "read_file", format!("{{\"path\": \"{huge}\"}}"))
                .tool_call_with_id("c2", "read_file", "not json at all")
                .fragment(0),
        ),
        _ => MockReply::text("ok then"),
    });
    let (code, v, stderr) = case.run(&server, &[("BROOD_API_TIMEOUT_SECS", "60")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(v["final"], "ok then");
    // The errors sent back are short: the next request is far below the 2 MB echo.
    let sizes: Vec<usize> = server.raw_requests().iter().map(Vec::len).collect();
    assert!(sizes[1] < sizes[0] + (2 << 20) + 64 * 1024, "{sizes:?}");
    let last = &server.requests()[1];
    let tools: Vec<&Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tools.len(), 3, "{last}");
    for t in tools {
        assert!(t["content"].as_str().unwrap().len() < 4096, "{t}");
    }
    let _ = case.ledger();
}

/// Size of everything under `dir`, recursively.
fn disk_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// 21.3: a child's big answer is stored once — `.brood/` grows by the text it records
/// and a small overhead (the issue measured 5×: twice in events, twice in results,
/// plus a spill file). The `completed` event carries no copy of the result, and the
/// result's `final_text` and report refer to the transcript's spill file; `brood
/// agents show` and export still return the whole text.
#[test]
fn a_big_answer_is_stored_once() {
    const BIG: usize = 6 << 20;
    let case = Case::new();
    let server = MockServer::start(|req| {
        if is_child(req) {
            return MockReply::Answer(Answer::text("y".repeat(BIG)).fragment(0));
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"prompts": ["child big"]})),
            _ => MockReply::text("parent done"),
        }
    });
    let (code, v, stderr) = case.run(&server, &[("BROOD_API_TIMEOUT_SECS", "60")]);
    assert_eq!(code, Some(0), "{stderr}\n{v}");
    let runs = case.ledger();
    assert_eq!(runs.len(), 2);
    let used = disk_bytes(&case.f.ws.path().join(".brood"));
    // The text recorded: every answer the child got (asked again for its report
    // format, it answers the same once more).
    let answers = server.captured().iter().filter(|r| is_child(r)).count() as u64;
    let recorded = answers * BIG as u64;
    eprintln!("ledger after {answers} answers of {BIG} B: {used} B");
    let listing = std::process::Command::new("du")
        .args(["-ab"])
        .arg(case.f.ws.path().join(".brood"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        used <= recorded + (1 << 20),
        "{used} B for {answers} answers of {BIG} B:\n{listing}"
    );
    // What users read is unchanged: the child's whole answer, in its result and in
    // the report parsed from it, through show and export.
    let child = runs.iter().find(|r| !r["parent_id"].is_null()).unwrap();
    let shown = case.f.show(child["id"].as_str().unwrap());
    let result = &shown["result"];
    assert_eq!(
        result["final_text"].as_str().map(str::len),
        Some(BIG),
        "{}",
        shown["notes"]
    );
    assert!(result["final_text"]
        .as_str()
        .unwrap()
        .bytes()
        .all(|b| b == b'y'));
    let report = result["report"].to_string();
    assert!(
        report.len() > BIG,
        "the report lost its text: {} B",
        report.len()
    );
    assert!(shown["notes"].is_null(), "{}", shown["notes"]);
    let out = case.brood(&["agents", "export", "--json"], &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let export: Value = serde_json::from_slice(&out.stdout).expect("export is JSON");
    let exported = export.to_string();
    assert!(
        !exported.contains("$brood_stored"),
        "export shows the stored form"
    );
    assert!(
        exported.len() > 2 * BIG,
        "export lost the text: {} B",
        exported.len()
    );
}

/// Run `cmd` to its end: (exit code, stdout, stderr, peak RSS in KiB). The peak is the
/// kernel's high-water mark of the reaped process (`wait4`'s `ru_maxrss`), so nothing
/// between two samples is missed.
fn run_measuring_peak(mut cmd: Command) -> (Option<i32>, String, String, u64) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start brood");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of that plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own child, not reaped yet (std's handle is never
        // waited on); both pointers are to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "wait4: {e}");
    }
    drop(child);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let peak_kib = u64::try_from(usage.ru_maxrss).unwrap_or(0);
    (code, out.join().unwrap(), err.join().unwrap(), peak_kib)
}

/// 21.2: a 50 MB answer is refused at the answer cap (8 MiB by default) as it
/// streams in, never held whole: the `brood` process's peak memory stays under
/// 200 MiB for one child answering 50 MB (the issue measured 790 MB), and three
/// children answering 50 MB at once stay under the sum of three such bounds — here
/// 400 MiB (the issue measured 1.38 GB); the parent goes on to its answer. The
/// figure is an upper bound: a process started from this one carries this process's
/// high-water mark (its answers, the mock's buffers) into `ru_maxrss` across `exec`
/// (a debug build here reads ~55 and ~170–225 MiB; brood's own, measured from a small
/// helper process, is ~50 and ~85 MB: BENCHMARKS.md scenario 10).
#[test]
fn a_huge_answer_keeps_peak_memory_bounded() {
    const HUGE: usize = 50_000_000;
    for (children, bound_mib) in [(1usize, 200u64), (3, 400)] {
        let bound_kib = bound_mib * 1024;
        let case = Case::new();
        let prompts: Vec<String> = (0..children).map(|i| format!("child huge {i}")).collect();
        let huge = Answer::text("z".repeat(HUGE)).fragment(16 << 10);
        let server = MockServer::start(move |req| {
            if is_child(req) {
                return MockReply::Answer(huge.clone());
            }
            match req.assistant_turns() {
                0 => MockReply::tool_call("task", json!({ "prompts": prompts })),
                _ => MockReply::text("parent done"),
            }
        });
        let args = Case::run_args(&server);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cmd = case.command(&args, &[("BROOD_API_TIMEOUT_SECS", "60")]);
        let (code, stdout, stderr, peak_kib) = run_measuring_peak(cmd);
        eprintln!("{children} × {HUGE} B answers: peak RSS {peak_kib} KiB");
        assert_eq!(code, Some(0), "{stderr}\n{stdout}");
        let v: Value = serde_json::from_str(stdout.trim()).expect("--json output");
        assert_eq!(v["final"], "parent done", "{v}");
        assert!(
            peak_kib <= bound_kib,
            "{children} × {HUGE} B answers: brood peaked at {peak_kib} KiB (bound {bound_kib} KiB)"
        );
        // Each child failed naming the cap; none is left running.
        let runs = case.ledger();
        let failed = runs.iter().filter(|r| r["status"] == "failed").count();
        assert_eq!(failed, children, "{runs:?}");
        for r in runs.iter().filter(|r| r["status"] == "failed") {
            let error = r["error"].as_str().unwrap_or_default();
            assert!(
                error.contains("8388608") || error.contains("8 MiB"),
                "{error}"
            );
        }
    }
}

/// 21.6: a server that closes a kept-alive connection after a complete answer,
/// without `Connection: close` (uvicorn, nginx), costs no attempt: with one attempt
/// allowed, run after run succeeds, and the stale connection is not reported.
#[test]
fn a_server_closing_kept_alive_connections_costs_no_attempt() {
    let case = Case::new();
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::tool_call("read_file", json!({"path": "notes.txt"})),
        1 => MockReply::tool_call("list_dir", json!({"path": "."})),
        _ => MockReply::text("read it"),
    });
    server.set_idle_close(true);
    for run in 0..4 {
        let (code, v, stderr) = case.run(&server, &[("BROOD_MAX_ATTEMPTS", "1")]);
        assert_eq!(code, Some(0), "run {run}: {stderr}\njson: {v}");
        assert_eq!(v["final"], "read it", "run {run}");
        assert!(!stderr.contains("[retry]"), "run {run}: {stderr}");
    }
    // Every run met closed connections (two of its three requests came on a kept-alive
    // one), so the fault really was served.
    assert!(server.idle_closed() >= 4, "{} closed", server.idle_closed());
    assert_eq!(server.request_count(), 12);
    assert!(case.ledger().iter().all(|r| r["status"] == "completed"));
}

/// A valid answer under the wrong content type is read for what it is: the first
/// bytes decide (`data:` is an event stream, `{` a whole completion), not the label
/// (proxies and gateways relabel bodies). What is neither fails naming what came.
#[test]
fn a_valid_answer_under_a_wrong_content_type_is_read() {
    let sse: String = Answer::text("streamed, mislabelled")
        .stream_chunks("m")
        .iter()
        .map(|c| format!("data: {c}\n\n"))
        .collect::<String>()
        + "data: [DONE]\n\n";
    let whole = Answer::text("whole, mislabelled").to_json("m").to_string();
    for (content_type, body, expected) in [
        ("application/json", sse.clone(), "streamed, mislabelled"),
        (
            "text/plain; charset=utf-8",
            sse.clone(),
            "streamed, mislabelled",
        ),
        ("text/event-stream", whole.clone(), "whole, mislabelled"),
        (
            "text/event-stream; charset=utf-8",
            format!("\n{whole}"),
            "whole, mislabelled",
        ),
        (
            "application/octet-stream",
            whole.clone(),
            "whole, mislabelled",
        ),
    ] {
        let case = Case::new();
        let server = MockServer::start(move |_| MockReply::body(content_type, body.clone()));
        let (code, v, stderr) = case.run(&server, &[]);
        assert_eq!(code, Some(0), "{content_type}: {stderr}\njson: {v}");
        assert_eq!(v["final"], expected, "{content_type}");
        assert_eq!(case.ledger()[0]["status"], "completed");
    }
    // An event-stream label on a body that is neither.
    let case = Case::new();
    let server = MockServer::start(|_| MockReply::body("text/event-stream", "<html>proxy</html>"));
    let (code, v, stderr) = case.run(&server, &[]);
    assert_eq!(code, Some(3), "{stderr}\njson: {v}");
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    assert_eq!(case.ledger()[0]["status"], "failed");
}
