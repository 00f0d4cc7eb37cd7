//! The live agent tree of a chat session, fed from the library's event stream
//! ([`brood::Session::events`]). This is the one adapter between the library's
//! events and the chat UI: everything the UI shows about runs is read from here.

use brood::events::{Event, RunEvent, RunEventKind};
use brood::ledger::{RunRecord, RunStatus};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Where a run is, as the tree shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Queued,
    Running,
    /// It asked for an approval the user has not given yet.
    WaitingApproval,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::WaitingApproval => "waiting-approval",
            State::Completed => "completed",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
            State::Interrupted => "interrupted",
        }
    }
}

/// One run in the tree.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub role: String,
    pub model: String,
    pub parent: Option<String>,
    pub task: String,
    pub state: State,
    pub started: Instant,
    pub ended: Option<Instant>,
    /// Its own model answers' tokens and cost (see [`Spend`]).
    pub spend: Spend,
    /// Spawn order (the tree lists children in it).
    pub order: u64,
}

/// Tokens and cost of some model answers, as the usage events said: the cost is
/// the sum of each answer's `cost_usd`, unknown once one answer had none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    pub answers: u64,
    pub tokens: u64,
    pub cost_usd: f64,
    pub unpriced: bool,
}

impl Spend {
    fn add(&mut self, other: &Spend) {
        self.answers += other.answers;
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.cost_usd += other.cost_usd;
        self.unpriced |= other.unpriced;
    }

    /// `$0.0123`, `cost n/a` (some answer had no price), or nothing before any
    /// answer.
    pub fn cost_text(&self) -> Option<String> {
        match (self.answers, self.unpriced) {
            (0, _) => None,
            (_, true) => Some("cost n/a".into()),
            (_, false) => Some(format!("${:.4}", self.cost_usd)),
        }
    }

    /// `1234 tokens, $0.0123`.
    pub fn text(&self) -> String {
        match self.cost_text() {
            Some(c) => format!("{} tokens, {c}", self.tokens),
            None => format!("{} tokens", self.tokens),
        }
    }
}

/// Every run seen this chat, by id.
#[derive(Debug, Default)]
pub struct AgentTree {
    nodes: BTreeMap<String, Node>,
    next: u64,
    /// Runs waiting for the user's answer to an approval. Kept apart from the
    /// lifecycle the events tell: the question comes over the approver's channel,
    /// the events over the session's stream, and the UI may take the question
    /// before the run's `spawned` or `started` (under load it did) — a `started`
    /// taken after it must not show the asking run as merely running.
    waiting: BTreeSet<String>,
    /// Events the stream dropped for us (the ledger still has them).
    pub missed: u64,
}

/// Who a run is, as its events say.
#[derive(Clone, Copy)]
struct Who<'a> {
    parent: Option<&'a str>,
    role: &'a str,
    model: &'a str,
}

/// A child in the tree: its run id, the run, its depth (1 under a root).
pub type Child<'a> = (&'a str, &'a Node, usize);

