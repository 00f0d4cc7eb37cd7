//! The fleet end to end (docs/FLEET.md) on a throwaway PostgreSQL: a `brood run`
//! whose `[subagents] placement = "fleet"` enqueues its children, `brood worker`
//! processes claim and run them against brood-mock, and the parent receives each
//! result through the database; a SIGKILLed worker's run is finished by another
//! worker under the same id.

use super::*;
use brood_mock::Gate;
use std::process::{Child, Stdio};
use std::time::Duration;

#[path = "../../../brood/tests/ledger/common/pg.rs"]
pub(super) mod pg;
#[path = "../../../brood/tests/ledger/common/proxy.rs"]
mod proxy;

/// A git repository workspace (the fleet's children run in worktrees of it) whose
/// user config places children in the fleet.
pub(super) fn fleet_fixture() -> Fixture {
    let f = fixture();
    let ws = f.ws.path();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "notes.txt"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "start",
        ],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
    let conf = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("config.toml"),
        "[subagents]\nplacement = \"fleet\"\n",
    )
    .unwrap();
    f
}

/// The parent's `brood run --json delegate` on the fleet at `url`, against `server`
/// (the caller adds what it needs, then runs or spawns it).
pub(super) fn fleet_parent(f: &Fixture, server: &MockServer, url: &str) -> Command {
    let mut parent = f.command();
    parent
        .env("BROOD_LEDGER_URL", url)
        .arg("run")
        .args(local_flags(server))
        .args(["--json", "delegate"]);
    parent
}

/// `brood worker` on `url` with its own workspace root, against `server`; the
/// parent's workspace (a local repository) is a directory it may use.
fn spawn_worker(f: &Fixture, server: &MockServer, url: &str, root: &Path) -> Child {
    spawn_worker_allowing(f, server, url, root, f.ws.path())
}

/// `brood worker` as [`spawn_worker`], allowed the repositories under `allowed`.
pub(super) fn spawn_worker_allowing(
    f: &Fixture,
    server: &MockServer,
    url: &str,
    root: &Path,
    allowed: &Path,
) -> Child {
    f.command()
        .env("BROOD_LEDGER_URL", url)
        .args(["worker", "--workspace-root"])
        .arg(root)
        .arg("--allow-repository-dir")
        .arg(allowed)
        .args(["--lease-secs", "2"])
        .args(local_flags(server))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn brood worker")
}

