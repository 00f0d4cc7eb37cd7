//! The session's tool set checked before it opens: the embedder's tools, the
//! `ask_before` names, and the shell sandbox's options from the config.

use super::config::Config;
use super::error::SessionError;
use crate::tool;
use std::sync::Arc;

/// Every `ask_before` name must be a tool the session makes (built-in, memory or
/// the embedder's); delegation tools are bounded by the `[subagents]` limits instead.
pub(super) fn check_ask_before(
    ask: &std::collections::BTreeSet<String>,
    extra: &[Arc<dyn tool::Tool>],
) -> Result<(), SessionError> {
    let accepted: Vec<String> = tool::builtin_tools(&tool::BuiltinOptions::default())
        .iter()
        .map(|t| t.name().to_string())
        .chain(
            crate::subagent::role::MEMORY_READ_TOOLS
                .iter()
                .chain([crate::subagent::role::REMEMBER_TOOL].iter())
                .map(|n| n.to_string()),
        )
        .chain(extra.iter().map(|t| t.name().to_string()))
        .collect();
    match ask.iter().find(|n| !accepted.contains(n)) {
        Some(name) => Err(SessionError::AskUnknownTool {
            name: name.clone(),
            accepted,
        }),
        None => Ok(()),
    }
}

/// The embedder's tools, refused when a name is empty, repeated, or taken by a
/// built-in or delegation tool (the model could not tell them apart).
pub(super) fn check_extra_tools(
    tools: Vec<Arc<dyn tool::Tool>>,
) -> Result<Vec<Arc<dyn tool::Tool>>, SessionError> {
    let mut taken: std::collections::BTreeSet<String> =
        tool::builtin_tools(&tool::BuiltinOptions::default())
            .iter()
            .map(|t| t.name().to_string())
            .chain(
                crate::subagent::definition::DELEGATION_TOOLS
                    .iter()
                    .chain(crate::subagent::role::MEMORY_READ_TOOLS.iter())
                    .chain([crate::subagent::role::REMEMBER_TOOL].iter())
                    .map(|n| n.to_string()),
            )
            .collect();
    for t in &tools {
        let name = t.name();
        if name.is_empty() || !taken.insert(name.to_string()) {
            return Err(SessionError::ToolName {
                name: name.to_string(),
            });
        }
    }
    Ok(tools)
}

/// The shell sandbox's options from the user's `[sandbox]`, and the provider key
/// variables no shell may ever see (every preset's, and every configured one).
pub fn sandbox_options(config: &Config) -> tool::sandbox::SandboxOptions {
    let mut deny: Vec<String> = crate::model::preset::PRESETS
        .iter()
        .filter_map(|p| p.api_key_env.map(str::to_string))
        .collect();
    deny.extend(config.api_key_env.clone());
    deny.extend(
        config
            .providers
            .values()
            .filter_map(|o| o.api_key_env.clone()),
    );
    deny.push("BROOD_API_KEY".into());
    let s = &config.sandbox;
    tool::sandbox::SandboxOptions {
        network: s.network.unwrap_or(false),
        env: tool::sandbox::EnvPolicy {
            allow: s.env_allow.clone().unwrap_or_default(),
            deny,
        },
        read_allow: s.read_allow.clone().unwrap_or_default(),
        write_allow: s.write_allow.clone().unwrap_or_default(),
    }
}
