//! `isolation = "worktree"` end to end: writer children in their own git
//! worktrees, what their results say, `brood agents merge`, `close --discard`,
//! orphans after a SIGKILL and `brood agents prune`, and a hostile repository
//! whose hooks, fsmonitor and filters must never run.

use super::signals::spawn_local;
use super::*;

/// `git ARGS` in `dir` (the test's own calls: plain git), stdout on success.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fixture whose workspace is a git repository with `notes.txt` committed on
/// `main`, and `isolation = "worktree"` in the user's config.
fn repo_fixture() -> Fixture {
    let f = fixture();
    let ws = f.ws.path();
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["add", "notes.txt"]);
    git(ws, &["commit", "-q", "-m", "start"]);
    let conf = f.home.path().join(".config/brood");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("config.toml"),
        "[subagents]\nisolation = \"worktree\"\n",
    )
    .unwrap();
    f
}

/// The parent fans out `prompts` with `task`; a child whose prompt starts with
/// `write X` writes `notes.txt` = "from X\n", others only list the directory.
fn writers_server(prompts: &'static [&'static str]) -> MockServer {
    MockServer::start(move |req| {
        let first = req.first_user_text().unwrap_or_default().to_string();
        if let Some(who) = first.strip_prefix("write ") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call(
                    "write_file",
                    json!({"path": "notes.txt", "content": format!("from {who}\n")}),
                ),
                _ => MockReply::text(format!("SUMMARY: wrote {who}\nCHANGES: notes.txt\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none")),
            };
        }
        if first.starts_with("look") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("list_dir", json!({})),
                _ => MockReply::text(
                    "SUMMARY: looked\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none",
                ),
            };
        }
        match req.assistant_turns() {
            0 => MockReply::tool_call("task", json!({"prompts": prompts})),
            _ => MockReply::text("done"),
        }
    })
}

