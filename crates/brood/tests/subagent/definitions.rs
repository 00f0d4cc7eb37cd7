//! Agent types through the public API: every role and alias resolving, the
//! unknown-type error, definition files (brood's keys, Claude Code files, every kind
//! of bad file) and the catalog's directory precedence.

use brood::subagent::config::{QuickModelConfig, QuickModels};
use brood::subagent::definition::parse_definition;
use brood::subagent::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------- resolution

#[test]
fn every_role_and_alias_resolves_case_insensitively() {
    let cat = AgentCatalog::default();
    let table = [
        (
            Role::General,
            &["general", "worker", "default", "general-purpose"][..],
        ),
        (Role::Explore, &["explore", "explorer", "exploration"]),
        (Role::Plan, &["plan", "planning", "planner", "awaiter"]),
        (
            Role::Review,
            &["review", "reviewer", "code-review", "code_review"],
        ),
        (
            Role::Implementer,
            &["implementer", "implement", "implementation", "builder"],
        ),
        (
            Role::Verifier,
            &["verifier", "verify", "verification", "validator", "tester"],
        ),
        (Role::Custom, &["custom"]),
    ];
    for (role, names) in table {
        for name in names {
            for spelling in [
                name.to_string(),
                name.to_uppercase(),
                format!("  {}  ", capitalize(name)),
            ] {
                let kind = cat.resolve(&spelling).unwrap();
                assert_eq!(kind.role(), role, "{spelling}");
                assert_eq!(kind.name(), role.as_str());
                assert!(kind.definition().is_none());
            }
        }
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

#[test]
fn unknown_agent_type_lists_every_accepted_name() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        ".brood/agents/api-mapper.md",
        "---\ndescription: maps routes\n---\nMap.",
    );
    let cat = AgentCatalog::load(dir.path(), &[]);
    let err = cat.resolve("wizard").unwrap_err();
    assert_eq!(err.given, "wizard");
    assert_eq!(err.definitions, ["api-mapper"]);
    let msg = err.to_string();
    assert!(msg.contains("'wizard'"), "{msg}");
    for name in cat.accepted_names() {
        assert!(msg.contains(&name), "message lacks {name}: {msg}");
    }
    assert_eq!(cat.accepted_names().len(), 1 + 7 + 18);
    // With no definitions the message says so instead of listing nothing.
    let msg = AgentCatalog::default().resolve("").unwrap_err().to_string();
    assert!(msg.contains("no agents are defined"), "{msg}");
}

// ---------------------------------------------------------------- definitions