/// What changed, for a caller that prints lifecycle lines.
pub enum Change<'a> {
    Started(&'a Node),
    Ended(&'a Node),
    Nothing,
}

impl AgentTree {
    /// Take one event from the session's stream.
    pub fn apply(&mut self, event: &Event) -> Change<'_> {
        match event {
            Event::Run(ev) => self.apply_run(ev),
            Event::Lagged { missed } => {
                self.missed += missed;
                Change::Nothing
            }
            _ => Change::Nothing,
        }
    }

    fn apply_run(&mut self, ev: &RunEvent) -> Change<'_> {
        let who = Who {
            parent: ev.parent_id.as_deref(),
            role: &ev.role,
            model: &ev.model,
        };
        self.apply_kind(&ev.run_id, who, &ev.kind)
    }

    fn apply_kind(&mut self, run_id: &str, who: Who<'_>, kind: &RunEventKind) -> Change<'_> {
        let waiting = self.waiting.contains(run_id);
        // Queued or running as the events say, unless a question is waiting.
        let live = |state: State| {
            if waiting {
                State::WaitingApproval
            } else {
                state
            }
        };
        if let RunEventKind::Spawned {
            name, objective, ..
        } = kind
        {
            // A run spawned again is a resumed one: it keeps its place in the
            // tree and what it spent before.
            let (order, spend) = match self.nodes.get(run_id) {
                Some(n) => (n.order, n.spend),
                None => {
                    self.next += 1;
                    (self.next, Spend::default())
                }
            };
            self.nodes.insert(
                run_id.to_string(),
                Node {
                    name: name.clone(),
                    role: who.role.to_string(),
                    model: who.model.to_string(),
                    parent: who.parent.map(str::to_string),
                    task: objective.clone(),
                    state: live(State::Queued),
                    started: Instant::now(),
                    ended: None,
                    spend,
                    order,
                },
            );
            return Change::Nothing;
        }
        let Some(node) = self.nodes.get_mut(run_id) else {
            return Change::Nothing;
        };
        let ended = match kind {
            RunEventKind::Queued => {
                node.state = live(State::Queued);
                return Change::Nothing;
            }
            RunEventKind::Started => {
                node.state = live(State::Running);
                return Change::Started(node);
            }
            RunEventKind::Usage {
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => {
                let tokens = input_tokens.saturating_add(*output_tokens);
                node.spend.add(&Spend {
                    answers: 1,
                    tokens,
                    cost_usd: cost_usd.unwrap_or(0.0),
                    unpriced: cost_usd.is_none(),
                });
                return Change::Nothing;
            }
            RunEventKind::Completed { .. } => State::Completed,
            RunEventKind::Failed { .. } => State::Failed,
            RunEventKind::Cancelled { .. } => State::Cancelled,
            RunEventKind::Interrupted { .. } => State::Interrupted,
            _ => return Change::Nothing,
        };
        // An ended run waits for nothing (its question, if any, is moot).
        self.waiting.remove(run_id);
        node.state = ended;
        node.ended = Some(Instant::now());
        Change::Ended(node)
    }

    /// Draw a recorded session's runs again (`brood chat --resume`): each with its
    /// recorded state, time, tokens and cost, in the order they were created. A run
    /// the live stream later reports on (a resumed one) is updated from there.
    pub fn restore(&mut self, runs: &[RunRecord]) {
        let now = Instant::now();
        for run in runs {
            let ran = match (run.started_at, run.ended_at) {
                (Some(s), Some(e)) => (e - s).to_std().unwrap_or_default(),
                _ => std::time::Duration::ZERO,
            };
            self.next += 1;
            let answers = run.steps.max(u64::from(
                run.input_tokens.saturating_add(run.output_tokens) > 0,
            ));
            self.nodes.insert(
                run.id.to_string(),
                Node {
                    name: run.name.clone().unwrap_or_else(|| "run".into()),
                    role: run.role.clone().unwrap_or_else(|| "-".into()),
                    model: run.model.clone().unwrap_or_else(|| "-".into()),
                    parent: run.parent_id.as_ref().map(|p| p.to_string()),
                    task: run.objective.clone(),
                    state: recorded_state(run.status),
                    started: now.checked_sub(ran).unwrap_or(now),
                    ended: Some(now),
                    spend: Spend {
                        answers,
                        tokens: run.input_tokens.saturating_add(run.output_tokens),
                        cost_usd: run.cost_usd.unwrap_or(0.0),
                        unpriced: answers > 0 && run.cost_usd.is_none(),
                    },
                    order: self.next,
                },
            );
        }
    }

    /// A run asks the user for an approval (`true`) or got its answer (`false`).
    /// Taken in whatever order it comes with the run's events: a run not in the
    /// tree yet shows as waiting once its `spawned` arrives.
    pub fn mark_waiting(&mut self, run_id: &str, waiting: bool) {
        if waiting {
            self.waiting.insert(run_id.to_string());
        } else {
            self.waiting.remove(run_id);
        }
        if let Some(n) = self.nodes.get_mut(run_id) {
            match (waiting, n.state) {
                (true, State::Running | State::Queued) => n.state = State::WaitingApproval,
                (false, State::WaitingApproval) => n.state = State::Running,
                _ => {}
            }
        }
    }

    /// One run by id.
    pub fn get(&self, run_id: &str) -> Option<&Node> {
        self.nodes.get(run_id)
    }

    /// The runs at the top of the tree, in spawn order: the roots, and the
    /// children whose parent this chat never saw (a run `/resume` continued
    /// whose parent ran in an earlier session).
    fn tops(&self) -> Vec<(&String, &Node)> {
        let mut tops: Vec<(&String, &Node)> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.parent
                    .as_ref()
                    .is_none_or(|p| !self.nodes.contains_key(p))
            })
            .collect();
        tops.sort_by_key(|(_, n)| n.order);
        tops
    }

    /// Every child (not the roots: those are the chat's turns), depth first in
    /// spawn order, with its depth (1 for a root's child, and for a child whose
    /// parent is not in the tree).
    pub fn children(&self) -> Vec<Child<'_>> {
        let mut out = Vec::new();
        for (id, n) in self.tops() {
            if n.parent.is_some() {
                out.push((id.as_str(), n, 1));
                self.descend(id, 2, &mut out);
            } else {
                self.descend(id, 1, &mut out);
            }
        }
        out
    }

    fn descend<'a>(&'a self, parent: &str, depth: usize, out: &mut Vec<Child<'a>>) {
        let mut kids: Vec<(&String, &Node)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.parent.as_deref() == Some(parent))
            .collect();
        kids.sort_by_key(|(_, n)| n.order);
        for (id, n) in kids {
            out.push((id.as_str(), n, depth));
            self.descend(id, depth + 1, out);
        }
    }

    /// The children grouped as the UI lists them: Needs input (waiting for an
    /// approval), Working (queued or running), Done; empty groups left out.
    pub fn grouped(&self) -> Vec<(&'static str, Vec<Child<'_>>)> {
        let mut groups: [(&'static str, Vec<Child<'_>>); 3] = [
            ("Needs input", Vec::new()),
            ("Working", Vec::new()),
            ("Done", Vec::new()),
        ];
        for c in self.children() {
            let g = match c.1.state {
                State::WaitingApproval => 0,
                State::Queued | State::Running => 1,
                _ => 2,
            };
            groups[g].1.push(c);
        }
        groups.into_iter().filter(|(_, v)| !v.is_empty()).collect()
    }

    /// What every run of the chat spent.
    pub fn total(&self) -> Spend {
        let mut t = Spend::default();
        for n in self.nodes.values() {
            t.add(&n.spend);
        }
        t
    }

    /// What `run_id` and all its descendants spent.
    pub fn subtree(&self, run_id: &str) -> Spend {
        let mut t = self.nodes.get(run_id).map(|n| n.spend).unwrap_or_default();
        for (id, _) in self
            .nodes
            .iter()
            .filter(|(_, n)| n.parent.as_deref() == Some(run_id))
        {
            t.add(&self.subtree(id));
        }
        t
    }

    /// Children (not roots) that are queued and running.
    pub fn counts(&self) -> (usize, usize) {
        let live = self.nodes.values().filter(|n| n.parent.is_some());
        live.fold((0, 0), |(r, q), n| match n.state {
            State::Running | State::WaitingApproval => (r + 1, q),
            State::Queued => (r, q + 1),
            _ => (r, q),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Forget every run (a `/clear`).
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.waiting.clear();
    }

    /// The tree as text lines: each root (or child whose parent is not in the
    /// tree), then its descendants
    /// `├─ name [role · model] task — state, elapsed, tokens, cost`; a top line
    /// ends with its id and its whole tree's tokens and cost.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (id, n) in self.tops() {
            out.push(format!(
                "{} — {} — tree: {}",
                describe(n),
                id,
                self.subtree(id).text()
            ));
            self.children_lines(id, "", &mut out);
        }
        out
    }

    fn children_lines(&self, parent: &str, indent: &str, out: &mut Vec<String>) {
        let mut kids: Vec<(&String, &Node)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.parent.as_deref() == Some(parent))
            .collect();
        kids.sort_by_key(|(_, n)| n.order);
        let last = kids.len().saturating_sub(1);
        for (i, (id, n)) in kids.into_iter().enumerate() {
            let (branch, next) = if i == last {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            out.push(format!("{indent}{branch}{}", describe(n)));
            self.children_lines(id, &format!("{indent}{next}"), out);
        }
    }
}

