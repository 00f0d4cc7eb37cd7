//! The typed error of the sub-agent layer's configuration: the key and what is
//! wrong with its value. Re-exported by [`super::config`].

use thiserror::Error;

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("config key `{key}`: {problem}")]
pub struct ConfigError {
    /// The full key, e.g. `subagents.max_concurrent`.
    pub key: String,
    /// What is wrong and what is accepted.
    pub problem: String,
}

impl ConfigError {
    pub(super) fn new(key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            problem: problem.into(),
        }
    }
}
