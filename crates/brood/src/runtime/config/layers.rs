//! The layers as one flat map from dotted key to (value, [`Source`]), later layers
//! overwriting, and how a value is shown (`brood config show`).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

/// Flat map from dotted key to (value, source), later layers overwriting.
pub(super) type Layers = BTreeMap<String, (toml::Value, Source)>;

pub(super) fn flatten(prefix: &str, table: toml::Table, source: &Source, out: &mut Layers) {
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

pub(super) fn unflatten(layers: &Layers) -> toml::Table {
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

/// Values shown by `config show`. No secret is stored in config — a key's value is
/// only ever read from the variable `api_key_env` names — so nothing known is
/// redacted; as a guard, a key whose last word names a secret value (`api_key`,
/// `token`, `secret`, `password`) is, while `max_tokens`, `token_budget` and
/// `api_key_env` (a variable's name) print.
pub(super) fn display_value(key: &str, v: &toml::Value) -> String {
    let leaf = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    let last_word = leaf.rsplit(['_', '-']).next().unwrap_or(&leaf);
    let secret = matches!(last_word, "key" | "token" | "secret" | "password");
    if secret {
        "<redacted>".into()
    } else if leaf == "ledger_url" {
        // A database URL may carry its password.
        match v.as_str() {
            Some(url) => format!("{:?}", crate::ledger::redact_url(url)),
            None => v.to_string(),
        }
    } else {
        v.to_string()
    }
}
