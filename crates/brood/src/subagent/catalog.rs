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
//! 3. `~/.config/brood/agents/` — the user's brood agents;
//! 4. `~/.claude/agents/` — the user's personal Claude Code agents.
//!
//! Project files win over personal ones, and brood's own files win over Claude
//! Code's. A name defined in a lower-precedence directory is *shadowed* (listed in
//! [`AgentCatalog::shadowed`]), not merged. Names are case-insensitive; a definition
//! may not take a built-in role's name ([`AgentCatalog::refused`]).
//!
//! A file that cannot be used never stops a session: it is *skipped*
//! ([`AgentCatalog::skipped`], one line each naming file and problem), and only a
//! spawn that asks for it by name fails, with that problem in its error. The same
//! goes for a second file of one name in one directory.

use super::contract;
use super::definition::{parse_definition, AgentDefinition, DefinitionError, DefinitionSource};
use super::role::{Role, UnknownRole};
use serde::Serialize;
use std::fmt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// A definition file that was not used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The agent name the file defines, as far as it can be told (its `name:` line,
    /// else the file stem), lowercase.
    pub name: String,
    pub(crate) path: PathBuf,
    /// Why it was not used.
    pub error: DefinitionError,
}

/// An `agent_type` that names no definition, role or alias.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct UnknownAgentType {
    /// The `agent_type` as given.
    pub given: String,
    /// Canonical role names.
    pub roles: Vec<String>,
    /// `alias→role` pairs.
    pub aliases: Vec<String>,
    /// Names of defined agents.
    pub definitions: Vec<String>,
    /// Set when a definition file of this name exists but could not be used: why.
    pub unusable: Option<String>,
}

impl fmt::Display for UnknownAgentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.unusable {
            return write!(
                f,
                "agent_type '{}' is defined, but its file cannot be used: {why}",
                self.given
            );
        }
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
    /// A built-in role.
    Role {
        /// The role.
        role: Role,
        /// The spelling given (trimmed, lowercase).
        name_used: String,
    },
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

    /// The definition, when this kind is one (`None` for a built-in role).
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
    /// The agent name both files define.
    pub name: String,
    /// The file not used.
    pub path: PathBuf,
    /// The file used instead.
    pub by: PathBuf,
}

/// The agent types available in a workspace.
#[derive(Debug, Clone, Default)]
pub struct AgentCatalog {
    definitions: Vec<Arc<AgentDefinition>>,
    shadowed: Vec<Shadowed>,
    refused: Vec<Refused>,
    skipped: Vec<Skipped>,
}

/// A definition not taken: its name is a built-in role's or alias's. A workspace
/// file named `explore.md` must not replace the explore posture while results still
/// say "explore"; asking for that name gets the built-in role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The name the file asks for (a built-in role's or alias's).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Why it was not taken, in words.
    pub why: String,
}

