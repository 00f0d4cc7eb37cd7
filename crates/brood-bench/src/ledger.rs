//! Scenario 4, the ledger (default options: WAL, `synchronous=FULL`, group commit):
//!
//! - progress events/s: `append_event` M times (fire-and-forget), then `flush`;
//!   M / (time until the flush resolved, i.e. everything is committed);
//! - awaited creates/s: K concurrent `create_run`s, each awaited until durable;
//! - one awaited commit alone: sequential `create_run` awaits (the commit + fsync
//!   floor every spawn pays);
//! - `brood agents list` over R runs: a fresh `LedgerReader` (as the CLI opens one)
//!   and `list_runs` of the current session, and `list_runs` alone on a warm reader;
//! - restart recovery: a child process (this binary, `__dead-boot DIR R`) records R
//!   runs as running and exits without closing its ledger; the figure is the time
//!   `Ledger::open` takes to find the dead boot and mark its R runs interrupted.

use crate::report::{ms, quantile, Figure, Goal};
use brood::ledger::{EventKind, Ledger, LedgerOptions, ListFilter, NewRun, RunId};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Sizes of one ledger run.
pub struct Sizes {
    pub events: usize,
    pub concurrent_creates: usize,
    pub sequential_creates: usize,
    /// Runs listed and recovered.
    pub runs: usize,
}

fn err(what: &str) -> impl Fn(brood::ledger::LedgerError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn run_named(i: usize) -> NewRun {
    NewRun {
        id: Some(RunId::new()),
        name: Some(format!("bench-{i}")),
        role: Some("explore".into()),
        agent_type: Some("explore".into()),
        model: Some("mock-model".into()),
        provider: Some("local".into()),
        ..NewRun::new(format!(
            "benchmark run {i}: find every place we parse config"
        ))
    }
}

pub async fn scenario(sizes: &Sizes) -> Result<Vec<Figure>, String> {
    let mut figures = Vec::new();
    let ws = crate::harness::workspace()?;
    let ledger = open_blocking(ws.path()).await?;

    // Progress events: fire-and-forget, then one flush.
    let run = ledger
        .create_run(run_named(0))
        .await
        .map_err(err("create_run"))?;
    ledger
        .mark_running(&run)
        .await
        .map_err(err("mark_running"))?;
    let before = ledger.stats();
    let t0 = Instant::now();
    for i in 0..sizes.events {
        ledger
            .append_event(
                &run,
                EventKind::ToolFinished,
                json!({"call_id": format!("call_{i}"), "name": "read_file", "ok": true, "duration_ms": 3, "output_bytes": 812}),
            )
            .map_err(err("append_event"))?;
    }
    ledger.flush().await.map_err(err("flush"))?;
    let elapsed = t0.elapsed();
    let after = ledger.stats();
    let written = after.events_written - before.events_written;
    if written != sizes.events as u64 {
        return Err(format!(
            "{written} events committed, {} appended",
            sizes.events
        ));
    }
    let batches = after.batches_committed - before.batches_committed;
    let rate = sizes.events as f64 / elapsed.as_secs_f64();
    eprintln!(
        "  ledger: {} progress events durable in {:.1} ms ({rate:.0}/s, {batches} group commits)",
        sizes.events,
        ms(elapsed)
    );
    figures.push(
        Figure::new("ledger", "progress events durable per second", rate, "/s")
            .goal(Goal::AtLeast(20_000.0))
            .detail(json!({"events": sizes.events, "ms": ms(elapsed), "group_commits": batches})),
    );

    // Awaited durable operations, many at once.
    let before = ledger.stats();
    let t0 = Instant::now();
    let creates: Vec<_> = (0..sizes.concurrent_creates)
        .map(|i| ledger.create_run(run_named(i + 1)))
        .collect();
    for r in futures::future::join_all(creates).await {
        r.map_err(err("create_run"))?;
    }
    let elapsed = t0.elapsed();
    let batches = ledger.stats().batches_committed - before.batches_committed;
    let rate = sizes.concurrent_creates as f64 / elapsed.as_secs_f64();
    eprintln!(
        "  ledger: {} concurrent awaited create_run in {:.1} ms ({rate:.0}/s, {batches} group commits)",
        sizes.concurrent_creates,
        ms(elapsed)
    );
    figures.push(
        Figure::new("ledger", "awaited create_run per second (concurrent)", rate, "/s")
            .goal(Goal::AtLeast(20_000.0))
            .detail(json!({"creates": sizes.concurrent_creates, "ms": ms(elapsed), "group_commits": batches})),
    );

    // One awaited commit at a time.
    let mut lat = Vec::with_capacity(sizes.sequential_creates);
    for i in 0..sizes.sequential_creates {
        let t = Instant::now();
        ledger
            .create_run(run_named(sizes.concurrent_creates + 1 + i))
            .await
            .map_err(err("create_run"))?;
        lat.push(ms(t.elapsed()));
    }
    figures.push(
        Figure::new(
            "ledger",
            "one awaited commit alone: p50",
            quantile(&lat, 0.5),
            "ms",
        )
        .detail(json!({"samples": lat.len(), "p99_ms": quantile(&lat, 0.99)})),
    );

    // Listing: top the session up to `runs` runs, then list as the CLI would.
    let have = 1 + sizes.concurrent_creates + sizes.sequential_creates;
    if have < sizes.runs {
        let more: Vec<_> = (have..sizes.runs)
            .map(|i| ledger.create_run(run_named(i)))
            .collect();
        for r in futures::future::join_all(more).await {
            r.map_err(err("create_run"))?;
        }
    }
    let listed = have.max(sizes.runs);
    let root = ws.path().to_path_buf();
    let (cold, warm) = tokio::task::spawn_blocking(move || list_times(&root, listed))
        .await
        .map_err(|e| format!("listing task: {e}"))??;
    let (cold50, warm50) = (quantile(&cold, 0.5), quantile(&warm, 0.5));
    eprintln!(
        "  ledger: list {listed} runs: open reader + list p50 {cold50:.2} ms, list on a warm reader p50 {warm50:.2} ms"
    );
    figures.push(
        Figure::new(
            "ledger",
            format!("agents list over {listed} runs (open reader + list_runs, p50)"),
            cold50,
            "ms",
        )
        .goal(Goal::AtMost(10.0))
        .detail(json!({"runs": listed, "samples_ms": cold})),
    );
    figures.push(
        Figure::new(
            "ledger",
            format!("list_runs over {listed} runs on a warm reader (p50)"),
            warm50,
            "ms",
        )
        .detail(json!({"runs": listed, "samples_ms": warm})),
    );
    drop(ledger);

    // Recovery after a dead boot.
    let ws2 = crate::harness::workspace()?;
    dead_boot(ws2.path(), sizes.runs)?;
    let root = ws2.path().to_path_buf();
    let (open_ms, interrupted) = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let l = Ledger::open(&root, LedgerOptions::default()).map_err(err("Ledger::open"))?;
        let took = ms(t.elapsed());
        Ok::<_, String>((took, l.recovery().interrupted.len()))
    })
    .await
    .map_err(|e| format!("recovery task: {e}"))??;
    if interrupted != sizes.runs {
        return Err(format!(
            "recovery marked {interrupted} runs interrupted, expected {}",
            sizes.runs
        ));
    }
    eprintln!("  ledger: recovery of {interrupted} runs of a dead boot: {open_ms:.1} ms");
    figures.push(
        Figure::new(
            "ledger",
            format!("restart recovery, {interrupted} runs (Ledger::open)"),
            open_ms,
            "ms",
        )
        .goal(Goal::AtMost(100.0))
        .detail(json!({"runs_interrupted": interrupted})),
    );
    Ok(figures)
}

