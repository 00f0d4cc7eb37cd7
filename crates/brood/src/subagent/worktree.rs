//! `isolation = "worktree"`: a writer child in its own `git worktree`.
//!
//! A child that may change files and runs isolated gets a worktree at
//! `<workspace>/.brood/worktrees/<run id>` on a new branch `brood/<run id>` from
//! its parent's `HEAD` (or from `worktree_base`, see [`check_base`]); its file tools, jail and shell sandbox are rooted there,
//! so two writers editing the same file never overwrite each other. When it ends
//! brood commits what it left uncommitted (a message naming the run) and
//! [`Worktree::settle`]s: a worktree without commits is removed with its branch;
//! one with commits is kept, and its result lists the branch, the commits and the
//! diff stat, until [`merge`] (a fast-forward, or a merge commit when git finds no
//! conflict; conflicts are reported and nothing is changed — never forced) or
//! [`discard`]. A worktree whose run never settled (brood was killed) is an
//! orphan: [`super::worktrees::record_orphans`] finds them, [`prune`] saves what they hold on their branch
//! and removes them.
//!
//! Every git call is hardened against the repository's own configuration
//! (see [`super::git`]).

use super::git::{Git, GitError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Where the worktrees live, relative to the workspace.
pub const WORKTREES_DIR: &str = ".brood/worktrees";
/// Who brood's own commits in a worktree are by.
const BROOD_NAME: &str = "brood";
const BROOD_EMAIL: &str = "brood@localhost";
/// Most lines of a diff stat kept in a result.
const STAT_LINES: usize = 40;

/// Whether a writer child runs in the shared workspace or in its own worktree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// In the workspace, with every other writer.
    #[default]
    None,
    /// In its own git worktree on branch `brood/<run id>`.
    Worktree,
}

impl Isolation {
    /// `none` or `worktree` (case-insensitive).
    pub fn parse(text: &str) -> Result<Isolation, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Isolation::None),
            "worktree" => Ok(Isolation::Worktree),
            other => Err(format!(
                "'{other}' is not an isolation; use none or worktree"
            )),
        }
    }

    /// The stricter of the two: isolation may be asked for at every level and
    /// turned off at none.
    pub fn strictest(self, other: Isolation) -> Isolation {
        self.max(other)
    }

    /// Its name in config and results.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::None => "none",
            Isolation::Worktree => "worktree",
        }
    }
}

/// Why a worktree could not be made, merged or removed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WorktreeError {
    /// The workspace is not inside a git repository.
    #[error(
        "isolation = \"worktree\" needs a git repository, and {workspace} is not in one \
         ({detail}); run `git init` and commit, or set isolation = \"none\""
    )]
    NotARepository {
        /// The workspace.
        workspace: PathBuf,
        /// What git said.
        detail: String,
    },
    /// The repository has no commit to branch from.
    #[error(
        "isolation = \"worktree\" branches from HEAD, and the repository at {workspace} has \
         no commit yet; commit first"
    )]
    NoCommit {
        /// The workspace.
        workspace: PathBuf,
    },
    /// Merging needs a branch checked out where the run was opened.
    #[error(
        "{workspace} has a detached HEAD; check out the branch to merge brood/{run} into \
         (git switch BRANCH) and run brood agents merge again"
    )]
    DetachedHead {
        /// The workspace.
        workspace: PathBuf,
        /// The run whose branch was to be merged.
        run: String,
    },
    /// The run has no worktree branch (never isolated, or merged or discarded).
    #[error("run {run} has no worktree branch brood/{run} (it was not isolated, or was already merged or discarded)")]
    NoBranch {
        /// The run.
        run: String,
    },
    /// The branch does not merge cleanly; nothing was changed.
    #[error(
        "brood/{run} does not merge cleanly into {target}: conflicts in {}; nothing was \
         changed (merge it by hand, or discard it with brood agents close {run} --discard)",
        files.join(", ")
    )]
    Conflicts {
        /// The run.
        run: String,
        /// The branch it was to merge into.
        target: String,
        /// The files in conflict.
        files: Vec<String>,
    },
    /// `worktree_base` does not name a commit of the repository.
    #[error(
        "worktree_base '{base}': {problem}; fix or remove `worktree_base` in [subagents] \
         or in the agent file"
    )]
    BadBase {
        /// The base as configured.
        base: String,
        /// Why it cannot be branched from.
        problem: String,
    },
    /// A fleet worker could not push the run's branch to its repository (no
    /// rights, not a fast-forward, unreachable); nothing was forced.
    #[error(
        "pushing {branch} to {repository} failed ({detail}); its commits are kept in the \
         worker's worktree {} — push them by hand from there, never forced",
        path.display()
    )]
    Push {
        /// `brood/<run id>`.
        branch: String,
        /// Where it was pushed.
        repository: String,
        /// The worktree that keeps the commits.
        path: PathBuf,
        /// What git said.
        detail: String,
    },
    /// A git command failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A file-system step failed.
    #[error("{what} {}: {detail}", path.display())]
    Io {
        /// The step that failed.
        what: &'static str,
        /// The path it worked on.
        path: PathBuf,
        /// The I/O error.
        detail: String,
    },
}

