//! The agent catalog: every agent type a workspace offers (user definitions plus the
//! built-in roles) and the resolution of an `agent_type` string to one of them.
//!
//! # Where definitions come from, and which one wins
//!
//! `*.md` files directly inside (not below) these directories, highest precedence
//! first:
//!
//! 1. `<workspace>/.brood/agents/` — brood's own project agents;
//! 2. `<workspace>/.claude/agents/` — existing Claude Code project agents;
//! 3. the user directory the caller passes (normally `~/.config/brood/agents/`).
//!
//! Project files win over personal ones, and brood's own files win over Claude
//! Code's. A name defined in a lower-precedence directory is *shadowed* (listed in
//! [`AgentCatalog::shadowed`]), not merged. Two files with the same name in one
//! directory are an error, and every bad file is reported at once
//! ([`CatalogError`]). Names are case-insensitive. A definition may reuse a role name
//! (e.g. `explore`); the definition wins over the role when resolving.

use super::contract;
use super::definition::{parse_definition, AgentDefinition, DefinitionError, DefinitionSource};
use super::role::{Role, UnknownRole};
use serde::Serialize;
use std::fmt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// Every definition file that failed to load (all of them, so they can be fixed at once).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{} agent definition error(s):\n{}", errors.len(), errors.iter().map(|e| format!("- {e}")).collect::<Vec<_>>().join("\n"))]
pub struct CatalogError {
    pub errors: Vec<DefinitionError>,
}

/// An `agent_type` that names no definition, role or alias.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct UnknownAgentType {
    pub given: String,
    /// Canonical role names.
    pub roles: Vec<String>,
    /// `alias→role` pairs.
    pub aliases: Vec<String>,
    /// Names of defined agents.
    pub definitions: Vec<String>,
}

impl fmt::Display for UnknownAgentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown agent_type '{}'; accepted: roles {}; aliases {}",
            self.given,
            self.roles.join(", "),
            self.aliases.join(", ")
        )?;
        if self.definitions.is_empty() {
            write!(f, "; no agents are defined")
        } else {
            write!(f, "; defined agents {}", self.definitions.join(", "))
        }
    }
}

/// What an `agent_type` resolved to.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentKind {
    /// A built-in role; `name_used` is the spelling given (trimmed, lowercase).
    Role { role: Role, name_used: String },
    /// A user definition.
    Definition(Arc<AgentDefinition>),
}

impl AgentKind {
    /// The default kind: `general`.
    pub fn general() -> Self {
        AgentKind::Role {
            role: Role::General,
            name_used: Role::General.as_str().to_string(),
        }
    }

    /// The posture role.
    pub fn role(&self) -> Role {
        match self {
            AgentKind::Role { role, .. } => *role,
            AgentKind::Definition(d) => d.role,
        }
    }

    /// The definition name, or the canonical role name.
    pub fn name(&self) -> &str {
        match self {
            AgentKind::Role { role, .. } => role.as_str(),
            AgentKind::Definition(d) => &d.name,
        }
    }

    pub fn definition(&self) -> Option<&AgentDefinition> {
        match self {
            AgentKind::Role { .. } => None,
            AgentKind::Definition(d) => Some(d),
        }
    }

    /// The child's system prompt: the definition's body (or the role's stance), then
    /// the output contract.
    pub fn system_prompt(&self) -> String {
        let head = match self {
            AgentKind::Definition(d) if !d.prompt.trim().is_empty() => d.prompt.trim(),
            _ => self.role().stance_prompt(),
        };
        format!("{head}\n\n{}", contract::instructions())
    }
}

/// A definition hidden by a higher-precedence one of the same name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shadowed {
    pub name: String,
    pub path: PathBuf,
    pub by: PathBuf,
}

/// The agent types available in a workspace.
#[derive(Debug, Clone, Default)]
pub struct AgentCatalog {
    definitions: Vec<Arc<AgentDefinition>>,
    shadowed: Vec<Shadowed>,
    refused: Vec<Refused>,
}

/// A definition not taken: its name is a built-in role's or alias's. A workspace
/// file named `explore.md` must not replace the explore posture while results still
/// say "explore"; asking for that name gets the built-in role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub name: String,
    pub path: PathBuf,
    pub why: String,
}

