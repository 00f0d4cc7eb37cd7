//! What opening a run takes and gives: a child's [`SpawnRequest`] (and how it
//! belongs to its parent), the session's [`RootRequest`], what `agent_open`
//! returns ([`Opened`]), and the [`Spawner`] the delegation tools open children
//! through (the supervisor implements it in `super::open`).

use super::board::LiveStatus;
use super::ctx::RunCtx;
use super::error::SpawnError;
use super::tally::RootTallies;
use super::worktree::Isolation;
use crate::agent::EventSink;
use crate::model::{Message, ModelRequest};
use async_trait::async_trait;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How a child belongs to its parent.
#[derive(Clone)]
pub(crate) enum SpawnMode {
    /// `task`: belongs to the parent's turn; cancelling the turn cancels it.
    Task { turn_cancel: CancellationToken },
    /// `agent_open`: belongs to the session; its completion is pushed to the parent.
    Background,
}

/// One child to open.
#[derive(Clone)]
pub(crate) struct SpawnRequest {
    pub(crate) prompt: String,
    pub(crate) agent_type: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) model: Option<String>,
    /// When set, the child continues from this parent request (`fork_context`).
    pub fork_from: Option<Arc<ModelRequest>>,
    pub(crate) allowed_tools: Option<Vec<String>>,
    /// The call's `isolation` (it can only ask for a worktree; config and the
    /// definition may require one regardless).
    pub isolation: Option<Isolation>,
    pub(crate) mode: SpawnMode,
}

/// The session's top-level run (`brood run`).
pub struct RootRequest {
    /// The user's prompt.
    pub prompt: String,
    /// The system prompt; `None` for the general role's.
    pub system: Option<String>,
    /// Turns the run may take.
    pub max_turns: u32,
    /// Extra observer (the CLI's live output).
    pub events: Option<EventSink>,
    /// The turn's token.
    pub cancel: CancellationToken,
    /// The run's name in listings.
    pub name: String,
    /// Where the run counts what the model answered to it and to its tree (read
    /// them when it ends); `None` when the caller does not want them.
    pub tallies: Option<Arc<RootTallies>>,
    /// The conversation so far (an interactive session's earlier turns): the run
    /// continues it with `prompt` as the next user message. Empty for a fresh run.
    pub history: Vec<Message>,
}

/// What `agent_open` returns at once.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Opened {
    pub(crate) agent_id: String,
    pub(crate) name: String,
    pub(crate) status: LiveStatus,
    pub(crate) transcript_handle: String,
    pub(crate) role: String,
    pub(crate) model: String,
    /// The worktree branch it works on (`isolation = "worktree"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
}

/// Opens children: what the delegation tools call to spawn. The supervisor is
/// the one implementation; the trait lets the tools sit below the code that
/// builds every run's toolbox (a child's toolbox holds delegation tools too).
#[async_trait]
pub trait Spawner: Send + Sync {
    /// Open a child of `parent`. Returns at once; the child runs in the
    /// background (for `task` the caller then waits for it).
    async fn open(&self, parent: &Arc<RunCtx>, req: SpawnRequest) -> Result<Opened, SpawnError>;
}
