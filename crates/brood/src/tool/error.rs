//! Typed tool failures. Each goes back to the model as the tool result and names
//! what was wrong and what to do instead.

use thiserror::Error;

/// Most bytes of a model-given argument (a path, a pattern) an error echoes.
pub const ECHO_MAX_BYTES: usize = 256;

/// `s` as an error may echo it: at most [`ECHO_MAX_BYTES`] (cut on a char
/// boundary), with a note of how long it was when cut.
pub fn clip(s: &str) -> String {
    if s.len() <= ECHO_MAX_BYTES {
        return s.to_string();
    }
    let mut end = ECHO_MAX_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... [{} bytes in all]", &s[..end], s.len())
}

#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
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
    /// A path inside the workspace that tools may not read or change (see
    /// `docs/SECURITY.md`, "File tools").
    #[error("path '{path}' is protected: {reason}")]
    Protected { path: String, reason: String },
    /// A regular file with more than one name: its other names may lie outside the
    /// workspace, so file tools do not read it.
    #[error("'{path}' has {links} hard links; file tools; another name may lie outside the workspace, so file tools do not read hard-linked files")]
    HardLinked { path: String, links: u64 },
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
    /// A call marked `ask` that the session's approver (or the lack of one) refused.
    #[error("tool '{tool}' was not run: {reason}")]
    Denied { tool: String, reason: String },
    #[error("tool '{tool}' crashed: {detail}")]
    Panicked { tool: String, detail: String },
    #[error("sandbox: {detail}")]
    Sandbox { detail: String },
    #[error("{0}")]
    Failed(String),
}
