//! bash: output, exit codes, process-group kill on timeout, return and cancel; the landlock read-only shell.

use super::*;

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

/// A `sleep` argument no other process has: the shell's pids are those of its own
/// PID namespace, so the tests find its processes by their command line instead.
fn marker() -> String {
    format!("300.{}", std::process::id() as u64 * 1000 + rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Whether a live process on the host runs `sleep <marker>`.
fn sleeper_alive(marker: &str) -> bool {
    let want = format!("sleep\0{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| {
            let pid: i32 = e.file_name().to_string_lossy().parse().unwrap_or(0);
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes())
                && !process_dead(pid)
        })
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
    let m = marker();
    let started = Instant::now();
    let r = call(
        &env,
        "bash",
        json!({"command": format!("sleep {m} & echo $! > pid; echo started; sleep 300"), "timeout_secs": 1}),
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
    wait_for(
        "the grandchild sleep to die",
        Duration::from_secs(5),
        || !sleeper_alive(&m),
    );
}

#[tokio::test]
async fn bash_background_jobs_die_when_the_command_returns() {
    let env = Env::new();
    for detach in ["", "setsid -f ", "( setsid "] {
        let m = marker();
        let tail = if detach.starts_with('(') {
            " & )\n"
        } else {
            " &\n"
        };
        let command = format!(
            "{detach}sleep {m}{tail}for i in $(seq 100); do pgrep -f 'sleep {m}' >/dev/null && break; sleep 0.05; done; echo up"
        );
        let out = call(&env, "bash", json!({ "command": command }))
            .await
            .unwrap();
        assert!(out.ends_with("up\n[exit code: 0]"), "{out}");
        wait_for(
            "the background sleep to die",
            Duration::from_secs(5),
            || !sleeper_alive(&m),
        );
    }
}

// Multi-threaded: the test thread blocks while polling for the pid file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_group_via_toolbox_and_direct_call() {
    let env = Env::new();
    let (m1, m2) = (marker(), marker());
    let (m1c, m2c) = (m1.clone(), m2.clone());
    // Through the toolbox (its select drops the call).
    let perms = Permissions::full("tester");
    let tb = env.toolbox(perms.clone());
    let ctx = env.ctx(perms.clone());
    let (tb2, ctx2) = (tb.clone(), ctx.clone());
    let m1c = m1c.clone();
    let task = tokio::spawn(async move {
        tb2.call(
            &tool_call(
                "bash",
                json!({"command": format!("sleep {m1c} & echo $! > pid1; sleep 300")}),
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
    wait_for("grandchild 1 to die", Duration::from_secs(5), || {
        !sleeper_alive(&m1)
    });

    // Directly on the tool (its own cancel branch).
    let bash = Bash::default();
    let ctx = env.ctx(perms);
    let ctx2 = ctx.clone();
    let task = tokio::spawn(async move {
        bash.call(
            json!({"command": format!("sleep {m2} & echo $! > pid2; sleep 300")}),
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
    wait_for("grandchild 2 to die", Duration::from_secs(5), || {
        !sleeper_alive(&m2c)
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

#[test]
fn the_sandbox_probe_leaves_the_calling_process_unrestricted() {
    let env = Env::new();
    let sandbox = Sandbox::new();
    let verdict = sandbox.probe();
    // The probe applies the ruleset to a thread of its own: whatever it found, this
    // thread (and the process) can still write anywhere it could before.
    let mark = env.outside.join("after-probe.txt");
    std::fs::write(&mark, "still writable").unwrap();
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "still writable");
    let child = std::thread::spawn({
        let mark = env.outside.join("after-probe-thread.txt");
        move || std::fs::write(mark, "x")
    });
    child.join().unwrap().unwrap();
    // The answer is cached: a second ask gives the same without probing again.
    assert_eq!(sandbox.probe(), verdict);
}
