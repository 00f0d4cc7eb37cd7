//! An approver: reads are allowed, every other marked call is asked on stdin
//! (`y` once, `a` for the rest of the session, anything else denies — the model
//! reads the reason). The parent and its children ask the same approver.
//!
//! ```text
//! DEEPSEEK_API_KEY=… cargo run -p brood --example approver -- --workspace .
//! ```

mod common;

use async_trait::async_trait;
use brood::{Approval, ApprovalRequest, Approver};
use std::io::{BufRead, Write};

/// Allows reads; asks a person for the rest.
struct AskOnStdin;

const READS: &[&str] = &["read_file", "list_dir", "find_files", "grep"];

#[async_trait]
impl Approver for AskOnStdin {
    async fn approve(&self, q: &ApprovalRequest) -> Approval {
        if READS.contains(&q.tool.as_str()) {
            return Approval::AllowForSession;
        }
        let who = match q.lineage.first() {
            Some(parent) => format!("child {} ({}) of {parent}", q.run_id, q.agent_type),
            None => format!("parent {}", q.run_id),
        };
        let question = format!(
            "{who} wants to run {} {}\nallow? [y]es once / [a]lways / anything else denies: ",
            q.tool, q.arguments
        );
        // stdin blocks: read it off the async threads.
        let answer = tokio::task::spawn_blocking(move || {
            print!("{question}");
            let _ = std::io::stdout().flush();
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await;
        match answer.ok().and_then(Result::ok).as_deref().map(str::trim) {
            Some("y") => Approval::AllowOnce,
            Some("a") => Approval::AllowForSession,
            _ => {
                println!("denied {}", q.tool);
                Approval::Deny {
                    reason: "the user denied this call; do not retry it, report what you \
                             could do without it"
                        .into(),
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), brood::Error> {
    let args = common::args();
    let session = common::builder(&args)
        .ask_before([
            "read_file",
            "list_dir",
            "find_files",
            "grep",
            "write_file",
            "edit_file",
            "bash",
        ])
        .approver(AskOnStdin)
        .build()
        .await?;
    let report = session
        .ask(
            "Count the Rust source files of this workspace by running `find . -name '*.rs' \
             | wc -l` with bash, then answer with the number.",
        )
        .await?;
    println!("== answer\n{}", report.final_text);
    session.close().await;
    Ok(())
}
