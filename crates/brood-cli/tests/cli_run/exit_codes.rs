//! One failure of each class through `brood run`, and the exit code README.md's
//! "Exit codes" table gives it (the codes live in `src/exit.rs`).

use super::signals::spawn_local;
use super::*;

/// `brood run ARGS… x` against `server` in `f` with `env`: its exit code and stderr.
fn code_of(
    f: &Fixture,
    server: &MockServer,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String) {
    let out = f
        .command()
        .arg("run")
        .args(local_flags(server))
        .args(args)
        .arg("x")
        .envs(env.iter().copied())
        .output()
        .expect("run brood");
    (out.status.code(), text(&out).1)
}

#[test]
fn each_class_of_failure_exits_with_its_own_code() {
    let answers = MockServer::start(|_| MockReply::text("done"));

    // 0: the run answered.
    let f = fixture();
    assert_eq!(code_of(&f, &answers, &[], &[]).0, Some(0));

    // 1, a failure of no other class: a run that cannot be resumed (it completed);
    // nothing is asked.
    let asked = answers.request_count();
    let done = f.runs();
    let id = done[0]["id"].as_str().unwrap();
    let out = f
        .command()
        .args(["agents", "resume", id])
        .args(local_flags(&answers))
        .output()
        .expect("run brood");
    let err = text(&out).1;
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(id) && err.contains("completed"), "{err}");
    assert_eq!(answers.request_count(), asked, "{err}");

    // 2, usage or configuration: a value out of range; nothing is asked.
    let (code, err) = code_of(&f, &answers, &[], &[("BROOD_MAX_TURNS", "lots")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("BROOD_MAX_TURNS"), "{err}");

    // 3, the provider: the endpoint answers 503 (one attempt).
    let down = MockServer::start(|_| MockReply::status(503, "overloaded"));
    let (code, err) = code_of(&f, &down, &[], &[("BROOD_MAX_ATTEMPTS", "1")]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("503"), "{err}");

    // 4, a limit: a cost budget its model has no price for stops the run before
    // its first request.
    let limited = Fixture::with_notes("alpha\n");
    limited.user_config("[subagents]\ntree_cost_budget_usd = 1.0\n");
    let (code, err) = code_of(&limited, &answers, &[], &[]);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("tree_cost_budget_usd"), "{err}");

    // 5, cancelled: SIGTERM while the model is asked.
    let hang = MockServer::start(|_| MockReply::Hang);
    let child = spawn_local(&f, &hang, &["x"]);
    wait_for_requests(&hang, 1);
    send_signal(child.id(), "TERM");
    let out = wait_bounded(child);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out).1);

    // 6, brood itself: the ledger cannot be opened (a directory where its file goes).
    let broken = fixture();
    std::fs::create_dir_all(broken.ws.path().join(".brood/state/brood.db")).unwrap();
    let (code, err) = code_of(&broken, &answers, &[], &[]);
    assert_eq!(code, Some(6), "{err}");
    assert!(err.contains("brood.db"), "{err}");
}
