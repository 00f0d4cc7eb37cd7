//! Provider presets (`--provider NAME`): base URL, key variable and default model of the
//! OpenAI-compatible endpoints people use. `deepseek` is the default. Flags
//! (`--base-url`, `--model`, `--api-key-env`) override a preset's fields.

use super::openai::ProviderConfig;
use super::ModelError;

/// A named endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// Lowercase name, as given to `--provider`.
    pub name: &'static str,
    /// Its default endpoint.
    pub base_url: &'static str,
    /// The env var holding the key; `None` for local servers that need none.
    pub api_key_env: Option<&'static str>,
    /// The model used when none is given; `None` when it depends on what the server
    /// loaded (ask [`super::Model::list_models`]).
    pub default_model: Option<&'static str>,
    /// Whether `GET /models` lists the ids the endpoint accepts (see
    /// [`ProviderConfig::lists_models`]). False for llama.cpp's servers: they serve
    /// one model whatever `model` says and list it under its file path.
    pub lists_models: bool,
}

/// The preset used when none is chosen.
pub const DEFAULT_PRESET: &str = "deepseek";

/// Every preset, the default first.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "deepseek",
        base_url: "https://api.deepseek.com",
        api_key_env: Some("DEEPSEEK_API_KEY"),
        default_model: Some("deepseek-chat"),
        lists_models: true,
    },
    Preset {
        name: "openai",
        base_url: "https://api.openai.com/v1",
        api_key_env: Some("OPENAI_API_KEY"),
        default_model: Some("gpt-4o-mini"),
        lists_models: true,
    },
    Preset {
        name: "openrouter",
        base_url: "https://openrouter.ai/api/v1",
        api_key_env: Some("OPENROUTER_API_KEY"),
        default_model: Some("deepseek/deepseek-chat"),
        lists_models: true,
    },
    Preset {
        name: "ollama",
        base_url: "http://127.0.0.1:11434/v1",
        api_key_env: None,
        default_model: None,
        lists_models: true,
    },
    Preset {
        name: "vllm",
        base_url: "http://127.0.0.1:8000/v1",
        api_key_env: None,
        default_model: None,
        lists_models: true,
    },
    Preset {
        name: "sglang",
        base_url: "http://127.0.0.1:30000/v1",
        api_key_env: None,
        default_model: None,
        lists_models: true,
    },
    Preset {
        name: "llamacpp",
        base_url: "http://127.0.0.1:8080/v1",
        api_key_env: None,
        default_model: None,
        lists_models: false,
    },
    Preset {
        name: "local",
        base_url: "http://127.0.0.1:8080/v1",
        api_key_env: None,
        default_model: None,
        lists_models: false,
    },
];

/// The names of all presets, the default first.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// Find a preset by name (case-insensitive, surrounding blanks ignored).
/// Unknown → [`ModelError::UnknownProvider`] listing every name.
pub fn preset(name: &str) -> Result<&'static Preset, ModelError> {
    let wanted = name.trim().to_ascii_lowercase();
    PRESETS
        .iter()
        .find(|p| p.name == wanted)
        .ok_or_else(|| ModelError::UnknownProvider {
            name: name.to_string(),
            known: preset_names().into_iter().map(str::to_string).collect(),
        })
}

impl Preset {
    /// A provider config for this preset with the defaults and no key; set
    /// [`ProviderConfig::api_key`] (e.g. from [`Preset::api_key_env`]) before use.
    pub fn config(&self) -> ProviderConfig {
        let mut c = ProviderConfig::new(self.name, self.base_url);
        c.api_key_env = self.api_key_env.map(str::to_string);
        c.lists_models = self.lists_models;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive_and_unknown_lists_all() {
        assert_eq!(preset(" DeepSeek ").unwrap().name, "deepseek");
        assert_eq!(
            preset("LLAMACPP").unwrap().base_url,
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(PRESETS[0].name, DEFAULT_PRESET);
        let err = preset("anthropic").unwrap_err();
        let text = err.to_string();
        for name in preset_names() {
            assert!(text.contains(name), "{text} lacks {name}");
        }
        assert!(text.contains("anthropic"));
    }

    #[test]
    fn preset_config_carries_key_variable() {
        let c = preset("openai").unwrap().config();
        assert_eq!(c.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(c.base_url, "https://api.openai.com/v1");
        assert!(preset("ollama").unwrap().config().api_key_env.is_none());
        assert!(preset("vllm").unwrap().config().lists_models);
        assert!(!preset("local").unwrap().config().lists_models);
        assert!(!preset("llamacpp").unwrap().config().lists_models);
    }
}
