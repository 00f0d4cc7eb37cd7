//! The seam between the ledger and its database: the few things the ledger asks of a
//! connection (run a statement with arguments, step through rows, transactions,
//! "is this boot alive?"), implemented once for SQLite ([`SqliteDb`]) and once for
//! PostgreSQL (`super::pg`). Every operation of the ledger — the writer's ops,
//! readers, recovery, maintenance, resume — is written once against [`Db`].
//!
//! Statements are written in one dialect: `?N` placeholders (PostgreSQL's `$N` are
//! put in by its backend), standard SQL that both engines run (`RETURNING`,
//! `ON CONFLICT … DO UPDATE`, `COALESCE`, `CASE`), and [`Dialect`] for the rest
//! (a JSON object built in SQL). Arguments are [`Arg`]s: integers, reals, text and
//! NULL; booleans are stored as 0/1 integers in both.

use super::error::{LedgerError, SqlContext};
use super::liveness::{BootLock, Liveness};

/// One statement argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(s: &'a str) -> Self {
        Arg::Text(s)
    }
}
impl<'a> From<&'a String> for Arg<'a> {
    fn from(s: &'a String) -> Self {
        Arg::Text(s)
    }
}
impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(s: Option<&'a str>) -> Self {
        s.map_or(Arg::Null, Arg::Text)
    }
}
impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(s: &'a Option<String>) -> Self {
        s.as_deref().map_or(Arg::Null, Arg::Text)
    }
}
impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Arg::Int(n)
    }
}
impl From<Option<i64>> for Arg<'_> {
    fn from(n: Option<i64>) -> Self {
        n.map_or(Arg::Null, Arg::Int)
    }
}
impl From<u32> for Arg<'_> {
    fn from(n: u32) -> Self {
        Arg::Int(i64::from(n))
    }
}
impl From<u64> for Arg<'_> {
    /// Clamped: both engines store signed 64-bit integers.
    fn from(n: u64) -> Self {
        Arg::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}
impl From<bool> for Arg<'_> {
    fn from(b: bool) -> Self {
        Arg::Int(i64::from(b))
    }
}
impl From<f64> for Arg<'_> {
    fn from(f: f64) -> Self {
        Arg::Real(f)
    }
}

/// `args![a, b, …]`: a slice of [`Arg`]s from anything convertible.
macro_rules! args {
    ($($x:expr),* $(,)?) => { &[$($crate::ledger::db::Arg::from($x)),*][..] };
}
pub(crate) use args;

/// One value of a row, borrowed from the row.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell<'r> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'r str),
    /// Anything else (an SQLite blob, a PostgreSQL type the ledger never writes),
    /// described for error messages and notes.
    Other(&'static str, usize),
}

impl Cell<'_> {
    /// What the value is, for messages about odd stored values.
    pub fn describe(&self) -> String {
        match self {
            Cell::Null => "NULL".into(),
            Cell::Int(n) => n.to_string(),
            Cell::Real(f) => f.to_string(),
            Cell::Text(t) => format!("{:?}", t.get(..40).unwrap_or(t)),
            Cell::Other(what, len) => format!("a {len}-byte {what}"),
        }
    }
}

/// A row of a query.
pub(crate) trait Row {
    /// The value of column `i` (0-based).
    fn cell(&self, i: usize) -> Result<Cell<'_>, DbError>;
}

/// Typed reads of a [`Row`]: a value of another type than asked is an error naming
/// the column, as rusqlite's typed `get` is.
pub(crate) trait RowExt {
    fn str(&self, i: usize) -> Result<&str, DbError>;
    fn opt_str(&self, i: usize) -> Result<Option<&str>, DbError>;
    fn string(&self, i: usize) -> Result<String, DbError> {
        self.str(i).map(str::to_string)
    }
    fn opt_string(&self, i: usize) -> Result<Option<String>, DbError> {
        Ok(self.opt_str(i)?.map(str::to_string))
    }
    fn i64(&self, i: usize) -> Result<i64, DbError>;
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, DbError>;
    fn u64(&self, i: usize) -> Result<u64, DbError> {
        let n = self.i64(i)?;
        u64::try_from(n).map_err(|_| DbError::column(i, format!("{n} is out of range")))
    }
    fn u32(&self, i: usize) -> Result<u32, DbError> {
        let n = self.i64(i)?;
        u32::try_from(n).map_err(|_| DbError::column(i, format!("{n} is out of range")))
    }
    fn bool(&self, i: usize) -> Result<bool, DbError> {
        Ok(self.i64(i)? != 0)
    }
}