async fn open_blocking(root: &Path) -> Result<Ledger, String> {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || Ledger::open(&root, LedgerOptions::default()))
        .await
        .map_err(|e| format!("open task: {e}"))?
        .map_err(err("Ledger::open"))
}

/// (open + list, list on a warm reader) samples in ms, checking the count.
fn list_times(root: &Path, expect: usize) -> Result<(Vec<f64>, Vec<f64>), String> {
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let reader = Ledger::open_reader(root).map_err(err("open_reader"))?;
        let runs = reader
            .list_runs(ListFilter::default())
            .map_err(err("list_runs"))?;
        cold.push(ms(t.elapsed()));
        if runs.len() != expect {
            return Err(format!("listed {} runs, expected {expect}", runs.len()));
        }
        let t = Instant::now();
        let again = reader
            .list_runs(ListFilter::default())
            .map_err(err("list_runs"))?;
        warm.push(ms(t.elapsed()));
        if again.len() != expect {
            return Err(format!("listed {} runs, expected {expect}", again.len()));
        }
    }
    Ok((cold, warm))
}

/// Run `__dead-boot DIR N` in a child process and check it exited cleanly.
fn dead_boot(dir: &Path, n: usize) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let status = Command::new(exe)
        .arg("__dead-boot")
        .arg(dir)
        .arg(n.to_string())
        .status()
        .map_err(|e| format!("cannot start the dead-boot process: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the dead-boot process failed: {status}"))
    }
}

/// The child process: record `n` running runs, then exit without closing the ledger
/// (no destructor runs; the kernel drops the boot lock), as a crashed session would.
pub fn serve_dead_boot(dir: &Path, n: usize) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("brood-bench dead-boot: no runtime: {e}");
            return 1;
        }
    };
    let ledger = match Ledger::open(dir, LedgerOptions::default()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("brood-bench dead-boot: {e}");
            return 1;
        }
    };
    let outcome = rt.block_on(async {
        for i in 0..n {
            let run = run_named(i);
            let id = run.id.clone().unwrap_or_default();
            // Queued in call order; the flush below waits for all of them.
            drop(ledger.create_run(run));
            drop(ledger.mark_running(&id));
        }
        ledger.flush().await
    });
    let running = ledger
        .reader()
        .and_then(|r| r.list_runs(ListFilter::default()))
        .map(|runs| runs.len());
    match (outcome, running) {
        (Ok(()), Ok(k)) if k == n => {
            // Exit with the boot still open: what recovery is for.
            std::process::exit(0)
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("brood-bench dead-boot: {e}");
            1
        }
        (_, Ok(k)) => {
            eprintln!("brood-bench dead-boot: {k} runs recorded, expected {n}");
            1
        }
    }
}
