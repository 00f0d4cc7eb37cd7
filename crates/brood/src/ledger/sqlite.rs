//! The SQLite backend of the ledger's database seam: a rusqlite connection with its
//! statement cache, tuned for recovery and bulk writes, and the workspace's boot lock
//! files for liveness; on the writer's thread, with the statements of its every-run
//! ops held prepared ([`Held`]).

use std::cell::RefCell;

use super::db::{Arg, Cell, Db, DbError, DbErrorKind, Dialect, Row, Tuning};
use super::error::LedgerError;
use super::liveness::{BootLock, Liveness};
use super::paths::LedgerPaths;

/// The SQLite backend: a rusqlite connection with its statement cache, and the
/// workspace's boot lock files for liveness.
pub(crate) struct SqliteDb {
    conn: rusqlite::Connection,
    paths: LedgerPaths,
    /// What [`Tuning`] changed, to put back: (wal_autocheckpoint, cache_size).
    saved: std::cell::Cell<(Option<i64>, Option<i64>)>,
}

/// Page cache (KiB) for a recovery transaction: marking ten thousand runs touches a few
/// thousand pages of `runs`, `events` and their indexes; with SQLite's default 2 MiB
/// cache the transaction spills dirty pages to the WAL before it commits.
const RECOVERY_CACHE_KIB: i64 = 64 * 1024;

impl SqliteDb {
    pub fn new(conn: rusqlite::Connection, paths: LedgerPaths) -> Self {
        SqliteDb {
            conn,
            paths,
            saved: Default::default(),
        }
    }

    fn pragma_int(&self, name: &str) -> Result<i64, DbError> {
        self.conn
            .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
            .map_err(from_sqlite)
    }

    fn set_pragma(&self, name: &str, value: i64) -> Result<(), DbError> {
        self.conn
            .pragma_update(None, name, value)
            .map_err(from_sqlite)
    }
}

/// A write transaction (the write lock at once) and its end.
const BEGIN: &str = "BEGIN IMMEDIATE";
const COMMIT: &str = "COMMIT";

/// The writer's connection with the statements it runs for every run held prepared
/// for the writer's life ([`Db::hold`]). A held statement is found by comparing its
/// text (its address first); rusqlite's statement cache, which every other statement
/// still goes through, hashes the whole text twice per use and copies it into a new
/// key — for the writer's statements, a visible share of its time per run.
pub(crate) struct Held<'c> {
    db: &'c SqliteDb,
    statements: Vec<(&'static str, RefCell<rusqlite::Statement<'c>>)>,
}

impl<'c> Held<'c> {
    /// The held statement for `sql`, unless it is not held or already in use (a
    /// statement run while its own rows are read goes through the cache).
    fn find(&self, sql: &str) -> Option<std::cell::RefMut<'_, rusqlite::Statement<'c>>> {
        let (_, st) = self
            .statements
            .iter()
            .find(|(held, _)| std::ptr::eq(*held, sql) || *held == sql)?;
        st.try_borrow_mut().ok()
    }
}

/// Run the prepared query `st` with `args`, handing each row to `each`.
fn each_row(
    st: &mut rusqlite::Statement<'_>,
    args: &[Arg<'_>],
    each: &mut dyn FnMut(&dyn Row) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let mut rows = st
        .query(rusqlite::params_from_iter(args))
        .map_err(from_sqlite)?;
    while let Some(row) = rows.next().map_err(from_sqlite)? {
        each(&SqliteRow(row))?;
    }
    Ok(())
}

impl Db for Held<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64, DbError> {
        let Some(mut st) = self.find(sql) else {
            return self.db.execute(sql, args);
        };
        let n = st
            .execute(rusqlite::params_from_iter(args))
            .map_err(from_sqlite)?;
        Ok(n as u64)
    }

    fn query(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        each: &mut dyn FnMut(&dyn Row) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        let Some(mut st) = self.find(sql) else {
            return self.db.query(sql, args, each);
        };
        each_row(&mut st, args, each)
    }

    fn begin(&self) -> Result<(), DbError> {
        self.execute(BEGIN, &[]).map(|_| ())
    }

    fn commit(&self) -> Result<(), DbError> {
        self.execute(COMMIT, &[]).map(|_| ())
    }

    fn rollback(&self) -> Result<(), DbError> {
        self.db.rollback()
    }

    fn in_transaction(&self) -> bool {
        self.db.in_transaction()
    }

    fn statement_atomic(&self) -> bool {
        self.db.statement_atomic()
    }

    fn total_changes(&self) -> Option<u64> {
        self.db.total_changes()
    }

    fn probe_boot(&self, boot_id: &str) -> Result<Liveness, LedgerError> {
        self.db.probe_boot(boot_id)
    }

    fn hold_boot(&self, boot_id: &str) -> Result<Option<BootLock>, LedgerError> {
        self.db.hold_boot(boot_id)
    }

    fn tune(&self, t: Tuning) -> Result<(), DbError> {
        self.db.tune(t)
    }
}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match *self {
            Arg::Null => ToSqlOutput::Owned(Value::Null),
            Arg::Int(n) => ToSqlOutput::Owned(Value::Integer(n)),
            Arg::Real(f) => ToSqlOutput::Owned(Value::Real(f)),
            Arg::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        })
    }
}

