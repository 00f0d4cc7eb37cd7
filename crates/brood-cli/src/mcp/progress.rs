//! Progress notifications for a long `task` call. When the host's `tools/call`
//! carries a progress token, the call's tree is watched on the session's event
//! stream and the host gets `notifications/progress` as children are spawned,
//! step and end: `progress` counts those moments (it only ever grows, as the
//! protocol requires), `total` is absent, and `message` says where the fan-out
//! stands (`2 of 3 sub-agents done, 1 running, 7 model steps`). Bursts are
//! coalesced to one notification per [`TICK`]; the last one is sent before the
//! call's result.
//!
//! Which children are the call's: the host's direct children whose objective is
//! one of the call's prompts (each prompt claims one child), and their
//! descendants. Two concurrent calls with the same prompt may swap children in
//! each other's counts — the totals stay right.

use brood::events::{Event, RunEventKind};
use brood::subagent::HostRun;
use futures::{FutureExt, StreamExt};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use rmcp::RoleServer;
use std::collections::HashSet;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// At most one notification per tick.
const TICK: Duration = Duration::from_millis(100);

/// A running watcher; [`Watch::finish`] sends the last figures and stops it.
pub struct Watch {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Where the call's tree stands.
#[derive(Default)]
struct Counts {
    /// Moments counted so far (the notification's `progress`).
    moments: u64,
    spawned: usize,
    running: usize,
    done: usize,
    steps: u64,
}

impl Counts {
    fn message(&self, expected: usize) -> String {
        let steps = if self.steps == 1 { "step" } else { "steps" };
        format!(
            "{} of {expected} sub-agent{} done, {} running, {} model {steps}",
            self.done,
            if expected == 1 { "" } else { "s" },
            self.running,
            self.steps,
        )
    }
}

/// The prompts a delegation call opens children for (`task`'s `prompts` or
/// `description`, `agent_open`'s `prompt`); empty for the other tools.
pub fn objectives(tool: &str, args: &serde_json::Value) -> Vec<String> {
    let text = |k: &str| args.get(k).and_then(|v| v.as_str()).map(str::to_string);
    match tool {
        "task" => match args.get("prompts").and_then(|v| v.as_array()) {
            Some(list) => list
                .iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect(),
            None => text("description").into_iter().collect(),
        },
        "agent_open" => text("prompt").into_iter().collect(),
        _ => Vec::new(),
    }
}

/// The call's part of the host's tree, and its counts.
struct Tracker {
    host_id: String,
    expected: usize,
    unclaimed: Vec<String>,
    mine: HashSet<String>,
    counts: Counts,
}

impl Tracker {
    /// Take one event; whether the counts changed.
    fn apply(&mut self, ev: &brood::events::RunEvent) -> bool {
        let direct = ev.parent_id.as_deref() == Some(self.host_id.as_str());
        if let RunEventKind::Spawned { objective, .. } = &ev.kind {
            let claimed = if direct {
                match self.unclaimed.iter().position(|o| o == objective) {
                    Some(i) => {
                        self.unclaimed.swap_remove(i);
                        true
                    }
                    None => false,
                }
            } else {
                ev.parent_id.as_ref().is_some_and(|p| self.mine.contains(p))
            };
            if claimed {
                self.mine.insert(ev.run_id.clone());
                if direct {
                    self.counts.spawned += 1;
                }
                self.counts.moments += 1;
            }
            return claimed;
        }
        if !self.mine.contains(&ev.run_id) {
            return false;
        }
        let c = &mut self.counts;
        match &ev.kind {
            RunEventKind::Started if direct => c.running += 1,
            RunEventKind::Step { .. } => c.steps += 1,
            k if k.is_terminal() && direct => {
                c.done += 1;
                c.running = c.running.saturating_sub(1);
            }
            _ => return false,
        }
        c.moments += 1;
        true
    }
}

/// Start watching the host's tree for a call that opens children for
/// `objectives`, reporting to `peer` under `token`.
pub fn watch(
    host: &HostRun,
    peer: Peer<RoleServer>,
    token: ProgressToken,
    objectives: Vec<String>,
) -> Watch {
    let mut events = host.events();
    let mut t = Tracker {
        host_id: host.run_id().to_string(),
        expected: objectives.len(),
        unclaimed: objectives,
        mine: HashSet::new(),
        counts: Counts::default(),
    };
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut dirty = false;
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                biased;
                _ = &mut stopped => break,
                ev = events.next() => match ev {
                    Some(Event::Run(ev)) => dirty |= t.apply(&ev),
                    // A lag marker: the counts may come up short; the stream goes on.
                    Some(_) => {}
                    None => break,
                },
                _ = tick.tick() => {
                    if std::mem::take(&mut dirty) {
                        notify(&peer, &token, &t.counts, t.expected).await;
                    }
                }
            }
        }
        // The call is over: take what was published before it ended, then say
        // where it stands (always at least once).
        while let Some(Some(ev)) = events.next().now_or_never() {
            if let Event::Run(ev) = ev {
                dirty |= t.apply(&ev);
            }
        }
        if dirty || t.counts.moments == 0 {
            t.counts.moments = t.counts.moments.max(1);
            notify(&peer, &token, &t.counts, t.expected).await;
        }
    });
    Watch {
        stop: Some(stop),
        task,
    }
}

async fn notify(peer: &Peer<RoleServer>, token: &ProgressToken, counts: &Counts, expected: usize) {
    let param = ProgressNotificationParam::new(token.clone(), counts.moments as f64)
        .with_message(counts.message(expected));
    // A host that went away is not an error of the call.
    let _ = peer.notify_progress(param).await;
}

impl Watch {
    /// Send the last figures (if anything changed since the last notification) and
    /// stop; returns once that notification is sent, so it precedes the result.
    pub async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}
