//! Layered configuration: built-in defaults, then `~/.config/brood/config.toml`,
//! then `<workspace>/.brood/config.toml`, then `BROOD_*` environment variables,
//! then command-line flags; a later layer wins key by key. Every effective value
//! remembers where it came from (`brood config show`). Unknown keys and bad values
//! are errors naming the key and the file (or variable, or flag).

mod effective;
mod error;
mod file;
mod layers;
mod load;

pub use crate::model::openai::clamp_api_timeout;
pub use effective::{Config, MAX_MAX_ANSWER_BYTES, MIN_MAX_ANSWER_BYTES};
pub use error::ConfigError;
pub use file::{
    ConfigFile, ProviderOverride, SandboxConfig, USER_ONLY_KEYS, USER_ONLY_SECTION_KEYS,
};
pub use layers::Source;
pub use load::{user_pricing, ConfigPaths, Overrides, ENV_KEYS};