impl<R: Row + ?Sized> RowExt for R {
    fn str(&self, i: usize) -> Result<&str, DbError> {
        match self.cell(i)? {
            Cell::Text(t) => Ok(t),
            other => Err(DbError::column(
                i,
                format!("expected text, found {}", other.describe()),
            )),
        }
    }
    fn opt_str(&self, i: usize) -> Result<Option<&str>, DbError> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(t) => Ok(Some(t)),
            other => Err(DbError::column(
                i,
                format!("expected text, found {}", other.describe()),
            )),
        }
    }
    fn i64(&self, i: usize) -> Result<i64, DbError> {
        self.opt_i64(i)?
            .ok_or_else(|| DbError::column(i, "expected an integer, found NULL".into()))
    }
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, DbError> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(n) => Ok(Some(n)),
            other => Err(DbError::column(
                i,
                format!("expected an integer, found {}", other.describe()),
            )),
        }
    }
}

/// What went wrong in the database, in a form both backends give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DbError {
    pub kind: DbErrorKind,
    pub detail: String,
    /// A statement the server did not answer in time (PostgreSQL's
    /// `query_timeout`): reported as [`LedgerError::QueryTimeout`].
    pub unanswered: Option<Box<Unanswered>>,
}

/// Where and within what a statement went unanswered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unanswered {
    /// The ledger's URL, its password hidden.
    pub url: String,
    pub host: String,
    pub secs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DbErrorKind {
    /// "Not now": another connection holds the lock past the busy timeout, or a
    /// transient I/O failure. The writer waits and tries again.
    Transient,
    /// A primary key or unique constraint refused the row.
    Duplicate,
    Other,
}

impl DbError {
    pub fn other(detail: impl Into<String>) -> Self {
        DbError {
            kind: DbErrorKind::Other,
            detail: detail.into(),
            unanswered: None,
        }
    }
    pub fn column(i: usize, detail: String) -> Self {
        DbError::other(format!("column {i}: {detail}"))
    }
    pub fn transient(&self) -> bool {
        self.kind == DbErrorKind::Transient
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

/// Which engine a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// A JSON object built in SQL from `key, value, …` pairs, as text.
    pub fn json_object(self, pairs: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_object({pairs})"),
            Dialect::Postgres => format!("CAST(json_build_object({pairs}) AS TEXT)"),
        }
    }
}

