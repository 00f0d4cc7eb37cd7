//! Protected paths: what no file tool may read or change, whatever its grant.
//!
//! The rules apply to the canonical path (after the [`Workspace`](super::Workspace)
//! jail resolved `..`, `.` and every symlink), so any spelling of a path —
//! `./.brood/../.brood/state`, `.git/./hooks`, a trailing `/`, a symlink planted in
//! the workspace — meets the same rule. A rule matches at any depth, so a nested
//! repository's `sub/.git/hooks` or a sub-project's `sub/.claude/` is covered too.
//!
//! - **Not readable**: `.brood/state/` — brood's ledger, transcripts and spill files.
//!   A child reads another run's output only through `agent_eval`/`handle_read`.
//! - **Not writable**: `.brood/` (config, agent definitions, memory, state) except the
//!   workspace's `.brood/plans/`; `.claude/` (agent definitions, hooks, settings);
//!   and every `.git/` directory (hooks, config, and the rest of the repository's
//!   internals). Each is a way to run code or redirect a key at the next start.
//!   Memory is appended only through `remember`.
//!
//! A workspace may make its own `.brood`, `.claude` or `.git` a symlink to another
//! directory inside it, or `.git` a file (`gitdir: repo.git`): the canonical path
//! then does not name the protected directory. [`alias`] maps such a path back to
//! the name it stands for, so the same rules apply.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Brood's directory in a workspace.
const BROOD: &str = ".brood";
/// Brood's state directory inside [`BROOD`].
const STATE: &str = "state";
/// Plan files inside [`BROOD`], the one writable part of it.
const PLANS: &str = "plans";
/// Claude Code's directory (agent definitions, settings with hooks).
const CLAUDE: &str = ".claude";
/// A git repository's internals.
const GIT: &str = ".git";

/// The names of `rel`'s components (a workspace-relative canonical path).
fn names(rel: &Path) -> Vec<&OsStr> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// Whether `dir` is brood's state directory's name pair (`.brood`, `state`).
fn is_state_pair(pair: &[&OsStr]) -> bool {
    matches!(pair, [a, b] if *a == BROOD && *b == STATE)
}

/// Why tools may not read `rel` (workspace-relative, canonical), if they may not.
pub(crate) fn read_refusal(rel: &Path) -> Option<&'static str> {
    let names = names(rel);
    names.windows(2).any(is_state_pair).then_some(
        "is brood's own state (ledger, transcripts, spill files), which tools cannot \
         read; a child's result is read with agent_eval or handle_read",
    )
}

/// Why tools may not create or change `rel` (workspace-relative, canonical), if
/// they may not. Reading rules apply as well.
pub(crate) fn write_refusal(rel: &Path) -> Option<&'static str> {
    if let Some(why) = read_refusal(rel) {
        return Some(why);
    }
    let names = names(rel);
    for (i, name) in names.iter().enumerate() {
        if *name == GIT {
            return Some(
                "is inside a .git directory (hooks and config run code); change the \
                 repository with git commands instead",
            );
        }
        if *name == CLAUDE {
            return Some(
                "is inside .claude/ (agent definitions and hooks that run at the next \
                 start); ask the user to change it",
            );
        }
        if *name == BROOD {
            let plan_file = i == 0 && names.len() > 2 && names.get(1).is_some_and(|n| *n == PLANS);
            if !plan_file {
                return Some(
                    "is inside .brood/ (brood's config, agents, memory and state); only \
                     plan files under .brood/plans/ may be written, and notes are saved with \
                     remember",
                );
            }
        }
    }
    None
}

/// The workspace memory file, the one protected file `remember` appends to.
const MEMORY_FILE: &str = ".brood/memory.md";

/// Why `remember` may not append to `rel` (workspace-relative, canonical): the
/// write rules, except for the workspace memory file itself — so a memory file
/// symlinked to a hook or a config is refused.
pub(crate) fn append_refusal(rel: &Path) -> Option<&'static str> {
    if rel == Path::new(MEMORY_FILE) {
        return None;
    }
    write_refusal(rel)
}

/// Where the workspace's protected directories really are, when that is not their
/// own name: `(name, canonical directory)` for a symlinked `.brood`, `.claude` or
/// `.git` leading inside `root` (canonical), and for the directory a `.git` file
/// names. Looked up afresh at every call, so a link made or swapped during a run
/// is seen at once.
fn redirected(root: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    for name in [BROOD, CLAUDE, GIT] {
        let own = root.join(name);
        // Under a canonical root only a symlink can lead elsewhere: one `lstat` for
        // the usual real directory (or none), where resolving the whole path cost a
        // `readlink` per component of the root, for each of the three names, at
        // every path a tool or an evidence check resolves.
        if !std::fs::symlink_metadata(&own).is_ok_and(|m| m.file_type().is_symlink()) {
            continue;
        }
        match std::fs::canonicalize(&own) {
            Ok(real) if real != own && real.starts_with(root) && real != root => {
                out.push((name, real))
            }
            _ => {}
        }
    }
    if let Some(real) = gitdir_of_file(&root.join(GIT)) {
        if real.starts_with(root) && real != root {
            out.push((GIT, real));
        }
    }
    out
}

/// The directory a `.git` file (`gitdir: <path>`) names, canonical.
fn gitdir_of_file(dot_git: &Path) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(dot_git).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(dot_git)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    std::fs::canonicalize(dot_git.parent()?.join(target)).ok()
}

/// `resolved` (canonical, inside `root`) rewritten as the workspace-relative path
/// it stands for when it lies in a redirected protected directory (see the module
/// doc); `None` when it does not.
pub(crate) fn alias(root: &Path, resolved: &Path) -> Option<PathBuf> {
    redirected(root).into_iter().find_map(|(name, real)| {
        resolved
            .strip_prefix(&real)
            .ok()
            .map(|rest| Path::new(name).join(rest))
    })
}

/// The canonical directories holding brood's state that a walk must not enter
/// beyond `.brood/state` by name: the state of a redirected `.brood`.
pub(crate) fn hidden_state_dirs(root: &Path) -> Vec<PathBuf> {
    redirected(root)
        .into_iter()
        .filter(|(name, _)| *name == BROOD)
        .map(|(_, real)| real.join(STATE))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_unreadable_at_any_depth() {
        for p in [
            ".brood/state",
            ".brood/state/brood.db",
            "sub/.brood/state/x",
        ] {
            assert!(read_refusal(Path::new(p)).is_some(), "{p}");
        }
        for p in [".brood", ".brood/memory.md", "state/.brood", "src/state"] {
            assert!(read_refusal(Path::new(p)).is_none(), "{p}");
        }
    }

    #[test]
    fn writes_are_refused_in_protected_dirs_but_plans() {
        for p in [
            ".brood",
            ".brood/config.toml",
            ".brood/plans",
            ".brood/agents/x.md",
            ".claude/settings.json",
            "a/.claude/agents/x.md",
            ".git/hooks/pre-commit",
            ".git/config",
            "sub/.git/hooks/post-checkout",
            "sub/.brood/plans/p.md",
        ] {
            assert!(write_refusal(Path::new(p)).is_some(), "{p}");
        }
        for p in [
            ".brood/plans/p.md",
            ".brood/plans/a/b.md",
            "src/git.rs",
            ".github/x",
        ] {
            assert!(write_refusal(Path::new(p)).is_none(), "{p}");
        }
    }
}
