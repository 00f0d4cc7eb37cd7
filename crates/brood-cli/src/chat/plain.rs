//! Plain mode of `brood chat`: prompts and slash commands line by line from
//! stdin (a line ending in `\` continues on the next), the answer streamed to
//! stdout, tool and agent lines on stderr; `--json` prints every live event and
//! each prompt's report as JSON lines instead. Used whenever stdin or stdout is
//! not a terminal, so a chat can be scripted and tested. With stdin a terminal,
//! an `ask` rule's question is asked there (y / s / n with a reason) between the
//! lines; without one, such calls are refused naming the rule.

use super::approve::{self, Asking};
use super::slash::{self, Slash};
use super::tree::{self, Change};
use super::Chat;
use crate::{render, signals};
use futures::StreamExt;
use std::io::IsTerminal;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

/// Prompts read from stdin, line by line.
type Lines = tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>;
/// The questions of the chat's approver (stdin is a terminal).
type Asks = Option<tokio::sync::mpsc::UnboundedReceiver<Asking>>;

pub async fn run(mut chat: Chat, json: bool, mut asks: Asks) -> u8 {
    for n in chat.startup_notes() {
        errln!("brood: {n}");
    }
    let interactive = std::io::stdin().is_terminal();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut signals = signals::Signals::install().ok();
    let mut events = chat.session.events();
    if interactive {
        errln!("brood chat: type a prompt, /help for commands, /quit to leave");
    }
    'chat: loop {
        // One input: a line, or several joined by a trailing `\`.
        let mut input = String::new();
        if interactive {
            crate::out::stderr_bytes(b"> ");
        }
        let line = loop {
            tokio::select! {
                l = lines.next_line() => match l {
                    Ok(Some(l)) => match l.strip_suffix('\\') {
                        Some(part) => {
                            input.push_str(part);
                            input.push('\n');
                        }
                        None => {
                            input.push_str(&l);
                            break input;
                        }
                    },
                    // End of input (or an unreadable stdin) is /quit.
                    Ok(None) | Err(_) => break 'chat,
                },
                Some(ev) = events.next() => show_event(&mut chat.tree, &ev, json),
                sig = signals::next(&mut signals) => {
                    errln!("brood: {} received; leaving the chat", sig.name());
                    break 'chat;
                }
            }
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('/') {
            match slash::parse(line) {
                Ok(Slash::Quit) => break,
                Ok(cmd) => match chat.command(cmd).await {
                    Ok(out) => out.iter().for_each(|l| outln!("{l}")),
                    Err(e) => errln!("brood: {e}"),
                },
                Err(e) => errln!("brood: {e}"),
            }
            // A command may have reopened the session: listen to the new one.
            events = chat.session.events();
            continue;
        }
        let mut io = Io {
            events: &mut events,
            signals: &mut signals,
            lines: &mut lines,
            asks: &mut asks,
        };
        prompt(&mut chat, line, json, &mut io).await;
    }
    finish(chat).await
}

/// Run one prompt as the next turn of the parent's conversation. A signal
/// interrupts the turn (its children are cancelled and recorded); a second one
/// exits at once.
async fn prompt(chat: &mut Chat, line: &str, json: bool, io: &mut Io<'_>) {
    let Io {
        events,
        signals,
        lines,
        asks,
    } = io;
    let turn = CancellationToken::new();
    let printer = render::Printer::new(!json, false, None);
    let history = chat.history.clone();
    let mut interrupted = false;
    let result = {
        let run = chat
            .session
            .run_continuing(history, line, Some(printer.sink()), turn.clone());
        tokio::pin!(run);
        loop {
            tokio::select! {
                r = &mut run => break r,
                Some(ev) = events.next() => {
                    show_event(&mut chat.tree, &ev, json);
                }
                Some(asking) = next_ask(asks) => {
                    // Printed before the question: what led to it.
                    while let Some(Some(ev)) = futures::FutureExt::now_or_never(events.next()) {
                        show_event(&mut chat.tree, &ev, json);
                    }
                    let who = chat.tree.get(&asking.request.run_id).map_or_else(
                        || asking.request.run_id.clone(),
                        |n| n.name.clone(),
                    );
                    for l in approve::question(&asking.request, &who) {
                        errln!("{l}");
                    }
                    crate::out::stderr_bytes(approve::ANSWERS.as_bytes());
                    let answer = tokio::select! {
                        l = lines.next_line() => match l {
                            Ok(Some(l)) => approve::ask_line(&l),
                            _ => brood::Approval::Deny {
                                reason: "the chat's input ended before the user answered".into(),
                            },
                        },
                        sig = signals::next(signals) => {
                            errln!("brood: {} received; interrupting this turn (again to exit)", sig.name());
                            chat.session.cancel_all(&format!("the chat user interrupted ({})", sig.name()));
                            turn.cancel();
                            interrupted = true;
                            brood::Approval::Deny { reason: "the chat user interrupted".into() }
                        }
                    };
                    asking.answer(answer);
                }
                sig = signals::next(signals) => {
                    if interrupted {
                        crate::exit_now(sig, chat.session.ledger(), signals).await;
                    }
                    errln!("brood: {} received; interrupting this turn (again to exit)", sig.name());
                    chat.session.cancel_all(&format!("the chat user interrupted ({})", sig.name()));
                    turn.cancel();
                    interrupted = true;
                }
            }
        }
    };
    while let Some(Some(ev)) = futures::FutureExt::now_or_never(events.next()) {
        show_event(&mut chat.tree, &ev, json);
    }
    match result {
        Ok(report) => {
            chat.usage.add(&report.usage);
            if !report.messages.is_empty() {
                chat.history = report.messages.clone();
            }
            if json {
                outln!("{}", serde_json::json!({"report": report}));
            } else {
                printer.finish(&report.final_text);
            }
            if let Some(e) = &report.error {
                errln!("brood: run {} ended: {e}", report.run_id);
            }
        }
        Err(e) => errln!("brood: {e}"),
    }
}

/// What a turn reads besides its run: the session's events, signals, the
/// terminal's lines (answers) and the approver's questions.
struct Io<'a> {
    events: &'a mut brood::EventStream,
    signals: &'a mut Option<signals::Signals>,
    lines: &'a mut Lines,
    asks: &'a mut Asks,
}

/// The approver's next question; pending when there is no approver.
async fn next_ask(asks: &mut Asks) -> Option<Asking> {
    match asks {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Feed the tree; print the event (`--json`) or a child's start and end (text).
fn show_event(tree: &mut tree::AgentTree, ev: &brood::Event, json: bool) {
    if json {
        outln!("{}", tree::event_json(ev));
    }
    let change = tree.apply(ev);
    if json {
        return;
    }
    match change {
        Change::Started(n) if n.parent.is_some() => {
            errln!("  [agent] {} [{} · {}] started", n.name, n.role, n.model)
        }
        Change::Ended(n) if n.parent.is_some() => errln!("  [agent] {}", tree::describe(n)),
        _ => {}
    }
}

/// Leave: cancel what still runs (background children), record it, close.
async fn finish(chat: Chat) -> u8 {
    chat.close("the chat ended").await;
    0
}
