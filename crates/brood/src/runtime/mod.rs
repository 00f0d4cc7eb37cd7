//! One session: configuration, wiring of model, tools, ledger and supervisor.
//!
//! A [`Session`] is what the `brood` command (or an embedding program) opens for a
//! workspace. It loads the [`config::Config`], builds the providers, opens the
//! ledger, owns the session's cancellation token and supervisor, and runs parent
//! agents whose every step is recorded.

pub mod approval;
pub mod builder;
pub mod config;
mod error;
pub mod fdlimit;
mod fleet;
mod handle;
pub mod instructions;
pub mod mcp_config;
pub mod mcp_start;
mod models;
mod options;
pub mod permissions;
pub mod provider;
mod resume;
mod root;
pub mod session;
mod tools;
pub mod validate;

pub use approval::{Approval, ApprovalRequest, Approver};
pub use builder::SessionBuilder;
pub use config::{Config, ConfigError, ConfigPaths, Overrides};
pub use error::{ErrorClass, SessionError};
pub use fleet::prepare_fleet_workspace;
pub use handle::RunHandle;
pub use mcp_config::McpServerEntry;
pub use options::SessionOptions;
pub use resume::SessionConversation;
pub use root::RunReport;
pub use session::Session;
pub use tools::sandbox_options;
pub use validate::Checked;
