//! `brood-bench`: measures what brood adds on top of the model's latency, against an
//! in-process OpenAI-compatible mock on loopback (brood-mock) with scripted parent
//! and children and a per-request delay. Scenarios: fan-out overhead, spawn latency,
//! memory per running child, ledger throughput/listing/recovery, fork prefix, cap
//! fidelity, the shell sandbox's cost per call, request bytes and time to a fan-out's
//! last child (requests), a 1,000-child tree with its connections over HTTP/1.1 and
//! HTTP/2 and a TLS handshake's cost (scale), a real `brood`'s peak memory and disk for
//! big answers (answers). Prints a table (each figure with its goal and pass/MISS) and writes
//! JSON. Figures are reported, never asserted: the exit code is 0 whenever every
//! scenario ran, missed goals included; 1 when a scenario could not run.
//!
//! See BENCHMARKS.md at the repository root for what each figure means.

mod answers;
mod cap;
mod fanout;
mod fork;
mod harness;
mod ledger;
mod memory;
mod pg_server;
mod report;
mod requests;
mod sandbox;
mod scale;
mod spawn;

use clap::{Parser, ValueEnum};
use report::{Failure, Figure, Machine, Results};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// mimalloc, not glibc's malloc: a fan-out allocates and frees request bodies,
/// schemas and SSE buffers on many threads at once, and glibc's per-thread arenas
/// spent a visible share of the CPU growing and trimming their heaps (page faults,
/// `mprotect`, `malloc_consolidate`); BENCHMARKS.md has the before/after.
/// The `system-alloc` feature leaves the system's malloc in place, so heap
/// profilers that hook it (heaptrack, valgrind's dhat and massif) see every
/// allocation (BENCHMARKS.md, "Running it").
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "brood-bench",
    about = "Benchmarks brood against a mock OpenAI-compatible server on loopback"
)]
struct Args {
    /// Small sizes and 20 ms latency (what CI runs; well under a minute).
    #[arg(long)]
    quick: bool,
    /// Where to write the JSON results [default: target/bench/results.json, or
    /// results-quick.json with --quick].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only these scenarios (repeatable).
    #[arg(long, value_enum)]
    only: Vec<Scenario>,
    /// Fan-out: only these numbers of children (repeatable), instead of the plan's.
    #[arg(long = "fanout-n")]
    fanout_n: Vec<usize>,
    /// Fan-out: only this per-request latency in ms, instead of the plan's.
    #[arg(long = "fanout-ms")]
    fanout_ms: Option<u64>,
    /// ledger-pg: an empty PostgreSQL database to measure (postgres://…) instead of a
    /// server started from BROOD_PG_BIN.
    #[arg(long = "ledger-url", value_name = "URL")]
    ledger_url: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Fanout,
    Spawn,
    Memory,
    Ledger,
    /// The ledger's figures on PostgreSQL; run only when asked for (`--only ledger-pg`).
    LedgerPg,
    Fork,
    Cap,
    Sandbox,
    Requests,
    Scale,
    Answers,
}

impl Scenario {
    /// In running order: memory first, while the process's heap holds nothing freed
    /// by earlier scenarios that its children could reuse (that would flatter it).
    const ALL: [Scenario; 10] = [
        Scenario::Memory,
        Scenario::Fanout,
        Scenario::Spawn,
        Scenario::Ledger,
        Scenario::Fork,
        Scenario::Cap,
        Scenario::Sandbox,
        Scenario::Requests,
        Scenario::Scale,
        Scenario::Answers,
    ];
    fn name(self) -> &'static str {
        match self {
            Scenario::Fanout => "fan-out",
            Scenario::Spawn => "spawn latency",
            Scenario::Memory => "memory",
            Scenario::Ledger => "ledger",
            Scenario::LedgerPg => "ledger on PostgreSQL",
            Scenario::Fork => "fork",
            Scenario::Cap => "cap fidelity",
            Scenario::Sandbox => "sandbox",
            Scenario::Requests => "requests",
            Scenario::Scale => "scale",
            Scenario::Answers => "answers",
        }
    }
}

/// The sizes of one run (full or quick).
struct Plan {
    fanout_ns: Vec<usize>,
    /// Latencies, each with its number of repeats.
    fanout_ds: Vec<(Duration, usize)>,
    spawn_opens: usize,
    spawn_batches: Vec<usize>,
    memory_children: usize,
    ledger: ledger::Sizes,
    /// (N, cap, d)
    cap: (usize, usize, Duration),
    /// Shell calls timed per posture.
    sandbox_calls: usize,
    /// Children of the timed `task`, and how many times it runs.
    requests_fan_out: (usize, usize),
    scale: scale::Sizes,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            fanout_ns: vec![1, 3, 20, 200],
            fanout_ds: vec![(Duration::from_millis(50), 9), (Duration::from_secs(1), 3)],
            spawn_opens: 1000,
            spawn_batches: vec![1, 10],
            memory_children: 1000,
            ledger: ledger::Sizes {
                events: 200_000,
                sequential_creates: 200,
                runs: 10_000,
            },
            cap: (200, 10, Duration::from_millis(50)),
            sandbox_calls: 300,
            requests_fan_out: (64, 9),
            scale: scale::Sizes {
                n: 1000,
                d: Duration::from_secs(1),
                repeats: 3,
                handshakes: 200,
            },
        }
    }
    fn quick() -> Plan {
        Plan {
            fanout_ns: vec![1, 3, 20],
            fanout_ds: vec![(Duration::from_millis(20), 3)],
            spawn_opens: 100,
            spawn_batches: vec![1, 10],
            memory_children: 100,
            ledger: ledger::Sizes {
                events: 20_000,
                sequential_creates: 50,
                runs: 1_000,
            },
            cap: (60, 10, Duration::from_millis(20)),
            sandbox_calls: 50,
            requests_fan_out: (64, 3),
            scale: scale::Sizes {
                n: 100,
                d: Duration::from_millis(20),
                repeats: 1,
                handshakes: 20,
            },
        }
    }
}

