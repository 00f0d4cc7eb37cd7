//! `brood agents merge | close --discard | prune`: what happens to the git
//! worktrees of isolated runs (`isolation = "worktree"`) once they have ended.
//! Each action is recorded as a `worktree` event on the run.

use std::fmt::Write as _;
use std::path::Path;

use brood::ledger::{EventKind, LedgerError, RunId, RunStatus};
use brood::subagent::worktree::{self, MergeOutcome};
use brood::subagent::worktrees;
use serde_json::json;

/// `brood agents merge ID`: fast-forward (or, without conflicts, merge) the
/// run's branch into the branch checked out where it was opened.
pub fn merge(ws: &Path, id: &str, json_out: bool, out: &mut String) -> Result<(), String> {
    let (run, target, pushed_to) = settled_run(ws, id, "merge")?;
    let outcome = worktree::merge(ws, &target, run.as_str(), pushed_to.as_deref())
        .map_err(|e| e.to_string())?;
    record(ws, &run, json!({ "merged": &outcome }), out);
    if json_out {
        let v = json!({ "run_id": run.as_str(), "merge": outcome });
        let _ = writeln!(out, "{v}");
        return Ok(());
    }
    let _ = match &outcome {
        MergeOutcome::FastForwarded { branch, from, to } => writeln!(
            out,
            "fast-forwarded {branch} {}..{} with brood/{run}; its worktree and branch are removed",
            short(from),
            short(to)
        ),
        MergeOutcome::Merged { branch, commit } => writeln!(
            out,
            "merged brood/{run} into {branch} (merge commit {}); its worktree and branch are removed",
            short(commit)
        ),
        MergeOutcome::AlreadyMerged { branch } => writeln!(
            out,
            "{branch} already holds every commit of brood/{run}; its worktree and branch are removed"
        ),
    };
    Ok(())
}

/// `brood agents close ID --discard`: delete the run's worktree and branch.
pub fn close(ws: &Path, id: &str, discard: bool, out: &mut String) -> Result<(), String> {
    if !discard {
        return Err(format!(
            "close keeps nothing it could lose without being told: pass --discard to delete \
             the worktree and branch of {id}, or merge them with brood agents merge {id}"
        ));
    }
    let (run, target, _) = settled_run(ws, id, "discard")?;
    worktree::discard(ws, &target, run.as_str()).map_err(|e| e.to_string())?;
    record(
        ws,
        &run,
        json!({ "discarded": { "branch": worktree::branch_of(run.as_str()) } }),
        out,
    );
    let _ = writeln!(out, "discarded the worktree and branch brood/{run}");
    Ok(())
}

/// The orphaned worktrees (runs that never settled theirs) are removed; what
/// they held is committed to their branch first, and a branch with commits is
/// kept. Prints one line each; nothing when there are none.
pub fn prune_orphans(ws: &Path, out: &mut String) -> Result<(), String> {
    if worktree::directories(ws).is_empty() {
        return Ok(());
    }
    let listed = match crate::ledger_at::reader(ws) {
        Ok(reader) => worktrees::list(ws, &reader).map_err(|e| e.to_string())?,
        Err(LedgerError::Missing { .. }) => Vec::new(),
        Err(e) => return Err(e.to_string()),
    };
    for l in listed.iter().filter(|l| l.orphan) {
        let pruned = worktree::prune(ws, &l.target, &l.run_id).map_err(|e| e.to_string())?;
        let run = RunId::from_string(&l.run_id);
        record(ws, &run, json!({ "pruned": &pruned }), out);
        let _ = if pruned.kept_commits > 0 {
            writeln!(
                out,
                "removed orphaned worktree {} of run {}; branch {} kept with {} commit(s)",
                pruned.path.display(),
                l.run_id,
                l.branch,
                pruned.kept_commits
            )
        } else {
            writeln!(
                out,
                "removed orphaned worktree {} of run {} (no changes; branch {} deleted)",
                pruned.path.display(),
                l.run_id,
                l.branch
            )
        };
    }
    Ok(())
}

/// The run `id` names (a unique prefix), where its branch merges into, and the
/// repository a fleet worker pushed it to; a run still going is refused (its
/// child may still write).
fn settled_run(
    ws: &Path,
    id: &str,
    what: &str,
) -> Result<(RunId, std::path::PathBuf, Option<String>), String> {
    let reader = crate::ledger_at::reader(ws).map_err(|e| e.to_string())?;
    let run = reader.resolve_id(id).map_err(|e| e.to_string())?;
    let record = reader.run(&run).map_err(|e| e.to_string())?;
    if !record.status.is_terminal() {
        return Err(format!(
            "run {run} is still {}; wait for it to end (or cancel it with brood agents cancel {run}) \
             before you {what} its worktree",
            status_word(record.status)
        ));
    }
    let events = reader.events(&run).map_err(|e| e.to_string())?;
    Ok((
        run.clone(),
        worktrees::target_of(&events, ws),
        worktrees::pushed_to_of(&events),
    ))
}

fn status_word(s: RunStatus) -> &'static str {
    s.as_str()
}

/// Record what was done on the run; a ledger that refuses is reported (a
/// `warning:` line in `out`), the git change stands.
fn record(ws: &Path, run: &RunId, payload: serde_json::Value, out: &mut String) {
    let done = crate::ledger_at::maintenance(ws)
        .and_then(|mut m| m.append_event(run, EventKind::Worktree, &payload));
    if let Err(e) = done {
        let _ = writeln!(out, "warning: the ledger did not record it: {e}");
    }
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
