//! A fleet worker's side of the runtime (docs/FLEET.md): [`Session::run_claimed`] runs
//! a run its ledger claimed (`Ledger::claim`) through the same path a resumed run
//! takes (`Session::resume`: the conversation rebuilt from its transcript, its grant
//! re-derived and narrowed to the grant recorded at its spawn, its limits counting
//! what it spent), under its own id, parent and root, in a git worktree of its
//! repository prepared under the worker's workspace root
//! ([`prepare_fleet_workspace`]); a worktree the run left unchanged is removed when it
//! ends, a changed one is kept.

use super::error::SessionError;
use super::resume::read_recorded;
use super::root::RunReport;
use super::session::Session;
use crate::agent::EventSink;
use crate::ledger::Claimed;
use crate::subagent::fleet_repo::{check_repository, mirror, Dirs};
use crate::subagent::git::Git;
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
        let dir =
            tokio::task::spawn_blocking(move || prepare_fleet_workspace(&root, &what, &allowed))
                .await
                .map_err(|e| workspace_error(claimed, e.to_string()))??;
        let workspace = crate::tool::Workspace::open(&dir)
            .map_err(|e| workspace_error(claimed, format!("{}: {e}", dir.display())))?;
        let report = self
            .continue_recorded(recorded, events, turn, Some(Arc::new(workspace)), true)
            .await;
        // A worktree the run left unchanged goes; a changed one stays for whoever
        // collects the work (never dropped).
        let _ = tokio::task::spawn_blocking(move || remove_if_clean(&dir)).await;
        report
    }
}

/// Remove the worktree at `dir` when `git status` shows nothing in it.
fn remove_if_clean(dir: &Path) {
    let Ok(git) = Git::open(dir) else { return };
    let clean = git
        .run(&[
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--ignored=no",
        ])
        .is_ok_and(|s| s.trim().is_empty());
    if clean {
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
) -> Result<PathBuf, ResumeError> {
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
    if dir.join(".git").exists() {
        return Ok(dir);
    }
    let git = mirror(root, &source, claimed.rev.as_deref()).map_err(|e| fail(e.to_string()))?;
    let target = dir.to_string_lossy().into_owned();
    git.run(&["worktree", "add", "--detach", "--quiet", &target, rev])
        .map_err(|e| fail(e.to_string()))?;
    Ok(dir)
}
