//! Signals and kills: SIGTERM cancels the run and records why, a second signal exits
//! at once with 128 + its number, and a killed session's runs are listed interrupted.

use super::*;

/// `brood run ARGS…` against `server`, started (not waited for), stdout and stderr piped.
pub(crate) fn spawn_local(f: &Fixture, server: &MockServer, args: &[&str]) -> std::process::Child {
    let mut cmd = f.command();
    cmd.arg("run")
        .args(local_flags(server))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.spawn().expect("spawn brood")
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
/// Ctrl-C: the JSON report is printed, the exit code is 5 (cancelled), and the parent and its
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
    assert_eq!(out.status.code(), Some(5), "stderr: {stderr}");
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

    let runs = f.runs();
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

/// The runs `brood agents list --json` lists in `f`.
fn listed(f: &Fixture) -> Vec<Value> {
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "list", "--json"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let runs: Value = serde_json::from_str(&stdout).unwrap();
    runs.as_array().cloned().unwrap_or_default()
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
    // Still alive: the listing reads the runs as they are recorded. The child's
    // request can reach the mock before its spawn record commits (the first request
    // leaves while the spawn commits, docs/ARCHITECTURE.md "What a spawn waits
    // for"): look again, for at most 30 s, until both runs are on disk.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let runs = loop {
        let runs = listed(&f);
        if runs.len() == 2 || std::time::Instant::now() > deadline {
            break runs;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(runs.len(), 2, "{runs:?}");
    // Live runs read pending or running (the `started` record is committed in a
    // later batch), never interrupted.
    assert!(
        runs.iter()
            .all(|r| r["status"] == "running" || r["status"] == "pending"),
        "{runs:?}"
    );

    child.kill().expect("SIGKILL brood");
    child.wait().expect("reap brood");
    let runs = listed(&f);
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in &runs {
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