struct SqliteRow<'a, 'b>(&'a rusqlite::Row<'b>);

impl Row for SqliteRow<'_, '_> {
    fn cell(&self, i: usize) -> Result<Cell<'_>, DbError> {
        use rusqlite::types::ValueRef;
        Ok(match self.0.get_ref(i).map_err(from_sqlite)? {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(n) => Cell::Int(n),
            ValueRef::Real(f) => Cell::Real(f),
            ValueRef::Text(t) => {
                Cell::Text(std::str::from_utf8(t).map_err(|e| DbError::column(i, e.to_string()))?)
            }
            ValueRef::Blob(b) => Cell::Other("blob", b.len()),
        })
    }
}

/// An SQLite error in the ledger's terms.
pub(crate) fn from_sqlite(e: rusqlite::Error) -> DbError {
    use rusqlite::ErrorCode as C;
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
        {
            DbErrorKind::Duplicate
        }
        _ => match e.sqlite_error_code() {
            Some(C::DatabaseBusy | C::DatabaseLocked | C::SystemIoFailure | C::DiskFull) => {
                DbErrorKind::Transient
            }
            _ => DbErrorKind::Other,
        },
    };
    DbError {
        kind,
        detail: e.to_string(),
        unanswered: None,
    }
}

impl Db for SqliteDb {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64, DbError> {
        let mut st = self.conn.prepare_cached(sql).map_err(from_sqlite)?;
        let n = st
            .execute(rusqlite::params_from_iter(args))
            .map_err(from_sqlite)?;
        Ok(n as u64)
    }

    fn query(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        each: &mut dyn FnMut(&dyn Row) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        let mut st = self.conn.prepare_cached(sql).map_err(from_sqlite)?;
        each_row(&mut st, args, each)
    }

    fn begin(&self) -> Result<(), DbError> {
        self.execute(BEGIN, &[]).map(|_| ())
    }

    fn commit(&self) -> Result<(), DbError> {
        self.execute(COMMIT, &[]).map(|_| ())
    }

    fn rollback(&self) -> Result<(), DbError> {
        if self.conn.is_autocommit() {
            return Ok(());
        }
        self.execute("ROLLBACK", &[]).map(|_| ())
    }

    fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }

    fn statement_atomic(&self) -> bool {
        true
    }

    fn total_changes(&self) -> Option<u64> {
        Some(self.conn.total_changes())
    }

    fn hold<'c>(&'c self, sqls: &[&'static str]) -> Option<Box<dyn Db + 'c>> {
        let mut statements = Vec::with_capacity(sqls.len() + 2);
        for &sql in [BEGIN, COMMIT].iter().chain(sqls) {
            // One that does not prepare (it cannot, against a ledger this build
            // opened) is left to the statement cache, which reports the error.
            if let Ok(st) = self
                .conn
                .prepare_with_flags(sql, rusqlite::PrepFlags::SQLITE_PREPARE_PERSISTENT)
            {
                statements.push((sql, RefCell::new(st)));
            }
        }
        Some(Box::new(Held {
            db: self,
            statements,
        }))
    }

    fn probe_boot(&self, boot_id: &str) -> Result<Liveness, LedgerError> {
        super::liveness::probe(&self.paths, boot_id)
    }

    fn hold_boot(&self, boot_id: &str) -> Result<Option<BootLock>, LedgerError> {
        BootLock::acquire(&self.paths, boot_id).map(Some)
    }

    fn tune(&self, t: Tuning) -> Result<(), DbError> {
        let (ckpt, cache) = self.saved.get();
        match t {
            Tuning::SuspendCheckpoints => {
                let pages = self.pragma_int("wal_autocheckpoint")?;
                self.set_pragma("wal_autocheckpoint", 0)?;
                self.saved.set((Some(pages), cache));
            }
            Tuning::ResumeCheckpoints => {
                if let Some(pages) = ckpt {
                    self.set_pragma("wal_autocheckpoint", pages)?;
                    self.saved.set((None, cache));
                }
            }
            Tuning::CheckpointPassive => {
                self.conn
                    .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    .map_err(from_sqlite)?;
            }
            Tuning::RecoveryCache => {
                let old = self.pragma_int("cache_size")?;
                self.set_pragma("cache_size", -RECOVERY_CACHE_KIB)?;
                self.saved.set((ckpt, Some(old)));
            }
            Tuning::NormalCache => {
                if let Some(old) = cache {
                    self.set_pragma("cache_size", old)?;
                    self.saved.set((ckpt, None));
                }
            }
        }
        Ok(())
    }
}
