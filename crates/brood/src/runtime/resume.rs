//! [`Session::resume`]: continue a recorded run — interrupted, cancelled or failed —
//! under its own id, in this session (`brood agents resume ID`). Reads the run, its
//! lineage, events and transcript (spilled messages in full) from the ledger, checks
//! that it belongs to this workspace, rebuilds its conversation, and hands it to the
//! supervisor (`subagent::resume`), which re-derives its grant, reopens its record
//! and runs it to its end.

use super::error::SessionError;
use super::root::RunReport;
use super::session::Session;
use crate::agent::{Ending, EventSink};
use crate::ledger::{EventRecord, LedgerError, LedgerReader, RunId, RunRecord, RunStatus};
use crate::model::Message;
use crate::subagent::rebuild::rebuild_messages;
use crate::subagent::tally::RootTallies;
use crate::subagent::{ResumeError, ResumeRequest};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A lineage deeper than this is not a brood tree (the database is untrusted input:
/// a crafted parent link could loop).
const MAX_LINEAGE: usize = 256;

/// What the ledger holds of a run to resume.
pub(super) struct Recorded {
    lineage: Vec<RunRecord>,
    events: Vec<EventRecord>,
    /// `(seq, content)`, spilled entries in full.
    transcript: Vec<(u64, Value)>,
    /// A fork's prefix: its parent's conversation as the fork began from it.
    prefix: Vec<Message>,
}

impl Session {
    /// Continue run `id` (a unique prefix is enough) from its last recorded step,
    /// under the same id, parent and lineage: its record goes back to `running` in
    /// this session with a `resumed` event, its conversation is rebuilt from its
    /// transcript (a tool call left without a result gets a result saying it was
    /// interrupted; it is not run again), its grant is re-derived from its agent
    /// type down its lineage under today's configuration, and its limits count what
    /// it already spent (steps, tokens, wall time). `events` and `turn` are as for
    /// [`Session::run_with`]. The report is the run's own (for a child: its final
    /// answer, turns and usage including what was spent before).
    ///
    /// Refused with [`SessionError::Resume`] — nothing written — when it completed,
    /// is still running in a live process, was recorded in another workspace (the
    /// directory moved), or its agent type is not defined any more.
    pub async fn resume(
        &self,
        id: &str,
        events: Option<EventSink>,
        turn: CancellationToken,
    ) -> Result<RunReport, SessionError> {
        let prefix = id.to_string();
        let recorded = self
            .ledger()
            .read(move |r| read_recorded(r, &prefix))
            .await
            .map_err(ResumeError::Ledger)?;
        let Some(record) = recorded.lineage.last().cloned() else {
            return Err(ResumeError::Ledger(LedgerError::UnknownRun { id: id.into() }).into());
        };
        check_workspace(&record, self.workspace().root())?;
        // What the ledger would refuse, said before anything is asked of it (a
        // listing shows a dead process's runs interrupted, so one still shown
        // unfinished is live).
        let why = match record.status {
            RunStatus::Completed => Some(format!(
                "it completed; its result is shown by `brood agents show {}`",
                record.id
            )),
            RunStatus::Pending | RunStatus::Queued | RunStatus::Running => Some(format!(
                "it is still running in another brood process (session {}); wait for it, \
                 or stop it with `brood agents cancel {}` and resume then",
                record.session_id, record.id
            )),
            _ => None,
        };
        if let Some(why) = why {
            let id = record.id.to_string();
            return Err(ResumeError::Ledger(LedgerError::NotResumable { id, why }).into());
        }
        self.continue_recorded(recorded, events, turn, None, None, false)
            .await
    }

    /// Continue a recorded run (read by [`read_recorded`], its status checked) to its
    /// end: its conversation rebuilt, then the supervisor's resume. `workspace` and
    /// `claimed` as in [`ResumeRequest`].
    pub(super) async fn continue_recorded(
        &self,
        recorded: Recorded,
        events: Option<EventSink>,
        turn: CancellationToken,
        workspace: Option<Arc<crate::tool::Workspace>>,
        worktree: Option<Arc<crate::subagent::worktree::Worktree>>,
        claimed: bool,
    ) -> Result<RunReport, SessionError> {
        let Some(record) = recorded.lineage.last().cloned() else {
            return Err(ResumeError::Ledger(LedgerError::UnknownRun { id: String::new() }).into());
        };
        let mut messages: Vec<Message> =
            rebuild_messages(&recorded.transcript).map_err(|e| ResumeError::Transcript {
                id: record.id.to_string(),
                detail: e.to_string(),
            })?;
        let task_unrecorded = messages.is_empty();
        if task_unrecorded {
            // Interrupted before its task was recorded (or never started: a fleet
            // run's first claim): the task is its objective.
            messages.push(Message::user(record.objective.clone()));
        }
        // A fork goes on after its parent's conversation, as it ran.
        let mut prefix = recorded.prefix;
        if !prefix.is_empty() {
            prefix.append(&mut messages);
            messages = prefix;
        }
        let tallies = Arc::new(RootTallies::default());
        let cancel = self.cancel_token().child_token();
        let link = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = turn.cancelled() => cancel.cancel(),
                    _ = cancel.cancelled() => {}
                }
            })
        };
        // A resumed root is one of the session's roots while it runs, as a turn
        // is: `cancel_all` (a chat's quit, a signal) and `brood agents cancel`
        // find it there (a child is on the supervisor's board).
        let _root = record
            .parent_id
            .is_none()
            .then(|| RootEntry::enter(self, &record.id, &cancel));
        let resumed = self
            .supervisor()
            .resume(ResumeRequest {
                lineage: recorded.lineage,
                events: recorded.events,
                messages,
                root_max_turns: self.config().max_turns,
                observer: events,
                cancel: cancel.clone(),
                tallies: Some(tallies.clone()),
                workspace,
                worktree,
                claimed,
                task_unrecorded,
            })
            .await;
        link.abort();
        let (run_id, outcome, child) = resumed?;
        let error = outcome
            .error
            .as_ref()
            .map(|e| e.to_string())
            .or_else(|| child.as_ref().and_then(|c| c.error.clone()))
            .or(match &outcome.ending {
                Ending::Cancelled => Some(
                    child
                        .as_ref()
                        .and_then(|c| c.reason.clone())
                        .map_or_else(|| "cancelled".into(), |r| format!("cancelled: {r}")),
                ),
                _ => None,
            });
        Ok(RunReport {
            run_id,
            final_text: outcome.final_text,
            turns: outcome.turns,
            tool_calls: outcome.tool_calls,
            usage: tallies.tree.get(),
            parent_usage: tallies.own.get(),
            error,
            ending: outcome.ending,
            messages: outcome.messages,
        })
    }
}

