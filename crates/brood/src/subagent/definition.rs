//! Agent definitions: named agent types written by users as Markdown files with YAML
//! front matter — the file format, how Claude Code agent files are read, and the
//! typed errors for bad files.
//!
//! Where the files live and which one wins when names collide: see
//! [`super::catalog`].
//!
//! # The file format
//!
//! ```text
//! ---
//! name: api-mapper            # optional; defaults to the file stem
//! description: Maps the HTTP routes of a service.   # required
//! tools: read_file, grep      # or a YAML list; omitted = everything the posture allows
//! model: deepseek-chat        # optional route preference (see routing)
//! role: explore               # brood: the posture (default general)
//! max_turns: 15               # brood (Claude Code's `maxTurns` is accepted too)
//! fork_context: false         # brood
//! network: false              # brood: no network for this agent's shells (it can
//!                             # only take away what `[sandbox] network` allows)
//! ---
//! You map routes. ...         # the body is the system prompt
//! ```
//!
//! Claude Code keys are accepted so existing agents work unchanged:
//! - `color` is kept as a display hint; `maxTurns` is `max_turns`;
//! - `disallowedTools` is honoured (removed from the grant); a denied entry with a
//!   specifier (`Bash(rm:*)`) denies the whole tool, since brood cannot deny part of one;
//! - `permissionMode: plan` makes a definition without `role` take the `plan`
//!   posture (with an explicit `role`, that role must be read-only); the other modes
//!   concern Claude Code's approval modes, which brood expresses as permission
//!   rules instead (the `permissions:` key below), so they only add a warning;
//! - `permissions: {ask: [...], deny: [...]}` (brood) adds permission rules
//!   ([`crate::tool::rules`]) to this agent's runs and their children; `allow` is
//!   ignored with a warning (a file only narrows);
//! - `isolation: worktree` (Claude Code's key and value) runs the agent, when it
//!   writes, in its own git worktree (see [`super::worktree`]); `none` cannot turn
//!   off the user's `[subagents] isolation = "worktree"`; `worktree_base: REF`
//!   (brood) branches those worktrees from REF, over `[subagents] worktree_base`;
//! - `skills`, `hooks`, `mcpServers`, `memory`, `background` have no brood
//!   equivalent: accepted, with a warning in [`AgentDefinition::warnings`];
//! - Claude Code tool names are mapped (`Read`→`read_file`, `Write`→`write_file`,
//!   `Edit`/`MultiEdit`→`edit_file`, `Glob`→`find_files`, `Grep`→`grep`, `LS`→`list_dir`,
//!   `Bash`→`bash`, `TodoWrite`→`todo_write`+`todo_read`, `Task`/`Agent`→ the delegation
//!   tools); MCP tools keep their names (`mcp__github__get_issue`, `mcp__github__*`:
//!   see [`super::grant`]). Tools brood lacks (`WebFetch`, …) and tools with a specifier
//!   brood cannot enforce (`Bash(git:*)`) are dropped with a warning: dropping only
//!   narrows the grant;
//! - `model: inherit` is the parent's model; other tools' names (`sonnet`, `opus`,
//!   `haiku`, `claude-…`) go through `[subagents.model_aliases]` and, unmapped, fall
//!   back to the parent's model (see [`AgentDefinition::route_model`]).
//!
//! The front matter is strict YAML when it is, else read line by line as Claude Code
//! does (see [`super::front_matter`]). Keys brood does not know are ignored with a
//! warning (collections add their own); a value of the wrong type is a
//! [`DefinitionError`] naming the file and the key, and so are tools the role's
//! posture never grants.

use super::config::QuickModels;
use super::front_matter;
use super::role::Role;
pub use super::tool_list::DELEGATION_TOOLS;
use super::tool_list::{kind_of, map_tools, tool_list, ListKind};
use super::worktree::{check_base, Isolation};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Keys brood understands itself.
const BROOD_KEYS: [&str; 13] = [
    "name",
    "description",
    "tools",
    "model",
    "role",
    "max_turns",
    "fork_context",
    "token_budget",
    "cost_budget_usd",
    "network",
    "permissions",
    "isolation",
    "worktree_base",
];
/// Claude Code keys brood accepts.
const CLAUDE_KEYS: [&str; 9] = [
    "color",
    "maxTurns",
    "disallowedTools",
    "permissionMode",
    "skills",
    "hooks",
    "mcpServers",
    "memory",
    "background",
];
const CLAUDE_PERMISSION_MODES: [&str; 6] = [
    "default",
    "acceptEdits",
    "plan",
    "bypassPermissions",
    "dontAsk",
    "auto",
];
const CLAUDE_MODEL_ALIASES: [&str; 3] = ["sonnet", "opus", "haiku"];
const MAX_NAME_LEN: usize = 64;

