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

/// Why a tool call did not succeed; the model reads its `Display` as the result.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolError {
    /// The model called a tool the run does not have.
    #[error("unknown tool '{name}'; available tools: {available}")]
    UnknownTool {
        /// The name called.
        name: String,
        /// The run's tools, comma-separated.
        available: String,
    },
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments for {tool}: {detail}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What does not fit (clipped).
        detail: String,
    },
    /// The run's grant does not allow the tool.
    #[error("tool '{tool}' is not allowed for {holder}: {reason}")]
    NotGranted {
        /// The tool.
        tool: String,
        /// Who holds the grant (a role or definition).
        holder: String,
        /// Which part of the grant refuses it.
        reason: String,
    },
    /// A path resolves outside the workspace.
    #[error(
        "path '{path}' is outside the workspace ({reason}); use a path inside the workspace root"
    )]
    OutsideWorkspace {
        /// The path given (clipped).
        path: String,
        /// Why it is outside.
        reason: String,
    },
    /// A path inside the workspace that tools may not read or change (see
    /// `docs/SECURITY.md`, "File tools").
    #[error("path '{path}' is protected: {reason}")]
    Protected {
        /// The path.
        path: String,
        /// Which protection.
        reason: String,
    },
    /// A regular file with more than one name: its other names may lie outside the
    /// workspace, so file tools do not read it.
    #[error("'{path}' has {links} hard links; file tools; another name may lie outside the workspace, so file tools do not read hard-linked files")]
    HardLinked {
        /// The path.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// The path does not exist.
    #[error("'{path}' does not exist")]
    NotFound {
        /// The path.
        path: String,
    },
    /// The file system refused.
    #[error("{path}: {detail}")]
    Io {
        /// The path.
        path: String,
        /// The system's error.
        detail: String,
    },
    /// `read_file` on a file with NUL bytes in its first 8 KiB.
    #[error("{path} is a binary file ({bytes} bytes); read_file shows text only - use bash (e.g. `xxd FILE | head`) to inspect bytes")]
    BinaryFile {
        /// The path.
        path: String,
        /// Its size.
        bytes: u64,
    },
    /// `edit_file`'s `old_string` is not in the file.
    #[error("edit_file: old_string not found in {path}; read the file and copy the exact text")]
    EditNoMatch {
        /// The file.
        path: String,
    },
    /// `edit_file`'s `old_string` is in the file more than once.
    #[error("edit_file: old_string matches {count} times in {path}; include more surrounding text so it matches exactly once")]
    EditAmbiguous {
        /// The file.
        path: String,
        /// How many times it matches.
        count: usize,
    },
    /// A command ran out of time.
    #[error("command timed out after {secs} s; its process group was killed")]
    Timeout {
        /// The limit.
        secs: u64,
    },
    /// A shell command ran out of time; what it printed is kept.
    #[error(
        "command timed out after {secs} s; its process group was killed. Output so far:\n{output}"
    )]
    ShellTimeout {
        /// The limit.
        secs: u64,
        /// Its output so far.
        output: String,
    },
    /// The run was cancelled during the call.
    #[error("cancelled")]
    Cancelled,
    /// A call marked `ask` that the session's approver (or the lack of one) refused.
    #[error("tool '{tool}' was not run: {reason}")]
    Denied {
        /// The tool.
        tool: String,
        /// The approver's reason.
        reason: String,
    },
    /// The tool panicked (the run goes on).
    #[error("tool '{tool}' crashed: {detail}")]
    Panicked {
        /// The tool.
        tool: String,
        /// The panic's message.
        detail: String,
    },
    /// The shell sandbox could not be set up.
    #[error("sandbox: {detail}")]
    Sandbox {
        /// What failed.
        detail: String,
    },
    /// An MCP server failed, timed out, stopped or reported an error.
    #[error("MCP server '{server}': {detail}")]
    Mcp {
        /// The server's name.
        server: String,
        /// What happened.
        detail: String,
    },
    /// Anything else, in words (an embedder's tool may use it).
    #[error("{0}")]
    Failed(String),
}
