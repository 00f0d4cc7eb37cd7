//! `brood agents …`: inspect and manage the runs recorded in a workspace's ledger.
//!
//! Reading commands (`list`, `show`, `transcript`, `export`) open the ledger
//! read-only and register no boot, so they never mark anything; `cancel` and `prune`
//! write one short transaction each; `merge`, `close --discard` and `prune` act on
//! isolated runs' git worktrees (`crate::worktrees`). Exit codes: 0 ok, 1 failure, 2 usage error.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use brood::ledger::{
    CancelOutcome, LedgerError, LedgerReader, ListFilter, RunDetail, RunRecord, RunStatus,
    RunSummaries, RunSummary, TranscriptSlice,
};
use brood::model::pricing::Pricing;
use brood::runtime::config::{user_pricing, ConfigPaths};
use chrono::{DateTime, Utc};
use clap::Subcommand;
use serde_json::Value;

use crate::table::Table;

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AgentsCmd {
    /// List runs: this session's by default (the live sessions, or the latest one).
    List {
        /// Include runs of earlier sessions (marked as prior).
        #[arg(long)]
        all: bool,
        /// Print JSON (an array of run records with `from_prior_session`).
        #[arg(long)]
        json: bool,
        /// Show parent/child nesting.
        #[arg(long)]
        tree: bool,
    },
    /// Show one run with its events. ID may be a unique prefix.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a slice of a run's transcript. ID may be a unique prefix.
    Transcript {
        id: String,
        /// First message (seq, from 0).
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Most messages to print.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print the slice as JSON.
        #[arg(long)]
        json: bool,
        /// Print the full text of capped messages (from their spill files).
        #[arg(long)]
        full: bool,
    },
    /// Continue an interrupted, cancelled or failed run under its own id: its
    /// transcript rebuilt from the ledger, its grant re-derived, its limits counting
    /// what it spent. Takes `run`'s provider flags; prints the result like `run`.
    Resume(crate::ResumeArgs),
    /// Cancel a run: its live session is asked to stop it; a run whose process is gone
    /// is marked cancelled.
    Cancel { id: String },
    /// Print every run with its events as JSON (schema "brood.runs.v1").
    Export {
        #[arg(long)]
        json: bool,
    },
    /// Check the agent definitions (workspace and user): source, tools, model and
    /// every problem with the files; exit 1 if there is one.
    Check,
    /// Remove orphaned worktrees (of runs killed before they settled them; their
    /// changes are kept on their branch); with `--older-than`, also delete runs
    /// (with events, transcripts and spill files) that finished before that age,
    /// e.g. `--older-than 7d` (units: s, m, h, d).
    Prune {
        #[arg(long, value_parser = parse_age)]
        older_than: Option<Duration>,
    },
    /// Merge an isolated run's branch `brood/ID` into the branch checked out where
    /// it was opened: a fast-forward, or a merge commit when git finds no conflict;
    /// conflicts are reported and nothing is changed. Its worktree is then removed.
    Merge {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Close an isolated run's worktree: `--discard` deletes it and its branch.
    Close {
        id: String,
        #[arg(long)]
        discard: bool,
    },
}

/// Run an `agents` subcommand against the ledger of `workspace`, printing to
/// stdout/stderr. Returns the process exit code.
pub async fn run(cmd: AgentsCmd, workspace: &Path) -> i32 {
    let workspace: PathBuf = workspace.to_path_buf();
    let joined = tokio::task::spawn_blocking(move || {
        let mut out = String::new();
        let mut err = String::new();
        let code = execute(&cmd, &workspace, &mut out, &mut err);
        (code, out, err)
    })
    .await;
    let (code, out, err) = match joined {
        Ok(v) => v,
        Err(e) => (
            1,
            String::new(),
            format!("brood agents: internal error: {e}\n"),
        ),
    };
    let _ = std::io::stderr().write_all(err.as_bytes());
    match std::io::stdout().write_all(out.as_bytes()) {
        Ok(()) => code,
        // `brood agents list | head` is fine.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(_) => 1,
    }
}

/// Parse an age such as `90s`, `30m`, `12h`, `7d`.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("invalid age '{text}': use a number and a unit, e.g. 90s, 30m, 12h, 7d");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(secs).map(Duration::from_secs).ok_or_else(bad)
}

