//! The effective configuration ([`Config`]): built from the merged layers with
//! every value checked, and listed with where each came from (`brood config show`).

use super::error::ConfigError;
use super::file::{check_sections, ConfigFile, ProviderOverride, SandboxConfig};
use super::layers::{display_value, unflatten, Layers, Source};
use crate::agent::{ToolChoicePolicy, DEFAULT_MAX_TURNS, DEFAULT_TOOL_CONCURRENCY};
use crate::model::openai::{clamp_api_timeout, DEFAULT_MAX_ANSWER_BYTES};
use crate::model::pricing::Pricing;
use crate::model::{Sampling, ToolChoice};
use crate::subagent::config::{MemoryConfig, QuickModelConfig, SubagentsConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The effective configuration of a session.
#[derive(Debug, Clone)]
pub struct Config {
    /// The provider preset's name.
    pub provider: String,
    /// The endpoint (else the preset's).
    pub base_url: Option<String>,
    /// The ledger's PostgreSQL database (`postgres://…`), else the workspace's SQLite
    /// file (docs/LEDGER.md, "PostgreSQL").
    pub ledger_url: Option<String>,
    /// The model id (else the preset's default).
    pub model: Option<String>,
    /// The variable the API key is read from (else the preset's).
    pub api_key_env: Option<String>,
    /// Clamped to 1..=1800; 0 or unset is 120.
    pub api_timeout_secs: u64,
    /// Attempts per model step (transient failures are retried).
    pub max_attempts: u32,
    /// Whether answers are streamed.
    pub stream: bool,
    /// The parent's most model steps.
    pub max_turns: u32,
    /// How many tool calls of one step run at once (1..=64; default 8).
    pub tool_concurrency: usize,
    /// The most bytes one model step's answer may hold (default 8 MiB).
    pub max_answer_bytes: u64,
    /// The most bytes of project instructions in every request (default 32 KiB; 0: none).
    pub instructions_max_bytes: usize,
    /// How the model may use tools.
    pub tool_choice: ToolChoicePolicy,
    /// Temperature and the like.
    pub sampling: Sampling,
    /// `[subagents]`.
    pub subagents: SubagentsConfig,
    /// `[models.<alias>]`: quick models.
    pub models: BTreeMap<String, QuickModelConfig>,
    /// `[memory]`.
    pub memory: MemoryConfig,
    /// `[sandbox]`, from the user's config only.
    pub sandbox: SandboxConfig,
    /// `[pricing]`, from the user's config only.
    pub pricing: Pricing,
    /// Endpoint overrides by preset name (lowercase).
    pub providers: BTreeMap<String, ProviderOverride>,
    /// Directory of user-level files (`config.toml`, `agents/`, `memory.md`).
    pub user_dir: Option<PathBuf>,
    /// Workspace-config keys ignored because the workspace is not trusted:
    /// (key, value as written, file).
    pub ignored: Vec<(String, String, PathBuf)>,
    /// Each effective leaf key, its value, and where it came from.
    pub provenance: Vec<(String, String, Source)>,
    /// MCP servers by name (`[mcp_servers]`, a trusted workspace's `.mcp.json`).
    pub mcp_servers: BTreeMap<String, crate::runtime::mcp_config::McpServerEntry>,
    /// Parts of a `.mcp.json` not used, one line each.
    pub mcp_notes: Vec<String>,
    /// The session's permission rules, each with the file it came from
    /// (`[permissions]` and Claude Code's settings, see [`crate::runtime::permissions`]).
    pub permissions: crate::tool::RuleSet,
    /// Permission rules not taken (a workspace's `allow`, Claude Code rules brood
    /// cannot translate), one line each: file, rule, why.
    pub permission_notes: Vec<String>,
}

impl Config {
    /// Every effective top-level value with its source, defaults included, then
    /// every nested key that some layer set (for `brood config show`).
    pub fn effective(&self) -> Vec<(String, String, Source)> {
        let source = |key: &str| {
            self.provenance
                .iter()
                .find(|(k, _, _)| k == key)
                .map(|(_, _, s)| s.clone())
                .unwrap_or(Source::Default)
        };
        let opt = |v: &Option<String>| {
            v.clone()
                .map(|s| format!("{s:?}"))
                .unwrap_or_else(|| "(preset)".into())
        };
        let choice = |c: &Option<ToolChoice>| match c {
            None => "(provider default)".to_string(),
            Some(ToolChoice::Named(n)) => format!("{n:?}"),
            Some(other) => format!("{other:?}").to_lowercase(),
        };
        let mut out: Vec<(String, String, Source)> = vec![
            (
                "provider".into(),
                format!("{:?}", self.provider),
                source("provider"),
            ),
            ("base_url".into(), opt(&self.base_url), source("base_url")),
            ("model".into(), opt(&self.model), source("model")),
            (
                "ledger_url".into(),
                self.ledger_url
                    .as_deref()
                    .map(|u| format!("{:?}", crate::ledger::redact_url(u)))
                    .unwrap_or_else(|| "(the workspace's SQLite file)".into()),
                source("ledger_url"),
            ),
            (
                "api_key_env".into(),
                opt(&self.api_key_env),
                source("api_key_env"),
            ),
            (
                "api_timeout_secs".into(),
                self.api_timeout_secs.to_string(),
                source("api_timeout_secs"),
            ),
            (
                "max_attempts".into(),
                self.max_attempts.to_string(),
                source("max_attempts"),
            ),
            ("stream".into(), self.stream.to_string(), source("stream")),
            (
                "max_turns".into(),
                self.max_turns.to_string(),
                source("max_turns"),
            ),
            (
                "tool_concurrency".into(),
                self.tool_concurrency.to_string(),
                source("tool_concurrency"),
            ),
            (
                "max_answer_bytes".into(),
                self.max_answer_bytes.to_string(),
                source("max_answer_bytes"),
            ),
            (
                "instructions_max_bytes".into(),
                self.instructions_max_bytes.to_string(),
                source("instructions_max_bytes"),
            ),
            (
                "tool_choice".into(),
                choice(&self.tool_choice.rest),
                source("tool_choice"),
            ),
            (
                "first_tool_choice".into(),
                choice(&self.tool_choice.first),
                source("first_tool_choice"),
            ),
        ];
        let shown: Vec<String> = out.iter().map(|(k, _, _)| k.clone()).collect();
        for (k, v, s) in &self.provenance {
            if !shown.contains(k) {
                out.push((k.clone(), v.clone(), s.clone()));
            }
        }
        if let Some(dir) = &self.user_dir {
            for (model, p) in self.pricing.iter() {
                let cached = p.cached_input_per_mtok.unwrap_or(p.input_per_mtok);
                out.push((
                    format!("pricing.{model:?}"),
                    format!(
                        "input {} / cached input {cached} / output {} USD per million tokens",
                        p.input_per_mtok, p.output_per_mtok
                    ),
                    Source::File(dir.join("config.toml")),
                ));
            }
        }
        out
    }
}

pub(super) fn build(layers: Layers, user_dir: Option<PathBuf>) -> Result<Config, ConfigError> {
    let source_of = |key: &str| {
        layers
            .get(key)
            .map(|(_, s)| s.to_string())
            .unwrap_or_else(|| "default".into())
    };
    let merged: ConfigFile =
        toml::Value::Table(unflatten(&layers))
            .try_into()
            .map_err(|e: toml::de::Error| {
                ConfigError::from_toml("effective configuration", None, None, &e)
            })?;
    check_sections(&merged, "effective configuration")?;
    let bad = |key: &str, value: String, detail: &str| ConfigError::BadValue {
        source_name: source_of(key),
        key: key.to_string(),
        value,
        detail: detail.to_string(),
    };
    let max_attempts = merged.max_attempts.unwrap_or(4);
    if !(1..=10).contains(&max_attempts) {
        return Err(bad(
            "max_attempts",
            max_attempts.to_string(),
            "must be between 1 and 10",
        ));
    }
    let max_turns = merged.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    if max_turns == 0 || max_turns > 1000 {
        return Err(bad(
            "max_turns",
            max_turns.to_string(),
            "must be between 1 and 1000",
        ));
    }
    let tool_concurrency = merged
        .tool_concurrency
        .unwrap_or(DEFAULT_TOOL_CONCURRENCY as u32);
    if !(1..=64).contains(&tool_concurrency) {
        return Err(bad(
            "tool_concurrency",
            tool_concurrency.to_string(),
            "must be between 1 and 64",
        ));
    }
    let max_answer_bytes = merged.max_answer_bytes.unwrap_or(DEFAULT_MAX_ANSWER_BYTES);
    if !(MIN_MAX_ANSWER_BYTES..=MAX_MAX_ANSWER_BYTES).contains(&max_answer_bytes) {
        return Err(bad(
            "max_answer_bytes",
            max_answer_bytes.to_string(),
            "must be between 65536 (64 KiB) and 1073741824 (1 GiB)",
        ));
    }
    let instructions_max_bytes = merged
        .instructions_max_bytes
        .unwrap_or(crate::runtime::instructions::DEFAULT_MAX_BYTES as u64);
    if instructions_max_bytes > crate::runtime::instructions::MAX_MAX_BYTES as u64 {
        return Err(bad(
            "instructions_max_bytes",
            instructions_max_bytes.to_string(),
            "must be between 0 (read none) and 262144 (256 KiB)",
        ));
    }
    let choice = |key: &str, v: &Option<String>| -> Result<Option<ToolChoice>, ConfigError> {
        match v {
            None => Ok(None),
            Some(s) if s.trim().is_empty() => Err(bad(
                key,
                s.clone(),
                "expected auto, required, none or a tool name",
            )),
            Some(s) => Ok(Some(ToolChoice::parse(s))),
        }
    };
    if let Some(t) = merged.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(bad("temperature", t.to_string(), "must be within 0..=2"));
        }
    }
    let subagents: SubagentsConfig =
        toml::Value::Table(merged.subagents.clone().unwrap_or_default())
            .try_into()
            .map_err(|e: toml::de::Error| {
                ConfigError::from_toml(source_of("subagents"), Some("subagents"), None, &e)
            })?;
    let models: BTreeMap<String, QuickModelConfig> =
        toml::Value::Table(merged.models.clone().unwrap_or_default())
            .try_into()
            .map_err(|e: toml::de::Error| {
                ConfigError::from_toml(source_of("models"), Some("models"), None, &e)
            })?;
    let memory: MemoryConfig = toml::Value::Table(merged.memory.clone().unwrap_or_default())
        .try_into()
        .map_err(|e: toml::de::Error| {
            ConfigError::from_toml(source_of("memory"), Some("memory"), None, &e)
        })?;
    let sandbox: SandboxConfig = toml::Value::Table(merged.sandbox.clone().unwrap_or_default())
        .try_into()
        .map_err(|e: toml::de::Error| {
            ConfigError::from_toml(source_of("sandbox"), Some("sandbox"), None, &e)
        })?;
    let providers: BTreeMap<String, ProviderOverride> =
        toml::Value::Table(merged.providers.clone().unwrap_or_default())
            .try_into::<BTreeMap<String, ProviderOverride>>()
            .map_err(|e: toml::de::Error| {
                ConfigError::from_toml(source_of("providers"), Some("providers"), None, &e)
            })?
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
    let ledger_url = match merged.ledger_url {
        Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => Some(u),
        Some(u) => {
            return Err(ConfigError::invalid(
                source_of("ledger_url"),
                Some("ledger_url"),
                format!(
                    "{:?} is not a PostgreSQL URL (postgres://… or postgresql://…); \
                     leave it unset for the workspace's SQLite ledger",
                    crate::ledger::redact_url(&u)
                ),
            ))
        }
        None => None,
    };
    let provenance = layers
        .iter()
        .map(|(k, (v, s))| (k.clone(), display_value(k, v), s.clone()))
        .collect();
    Ok(Config {
        provider: merged.provider.unwrap_or_else(|| "deepseek".into()),
        base_url: merged.base_url,
        ledger_url,
        model: merged.model,
        api_key_env: merged.api_key_env,
        api_timeout_secs: clamp_api_timeout(merged.api_timeout_secs),
        max_attempts,
        stream: merged.stream.unwrap_or(true),
        max_turns,
        tool_concurrency: tool_concurrency as usize,
        max_answer_bytes,
        instructions_max_bytes: usize::try_from(instructions_max_bytes)
            .unwrap_or(crate::runtime::instructions::MAX_MAX_BYTES),
        tool_choice: ToolChoicePolicy {
            first: choice("first_tool_choice", &merged.first_tool_choice)?,
            rest: choice("tool_choice", &merged.tool_choice)?,
        },
        sampling: Sampling {
            temperature: merged.temperature,
            max_tokens: merged.max_tokens,
            ..Sampling::default()
        },
        subagents,
        models,
        memory,
        sandbox,
        pricing: Pricing::default(),
        providers,
        user_dir,
        provenance,
        ignored: Vec::new(),
        mcp_servers: BTreeMap::new(),
        mcp_notes: Vec::new(),
        permissions: crate::tool::RuleSet::new(),
        permission_notes: Vec::new(),
    })
}

/// The smallest accepted `max_answer_bytes`.
pub const MIN_MAX_ANSWER_BYTES: u64 = 64 * 1024;
/// The largest accepted `max_answer_bytes`.
pub const MAX_MAX_ANSWER_BYTES: u64 = 1 << 30;
