//! `brood agents check`: every agent definition this workspace offers — where it
//! comes from, the tools and model it resolves to — and every problem with the
//! files (skipped, refused, shadowed, read leniently, foreign names), and the
//! permission rules in effect with where each came from (config files, Claude Code's
//! settings, each definition's own), so a folder of downloaded agents can be vetted
//! before a run uses them. Exit 1 when any file has a problem.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::subagent::{resolve_route, AgentCatalog, AgentKind, ModelChoice};

/// Permission rules as listed to a person (here and by chat's `/permissions`):
/// one line each — kind, rule, where it came from — `(none)` when there are none,
/// then the rules not taken (`notes`), each with why.
pub fn rule_lines(rules: &brood::tool::RuleSet, notes: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if rules.is_empty() {
        out.push("  (none)".to_string());
    }
    for r in rules.rules() {
        out.push(format!(
            "  {:<5} {:<32} {}",
            r.kind.as_str(),
            r.rule.text(),
            r.source
        ));
    }
    out.extend(notes.iter().map(|n| format!("  ignored: {n}")));
    out
}

/// Write the report into `out`; return the exit code.
pub fn check(ws: &Path, out: &mut String, err: &mut String) -> i32 {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let paths = ConfigPaths::from_env(ws);
    let config = match Config::load(&paths, &env, &Overrides::default()) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "brood agents check: {e}");
            return 2;
        }
    };
    let checked = match config.check(&env) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "brood agents check: {e}");
            return 2;
        }
    };
    let dirs = AgentCatalog::user_dirs(config.user_dir.as_deref(), &env);
    let catalog = AgentCatalog::load(ws, &dirs);
    let main_model = brood::runtime::provider::main_model_id(&config)
        .unwrap_or_else(|_| "(the main model)".into());
    let main = (config.provider.as_str(), main_model.as_str());

    let mut problems = 0usize;
    let _ = writeln!(out, "looked in:");
    let _ = writeln!(out, "  {}", ws.join(".brood").join("agents").display());
    let _ = writeln!(out, "  {}", ws.join(".claude").join("agents").display());
    for (d, _) in &dirs {
        let _ = writeln!(out, "  {}", d.display());
    }
    let _ = writeln!(
        out,
        "\npermission rules for the parent and every child (deny beats ask beats allow):"
    );
    for line in rule_lines(&config.permissions, &config.permission_notes) {
        let _ = writeln!(out, "{line}");
    }
    for def in catalog.definitions() {
        let kind = AgentKind::Definition(def.clone());
        let route = resolve_route(
            &checked.settings.models,
            &checked.quick_models,
            &kind,
            None,
            main,
        );
        let _ = writeln!(
            out,
            "\n{} [{}] — {}",
            def.name,
            def.role,
            def.path.display()
        );
        let _ = writeln!(out, "  source: {}", def.source.describe());
        let tools = match &def.tools {
            Some(t) => t.join(", "),
            None => format!("everything the {} role grants", def.role),
        };
        let _ = writeln!(out, "  tools: {tools}");
        if !def.disallowed_tools.is_empty() {
            let _ = writeln!(out, "  denied: {}", def.disallowed_tools.join(", "));
        }
        if !def.permission_rules.is_empty() {
            let rules: Vec<String> = def
                .permission_rules
                .iter()
                .map(|(kind, rule)| format!("{} {rule}", kind.as_str()))
                .collect();
            let _ = writeln!(out, "  rules (its runs only): {}", rules.join(", "));
        }
        let _ = writeln!(
            out,
            "  model: {}/{} ({})",
            route.provider, route.model, route.source
        );
        let mut notes: Vec<String> = def.warnings.clone();
        if let ModelChoice::Unmapped(m) =
            def.route_model(&checked.quick_models, &checked.settings.models.aliases)
        {
            notes.push(format!(
                "model '{m}' is another tool's name with no mapping: the child runs on the parent's model; \
                 map it with [subagents.model_aliases] {} = \"<model>\"",
                m.to_ascii_lowercase()
            ));
        }
        for n in &notes {
            let _ = writeln!(out, "  ! {n}");
        }
        problems += notes.len();
    }
    for s in catalog.shadowed() {
        let _ = writeln!(
            out,
            "\n- {}: '{}' is shadowed by {}",
            s.path.display(),
            s.name,
            s.by.display()
        );
    }
    for r in catalog.refused() {
        problems += 1;
        let _ = writeln!(out, "\n✗ {}: not used: {}", r.path.display(), r.why);
    }
    for k in catalog.skipped() {
        problems += 1;
        let _ = writeln!(out, "\n✗ skipped: {}", k.error);
    }
    let _ = writeln!(
        out,
        "\nbrood agents check: {} in use, {} skipped, {} refused, {}",
        crate::words::count(
            catalog.definitions().len() as u64,
            "definition",
            "definitions"
        ),
        catalog.skipped().len(),
        catalog.refused().len(),
        crate::words::count(problems as u64, "problem", "problems"),
    );
    i32::from(problems > 0)
}
