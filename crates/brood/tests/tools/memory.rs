//! Memory tools: concurrent remember, read and search with line references, the jail.

use super::*;

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

#[tokio::test]
async fn memory_file_symlinked_out_of_the_workspace_is_refused() {
    let env = Env::new();
    std::fs::create_dir_all(env.ws.join(".brood")).unwrap();
    symlink(
        env.outside.join("secret.txt"),
        env.ws.join(".brood/memory.md"),
    )
    .unwrap();
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms);
    for (name, args) in [
        ("remember", json!({"note": "pwned"})),
        ("memory_read", json!({})),
        ("memory_search", json!({"query": "secret"})),
    ] {
        let r = tb.call(&tool_call(name, args), &ctx).await;
        assert!(
            matches!(r, Err(ToolError::OutsideWorkspace { .. })),
            "{name}: {r:?}"
        );
    }
    env.secret_untouched();
}

/// A `remember` waiting for a memory file another process holds locked stops
/// waiting when its call is cancelled: the runtime can shut down, and the note
/// is not written later.
#[test]
fn a_cancelled_remember_stops_waiting_for_a_held_lock() {
    use rustix::fs::{flock, FlockOperation};
    let env = Env::new();
    env.write(".brood/memory.md", "- old note\n");
    let held = std::fs::File::open(env.ws.join(".brood/memory.md")).unwrap();
    flock(&held, FlockOperation::LockExclusive).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let perms = Permissions::full("tester");
    let (tb, ctx) = (env.toolbox(perms.clone()), env.ctx(perms));
    let cancel = ctx.cancel.clone();
    let call = rt.spawn(async move {
        tb.call(&tool_call("remember", json!({"note": "late note"})), &ctx)
            .await
    });
    // Still waiting for the lock (it would finish at once without it).
    let pending = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err()
    });
    assert!(pending, "remember did not wait for the held lock");
    cancel.cancel();
    // Dropping the runtime waits for its blocking threads: it must not hang.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(rt);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the runtime could not shut down: remember kept waiting for the lock");
    drop(held);
    let text = std::fs::read_to_string(env.ws.join(".brood/memory.md")).unwrap();
    assert_eq!(text, "- old note\n", "a cancelled note was written");
}
