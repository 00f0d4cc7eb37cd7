//! The `brood` command. (Minimal wiring on the ledger branch: only `agents`; the
//! full command set is wired by the lead.)

mod agents;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "brood", about = "A runtime for sub-agents in coding agents")]
struct Cli {
    /// Workspace root (default: the current directory).
    #[arg(long, global = true)]
    workspace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect and manage the runs recorded in this workspace.
    #[command(subcommand)]
    Agents(agents::AgentsCmd),
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let workspace = match cli.workspace {
        Some(w) => w,
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("brood: cannot read the current directory: {e}");
                std::process::exit(1);
            }
        },
    };
    let code = match cli.command {
        Command::Agents(cmd) => agents::run(cmd, &workspace).await,
    };
    std::process::exit(code);
}
