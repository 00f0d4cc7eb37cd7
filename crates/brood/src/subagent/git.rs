//! Running `git` on a workspace that is attacker input.
//!
//! brood drives the user's own `git` command (not a library): it is what users
//! have and trust, it knows every repository format they use (reftable, SHA-256,
//! partial clones, sparse checkouts), `git worktree` is complete there (the
//! `gix`/`git2` crates cover it partly), and the core crate gains no dependency.
//!
//! A repository's `.git/config`, hooks and attributes are written by whoever wrote
//! the repository, so every call runs with what can execute switched off:
//! hooks (`core.hooksPath=/dev/null`, and `--no-verify` where a command takes it),
//! the file-system monitor (`core.fsmonitor=false`), signing programs
//! (`commit.gpgSign=false`), pagers, editors and prompts, automatic gc, and
//! attributes — `.gitattributes` is read from the empty tree (`attr.tree`),
//! `core.attributesFile` is `/dev/null`, and every filter, diff and merge driver the
//! configuration names (where `$GIT_DIR/info/attributes` could still select it) is
//! neutralised: filters and diff commands emptied, merge drivers set to `false`
//! (a file such a driver would merge is reported as a conflict instead).
//! The user's environment is trusted; only git variables that would point the
//! call at another repository are cleared.

use std::path::{Path, PathBuf};
use std::process::Command;
use thiserror::Error;

/// The empty tree's id (SHA-1): attributes are read from it, so there are none.
const EMPTY_TREE_SHA1: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
/// The empty tree's id in a SHA-256 repository.
const EMPTY_TREE_SHA256: &str = "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321";

/// Settings that keep a repository's own configuration from running anything.
const HARDENED: [&str; 17] = [
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.attributesFile=/dev/null",
    "core.pager=cat",
    "core.editor=false",
    "core.askPass=",
    "core.sshCommand=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "credential.helper=",
    // A repository URL read from a shared ledger (a fleet worker's clone, fetch
    // and push) may name only these transports: never `ext::` (runs a command),
    // `fd::` or another remote helper (`subagent::fleet_repo`).
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "protocol.file.allow=always",
];

/// Settings over [`HARDENED`] for a call that reaches a remote ([`Git::network`]):
/// ssh is the `ssh` on the `PATH` (or the user's `GIT_SSH_COMMAND` / `GIT_SSH`,
/// which git prefers to configuration), never a command a repository configures,
/// and in batch mode: it never asks (a password, an unknown host key) on the
/// terminal of a worker nobody watches — it fails, and the run's error says why.
const NETWORK: [&str; 1] = ["core.sshCommand=ssh -o BatchMode=yes"];

/// Environment variables that would send a call to another repository or index.
const CLEARED_ENV: [&str; 10] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
];

/// A git command that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GitError {
    /// `git` could not be started.
    #[error("cannot run git ({detail}); install git, or set isolation = \"none\"")]
    Missing {
        /// Why it could not start.
        detail: String,
    },
    /// `git` ran and refused.
    #[error("git {args} (in {dir}) failed: {stderr}")]
    Failed {
        /// The arguments, as one line.
        args: String,
        /// The directory it ran in.
        dir: PathBuf,
        /// What git wrote to stderr.
        stderr: String,
    },
}

/// `git` in one directory, hardened (see the module docs).
#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
    /// `-c` settings for this repository: [`HARDENED`], the attribute tree and
    /// the neutralised drivers.
    settings: Vec<String>,
    /// Extra environment (commit identity).
    env: Vec<(String, String)>,
}

