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

/// What kind of failure an error or a run's ending is: what a front end tells
/// apart (the `brood` command gives each its own exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// A usage or configuration problem the caller can fix: a bad workspace,
    /// config, key variable, provider name or tool name.
    Usage,
    /// The model endpoint failed: an HTTP status, no connection, a timeout, an
    /// answer that is not one, a recording that does not match.
    Provider,
    /// A limit or budget stopped the run before it could answer, or refused a spawn.
    Limit,
    /// The run was cancelled (by the caller, a signal, the session closing).
    Cancelled,
    /// brood itself failed: the ledger could not be opened or written, a task of
    /// the session stopped.
    Internal,
    /// Any other failure of the run (one that cannot be resumed, a worktree that
    /// cannot be made, …).
    Failed,
}

impl SessionError {
    /// Configuration and usage problems (exit code 2) versus run failures.
    pub fn is_usage(&self) -> bool {
        self.class() == ErrorClass::Usage
    }

    /// Which kind of failure this is.
    pub fn class(&self) -> ErrorClass {
        use crate::subagent::SpawnError;
        match self {
            SessionError::Workspace { .. }
            | SessionError::Config(_)
            | SessionError::ToolName { .. }
            | SessionError::AskUnknownTool { .. }
            | SessionError::Model(
                ModelError::MissingKey { .. }
                | ModelError::Config(_)
                | ModelError::UnknownProvider { .. },
            ) => ErrorClass::Usage,
            SessionError::Model(_) => ErrorClass::Provider,
            SessionError::Ledger(_)
            | SessionError::TaskFailed { .. }
            | SessionError::Spawn(SpawnError::Ledger(_)) => ErrorClass::Internal,
            SessionError::Spawn(
                SpawnError::CapReached { .. }
                | SpawnError::DepthLimit { .. }
                | SpawnError::TotalLimit { .. }
                | SpawnError::Budget(_),
            ) => ErrorClass::Limit,
            SessionError::Spawn(SpawnError::Closed) => ErrorClass::Cancelled,
            SessionError::Spawn(_) | SessionError::Resume(_) => ErrorClass::Failed,
        }
    }
}

impl From<crate::subagent::ResumeError> for SessionError {
    fn from(e: crate::subagent::ResumeError) -> Self {
        SessionError::Resume(Box::new(e))
    }
}
