//! `[subagents]`, `[memory]` and `[models.*]` configuration (parsing, validation
//! errors naming the key, clamps) and the model routing precedence table, row by row.

use brood::subagent::config::{QuickModelConfig, QuickModels};
use brood::subagent::definition::parse_definition;
use brood::subagent::*;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The slice of a runtime config this layer owns, as the lead embeds it.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    subagents: SubagentsConfig,
    #[serde(default)]
    memory: MemoryConfig,
    #[serde(default)]
    models: BTreeMap<String, QuickModelConfig>,
}

fn load(toml_text: &str) -> FileConfig {
    toml::from_str(toml_text).unwrap_or_else(|e| panic!("{toml_text}: {e}"))
}

fn settings(toml_text: &str) -> Result<SubagentSettings, ConfigError> {
    load(toml_text).subagents.resolve()
}

fn err_key(toml_text: &str) -> String {
    let e = settings(toml_text).expect_err(toml_text);
    assert!(e.to_string().contains(&e.key), "{e}");
    e.key
}

// ---------------------------------------------------------------- config

#[test]
fn unknown_keys_are_rejected_by_name() {
    let e = toml::from_str::<FileConfig>("[subagents]\nmax_concurent = 3\n")
        .err()
        .unwrap();
    assert!(e.to_string().contains("max_concurent"), "{e}");
    let e =
        toml::from_str::<FileConfig>("[models.fast]\nprovider = \"a\"\nmodel = \"b\"\nctx = 1\n")
            .err()
            .unwrap();
    assert!(e.to_string().contains("ctx"), "{e}");
    let e = toml::from_str::<FileConfig>("[memory]\nenable = true\n")
        .err()
        .unwrap();
    assert!(e.to_string().contains("enable"), "{e}");
}

#[test]
fn out_of_range_values_are_errors_naming_the_key() {
    let cases = [
        ("max_concurrent = 0", "subagents.max_concurrent"),
        ("max_concurrent = 1025", "subagents.max_concurrent"),
        ("launch_concurrency = 11", "subagents.launch_concurrency"),
        (
            "max_concurrent = 4\nlaunch_concurrency = 5",
            "subagents.launch_concurrency",
        ),
        ("launch_concurrency = 0", "subagents.launch_concurrency"),
        ("max_depth = 0", "subagents.max_depth"),
        ("max_depth = 9", "subagents.max_depth"),
        ("max_total = 0", "subagents.max_total"),
        ("max_turns = 0", "subagents.max_turns"),
        ("wall_time_secs = 0", "subagents.wall_time_secs"),
        ("token_budget = 0", "subagents.token_budget"),
        ("tree_token_budget = 0", "subagents.tree_token_budget"),
        ("context_cap_bytes = 10", "subagents.context_cap_bytes"),
        ("worker_model = \"  \"", "subagents.worker_model"),
        ("subagent_provider = \"\"", "subagents.subagent_provider"),
        (
            "[subagents.models]\nexplore = \"\"",
            "subagents.models.explore",
        ),
        (
            "[subagents.models]\nExplore = \"a\"\nexplore = \"b\"",
            "subagents.models.explore",
        ),
    ];
    for (body, key) in cases {
        let text = if body.starts_with('[') {
            body.to_string()
        } else {
            format!("[subagents]\n{body}")
        };
        assert_eq!(err_key(&text), key, "{body}");
    }
    let e = settings("[subagents]\nmax_concurrent = 1025").unwrap_err();
    assert!(
        e.problem.contains("1025") && e.problem.contains("1024"),
        "{e}"
    );
}

#[test]
fn limits_at_the_edges_are_accepted() {
    let s = settings("[subagents]\nmax_concurrent = 64\nlaunch_concurrency = 2\nmax_depth = 8\nmax_turns = 7\ntoken_budget = 1\ntree_token_budget = 9").unwrap();
    assert_eq!(
        (s.max_concurrent, s.launch_concurrency, s.max_depth),
        (64, 2, 8)
    );
    assert_eq!(
        (s.max_turns, s.token_budget, s.tree_token_budget),
        (Some(7), Some(1), Some(9))
    );
    let s = settings("[subagents]\nenabled = false\nmax_concurrent = 1").unwrap();
    assert!(!s.enabled);
    assert_eq!(s.launch_concurrency, 1);
}

