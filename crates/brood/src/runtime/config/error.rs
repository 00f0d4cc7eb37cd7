//! A configuration problem ([`ConfigError`]): each names the key and where it was set.

use std::path::PathBuf;
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