/// A resumed root in the session's roots map until it ends (or its future is
/// dropped).
struct RootEntry {
    roots: Arc<std::sync::Mutex<std::collections::HashMap<String, CancellationToken>>>,
    id: String,
}

impl RootEntry {
    fn enter(session: &Session, id: &RunId, cancel: &CancellationToken) -> RootEntry {
        let id = id.as_str().to_string();
        session
            .roots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), cancel.clone());
        RootEntry {
            roots: session.roots.clone(),
            id,
        }
    }
}

impl Drop for RootEntry {
    fn drop(&mut self) {
        self.roots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// The run named by `prefix`, its ancestors (root first), events and transcript.
pub(super) fn read_recorded(r: &LedgerReader, prefix: &str) -> Result<Recorded, LedgerError> {
    let id = r.resolve_id(prefix)?;
    let detail = r.get_run(&id)?;
    let mut lineage = vec![detail.run];
    while let Some(parent) = lineage.last().and_then(|run| run.parent_id.clone()) {
        if lineage.len() >= MAX_LINEAGE || lineage.iter().any(|run| run.id == parent) {
            return Err(LedgerError::NotResumable {
                id: id.to_string(),
                why: format!(
                    "its recorded lineage does not end at a root within {MAX_LINEAGE} runs"
                ),
            });
        }
        lineage.push(r.run(&parent)?);
    }
    lineage.reverse();
    let transcript = full_transcript(r, &id)?;
    let prefix = match lineage.split_last() {
        Some((run, ancestors)) if !ancestors.is_empty() => {
            fork_prefix(r, ancestors, &detail.events, &run.objective, 0)?
        }
        _ => Vec::new(),
    };
    Ok(Recorded {
        lineage,
        events: detail.events,
        transcript,
        prefix,
    })
}

/// The prefix a fork ran with (empty for a run that is not one): the first
/// `fork_messages` (recorded with its grant) of its parent's conversation at the
/// fork. The parent is the last of `ancestors` (the root first) and `objective`
/// the fork's task. A child parent's conversation is its own prefix (a fork of
/// a fork) and then its transcript. A root's transcript holds its own prompt
/// and steps, not the conversation a chat gave it: what comes before is the
/// tail of its session's earlier roots, as long as the prefix needs — found by
/// where the parent called the tool that opened the fork (the last assistant
/// message whose call names the task), so a `/clear` in between does not shift it.
fn fork_prefix(
    r: &LedgerReader,
    ancestors: &[RunRecord],
    events: &[EventRecord],
    objective: &str,
    depth: usize,
) -> Result<Vec<Message>, LedgerError> {
    use crate::subagent::granted::RecordedGrant;
    let Some(Ok(Some(n))) = RecordedGrant::from_events(events).map(|g| g.map(|g| g.fork_messages))
    else {
        return Ok(Vec::new());
    };
    let Some((parent, above)) = ancestors.split_last() else {
        return Ok(Vec::new());
    };
    let unreadable = |why: String| LedgerError::NotResumable {
        id: parent.id.to_string(),
        why: format!("the conversation its fork began from cannot be read back ({why})"),
    };
    let own = rebuild_messages(&full_transcript(r, &parent.id)?)
        .map_err(|e| unreadable(e.to_string()))?;
    let before = if parent.parent_id.is_some() {
        if depth >= MAX_LINEAGE {
            return Err(unreadable("its lineage of forks does not end".into()));
        }
        let detail = r.get_run(&parent.id)?;
        let objective = detail.run.objective.clone();
        fork_prefix(r, above, &detail.events, &objective, depth + 1)?
    } else {
        // The parent's own messages at the fork: those before its call that
        // opened the child; the rest of the prefix came before its prompt.
        let at = own
            .iter()
            .rposition(|m| {
                m.tool_calls
                    .iter()
                    .any(|c| names_task(&c.arguments, objective))
            })
            .unwrap_or(own.len());
        let wanted = n.saturating_sub(at.min(n));
        let mut earlier: Vec<RunRecord> = r
            .list_runs(crate::ledger::ListFilter {
                include_archived: true,
            })?
            .into_iter()
            .map(|l| l.run)
            .filter(|run| {
                run.parent_id.is_none()
                    && run.session_id == parent.session_id
                    && run.created_at < parent.created_at
            })
            .collect();
        earlier.sort_by_key(|run| run.created_at);
        let mut history = Vec::new();
        for run in &earlier {
            history.extend(
                rebuild_messages(&full_transcript(r, &run.id)?)
                    .map_err(|e| unreadable(e.to_string()))?,
            );
        }
        history.split_off(history.len().saturating_sub(wanted))
    };
    let mut conversation = before;
    conversation.extend(own);
    if conversation.len() < n {
        return Err(unreadable(format!(
            "it was forked from {n} messages, and the ledger holds {}",
            conversation.len()
        )));
    }
    conversation.truncate(n);
    Ok(conversation)
}

/// Whether a tool call's arguments (JSON text) hold `task` as one of their
/// strings: the call that opened that child.
fn names_task(arguments: &str, task: &str) -> bool {
    fn holds(v: &Value, task: &str) -> bool {
        match v {
            Value::String(s) => s == task,
            Value::Array(a) => a.iter().any(|v| holds(v, task)),
            Value::Object(o) => o.values().any(|v| holds(v, task)),
            _ => false,
        }
    }
    serde_json::from_str::<Value>(arguments).is_ok_and(|v| holds(&v, task))
}

/// A run recorded in another directory is not this workspace's to continue: its
/// paths, files and transcript refer to that one.
fn check_workspace(record: &RunRecord, here: &Path) -> Result<(), ResumeError> {
    let recorded = Path::new(&record.workspace);
    let same = recorded == here
        || std::fs::canonicalize(recorded)
            .map(|p| p == here)
            .unwrap_or(false);
    if same {
        Ok(())
    } else {
        Err(ResumeError::WorkspaceMoved {
            id: record.id.to_string(),
            recorded: record.workspace.clone(),
            here: here.display().to_string(),
        })
    }
}

/// A recorded chat session, read back to be continued (`brood chat --resume`).
#[derive(Debug, Clone)]
pub struct SessionConversation {
    /// The session read.
    pub session_id: String,
    /// The parent's conversation: every root run of the session in order, each
    /// its prompt and every step (tool calls left unanswered get their
    /// "interrupted" result, as for a resumed run).
    pub history: Vec<Message>,
    /// Its runs that ended without finishing (interrupted, cancelled, failed):
    /// what [`Session::resume`] can continue, oldest first.
    pub unfinished: Vec<RunRecord>,
    /// Every run of the session — roots and their children — oldest first, as
    /// recorded (status, tokens, cost), so a UI can draw the session's tree again.
    pub runs: Vec<RunRecord>,
}

impl Session {
    /// The conversation of session `session_id` (`None`: the most recent session
    /// other than this one), to continue with [`Session::run_continuing`], and its
    /// unfinished runs. Nothing is written.
    pub async fn conversation(
        &self,
        session_id: Option<&str>,
    ) -> Result<SessionConversation, SessionError> {
        let wanted = session_id.map(str::to_string);
        let own = self.ledger().session_id().to_string();
        let read = self
            .ledger()
            .read(move |r| read_conversation(r, wanted.as_deref(), &own))
            .await
            .map_err(ResumeError::Ledger)?;
        let (session_id, roots, unfinished, runs) = read;
        let mut history = Vec::new();
        for (id, transcript) in roots {
            let messages = rebuild_messages(&transcript).map_err(|e| ResumeError::Transcript {
                id,
                detail: e.to_string(),
            })?;
            history.extend(messages);
        }
        Ok(SessionConversation {
            session_id,
            history,
            unfinished,
            runs,
        })
    }
}

/// A session's id, its root runs' transcripts (in order), its unfinished runs and
/// all its runs.
type ReadConversation = (
    String,
    Vec<(String, Vec<(u64, Value)>)>,
    Vec<RunRecord>,
    Vec<RunRecord>,
);

fn read_conversation(
    r: &LedgerReader,
    wanted: Option<&str>,
    own: &str,
) -> Result<ReadConversation, LedgerError> {
    let runs: Vec<RunRecord> = r
        .list_runs(crate::ledger::ListFilter {
            include_archived: true,
        })?
        .into_iter()
        .map(|l| l.run)
        .collect();
    let session = match wanted {
        Some(s) => s.to_string(),
        None => runs
            .iter()
            .filter(|run| run.session_id != own)
            .max_by_key(|run| run.created_at)
            .map(|run| run.session_id.clone())
            .ok_or_else(|| LedgerError::NotResumable {
                id: "(latest session)".into(),
                why: "this workspace has no earlier session to resume".into(),
            })?,
    };
    let mut of_session: Vec<&RunRecord> = runs
        .iter()
        .filter(|run| run.session_id == session)
        .collect();
    if of_session.is_empty() {
        return Err(LedgerError::NotResumable {
            id: session,
            why: "no run of this workspace belongs to that session; `brood agents list --all --json` shows each run's session_id".into(),
        });
    }
    of_session.sort_by_key(|run| run.created_at);
    let mut roots = Vec::new();
    for run in of_session.iter().filter(|run| run.parent_id.is_none()) {
        roots.push((run.id.to_string(), full_transcript(r, &run.id)?));
    }
    let unfinished = of_session
        .iter()
        .filter(|run| {
            matches!(
                run.status,
                RunStatus::Interrupted | RunStatus::Cancelled | RunStatus::Failed
            )
        })
        .map(|run| (*run).clone())
        .collect();
    let all = of_session.into_iter().cloned().collect();
    Ok((session, roots, unfinished, all))
}

/// A run's transcript as `(seq, content)`, each spilled entry read in full. A
/// spilled entry whose full text is not there (its spill file deleted, or written
/// on another machine by a ledger from before spills were kept in the database) is
/// resumed from its capped text rather than leaving the run unresumable; any other
/// failure to read it (a lost database connection, a spill path outside the spill
/// directory or a symlink — a tampered ledger) still fails the resume.
fn full_transcript(r: &LedgerReader, id: &RunId) -> Result<Vec<(u64, Value)>, LedgerError> {
    let slice = r.transcript(id, 0, usize::MAX)?;
    let mut transcript = Vec::with_capacity(slice.entries.len());
    for entry in &slice.entries {
        let full = match r.read_spill(entry) {
            Ok(full) => full,
            Err(LedgerError::SpillMissing { .. }) => None,
            Err(e) => return Err(e),
        };
        let content = match full {
            Some(full) if entry.truncated => {
                serde_json::from_str(&full).unwrap_or(Value::String(full))
            }
            _ => entry.content.clone(),
        };
        transcript.push((entry.seq, content));
    }
    Ok(transcript)
}