#[test]
fn timeouts_are_clamped_and_reported() {
    let api_hb = |body: &str| {
        let s = settings(&format!("[subagents]\n{body}")).unwrap();
        (
            s.api_timeout.as_secs(),
            s.heartbeat_timeout.as_secs(),
            s.adjustments,
        )
    };
    assert_eq!(api_hb("api_timeout_secs = 0").0, 120, "0 keeps the default");
    let (api, hb, adj) = api_hb("api_timeout_secs = 5000");
    assert_eq!((api, hb), (1800, 1830), "heartbeat raised to api + 30");
    assert_eq!(adj.len(), 2, "{adj:?}");
    assert!(adj[0].contains("api_timeout_secs") && adj[1].contains("heartbeat_timeout_secs"));
    assert_eq!(
        api_hb("heartbeat_timeout_secs = 10\napi_timeout_secs = 1").1,
        31
    );
    assert_eq!(api_hb("heartbeat_timeout_secs = 99999").1, 3600);
    let (api, hb, adj) = api_hb("api_timeout_secs = 900");
    assert_eq!((api, hb), (900, 930));
    assert_eq!(adj.len(), 1);
    let (api, hb, adj) = api_hb("api_timeout_secs = 60\nheartbeat_timeout_secs = 600");
    assert_eq!((api, hb), (60, 600));
    assert!(adj.is_empty());
    assert_eq!(
        settings("").unwrap().heartbeat_timeout,
        Duration::from_secs(300)
    );
}

#[test]
fn quick_models_validate_and_look_up_case_insensitively() {
    let f = load("[models.Fast]\nprovider = \"openrouter\"\nmodel = \"deepseek/v4-flash\"\n");
    let q = QuickModels::from_config(&f.models).unwrap();
    assert_eq!(q.get("FAST").unwrap().provider, "openrouter");
    assert_eq!(q.aliases(), ["fast"]);
    let f = load("[models.fast]\nprovider = \" \"\nmodel = \"m\"\n");
    assert_eq!(
        QuickModels::from_config(&f.models).unwrap_err().key,
        "models.fast.provider"
    );
    let f = load("[models.fast]\nprovider = \"a\"\nmodel = \"m\"\n[models.FAST]\nprovider = \"b\"\nmodel = \"n\"\n");
    let e = QuickModels::from_config(&f.models).unwrap_err();
    assert!(e.key == "models.fast" || e.key == "models.FAST", "{e}");
}

#[test]
fn memory_from_file_and_environment() {
    let f = load("[memory]\nenabled = true\n");
    assert!(memory_enabled(&f.memory, None).unwrap());
    assert!(
        !memory_enabled(&f.memory, Some("off")).unwrap(),
        "BROOD_MEMORY wins over the file"
    );
    assert!(memory_enabled(&FileConfig::default().memory, Some("on")).unwrap());
    assert!(
        !memory_enabled(&FileConfig::default().memory, None).unwrap(),
        "off by default"
    );
    assert_eq!(
        memory_enabled(&f.memory, Some("sometimes"))
            .unwrap_err()
            .key,
        "BROOD_MEMORY"
    );
}

// ---------------------------------------------------------------- routing

const MAIN: (&str, &str) = ("deepseek", "deepseek-chat");

fn quick() -> QuickModels {
    QuickModels::from_config(&BTreeMap::from([(
        "fast".to_string(),
        QuickModelConfig {
            provider: "openrouter".into(),
            model: "deepseek/v4-flash".into(),
        },
    )]))
    .unwrap()
}

fn definition(front: &str) -> AgentKind {
    let text = format!("---\ndescription: d\n{front}\n---\nbody");
    let d = parse_definition(
        &text,
        Path::new("/ws/.brood/agents/mapper.md"),
        DefinitionSource::Workspace,
    )
    .unwrap();
    AgentKind::Definition(Arc::new(d))
}

