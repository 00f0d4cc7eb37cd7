//! Workspace tools and the rules that bound them.
//!
//! A [`Tool`] has a name, a JSON schema, a [`Capability`] class and an async call that
//! takes JSON and returns text or a typed [`ToolError`]. A tool error goes back to
//! the model as the tool result; it never aborts the agent.
//!
//! [`Permissions`] say what a run may do; a [`Toolbox`] is built from them (tools
//! outside them are not offered) and checks them again on every call. Paths go
//! through the [`Workspace`] jail; every shell runs in the kernel sandbox
//! ([`sandbox`]), read-only or writer as [`ShellPolicy`] says, with network only
//! where [`Permissions::network`] and the user's `[sandbox] network` both allow it.
//! Tools of the user's MCP servers come from [`mcp`].

mod beneath;
pub mod builtin;
pub mod command_line;
pub mod edit;
mod error;
pub mod fs;
pub mod jail;
mod locks;
pub mod mcp;
pub mod memory;
mod protect;
pub mod rules;
pub mod sandbox;
mod schema;
pub mod search;
pub mod shell;
pub mod todo;
mod toolbox;
mod walk;

pub use builtin::{builtin_tools, BuiltinOptions};
pub use error::{clip, ToolError, ECHO_MAX_BYTES};
pub use jail::Workspace;
pub use memory::MemoryFiles;
pub use rules::{Rule, RuleError, RuleKind, RuleSet, SourcedRule, Verdict};
pub use sandbox::Sandbox;
pub use schema::{compact_schema, schema_of};
pub(crate) use toolbox::panic_message;
pub use toolbox::{CallGate, SpecCache, Toolbox};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The class of effect a tool has. Grants are expressed in these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Capability {
    /// Reads the workspace.
    Read,
    /// Changes files in the workspace.
    Write,
    /// Runs shell commands.
    Shell,
    /// Reads or appends the memory files.
    Memory,
    /// Opens, waits for or closes sub-agents.
    Delegate,
    /// Talks to the network.
    Network,
    /// Calls a tool of a user-configured MCP server (an outside process or endpoint).
    Mcp,
}

impl Capability {
    /// Every capability.
    pub const ALL: [Capability; 7] = [
        Capability::Read,
        Capability::Write,
        Capability::Shell,
        Capability::Memory,
        Capability::Delegate,
        Capability::Network,
        Capability::Mcp,
    ];
}

/// How a run may use the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellPolicy {
    /// No shell at all.
    None,
    /// Shell under a landlock ruleset: the filesystem is read-only except a private
    /// temp dir. Where landlock is unavailable the shell is refused, never unsandboxed.
    ReadOnly,
    /// A writer's shell: sandboxed too, but it may write the workspace (not its
    /// protected entries) and, where granted, reach the network.
    Full,
}

/// What a run may do with tools. Narrowed with [`Permissions::intersect`], never widened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permissions {
    /// Capability classes granted.
    pub capabilities: BTreeSet<Capability>,
    /// When set, only these tool names (on top of the capability check).
    pub allowed_tools: Option<BTreeSet<String>>,
    /// When set, writes are allowed only under these workspace-relative directories.
    pub write_scopes: Option<Vec<PathBuf>>,
    /// How the shell may be used.
    pub shell: ShellPolicy,
    /// Whether this run's shells may reach the network. Only a ceiling: shells get
    /// network only where the user's `[sandbox] network` also allows it, so `false`
    /// (a definition's `network: false`) takes it away and `true` never adds it.
    /// Older records without the field read as `true` (not narrowed).
    #[serde(default = "not_narrowed")]
    pub network: bool,
    /// Who holds these permissions (a role or definition name), for error messages.
    pub holder: String,
}

fn not_narrowed() -> bool {
    true
}

impl Permissions {
    /// Everything: all capabilities, any tool, full shell.
    pub fn full(holder: impl Into<String>) -> Self {
        Permissions {
            capabilities: Capability::ALL.into_iter().collect(),
            allowed_tools: None,
            write_scopes: None,
            shell: ShellPolicy::Full,
            network: true,
            holder: holder.into(),
        }
    }

