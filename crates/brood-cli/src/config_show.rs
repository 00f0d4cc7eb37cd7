//! `brood config show`: every effective value — top-level, the resolved endpoint,
//! model and key variable, `[subagents]` after defaults and clamps, each role's
//! turns and shell — with where it came from. It runs the checks `brood run` runs
//! (`Config::check`), so a value `run` refuses is refused here, naming file and key.

use brood::runtime::config::{Config, Source};
use brood::runtime::provider::main_endpoint;
use brood::runtime::Checked;
use brood::subagent::{AgentCatalog, Role};
use brood::tool::sandbox::ShellMode;
use std::path::Path;

/// Where a value came from, in words (`user file …`, `workspace file …`, `env …`).
pub fn origin(config: &Config, source: &Source) -> String {
    match source {
        Source::File(p) if config.user_dir.as_ref().is_some_and(|d| p.starts_with(d)) => {
            format!("user file {}", p.display())
        }
        Source::File(p) => format!("workspace file {}", p.display()),
        other => other.to_string(),
    }
}

pub fn print(config: &Config, checked: &Checked, ws: &Path) -> u8 {
    let endpoint = main_endpoint(config);
    let shown = std::cell::RefCell::new(Vec::<String>::new());
    let line = |key: &str, value: String, source: String| {
        outln!("{key} = {value}    # {source}");
        shown.borrow_mut().push(key.to_string());
    };
    for (key, value, source) in config.effective() {
        // The endpoint as a run resolves it, not "(preset)".
        let resolved = match (&endpoint, key.as_str()) {
            (Ok(e), "base_url") => Some((format!("{:?}", e.base_url.0), e.base_url.1.clone())),
            (Ok(e), "model") => Some((format!("{:?}", e.model.0), e.model.1.clone())),
            (Ok(e), "api_key_env") => Some(match &e.api_key_env {
                Some((name, s)) => (format!("{name:?}"), s.clone()),
                None => ("(none: this endpoint takes no key)".into(), Source::Default),
            }),
            _ => None,
        };
        if key.contains('.') {
            continue; // nested keys follow, resolved, below
        }
        match resolved {
            Some((v, s)) => line(&key, v, origin(config, &s)),
            None => line(&key, value, origin(config, &source)),
        }
    }
    if let Err(e) = &endpoint {
        outln!("# warning: the main endpoint cannot be resolved: {e}");
    }
    let memory_source = match config.source_of("memory.enabled") {
        Source::Default if checked.memory => Source::Env("BROOD_MEMORY".into()),
        s => s,
    };
    line(
        "memory.enabled",
        checked.memory.to_string(),
        origin(config, &memory_source),
    );

    // [subagents] after defaults and clamps.
    let s = &checked.settings;
    let none = |v: Option<u64>, what: &str| v.map_or_else(|| what.to_string(), |n| n.to_string());
    let usd = |v: Option<f64>| v.map_or_else(|| "(none)".to_string(), |n| n.to_string());
    let choice = |c: &Option<brood::model::ToolChoice>| match c {
        None => "(the session's)".to_string(),
        Some(brood::model::ToolChoice::Named(n)) => format!("{n:?}"),
        Some(other) => format!("{other:?}").to_lowercase(),
    };
    let rows: Vec<(&str, String)> = vec![
        ("enabled", s.enabled.to_string()),
        ("max_concurrent", s.max_concurrent.to_string()),
        ("launch_concurrency", s.launch_concurrency.to_string()),
        ("max_depth", s.max_depth.to_string()),
        ("max_total", s.max_total.to_string()),
        (
            "max_turns",
            none(
                s.max_turns.map(u64::from),
                "(per role: 20 read-only, 50 others)",
            ),
        ),
        ("wall_time_secs", s.wall_time.as_secs().to_string()),
        ("token_budget", none(s.token_budget, "(none)")),
        ("tree_token_budget", none(s.tree_token_budget, "(none)")),
        ("cost_budget_usd", usd(s.cost_budget_usd)),
        ("tree_cost_budget_usd", usd(s.tree_cost_budget_usd)),
        ("api_timeout_secs", s.api_timeout.as_secs().to_string()),
        (
            "heartbeat_timeout_secs",
            s.heartbeat_timeout.as_secs().to_string(),
        ),
        ("context_cap_bytes", s.context_cap_bytes.to_string()),
        ("tool_choice", choice(&s.tool_choice)),
        ("first_tool_choice", choice(&s.first_tool_choice)),
    ];
    for (k, v) in rows {
        let key = format!("subagents.{k}");
        let src = config.source_of(&key);
        let from = match src {
            Source::Default if k == "api_timeout_secs" => "the top-level api_timeout_secs".into(),
            _ => origin(config, &src),
        };
        line(&key, v, from);
    }
    // Whatever else some layer set: models, [providers.*], [subagents.models], …
    for (key, value, source) in &config.provenance {
        if !shown.borrow().contains(key) {
            line(key, value.clone(), origin(config, source));
        }
    }
    // [pricing], from the user's config only.
    for (key, value, source) in config.effective() {
        if key.starts_with("pricing.") {
            line(&key, value, origin(config, &source));
        }
    }
    for (key, value, file) in &config.ignored {
        outln!(
            "# ignored: {key} = {value}    # {} (untrusted workspace; see trusted_workspaces, --trust)",
            file.display()
        );
    }
    for a in &checked.adjustments {
        outln!("# clamped: {a}");
    }
    mcp_servers(config);

    // Permission rules: every list, with the file each rule came from.
    outln!();
    outln!("# permission rules (deny beats ask beats allow)");
    if config.permissions.is_empty() {
        outln!("# (none)");
    }
    for r in config.permissions.rules() {
        outln!("# {} {}    # {}", r.kind.as_str(), r.rule, r.source);
    }
    for n in &config.permission_notes {
        outln!("# ignored: {n}");
    }

    outln!();
    outln!("# roles: most turns per child");
    for role in Role::ALL {
        let turns = s.max_turns.unwrap_or_else(|| role.default_max_turns());
        let source = if s.max_turns.is_some() {
            "subagents.max_turns"
        } else {
            "role default"
        };
        outln!("# role {}: max_turns {turns} ({source})", role.as_str());
    }

    // What each role's shell gets on this kernel (docs/SECURITY.md).
    let sandbox = brood::tool::Sandbox::with_options(brood::runtime::sandbox_options(config));
    outln!();
    outln!("# shell sandbox on this kernel");
    for (roles, mode) in [
        ("explore, plan", Some(ShellMode::ReadOnly)),
        (
            "parent, general, implementer, verifier, custom",
            Some(ShellMode::Writer),
        ),
        ("review", None),
    ] {
        match mode {
            Some(m) => outln!("# {roles}: {}", sandbox.describe(m, ws)),
            None => outln!("# {roles}: no shell"),
        }
    }
    // Definitions only narrow their shells' network; say where one does, or asks
    // for what it cannot get.
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let user_agents = AgentCatalog::user_dirs(config.user_dir.as_deref(), &env);
    for d in AgentCatalog::load(ws, &user_agents).definitions() {
        let note = match (d.network, sandbox.options().network) {
            (Some(false), true) => "network none (network: false)",
            (Some(true), false) => {
                "network none (its `network: true` grants nothing: only [sandbox] \
                 network in your user config does)"
            }
            _ => continue,
        };
        outln!("# agent {} ({}): {note}", d.name, d.path.display());
    }
    for d in sandbox.degradations() {
        outln!("# warning: {d}");
    }
    0
}

