//! The full-screen `brood chat` (stdin and stdout are terminals): one event loop
//! over the keyboard, the session's live events, approval requests, the turn in
//! flight, signals and a clock tick; the screen is redrawn after each. The same
//! [`Chat`] and slash commands as plain mode; a turn runs on its own task so the
//! screen, the tree and read-only commands stay live while it works.

mod app;
mod input;
mod keys;
mod render;
mod terminal;
mod transcript;

use super::approve;
use super::slash::{self, Slash};
use super::Chat;
use crate::signals;
use app::{App, Item};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// How often the screen is redrawn with nothing happening (elapsed times move).
const TICK: Duration = Duration::from_millis(500);

/// Open the chat's session and run the full-screen UI until the user quits.
pub async fn run(args: &crate::SessionArgs, resume: Option<&str>) -> u8 {
    let (approver, mut asks) = approve::channel();
    let mut chat = match Chat::open(args, Some(Arc::new(approver))).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(session) = resume {
        if let Err(e) = chat.resume_session(session).await {
            errln!("brood: {e}");
            chat.close("the chat could not resume").await;
            return 1;
        }
    }
    let mut screen = match terminal::Screen::enter() {
        Ok(s) => s,
        Err(e) => {
            errln!("brood: cannot use the terminal for the full-screen chat: {e} (use `brood chat < prompts.txt` for plain mode)");
            chat.close("the chat could not start").await;
            return 1;
        }
    };
    let mut app = App::new(chat);
    for w in app.chat.startup_notes() {
        app.items.push(Item::Error(w));
    }
    let mut keyboard = crossterm::event::EventStream::new();
    let mut events = app.chat.session.events();
    let mut signals = signals::Signals::install().ok();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // Why the chat ends other than by the user's quitting, and its exit code.
    let mut failure: Option<(String, u8)> = None;
    while !app.quit {
        if let Err(e) = screen.draw(|f| render::draw(f, &app)) {
            failure = Some((format!("cannot draw the chat: {e}"), 1));
            break;
        }
        tokio::select! {
            key = keyboard.next() => match key {
                Some(Ok(ev)) => match keys::on_event(&mut app, ev) {
                    keys::Action::Submit(text) => submit(&mut app, text, &mut events).await,
                    keys::Action::Quit => app.quit = true,
                    keys::Action::Nothing => {}
                },
                Some(Err(e)) => failure = Some((format!("cannot read the terminal: {e}"), 1)),
                None => failure = Some(("the terminal closed".into(), 1)),
            },
            Some(ev) = events.next() => {
                app.apply(&ev);
                // Take what else arrived before redrawing (streamed text comes in
                // many small events).
                while let Some(Some(ev)) = futures::FutureExt::now_or_never(events.next()) {
                    app.apply(&ev);
                }
            }
            Some(asking) = asks.recv() => app.ask(asking),
            result = turn_end(&mut app) => app.turn_ended(result),
            sig = signals::next(&mut signals) => {
                // SIGTERM, SIGHUP (the terminal went away), SIGINT from outside:
                // leave as /quit does, with the shell's code for the signal.
                failure = Some((format!("{} received; left the chat", sig.name()), sig.exit_code()));
            }
            _ = tick.tick() => {}
        }
        if failure.is_some() {
            break;
        }
    }
    let _ = screen.draw(|f| {
        app.notice = Some("leaving: cancelling and recording every run…".into());
        render::draw(f, &app)
    });
    leave(app).await;
    screen.leave();
    match failure {
        Some((why, code)) => {
            errln!("brood: {why}");
            code
        }
        None => 0,
    }
}

/// The turn's end; pending while no turn runs.
async fn turn_end(app: &mut App) -> Result<app::TurnEnd, String> {
    match &mut app.turn {
        Some(turn) => (&mut turn.handle).await.map_err(|e| e.to_string()),
        None => std::future::pending().await,
    }
}

/// Send what was typed: a slash command, or a prompt that starts a turn.
async fn submit(app: &mut App, text: String, events: &mut brood::EventStream) {
    let line = text.trim();
    if line.is_empty() {
        return;
    }
    if !line.starts_with('/') {
        if app.turn.is_some() {
            // Kept in the editor, to send when the turn ends.
            app.input.set(&text);
            app.notice = Some("a turn is running: wait for it, or Esc to interrupt it".into());
            return;
        }
        app.start_turn(line.to_string());
        return;
    }
    app.items.push(Item::User(line.to_string()));
    app.scroll = 0;
    let cmd = match slash::parse(line) {
        Ok(c) => c,
        Err(e) => return app.items.push(Item::Error(e)),
    };
    let reopens = matches!(
        cmd,
        Slash::Model(Some(_)) | Slash::ModelSubagent { .. } | Slash::Clear
    );
    if reopens && app.turn.is_some() {
        return app.items.push(Item::Error(format!(
            "a turn is running: wait for it to end (or Esc to interrupt it), then {line}"
        )));
    }
    match cmd {
        Slash::Quit => app.quit = true,
        Slash::Resume(Some(id)) => {
            if app.turn.is_some() {
                return app.items.push(Item::Error(format!(
                    "a turn is running: wait for it to end (or Esc to interrupt it), then {line}"
                )));
            }
            app.items.push(Item::Info(vec![format!(
                "resuming run {id}… (Esc interrupts it; the tree shows it live)"
            )]));
            app.start_resume(id);
        }
        Slash::Help => {
            let mut lines = app.chat.help();
            lines.push("keys:".into());
            lines.extend(
                keys::HELP
                    .iter()
                    .map(|(k, what)| format!("  {k:<28} {what}")),
            );
            app.items.push(Item::Info(lines));
        }
        cmd => {
            let before = app.chat.session.clone();
            let clear = cmd == Slash::Clear;
            let agents = cmd == Slash::Agents;
            match app.chat.command(cmd).await {
                Ok(mut lines) => {
                    if clear {
                        app.clear();
                    }
                    if agents && !app.chat.tree.is_empty() {
                        lines.push("Ctrl-N / Ctrl-P select an agent to see its transcript".into());
                    }
                    app.items.push(Item::Info(lines));
                }
                Err(e) => app.items.push(Item::Error(e)),
            }
            // A command that opened a new session: listen to it.
            if !Arc::ptr_eq(&before, &app.chat.session) {
                *events = app.chat.session.events();
            }
        }
    }
}

/// Quit: refuse what waits for an answer, cancel every run (the turn's and the
/// background children), wait for the turn to settle, close the session (every
/// end recorded).
async fn leave(mut app: App) {
    while !app.approvals.is_empty() {
        app.answer(brood::Approval::Deny {
            reason: "the chat is ending".into(),
        });
    }
    app.chat.session.cancel_all("the chat user quit");
    if let Some(turn) = app.turn.take() {
        turn.token.cancel();
        let _ = turn.handle.await;
    }
    app.chat.close("the chat ended").await;
}