/// Why a command failed.
#[derive(Debug)]
enum Failure {
    Ledger(LedgerError),
    /// A worktree command refused or failed (the message says why and what to do).
    Worktree(String),
    /// `cancel` of a run that already reached a terminal status.
    AlreadyFinished {
        run: String,
        status: RunStatus,
    },
}

impl From<LedgerError> for Failure {
    fn from(e: LedgerError) -> Self {
        Failure::Ledger(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Ledger(e) => e.fmt(f),
            Failure::Worktree(e) => f.write_str(e),
            Failure::AlreadyFinished { run, status } => {
                write!(
                    f,
                    "run {run} already finished ({status}); nothing to cancel"
                )
            }
        }
    }
}

/// The command, with output collected into `out` (stdout) and `err` (stderr).
fn execute(cmd: &AgentsCmd, ws: &Path, out: &mut String, err: &mut String) -> i32 {
    let result = match cmd {
        AgentsCmd::List { all, json, tree } => list(ws, *all, *json, *tree, out, err),
        AgentsCmd::Show { id, json } => show(ws, id, *json, out, err),
        AgentsCmd::Transcript {
            id,
            from,
            limit,
            json,
            full,
        } => transcript(ws, id, *from, *limit, *json, *full, out),
        AgentsCmd::Cancel { id } => cancel(ws, id, out),
        AgentsCmd::Check => return crate::agents_check::check(ws, out, err),
        AgentsCmd::Export { json } => {
            if !json {
                let _ = writeln!(
                    err,
                    "brood agents export: the export is JSON only; pass --json"
                );
                return 2;
            }
            export(ws, out)
        }
        // Opens a session: dispatched by main before it gets here.
        AgentsCmd::Resume(_) => {
            let _ = writeln!(err, "brood agents resume: not handled here");
            return 2;
        }
        AgentsCmd::Prune { older_than } => crate::worktrees::prune_orphans(ws, out)
            .map_err(Failure::Worktree)
            .and_then(|()| match older_than {
                Some(age) => prune(ws, *age, out),
                None => {
                    if out.is_empty() {
                        out.push_str("no orphaned worktrees; nothing to prune (pass --older-than AGE to delete old runs)\n");
                    }
                    Ok(())
                }
            }),
        AgentsCmd::Merge { id, json } => {
            crate::worktrees::merge(ws, id, *json, out).map_err(Failure::Worktree)
        }
        AgentsCmd::Close { id, discard } => {
            crate::worktrees::close(ws, id, *discard, out).map_err(Failure::Worktree)
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "brood agents: {e}");
            1
        }
    }
}