/// Which directory a definition came from (in precedence order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DefinitionSource {
    /// `<workspace>/.brood/agents/`
    Workspace,
    /// `<workspace>/.claude/agents/`
    Claude,
    /// The user directory (`~/.config/brood/agents/`).
    User,
    /// The user's Claude Code agents (`~/.claude/agents/`).
    UserClaude,
}

impl DefinitionSource {
    /// Where the source's files live, in words.
    pub fn describe(self) -> &'static str {
        match self {
            DefinitionSource::Workspace => ".brood/agents (workspace)",
            DefinitionSource::Claude => ".claude/agents (workspace)",
            DefinitionSource::User => "~/.config/brood/agents (user)",
            DefinitionSource::UserClaude => "~/.claude/agents (user)",
        }
    }
}

/// What a definition's `model` asks of routing (see [`AgentDefinition::route_model`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice<'a> {
    /// No `model` key: no preference.
    Unset,
    /// `inherit`: the parent's (the session's main) model.
    Inherit,
    /// A model name (after `[subagents.model_aliases]`), placed like any other.
    Named(&'a str),
    /// Another tool's model name (`sonnet`, `claude-…`) with no mapping: the
    /// parent's model, with a note in `brood agents check`.
    Unmapped(&'a str),
}

/// A named agent type from a definition file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentDefinition {
    /// The agent type's name (lowercase).
    pub name: String,
    /// When to use it; shown to the parent model.
    pub description: String,
    /// Allowed brood tool names (after mapping); `None` = whatever the posture allows.
    pub tools: Option<Vec<String>>,
    /// Tools removed from the grant (`disallowedTools`).
    pub disallowed_tools: Vec<String>,
    /// The model the file asks for, as written.
    pub model: Option<String>,
    /// The posture.
    pub role: Role,
    /// Turns one child of this type may take; only lowers `[subagents] max_turns`.
    pub max_turns: Option<u32>,
    /// Tokens / USD one child of this type may use; they only lower the user's
    /// `[subagents]` budgets, never raise them.
    pub token_budget: Option<u64>,
    pub(crate) cost_budget_usd: Option<f64>,
    /// Whether children of this type start from the parent's context by default.
    pub fork_context: Option<bool>,
    /// `network: false` keeps this agent's shells off the network even where the
    /// user's `[sandbox] network` allows it; `true` cannot turn it on (narrowing only).
    pub network: Option<bool>,
    /// `isolation: worktree`: a writer of this type runs in its own git worktree.
    /// Only tightens (`none` does not undo the user's config).
    pub isolation: Option<Isolation>,
    /// `worktree_base: REF`: what this type's worktrees branch from.
    pub worktree_base: Option<String>,
    /// Display hint from Claude Code files.
    pub color: Option<String>,
    /// The body: the child's system prompt.
    pub prompt: String,
    /// The file it was read from.
    pub path: PathBuf,
    /// Which directory it came from (decides precedence).
    pub source: DefinitionSource,
    /// Things accepted but changed or not applied, in words.
    pub warnings: Vec<String>,
    /// `permissions: {ask: [...], deny: [...]}`: rules for runs of this agent and
    /// their children, on top of the session's (checked when read; `allow` entries
    /// are ignored with a warning — a file only narrows).
    pub permission_rules: Vec<(crate::tool::RuleKind, String)>,
}

impl AgentDefinition {
    /// Its permission rules, sourced to its file.
    pub fn rule_set(&self) -> crate::tool::RuleSet {
        let mut set = crate::tool::RuleSet::new();
        let source = format!("agent file {}", self.path.display());
        for (kind, text) in &self.permission_rules {
            // Checked when the file was read.
            let _ = set.add(*kind, text, &source);
        }
        set
    }

    /// What this definition's `model` means for routing: `inherit` is the parent's
    /// model; a name in `aliases` (`[subagents.model_aliases]`, lowercase keys) is
    /// its mapping; a quick model's name is that quick model; Claude Code's own names
    /// (`sonnet`, `opus`, `haiku`, `claude-…`) with no mapping fall back to the
    /// parent's model; any other name is a model id.
    pub fn route_model<'a>(
        &'a self,
        quick: &QuickModels,
        aliases: &'a BTreeMap<String, String>,
    ) -> ModelChoice<'a> {
        let Some(m) = self.model.as_deref() else {
            return ModelChoice::Unset;
        };
        if m.eq_ignore_ascii_case("inherit") {
            return ModelChoice::Inherit;
        }
        if let Some(mapped) = aliases.get(&m.to_ascii_lowercase()) {
            return ModelChoice::Named(mapped);
        }
        if quick.get(m).is_none() && is_foreign_model(m) {
            return ModelChoice::Unmapped(m);
        }
        ModelChoice::Named(m)
    }
}

