//! A tool of your own, granted to a child: `line_count` counts the lines of a file
//! in the workspace (through brood's jail, like the built-in tools). The parent
//! delegates; the example prints every call of the tool and which run made it.
//!
//! ```text
//! DEEPSEEK_API_KEY=… cargo run -p brood --example custom_tool -- --workspace .
//! ```

mod common;

use async_trait::async_trait;
use brood::{Capability, Event, RunEventKind, Tool, ToolContext, ToolError};
use futures::StreamExt;
use serde_json::{json, Value};

/// Counts the lines of one workspace file.
struct LineCount;

#[async_trait]
impl Tool for LineCount {
    fn name(&self) -> &str {
        "line_count"
    }
    fn description(&self) -> &str {
        "Count the lines of a file in the workspace. Argument: path (workspace-relative)."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"]
        })
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let Some(path) = args["path"].as_str() else {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: "path must be a string".into(),
            });
        };
        // The model chose the path: resolve it inside the workspace, never outside.
        let file = ctx.workspace.resolve(path)?;
        let text = std::fs::read_to_string(&file).map_err(|e| ToolError::Io {
            path: path.into(),
            detail: e.to_string(),
        })?;
        Ok(format!("{path}: {} lines", text.lines().count()))
    }
}

#[tokio::main]
async fn main() -> Result<(), brood::Error> {
    let args = common::args();
    let session = common::builder(&args).tool(LineCount).build().await?;

    let mut run = session.run(
        "Use the task tool to open one sub-agent that counts the lines of README.md \
         (or of any file at the top of the workspace) with the line_count tool and \
         reports the number. Then tell me the number.",
    );
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Event::Run(e) = event else { continue };
            let who = match &e.parent_id {
                Some(parent) => format!("child {} (of {parent})", e.run_id),
                None => format!("parent {}", e.run_id),
            };
            match &e.kind {
                RunEventKind::ToolCall {
                    name, arguments, ..
                } if name == "line_count" => println!("{who} called line_count {arguments}"),
                RunEventKind::ToolResult {
                    name, ok, output, ..
                } if name == "line_count" => println!("{who} got ({ok}): {output}"),
                _ if e.parent_id.is_none() && e.kind.is_terminal() => break,
                _ => {}
            }
        }
    });
    let report = run.await?;
    let _ = printer.await;
    println!("== parent\n{}", report.final_text);
    session.close().await;
    Ok(())
}
