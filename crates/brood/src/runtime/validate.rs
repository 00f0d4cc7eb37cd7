//! The one validation path for a loaded [`Config`]: the `[subagents]`, `[models]`,
//! `[memory]` and `[mcp_servers]` checks and clamps that `Session::open`, `brood config show` and
//! `brood doctor` all run, so a value one of them refuses the others refuse too —
//! and every refusal names the key and the file (or variable, or flag) that set it.

use super::config::{clamp_api_timeout, Config, ConfigError, Source};
use crate::subagent::config::{
    memory_enabled, ConfigError as SubagentConfigError, QuickModels, SubagentSettings, MEMORY_ENV,
};
use std::collections::BTreeMap;

/// What the checks derive from a config: the sub-agent settings after defaults and
/// clamps, the quick models, whether memory is on, and every clamp in words.
#[derive(Debug, Clone)]
pub struct Checked {
    /// `[subagents]` after defaults and clamps.
    pub settings: SubagentSettings,
    /// `[models.<alias>]`, checked.
    pub quick_models: QuickModels,
    /// Whether the memory tools are on.
    pub memory: bool,
    /// Each value that was clamped rather than refused, naming key, value and range.
    pub adjustments: Vec<String>,
    /// The enabled MCP servers (`[mcp_servers]`, `.mcp.json`), checked.
    pub mcp_servers: Vec<crate::tool::mcp::McpServerSpec>,
}

impl Config {
    /// Check the nested sections (ranges, empty names, switches) and apply their
    /// defaults and clamps. `env` is the process environment (`BROOD_MEMORY`).
    pub fn check(&self, env: &BTreeMap<String, String>) -> Result<Checked, ConfigError> {
        let mut sub = self.subagents.clone();
        if sub.api_timeout_secs.is_none() {
            sub.api_timeout_secs = Some(self.api_timeout_secs);
        }
        let settings = sub.resolve().map_err(|e| self.named(e))?;
        // The fleet's queue is the PostgreSQL ledger: without one, every child would
        // fail at its enqueue; say so once, at the start.
        let postgres = self
            .ledger_url
            .as_deref()
            .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"));
        if settings.placement == crate::subagent::Placement::Fleet && !postgres {
            return Err(self.named(SubagentConfigError {
                key: "subagents.placement".into(),
                problem: "\"fleet\" enqueues children in a PostgreSQL ledger for `brood worker`s, \
                          and this session's ledger is the workspace's SQLite file: set ledger_url \
                          (or --ledger postgres://…), or placement = \"local\""
                    .into(),
            }));
        }
        let quick_models = QuickModels::from_config(&self.models).map_err(|e| self.named(e))?;
        let memory = memory_enabled(&self.memory, env.get(MEMORY_ENV).map(String::as_str))
            .map_err(|e| self.named(e))?;
        let mut adjustments = self.top_level_adjustments();
        adjustments.extend(settings.adjustments.iter().cloned());
        let mcp_servers = self.mcp_specs()?;
        Ok(Checked {
            settings,
            quick_models,
            memory,
            adjustments,
            mcp_servers,
        })
    }

    /// Where the effective value of a dotted key came from.
    pub fn source_of(&self, key: &str) -> Source {
        self.provenance
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, s)| s.clone())
            .unwrap_or(Source::Default)
    }

    /// Clamps of top-level keys (the sub-agent ones are in [`SubagentSettings`]).
    fn top_level_adjustments(&self) -> Vec<String> {
        let mut out = Vec::new();
        let raw = self
            .provenance
            .iter()
            .find(|(k, _, _)| k == "api_timeout_secs")
            .and_then(|(_, v, s)| v.parse::<u64>().ok().map(|v| (v, s)));
        if let Some((v, source)) = raw {
            let used = clamp_api_timeout(Some(v));
            if v != 0 && used != v {
                out.push(format!(
                    "api_timeout_secs = {v} ({source}) clamped to {used} (accepted range 1..=1800)"
                ));
            }
        }
        out
    }

    /// A sub-agent check's error with the source of the offending key.
    fn named(&self, e: SubagentConfigError) -> ConfigError {
        let key = if e.key == MEMORY_ENV {
            "memory.enabled".to_string()
        } else {
            e.key.clone()
        };
        // The nearest key some layer set: `subagents.models.x` may come from a
        // `[subagents.models]` table set as a whole.
        let mut probe = key.as_str();
        let found = loop {
            if let Some(hit) = self.provenance.iter().find(|(k, _, _)| k == probe) {
                break Some(hit);
            }
            match probe.rsplit_once('.') {
                Some((head, _)) => probe = head,
                None => break None,
            }
        };
        let (value, source) = match found {
            Some((_, v, s)) => (v.clone(), s.to_string()),
            None if e.key == MEMORY_ENV => (
                env_hint(&e.problem),
                Source::Env(MEMORY_ENV.into()).to_string(),
            ),
            None => ("(default)".to_string(), Source::Default.to_string()),
        };
        ConfigError::BadValue {
            source_name: source,
            key,
            value,
            detail: e.problem,
        }
    }
}

/// The value quoted in a `BROOD_MEMORY` problem (`'x' is not a switch…`).
fn env_hint(problem: &str) -> String {
    problem.split('\'').nth(1).unwrap_or_default().to_string()
}

impl Config {
    /// The enabled MCP servers, checked; a problem names the file and the key
    /// (`mcp_servers.<name>.<key>`).
    pub(crate) fn mcp_specs(&self) -> Result<Vec<crate::tool::mcp::McpServerSpec>, ConfigError> {
        let mut out = Vec::new();
        for (name, entry) in &self.mcp_servers {
            let c = &entry.config;
            let spec = c.check(name).map_err(|p| {
                let key = if p.key.is_empty() {
                    format!("mcp_servers.{name}")
                } else {
                    format!("mcp_servers.{name}.{}", p.key)
                };
                let value = match p.key {
                    "" => name.clone(),
                    "command" => format!("{:?}", c.command),
                    "url" => format!("{:?}", c.url),
                    "startup_timeout_secs" => format!("{:?}", c.startup_timeout_secs),
                    "tool_timeout_secs" => format!("{:?}", c.tool_timeout_secs),
                    _ => "(as written)".into(),
                };
                ConfigError::BadValue {
                    source_name: entry.file.display().to_string(),
                    key,
                    value,
                    detail: p.detail,
                }
            })?;
            if c.is_enabled() {
                out.push(spec);
            }
        }
        Ok(out)
    }
}