fn list(
    ws: &Path,
    all: bool,
    json: bool,
    tree: bool,
    out: &mut String,
    err: &mut String,
) -> Result<(), Failure> {
    let filter = ListFilter {
        include_archived: all,
    };
    let reader = match crate::ledger_at::reader(ws) {
        Ok(reader) => Some(reader),
        Err(LedgerError::Missing { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    if json {
        // Whole records (without results), as documented for `list --json`.
        let runs = match &reader {
            Some(reader) => reader.list_runs(filter)?,
            None => Vec::new(),
        };
        let pricing = pricing(ws, err);
        let mut v = serde_json::to_value(&runs).unwrap_or_default();
        if let Some(items) = v.as_array_mut() {
            for (item, run) in items.iter_mut().zip(&runs) {
                set_cost(item, &run.run, &pricing);
            }
        }
        out.push_str(&to_json(&v)?);
        out.push('\n');
        return Ok(());
    }
    // The table shows a few fields of each run: the narrow listing is enough.
    let runs = match &reader {
        Some(reader) => reader.list_summaries(filter)?,
        None => RunSummaries::default(),
    };
    if runs.is_empty() {
        out.push_str(if all {
            "no runs recorded in this workspace\n"
        } else {
            "no runs in the current session; `brood agents list --all` shows earlier sessions\n"
        });
        return Ok(());
    }
    render_list(&runs, all, tree, Utc::now(), out);
    Ok(())
}

/// The table of `brood agents list` (ages as of `now`), nested with `tree`, with a
/// SESSION column with `all`.
fn render_list(runs: &RunSummaries, all: bool, tree: bool, now: DateTime<Utc>, out: &mut String) {
    let mut header = vec!["ID", "NAME", "ROLE", "STATUS", "AGE", "STEPS", "TOKENS"];
    if all {
        header.push("SESSION");
    }
    let mut table = Table::new(&header, runs.len());
    let width = id_width(runs.iter().map(|r| r.id));
    let mut row = |indent: usize, r: RunSummary<'_>| {
        table.cell(short_id(r.id, width));
        table.cell_with(|cell| {
            if indent > 0 {
                for _ in 1..indent {
                    cell.push_str("  ");
                }
                cell.push_str("└ ");
            }
            match r.name.or(r.agent_type) {
                Some(name) => cell.push_str(name),
                None => cell.push_str(&clip(r.objective, NAME_CHARS)),
            }
        });
        table.cell(r.role.unwrap_or("-"));
        table.cell(r.status.as_str());
        table.cell_with(|cell| write_age(cell, r.created_at, now));
        table.cell_fmt(format_args!("{}", r.steps));
        table.cell_with(|cell| write_tokens(cell, r.input_tokens + r.output_tokens));
        if all {
            table.cell(if r.from_prior_session {
                "prior"
            } else {
                "current"
            });
        }
    };
    if tree {
        for (indent, i) in tree_order(runs) {
            if let Some(r) = runs.get(i) {
                row(indent, r);
            }
        }
    } else {
        for r in runs.iter() {
            row(0, r);
        }
    }
    table.render(out);
}

/// Depth-first order as (depth, index into `runs`): roots (runs whose parent is not
/// listed) oldest first, each followed by its children.
/// The user's prices; a config that cannot be read prices nothing (and says so).
fn pricing(ws: &Path, err: &mut String) -> Pricing {
    user_pricing(&ConfigPaths::from_env(ws)).unwrap_or_else(|e| {
        let _ = writeln!(err, "warning: no prices ({e}); cost_usd is null");
        Pricing::default()
    })
}

/// What a run cost: as the ledger recorded it (each answer priced when it was
/// recorded, so a later change of prices leaves it alone); for a run recorded
/// before costs were, its usage at today's prices (`None`: its model has none).
fn cost_of(r: &RunRecord, pricing: &Pricing) -> Cost {
    if r.cost_recorded {
        return Cost {
            usd: r.cost_usd,
            at_read: false,
        };
    }
    let usage = brood::model::Usage {
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        cached_input_tokens: r.cached_input_tokens,
    };
    let usd = (|| pricing.cost(r.provider.as_deref()?, r.model.as_deref()?, &usage))();
    Cost { usd, at_read: true }
}

/// A run's cost as shown, and whether it was priced now rather than recorded.
struct Cost {
    usd: Option<f64>,
    at_read: bool,
}

/// `cost_usd` on a run's JSON, and `cost_priced_at_read: true` when it is not the
/// recorded figure.
fn set_cost(item: &mut serde_json::Value, run: &RunRecord, pricing: &Pricing) {
    let cost = cost_of(run, pricing);
    item["cost_usd"] = cost.usd.into();
    if let Some(o) = item.as_object_mut() {
        o.remove("cost_recorded");
        if cost.at_read {
            o.insert("cost_priced_at_read".into(), true.into());
        }
    }
}

fn tree_order(runs: &RunSummaries) -> Vec<(usize, usize)> {
    let listed: HashSet<&str> = runs.iter().map(|r| r.id).collect();
    let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        match r.parent_id {
            Some(p) if listed.contains(p) => children.entry(p).or_default().push(i),
            _ => roots.push(i),
        }
    }
    let mut order = Vec::with_capacity(runs.len());
    let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (0, i)).collect();
    while let Some((depth, i)) = stack.pop() {
        order.push((depth, i));
        if let Some(kids) = runs.get(i).and_then(|r| children.get(r.id)) {
            stack.extend(kids.iter().rev().map(|&k| (depth + 1, k)));
        }
    }
    order
}

