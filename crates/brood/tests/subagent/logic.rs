//! Grants through the public API: each role's posture, custom `allowed_tools`,
//! definition tool lists, the narrowing property over every parent, and the whole
//! grant (limits, fork, prompt). Agent types and definition files are tested in
//! `definitions.rs`, the output contract in `contract.rs`, config
//! and routing in `routing.rs`.

use async_trait::async_trait;
use brood::subagent::config::QuickModels;
use brood::subagent::definition::parse_definition;
use brood::subagent::*;
use brood::tool::{Capability, Permissions, ShellPolicy, Tool, ToolContext, ToolError, Toolbox};
use std::collections::BTreeSet;
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
    Toolbox::new(all_tools(), p.clone())
        .names()
        .into_iter()
        .collect()
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
        definition_network: None,
        allowed_tools: None,
        read_only_shell_available: ro_shell,
        mcp_read_only: &NO_MCP,
    }
}

// ---------------------------------------------------------------- postures

#[test]
fn posture_of_each_role_under_a_full_parent() {
    let (parent, tools) = parent_full();
    let read = [
        "read_file",
        "list_dir",
        "find_files",
        "grep",
        "todo_read",
        "todo_write",
        "memory_read",
        "memory_search",
    ];
    let with = |extra: &[&str]| {
        let mut s = set(&read);
        s.extend(extra.iter().map(|t| t.to_string()));
        s
    };
    // Explore and review keep no todo list.
    let scan = |extra: &[&str]| {
        let mut s = with(extra);
        s.retain(|t| !t.starts_with("todo_"));
        s
    };
    let cases: [(Role, bool, BTreeSet<String>, ShellPolicy); 8] = [
        (
            Role::General,
            true,
            set(&TOOLS.map(|t| t.0)),
            ShellPolicy::Full,
        ),
        (Role::Explore, true, scan(&["bash"]), ShellPolicy::ReadOnly),
        (Role::Explore, false, scan(&[]), ShellPolicy::None),
        (
            Role::Plan,
            true,
            with(&["write_file", "edit_file", "bash"]),
            ShellPolicy::ReadOnly,
        ),
        (
            Role::Plan,
            false,
            with(&["write_file", "edit_file"]),
            ShellPolicy::None,
        ),
        (Role::Review, true, scan(&[]), ShellPolicy::None),
        (
            Role::Implementer,
            false,
            with(&["remember", "write_file", "edit_file", "bash"]),
            ShellPolicy::Full,
        ),
        (
            Role::Verifier,
            false,
            with(&["remember", "bash"]),
            ShellPolicy::Full,
        ),
    ];
    for (role, ro, expect, shell) in cases {
        let p = child_permissions(&request(&parent, &tools, role, ro)).unwrap();
        assert_eq!(
            offered(&p),
            expect,
            "{role} (read-only shell available: {ro})"
        );
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
    let err = p
        .check_tool(&Fake("bash", Capability::Shell))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bash") && err.contains("review"), "{err}");
    let err = p
        .check_tool(&Fake("write_file", Capability::Write))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("write_file") && err.contains("review"),
        "{err}"
    );
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
    assert!(matches!(
        child_permissions(&req),
        Err(GrantError::CustomNeedsTools { .. })
    ));
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
    assert!(
        err.to_string().contains("read_file"),
        "lists what is available: {err}"
    );
    let typo = strings(&["grpe"]);
    req.allowed_tools = Some(&typo);
    assert!(
        matches!(child_permissions(&req), Err(GrantError::ToolNotAvailable { tool, .. }) if tool == "grpe")
    );
}