impl AgentCatalog {
    /// Load the definitions of `workspace_root` and `user_dir` (normally
    /// `~/.config/brood/agents`; the caller finds it). Missing directories are fine.
    pub fn load(workspace_root: &Path, user_dir: Option<&Path>) -> Result<Self, CatalogError> {
        let mut dirs = vec![
            (
                workspace_root.join(".brood").join("agents"),
                DefinitionSource::Workspace,
            ),
            (
                workspace_root.join(".claude").join("agents"),
                DefinitionSource::Claude,
            ),
        ];
        if let Some(u) = user_dir {
            dirs.push((u.to_path_buf(), DefinitionSource::User));
        }
        let mut errors = Vec::new();
        let mut layers = Vec::new();
        for (dir, source) in dirs {
            match load_dir(&dir, source) {
                Ok(defs) => layers.push(defs),
                Err(mut e) => errors.append(&mut e),
            }
        }
        if !errors.is_empty() {
            return Err(CatalogError { errors });
        }
        Ok(Self::from_layers(layers))
    }

    /// A catalog from definitions already parsed, highest precedence first (a later
    /// definition with a taken name is shadowed).
    pub fn from_definitions(defs: Vec<AgentDefinition>) -> Self {
        Self::from_layers(vec![defs])
    }

    fn from_layers(layers: Vec<Vec<AgentDefinition>>) -> Self {
        let mut cat = AgentCatalog::default();
        for def in layers.into_iter().flatten() {
            if let Ok(role) = Role::parse(&def.name) {
                cat.refused.push(Refused {
                    why: format!(
                        "'{}' is the built-in role {role} (or one of its aliases); a definition \
                         may not take it — rename the file's `name`",
                        def.name
                    ),
                    name: def.name.clone(),
                    path: def.path.clone(),
                });
                continue;
            }
            if let Some(winner) = cat.get(&def.name) {
                cat.shadowed.push(Shadowed {
                    name: def.name.clone(),
                    path: def.path.clone(),
                    by: winner.path.clone(),
                });
            } else {
                cat.definitions.push(Arc::new(def));
            }
        }
        cat
    }

    /// The definitions in effect, in precedence then file-name order.
    pub fn definitions(&self) -> &[Arc<AgentDefinition>] {
        &self.definitions
    }

    pub fn shadowed(&self) -> &[Shadowed] {
        &self.shadowed
    }

    /// Definitions not taken because they name a built-in role or alias.
    pub fn refused(&self) -> &[Refused] {
        &self.refused
    }

    /// The definition called `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Arc<AgentDefinition>> {
        let name = name.trim();
        self.definitions
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
    }

    /// Resolve an `agent_type`: a definition name first, else a role or alias, else
    /// an error listing every accepted name.
    pub fn resolve(&self, agent_type: &str) -> Result<AgentKind, UnknownAgentType> {
        if let Some(d) = self.get(agent_type) {
            return Ok(AgentKind::Definition(d.clone()));
        }
        match Role::parse(agent_type) {
            Ok(role) => Ok(AgentKind::Role {
                role,
                name_used: agent_type.trim().to_ascii_lowercase(),
            }),
            Err(UnknownRole { given }) => Err(UnknownAgentType {
                given,
                roles: Role::ALL.iter().map(|r| r.as_str().to_string()).collect(),
                aliases: Role::ALL
                    .iter()
                    .flat_map(|r| r.aliases().iter().map(move |a| format!("{a}→{r}")))
                    .collect(),
                definitions: self.definitions.iter().map(|d| d.name.clone()).collect(),
            }),
        }
    }

    /// Every name `resolve` accepts: definitions, roles, aliases.
    pub fn accepted_names(&self) -> Vec<String> {
        let mut out: Vec<String> = self.definitions.iter().map(|d| d.name.clone()).collect();
        out.extend(
            Role::accepted_names()
                .into_iter()
                .map(|(n, _)| n.to_string()),
        );
        out
    }
}

fn load_dir(
    dir: &Path,
    source: DefinitionSource,
) -> Result<Vec<AgentDefinition>, Vec<DefinitionError>> {
    let io = |e: std::io::Error| {
        vec![DefinitionError::Io {
            path: dir.to_path_buf(),
            detail: e.to_string(),
        }]
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(io)?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("md") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    let mut defs: Vec<AgentDefinition> = Vec::new();
    let mut errors = Vec::new();
    for path in files {
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| DefinitionError::Io {
                path: path.clone(),
                detail: e.to_string(),
            })
            .and_then(|text| parse_definition(&text, &path, source));
        match parsed {
            Ok(def) => {
                if let Some(first) = defs.iter().find(|d| d.name.eq_ignore_ascii_case(&def.name)) {
                    errors.push(DefinitionError::DuplicateName {
                        name: def.name.clone(),
                        first: first.path.clone(),
                        second: path,
                    });
                } else {
                    defs.push(def);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(defs)
    } else {
        Err(errors)
    }
}
