//! The workspace jail: every path a tool touches resolves inside the root.

use super::ToolError;
use std::path::{Path, PathBuf};

/// A workspace root. All tool paths resolve inside it.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Open `root` (canonicalized; it must exist and be a directory).
    pub fn open(root: impl AsRef<Path>) -> std::io::Result<Self> {
        let root = std::fs::canonicalize(root.as_ref())?;
        Ok(Workspace { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolve `path` (relative to the root, or absolute inside it) to a path inside
    /// the root. TODO(tool helper): canonicalize, follow symlinks, re-check.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        Ok(self.root.join(path))
    }
}
