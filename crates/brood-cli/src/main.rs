//! The `brood` command: parses arguments, opens a session, renders what happens.
//! Nothing else lives here — the work is in the `brood` library.
//!
//! Exit codes: 0 success, 1 the run failed, 2 usage or configuration error.

mod agents;
mod render;
mod table;

use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::session::{ModelSource, Session, SessionOptions};
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// mimalloc, not glibc's malloc: a fan-out allocates and frees request bodies,
/// schemas and SSE buffers on many threads at once, and glibc's per-thread arenas
/// spent a visible share of the CPU growing and trimming their heaps (page faults,
/// `mprotect`, `malloc_consolidate`); BENCHMARKS.md has the before/after.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "brood",
    version,
    about = "A runtime for sub-agents in coding agents: enforced grants, bounded fan-out, a durable ledger."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a parent agent on PROMPT in the workspace (one shot).
    Run(RunArgs),
    /// Inspect the effective configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
    /// Runs recorded in this workspace's ledger: list, show, transcript, cancel, export, prune.
    Agents {
        /// Workspace directory (default: the current directory).
        #[arg(long, global = true)]
        workspace: Option<PathBuf>,
        #[command(subcommand)]
        command: agents::AgentsCmd,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print every effective value and where it came from (API keys redacted).
    Show {
        #[command(flatten)]
        provider: ProviderArgs,
        /// Workspace directory (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
}

#[derive(Args, Clone, Default)]
struct ProviderArgs {
    /// Provider preset: deepseek (default), openai, openrouter, ollama, vllm, llamacpp, local.
    #[arg(long)]
    provider: Option<String>,
    /// OpenAI-compatible base URL (overrides the preset's).
    #[arg(long)]
    base_url: Option<String>,
    /// Model id.
    #[arg(long)]
    model: Option<String>,
    /// Name of the environment variable holding the API key.
    #[arg(long)]
    api_key_env: Option<String>,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    /// Workspace directory (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Most model steps for the parent agent.
    #[arg(long)]
    max_turns: Option<u32>,
    /// Print exactly one JSON object at the end instead of streaming.
    #[arg(long)]
    json: bool,
    /// Append every model request and response to FILE (JSON lines).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Answer model requests from a recording instead of the network.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// What to do.
    prompt: String,
}

fn main() -> ExitCode {
    // The API key is in this process's environment: no same-user process may read
    // it through /proc (shells are kept out by the sandbox's own /proc as well).
    if let Err(e) = brood::tool::sandbox::harden_process() {
        eprintln!("warning: could not make brood non-dumpable: {e}");
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("brood: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(dispatch(cli));
    ExitCode::from(code)
}

async fn dispatch(cli: Cli) -> u8 {
    match cli.command {
        Command::Run(args) => run(args).await,
        Command::Config {
            command:
                ConfigCmd::Show {
                    provider,
                    workspace,
                },
        } => config_show(provider, workspace),
        Command::Agents { workspace, command } => {
            let ws = match workspace_dir(workspace) {
                Ok(w) => w,
                Err(code) => return code,
            };
            agents::run(command, &ws).await as u8
        }
    }
}

fn workspace_dir(arg: Option<PathBuf>) -> Result<PathBuf, u8> {
    match arg {
        Some(p) => Ok(p),
        None => std::env::current_dir().map_err(|e| {
            eprintln!("brood: cannot read the current directory: {e}; pass --workspace DIR");
            2
        }),
    }
}

fn load_config(
    workspace: &std::path::Path,
    provider: &ProviderArgs,
    max_turns: Option<u32>,
) -> Result<(Config, BTreeMap<String, String>), u8> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let flags = Overrides {
        provider: provider.provider.clone(),
        base_url: provider.base_url.clone(),
        model: provider.model.clone(),
        api_key_env: provider.api_key_env.clone(),
        max_turns,
    };
    match Config::load(&ConfigPaths::from_env(workspace), &env, &flags) {
        Ok(c) => Ok((c, env)),
        Err(e) => {
            eprintln!("brood: {e}");
            Err(2)
        }
    }
}

fn config_show(provider: ProviderArgs, workspace: Option<PathBuf>) -> u8 {
    let ws = match workspace_dir(workspace) {
        Ok(w) => w,
        Err(c) => return c,
    };
    let (config, _) = match load_config(&ws, &provider, None) {
        Ok(c) => c,
        Err(c) => return c,
    };
    for (key, value, source) in config.effective() {
        println!("{key} = {value}    # {source}");
    }
    // What each role's shell gets on this kernel (docs/SECURITY.md).
    let sandbox = brood::tool::Sandbox::with_options(brood::runtime::sandbox_options(&config));
    println!();
    println!("# shell sandbox on this kernel");
    use brood::tool::sandbox::ShellMode;
    for (roles, mode) in [
        ("explore, plan", Some(ShellMode::ReadOnly)),
        (
            "parent, general, implementer, verifier, custom",
            Some(ShellMode::Writer),
        ),
        ("review", None),
    ] {
        match mode {
            Some(m) => println!("# {roles}: {}", sandbox.describe(m, &ws)),
            None => println!("# {roles}: no shell"),
        }
    }
    for d in sandbox.degradations() {
        println!("# warning: {d}");
    }
    0
}

async fn run(args: RunArgs) -> u8 {
    let ws = match workspace_dir(args.workspace.clone()) {
        Ok(w) => w,
        Err(c) => return c,
    };
    let (config, env) = match load_config(&ws, &args.provider, args.max_turns) {
        Ok(c) => c,
        Err(c) => return c,
    };
    let models = match (&args.record, &args.replay) {
        (Some(f), _) => ModelSource::Record(f.clone()),
        (_, Some(f)) => ModelSource::Replay(f.clone()),
        _ => ModelSource::Live,
    };
    let mut opts = SessionOptions::new(ws, config);
    opts.env = env;
    opts.models = models;
    let session = match Session::open(opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("brood: {e}");
            return if e.is_usage() { 2 } else { 1 };
        }
    };
    for d in session.sandbox_degradations() {
        eprintln!("brood: warning: shell sandbox: {d}");
    }
    let turn = CancellationToken::new();
    let ctrl_c = turn.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("brood: interrupted; cancelling");
            ctrl_c.cancel();
        }
    });
    let printer = render::Printer::new(!args.json);
    let result = session.run(&args.prompt, Some(printer.sink()), turn).await;
    let failures = session.supervisor().ledger_write_failures();
    session.close().await;
    if failures > 0 {
        eprintln!(
            "brood: warning: {failures} ledger write(s) failed in this session; the record in .brood/state may be incomplete"
        );
    }
    match result {
        Ok(report) => {
            if args.json {
                match serde_json::to_string(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => eprintln!("brood: cannot encode the report: {e}"),
                }
            } else {
                printer.finish(&report.final_text);
            }
            if let Some(e) = &report.error {
                eprintln!("brood: run {} failed: {e}", report.run_id);
            }
            if report.succeeded() {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("brood: {e}");
            if e.is_usage() {
                2
            } else {
                1
            }
        }
    }
}
