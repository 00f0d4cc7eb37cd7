//! The top-level `[models.<alias>]` quick models: the file's table
//! ([`QuickModelConfig`]) and its validated form ([`QuickModels`]), looked up
//! case-insensitively by alias. Re-exported by [`super::config`].

use super::config_error::ConfigError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One `[models.<alias>]` quick model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuickModelConfig {
    /// The provider preset it runs on.
    pub provider: String,
    /// The model id at that provider.
    pub model: String,
}

/// Validated quick models, looked up case-insensitively by alias.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QuickModels {
    by_alias: BTreeMap<String, QuickModelConfig>,
}

impl QuickModels {
    /// Validate the `[models]` table: non-empty provider and model, no two aliases
    /// that differ only in case.
    pub fn from_config(table: &BTreeMap<String, QuickModelConfig>) -> Result<Self, ConfigError> {
        let mut by_alias: BTreeMap<String, QuickModelConfig> = BTreeMap::new();
        let mut original: BTreeMap<String, &str> = BTreeMap::new();
        for (alias, q) in table {
            let key = format!("models.{alias}");
            let lower = alias.trim().to_ascii_lowercase();
            if lower.is_empty() {
                return Err(ConfigError::new(key, "the alias is empty"));
            }
            for (field, v) in [("provider", &q.provider), ("model", &q.model)] {
                if v.trim().is_empty() {
                    return Err(ConfigError::new(
                        format!("{key}.{field}"),
                        "must not be empty",
                    ));
                }
            }
            if let Some(prev) = original.insert(lower.clone(), alias) {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "aliases are case-insensitive and `models.{prev}` already uses this name"
                    ),
                ));
            }
            by_alias.insert(
                lower,
                QuickModelConfig {
                    provider: q.provider.trim().to_string(),
                    model: q.model.trim().to_string(),
                },
            );
        }
        Ok(QuickModels { by_alias })
    }

    /// The quick model called `alias` (case-insensitive).
    pub fn get(&self, alias: &str) -> Option<&QuickModelConfig> {
        self.by_alias.get(&alias.trim().to_ascii_lowercase())
    }

    /// Aliases (lowercase), sorted.
    pub fn aliases(&self) -> Vec<&str> {
        self.by_alias.keys().map(String::as_str).collect()
    }
}
