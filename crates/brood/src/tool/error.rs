//! Typed tool failures. Each goes back to the model as the tool result and names
//! what was wrong and what to do instead.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum ToolError {
    #[error("unknown tool '{name}'; available tools: {available}")]
    UnknownTool { name: String, available: String },
    #[error("invalid arguments for {tool}: {detail}")]
    InvalidArguments { tool: String, detail: String },
    #[error("tool '{tool}' is not allowed for {holder}: {reason}")]
    NotGranted {
        tool: String,
        holder: String,
        reason: String,
    },
    #[error(
        "path '{path}' is outside the workspace ({reason}); use a path inside the workspace root"
    )]
    OutsideWorkspace { path: String, reason: String },
    #[error("'{path}' does not exist")]
    NotFound { path: String },
    #[error("{path}: {detail}")]
    Io { path: String, detail: String },
    /// `read_file` on a file with NUL bytes in its first 8 KiB.
    #[error("{path} is a binary file ({bytes} bytes); read_file shows text only - use bash (e.g. `xxd FILE | head`) to inspect bytes")]
    BinaryFile { path: String, bytes: u64 },
    #[error("edit_file: old_string not found in {path}; read the file and copy the exact text")]
    EditNoMatch { path: String },
    #[error("edit_file: old_string matches {count} times in {path}; include more surrounding text so it matches exactly once")]
    EditAmbiguous { path: String, count: usize },
    #[error("command timed out after {secs} s; its process group was killed")]
    Timeout { secs: u64 },
    #[error(
        "command timed out after {secs} s; its process group was killed. Output so far:\n{output}"
    )]
    ShellTimeout { secs: u64, output: String },
    #[error("cancelled")]
    Cancelled,
    #[error("tool '{tool}' crashed: {detail}")]
    Panicked { tool: String, detail: String },
    #[error("sandbox: {detail}")]
    Sandbox { detail: String },
    #[error("{0}")]
    Failed(String),
}
