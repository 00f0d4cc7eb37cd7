//! The repository a fleet run names (docs/FLEET.md "Repositories"): what a parent
//! enqueues, what a worker accepts, and the worker's clone of it.
//!
//! A parent enqueues `[subagents] fleet_repository` (a URL, a remote's name, or a
//! path) or, by default, the path of its own repository; with a remote it first checks
//! that its `HEAD` commit is there ([`remote_placement`]: `git ls-remote`, then a
//! reachability check against the tips it has) and refuses with
//! [`FleetRepoError::NotPushed`] rather than letting a worker fail later.
//!
//! The repository comes to a worker from the ledger: attacker-influenced input.
//! [`check_repository`] accepts `https://`, `ssh://` (and git's `user@host:path`
//! form), `git://`, and a local directory (a path or `file://`) only under a
//! directory the worker was told to allow; it refuses every other scheme, git's
//! `<transport>::<address>` helpers (`ext::` runs a command, `fd::` reads a
//! descriptor), anything starting with `-` (it would be read as an option, e.g.
//! `--upload-pack=…`), hosts starting with `-`, and control characters. Every git
//! call also runs with `protocol.allow=never` but for those four transports
//! (`super::git`), so a check that let something through still could not name one.
//!
//! A worker keeps one bare clone per repository under `<root>/.repos/`
//! ([`mirror`]), fetched when a run's commit is missing from it, created and
//! fetched under a lock so that runs claimed at once do not clone twice.

use super::git::{Git, GitError};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The check of a configured fleet repository for one commit: the setting, the
/// commit, and the repository it names once the check passed. Children enqueued at
/// once share it, so a fan-out asks the remote once per commit, not once per child; a
/// check that failed is made again by the next child (the user may have pushed).
pub(crate) type Checked = (
    String,
    String,
    std::sync::Arc<tokio::sync::OnceCell<String>>,
);

/// Longest repository text accepted.
const MAX_LEN: usize = 2048;

/// Why a fleet repository is refused or cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FleetRepoError {
    /// The repository text is not one this side accepts (see the module docs).
    #[error("the repository {repo:?} is refused: {why}")]
    Refused {
        /// The repository as given.
        repo: String,
        /// Why.
        why: String,
    },
    /// The parent's commit is not on the remote the workers fetch from.
    #[error(
        "the workspace's HEAD commit {commit} is not on {repo}, where the fleet's workers \
         fetch it from; push it (git push) and try again, or remove [subagents] \
         fleet_repository to enqueue the repository's path (workers on one machine or a \
         shared file system)"
    )]
    NotPushed {
        /// The remote.
        repo: String,
        /// The commit.
        commit: String,
    },
    /// `[subagents] fleet_repository` names a remote the repository does not have.
    #[error(
        "[subagents] fleet_repository = {name:?} is not a remote of {workspace} ({detail}); \
         give a URL (https://…, ssh://…, git://…), a remote's name (git remote -v), or a path"
    )]
    NoSuchRemote {
        /// The name configured.
        name: String,
        /// The workspace's repository.
        workspace: PathBuf,
        /// What git said.
        detail: String,
    },
    /// A git command (clone, fetch, ls-remote) failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A file-system step failed.
    #[error("{what} {}: {detail}", path.display())]
    Io {
        /// The step.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The I/O error.
        detail: String,
    },
}

/// Where a checked repository is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A URL git fetches over https, ssh or git.
    Remote(String),
    /// A local directory (canonical).
    Dir(PathBuf),
}

impl Source {
    /// What git is given to clone, fetch or push.
    pub fn as_git_arg(&self) -> String {
        match self {
            Source::Remote(url) => url.clone(),
            Source::Dir(dir) => dir.to_string_lossy().into_owned(),
        }
    }
}

/// Which local directories a repository may be.
#[derive(Debug, Clone, Copy)]
pub enum Dirs<'a> {
    /// Any (the parent's own configuration).
    Any,
    /// Only these and what is under them (a worker's `--allow-repository-dir`).
    Under(&'a [PathBuf]),
}

