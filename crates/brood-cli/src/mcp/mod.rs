//! `brood mcp`: brood's delegation surface served over MCP (stdio) to any coding
//! agent that speaks it. One process serves one session; the MCP host is the
//! parent (a root run in the ledger), and every child it opens runs with the
//! session's enforced grants, limits, retries and ledger, exactly as under
//! `brood run`. Over stdio, standard output carries only the protocol; with
//! `--http ADDR` the same server is offered over streamable HTTP ([`http`]).
//! Notes go to stderr. `brood mcp list` checks the MCP servers brood's own runs
//! use ([`list`]).

mod http;
mod list;
mod progress;
mod resources;
mod server;

use crate::{load_config, signals, workspace_dir, ProviderArgs};
use brood::runtime::session::{Session, SessionOptions};
use clap::{Args, Subcommand};
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
    /// Serve MCP's streamable HTTP transport at http://ADDR/mcp instead of stdio
    /// (`127.0.0.1:8765`, or a port; loopback only, port 0 picks a free one — the
    /// address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    #[command(subcommand)]
    command: Option<McpCommand>,
}

#[derive(Subcommand)]
enum McpCommand {
    /// Start each configured MCP server ([mcp_servers], a trusted .mcp.json), list
    /// its tools and which roles get them; exit 1 if one does not start.
    List(list::ListArgs),
}

/// Serve until the host closes the connection (or a signal arrives); the exit
/// code as for `brood run`.
pub async fn run(args: McpArgs) -> u8 {
    if let Some(McpCommand::List(a)) = args.command {
        return list::run(a).await;
    }
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
    // A bad --http address is a usage error before anything is opened or recorded.
    let listener = match &args.http {
        Some(addr) => match http::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) => {
                errln!("brood: {e}");
                return 2;
            }
        },
        None => None,
    };
    let mut opts = SessionOptions::new(ws.clone(), config);
    // AGENTS.md files from the workspace root down to where the user is.
    opts.working_dir = std::env::current_dir().ok();
    opts.env = env;
    let mut signals = signals::Signals::install().ok();
    let session = match Session::open(opts).await {
        Ok(s) => s,
        Err(e) => {
            errln!("brood: {e}");
            return crate::exit::of_error(&e);
        }
    };
    for w in session.startup_warnings() {
        errln!("brood: warning: {w}");
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
    let (code, signalled) = match listener {
        Some(listener) => serve_http(listener, handler, &session, &mut signals).await,
        None => serve_stdio(handler, &session, &mut signals).await,
    };
    // The host is gone: its background children have no one to report to. After
    // a signal the host run itself is recorded cancelled with it, like every run.
    session.cancel_all("the MCP host disconnected (brood mcp ended)");
    host.finish(signalled.as_deref()).await;
    session.close().await;
    code
}

/// The exit code, and the cancellation reason when a signal ended the serving.
type Served = (u8, Option<String>);

/// What a signal does to the session: every run cancelled with it as the reason.
fn on_signal(session: &Session, sig: signals::Sig) -> String {
    errln!(
        "brood: {} received; cancelling the runs and closing",
        sig.name()
    );
    let reason = format!("brood mcp received {}", sig.name());
    session.cancel_all(&reason);
    reason
}

/// Serve one host over stdio until it closes the connection or a signal comes.
async fn serve_stdio(
    handler: server::BroodServer,
    session: &Session,
    signals: &mut Option<signals::Signals>,
) -> Served {
    match handler.serve(rmcp::transport::stdio()).await {
        Ok(service) => {
            let stop = service.cancellation_token();
            let waiting = service.waiting();
            tokio::pin!(waiting);
            tokio::select! {
                r = &mut waiting => match r {
                    Ok(_) => (0, None),
                    Err(e) => {
                        errln!("brood: the MCP service ended abnormally: {e}");
                        (1, None)
                    }
                },
                sig = signals::next(signals) => {
                    let reason = on_signal(session, sig);
                    stop.cancel();
                    let _ = waiting.await;
                    (1, Some(reason))
                }
            }
        }
        Err(e) => {
            errln!("brood: MCP initialization failed: {e}");
            (1, None)
        }
    }
}

/// Serve hosts over streamable HTTP until a signal comes (exit 1, as for a
/// cancelled `brood run`: the runs in flight are recorded cancelled).
async fn serve_http(
    listener: tokio::net::TcpListener,
    handler: server::BroodServer,
    session: &Session,
    signals: &mut Option<signals::Signals>,
) -> Served {
    match listener.local_addr() {
        Ok(a) => errln!("brood mcp: serving MCP at http://{a}{}", http::PATH),
        Err(e) => errln!("brood mcp: serving MCP over HTTP ({e})"),
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let serving = http::serve(listener, handler, stop.clone());
    tokio::pin!(serving);
    tokio::select! {
        r = &mut serving => match r {
            Ok(()) => (0, None),
            Err(e) => {
                errln!("brood: the MCP HTTP server failed: {e}");
                (1, None)
            }
        },
        sig = signals::next(signals) => {
            let reason = on_signal(session, sig);
            stop.cancel();
            let _ = serving.await;
            (1, Some(reason))
        }
    }
}