/// Claude Code's model names, which no OpenAI-compatible endpoint serves.
pub fn is_foreign_model(m: &str) -> bool {
    let m = m.to_ascii_lowercase();
    CLAUDE_MODEL_ALIASES.contains(&m.as_str()) || m.starts_with("claude-")
}

/// A definition file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DefinitionError {
    /// The file could not be read.
    #[error("{path}: cannot read: {detail}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        detail: String,
    },
    /// The file does not start with a `---` line.
    #[error("{path}: no YAML front matter; start the file with a `---` line, then the keys, then another `---` line")]
    NoFrontMatter {
        /// The file.
        path: PathBuf,
    },
    /// No `---` line closes the front matter.
    #[error("{path}: the front matter is not closed; add a `---` line after the keys")]
    UnclosedFrontMatter {
        /// The file.
        path: PathBuf,
    },
    /// The front matter is neither YAML nor readable line by line.
    #[error("{path}: the front matter is not valid YAML: {detail}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        detail: String,
    },
    /// The front matter is not a mapping of keys to values.
    #[error("{path}: the front matter must be a mapping of keys to values")]
    NotAMapping {
        /// The file.
        path: PathBuf,
    },
    /// A key has a value brood cannot use.
    #[error("{path}: bad value for `{key}`: {problem}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong with its value and what is accepted.
        problem: String,
    },
    /// A required key is absent.
    #[error("{path}: missing required key `{key}`")]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// Two files in one directory define the same name.
    #[error(
        "agent name '{name}' is defined twice in one directory: {first} and {second}; rename one"
    )]
    DuplicateName {
        /// The name.
        name: String,
        /// The first file.
        first: PathBuf,
        /// The second file.
        second: PathBuf,
    },
    /// `tools` lists a tool the definition's role never grants.
    #[error("{path}: `tools` lists '{tool}', which the {role} role never grants; remove it or change `role`")]
    ToolOutsideRole {
        /// The file.
        path: PathBuf,
        /// The tool listed.
        tool: String,
        /// The role that never grants it.
        role: Role,
    },
}

