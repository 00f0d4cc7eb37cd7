//! What a settled run hands back — status, reason, the structured output
//! contract, usage, and the handle to read its whole transcript — built in one
//! place (`ChildResult::settled`) with one definition of how each ending reads,
//! and rendered in one place for a parent's context ([`render_result`]).

use super::contract::{self, ParsedResult};
use super::tally::Tally;
use super::worktree::WorktreeReport;
use crate::agent::{AgentOutcome, Ending};
use crate::ledger::RunStatus;
use crate::model::Usage;
use serde::{Deserialize, Serialize};

/// The settled result of one run (a child, the session's top-level run, or an
/// outside host's root run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildResult {
    /// The run's id.
    pub agent_id: String,
    /// Its name (unique among live runs).
    pub name: String,
    /// Its agent type (`explore`, a definition's name, `parent` for a root).
    pub role: String,
    /// Its terminal status.
    pub status: RunStatus,
    /// Why it ended that way (max_turns, budget, heartbeat, cancelled by parent, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The child's final answer, as written.
    pub final_text: String,
    /// SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS parsed from the final answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ParsedResult>,
    /// Model steps it took.
    pub turns: u32,
    /// Tool calls it made.
    pub tool_calls: u32,
    /// What the model reported for its steps, summed.
    pub usage: Usage,
    /// What its own steps cost in USD (priced as each was recorded); `None` when
    /// its model has no price or an answer reported no usage.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// What the model answered to it and all its descendants: tokens, requests and
    /// cost (what delegating this run cost in all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_usage: Option<Tally>,
    /// Why it failed, when its status is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Read the whole transcript with `handle_read` / `brood agents transcript`.
    pub transcript_handle: String,
    /// Provider/model the run ran on.
    pub model: String,
    /// What was accepted but changed at spawn (limits lowered, the route, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Its git worktree, when it ran isolated: the branch, its commits, the diff
    /// stat, and whether it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeReport>,
}

/// Who a settled run is, as its result names it.
pub(crate) struct Who {
    pub agent_id: String,
    pub name: String,
    pub role: String,
    /// `provider/model`.
    pub model: String,
    pub warnings: Vec<String>,
    /// Its own steps' cost so far (see [`ChildResult::cost_usd`]).
    pub cost_usd: Option<f64>,
    /// Its subtree's figures so far (see [`ChildResult::tree_usage`]).
    pub tree_usage: Option<Tally>,
}

/// How a run ended, from outside its loop or from it.
pub(crate) enum Settled<'a> {
    /// Its loop ran (`max_turns` is the limit it had).
    Ran {
        outcome: &'a AgentOutcome,
        max_turns: u32,
    },
    /// It was cancelled before its loop ran (or, for an outside host, while it
    /// had none): `reason`, else why it was cancelled, else the default wording.
    Cancelled { reason: Option<String> },
    /// An outside host's run ended normally (it has no loop of its own).
    Closed,
    /// The run's task panicked.
    Crashed { detail: String },
}

/// The reason a cancelled run gives when nobody said why.
const CANCELLED: &str = "cancelled (the turn it belonged to or the session ended)";

