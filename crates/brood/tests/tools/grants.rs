//! Permissions in the toolbox, panics, schemas, and the todo list.

use super::*;

#[tokio::test]
async fn tools_outside_the_grant_are_not_offered_and_refused() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    let explore = Permissions {
        capabilities: [Capability::Read, Capability::Memory].into_iter().collect(),
        allowed_tools: None,
        write_scopes: None,
        shell: ShellPolicy::None,
        network: false,
        holder: "explore".into(),
    };
    let tb = env.toolbox(explore.clone());
    let names: BTreeSet<String> = tb.names().into_iter().collect();
    for offered in [
        "read_file",
        "list_dir",
        "find_files",
        "grep",
        "todo_read",
        "memory_read",
    ] {
        assert!(names.contains(offered), "{offered} missing from {names:?}");
    }
    for hidden in ["write_file", "edit_file", "bash"] {
        assert!(!names.contains(hidden), "{hidden} offered");
        assert!(tb.specs().iter().all(|s| &*s.name != hidden));
    }
    // Not offered, but a tool of that name exists: refused naming the tool and holder.
    match tb
        .call(
            &tool_call("write_file", json!({"path": "b.txt", "content": "x"})),
            &env.ctx(explore.clone()),
        )
        .await
    {
        Err(ToolError::NotGranted { tool, holder, .. }) => {
            assert_eq!(tool, "write_file");
            assert_eq!(holder, "explore");
        }
        other => panic!("{other:?}"),
    }
    // A name no tool has: unknown, listing what is available.
    match tb
        .call(
            &tool_call("no_such_tool", json!({})),
            &env.ctx(explore.clone()),
        )
        .await
    {
        Err(ToolError::UnknownTool { name, available }) => {
            assert_eq!(name, "no_such_tool");
            assert!(available.contains("read_file"));
        }
        other => panic!("{other:?}"),
    }
    // A wider toolbox called with the narrower permissions: refused at execution.
    let wide = env.toolbox(Permissions::full("parent"));
    match wide
        .call(
            &tool_call("write_file", json!({"path": "b.txt", "content": "x"})),
            &env.ctx(explore.clone()),
        )
        .await
    {
        Err(e @ ToolError::NotGranted { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("write_file") && msg.contains("explore"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!env.ws.join("b.txt").exists());

    // allowed_tools narrows by name.
    let mut only_read = Permissions::full("custom-agent");
    only_read.allowed_tools = Some(BTreeSet::from(["read_file".to_string()]));
    let tb = env.toolbox(only_read.clone());
    assert_eq!(tb.names(), vec!["read_file".to_string()]);
    match wide
        .call(
            &tool_call("grep", json!({"pattern": "a"})),
            &env.ctx(only_read),
        )
        .await
    {
        Err(ToolError::NotGranted { tool, holder, .. }) => {
            assert_eq!(tool, "grep");
            assert_eq!(holder, "custom-agent");
        }
        other => panic!("{other:?}"),
    }
}

struct Panicky;

#[async_trait::async_trait]
impl Tool for Panicky {
    fn name(&self) -> &str {
        "panicky"
    }
    fn description(&self) -> &str {
        "always panics"
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, _: serde_json::Value, _: &ToolContext) -> Result<String, ToolError> {
        let v: Vec<u8> = Vec::new();
        if v.is_empty() {
            panic!("boom inside the tool");
        }
        Ok(String::new())
    }
}

#[tokio::test]
async fn a_panicking_tool_yields_panicked() {
    let env = Env::new();
    let perms = Permissions::full("tester");
    let tb = Toolbox::new(vec![Arc::new(Panicky)], perms.clone());
    match tb
        .call(&tool_call("panicky", json!({})), &env.ctx(perms))
        .await
    {
        Err(ToolError::Panicked { tool, detail }) => {
            assert_eq!(tool, "panicky");
            assert!(detail.contains("boom inside the tool"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_builtin_has_an_object_schema_and_description() {
    let tools = builtin_tools(&BuiltinOptions {
        memory: Some(MemoryFiles::for_workspace(Path::new("/w"), None)),
        sandbox: None,
    });
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "read_file",
            "list_dir",
            "write_file",
            "edit_file",
            "find_files",
            "grep",
            "bash",
            "todo_write",
            "todo_read",
            "memory_read",
            "memory_search",
            "remember"
        ]
    );
    for t in &tools {
        let s = t.schema();
        assert_eq!(s["type"], "object", "{}: {s}", t.name());
        assert!(t.description().len() > 30, "{}", t.name());
    }
    let read = &tools[0].schema();
    assert_eq!(read["required"], json!(["path"]));
    assert!(read["properties"]["start_line"]["description"]
        .as_str()
        .unwrap()
        .contains("1-based"));
    assert!(builtin_tools(&BuiltinOptions::default())
        .iter()
        .all(|t| t.capability() != Capability::Memory));
}

#[tokio::test]
async fn todo_list_is_shared_within_a_set_and_private_to_it() {
    let env = Env::new();
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms.clone());
    let out = tb
        .call(
            &tool_call(
                "todo_write",
                json!({"items": [
                    {"content": "read the code", "status": "done"},
                    {"content": "fix the bug", "status": "in_progress"},
                    {"content": "run tests", "status": "pending"}
                ]}),
            ),
            &ctx,
        )
        .await
        .unwrap();
    let expected = "todo: 1/3 done\n1. [x] read the code\n2. [~] fix the bug\n3. [ ] run tests\n";
    assert_eq!(out, expected);
    assert_eq!(
        tb.call(&tool_call("todo_read", json!({})), &ctx)
            .await
            .unwrap(),
        expected
    );
    // Another run's set starts empty.
    let other = env.toolbox(perms);
    assert_eq!(
        other
            .call(&tool_call("todo_read", json!({})), &ctx)
            .await
            .unwrap(),
        "(the todo list is empty)"
    );
    assert!(matches!(
        tb.call(
            &tool_call(
                "todo_write",
                json!({"items": [{"content": "x", "status": "started"}]})
            ),
            &ctx
        )
        .await,
        Err(ToolError::InvalidArguments { .. })
    ));
}
