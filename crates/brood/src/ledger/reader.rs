//! Reading the ledger: listings (current session, or everything with earlier sessions
//! flagged), one run with its events, children, transcript slices, id-prefix lookup.
//! A reader has its own read-only connection; in WAL mode it never blocks the writer
//! and sees every transaction committed before each query started.

use super::columns::count_column;
use super::db::{
    args, query_one, query_row, query_vec, Arg, Cell, Db, DbError, Dialect, Row, RowExt,
};
use super::error::{LedgerError, SqlContext};
use super::liveness::Liveness;
use super::ops::validate_id;
use super::paths::LedgerPaths;
use super::shared;
use super::spill;
use super::store::{to_time, Location};
use super::summary::{RunSummaries, SummaryBuilder, SUMMARY_COLUMNS, SUMMARY_COLUMNS_WITH_SESSION};
use super::types::{
    EventKind, EventRecord, ListFilter, ListedRun, RunDetail, RunId, RunRecord, RunStatus,
    TranscriptEntry, TranscriptSlice,
};

/// What "the current session" means for a reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Current {
    /// The session of the `Ledger` that made this reader.
    Session(String),
    /// For an outside inspector (the CLI): the sessions with a live boot, or, when none
    /// is alive, the session of the most recent boot.
    Live,
}

/// A run with its result, in [`RunRecord`] order for `run_from_row`: `runs r` joined
/// with `run_results` (schema v3 keeps results out of the `runs` rows).
const RUN_SELECT: &str = "SELECT r.id, r.parent_id, r.root_id, r.depth, r.session_id, \
     r.session_boot_id, r.name, r.role, r.agent_type, r.objective, r.model, r.provider, \
     r.workspace, r.git_branch, r.status, r.status_reason, r.created_at, r.started_at, \
     r.ended_at, r.steps, r.input_tokens, r.output_tokens, r.cached_input_tokens, \
     rr.result, r.error, r.cost_usd, r.priced_steps, r.unpriced \
     FROM runs r LEFT JOIN run_results rr ON rr.run_id = r.id";

/// The columns of a listing, in `RUN_SELECT` order: everything but `result`, which is
/// read as NULL. A result is the whole of a child's answer (kilobytes each); a listing
/// of thousands of runs would read and parse all of them to show none. [`LedgerReader::run`]
/// and [`LedgerReader::get_run`] (`brood agents show`) return it.
const LIST_COLUMNS: &str = "id, parent_id, root_id, depth, session_id, session_boot_id, \
     name, role, agent_type, objective, model, provider, workspace, git_branch, status, \
     status_reason, created_at, started_at, ended_at, steps, input_tokens, output_tokens, \
     cached_input_tokens, NULL AS result, error, cost_usd, priced_steps, unpriced";

/// A read-only view of the ledger. Cheap to open; not `Sync` (one connection), so
/// open one per thread or task.
pub struct LedgerReader {
    conn: Box<dyn Db + Send>,
    paths: LedgerPaths,
    current: Current,
}

impl LedgerReader {
    pub(crate) fn open(
        paths: LedgerPaths,
        at: &Location,
        current: Current,
    ) -> Result<Self, LedgerError> {
        let conn = match at {
            Location::Workspace => super::store::open_reader(&paths)?,
            #[cfg(feature = "postgres")]
            Location::Postgres(url) => super::pg::open_existing(url)?,
        };
        Ok(LedgerReader {
            conn,
            paths,
            current,
        })
    }

    /// The session ids that count as current for listings.
    pub fn current_sessions(&self) -> Result<Vec<String>, LedgerError> {
        match &self.current {
            Current::Session(s) => Ok(vec![s.clone()]),
            Current::Live => {
                let open_boots: Vec<(String, String)> = query_vec(
                    &*self.conn,
                    "SELECT boot_id, session_id FROM boots WHERE ended_at IS NULL
                     ORDER BY started_at",
                    &[],
                    |r| Ok((r.string(0)?, r.string(1)?)),
                )
                .ctx("listing boots")?;
                let mut live = Vec::new();
                for (boot_id, session) in open_boots {
                    if validate_id("boot id", &boot_id).is_ok()
                        && matches!(self.conn.probe_boot(&boot_id)?, Liveness::Alive)
                        && !live.contains(&session)
                    {
                        live.push(session);
                    }
                }
                if live.is_empty() {
                    // Boot ids are UUIDv7: among boots of one millisecond, the later id.
                    let latest: Option<String> = query_row(
                        &*self.conn,
                        "SELECT session_id FROM boots ORDER BY started_at DESC, boot_id DESC LIMIT 1",
                        &[],
                        |r| r.string(0),
                    )
                    .ctx("finding the latest session")?;
                    live.extend(latest);
                }
                Ok(live)
            }
        }
    }

