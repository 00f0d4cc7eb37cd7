//! Building model providers from the configuration: a preset name, optional
//! base-URL/model/key-variable overrides, and the key read from the environment.
//!
//! A provider is built once per endpoint and shared by every run of the tree that
//! routes to it (the factory keeps it): one HTTP client, so one connection pool —
//! a thousand children on one endpoint reuse its connections (HTTP/1.1 keep-alive)
//! or share one (HTTP/2), instead of each child opening its own pool.

use super::config::{Config, Source};
use crate::model::openai::{OpenAiProvider, ProviderConfig};
use crate::model::preset::{preset, Preset};
use crate::model::{Model, ModelError};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// A provider ready for use, and the model id to ask it for.
#[derive(Clone)]
pub struct Route {
    /// The provider's (preset's) name.
    pub provider_name: String,
    /// The model id requests name.
    pub model_id: String,
    /// The provider.
    pub model: Arc<dyn Model>,
}

/// Builds providers by name; the main one from the top-level keys. Clones share
/// what was built: each endpoint's provider (and its connection pool) is built once.
#[derive(Clone)]
pub struct ProviderFactory {
    config: Arc<Config>,
    env: Arc<BTreeMap<String, String>>,
    /// Providers built so far, by endpoint (preset, base URL, key variable).
    built: Arc<Mutex<HashMap<String, Arc<dyn Model>>>>,
}

impl ProviderFactory {
    /// A factory reading `config` and API keys from `env`.
    pub fn new(config: Arc<Config>, env: Arc<BTreeMap<String, String>>) -> Self {
        ProviderFactory {
            config,
            env,
            built: Arc::default(),
        }
    }

    /// The session's main provider and model.
    pub fn main(&self) -> Result<Route, ModelError> {
        let preset = preset(&self.config.provider)?;
        let model_id = main_model_id(&self.config)?;
        let section = self.config.providers.get(preset.name);
        self.build(
            preset,
            self.config
                .base_url
                .clone()
                .or_else(|| section.and_then(|o| o.base_url.clone())),
            self.config
                .api_key_env
                .clone()
                .or_else(|| section.and_then(|o| o.api_key_env.clone())),
            model_id,
        )
    }

    /// A provider by preset name with `model_id`. The main provider's overrides
    /// (base URL, key variable) apply when `name` is the main provider; any other
    /// preset takes `[providers.<name>]`.
    pub fn named(&self, name: &str, model_id: &str) -> Result<Route, ModelError> {
        let preset = preset(name)?;
        let same = preset.name.eq_ignore_ascii_case(&self.config.provider);
        let (base, key_env) = if same {
            (
                self.config.base_url.clone(),
                self.config.api_key_env.clone(),
            )
        } else {
            match self.config.providers.get(preset.name) {
                Some(o) => (o.base_url.clone(), o.api_key_env.clone()),
                None => (None, None),
            }
        };
        self.build(preset, base, key_env, model_id.to_string())
    }

    fn build(
        &self,
        preset: &Preset,
        base_url: Option<String>,
        key_env: Option<String>,
        model_id: String,
    ) -> Result<Route, ModelError> {
        let key_env = key_env.or_else(|| preset.api_key_env.map(str::to_string));
        let api_key = match &key_env {
            Some(var) => match self.env.get(var) {
                Some(v) if !v.trim().is_empty() => Some(v.trim().to_string()),
                // An explicitly named variable must be set; a preset's default too,
                // unless the endpoint was overridden (local servers need no key).
                _ if base_url.is_some() && self.config.api_key_env.is_none() => None,
                _ => {
                    return Err(ModelError::MissingKey {
                        env_var: var.clone(),
                    })
                }
            },
            None => None,
        };
        let mut cfg = ProviderConfig::new(
            preset.name,
            base_url.unwrap_or_else(|| preset.base_url.to_string()),
        );
        cfg.api_key = api_key;
        cfg.api_key_env = key_env;
        cfg.api_timeout_secs = self.config.api_timeout_secs;
        cfg.max_attempts = self.config.max_attempts;
        cfg.max_answer_bytes = self.config.max_answer_bytes;
        cfg.stream = self.config.stream;
        cfg.lists_models = self
            .config
            .providers
            .get(preset.name)
            .and_then(|o| o.lists_models)
            .unwrap_or(preset.lists_models);
        cfg.ca_cert = self
            .config
            .providers
            .get(preset.name)
            .and_then(|o| o.ca_cert.clone());
        // The model id is not part of the provider (each request names it): every
        // route to this endpoint shares one provider and its connection pool.
        let key = format!(
            "{}\n{}\n{}",
            cfg.name,
            cfg.base_url,
            cfg.api_key_env.as_deref().unwrap_or("")
        );
        let model = {
            let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
            match built.get(&key) {
                Some(m) => m.clone(),
                None => {
                    let m: Arc<dyn Model> = Arc::new(OpenAiProvider::new(cfg)?);
                    built.insert(key, m.clone());
                    m
                }
            }
        };
        Ok(Route {
            provider_name: preset.name.to_string(),
            model_id,
            model,
        })
    }
}