/// One commit on a worktree's branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    /// Full id.
    pub id: String,
    /// First line of its message.
    pub subject: String,
}

/// What a settled worktree holds: part of the child's result and of its
/// `worktree` ledger event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeReport {
    /// `brood/<run id>`.
    pub branch: String,
    /// The worktree directory (gone when `kept` is false).
    pub path: PathBuf,
    /// The commit it branched from.
    pub base: String,
    /// Commits on the branch since `base`, oldest first.
    pub commits: Vec<Commit>,
    /// `git diff --stat base..branch` (capped), empty when unchanged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff_stat: String,
    /// Whether the worktree and branch are kept (they hold commits). A fleet
    /// run's branch is kept in its repository ([`WorktreeReport::pushed_to`]).
    pub kept: bool,
    /// The repository a fleet worker pushed the branch to (its worktree is then
    /// removed); `brood agents merge` fetches the branch from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed_to: Option<String>,
    /// What went wrong while settling (the worktree is then kept as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A live worktree of one run.
#[derive(Debug, Clone)]
pub struct Worktree {
    /// The run it belongs to.
    pub run_id: String,
    /// The worktree's top directory.
    pub path: PathBuf,
    /// The child's workspace inside it (the same subdirectory the parent's
    /// workspace is of its repository).
    pub workspace: PathBuf,
    /// `brood/<run id>`.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// The parent's workspace: where `brood agents merge` merges into.
    pub target: PathBuf,
    /// What the child should know (uncommitted parent changes left behind, …).
    pub warnings: Vec<String>,
    /// A fleet run's repository: where its branch is pushed when it settles with
    /// commits (see [`Worktree::for_fleet`]).
    pub push_to: Option<String>,
    git: Git,
}

/// The branch of run `id`'s worktree.
pub fn branch_of(id: &str) -> String {
    format!("brood/{id}")
}

/// The worktree directory of run `id` in `workspace`.
pub fn dir_of(workspace: &Path, id: &str) -> PathBuf {
    workspace.join(WORKTREES_DIR).join(id)
}

/// Check a `worktree_base` as written in config or front matter (attacker input):
/// a branch, tag, remote-tracking branch or commit id, optionally with `~N`/`^N`
/// — letters, digits and `._/~^-` only, not starting with `-` (never an option to
/// git), no `..` (never a range), at most 200 bytes. Whether it names a commit is
/// only known in the repository, when a child is opened.
pub fn check_base(text: &str) -> Result<String, String> {
    let t = text.trim();
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._/~^-".contains(c);
    if t.is_empty() || t.len() > 200 || t.starts_with('-') || t.contains("..") {
        return Err(format!(
            "'{t}' is not a base to branch from; give a branch, tag or commit id (e.g. main, \
             origin/release, v1.2, 3f2a9c1)"
        ));
    }
    match t.chars().find(|c| !allowed(*c)) {
        Some(c) => Err(format!(
            "'{t}' is not a base to branch from: {c:?} is not allowed (letters, digits and \
             ._/~^- only)"
        )),
        None => Ok(t.to_string()),
    }
}