/// Check a repository named by the ledger (a worker) or by configuration (a parent):
/// see the module docs for what is accepted.
pub fn check_repository(repo: &str, dirs: Dirs<'_>) -> Result<Source, FleetRepoError> {
    let refuse = |why: String| FleetRepoError::Refused {
        repo: repo.chars().take(200).collect(),
        why,
    };
    if repo.is_empty() || repo.len() > MAX_LEN {
        return Err(refuse(format!("a repository is 1 to {MAX_LEN} characters")));
    }
    if let Some(c) = repo.chars().find(|c| c.is_control()) {
        return Err(refuse(format!("it holds the control character {c:?}")));
    }
    if repo.starts_with('-') {
        return Err(refuse(
            "it starts with '-', which git would read as an option (such as --upload-pack)".into(),
        ));
    }
    // git's `<transport>::<address>`: a remote helper chosen by the text.
    let scheme_len = repo
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || "+.-".contains(c))))
        })
        .map_or(repo.len(), |(i, _)| i);
    if scheme_len > 0 && repo[scheme_len..].starts_with("::") {
        return Err(refuse(format!(
            "'{}::' names a git remote helper (ext:: runs a command, fd:: reads a file \
             descriptor); give https://, ssh://, git:// or a path",
            &repo[..scheme_len]
        )));
    }
    if scheme_len > 0 && repo[scheme_len..].starts_with("://") {
        let scheme = repo[..scheme_len].to_ascii_lowercase();
        let rest = &repo[scheme_len + 3..];
        return match scheme.as_str() {
            "https" | "ssh" | "git" | "git+ssh" | "ssh+git" => {
                let authority = rest.split('/').next().unwrap_or_default();
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                if host.is_empty() || host.starts_with('-') {
                    return Err(refuse(format!(
                        "its host {host:?} is empty or starts with '-' (an ssh option)"
                    )));
                }
                Ok(Source::Remote(repo.to_string()))
            }
            "file" => {
                if rest.contains('%') {
                    return Err(refuse(
                        "a file:// URL with %-escapes is not accepted; give the path".into(),
                    ));
                }
                local_dir(rest, dirs).map_err(refuse)
            }
            other => Err(refuse(format!(
                "the scheme {other}:// is not accepted; give https://, ssh://, git:// or a path"
            ))),
        };
    }
    if repo.starts_with('/') {
        return local_dir(repo, dirs).map_err(refuse);
    }
    // git's scp-like ssh form `[user@]host:path` (a ':' before any '/').
    if let Some((authority, _path)) = repo.split_once(':') {
        if !authority.contains('/') {
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            let ok = |c: char| c.is_ascii_alphanumeric() || "._-[]".contains(c);
            if host.is_empty() || host.starts_with('-') || !host.chars().all(ok) {
                return Err(refuse(format!(
                    "{host:?} is not a host (user@host:path is ssh)"
                )));
            }
            return Ok(Source::Remote(repo.to_string()));
        }
    }
    Err(refuse(
        "a relative path means nothing on another machine; give a URL or an absolute path".into(),
    ))
}

/// An absolute local directory allowed by `dirs`.
fn local_dir(path: &str, dirs: Dirs<'_>) -> Result<Source, String> {
    if !path.starts_with('/') {
        return Err("a local repository is an absolute path".into());
    }
    let real = std::fs::canonicalize(path)
        .map_err(|e| format!("it is not a directory on this machine ({e})"))?;
    if !real.is_dir() {
        return Err("it is not a directory on this machine".into());
    }
    match dirs {
        Dirs::Any => Ok(Source::Dir(real)),
        Dirs::Under(allowed) => {
            let inside = allowed
                .iter()
                .any(|a| std::fs::canonicalize(a).is_ok_and(|a| real.starts_with(a)));
            if inside {
                Ok(Source::Dir(real))
            } else {
                Err(
                    "a local directory this worker was not told to allow; start it with \
                     --allow-repository-dir DIR (for workers on one machine or a shared file \
                     system), or enqueue a URL ([subagents] fleet_repository)"
                        .into(),
                )
            }
        }
    }
}

/// Check `[subagents] fleet_repository` as configured: a remote's name, or a
/// repository [`check_repository`] accepts (any local directory). Its value, trimmed.
pub fn check_configured(value: &str) -> Result<String, String> {
    let value = value.trim();
    if is_remote_name(value) {
        return Ok(value.to_string());
    }
    check_repository(value, Dirs::Any)
        .map(|_| value.to_string())
        .map_err(|e| {
            format!("{e}; give a URL (https://…, ssh://…, git://…), a remote's name (e.g. origin) or an absolute path")
        })
}

