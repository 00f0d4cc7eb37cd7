//! Model routing: which provider and model a child runs on.
//!
//! [`resolve_route`] walks this table top to bottom and stops at the first row that
//! applies. `source` in the returned [`Route`] names the row.
//!
//! | # | row | source |
//! |---|-----|--------|
//! | 1 | `model` given in the spawn call | `call` |
//! | 2 | `[subagents.models]` entry for the definition name, else the spelling used (alias), else the canonical role (case-insensitive) | `subagents.models` |
//! | 3 | the role's named key: `worker_model` for general, implementer and verifier (the roles that do the work); `explorer_model` for explore; `awaiter_model` for plan; `review_model` for review; `custom_model` for custom | `subagents.<key>` |
//! | 4 | the definition's own `model`, through `[subagents.model_aliases]`; `inherit` — or another tool's name (`sonnet`, `claude-…`) with no mapping — is the main model (see [`AgentDefinition::route_model`]) | `definition`, `definition:inherit`, `definition:unmapped` |
//! | 5 | `[subagents] default_model` | `subagents.default_model` |
//! | 6 | `subagent_model` | `subagent_model` |
//! | 7 | `subagent_provider` alone: the main model on that provider | `subagent_provider` |
//! | 8 | nothing set: the main provider and model | `main` |
//!
//! A model name chosen by rows 1–6 is then placed on a provider the same way
//! everywhere: the name of a quick model (`[models.<alias>]`, case-insensitive) gives
//! that quick model's provider and model; any other name is a raw model id on
//! `subagent_provider` when set, else on the main provider.
//!
//! The user's config (rows 2–3) is preferred over the definition's `model` (row 4):
//! definitions often come with a repository, while what a child may cost is the
//! user's call. An explicit `model` in the call is the most specific request and wins.
//!
//! [`AgentDefinition::route_model`]: super::definition::AgentDefinition::route_model

use super::catalog::AgentKind;
use super::config::{ModelOverrides, QuickModels};
use super::definition::ModelChoice;
use super::role::Role;
use serde::Serialize;

/// Where a child's model calls go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    /// The provider preset.
    pub provider: String,
    /// The model id at that provider.
    pub model: String,
    /// Which precedence row chose it (see the module docs).
    pub source: &'static str,
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// The named `[subagents]` key that applies to `role`.
pub fn named_key(role: Role) -> &'static str {
    match role {
        Role::General | Role::Implementer | Role::Verifier => "worker_model",
        Role::Explore => "explorer_model",
        Role::Plan => "awaiter_model",
        Role::Review => "review_model",
        Role::Custom => "custom_model",
    }
}

fn named_value(cfg: &ModelOverrides, role: Role) -> (Option<&str>, &'static str) {
    let (v, source) = match role {
        Role::General | Role::Implementer | Role::Verifier => {
            (&cfg.worker_model, "subagents.worker_model")
        }
        Role::Explore => (&cfg.explorer_model, "subagents.explorer_model"),
        Role::Plan => (&cfg.awaiter_model, "subagents.awaiter_model"),
        Role::Review => (&cfg.review_model, "subagents.review_model"),
        Role::Custom => (&cfg.custom_model, "subagents.custom_model"),
    };
    (v.as_deref(), source)
}

/// Choose the route of a child of `kind` (see the table in the module docs).
/// `main` is the session's `(provider, model)`.
pub fn resolve_route(
    cfg: &ModelOverrides,
    quick: &QuickModels,
    kind: &AgentKind,
    explicit_model: Option<&str>,
    main: (&str, &str),
) -> Route {
    let place = |name: &str, source: &'static str| -> Route {
        match quick.get(name) {
            Some(q) => Route {
                provider: q.provider.clone(),
                model: q.model.clone(),
                source,
            },
            None => Route {
                provider: cfg
                    .subagent_provider
                    .clone()
                    .unwrap_or_else(|| main.0.to_string()),
                model: name.to_string(),
                source,
            },
        }
    };

    if let Some(m) = non_empty(explicit_model) {
        return place(m, "call");
    }

    let mut keys: Vec<String> = Vec::new();
    match kind {
        AgentKind::Definition(d) => keys.push(d.name.to_ascii_lowercase()),
        AgentKind::Role { name_used, .. } => keys.push(name_used.to_ascii_lowercase()),
    }
    keys.push(kind.role().as_str().to_string());
    if let Some(m) = keys.iter().find_map(|k| cfg.map.get(k)) {
        return place(m, "subagents.models");
    }

    if let (Some(m), source) = named_value(cfg, kind.role()) {
        return place(m, source);
    }
    if let Some(d) = kind.definition() {
        let main_route = |source| Route {
            provider: main.0.to_string(),
            model: main.1.to_string(),
            source,
        };
        match d.route_model(quick, &cfg.aliases) {
            ModelChoice::Unset => {}
            ModelChoice::Named(m) => return place(m, "definition"),
            ModelChoice::Inherit => return main_route("definition:inherit"),
            ModelChoice::Unmapped(_) => return main_route("definition:unmapped"),
        }
    }
    if let Some(m) = non_empty(cfg.default_model.as_deref()) {
        return place(m, "subagents.default_model");
    }
    if let Some(m) = non_empty(cfg.subagent_model.as_deref()) {
        return place(m, "subagent_model");
    }
    if let Some(p) = non_empty(cfg.subagent_provider.as_deref()) {
        return Route {
            provider: p.to_string(),
            model: main.1.to_string(),
            source: "subagent_provider",
        };
    }
    Route {
        provider: main.0.to_string(),
        model: main.1.to_string(),
        source: "main",
    }
}
