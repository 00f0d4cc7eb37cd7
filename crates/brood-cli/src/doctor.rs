//! `brood doctor`: whether a `brood run` with the same flags would start, one line
//! per check — configuration, endpoint, key variable, model, shell sandbox, ledger,
//! agent definitions — each ✓ (fine), ! (a run starts, degraded) or ✗ (it would
//! not start, with the fix). Exit 0 only when there is no ✗. The key's value is
//! never printed; it is only sent to the endpoint's `/models`, as a run would.

use crate::config_show::origin;
use brood::ledger::{Ledger, SCHEMA_VERSION};
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::{Model, ModelError};
use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::provider::{main_endpoint, MainEndpoint};
use brood::subagent::AgentCatalog;
use brood::tool::sandbox::ShellMode;
use std::collections::BTreeMap;
use std::path::Path;

/// The longest doctor waits for the endpoint.
const PROBE_TIMEOUT_SECS: u64 = 10;

#[derive(Default)]
struct Report {
    failed: usize,
}

impl Report {
    fn ok(&mut self, what: &str, detail: impl std::fmt::Display) {
        outln!("✓ {what}: {detail}");
    }
    fn warn(&mut self, what: &str, detail: impl std::fmt::Display) {
        outln!("! {what}: {detail}");
    }
    fn fail(&mut self, what: &str, detail: impl std::fmt::Display, fix: impl std::fmt::Display) {
        self.failed += 1;
        outln!("✗ {what}: {detail}\n    fix: {fix}");
    }
}

pub async fn run(ws: &Path, flags: &Overrides) -> u8 {
    let mut r = Report::default();
    let env: BTreeMap<String, String> = std::env::vars().collect();
    if ws.is_dir() {
        r.ok("workspace", ws.display());
    } else {
        r.fail(
            "workspace",
            format!("{} is not a directory", ws.display()),
            "run brood in your project, or pass --workspace DIR",
        );
    }
    let paths = ConfigPaths::from_env(ws);
    let config = check_config(&mut r, &paths, &env, flags);
    if let Some(config) = &config {
        check_endpoint(&mut r, config, &env).await;
    } else {
        outln!("  (endpoint, key and model not checked: the configuration does not load)");
    }
    check_sandbox(&mut r, config.as_ref(), ws);
    check_ledger(
        &mut r,
        ws,
        config.as_ref().and_then(|c| c.ledger_url.as_deref()),
    );
    check_agents(
        &mut r,
        ws,
        config.as_ref().and_then(|c| c.user_dir.as_deref()),
        &env,
    );
    if r.failed == 0 {
        outln!("brood doctor: a run would start");
        0
    } else {
        outln!(
            "brood doctor: {} — a run would not start",
            crate::words::count(r.failed as u64, "problem", "problems")
        );
        1
    }
}

fn check_config(
    r: &mut Report,
    paths: &ConfigPaths,
    env: &BTreeMap<String, String>,
    flags: &Overrides,
) -> Option<Config> {
    let mut files = Vec::new();
    let user = paths.user_dir.as_ref().map(|d| d.join("config.toml"));
    for (label, file) in [
        ("user", user),
        (
            "workspace",
            Some(paths.workspace.join(".brood").join("config.toml")),
        ),
    ] {
        match file {
            Some(f) if f.exists() => files.push(format!("{label} file {}", f.display())),
            Some(f) => files.push(format!("no {label} file ({})", f.display())),
            None => files.push(format!("no {label} file (HOME is not set)")),
        }
    }
    let config = match Config::load(paths, env, flags) {
        Ok(c) => c,
        Err(e) => {
            r.fail(
                "config",
                e,
                "correct or remove the key named above (`brood config show` prints every value and its source)",
            );
            return None;
        }
    };
    let checked = match config.check(env) {
        Ok(c) => c,
        Err(e) => {
            r.fail(
                "config",
                e,
                "correct or remove the key named above (`brood config show` prints every value and its source)",
            );
            return None;
        }
    };
    r.ok("config", files.join("; "));
    for a in &checked.adjustments {
        r.warn("config", format!("clamped: {a}"));
    }
    if let Some(w) = config.ignored_warning() {
        r.warn("config", w);
    }
    Some(config)
}