/// Parse one definition file's text. `path` names it in errors (and its stem is the
/// default name); `source` decides how Claude-only model names are read.
pub fn parse_definition(
    text: &str,
    path: &Path,
    source: DefinitionSource,
) -> Result<AgentDefinition, DefinitionError> {
    let (front, body) = split_front_matter(text, path)?;
    let mut warnings = Vec::new();
    let map = match front_matter::parse(front) {
        Ok(front_matter::Parsed::Yaml(m)) => m,
        Ok(front_matter::Parsed::Lines { map, .. }) => {
            warnings.push(
                "the front matter is not strict YAML (e.g. an unquoted `:` or a leading `**` in a value); \
                 it was read line by line as Claude Code reads it — quote such values to silence this"
                    .to_string(),
            );
            map
        }
        Err(e) if e.not_a_mapping => {
            return Err(DefinitionError::NotAMapping {
                path: path.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(DefinitionError::Yaml {
                path: path.to_path_buf(),
                detail: format!("line {}: {}", e.line, e.problem),
            })
        }
    };
    let bad = |key: &str, problem: String| DefinitionError::BadValue {
        path: path.to_path_buf(),
        key: key.to_string(),
        problem,
    };

    let mut fields: BTreeMap<String, serde_yaml::Value> = BTreeMap::new();
    for (k, v) in map {
        let serde_yaml::Value::String(key) = k else {
            return Err(bad(&format!("{k:?}"), "keys must be strings".into()));
        };
        if !BROOD_KEYS.contains(&key.as_str()) && !CLAUDE_KEYS.contains(&key.as_str()) {
            // Collections add their own keys (`tags`, `category`, `version`…);
            // Claude Code ignores them, and so does brood — said once.
            warnings.push(format!(
                "key `{key}` is not used by brood and is ignored (brood reads: {})",
                BROOD_KEYS
                    .iter()
                    .chain(CLAUDE_KEYS.iter())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        }
        fields.insert(key, v);
    }

    let string = |key: &str| -> Result<Option<String>, DefinitionError> {
        match fields.get(key) {
            None | Some(serde_yaml::Value::Null) => Ok(None),
            Some(serde_yaml::Value::String(s)) if !s.trim().is_empty() => {
                Ok(Some(s.trim().to_string()))
            }
            Some(serde_yaml::Value::String(_)) => Err(bad(key, "must not be empty".into())),
            Some(other) => Err(bad(key, format!("expected text, found {}", kind_of(other)))),
        }
    };

    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let name = string("name")?.unwrap_or(stem);
    validate_name(&name).map_err(|p| bad("name", p))?;
    let description = string("description")?.ok_or_else(|| DefinitionError::MissingKey {
        path: path.to_path_buf(),
        key: "description".into(),
    })?;
    let model = string("model")?;
    let color = string("color")?;

    let permission_mode = string("permissionMode")?;
    if let Some(mode) = &permission_mode {
        if !CLAUDE_PERMISSION_MODES.contains(&mode.as_str()) {
            return Err(bad(
                "permissionMode",
                format!(
                    "'{mode}' is not one of {}",
                    CLAUDE_PERMISSION_MODES.join(", ")
                ),
            ));
        }
    }
    let plan_mode = permission_mode.as_deref() == Some("plan");
    let permission_rules = match fields.get("permissions") {
        None | Some(serde_yaml::Value::Null) => Vec::new(),
        Some(v) => permission_rules(v, &mut warnings).map_err(|p| bad("permissions", p))?,
    };
    let role = match string("role")? {
        Some(r) => {
            let role = Role::parse(&r).map_err(|e| bad("role", e.to_string()))?;
            if plan_mode && !role.is_read_only() {
                return Err(bad(
                    "permissionMode",
                    format!("`plan` means read-only, but role '{role}' may change files; use explore, plan or review"),
                ));
            }
            role
        }
        None if plan_mode => Role::Plan,
        None => Role::General,
    };
    if let Some(mode) = permission_mode.filter(|m| m != "plan") {
        warnings.push(format!(
            "permissionMode '{mode}' has no effect: brood has no approval modes; the role, the tools and permission rules (`permissions:` with ask/deny lists) are enforced instead"
        ));
    }

    let turns = |key: &str| -> Result<Option<u32>, DefinitionError> {
        match fields.get(key) {
            None | Some(serde_yaml::Value::Null) => Ok(None),
            Some(serde_yaml::Value::Number(n)) => match n.as_u64() {
                Some(v @ 1..=1000) => Ok(Some(v as u32)),
                _ => Err(bad(
                    key,
                    format!("{n} is out of range; use a whole number from 1 to 1000"),
                )),
            },
            Some(other) => Err(bad(
                key,
                format!("expected a whole number, found {}", kind_of(other)),
            )),
        }
    };
    let max_turns = match (turns("max_turns")?, turns("maxTurns")?) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "maxTurns",
                "both `max_turns` and `maxTurns` are set; keep one".into(),
            ))
        }
        (a, b) => a.or(b),
    };
    let token_budget = match fields.get("token_budget") {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::Number(n)) => match n.as_u64() {
            Some(v @ 1..) => Some(v),
            _ => {
                return Err(bad(
                    "token_budget",
                    format!("{n} is not a budget; use a whole number of tokens above 0"),
                ))
            }
        },
        Some(other) => {
            return Err(bad(
                "token_budget",
                format!("expected a whole number, found {}", kind_of(other)),
            ))
        }
    };
    let cost_budget_usd = match fields.get("cost_budget_usd") {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::Number(n)) => match n.as_f64() {
            Some(v) if v.is_finite() && v > 0.0 => Some(v),
            _ => {
                return Err(bad(
                    "cost_budget_usd",
                    format!("{n} is not a budget; use USD above 0 (e.g. 0.25)"),
                ))
            }
        },
        Some(other) => {
            return Err(bad(
                "cost_budget_usd",
                format!("expected a number of USD, found {}", kind_of(other)),
            ))
        }
    };
    let flag = |key: &str| -> Result<Option<bool>, DefinitionError> {
        match fields.get(key) {
            None | Some(serde_yaml::Value::Null) => Ok(None),
            Some(serde_yaml::Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(bad(
                key,
                format!("expected true or false, found {}", kind_of(other)),
            )),
        }
    };
    let fork_context = flag("fork_context")?;
    let network = flag("network")?;
    let isolation = match fields.get("isolation") {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::String(v)) => {
            Some(Isolation::parse(v).map_err(|p| bad("isolation", p))?)
        }
        Some(other) => {
            return Err(bad(
                "isolation",
                format!("expected none or worktree, found {}", kind_of(other)),
            ))
        }
    };
    let worktree_base = match fields.get("worktree_base") {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::String(v)) => {
            Some(check_base(v).map_err(|p| bad("worktree_base", p))?)
        }
        Some(other) => {
            let found = format!(
                "expected a branch, tag or commit id, found {}",
                kind_of(other)
            );
            return Err(bad("worktree_base", found));
        }
    };

    let tools = match fields.get("tools") {
        None | Some(serde_yaml::Value::Null) => None,
        Some(v) => Some(map_tools(
            &tool_list(v).map_err(|p| bad("tools", p))?,
            ListKind::Allow,
            &mut warnings,
        )),
    };
    let disallowed_tools = match fields.get("disallowedTools") {
        None | Some(serde_yaml::Value::Null) => Vec::new(),
        Some(v) => map_tools(
            &tool_list(v).map_err(|p| bad("disallowedTools", p))?,
            ListKind::Deny,
            &mut warnings,
        ),
    };
    for key in ["skills", "hooks", "mcpServers", "memory", "background"] {
        if fields.contains_key(key) {
            warnings.push(format!(
                "`{key}` is a Claude Code feature brood does not have; it is ignored"
            ));
        }
    }

    if role == Role::Custom && tools.as_deref().unwrap_or_default().is_empty() {
        return Err(bad(
            "tools",
            "role custom needs a non-empty tool list".into(),
        ));
    }
    if let (Some(list), Some(allowed)) = (&tools, role.posture(true).allowed_tools) {
        if role != Role::Custom {
            // MCP tools are granted by the server's read-only marks at spawn.
            if let Some(t) = list
                .iter()
                .find(|t| !allowed.contains(*t) && !crate::tool::mcp::is_mcp_tool(t))
            {
                return Err(DefinitionError::ToolOutsideRole {
                    path: path.to_path_buf(),
                    tool: t.clone(),
                    role,
                });
            }
        }
    }

    Ok(AgentDefinition {
        name,
        description,
        tools,
        disallowed_tools,
        model,
        role,
        max_turns,
        token_budget,
        cost_budget_usd,
        fork_context,
        network,
        isolation,
        worktree_base,
        color,
        prompt: body.trim().to_string(),
        path: path.to_path_buf(),
        source,
        warnings,
        permission_rules,
    })
}