impl Git {
    /// Git for the repository containing `dir`. Reads the repository's
    /// configuration (hardened) to find the drivers to neutralise.
    pub fn open(dir: &Path) -> Result<Git, GitError> {
        let mut git = Git {
            dir: dir.to_path_buf(),
            settings: HARDENED.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
        };
        // Before the attribute tree is known, attributes are off in the first
        // calls by reading nothing that applies them (rev-parse, config).
        let format = git
            .run(&["rev-parse", "--show-object-format"])
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "sha1".into());
        let empty = if format == "sha256" {
            EMPTY_TREE_SHA256
        } else {
            EMPTY_TREE_SHA1
        };
        git.settings.push(format!("attr.tree={empty}"));
        let listed = git
            .run(&[
                "config",
                "--null",
                "--name-only",
                "--get-regexp",
                r"^(filter|diff|merge)\..*\.",
            ])
            .unwrap_or_default();
        for name in listed.split('\0').filter(|n| !n.is_empty()) {
            git.settings.extend(neutralise(name));
        }
        Ok(git)
    }

    /// The same hardening for another directory of the same repository (a
    /// worktree of it).
    pub fn at(&self, dir: &Path) -> Git {
        Git {
            dir: dir.to_path_buf(),
            ..self.clone()
        }
    }

    /// This git with `name <email>` as author and committer.
    pub fn as_identity(mut self, name: &str, email: &str) -> Git {
        for who in ["AUTHOR", "COMMITTER"] {
            self.env.push((format!("GIT_{who}_NAME"), name.to_string()));
            self.env
                .push((format!("GIT_{who}_EMAIL"), email.to_string()));
        }
        self
    }

    /// This git for a call that reaches a remote (clone, fetch, push, ls-remote): as
    /// hardened, with ssh allowed as the user runs it, never prompting
    /// (`core.sshCommand=ssh -o BatchMode=yes`); the
    /// transports stay restricted to https, ssh, git and local files.
    pub fn network(&self) -> Git {
        let mut git = self.clone();
        git.settings.extend(NETWORK.iter().map(|s| s.to_string()));
        git
    }

    /// Run `git ARGS` with `input` on its stdin; its stdout, as [`Git::run`].
    pub fn run_input(&self, args: &[&str], input: &str) -> Result<String, GitError> {
        use std::io::Write;
        let missing = |e: std::io::Error| GitError::Missing {
            detail: e.to_string(),
        };
        let mut child = self
            .command(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(missing)?;
        if let Some(mut stdin) = child.stdin.take() {
            // A git that exits early closes its end: its exit status says why.
            let _ = stdin.write_all(input.as_bytes());
        }
        let out = child.wait_with_output().map_err(missing)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(GitError::Failed {
                args: args.join(" "),
                dir: self.dir.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }

    /// The directory calls run in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Run `git ARGS` and return its stdout; a non-zero exit is [`GitError::Failed`]
    /// with git's own message.
    pub fn run(&self, args: &[&str]) -> Result<String, GitError> {
        let out = self.exec(args)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if stderr.is_empty() {
                stderr = String::from_utf8_lossy(&out.stdout).trim().to_string();
            }
            Err(GitError::Failed {
                args: args.join(" "),
                dir: self.dir.clone(),
                stderr,
            })
        }
    }

    /// Run `git ARGS`: its exit code (`None`: killed by a signal) and stdout.
    pub fn output(&self, args: &[&str]) -> Result<(Option<i32>, String), GitError> {
        let out = self.exec(args)?;
        Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }

    /// Whether `git ARGS` exits 0 (its output is dropped).
    pub fn succeeds(&self, args: &[&str]) -> Result<bool, GitError> {
        let out = self.exec(args)?;
        Ok(out.status.success())
    }

    /// Run `git ARGS` to its end. `git worktree …` runs under the repository's
    /// worktree lock ([`Git::worktree_lock`]).
    fn exec(&self, args: &[&str]) -> Result<std::process::Output, GitError> {
        let _lock = match args.first() {
            Some(&"worktree") => Some(self.worktree_lock()?),
            _ => None,
        };
        self.command(args).output().map_err(|e| GitError::Missing {
            detail: e.to_string(),
        })
    }

    /// `git worktree` calls on one repository are serialized, across processes too
    /// (fleet workers on one machine, children of several sessions): while it adds
    /// a worktree git reads every other worktree's administrative files, and fails
    /// on one another call is still creating ("failed to read
    /// .git/worktrees/<id>/commondir"). An exclusive advisory lock on
    /// `<git common dir>/brood-worktree.lock` (opened without following a symlink:
    /// the repository is attacker input), released when the returned file drops.
    fn worktree_lock(&self) -> Result<std::fs::File, GitError> {
        use std::os::unix::fs::OpenOptionsExt;
        let failed = |detail: String| GitError::Failed {
            args: "worktree (taking brood-worktree.lock)".into(),
            dir: self.dir.clone(),
            stderr: detail,
        };
        let out = self
            .command(&["rev-parse", "--git-common-dir"])
            .output()
            .map_err(|e| GitError::Missing {
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(failed(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        let common = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let path = self.dir.join(common).join("brood-worktree.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| failed(format!("{}: {e}", path.display())))?;
        file.lock()
            .map_err(|e| failed(format!("{}: {e}", path.display())))?;
        Ok(file)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        cmd.current_dir(&self.dir).arg("--no-pager");
        for s in &self.settings {
            cmd.arg("-c").arg(s);
        }
        cmd.args(args);
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PAGER", "cat")
            .env("GIT_EDITOR", "false")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("LC_ALL", "C")
            .env_remove("GIT_ASKPASS")
            .env_remove("SSH_ASKPASS");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(std::process::Stdio::null());
        cmd
    }
}

/// The `-c` settings that disarm one configured driver key
/// (`filter.<name>.clean`, `diff.<name>.textconv`, `merge.<name>.driver`, …).
fn neutralise(key: &str) -> Vec<String> {
    let Some((section, rest)) = key.split_once('.') else {
        return Vec::new();
    };
    let Some((name, _field)) = rest.rsplit_once('.') else {
        return Vec::new();
    };
    let set = |field: &str, value: &str| format!("{section}.{name}.{field}={value}");
    match section {
        "filter" => vec![
            set("clean", ""),
            set("smudge", ""),
            set("process", ""),
            set("required", "false"),
        ],
        "diff" => vec![set("command", ""), set("textconv", "")],
        "merge" => vec![set("driver", "false")],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configured_driver_is_disarmed() {
        assert_eq!(
            neutralise("filter.evil.smudge"),
            [
                "filter.evil.clean=",
                "filter.evil.smudge=",
                "filter.evil.process=",
                "filter.evil.required=false"
            ]
        );
        assert_eq!(
            neutralise("merge.a.b.driver"),
            ["merge.a.b.driver=false"],
            "a driver name may hold dots"
        );
        assert!(neutralise("core.fsmonitor").is_empty());
    }
}
