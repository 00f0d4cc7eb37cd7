//! The workspace tools through their public surface: the jail against every escape,
//! file and search tools, the shell's process-group kill and read-only sandbox,
//! permission checks in the toolbox, todo and memory.

use brood::model::ToolCall;
use brood::tool::memory::MemoryFiles;
use brood::tool::sandbox::Sandbox;
use brood::tool::shell::Bash;
use brood::tool::{
    builtin_tools, BuiltinOptions, Capability, Permissions, ShellPolicy, Tool, ToolContext,
    ToolError, Toolbox, Workspace,
};
use serde_json::json;
use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A temp dir holding a workspace `ws/` and a sibling `outside/` with a secret.
struct Env {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

const SECRET: &str = "the secret\n";

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
        let ws = std::fs::canonicalize(ws).unwrap();
        let outside = std::fs::canonicalize(outside).unwrap();
        Env {
            _dir: dir,
            ws,
            outside,
        }
    }

    fn write(&self, rel: &str, content: &str) {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn ctx(&self, perms: Permissions) -> ToolContext {
        ToolContext {
            workspace: Arc::new(Workspace::open(&self.ws).unwrap()),
            permissions: Arc::new(perms),
            cancel: CancellationToken::new(),
            run_id: "run-test".into(),
        }
    }

    fn memory(&self) -> MemoryFiles {
        MemoryFiles::for_workspace(&self.ws, Some(self.outside.join("user-memory.md")))
    }

    fn toolbox(&self, perms: Permissions) -> Toolbox {
        let opts = BuiltinOptions {
            memory: Some(self.memory()),
            sandbox: None,
        };
        Toolbox::new(builtin_tools(&opts), perms)
    }

    fn secret_untouched(&self) {
        assert_eq!(
            std::fs::read_to_string(self.outside.join("secret.txt")).unwrap(),
            SECRET
        );
        let names: BTreeSet<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            BTreeSet::from(["secret.txt".to_string()]),
            "nothing may be created outside the workspace"
        );
    }
}

fn tool_call(name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: format!("call-{name}"),
        name: name.to_string(),
        arguments: args.to_string(),
    }
}

async fn call(env: &Env, name: &str, args: serde_json::Value) -> Result<String, ToolError> {
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    tb.call(&tool_call(name, args), &env.ctx(perms)).await
}

