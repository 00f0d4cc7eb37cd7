//! `brood worker --ledger postgres://… --workspace-root DIR`: one worker of the fleet
//! (docs/FLEET.md). It opens a session on DIR with the PostgreSQL ledger and, until
//! signalled, claims queued runs (`Ledger::claim`, with a lease), runs each through
//! the library's `Session::run_claimed` (the resume path: same id, parent and root,
//! from its last recorded step, its recorded grant), renews its leases from a task of
//! its own, and wakes on `LISTEN brood_run_queued` with a slow poll as the safety net.
//!
//! A run whose lease another worker took over (this worker stopped heartbeating for
//! longer than the lease: frozen, hung, suspended) is stopped here as soon as a
//! heartbeat shows it missing; the ledger's writer already refuses whatever this
//! worker would still write into it (docs/FLEET.md "Lease rules", fencing).
//!
//! SIGINT/SIGTERM/SIGHUP: no new claims; the runs in progress finish and are recorded,
//! then the session closes (exit 0). A second signal exits at once after flushing the
//! ledger: its unfinished runs are claimed again by another worker once their leases
//! expire.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brood::ledger::{Claimed, FleetChannel, Ledger, RunId};
use brood::runtime::{Session, SessionOptions};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::{signals, ProviderArgs};

/// How often an idle worker looks for runs when no notification woke it (a lost
/// notification, or a lease that expired, which nothing announces).
const POLL: Duration = Duration::from_secs(5);

#[derive(clap::Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    /// Directory for the runs' git worktrees (one per run, `DIR/<run id>`) and this
    /// worker's own state; created if missing.
    #[arg(long, value_name = "DIR")]
    workspace_root: PathBuf,
    /// Runs at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    concurrency: u64,
    /// Lease length in seconds: renewed every third of it; a killed worker's runs
    /// are taken over once it has passed.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_secs: u64,
    /// A local directory whose repositories runs may name (repeatable): a path is
    /// refused otherwise, since the repository comes from the ledger. For workers
    /// on the parent's machine or a shared file system; remote repositories
    /// (https, ssh, git URLs) need none.
    #[arg(long, value_name = "DIR")]
    allow_repository_dir: Vec<PathBuf>,
    /// Trust DIR's `.brood/config.toml` (as `brood run --trust`).
    #[arg(long)]
    trust: bool,
}

pub(crate) async fn run(args: WorkerArgs) -> u8 {
    let root = args.workspace_root.clone();
    if let Err(e) = std::fs::create_dir_all(&root) {
        errln!("brood worker: cannot create {}: {e}", root.display());
        return 2;
    }
    let (mut config, env, _) = match crate::load_config(&root, &args.provider, None, args.trust) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let postgres = config
        .ledger_url
        .as_deref()
        .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"));
    if !postgres {
        errln!(
            "brood worker: the fleet needs a PostgreSQL ledger: pass --ledger postgres://… (or set ledger_url); see docs/FLEET.md"
        );
        return 2;
    }
    // The worker's own bounds: `--concurrency` runs at once, any number over its life.
    config.subagents.max_concurrent = Some(args.concurrency);
    config.subagents.launch_concurrency = None;
    config.subagents.max_total = Some(u64::MAX >> 1);
    let mut opts = SessionOptions::new(root.clone(), config);
    opts.env = env;
    let mut signals = match signals::Signals::install() {
        Ok(s) => Some(s),
        Err(e) => {
            errln!("brood worker: warning: cannot watch for signals ({e})");
            None
        }
    };
    let session = match Session::open(opts).await {
        Ok(s) => s,
        Err(e) => {
            errln!("brood worker: {e}");
            return crate::exit::of_error(&e);
        }
    };
    // The same start-up warnings as run, chat and mcp (a degraded sandbox, agent
    // files not loaded, MCP servers that did not start): the runs here depend on them.
    for w in session.startup_warnings() {
        errln!("brood worker: warning: {w}");
    }
    let ledger = session.ledger().clone();
    let lease = Duration::from_secs(args.lease_secs);
    let poll = POLL.min(lease);
    let stop = Arc::new(AtomicBool::new(false));
    let wake = Arc::new(tokio::sync::Notify::new());
    listen(&session, &wake, &stop, poll);
    let held = Held::default();
    let heartbeat = {
        let (ledger, held) = (ledger.clone(), held.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 3);
            loop {
                tick.tick().await;
                // The runs claimed before the renewal is queued: the writer commits
                // their claims before it.
                let mine = held.runs();
                match ledger.renew_leases(lease).await {
                    Ok(renewed) => {
                        for run in mine.iter().filter(|r| !renewed.contains(r)) {
                            held.lost(&ledger, run).await;
                        }
                    }
                    Err(e) => errln!("brood worker: warning: renewing the leases failed: {e}"),
                }
            }
        })
    };
    errln!(
        "brood worker: boot {} on {} ({} at once, lease {} s)",
        ledger.boot_id(),
        root.display(),
        args.concurrency,
        args.lease_secs
    );
    let turn = CancellationToken::new();
    let mut running = FuturesUnordered::new();
    let mut stopping = false;
    loop {
        if !stopping && (running.len() as u64) < args.concurrency {
            match ledger.claim(lease).await {
                Ok(Some(c)) => {
                    errln!(
                        "brood worker: claimed run {} (attempt {}, was {})",
                        c.run,
                        c.attempt,
                        c.from
                    );
                    let token = held.add(&c.run, &turn);
                    let (held, allowed) = (held.clone(), &args.allow_repository_dir);
                    let (session, root) = (&session, &root);
                    running.push(async move {
                        let line = run_one(session, &c, root, allowed, token).await;
                        held.remove(&c.run);
                        line
                    });
                    continue;
                }
                Ok(None) => {}
                Err(e) => errln!("brood worker: warning: claiming a run failed: {e}"),
            }
        }
        if stopping && running.is_empty() {
            break;
        }
        tokio::select! {
            Some(line) = running.next(), if !running.is_empty() => errln!("{line}"),
            () = wake.notified(), if !stopping => {}
            () = tokio::time::sleep(poll), if !stopping => {}
            sig = signals::next(&mut signals) => {
                if stopping {
                    crate::exit_now(sig, &ledger, &mut signals).await;
                }
                errln!(
                    "brood worker: {} received; claiming no more, finishing the {} run(s) in progress (send it again to exit at once)",
                    sig.name(),
                    running.len()
                );
                stopping = true;
            }
        }
    }
    drop(running);
    heartbeat.abort();
    stop.store(true, Ordering::Relaxed);
    session.close().await;
    0
}

