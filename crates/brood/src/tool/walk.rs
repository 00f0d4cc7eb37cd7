//! The workspace walk behind `find_files` and `grep`: `.gitignore`/`.ignore` are
//! respected (the `ignore` crate, as ripgrep), hidden files are included, symlinks
//! are not followed, and neither `.git` nor brood's state (`.brood/state`) is
//! entered.
//!
//! The `ignore` crate reads each ignore file whole, line by line, with no cap, and
//! follows a symlinked one: a sparse 6 GB `.gitignore`, or one linked to
//! `/dev/zero` or a FIFO, would exhaust memory or block the walk. So a directory
//! whose ignore file is not a regular file of at most [`IGNORE_FILE_MAX_BYTES`] is
//! not entered (and counted), and a search below such a directory is refused.

use super::{clip, ToolError, Workspace};
use ignore::WalkBuilder;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Largest ignore file the walk lets the `ignore` crate read.
pub(crate) const IGNORE_FILE_MAX_BYTES: u64 = 1 << 20;

/// The ignore files the walk reads in a directory.
const IGNORE_FILES: [&str; 3] = [".gitignore", ".ignore", ".git/info/exclude"];

/// How many directories a walk did not enter because of their ignore files (read
/// it after the walk).
pub(crate) struct DirSkips(Arc<AtomicUsize>);

impl DirSkips {
    /// A note on skipped directories, or nothing.
    pub(crate) fn note(&self) -> Option<String> {
        let n = self.0.load(Ordering::Relaxed);
        (n > 0).then(|| {
            format!(
                "{n} director(ies) not entered: an ignore file there is not a regular file of at \
                 most {} MiB",
                IGNORE_FILE_MAX_BYTES >> 20
            )
        })
    }
}

/// A walk of `dir` (a file or directory) in `ws`.
pub(crate) fn walk(ws: &Workspace, dir: &Path) -> (ignore::Walk, DirSkips) {
    let hidden = ws.hidden_dirs();
    let skipped_dirs = Arc::new(AtomicUsize::new(0));
    let counter = skipped_dirs.clone();
    let walk = WalkBuilder::new(dir)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            if e.file_name() == ".git"
                || is_brood_state(e.path())
                || hidden.iter().any(|h| e.path() == h)
            {
                return false;
            }
            if e.file_type().is_some_and(|t| t.is_dir()) && bad_ignore_file(e.path()).is_some() {
                counter.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            true
        })
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    (walk, DirSkips(skipped_dirs))
}

/// Refuse to walk `dir` when it, or a directory above it inside the workspace,
/// holds an ignore file the walk must not read.
pub(crate) fn check_ancestors(ws: &Workspace, dir: &Path) -> Result<(), ToolError> {
    for d in dir.ancestors().take_while(|d| d.starts_with(ws.root())) {
        if let Some(bad) = bad_ignore_file(d) {
            return Err(ToolError::Io {
                path: clip(&ws.display(&bad)),
                detail: format!(
                    "is not a regular file of at most {} MiB; find_files and grep read ignore \
                     files whole, so they do not search below it - fix or remove it",
                    IGNORE_FILE_MAX_BYTES >> 20
                ),
            });
        }
    }
    Ok(())
}

/// The first ignore file in `dir` that is not a regular file of at most
/// [`IGNORE_FILE_MAX_BYTES`] (following symlinks, as the `ignore` crate does).
fn bad_ignore_file(dir: &Path) -> Option<PathBuf> {
    IGNORE_FILES
        .iter()
        .map(|n| dir.join(n))
        .find(|p| match std::fs::metadata(p) {
            Ok(m) => !m.is_file() || m.len() > IGNORE_FILE_MAX_BYTES,
            Err(e) => {
                e.kind() != std::io::ErrorKind::NotFound && e.raw_os_error() != Some(libc::ENOTDIR)
            }
        })
}

/// Whether `path` is a `.brood/state` directory (at any depth, as the read rule).
fn is_brood_state(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "state")
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == ".brood")
}
