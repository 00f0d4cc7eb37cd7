//! The repository a fleet run names, end to end (docs/FLEET.md "Repositories"): a
//! parent with `[subagents] fleet_repository` enqueues its remote, refusing a
//! commit that is not pushed there, and a worker that may not use the parent's
//! directory runs the child from the remote.

use super::fleet::{
    fleet_fixture, fleet_parent, fleet_runs, pg, spawn_worker_allowing, stop, ANSWER,
};
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
    fleet_parent(f, server, url).output().unwrap()
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
            0 => MockReply::tool_call("task", json!({"prompts": ["look", "look", "look"]})),
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
    // The parent's git calls traced: it asks the remote once for its three children
    // (the check is kept per commit), not once per child.
    let trace = remote.path().join("trace.log");
    let out = fleet_parent(&f, &server, &url)
        .env("GIT_TRACE", &trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let log = stop(worker);
    let traced = std::fs::read_to_string(&trace).unwrap();
    let asked = traced
        .lines()
        .filter(|l| l.contains("built-in: git") && l.contains("ls-remote"))
        .count();
    assert_eq!(asked, 1, "{traced}");
    let runs = fleet_runs(&f, &url);
    let completed: Vec<&Value> = runs
        .iter()
        .filter(|r| !r["parent_id"].is_null() && r["status"] == "completed")
        .collect();
    assert_eq!(completed.len(), 3, "{runs:?}\n{log}");
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

/// `brood agents show ID --json` as text (the recorded result is in it).
fn shown(f: &Fixture, url: &str, id: &str) -> String {
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", url)
        .args(["agents", "show", id, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The id of the one child whose objective is `objective`.
fn child_id(f: &Fixture, url: &str, objective: &str) -> String {
    fleet_runs(f, url)
        .iter()
        .find(|r| r["objective"] == objective)
        .unwrap_or_else(|| panic!("no run for {objective}"))["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_fleet_writers_commits_come_back_on_its_branch_and_merge_fast_forwards() {
    let Some(url) = pg::fresh_database("a_fleet_writers_commits_come_back") else {
        return;
    };
    let f = fleet_fixture();
    let remote = tempfile::tempdir().unwrap();
    let bare = with_origin(&f, remote.path());
    let server = MockServer::start(|req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if let Some(file) = first.strip_prefix("write ") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call(
                    "write_file",
                    json!({"path": file, "content": "from the fleet\n"}),
                ),
                _ => MockReply::text(ANSWER),
            };
        }
        let file = if first == "second" {
            "refused.txt"
        } else {
            "added.txt"
        };
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"description": format!("write {file}")})),
            _ => MockReply::text("done"),
        }
    });
    let root = tempfile::tempdir().unwrap();
    let worker = spawn_worker_allowing(&f, &server, &url, root.path(), remote.path());
    let out = run_parent(&f, &server, &url);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let id = child_id(&f, &url, "write added.txt");
    let branch = format!("brood/{id}");
    // The worker pushed the child's commit to the remote as brood/<id> ...
    let pushed = git(&bare, &["rev-parse", "--verify", &branch]);
    assert_eq!(
        git(&bare, &["show", &format!("{pushed}:added.txt")]),
        "from the fleet"
    );
    // ... its result names the branch and that commit, as a local worktree
    // child's does, and reached the parent's next step ...
    let show = shown(&f, &url, &id);
    assert!(show.contains(&pushed) && show.contains(&branch), "{show}");
    let last = server.requests().last().unwrap().to_string();
    assert!(
        last.contains(&format!("worktree: branch {branch} with 1 commit")),
        "{last}"
    );
    // ... and the worker's copy is gone (the commit is in the repository).
    assert!(!root.path().join(&id).exists());
    // The parent's machine has no such branch until `merge` fetches it; the merge
    // fast-forwards the workspace's branch.
    assert!(!git(f.ws.path(), &["branch", "--list", &branch]).contains("brood"));
    let head = git(f.ws.path(), &["rev-parse", "HEAD"]);
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .args(["agents", "merge", &id])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(git(f.ws.path(), &["rev-parse", "HEAD"]), pushed, "{stdout}");
    assert_eq!(
        git(f.ws.path(), &["rev-parse", &format!("{pushed}~1")]),
        head,
        "a fast-forward"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.path().join("added.txt")).unwrap(),
        "from the fleet\n"
    );
    // A push the remote refuses: recorded with its reason, the commit kept in the
    // worker's worktree, nothing forced.
    git(f.ws.path(), &["push", "-q", "origin", "main"]);
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'no brood branches here' >&2\nexit 1\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&hook)
        .status()
        .unwrap();
    let out = f
        .command()
        .env("BROOD_LEDGER_URL", &url)
        .arg("run")
        .args(local_flags(&server))
        .args(["--json", "second"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let log = stop(worker);
    let id = child_id(&f, &url, "write refused.txt");
    let show = shown(&f, &url, &id);
    assert!(
        show.contains("no brood branches here") && show.contains("never forced"),
        "{show}\n{log}"
    );
    let kept = root.path().join(&id);
    assert_eq!(
        std::fs::read_to_string(kept.join("refused.txt")).unwrap(),
        "from the fleet\n"
    );
    assert!(git(&kept, &["log", "-1", "--format=%s"]).contains(&id));
    assert!(git(&bare, &["branch", "--list", "brood/*"]).lines().count() == 1);
}

/// A worker not told to allow the parent's directory refuses the run's path before
/// running git: the run fails with the reason and the flag to pass, the parent gets
/// that end, and nothing is cloned.
#[test]
fn a_worker_refuses_a_local_repository_it_was_not_told_to_allow() {
    let Some(url) = pg::fresh_database("a_worker_refuses_a_local_repository") else {
        return;
    };
    let f = fleet_fixture();
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 => MockReply::tool_call("task", json!({"description": "look"})),
        _ => MockReply::text("done"),
    });
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let worker = spawn_worker_allowing(&f, &server, &url, root.path(), elsewhere.path());
    let out = run_parent(&f, &server, &url);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let log = stop(worker);
    let id = child_id(&f, &url, "look");
    let runs = fleet_runs(&f, &url);
    let child = runs.iter().find(|r| r["id"] == id.as_str()).unwrap();
    assert_eq!(child["status"], "failed", "{child}\n{log}");
    let show = shown(&f, &url, &id);
    assert!(
        show.contains("not told to allow") && show.contains("--allow-repository-dir"),
        "{show}"
    );
    let last = server.requests().last().unwrap().to_string();
    assert!(last.contains("--allow-repository-dir"), "{last}");
    assert!(!root.path().join(".repos").exists(), "nothing cloned");
    // Only the parent's two steps reached the model: the child never ran.
    assert_eq!(server.requests().len(), 2);
}
