//! What every example shares: its command line and the session it opens.
//!
//! `--workspace DIR` (default: the current directory), `--base-url URL`,
//! `--model NAME`, `--api-key-env VAR`, `--provider NAME` — like `brood run`. With
//! none of them the session uses DeepSeek (`DEEPSEEK_API_KEY`), as the command does.

use std::path::PathBuf;

/// The parsed command line.
pub struct Args {
    pub workspace: PathBuf,
    pub overrides: brood::Overrides,
}

/// Parse `std::env::args()`; print usage and exit 2 on anything unknown.
pub fn args() -> Args {
    let mut workspace = PathBuf::from(".");
    let mut overrides = brood::Overrides::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--workspace" => workspace = PathBuf::from(value()),
            "--base-url" => overrides.base_url = Some(value()),
            "--model" => overrides.model = Some(value()),
            "--api-key-env" => overrides.api_key_env = Some(value()),
            "--provider" => overrides.provider = Some(value()),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    Args {
        workspace,
        overrides,
    }
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("error: {problem}");
    }
    eprintln!(
        "usage: {} [--workspace DIR] [--base-url URL] [--model NAME] [--api-key-env VAR] [--provider NAME]",
        std::env::args().next().unwrap_or_default()
    );
    std::process::exit(if problem.is_empty() { 0 } else { 2 })
}

/// A session builder on the workspace, with the flags and the process environment
/// (API keys) applied.
pub fn builder(args: &Args) -> brood::SessionBuilder {
    brood::Session::builder(&args.workspace)
        .overrides(args.overrides.clone())
        .env(std::env::vars())
}