/// `[mcp_servers]` and a trusted `.mcp.json`: each server, its state, how it is
/// reached and which roles get its tools (`brood mcp list` starts them and names
/// the tools).
fn mcp_servers(config: &Config) {
    if config.mcp_servers.is_empty() {
        return;
    }
    outln!();
    outln!("# MCP servers (brood mcp list starts them and lists their tools)");
    for (name, entry) in &config.mcp_servers {
        let c = &entry.config;
        let state = if c.is_enabled() {
            "enabled"
        } else {
            "disabled"
        };
        let how = match (&c.command, &c.url) {
            (Some(cmd), _) => {
                let mut words = vec![cmd.clone()];
                words.extend(c.args.clone().unwrap_or_default());
                let env: Vec<&str> = c.env.iter().flatten().map(|(k, _)| k.as_str()).collect();
                let env = if env.is_empty() {
                    String::new()
                } else {
                    format!(", env {}", env.join(" "))
                };
                format!("stdio {:?}{env}", words.join(" "))
            }
            (None, Some(url)) => {
                // Names only: a header's value or the token may be a secret.
                let mut extra = String::new();
                if let Some(v) = &c.bearer_token_env {
                    extra.push_str(&format!(", token from ${v}"));
                }
                let headers: Vec<&str> = c
                    .http_headers
                    .iter()
                    .flatten()
                    .chain(c.env_http_headers.iter().flatten())
                    .map(|(k, _)| k.as_str())
                    .collect();
                if !headers.is_empty() {
                    extra.push_str(&format!(", headers {}", headers.join(" ")));
                }
                format!("http {url}{extra}")
            }
            (None, None) => "(no command or url)".into(),
        };
        outln!(
            "# mcp server {name}: {state}, {how}    # {}",
            origin(config, &Source::File(entry.file.clone()))
        );
        let listed = c.read_only_tools.clone().unwrap_or_default();
        let extra = if listed.is_empty() {
            String::new()
        } else {
            format!(" and read_only_tools {}", listed.join(", "))
        };
        outln!("#   general, implementer: every tool mcp__{name}__*");
        outln!("#   explore, plan, review, verifier: the tools it marks readOnlyHint{extra}");
        outln!(
            "#   custom and definitions: the ones they name (mcp__{name}__<tool>, mcp__{name}__*)"
        );
    }
}