/// A recorded status as the tree shows it. A run recorded running or waiting
/// belongs to a session still alive elsewhere (a dead one's are recovered
/// `interrupted` when the ledger opens): shown as recorded, not live here.
fn recorded_state(status: RunStatus) -> State {
    match status {
        RunStatus::Pending | RunStatus::Queued => State::Queued,
        RunStatus::Running => State::Running,
        RunStatus::Completed => State::Completed,
        RunStatus::Failed => State::Failed,
        RunStatus::Cancelled => State::Cancelled,
        _ => State::Interrupted,
    }
}

/// `name [role · model] task — state, elapsed, tokens, cost`.
pub fn describe(n: &Node) -> String {
    describe_within(n, usize::MAX)
}

/// [`describe`] in at most about `width` characters: the task is shortened
/// (to 48 characters at most, 8 at least) so the state, elapsed time and tokens
/// at the end stay in view.
pub fn describe_within(n: &Node, width: usize) -> String {
    let elapsed = n.ended.unwrap_or_else(Instant::now) - n.started;
    let head = format!("{} [{} · {}] ", n.name, n.role, n.model);
    let tail = format!(
        " — {}, {:.1}s, {}",
        n.state.as_str(),
        elapsed.as_secs_f64(),
        n.spend.text()
    );
    let room = width
        .saturating_sub(head.chars().count() + tail.chars().count())
        .clamp(8, 48);
    let task: String = n.task.split_whitespace().collect::<Vec<_>>().join(" ");
    let task = if task.chars().count() > room {
        format!("{}…", task.chars().take(room - 1).collect::<String>())
    } else {
        task
    };
    format!("{head}{task}{tail}")
}

