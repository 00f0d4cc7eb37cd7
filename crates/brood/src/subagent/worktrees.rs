//! The worktrees of a workspace as the ledger knows them: which run each belongs
//! to, where its branch merges into, and which are orphans — a worktree whose
//! run ended without settling it (its session was killed), or whose run the
//! ledger does not know. A session lists orphans in the ledger when it starts
//! ([`record_orphans`]); `brood agents prune` removes them
//! ([`super::worktree::prune`]).

use super::worktree::{self, branch_of, dir_of};
use crate::ledger::{EventKind, EventRecord, Ledger, LedgerError, LedgerReader, RunId};
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};

/// One worktree directory and what the ledger says of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    /// The run it belongs to.
    pub run_id: String,
    /// Its directory.
    pub path: PathBuf,
    /// `brood/<run id>`.
    pub branch: String,
    /// Where its branch merges into (the workspace its run was opened from).
    pub target: PathBuf,
    /// Whether it is an orphan (see the module docs).
    pub orphan: bool,
    /// Whether an `orphaned` event is already recorded for it.
    pub recorded: bool,
}

/// The word a `worktree` event's payload is keyed by (`created`, `settled`, …).
fn word(e: &EventRecord) -> Option<&str> {
    (e.kind == EventKind::Worktree)
        .then(|| e.payload.as_object())
        .flatten()
        .and_then(|o| o.keys().next())
        .map(String::as_str)
}

/// Where run `id`'s branch merges into: the `target` its `created` event names,
/// else `workspace`.
pub fn target_of(events: &[EventRecord], workspace: &Path) -> PathBuf {
    events
        .iter()
        .filter(|e| word(e) == Some("created"))
        .find_map(|e| {
            e.payload
                .get("created")
                .and_then(|c| c.get("target"))
                .and_then(|t| t.as_str())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| workspace.to_path_buf())
}

/// Where a fleet worker pushed run `id`'s branch: the `pushed_to` of its `settled`
/// event (docs/FLEET.md "A fleet child's changes").
pub fn pushed_to_of(events: &[EventRecord]) -> Option<String> {
    events
        .iter()
        .filter(|e| word(e) == Some("settled"))
        .find_map(|e| {
            e.payload
                .get("settled")
                .and_then(|c| c.get("pushed_to"))
                .and_then(|t| t.as_str())
                .map(str::to_string)
        })
}

/// Every worktree directory of `workspace` with its run's state. A run's
/// liveness is read as `brood agents list` reads it (a killed session's runs are
/// not live).
pub fn list(workspace: &Path, reader: &LedgerReader) -> Result<Vec<Listed>, LedgerError> {
    let mut out = Vec::new();
    for id in worktree::directories(workspace) {
        let run = RunId::from_string(&id);
        let (orphan, recorded, target) = match reader.run(&run) {
            Ok(record) => {
                let events = reader.events(&run)?;
                let settled = events.iter().any(|e| word(e) == Some("settled"));
                let recorded = events.iter().any(|e| word(e) == Some("orphaned"));
                let target = target_of(&events, workspace);
                (record.status.is_terminal() && !settled, recorded, target)
            }
            Err(LedgerError::UnknownRun { .. }) => (true, false, workspace.to_path_buf()),
            Err(e) => return Err(e),
        };
        out.push(Listed {
            path: dir_of(workspace, &id),
            branch: branch_of(&id),
            run_id: id,
            target,
            orphan,
            recorded,
        });
    }
    Ok(out)
}

/// List the orphans of `ledger`'s workspace in the ledger (a `worktree` event
/// `{"orphaned": …}` on each run it knows, once) and return a line for each, for
/// the session to show. Blocking.
pub fn record_orphans(ledger: &Ledger) -> Vec<String> {
    let workspace = ledger.workspace().to_path_buf();
    if worktree::directories(&workspace).is_empty() {
        return Vec::new();
    }
    let Ok(reader) = ledger.reader() else {
        return Vec::new();
    };
    let Ok(listed) = list(&workspace, &reader) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for l in listed.iter().filter(|l| l.orphan) {
        if !l.recorded && reader.run(&RunId::from_string(&l.run_id)).is_ok() {
            let _ = ledger.append_event(
                &RunId::from_string(&l.run_id),
                EventKind::Worktree,
                json!({ "orphaned": {
                    "path": l.path,
                    "branch": l.branch,
                    "reason": "the run ended without settling its worktree (its session was killed)",
                }}),
            );
        }
        lines.push(format!(
            "worktree {} (branch {}) was left by run {} that never settled it; \
             `brood agents prune` removes it (saving its changes on the branch)",
            l.path.display(),
            l.branch,
            l.run_id
        ));
    }
    lines
}
