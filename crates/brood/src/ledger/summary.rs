//! Narrow listings: what a table of runs shows (`brood agents list`), without building
//! a full [`RunRecord`](super::RunRecord) per run.
//!
//! A [`RunSummaries`] keeps every string of a listing in one buffer and each run as a
//! fixed-size row of spans into it, so a listing of 10 000 runs makes a few
//! allocations instead of ~110 000 (one `String` per text column per run in a
//! `RunRecord`). [`RunSummary`] is a borrowed view of one row: id, parent, name, role,
//! type, the start of the objective (its first [`SUMMARY_OBJECTIVE_CHARS`]
//! characters), status, created and ended times, steps and tokens, and whether the run
//! is of a prior session. Nothing else is read: every column costs time on every row
//! (root, depth, session, boot, model, provider, workspace, branch, reasons, errors
//! and cached tokens are one [`LedgerReader::run`](super::LedgerReader::run) away).

use std::ops::Range;

use super::db::{Cell, DbError, Row, RowExt};
use chrono::{DateTime, Utc};

use super::store::to_time;
use super::types::RunStatus;

/// How many characters of each run's objective a summary keeps (the start of it).
pub const SUMMARY_OBJECTIVE_CHARS: usize = 80;

/// The columns a summary reads, in the order [`SummaryBuilder::push`] expects, for a
/// listing of the current session(s) only.
pub(crate) const SUMMARY_COLUMNS: &str = "id, parent_id, name, role, agent_type, objective, \
     status, created_at, ended_at, steps, input_tokens, output_tokens";

/// [`SUMMARY_COLUMNS`] and the session, to tell prior sessions' runs: for listings
/// that include them. (Every column read costs time on every row.)
pub(crate) const SUMMARY_COLUMNS_WITH_SESSION: &str = "id, parent_id, name, role, \
     agent_type, objective, status, created_at, ended_at, steps, input_tokens, \
     output_tokens, session_id";

/// A span of [`RunSummaries::text`]; `u32` keeps a row small (a listing's text is far
/// below 4 GiB; a larger one is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// One run of a listing, its strings as spans of the listing's buffer.
#[derive(Debug, Clone, Copy)]
struct SummaryRow {
    id: Span,
    parent_id: Option<Span>,
    name: Option<Span>,
    role: Option<Span>,
    agent_type: Option<Span>,
    objective: Span,
    created_at_ms: i64,
    ended_at_ms: Option<i64>,
    steps: u64,
    input_tokens: u64,
    output_tokens: u64,
    status: RunStatus,
    from_prior_session: bool,
}

/// The runs of a listing, oldest first, as [`LedgerReader::list_summaries`]
/// returns them: the same runs in the same order as
/// [`LedgerReader::list_runs`](super::LedgerReader::list_runs), with fewer fields.
///
/// [`LedgerReader::list_summaries`]: super::LedgerReader::list_summaries
#[derive(Debug, Clone, Default)]
pub struct RunSummaries {
    text: String,
    rows: Vec<SummaryRow>,
}

/// One listed run: a borrowed view into [`RunSummaries`]. Fields are those of
/// [`RunRecord`](super::RunRecord) with the same names, except `objective` (its first
/// [`SUMMARY_OBJECTIVE_CHARS`] characters) and `from_prior_session` (as in
/// [`ListedRun`](super::ListedRun)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary<'a> {
    /// The run's id.
    pub id: &'a str,
    /// Its parent's id (`None`: a root).
    pub parent_id: Option<&'a str>,
    /// Its name, if given.
    pub name: Option<&'a str>,
    /// Its role.
    pub role: Option<&'a str>,
    /// Its agent type (a definition's name).
    pub agent_type: Option<&'a str>,
    /// The first [`SUMMARY_OBJECTIVE_CHARS`] characters of the objective.
    pub objective: &'a str,
    /// Its status.
    pub status: RunStatus,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// Model steps it took.
    pub steps: u64,
    /// Input tokens it was charged.
    pub input_tokens: u64,
    /// Output tokens it was charged.
    pub output_tokens: u64,
    /// The run belongs to a session other than the current one(s).
    pub from_prior_session: bool,
}

impl RunSummaries {
    /// How many runs were listed.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no run was listed.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The `i`-th run (0 = oldest).
    pub fn get(&self, i: usize) -> Option<RunSummary<'_>> {
        self.rows.get(i).map(|row| self.view(row))
    }

    /// The runs, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = RunSummary<'_>> + ExactSizeIterator {
        self.rows.iter().map(|row| self.view(row))
    }

    fn view(&self, row: &SummaryRow) -> RunSummary<'_> {
        let text = |span: Span| self.text.get(span.range()).unwrap_or_default();
        RunSummary {
            id: text(row.id),
            parent_id: row.parent_id.map(text),
            name: row.name.map(text),
            role: row.role.map(text),
            agent_type: row.agent_type.map(text),
            objective: text(row.objective),
            status: row.status,
            created_at: to_time(row.created_at_ms),
            ended_at: row.ended_at_ms.map(to_time),
            steps: row.steps,
            input_tokens: row.input_tokens,
            output_tokens: row.output_tokens,
            from_prior_session: row.from_prior_session,
        }
    }
}

