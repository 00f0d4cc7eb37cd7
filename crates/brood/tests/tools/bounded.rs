//! Bounded reads: no file makes a tool's memory grow with its size. A 6 GB sparse
//! file costs a few MB of the process's peak memory at most, and the answer says
//! what was not read. Also `grep`'s count of skipped binary files.

use super::*;

const SIX_GB: u64 = 6 << 30;
/// Peak-memory growth allowed for one call on a 6 GB file (other tests of this
/// binary run at the same time, so this is not zero).
const MAX_GROWTH_KB: u64 = 256 << 10;

/// The process's peak resident memory, in kB, after resetting it to the current
/// resident size (`/proc/self/clear_refs` 5), so the next reading is the peak of
/// what runs in between.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

fn peak_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap()
        .to_string();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `rel` in `env` as text at the start, then a hole up to `len` bytes.
fn sparse(env: &Env, rel: &str, head: &str, len: u64) {
    env.write(rel, head);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(env.ws.join(rel))
        .unwrap();
    f.set_len(len).unwrap();
}

/// Run `name(args)`, returning its text (or error text) and the growth of the
/// process's peak memory in kB.
async fn measured(env: &Env, name: &str, args: serde_json::Value) -> (String, u64) {
    reset_peak();
    let before = peak_kb();
    let text = match call(env, name, args).await {
        Ok(t) => t,
        Err(e) => e.to_string(),
    };
    (text, peak_kb().saturating_sub(before))
}

#[tokio::test]
async fn a_six_gb_memory_file_gets_a_bounded_answer() {
    let env = Env::new();
    sparse(&env, ".brood/memory.md", "- 2026-01-01: a note\n", SIX_GB);
    let (text, grew) = measured(&env, "memory_read", json!({})).await;
    assert!(text.contains("larger than 16 MiB"), "{text:.500}");
    assert!(text.len() < 4096, "{} bytes", text.len());
    assert!(
        grew < MAX_GROWTH_KB,
        "memory_read grew the peak by {grew} kB"
    );

    let (text, grew) = measured(&env, "memory_search", json!({"query": "note"})).await;
    assert!(text.contains("larger than 16 MiB"), "{text:.500}");
    assert!(
        grew < MAX_GROWTH_KB,
        "memory_search grew the peak by {grew} kB"
    );

    let (text, grew) = measured(&env, "remember", json!({"note": "still works"})).await;
    assert!(
        text.starts_with("remembered at the end of .brood/memory.md"),
        "{text:.500}"
    );
    assert!(grew < MAX_GROWTH_KB, "remember grew the peak by {grew} kB");
}

#[tokio::test]
async fn a_six_gb_file_is_read_edited_and_searched_within_bounds() {
    let env = Env::new();
    // 3000 text lines, then a 6 GB hole (read as NUL bytes, past the binary sniff).
    let head: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    sparse(&env, "big.txt", &head, SIX_GB);

    let started = Instant::now();
    let (text, grew) = measured(&env, "read_file", json!({"path": "big.txt"})).await;
    assert!(text.contains("     1\tline 1\n"), "{text:.300}");
    assert!(
        text.contains("stopped scanning big.txt"),
        "{}",
        &text[text.len() - 400..]
    );
    assert!(text.len() <= 300 * 1024, "{} bytes", text.len());
    assert!(grew < MAX_GROWTH_KB, "read_file grew the peak by {grew} kB");

    // A line range past the text: the giant line is cut, the scan is bounded.
    let (text, grew) = measured(
        &env,
        "read_file",
        json!({"path": "big.txt", "start_line": 2999, "limit": 5}),
    )
    .await;
    assert!(text.contains("  2999\tline 2999\n"), "{text:.300}");
    assert!(text.contains("[line cut]"), "{text:.300}");
    assert!(
        grew < MAX_GROWTH_KB,
        "read_file range grew the peak by {grew} kB"
    );

    // A start line that lies beyond what is scanned: a typed error.
    match call(
        &env,
        "read_file",
        json!({"path": "big.txt", "start_line": 5000}),
    )
    .await
    {
        Err(ToolError::InvalidArguments { detail, .. }) => {
            assert!(detail.contains("not within the first 256 MiB"), "{detail}")
        }
        other => panic!("{other:?}"),
    }

    let (text, grew) = measured(
        &env,
        "edit_file",
        json!({"path": "big.txt", "old_string": "line 1\n", "new_string": "x\n"}),
    )
    .await;
    assert!(text.contains("larger than 16 MiB"), "{text:.300}");
    assert!(grew < MAX_GROWTH_KB, "edit_file grew the peak by {grew} kB");

    let (text, grew) = measured(&env, "grep", json!({"pattern": "line 2999"})).await;
    assert!(
        text.contains("1 file(s) over 256 MiB skipped"),
        "{text:.300}"
    );
    assert!(grew < MAX_GROWTH_KB, "grep grew the peak by {grew} kB");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "bounded calls took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn grep_says_how_many_binary_files_it_skipped() {
    let env = Env::new();
    env.write("a.txt", "needle\n");
    std::fs::write(env.ws.join("b.bin"), b"needle\0\x01\x02").unwrap();
    std::fs::write(env.ws.join("c.bin"), b"\0\0needle").unwrap();
    let out = call(&env, "grep", json!({"pattern": "needle"}))
        .await
        .unwrap();
    assert!(out.contains("a.txt:1: needle"), "{out}");
    assert!(out.contains("2 binary file(s) skipped"), "{out}");
    let out = call(&env, "grep", json!({"pattern": "nothing-here"}))
        .await
        .unwrap();
    assert!(out.contains("2 binary file(s) skipped"), "{out}");
}

#[tokio::test]
async fn huge_or_endless_ignore_files_do_not_grow_the_walk() {
    let env = Env::new();
    env.write("ok.txt", "needle\n");
    env.write("sub/inner.txt", "needle\n");
    sparse(&env, "sub/.gitignore", "target/\n", SIX_GB);
    env.write("zero/inner.txt", "needle\n");
    symlink("/dev/zero", env.ws.join("zero/.ignore")).unwrap();

    let (text, grew) = measured(&env, "grep", json!({"pattern": "needle"})).await;
    assert!(text.contains("ok.txt:1: needle"), "{text}");
    assert!(!text.contains("inner.txt"), "{text}");
    assert!(text.contains("2 director(ies) not entered"), "{text}");
    assert!(grew < MAX_GROWTH_KB, "grep grew the peak by {grew} kB");

    let (text, grew) = measured(&env, "find_files", json!({"pattern": "*.txt"})).await;
    assert_eq!(
        text,
        "ok.txt\n[2 director(ies) not entered: an ignore file there is not a regular file \
         of at most 1 MiB]\n"
    );
    assert!(
        grew < MAX_GROWTH_KB,
        "find_files grew the peak by {grew} kB"
    );

    // Searching below such a directory is refused, naming the ignore file.
    for path in ["sub", "zero/inner.txt"] {
        match call(&env, "grep", json!({"pattern": "needle", "path": path})).await {
            Err(ToolError::Io { path: p, detail }) => {
                assert!(p.ends_with(".gitignore") || p.ends_with(".ignore"), "{p}");
                assert!(detail.contains("1 MiB"), "{detail}");
            }
            other => panic!("{path}: {other:?}"),
        }
    }
}