#[test]
fn definition_tools_and_disallowed_tools_narrow() {
    let (parent, tools) = parent_full();
    let def_tools = strings(&["read_file", "bash"]);
    let mut req = request(&parent, &tools, Role::General, true);
    req.definition_tools = Some(&def_tools);
    assert_eq!(
        offered(&child_permissions(&req).unwrap()),
        set(&["read_file", "bash"])
    );

    let missing = strings(&["read_file", "deploy"]);
    req.definition_tools = Some(&missing);
    req.agent = "shipper";
    match child_permissions(&req) {
        Err(GrantError::ToolNotAvailable {
            tool,
            origin,
            agent,
            ..
        }) => {
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
    let scopes: [Option<Vec<PathBuf>>; 3] = [
        None,
        Some(vec![".brood".into()]),
        Some(vec!["src".into(), ".brood/plans/x".into()]),
    ];
    let def_lists: [Option<Vec<String>>; 2] =
        [None, Some(strings(&["read_file", "write_file", "bash"]))];
    let fakes = all_tools();
    let mut checked = 0usize;
    for mask in 0u32..64 {
        let caps: BTreeSet<Capability> = Capability::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, c)| c)
            .collect();
        for shell in [ShellPolicy::None, ShellPolicy::ReadOnly, ShellPolicy::Full] {
            for list in &tool_lists {
                for scope in &scopes {
                    let parent = Permissions {
                        capabilities: caps.clone(),
                        allowed_tools: list.map(set),
                        write_scopes: scope.clone(),
                        shell,
                        // Varies with the capability mask.
                        network: mask & 1 == 0,
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
                                req.definition_network =
                                    [None, Some(true), Some(false)][checked % 3];
                                let Ok(child) = child_permissions(&req) else {
                                    // Only refusals for lists naming tools the parent lacks
                                    // (or a custom child of a parent with no tools).
                                    let listed_missing =
                                        def.iter().flatten().any(|t| !ptools.contains(t));
                                    assert!(
                                        listed_missing || custom.is_empty(),
                                        "{role} refused under {parent:?}"
                                    );
                                    continue;
                                };
                                checked += 1;
                                for t in &fakes {
                                    if child.check_tool(t.as_ref()).is_ok() {
                                        assert!(
                                            parent.check_tool(t.as_ref()).is_ok(),
                                            "{role} gained {} over {parent:?}",
                                            t.name()
                                        );
                                    }
                                }
                                assert!(child.capabilities.is_subset(&parent.capabilities));
                                assert!(child.shell <= parent.shell);
                                assert!(!child.network || parent.network, "{role} gained network");
                                if req.definition_network == Some(false) {
                                    assert!(!child.network, "network: false ignored");
                                }
                                if !ro {
                                    assert_ne!(
                                        child.shell,
                                        ShellPolicy::ReadOnly,
                                        "no sandbox: no read-only shell"
                                    );
                                }
                                if let Some(ps) = &parent.allowed_tools {
                                    assert!(child
                                        .allowed_tools
                                        .as_ref()
                                        .is_some_and(|c| c.is_subset(ps)));
                                }
                                if let Some(ps) = &parent.write_scopes {
                                    let cs = child.write_scopes.as_ref().expect("scope dropped");
                                    assert!(
                                        cs.iter().all(|c| ps.iter().any(|p| c.starts_with(p))),
                                        "{cs:?} ⊄ {ps:?}"
                                    );
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

fn parse(text: &str) -> Result<AgentDefinition, DefinitionError> {
    parse_definition(
        text,
        Path::new("/ws/.brood/agents/x.md"),
        DefinitionSource::Workspace,
    )
}

#[test]
fn grant_limits_fork_and_prompt() {
    let (parent, tools) = parent_full();
    let settings = SubagentsConfig {
        max_turns: Some(33),
        token_budget: Some(5000),
        wall_time_secs: Some(60),
        ..Default::default()
    }
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
        mcp_read_only: &NO_MCP,
    };
    let g = grant_for(&spec, &defaults, &quick, ("deepseek", "deepseek-chat")).unwrap();
    assert_eq!(
        (g.role, g.agent.as_str(), g.max_turns),
        (Role::Explore, "explore", 20)
    );
    assert_eq!(g.wall_time, Duration::from_secs(1800));
    assert!(!g.fork_context);
    assert!(g.system_prompt.starts_with(Role::Explore.stance_prompt()));
    assert!(g.system_prompt.contains("EVIDENCE"));
    assert_eq!(g.route.source, "main");
    let g = grant_for(
        &SpawnSpec {
            fork_context: Some(true),
            ..spec
        },
        &settings,
        &quick,
        ("p", "m"),
    )
    .unwrap();
    assert_eq!(
        (g.max_turns, g.token_budget, g.wall_time),
        (33, Some(5000), Duration::from_secs(60))
    );
    assert!(g.fork_context);

    let def = parse(
        "---\ndescription: d\nmax_turns: 4\nfork_context: true\nrole: verifier\n---\nVerify.",
    )
    .unwrap();
    let kind = AgentKind::Definition(Arc::new(def));
    let g = grant_for(
        &SpawnSpec {
            kind: &kind,
            ..spec
        },
        &settings,
        &quick,
        ("p", "m"),
    )
    .unwrap();
    assert_eq!(
        (g.max_turns, g.fork_context, g.agent.as_str()),
        (4, true, "x")
    );
    assert_eq!(g.permissions.holder, "x");
    assert!(g.system_prompt.starts_with("Verify."));
    // A definition may lower the user's limits, never raise them.
    let greedy = AgentKind::Definition(Arc::new(
        parse(
            "---\ndescription: d\nmax_turns: 500\ntoken_budget: 1000000\nrole: verifier\n---\nV.",
        )
        .unwrap(),
    ));
    let spec_greedy = SpawnSpec {
        kind: &greedy,
        ..spec
    };
    for (s, limit, tokens) in [(&settings, 33, 5000), (&defaults, 50, 1_000_000)] {
        let g = grant_for(&spec_greedy, s, &quick, ("p", "m")).unwrap();
        assert_eq!((g.max_turns, g.token_budget), (limit, Some(tokens)));
        // Each lowering is said, naming the file and the limit that won.
        let said = g.adjustments.join("\n");
        assert!(
            said.contains(&format!(
                "max_turns = 500 in /ws/.brood/agents/x.md lowered to {limit}"
            )),
            "{said}"
        );
        assert_eq!(
            said.contains("token_budget = 1000000"),
            tokens == 5000,
            "{said}"
        );
    }
    assert!(g.adjustments.is_empty(), "{:?}", g.adjustments);
    let g = grant_for(
        &SpawnSpec {
            kind: &kind,
            fork_context: Some(false),
            ..spec
        },
        &settings,
        &quick,
        ("p", "m"),
    )
    .unwrap();
    assert!(
        !g.fork_context,
        "the call's fork_context wins over the definition's"
    );
    serde_json::to_string(&g).unwrap();
}

/// No MCP tools are read-only in these grants.
static NO_MCP: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