/// `permissions: {ask: [...], deny: [...]}` of a definition: every rule checked;
/// `allow` ignored with a warning (an agent file may narrow, never widen).
fn permission_rules(
    v: &serde_yaml::Value,
    warnings: &mut Vec<String>,
) -> Result<Vec<(crate::tool::RuleKind, String)>, String> {
    use crate::tool::RuleKind;
    let serde_yaml::Value::Mapping(map) = v else {
        return Err(format!(
            "expected a mapping with `ask` and `deny` lists, found {}",
            kind_of(v)
        ));
    };
    let mut out = Vec::new();
    for (k, list) in map {
        let key = k.as_str().unwrap_or_default();
        let kind =
            RuleKind::parse(key).ok_or_else(|| format!("unknown list {key:?}; use ask or deny"))?;
        let items = tool_list(list)?;
        if kind == RuleKind::Allow {
            if !items.is_empty() {
                warnings.push(format!(
                    "permissions.allow ({}) is ignored: an agent file may only add ask and deny rules",
                    items.join(", ")
                ));
            }
            continue;
        }
        for item in items {
            crate::tool::Rule::parse(&item).map_err(|e| e.to_string())?;
            out.push((kind, item));
        }
    }
    Ok(out)
}

fn split_front_matter<'a>(
    text: &'a str,
    path: &Path,
) -> Result<(&'a str, &'a str), DefinitionError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or_default();
    if first.trim_end() != "---" {
        return Err(DefinitionError::NoFrontMatter {
            path: path.to_path_buf(),
        });
    }
    let rest = text.get(first.len()..).unwrap_or_default();
    let mut pos = 0;
    for line in lines {
        let t = line.trim_end();
        if t == "---" || t == "..." {
            // `pos` counts whole lines of `rest`: a char boundary.
            let (front, closing) = rest.split_at_checked(pos).unwrap_or((rest, ""));
            let body = closing.get(line.len()..).unwrap_or_default();
            return Ok((front, body));
        }
        pos += line.len();
    }
    Err(DefinitionError::UnclosedFrontMatter {
        path: path.to_path_buf(),
    })
}

fn validate_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("'{name}' must be 1 to {MAX_NAME_LEN} characters"));
    }
    if !name.chars().all(ok_char) || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "'{name}' may contain only letters, digits, '-', '_' and '.', and must start with a letter or digit"
        ));
    }
    Ok(())
}
