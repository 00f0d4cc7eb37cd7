//! Where one workspace's ledger keeps its files (`<workspace>/.brood/state/`): the
//! SQLite database, the boots' lock files and the spill directory, and the one check
//! of a spill path read back from the database.

use std::path::{Path, PathBuf};

use super::error::LedgerError;

/// The files of one workspace's ledger, all under `<workspace>/.brood/state/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerPaths {
    pub workspace: PathBuf,
    pub state: PathBuf,
    pub db: PathBuf,
    pub boots: PathBuf,
    pub spill: PathBuf,
}

impl LedgerPaths {
    pub fn new(workspace: &Path) -> Self {
        let workspace = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let state = workspace.join(".brood").join("state");
        LedgerPaths {
            db: state.join("brood.db"),
            boots: state.join("boots"),
            spill: state.join("spill"),
            state,
            workspace,
        }
    }

    /// The lock file a live boot holds.
    pub fn boot_lock(&self, boot_id: &str) -> PathBuf {
        self.boots.join(format!("{boot_id}.lock"))
    }

    /// The spill file of transcript entry `seq` of `run`: (absolute, workspace-relative).
    pub fn spill_file(&self, run: &str, seq: u64) -> (PathBuf, String) {
        let name = format!("{run}-{seq}.txt");
        (self.spill.join(&name), format!(".brood/state/spill/{name}"))
    }

    /// Resolve a spill path read from the database. The database is untrusted input
    /// (a repository can ship a crafted `.brood/state/brood.db`), so only a plain file
    /// name directly under `.brood/state/spill/`, as [`Self::spill_file`] writes it, is
    /// accepted; anything else (absolute, `..`, another directory, a spill directory
    /// that is a symlink) is refused with the reason.
    pub fn resolve_relative(&self, rel: &str) -> Result<PathBuf, String> {
        let name = rel
            .strip_prefix(".brood/state/spill/")
            .ok_or_else(|| format!("spill path {rel:?} is not under .brood/state/spill/"))?;
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
            return Err(format!(
                "spill path {rel:?} is not a plain file name under .brood/state/spill/"
            ));
        }
        match std::fs::symlink_metadata(&self.spill) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "{} is not a directory (a symlink?); spill path {rel:?} refused",
                    self.spill.display()
                ))
            }
            Err(_) => {}
        }
        Ok(self.spill.join(name))
    }

    pub fn create_dirs(&self) -> Result<(), LedgerError> {
        for dir in [&self.state, &self.boots, &self.spill] {
            std::fs::create_dir_all(dir).map_err(|e| LedgerError::io(dir, e))?;
        }
        // The ledger is the machine's state, not the project's: it never shows in
        // `git status` (while `.brood/config.toml` and `.brood/agents/` stay
        // committable). Written once; a user's own file is left alone.
        let ignore = self.state.join(".gitignore");
        if std::fs::symlink_metadata(&ignore).is_err() {
            std::fs::write(
                &ignore,
                "# brood's ledger and transcripts: local state\n*\n",
            )
            .map_err(|e| LedgerError::io(&ignore, e))?;
        }
        Ok(())
    }
}
