//! `brood mcp list`: start every configured MCP server as a session would, list
//! the tools each offers and which roles get them, then stop them. Exit 1 when
//! a server does not start (its error names it), 2 for a configuration problem.

use crate::{load_config, workspace_dir, ProviderArgs};
use brood::tool::mcp::{ServerReport, ServerState};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct ListArgs {
    /// Workspace directory (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Trust this workspace's `.brood/config.toml` and `.mcp.json` (see README "Trust").
    #[arg(long)]
    trust: bool,
    /// Print the servers and their tools as JSON.
    #[arg(long)]
    json: bool,
}

/// Which roles get a tool, in words.
fn roles_of(read_only: bool) -> &'static str {
    if read_only {
        "every role (custom and definitions: when they name it)"
    } else {
        "general, implementer (custom and definitions: when they name it; not explore, plan, review, verifier)"
    }
}

pub async fn run(args: ListArgs) -> u8 {
    let ws = match workspace_dir(args.workspace) {
        Ok(w) => w,
        Err(c) => return c,
    };
    let (config, env, checked) = match load_config(&ws, &ProviderArgs::default(), None, args.trust)
    {
        Ok(c) => c,
        Err(c) => return c,
    };
    if checked.mcp_servers.is_empty() {
        errln!(
            "brood: no MCP servers are configured (enabled) for {}; add [mcp_servers.<name>] to your config",
            ws.display()
        );
        return 0;
    }
    let deny = brood::runtime::sandbox_options(&config).env.deny;
    let servers =
        brood::runtime::mcp_start::start(checked.mcp_servers, &deny, &env, &ws, &[]).await;
    let reports: &[ServerReport] = servers.reports();
    if args.json {
        match serde_json::to_string_pretty(reports) {
            Ok(s) => outln!("{s}"),
            Err(e) => errln!("brood: {e}"),
        }
    } else {
        for r in reports {
            match &r.state {
                ServerState::Ready { tools } => {
                    outln!("{}: ready, {} tools", r.name, tools.len());
                    for t in tools {
                        let mark = match (t.read_only_hint, t.read_only) {
                            (true, _) => "read-only (readOnlyHint)",
                            (false, true) => "read-only (read_only_tools)",
                            _ => "may change things",
                        };
                        outln!("  {}  {mark}; for {}", t.name, roles_of(t.read_only));
                    }
                }
                ServerState::Failed { error } => outln!("{}: failed: {error}", r.name),
            }
        }
    }
    for w in servers.warnings() {
        if !w.contains("is not available") {
            errln!("brood: warning: {w}");
        }
    }
    servers.stop();
    let failed = reports
        .iter()
        .filter(|r| matches!(r.state, ServerState::Failed { .. }))
        .count();
    if failed > 0 {
        errln!("brood: {failed} MCP server(s) did not start");
        1
    } else {
        0
    }
}
