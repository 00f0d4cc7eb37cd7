//! The check-then-open race and hard links: a path swapped for a symlink to the
//! outside between the jail's check and the open never reads or writes outside,
//! and a file with another name (a hard link) is not read.

use super::*;
use rustix::fs::{renameat_with, RenameFlags, CWD};
use std::sync::atomic::{AtomicBool, Ordering};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_symlink_swap_never_leads_a_call_outside() {
    let env = Env::new();
    // `d/secret.txt` inside and `outside/secret.txt` have the same name, so only
    // the content tells which one a call reached.
    env.write("d/secret.txt", "inside\n");
    symlink(&env.outside, env.ws.join("alt")).unwrap();
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms);

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws) = (stop.clone(), env.ws.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Atomically exchange the directory `d` and the symlink `alt`.
                let swapped = renameat_with(
                    CWD,
                    ws.join("d"),
                    CWD,
                    ws.join("alt"),
                    RenameFlags::EXCHANGE,
                );
                if swapped.is_err() {
                    break; // the workspace is gone: the test ended
                }
                swaps += 1;
            }
            swaps
        })
    };
    let mut inside_reads = 0;
    for i in 0..2000 {
        let read = tb
            .call(
                &tool_call("read_file", json!({"path": "d/secret.txt"})),
                &ctx,
            )
            .await;
        if let Ok(text) = &read {
            assert!(
                !text.contains("the secret"),
                "iteration {i} read outside: {text}"
            );
            inside_reads += usize::from(text.contains("inside"));
        }
        let grep = tb
            .call(
                &tool_call("grep", json!({"pattern": "secret", "path": "d"})),
                &ctx,
            )
            .await;
        if let Ok(text) = grep {
            assert!(
                !text.contains("the secret"),
                "iteration {i} grepped outside: {text}"
            );
        }
        let _ = tb
            .call(
                &tool_call(
                    "write_file",
                    json!({"path": "d/new.txt", "content": "planted"}),
                ),
                &ctx,
            )
            .await;
        let _ = tb
            .call(
                &tool_call(
                    "edit_file",
                    json!({"path": "d/secret.txt", "old_string": "secret", "new_string": "pwned"}),
                ),
                &ctx,
            )
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 1000, "the swapper ran only {swaps} times");
    assert!(
        inside_reads > 0,
        "no read reached the inside file: the test proved nothing"
    );
    env.secret_untouched();
}

#[tokio::test]
async fn hard_linked_files_are_not_read_searched_or_appended_to() {
    let env = Env::new();
    std::fs::hard_link(env.outside.join("secret.txt"), env.ws.join("linked.txt")).unwrap();
    env.write("plain.txt", "a secret-free file\n");
    match call(&env, "read_file", json!({"path": "linked.txt"})).await {
        Err(ToolError::HardLinked { path, links }) => {
            assert_eq!((path.as_str(), links), ("linked.txt", 2));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        call(
            &env,
            "edit_file",
            json!({"path": "linked.txt", "old_string": "the", "new_string": "a"})
        )
        .await,
        Err(ToolError::HardLinked { .. })
    ));
    let out = call(&env, "grep", json!({"pattern": "secret"}))
        .await
        .unwrap();
    assert!(!out.contains("the secret"), "{out}");
    assert!(out.contains("plain.txt:1:"), "{out}");
    assert!(out.contains("1 hard-linked file(s) skipped"), "{out}");

    // A memory file hard-linked to a file outside: remember does not append to it.
    std::fs::create_dir_all(env.ws.join(".brood")).unwrap();
    std::fs::hard_link(
        env.outside.join("secret.txt"),
        env.ws.join(".brood/memory.md"),
    )
    .unwrap();
    assert!(matches!(
        call(&env, "remember", json!({"note": "echo pwned"})).await,
        Err(ToolError::HardLinked { .. })
    ));
    assert!(matches!(
        call(&env, "memory_read", json!({})).await,
        Err(ToolError::HardLinked { .. })
    ));
    env.secret_untouched();
}
