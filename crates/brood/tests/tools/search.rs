//! find_files and grep: .gitignore, formats, caps.

use super::*;

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
    assert_eq!(
        out,
        "src/main.rs:2: fn main() {\n[1 binary file(s) skipped (a NUL byte found)]\n"
    );
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
    assert_eq!(
        lines.len(),
        302,
        "300 matches, the cap, the binary file skipped"
    );
    assert_eq!(lines[0], "many.txt:1: hit 0");
    assert_eq!(lines[299], "many.txt:300: hit 299");
    assert!(lines[300].starts_with("[stopped after 300 matching lines"));
    assert_eq!(lines[301], "[1 binary file(s) skipped (a NUL byte found)]");
}
