//! read_file, list_dir, write_file, edit_file and write scopes.

use super::*;

#[tokio::test]
async fn read_file_numbers_lines_ranges_and_marks_truncation() {
    let env = Env::new();
    let text: String = (1..=2500).map(|i| format!("line {i}\n")).collect();
    env.write("big.txt", &text);

    let out = call(&env, "read_file", json!({"path": "big.txt"}))
        .await
        .unwrap();
    assert!(out.starts_with("     1\tline 1\n     2\tline 2\n"));
    assert!(out.contains("  2000\tline 2000\n"));
    assert!(!out.contains("line 2001"));
    assert!(
        out.trim_end().ends_with(
            "showing lines 1-2000 of 2500; call read_file with start_line=2001 to read more]"
        ),
        "{}",
        &out[out.len() - 200..]
    );

    let out = call(
        &env,
        "read_file",
        json!({"path": "big.txt", "start_line": 2001}),
    )
    .await
    .unwrap();
    assert!(out.starts_with("  2001\tline 2001\n"));
    assert!(
        out.ends_with("  2500\tline 2500\n[showing lines 2001-2500 of 2500]\n"),
        "{}",
        &out[out.len() - 100..]
    );

    let out = call(
        &env,
        "read_file",
        json!({"path": "big.txt", "start_line": 10, "end_line": 12}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "    10\tline 10\n    11\tline 11\n    12\tline 12\n[showing lines 10-12 of 2500]\n"
    );
    let out = call(
        &env,
        "read_file",
        json!({"path": "big.txt", "offset": 2499, "limit": 5}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "  2499\tline 2499\n  2500\tline 2500\n[showing lines 2499-2500 of 2500]\n"
    );

    match call(
        &env,
        "read_file",
        json!({"path": "big.txt", "start_line": 3000}),
    )
    .await
    {
        Err(ToolError::InvalidArguments { detail, .. }) => {
            assert!(detail.contains("2500 lines"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn read_file_caps_bytes_refuses_binaries_and_directories() {
    let env = Env::new();
    // 300 lines of ~1.5 KiB: over 256 KiB long before 2000 lines.
    let long = "x".repeat(1500);
    let text: String = (1..=300).map(|i| format!("{i} {long}\n")).collect();
    env.write("wide.txt", &text);
    let out = call(&env, "read_file", json!({"path": "wide.txt"}))
        .await
        .unwrap();
    assert!(out.len() < 270 * 1024, "{} bytes", out.len());
    let marker = out.lines().last().unwrap();
    assert!(
        marker.contains("of 300; call read_file with start_line="),
        "{marker}"
    );

    std::fs::write(env.ws.join("blob.bin"), b"ab\0cd\x01\x02").unwrap();
    match call(&env, "read_file", json!({"path": "blob.bin"})).await {
        Err(ToolError::BinaryFile { path, bytes }) => {
            assert_eq!(path, "blob.bin");
            assert_eq!(bytes, 7);
        }
        other => panic!("{other:?}"),
    }
    std::fs::create_dir_all(env.ws.join("d")).unwrap();
    let err = call(&env, "read_file", json!({"path": "d"}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("list_dir"), "{err}");
    assert!(matches!(
        call(&env, "read_file", json!({"path": "missing.txt"})).await,
        Err(ToolError::NotFound { path }) if path == "missing.txt"
    ));
    assert!(matches!(
        call(&env, "read_file", json!({"pat": "x"})).await,
        Err(ToolError::InvalidArguments { tool, .. }) if tool == "read_file"
    ));
}

#[tokio::test]
async fn list_dir_sorts_and_marks_directories() {
    let env = Env::new();
    env.write("b.txt", "");
    env.write("a/inner.txt", "");
    env.write(".hidden", "");
    symlink("b.txt", env.ws.join("c_link")).unwrap();
    let out = call(&env, "list_dir", json!({})).await.unwrap();
    assert_eq!(out, ".hidden\na/\nb.txt\nc_link -> b.txt\n");
    let out = call(&env, "list_dir", json!({"path": "a"})).await.unwrap();
    assert_eq!(out, "inner.txt\n");
}

#[tokio::test]
async fn write_file_creates_parents_atomically_and_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let out = call(
        &env,
        "write_file",
        json!({"path": "deep/er/new.txt", "content": "one\ntwo\n"}),
    )
    .await
    .unwrap();
    assert!(out.starts_with("created deep/er/new.txt"), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("deep/er/new.txt")).unwrap(),
        "one\ntwo\n"
    );

    env.write("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(
        env.ws.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let out = call(
        &env,
        "write_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    )
    .await
    .unwrap();
    assert!(out.starts_with("overwrote run.sh"), "{out}");
    let mode = std::fs::metadata(env.ws.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    // No temp files left behind.
    let names: Vec<String> = std::fs::read_dir(&env.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("brood-")), "{names:?}");
}

#[tokio::test]
async fn edit_file_requires_exactly_one_match() {
    let env = Env::new();
    let original = "fn a() {}\nfn b() {}\nfn a() {}\n";
    env.write("src/lib.rs", original);

    match call(
        &env,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn c()", "new_string": "fn d()"}),
    )
    .await
    {
        Err(e @ ToolError::EditNoMatch { .. }) => {
            assert!(e.to_string().contains("src/lib.rs"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    match call(
        &env,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn a() {}", "new_string": "fn z() {}"}),
    )
    .await
    {
        Err(e @ ToolError::EditAmbiguous { count: 2, .. }) => {
            assert!(e.to_string().contains("2 times"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(env.ws.join("src/lib.rs")).unwrap(),
        original
    );

    let out = call(
        &env,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn b() {}", "new_string": "fn b() { 1 }"}),
    )
    .await
    .unwrap();
    assert!(out.contains("line 2"), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("src/lib.rs")).unwrap(),
        "fn a() {}\nfn b() { 1 }\nfn a() {}\n"
    );
}

#[tokio::test]
async fn write_scopes_bound_writes() {
    let env = Env::new();
    env.write("src/main.rs", "fn main() {}\n");
    let mut perms = Permissions::full("plan");
    perms.write_scopes = Some(vec![PathBuf::from(".brood/plans")]);
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms);

    tb.call(
        &tool_call(
            "write_file",
            json!({"path": ".brood/plans/step1.md", "content": "# plan\n"}),
        ),
        &ctx,
    )
    .await
    .unwrap();
    assert!(env.ws.join(".brood/plans/step1.md").exists());

    for (name, args) in [
        ("write_file", json!({"path": "src/new.rs", "content": "x"})),
        (
            "write_file",
            json!({"path": ".brood/plans/../evil.md", "content": "x"}),
        ),
        (
            "edit_file",
            json!({"path": "src/main.rs", "old_string": "main", "new_string": "niam"}),
        ),
    ] {
        match tb.call(&tool_call(name, args), &ctx).await {
            Err(e @ ToolError::NotGranted { .. }) => {
                let ToolError::NotGranted {
                    tool,
                    holder,
                    reason,
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!(tool, name);
                assert_eq!(holder, "plan");
                assert!(reason.contains(".brood/plans/"), "{reason}");
            }
            // `.brood/` outside the plans is protected for every holder.
            Err(ToolError::Protected { reason, .. }) => {
                assert!(reason.contains(".brood/plans/"), "{reason}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(!env.ws.join("src/new.rs").exists());
    assert!(!env.ws.join(".brood/evil.md").exists());
    assert_eq!(
        std::fs::read_to_string(env.ws.join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
}

#[tokio::test]
async fn special_files_are_refused_instead_of_blocking() {
    let env = Env::new();
    let fifo = env.ws.join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    for (name, args) in [
        ("read_file", json!({"path": "fifo"})),
        (
            "edit_file",
            json!({"path": "fifo", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let err = call(&env, name, args).await.unwrap_err();
        assert!(
            err.to_string().contains("not a regular file"),
            "{name}: {err}"
        );
    }
    // The searches skip it rather than hang on it.
    let out = call(&env, "grep", json!({"pattern": "x"})).await.unwrap();
    assert!(out.starts_with("no matches"), "{out}");
    // A single file as the search path is matched by its name.
    env.write("src/one.rs", "x\n");
    let out = call(
        &env,
        "find_files",
        json!({"pattern": "*.rs", "path": "src/one.rs"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "src/one.rs\n");
}

#[tokio::test]
async fn fifty_parallel_edits_of_one_file_all_land() {
    let env = Env::new();
    let text: String = (0..50).map(|i| format!("marker-{i:02}\n")).collect();
    env.write("shared.txt", &text);
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    // One workspace (one session) for every call, as sibling calls of a step share it.
    let ctx = env.ctx(perms);
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (tb, ctx) = (tb.clone(), ctx.clone());
        tasks.push(tokio::spawn(async move {
            let args = json!({
                "path": "shared.txt",
                "old_string": format!("marker-{i:02}\n"),
                "new_string": format!("edited-{i:02}\n"),
            });
            tb.call(&tool_call("edit_file", args), &ctx).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let after = std::fs::read_to_string(env.ws.join("shared.txt")).unwrap();
    let expected: String = (0..50).map(|i| format!("edited-{i:02}\n")).collect();
    assert_eq!(after, expected, "an edit was lost");
}

#[tokio::test]
async fn list_dir_keeps_the_first_entries_by_name_of_a_large_directory() {
    let env = Env::new();
    // Created in reverse order, so the directory's own order is not the answer.
    for i in (0..1500).rev() {
        env.write(&format!("big/f{i:04}"), "");
    }
    env.write("big/a_dir/x", "");
    let out = call(&env, "list_dir", json!({"path": "big"}))
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1001, "{out:.300}");
    assert_eq!(lines[0], "a_dir/");
    assert_eq!(lines[1], "f0000");
    assert_eq!(lines[999], "f0998");
    assert_eq!(
        lines[1000],
        "[501 more entries not shown (1501 in all); use find_files with a pattern to narrow]"
    );
}
