//! The `brood` command: parses arguments, opens a session, renders what happens.
//! Nothing else lives here — the work is in the `brood` library.
//!
//! Exit codes: 0 success, 1 the run failed (or was cancelled by a signal), 2 usage
//! or configuration error, 128 + N when a second signal N cut a cancellation short.
//! Output goes through `out` (a closed reader ends the output, not the run);
//! `print!`-family macros, which panic on EPIPE, are refused by the lints below.
#![deny(clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
mod out;

mod agents;
mod agents_check;
mod allow;
mod chat;
mod config_show;
mod doctor;
mod exit;
mod ledger_at;
mod mcp;
mod render;
mod signals;
mod status;
mod table;
mod words;
mod worker;
mod worktrees;

use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::session::{ModelSource, Session, SessionOptions};
use brood::runtime::Checked;
use clap::{Args, CommandFactory, Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// mimalloc, not glibc's malloc: a fan-out allocates and frees request bodies,
/// schemas and SSE buffers on many threads at once, and glibc's per-thread arenas
/// spent a visible share of the CPU growing and trimming their heaps (page faults,
/// `mprotect`, `malloc_consolidate`); BENCHMARKS.md has the before/after.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the runtime waits at exit for blocking work (a tool's read or lock)
/// that outlived its run.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// After a second signal, how long the ledger may take to commit what is queued
/// before brood exits anyway (a third signal does not wait at all).
const FINAL_FLUSH_GRACE: Duration = Duration::from_secs(5);

#[derive(Parser)]
#[command(
    name = "brood",
    version,
    about = "A runtime for sub-agents in coding agents: enforced grants, bounded fan-out, a durable ledger."
)]
struct Cli {
    /// Bare `brood` on a terminal is `brood chat`.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a parent agent on PROMPT in the workspace (one shot).
    Run(RunArgs),
    /// Talk with a parent agent: prompts and slash commands (/help), one session
    /// for the whole conversation. Reads lines when stdin or stdout is not a terminal.
    Chat(chat::ChatArgs),
    /// Serve brood's sub-agents over MCP (stdio) to a coding agent (Claude Code, Codex, …).
    Mcp(mcp::McpArgs),
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
    /// Check that a `brood run` with these flags would start: config, endpoint, key
    /// variable, model, shell sandbox, ledger, agent definitions (exit 0 only then).
    Doctor {
        #[command(flatten)]
        provider: ProviderArgs,
        /// Workspace directory (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Check as `brood run --trust` would (see README "Trust").
        #[arg(long)]
        trust: bool,
    },
    /// Run as one worker of a fleet: claim queued runs from a PostgreSQL ledger and
    /// run each in a git worktree under --workspace-root (docs/FLEET.md).
    Worker(worker::WorkerArgs),
    /// Print a shell completion script, e.g. `brood completions bash > ~/.local/share/bash-completion/completions/brood`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `brood man > ~/.local/share/man/man1/brood.1`.
    Man,
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

#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProviderArgs {
    /// Provider preset: deepseek (default), openai, openrouter, ollama, vllm, sglang, llamacpp, local.
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
    /// The ledger's PostgreSQL database (postgres://…; config `ledger_url`); default:
    /// the workspace's SQLite file.
    #[arg(long = "ledger", value_name = "URL")]
    ledger_url: Option<String>,
}

/// What opens a session: `run` and `chat` take the same flags.
#[derive(Args, Clone, Default)]
struct SessionArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    /// Workspace directory (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Most model steps for the parent agent.
    #[arg(long)]
    max_turns: Option<u32>,
    /// Trust this workspace's `.brood/config.toml` to set provider, base_url,
    /// api_key_env, [providers.*] and [models.*] (see README "Trust").
    #[arg(long)]
    trust: bool,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// Print exactly one JSON object at the end instead of streaming.
    #[arg(long)]
    json: bool,
    /// No status line, tool lines or usage summary on stderr (the answer and
    /// errors still print).
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Append every model request and response to FILE (JSON lines).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Answer model requests from a recording instead of the network.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Approve the calls a permission `ask` rule stops: the asking rule itself, or
    /// a rule covering the whole call (repeatable). Without it they are refused.
    #[arg(long = "allow", value_name = "RULE")]
    allow: Vec<String>,
    /// What to do.
    prompt: String,
}