/// Make run `id`'s worktree: branch `brood/<id>` from `base` (checked by
/// [`check_base`]; `None`: the `HEAD`) of `parent` (the opening run's
/// workspace), checked out under `workspace`'s `.brood/worktrees/`. Blocking
/// (runs git).
pub fn create(
    workspace: &Path,
    parent: &Path,
    id: &str,
    from: Option<&str>,
) -> Result<Worktree, WorktreeError> {
    let git = Git::open(parent)?;
    let not_repo = |detail: String| WorktreeError::NotARepository {
        workspace: parent.to_path_buf(),
        detail,
    };
    match git.run(&["rev-parse", "--is-inside-work-tree"]) {
        Ok(s) if s.trim() == "true" => {}
        Ok(s) => return Err(not_repo(format!("git says inside work tree: {}", s.trim()))),
        Err(GitError::Failed { stderr, .. }) => return Err(not_repo(stderr)),
        Err(e) => return Err(e.into()),
    }
    let prefix = git.run(&["rev-parse", "--show-prefix"])?.trim().to_string();
    let base = match from {
        None => git
            .run(&["rev-parse", "--verify", "-q", "HEAD^{commit}"])
            .map_err(|_| WorktreeError::NoCommit {
                workspace: parent.to_path_buf(),
            })?,
        Some(from) => {
            let from = check_base(from).map_err(|problem| WorktreeError::BadBase {
                base: from.to_string(),
                problem,
            })?;
            git.run(&["rev-parse", "--verify", "-q", &format!("{from}^{{commit}}")])
                .map_err(|_| WorktreeError::BadBase {
                    base: from.clone(),
                    problem: format!(
                        "the repository at {} has no commit named '{from}'",
                        parent.display()
                    ),
                })?
        }
    }
    .trim()
    .to_string();
    let mut warnings = Vec::new();
    let dirty = git.run(&["status", "--porcelain", "--untracked-files=no"])?;
    if from.is_none() && !dirty.trim().is_empty() {
        warnings.push(format!(
            "the workspace has uncommitted changes to tracked files; this worktree starts \
             from HEAD ({}) without them",
            short(&base)
        ));
    }
    let dir = workspace.join(WORKTREES_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| WorktreeError::Io {
        what: "creating",
        path: dir.clone(),
        detail: e.to_string(),
    })?;
    // Worktrees stay out of the parent's `git status` and its tools' walks.
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "*\n").map_err(|e| WorktreeError::Io {
            what: "writing",
            path: ignore.clone(),
            detail: e.to_string(),
        })?;
    }
    let path = dir.join(id);
    let branch = branch_of(id);
    let path_text = path.to_string_lossy().into_owned();
    git.run(&["worktree", "add", "-q", "-b", &branch, &path_text, &base])?;
    Ok(Worktree {
        run_id: id.to_string(),
        workspace: path.join(&prefix),
        path,
        branch,
        base,
        target: parent.to_path_buf(),
        warnings,
        push_to: None,
        git,
    })
}

impl Worktree {
    /// A fleet run's worktree: `path`, a detached worktree of the worker's clone
    /// (`git` is for that clone) at `base`. It settles as a local one does, then
    /// pushes its commits to `push_to` as branch `brood/<id>` (never forced) and is
    /// removed once they are there.
    pub fn for_fleet(
        git: &Git,
        path: PathBuf,
        id: &str,
        base: String,
        push_to: String,
    ) -> Worktree {
        Worktree {
            run_id: id.to_string(),
            workspace: path.clone(),
            target: git.dir().to_path_buf(),
            path,
            branch: branch_of(id),
            base,
            warnings: Vec::new(),
            push_to: Some(push_to),
            git: git.clone(),
        }
    }

