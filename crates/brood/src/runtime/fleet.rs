//! A fleet worker's side of the runtime (docs/FLEET.md): [`Session::run_claimed`] runs
//! a run its ledger claimed (`Ledger::claim`) through the same path a resumed run
//! takes (`Session::resume`: the conversation rebuilt from its transcript, its grant
//! re-derived and narrowed to the grant recorded at its spawn, its limits counting
//! what it spent), under its own id, parent and root, in a git worktree of its
//! repository prepared under the worker's workspace root
//! ([`prepare_fleet_workspace`]). When it ends its worktree is settled as a local
//! isolated child's (`subagent::worktree`): what it changed is committed, and the
//! commits are pushed to its repository as branch `brood/<run id>` (never forced) and
//! listed in its result, for `brood agents merge` on the parent's machine; an
//! unchanged worktree is removed, and one whose push failed is kept with the reason
//! in the result.

use super::error::SessionError;
use super::resume::read_recorded;
use super::root::RunReport;
use super::session::Session;
use crate::agent::EventSink;
use crate::ledger::Claimed;
use crate::subagent::fleet_repo::{check_repository, mirror, Dirs};
use crate::subagent::git::Git;
use crate::subagent::worktree::Worktree;
use crate::subagent::ResumeError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl Session {
    /// Run `claimed` — a run this session's ledger claimed — to its end, from its last
    /// recorded step (a first claim starts from its task), in a worktree of its
    /// repository at its revision under `workspace_root` (see
    /// [`prepare_fleet_workspace`]; a local repository only under `allowed_dirs`). Its tools are exactly the grant recorded at its
    /// spawn or narrower (today's configuration on this worker may narrow it); the
    /// model endpoints and keys are this session's (they never travel through the
    /// ledger). Its end is recorded only while this worker holds its lease.
    ///
    /// An `Err` wrote nothing about the run's end: the worker should record it
    /// failed (it holds the lease), or leave it to be claimed again.
    pub async fn run_claimed(
        &self,
        claimed: &Claimed,
        workspace_root: &Path,
        allowed_dirs: &[PathBuf],
        events: Option<EventSink>,
        turn: CancellationToken,
    ) -> Result<RunReport, SessionError> {
        let id = claimed.run.as_str().to_string();
        let recorded = self
            .ledger()
            .read(move |r| read_recorded(r, &id))
            .await
            .map_err(ResumeError::Ledger)?;
        let root = workspace_root.to_path_buf();
        let what = claimed.clone();
        let allowed = allowed_dirs.to_vec();
        let tree =
            tokio::task::spawn_blocking(move || prepare_fleet_workspace(&root, &what, &allowed))
                .await
                .map_err(|e| workspace_error(claimed, e.to_string()))??;
        let workspace = crate::tool::Workspace::open(&tree.workspace)
            .map_err(|e| workspace_error(claimed, format!("{}: {e}", tree.workspace.display())))?;
        let (dir, base) = (tree.path.clone(), tree.base.clone());
        let report = self
            .continue_recorded(
                recorded,
                events,
                turn,
                Some(Arc::new(workspace)),
                Some(Arc::new(tree)),
                true,
            )
            .await;
        // The run's end settled its worktree (committed, pushed, removed); one it
        // ended without reaching (cancelled before it started, an error) goes when
        // unchanged and stays otherwise (never dropped).
        let _ = tokio::task::spawn_blocking(move || remove_if_unchanged(&dir, &base)).await;
        report
    }
}

/// Remove the worktree at `dir` when `git status` shows nothing in it and it holds
/// no commit past `base`.
fn remove_if_unchanged(dir: &Path, base: &str) {
    if !dir.exists() {
        return;
    }
    let Ok(git) = Git::open(dir) else { return };
    let clean = git
        .run(&[
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--ignored=no",
        ])
        .is_ok_and(|s| s.trim().is_empty());
    let at_base = git
        .run(&["rev-parse", "HEAD"])
        .is_ok_and(|h| h.trim() == base);
    if clean && at_base {
        let target = dir.to_string_lossy().into_owned();
        let _ = git.run(&["worktree", "remove", "--", &target]);
    }
}

fn workspace_error(claimed: &Claimed, detail: String) -> ResumeError {
    ResumeError::Workspace {
        id: claimed.run.to_string(),
        repo: claimed.repo.clone(),
        rev: claimed.rev.clone().unwrap_or_else(|| "HEAD".into()),
        detail,
    }
}

/// The worktree a claimed run runs in: `<root>/<run id>`, a detached `git worktree` of
/// the worker's clone of its repository (`<root>/.repos/`, see
/// [`crate::subagent::fleet_repo::mirror`]) at its revision. A run taken over on the
/// machine that ran it before continues in the worktree it left. The repository is
/// checked first ([`crate::subagent::fleet_repo::check_repository`]): a URL over
/// https, ssh or git, or a local directory under one of `allowed_dirs`; every `git`
/// call is hardened against the repository (`subagent::git`).
pub fn prepare_fleet_workspace(
    root: &Path,
    claimed: &Claimed,
    allowed_dirs: &[PathBuf],
) -> Result<Worktree, ResumeError> {
    let fail = |detail: String| workspace_error(claimed, detail);
    // The id names a directory: from the database, so checked (ids are UUIDs).
    let id = claimed.run.as_str();
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(fail(format!("run id {id:?} cannot name a directory")));
    }
    let source = check_repository(&claimed.repo, Dirs::Under(allowed_dirs))
        .map_err(|e| fail(e.to_string()))?;
    let rev = claimed.rev.as_deref().unwrap_or("HEAD");
    if rev.starts_with('-') || rev.is_empty() {
        return Err(fail(format!("{rev:?} is not a revision")));
    }
    std::fs::create_dir_all(root).map_err(|e| fail(format!("{}: {e}", root.display())))?;
    let dir = root.join(id);
    let git = mirror(root, &source, claimed.rev.as_deref()).map_err(|e| fail(e.to_string()))?;
    let base = git
        .run(&["rev-parse", "--verify", "-q", &format!("{rev}^{{commit}}")])
        .map_err(|_| fail(format!("the repository has no commit {rev}")))?
        .trim()
        .to_string();
    if !dir.join(".git").exists() {
        let target = dir.to_string_lossy().into_owned();
        git.run(&["worktree", "add", "--detach", "--quiet", &target, &base])
            .map_err(|e| fail(e.to_string()))?;
    }
    Ok(Worktree::for_fleet(
        &git,
        dir,
        id,
        base,
        source.as_git_arg(),
    ))
}
