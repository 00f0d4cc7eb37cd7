//! The full-screen chat's state: the conversation, every run's transcript, the
//! agent tree (the chat's own, fed from the session's events), the prompt
//! editor, the turn in flight and the approvals waiting for an answer.

use super::input::Input;
use super::transcript::Transcripts;
use crate::chat::approve::Asking;
use crate::chat::{Chat, Resumed};
use brood::events::{Event, RunEventKind};
use brood::runtime::session::{RunReport, SessionError};
use std::collections::VecDeque;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One thing in the conversation pane.
#[derive(Debug)]
pub enum Item {
    /// What the user sent (a prompt or a command).
    User(String),
    /// A parent turn: its root run's transcript.
    Run(String),
    /// A command's output.
    Info(Vec<String>),
    /// Something that went wrong, in one line.
    Error(String),
}

/// The parent's turn in flight — a root run on its own task, or a run `/resume ID`
/// continues — so the screen and the commands stay live while it works.
pub struct Turn {
    pub token: CancellationToken,
    pub handle: JoinHandle<TurnEnd>,
    /// Esc was pressed.
    pub interrupted: bool,
}

/// How a turn's task ended.
pub enum TurnEnd {
    /// A prompt's root run.
    Prompt(Result<RunReport, SessionError>),
    /// A `/resume ID`.
    Resume(Result<Resumed, String>),
}

pub struct App {
    pub chat: Chat,
    pub input: Input,
    pub transcripts: Transcripts,
    pub items: Vec<Item>,
    /// The child whose transcript is shown instead of the conversation.
    pub selected: Option<String>,
    /// Tool calls shown with their arguments and output.
    pub expanded: bool,
    /// Lines scrolled back from the bottom of the shown pane.
    pub scroll: u16,
    pub turn: Option<Turn>,
    pub approvals: VecDeque<Asking>,
    /// Typing the reason for a denial (what the model will read).
    pub deny_reason: Option<String>,
    /// One `Ctrl-C` seen: the next one quits.
    pub quit_armed: bool,
    /// Leave the loop (after cancelling and recording every run).
    pub quit: bool,
    /// A one-line hint for the status line (cleared by the next key).
    pub notice: Option<String>,
    /// Tokens of the turn in flight (its whole tree), from usage events.
    pub live_tokens: (u64, u64),
}

impl App {
    pub fn new(chat: Chat) -> App {
        App {
            chat,
            input: Input::default(),
            transcripts: Transcripts::default(),
            items: Vec::new(),
            selected: None,
            expanded: false,
            scroll: 0,
            turn: None,
            approvals: VecDeque::new(),
            deny_reason: None,
            quit_armed: false,
            quit: false,
            notice: None,
            live_tokens: (0, 0),
        }
    }

    /// Take one event of the session's stream.
    pub fn apply(&mut self, event: &Event) {
        self.chat.tree.apply(event);
        let Event::Run(ev) = event else { return };
        match &ev.kind {
            RunEventKind::Spawned { .. } if ev.parent_id.is_none() => {
                self.items.push(Item::Run(ev.run_id.clone()));
            }
            RunEventKind::Usage {
                input_tokens,
                output_tokens,
                ..
            } if self.turn.is_some() => {
                self.live_tokens.0 += input_tokens;
                self.live_tokens.1 += output_tokens;
            }
            _ => {}
        }
        self.transcripts.apply(ev);
    }

    /// Start a parent turn on `prompt`, continuing the conversation.
    pub fn start_turn(&mut self, prompt: String) {
        let token = CancellationToken::new();
        let session = self.chat.session.clone();
        let history = self.chat.history.clone();
        let (t, p) = (token.clone(), prompt.clone());
        let handle = tokio::spawn(async move {
            TurnEnd::Prompt(session.run_continuing(history, &p, None, t).await)
        });
        self.items.push(Item::User(prompt));
        self.begin(token, handle);
    }

    /// `/resume ID`: continue the run on its own task, as a turn (Esc interrupts
    /// it, Ctrl-C twice cancels it with everything else).
    pub fn start_resume(&mut self, id: String) {
        let token = CancellationToken::new();
        let (session, t) = (self.chat.session.clone(), token.clone());
        let handle =
            tokio::spawn(
                async move { TurnEnd::Resume(crate::chat::resume_in(session, id, t).await) },
            );
        self.begin(token, handle);
    }

    fn begin(&mut self, token: CancellationToken, handle: JoinHandle<TurnEnd>) {
        self.selected = None;
        self.scroll = 0;
        self.live_tokens = (0, 0);
        self.turn = Some(Turn {
            token,
            handle,
            interrupted: false,
        });
    }

