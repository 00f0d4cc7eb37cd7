//! Scenario 4, the ledger (default options: WAL, `synchronous=FULL`, group commit):
//!
//! - progress events/s: `append_event` M times (fire-and-forget, each after
//!   `Ledger::ready`, the backpressure of the writer's bounded queue), then `flush`;
//!   M / (time until the flush resolved, i.e. everything is committed);
//! - awaited creates/s: K concurrent `create_run`s, each awaited until durable;
//! - one awaited commit alone: sequential `create_run` awaits (the commit + fsync
//!   floor a spawn pays);
//! - `brood agents list` over R finished runs (each completed with a result of the
//!   size a child's result has): a fresh `LedgerReader` (as the CLI opens one) and
//!   `list_runs` of the current session; `list_runs` alone on a warm reader; and the
//!   `brood` command itself when it was built next to this binary;
//! - restart recovery: a child process (this binary, `__dead-boot DIR R`) records R
//!   runs as running and exits without closing its ledger; the figure is the time
//!   `Ledger::open` takes to find the dead boot and mark its R runs interrupted.
//!   Beside it, `Ledger::open` of the R-run ledger above, with nothing to recover.
//!
//! The same figures for a PostgreSQL ledger are scenario `ledger-pg` (group
//! `ledger-pg`): the server [`crate::pg_server`] starts, or the empty database
//! `--ledger-url` names; both parts use that one database (the dead boot records its
//! runs in a session of its own, so its listing and recovery count only them).

use crate::report::{ms, quantile, Figure, Goal};
use brood::ledger::{EventKind, Ledger, LedgerOptions, ListFilter, NewRun, RunId};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Which ledger the scenario measures.
pub enum Backend {
    /// The workspace's SQLite file.
    Sqlite,
    /// This PostgreSQL database (empty at the start).
    Postgres(String),
}

impl Backend {
    fn url(&self) -> Option<&str> {
        match self {
            Backend::Sqlite => None,
            Backend::Postgres(url) => Some(url),
        }
    }

    fn group(&self) -> &'static str {
        match self {
            Backend::Sqlite => "ledger",
            Backend::Postgres(_) => "ledger-pg",
        }
    }

    fn options(&self) -> LedgerOptions {
        LedgerOptions {
            url: self.url().map(str::to_string),
            ..LedgerOptions::default()
        }
    }
}

/// Sizes of one ledger run.
pub struct Sizes {
    pub events: usize,
    pub sequential_creates: usize,
    /// Runs in the listed ledger (the concurrent creates make up the rest) and in
    /// the recovered one.
    pub runs: usize,
}

