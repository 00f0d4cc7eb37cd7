//! Loading the layers in order — the user's file, the workspace's (its user-only
//! keys ignored unless trusted), `BROOD_*` variables, command-line flags — into a
//! [`Config`].

use super::effective::{build, Config};
use super::error::ConfigError;
use super::file::{pricing_error, read_file, USER_ONLY_KEYS, USER_ONLY_SECTION_KEYS};
use super::layers::{display_value, flatten, Layers, Source};
use crate::model::pricing::Pricing;
use crate::runtime::mcp_config;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `[subagents] isolation`, which later layers may tighten but not loosen.
const ISOLATION_KEY: &str = "subagents.isolation";

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
    /// `--ledger`: the ledger's database URL (`ledger_url`).
    pub ledger_url: Option<String>,
}

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

/// Environment variables read, and the key each sets.
pub const ENV_KEYS: &[(&str, &str)] = &[
    ("BROOD_PROVIDER", "provider"),
    ("BROOD_BASE_URL", "base_url"),
    ("BROOD_LEDGER_URL", "ledger_url"),
    ("BROOD_MODEL", "model"),
    ("BROOD_API_KEY_ENV", "api_key_env"),
    ("BROOD_API_TIMEOUT_SECS", "api_timeout_secs"),
    ("BROOD_MAX_ATTEMPTS", "max_attempts"),
    ("BROOD_STREAM", "stream"),
    ("BROOD_MAX_TURNS", "max_turns"),
    ("BROOD_TOOL_CONCURRENCY", "tool_concurrency"),
    ("BROOD_MAX_ANSWER_BYTES", "max_answer_bytes"),
    ("BROOD_INSTRUCTIONS_MAX_BYTES", "instructions_max_bytes"),
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
        let mut mcp_servers = BTreeMap::new();
        let mut rules = crate::tool::RuleSet::new();
        let mut rule_notes = Vec::new();
        let permissions = |v: toml::Value,
                           file: &std::path::Path,
                           workspace: bool,
                           rules: &mut crate::tool::RuleSet,
                           notes: &mut Vec<String>| {
            crate::runtime::permissions::add_table(v, file, workspace, rules, notes)
                .map_err(|detail| ConfigError::invalid(file.display(), Some("permissions"), detail))
        };
        if let Some(dir) = &paths.user_dir {
            let path = dir.join("config.toml");
            if let Some(mut table) = read_file(&path)? {
                // Rules add up across files (never overwritten key by key).
                if let Some(v) = table.remove("permissions") {
                    permissions(v, &path, false, &mut rules, &mut rule_notes)?;
                }
                // Model ids hold dots (`gpt-4.1`): the table is read whole, not
                // flattened into dotted keys like the rest.
                if let Some(toml::Value::Table(t)) = table.remove("pricing") {
                    pricing =
                        Pricing::from_table(&t).map_err(|e| pricing_error(path.display(), &e))?;
                }
                if let Some(list) = table.remove("trusted_workspaces") {
                    trusted |= lists_workspace(&list, &paths.workspace).map_err(|detail| {
                        ConfigError::invalid(path.display(), Some("trusted_workspaces"), detail)
                    })?;
                }
                mcp_config::take_layer(&mut table, &path, &mut mcp_servers).map_err(invalid_in)?;
                flatten("", table, &Source::File(path.clone()), &mut layers);
            }
        }
        let workspace_file = paths.workspace.join(".brood").join("config.toml");
        if let Some(mut table) = read_file(&workspace_file)? {
            if table.contains_key("sandbox") {
                return Err(ConfigError::invalid(
                    workspace_file.display(),
                    Some("sandbox"),
                    "may only be set in the user's config \
                     (~/.config/brood/config.toml): a workspace must not widen what its \
                     shells may reach; remove the section",
                ));
            }
            if table.contains_key("pricing") {
                return Err(ConfigError::invalid(
                    workspace_file.display(),
                    Some("pricing"),
                    "may only be set in the user's config \
                     (~/.config/brood/config.toml): a workspace could hide what its runs \
                     spend; remove the section",
                ));
            }
            if trusted {
                mcp_config::take_layer(&mut table, &workspace_file, &mut mcp_servers)
                    .map_err(invalid_in)?;
            } else if let Some(v) = table.remove("mcp_servers") {
                ignored.push((
                    "mcp_servers".into(),
                    mcp_config::names_of(&v),
                    workspace_file.clone(),
                ));
            }
            if let Some(v) = table.remove("permissions") {
                permissions(v, &workspace_file, true, &mut rules, &mut rule_notes)?;
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
            // Isolation only tightens: a workspace cannot turn off the user's
            // `isolation = "worktree"`.
            let user_isolation = layers
                .get(ISOLATION_KEY)
                .filter(|(v, _)| {
                    v.as_str()
                        .is_some_and(|s| s.trim().eq_ignore_ascii_case("worktree"))
                })
                .cloned();
            flatten(
                "",
                table,
                &Source::File(workspace_file.clone()),
                &mut layers,
            );
            if let Some(kept) = user_isolation {
                layers.insert(ISOLATION_KEY.to_string(), kept);
            }
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
        if let Some(v) = &flags.ledger_url {
            flag(&mut layers, "ledger_url", "--ledger", v.clone().into());
        }
        if let Some(v) = flags.max_turns {
            flag(&mut layers, "max_turns", "--max-turns", i64::from(v).into());
        }
        let mut mcp_notes = Vec::new();
        mcp_config::read_dot_mcp(
            &paths.workspace,
            trusted,
            &mut mcp_servers,
            &mut ignored,
            &mut mcp_notes,
        )
        .map_err(invalid_in)?;
        let mut config = build(layers, paths.user_dir.clone())?;
        config.ignored = ignored;
        config.pricing = pricing;
        config.mcp_servers = mcp_servers;
        config.mcp_notes = mcp_notes;
        crate::runtime::permissions::add_claude_settings(
            env,
            &paths.workspace,
            &mut rules,
            &mut rule_notes,
        );
        config.permissions = rules;
        config.permission_notes = rule_notes;
        Ok(config)
    }

    /// One warning line naming the files and the workspace keys that were ignored,
    /// or `None` when nothing was.
    pub fn ignored_warning(&self) -> Option<String> {
        if self.ignored.is_empty() {
            return None;
        }
        let mut files: Vec<&Path> = Vec::new();
        for (_, _, f) in &self.ignored {
            if !files.contains(&f.as_path()) {
                files.push(f);
            }
        }
        let parts: Vec<String> = files
            .iter()
            .map(|f| {
                let keys: Vec<&str> = self
                    .ignored
                    .iter()
                    .filter(|(_, _, g)| g == f)
                    .map(|(k, _, _)| k.as_str())
                    .collect();
                format!("{} in {}", keys.join(", "), f.display())
            })
            .collect();
        let mcp = self
            .ignored
            .iter()
            .any(|(k, _, _)| k == "mcp_servers" || k == "mcpServers");
        Some(format!(
            "warning: ignoring {}: this workspace is not trusted to choose the \
             endpoint or key{}; add it to trusted_workspaces in your user config \
             (~/.config/brood/config.toml) or pass --trust",
            parts.join("; "),
            if mcp {
                " or MCP servers (commands brood would run)"
            } else {
                ""
            }
        ))
    }
}

/// A problem an MCP part of the config found in a file.
fn invalid_in((path, detail): (PathBuf, String)) -> ConfigError {
    ConfigError::invalid(path.display(), Some("mcp_servers"), detail)
}

/// The user's `[pricing]` alone (for readers such as `brood agents`, which need
/// no session): empty when there is no user config.
pub fn user_pricing(paths: &ConfigPaths) -> Result<Pricing, ConfigError> {
    let Some(dir) = &paths.user_dir else {
        return Ok(Pricing::default());
    };
    let path = dir.join("config.toml");
    match read_file(&path)?.and_then(|mut t| t.remove("pricing")) {
        Some(toml::Value::Table(t)) => {
            Pricing::from_table(&t).map_err(|e| pricing_error(path.display(), &e))
        }
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
        | "instructions_max_bytes"
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
