//! The live agent tree from the session's event stream: one line per spawn, start,
//! tool call and end, indented by depth — what a UI would draw.
//!
//! ```text
//! DEEPSEEK_API_KEY=… cargo run -p brood --example events -- --workspace .
//! ```

mod common;

use brood::{Event, RunEventKind};
use futures::StreamExt;
use std::collections::HashMap;

#[tokio::main]
async fn main() -> Result<(), brood::Error> {
    let args = common::args();
    let session = common::builder(&args).build().await?;
    // Subscribed before the run starts: every event of every run of the session.
    let mut events = session.events();
    let run = session.run(
        "Use the task tool to open two explore sub-agents in parallel: one describes \
         the layout of this workspace, one looks for its tests. Then summarize both.",
    );
    let tree = tokio::spawn(async move {
        let mut depth: HashMap<String, usize> = HashMap::new();
        while let Some(event) = events.next().await {
            let e = match event {
                Event::Run(e) => e,
                Event::Lagged { missed } => {
                    println!("… {missed} events missed (the ledger has them)");
                    continue;
                }
                _ => continue,
            };
            let d = match &e.parent_id {
                Some(p) => depth.get(p).copied().unwrap_or(0) + 1,
                None => 0,
            };
            depth.insert(e.run_id.clone(), d);
            let pad = "  ".repeat(d);
            let id = &e.run_id[e.run_id.len().saturating_sub(8)..];
            let line = match &e.kind {
                RunEventKind::Spawned { objective, .. } => {
                    let short: String = objective.chars().take(60).collect();
                    format!("spawned {} {id} on {}: {short}", e.role, e.model)
                }
                RunEventKind::Queued => format!("queued {id}"),
                RunEventKind::Started => format!("started {id}"),
                RunEventKind::ToolCall { name, .. } => format!("{id} calls {name}"),
                RunEventKind::Completed { .. } => format!("completed {} {id}", e.role),
                RunEventKind::Failed { error } => format!("failed {id}: {error}"),
                RunEventKind::Cancelled { reason } => format!("cancelled {id}: {reason}"),
                RunEventKind::Interrupted { reason } => format!("interrupted {id}: {reason}"),
                _ => continue,
            };
            println!("{pad}{line}");
            if e.parent_id.is_none() && e.kind.is_terminal() {
                break;
            }
        }
    });
    let report = run.await?;
    let _ = tree.await;
    println!("== answer\n{}", report.final_text);
    session.close().await;
    Ok(())
}
