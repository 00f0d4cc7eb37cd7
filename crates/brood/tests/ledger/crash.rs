//! The ledger across real processes. The test binary re-executes itself as a writer
//! (the ignored test `writer_child`, selected by environment variables) that reports,
//! on stdout, only what it has *awaited* to be durable.
//!
//! - Crash: writers are SIGKILLed at random points, many times; after each kill,
//!   every run the writer reported is intact, the database passes
//!   `PRAGMA integrity_check`, and the dead boot's unfinished runs are `interrupted`.
//! - Two live processes write to one workspace at once: all runs of both are there,
//!   and neither marks the other's runs interrupted.
//! - Cancelling a run of a dead process marks it directly; reading and cancelling
//!   from outside recover nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brood::ledger::{
    CancelOutcome, EventKind, Ledger, LedgerError, LedgerOptions, ListFilter, NewRun, RunId,
    RunStatus,
};
use rand::Rng;
use serde_json::json;

use crate::common::{Place, Store};

const ENV_WS: &str = "BROOD_LEDGER_CHILD_WS";
const ENV_MODE: &str = "BROOD_LEDGER_CHILD_MODE";
/// The ledger's URL, when it is not the workspace's SQLite file.
const ENV_URL: &str = "BROOD_LEDGER_CHILD_URL";
const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------- the child side