/// `brood agents resume ID`: `run`'s provider and output flags (the workspace is
/// the `agents` command's own `--workspace`).
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResumeArgs {
    /// The run to continue (a unique prefix is enough).
    id: String,
    #[command(flatten)]
    provider: ProviderArgs,
    /// Most model steps for a resumed parent agent (its earlier steps count).
    #[arg(long)]
    max_turns: Option<u32>,
    /// Trust this workspace's `.brood/config.toml` (as `brood run --trust`).
    #[arg(long)]
    trust: bool,
    /// Print exactly one JSON object at the end instead of streaming.
    #[arg(long)]
    json: bool,
    /// No status line, tool lines or usage summary on stderr.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Approve the calls a permission `ask` rule stops, as `brood run --allow`
    /// (repeatable). Without it they are refused.
    #[arg(long = "allow", value_name = "RULE")]
    allow: Vec<String>,
}

/// What a one-shot session does: run a new parent on a prompt, or resume a run.
enum Start {
    Prompt(String),
    Resume(String),
}

/// Everything `run` and `agents resume` open a session with.
struct OneShot {
    ws: PathBuf,
    provider: ProviderArgs,
    max_turns: Option<u32>,
    trust: bool,
    json: bool,
    quiet: bool,
    models: ModelSource,
    start: Start,
    /// `--allow` rules: the calls an `ask` rule stops that may run.
    allow: Vec<String>,
}