async fn check_endpoint(r: &mut Report, config: &Config, env: &BTreeMap<String, String>) {
    let ep = match main_endpoint(config) {
        Ok(e) => e,
        Err(e) => {
            r.fail(
                "provider",
                &e,
                "pass --provider with a known preset and --model (see `brood run --help`)",
            );
            return;
        }
    };
    r.ok(
        "provider",
        format!(
            "{} at {} ({}), model {:?} ({})",
            ep.provider,
            ep.base_url.0,
            origin(config, &ep.base_url.1),
            ep.model.0,
            origin(config, &ep.model.1)
        ),
    );
    let key = match &ep.api_key_env {
        None => {
            r.ok("key", "this endpoint takes no key");
            None
        }
        Some((var, source)) => {
            match env.get(var).filter(|v| !v.trim().is_empty()) {
                Some(v) => {
                    r.ok("key", format!("{var} is set ({})", origin(config, source)));
                    Some(v.trim().to_string())
                }
                None if ep.key_required => {
                    r.fail(
                    "key",
                    format!("{var} is not set ({})", origin(config, source)),
                    format!("export {var}=<your API key>, or name another variable with --api-key-env"),
                );
                    None
                }
                None => {
                    r.ok(
                        "key",
                        format!("{var} is not set; not needed at this endpoint"),
                    );
                    None
                }
            }
        }
    };
    probe(r, config, &ep, key).await;
}

/// `GET /models` as a run would send it: reachable, key accepted, model served.
async fn probe(r: &mut Report, config: &Config, ep: &MainEndpoint, key: Option<String>) {
    let mut cfg = ProviderConfig::new(ep.provider.clone(), ep.base_url.0.clone());
    // Without the key the route is still probed (a missing key is reported above).
    cfg.api_key_env = key
        .as_ref()
        .and(ep.api_key_env.as_ref().map(|(v, _)| v.clone()));
    cfg.api_key = key;
    cfg.api_timeout_secs = config.api_timeout_secs.min(PROBE_TIMEOUT_SECS);
    cfg.max_attempts = 1;
    cfg.lists_models = true; // ask even where the list names no real ids: it proves the route
    cfg.ca_cert = config
        .providers
        .get(&ep.provider)
        .and_then(|o| o.ca_cert.clone());
    let provider = match OpenAiProvider::new(cfg) {
        Ok(p) => p,
        Err(e) => {
            r.fail("endpoint", &e, "pass a valid --base-url");
            return;
        }
    };
    let url = ep.base_url.0.trim_end_matches('/').to_string();
    let model = &ep.model.0;
    match provider.list_models().await {
        Ok(Some(ids)) => {
            r.ok(
                "endpoint",
                format!("{url} answers; GET /models lists {}", ids.len()),
            );
            if !ep.lists_models {
                r.ok(
                    "model",
                    format!("{model:?} (this endpoint serves its loaded model whatever the name; not checked)"),
                );
            } else if ids.iter().any(|i| i == model) {
                r.ok("model", format!("{model:?} is served"));
            } else {
                let shown: Vec<&str> = ids.iter().take(10).map(String::as_str).collect();
                r.fail(
                    "model",
                    format!(
                        "{model:?} is not among the served models ({})",
                        shown.join(", ")
                    ),
                    "pass --model with one of them (or set `model` in config.toml)",
                );
            }
        }
        Ok(None) => {
            r.ok("endpoint", format!("{url} answers (no model list)"));
            r.ok(
                "model",
                format!("{model:?} (the endpoint does not list models; not checked)"),
            );
        }
        Err(e @ ModelError::Auth { .. }) => {
            r.ok("endpoint", format!("{url} answers"));
            let var = ep
                .api_key_env
                .as_ref()
                .map_or("the key variable", |(v, _)| v.as_str());
            r.fail("key", e, format!("check the key in {var}"));
        }
        Err(e) => r.fail(
            "endpoint",
            e,
            "start the server, check the network, or pass --base-url / --provider",
        ),
    }
}

