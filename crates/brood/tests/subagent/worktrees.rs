//! Worktrees made at once on one repository (fleet workers on one machine, writer
//! children of several sessions): git reads every worktree's administrative files
//! while it adds one, so unserialized `git worktree add` calls fail on each other
//! ("failed to read .git/worktrees/<id>/commondir"); brood serializes them.

use brood::subagent::worktree;
use std::process::Command;

fn git(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[test]
fn many_worktrees_made_at_once_on_one_repository_all_succeed() {
    let repo = tempfile::tempdir().unwrap();
    let ws = repo.path();
    git(ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    git(ws, &["add", "a.txt"]);
    git(ws, &["commit", "-q", "-m", "start"]);
    for round in 0..3u32 {
        let made: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16u32)
                .map(|i| {
                    let id = format!("{:032x}", round * 100 + i);
                    s.spawn(move || worktree::create(ws, ws, &id, None))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, r) in made.iter().enumerate() {
            assert!(r.is_ok(), "round {round}, worktree {i}: {r:?}");
        }
    }
    let out = Command::new("git")
        .args(["worktree", "list"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1 + 48);
}