#[track_caller]
fn assert_outside(r: Result<String, ToolError>, path: &str, reason_has: &str) {
    match r {
        Err(ToolError::OutsideWorkspace { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(
                reason.contains(reason_has),
                "reason {reason:?} should mention {reason_has:?}"
            );
            let msg = ToolError::OutsideWorkspace {
                path: p,
                reason: reason.clone(),
            }
            .to_string();
            assert!(msg.contains(path), "message names the path: {msg}");
        }
        other => panic!("expected OutsideWorkspace for {path}, got {other:?}"),
    }
}

// ------------------------------------------------------------------ the jail

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

// ------------------------------------------------------------------ file tools

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

// ------------------------------------------------------------------ search

#[tokio::test]
async fn find_files_respects_gitignore_and_caps() {
    let env = Env::new();
    env.write(".gitignore", "target/\n*.log\n");
    env.write("src/a.rs", "");
    env.write("src/deep/b.rs", "");
    env.write("target/gen.rs", "");
    env.write("debug.log", "");
    env.write(".git/config.rs", "");
    env.write("README.md", "");

    let out = call(&env, "find_files", json!({"pattern": "*.rs"}))
        .await
        .unwrap();
    assert_eq!(out, "src/a.rs\nsrc/deep/b.rs\n");
    let out = call(&env, "find_files", json!({"pattern": "src/*.rs"}))
        .await
        .unwrap();
    assert_eq!(out, "src/a.rs\n");
    let out = call(
        &env,
        "find_files",
        json!({"pattern": "*.rs", "path": "src/deep"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "src/deep/b.rs\n");
    let out = call(&env, "find_files", json!({"pattern": "*.log"}))
        .await
        .unwrap();
    assert!(out.starts_with("no files match"), "{out}");

    for i in 0..600 {
        env.write(&format!("many/f{i:03}.txt"), "");
    }
    let out = call(&env, "find_files", json!({"pattern": "many/*.txt"}))
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 501);
    assert_eq!(lines[0], "many/f000.txt");
    assert_eq!(
        lines[500],
        "[100 more of 600 matches not shown; narrow the pattern or path]"
    );
    assert!(matches!(
        call(&env, "find_files", json!({"pattern": "a[b"})).await,
        Err(ToolError::InvalidArguments { .. })
    ));
}

#[tokio::test]
async fn grep_respects_gitignore_formats_and_caps() {
    let env = Env::new();
    env.write(".gitignore", "ignored/\n");
    env.write("src/main.rs", "use x;\nfn main() {\n    Main();\n}\n");
    env.write("src/util.py", "def main():\n    pass\n");
    env.write("ignored/main.rs", "fn main() {}\n");
    std::fs::write(env.ws.join("bin.dat"), b"fn main\0\x01").unwrap();

    let out = call(&env, "grep", json!({"pattern": r"fn\s+main"}))
        .await
        .unwrap();
    assert_eq!(out, "src/main.rs:2: fn main() {\n");
    let out = call(
        &env,
        "grep",
        json!({"pattern": "main", "case_insensitive": true, "glob": "*.rs"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "src/main.rs:2: fn main() {\nsrc/main.rs:3:     Main();\n"
    );
    let out = call(
        &env,
        "grep",
        json!({"pattern": "main", "path": "src/util.py"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "src/util.py:1: def main():\n");
    assert!(matches!(
        call(&env, "grep", json!({"pattern": "("})).await,
        Err(ToolError::InvalidArguments { tool, .. }) if tool == "grep"
    ));

    let many: String = (0..400).map(|i| format!("hit {i}\n")).collect();
    env.write("many.txt", &many);
    let out = call(&env, "grep", json!({"pattern": "^hit"}))
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 301);
    assert_eq!(lines[0], "many.txt:1: hit 0");
    assert_eq!(lines[299], "many.txt:300: hit 299");
    assert!(lines[300].starts_with("[stopped after 300 matching lines"));
}

// ------------------------------------------------------------------ bash

/// Whether `pid` is dead: gone, or a zombie left to an init that does not reap.
fn process_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Poll (an external process; bounded) until `f` holds.
fn wait_for(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn bash_reports_output_and_exit_code() {
    let env = Env::new();
    env.write("sub/f.txt", "content\n");
    let out = call(
        &env,
        "bash",
        json!({"command": "echo out; echo err >&2; cat f.txt; exit 3", "cwd": "sub"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "out\nerr\ncontent\n[exit code: 3]");
    let out = call(&env, "bash", json!({"command": "true"}))
        .await
        .unwrap();
    assert_eq!(out, "(no output)\n[exit code: 0]");
    let out = call(
        &env,
        "bash",
        json!({"command": "head -c 200000 /dev/zero | tr '\\0' a; echo; echo END"}),
    )
    .await
    .unwrap();
    assert!(out.len() < 70 * 1024, "{}", out.len());
    assert!(out.contains("bytes of output omitted"), "{:.100}", out);
    assert!(out.ends_with("END\n[exit code: 0]"));
}

#[tokio::test]
async fn bash_timeout_kills_the_whole_group() {
    let env = Env::new();
    let started = Instant::now();
    let r = call(
        &env,
        "bash",
        json!({"command": "sleep 300 & echo $! > pid; echo started; sleep 300", "timeout_secs": 1}),
    )
    .await;
    match r {
        Err(ToolError::ShellTimeout { secs, output }) => {
            assert_eq!(secs, 1);
            assert!(output.contains("started"), "{output}");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    let pid = read_pid(&env.ws.join("pid"));
    wait_for(
        "the grandchild sleep to die",
        Duration::from_secs(5),
        || process_dead(pid),
    );
}

#[tokio::test]
async fn bash_background_jobs_die_when_the_command_returns() {
    let env = Env::new();
    let out = call(
        &env,
        "bash",
        json!({"command": "sleep 300 & echo $! > pid"}),
    )
    .await
    .unwrap();
    assert!(out.ends_with("[exit code: 0]"));
    let pid = read_pid(&env.ws.join("pid"));
    wait_for(
        "the background sleep to die",
        Duration::from_secs(5),
        || process_dead(pid),
    );
}

// Multi-threaded: the test thread blocks while polling for the pid file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_group_via_toolbox_and_direct_call() {
    let env = Env::new();
    // Through the toolbox (its select drops the call).
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms.clone());
    let (tb2, ctx2) = (tb.clone(), ctx.clone());
    let task = tokio::spawn(async move {
        tb2.call(
            &tool_call(
                "bash",
                json!({"command": "sleep 300 & echo $! > pid1; sleep 300"}),
            ),
            &ctx2,
        )
        .await
    });
    let pidfile = env.ws.join("pid1");
    wait_for("pid1", Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    ctx.cancel.cancel();
    assert!(matches!(task.await.unwrap(), Err(ToolError::Cancelled)));
    let pid = read_pid(&pidfile);
    wait_for("grandchild 1 to die", Duration::from_secs(5), || {
        process_dead(pid)
    });

    // Directly on the tool (its own cancel branch).
    let bash = Bash::default();
    let ctx = env.ctx(perms);
    let ctx2 = ctx.clone();
    let task = tokio::spawn(async move {
        bash.call(
            json!({"command": "sleep 300 & echo $! > pid2; sleep 300"}),
            &ctx2,
        )
        .await
    });
    let pidfile = env.ws.join("pid2");
    wait_for("pid2", Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    ctx.cancel.cancel();
    assert!(matches!(task.await.unwrap(), Err(ToolError::Cancelled)));
    let pid = read_pid(&pidfile);
    wait_for("grandchild 2 to die", Duration::from_secs(5), || {
        process_dead(pid)
    });
}

#[tokio::test]
async fn shell_policy_none_refuses() {
    let env = Env::new();
    let mut perms = Permissions::full("review");
    perms.shell = ShellPolicy::None;
    let tb = env.toolbox(perms.clone());
    assert!(!tb.names().contains(&"bash".to_string()));
    // Called directly, the tool itself refuses.
    let r = Bash::default()
        .call(json!({"command": "touch x"}), &env.ctx(perms))
        .await;
    match r {
        Err(ToolError::NotGranted { tool, holder, .. }) => {
            assert_eq!(tool, "bash");
            assert_eq!(holder, "review");
        }
        other => panic!("{other:?}"),
    }
    assert!(!env.ws.join("x").exists());
}

#[tokio::test]
async fn read_only_shell_cannot_write_but_can_read() {
    let env = Env::new();
    env.write("readme.txt", "readable\n");
    let mut perms = Permissions::full("explore");
    perms.shell = ShellPolicy::ReadOnly;
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms);
    let sandbox = Sandbox::new();
    if let Err(why) = sandbox.probe() {
        eprintln!(
            "\n!!!!!!!! LANDLOCK UNAVAILABLE: {why}\n!!!!!!!! skipping the read-only shell \
             enforcement test; checking that the shell is refused instead\n"
        );
        let r = tb
            .call(&tool_call("bash", json!({"command": "touch file"})), &ctx)
            .await;
        assert!(matches!(r, Err(ToolError::Sandbox { .. })), "{r:?}");
        assert!(!env.ws.join("file").exists());
        return;
    }
    assert!(sandbox.read_only_shell_available());

    let out = tb
        .call(&tool_call("bash", json!({"command": "touch file"})), &ctx)
        .await
        .unwrap();
    assert!(!out.ends_with("[exit code: 0]"), "{out}");
    assert!(!env.ws.join("file").exists());

    let secret = env.outside.join("secret.txt").display().to_string();
    for cmd in [
        format!("echo x > '{secret}'"),
        "rm readme.txt".to_string(),
        "mkdir newdir".to_string(),
        ": > readme.txt".to_string(),
        "mv readme.txt moved.txt".to_string(),
    ] {
        let out = tb
            .call(&tool_call("bash", json!({ "command": cmd })), &ctx)
            .await
            .unwrap();
        assert!(!out.ends_with("[exit code: 0]"), "{cmd}: {out}");
    }
    assert_eq!(
        std::fs::read_to_string(env.ws.join("readme.txt")).unwrap(),
        "readable\n"
    );
    assert!(!env.ws.join("newdir").exists());
    env.secret_untouched();

    let out = tb
        .call(
            &tool_call(
                "bash",
                json!({"command": "cat readme.txt && echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && ls >/dev/null"}),
            ),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(out, "readable\ntmp\n[exit code: 0]");
}

// ------------------------------------------------------------------ permissions

#[tokio::test]
async fn tools_outside_the_grant_are_not_offered_and_refused() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    let explore = Permissions {
        capabilities: [Capability::Read, Capability::Memory].into_iter().collect(),
        allowed_tools: None,
        write_scopes: None,
        shell: ShellPolicy::None,
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
        assert!(tb.specs().iter().all(|s| s.name != hidden));
    }
    // Not offered → unknown to this toolbox, listing what is available.
    match tb
        .call(
            &tool_call("write_file", json!({"path": "b.txt", "content": "x"})),
            &env.ctx(explore.clone()),
        )
        .await
    {
        Err(ToolError::UnknownTool { name, available }) => {
            assert_eq!(name, "write_file");
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

// ------------------------------------------------------------------ todo

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

// ------------------------------------------------------------------ memory

#[tokio::test]
async fn many_concurrent_remembers_all_land_intact() {
    let env = Env::new();
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms);
    let filler = "y".repeat(3000 / 4);
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (tb, ctx) = (tb.clone(), ctx.clone());
        let note = format!("note {i:02} {filler}\nsecond line");
        tasks.push(tokio::spawn(async move {
            tb.call(&tool_call("remember", json!({ "note": note })), &ctx)
                .await
        }));
    }
    for t in tasks {
        let out = t.await.unwrap().unwrap();
        assert!(out.starts_with("remembered at .brood/memory.md:"), "{out}");
    }
    let text = std::fs::read_to_string(env.ws.join(".brood/memory.md")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 50);
    let mut seen = BTreeSet::new();
    for line in lines {
        // - YYYY-MM-DD: note NN yyy… second line
        let (date, rest) = line
            .strip_prefix("- ")
            .and_then(|l| l.split_once(": "))
            .unwrap_or_else(|| panic!("malformed line {line:.80}"));
        assert!(
            chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_ok(),
            "{date}"
        );
        let n: u32 = rest[5..7].parse().unwrap();
        assert_eq!(rest, format!("note {n:02} {filler} second line"));
        seen.insert(n);
    }
    assert_eq!(seen, (0..50).collect());
}

#[tokio::test]
async fn memory_read_and_search_cite_lines_in_both_files() {
    let env = Env::new();
    std::fs::write(
        env.outside.join("user-memory.md"),
        "- 2026-01-01: prefers tabs\n- 2026-01-02: Uses NixOS\n",
    )
    .unwrap();
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms);
    let empty = tb
        .call(&tool_call("memory_read", json!({})), &ctx)
        .await
        .unwrap();
    assert!(
        empty.contains("## workspace memory (.brood/memory.md)\n(empty)"),
        "{empty}"
    );

    // A file whose last line lacks a newline still gets one line per note.
    env.write(
        ".brood/memory.md",
        "- 2026-01-03: run tests with cargo nextest",
    );
    let out = tb
        .call(
            &tool_call("remember", json!({"note": "the nix shell has cargo"})),
            &ctx,
        )
        .await
        .unwrap();
    assert!(
        out.starts_with("remembered at .brood/memory.md:2: - "),
        "{out}"
    );

    let out = tb
        .call(&tool_call("memory_read", json!({})), &ctx)
        .await
        .unwrap();
    assert!(out.contains("     1\t- 2026-01-03: run tests with cargo nextest\n     2\t- "));
    assert!(out.contains("## user memory ("));
    assert!(out.contains("     2\t- 2026-01-02: Uses NixOS"));

    let out = tb
        .call(&tool_call("memory_search", json!({"query": "NIX"})), &ctx)
        .await
        .unwrap();
    let user = env.outside.join("user-memory.md").display().to_string();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with(".brood/memory.md:2: - "), "{out}");
    assert!(lines[0].ends_with(": the nix shell has cargo"), "{out}");
    assert_eq!(lines[1], format!("{user}:2: - 2026-01-02: Uses NixOS"));
    let out = tb
        .call(
            &tool_call(
                "memory_search",
                json!({"query": "^- 2026-01-0[13]", "regex": true}),
            ),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        format!(
            ".brood/memory.md:1: - 2026-01-03: run tests with cargo nextest\n{user}:1: - 2026-01-01: prefers tabs\n"
        )
    );
}