impl AgentCatalog {
    /// The user-level directories, highest precedence first: the user's brood
    /// directory (normally `~/.config/brood`) and `$HOME/.claude` from `env` (the
    /// environment passed in; an empty `HOME` means unset).
    pub fn user_dirs(
        brood_dir: Option<&Path>,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Vec<(PathBuf, DefinitionSource)> {
        let home = env.get("HOME").filter(|h| !h.is_empty()).map(Path::new);
        let mut dirs = Vec::new();
        if let Some(d) = brood_dir {
            dirs.push((d.join("agents"), DefinitionSource::User));
        }
        if let Some(h) = home {
            dirs.push((
                h.join(".claude").join("agents"),
                DefinitionSource::UserClaude,
            ));
        }
        dirs
    }

    /// Load the definitions of `workspace_root` and of `user_dirs` (see
    /// [`AgentCatalog::user_dirs`]). Missing directories are fine; a file that cannot
    /// be used is skipped (see the module docs), never fatal.
    pub fn load(workspace_root: &Path, user_dirs: &[(PathBuf, DefinitionSource)]) -> Self {
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
        dirs.extend(user_dirs.iter().cloned());
        let mut skipped = Vec::new();
        let mut layers = Vec::new();
        for (dir, source) in dirs {
            layers.push(load_dir(&dir, source, &mut skipped));
        }
        let mut cat = Self::from_layers(layers);
        cat.skipped = skipped;
        cat
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

    /// Definitions hidden by a higher-precedence one of the same name.
    pub fn shadowed(&self) -> &[Shadowed] {
        &self.shadowed
    }

    /// Definitions not taken because they name a built-in role or alias.
    pub fn refused(&self) -> &[Refused] {
        &self.refused
    }

    /// Definition files that could not be used (see the module docs).
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
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
                unusable: self
                    .skipped
                    .iter()
                    .find(|k| k.name.eq_ignore_ascii_case(agent_type.trim()))
                    .map(|k| k.error.to_string()),
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

/// The `*.md` definitions directly in `dir`; files that cannot be used go to
/// `skipped`.
fn load_dir(
    dir: &Path,
    source: DefinitionSource,
    skipped: &mut Vec<Skipped>,
) -> Vec<AgentDefinition> {
    let mut skip = |path: &Path, name: String, error: DefinitionError| {
        skipped.push(Skipped {
            name,
            path: path.to_path_buf(),
            error,
        })
    };
    let io = |path: &Path, e: std::io::Error| DefinitionError::Io {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            skip(dir, String::new(), io(dir, e));
            return Vec::new();
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                let path = entry.path();
                if path.extension().and_then(|e| e.to_str()) == Some("md") && path.is_file() {
                    files.push(path);
                }
            }
            Err(e) => skip(dir, String::new(), io(dir, e)),
        }
    }
    files.sort();
    let mut defs: Vec<AgentDefinition> = Vec::new();
    for path in files {
        let text = match read_bounded(&path) {
            Ok(t) => t,
            Err(e) => {
                skip(&path, stem(&path), e);
                continue;
            }
        };
        match parse_definition(&text, &path, source) {
            Ok(def) => {
                if let Some(first) = defs.iter().find(|d| d.name.eq_ignore_ascii_case(&def.name)) {
                    let error = DefinitionError::DuplicateName {
                        name: def.name.clone(),
                        first: first.path.clone(),
                        second: path.clone(),
                    };
                    skip(&path, def.name.to_ascii_lowercase(), error);
                } else {
                    defs.push(def);
                }
            }
            Err(e) => skip(
                &path,
                declared_name(&text).unwrap_or_else(|| stem(&path)),
                e,
            ),
        }
    }
    defs
}

/// The most a definition file may hold (a system prompt, not a book).
const MAX_DEFINITION_BYTES: u64 = 1 << 20;

fn read_bounded(path: &Path) -> Result<String, DefinitionError> {
    use std::io::Read;
    let io = |e: std::io::Error| DefinitionError::Io {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_DEFINITION_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(io)?;
    if buf.len() as u64 > MAX_DEFINITION_BYTES {
        return Err(DefinitionError::Io {
            path: path.to_path_buf(),
            detail: format!("larger than {MAX_DEFINITION_BYTES} bytes; an agent file is a prompt, keep it short"),
        });
    }
    String::from_utf8(buf).map_err(|_| DefinitionError::Io {
        path: path.to_path_buf(),
        detail: "not UTF-8 text".into(),
    })
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// The `name:` line of a file whose front matter could not be used, so a spawn
/// asking for that name learns why.
fn declared_name(text: &str) -> Option<String> {
    text.lines()
        .skip(1)
        .take_while(|l| l.trim_end() != "---")
        .find_map(|l| l.strip_prefix("name:"))
        .map(|n| n.trim().trim_matches(['"', '\'']).to_ascii_lowercase())
        .filter(|n| !n.is_empty())
}