fn err(what: &str) -> impl Fn(brood::ledger::LedgerError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// A run as the supervisor records a child (its id format included).
fn run_named(i: usize) -> NewRun {
    NewRun {
        id: Some(RunId::from_string(brood::subagent::new_run_id())),
        name: Some(format!("explore-{i}")),
        role: Some("explore".into()),
        agent_type: Some("explore".into()),
        model: Some("mock-model".into()),
        provider: Some("local".into()),
        ..NewRun::new(format!(
            "benchmark run {i}: find every place we parse config and summarize them"
        ))
    }
}

/// A completed child's result, about the size real ones have (~1.5 KB).
fn result_of(id: &RunId) -> Value {
    let text = "SUMMARY: config is parsed in two places; both read TOML and merge layers.\n\
CHANGES: None.\nEVIDENCE:\n- src/config.rs:10-42 the loader\n- src/cli.rs:88-97 flags\n\
RISKS: the env layer is parsed twice.\nBLOCKERS: None.\n";
    json!({
        "agent_id": id.as_str(), "name": "explore", "role": "explore", "status": "completed",
        "final_text": text.repeat(3),
        "report": {"summary": text, "changes": "None.", "risks": "the env layer is parsed twice.",
                   "blockers": "None.", "evidence": [
                       {"path": "src/config.rs", "lines": [10, 42], "verified": true},
                       {"path": "src/cli.rs", "lines": [88, 97], "verified": true}]},
        "turns": 4, "tool_calls": 7,
        "usage": {"input_tokens": 18211, "output_tokens": 912, "cached_input_tokens": 12000},
        "transcript_handle": format!("transcript:{}", id.as_str()),
        "model": "local/mock-model", "warnings": [],
    })
}

/// Scenario `ledger-pg`: a server of its own unless `url` names one, whose database
/// must hold no ledger yet. Fails (never skips) when there is none to be had.
pub async fn scenario_pg(sizes: &Sizes, url: Option<&str>) -> Result<Vec<Figure>, String> {
    let (server, url) = match url {
        Some(u) => (None, u.to_string()),
        None => {
            let server = tokio::task::spawn_blocking(crate::pg_server::PgServer::start)
                .await
                .map_err(|e| format!("server task: {e}"))??;
            let url = server.url();
            (Some(server), url)
        }
    };
    let ws = crate::harness::workspace()?;
    let at = url.clone();
    let root = ws.path().to_path_buf();
    let found = tokio::task::spawn_blocking(move || Ledger::inspect_at(&root, Some(&at)))
        .await
        .map_err(|e| format!("inspect task: {e}"))?
        .map_err(err("looking at the PostgreSQL database"))?;
    if let (_, Some(version)) = found {
        return Err(format!(
            "the database at --ledger-url already holds a ledger (schema version {version});              the benchmark needs an empty database"
        ));
    }
    let figures = scenario(sizes, &Backend::Postgres(url)).await;
    drop(server);
    figures
}

pub async fn scenario(sizes: &Sizes, backend: &Backend) -> Result<Vec<Figure>, String> {
    let mut figures = Vec::new();
    let group = backend.group();
    let ws = crate::harness::workspace()?;
    let ledger = open_blocking(ws.path(), backend).await?;
    let mut ids: Vec<RunId> = Vec::with_capacity(sizes.runs);

    // Progress events: fire-and-forget, then one flush.
    let run = ledger
        .create_run(run_named(0))
        .await
        .map_err(err("create_run"))?;
    ids.push(run.clone());
    ledger
        .mark_running(&run)
        .await
        .map_err(err("mark_running"))?;
    let before = ledger.stats();
    let t0 = Instant::now();
    for i in 0..sizes.events {
        // As a producer does: room in the writer's bounded queue first.
        ledger.ready().await;
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
        Figure::new(group, "progress events durable per second", rate, "/s")
            .goal(Goal::AtLeast(20_000.0))
            .detail(json!({"events": sizes.events, "ms": ms(elapsed), "group_commits": batches})),
    );

    // One awaited commit at a time.
    let mut lat = Vec::with_capacity(sizes.sequential_creates);
    for _ in 0..sizes.sequential_creates {
        let t = Instant::now();
        let id = ledger
            .create_run(run_named(ids.len()))
            .await
            .map_err(err("create_run"))?;
        lat.push(ms(t.elapsed()));
        ids.push(id);
    }
    let (c50, c99) = (quantile(&lat, 0.5), quantile(&lat, 0.99));
    eprintln!("  ledger: one awaited commit alone: p50 {c50:.2} ms, p99 {c99:.2} ms");
    figures.push(
        Figure::new(group, "one awaited commit alone: p50", c50, "ms")
            .detail(json!({"samples": lat.len(), "p99_ms": c99})),
    );

    // Awaited durable operations, many at once: the rest of the listed runs.
    let k = sizes.runs.saturating_sub(ids.len()).max(1);
    let before = ledger.stats();
    let t0 = Instant::now();
    let creates: Vec<_> = (0..k)
        .map(|i| ledger.create_run(run_named(ids.len() + i)))
        .collect();
    for r in futures::future::join_all(creates).await {
        ids.push(r.map_err(err("create_run"))?);
    }
    let elapsed = t0.elapsed();
    let batches = ledger.stats().batches_committed - before.batches_committed;
    let rate = k as f64 / elapsed.as_secs_f64();
    eprintln!(
        "  ledger: {k} concurrent awaited create_run in {:.1} ms ({rate:.0}/s, {batches} group commits)",
        ms(elapsed)
    );
    figures.push(
        Figure::new(
            group,
            format!("awaited create_run per second ({k} at once)"),
            rate,
            "/s",
        )
        .goal(Goal::AtLeast(20_000.0))
        .detail(json!({"creates": k, "ms": ms(elapsed), "group_commits": batches})),
    );

    // Finish every run with a result, as a session's children end.
    let t0 = Instant::now();
    let mut done = Vec::with_capacity(ids.len() * 2);
    for id in &ids {
        if id != &run {
            done.push(ledger.mark_running(id));
        }
    }
    let mut completes = Vec::with_capacity(ids.len());
    for id in &ids {
        completes.push(ledger.complete(id, result_of(id)));
    }
    for r in futures::future::join_all(done).await {
        r.map_err(err("mark_running"))?;
    }
    for r in futures::future::join_all(completes).await {
        r.map_err(err("complete"))?;
    }
    let finish_ms = ms(t0.elapsed());
    let ops = 2 * ids.len() - 1;
    eprintln!(
        "  ledger: {ops} awaited transitions (running, completed with a result) in {finish_ms:.1} ms ({:.0}/s)",
        ops as f64 / (finish_ms / 1000.0)
    );
    figures.push(Figure::new(
        group,
        "awaited transitions per second (running, completed + result)",
        ops as f64 / (finish_ms / 1000.0),
        "/s",
    ));

    // Listing, as `brood agents list` does it.
    let listed = ids.len();
    let root = ws.path().to_path_buf();
    let url = backend.url().map(str::to_string);
    let times = tokio::task::spawn_blocking(move || list_times(&root, url.as_deref(), listed))
        .await
        .map_err(|e| format!("listing task: {e}"))??;
    let (cold50, warm50, full50) = (
        quantile(&times.cold, 0.5),
        quantile(&times.warm, 0.5),
        quantile(&times.full_warm, 0.5),
    );
    eprintln!(
        "  ledger: list {listed} finished runs: open reader + list_summaries p50 {cold50:.2} ms, list_summaries on a warm reader p50 {warm50:.2} ms, list_runs on a warm reader p50 {full50:.2} ms"
    );
    figures.push(
        Figure::new(
            group,
            format!("agents list over {listed} finished runs (open reader + list_summaries, p50)"),
            cold50,
            "ms",
        )
        .goal(Goal::AtMost(10.0))
        .detail(json!({"runs": listed, "samples_ms": times.cold})),
    );
    figures.push(
        Figure::new(
            group,
            format!("list_summaries over {listed} finished runs, warm reader (p50)"),
            warm50,
            "ms",
        )
        .detail(json!({"runs": listed, "samples_ms": times.warm})),
    );
    figures.push(
        Figure::new(
            group,
            format!(
                "list_runs (full records, --json) over {listed} finished runs, warm reader (p50)"
            ),
            full50,
            "ms",
        )
        .detail(json!({"runs": listed, "samples_ms": times.full_warm})),
    );
    if let Some(cmd) = command_times(ws.path(), backend.url(), listed)? {
        let p50 = quantile(&cmd, 0.5);
        eprintln!("  ledger: `brood agents list` command over {listed} runs: p50 {p50:.1} ms");
        figures.push(
            Figure::new(
                group,
                format!("`brood agents list` command over {listed} runs (process included, p50)"),
                p50,
                "ms",
            )
            .detail(json!({"runs": listed, "samples_ms": cmd})),
        );
    }
    drop(ledger);

    // Opening that ledger again: nothing to recover.
    let root = ws.path().to_path_buf();
    let options = backend.options();
    let (plain_open_ms, nothing) = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let l = Ledger::open(&root, options).map_err(err("Ledger::open"))?;
        Ok::<_, String>((ms(t.elapsed()), l.recovery().interrupted.len()))
    })
    .await
    .map_err(|e| format!("open task: {e}"))??;
    if nothing != 0 {
        return Err(format!(
            "reopening a cleanly closed ledger interrupted {nothing} runs"
        ));
    }

    // Recovery after a dead boot.
    let ws2 = crate::harness::workspace()?;
    dead_boot(ws2.path(), sizes.runs, backend.url())?;
    let root = ws2.path().to_path_buf();
    let options = backend.options();
    let (open_ms, interrupted) = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let l = Ledger::open(&root, options).map_err(err("Ledger::open"))?;
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
    eprintln!(
        "  ledger: recovery of {interrupted} runs of a dead boot: {open_ms:.1} ms (open with nothing to recover: {plain_open_ms:.1} ms)"
    );
    figures.push(
        Figure::new(
            group,
            format!("restart recovery, {interrupted} runs (Ledger::open)"),
            open_ms,
            "ms",
        )
        .goal(Goal::AtMost(100.0))
        .detail(json!({"runs_interrupted": interrupted})),
    );
    figures.push(Figure::new(
        group,
        format!("Ledger::open of {listed} runs, nothing to recover"),
        plain_open_ms,
        "ms",
    ));
    Ok(figures)
}