/// The runs this worker is running, each with the token that stops it.
#[derive(Clone, Default)]
struct Held(Arc<Mutex<HashMap<RunId, CancellationToken>>>);

impl Held {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancellationToken>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A claimed run starts: its token, a child of the worker's.
    fn add(&self, run: &RunId, turn: &CancellationToken) -> CancellationToken {
        let token = turn.child_token();
        self.map().insert(run.clone(), token.clone());
        token
    }

    fn remove(&self, run: &RunId) {
        self.map().remove(run);
    }

    fn runs(&self) -> Vec<RunId> {
        self.map().keys().cloned().collect()
    }

    /// A heartbeat did not renew `run`'s lease: if another boot runs it now (it was
    /// taken over after its lease expired), stop it here. A run that ended under
    /// this boot meanwhile (its lease released with its end) is left to finish.
    async fn lost(&self, ledger: &Ledger, run: &RunId) {
        let Some(now) = taken_over(ledger, run).await else {
            return;
        };
        if let Some(token) = self.map().get(run) {
            errln!(
                "{}",
                lost_line(
                    run,
                    &now,
                    "stopping it here — nothing more this worker writes into it is recorded"
                )
            );
            token.cancel();
        }
    }
}

/// What the worker says of a run that boot `now` took over from it: `then` is
/// what became of it here.
fn lost_line(run: &RunId, now: &str, then: &str) -> String {
    format!(
        "brood worker: lost run {run}: worker boot {now} took it over after its lease expired (this worker stopped heartbeating: frozen, hung or suspended); {then}"
    )
}

/// The boot that runs `run` now when it is not this one (its lease was taken over).
async fn taken_over(ledger: &Ledger, run: &RunId) -> Option<String> {
    let id = run.clone();
    match ledger.read(move |r| r.run(&id)).await {
        Ok(record) if record.session_boot_id != ledger.boot_id() => Some(record.session_boot_id),
        Ok(_) => None,
        Err(e) => {
            errln!("brood worker: warning: reading run {run}: {e}");
            None
        }
    }
}

/// Run one claimed run to its end; the line to print about it.
async fn run_one(
    session: &Session,
    c: &Claimed,
    root: &Path,
    allowed: &[PathBuf],
    turn: CancellationToken,
) -> String {
    let ran = session.run_claimed(c, root, allowed, None, turn).await;
    if ran.is_ok() {
        // Its end here was refused (`LeaseLost`) if another worker holds it now.
        if let Some(now) = taken_over(session.ledger(), &c.run).await {
            return lost_line(&c.run, &now, "its end here was not recorded");
        }
    }
    match ran {
        Ok(report) => match &report.error {
            None => format!("brood worker: run {} ended ({} turns)", c.run, report.turns),
            Some(e) => format!("brood worker: run {} ended: {e}", c.run),
        },
        Err(e) => {
            // Nothing of its end was recorded: this worker holds its lease, so it
            // records the failure (a run that cannot start here would only be
            // claimed again and fail the same way).
            if let Err(le) = session.ledger().fail(&c.run, e.to_string(), None).await {
                errln!(
                    "brood worker: warning: recording run {}'s failure: {le}",
                    c.run
                );
            }
            format!("brood worker: run {} failed: {e}", c.run)
        }
    }
}

/// Wake the loop on each `NOTIFY brood_run_queued`, from a thread of its own (the
/// listener blocks); without a listener the loop polls.
fn listen(
    session: &Session,
    wake: &Arc<tokio::sync::Notify>,
    stop: &Arc<AtomicBool>,
    poll: Duration,
) {
    let mut listener = match session.ledger().listen(FleetChannel::Queued) {
        Ok(l) => l,
        Err(e) => {
            errln!(
                "brood worker: warning: cannot listen for queued runs ({e}); polling every {} s",
                poll.as_secs()
            );
            return;
        }
    };
    let (wake, stop) = (wake.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut warned = false;
        while !stop.load(Ordering::Relaxed) {
            match listener.wait(poll) {
                // Woken by an enqueue, or back after a lost connection (an enqueue
                // notified meanwhile is lost): look for work either way.
                Ok(heard) if heard.reconnected || !heard.runs.is_empty() => {
                    if heard.reconnected && warned {
                        errln!("brood worker: listening for queued runs again");
                    }
                    warned = false;
                    wake.notify_one();
                }
                Ok(_) => {}
                // The database stayed out of reach past the ledger's reconnect_for:
                // the loop polls meanwhile; the next wait tries again.
                Err(e) => {
                    if !warned {
                        errln!("brood worker: warning: listening for queued runs failed ({e}); polling every {} s until it is back", poll.as_secs());
                        warned = true;
                    }
                    std::thread::sleep(poll);
                }
            }
        }
    });
}
