//! The sub-agent layer's pure logic through the public API: agent-type resolution,
//! definition files, role postures, grant narrowing, config validation and the model
//! routing precedence. (The output contract is tested in `subagent_contract.rs`.)

use async_trait::async_trait;
use brood::subagent::config::{QuickModelConfig, QuickModels};
use brood::subagent::definition::parse_definition;
use brood::subagent::*;
use brood::tool::{Capability, Permissions, ShellPolicy, Tool, ToolContext, ToolError, Toolbox};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------- fake tools

struct Fake(&'static str, Capability);

#[async_trait]
impl Tool for Fake {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "fake"
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    fn capability(&self) -> Capability {
        self.1
    }
    async fn call(&self, _: serde_json::Value, _: &ToolContext) -> Result<String, ToolError> {
        Ok(String::new())
    }
}

/// Every tool brood ships, with its capability class.
const TOOLS: [(&str, Capability); 18] = [
    ("read_file", Capability::Read),
    ("list_dir", Capability::Read),
    ("find_files", Capability::Read),
    ("grep", Capability::Read),
    ("todo_read", Capability::Read),
    ("todo_write", Capability::Read),
    ("memory_read", Capability::Memory),
    ("memory_search", Capability::Memory),
    ("remember", Capability::Memory),
    ("write_file", Capability::Write),
    ("edit_file", Capability::Write),
    ("bash", Capability::Shell),
    ("task", Capability::Delegate),
    ("agent_open", Capability::Delegate),
    ("agent_eval", Capability::Delegate),
    ("agent_close", Capability::Delegate),
    ("handle_read", Capability::Read),
    ("web_fetch", Capability::Network),
];

fn all_tools() -> Vec<Arc<dyn Tool>> {
    TOOLS
        .iter()
        .map(|(n, c)| Arc::new(Fake(n, *c)) as Arc<dyn Tool>)
        .collect()
}

/// Names a toolbox built from `p` offers.
fn offered(p: &Permissions) -> BTreeSet<String> {
    Toolbox::new(all_tools(), p.clone()).names().into_iter().collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn parent_full() -> (Permissions, Vec<String>) {
    let p = Permissions::full("parent");
    let tools = offered(&p).into_iter().collect();
    (p, tools)
}

fn request<'a>(
    parent: &'a Permissions,
    tools: &'a [String],
    role: Role,
    ro_shell: bool,
) -> GrantRequest<'a> {
    GrantRequest {
        parent,
        parent_tools: tools,
        role,
        agent: role.as_str(),
        definition_tools: None,
        disallowed_tools: &[],
        allowed_tools: None,
        read_only_shell_available: ro_shell,
    }
}

// ---------------------------------------------------------------- resolution