fn show(
    ws: &Path,
    id: &str,
    json: bool,
    out: &mut String,
    err: &mut String,
) -> Result<(), Failure> {
    let reader = crate::ledger_at::reader(ws)?;
    let id = reader.resolve_id(id)?;
    let detail = reader.get_run(&id)?;
    if json {
        let mut v = serde_json::to_value(&detail).unwrap_or_default();
        set_cost(&mut v, &detail.run, &pricing(ws, err));
        out.push_str(&to_json(&v)?);
        out.push('\n');
        return Ok(());
    }
    let cost = cost_of(&detail.run, &pricing(ws, err));
    render_detail(&detail, cost, out);
    Ok(())
}

fn render_detail(d: &RunDetail, cost: Cost, out: &mut String) {
    let r = &d.run;
    let now = Utc::now();
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<10} {v}");
    };
    field("run", r.id.to_string());
    field("name", display_name(r));
    field("role", r.role.clone().unwrap_or_else(|| "-".into()));
    if let Some(t) = &r.agent_type {
        field("type", t.clone());
    }
    let status = match &r.status_reason {
        Some(reason) => format!("{} ({reason})", r.status),
        None => r.status.to_string(),
    };
    field("status", status);
    for note in &r.notes {
        field("note", note.clone());
    }
    let prior = if d.from_prior_session {
        " (prior session)"
    } else {
        ""
    };
    field("session", format!("{}{prior}", r.session_id));
    if let Some(p) = &r.parent_id {
        field("parent", format!("{p} (depth {})", r.depth));
    }
    field("objective", r.objective.clone());
    let model = match (&r.provider, &r.model) {
        (Some(p), Some(m)) => format!("{p}/{m}"),
        (None, Some(m)) => m.clone(),
        (Some(p), None) => p.clone(),
        (None, None) => "-".into(),
    };
    field("model", model);
    field("workspace", r.workspace.clone());
    if let Some(b) = &r.git_branch {
        field("branch", b.clone());
    }
    field(
        "created",
        format!(
            "{} ({} ago)",
            r.created_at.to_rfc3339(),
            age(r.created_at, now)
        ),
    );
    if let Some(t) = r.started_at {
        field("started", t.to_rfc3339());
    }
    if let Some(t) = r.ended_at {
        field("ended", t.to_rfc3339());
    }
    field(
        "usage",
        format!(
            "{} steps, {} input tokens ({} cached), {} output tokens",
            r.steps, r.input_tokens, r.cached_input_tokens, r.output_tokens
        ),
    );
    field(
        "cost",
        match cost {
            Cost {
                usd: Some(c),
                at_read: false,
            } => format!("${c:.4} (priced as recorded)"),
            Cost {
                usd: None,
                at_read: false,
            } => "unknown (some answer had no price when recorded)".into(),
            Cost {
                usd: Some(c),
                at_read: true,
            } => format!("${c:.4} (at today's [pricing]: recorded before costs were)"),
            Cost {
                usd: None,
                at_read: true,
            } => "unknown (no [pricing] for its model)".into(),
        },
    );
    if let Some(result) = &r.result {
        field("result", clip(&compact(result), 400));
    }
    if let Some(e) = &r.error {
        field("error", e.clone());
    }
    let _ = writeln!(out, "events ({}):", d.events.len());
    for e in &d.events {
        let _ = writeln!(
            out,
            "  {:>4}  {}  {:<14} {}",
            e.seq,
            e.at.format("%H:%M:%S%.3f"),
            e.kind.as_str(),
            clip(&compact(&e.payload), 120)
        );
    }
}

