//! What a delegating run is told about the agent types it may ask for: the
//! built-in roles and the defined agents (name and a one-line description, sorted,
//! workspace before user), written into the `task` tool's description within a
//! byte budget whatever the number of definitions. Past the budget the list says
//! how many are left and the run gets `agent_types`, a read-only tool that returns
//! the rest, filterable by a word.

use super::catalog::AgentCatalog;
use super::definition::AgentDefinition;
use super::role::Role;
use crate::tool::{parse_args, schema_of, Capability, Tool, ToolContext, ToolError};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// The most bytes the defined agents may take in the `task` description (the
/// `agent_types` tool offered past it stays within the 2 KB per request).
pub const LIST_BUDGET_BYTES: usize = 1400;
/// The most characters of a definition's description shown (its first line).
pub const DESCRIPTION_CHARS: usize = 90;
/// The most entries one `agent_types` call returns.
pub const MAX_RESULTS: usize = 60;

/// The agent types as a delegating run sees them, made once per session.
#[derive(Debug, Clone, Default)]
pub struct Directory {
    /// The `task` tool's description: what it does, then the agent types.
    pub task_description: String,
    /// Definitions in display order, and how many of them `text` names.
    entries: Vec<Entry>,
    listed: usize,
}

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    description: String,
    role: Role,
    source: &'static str,
}

/// What `task` does; the agent types follow it in its description.
const TASK_DESCRIPTION: &str = "Run sub-agents in parallel; await their reports \
(in order; failures spare the rest): `prompts` (one self-contained task \
each) or one `description`.";

impl Directory {
    /// Build the directory of `catalog`.
    pub fn new(catalog: &AgentCatalog) -> Directory {
        let mut defs: Vec<&Arc<AgentDefinition>> = catalog.definitions().iter().collect();
        defs.sort_by_key(|d| (d.source, d.name.to_ascii_lowercase()));
        let entries: Vec<Entry> = defs
            .iter()
            .map(|d| Entry {
                name: d.name.clone(),
                description: one_line(&d.description),
                role: d.role,
                source: match d.source {
                    super::definition::DefinitionSource::Workspace => "workspace",
                    super::definition::DefinitionSource::Claude => "claude",
                    super::definition::DefinitionSource::User => "user",
                    super::definition::DefinitionSource::UserClaude => "user-claude",
                },
            })
            .collect();
        let mut text = format!("{TASK_DESCRIPTION} agent_type: ");
        let roles: Vec<String> = Role::ALL
            .iter()
            .filter(|r| **r != Role::Custom)
            .map(|r| format!("{r} ({})", short_summary(*r)))
            .collect();
        text.push_str(&roles.join("; "));
        text.push('.');
        let mut listed = 0;
        if !entries.is_empty() {
            text.push_str(" Defined:");
            let mut used = 0;
            for e in &entries {
                let item = if e.description.is_empty() {
                    format!(" {};", e.name)
                } else {
                    format!(" {} ({});", e.name, e.description)
                };
                if used + item.len() > LIST_BUDGET_BYTES {
                    break;
                }
                used += item.len();
                text.push_str(&item);
                listed += 1;
            }
            if listed < entries.len() {
                text.push_str(&format!(
                    " and {} more: agent_types lists them.",
                    entries.len() - listed
                ));
            } else {
                text.pop();
                text.push('.');
            }
        }
        Directory {
            task_description: text,
            entries,
            listed,
        }
    }

    /// Whether some definitions did not fit (the run then gets `agent_types`).
    pub fn overflows(&self) -> bool {
        self.listed < self.entries.len()
    }
}

/// A role in a few words (the `task` description carries these on every request).
fn short_summary(role: Role) -> &'static str {
    match role {
        Role::General => "default: the whole task, your tools",
        Role::Explore => "read-only search, cites path:line",
        Role::Plan => "checked steps; writes only .brood/plans/",
        Role::Review => "grades a change, never edits",
        Role::Implementer => "smallest edit, then a check",
        Role::Verifier => "runs checks: pass/fail",
        Role::Custom => "exactly allowed_tools",
    }
}

/// The first line of `s`, control characters dropped, cut to
/// [`DESCRIPTION_CHARS`] characters.
fn one_line(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    let mut out: String = line
        .chars()
        .filter(|c| !c.is_control())
        .take(DESCRIPTION_CHARS + 1)
        .collect();
    if out.chars().count() > DESCRIPTION_CHARS {
        out = out.chars().take(DESCRIPTION_CHARS - 1).collect();
        out.push('…');
    }
    out.trim().to_string()
}

/// Arguments of `agent_types`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AgentTypesArgs {
    /// A word to look for in names and descriptions (case-insensitive). Omit it
    /// for those the task description does not list.
    #[serde(alias = "query", alias = "filter")]
    r#match: Option<String>,
}

/// `agent_types`: the defined agents the `task` description had no room for.
pub struct AgentTypesTool(pub Arc<Directory>);

#[async_trait]
impl Tool for AgentTypesTool {
    fn name(&self) -> &str {
        "agent_types"
    }
    fn description(&self) -> &str {
        "List defined agent types for agent_type, as `name [role, source]: description`."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<AgentTypesArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Delegate
    }
    async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let a: AgentTypesArgs = parse_args("agent_types", args)?;
        let dir = &self.0;
        let word = a
            .r#match
            .map(|w| w.trim().to_lowercase())
            .filter(|w| !w.is_empty());
        let matching: Vec<&Entry> = match &word {
            Some(w) => dir
                .entries
                .iter()
                .filter(|e| {
                    e.name.to_lowercase().contains(w) || e.description.to_lowercase().contains(w)
                })
                .collect(),
            None => dir.entries.iter().skip(dir.listed).collect(),
        };
        let shown: Vec<serde_json::Value> = matching
            .iter()
            .take(MAX_RESULTS)
            .map(|e| {
                json!(format!(
                    "{} [{}, {}]: {}",
                    e.name, e.role, e.source, e.description
                ))
            })
            .collect();
        let mut out = json!({ "agent_types": shown });
        if let Some(map) = out.as_object_mut().filter(|_| matching.len() > MAX_RESULTS) {
            map.insert(
                "more".into(),
                json!(format!(
                    "{} more; narrow with `match`",
                    matching.len() - MAX_RESULTS
                )),
            );
        }
        Ok(out.to_string())
    }
}