#[test]
fn every_role_and_alias_resolves_case_insensitively() {
    let cat = AgentCatalog::default();
    let table = [
        (Role::General, &["general", "worker", "default", "general-purpose"][..]),
        (Role::Explore, &["explore", "explorer", "exploration"]),
        (Role::Plan, &["plan", "planning", "planner", "awaiter"]),
        (Role::Review, &["review", "reviewer", "code-review", "code_review"]),
        (Role::Implementer, &["implementer", "implement", "implementation", "builder"]),
        (Role::Verifier, &["verifier", "verify", "verification", "validator", "tester"]),
        (Role::Custom, &["custom"]),
    ];
    for (role, names) in table {
        for name in names {
            for spelling in [name.to_string(), name.to_uppercase(), format!("  {}  ", capitalize(name))] {
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
    write(dir.path(), ".brood/agents/api-mapper.md", "---\ndescription: maps routes\n---\nMap.");
    let cat = AgentCatalog::load(dir.path(), None).unwrap();
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
    parse_definition(text, Path::new("/ws/.brood/agents/x.md"), DefinitionSource::Workspace)
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
    assert_eq!(d.tools, Some(vec![]), "an empty list means no tools, not all tools");
}

#[test]
fn unknown_key_is_an_error_naming_file_and_key() {
    let err = parse("---\ndescription: d\ntemperature: 0.2\n---\n").unwrap_err();
    match &err {
        DefinitionError::UnknownKey { path, key, accepted } => {
            assert_eq!(path, Path::new("/ws/.brood/agents/x.md"));
            assert_eq!(key, "temperature");
            assert!(accepted.contains("fork_context") && accepted.contains("color"));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("x.md") && err.to_string().contains("`temperature`"));
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
    let err = parse("---\ndescription: d\nrole: wizard\n---\n").unwrap_err().to_string();
    assert!(err.contains("explore") && err.contains("verifier"), "{err}");
}

#[test]
fn structural_errors() {
    assert!(matches!(parse("no front matter"), Err(DefinitionError::NoFrontMatter { .. })));
    assert!(matches!(parse("---\ndescription: d\n"), Err(DefinitionError::UnclosedFrontMatter { .. })));
    assert!(matches!(parse("---\n- a\n- b\n---\n"), Err(DefinitionError::NotAMapping { .. })));
    assert!(matches!(parse("---\ndescription: [\n---\n"), Err(DefinitionError::Yaml { .. })));
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
        Some(strings(&["read_file", "grep", "find_files", "todo_write", "todo_read"])),
        "Bash(...) cannot be enforced and WebFetch does not exist: both dropped, never widened"
    );
    assert_eq!(d.color.as_deref(), Some("blue"));
    assert_eq!(d.max_turns, Some(7));
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(d.warnings.iter().any(|w| w.contains("Bash(git diff:*)")));
    assert!(d.warnings.iter().any(|w| w.contains("WebFetch")));
    // Claude's model aliases mean "inherit" unless the user defined a quick model by that name.
    assert_eq!(d.route_model(&QuickModels::default()), None);
    let quick = QuickModels::from_config(&BTreeMap::from([(
        "Sonnet".to_string(),
        QuickModelConfig { provider: "openrouter".into(), model: "anthropic/claude-sonnet".into() },
    )]))
    .unwrap();
    assert_eq!(d.route_model(&quick), Some("sonnet"));
    // The same alias in a brood file is taken literally.
    let b = parse("---\ndescription: d\nmodel: sonnet\n---\n").unwrap();
    assert_eq!(b.route_model(&QuickModels::default()), Some("sonnet"));
    let i = parse("---\ndescription: d\nmodel: inherit\n---\n").unwrap();
    assert_eq!(i.route_model(&QuickModels::default()), None);
}

#[test]
fn claude_permission_mode_and_ignored_keys() {
    let d = parse("---\ndescription: d\npermissionMode: plan\n---\n").unwrap();
    assert_eq!(d.role, Role::Plan, "plan mode is read-only: take the plan posture");
    let d = parse("---\ndescription: d\npermissionMode: acceptEdits\nskills: [a]\ndisallowedTools: Write, Edit\n---\n").unwrap();
    assert_eq!(d.role, Role::General);
    assert_eq!(d.disallowed_tools, strings(&["write_file", "edit_file"]));
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
}

#[test]
fn catalog_precedence_shadowing_and_collected_errors() {
    let ws = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let body = |who: &str| format!("---\nname: Mapper\ndescription: from {who}\n---\n{who}");
    let brood = write(ws.path(), ".brood/agents/mapper.md", &body("brood"));
    write(ws.path(), ".claude/agents/mapper.md", &body("claude"));
    write(user.path(), "mapper.md", &body("user"));
    write(ws.path(), ".claude/agents/only-claude.md", "---\ndescription: c\n---\n");
    write(user.path(), "only-user.md", "---\ndescription: u\n---\n");
    write(user.path(), "notes.txt", "not an agent");
    // A role name can be taken by a definition; the definition wins.
    write(user.path(), "explore.md", "---\ndescription: my explorer\nrole: review\n---\nmine");

    let cat = AgentCatalog::load(ws.path(), Some(user.path())).unwrap();
    let names: Vec<&str> = cat.definitions().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["Mapper", "only-claude", "explore", "only-user"]);
    let m = cat.get("mapper").unwrap();
    assert_eq!(m.description, "from brood");
    assert_eq!(m.path, brood);
    assert_eq!(cat.shadowed().len(), 2);
    assert!(cat.shadowed().iter().all(|s| s.by == brood));
    assert_eq!(cat.get("only-claude").unwrap().source, DefinitionSource::Claude);
    match cat.resolve("EXPLORE").unwrap() {
        AgentKind::Definition(d) => assert_eq!((d.role, d.prompt.as_str()), (Role::Review, "mine")),
        other => panic!("{other:?}"),
    }

    // Every bad file is reported at once, and two files with one name in one directory too.
    write(ws.path(), ".brood/agents/bad1.md", "---\ndescription: d\nfoo: 1\n---\n");
    write(ws.path(), ".claude/agents/bad2.md", "---\ndescription: d\nmax_turns: x\n---\n");
    write(ws.path(), ".brood/agents/zz-mapper.md", &body("twin"));
    let err = AgentCatalog::load(ws.path(), Some(user.path())).unwrap_err();
    assert_eq!(err.errors.len(), 3, "{err}");
    assert!(err.errors.iter().any(|e| matches!(e, DefinitionError::UnknownKey { key, .. } if key == "foo")));
    assert!(err.errors.iter().any(|e| matches!(e, DefinitionError::BadValue { key, .. } if key == "max_turns")));
    assert!(err.errors.iter().any(|e| matches!(e, DefinitionError::DuplicateName { .. })));
}

#[test]
fn missing_directories_give_an_empty_catalog() {
    let ws = tempfile::tempdir().unwrap();
    let cat = AgentCatalog::load(ws.path(), Some(&ws.path().join("nope"))).unwrap();
    assert!(cat.definitions().is_empty());
}

// ---------------------------------------------------------------- postures

#[test]
fn posture_of_each_role_under_a_full_parent() {
    let (parent, tools) = parent_full();
    let read = ["read_file", "list_dir", "find_files", "grep", "todo_read", "todo_write", "memory_read", "memory_search"];
    let with = |extra: &[&str]| {
        let mut s = set(&read);
        s.extend(extra.iter().map(|t| t.to_string()));
        s
    };
    let cases: [(Role, bool, BTreeSet<String>, ShellPolicy); 8] = [
        (Role::General, true, set(&TOOLS.map(|t| t.0)), ShellPolicy::Full),
        (Role::Explore, true, with(&["bash"]), ShellPolicy::ReadOnly),
        (Role::Explore, false, with(&[]), ShellPolicy::None),
        (Role::Plan, true, with(&["write_file", "edit_file", "bash"]), ShellPolicy::ReadOnly),
        (Role::Plan, false, with(&["write_file", "edit_file"]), ShellPolicy::None),
        (Role::Review, true, with(&[]), ShellPolicy::None),
        (Role::Implementer, false, with(&["remember", "write_file", "edit_file", "bash"]), ShellPolicy::Full),
        (Role::Verifier, false, with(&["remember", "bash"]), ShellPolicy::Full),
    ];
    for (role, ro, expect, shell) in cases {
        let p = child_permissions(&request(&parent, &tools, role, ro)).unwrap();
        assert_eq!(offered(&p), expect, "{role} (read-only shell available: {ro})");
        assert_eq!(p.shell, shell, "{role}");
        assert_eq!(p.holder, role.as_str());
    }
    let plan = child_permissions(&request(&parent, &tools, Role::Plan, true)).unwrap();
    assert_eq!(plan.write_scopes, Some(vec![PathBuf::from(".brood/plans")]));
    let explore = child_permissions(&request(&parent, &tools, Role::Explore, true)).unwrap();
    assert!(!explore.capabilities.contains(&Capability::Write));
}

#[test]
fn refused_calls_name_the_tool_and_the_role() {
    let (parent, tools) = parent_full();
    let p = child_permissions(&request(&parent, &tools, Role::Review, true)).unwrap();
    let err = p.check_tool(&Fake("bash", Capability::Shell)).unwrap_err().to_string();
    assert!(err.contains("bash") && err.contains("review"), "{err}");
    let err = p.check_tool(&Fake("write_file", Capability::Write)).unwrap_err().to_string();
    assert!(err.contains("write_file") && err.contains("review"), "{err}");
}

#[test]
fn custom_gets_exactly_its_allowed_tools() {
    let (parent, tools) = parent_full();
    let allowed = strings(&["grep", "bash"]);
    let mut req = request(&parent, &tools, Role::Custom, true);
    req.allowed_tools = Some(&allowed);
    let p = child_permissions(&req).unwrap();
    assert_eq!(offered(&p), set(&["grep", "bash"]));
    assert_eq!(p.shell, ShellPolicy::Full);

    let allowed = strings(&["read_file"]);
    req.allowed_tools = Some(&allowed);
    let p = child_permissions(&req).unwrap();
    assert_eq!(offered(&p), set(&["read_file"]));
    assert_eq!(p.shell, ShellPolicy::None, "no bash listed: no shell");
}

#[test]
fn custom_requires_tools_the_parent_has() {
    let (full, _) = parent_full();
    let parent = full.intersect(&Role::Review.posture(true));
    let tools: Vec<String> = offered(&parent).into_iter().collect();
    let mut req = request(&parent, &tools, Role::Custom, true);
    match child_permissions(&req) {
        Err(GrantError::CustomNeedsTools { available }) => assert_eq!(available, tools),
        other => panic!("{other:?}"),
    }
    let empty: Vec<String> = vec![];
    req.allowed_tools = Some(&empty);
    assert!(matches!(child_permissions(&req), Err(GrantError::CustomNeedsTools { .. })));
    let allowed = strings(&["grep", "bash"]);
    req.allowed_tools = Some(&allowed);
    let err = child_permissions(&req).unwrap_err();
    match &err {
        GrantError::ToolNotAvailable { tool, origin, .. } => {
            assert_eq!(tool, "bash");
            assert_eq!(origin, "allowed_tools");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("read_file"), "lists what is available: {err}");
    let typo = strings(&["grpe"]);
    req.allowed_tools = Some(&typo);
    assert!(matches!(child_permissions(&req), Err(GrantError::ToolNotAvailable { tool, .. }) if tool == "grpe"));
}

#[test]
fn definition_tools_and_disallowed_tools_narrow() {
    let (parent, tools) = parent_full();
    let def_tools = strings(&["read_file", "bash"]);
    let mut req = request(&parent, &tools, Role::General, true);
    req.definition_tools = Some(&def_tools);
    assert_eq!(offered(&child_permissions(&req).unwrap()), set(&["read_file", "bash"]));

    let missing = strings(&["read_file", "deploy"]);
    req.definition_tools = Some(&missing);
    req.agent = "shipper";
    match child_permissions(&req) {
        Err(GrantError::ToolNotAvailable { tool, origin, agent, .. }) => {
            assert_eq!((tool.as_str(), agent.as_str()), ("deploy", "shipper"));
            assert!(origin.contains("shipper"));
        }
        other => panic!("{other:?}"),
    }

    let denied = strings(&["write_file", "edit_file", "bash"]);
    let mut req = request(&parent, &tools, Role::General, true);
    req.disallowed_tools = &denied;
    let p = child_permissions(&req).unwrap();
    let got = offered(&p);
    assert!(got.contains("read_file") && got.contains("task"));
    assert!(!got.contains("write_file") && !got.contains("bash"));
    assert_eq!(p.shell, ShellPolicy::None);
}

/// Parents drawn from every combination of capabilities, shell policy, tool list
/// and write scope; children of every role with and without the sandbox, with and
/// without a definition list: whatever the child may call, the parent may call, and
/// the child's write scopes and shell are inside the parent's.
#[test]
fn a_child_never_gains_anything_the_parent_lacks() {
    let tool_lists: [Option<&[&str]>; 4] = [
        None,
        Some(&["read_file", "grep", "bash"]),
        Some(&["write_file", "edit_file", "task", "memory_read"]),
        Some(&[]),
    ];
    let scopes: [Option<Vec<PathBuf>>; 3] =
        [None, Some(vec![".brood".into()]), Some(vec!["src".into(), ".brood/plans/x".into()])];
    let def_lists: [Option<Vec<String>>; 2] = [None, Some(strings(&["read_file", "write_file", "bash"]))];
    let fakes = all_tools();
    let mut checked = 0usize;
    for mask in 0u32..64 {
        let caps: BTreeSet<Capability> =
            Capability::ALL.into_iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c).collect();
        for shell in [ShellPolicy::None, ShellPolicy::ReadOnly, ShellPolicy::Full] {
            for list in &tool_lists {
                for scope in &scopes {
                    let parent = Permissions {
                        capabilities: caps.clone(),
                        allowed_tools: list.map(set),
                        write_scopes: scope.clone(),
                        shell,
                        holder: "parent".into(),
                    };
                    let ptools: Vec<String> = offered(&parent).into_iter().collect();
                    for role in Role::ALL {
                        for ro in [false, true] {
                            for def in &def_lists {
                                let mut req = request(&parent, &ptools, role, ro);
                                let custom: Vec<String> = ptools.iter().take(2).cloned().collect();
                                if role == Role::Custom {
                                    req.allowed_tools = Some(&custom);
                                }
                                req.definition_tools = def.as_deref();
                                let Ok(child) = child_permissions(&req) else {
                                    // Only refusals for lists naming tools the parent lacks
                                    // (or a custom child of a parent with no tools).
                                    let listed_missing = def.iter().flatten().any(|t| !ptools.contains(t));
                                    assert!(listed_missing || custom.is_empty(), "{role} refused under {parent:?}");
                                    continue;
                                };
                                checked += 1;
                                for t in &fakes {
                                    if child.check_tool(t.as_ref()).is_ok() {
                                        assert!(parent.check_tool(t.as_ref()).is_ok(), "{role} gained {} over {parent:?}", t.name());
                                    }
                                }
                                assert!(child.capabilities.is_subset(&parent.capabilities));
                                assert!(child.shell <= parent.shell);
                                if !ro {
                                    assert_ne!(child.shell, ShellPolicy::ReadOnly, "no sandbox: no read-only shell");
                                }
                                if let Some(ps) = &parent.allowed_tools {
                                    assert!(child.allowed_tools.as_ref().is_some_and(|c| c.is_subset(ps)));
                                }
                                if let Some(ps) = &parent.write_scopes {
                                    let cs = child.write_scopes.as_ref().expect("scope dropped");
                                    assert!(cs.iter().all(|c| ps.iter().any(|p| c.starts_with(p))), "{cs:?} ⊄ {ps:?}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "too few combinations checked: {checked}");
}

// ---------------------------------------------------------------- whole grant

#[test]
fn grant_limits_fork_and_prompt() {
    let (parent, tools) = parent_full();
    let settings = SubagentsConfig { max_turns: Some(33), token_budget: Some(5000), wall_time_secs: Some(60), ..Default::default() }
        .resolve()
        .unwrap();
    let defaults = SubagentSettings::default();
    let quick = QuickModels::default();
    let explore = AgentCatalog::default().resolve("explorer").unwrap();
    let spec = SpawnSpec {
        kind: &explore,
        parent: &parent,
        parent_tools: &tools,
        allowed_tools: None,
        model: None,
        fork_context: None,
        read_only_shell_available: true,
    };
    let g = grant_for(&spec, &defaults, &quick, ("deepseek", "deepseek-chat")).unwrap();
    assert_eq!((g.role, g.agent.as_str(), g.max_turns), (Role::Explore, "explore", 20));
    assert_eq!(g.wall_time, Duration::from_secs(1800));
    assert!(!g.fork_context);
    assert!(g.system_prompt.starts_with(Role::Explore.stance_prompt()));
    assert!(g.system_prompt.contains("EVIDENCE"));
    assert_eq!(g.route.source, "main");
    let g = grant_for(&SpawnSpec { fork_context: Some(true), ..spec }, &settings, &quick, ("p", "m")).unwrap();
    assert_eq!((g.max_turns, g.token_budget, g.wall_time), (33, Some(5000), Duration::from_secs(60)));
    assert!(g.fork_context);

    let def = parse("---\ndescription: d\nmax_turns: 4\nfork_context: true\nrole: verifier\n---\nVerify.").unwrap();
    let kind = AgentKind::Definition(Arc::new(def));
    let g = grant_for(&SpawnSpec { kind: &kind, ..spec }, &settings, &quick, ("p", "m")).unwrap();
    assert_eq!((g.max_turns, g.fork_context, g.agent.as_str()), (4, true, "x"));
    assert_eq!(g.permissions.holder, "x");
    assert!(g.system_prompt.starts_with("Verify."));
    let g = grant_for(&SpawnSpec { kind: &kind, fork_context: Some(false), ..spec }, &settings, &quick, ("p", "m")).unwrap();
    assert!(!g.fork_context, "the call's fork_context wins over the definition's");
    serde_json::to_string(&g).unwrap();
}