    /// Commit what the child left (`message`), then keep the worktree if its
    /// branch has commits, else remove it and its branch. Never loses work: a
    /// step that fails leaves the worktree as it is and says so in `error`.
    /// Blocking (runs git).
    pub fn settle(&self, message: &str) -> WorktreeReport {
        let mut report = WorktreeReport {
            branch: self.branch.clone(),
            path: self.path.clone(),
            base: self.base.clone(),
            commits: Vec::new(),
            diff_stat: String::new(),
            kept: true,
            pushed_to: None,
            error: None,
        };
        match self.settle_inner(message, &mut report) {
            Ok(()) => {}
            Err(e) => {
                report.kept = true;
                report.error = Some(e.to_string());
            }
        }
        report
    }

    fn settle_inner(
        &self,
        message: &str,
        report: &mut WorktreeReport,
    ) -> Result<(), WorktreeError> {
        let wt = self.git.at(&self.path).as_identity(BROOD_NAME, BROOD_EMAIL);
        commit_all(&wt, message)?;
        report.commits = commits(&wt, &self.base, "HEAD")?;
        if report.commits.is_empty() {
            remove(&self.git, &self.path, &self.branch)?;
            report.kept = false;
        } else {
            report.diff_stat = diff_stat(&wt, &self.base, "HEAD")?;
            if let Some(repository) = &self.push_to {
                let refspec = format!("HEAD:refs/heads/{}", self.branch);
                wt.network()
                    .run(&["push", "--quiet", "--no-verify", "--", repository, &refspec])
                    .map_err(|e| WorktreeError::Push {
                        branch: self.branch.clone(),
                        repository: repository.clone(),
                        path: self.path.clone(),
                        detail: match e {
                            GitError::Failed { stderr, .. } => stderr,
                            other => other.to_string(),
                        },
                    })?;
                report.pushed_to = Some(repository.clone());
                // Its commits are in the repository now: the worker's copy goes.
                remove(&self.git, &self.path, &self.branch)?;
            }
        }
        Ok(())
    }

    /// Remove the worktree and its branch whatever they hold (a spawn that failed
    /// after the worktree was made). Blocking.
    pub fn abandon(&self) -> Result<(), WorktreeError> {
        remove(&self.git, &self.path, &self.branch)
    }
}

/// Stage everything in the worktree and commit it when anything changed.
fn commit_all(wt: &Git, message: &str) -> Result<bool, WorktreeError> {
    wt.run(&["add", "-A", "--", "."])?;
    if wt.succeeds(&["diff", "--cached", "--quiet", "--no-ext-diff"])? {
        return Ok(false);
    }
    wt.run(&[
        "commit",
        "-q",
        "--no-verify",
        "--no-gpg-sign",
        "-m",
        message,
    ])?;
    Ok(true)
}

fn commits(git: &Git, base: &str, tip: &str) -> Result<Vec<Commit>, WorktreeError> {
    let range = format!("{base}..{tip}");
    let out = git.run(&["log", "--reverse", "--format=%H%x09%s", &range, "--"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(id, subject)| Commit {
            id: id.to_string(),
            subject: subject.to_string(),
        })
        .collect())
}

fn diff_stat(git: &Git, base: &str, tip: &str) -> Result<String, WorktreeError> {
    let out = git.run(&[
        "diff",
        "--stat=120",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        base,
        tip,
        "--",
    ])?;
    let lines: Vec<&str> = out.lines().collect();
    if lines.len() <= STAT_LINES {
        return Ok(out.trim_end().to_string());
    }
    // The first lines, then the summary line.
    let mut kept: Vec<&str> = lines.iter().take(STAT_LINES - 1).copied().collect();
    kept.extend(lines.last());
    Ok(kept.join("\n"))
}

