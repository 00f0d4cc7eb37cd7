//! One config file: its shape ([`ConfigFile`], [`ProviderOverride`],
//! [`SandboxConfig`]), the keys only the user's file may set, and reading and
//! checking a file on its own so that an error names it.

use super::error::ConfigError;
use crate::model::pricing::{Pricing, PricingError};
use crate::subagent::config::{MemoryConfig, QuickModelConfig, SubagentsConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The shape of a config file. Every key is optional; unknown keys are errors.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Provider preset: deepseek, openai, openrouter, ollama, vllm, sglang, llamacpp, local.
    pub provider: Option<String>,
    /// `base_url`: the endpoint (user config only).
    pub base_url: Option<String>,
    /// `model`: the model id.
    pub model: Option<String>,
    /// Name of the environment variable that holds the API key.
    pub api_key_env: Option<String>,
    /// `api_timeout_secs`: the bound on one model step.
    pub api_timeout_secs: Option<u64>,
    /// Attempts per model step for transient failures (1..=10).
    pub max_attempts: Option<u32>,
    /// Stream responses (SSE). Default true.
    pub stream: Option<bool>,
    /// `max_turns`: the parent's most steps.
    pub max_turns: Option<u32>,
    /// `tool_concurrency`: tool calls of one step at once.
    pub tool_concurrency: Option<u32>,
    /// The most bytes one model step's answer may hold (content, reasoning and
    /// tool-call arguments); 64 KiB..=1 GiB, default 8 MiB.
    pub max_answer_bytes: Option<u64>,
    /// The most bytes of project instructions (`AGENTS.md` and the like, all files
    /// together) every request carries; 0 reads none. 0..=262144, default 32768.
    pub instructions_max_bytes: Option<u64>,
    /// auto, required, none, or a tool name: applies to every step.
    pub tool_choice: Option<String>,
    /// The same, for the first step only.
    pub first_tool_choice: Option<String>,
    /// `temperature`.
    pub temperature: Option<f32>,
    /// `max_tokens`.
    pub max_tokens: Option<u32>,
    /// `[subagents]`, checked when loaded.
    pub subagents: Option<toml::Table>,
    /// `[models.<alias>]`, checked when loaded.
    pub models: Option<toml::Table>,
    /// `[memory]`, checked when loaded.
    pub memory: Option<toml::Table>,
    /// `[sandbox]`: what shells may reach (user config only).
    pub sandbox: Option<toml::Table>,
    /// Per-provider endpoint overrides: `[providers.<preset>] base_url, api_key_env,
    /// lists_models`.
    pub providers: Option<toml::Table>,
    /// Workspaces whose config may set [`USER_ONLY_KEYS`] (user config only).
    pub trusted_workspaces: Option<Vec<String>>,
    /// `[pricing."<model>"]`: USD per million tokens (user config only).
    pub pricing: Option<toml::Table>,
    /// `[mcp_servers.<name>]`: MCP servers whose tools runs may get (a workspace
    /// config's only when the workspace is trusted).
    pub mcp_servers: Option<toml::Table>,
    /// `[permissions] allow/ask/deny`: permission rules (a workspace: ask/deny only).
    pub permissions: Option<toml::Table>,
    /// `ledger_url`: the ledger's PostgreSQL database (`postgres://…`); unset, the
    /// workspace's SQLite file (user config only: where every record goes).
    pub ledger_url: Option<String>,
}

/// `[providers.<preset>]`: where a preset's endpoint really is (e.g. children on a
/// local server while the parent talks to DeepSeek).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderOverride {
    /// The endpoint.
    pub base_url: Option<String>,
    /// The variable holding its key.
    pub api_key_env: Option<String>,
    /// Whether `GET /models` names the ids this endpoint accepts (children asking
    /// for another id are refused at spawn). Default: the preset's — on, except for
    /// `local`/`llamacpp` (llama.cpp serves one model whatever the name; a router
    /// in front of it that lists real names can turn it on).
    pub lists_models: Option<bool>,
    /// A PEM file of certificate authorities this endpoint's certificate may chain
    /// to, trusted beside the built-in roots (an absolute path).
    pub ca_cert: Option<std::path::PathBuf>,
}

/// The `[sandbox]` table (user config only): what shells may reach beyond the
/// defaults (see docs/SECURITY.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Writer shells may use the network (default false).
    pub network: Option<bool>,
    /// Extra environment variables passed to shells (names, or `PREFIX*`).
    pub env_allow: Option<Vec<String>>,
    /// Extra directories shells may read.
    pub read_allow: Option<Vec<PathBuf>>,
    /// Extra directories writer shells may write.
    pub write_allow: Option<Vec<PathBuf>>,
}

