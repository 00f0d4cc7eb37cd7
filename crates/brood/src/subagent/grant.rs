//! Grants: what one child may do and how long it may run, computed at spawn.
//!
//! A child's permissions are `parent ∩ role posture ∩ definition's tools ∩ the call's
//! allowed_tools`, minus the definition's `disallowedTools` (and minus network where
//! the definition says `network: false`). Every step is a
//! [`Permissions::intersect`] or a removal, so the result can only be narrower than
//! the parent's. Tool lists are checked against the tools the parent actually has:
//! naming a tool the parent lacks is a [`GrantError`] at spawn, never a silently
//! smaller grant.
//!
//! A read-only shell needs the sandbox; when the caller says it is unavailable, a
//! grant that would get [`ShellPolicy::ReadOnly`] gets [`ShellPolicy::None`] instead
//! (and loses the Shell capability), whatever the parent had.
//!
//! MCP tools (`mcp__<server>__<tool>`, see [`crate::tool::mcp`]): general gets
//! the parent's, implementer too; the read-only roles (explore, plan, review) and
//! verifier get only those in [`GrantRequest::mcp_read_only`] (the server's
//! `readOnlyHint`, or the user's `read_only_tools`); custom gets what it lists. A
//! list may name all of a server's tools as `mcp__<server>__*` (or `mcp__<server>`):
//! the pattern stands for the parent's tools of that server, so it narrows too.
//!
//! Turn limit: `[subagents] max_turns`, else the role default (20 read-only, 50
//! otherwise); a definition's `max_turns` may lower it, never raise it. `fork_context`: the call's, else the
//! definition's, else false.

use super::catalog::AgentKind;
use super::config::{QuickModels, SubagentSettings};
use super::role::{custom_posture, Role, SHELL_TOOL};
use super::routing::{resolve_route, Route};
use crate::tool::mcp::{is_mcp_tool, MCP_PREFIX};
use crate::tool::{Capability, Permissions, ShellPolicy};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Duration;
use thiserror::Error;

/// A spawn whose tool grant cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GrantError {
    /// `custom` was asked for without `allowed_tools`.
    #[error("agent_type custom needs a non-empty allowed_tools list naming the tools the child may use; available: {}", available.join(", "))]
    CustomNeedsTools {
        /// The tools the parent could pass on.
        available: Vec<String>,
    },
    /// `allowed_tools` is an empty list.
    #[error("allowed_tools is empty; leave it out, or list the tools the child may use; available: {}", available.join(", "))]
    EmptyAllowedTools {
        /// The tools the parent could pass on.
        available: Vec<String>,
    },
    /// A tool was asked for that the parent does not have.
    #[error("{origin} names tool '{tool}', which the parent does not have, so {agent} cannot get it; available: {}", available.join(", "))]
    ToolNotAvailable {
        /// The tool asked for.
        tool: String,
        /// `allowed_tools` or `the definition of <name>`.
        origin: String,
        /// The child (definition or role name).
        agent: String,
        /// The tools the parent could pass on.
        available: Vec<String>,
    },
}

/// The inputs of [`child_permissions`].
#[derive(Debug, Clone, Copy)]
pub struct GrantRequest<'a> {
    /// The parent's permissions; the child's are never wider.
    pub parent: &'a Permissions,
    /// Names of the tools the parent's toolbox holds.
    pub parent_tools: &'a [String],
    /// The child's role (its posture).
    pub role: Role,
    /// Who the child is (definition or role name), for messages and `holder`.
    pub agent: &'a str,
    /// The definition's `tools`, if it has a list.
    pub definition_tools: Option<&'a [String]>,
    /// The definition's `disallowedTools`.
    pub disallowed_tools: &'a [String],
    /// The definition's `network`: `Some(false)` takes the network from the child's
    /// shells; `Some(true)` and `None` leave the parent's (it never adds any).
    pub definition_network: Option<bool>,
    /// The call's `allowed_tools` (required for custom; narrows any other role).
    pub allowed_tools: Option<&'a [String]>,
    /// Whether a sandboxed read-only shell can be provided.
    pub read_only_shell_available: bool,
    /// MCP tools the read-only roles may get.
    pub mcp_read_only: &'a BTreeSet<String>,
}

/// The roles that get only read-only MCP tools.
fn mcp_read_only_role(role: Role) -> bool {
    role.is_read_only() || role == Role::Verifier
}