    /// The narrower of `self` and `other`, held by `other.holder`.
    pub fn intersect(&self, other: &Permissions) -> Permissions {
        let allowed_tools = match (&self.allowed_tools, &other.allowed_tools) {
            (None, None) => None,
            (Some(a), None) | (None, Some(a)) => Some(a.clone()),
            (Some(a), Some(b)) => Some(a.intersection(b).cloned().collect()),
        };
        let write_scopes = match (&self.write_scopes, &other.write_scopes) {
            (None, None) => None,
            (Some(a), None) | (None, Some(a)) => Some(a.clone()),
            (Some(a), Some(b)) => Some(
                a.iter()
                    .flat_map(|x| {
                        b.iter().filter_map(move |y| {
                            if x.starts_with(y) {
                                Some(x.clone())
                            } else if y.starts_with(x) {
                                Some(y.clone())
                            } else {
                                None
                            }
                        })
                    })
                    .collect(),
            ),
        };
        Permissions {
            capabilities: self
                .capabilities
                .intersection(&other.capabilities)
                .copied()
                .collect(),
            allowed_tools,
            write_scopes,
            shell: self.shell.min(other.shell),
            network: self.network && other.network,
            holder: other.holder.clone(),
        }
    }

    /// Whether `tool` may be offered and called under these permissions.
    pub fn check_tool(&self, tool: &dyn Tool) -> Result<(), ToolError> {
        let name = tool.name();
        if let Some(allowed) = &self.allowed_tools {
            if !allowed.contains(name) {
                return Err(ToolError::NotGranted {
                    tool: name.to_string(),
                    holder: self.holder.clone(),
                    reason: "not in the allowed tool list".into(),
                });
            }
        }
        let cap = tool.capability();
        if !self.capabilities.contains(&cap) {
            return Err(ToolError::NotGranted {
                tool: name.to_string(),
                holder: self.holder.clone(),
                reason: format!("the {cap:?} capability is not granted"),
            });
        }
        if cap == Capability::Shell && self.shell == ShellPolicy::None {
            return Err(ToolError::NotGranted {
                tool: name.to_string(),
                holder: self.holder.clone(),
                reason: "no shell is granted".into(),
            });
        }
        Ok(())
    }
}

/// What a tool call gets besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The jail every path goes through.
    pub workspace: Arc<Workspace>,
    /// The caller's permissions, checked again inside tools that write or run shells.
    pub permissions: Arc<Permissions>,
    /// Cancelled when the calling turn is cancelled; long tools must stop on it.
    pub cancel: CancellationToken,
    /// The run making the call (for records and delegation).
    pub run_id: String,
}

/// A capability the agent can call. Add your own with
/// [`crate::SessionBuilder::tool`]; children get it by name.
///
/// ```
/// use brood::{Capability, Tool, ToolContext, ToolError};
/// use serde_json::{json, Value};
///
/// /// Tells the time of the run's clock.
/// struct Clock;
///
/// #[async_trait::async_trait]
/// impl Tool for Clock {
///     fn name(&self) -> &str {
///         "clock"
///     }
///     fn description(&self) -> &str {
///         "The current UTC time (RFC 3339). No arguments."
///     }
///     fn schema(&self) -> Value {
///         json!({"type": "object", "properties": {}})
///     }
///     fn capability(&self) -> Capability {
///         Capability::Read
///     }
///     async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
///         Ok(chrono::Utc::now().to_rfc3339())
///     }
/// }
/// ```
#[async_trait]
pub trait Tool: Send + Sync {
    /// Unique name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, written for a model.
    fn description(&self) -> &str;
    /// JSON schema of the arguments object.
    fn schema(&self) -> serde_json::Value;
    /// What class of effect it has (grants are checked against it).
    fn capability(&self) -> Capability;
    /// Which edition of its description and schema this is: a session caches a
    /// tool's spec by name and edition, so a tool whose spec can change within a
    /// session (an MCP server's, listed again after a restart) returns a new one
    /// with each change. Default 0: fixed.
    fn spec_edition(&self) -> u64 {
        0
    }
    /// Run it. Errors go back to the model as the tool result.
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError>;
}

/// Deserialize a tool's arguments, turning serde's message into a [`ToolError`].
pub(crate) fn parse_args<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: serde_json::Value,
) -> Result<T, ToolError> {
    // serde quotes an offending string value whole: clip it.
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
        tool: tool.to_string(),
        detail: clip(&e.to_string()),
    })
}

/// Run blocking work (file system, walks, process waits) off the async threads.
/// A panic inside `f` is resumed on the caller, so [`Toolbox::call`] reports it as
/// [`ToolError::Panicked`] like any other tool panic.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ToolError>
where
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(ToolError::Cancelled),
    }
}