    /// Runs of the current session(s), oldest first; with `include_archived`, every run,
    /// those of other sessions flagged `from_prior_session`.
    ///
    /// A listing leaves out each run's result: `result` is `None` in every listed
    /// record. [`LedgerReader::run`] / [`LedgerReader::get_run`] return it.
    /// [`LedgerReader::list_summaries`] lists the same runs with fewer fields, at a
    /// fraction of the cost.
    pub fn list_runs(&self, filter: ListFilter) -> Result<Vec<ListedRun>, LedgerError> {
        let current = self.current_sessions()?;
        let mut listed = Vec::with_capacity(self.listing_size(filter, &current)?);
        self.scan_listing(filter, LIST_COLUMNS, &current, |row| {
            let run = run_from_row(row)?;
            listed.push(ListedRun {
                from_prior_session: !current.contains(&run.session_id),
                run,
            });
            Ok(())
        })?;
        if !filter.include_archived && current.len() > 1 {
            listed
                .sort_by(|a, b| (a.run.created_at, &a.run.id).cmp(&(b.run.created_at, &b.run.id)));
        }
        Ok(listed)
    }

    /// The runs [`LedgerReader::list_runs`] lists, in the same order, as
    /// [`RunSummaries`]: what a table of runs shows (ids, names, role and type, status,
    /// times, usage, the start of the objective), with the strings of all runs in one
    /// buffer. `brood agents list` uses it for its table and tree.
    pub fn list_summaries(&self, filter: ListFilter) -> Result<RunSummaries, LedgerError> {
        let current = self.current_sessions()?;
        // Without prior sessions, every listed run is current: no session to compare.
        let compare = filter.include_archived.then_some(current.as_slice());
        let mut summaries = SummaryBuilder::new(compare);
        let columns = if filter.include_archived {
            SUMMARY_COLUMNS_WITH_SESSION
        } else {
            SUMMARY_COLUMNS
        };
        self.scan_listing(filter, columns, &current, |row| summaries.push(row))?;
        if !filter.include_archived && current.len() > 1 {
            summaries.sort();
        }
        Ok(summaries.finish())
    }

    /// How many runs a listing has (a capacity hint).
    fn listing_size(&self, filter: ListFilter, current: &[String]) -> Result<usize, LedgerError> {
        if filter.include_archived {
            return self.count("SELECT COUNT(*) FROM runs", &[]);
        }
        let mut count = 0;
        for session in current {
            count += self.count(
                "SELECT COUNT(*) FROM runs WHERE session_id = ?1",
                args![session],
            )?;
        }
        Ok(count)
    }

    /// Hand each row of a listing (`columns` of `runs`) to `each`: every run ordered by
    /// (created, id) with `include_archived`, otherwise the runs of each current session
    /// in turn, each session's in that order (several sessions need a merge after).
    fn scan_listing<F>(
        &self,
        filter: ListFilter,
        columns: &str,
        current: &[String],
        mut each: F,
    ) -> Result<(), LedgerError>
    where
        F: FnMut(&dyn Row) -> Result<(), DbError>,
    {
        let columns = with_liveness(columns, "", &self.dead_boots()?);
        if filter.include_archived {
            let sql = format!("SELECT {columns} FROM runs ORDER BY created_at, id");
            return self.scan(&sql, &[], &mut each);
        }
        // Served in order by the index runs_by_session_order (schema v3): no sort.
        let sql =
            format!("SELECT {columns} FROM runs WHERE session_id = ?1 ORDER BY created_at, id");
        for session in current {
            self.scan(&sql, args![session], &mut each)?;
        }
        Ok(())
    }

