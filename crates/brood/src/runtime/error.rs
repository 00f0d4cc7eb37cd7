//! The errors of opening a session and starting a run ([`SessionError`]).

use crate::ledger::LedgerError;
use crate::model::ModelError;
use std::path::PathBuf;
use thiserror::Error;

/// Why a session could not open or a run could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The workspace is not an existing directory brood can open.
    #[error("workspace {path}: {detail}")]
    Workspace {
        /// The path given.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// The configuration is invalid (the file and key are named inside).
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
    /// The provider could not be set up (missing key, unknown preset, …).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The ledger could not be opened or written.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The run could not start (the ledger refused its record, or the session is
    /// shutting down).
    #[error(transparent)]
    Spawn(#[from] crate::subagent::SpawnError),
    /// A run could not be resumed (`Session::resume`): why, and what to do.
    /// (Boxed: the refusals carry ledger and spawn errors, and every `Result` of
    /// a session would otherwise be as large.)
    #[error(transparent)]
    Resume(Box<crate::subagent::ResumeError>),
    /// A task of the session stopped before it finished (`task` names which).
    #[error("{task} stopped before it finished: {detail}")]
    TaskFailed {
        /// Which task.
        task: &'static str,
        /// How it stopped (a panic's message, or cancelled).
        detail: String,
    },
    /// [`crate::SessionBuilder::ask_before`] names a tool the session does not have.
    #[error("ask_before names {name:?}, which is not a tool of this session; tools that can be marked ask: {}", accepted.join(", "))]
    AskUnknownTool {
        /// The name given.
        name: String,
        /// The names that can be marked.
        accepted: Vec<String>,
    },
    /// An embedder's tool is unnamed or reuses a name already offered.
    #[error("tool name {name:?} is empty or already taken (built-in, delegation or another added tool); rename the tool")]
    ToolName {
        /// The tool's name.
        name: String,
    },
}

impl SessionError {
    /// Configuration and usage problems (exit code 2) versus run failures (1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SessionError::Workspace { .. }
                | SessionError::Config(_)
                | SessionError::ToolName { .. }
                | SessionError::AskUnknownTool { .. }
                | SessionError::Model(ModelError::MissingKey { .. })
                | SessionError::Model(ModelError::Config(_))
                | SessionError::Model(ModelError::UnknownProvider { .. })
        )
    }
}

impl From<crate::subagent::ResumeError> for SessionError {
    fn from(e: crate::subagent::ResumeError) -> Self {
        SessionError::Resume(Box::new(e))
    }
}