/// A connection to the ledger's database, as the ledger uses it. (Not `Send` by
/// itself, so that [`Db::hold`] can lend one that borrows its connection; the
/// boxed connections the ledger moves to its threads are `Box<dyn Db + Send>`.)
pub(crate) trait Db {
    fn dialect(&self) -> Dialect;
    /// Run one statement (cached by its text); the number of rows it changed.
    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64, DbError>;
    /// Run one query (cached by its text), handing each row to `each`.
    fn query(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        each: &mut dyn FnMut(&dyn Row) -> Result<(), DbError>,
    ) -> Result<(), DbError>;
    /// Start a write transaction (SQLite: `BEGIN IMMEDIATE`, the write lock at once).
    fn begin(&self) -> Result<(), DbError>;
    /// Commit it. After a transient failure the transaction may still be open
    /// ([`Db::in_transaction`]) and can be committed later.
    fn commit(&self) -> Result<(), DbError>;
    /// Roll back whatever is open (nothing when nothing is).
    fn rollback(&self) -> Result<(), DbError>;
    fn in_transaction(&self) -> bool;
    /// Whether a failed statement leaves its transaction usable (SQLite backs out the
    /// one statement); PostgreSQL aborts the whole transaction, so every op there
    /// runs in a savepoint.
    fn statement_atomic(&self) -> bool;
    /// Rows changed by this connection's completed statements so far (SQLite's
    /// `total_changes`: a statement that failed and was backed out adds none), or
    /// `None` where the engine keeps no such count. With it the writer applies an
    /// op of several statements without a savepoint and still knows whether one
    /// that failed had written anything (`super::apply`).
    fn total_changes(&self) -> Option<u64> {
        None
    }
    /// This connection with the statements `sqls` (and its own `BEGIN`/`COMMIT`)
    /// held prepared for as long as the returned one lives: the writer's thread runs
    /// them for every run. `None` where the backend's own cache is as good (it is
    /// then used as it is).
    fn hold<'c>(&'c self, _sqls: &[&'static str]) -> Option<Box<dyn Db + 'c>> {
        None
    }
    /// Is boot `boot_id` alive? (SQLite: its lock file's `flock`; PostgreSQL: its
    /// advisory lock.) Never asked of the connection's own boot.
    fn probe_boot(&self, boot_id: &str) -> Result<Liveness, LedgerError>;
    /// Hold boot `boot_id`'s liveness for as long as the returned lock (SQLite: the
    /// lock file) or this connection (PostgreSQL: a session advisory lock) lives.
    fn hold_boot(&self, boot_id: &str) -> Result<Option<BootLock>, LedgerError>;
    /// Whether this connection is gone (PostgreSQL: the server restarted or ended
    /// it, the network dropped); an SQLite file is never lost this way.
    fn connection_lost(&self) -> bool {
        false
    }
    /// Connect again after [`Db::connection_lost`], as this connection was (its
    /// session settings, the boot lock it held), within the ledger's
    /// `reconnect_for`. `Ok(true)` when the transaction last begun on the lost
    /// connection committed (the connection went with its acknowledgement),
    /// `Ok(false)` when it did not; [`LedgerError::Disconnected`] when no connection
    /// could be made in time.
    fn reconnect(&self) -> Result<bool, LedgerError> {
        Err(LedgerError::WriterStopped)
    }
    /// Engine-specific tuning around the ledger's phases; a no-op where it means
    /// nothing.
    fn tune(&self, _t: Tuning) -> Result<(), DbError> {
        Ok(())
    }
}

/// Moments where one engine wants its settings changed (SQLite's WAL and cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tuning {
    /// Before the boot row and recovery: no automatic checkpoint (after a crash the
    /// WAL can hold thousands of pages; the writer thread checkpoints off `open`'s path).
    SuspendCheckpoints,
    ResumeCheckpoints,
    /// The writer thread's first act: fold the WAL into the database, waiting on no one.
    CheckpointPassive,
    /// A recovery transaction marks thousands of runs: a page cache that holds it.
    RecoveryCache,
    NormalCache,
}

/// The first row of a query, mapped; `None` when there is none.
pub(crate) fn query_row<T>(
    db: &dyn Db,
    sql: &str,
    args: &[Arg<'_>],
    f: impl Fn(&dyn Row) -> Result<T, DbError>,
) -> Result<Option<T>, DbError> {
    let mut out = None;
    db.query(sql, args, &mut |row| {
        if out.is_none() {
            out = Some(f(row)?);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Every row of a query, mapped.
pub(crate) fn query_vec<T>(
    db: &dyn Db,
    sql: &str,
    args: &[Arg<'_>],
    f: impl Fn(&dyn Row) -> Result<T, DbError>,
) -> Result<Vec<T>, DbError> {
    let mut out = Vec::new();
    db.query(sql, args, &mut |row| {
        out.push(f(row)?);
        Ok(())
    })?;
    Ok(out)
}

/// A query that must give one row (`COUNT(*)`, `MAX`).
pub(crate) fn query_one<T>(
    db: &dyn Db,
    sql: &str,
    args: &[Arg<'_>],
    f: impl Fn(&dyn Row) -> Result<T, DbError>,
) -> Result<T, DbError> {
    query_row(db, sql, args, f)?.ok_or_else(|| DbError::other("the query returned no row"))
}

impl<T> SqlContext<T> for Result<T, DbError> {
    fn ctx(self, context: &str) -> Result<T, LedgerError> {
        self.map_err(|e| match e.unanswered {
            Some(u) => LedgerError::QueryTimeout {
                url: u.url,
                host: u.host,
                secs: u.secs,
                context: context.to_string(),
            },
            None => LedgerError::Sqlite {
                context: context.to_string(),
                detail: e.detail,
            },
        })
    }
}
