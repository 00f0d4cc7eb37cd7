//! A parent agent that delegates with `task` and prints its children's structured
//! results (SUMMARY, CHANGES, EVIDENCE, RISKS, BLOCKERS), then its own answer.
//!
//! ```text
//! DEEPSEEK_API_KEY=… cargo run -p brood --example quickstart -- --workspace .
//! ```

mod common;

use brood::subagent::contract;
use brood::{Event, RunEventKind};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), brood::Error> {
    let args = common::args();
    let session = common::builder(&args).build().await?;

    let mut run = session.run(
        "Use the task tool to open two explore sub-agents in parallel: one lists the \
         top-level files of this workspace, one finds its build manifest (Cargo.toml, \
         package.json, …). Then answer in two sentences what the workspace is.",
    );
    // Children's results, as they complete.
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Event::Run(e) = event else { continue };
            match &e.kind {
                RunEventKind::Completed { final_text } if e.parent_id.is_some() => {
                    let report = contract::parse(final_text);
                    println!("== child {} ({})", e.run_id, e.role);
                    println!("SUMMARY\n  {}", report.summary);
                    for (title, items) in [
                        ("CHANGES", &report.changes),
                        ("RISKS", &report.risks),
                        ("BLOCKERS", &report.blockers),
                    ] {
                        println!("{title}");
                        for item in items {
                            println!("  - {item}");
                        }
                    }
                    println!("EVIDENCE");
                    for ev in &report.evidence {
                        println!("  - {ev:?}");
                    }
                }
                _ if e.parent_id.is_none() && e.kind.is_terminal() => break,
                _ => {}
            }
        }
    });

    let report = run.await?;
    let _ = printer.await;
    println!("== parent {}\n{}", report.run_id, report.final_text);
    println!(
        "({} turns, {} tool calls, {} tokens in the tree)",
        report.turns,
        report.tool_calls,
        report.usage.usage.input_tokens + report.usage.usage.output_tokens
    );
    session.close().await;
    Ok(())
}