/// The main model id: `model` from the config, else the preset's default.
pub fn main_model_id(config: &Config) -> Result<String, ModelError> {
    if let Some(m) = &config.model {
        return Ok(m.clone());
    }
    let p = preset(&config.provider)?;
    p.default_model.map(str::to_string).ok_or_else(|| {
        ModelError::Config(format!(
            "provider '{}' has no default model; pass --model (or set `model` in config.toml)",
            p.name
        ))
    })
}

/// Where the main provider's requests go and which variable holds its key, each
/// with where it came from (`brood config show`, `brood doctor`). Mirrors
/// [`ProviderFactory::main`] without reading the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MainEndpoint {
    /// The preset's name.
    pub provider: String,
    /// The endpoint, and where it was set.
    pub base_url: (String, Source),
    /// The model id, and where it was set.
    pub model: (String, Source),
    /// The key variable's name (never its value); `None`: the endpoint takes no key.
    pub api_key_env: Option<(String, Source)>,
    /// Whether a run refuses to start without that variable set.
    pub key_required: bool,
    /// Whether `GET /models` names the ids this endpoint accepts.
    pub lists_models: bool,
}

/// Resolve the main endpoint as a run would.
pub fn main_endpoint(config: &Config) -> Result<MainEndpoint, ModelError> {
    let preset = preset(&config.provider)?;
    let model_id = main_model_id(config)?;
    let section = config.providers.get(preset.name);
    let section_key = |field: &str| config.source_of(&format!("providers.{}.{field}", preset.name));
    let base_url = match (&config.base_url, section.and_then(|o| o.base_url.clone())) {
        (Some(b), _) => Some((b.clone(), config.source_of("base_url"))),
        (None, Some(b)) => Some((b, section_key("base_url"))),
        (None, None) => None,
    };
    let key_env = match (
        &config.api_key_env,
        section.and_then(|o| o.api_key_env.clone()),
    ) {
        (Some(k), _) => Some((k.clone(), config.source_of("api_key_env"))),
        (None, Some(k)) => Some((k, section_key("api_key_env"))),
        (None, None) => preset
            .api_key_env
            .map(|k| (k.to_string(), Source::Preset(preset.name.into()))),
    };
    // As in `build`: a preset's default key variable is optional once the endpoint
    // was moved (local servers need no key); one named explicitly never is.
    let key_required = key_env.is_some() && !(base_url.is_some() && config.api_key_env.is_none());
    let model_source = if config.model.is_some() {
        config.source_of("model")
    } else {
        Source::Preset(preset.name.into())
    };
    Ok(MainEndpoint {
        provider: preset.name.to_string(),
        base_url: base_url.unwrap_or_else(|| {
            (
                preset.base_url.to_string(),
                Source::Preset(preset.name.into()),
            )
        }),
        model: (model_id, model_source),
        api_key_env: key_env,
        key_required,
        lists_models: section
            .and_then(|o| o.lists_models)
            .unwrap_or(preset.lists_models),
    })
}