    /// Step through the rows of one listing query.
    fn scan<F>(&self, sql: &str, args: &[Arg<'_>], each: &mut F) -> Result<(), LedgerError>
    where
        F: FnMut(&dyn Row) -> Result<(), DbError>,
    {
        self.conn.query(sql, args, each).ctx("listing runs")
    }

    /// A `SELECT COUNT(*)` as a capacity hint.
    fn count(&self, sql: &str, args: &[Arg<'_>]) -> Result<usize, LedgerError> {
        let n = query_one(&*self.conn, sql, args, |r| r.i64(0)).ctx("counting runs")?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Boots still marked open whose process is gone (their lock is free): their
    /// live runs were never recorded as ended, and no later session has marked
    /// them yet. Ids that are not well-formed are left out (the file is untrusted).
    fn dead_boots(&self) -> Result<Vec<String>, LedgerError> {
        let open: Vec<String> = query_vec(
            &*self.conn,
            "SELECT boot_id FROM boots WHERE ended_at IS NULL",
            &[],
            |r| r.string(0),
        )
        .ctx("listing boots")?;
        let mut dead = Vec::new();
        for boot_id in open {
            if validate_id("boot id", &boot_id).is_ok()
                && matches!(self.conn.probe_boot(&boot_id)?, Liveness::Dead(_))
            {
                dead.push(boot_id);
            }
        }
        Ok(dead)
    }

    /// One run by exact id.
    pub fn run(&self, id: &RunId) -> Result<RunRecord, LedgerError> {
        let select = with_liveness(RUN_SELECT, "r.", &self.dead_boots()?);
        let sql = format!("{select} WHERE r.id = ?1");
        self.query_runs(&sql, args![id.as_str()])?
            .pop()
            .ok_or_else(|| LedgerError::UnknownRun { id: id.to_string() })
    }

    /// One run with its events.
    pub fn get_run(&self, id: &RunId) -> Result<RunDetail, LedgerError> {
        let run = self.run(id)?;
        let events = self.events(id)?;
        let current = self.current_sessions()?;
        Ok(RunDetail {
            from_prior_session: !current.contains(&run.session_id),
            run,
            events,
        })
    }

    /// A run's events, in order.
    pub fn events(&self, id: &RunId) -> Result<Vec<EventRecord>, LedgerError> {
        query_vec(
            &*self.conn,
            "SELECT run_id, seq, at, kind, payload FROM events WHERE run_id = ?1 ORDER BY seq",
            args![id.as_str()],
            event_from_row,
        )
        .ctx("reading events")
    }

    /// Every event of every run, grouped by run id (for export).
    pub(crate) fn all_events(&self) -> Result<Vec<EventRecord>, LedgerError> {
        query_vec(
            &*self.conn,
            "SELECT run_id, seq, at, kind, payload FROM events ORDER BY run_id, seq",
            &[],
            event_from_row,
        )
        .ctx("reading events")
    }

    /// The direct children of a run, oldest first.
    pub fn children(&self, id: &RunId) -> Result<Vec<RunRecord>, LedgerError> {
        self.run(id)?;
        let sql = format!("{RUN_SELECT} WHERE r.parent_id = ?1 ORDER BY r.created_at, r.id");
        self.query_runs(&sql, args![id.as_str()])
    }

    /// Up to `limit` transcript messages of a run starting at seq `from`.
    pub fn transcript(
        &self,
        id: &RunId,
        from: u64,
        limit: usize,
    ) -> Result<TranscriptSlice, LedgerError> {
        self.run(id)?;
        let total: u64 = query_one(
            &*self.conn,
            "SELECT COUNT(*) FROM transcripts WHERE run_id = ?1",
            args![id.as_str()],
            |r| r.u64(0),
        )
        .ctx("counting transcript messages")?;
        let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
        let entries = query_vec(
            &*self.conn,
            "SELECT run_id, seq, at, role, content, truncated, full_bytes, spill_path
             FROM transcripts WHERE run_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            args![id.as_str(), from, limit_sql],
            transcript_from_row,
        )
        .ctx("reading the transcript")?;
        let end = from.saturating_add(entries.len() as u64);
        Ok(TranscriptSlice {
            run_id: id.clone(),
            from,
            entries,
            total,
            next_from: (end < total).then_some(end),
        })
    }

    /// The full text of a spilled transcript entry (None when it was not truncated):
    /// from the ledger (PostgreSQL) or its spill file (SQLite), as its `spill_path`
    /// names it.
    pub fn read_spill(&self, entry: &TranscriptEntry) -> Result<Option<String>, LedgerError> {
        let Some(rel) = &entry.spill_path else {
            return Ok(None);
        };
        match spill::read(&*self.conn, &self.paths, rel) {
            Ok(text) => Ok(Some(text)),
            Err(spill::ReadFailure::Untrusted(reason)) => Err(LedgerError::UntrustedPath {
                row: format!("transcript entry {} of run {}", entry.seq, entry.run_id),
                reason,
            }),
            Err(spill::ReadFailure::Missing(path)) => Err(LedgerError::SpillMissing { path }),
            Err(spill::ReadFailure::Unreadable(e)) => Err(e),
        }
    }

    /// The run whose id is `prefix` or starts with it. An exact id always wins.
    pub fn resolve_id(&self, prefix: &str) -> Result<RunId, LedgerError> {
        if validate_id("run id", prefix).is_err() {
            return Err(LedgerError::UnknownRun {
                id: prefix.to_string(),
            });
        }
        let upper = format!("{prefix}\u{10FFFF}");
        let ids: Vec<String> = query_vec(
            &*self.conn,
            "SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 6",
            args![prefix, upper.as_str()],
            |r| r.string(0),
        )
        .ctx("looking up a run id")?;
        if ids.iter().any(|i| i == prefix) {
            return Ok(RunId::from_string(prefix));
        }
        match ids.as_slice() {
            [] => Err(LedgerError::UnknownRun {
                id: prefix.to_string(),
            }),
            [only] => Ok(RunId::from_string(only.clone())),
            _ => Err(LedgerError::AmbiguousId {
                prefix: prefix.to_string(),
                candidates: ids,
            }),
        }
    }

    /// Every run, oldest first (for export).
    pub(crate) fn all_runs(&self) -> Result<Vec<RunRecord>, LedgerError> {
        let sql = format!("{RUN_SELECT} ORDER BY r.created_at, r.id");
        self.query_runs(&sql, &[])
    }

    /// Run `PRAGMA integrity_check` (SQLite); Ok(()) when the database is sound.
    /// PostgreSQL checks its own pages: Ok(()) there.
    pub fn integrity_check(&self) -> Result<(), LedgerError> {
        if self.conn.dialect() != Dialect::Sqlite {
            return Ok(());
        }
        let verdict: String =
            query_one(&*self.conn, "PRAGMA integrity_check", &[], |r| r.string(0))
                .ctx("checking integrity")?;
        if verdict == "ok" {
            Ok(())
        } else {
            Err(LedgerError::Sqlite {
                context: "checking integrity".into(),
                detail: verdict,
            })
        }
    }

    fn query_runs(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<RunRecord>, LedgerError> {
        let mut runs = query_vec(&*self.conn, sql, args, run_from_row).ctx("reading runs")?;
        // A result's long strings may be references to the run's spill file.
        for run in &mut runs {
            if let Some(stored) = run.result.take() {
                run.result = Some(shared::load(
                    &*self.conn,
                    &self.paths,
                    stored,
                    &mut run.notes,
                ));
            }
        }
        Ok(runs)
    }
}

fn json_column(row: &dyn Row, col: usize) -> Result<Option<serde_json::Value>, DbError> {
    row.opt_str(col)?
        .map(|t| serde_json::from_str(t).map_err(|e| DbError::column(col, e.to_string())))
        .transpose()
}

fn run_from_row(row: &dyn Row) -> Result<RunRecord, DbError> {
    let status: RunStatus = row.str(14)?.parse().map_err(|e| DbError::column(14, e))?;
    let mut notes = Vec::new();
    let steps = count_column(row, 19, "steps", &mut notes)?;
    let input_tokens = count_column(row, 20, "input_tokens", &mut notes)?;
    let output_tokens = count_column(row, 21, "output_tokens", &mut notes)?;
    let cached_input_tokens = count_column(row, 22, "cached_input_tokens", &mut notes)?;
    let (cost_usd, cost_recorded) = cost_columns(row, 25, steps, &mut notes)?;
    // A result that is not JSON is named, not a failed read of every run around it.
    let result = json_column(row, 23).unwrap_or_else(|e| {
        notes.push(format!("result unreadable ({e})"));
        None
    });
    Ok(RunRecord {
        id: RunId::from_string(row.string(0)?),
        parent_id: row.opt_string(1)?.map(RunId::from_string),
        root_id: RunId::from_string(row.string(2)?),
        depth: row.u32(3)?,
        session_id: row.string(4)?,
        session_boot_id: row.string(5)?,
        name: row.opt_string(6)?,
        role: row.opt_string(7)?,
        agent_type: row.opt_string(8)?,
        objective: row.string(9)?,
        model: row.opt_string(10)?,
        provider: row.opt_string(11)?,
        workspace: row.string(12)?,
        git_branch: row.opt_string(13)?,
        status,
        status_reason: row.opt_string(15)?,
        created_at: to_time(row.i64(16)?),
        started_at: row.opt_i64(17)?.map(to_time),
        ended_at: row.opt_i64(18)?.map(to_time),
        steps,
        input_tokens,
        output_tokens,
        cached_input_tokens,
        cost_usd,
        cost_recorded,
        result,
        error: row.opt_string(24)?,
        notes,
    })
}

/// A run's recorded cost from its `cost_usd` (at `idx`), `priced_steps` and
/// `unpriced` (next) columns: `(Some(cost), true)` when every step was priced,
/// `(None, true)` when some was not or the run's model had no price, `(None, false)`
/// for a row from before costs were recorded (`priced_steps` NULL). An odd stored
/// value reads as unknown, with a note.
fn cost_columns(
    row: &dyn Row,
    idx: usize,
    steps: u64,
    notes: &mut Vec<String>,
) -> Result<(Option<f64>, bool), DbError> {
    if matches!(row.cell(idx + 1)?, Cell::Null) {
        return Ok((None, false));
    }
    let priced = count_column(row, idx + 1, "priced_steps", notes)?;
    if !matches!(row.cell(idx + 2)?, Cell::Int(0)) {
        return Ok((None, true));
    }
    let cost = match row.cell(idx)? {
        Cell::Real(c) => Some(c),
        Cell::Int(n) => Some(n as f64),
        _ => None,
    };
    match cost {
        Some(c) if c.is_finite() && c >= 0.0 => Ok(((priced == steps).then_some(c), true)),
        _ => {
            notes.push("cost_usd: not a non-negative number (cost unknown)".to_string());
            Ok((None, true))
        }
    }
}

fn event_from_row(row: &dyn Row) -> Result<EventRecord, DbError> {
    let kind: EventKind = row.str(3)?.parse().map_err(|e| DbError::column(3, e))?;
    Ok(EventRecord {
        run_id: RunId::from_string(row.string(0)?),
        seq: row.u64(1)?,
        at: to_time(row.i64(2)?),
        kind,
        payload: json_column(row, 4)?.unwrap_or(serde_json::Value::Null),
    })
}

fn transcript_from_row(row: &dyn Row) -> Result<TranscriptEntry, DbError> {
    Ok(TranscriptEntry {
        run_id: RunId::from_string(row.string(0)?),
        seq: row.u64(1)?,
        at: to_time(row.i64(2)?),
        role: row.string(3)?,
        content: json_column(row, 4)?.unwrap_or(serde_json::Value::Null),
        truncated: row.bool(5)?,
        full_bytes: row.u64(6)?,
        spill_path: row.opt_string(7)?,
    })
}

/// `columns` (a list of `runs` columns, each name after `prefix`) with a run of a
/// dead boot that is still pending, queued or running read as `interrupted`, its
/// reason saying so: what the next session will record, shown at once. Without dead
/// boots, `columns` as they are. `dead` holds only well-formed ids ([`validate_id`]),
/// so they are safe to write into the query.
fn with_liveness(columns: &str, prefix: &str, dead: &[String]) -> String {
    if dead.is_empty() {
        return columns.to_string();
    }
    let ids = dead
        .iter()
        .map(|b| format!("'{b}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let stale = format!(
        "{prefix}status IN ('pending', 'queued', 'running') AND {prefix}session_boot_id IN ({ids})"
    );
    let status = format!("CASE WHEN {stale} THEN 'interrupted' ELSE {prefix}status END AS status,");
    let reason = format!(
        "CASE WHEN {stale} THEN 'process exited (its session is gone; seen by this listing)' \
         ELSE {prefix}status_reason END AS status_reason,"
    );
    columns
        .replacen(&format!("{prefix}status_reason,"), &reason, 1)
        .replacen(&format!("{prefix}status,"), &status, 1)
}