fn check_sandbox(r: &mut Report, config: Option<&Config>, ws: &Path) {
    let options = config
        .map(brood::runtime::sandbox_options)
        .unwrap_or_default();
    let sandbox = brood::tool::Sandbox::with_options(options);
    let writer = sandbox.describe(ShellMode::Writer, ws);
    let summary = writer
        .split("; reads")
        .next()
        .unwrap_or(&writer)
        .to_string();
    let degraded = sandbox.degradations();
    if degraded.is_empty() {
        r.ok("sandbox", summary);
    } else {
        for d in degraded {
            r.warn("sandbox", d);
        }
    }
}

fn check_ledger(r: &mut Report, ws: &Path, url: Option<&str>) {
    if let Some(url) = url {
        return check_ledger_url(r, ws, url);
    }
    match Ledger::inspect(ws) {
        Ok((db, version)) => {
            let what = ledger_state(&db.display().to_string(), version);
            match writable(&db) {
                Ok(()) => r.ok("ledger", format!("{what}, writable")),
                Err(e) => r.fail(
                    "ledger",
                    format!("{what}, not writable: {e}"),
                    "make the workspace's .brood/state writable (or run where it is)",
                ),
            }
        }
        Err(e) => r.fail(
            "ledger",
            e,
            "move the file aside (brood never overwrites it) or use a newer brood",
        ),
    }
}

/// A `ledger_url` (config, `--ledger`, `BROOD_LEDGER_URL`) is reached as a run would
/// reach it: the database connected and its schema read; nothing is created. The URL
/// is shown with its password hidden, and how its connections use TLS (`sslmode`).
fn check_ledger_url(r: &mut Report, ws: &Path, url: &str) {
    let tls = match Ledger::tls_at(Some(url)) {
        Ok(Some(tls)) => format!("; {tls}"),
        _ => String::new(),
    };
    match Ledger::inspect_at(ws, Some(url)) {
        Ok((place, version)) => r.ok(
            "ledger",
            format!("{}, reachable{tls}", ledger_state(&place, version)),
        ),
        Err(e) => r.fail(
            "ledger",
            e,
            "check ledger_url (or --ledger, BROOD_LEDGER_URL): the server, user and database, and its sslmode (docs/LEDGER.md, \"PostgreSQL\", \"TLS\")",
        ),
    }
}

/// Where the ledger is and its schema version, as the ledger line says it.
fn ledger_state(place: &str, version: Option<i64>) -> String {
    match version {
        Some(v) if v < SCHEMA_VERSION => {
            format!("{place} schema v{v} (this build migrates it to v{SCHEMA_VERSION})")
        }
        Some(v) => format!("{place} schema v{v}"),
        None => format!("{place} not created yet (schema v{SCHEMA_VERSION})"),
    }
}

/// Create and remove a file beside `db` (or in its nearest existing ancestor
/// directory): the write a run's first ledger open needs.
fn writable(db: &Path) -> std::io::Result<()> {
    let mut dir = db.parent();
    while let Some(d) = dir {
        if d.is_dir() {
            let probe = d.join(format!(".brood-doctor-{}", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)?;
            return std::fs::remove_file(&probe);
        }
        dir = d.parent();
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "no existing directory above it",
    ))
}

fn check_agents(
    r: &mut Report,
    ws: &Path,
    user_dir: Option<&Path>,
    env: &BTreeMap<String, String>,
) {
    let catalog = AgentCatalog::load(ws, &AgentCatalog::user_dirs(user_dir, env));
    r.ok(
        "agents",
        format!("{} definition(s) loaded", catalog.definitions().len()),
    );
    for refused in catalog.refused() {
        r.warn(
            "agents",
            format!("{}: not used: {}", refused.path.display(), refused.why),
        );
    }
    for skipped in catalog.skipped() {
        r.warn(
            "agents",
            format!("skipped (see brood agents check): {}", skipped.error),
        );
    }
}