struct Row {
    what: &'static str,
    config: String,
    kind: AgentKind,
    explicit: Option<&'static str>,
    want: (&'static str, &'static str, &'static str),
}

fn role(name: &str) -> AgentKind {
    AgentCatalog::default().resolve(name).unwrap()
}

/// Everything below row N is set, so each row shows it beats the rows under it.
const ALL_BELOW_MAP: &str = "worker_model = \"w\"\nexplorer_model = \"e\"\nawaiter_model = \"a\"\nreview_model = \"r\"\ncustom_model = \"c\"\ndefault_model = \"d\"\nsubagent_model = \"s\"\nsubagent_provider = \"vllm\"\n";

#[test]
fn routing_precedence_table() {
    let full_map = format!(
        "[subagents]\n{ALL_BELOW_MAP}[subagents.models]\nMapper = \"m-def\"\nimplementation = \"m-alias\"\nIMPLEMENTER = \"m-canon\"\nexplore = \"m-explore\"\n"
    );
    let named = format!("[subagents]\n{ALL_BELOW_MAP}");
    let rows = vec![
        // 1. explicit model in the call
        Row {
            what: "explicit raw model, on subagent_provider",
            config: full_map.clone(),
            kind: role("explore"),
            explicit: Some("x-1"),
            want: ("vllm", "x-1", "call"),
        },
        Row {
            what: "explicit quick-model name",
            config: full_map.clone(),
            kind: role("explore"),
            explicit: Some("FAST"),
            want: ("openrouter", "deepseek/v4-flash", "call"),
        },
        Row {
            what: "explicit raw model, main provider",
            config: "".into(),
            kind: role("general"),
            explicit: Some("x-2"),
            want: ("deepseek", "x-2", "call"),
        },
        Row {
            what: "blank explicit is ignored",
            config: "".into(),
            kind: role("general"),
            explicit: Some("  "),
            want: ("deepseek", "deepseek-chat", "main"),
        },
        // 2. [subagents.models]: definition name, then alias used, then canonical role
        Row {
            what: "map by definition name (case-insensitive)",
            config: full_map.clone(),
            kind: definition("name: mapper\nrole: explore\nmodel: own"),
            explicit: None,
            want: ("vllm", "m-def", "subagents.models"),
        },
        Row {
            what: "map by the alias used",
            config: full_map.clone(),
            kind: role("Implementation"),
            explicit: None,
            want: ("vllm", "m-alias", "subagents.models"),
        },
        Row {
            what: "map by canonical role when the alias has no entry",
            config: full_map.clone(),
            kind: role("builder"),
            explicit: None,
            want: ("vllm", "m-canon", "subagents.models"),
        },
        Row {
            what: "map by the definition's role",
            config: full_map.clone(),
            kind: definition("name: other\nrole: explore"),
            explicit: None,
            want: ("vllm", "m-explore", "subagents.models"),
        },
        // 3. named keys per role
        Row {
            what: "general → worker_model",
            config: named.clone(),
            kind: role("worker"),
            explicit: None,
            want: ("vllm", "w", "subagents.worker_model"),
        },
        Row {
            what: "implementer → worker_model",
            config: named.clone(),
            kind: role("implementer"),
            explicit: None,
            want: ("vllm", "w", "subagents.worker_model"),
        },
        Row {
            what: "verifier → worker_model",
            config: named.clone(),
            kind: role("tester"),
            explicit: None,
            want: ("vllm", "w", "subagents.worker_model"),
        },
        Row {
            what: "explore → explorer_model",
            config: named.clone(),
            kind: role("explorer"),
            explicit: None,
            want: ("vllm", "e", "subagents.explorer_model"),
        },
        Row {
            what: "plan → awaiter_model",
            config: named.clone(),
            kind: role("awaiter"),
            explicit: None,
            want: ("vllm", "a", "subagents.awaiter_model"),
        },
        Row {
            what: "review → review_model",
            config: named.clone(),
            kind: role("code_review"),
            explicit: None,
            want: ("vllm", "r", "subagents.review_model"),
        },
        Row {
            what: "custom → custom_model",
            config: named.clone(),
            kind: role("custom"),
            explicit: None,
            want: ("vllm", "c", "subagents.custom_model"),
        },
        Row {
            what: "named key beats the definition's model",
            config: named.clone(),
            kind: definition("role: review\nmodel: own"),
            explicit: None,
            want: ("vllm", "r", "subagents.review_model"),
        },
        // 4. the definition's own model
        Row {
            what: "definition model beats default_model",
            config: "[subagents]\ndefault_model = \"d\"\n".into(),
            kind: definition("model: own"),
            explicit: None,
            want: ("deepseek", "own", "definition"),
        },
        Row {
            what: "definition model may name a quick model",
            config: "".into(),
            kind: definition("model: fast"),
            explicit: None,
            want: ("openrouter", "deepseek/v4-flash", "definition"),
        },
        Row {
            what: "definition model inherit is the parent's model, over default_model",
            config: "[subagents]\ndefault_model = \"d\"\n".into(),
            kind: definition("model: inherit"),
            explicit: None,
            want: ("deepseek", "deepseek-chat", "definition:inherit"),
        },
        Row {
            what: "an unmapped Claude model name runs on the parent's model",
            config: "[subagents]\ndefault_model = \"d\"\n".into(),
            kind: definition("model: opus"),
            explicit: None,
            want: ("deepseek", "deepseek-chat", "definition:unmapped"),
        },
        Row {
            what: "a mapped Claude model name runs on its mapping",
            config: "[subagents.model_aliases]\nOpus = \"fast\"\n".into(),
            kind: definition("model: opus"),
            explicit: None,
            want: ("openrouter", "deepseek/v4-flash", "definition"),
        },
        // 5. default_model
        Row {
            what: "default_model for any role",
            config: "[subagents]\ndefault_model = \"d\"\nsubagent_model = \"s\"\n".into(),
            kind: role("plan"),
            explicit: None,
            want: ("deepseek", "d", "subagents.default_model"),
        },
        // 6–8. subagent_model / subagent_provider
        Row {
            what: "subagent_model naming a quick model",
            config: "[subagents]\nsubagent_model = \"fast\"\nsubagent_provider = \"vllm\"\n".into(),
            kind: role("general"),
            explicit: None,
            want: ("openrouter", "deepseek/v4-flash", "subagent_model"),
        },
        Row {
            what: "raw subagent_model on subagent_provider",
            config: "[subagents]\nsubagent_model = \"s\"\nsubagent_provider = \"vllm\"\n".into(),
            kind: role("general"),
            explicit: None,
            want: ("vllm", "s", "subagent_model"),
        },
        Row {
            what: "raw subagent_model on the main provider",
            config: "[subagents]\nsubagent_model = \"s\"\n".into(),
            kind: role("general"),
            explicit: None,
            want: ("deepseek", "s", "subagent_model"),
        },
        Row {
            what: "only subagent_provider: main model on it",
            config: "[subagents]\nsubagent_provider = \"vllm\"\n".into(),
            kind: role("review"),
            explicit: None,
            want: ("vllm", "deepseek-chat", "subagent_provider"),
        },
        Row {
            what: "nothing set: main provider and model",
            config: "".into(),
            kind: role("review"),
            explicit: None,
            want: ("deepseek", "deepseek-chat", "main"),
        },
    ];
    let q = quick();
    for row in rows {
        let s = settings(&row.config).unwrap();
        let r = resolve_route(&s.models, &q, &row.kind, row.explicit, MAIN);
        assert_eq!(
            (r.provider.as_str(), r.model.as_str(), r.source),
            row.want,
            "{}",
            row.what
        );
    }
}

#[test]
fn grant_uses_the_route() {
    let s = settings("[subagents]\nexplorer_model = \"fast\"\n").unwrap();
    let parent = brood::tool::Permissions::full("parent");
    let tools: Vec<String> = vec!["read_file".into()];
    let kind = role("explore");
    let g = grant_for(
        &SpawnSpec {
            kind: &kind,
            parent: &parent,
            parent_tools: &tools,
            allowed_tools: None,
            model: None,
            fork_context: None,
            read_only_shell_available: true,
            mcp_read_only: &NO_MCP,
        },
        &s,
        &quick(),
        MAIN,
    )
    .unwrap();
    assert_eq!(
        g.route,
        Route {
            provider: "openrouter".into(),
            model: "deepseek/v4-flash".into(),
            source: "subagents.explorer_model"
        }
    );
}

/// No MCP tools are read-only in these grants.
static NO_MCP: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