/// Every run of the ledger at `url`, as `brood agents list --all --json` prints them.
pub(super) fn fleet_runs(f: &Fixture, url: &str) -> Vec<Value> {
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", url)
        .args(["agents", "list", "--all", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The event kinds of run `id`.
fn event_kinds(f: &Fixture, url: &str, id: &str) -> Vec<String> {
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", url)
        .args(["agents", "show", id, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

/// SIGTERM a worker: it finishes what it holds and exits 0. Its stderr.
pub(super) fn stop(worker: Child) -> String {
    send_signal(worker.id(), "TERM");
    let out = wait_bounded(worker);
    let log = text(&out).1;
    assert_eq!(out.status.code(), Some(0), "worker: {log}");
    log
}

pub(super) const ANSWER: &str =
    "SUMMARY: looked\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none";

#[test]
fn a_fleet_parents_children_run_on_a_worker_and_their_results_reach_it() {
    let Some(url) = pg::fresh_database("a_fleet_parents_children_run_on_a_worker") else {
        return;
    };
    let f = fleet_fixture();
    let server = MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if first.starts_with("look ") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("list_dir", json!({})),
                _ => MockReply::text(ANSWER.replace("looked", &format!("looked ({first})"))),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"prompts": ["look a", "look b", "look c"]})),
            _ => MockReply::text("done"),
        }
    });
    // A broken agent file of the user's: the worker warns at start, as run does.
    let agents = f.home.path().join(".config/brood/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("broken.md"),
        "---\nname: [unclosed\n---\nbody\n",
    )
    .unwrap();
    let root = tempfile::tempdir().unwrap();
    let worker = spawn_worker(&f, &server, &url, root.path());
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .arg("run")
        .args(local_flags(&server))
        .args(["--json", "fan out"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["final"], "done");
    // The parent's step after `task` carries each child's answer, as a local
    // child's would be delivered.
    let requests = server.requests();
    let parent_last = requests
        .iter()
        .rev()
        .find(|r| r["messages"][1]["content"] == "fan out")
        .unwrap()
        .to_string();
    for who in ["look a", "look b", "look c"] {
        assert!(
            parent_last.contains(&format!("({who})")),
            "{who} missing from {parent_last}"
        );
    }
    let log = stop(worker);
    assert!(
        log.contains("brood worker: warning:") && log.contains("broken.md"),
        "{log}"
    );
    let runs = fleet_runs(&f, &url);
    let parent = runs.iter().find(|r| r["parent_id"].is_null()).unwrap();
    let children: Vec<&Value> = runs.iter().filter(|r| !r["parent_id"].is_null()).collect();
    assert_eq!(children.len(), 3, "{runs:?}");
    for c in &children {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"], "completed", "{c}");
        assert_ne!(
            c["session_id"], parent["session_id"],
            "ran on the worker: {c}"
        );
        assert!(log.contains(&format!("claimed run {id}")), "{log}");
        let ends = event_kinds(&f, &url, id)
            .into_iter()
            .filter(|k| k == "completed")
            .count();
        assert_eq!(ends, 1, "run {id} completed exactly once");
        // It ran in a worktree of the parent's repository (its listing shows the
        // repository's notes.txt, which the worker's own root does not hold), removed
        // once it ended unchanged.
        assert!(
            !root.path().join(id).exists(),
            "a clean worktree is removed"
        );
    }
    for who in ["look a", "look b", "look c"] {
        let listed = requests
            .iter()
            .find(|r| {
                r["messages"][1]["content"] == who && r["messages"].as_array().unwrap().len() > 2
            })
            .unwrap_or_else(|| panic!("no second step of {who}"))
            .to_string();
        assert!(
            listed.contains("notes.txt"),
            "{who} did not list the repository: {listed}"
        );
    }
}

#[test]
fn a_sigkilled_workers_run_is_finished_by_another_worker_under_the_same_id() {
    let Some(url) = pg::fresh_database("a_sigkilled_workers_run_is_finished") else {
        return;
    };
    let f = fleet_fixture();
    // The child's first request hangs until the gate opens: the first worker is
    // killed while it waits. Its task is over the transcript cap (64 KiB), so its
    // message is spilled — into the database, since the second worker is on
    // "another machine" (another workspace root) and must read it whole.
    let task = format!(
        "look slowly\n{}END OF TASK",
        "a line of the task\n".repeat(4000)
    );
    let gate = Gate::new();
    let held = gate.clone();
    let call = json!({"description": task});
    let server = MockServer::start(move |req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if first.starts_with("look slowly") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("list_dir", json!({})).until(&held),
                _ => MockReply::text(ANSWER),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", call.clone()),
            _ => MockReply::text("done"),
        }
    });
    let parent = fleet_parent(&f, &server, &url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let root1 = tempfile::tempdir().unwrap();
    let mut first = spawn_worker(&f, &server, &url, root1.path());
    // The parent's request, then the child's (held) one on the first worker.
    wait_for_requests(&server, 2);
    first.kill().unwrap();
    let _ = first.wait();
    gate.open();
    let root2 = tempfile::tempdir().unwrap();
    let second = spawn_worker(&f, &server, &url, root2.path());
    let out = parent.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let log = stop(second);
    let runs = fleet_runs(&f, &url);
    let child = runs.iter().find(|r| !r["parent_id"].is_null()).unwrap();
    let id = child["id"].as_str().unwrap();
    assert_eq!(child["status"], "completed", "{child}");
    assert!(
        log.contains(&format!("claimed run {id} (attempt 2")),
        "{log}"
    );
    let kinds = event_kinds(&f, &url, id);
    assert_eq!(
        kinds.iter().filter(|k| *k == "completed").count(),
        1,
        "{kinds:?}"
    );
    assert!(kinds.iter().any(|k| k == "resumed"), "{kinds:?}");
    // The second worker continued from the recorded steps: its first request
    // already holds the task the first worker recorded — whole, though the
    // first worker spilled it (kept in the database, not in root1).
    let child_requests: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|r| r["messages"].to_string().contains("look slowly"))
        .collect();
    assert!(child_requests.len() >= 2, "{}", child_requests.len());
    let spilled = pg::sql(
        &url,
        &[&format!(
            "SELECT spill_path FROM transcripts WHERE run_id = '{id}' AND truncated = 1"
        )],
    );
    assert!(
        !spilled[0].is_empty() && spilled[0].iter().all(|p| p.starts_with("ledger:spills/")),
        "{spilled:?}"
    );
    let resumed = child_requests.last().unwrap()["messages"].to_string();
    assert!(
        resumed.contains("END OF TASK") && !resumed.contains("truncated by brood"),
        "the resumed run did not get its task whole ({} bytes)",
        resumed.len()
    );
    // `brood agents transcript` shows it capped (no file to point at) and `--full`
    // prints it whole from the database.
    let transcript = |full: bool| {
        let mut cmd = f.command();
        cmd.env("BROOD_LEDGER_URL", &url)
            .args(["agents", "transcript", id]);
        if full {
            cmd.arg("--full");
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
        text(&out).0
    };
    let capped = transcript(false);
    assert!(
        capped.contains("--full prints it]") && !capped.contains("END OF TASK"),
        "{}",
        &capped[capped.len().saturating_sub(400)..]
    );
    assert!(transcript(true).contains("END OF TASK"));
}