/// Keys a workspace `.brood/config.toml` may set only when the workspace is
/// trusted: they choose where requests go and which variable's value is sent as
/// the key. `trusted_workspaces` itself is read from the user's config only.
pub const USER_ONLY_KEYS: &[&str] = &[
    "provider",
    "base_url",
    "api_key_env",
    "providers",
    "models",
    "ledger_url",
];

/// Keys inside a section that choose an endpoint too, with the same rule as
/// [`USER_ONLY_KEYS`]: `[subagents] subagent_provider` would send every child's
/// requests (and the user's key for that provider) to a provider of the workspace's
/// choosing. (The `*_model` keys pick a model name on the user's providers and quick
/// models only, so they stay.)
pub const USER_ONLY_SECTION_KEYS: &[(&str, &str)] = &[("subagents", "subagent_provider")];

pub(super) fn read_file(path: &Path) -> Result<Option<toml::Table>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })
        }
    };
    let invalid =
        |e: toml::de::Error| ConfigError::from_toml(path.display(), None, Some(&text), &e);
    // Check the whole shape (unknown keys, types) against this file alone, so the
    // error names this file.
    let parsed: ConfigFile = toml::from_str(&text).map_err(invalid)?;
    check_sections(&parsed, &path.display().to_string())?;
    toml::from_str::<toml::Table>(&text)
        .map(Some)
        .map_err(invalid)
}

/// A `[pricing]` entry that cannot be used, as a config error of `path`.
pub(super) fn pricing_error(path: impl std::fmt::Display, e: &PricingError) -> ConfigError {
    ConfigError::invalid(
        path,
        Some(&format!("pricing.\"{}\"", e.model)),
        e.detail.clone(),
    )
}

/// Validate the nested sections of one layer with their own typed parsers.
pub(super) fn check_sections(file: &ConfigFile, origin: &str) -> Result<(), ConfigError> {
    let invalid =
        |section: &str, e: toml::de::Error| ConfigError::from_toml(origin, Some(section), None, &e);
    if let Some(t) = &file.subagents {
        toml::Value::Table(t.clone())
            .try_into::<SubagentsConfig>()
            .map_err(|e| invalid("subagents", e))?;
    }
    if let Some(t) = &file.models {
        toml::Value::Table(t.clone())
            .try_into::<BTreeMap<String, QuickModelConfig>>()
            .map_err(|e| invalid("models", e))?;
    }
    if let Some(t) = &file.memory {
        toml::Value::Table(t.clone())
            .try_into::<MemoryConfig>()
            .map_err(|e| invalid("memory", e))?;
    }
    if let Some(t) = &file.sandbox {
        toml::Value::Table(t.clone())
            .try_into::<SandboxConfig>()
            .map_err(|e| invalid("sandbox", e))?;
    }
    if let Some(t) = &file.permissions {
        toml::Value::Table(t.clone())
            .try_into::<crate::runtime::permissions::PermissionsTable>()
            .map_err(|e| invalid("permissions", e))?;
    }
    if let Some(t) = &file.pricing {
        Pricing::from_table(t).map_err(|e| pricing_error(origin, &e))?;
    }
    if let Some(t) = &file.mcp_servers {
        crate::runtime::mcp_config::parse_table(t)
            .map_err(|detail| ConfigError::invalid(origin, Some("mcp_servers"), detail))?;
    }
    if let Some(t) = &file.providers {
        let map = toml::Value::Table(t.clone())
            .try_into::<BTreeMap<String, ProviderOverride>>()
            .map_err(|e| invalid("providers", e))?;
        for (name, o) in &map {
            crate::model::preset::preset(name).map_err(|e| {
                let key = format!("providers.{name}");
                match e {
                    crate::model::ModelError::UnknownProvider { known, .. } => {
                        ConfigError::Invalid {
                            path: origin.to_string(),
                            key: Some(key),
                            problem: format!("unknown provider preset `{name}`"),
                            accepted: known,
                        }
                    }
                    other => ConfigError::invalid(origin, Some(&key), other.to_string()),
                }
            })?;
            if o.ca_cert.as_ref().is_some_and(|p| !p.is_absolute()) {
                return Err(ConfigError::invalid(
                    origin,
                    Some(&format!("providers.{name}.ca_cert")),
                    "must be an absolute path to a PEM file",
                ));
            }
        }
    }
    Ok(())
}
