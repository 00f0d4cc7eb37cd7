//! Layered configuration: built-in defaults, then `~/.config/brood/config.toml`,
//! then `<workspace>/.brood/config.toml`, then `BROOD_*` environment variables,
//! then command-line flags; a later layer wins key by key. Every effective value
//! remembers where it came from (`brood config show`). Unknown keys and bad values
//! are errors naming the key and the file (or variable, or flag).

use crate::agent::{ToolChoicePolicy, DEFAULT_MAX_TURNS, DEFAULT_TOOL_CONCURRENCY};
use crate::model::openai::DEFAULT_MAX_ANSWER_BYTES;
use crate::model::pricing::Pricing;
use crate::model::{Sampling, ToolChoice};
use crate::subagent::config::{MemoryConfig, QuickModelConfig, SubagentsConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A configuration problem. Each names the key and where it was set.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {detail}")]
    /// A config file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    #[error("config file {path}: {detail}")]
    /// A config file is not valid TOML or has unknown keys.
    Invalid {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
    #[error("{source_name}: bad value {value:?} for {key}: {detail}")]
    /// A value is out of range or of the wrong kind.
    BadValue {
        /// Where it was set (a file, a variable or a flag).
        source_name: String,
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is wrong and what is accepted.
        detail: String,
    },
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Built in.
    Default,
    /// A config file.
    File(PathBuf),
    /// An environment variable.
    Env(String),
    /// A command-line flag.
    Flag(String),
    /// A provider preset's built-in value (`base_url`, `model`, `api_key_env`).
    Preset(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Env(v) => write!(f, "env {v}"),
            Source::Flag(v) => write!(f, "flag {v}"),
            Source::Preset(p) => write!(f, "preset {p}"),
        }
    }
}

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
}