/// The repository and commit a parent whose workspace is in `repo_dir` (the top of
/// its git repository) enqueues with `[subagents] fleet_repository = configured`: a
/// remote's name is resolved to its URL, and the commit `head` must be on it.
/// Blocking (runs `git ls-remote`).
pub fn remote_placement(
    git: &Git,
    repo_dir: &Path,
    configured: &str,
    head: &str,
) -> Result<Source, FleetRepoError> {
    let configured = configured.trim();
    let url = if is_remote_name(configured) {
        git.run(&["remote", "get-url", "--", configured])
            .map_err(|e| FleetRepoError::NoSuchRemote {
                name: configured.to_string(),
                workspace: repo_dir.to_path_buf(),
                detail: match e {
                    GitError::Failed { stderr, .. } => stderr,
                    other => other.to_string(),
                },
            })?
            .trim()
            .to_string()
    } else {
        configured.to_string()
    };
    let source = check_repository(&url, Dirs::Any)?;
    let remote = source.as_git_arg();
    let listed = git
        .network()
        .run(&["ls-remote", "--quiet", "--", &remote])?;
    let tips: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split('\t').next())
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    if !reachable_from(git, head, &tips)? {
        return Err(FleetRepoError::NotPushed {
            repo: url,
            commit: head.to_string(),
        });
    }
    Ok(source)
}

/// Whether `name` is a remote's name rather than a URL or a path.
fn is_remote_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// Whether `commit` is an ancestor of (or one of) `tips` — only the tips this
/// repository has count: a tip it never fetched cannot be checked here.
fn reachable_from(git: &Git, commit: &str, tips: &[&str]) -> Result<bool, FleetRepoError> {
    if tips.contains(&commit) {
        return Ok(true);
    }
    if tips.is_empty() {
        return Ok(false);
    }
    let mut query = tips.join("\n");
    query.push('\n');
    let known = git.run_input(
        &["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        &query,
    )?;
    let not: String = known
        .lines()
        .filter_map(|l| l.strip_suffix(" commit"))
        .map(|id| format!("^{id}\n"))
        .collect();
    if not.is_empty() {
        return Ok(false);
    }
    let left = git.run_input(&["rev-list", "-n", "1", commit, "--stdin"], &not)?;
    Ok(left.trim().is_empty())
}

/// The worker's bare clone of `source` under `<root>/.repos/`, holding `rev` (fetched
/// when it is missing). Created and fetched under `<root>/.repos/<name>.lock`.
/// Blocking.
pub fn mirror(root: &Path, source: &Source, rev: Option<&str>) -> Result<Git, FleetRepoError> {
    let repos = root.join(".repos");
    let io = |what: &'static str, path: &Path, e: std::io::Error| FleetRepoError::Io {
        what,
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    std::fs::create_dir_all(&repos).map_err(|e| io("creating", &repos, e))?;
    let arg = source.as_git_arg();
    let name = format!("{:016x}", fnv(&arg));
    let bare = repos.join(format!("{name}.git"));
    let _lock = lock(&repos.join(format!("{name}.lock"))).map_err(|e| io("locking", &repos, e))?;
    if !bare.join("HEAD").exists() {
        if bare.exists() {
            // A clone that did not finish (the worker was killed).
            std::fs::remove_dir_all(&bare).map_err(|e| io("removing", &bare, e))?;
        }
        let target = bare.to_string_lossy().into_owned();
        let cloned = Git::open(&repos)?.network().run(&[
            "clone",
            "--bare",
            "--quiet",
            "--no-tags",
            "--",
            &arg,
            &target,
        ]);
        if let Err(e) = cloned {
            let _ = std::fs::remove_dir_all(&bare);
            return Err(e.into());
        }
    }
    let git = Git::open(&bare)?;
    let has = |rev: &str| {
        git.succeeds(&["cat-file", "-e", &format!("{rev}^{{commit}}")])
            .unwrap_or(false)
    };
    if let Some(rev) = rev {
        if !has(rev) {
            git.network().run(&[
                "fetch",
                "--quiet",
                "--no-tags",
                "--",
                &arg,
                "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*",
            ])?;
        }
    }
    Ok(git)
}

/// An exclusive advisory lock on `path` (not following a symlink), held while the
/// file lives.
fn lock(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    file.lock()?;
    Ok(file)
}

/// FNV-1a: a stable directory name for a repository.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
