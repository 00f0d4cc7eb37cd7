//! What each key does in the full-screen chat. Editing keys change the prompt
//! editor; the rest become [`Action`]s for the event loop.

use super::app::App;
use brood::Approval;
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// The keys, as `/help` lists them in the UI.
pub const HELP: &[(&str, &str)] = &[
    ("Enter", "send the prompt or command"),
    ("Alt-Enter, Ctrl-J, \\ Enter", "a new line in the prompt"),
    (
        "Up / Down",
        "move between lines; past the first or last, the prompt history",
    ),
    ("Tab", "complete a /command"),
    (
        "Ctrl-N / Ctrl-P",
        "select the next / previous agent in the tree (its transcript, live)",
    ),
    ("Ctrl-O", "expand or collapse tool calls"),
    ("PageUp / PageDown", "scroll the conversation or transcript"),
    (
        "Esc",
        "interrupt the parent's turn (agent_open children keep running) or a /resume; back to the conversation",
    ),
    ("Ctrl-C twice", "quit: cancel and record every run"),
];

/// What the event loop does after a key.
pub enum Action {
    Nothing,
    /// Send this text (a prompt or a `/command`).
    Submit(String),
    /// Leave the chat.
    Quit,
}

/// Handle one terminal event.
pub fn on_event(app: &mut App, event: Event) -> Action {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => on_key(app, key),
        Event::Paste(text) => {
            if let Some(reason) = &mut app.deny_reason {
                reason.push_str(&text.replace(['\n', '\r'], " "));
            } else {
                app.input.paste(&text);
            }
            Action::Nothing
        }
        _ => Action::Nothing,
    }
}

fn on_key(app: &mut App, key: KeyEvent) -> Action {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    if ctrl && key.code == KeyCode::Char('c') {
        if app.quit_armed {
            return Action::Quit;
        }
        app.quit_armed = true;
        app.notice = Some("Ctrl-C again to quit (every run is cancelled and recorded)".into());
        return Action::Nothing;
    }
    app.quit_armed = false;
    app.notice = None;
    if !app.approvals.is_empty() {
        approval_key(app, key);
        return Action::Nothing;
    }
    match key.code {
        KeyCode::Enter if alt => app.input.newline(),
        KeyCode::Char('j') if ctrl => app.input.newline(),
        KeyCode::Enter => {
            let text = app.input.text();
            if let Some(kept) = text.strip_suffix('\\') {
                // A trailing `\` continues on the next line, as in plain mode.
                app.input.set(kept);
                app.input.newline();
            } else {
                return Action::Submit(app.input.take());
            }
        }
        KeyCode::Char('d') if ctrl && app.input.is_empty() => return Action::Quit,
        KeyCode::Char('n') if ctrl => app.select(true),
        KeyCode::Char('p') if ctrl => app.select(false),
        KeyCode::Char('o') if ctrl => app.expanded = !app.expanded,
        KeyCode::Char('a') if ctrl => app.input.home(),
        KeyCode::Char('e') if ctrl => app.input.end(),
        KeyCode::Char('u') if ctrl => app.input.delete_to_start(),
        KeyCode::Char('w') if ctrl => app.input.delete_word(),
        KeyCode::Char('l') if ctrl => {}
        KeyCode::Char(c) if !ctrl => app.input.insert(c),
        KeyCode::Tab => app.input.complete(),
        KeyCode::Backspace => app.input.backspace(),
        KeyCode::Delete => app.input.delete(),
        KeyCode::Left => app.input.left(),
        KeyCode::Right => app.input.right(),
        KeyCode::Home => app.input.home(),
        KeyCode::End => app.input.end(),
        KeyCode::Up => app.input.up(),
        KeyCode::Down => app.input.down(),
        KeyCode::PageUp => app.scroll = app.scroll.saturating_add(10),
        KeyCode::PageDown => app.scroll = app.scroll.saturating_sub(10),
        KeyCode::Esc if app.turn.is_some() => app.interrupt(),
        KeyCode::Esc => {
            app.selected = None;
            app.scroll = 0;
        }
        _ => {}
    }
    Action::Nothing
}

/// Keys while an approval is shown: `a` allow once, `s` for the session, `d`
/// deny (then the reason, `Enter`).
fn approval_key(app: &mut App, key: KeyEvent) {
    if let Some(reason) = &mut app.deny_reason {
        match key.code {
            KeyCode::Enter => {
                let reason = reason.trim();
                let reason = if reason.is_empty() {
                    "the user denied this call".to_string()
                } else {
                    format!("the user denied this call: {reason}")
                };
                app.answer(Approval::Deny { reason });
            }
            KeyCode::Esc => app.deny_reason = None,
            KeyCode::Backspace => {
                reason.pop();
            }
            KeyCode::Char(c) => reason.push(c),
            _ => {}
        }
        return;
    }
    match key.code {
        KeyCode::Char('a' | 'y') => app.answer(Approval::AllowOnce),
        KeyCode::Char('s') => app.answer(Approval::AllowForSession),
        KeyCode::Char('d' | 'n') => app.deny_reason = Some(String::new()),
        _ => {}
    }
}
