//! The repository a fleet run names comes from the ledger (attacker input): what a
//! worker refuses before running git, what git itself refuses when a check is
//! bypassed (`protocol.allow`), and the worker's clone of an accepted repository —
//! fetched when a run's commit is missing from it.

use brood::ledger::{Claimed, RunId, RunStatus};
use brood::runtime::prepare_fleet_workspace;
use brood::subagent::fleet_repo::{check_repository, Dirs, FleetRepoError, Source};
use brood::subagent::git::Git;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// A repository with one commit; its HEAD.
fn repo_with_commit(dir: &Path) -> String {
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    git(dir, &["add", "a.txt"]);
    git(dir, &["commit", "-q", "-m", "start"]);
    git(dir, &["rev-parse", "HEAD"])
}

fn claimed(repo: &str, rev: Option<&str>, id: &str) -> Claimed {
    Claimed {
        run: RunId::from_string(id),
        attempt: 1,
        from: RunStatus::Queued,
        repo: repo.to_string(),
        rev: rev.map(str::to_string),
    }
}

#[test]
fn a_worker_refuses_every_repository_that_could_run_a_command_or_is_not_allowed() {
    let allowed = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let marker = other.path().join("ran");
    let dirs = [allowed.path().to_path_buf()];
    let refused: Vec<(String, &str)> = vec![
        (
            format!("ext::sh -c touch% {}", marker.display()),
            "remote helper",
        ),
        ("EXT::sh -c id".into(), "remote helper"),
        ("fd::17".into(), "remote helper"),
        ("fd::0,1/repo".into(), "remote helper"),
        ("anything+x::address".into(), "remote helper"),
        (
            format!("--upload-pack=touch {}", marker.display()),
            "option",
        ),
        ("-uhelp".into(), "option"),
        (
            "ssh://-oProxyCommand=touch%20x/repo".into(),
            "starts with '-'",
        ),
        ("ssh://user@-oProxyCommand=x/repo".into(), "starts with '-'"),
        ("-oProxyCommand=x:repo".into(), "option"),
        ("http://example.com/r.git".into(), "http:// is not accepted"),
        ("ftp://example.com/r.git".into(), "ftp:// is not accepted"),
        (
            "https://example.com/r.git\n--upload-pack=x".into(),
            "control character",
        ),
        ("relative/path".into(), "relative path"),
        ("".into(), "1 to"),
        (other.path().display().to_string(), "not told to allow"),
        (
            format!("file://{}", other.path().display()),
            "not told to allow",
        ),
        (
            format!("file://{}/%2e", allowed.path().display()),
            "%-escapes",
        ),
        ("/no/such/dir/anywhere".into(), "not a directory"),
        ("host name:repo".into(), "not a host"),
    ];
    for (repo, why) in &refused {
        match check_repository(repo, Dirs::Under(&dirs)) {
            Err(FleetRepoError::Refused { why: said, .. }) => {
                assert!(said.contains(why), "{repo:?}: {said}")
            }
            other => panic!("{repo:?} was not refused: {other:?}"),
        }
    }
    assert!(!marker.exists(), "nothing ran");
    let inside = allowed.path().join("r");
    std::fs::create_dir(&inside).unwrap();
    let real = std::fs::canonicalize(&inside).unwrap();
    for (repo, source) in [
        (
            "https://example.com/r.git".to_string(),
            Source::Remote("https://example.com/r.git".into()),
        ),
        (
            "ssh://git@example.com:22/r.git".into(),
            Source::Remote("ssh://git@example.com:22/r.git".into()),
        ),
        (
            "git://example.com/r.git".into(),
            Source::Remote("git://example.com/r.git".into()),
        ),
        (
            "git@example.com:o/r.git".into(),
            Source::Remote("git@example.com:o/r.git".into()),
        ),
        (inside.display().to_string(), Source::Dir(real.clone())),
        (
            format!("file://{}", inside.display()),
            Source::Dir(real.clone()),
        ),
    ] {
        assert_eq!(check_repository(&repo, Dirs::Under(&dirs)).unwrap(), source);
    }
    // A symlink inside the allowed directory to one outside is outside.
    std::os::unix::fs::symlink(other.path(), allowed.path().join("link")).unwrap();
    let link = allowed.path().join("link").display().to_string();
    assert!(check_repository(&link, Dirs::Under(&dirs)).is_err());
    assert!(check_repository(&other.path().display().to_string(), Dirs::Any).is_ok());
}

#[test]
fn git_itself_refuses_a_command_transport_when_a_check_is_bypassed() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let url = format!("ext::sh -c touch% {}", marker.display());
    let target = dir.path().join("clone").display().to_string();
    let out = Git::open(dir.path())
        .unwrap()
        .network()
        .run(&["clone", "--bare", "--", &url, &target]);
    let err = out.unwrap_err().to_string();
    assert!(err.contains("transport 'ext' not allowed"), "{err}");
    let out = Git::open(dir.path())
        .unwrap()
        .network()
        .run(&["clone", "--bare", "--", "fd::3", &target]);
    assert!(out.is_err());
    assert!(!marker.exists(), "the ext:: command never ran");
}

#[test]
fn a_worker_prepares_a_runs_worktree_from_its_clone_and_fetches_a_missing_commit() {
    let origin = tempfile::tempdir().unwrap();
    let first = repo_with_commit(origin.path());
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = vec![origin.path().to_path_buf()];
    let repo = origin.path().display().to_string();
    let id1 = "0000000000000000000000000000000a";
    let tree =
        prepare_fleet_workspace(root.path(), &claimed(&repo, Some(&first), id1), &dirs).unwrap();
    let dir = tree.path.clone();
    assert_eq!(
        (tree.base.as_str(), tree.branch.as_str()),
        (first.as_str(), "brood/0000000000000000000000000000000a")
    );
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]), first);
    // Cloned under the root, not used in place: the origin has no worktree of it.
    assert_eq!(git(origin.path(), &["worktree", "list"]).lines().count(), 1);
    // A commit made after the clone: fetched when a run names it.
    std::fs::write(origin.path().join("b.txt"), "b\n").unwrap();
    git(origin.path(), &["add", "b.txt"]);
    git(origin.path(), &["commit", "-q", "-m", "second"]);
    let second = git(origin.path(), &["rev-parse", "HEAD"]);
    let id2 = "0000000000000000000000000000000b";
    let dir2 = prepare_fleet_workspace(root.path(), &claimed(&repo, Some(&second), id2), &dirs)
        .unwrap()
        .path;
    assert_eq!(git(&dir2, &["rev-parse", "HEAD"]), second);
    assert!(dir2.join("b.txt").exists());
    let repos: Vec<_> = std::fs::read_dir(root.path().join(".repos"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "git"))
        .collect();
    assert_eq!(repos.len(), 1, "one clone per repository");
    // Not allowed: refused before git runs, naming the flag.
    let err = prepare_fleet_workspace(
        root.path(),
        &claimed(&repo, Some(&first), "0000000000000000000000000000000c"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--allow-repository-dir"), "{err}");
    // A revision that is nowhere: the run's workspace error names it.
    let err = prepare_fleet_workspace(
        root.path(),
        &claimed(
            &repo,
            Some(&"f".repeat(40)),
            "0000000000000000000000000000000d",
        ),
        &dirs,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&"f".repeat(40)), "{err}");
}