/// `list` with each `mcp__<server>__*` (or `mcp__<server>`) replaced by the
/// parent's tools of that server.
fn expand_mcp(list: &[String], parent_tools: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in list {
        match mcp_server_pattern(item) {
            Some(server) => {
                let prefix = format!("{MCP_PREFIX}{server}__");
                for t in parent_tools.iter().filter(|t| t.starts_with(&prefix)) {
                    if !out.contains(t) {
                        out.push(t.clone());
                    }
                }
            }
            None => {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
        }
    }
    out
}

/// The server `item` names all tools of (`mcp__<server>__*` or `mcp__<server>`).
fn mcp_server_pattern(item: &str) -> Option<&str> {
    let rest = item.strip_prefix(MCP_PREFIX)?;
    let server = rest.strip_suffix("__*").unwrap_or(rest);
    (!server.is_empty() && !server.contains("__") && !server.contains('*')).then_some(server)
}

/// The posture of a non-custom role with the parent's MCP tools it may have.
fn with_mcp(mut posture: Permissions, req: &GrantRequest<'_>) -> Permissions {
    let Some(list) = posture.allowed_tools.as_mut() else {
        return posture; // general: whatever the parent has
    };
    let mut any = false;
    for t in req.parent_tools.iter().filter(|t| is_mcp_tool(t)) {
        if !mcp_read_only_role(req.role) || req.mcp_read_only.contains(t) {
            list.insert(t.clone());
            any = true;
        }
    }
    if any {
        posture.capabilities.insert(Capability::Mcp);
    }
    posture
}

/// The child's permissions: the parent's, narrowed by posture and lists.
pub fn child_permissions(req: &GrantRequest<'_>) -> Result<Permissions, GrantError> {
    let expanded_allowed = req.allowed_tools.map(|l| expand_mcp(l, req.parent_tools));
    let expanded_definition = req
        .definition_tools
        .map(|l| expand_mcp(l, req.parent_tools));
    let expanded_disallowed = expand_mcp(req.disallowed_tools, req.parent_tools);
    let req = &GrantRequest {
        allowed_tools: expanded_allowed.as_deref(),
        definition_tools: expanded_definition.as_deref(),
        disallowed_tools: &expanded_disallowed,
        ..*req
    };
    let available = || req.parent_tools.to_vec();
    let check_listed = |list: &[String], origin: &str| -> Result<(), GrantError> {
        match list.iter().find(|t| !req.parent_tools.contains(t)) {
            Some(t) => Err(GrantError::ToolNotAvailable {
                tool: t.clone(),
                origin: origin.to_string(),
                agent: req.agent.to_string(),
                available: available(),
            }),
            None => Ok(()),
        }
    };
    if let Some(list) = req.allowed_tools {
        if list.is_empty() {
            return Err(if req.role == Role::Custom {
                GrantError::CustomNeedsTools {
                    available: available(),
                }
            } else {
                GrantError::EmptyAllowedTools {
                    available: available(),
                }
            });
        }
        check_listed(list, "allowed_tools")?;
    }
    if let Some(list) = req.definition_tools {
        check_listed(list, &format!("the definition of {}", req.agent))?;
    }

    let posture = if req.role == Role::Custom {
        let list = req
            .allowed_tools
            .or(req.definition_tools)
            .filter(|l| !l.is_empty())
            .ok_or_else(|| GrantError::CustomNeedsTools {
                available: available(),
            })?;
        custom_posture(list)
    } else {
        with_mcp(req.role.posture(req.read_only_shell_available), req)
    };

    let mut p = req.parent.intersect(&posture);
    for list in [req.definition_tools, req.allowed_tools]
        .into_iter()
        .flatten()
    {
        p = p.intersect(&only_tools(list));
    }
    if !req.disallowed_tools.is_empty() {
        let base: BTreeSet<String> = p
            .allowed_tools
            .take()
            .unwrap_or_else(|| req.parent_tools.iter().cloned().collect());
        p.allowed_tools = Some(
            base.into_iter()
                .filter(|t| !req.disallowed_tools.contains(t))
                .collect(),
        );
    }
    if req.disallowed_tools.iter().any(|t| t == SHELL_TOOL) {
        p.shell = ShellPolicy::None;
    }
    if p.shell == ShellPolicy::ReadOnly && !req.read_only_shell_available {
        p.shell = ShellPolicy::None;
    }
    if p.shell == ShellPolicy::None {
        p.capabilities.remove(&Capability::Shell);
    }
    if req.definition_network == Some(false) {
        p.network = false;
    }
    p.holder = req.agent.to_string();
    Ok(p)
}

fn only_tools(list: &[String]) -> Permissions {
    Permissions {
        allowed_tools: Some(list.iter().cloned().collect()),
        ..Permissions::full("")
    }
}

/// Everything a child is allowed: its permissions, limits and route.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Grant {
    /// Definition or role name.
    pub agent: String,
    /// The child's role (its posture).
    pub role: Role,
    /// What the child may do: capabilities, tools, paths, shell policy.
    pub permissions: Permissions,
    /// Turns it may take.
    pub max_turns: u32,
    /// How long it may run.
    pub wall_time: Duration,
    /// Tokens this child may use (input + output), if bounded.
    pub token_budget: Option<u64>,
    /// USD this child may spend, if bounded.
    pub cost_budget_usd: Option<f64>,
    /// Where its model calls go.
    pub route: Route,
    /// Whether it starts from the parent's context.
    pub fork_context: bool,
    /// The role's stance (or the definition's body) followed by the output contract.
    pub system_prompt: String,
    /// What the definition asked beyond the user's limits and was lowered, one line
    /// each (the child's run records them as a `warning` event).
    pub adjustments: Vec<String>,
}