/// The server ends every brood connection (the parent's writer and listener, the
/// worker's) while the children's model requests are in flight: each comes back
/// (docs/LEDGER.md, "Lost connections"), nothing is lost or written twice, and the
/// parent still receives every child's end.
#[test]
fn ended_connections_come_back_and_the_parent_still_gets_every_end() {
    let Some(url) = pg::fresh_database("ended_connections_come_back") else {
        return;
    };
    let f = fleet_fixture();
    let gate = Gate::new();
    let held = gate.clone();
    let server = MockServer::start(move |req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if first.starts_with("look ") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("list_dir", json!({})).until(&held),
                _ => MockReply::text(ANSWER.replace("looked", &format!("looked ({first})"))),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"prompts": ["look a", "look b", "look c"]})),
            _ => MockReply::text("done"),
        }
    });
    let root = tempfile::tempdir().unwrap();
    let worker = spawn_worker(&f, &server, &url, root.path());
    let parent = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .arg("run")
        .args(local_flags(&server))
        .args(["--json", "fan out"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The parent's request and the three children's first ones, held.
    wait_for_requests(&server, 4);
    let all: Vec<String> = pg::brood_backends(&url).into_iter().collect();
    assert!(all.len() >= 4, "writers and listeners of both: {all:?}");
    pg::terminate(&url, &all);
    gate.open();
    let out = parent.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let log = stop(worker);
    let runs = fleet_runs(&f, &url);
    let children: Vec<&Value> = runs.iter().filter(|r| !r["parent_id"].is_null()).collect();
    assert_eq!(children.len(), 3, "{runs:?}");
    for c in &children {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"], "completed", "{c}\nworker: {log}");
        let kinds = event_kinds(&f, &url, id);
        for once in ["spawned", "queued", "started", "completed"] {
            assert_eq!(
                kinds.iter().filter(|k| *k == once).count(),
                1,
                "{id}: {once} in {kinds:?}"
            );
        }
    }
    let last = server
        .requests()
        .into_iter()
        .rev()
        .find(|r| {
            r["messages"][1]["content"] == "fan out" && r["messages"].as_array().unwrap().len() > 2
        })
        .unwrap()
        .to_string();
    for who in ["look a", "look b", "look c"] {
        assert_eq!(last.matches(&format!("({who})")).count(), 1, "{last}");
    }
}

/// A parent cancels (`agent_close`) a background fleet child while a worker holds it
/// mid-step (its model answer streaming): the worker cancels the run at once — woken
/// by `NOTIFY brood_run_cancel`, not its session's poll — and the run ends
/// `cancelled` once, recorded by its lease holder.
#[test]
fn a_parent_cancels_a_fleet_child_mid_step_and_its_worker_ends_it_promptly() {
    let Some(url) = pg::fresh_database("a_parent_cancels_a_fleet_child_mid_step") else {
        return;
    };
    let f = fleet_fixture();
    // The parent asks to close the child only once the child's step is streaming.
    let streaming = Gate::new();
    let (opened, held) = (streaming.clone(), streaming.clone());
    let closed_at = std::sync::Arc::new(std::sync::Mutex::new(None::<i64>));
    let closed = closed_at.clone();
    let server = MockServer::start(move |req| {
        if req.first_user_text() == Some("look forever") {
            opened.open();
            return MockReply::endless_text("still looking ", Duration::from_millis(20));
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("agent_open", json!({"prompt": "look forever"})),
            1 => {
                let said = req.last_message().unwrap()["content"].as_str().unwrap();
                let opened: Value = serde_json::from_str(said).unwrap();
                let id = opened["agent_id"].as_str().unwrap().to_string();
                *closed.lock().unwrap() = Some(chrono::Utc::now().timestamp_millis());
                MockReply::tool_call("agent_close", json!({"agent_id": id})).until(&held)
            }
            _ => MockReply::text("done"),
        }
    });
    let root = tempfile::tempdir().unwrap();
    let worker = spawn_worker(&f, &server, &url, root.path());
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .arg("run")
        .args(local_flags(&server))
        .args(["--json", "open then close"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    // The worker stops only once the run it holds has ended: the cancel reached it.
    let log = stop(worker);
    let runs = fleet_runs(&f, &url);
    let child = runs.iter().find(|r| !r["parent_id"].is_null()).unwrap();
    let id = child["id"].as_str().unwrap();
    assert_eq!(child["status"], "cancelled", "{child}\nworker: {log}");
    let parent = runs.iter().find(|r| r["parent_id"].is_null()).unwrap();
    assert_ne!(
        child["session_id"], parent["session_id"],
        "recorded by the worker"
    );
    let show = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .args(["agents", "show", id, "--json"])
        .output()
        .unwrap();
    let detail: Value = serde_json::from_slice(&show.stdout).unwrap();
    let events = detail["events"].as_array().unwrap();
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| ["completed", "failed", "cancelled"].contains(&e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(ends.len(), 1, "{events:?}");
    let ended_at = chrono::DateTime::parse_from_rfc3339(ends[0]["at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();
    let asked = closed_at.lock().unwrap().unwrap();
    let latency = ended_at - asked;
    eprintln!(
        "fleet cancel: the worker recorded the end {latency} ms after the parent's agent_close"
    );
    assert!(
        latency < 5_000,
        "the worker took {latency} ms to end a cancelled run"
    );
}

/// Children the fleet end to end fans out, and workers it runs.
const E2E_CHILDREN: usize = 50;
const E2E_WORKERS: usize = 3;

/// `scripts/e2e-fleet`'s test (ignored by a plain `cargo test`; the script starts
/// PostgreSQL on loopback and passes its URL in `BROOD_E2E_FLEET_URL`): one parent
/// fans out 50 children over 3 workers against brood-mock; one worker is SIGKILLed
/// while it holds runs; every child completes exactly once, and the parent gets each
/// result once.
#[test]
#[ignore = "run by scripts/e2e-fleet, which starts PostgreSQL on loopback"]
fn e2e_fleet_fifty_children_three_workers_one_killed() {
    let url = std::env::var("BROOD_E2E_FLEET_URL")
        .expect("BROOD_E2E_FLEET_URL: run this test through scripts/e2e-fleet");
    let f = fleet_fixture();
    std::fs::write(
        f.home.path().join(".config/brood/config.toml"),
        "[subagents]\nplacement = \"fleet\"\nmax_concurrent = 64\n",
    )
    .unwrap();
    let prompts: Vec<String> = (0..E2E_CHILDREN).map(|i| format!("look {i}")).collect();
    // Each child step takes 300 ms of "model latency", so the kill finds runs in flight.
    let server = MockServer::start(move |req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if first.starts_with("look ") {
            let reply = match req.assistant_turns() {
                0 => MockReply::tool_call("list_dir", json!({})),
                _ => MockReply::text(ANSWER.replace("looked", &format!("looked ({first})"))),
            };
            return reply.after(std::time::Duration::from_millis(300));
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"prompts": prompts})),
            _ => MockReply::text("done"),
        }
    });
    let started = std::time::Instant::now();
    let roots: Vec<tempfile::TempDir> = (0..E2E_WORKERS)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let mut workers: Vec<Child> = roots
        .iter()
        .map(|r| spawn_worker(&f, &server, &url, r.path()))
        .collect();
    let parent = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .arg("run")
        .args(local_flags(&server))
        .args(["--json", "fan out"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-run: the parent's request and a third of the children's first steps.
    wait_for_requests(&server, 1 + E2E_CHILDREN / 3);
    let mut killed = workers.remove(0);
    killed.kill().unwrap();
    let _ = killed.wait();
    let killed_at = started.elapsed();
    let out = parent.wait_with_output().unwrap();
    let wall = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let logs: Vec<String> = workers.into_iter().map(stop).collect();
    // Every child completed exactly once, none left interrupted.
    let export = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .args(["agents", "export", "--json"])
        .output()
        .unwrap();
    assert_eq!(export.status.code(), Some(0), "{}", text(&export).1);
    let export: Value = serde_json::from_slice(&export.stdout).unwrap();
    let runs = export["runs"].as_array().unwrap();
    let children: Vec<&Value> = runs.iter().filter(|r| !r["parent_id"].is_null()).collect();
    assert_eq!(children.len(), E2E_CHILDREN);
    let mut taken_over = 0;
    for c in &children {
        assert_eq!(c["status"], "completed", "{c:#}\nworkers: {logs:#?}");
        let kinds: Vec<&str> = c["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        let ends = kinds
            .iter()
            .filter(|k| ["completed", "failed", "cancelled"].contains(k))
            .count();
        assert_eq!(ends, 1, "{}: {kinds:?}", c["id"]);
        if kinds.contains(&"resumed") {
            taken_over += 1;
        }
    }
    assert!(
        taken_over > 0,
        "the killed worker held no run: the test killed too late"
    );
    // The parent got each result once.
    let last = server
        .requests()
        .into_iter()
        .rev()
        .find(|r| {
            r["messages"][1]["content"] == "fan out" && r["messages"].as_array().unwrap().len() > 2
        })
        .unwrap()
        .to_string();
    for i in 0..E2E_CHILDREN {
        let marker = format!("(look {i})");
        assert_eq!(
            last.matches(&marker).count(),
            1,
            "{marker} in the parent's step"
        );
    }
    let claims: usize = logs.iter().map(|l| l.matches("claimed run").count()).sum();
    eprintln!(
        "e2e-fleet: {E2E_CHILDREN} children over {E2E_WORKERS} workers, one SIGKILLed at {:.1} s: \
         all completed once in {:.1} s wall; {taken_over} taken over; {claims} claims by the surviving workers",
        killed_at.as_secs_f64(),
        wall.as_secs_f64()
    );
}

/// Without a PostgreSQL ledger, the fleet is refused at the start, naming what to
/// set: `placement = "fleet"` (before any child could fail at its enqueue) and
/// `brood worker`.
#[test]
fn the_fleet_without_a_postgresql_ledger_is_refused_before_anything_runs() {
    let f = fleet_fixture();
    let server = MockServer::start(|_| MockReply::text("never asked"));
    let out = run_local(&f, &server, &["fan out"]);
    let err = text(&out).1;
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("subagents.placement") && err.contains("ledger_url"),
        "{err}"
    );
    let root = tempfile::tempdir().unwrap();
    let out = f
        .command()
        .args(["worker", "--workspace-root"])
        .arg(root.path())
        .args(local_flags(&server))
        .output()
        .unwrap();
    let err = text(&out).1;
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("PostgreSQL ledger"), "{err}");
    assert_eq!(server.requests().len(), 0, "nothing may reach the model");
}

/// `brood doctor` with a PostgreSQL ledger reaches the database a run would use (its
/// schema read, nothing created), not the workspace's SQLite file; an unreachable one
/// fails the check naming the setting, with the URL's password hidden.
#[test]
fn doctor_reaches_a_postgres_ledger_and_names_the_setting_when_it_cannot() {
    let Some(url) = pg::fresh_database("doctor_reaches_a_postgres_ledger") else {
        return;
    };
    let f = fixture();
    let server = MockServer::start(|_| MockReply::text("done"));
    let doctor = |url: &str| {
        let out = f
            .command()
            .env("BROOD_LEDGER_URL", url)
            .arg("doctor")
            .args(local_flags(&server))
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        let ledger = stdout
            .lines()
            .find(|l| l.contains(" ledger"))
            .unwrap_or_else(|| panic!("no ledger line:\n{stdout}\n{stderr}"))
            .to_string();
        (ledger, stdout + &stderr)
    };
    let (ledger, all) = doctor(&url);
    assert!(ledger.starts_with('✓'), "{all}");
    assert!(
        ledger.contains("postgres") && ledger.contains("not created yet (schema v"),
        "{all}"
    );
    assert!(
        ledger.contains("reachable") && !ledger.contains(".brood"),
        "{all}"
    );
    // Its TLS state: a Unix socket never uses TLS (docs/LEDGER.md "TLS").
    assert!(
        ledger.contains("no TLS (sslmode=disable: a Unix socket)"),
        "{all}"
    );
    // doctor created nothing: neither the ledger in the database nor the SQLite file.
    assert!(!f.ws.path().join(".brood/state/brood.db").exists());
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .arg("run")
        .args(local_flags(&server))
        .arg("hello")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let (ledger, all) = doctor(&url);
    assert!(ledger.starts_with('✓'), "{all}");
    let version = format!("schema v{}", brood::ledger::SCHEMA_VERSION);
    assert!(
        ledger.contains(&version) && !ledger.contains("not created"),
        "{all}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (ledger, all) = doctor(&format!(
        "postgres://brood:hunter2secret@127.0.0.1:{port}/x"
    ));
    assert!(ledger.starts_with('✗'), "{all}");
    assert!(all.contains("ledger_url"), "{all}");
    assert!(!all.contains("hunter2secret"), "{all}");
}

/// `brood doctor` against a server that answers the connect and then nothing (a
/// stopped backend, a firewall that starts dropping): the check fails within the
/// URL's `query_timeout`, naming the host and the timeout (without it doctor waited
/// until killed; docs/FLEET.md "Unreachable servers").
#[test]
fn doctor_against_a_server_gone_silent_fails_within_query_timeout_naming_it() {
    let Some(url) = pg::fresh_database("doctor_against_a_server_gone_silent") else {
        return;
    };
    let (socket, db) = pg::socket_and_db(&url);
    let front = proxy::Proxy::start(socket);
    front
        .silent_after_connect
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let f = fixture();
    let server = MockServer::start(|_| MockReply::text("done"));
    let asked = std::time::Instant::now();
    let out = f
        .command()
        .env(
            "BROOD_LEDGER_URL",
            format!(
                "postgresql://brood:hunter2secret@127.0.0.1:{}/{db}?sslmode=disable&query_timeout=1",
                front.port
            ),
        )
        .arg("doctor")
        .args(local_flags(&server))
        .output()
        .unwrap();
    let took = asked.elapsed();
    let (stdout, stderr) = text(&out);
    let all = stdout.clone() + &stderr;
    let ledger = stdout
        .lines()
        .find(|l| l.contains(" ledger"))
        .unwrap_or_else(|| panic!("no ledger line:\n{all}"));
    assert!(ledger.starts_with('✗'), "{all}");
    assert!(
        all.contains("127.0.0.1") && all.contains("within 1 s (query_timeout)"),
        "{all}"
    );
    assert!(!all.contains("hunter2secret"), "{all}");
    assert_eq!(front.connections(), 1, "{all}");
    assert!(took < Duration::from_secs(15), "{took:?}");
}
