//! brood — a runtime for sub-agents in coding agents.
//!
//! A parent agent opens child agents (explore, plan, review, implementer, verifier,
//! general, custom), each with its own context, model and an *enforced* tool grant.
//! brood runs them in parallel or in the background, bounds them, cancels them,
//! records every step durably and returns structured results.
//!
//! The modules are the layers of `docs/ARCHITECTURE.md`; arrows point down only:
//!
//! Embedding starts at [`Session::builder`]; the names a program needs are
//! re-exported here.
//!
//! ```text
//! runtime   Session: config, event bus, supervisor wiring
//!  ├─ subagent  roles, definitions, grants, supervisor, model-facing tools, fork, contract
//!  ├─ agent     the loop: model step → tool calls → results → … → final answer
//!  ├─ model     the LLM boundary: trait + providers (openai-compatible, scripted, replay)
//!  ├─ tool      workspace tools, the jail, capability checks, shell sandbox
//!  └─ ledger    durable event log (SQLite) and its projections
//! ```

// Every public item is documented (`missing_docs`).
#![deny(missing_docs)]
// No unwrap/expect and no indexing or slicing that can panic on anything outside
// our control (issue 22.2); tests may.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod agent;
mod certs;
pub mod events;
#[cfg(test)]
mod import_graph;
pub mod ledger;
pub mod model;
pub mod runtime;
pub mod subagent;
pub mod tool;

pub use agent::AgentEvent;
pub use events::{Event, EventStream, RunEvent, RunEventKind};
pub use model::{
    EventFn, FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, StreamEvent,
    Usage,
};
pub use runtime::{
    Approval, ApprovalRequest, Approver, Config, ErrorClass, Overrides, RunHandle, RunReport,
    Session, SessionBuilder, SessionError as Error,
};
pub use subagent::{Grant, ParsedResult, Role};
pub use tool::{Capability, Permissions, Tool, ToolContext, ToolError};