/// What the spawn call and its parent bring to [`grant_for`].
#[derive(Debug, Clone, Copy)]
pub struct SpawnSpec<'a> {
    /// The resolved agent type.
    pub kind: &'a AgentKind,
    /// The parent's permissions.
    pub parent: &'a Permissions,
    /// Names of the tools the parent's toolbox holds.
    pub parent_tools: &'a [String],
    /// `allowed_tools` from the call, if given.
    pub allowed_tools: Option<&'a [String]>,
    /// `model` from the call.
    pub model: Option<&'a str>,
    /// `fork_context` from the call.
    pub fork_context: Option<bool>,
    /// Whether read-only shells can be sandboxed here (landlock); without it read-only roles get no shell.
    pub read_only_shell_available: bool,
    /// MCP tools the read-only roles may get.
    pub mcp_read_only: &'a BTreeSet<String>,
}

/// Build the whole grant of a child. `main` is the session's `(provider, model)`.
pub fn grant_for(
    spec: &SpawnSpec<'_>,
    settings: &SubagentSettings,
    quick: &QuickModels,
    main: (&str, &str),
) -> Result<Grant, GrantError> {
    let def = spec.kind.definition();
    let role = spec.kind.role();
    let permissions = child_permissions(&GrantRequest {
        parent: spec.parent,
        parent_tools: spec.parent_tools,
        role,
        agent: spec.kind.name(),
        definition_tools: def.and_then(|d| d.tools.as_deref()),
        disallowed_tools: def.map(|d| d.disallowed_tools.as_slice()).unwrap_or(&[]),
        definition_network: def.and_then(|d| d.network),
        allowed_tools: spec.allowed_tools,
        read_only_shell_available: spec.read_only_shell_available,
        mcp_read_only: spec.mcp_read_only,
    })?;
    // A definition (a workspace file, attacker input) may lower the user's limit,
    // never raise it.
    let limit = settings
        .max_turns
        .unwrap_or_else(|| role.default_max_turns());
    let max_turns = def
        .and_then(|d| d.max_turns)
        .map_or(limit, |d| d.min(limit));
    let mut adjustments = Vec::new();
    if let Some(d) = def {
        let mut lowered = |key: &str, asked: String, got: String, limit_key: &str| {
            adjustments.push(format!(
                "{key} = {asked} in {} lowered to {got} ({limit_key}): a definition may \
                 lower the user's limits, never raise them",
                d.path.display()
            ));
        };
        if let Some(asked) = d.max_turns.filter(|t| *t > limit) {
            let key = if settings.max_turns.is_some() {
                "[subagents] max_turns"
            } else {
                "the role's default"
            };
            lowered("max_turns", asked.to_string(), limit.to_string(), key);
        }
        if let (Some(asked), Some(user)) = (d.token_budget, settings.token_budget) {
            if asked > user {
                let (a, u) = (asked.to_string(), user.to_string());
                lowered("token_budget", a, u, "[subagents] token_budget");
            }
        }
        if let (Some(asked), Some(user)) = (d.cost_budget_usd, settings.cost_budget_usd) {
            if asked > user {
                let (a, u) = (asked.to_string(), user.to_string());
                lowered("cost_budget_usd", a, u, "[subagents] cost_budget_usd");
            }
        }
    }
    Ok(Grant {
        agent: spec.kind.name().to_string(),
        role,
        permissions,
        max_turns,
        wall_time: settings.wall_time,
        // A definition's budgets only narrow the user's.
        token_budget: narrower(settings.token_budget, def.and_then(|d| d.token_budget)),
        cost_budget_usd: narrower(
            settings.cost_budget_usd,
            def.and_then(|d| d.cost_budget_usd),
        ),
        route: resolve_route(&settings.models, quick, spec.kind, spec.model, main),
        fork_context: spec
            .fork_context
            .or(def.and_then(|d| d.fork_context))
            .unwrap_or(false),
        system_prompt: spec.kind.system_prompt(),
        adjustments,
    })
}

/// The tighter of two optional limits (`None` is no limit).
fn narrower<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}