/// Not a test on its own: the writer process the other tests start.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn writer_child() {
    let (Ok(ws), Ok(mode)) = (std::env::var(ENV_WS), std::env::var(ENV_MODE)) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // libtest has printed "test writer_child ... " without a newline; end that line
    // so that every report is a line of its own.
    say("");
    rt.block_on(async move {
        let options = LedgerOptions {
            url: std::env::var(ENV_URL).ok(),
            ..LedgerOptions::default()
        };
        let ledger = Arc::new(Ledger::open(Path::new(&ws), options).unwrap());
        say(&format!("BOOT {}", ledger.boot_id()));
        for b in &ledger.recovery().live_boots {
            say(&format!("LIVE {b}"));
        }
        for r in &ledger.recovery().interrupted {
            say(&format!("INTERRUPTED {r}"));
        }
        match mode.as_str() {
            "crash" => crash_writer(ledger).await,
            "hold" => hold_writer(ledger).await,
            other => panic!("unknown child mode {other}"),
        }
    });
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Write forever from several tasks: each run is created, started, gets events and
/// messages, and every other one is completed. Reports only awaited operations.
async fn crash_writer(ledger: Arc<Ledger>) {
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let ledger = Arc::clone(&ledger);
        tasks.push(tokio::spawn(async move {
            for i in 0u64.. {
                let id = ledger
                    .create_run(NewRun {
                        name: Some(format!("w{worker}-{i}")),
                        ..NewRun::new("crash test")
                    })
                    .await
                    .unwrap();
                say(&format!("CREATED {id}"));
                ledger.mark_running(&id).await.unwrap();
                for k in 0..20 {
                    ledger
                        .append_event(&id, EventKind::ToolStarted, json!({ "k": k }))
                        .unwrap();
                    ledger
                        .append_message(&id, "assistant", json!(format!("message {k}")))
                        .unwrap();
                }
                if i % 2 == 0 {
                    ledger.complete(&id, json!({ "i": i })).await.unwrap();
                    say(&format!("COMPLETED {id}"));
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Create three running runs, report them, wait for "go" on stdin, then write a burst
/// from several tasks, complete everything and close cleanly.
async fn hold_writer(ledger: Arc<Ledger>) {
    let mut held = Vec::new();
    for i in 0..3 {
        let id = ledger
            .create_run(NewRun {
                name: Some(format!("held-{i}")),
                ..NewRun::new("hold")
            })
            .await
            .unwrap();
        ledger.mark_running(&id).await.unwrap();
        say(&format!("HELD {id}"));
        held.push(id);
    }
    say("HOLDING");
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .unwrap();
    if line.trim() != "go" {
        return;
    }
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let ledger = Arc::clone(&ledger);
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..40 {
                let id = ledger
                    .create_run(NewRun {
                        name: Some(format!("burst-{worker}-{i}")),
                        ..NewRun::new("burst")
                    })
                    .await
                    .unwrap();
                ledger.mark_running(&id).await.unwrap();
                for k in 0..10 {
                    ledger
                        .append_event(&id, EventKind::ModelResponse, json!({ "k": k }))
                        .unwrap();
                }
                ledger.complete(&id, json!("ok")).await.unwrap();
                ids.push(id);
            }
            ids
        }));
    }
    for t in tasks {
        for id in t.await.unwrap() {
            say(&format!("RUN {id}"));
        }
    }
    for id in &held {
        ledger.complete(id, json!("held done")).await.unwrap();
    }
    let ledger = Arc::into_inner(ledger).unwrap();
    ledger.close().await.unwrap();
    say("DONE");
}

// ---------------------------------------------------------------- the parent side

/// A running writer process and the lines it has printed.
struct Writer {
    proc: std::process::Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    /// Everything the child wrote on stderr (its panic message, if it died), so a
    /// failure says why.
    stderr: Arc<std::sync::Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(ws: &impl Place, mode: &str) -> Writer {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        if let Some(url) = ws.url() {
            cmd.env(ENV_URL, url);
        }
        let mut proc = cmd
            .args(["--exact", "crash::writer_child", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(ENV_WS, ws.path())
            .env(ENV_MODE, mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = proc.stdout.take().unwrap();
        let stderr = Arc::new(std::sync::Mutex::new(String::new()));
        let mut err_pipe = proc.stderr.take().unwrap();
        let err_sink = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err_pipe.read(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                err_sink.lock().unwrap().push_str(&text);
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Writer {
            proc,
            lines: rx,
            seen: Vec::new(),
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// Wait (bounded) until a line equal to or starting with `marker` was printed.
    fn wait_for(&mut self, marker: &str) {
        let deadline = Instant::now() + STARTUP_DEADLINE;
        if self.seen.iter().any(|l| l.starts_with(marker)) {
            return;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.starts_with(marker);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "child never printed {marker} within {STARTUP_DEADLINE:?}; it printed {:?}; stderr:\n{}",
                    self.seen,
                    self.stderr_text()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    // Its stdout closed: reap it and read its stderr to the end.
                    let _ = self.proc.wait();
                    if let Some(reader) = self.stderr_reader.take() {
                        let _ = reader.join();
                    }
                    panic!(
                        "child exited before printing {marker}: {:?}; stderr:\n{}",
                        self.seen,
                        self.stderr_text()
                    )
                }
            }
        }
    }

    fn stderr_text(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// SIGKILL, reap, and collect everything it printed.
    fn kill(&mut self) {
        self.proc.kill().unwrap();
        self.proc.wait().unwrap();
        self.drain();
    }

    fn drain(&mut self) {
        while let Ok(line) = self.lines.recv() {
            self.seen.push(line);
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.proc.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Wait (bounded) for a clean exit.
    fn wait_exit(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.proc.try_wait().unwrap() {
                if let Some(reader) = self.stderr_reader.take() {
                    let _ = reader.join();
                }
                assert!(
                    status.success(),
                    "child failed: {status}; stderr:\n{}",
                    self.stderr_text()
                );
                break;
            }
            assert!(Instant::now() < deadline, "child did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.drain();
    }

    fn values(&self, prefix: &str) -> Vec<String> {
        let p = format!("{prefix} ");
        self.seen
            .iter()
            .filter_map(|l| l.strip_prefix(&p).map(str::to_string))
            .collect()
    }

    fn boot(&self) -> Option<String> {
        self.values("BOOT").pop()
    }
}

/// Every run's events are numbered 0.. without gaps, starting with `spawned`.
fn assert_event_logs_whole(ws: &impl Place) {
    let export = Ledger::open_reader_at(ws.path(), ws.url())
        .unwrap()
        .export()
        .unwrap();
    for run in &export.runs {
        assert_eq!(run.events[0].kind, EventKind::Spawned, "{}", run.run.id);
        for (i, e) in run.events.iter().enumerate() {
            assert_eq!(e.seq, i as u64, "gap in events of {}", run.run.id);
        }
        let last = run.events.last().unwrap();
        if run.run.status.is_terminal() {
            assert_eq!(last.kind, EventKind::for_status(run.run.status));
        }
    }
}

fn sigkilled_writers_lose_nothing_they_reported(ws: Store) {
    let mut rng = rand::thread_rng();
    let mut created_total = BTreeSet::new();
    let mut completed_total = BTreeSet::new();
    let started = Instant::now();
    for iteration in 0..20 {
        let mut child = Writer::start(&ws, "crash");
        if iteration % 4 == 0 {
            // Anywhere from start-up (open, recovery of the previous child) onwards.
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..60)));
        } else {
            child.wait_for("BOOT");
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..250)));
        }
        child.kill();
        let created: BTreeSet<String> = child.values("CREATED").into_iter().collect();
        let completed: BTreeSet<String> = child.values("COMPLETED").into_iter().collect();

        // Right after the kill, before anyone recovers anything, an outside reader
        // (the CLI) can already read every reported run: the hot WAL is usable.
        // A child killed before it made the database (only possible in the first
        // iteration, and before it reported anything) leaves no ledger to read.
        match Ledger::open_reader_at(ws.path(), ws.url()) {
            Ok(outside) => {
                outside.integrity_check().unwrap();
                for id in &created {
                    outside.run(&RunId::from_string(id.clone())).unwrap();
                }
            }
            Err(LedgerError::Missing { .. }) if iteration == 0 && created.is_empty() => {}
            Err(e) => panic!("iteration {iteration}: outside reader: {e}"),
        }

        // A full open recovers the dead child's boot.
        let ledger = ws.try_open_with(LedgerOptions::default()).unwrap();
        if let Some(boot) = child.boot() {
            assert!(
                ledger.recovery().dead_boots.contains(&boot),
                "iteration {iteration}: boot {boot} not found dead: {:?}",
                ledger.recovery()
            );
            assert!(!ledger.recovery().live_boots.contains(&boot));
        }
        let reader = ledger.reader().unwrap();
        reader.integrity_check().unwrap();
        for id in &created {
            let run = reader.run(&RunId::from_string(id.clone())).unwrap();
            if completed.contains(id) {
                assert_eq!(run.status, RunStatus::Completed, "iteration {iteration}");
                assert!(run.result.is_some());
            } else {
                // Completed after it was reported created but before the kill, or
                // interrupted by recovery.
                match run.status {
                    RunStatus::Completed => {}
                    RunStatus::Interrupted => {
                        assert_eq!(run.status_reason.as_deref(), Some("process exited"))
                    }
                    other => panic!("iteration {iteration}: run {id} left {other}"),
                }
            }
        }
        // Nothing of any dead boot stays unfinished.
        let all = reader
            .list_runs(ListFilter {
                include_archived: true,
            })
            .unwrap();
        assert!(
            all.iter().all(|r| r.run.status.is_terminal()),
            "iteration {iteration}: unfinished runs after recovery"
        );
        drop(reader);
        drop(ledger);
        created_total.extend(created);
        completed_total.extend(completed);
    }
    // Everything reported over all iterations is still there at the end.
    let reader = Ledger::open_reader_at(ws.path(), ws.url()).unwrap();
    reader.integrity_check().unwrap();
    let all: BTreeMap<String, RunStatus> = reader
        .list_runs(ListFilter {
            include_archived: true,
        })
        .unwrap()
        .into_iter()
        .map(|r| (r.run.id.to_string(), r.run.status))
        .collect();
    for id in &created_total {
        assert!(all.contains_key(id), "run {id} lost");
    }
    for id in &completed_total {
        assert_eq!(all[id], RunStatus::Completed);
    }
    assert!(
        created_total.len() >= 20,
        "the writers barely wrote ({} runs); the test proves little",
        created_total.len()
    );
    assert_event_logs_whole(&ws);
    eprintln!(
        "crash test: {} runs reported, {} completed, {:?}",
        created_total.len(),
        completed_total.len(),
        started.elapsed()
    );
}

fn two_live_processes_share_a_workspace(ws: Store) {
    let mut a = Writer::start(&ws, "hold");
    a.wait_for("HOLDING");
    let mut b = Writer::start(&ws, "hold");
    b.wait_for("HOLDING");
    let (boot_a, boot_b) = (a.boot().unwrap(), b.boot().unwrap());

    // B opened while A was alive: it saw A alive and interrupted nothing.
    assert!(b.values("LIVE").contains(&boot_a), "{:?}", b.seen);
    assert!(b.values("INTERRUPTED").is_empty());
    // Nor does a third, full open while both live.
    let ledger = ws.try_open_with(LedgerOptions::default()).unwrap();
    assert!(ledger.recovery().interrupted.is_empty());
    for boot in [&boot_a, &boot_b] {
        assert!(ledger.recovery().live_boots.contains(boot));
    }
    drop(ledger);
    let reader = Ledger::open_reader_at(ws.path(), ws.url()).unwrap();
    for id in a.values("HELD").into_iter().chain(b.values("HELD")) {
        let run = reader.run(&RunId::from_string(id)).unwrap();
        assert_eq!(run.status, RunStatus::Running);
    }
    let mut live = reader.current_sessions().unwrap();
    live.sort();
    assert_eq!(live.len(), 2, "both sessions are current while alive");

    // Both write a burst at the same time, then finish and close.
    a.send("go");
    b.send("go");
    a.wait_exit();
    b.wait_exit();
    assert!(a.seen.iter().any(|l| l == "DONE") && b.seen.iter().any(|l| l == "DONE"));

    reader.integrity_check().unwrap();
    let all = reader
        .list_runs(ListFilter {
            include_archived: true,
        })
        .unwrap();
    let by_id: BTreeMap<String, RunStatus> = all
        .iter()
        .map(|r| (r.run.id.to_string(), r.run.status))
        .collect();
    for child in [&a, &b] {
        let ids: Vec<String> = child
            .values("RUN")
            .into_iter()
            .chain(child.values("HELD"))
            .collect();
        assert_eq!(ids.len(), 160 + 3);
        for id in ids {
            assert_eq!(by_id.get(&id), Some(&RunStatus::Completed), "run {id}");
        }
    }
    assert_eq!(all.len(), 2 * 163);
    assert!(all.iter().all(|r| r.run.status != RunStatus::Interrupted));
    assert_event_logs_whole(&ws);
}

fn outside_readers_recover_nothing_and_cancel_of_a_dead_run_marks_it(ws: Store) {
    let mut child = Writer::start(&ws, "hold");
    child.wait_for("HOLDING");
    child.kill();
    let held: Vec<RunId> = child
        .values("HELD")
        .into_iter()
        .map(RunId::from_string)
        .collect();

    // Reading from outside changes nothing, even though the owner is dead — but it
    // shows the dead owner's runs as `interrupted` (its boot lock is free).
    let reader = Ledger::open_reader_at(ws.path(), ws.url()).unwrap();
    assert!(reader
        .list_runs(ListFilter::default())
        .unwrap()
        .iter()
        .all(|r| r.run.status == RunStatus::Interrupted));

    let mut cli = Ledger::open_maintenance_at(ws.path(), ws.url()).unwrap();
    let outcome = cli.request_cancel(&held[0]).unwrap();
    assert_eq!(
        outcome,
        CancelOutcome::MarkedCancelled {
            run_id: held[0].clone()
        }
    );
    let run = reader.run(&held[0]).unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert!(run.status_reason.unwrap().contains("already exited"));
    // The others are untouched until a full open recovers the dead boot (shown
    // interrupted meanwhile; the recovery below proves nothing was written).
    assert_eq!(reader.run(&held[1]).unwrap().status, RunStatus::Interrupted);
    let ledger = ws.try_open_with(LedgerOptions::default()).unwrap();
    let mut expected = held[1..].to_vec();
    expected.sort();
    let mut got = ledger.recovery().interrupted.clone();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(reader.run(&held[0]).unwrap().status, RunStatus::Cancelled);
    assert_eq!(reader.run(&held[2]).unwrap().status, RunStatus::Interrupted);
}

fn simultaneous_first_opens_create_the_ledger_once(ws: Store) {
    let mut children: Vec<Writer> = (0..3).map(|_| Writer::start(&ws, "hold")).collect();
    for child in &mut children {
        child.wait_for("HOLDING");
    }
    let reader = Ledger::open_reader_at(ws.path(), ws.url()).unwrap();
    reader.integrity_check().unwrap();
    let runs = reader
        .list_runs(ListFilter {
            include_archived: true,
        })
        .unwrap();
    assert_eq!(runs.len(), 9);
    assert!(runs.iter().all(|r| r.run.status == RunStatus::Running));
    // Every child saw the others that were already alive, and interrupted nothing.
    for child in &mut children {
        assert!(child.values("INTERRUPTED").is_empty());
        child.kill();
    }
}

#[test]
fn a_torn_wal_index_after_a_crash_does_not_stop_readers_or_writers() {
    let ws = Store::sqlite();
    let mut child = Writer::start(&ws, "hold");
    child.wait_for("HOLDING");
    child.kill();
    let db = ws
        .path()
        .canonicalize()
        .unwrap()
        .join(".brood/state/brood.db");
    let wal = db.with_extension("db-wal");
    let shm = db.with_extension("db-shm");
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 0,
        "expected a hot WAL"
    );
    // As if the writer died while updating the WAL index header: it must be rebuilt,
    // which a strictly read-only connection cannot do.
    let mut index = std::fs::read(&shm).unwrap();
    for b in index.iter_mut().take(136) {
        *b = 0xA5;
    }
    std::fs::write(&shm, &index).unwrap();

    let reader = Ledger::open_reader_at(ws.path(), ws.url()).unwrap();
    reader.integrity_check().unwrap();
    let runs = reader.list_runs(ListFilter::default()).unwrap();
    assert_eq!(runs.len(), 3);
    // Shown interrupted (the writer is dead), not recorded so: the next session's
    // recovery still finds all three running and marks them.
    assert!(runs.iter().all(|r| r.run.status == RunStatus::Interrupted));
    let ledger = ws.try_open_with(LedgerOptions::default()).unwrap();
    assert_eq!(ledger.recovery().interrupted.len(), 3);
}

crate::both_blocking!(
    sigkilled_writers_lose_nothing_they_reported,
    two_live_processes_share_a_workspace,
    outside_readers_recover_nothing_and_cancel_of_a_dead_run_marks_it,
    simultaneous_first_opens_create_the_ledger_once,
);