fn run_id_with_objective(runs: &[Value], objective: &str) -> String {
    runs.iter()
        .find(|r| r["objective"] == objective)
        .unwrap_or_else(|| panic!("no run for {objective}: {runs:?}"))["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `brood agents show ID --json`, the run object (flattened or under `run`).
fn shown(f: &Fixture, id: &str) -> Value {
    let out = brood(
        f.home.path(),
        f.ws.path(),
        &["agents", "show", id, "--json"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn branch_exists(ws: &Path, branch: &str) -> bool {
    Command::new("git")
        .args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ])
        .current_dir(ws)
        .output()
        .unwrap()
        .status
        .success()
}

/// Two writers edit the same file in parallel: each branch holds its own edit,
/// the workspace holds neither until merged; a child that changed nothing leaves
/// no worktree. The first merge fast-forwards; the second conflicts on the same
/// line and changes nothing; `close --discard` deletes it.
#[test]
fn parallel_writers_keep_their_edits_on_their_own_branches() {
    let f = repo_fixture();
    let ws = f.ws.path();
    let server = writers_server(&["write A", "write B", "look only"]);
    let out = run_local(&f, &server, &["--json", "fan out"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // The workspace itself is untouched.
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "alpha\nbeta\n"
    );

    let all = f.runs();
    let a = run_id_with_objective(&all, "write A");
    let b = run_id_with_objective(&all, "write B");
    let look = run_id_with_objective(&all, "look only");
    for (id, who) in [(&a, "A"), (&b, "B")] {
        let branch = format!("brood/{id}");
        assert_eq!(
            git(ws, &["show", &format!("{branch}:notes.txt")]),
            format!("from {who}\n"),
            "branch {branch} must hold child {who}'s edit"
        );
        let run = shown(&f, id);
        let w = if run["result"].is_null() {
            &run["run"]["result"]["worktree"]
        } else {
            &run["result"]["worktree"]
        };
        assert_eq!(w["branch"], branch.as_str(), "{run}");
        assert_eq!(w["kept"], true, "{w}");
        assert_eq!(w["commits"].as_array().map(Vec::len), Some(1), "{w}");
        assert!(
            w["commits"][0]["subject"]
                .as_str()
                .is_some_and(|s| s.contains(id.as_str())),
            "brood's commit names the run: {w}"
        );
        assert!(
            w["diff_stat"]
                .as_str()
                .is_some_and(|s| s.contains("notes.txt")),
            "{w}"
        );
        assert!(ws
            .join(".brood/worktrees")
            .join(id)
            .join("notes.txt")
            .exists());
    }
    // The parent was told the branch and how to merge it.
    let told = server.captured().last().unwrap().body().to_string();
    assert!(
        told.contains(&format!("brood/{a}")) && told.contains("brood agents merge"),
        "{told}"
    );
    // Unchanged: removed with its branch.
    assert!(!ws.join(".brood/worktrees").join(&look).exists());
    assert!(!branch_exists(ws, &format!("brood/{look}")));
    // Nothing of the worktrees shows in the workspace's git status.
    let status = git(ws, &["status", "--porcelain", "--untracked-files=all"]);
    assert!(!status.contains("worktrees"), "{status}");

    // Merge A: a fast-forward.
    let out = brood(f.home.path(), ws, &["agents", "merge", &a], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("fast-forwarded main"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "from A\n"
    );
    assert!(!ws.join(".brood/worktrees").join(&a).exists());
    assert!(!branch_exists(ws, &format!("brood/{a}")));

    // Merge B: the same line changed on both sides; reported, nothing forced.
    let head = git(ws, &["rev-parse", "HEAD"]);
    let out = brood(f.home.path(), ws, &["agents", "merge", &b], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("conflicts in notes.txt") && stderr.contains("nothing was"),
        "{stderr}"
    );
    assert_eq!(git(ws, &["rev-parse", "HEAD"]), head, "HEAD must not move");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "from A\n"
    );
    assert_eq!(
        git(ws, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
    assert!(branch_exists(ws, &format!("brood/{b}")));

    // close without --discard refuses; with it, the worktree and branch go.
    let out = brood(f.home.path(), ws, &["agents", "close", &b], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);
    assert!(branch_exists(ws, &format!("brood/{b}")));
    let out = brood(
        f.home.path(),
        ws,
        &["agents", "close", &b, "--discard"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert!(!ws.join(".brood/worktrees").join(&b).exists());
    assert!(!branch_exists(ws, &format!("brood/{b}")));
    // Each action is in the ledger.
    let events = shown(&f, &b)["events"].to_string();
    assert!(
        events.contains("\"discarded\"") && events.contains("\"settled\""),
        "{events}"
    );
}

/// The call can ask for a worktree without config: `task` with `isolation`.
/// Without a git repository that is a clear error back to the parent.
#[test]
fn isolation_outside_a_repository_is_a_clear_error() {
    let f = fixture();
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 if req.first_user_text() == Some("go") => MockReply::tool_call(
            "task",
            json!({"description": "write X", "isolation": "worktree"}),
        ),
        _ => MockReply::text("done"),
    });
    let out = run_local(&f, &server, &["--json", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let told = server.captured().last().unwrap().body().to_string();
    assert!(told.contains("needs a git repository"), "{told}");
    assert_eq!(
        std::fs::read_to_string(f.ws.path().join("notes.txt")).unwrap(),
        "alpha\nbeta\n"
    );
}

/// `worktree_base` picks what worktrees branch from: `[subagents] worktree_base`
/// for every isolated writer, an agent file's `worktree_base:` over it for its
/// type; a base that names no commit is a clear error to the parent, and one that
/// could be read as a git option is refused when the config loads.
#[test]
fn worktrees_branch_from_the_configured_base() {
    let f = repo_fixture();
    let ws = f.ws.path();
    for (branch, file) in [("release", "release.txt"), ("hotfix", "hotfix.txt")] {
        git(ws, &["switch", "-q", "-c", branch, "main"]);
        std::fs::write(ws.join(file), "x\n").unwrap();
        git(ws, &["add", file]);
        git(ws, &["commit", "-q", "-m", branch]);
    }
    git(ws, &["switch", "-q", "main"]);
    let config = f.home.path().join(".config/brood/config.toml");
    std::fs::write(
        &config,
        "[subagents]\nisolation = \"worktree\"\nworktree_base = \"release\"\n",
    )
    .unwrap();
    let agents = ws.join(".brood/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("fixer.md"),
        "---\ndescription: fixes\nrole: implementer\nworktree_base: hotfix\n---\nFix.\n",
    )
    .unwrap();
    let server =
        MockServer::start(|req| {
            let first = req.first_user_text().unwrap_or_default().to_string();
            match (first.strip_prefix("write "), req.assistant_turns()) {
            (Some(who), 0) => MockReply::tool_call(
                "write_file",
                json!({"path": "notes.txt", "content": format!("from {who}\n")}),
            ),
            (Some(_), _) => MockReply::text(
                "SUMMARY: wrote\nCHANGES: notes.txt\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none",
            ),
            (None, 0) => MockReply::tool_calls([
                ("task", json!({"prompts": ["write A"]})),
                ("task", json!({"description": "write B", "agent_type": "fixer"})),
            ]),
            (None, _) => MockReply::text("done"),
        }
        });
    let out = run_local(&f, &server, &["--json", "fan out"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let all = f.runs();
    for (objective, base, file) in [
        ("write A", "release", "release.txt"),
        ("write B", "hotfix", "hotfix.txt"),
    ] {
        let id = run_id_with_objective(&all, objective);
        let branch = format!("brood/{id}");
        let base_id = git(ws, &["rev-parse", base]).trim().to_string();
        // One commit (the child's) on top of the base, which the worktree holds.
        assert_eq!(
            git(ws, &["rev-parse", &format!("{branch}~1")]).trim(),
            base_id,
            "{objective}: {branch} must start from {base}"
        );
        assert!(ws.join(".brood/worktrees").join(&id).join(file).exists());
        let run = shown(&f, &id);
        let w = if run["result"].is_null() {
            &run["run"]["result"]["worktree"]
        } else {
            &run["result"]["worktree"]
        };
        assert_eq!(w["base"], base_id.as_str(), "{w}");
        assert_eq!(w["commits"].as_array().map(Vec::len), Some(1), "{w}");
    }
    // The workspace's own branch is untouched.
    assert_eq!(git(ws, &["branch", "--show-current"]).trim(), "main");

    // A base the repository does not have: the parent is told, nothing runs.
    std::fs::write(
        &config,
        "[subagents]\nisolation = \"worktree\"\nworktree_base = \"nope\"\n",
    )
    .unwrap();
    let server = writers_server(&["write C"]);
    let out = run_local(&f, &server, &["--json", "fan out"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let told = server.captured().last().unwrap().body().to_string();
    assert!(told.contains("no commit named 'nope'"), "{told}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "alpha\nbeta\n"
    );

    // Something git would read as an option never reaches git.
    std::fs::write(
        &config,
        "[subagents]\nworktree_base = \"--upload-pack=touch pwned\"\n",
    )
    .unwrap();
    let out = brood(f.home.path(), ws, &["config", "show"], &[]);
    let (stdout, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stderr.contains("subagents.worktree_base") && stderr.contains("not a base"),
        "{stderr}"
    );
}

/// A brood killed while an isolated child works leaves its worktree: the next
/// session lists it in the ledger and says so; `brood agents prune` removes it,
/// saving what the child had written on its branch.
#[test]
fn an_orphaned_worktree_is_listed_and_pruned() {
    let f = repo_fixture();
    let ws = f.ws.path();
    let server = MockServer::start(|req| {
        if req.first_user_text() == Some("write then hang") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call(
                    "write_file",
                    json!({"path": "new.txt", "content": "half done\n"}),
                ),
                _ => MockReply::Hang,
            };
        }
        match req.assistant_turns() {
            0 if req.first_user_text() == Some("delegate") => {
                MockReply::tool_call("task", json!({"description": "write then hang"}))
            }
            0 => MockReply::text("hello"),
            _ => MockReply::text("done"),
        }
    });
    let mut child = spawn_local(&f, &server, &["--json", "delegate"]);
    // The parent's step, the child's write, the child's hanging step.
    wait_for_requests(&server, 3);
    child.kill().expect("SIGKILL brood");
    child.wait().expect("reap brood");
    let id = run_id_with_objective(&f.runs(), "write then hang");
    let dir = ws.join(".brood/worktrees").join(&id);
    assert!(
        dir.join("new.txt").exists(),
        "the orphan holds the child's write"
    );

    // The next session lists it.
    let out = run_local(&f, &server, &["--json", "hi"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&id) && stderr.contains("brood agents prune"),
        "{stderr}"
    );
    let events = shown(&f, &id)["events"].to_string();
    assert!(events.contains("\"orphaned\""), "{events}");
    // `chat` (plain: stdin is closed) and `mcp` (the host hangs up at once) open
    // the same session and say the same thing, until the orphan is pruned.
    let base = server.base_url();
    for front in ["chat", "mcp"] {
        let args = [
            front,
            "--provider",
            "local",
            "--base-url",
            &base,
            "--model",
            "m",
        ];
        let out = brood(f.home.path(), ws, &args, &[]);
        let (stdout, stderr) = text(&out);
        let said = format!("{stdout}{stderr}");
        assert!(
            said.contains(&id) && said.contains("brood agents prune"),
            "{front}: {said}"
        );
    }

    let out = brood(f.home.path(), ws, &["agents", "prune"], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("removed orphaned worktree") && stdout.contains(&id),
        "{stdout}"
    );
    assert!(!dir.exists());
    let branch = format!("brood/{id}");
    assert_eq!(
        git(ws, &["show", &format!("{branch}:new.txt")]),
        "half done\n"
    );
    assert!(!git(ws, &["worktree", "list"]).contains(&id));
    let events = shown(&f, &id)["events"].to_string();
    assert!(events.contains("\"pruned\""), "{events}");
    // Pruned once: a second prune has nothing to do.
    let out = brood(f.home.path(), ws, &["agents", "prune"], &[]);
    assert!(
        text(&out).0.contains("no orphaned worktrees"),
        "{}",
        text(&out).0
    );
}

/// A repository is attacker input: hooks (in `.git/hooks` and a `core.hooksPath`),
/// `core.fsmonitor`, and clean/smudge filters, diff and merge drivers selected by
/// `.gitattributes` and `.git/info/attributes` all point at a script that leaves
/// a mark. Creating, committing, settling and merging worktrees runs none of them.
#[test]
fn a_hostile_repository_runs_nothing() {
    let f = repo_fixture();
    let ws = f.ws.path();
    std::fs::write(
        ws.join(".gitattributes"),
        "* filter=evil diff=evil merge=evil\n",
    )
    .unwrap();
    git(ws, &["add", ".gitattributes"]);
    git(ws, &["commit", "-q", "-m", "attributes"]);
    let marks = tempfile::tempdir().unwrap();
    let script = marks.path().join("mark.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntouch \"{}/$(basename \"$0\")-$$\"\ncat\n",
            marks.path().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hooks_dir = marks.path().join("hooks");
    std::fs::create_dir_all(&hooks_dir).unwrap();
    for hook in [
        "post-checkout",
        "pre-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
        "reference-transaction",
        "pre-merge-commit",
        "post-merge",
        "post-index-change",
    ] {
        for dir in [ws.join(".git/hooks"), hooks_dir.clone()] {
            std::fs::copy(&script, dir.join(hook)).unwrap();
        }
    }
    let s = script.display().to_string();
    let config = ws.join(".git/config");
    let mut text_cfg = std::fs::read_to_string(&config).unwrap();
    text_cfg.push_str(&format!(
        "[core]\n\thooksPath = {}\n\tfsmonitor = {s}\n\
         [filter \"evil\"]\n\tclean = {s}\n\tsmudge = {s}\n\trequired = true\n\
         [diff \"evil\"]\n\ttextconv = {s}\n\tcommand = {s}\n\
         [merge \"evil\"]\n\tdriver = {s} %O %A %B\n",
        hooks_dir.display()
    ));
    std::fs::write(&config, text_cfg).unwrap();
    std::fs::create_dir_all(ws.join(".git/info")).unwrap();
    std::fs::write(
        ws.join(".git/info/attributes"),
        "* filter=evil diff=evil merge=evil\n",
    )
    .unwrap();

    let server = writers_server(&["write A", "look only"]);
    let out = run_local(&f, &server, &["--json", "fan out"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let a = run_id_with_objective(&f.runs(), "write A");
    let out = brood(f.home.path(), ws, &["agents", "merge", &a], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let marked: Vec<_> = std::fs::read_dir(marks.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "mark.sh" && n != "hooks")
        .collect();
    assert!(
        marked.is_empty(),
        "the repository's own programs ran: {marked:?}"
    );
    // The script works (so the check above could fail): run it once by hand.
    let ran = Command::new(&script)
        .stdin(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(ran.success());
    assert!(std::fs::read_dir(marks.path()).unwrap().count() > 2);
}
