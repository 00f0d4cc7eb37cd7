//! The repository a fleet run names, end to end (docs/FLEET.md "Repositories"): a
//! parent with `[subagents] fleet_repository` enqueues its remote, refusing a
//! commit that is not pushed there, and a worker that may not use the parent's
//! directory runs the child from the remote.

use super::fleet::{fleet_fixture, fleet_runs, pg, spawn_worker_allowing, stop, ANSWER};
use super::*;
use std::path::PathBuf;
use std::process::Output;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The fleet fixture with a bare `origin` in `remote` (a clone of the workspace)
/// and `[subagents] fleet_repository = "origin"`.
fn with_origin(f: &Fixture, remote: &Path) -> PathBuf {
    let bare = remote.join("r.git");
    git(
        f.ws.path(),
        &["clone", "-q", "--bare", ".", bare.to_str().unwrap()],
    );
    git(
        f.ws.path(),
        &["remote", "add", "origin", bare.to_str().unwrap()],
    );
    std::fs::write(
        f.home.path().join(".config/brood/config.toml"),
        "[subagents]\nplacement = \"fleet\"\nfleet_repository = \"origin\"\n",
    )
    .unwrap();
    bare
}

fn run_parent(f: &Fixture, server: &MockServer, url: &str) -> Output {
    f.command()
        .env("BROOD_LEDGER_URL", url)
        .arg("run")
        .args(local_flags(server))
        .args(["--json", "delegate"])
        .output()
        .unwrap()
}

#[test]
fn a_parent_enqueues_its_remote_refusing_a_commit_not_pushed_there() {
    let Some(url) = pg::fresh_database("a_parent_enqueues_its_remote") else {
        return;
    };
    let f = fleet_fixture();
    let remote = tempfile::tempdir().unwrap();
    with_origin(&f, remote.path());
    std::fs::write(f.ws.path().join("later.txt"), "later\n").unwrap();
    git(f.ws.path(), &["add", "later.txt"]);
    git(f.ws.path(), &["commit", "-q", "-m", "not pushed yet"]);
    let head = git(f.ws.path(), &["rev-parse", "HEAD"]);
    let server = MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if first == "look" {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("list_dir", json!({})),
                _ => MockReply::text(ANSWER),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"description": "look"})),
            _ => MockReply::text("done"),
        }
    });
    // No worker yet: the refusal comes before anything is enqueued.
    let out = run_parent(&f, &server, &url);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let last = server.requests().last().unwrap().to_string();
    assert!(
        last.contains(&format!("HEAD commit {head} is not on"))
            && last.contains("push it (git push)"),
        "{last}"
    );
    let runs = fleet_runs(&f, &url);
    let child = runs.iter().find(|r| !r["parent_id"].is_null()).unwrap();
    assert_ne!(child["status"], "queued", "never enqueued: {child}");
    // Pushed: a worker that may not use the parent's directory, only the remote's,
    // runs the child from the remote at that commit.
    git(f.ws.path(), &["push", "-q", "origin", "main"]);
    let root = tempfile::tempdir().unwrap();
    let worker = spawn_worker_allowing(&f, &server, &url, root.path(), remote.path());
    let before = server.requests().len();
    let out = run_parent(&f, &server, &url);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let log = stop(worker);
    let runs = fleet_runs(&f, &url);
    let completed: Vec<&Value> = runs
        .iter()
        .filter(|r| !r["parent_id"].is_null() && r["status"] == "completed")
        .collect();
    assert_eq!(completed.len(), 1, "{runs:?}\n{log}");
    // It listed the pushed commit's files.
    let listed = server.requests()[before..]
        .iter()
        .find(|r| {
            r["messages"][1]["content"] == "look" && r["messages"].as_array().unwrap().len() > 2
        })
        .unwrap()
        .to_string();
    assert!(listed.contains("later.txt"), "{listed}");
    assert!(root.path().join(".repos").is_dir(), "cloned under the root");
}