/// Remove a worktree directory and its branch (force: the caller decided).
fn remove(git: &Git, path: &Path, branch: &str) -> Result<(), WorktreeError> {
    if path.exists() {
        let text = path.to_string_lossy().into_owned();
        if git
            .run(&["worktree", "remove", "--force", "--force", &text])
            .is_err()
        {
            // Not (or no longer) a registered worktree: remove the directory.
            std::fs::remove_dir_all(path).map_err(|e| WorktreeError::Io {
                what: "removing",
                path: path.to_path_buf(),
                detail: e.to_string(),
            })?;
        }
    }
    git.run(&["worktree", "prune"])?;
    let reference = format!("refs/heads/{branch}");
    if git.succeeds(&["rev-parse", "--verify", "-q", &reference])? {
        git.run(&["branch", "-D", "-q", branch])?;
    }
    Ok(())
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// How [`merge`] went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum MergeOutcome {
    /// The target branch moved forward to the worktree's branch.
    FastForwarded {
        /// The branch that moved (the one checked out).
        branch: String,
        /// Its commit before.
        from: String,
        /// Its commit after.
        to: String,
    },
    /// The histories had diverged without conflicts: a merge commit.
    Merged {
        /// The branch merged into (the one checked out).
        branch: String,
        /// The merge commit.
        commit: String,
    },
    /// The target already holds every commit of the branch.
    AlreadyMerged {
        /// The branch checked out.
        branch: String,
    },
}

/// Merge run `id`'s branch into the branch checked out at `target` (the
/// workspace the run was opened from): a fast-forward when possible, else a
/// merge commit when git finds no conflict; conflicts are
/// [`WorktreeError::Conflicts`] and change nothing. On success the worktree and
/// its branch are removed (their commits are in the target now). Blocking.
///
/// A fleet run's branch, pushed by its worker to `pushed_to` (its
/// [`WorktreeReport::pushed_to`]), is fetched from there first when it is not
/// here (the repository is checked as ledger input,
/// [`super::fleet_repo::check_repository`]).
pub fn merge(
    workspace: &Path,
    target: &Path,
    id: &str,
    pushed_to: Option<&str>,
) -> Result<MergeOutcome, WorktreeError> {
    let git = Git::open(target)?;
    let branch = branch_of(id);
    let reference = format!("refs/heads/{branch}");
    if !git.succeeds(&["rev-parse", "--verify", "-q", &reference])? {
        if let Some(repository) = pushed_to {
            fetch_branch(&git, repository, &reference)?;
        }
    }
    if !git.succeeds(&["rev-parse", "--verify", "-q", &reference])? {
        return Err(WorktreeError::NoBranch {
            run: id.to_string(),
        });
    }
    let head = git
        .run(&["symbolic-ref", "-q", "--short", "HEAD"])
        .map_err(|_| WorktreeError::DetachedHead {
            workspace: target.to_path_buf(),
            run: id.to_string(),
        })?
        .trim()
        .to_string();
    let from = git.run(&["rev-parse", "HEAD"])?.trim().to_string();
    let outcome = if git.succeeds(&["merge-base", "--is-ancestor", &reference, "HEAD"])? {
        MergeOutcome::AlreadyMerged {
            branch: head.clone(),
        }
    } else if git.succeeds(&["merge-base", "--is-ancestor", "HEAD", &reference])? {
        git.run(&["merge", "-q", "--ff-only", "--no-verify", &reference])?;
        let to = git.run(&["rev-parse", "HEAD"])?.trim().to_string();
        MergeOutcome::FastForwarded {
            branch: head.clone(),
            from,
            to,
        }
    } else {
        // 0: merges cleanly; 1: conflicts (their files after the tree id).
        let args = [
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "HEAD",
            reference.as_str(),
        ];
        match git.output(&args)? {
            (Some(0), _) => {}
            (Some(1), out) => {
                return Err(WorktreeError::Conflicts {
                    run: id.to_string(),
                    target: head,
                    files: out
                        .lines()
                        .skip(1)
                        .filter(|l| !l.trim().is_empty())
                        .map(str::to_string)
                        .collect(),
                })
            }
            _ => {
                git.run(&args)?;
            }
        }
        let identity = match git.run(&["config", "--get", "user.email"]) {
            Ok(s) if !s.trim().is_empty() => git.clone(),
            _ => git.clone().as_identity(BROOD_NAME, BROOD_EMAIL),
        };
        let message = format!("Merge {branch} (brood run {id})");
        identity.run(&[
            "merge",
            "-q",
            "--no-ff",
            "--no-verify",
            "--no-edit",
            "-m",
            &message,
            &reference,
        ])?;
        let commit = git.run(&["rev-parse", "HEAD"])?.trim().to_string();
        MergeOutcome::Merged {
            branch: head.clone(),
            commit,
        }
    };
    remove(&git, &dir_of(workspace, id), &branch)?;
    Ok(outcome)
}