fn main() -> ExitCode {
    // Helper processes this binary starts for itself.
    let raw: Vec<String> = std::env::args().collect();
    let n_arg = |i: usize| raw.get(i).and_then(|s| s.parse::<usize>().ok());
    match raw.get(1).map(String::as_str) {
        Some("__mock-hold") => {
            let h2 = raw.get(3).is_some_and(|a| a == "h2");
            return match n_arg(2) {
                Some(n) => exit(memory::serve_hold(n, h2)),
                None => exit_usage("__mock-hold N [h2]"),
            };
        }
        Some("__memory-h2") => {
            let keep = raw.get(3).is_some_and(|a| a == "keep");
            return match n_arg(2) {
                Some(n) => exit(memory::serve_h2_measure(n, keep)),
                None => exit_usage("__memory-h2 N [keep]"),
            };
        }
        Some("__peak-rss") => {
            return exit(answers::serve_peak_rss(raw.get(2..).unwrap_or_default()))
        }
        Some("__dead-boot") => {
            return match (raw.get(2), n_arg(3)) {
                (Some(dir), Some(n)) => exit(ledger::serve_dead_boot(
                    std::path::Path::new(dir),
                    n,
                    raw.get(4).map(String::as_str),
                )),
                _ => exit_usage("__dead-boot DIR N [URL]"),
            }
        }
        _ => {}
    }
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("brood-bench: cannot start the Tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(run(args))
}

fn exit(code: i32) -> ExitCode {
    if code == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn exit_usage(usage: &str) -> ExitCode {
    eprintln!("brood-bench: usage of the helper mode: brood-bench {usage}");
    ExitCode::from(2)
}

async fn run(args: Args) -> ExitCode {
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if !args.fanout_n.is_empty() {
        plan.fanout_ns = args.fanout_n.clone();
    }
    if let Some(d) = args.fanout_ms {
        let repeats = plan.fanout_ds.first().map(|(_, r)| *r).unwrap_or(3);
        plan.fanout_ds = vec![(Duration::from_millis(d), repeats)];
    }
    let machine = Machine::detect();
    if !machine.release_build {
        eprintln!("brood-bench: WARNING: this is a debug build; run with `cargo run --release -p brood-bench` for real figures");
    }
    // ledger-pg needs a PostgreSQL server: only when asked for, after the others.
    let selected: Vec<Scenario> = if args.only.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        Scenario::ALL
            .into_iter()
            .chain([Scenario::LedgerPg])
            .filter(|s| args.only.contains(s))
            .collect()
    };
    let mut results = Results {
        brood_bench: env!("CARGO_PKG_VERSION"),
        mode: if args.quick { "quick" } else { "full" },
        started_at: chrono::Utc::now().to_rfc3339(),
        machine,
        figures: Vec::new(),
        failures: Vec::new(),
        loadavg_at_end: String::new(),
        seconds: 0.0,
    };
    let started = Instant::now();
    for s in selected {
        eprintln!("== {}", s.name());
        let t = Instant::now();
        let outcome: Result<Vec<Figure>, String> = match s {
            Scenario::Fanout => fanout::scenario(&plan.fanout_ns, &plan.fanout_ds).await,
            Scenario::Spawn => spawn::scenario(plan.spawn_opens, &plan.spawn_batches).await,
            Scenario::Memory => memory::scenario(plan.memory_children).await,
            Scenario::Ledger => ledger::scenario(&plan.ledger, &ledger::Backend::Sqlite).await,
            Scenario::LedgerPg => {
                ledger::scenario_pg(&plan.ledger, args.ledger_url.as_deref()).await
            }
            Scenario::Fork => fork::scenario().await,
            Scenario::Cap => cap::scenario(plan.cap.0, plan.cap.1, plan.cap.2).await,
            Scenario::Sandbox => sandbox::scenario(plan.sandbox_calls).await,
            Scenario::Requests => {
                requests::scenario(plan.requests_fan_out.0, plan.requests_fan_out.1).await
            }
            Scenario::Scale => scale::scenario(&plan.scale).await,
            Scenario::Answers => answers::scenario().await,
        };
        eprintln!("   ({:.1} s)", t.elapsed().as_secs_f64());
        match outcome {
            Ok(f) => results.figures.extend(f),
            Err(error) => {
                eprintln!("   FAILED: {error}");
                results.failures.push(Failure {
                    scenario: s.name().to_string(),
                    error,
                });
            }
        }
    }
    results.loadavg_at_end = report::loadavg();
    results.seconds = started.elapsed().as_secs_f64();
    let m = &results.machine;
    println!(
        "\nbrood-bench ({} mode, {:.1} s) on {} × {}, {} GiB RAM, Linux {}; load average {} at start, {} at end{}\n",
        results.mode,
        results.seconds,
        m.nproc,
        m.cpu_model,
        m.ram_gib,
        m.kernel,
        m.loadavg_at_start,
        results.loadavg_at_end,
        if m.release_build {
            ""
        } else {
            " — DEBUG BUILD"
        }
    );
    print!("{}", results.table());
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from("target/bench").join(if args.quick {
            "results-quick.json"
        } else {
            "results.json"
        })
    });
    if let Err(e) = write_json(&out, &results) {
        eprintln!("brood-bench: cannot write {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("results written to {}", out.display());
    if results.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn write_json(path: &std::path::Path, results: &Results) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(results).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}
