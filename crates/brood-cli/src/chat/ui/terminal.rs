//! The terminal while the full-screen chat runs: raw mode, the alternate screen
//! and bracketed paste on entry, and always restored on the way out — when the
//! chat ends, on an error, and on a panic (the hook restores it before the panic
//! message prints, so the message is readable).

use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, BeginSynchronizedUpdate, EndSynchronizedUpdate,
    EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute};
use ratatui::backend::CrosstermBackend;
use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub type Term = ratatui::Terminal<CrosstermBackend<Stdout>>;

/// The terminal in full-screen mode; dropping it restores the terminal.
pub struct Screen {
    term: Term,
    /// Full-screen mode is on (the panic hook restores only then).
    active: Arc<AtomicBool>,
}

/// Put the terminal back as the shell had it. Safe to call more than once.
fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(
        io::stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
}

impl Screen {
    pub fn enter() -> io::Result<Screen> {
        // A panic anywhere restores the terminal first, then reports as before.
        let active = Arc::new(AtomicBool::new(true));
        let on = active.clone();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if on.swap(false, Ordering::SeqCst) {
                restore();
            }
            previous(info);
        }));
        let entered = enable_raw_mode()
            .and_then(|()| execute!(io::stdout(), EnterAlternateScreen, EnableBracketedPaste))
            .and_then(|()| ratatui::Terminal::new(CrosstermBackend::new(io::stdout())));
        match entered {
            Ok(term) => Ok(Screen { term, active }),
            Err(e) => {
                active.store(false, Ordering::SeqCst);
                restore();
                Err(e)
            }
        }
    }

    /// Draw one frame as a synchronized update: a terminal that knows the mode
    /// shows it whole (no tearing), and a reader of the output (the tests) can
    /// tell where a frame ends.
    pub fn draw(&mut self, frame: impl FnOnce(&mut ratatui::Frame)) -> io::Result<()> {
        execute!(io::stdout(), BeginSynchronizedUpdate)?;
        let drawn = self.term.draw(frame).map(|_| ());
        execute!(io::stdout(), EndSynchronizedUpdate)?;
        drawn
    }

    /// Leave full-screen mode now (also done on drop).
    pub fn leave(&mut self) {
        if self.active.swap(false, Ordering::SeqCst) {
            restore();
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        // The panic hook stays, inactive: it calls the one that was there before.
        self.leave();
    }
}