fn write(root: &Path, rel: &str, text: &str) -> PathBuf {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn parse(text: &str) -> Result<AgentDefinition, DefinitionError> {
    parse_definition(
        text,
        Path::new("/ws/.brood/agents/x.md"),
        DefinitionSource::Workspace,
    )
}

#[test]
fn good_definition_with_every_brood_key() {
    let d = parse(
        "---\nname: api-mapper\ndescription: Maps the HTTP routes.\ntools: read_file, grep , bash\n\
         model: flash\nrole: Explorer\nmax_turns: 12\nfork_context: true\n---\n\nYou map routes.\n",
    )
    .unwrap();
    assert_eq!(d.name, "api-mapper");
    assert_eq!(d.description, "Maps the HTTP routes.");
    assert_eq!(d.tools, Some(strings(&["read_file", "grep", "bash"])));
    assert_eq!(d.model.as_deref(), Some("flash"));
    assert_eq!(d.role, Role::Explore);
    assert_eq!(d.max_turns, Some(12));
    assert_eq!(d.fork_context, Some(true));
    assert_eq!(d.prompt, "You map routes.");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    // The system prompt is the body plus the contract, not the role stance.
    let kind = AgentKind::Definition(Arc::new(d));
    let sp = kind.system_prompt();
    assert!(sp.starts_with("You map routes."));
    assert!(sp.contains("BLOCKERS"));
}

#[test]
fn tools_as_yaml_array_and_name_defaults_to_file_stem() {
    let d = parse("---\ndescription: d\ntools:\n  - read_file\n  - list_dir\n---\nbody").unwrap();
    assert_eq!(d.tools, Some(strings(&["read_file", "list_dir"])));
    assert_eq!(d.name, "x");
    assert_eq!(d.role, Role::General);
    let d = parse("---\ndescription: d\ntools: []\n---\n").unwrap();
    assert_eq!(
        d.tools,
        Some(vec![]),
        "an empty list means no tools, not all tools"
    );
}

#[test]
fn an_unknown_key_is_ignored_with_a_warning_naming_it() {
    // Collections add their own keys (`tags`, `category`…); Claude Code ignores them.
    let d = parse("---\ndescription: d\ntemperature: 0.2\ntags: [a, b]\n---\n").unwrap();
    assert_eq!(d.description, "d");
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(d.warnings[0].contains("`tags`") || d.warnings[1].contains("`tags`"));
    assert!(d
        .warnings
        .iter()
        .any(|w| w.contains("`temperature`") && w.contains("ignored")));
}

#[test]
fn bad_values_are_errors_naming_the_key() {
    let cases = [
        ("max_turns: lots", "max_turns"),
        ("max_turns: 0", "max_turns"),
        ("maxTurns: 5000", "maxTurns"),
        ("role: wizard", "role"),
        ("fork_context: \"yes\"", "fork_context"),
        ("tools: 3", "tools"),
        ("tools: [read_file, 4]", "tools"),
        ("tools: read_file grep", "tools"),
        ("model: \"\"", "model"),
        ("name: \"has space\"", "name"),
        ("permissionMode: yolo", "permissionMode"),
        ("role: implementer\npermissionMode: plan", "permissionMode"),
        ("max_turns: 3\nmaxTurns: 4", "maxTurns"),
        ("role: custom", "tools"),
    ];
    for (yaml, key) in cases {
        let err = parse(&format!("---\ndescription: d\n{yaml}\n---\n")).unwrap_err();
        match &err {
            DefinitionError::BadValue { key: k, path, .. } => {
                assert_eq!(k, key, "{yaml}: {err}");
                assert!(path.ends_with("x.md"));
            }
            other => panic!("{yaml}: {other:?}"),
        }
    }
    // The role error carries the accepted roles so the author can fix it.
    let err = parse("---\ndescription: d\nrole: wizard\n---\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("explore") && err.contains("verifier"), "{err}");
}

#[test]
fn structural_errors() {
    assert!(matches!(
        parse("no front matter"),
        Err(DefinitionError::NoFrontMatter { .. })
    ));
    assert!(matches!(
        parse("---\ndescription: d\n"),
        Err(DefinitionError::UnclosedFrontMatter { .. })
    ));
    assert!(matches!(
        parse("---\n- a\n- b\n---\n"),
        Err(DefinitionError::NotAMapping { .. })
    ));
    // Not YAML and not `key: value` lines either: the error names the line.
    match parse("---\ndescription: [\nthis is not a key\n---\n") {
        Err(e @ DefinitionError::Yaml { .. }) => {
            assert!(e.to_string().contains("line 3"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    match parse("---\nname: a\n---\nbody") {
        Err(DefinitionError::MissingKey { key, .. }) => assert_eq!(key, "description"),
        other => panic!("{other:?}"),
    }
    match parse("---\ndescription: d\nrole: explore\ntools: read_file, write_file\n---\n") {
        Err(DefinitionError::ToolOutsideRole { tool, role, .. }) => {
            assert_eq!(tool, "write_file");
            assert_eq!(role, Role::Explore);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn claude_code_agent_is_accepted_and_mapped() {
    let text = "---\nname: code-reviewer\ndescription: Reviews code.\n\
                tools: Read, Grep, Glob, Bash(git diff:*), WebFetch, TodoWrite\n\
                model: sonnet\ncolor: blue\nmaxTurns: 7\n---\nYou review code.\n";
    let path = Path::new("/ws/.claude/agents/code-reviewer.md");
    let d = parse_definition(text, path, DefinitionSource::Claude).unwrap();
    assert_eq!(
        d.tools,
        Some(strings(&[
            "read_file",
            "grep",
            "find_files",
            "todo_write",
            "todo_read"
        ])),
        "Bash(...) cannot be enforced and WebFetch does not exist: both dropped, never widened"
    );
    assert_eq!(d.color.as_deref(), Some("blue"));
    assert_eq!(d.max_turns, Some(7));
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(d.warnings.iter().any(|w| w.contains("Bash(git diff:*)")));
    assert!(d.warnings.iter().any(|w| w.contains("WebFetch")));
    // Claude's model names fall back to the parent's model unless the user mapped them
    // (`[subagents.model_aliases]`) or defined a quick model by that name.
    let none = BTreeMap::new();
    assert_eq!(
        d.route_model(&QuickModels::default(), &none),
        ModelChoice::Unmapped("sonnet")
    );
    let aliases = BTreeMap::from([("sonnet".to_string(), "deepseek-chat".to_string())]);
    assert_eq!(
        d.route_model(&QuickModels::default(), &aliases),
        ModelChoice::Named("deepseek-chat")
    );
    let quick = QuickModels::from_config(&BTreeMap::from([(
        "Sonnet".to_string(),
        QuickModelConfig {
            provider: "openrouter".into(),
            model: "anthropic/claude-sonnet".into(),
        },
    )]))
    .unwrap();
    assert_eq!(d.route_model(&quick, &none), ModelChoice::Named("sonnet"));
    // Any other name is a model id; `inherit` is the parent's model.
    let b = parse("---\ndescription: d\nmodel: deepseek-reasoner\n---\n").unwrap();
    assert_eq!(
        b.route_model(&QuickModels::default(), &none),
        ModelChoice::Named("deepseek-reasoner")
    );
    let c = parse("---\ndescription: d\nmodel: claude-opus-4-1\n---\n").unwrap();
    assert_eq!(
        c.route_model(&QuickModels::default(), &none),
        ModelChoice::Unmapped("claude-opus-4-1")
    );
    let i = parse("---\ndescription: d\nmodel: inherit\n---\n").unwrap();
    assert_eq!(
        i.route_model(&QuickModels::default(), &none),
        ModelChoice::Inherit
    );
}

#[test]
fn claude_permission_mode_and_ignored_keys() {
    let d = parse("---\ndescription: d\npermissionMode: plan\n---\n").unwrap();
    assert_eq!(
        d.role,
        Role::Plan,
        "plan mode is read-only: take the plan posture"
    );
    let d = parse("---\ndescription: d\npermissionMode: acceptEdits\nskills: [a]\ndisallowedTools: Write, Edit\n---\n").unwrap();
    assert_eq!(d.role, Role::General);
    assert_eq!(d.disallowed_tools, strings(&["write_file", "edit_file"]));
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
}

#[test]
fn claude_specifiers_always_resolve_towards_less_access() {
    let d = parse(
        "---\ndescription: d\ntools: Read, Bash(git log:*), mcp__github__search\n\
         disallowedTools: Bash(rm:*), TodoWrite, WebFetch\n---\n",
    )
    .unwrap();
    assert_eq!(
        d.tools,
        Some(strings(&["read_file", "mcp__github__search"])),
        "a partial allow grants nothing; an MCP tool keeps its name (granted at spawn)"
    );
    assert_eq!(
        d.disallowed_tools,
        strings(&["bash", "todo_write"]),
        "a partial deny denies the whole tool; denying TodoWrite keeps todo_read"
    );
    assert!(
        d.warnings.iter().any(|w| w.contains("denies all of Bash")),
        "{:?}",
        d.warnings
    );
    assert!(
        !d.warnings.iter().any(|w| w.contains("mcp__github__search")),
        "{:?}",
        d.warnings
    );
    assert!(
        !d.warnings.iter().any(|w| w.contains("WebFetch")),
        "denying a missing tool is a no-op"
    );
}

#[test]
fn catalog_precedence_shadowing_and_collected_errors() {
    let ws = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let body = |who: &str| format!("---\nname: Mapper\ndescription: from {who}\n---\n{who}");
    let brood = write(ws.path(), ".brood/agents/mapper.md", &body("brood"));
    write(ws.path(), ".claude/agents/mapper.md", &body("claude"));
    write(user.path(), "mapper.md", &body("user"));
    write(
        ws.path(),
        ".claude/agents/only-claude.md",
        "---\ndescription: c\n---\n",
    );
    write(user.path(), "only-user.md", "---\ndescription: u\n---\n");
    write(user.path(), "notes.txt", "not an agent");
    // A role name cannot be taken by a definition (not even a user's): it is refused.
    write(
        user.path(),
        "explore.md",
        "---\ndescription: my explorer\nrole: review\n---\nmine",
    );

    let cat = AgentCatalog::load(
        ws.path(),
        &[(user.path().to_path_buf(), DefinitionSource::User)],
    );
    let names: Vec<&str> = cat.definitions().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["Mapper", "only-claude", "only-user"]);
    assert_eq!(cat.refused().len(), 1);
    let m = cat.get("mapper").unwrap();
    assert_eq!(m.description, "from brood");
    assert_eq!(m.path, brood);
    assert_eq!(cat.shadowed().len(), 2);
    assert!(cat.shadowed().iter().all(|s| s.by == brood));
    assert_eq!(
        cat.get("only-claude").unwrap().source,
        DefinitionSource::Claude
    );
    match cat.resolve("EXPLORE").unwrap() {
        AgentKind::Role { role, .. } => assert_eq!(role, Role::Explore),
        other => panic!("{other:?}"),
    }

    // A bad file is skipped, never fatal; a second file of one name in one directory too.
    write(
        ws.path(),
        ".brood/agents/bad1.md",
        "---\ndescription: d\nfoo: 1\n---\n",
    );
    write(
        ws.path(),
        ".claude/agents/bad2.md",
        "---\ndescription: d\nmax_turns: x\n---\n",
    );
    write(ws.path(), ".brood/agents/zz-mapper.md", &body("twin"));
    let user_dirs = [(user.path().to_path_buf(), DefinitionSource::User)];
    let cat = AgentCatalog::load(ws.path(), &user_dirs);
    assert!(
        cat.get("bad1").is_some(),
        "an unknown key is a warning, not an error"
    );
    assert_eq!(cat.skipped().len(), 2, "{:?}", cat.skipped());
    assert!(cat
        .skipped()
        .iter()
        .any(|k| matches!(&k.error, DefinitionError::BadValue { key, .. } if key == "max_turns")));
    assert!(cat
        .skipped()
        .iter()
        .any(|k| matches!(k.error, DefinitionError::DuplicateName { .. })));
    // Asking for the broken one by name says why it cannot be used.
    let err = cat.resolve("bad2").unwrap_err();
    assert!(
        err.to_string().contains("cannot be used") && err.to_string().contains("max_turns"),
        "{err}"
    );
}

#[test]
fn missing_directories_give_an_empty_catalog() {
    let ws = tempfile::tempdir().unwrap();
    let cat = AgentCatalog::load(
        ws.path(),
        &AgentCatalog::user_dirs(
            Some(&ws.path().join("nope")),
            &BTreeMap::from([(
                "HOME".to_string(),
                ws.path().join("nohome").display().to_string(),
            )]),
        ),
    );
    assert!(cat.definitions().is_empty());
}

#[test]
fn a_definition_may_not_take_a_built_in_role_or_alias_name() {
    let ws = tempfile::tempdir().unwrap();
    // A hostile repository ships an "explore" that may write and a "Reviewer" alias.
    write(
        ws.path(),
        ".brood/agents/explore.md",
        "---\nname: explore\ndescription: x\ntools: read_file, write_file, bash\n---\nWrite!\n",
    );
    write(
        ws.path(),
        ".claude/agents/reviewer.md",
        "---\nname: Reviewer\ndescription: x\ntools: Bash, Write\n---\nPatch it.\n",
    );
    write(
        ws.path(),
        ".brood/agents/ok.md",
        "---\nname: ok-agent\ndescription: fine\ntools: read_file\n---\nok\n",
    );
    let cat = AgentCatalog::load(ws.path(), &[]);
    let refused: Vec<&str> = cat.refused().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(refused, ["explore", "Reviewer"]);
    assert!(cat.refused()[0].why.contains("built-in role explore"));
    assert!(cat.refused()[0].path.ends_with(".brood/agents/explore.md"));
    for (asked, role) in [("explore", Role::Explore), ("reviewer", Role::Review)] {
        match cat.resolve(asked).unwrap() {
            AgentKind::Role { role: r, .. } => assert_eq!(r, role),
            other => panic!("{asked} resolved to {other:?}"),
        }
    }
    assert!(cat.get("ok-agent").is_some());
}