impl ChildResult {
    /// The one place a run's result is made: its status and reason follow from
    /// how it ended. An ending with an answer (see [`Ending::answered`]) is
    /// `completed`; a budget that stopped the run before its first request means it
    /// never started (`cancelled`); a failed model step is `failed`.
    /// `cancel_reason` is why it was cancelled, if someone said.
    pub(crate) fn settled(
        who: Who,
        how: Settled<'_>,
        cancel_reason: Option<String>,
    ) -> ChildResult {
        let cancelled = |reason: Option<String>| {
            reason
                .or(cancel_reason.clone())
                .unwrap_or_else(|| CANCELLED.into())
        };
        let (status, reason, outcome) = match how {
            Settled::Ran { outcome, max_turns } => {
                let (status, reason) = match &outcome.ending {
                    Ending::Completed => (RunStatus::Completed, None),
                    Ending::MaxTurns => (
                        RunStatus::Completed,
                        Some(format!("max_turns = {max_turns} reached; final report")),
                    ),
                    Ending::Budget { reason } if outcome.ending.answered(outcome.turns) => (
                        RunStatus::Completed,
                        Some(format!("{reason}; final report")),
                    ),
                    Ending::Budget { reason } => (RunStatus::Cancelled, Some(reason.clone())),
                    Ending::Failed { error } => (RunStatus::Failed, Some(error.clone())),
                    Ending::Cancelled => (RunStatus::Cancelled, Some(cancelled(None))),
                };
                (status, reason, Some(outcome))
            }
            Settled::Cancelled { reason } => (RunStatus::Cancelled, Some(cancelled(reason)), None),
            Settled::Closed => (RunStatus::Completed, None, None),
            Settled::Crashed { detail } => (
                RunStatus::Failed,
                Some(format!("the run crashed: {detail}")),
                None,
            ),
        };
        ChildResult {
            transcript_handle: format!("transcript:{}", who.agent_id),
            agent_id: who.agent_id,
            name: who.name,
            role: who.role,
            status,
            error: reason.clone().filter(|_| status == RunStatus::Failed),
            reason,
            final_text: outcome.map(|o| o.final_text.clone()).unwrap_or_default(),
            report: None,
            turns: outcome.map(|o| o.turns).unwrap_or(0),
            tool_calls: outcome.map(|o| o.tool_calls).unwrap_or(0),
            usage: outcome.map(|o| o.usage).unwrap_or_default(),
            cost_usd: who.cost_usd,
            tree_usage: who.tree_usage,
            model: who.model,
            warnings: who.warnings,
            worktree: None,
        }
    }
}

/// A run's result as it goes back into a parent's context: capped at `cap`
/// bytes, with the transcript handle for the rest.
pub fn render_result(r: &ChildResult, cap: usize) -> String {
    let mut head = format!("status: {}", r.status.as_str());
    if let Some(reason) = &r.reason {
        head.push_str(&format!(" ({reason})"));
    }
    head.push('\n');
    if let Some(w) = &r.worktree {
        head.push_str(&worktree_line(w, &r.agent_id));
    }
    let room = cap.saturating_sub(head.len()).max(128);
    let body = match &r.report {
        Some(report) => contract::render_for_parent(report, room, &r.transcript_handle),
        None => cap_text(&r.final_text, room, &r.transcript_handle),
    };
    format!("{head}{body}")
}

/// One line (two with a stat) on a worktree, for a parent's context.
fn worktree_line(w: &WorktreeReport, id: &str) -> String {
    if let Some(e) = &w.error {
        return format!("worktree: {} kept as it was ({e})\n", w.path.display());
    }
    if !w.kept {
        return "worktree: no changes; removed\n".to_string();
    }
    let stat = w.diff_stat.lines().last().unwrap_or("").trim();
    let pushed = w
        .pushed_to
        .as_ref()
        .map(|r| format!(", pushed to {r}"))
        .unwrap_or_default();
    format!(
        "worktree: branch {} with {} commit{} ({stat}{pushed}); the user merges it with \
         `brood agents merge {id}`\n",
        w.branch,
        w.commits.len(),
        if w.commits.len() == 1 { "" } else { "s" },
    )
}

/// `text` cut to at most `cap` bytes on a character boundary, pointing at the
/// transcript for the rest.
fn cap_text(text: &str, cap: usize, handle: &str) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let footer =
        format!("\n[… cut at {cap} bytes; read the rest with handle_read on \"{handle}\"]");
    let end = cap.saturating_sub(footer.len());
    // Index 0 is a boundary, so the walk ends there at the latest.
    let head = (0..=end)
        .rev()
        .find_map(|e| text.get(..e))
        .unwrap_or_default();
    format!("{head}{footer}")
}