fn transcript(
    ws: &Path,
    id: &str,
    from: u64,
    limit: usize,
    json: bool,
    full: bool,
    out: &mut String,
) -> Result<(), Failure> {
    let reader = crate::ledger_at::reader(ws)?;
    let id = reader.resolve_id(id)?;
    let slice = reader.transcript(&id, from, limit)?;
    if json {
        out.push_str(&to_json(&slice)?);
        out.push('\n');
        return Ok(());
    }
    render_transcript(&reader, &slice, full, out)
}

fn render_transcript(
    reader: &LedgerReader,
    slice: &TranscriptSlice,
    full: bool,
    out: &mut String,
) -> Result<(), Failure> {
    if slice.entries.is_empty() {
        let _ = writeln!(
            out,
            "no messages from #{} (the transcript has {})",
            slice.from, slice.total
        );
        return Ok(());
    }
    for e in &slice.entries {
        let _ = writeln!(out, "── #{} {} · {}", e.seq, e.role, e.at.to_rfc3339());
        let spilled = if full && e.truncated {
            reader.read_spill(e)?
        } else {
            None
        };
        match spilled {
            Some(text) => out.push_str(&text),
            None => match &e.content {
                Value::String(s) => out.push_str(s),
                other => out.push_str(&serde_json::to_string_pretty(other).unwrap_or_default()),
            },
        }
        out.push('\n');
        if e.truncated && !full {
            match &e.spill_path {
                // Kept in the (PostgreSQL) ledger: no file to point at.
                Some(p) if p.starts_with("ledger:") => {
                    let _ = writeln!(
                        out,
                        "[capped: {} bytes in all; --full prints it]",
                        e.full_bytes
                    );
                }
                Some(p) => {
                    let _ = writeln!(
                        out,
                        "[capped: {} bytes in all; --full prints it, or see {p}]",
                        e.full_bytes
                    );
                }
                None => {}
            }
        }
    }
    let last = slice.entries.last().map(|e| e.seq).unwrap_or(slice.from);
    let _ = write!(
        out,
        "── messages #{}–#{} of {}",
        slice.entries[0].seq, last, slice.total
    );
    if let Some(next) = slice.next_from {
        let _ = write!(out, "; more with --from {next}");
    }
    out.push('\n');
    Ok(())
}

fn cancel(ws: &Path, id: &str, out: &mut String) -> Result<(), Failure> {
    let reader = crate::ledger_at::reader(ws)?;
    let id = reader.resolve_id(id)?;
    let mut maintenance = crate::ledger_at::maintenance(ws)?;
    let outcome = match maintenance.request_cancel(&id) {
        Err(LedgerError::InvalidTransition { run, from, .. }) if from.is_terminal() => {
            return Err(Failure::AlreadyFinished { run, status: from })
        }
        other => other?,
    };
    match outcome {
        CancelOutcome::Requested { run_id, boot_id } => {
            let _ = writeln!(
                out,
                "cancel requested for run {run_id}; its session (boot {boot_id}) will stop it"
            );
        }
        CancelOutcome::MarkedCancelled { run_id } => {
            let _ = writeln!(
                out,
                "run {run_id} marked cancelled (its process had already exited)"
            );
        }
    }
    Ok(())
}