/// Values given on the command line (the last layer).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--provider`.
    pub provider: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--api-key-env`.
    pub api_key_env: Option<String>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// `--trust`: the workspace config may set the user-only keys this once.
    pub trust_workspace: bool,
}

/// Keys a workspace `.brood/config.toml` may set only when the workspace is
/// trusted: they choose where requests go and which variable's value is sent as
/// the key. `trusted_workspaces` itself is read from the user's config only.
pub const USER_ONLY_KEYS: &[&str] = &["provider", "base_url", "api_key_env", "providers", "models"];

/// Keys inside a section that choose an endpoint too, with the same rule as
/// [`USER_ONLY_KEYS`]: `[subagents] subagent_provider` would send every child's
/// requests (and the user's key for that provider) to a provider of the workspace's
/// choosing. (The `*_model` keys pick a model name on the user's providers and quick
/// models only, so they stay.)
pub const USER_ONLY_SECTION_KEYS: &[(&str, &str)] = &[("subagents", "subagent_provider")];

/// Where to look for the layers. `user_dir` is normally `~/.config/brood`.
#[derive(Debug, Clone)]
pub struct ConfigPaths {
    /// The user's config directory (`None`: no user config).
    pub user_dir: Option<PathBuf>,
    /// The workspace root.
    pub workspace: PathBuf,
}

impl ConfigPaths {
    /// `~/.config/brood` from `$XDG_CONFIG_HOME` or `$HOME`, and the workspace.
    pub fn from_env(workspace: &Path) -> ConfigPaths {
        // An empty value means unset (XDG Base Directory spec), for both.
        let set = |v: &str| std::env::var_os(v).filter(|x| !x.is_empty());
        let user_dir = set("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".config")))
            .map(|d| d.join("brood"));
        ConfigPaths {
            user_dir,
            workspace: workspace.to_path_buf(),
        }
    }
}

/// The effective configuration of a session.
#[derive(Debug, Clone)]
pub struct Config {
    /// The provider preset's name.
    pub provider: String,
    /// The endpoint (else the preset's).
    pub base_url: Option<String>,
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

/// Environment variables read, and the key each sets.
pub const ENV_KEYS: &[(&str, &str)] = &[
    ("BROOD_PROVIDER", "provider"),
    ("BROOD_BASE_URL", "base_url"),
    ("BROOD_MODEL", "model"),
    ("BROOD_API_KEY_ENV", "api_key_env"),
    ("BROOD_API_TIMEOUT_SECS", "api_timeout_secs"),
    ("BROOD_MAX_ATTEMPTS", "max_attempts"),
    ("BROOD_STREAM", "stream"),
    ("BROOD_MAX_TURNS", "max_turns"),
    ("BROOD_TOOL_CONCURRENCY", "tool_concurrency"),
    ("BROOD_MAX_ANSWER_BYTES", "max_answer_bytes"),
    ("BROOD_TOOL_CHOICE", "tool_choice"),
    ("BROOD_FIRST_TOOL_CHOICE", "first_tool_choice"),
    ("BROOD_MEMORY", "memory.enabled"),
    ("BROOD_SUBAGENT_MODEL", "subagents.subagent_model"),
    ("BROOD_SUBAGENT_PROVIDER", "subagents.subagent_provider"),
    ("BROOD_MAX_CONCURRENT", "subagents.max_concurrent"),
    ("BROOD_SUBAGENT_TOOL_CHOICE", "subagents.tool_choice"),
    (
        "BROOD_SUBAGENT_FIRST_TOOL_CHOICE",
        "subagents.first_tool_choice",
    ),
];

/// Flat map from dotted key to (value, source), later layers overwriting.
type Layers = BTreeMap<String, (toml::Value, Source)>;

impl Config {
    /// Load every layer. `env` is the process environment (passed in: no globals).
    pub fn load(
        paths: &ConfigPaths,
        env: &BTreeMap<String, String>,
        flags: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut layers = Layers::new();
        let mut ignored = Vec::new();
        let mut trusted = flags.trust_workspace;
        let mut pricing = Pricing::default();
        if let Some(dir) = &paths.user_dir {
            let path = dir.join("config.toml");
            if let Some(mut table) = read_file(&path)? {
                // Model ids hold dots (`gpt-4.1`): the table is read whole, not
                // flattened into dotted keys like the rest.
                if let Some(toml::Value::Table(t)) = table.remove("pricing") {
                    pricing = Pricing::from_table(&t).map_err(|e| ConfigError::Invalid {
                        path: path.display().to_string(),
                        detail: e.to_string(),
                    })?;
                }
                if let Some(list) = table.remove("trusted_workspaces") {
                    trusted |= lists_workspace(&list, &paths.workspace).map_err(|detail| {
                        ConfigError::Invalid {
                            path: path.display().to_string(),
                            detail,
                        }
                    })?;
                }
                flatten("", table, &Source::File(path.clone()), &mut layers);
            }
        }
        let workspace_file = paths.workspace.join(".brood").join("config.toml");
        if let Some(mut table) = read_file(&workspace_file)? {
            if table.contains_key("sandbox") {
                return Err(ConfigError::Invalid {
                    path: workspace_file.display().to_string(),
                    detail: "[sandbox] may only be set in the user's config \
                             (~/.config/brood/config.toml): a workspace must not widen \
                             what its shells may reach; remove the section"
                        .into(),
                });
            }
            if table.contains_key("pricing") {
                return Err(ConfigError::Invalid {
                    path: workspace_file.display().to_string(),
                    detail: "[pricing] may only be set in the user's config \
                             (~/.config/brood/config.toml): a workspace could hide what \
                             its runs spend; remove the section"
                        .into(),
                });
            }
            let mut user_only: Vec<&str> = vec!["trusted_workspaces"];
            if !trusted {
                user_only.extend_from_slice(USER_ONLY_KEYS);
            }
            for key in user_only {
                if let Some(v) = table.remove(key) {
                    ignored.push((
                        key.to_string(),
                        display_value(key, &v),
                        workspace_file.clone(),
                    ));
                }
            }
            if !trusted {
                for (section, key) in USER_ONLY_SECTION_KEYS {
                    let Some(toml::Value::Table(t)) = table.get_mut(*section) else {
                        continue;
                    };
                    if let Some(v) = t.remove(*key) {
                        ignored.push((
                            format!("{section}.{key}"),
                            display_value(key, &v),
                            workspace_file.clone(),
                        ));
                    }
                }
            }
            flatten(
                "",
                table,
                &Source::File(workspace_file.clone()),
                &mut layers,
            );
        }
        for (var, key) in ENV_KEYS {
            if let Some(raw) = env.get(*var) {
                let value = env_value(var, key, raw)?;
                layers.insert(key.to_string(), (value, Source::Env(var.to_string())));
            }
        }
        let flag = |layers: &mut Layers, key: &str, name: &str, v: toml::Value| {
            layers.insert(key.to_string(), (v, Source::Flag(name.to_string())));
        };
        if let Some(v) = &flags.provider {
            flag(&mut layers, "provider", "--provider", v.clone().into());
        }
        if let Some(v) = &flags.base_url {
            flag(&mut layers, "base_url", "--base-url", v.clone().into());
        }
        if let Some(v) = &flags.model {
            flag(&mut layers, "model", "--model", v.clone().into());
        }
        if let Some(v) = &flags.api_key_env {
            flag(
                &mut layers,
                "api_key_env",
                "--api-key-env",
                v.clone().into(),
            );
        }
        if let Some(v) = flags.max_turns {
            flag(&mut layers, "max_turns", "--max-turns", i64::from(v).into());
        }
        let mut config = build(layers, paths.user_dir.clone())?;
        config.ignored = ignored;
        config.pricing = pricing;
        Ok(config)
    }

    /// One warning line naming the file and the workspace keys that were ignored,
    /// or `None` when nothing was.
    pub fn ignored_warning(&self) -> Option<String> {
        let (_, _, file) = self.ignored.first()?;
        let keys: Vec<&str> = self.ignored.iter().map(|(k, _, _)| k.as_str()).collect();
        Some(format!(
            "warning: ignoring {} in {}: this workspace is not trusted to choose the \
             endpoint or key; add it to trusted_workspaces in your user config \
             (~/.config/brood/config.toml) or pass --trust",
            keys.join(", "),
            file.display()
        ))
    }
}

/// The user's `[pricing]` alone (for readers such as `brood agents`, which need
/// no session): empty when there is no user config.
pub fn user_pricing(paths: &ConfigPaths) -> Result<Pricing, ConfigError> {
    let Some(dir) = &paths.user_dir else {
        return Ok(Pricing::default());
    };
    let path = dir.join("config.toml");
    match read_file(&path)?.and_then(|mut t| t.remove("pricing")) {
        Some(toml::Value::Table(t)) => Pricing::from_table(&t).map_err(|e| ConfigError::Invalid {
            path: path.display().to_string(),
            detail: e.to_string(),
        }),
        _ => Ok(Pricing::default()),
    }
}

/// Whether `list` (the user's `trusted_workspaces`) names `workspace`; both sides
/// canonicalized. A list entry that does not exist names nothing.
fn lists_workspace(list: &toml::Value, workspace: &Path) -> Result<bool, String> {
    let bad = || "trusted_workspaces must be a list of directory paths".to_string();
    let entries = list.as_array().ok_or_else(bad)?;
    let here = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    for e in entries {
        let p = e.as_str().ok_or_else(bad)?;
        if std::fs::canonicalize(p).is_ok_and(|c| c == here) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn read_file(path: &Path) -> Result<Option<toml::Table>, ConfigError> {
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
    let invalid = |detail: String| ConfigError::Invalid {
        path: path.display().to_string(),
        detail,
    };
    // Check the whole shape (unknown keys, types) against this file alone, so the
    // error names this file.
    let parsed: ConfigFile = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    check_sections(&parsed, &path.display().to_string())?;
    toml::from_str::<toml::Table>(&text)
        .map(Some)
        .map_err(|e| invalid(e.to_string()))
}

/// Validate the nested sections of one layer with their own typed parsers.
fn check_sections(file: &ConfigFile, origin: &str) -> Result<(), ConfigError> {
    let invalid = |section: &str, detail: String| ConfigError::Invalid {
        path: origin.to_string(),
        detail: format!("[{section}] {detail}"),
    };
    if let Some(t) = &file.subagents {
        toml::Value::Table(t.clone())
            .try_into::<SubagentsConfig>()
            .map_err(|e| invalid("subagents", e.to_string()))?;
    }
    if let Some(t) = &file.models {
        toml::Value::Table(t.clone())
            .try_into::<BTreeMap<String, QuickModelConfig>>()
            .map_err(|e| invalid("models", e.to_string()))?;
    }
    if let Some(t) = &file.memory {
        toml::Value::Table(t.clone())
            .try_into::<MemoryConfig>()
            .map_err(|e| invalid("memory", e.to_string()))?;
    }
    if let Some(t) = &file.sandbox {
        toml::Value::Table(t.clone())
            .try_into::<SandboxConfig>()
            .map_err(|e| invalid("sandbox", e.to_string()))?;
    }
    if let Some(t) = &file.pricing {
        Pricing::from_table(t).map_err(|e| ConfigError::Invalid {
            path: origin.to_string(),
            detail: e.to_string(),
        })?;
    }
    if let Some(t) = &file.providers {
        let map = toml::Value::Table(t.clone())
            .try_into::<BTreeMap<String, ProviderOverride>>()
            .map_err(|e| invalid("providers", e.to_string()))?;
        for name in map.keys() {
            crate::model::preset::preset(name)
                .map_err(|e| invalid(&format!("providers.{name}"), e.to_string()))?;
        }
    }
    Ok(())
}

fn flatten(prefix: &str, table: toml::Table, source: &Source, out: &mut Layers) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, source, out),
            other => {
                out.insert(key, (other, source.clone()));
            }
        }
    }
}

fn unflatten(layers: &Layers) -> toml::Table {
    let mut root = toml::Table::new();
    for (key, (value, _)) in layers {
        let mut parts: Vec<&str> = key.split('.').collect();
        let last = parts.pop().unwrap_or_default();
        let mut table = &mut root;
        for p in parts {
            let entry = table
                .entry(p.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            match entry {
                toml::Value::Table(t) => table = t,
                _ => unreachable!("just made a table"),
            }
        }
        table.insert(last.to_string(), value.clone());
    }
    root
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

/// Parse an environment value into the TOML type its key wants.
fn env_value(var: &str, key: &str, raw: &str) -> Result<toml::Value, ConfigError> {
    let bad = |detail: &str| ConfigError::BadValue {
        source_name: format!("env {var}"),
        key: key.to_string(),
        value: raw.to_string(),
        detail: detail.to_string(),
    };
    let raw_t = raw.trim();
    Ok(match key {
        "api_timeout_secs"
        | "max_attempts"
        | "max_turns"
        | "tool_concurrency"
        | "max_answer_bytes"
        | "subagents.max_concurrent" => toml::Value::Integer(
            raw_t
                .parse::<i64>()
                .map_err(|_| bad("expected a whole number"))?,
        ),
        "stream" | "memory.enabled" => {
            toml::Value::Boolean(match raw_t.to_ascii_lowercase().as_str() {
                "1" | "true" | "on" | "yes" => true,
                "0" | "false" | "off" | "no" => false,
                _ => return Err(bad("expected on/off, true/false or 1/0")),
            })
        }
        _ => toml::Value::String(raw_t.to_string()),
    })
}

fn build(layers: Layers, user_dir: Option<PathBuf>) -> Result<Config, ConfigError> {
    let source_of = |key: &str| {
        layers
            .get(key)
            .map(|(_, s)| s.to_string())
            .unwrap_or_else(|| "default".into())
    };
    let merged: ConfigFile =
        toml::Value::Table(unflatten(&layers))
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid {
                path: "effective configuration".into(),
                detail: e.to_string(),
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
            .map_err(|e: toml::de::Error| ConfigError::Invalid {
                path: source_of("subagents"),
                detail: e.to_string(),
            })?;
    let models: BTreeMap<String, QuickModelConfig> =
        toml::Value::Table(merged.models.clone().unwrap_or_default())
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid {
                path: source_of("models"),
                detail: e.to_string(),
            })?;
    let memory: MemoryConfig = toml::Value::Table(merged.memory.clone().unwrap_or_default())
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Invalid {
            path: source_of("memory"),
            detail: e.to_string(),
        })?;
    let sandbox: SandboxConfig = toml::Value::Table(merged.sandbox.clone().unwrap_or_default())
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Invalid {
            path: source_of("sandbox"),
            detail: e.to_string(),
        })?;
    let providers: BTreeMap<String, ProviderOverride> =
        toml::Value::Table(merged.providers.clone().unwrap_or_default())
            .try_into::<BTreeMap<String, ProviderOverride>>()
            .map_err(|e: toml::de::Error| ConfigError::Invalid {
                path: source_of("providers"),
                detail: e.to_string(),
            })?
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
    let provenance = layers
        .iter()
        .map(|(k, (v, s))| (k.clone(), display_value(k, v), s.clone()))
        .collect();
    Ok(Config {
        provider: merged.provider.unwrap_or_else(|| "deepseek".into()),
        base_url: merged.base_url,
        model: merged.model,
        api_key_env: merged.api_key_env,
        api_timeout_secs: clamp_api_timeout(merged.api_timeout_secs),
        max_attempts,
        stream: merged.stream.unwrap_or(true),
        max_turns,
        tool_concurrency: tool_concurrency as usize,
        max_answer_bytes,
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
    })
}

/// The smallest accepted `max_answer_bytes`.
pub const MIN_MAX_ANSWER_BYTES: u64 = 64 * 1024;
/// The largest accepted `max_answer_bytes`.
pub const MAX_MAX_ANSWER_BYTES: u64 = 1 << 30;

/// `api_timeout_secs`: default 120, clamped to 1..=1800; 0 or unset means 120.
pub fn clamp_api_timeout(v: Option<u64>) -> u64 {
    match v {
        None | Some(0) => 120,
        Some(s) => s.clamp(1, 1800),
    }
}

/// Values shown by `config show`. No secret is stored in config — a key's value is
/// only ever read from the variable `api_key_env` names — so nothing known is
/// redacted; as a guard, a key whose last word names a secret value (`api_key`,
/// `token`, `secret`, `password`) is, while `max_tokens`, `token_budget` and
/// `api_key_env` (a variable's name) print.
fn display_value(key: &str, v: &toml::Value) -> String {
    let leaf = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    let last_word = leaf.rsplit(['_', '-']).next().unwrap_or(&leaf);
    let secret = matches!(last_word, "key" | "token" | "secret" | "password");
    if secret {
        "<redacted>".into()
    } else {
        v.to_string()
    }
}
