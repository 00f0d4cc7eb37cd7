//! Sub-agents: roles, definitions, grants, the supervisor, model-facing tools, fork, output contract.
//!
//! The pure logic lives here:
//! - [`role`]: the built-in roles, their aliases, postures and stance prompts;
//! - [`definition`]: user agent definition files (brood's and Claude Code's format);
//! - [`catalog`]: where definitions are found (`.brood/agents`, `.claude/agents`, the
//!   user directory) and the [`AgentCatalog`] that resolves an `agent_type`;
//! - [`grant`]: a child's permissions and limits, only ever narrower than the parent's;
//! - [`contract`] and [`evidence`]: the SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS report,
//!   its parser, repair prompt, citation check and capped rendering;
//! - [`config`] and [`routing`]: the `[subagents]`, `[memory]` and `[models.*]`
//!   configuration and which provider/model a child runs on.

pub mod catalog;
pub mod config;
pub mod contract;
pub mod definition;
pub mod evidence;
pub mod grant;
pub mod role;
pub mod routing;

pub use catalog::{AgentCatalog, AgentKind, CatalogError, Shadowed, UnknownAgentType};
pub use config::{
    memory_enabled, ConfigError, MemoryConfig, ModelOverrides, QuickModelConfig, QuickModels,
    SubagentSettings, SubagentsConfig,
};
pub use contract::{ParsedResult, Section};
pub use definition::{AgentDefinition, DefinitionError, DefinitionSource};
pub use evidence::{Evidence, EvidenceCheck};
pub use grant::{child_permissions, grant_for, Grant, GrantError, GrantRequest, SpawnSpec};
pub use role::{Role, UnknownRole};
pub use routing::{resolve_route, Route};