    /// `Esc`: stop the parent's turn; its `task` children stop with it, children
    /// opened with `agent_open` keep running (they belong to the session).
    pub fn interrupt(&mut self) {
        if let Some(turn) = &mut self.turn {
            turn.token.cancel();
            turn.interrupted = true;
            self.notice = Some("interrupting the turn…".into());
        }
    }

    /// The turn's task ended.
    pub fn turn_ended(&mut self, result: Result<TurnEnd, String>) {
        let interrupted = self.turn.take().is_some_and(|t| t.interrupted);
        self.live_tokens = (0, 0);
        self.notice = None;
        let result = match result {
            Ok(TurnEnd::Prompt(r)) => Ok(r),
            Ok(TurnEnd::Resume(r)) => return self.resume_ended(r),
            Err(e) => Err(e),
        };
        match result {
            Ok(Ok(report)) => {
                self.chat.usage.add(&report.usage);
                if !report.messages.is_empty() {
                    self.chat.history = report.messages.clone();
                }
                self.transcripts
                    .answer_if_silent(&report.run_id, &report.final_text);
                if let Some(e) = &report.error {
                    let what = if interrupted {
                        "interrupted (Esc)".to_string()
                    } else {
                        e.to_string()
                    };
                    self.items.push(Item::Error(format!("turn ended: {what}")));
                }
            }
            Ok(Err(e)) => self.items.push(Item::Error(e.to_string())),
            Err(e) => self
                .items
                .push(Item::Error(format!("the turn's task failed: {e}"))),
        }
    }

    /// A `/resume ID` ended: how, in the conversation (a root's answer is its
    /// transcript, shown live; a child's is printed here).
    fn resume_ended(&mut self, result: Result<Resumed, String>) {
        let resumed = match result {
            Ok(r) => r,
            Err(e) => return self.items.push(Item::Error(e)),
        };
        let mut lines = self.chat.resumed(&resumed);
        let report = &resumed.report;
        if resumed.is_root {
            self.transcripts
                .answer_if_silent(&report.run_id, &report.final_text);
        } else {
            lines.extend(report.final_text.lines().map(str::to_string));
        }
        self.items.push(Item::Info(lines));
    }

    /// A run asks for an approval: queue it, and show its agent as needing input.
    pub fn ask(&mut self, asking: Asking) {
        self.chat.tree.mark_waiting(&asking.request.run_id, true);
        self.approvals.push_back(asking);
    }

    /// Answer the approval shown (the first queued).
    pub fn answer(&mut self, approval: brood::Approval) {
        self.deny_reason = None;
        let Some(asking) = self.approvals.pop_front() else {
            return;
        };
        let mut answered = vec![asking.request.run_id.clone()];
        // Allowed for the session: the queued questions of the same rule (or the
        // same marked tool) are answered with it.
        if approval == brood::Approval::AllowForSession {
            let key = |r: &brood::ApprovalRequest| match &r.rule {
                Some((rule, _)) => format!("rule:{rule}"),
                None => format!("tool:{}", r.tool),
            };
            let same = key(&asking.request);
            let (covered, rest): (Vec<Asking>, Vec<Asking>) = std::mem::take(&mut self.approvals)
                .into_iter()
                .partition(|a| key(&a.request) == same);
            self.approvals = rest.into();
            for a in covered {
                answered.push(a.request.run_id.clone());
                a.answer(brood::Approval::AllowOnce);
            }
        }
        asking.answer(approval);
        for run in answered {
            if !self.approvals.iter().any(|a| a.request.run_id == run) {
                self.chat.tree.mark_waiting(&run, false);
            }
        }
    }

    /// The children in the order the tree pane lists them.
    pub fn tree_order(&self) -> Vec<String> {
        self.chat
            .tree
            .grouped()
            .into_iter()
            .flat_map(|(_, g)| g.into_iter().map(|(id, _, _)| id.to_string()))
            .collect()
    }

    /// Select the next (`forward`) or previous child; past either end, the
    /// conversation.
    pub fn select(&mut self, forward: bool) {
        let order = self.tree_order();
        let at = self
            .selected
            .as_ref()
            .and_then(|s| order.iter().position(|id| id == s));
        let next = match (at, forward) {
            (None, true) => order.first(),
            (None, false) => order.last(),
            (Some(i), true) => order.get(i + 1),
            (Some(0), false) => None,
            (Some(i), false) => order.get(i - 1),
        };
        self.selected = next.cloned();
        self.scroll = 0;
    }

    /// `/clear`: a new conversation on screen too.
    pub fn clear(&mut self) {
        self.items.clear();
        self.transcripts.clear();
        self.selected = None;
        self.scroll = 0;
    }

    /// Session tokens: finished turns plus the one in flight (input, output).
    pub fn tokens(&self) -> (u64, u64) {
        let u = &self.chat.usage;
        (
            u.input_tokens + self.live_tokens.0,
            u.output_tokens + self.live_tokens.1,
        )
    }
}
