//! A frozen worker, end to end (docs/FLEET.md "Lease rules": expiry and fencing): a
//! `brood worker` stopped with SIGSTOP keeps its PostgreSQL session (and its boot's
//! advisory lock) but stops heartbeating; once its lease has expired another worker
//! takes its run over, and when the frozen one continues it writes nothing more into
//! the run — the run completes once, by its new holder, with one transcript.

use super::fleet::{fleet_fixture, fleet_parent, fleet_runs, pg, spawn_worker_allowing, ANSWER};
use super::*;
use brood_mock::Gate;
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the frozen worker's model step answers: a marker no record of the run may hold.
const FROZEN_MARK: &str = "written-by-the-frozen-worker";

/// A worker process, SIGKILLed if the test ends without stopping it (a stopped
/// process left behind would hold its database session for good); its stderr read
/// line by line on a thread of its own.
struct Worker {
    child: Option<Child>,
    lines: Receiver<String>,
    log: Vec<String>,
}

impl Worker {
    fn spawn(f: &Fixture, server: &MockServer, url: &str, root: &Path) -> Worker {
        let mut child = spawn_worker_allowing(f, server, url, root, f.ws.path());
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Worker {
            child: Some(child),
            lines,
            log: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Wait (up to `within`) for a line of its stderr containing every one of `words`.
    fn wait_for_line(&mut self, words: &[&str], within: Duration) -> Option<String> {
        let until = Instant::now() + within;
        loop {
            if let Some(l) = self
                .log
                .iter()
                .find(|l| words.iter().all(|w| l.contains(w)))
            {
                return Some(l.clone());
            }
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.log.push(line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// SIGTERM it: it finishes what it holds and exits 0. Its whole stderr.
    fn stop(mut self) -> String {
        let mut child = self.child.take().unwrap();
        send_signal(child.id(), "TERM");
        let until = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > until {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.log.extend(self.lines.iter());
        let log = self.log.join("\n");
        assert_eq!(status.code(), Some(0), "worker: {log}");
        log
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The holder of run `id`'s lease, as the ledger has it (`None`: nobody).
fn holder(url: &str, id: &str) -> Option<String> {
    let rows = pg::sql(
        url,
        &[&format!(
            "SELECT coalesce(worker_boot_id, '') FROM run_leases WHERE run_id = '{id}'"
        )],
    );
    rows[0].first().filter(|h| !h.is_empty()).cloned()
}

#[test]
fn a_frozen_workers_run_is_taken_over_and_it_writes_nothing_more_into_it() {
    let Some(url) = pg::fresh_database("a_frozen_workers_run_is_taken_over") else {
        return;
    };
    let f = fleet_fixture();
    // The child's first step: the first worker's request is held until it has been
    // frozen and its run taken over, then answered with a tool call naming the mark;
    // the second worker's is held until the first has continued and dealt with it.
    let (first_gate, second_gate) = (Gate::new(), Gate::new());
    let (first_held, second_held) = (first_gate.clone(), second_gate.clone());
    let child_steps = Arc::new(AtomicUsize::new(0));
    let server = MockServer::start(move |req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if first.starts_with("look slowly") {
            let marked = req.body().to_string().contains(FROZEN_MARK);
            return match (req.assistant_turns(), marked) {
                (0, _) => match child_steps.fetch_add(1, Ordering::SeqCst) {
                    0 => MockReply::tool_call("list_dir", json!({"path": FROZEN_MARK}))
                        .until(&first_held),
                    _ => MockReply::tool_call("list_dir", json!({})).until(&second_held),
                },
                (_, true) => MockReply::text(ANSWER.replace("looked", FROZEN_MARK)),
                (_, false) => MockReply::text(ANSWER),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"description": "look slowly"})),
            _ => MockReply::text("done"),
        }
    });
    let parent = fleet_parent(&f, &server, &url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (root_a, root_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Worker::spawn(&f, &server, &url, root_a.path());
    // The parent's request, then the child's on the first worker (held).
    wait_for_requests(&server, 2);
    let runs = fleet_runs(&f, &url);
    let id = runs
        .iter()
        .find(|r| !r["parent_id"].is_null())
        .and_then(|r| r["id"].as_str())
        .unwrap()
        .to_string();
    let a_boot = holder(&url, &id).expect("the first worker holds the run");
    // Frozen: its process keeps its database session (and its boot's advisory lock)
    // but its heartbeats stop.
    send_signal(a.pid(), "STOP");
    let frozen_at = Instant::now();
    let b = Worker::spawn(&f, &server, &url, root_b.path());
    // Its lease (2 s) expires and the second worker takes the run over.
    let b_boot = loop {
        match holder(&url, &id) {
            Some(h) if h != a_boot => break h,
            _ if frozen_at.elapsed() > Duration::from_secs(30) => {
                send_signal(a.pid(), "CONT");
                panic!(
                    "30 s after the first worker froze (lease 2 s) nobody took its run over: \
                     a frozen worker keeps its advisory lock, so its expired lease counts as alive"
                );
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let taken_after = frozen_at.elapsed();
    // The second worker's request (held): it runs the child now.
    wait_for_requests(&server, 3);
    // The first worker's answer is waiting in its socket when it continues.
    first_gate.open();
    send_signal(a.pid(), "CONT");
    let noticed = a
        .wait_for_line(&["lost", &id], Duration::from_secs(30))
        .unwrap_or_else(|| {
            panic!(
                "the first worker never said it lost run {id}: {}",
                a.log.join("\n")
            )
        });
    second_gate.open();
    let out = wait_bounded(parent);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["final"], "done");
    let log_b = b.stop();
    let log_a = a.stop();
    // Whether the first worker went on to its next step (its answer's tool result
    // in a request) before it learnt of the loss: its records of that step were then
    // fenced off by its writer, not only stopped by its heartbeat.
    let stale_steps = server
        .requests()
        .iter()
        .filter(|r| r.to_string().contains(FROZEN_MARK))
        .count();
    eprintln!(
        "frozen worker: run taken over {:.1} s after the freeze; the first worker made {stale_steps} request(s) after it continued; {noticed}",
        taken_after.as_secs_f64()
    );
    // Completed once, by the second worker.
    let runs = fleet_runs(&f, &url);
    let child = runs.iter().find(|r| r["id"] == id.as_str()).unwrap();
    assert_eq!(
        child["status"], "completed",
        "{child}\nA: {log_a}\nB: {log_b}"
    );
    let ends = pg::sql(
        &url,
        &[&format!(
            "SELECT kind FROM events WHERE run_id = '{id}' \
             AND kind IN ('completed', 'failed', 'cancelled', 'interrupted') ORDER BY seq"
        )],
    );
    assert_eq!(ends[0], ["completed"], "A: {log_a}\nB: {log_b}");
    let session = pg::sql(
        &url,
        &[&format!(
            "SELECT session_boot_id FROM runs WHERE id = '{id}'"
        )],
    );
    assert_eq!(session[0], std::slice::from_ref(&b_boot));
    assert!(
        log_b.contains(&format!("claimed run {id} (attempt 2")),
        "{log_b}"
    );
    // Nothing the first worker did after it continued is in the run: not its model's
    // answer, not its tool's result, not its end.
    let marked = pg::sql(
        &url,
        &[
            &format!(
                "SELECT seq || ' ' || kind FROM events WHERE run_id = '{id}' \
                 AND payload LIKE '%{FROZEN_MARK}%'"
            ),
            &format!(
                "SELECT seq || ' ' || role FROM transcripts WHERE run_id = '{id}' \
                 AND content LIKE '%{FROZEN_MARK}%'"
            ),
        ],
    );
    assert_eq!(
        marked,
        [Vec::<String>::new(), Vec::new()],
        "the frozen worker's records landed in the run taken over\nA: {log_a}"
    );
    // One transcript: the task, then the second worker's step (its tool call and
    // the tool's result) and its answer.
    let roles = pg::sql(
        &url,
        &[&format!(
            "SELECT role FROM transcripts WHERE run_id = '{id}' ORDER BY seq"
        )],
    );
    assert_eq!(
        roles[0].iter().filter(|r| *r == "assistant").count(),
        2,
        "{roles:?}"
    );
}