fn main() -> ExitCode {
    // The API key is in this process's environment: no same-user process may read
    // it through /proc (shells are kept out by the sandbox's own /proc as well).
    if let Err(e) = brood::tool::sandbox::harden_process() {
        errln!("warning: could not make brood non-dumpable: {e}");
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // The arguments parsed; with BROOD_PARSE_ONLY set that is all (the docs test
    // checks every command the documentation shows this way, doing nothing).
    if std::env::var_os("BROOD_PARSE_ONLY").is_some_and(|v| !v.is_empty()) {
        return ExitCode::SUCCESS;
    }
    // A tree of up to 1024 running children holds a connection each (HTTP/1.1):
    // more than the usual soft limit of 1024 open files.
    if let Err(e) =
        brood::runtime::fdlimit::raise_open_files(brood::runtime::fdlimit::OPEN_FILES_WANTED)
    {
        errln!("warning: could not raise the open-file limit: {e}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            errln!("brood: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(dispatch(cli));
    // Everything brood started has settled by now (a session's close waits for its
    // runs); what is left is a blocking read or lock a tool may still be in. It
    // must not keep the process alive.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    ExitCode::from(code)
}

async fn dispatch(cli: Cli) -> u8 {
    let command = match cli.command {
        Some(c) => c,
        None if std::io::IsTerminal::is_terminal(&std::io::stdin())
            && std::io::IsTerminal::is_terminal(&std::io::stdout()) =>
        {
            Command::Chat(chat::ChatArgs::default())
        }
        None => {
            let _ = Cli::command().print_help();
            return 2;
        }
    };
    match command {
        Command::Run(args) => run(args).await,
        Command::Chat(args) => chat::run(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Config {
            command:
                ConfigCmd::Show {
                    provider,
                    workspace,
                },
        } => config_show(provider, workspace),
        Command::Doctor {
            provider,
            workspace,
            trust,
        } => match workspace_dir(workspace) {
            Ok(ws) => doctor::run(&ws, &overrides(&provider, None, trust)).await,
            Err(code) => code,
        },
        Command::Agents { workspace, command } => {
            let ws = match workspace_dir(workspace) {
                Ok(w) => w,
                Err(code) => return code,
            };
            match command {
                agents::AgentsCmd::Resume(a) => {
                    one_shot(OneShot {
                        ws,
                        provider: a.provider,
                        max_turns: a.max_turns,
                        trust: a.trust,
                        json: a.json,
                        quiet: a.quiet,
                        models: ModelSource::Live,
                        start: Start::Resume(a.id),
                        allow: a.allow,
                    })
                    .await
                }
                command => agents::run(command, &ws).await as u8,
            }
        }
        Command::Worker(args) => worker::run(args).await,
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "brood", &mut buf);
            out::stdout_bytes(&buf);
            0
        }
        Command::Man => {
            let mut buf = Vec::new();
            match clap_mangen::Man::new(Cli::command()).render(&mut buf) {
                Ok(()) => {
                    out::stdout_bytes(&buf);
                    0
                }
                Err(e) => {
                    errln!("brood: cannot render the man page: {e}");
                    1
                }
            }
        }
    }
}

fn workspace_dir(arg: Option<PathBuf>) -> Result<PathBuf, u8> {
    match arg {
        Some(p) => Ok(p),
        None => std::env::current_dir().map_err(|e| {
            errln!("brood: cannot read the current directory: {e}; pass --workspace DIR");
            2
        }),
    }
}

fn overrides(provider: &ProviderArgs, max_turns: Option<u32>, trust_workspace: bool) -> Overrides {
    Overrides {
        provider: provider.provider.clone(),
        base_url: provider.base_url.clone(),
        model: provider.model.clone(),
        api_key_env: provider.api_key_env.clone(),
        max_turns,
        trust_workspace,
        ledger_url: provider.ledger_url.clone(),
    }
}

/// Load and check the configuration as `run` does (one path for `run`, `config
/// show` and `doctor`); a problem is printed and is exit code 2.
fn load_config(
    workspace: &std::path::Path,
    provider: &ProviderArgs,
    max_turns: Option<u32>,
    trust_workspace: bool,
) -> Result<(Config, BTreeMap<String, String>, Checked), u8> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let flags = overrides(provider, max_turns, trust_workspace);
    match Config::load(&ConfigPaths::from_env(workspace), &env, &flags) {
        Ok(c) => {
            if let Some(w) = c.ignored_warning() {
                errln!("brood: {w}");
            }
            for n in &c.mcp_notes {
                errln!("brood: note: {n}");
            }
            match c.check(&env) {
                Ok(checked) => Ok((c, env, checked)),
                Err(e) => {
                    errln!("brood: {e}");
                    Err(2)
                }
            }
        }
        Err(e) => {
            errln!("brood: {e}");
            Err(2)
        }
    }
}

fn config_show(provider: ProviderArgs, workspace: Option<PathBuf>) -> u8 {
    let ws = match workspace_dir(workspace) {
        Ok(w) => w,
        Err(c) => return c,
    };
    match load_config(&ws, &provider, None, false) {
        Ok((config, _, checked)) => config_show::print(&config, &checked, &ws),
        Err(c) => c,
    }
}

async fn run(args: RunArgs) -> u8 {
    let ws = match workspace_dir(args.session.workspace.clone()) {
        Ok(w) => w,
        Err(c) => return c,
    };
    let models = match (&args.record, &args.replay) {
        (Some(f), _) => ModelSource::Record(f.clone()),
        (_, Some(f)) => ModelSource::Replay(f.clone()),
        _ => ModelSource::Live,
    };
    one_shot(OneShot {
        ws,
        provider: args.session.provider,
        max_turns: args.session.max_turns,
        trust: args.session.trust,
        json: args.json,
        quiet: args.quiet,
        models,
        start: Start::Prompt(args.prompt),
        allow: args.allow,
    })
    .await
}

/// Open a session, run (or resume) one parent to its end with live output and
/// signal handling, close the session, print the report.
async fn one_shot(args: OneShot) -> u8 {
    let (config, env, checked) =
        match load_config(&args.ws, &args.provider, args.max_turns, args.trust) {
            Ok(c) => c,
            Err(c) => return c,
        };
    for a in &checked.adjustments {
        errln!("brood: note: {a}");
    }
    let approver = match allow::FlagApprover::new(&args.allow, args.ws.clone()) {
        Ok(a) => a,
        Err(e) => {
            errln!("brood: {e}");
            return 2;
        }
    };
    for n in &config.permission_notes {
        errln!("brood: note: {n}");
    }
    let mut opts = SessionOptions::new(args.ws.clone(), config);
    // AGENTS.md files from the workspace root down to where the user is.
    opts.working_dir = std::env::current_dir().ok();
    opts.env = env;
    opts.models = args.models.clone();
    opts.approver = Some(std::sync::Arc::new(approver));
    // Taken over before the session opens, so a signal during the open is not a
    // silent death either: it cancels the run as soon as it starts.
    let mut signals = match signals::Signals::install() {
        Ok(s) => Some(s),
        Err(e) => {
            errln!("brood: warning: cannot watch for SIGINT/SIGTERM/SIGHUP ({e}); a signal ends brood without a record");
            None
        }
    };
    let session = match Session::open(opts).await {
        Ok(s) => s,
        Err(e) => {
            errln!("brood: {e}");
            return exit::of_error(&e);
        }
    };
    for w in session.startup_warnings() {
        errln!("brood: warning: {w}");
    }
    let turn = CancellationToken::new();
    let status = status::StatusLine::start(args.json, args.quiet);
    let printer = render::Printer::new(!args.json, args.quiet, status.clone());
    let mut cancelled_by: Option<signals::Sig> = None;
    let mut refresh = tokio::time::interval(status::REFRESH);
    // Children's retries are printed from the session's live events (the parent's
    // come through the printer's sink); subscribed before the run starts.
    let mut events = session.events();
    let mut child_names = std::collections::HashMap::new();
    let result = {
        let run = match &args.start {
            Start::Prompt(prompt) => futures::future::Either::Left(session.run_with(
                prompt,
                Some(printer.sink()),
                turn.clone(),
            )),
            Start::Resume(id) => futures::future::Either::Right(session.resume(
                id,
                Some(printer.sink()),
                turn.clone(),
            )),
        };
        tokio::pin!(run);
        loop {
            tokio::select! {
                r = &mut run => break r,
                Some(ev) = futures::StreamExt::next(&mut events) => {
                    printer.child_event(&mut child_names, &ev);
                }
                _ = refresh.tick(), if status.is_some() => {
                    if let Some(s) = &status {
                        s.update(&session);
                    }
                }
                sig = signals::next(&mut signals) => match cancelled_by {
                    None => {
                        let say = || errln!(
                            "brood: {} received; cancelling the run (send it again to exit at once)",
                            sig.name()
                        );
                        match &status {
                            Some(s) => s.suspend(say),
                            None => say(),
                        }
                        session.cancel_all(&format!("brood received {}", sig.name()));
                        turn.cancel();
                        cancelled_by = Some(sig);
                    }
                    Some(_) => exit_now(sig, session.ledger(), &mut signals).await,
                },
            }
        }
    };
    // What children published before the run ended is buffered: printed now.
    while let Some(Some(ev)) =
        futures::FutureExt::now_or_never(futures::StreamExt::next(&mut events))
    {
        printer.child_event(&mut child_names, &ev);
    }
    drop(events);
    // The line goes before anything else is printed; the tree's summary replaces it.
    if let Some(s) = &status {
        s.finish(result.as_ref().ok().map(|r| &r.usage));
    }
    let failures = session.supervisor().ledger_write_failures();
    // Closing waits for the children to settle and their records to commit; a
    // second signal meanwhile still exits at once.
    let ledger = session.ledger().clone();
    let close = session.close();
    tokio::pin!(close);
    loop {
        tokio::select! {
            () = &mut close => break,
            sig = signals::next(&mut signals) => match cancelled_by {
                None => {
                    errln!(
                        "brood: {} received; waiting for the runs to settle (send it again to exit at once)",
                        sig.name()
                    );
                    cancelled_by = Some(sig);
                }
                Some(_) => exit_now(sig, &ledger, &mut signals).await,
            },
        }
    }
    let waited = ledger.stats().busy_retries;
    if waited > 0 {
        errln!(
            "brood: note: the ledger waited for another process's write lock on .brood/state/brood.db ({waited} retries); writes wait, none was dropped for it"
        );
    }
    if failures > 0 {
        errln!(
            "brood: warning: {} failed in this session; the record in .brood/state may be incomplete",
            words::count(failures, "ledger write", "ledger writes")
        );
    }
    match result {
        Ok(report) => {
            if args.json {
                match serde_json::to_string(&report) {
                    Ok(s) => outln!("{s}"),
                    Err(e) => errln!("brood: cannot encode the report: {e}"),
                }
            } else {
                printer.finish(&report.final_text);
            }

            if let Some(e) = &report.error {
                errln!("brood: run {} failed: {e}", report.run_id);
            }
            exit::of_report(&report)
        }
        Err(e) => {
            errln!("brood: {e}");
            exit::of_error(&e)
        }
    }
}

/// A second signal: commit what the ledger has queued — unless that takes longer
/// than [`FINAL_FLUSH_GRACE`] or a third signal arrives — and exit with 128 + the
/// signal's number, without waiting for runs, children or blocking tools. Runs
/// still unfinished are marked `interrupted` by the next session on this workspace.
async fn exit_now(
    sig: signals::Sig,
    ledger: &brood::ledger::Ledger,
    signals: &mut Option<signals::Signals>,
) -> ! {
    errln!("brood: {} received again; exiting now", sig.name());
    tokio::select! {
        r = tokio::time::timeout(FINAL_FLUSH_GRACE, ledger.flush()) => match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errln!("brood: warning: the ledger's final flush failed: {e}"),
            Err(_) => errln!(
                "brood: warning: the ledger did not flush within {} s; unfinished runs are marked interrupted by the next session",
                FINAL_FLUSH_GRACE.as_secs()
            ),
        },
        again = signals::next(signals) => {
            errln!("brood: {} received; not waiting for the ledger", again.name());
        }
    }
    // Not a return through `main`: dropping the runtime and the session would wait
    // for the very runs and tools this signal says not to wait for.
    std::process::exit(i32::from(sig.exit_code()))
}