/// One event as a JSON line (`brood chat --json`): who (`run_id`, `parent_id`,
/// `role`, `model`), `seq`, and `event` with the kind's fields.
pub fn event_json(event: &Event) -> serde_json::Value {
    use serde_json::json;
    let ev = match event {
        Event::Run(ev) => ev,
        Event::Lagged { missed } => return json!({"event": "lagged", "missed": missed}),
        _ => return json!({"event": "unknown"}),
    };
    let body = match &ev.kind {
        RunEventKind::Spawned {
            name,
            agent_type,
            objective,
        } => {
            json!({"event": "spawned", "name": name, "agent_type": agent_type, "objective": objective})
        }
        RunEventKind::Queued => json!({"event": "queued"}),
        RunEventKind::Started => json!({"event": "started"}),
        RunEventKind::Step { turn } => json!({"event": "step", "turn": turn}),
        RunEventKind::TextDelta { text } => json!({"event": "text_delta", "text": text}),
        RunEventKind::Usage {
            turn,
            input_tokens,
            output_tokens,
            cached_input_tokens,
            cost_usd,
        } => json!({"event": "usage", "turn": turn, "input_tokens": input_tokens,
            "output_tokens": output_tokens, "cached_input_tokens": cached_input_tokens,
            "cost_usd": cost_usd}),
        RunEventKind::Retrying {
            turn,
            attempt,
            delay_ms,
            error,
        } => {
            json!({"event": "retrying", "turn": turn, "attempt": attempt, "delay_ms": delay_ms, "error": error})
        }
        RunEventKind::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            json!({"event": "tool_call", "call_id": call_id, "name": name, "arguments": arguments})
        }
        RunEventKind::ToolResult {
            call_id,
            name,
            ok,
            output,
            duration_ms,
        } => json!({"event": "tool_result", "call_id": call_id, "name": name, "ok": ok,
            "output": output, "duration_ms": duration_ms}),
        RunEventKind::Completed { final_text } => {
            json!({"event": "completed", "final": final_text})
        }
        RunEventKind::Failed { error } => json!({"event": "failed", "error": error}),
        RunEventKind::Cancelled { reason } => json!({"event": "cancelled", "reason": reason}),
        RunEventKind::Interrupted { reason } => {
            json!({"event": "interrupted", "reason": reason})
        }
        _ => json!({"event": "other"}),
    };
    let mut v = json!({
        "seq": ev.seq,
        "run_id": ev.run_id,
        "parent_id": ev.parent_id,
        "role": ev.role,
        "model": ev.model,
    });
    if let (Some(obj), serde_json::Value::Object(b)) = (v.as_object_mut(), body) {
        obj.extend(b);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHILD: Who<'static> = Who {
        parent: Some("root"),
        role: "general",
        model: "m",
    };

    fn spawned(t: &mut AgentTree, id: &str) {
        t.apply_kind(
            id,
            CHILD,
            &RunEventKind::Spawned {
                name: id.into(),
                agent_type: "general".into(),
                objective: "task".into(),
            },
        );
    }

    fn state(t: &AgentTree, id: &str) -> State {
        t.get(id).map(|n| n.state).expect("in the tree")
    }

    /// The approver's channel and the event stream are two channels: the UI may
    /// take a child's question before its `spawned` or its `started`. Either way
    /// the child shows as waiting until the answer, then as running.
    #[test]
    fn a_question_taken_before_the_runs_events_still_shows_it_waiting() {
        let mut t = AgentTree::default();
        let root = Who {
            parent: None,
            role: "parent",
            model: "m",
        };
        t.apply_kind(
            "root",
            root,
            &RunEventKind::Spawned {
                name: "parent".into(),
                agent_type: "parent".into(),
                objective: "turn".into(),
            },
        );
        // Before `started`: the later `started` does not hide the question.
        spawned(&mut t, "a");
        t.mark_waiting("a", true);
        t.apply_kind("a", CHILD, &RunEventKind::Started);
        assert_eq!(state(&t, "a"), State::WaitingApproval);
        // Before `spawned`: the run shows waiting from its first event.
        t.mark_waiting("b", true);
        spawned(&mut t, "b");
        assert_eq!(state(&t, "b"), State::WaitingApproval);
        t.apply_kind("b", CHILD, &RunEventKind::Started);
        assert_eq!(state(&t, "b"), State::WaitingApproval);
        assert_eq!(t.grouped()[0].0, "Needs input");
        assert_eq!(t.grouped()[0].1.len(), 2);
        // Answered: running again; a later `started` (a resume) keeps it so.
        t.mark_waiting("a", false);
        assert_eq!(state(&t, "a"), State::Running);
        t.apply_kind("a", CHILD, &RunEventKind::Started);
        assert_eq!(state(&t, "a"), State::Running);
        // Ended while asking: ended, and nothing left waiting.
        t.apply_kind(
            "b",
            CHILD,
            &RunEventKind::Cancelled {
                reason: "quit".into(),
            },
        );
        assert_eq!(state(&t, "b"), State::Cancelled);
        assert!(t.waiting.is_empty());
    }
}