/// The `brood` binary built next to this one, timed on `agents list` (5 runs), or
/// `None` when it is not there.
fn command_times(ws: &Path, url: Option<&str>, expect: usize) -> Result<Option<Vec<f64>>, String> {
    let Some(brood) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("brood")))
        .filter(|p| p.is_file())
    else {
        eprintln!("  ledger: (no `brood` binary next to brood-bench: build it with `cargo build --release -p brood-cli` to time the command too)");
        return Ok(None);
    };
    let mut samples = Vec::new();
    for _ in 0..5 {
        let mut cmd = Command::new(&brood);
        cmd.args(["agents", "--workspace"])
            .arg(ws)
            .arg("list")
            .env_remove("BROOD_PROVIDER");
        match url {
            Some(u) => cmd.env("BROOD_LEDGER_URL", u),
            None => cmd.env_remove("BROOD_LEDGER_URL"),
        };
        let t = Instant::now();
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {}: {e}", brood.display()))?;
        samples.push(ms(t.elapsed()));
        if !out.status.success() {
            return Err(format!(
                "`brood agents list` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let lines = String::from_utf8_lossy(&out.stdout).lines().count();
        if lines < expect {
            return Err(format!(
                "`brood agents list` printed {lines} lines for {expect} runs"
            ));
        }
    }
    Ok(Some(samples))
}

async fn open_blocking(root: &Path, backend: &Backend) -> Result<Ledger, String> {
    let root = root.to_path_buf();
    let options = backend.options();
    tokio::task::spawn_blocking(move || Ledger::open(&root, options))
        .await
        .map_err(|e| format!("open task: {e}"))?
        .map_err(err("Ledger::open"))
}

/// Listing samples in ms, 10 of each, every count checked.
struct ListTimes {
    /// `Ledger::open_reader` + `list_summaries`: what `brood agents list` does for its
    /// table before rendering it.
    cold: Vec<f64>,
    /// `list_summaries` again on that reader.
    warm: Vec<f64>,
    /// `list_runs` (full records; what `brood agents list --json` reads) on that reader.
    full_warm: Vec<f64>,
}

fn list_times(root: &Path, url: Option<&str>, expect: usize) -> Result<ListTimes, String> {
    let mut times = ListTimes {
        cold: Vec::new(),
        warm: Vec::new(),
        full_warm: Vec::new(),
    };
    let check = |what: &str, n: usize| {
        if n == expect {
            Ok(())
        } else {
            Err(format!("{what} listed {n} runs, expected {expect}"))
        }
    };
    for _ in 0..10 {
        let t = Instant::now();
        let reader = Ledger::open_reader_at(root, url).map_err(err("open_reader"))?;
        let runs = reader
            .list_summaries(ListFilter::default())
            .map_err(err("list_summaries"))?;
        times.cold.push(ms(t.elapsed()));
        check("list_summaries", runs.len())?;
        let t = Instant::now();
        let again = reader
            .list_summaries(ListFilter::default())
            .map_err(err("list_summaries"))?;
        times.warm.push(ms(t.elapsed()));
        check("list_summaries", again.len())?;
        let t = Instant::now();
        let full = reader
            .list_runs(ListFilter::default())
            .map_err(err("list_runs"))?;
        times.full_warm.push(ms(t.elapsed()));
        check("list_runs", full.len())?;
    }
    Ok(times)
}

/// Run `__dead-boot DIR N [URL]` in a child process and check it exited cleanly.
fn dead_boot(dir: &Path, n: usize, url: Option<&str>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let status = Command::new(exe)
        .arg("__dead-boot")
        .arg(dir)
        .arg(n.to_string())
        .args(url)
        .status()
        .map_err(|e| format!("cannot start the dead-boot process: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the dead-boot process failed: {status}"))
    }
}

/// The child process: record `n` running runs, then exit without closing the ledger
/// (no destructor runs; the kernel drops the boot lock, the server the connection's
/// advisory lock), as a crashed session would.
pub fn serve_dead_boot(dir: &Path, n: usize, url: Option<&str>) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("brood-bench dead-boot: no runtime: {e}");
            return 1;
        }
    };
    let options = LedgerOptions {
        url: url.map(str::to_string),
        ..LedgerOptions::default()
    };
    let ledger = match Ledger::open(dir, options) {
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
