//! Where the ledger lives on disk and how its SQLite connections are opened: one
//! read-write connection per writer (WAL, chosen `synchronous`, busy timeout) and
//! read-only connections for readers. Also the timestamp encoding (Unix ms).

use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OpenFlags};

use super::db::Db;
use super::error::{LedgerError, SqlContext};
use super::paths::LedgerPaths;
use super::query_only::open_query_only;
use super::schema::{self, Found};
use super::sqlite::SqliteDb;
use super::types::Durability;

/// How long a read waits on a lock (only WAL recovery and checkpoints take them).
const READ_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a ledger's database is: the workspace's SQLite file (the default), or a
/// PostgreSQL database (`ledger_url = "postgres://…"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    Workspace,
    /// Parsed once (its TLS set up): every connection of a ledger is made alike.
    #[cfg(feature = "postgres")]
    Postgres(std::sync::Arc<super::pg::PgTarget>),
}

impl Location {
    /// From a `ledger_url` (None: the workspace's SQLite file).
    pub fn from_url(url: Option<&str>) -> Result<Location, LedgerError> {
        match url {
            None => Ok(Location::Workspace),
            #[cfg(feature = "postgres")]
            Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => Ok(
                Location::Postgres(std::sync::Arc::new(super::pg::PgTarget::parse(u)?)),
            ),
            Some(u) => Err(LedgerError::BadUrl {
                url: super::pg_url::redact(u),
                why: if cfg!(feature = "postgres") {
                    "a ledger URL starts with postgres:// or postgresql://".into()
                } else {
                    "this build of brood has no PostgreSQL backend (the `postgres` feature)".into()
                },
            }),
        }
    }
}

/// Open (creating and migrating when needed) the read-write connection.
pub(crate) fn open_writer(
    paths: &LedgerPaths,
    durability: Durability,
    busy_timeout: Duration,
) -> Result<Box<dyn Db + Send>, LedgerError> {
    paths.create_dirs()?;
    // Creating, switching to WAL and migrating are one step per workspace: two
    // first opens at once would otherwise race on a half-made file (the WAL switch
    // can answer BUSY without waiting, and one side may read the header the other is
    // writing). Held only for the setup; released when `_setup` is dropped.
    let _setup = setup_lock(paths)?;
    let found = schema::inspect(&paths.db)?;
    let mut conn = Connection::open_with_flags(
        &paths.db,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ctx("opening the ledger database")?;
    conn.busy_timeout(busy_timeout)
        .ctx("setting the busy timeout")?;
    // The writer cycles through ~20 cached statements (inserts, transitions, the
    // per-op savepoint); rusqlite keeps 16 by default, so some were parsed again
    // and again.
    conn.set_prepared_statement_cache_capacity(64);
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .ctx("switching to WAL mode")?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(LedgerError::Sqlite {
            context: "switching to WAL mode".into(),
            detail: format!("the database stayed in journal mode '{mode}'"),
        });
    }
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .ctx("setting synchronous")?;
    // Keep the WAL from growing without bound after a burst.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)
        .ctx("setting journal_size_limit")?;
    if found != Found::Ledger(schema::SCHEMA_VERSION) {
        schema::migrate(&mut conn, &paths.db)?;
    }
    Ok(Box::new(SqliteDb::new(conn, paths.clone())))
}

/// Block until this process holds the workspace's setup lock
/// (`.brood/state/open.lock`, an exclusive `flock` dropped with the returned file).
fn setup_lock(paths: &LedgerPaths) -> Result<std::fs::File, LedgerError> {
    let path = paths.state.join("open.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| LedgerError::io(&path, e))?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(LedgerError::io(&path, e.into())),
        }
    }
}

/// Open a read-only connection. A missing database is [`LedgerError::Missing`]; an
/// older schema is migrated first (through a short-lived write connection), so a newer
/// `brood` can read a workspace an older one wrote.
pub(crate) fn open_reader(paths: &LedgerPaths) -> Result<Box<dyn Db + Send>, LedgerError> {
    match schema::inspect(&paths.db)? {
        Found::Absent => {
            return Err(LedgerError::Missing {
                path: paths.db.clone(),
            })
        }
        // An empty file holds no runs; a reader creates nothing.
        Found::Empty => {
            return Err(LedgerError::Missing {
                path: paths.db.clone(),
            })
        }
        Found::Ledger(v) if v == schema::SCHEMA_VERSION => {}
        // A reader never migrates: an older live session may still be writing this
        // ledger with the schema it knows.
        Found::Ledger(found) => {
            return Err(LedgerError::NeedsUpgrade {
                path: paths.db.clone(),
                found,
                supported: schema::SCHEMA_VERSION,
            })
        }
    }
    let conn = open_query_only(&paths.db).ctx("opening the ledger database for reading")?;
    conn.busy_timeout(READ_BUSY_TIMEOUT)
        .ctx("setting the busy timeout")?;
    Ok(Box::new(SqliteDb::new(conn, paths.clone())))
}

pub(crate) fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

pub(crate) fn to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::UNIX_EPOCH)
}
