//! The workspace jail against every escape, and paths that stay inside.

use super::*;

#[tokio::test]
async fn every_escape_is_refused_and_the_outside_is_untouched() {
    let env = Env::new();
    env.write("inside.txt", "inside\n");
    symlink(env.outside.join("secret.txt"), env.ws.join("link_file")).unwrap();
    symlink(&env.outside, env.ws.join("link_dir")).unwrap();
    symlink(env.outside.join("new.txt"), env.ws.join("dangling")).unwrap();
    let abs_secret = env.outside.join("secret.txt").display().to_string();

    // `..` out of the root.
    assert_outside(
        call(&env, "read_file", json!({"path": "../outside/secret.txt"})).await,
        "../outside/secret.txt",
        "'..'",
    );
    // An absolute path outside.
    assert_outside(
        call(&env, "read_file", json!({"path": abs_secret})).await,
        &abs_secret,
        "absolute path",
    );
    // A symlinked file leading out.
    assert_outside(
        call(&env, "read_file", json!({"path": "link_file"})).await,
        "link_file",
        "symlink",
    );
    // A symlinked directory leading out, then a child name.
    assert_outside(
        call(&env, "read_file", json!({"path": "link_dir/secret.txt"})).await,
        "link_dir/secret.txt",
        "symlink",
    );
    assert_outside(
        call(&env, "list_dir", json!({"path": "link_dir"})).await,
        "link_dir",
        "symlink",
    );
    // New files through an outside symlinked directory and a dangling symlink.
    assert_outside(
        call(
            &env,
            "write_file",
            json!({"path": "link_dir/new.txt", "content": "x"}),
        )
        .await,
        "link_dir/new.txt",
        "symlink",
    );
    assert_outside(
        call(
            &env,
            "write_file",
            json!({"path": "link_dir/deeper/new.txt", "content": "x"}),
        )
        .await,
        "link_dir/deeper/new.txt",
        "symlink",
    );
    assert_outside(
        call(
            &env,
            "write_file",
            json!({"path": "dangling", "content": "x"}),
        )
        .await,
        "dangling",
        "symlink",
    );
    // Overwrite and edit through the escapes.
    assert_outside(
        call(
            &env,
            "write_file",
            json!({"path": "../outside/secret.txt", "content": "pwned"}),
        )
        .await,
        "../outside/secret.txt",
        "'..'",
    );
    assert_outside(
        call(
            &env,
            "edit_file",
            json!({"path": "link_file", "old_string": "secret", "new_string": "pwned"}),
        )
        .await,
        "link_file",
        "symlink",
    );
    // `..` hidden behind a directory that exists.
    std::fs::create_dir_all(env.ws.join("sub")).unwrap();
    assert_outside(
        call(
            &env,
            "read_file",
            json!({"path": "sub/../../outside/secret.txt"}),
        )
        .await,
        "sub/../../outside/secret.txt",
        "'..'",
    );
    // Search and shell arguments go through the jail too.
    assert_outside(
        call(
            &env,
            "grep",
            json!({"pattern": "secret", "path": "link_dir"}),
        )
        .await,
        "link_dir",
        "symlink",
    );
    assert_outside(
        call(
            &env,
            "find_files",
            json!({"pattern": "*", "path": "../outside"}),
        )
        .await,
        "../outside",
        "'..'",
    );
    assert_outside(
        call(
            &env,
            "bash",
            json!({"command": "touch x", "cwd": "link_dir"}),
        )
        .await,
        "link_dir",
        "symlink",
    );
    // A workspace-wide grep does not follow the symlinks out.
    let out = call(&env, "grep", json!({"pattern": "secret"}))
        .await
        .unwrap();
    assert!(out.starts_with("no matches"), "grep followed a link: {out}");

    env.secret_untouched();
}

#[tokio::test]
async fn paths_that_stay_inside_resolve() {
    let env = Env::new();
    env.write("sub/file.txt", "hello\n");
    symlink(env.ws.join("sub/file.txt"), env.ws.join("inner_link")).unwrap();
    symlink("sub", env.ws.join("inner_dir")).unwrap();
    let ws = Workspace::open(&env.ws).unwrap();

    let target = env.ws.join("sub/file.txt");
    assert_eq!(ws.resolve("sub/../sub/file.txt").unwrap(), target);
    assert_eq!(ws.resolve("inner_link").unwrap(), target);
    assert_eq!(ws.resolve("inner_dir/file.txt").unwrap(), target);
    assert_eq!(ws.resolve(&target.display().to_string()).unwrap(), target);
    assert_eq!(ws.resolve("").unwrap(), env.ws);
    // A new file below directories that do not exist yet.
    assert_eq!(
        ws.resolve("a/b/c.txt").unwrap(),
        env.ws.join("a").join("b").join("c.txt")
    );
    assert_eq!(ws.display(&target), "sub/file.txt");
    assert_eq!(ws.display(&env.ws), ".");
    // `..` after a directory that does not exist cannot be checked: refused.
    assert!(matches!(
        ws.resolve("nope/../../x"),
        Err(ToolError::OutsideWorkspace { .. })
    ));

    let out = call(&env, "read_file", json!({"path": "inner_dir/file.txt"}))
        .await
        .unwrap();
    assert_eq!(out, "     1\thello\n");
    // Writing through an internal symlink changes its target, keeps the link.
    call(
        &env,
        "write_file",
        json!({"path": "inner_link", "content": "bye\n"}),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "bye\n");
    assert!(std::fs::symlink_metadata(env.ws.join("inner_link"))
        .unwrap()
        .file_type()
        .is_symlink());
}
