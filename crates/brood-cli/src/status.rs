//! The live status line of `brood run` in a terminal: children done/total, how
//! many are running, the tree's tokens and cost so far, redrawn on stderr at least
//! once a second (`indicatif`, which also keeps the line below the tool lines).
//! None with `--json`, `--quiet` or when stderr is not a terminal; at the end, one
//! line with the tree's usage and cost.

use brood::runtime::Session;
use brood::subagent::tally::Tally;
use brood::subagent::LiveStatus;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// How often the line is redrawn.
pub const REFRESH: Duration = Duration::from_millis(250);

/// The status line of one run (a handle; clones draw the same line).
#[derive(Clone)]
pub struct StatusLine {
    bar: ProgressBar,
}

impl StatusLine {
    /// A status line on stderr, if it is a terminal and the output is not
    /// `--json`/`--quiet`.
    pub fn start(json: bool, quiet: bool) -> Option<StatusLine> {
        if json || quiet || !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message("starting");
        bar.tick();
        Some(StatusLine { bar })
    }

    /// Redraw from the session's runs and the tree's usage so far.
    pub fn update(&self, session: &Session) {
        let (mut total, mut done, mut running) = (0, 0, 0);
        for run in session.supervisor().snapshot() {
            if run.parent_id.is_none() {
                continue;
            }
            total += 1;
            if run.status.is_terminal() {
                done += 1;
            } else if run.status == LiveStatus::Running {
                running += 1;
            }
        }
        let usage = session.live_usage().unwrap_or_default();
        self.bar.set_message(format!(
            "children {done}/{total} done, {running} running · {} · {}",
            tokens(&usage),
            cost(&usage)
        ));
        self.bar.tick();
    }

    /// Run `f` (which writes to the terminal) with the line cleared meanwhile.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Clear the line and print the final one-line summary of the tree (when the
    /// run reported one).
    pub fn finish(&self, usage: Option<&Tally>) {
        self.bar.finish_and_clear();
        if let Some(u) = usage {
            crate::out::stderr_line(format_args!("brood: {}", summary(u)));
        }
    }
}

/// `12.3k tokens` (input + output).
fn tokens(u: &Tally) -> String {
    let n = u.usage.input_tokens.saturating_add(u.usage.output_tokens);
    match n {
        0..=9_999 => format!("{n} tokens"),
        10_000..=9_999_999 => format!("{:.1}k tokens", n as f64 / 1e3),
        _ => format!("{:.1}M tokens", n as f64 / 1e6),
    }
}

/// `$0.0123`, or `cost unknown` when some answer had no price.
fn cost(u: &Tally) -> String {
    match u.cost_usd {
        Some(c) => format!("${c:.4}"),
        None => "cost unknown (no [pricing])".into(),
    }
}

/// The final line: requests, tokens (cached among the input), cost.
pub fn summary(u: &Tally) -> String {
    format!(
        "tree used {} requests, {} input tokens ({} cached), {} output tokens, {}",
        u.requests,
        u.usage.input_tokens,
        u.usage.cached_input_tokens,
        u.usage.output_tokens,
        match u.cost_usd {
            Some(c) => format!("${c:.4}"),
            None => "cost unknown (no [pricing] for its model)".into(),
        }
    )
}
