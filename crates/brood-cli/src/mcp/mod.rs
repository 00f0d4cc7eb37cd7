//! `brood mcp`: brood's delegation surface served over MCP (stdio) to any coding
//! agent that speaks it. One process serves one session; the MCP host is the
//! parent (a root run in the ledger), and every child it opens runs with the
//! session's enforced grants, limits, retries and ledger, exactly as under
//! `brood run`. Standard output carries only the protocol; notes go to stderr.

mod resources;
mod server;

use crate::{load_config, signals, workspace_dir, ProviderArgs};
use brood::runtime::session::{Session, SessionOptions};
use clap::Args;
use rmcp::ServiceExt;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct McpArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    /// Workspace directory (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Trust this workspace's `.brood/config.toml` (see README "Trust").
    #[arg(long)]
    trust: bool,
}

/// Serve until the host closes the connection (or a signal arrives); the exit
/// code as for `brood run`.
pub async fn run(args: McpArgs) -> u8 {
    let ws = match workspace_dir(args.workspace) {
        Ok(w) => w,
        Err(c) => return c,
    };
    let (config, env, checked) = match load_config(&ws, &args.provider, None, args.trust) {
        Ok(c) => c,
        Err(c) => return c,
    };
    for a in &checked.adjustments {
        errln!("brood: note: {a}");
    }
    let mut opts = SessionOptions::new(ws.clone(), config);
    opts.env = env;
    let mut signals = signals::Signals::install().ok();
    let session = match Session::open(opts).await {
        Ok(s) => s,
        Err(e) => {
            errln!("brood: {e}");
            return if e.is_usage() { 2 } else { 1 };
        }
    };
    for d in session.sandbox_degradations() {
        errln!("brood: warning: shell sandbox: {d}");
    }
    for w in session.definition_warnings() {
        errln!("brood: warning: agent definition {w}");
    }
    let host = match session
        .host("mcp-host", "sub-agents for an MCP host (brood mcp)")
        .await
    {
        Ok(h) => Arc::new(h),
        Err(e) => {
            errln!("brood: {e}");
            session.close().await;
            return 2;
        }
    };
    let handler = server::BroodServer::new(host.clone(), session.workspace().root().to_path_buf());
    let code = match handler.serve(rmcp::transport::stdio()).await {
        Ok(service) => {
            let stop = service.cancellation_token();
            let waiting = service.waiting();
            tokio::pin!(waiting);
            tokio::select! {
                r = &mut waiting => match r {
                    Ok(_) => 0,
                    Err(e) => {
                        errln!("brood: the MCP service ended abnormally: {e}");
                        1
                    }
                },
                sig = signals::next(&mut signals) => {
                    errln!("brood: {} received; cancelling the runs and closing", sig.name());
                    session.cancel_all(&format!("brood mcp received {}", sig.name()));
                    stop.cancel();
                    let _ = waiting.await;
                    1
                }
            }
        }
        Err(e) => {
            errln!("brood: MCP initialization failed: {e}");
            1
        }
    };
    // The host is gone: its background children have no one to report to.
    session.cancel_all("the MCP host disconnected (brood mcp ended)");
    host.finish(None).await;
    session.close().await;
    code
}