/// Fetch `reference` (`refs/heads/brood/<id>`) from `repository` into the same
/// name here: not forced, so an existing branch is never overwritten.
fn fetch_branch(git: &Git, repository: &str, reference: &str) -> Result<(), WorktreeError> {
    let source = super::fleet_repo::check_repository(repository, super::fleet_repo::Dirs::Any)
        .map_err(|e| WorktreeError::Io {
            what: "fetching the branch from",
            path: PathBuf::from(repository),
            detail: e.to_string(),
        })?;
    let refspec = format!("{reference}:{reference}");
    git.network().run(&[
        "fetch",
        "--quiet",
        "--no-tags",
        "--",
        &source.as_git_arg(),
        &refspec,
    ])?;
    Ok(())
}

/// Remove run `id`'s worktree and its branch, whatever they hold. Blocking.
pub fn discard(workspace: &Path, target: &Path, id: &str) -> Result<(), WorktreeError> {
    let git = Git::open(target)?;
    let branch = branch_of(id);
    let reference = format!("refs/heads/{branch}");
    let dir = dir_of(workspace, id);
    if !dir.exists() && !git.succeeds(&["rev-parse", "--verify", "-q", &reference])? {
        return Err(WorktreeError::NoBranch {
            run: id.to_string(),
        });
    }
    remove(&git, &dir, &branch)
}

/// The run ids that have a worktree directory in `workspace` (the caller decides
/// which are orphans: those whose run never settled).
pub fn directories(workspace: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(workspace.join(WORKTREES_DIR)) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    ids.sort();
    ids
}

/// What [`prune`] did with one orphan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// The run.
    pub run_id: String,
    /// The directory removed.
    pub path: PathBuf,
    /// Commits kept on `brood/<run id>` (the orphan's uncommitted changes are
    /// committed first); none: the branch was deleted too.
    pub kept_commits: usize,
}

/// Remove the orphaned worktree of run `id` (its run never settled): what it
/// left uncommitted is committed to its branch first, the directory is removed,
/// and the branch is kept when it holds commits (so nothing is lost), deleted
/// otherwise. Blocking.
pub fn prune(workspace: &Path, target: &Path, id: &str) -> Result<Pruned, WorktreeError> {
    let dir = dir_of(workspace, id);
    let git = Git::open(target)?;
    let branch = branch_of(id);
    let mut kept = 0;
    let registered = dir.join(".git").exists();
    if registered {
        let wt = git.at(&dir).as_identity(BROOD_NAME, BROOD_EMAIL);
        let target_head = git.run(&["rev-parse", "HEAD"])?.trim().to_string();
        let base = wt.run(&["merge-base", "HEAD", &target_head]);
        let _ = commit_all(
            &wt,
            &format!("brood: what run {id} left uncommitted when its session ended (saved by brood agents prune)"),
        );
        if let Ok(base) = base {
            kept = commits(&wt, base.trim(), "HEAD")
                .map(|c| c.len())
                .unwrap_or(0);
        }
    }
    if kept > 0 {
        let text = dir.to_string_lossy().into_owned();
        if git
            .run(&["worktree", "remove", "--force", "--force", &text])
            .is_err()
            && dir.exists()
        {
            std::fs::remove_dir_all(&dir).map_err(|e| WorktreeError::Io {
                what: "removing",
                path: dir.clone(),
                detail: e.to_string(),
            })?;
        }
        git.run(&["worktree", "prune"])?;
    } else {
        remove(&git, &dir, &branch)?;
    }
    Ok(Pruned {
        run_id: id.to_string(),
        path: dir,
        kept_commits: kept,
    })
}