/// Fills a [`RunSummaries`] from rows of [`SUMMARY_COLUMNS`] or
/// [`SUMMARY_COLUMNS_WITH_SESSION`].
pub(crate) struct SummaryBuilder<'c> {
    out: RunSummaries,
    /// The current sessions, when the listing includes others (its rows then have
    /// [`SUMMARY_COLUMNS_WITH_SESSION`], and each row's session is compared); `None`
    /// when every listed run is of a current session ([`SUMMARY_COLUMNS`]).
    current: Option<&'c [String]>,
}

impl<'c> SummaryBuilder<'c> {
    /// An empty builder (`current` as the field says). No capacity is reserved:
    /// counting the rows first (`list_runs` does) is another walk of the index and
    /// measured no cheaper than letting the two buffers grow.
    pub fn new(current: Option<&'c [String]>) -> Self {
        SummaryBuilder {
            out: RunSummaries::default(),
            current,
        }
    }

    /// Add one row of [`SUMMARY_COLUMNS`] (or [`SUMMARY_COLUMNS_WITH_SESSION`]).
    pub fn push(&mut self, row: &dyn Row) -> Result<(), DbError> {
        let id = self.text_column(row, 0, usize::MAX)?;
        let parent_id = self.optional_text(row, 1)?;
        let name = self.optional_text(row, 2)?;
        let role = self.optional_text(row, 3)?;
        let agent_type = self.optional_text(row, 4)?;
        let objective = self.text_column(row, 5, SUMMARY_OBJECTIVE_CHARS)?;
        let status: RunStatus = row.str(6)?.parse().map_err(|e| DbError::column(6, e))?;
        let from_prior_session = match self.current {
            None => false,
            Some(current) => {
                let session = row.str(12)?;
                !current.iter().any(|s| s == session)
            }
        };
        self.out.rows.push(SummaryRow {
            id,
            parent_id,
            name,
            role,
            agent_type,
            objective,
            created_at_ms: row.i64(7)?,
            ended_at_ms: row.opt_i64(8)?,
            // Lenient like the full reader: an odd count reads as 0 (the note is on
            // the run's full record) rather than failing the whole listing.
            steps: super::columns::count_column(row, 9, "steps", &mut Vec::new())?,
            input_tokens: super::columns::count_column(row, 10, "input_tokens", &mut Vec::new())?,
            output_tokens: super::columns::count_column(row, 11, "output_tokens", &mut Vec::new())?,
            status,
            from_prior_session,
        });
        Ok(())
    }

    /// Put runs of several sessions in listing order (created, then id).
    pub fn sort(&mut self) {
        let RunSummaries { text, rows } = &mut self.out;
        let id = |row: &SummaryRow| text.get(row.id.range()).unwrap_or_default();
        rows.sort_by(|a, b| (a.created_at_ms, id(a)).cmp(&(b.created_at_ms, id(b))));
    }

    pub fn finish(self) -> RunSummaries {
        self.out
    }

    fn optional_text(&mut self, row: &dyn Row, col: usize) -> Result<Option<Span>, DbError> {
        match row.cell(col)? {
            Cell::Null => Ok(None),
            Cell::Text(t) => self.push_text(t, col, usize::MAX).map(Some),
            other => Err(DbError::column(
                col,
                format!("expected text, found {}", other.describe()),
            )),
        }
    }

    /// Copy (the first `max_chars` characters of) a text column into the buffer.
    fn text_column(
        &mut self,
        row: &dyn Row,
        col: usize,
        max_chars: usize,
    ) -> Result<Span, DbError> {
        self.push_text(row.str(col)?, col, max_chars)
    }

    fn push_text(&mut self, mut s: &str, col: usize, max_chars: usize) -> Result<Span, DbError> {
        if max_chars < s.len() {
            if let Some(head) = s
                .char_indices()
                .nth(max_chars)
                .and_then(|(cut, _)| s.get(..cut))
            {
                s = head;
            }
        }
        let start = self.out.text.len();
        let end = start + s.len();
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(end)) else {
            return Err(DbError::column(
                col,
                "the listing is too large (over 4 GiB of text)".into(),
            ));
        };
        self.out.text.push_str(s);
        Ok(Span { start, end })
    }
}