fn export(ws: &Path, out: &mut String) -> Result<(), Failure> {
    let export = match crate::ledger_at::reader(ws) {
        Ok(reader) => reader.export()?,
        Err(LedgerError::Missing { .. }) => brood::ledger::Export {
            schema: brood::ledger::EXPORT_SCHEMA.to_string(),
            exported_at: Utc::now(),
            runs: Vec::new(),
        },
        Err(e) => return Err(e.into()),
    };
    out.push_str(&to_json(&export)?);
    out.push('\n');
    Ok(())
}

fn prune(ws: &Path, older_than: Duration, out: &mut String) -> Result<(), Failure> {
    let report = match crate::ledger_at::maintenance(ws) {
        Ok(mut m) => m.prune(older_than)?,
        Err(LedgerError::Missing { .. }) => {
            out.push_str("no runs recorded in this workspace; nothing to prune\n");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let _ = writeln!(
        out,
        "pruned {} ({}, {}, {}) that finished more than {} ago",
        crate::words::count(report.runs, "run", "runs"),
        crate::words::count(report.events, "event", "events"),
        crate::words::count(
            report.transcript_entries,
            "transcript message",
            "transcript messages"
        ),
        crate::words::count(report.spill_files, "spill file", "spill files"),
        human_duration(older_than)
    );
    for refused in &report.refused_spill_paths {
        let _ = writeln!(out, "warning: {refused}");
    }
    Ok(())
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, LedgerError> {
    serde_json::to_string_pretty(v).map_err(|e| LedgerError::Json {
        context: "printing JSON".into(),
        detail: e.to_string(),
    })
}

/// The characters of the objective a run without a name or type is shown by.
const NAME_CHARS: usize = 40;
// A summary keeps enough of the objective to clip it as the full one would be.
const _: () = assert!(brood::ledger::SUMMARY_OBJECTIVE_CHARS > NAME_CHARS);

fn display_name(r: &RunRecord) -> String {
    r.name
        .clone()
        .or_else(|| r.agent_type.clone())
        .unwrap_or_else(|| clip(&r.objective, NAME_CHARS))
}

/// The first 8 characters of an id (any unique prefix is accepted back).
/// How many leading characters tell the listed ids apart, at least 8 (git-style).
/// Run ids are UUIDv7, which start with their creation time: ids made in the same
/// minute share their first 8 characters, so a fixed 8 printed one short id for a
/// whole fan-out. Every short id shown is a prefix `brood agents show` resolves.
fn id_width<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    let mut ids: Vec<&str> = ids.collect();
    ids.sort_unstable();
    let shared = ids
        .windows(2)
        .map(|w| {
            w[0].chars()
                .zip(w[1].chars())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    (shared + 1).max(8)
}

/// The first `width` characters of `id` (all of it when shorter).
fn short_id(id: &str, width: usize) -> &str {
    id.char_indices()
        .nth(width)
        .map_or(id, |(end, _)| &id[..end])
}

fn age(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let mut s = String::new();
    write_age(&mut s, t, now);
    s
}

fn write_age(out: &mut String, t: DateTime<Utc>, now: DateTime<Utc>) {
    let secs = (now - t).num_seconds().max(0) as u64;
    write_duration(out, Duration::from_secs(secs));
}

fn human_duration(d: Duration) -> String {
    let mut s = String::new();
    write_duration(&mut s, d);
    s
}

fn write_duration(out: &mut String, d: Duration) {
    let s = d.as_secs();
    let _ = match s {
        0..=59 => write!(out, "{s}s"),
        60..=3599 => write!(out, "{}m", s / 60),
        3600..=86_399 => write!(out, "{}h", s / 3600),
        _ => write!(out, "{}d", s / 86_400),
    };
}

fn write_tokens(out: &mut String, n: u64) {
    let _ = match n {
        0..=999 => write!(out, "{n}"),
        1000..=999_999 => write!(out, "{:.1}k", n as f64 / 1000.0),
        _ => write!(out, "{:.1}M", n as f64 / 1_000_000.0),
    };
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// At most `max` characters, on one line.
fn clip(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', "⏎");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod list_tests;
#[cfg(test)]
mod tests;
