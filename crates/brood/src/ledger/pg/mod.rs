//! The PostgreSQL backend of the ledger (`ledger_url = "postgres://…"`): the same
//! schema (version [`SCHEMA_VERSION`]) and the same operations as SQLite, through the
//! [`Db`] seam, on a blocking client of brood's own over tokio-postgres (`client.rs`:
//! connecting bounded as a whole by `connect_timeout`).
//!
//! - **Connections.** The writer thread owns one connection (its statements prepared
//!   once and cached); each reader and maintenance handle opens its own. TCP with
//!   the URL's `sslmode` (`tls.rs`; a remote host defaults to `verify-full`), or a
//!   Unix socket (`?host=/path`). The URL is parsed once ([`PgTarget`]), so every
//!   connection of a ledger has the same TLS.
//! - **Durability.** `Durability::Full` commits with `synchronous_commit = on` (the
//!   server flushes its WAL before it answers), `Normal` with `off`.
//! - **Liveness.** A boot holds the session-level advisory lock
//!   `pg_advisory_lock(key(boot_id))` on the writer's connection; the server drops it
//!   when that connection ends, however the process dies. A probe is
//!   `pg_try_advisory_lock` from another connection: taken (then released at once)
//!   means dead, refused means alive — the same test the SQLite ledger makes with a
//!   lock file's `flock`, and it works across machines.
//! - **Schema.** Created at the current version in one transaction under
//!   `pg_advisory_xact_lock`, so two first opens create it once. The version is the
//!   `brood_meta` row `version` (SQLite keeps it in `user_version`). Ids are `TEXT
//!   COLLATE "C"`, so prefix lookups and orderings are by bytes as in SQLite.
//! - **Lost connections.** The writer's connection is made again when the server
//!   ends it (a restart, `pg_terminate_backend`, a network drop): [`Db::reconnect`]
//!   tries for `reconnect_for` with a backoff, replays the session's settings, ends
//!   the old backend if it outlived the connection (so its open transaction is
//!   rolled back and its advisory locks are freed), reads the fate of the last
//!   transaction by its id (`txid_status`: a COMMIT whose answer was lost is found
//!   committed, not written again), and takes this boot's advisory lock again.
//!   A [`PgListener`] listens again and says so (notifications sent meanwhile are
//!   lost; its callers read the ledger).
//! - **Silent servers.** Every statement is bounded by the URL's `query_timeout`
//!   (`client.rs`); one that timed out loses its connection (never used again
//!   mid-protocol), so the writer connects again as above, and a reader fails with
//!   [`LedgerError::QueryTimeout`]. A listener checks its quiet connection with a
//!   statement every `keepalives_idle` (`listen.rs`).
//! - **Statements in one transaction.** A failed statement aborts a PostgreSQL
//!   transaction, so every op of a group commit runs in its own savepoint
//!   ([`Db::statement_atomic`] is false).
//!
//! The client runs its own small Tokio runtime inside each call; called
//! from a thread that is inside another runtime (a test's async body, a blocking
//! task), a call is run on a scoped helper thread instead.

use std::cell::{Cell as StdCell, RefCell};
use std::collections::HashMap;
use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::Statement;

use super::db::{
    args, query_one, Arg, Cell, Db, DbError, DbErrorKind, Dialect, Row, RowExt, Unanswered,
};
use super::error::{LedgerError, SqlContext};
use super::liveness::{BootLock, DeadBoot, Liveness};
use super::paths::LedgerPaths;
use super::schema::{MARKER, SCHEMA_VERSION};
use super::types::Durability;
use ddl::{MIGRATIONS, SCHEMA};

mod client;
mod ddl;
mod listen;
mod reconnect;
mod target;
mod tls;

use client::{Conn, StatementFailure};
pub(crate) use listen::{listen, PgListener};
use reconnect::{is_lost, Track};
pub(crate) use target::PgTarget;

/// The advisory lock that serializes schema setup (any constant unlikely to be
/// another program's: "brood" in ASCII).
const SETUP_LOCK: i64 = 0x62_726f_6f64;

/// A connection to a PostgreSQL ledger.
pub(crate) struct PgDb {
    /// `None` while dropping (closed where the client may block) or after the
    /// connection was lost and not yet made again.
    client: RefCell<Option<Conn>>,
    statements: RefCell<HashMap<String, Statement>>,
    in_tx: StdCell<bool>,
    target: Arc<PgTarget>,
    /// Set by an error that lost the connection.
    lost: StdCell<bool>,
    /// Why, when a statement went unanswered (`query_timeout`): said when
    /// connecting again fails.
    lost_to: RefCell<Option<String>>,
    /// What [`Db::reconnect`] needs; `None` for the short-lived connections
    /// (readers, maintenance), which are opened afresh for each use.
    track: Option<Track>,
}

/// Open (creating the schema when the database has none) the writer's connection.
/// A server out of reach (refusing, dropping the connection, starting up) is tried
/// again with the reconnections' backoff for up to `reconnect_for`, so a worker
/// started while the database restarts waits for it; any other failure (TLS,
/// authentication, not a ledger) is returned at once.
pub(crate) fn open_writer(
    target: &Arc<PgTarget>,
    paths: &LedgerPaths,
    durability: Durability,
    reconnect_for: Duration,
) -> Result<Box<dyn Db + Send>, LedgerError> {
    paths.create_dirs()?;
    let out_of_reach = StdCell::new(false);
    reconnect::with_backoff_while(
        &target.shown(),
        reconnect_for,
        || out_of_reach.get(),
        |_| {
            out_of_reach.set(false);
            let client = target.try_connect().map_err(|(e, reach)| {
                out_of_reach.set(reach);
                e
            })?;
            let mut db = PgDb::with_client(target, client);
            match set_up_writer(&mut db, durability, reconnect_for) {
                Ok(()) => Ok(Box::new(db) as Box<dyn Db + Send>),
                Err(e) => {
                    out_of_reach.set(db.connection_lost());
                    Err(e)
                }
            }
        },
    )
}

/// How long the writer may sit idle inside a transaction before the server ends it:
/// reached only by a process stopped mid-batch (SIGSTOP, hung, suspended), whose row
/// locks would keep other workers from taking its runs over (`ledger::fleet_fence`).
const WRITER_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

/// The writer's session settings and the schema check on a new connection.
fn set_up_writer(
    db: &mut PgDb,
    durability: Durability,
    reconnect_for: Duration,
) -> Result<(), LedgerError> {
    db.track = Some(Track {
        settings: RefCell::new(Vec::new()),
        boot: RefCell::new(None),
        backend: RefCell::new(None),
        xid: StdCell::new(None),
        reconnect_for,
    });
    db.note_backend().ctx("reading this connection's backend")?;
    let sync = match durability {
        Durability::Full => "on",
        Durability::Normal => "off",
    };
    db.setting(&format!("SET synchronous_commit = {sync}"))
        .ctx("setting synchronous_commit")?;
    let idle = WRITER_IDLE_IN_TRANSACTION.as_millis();
    db.setting(&format!("SET idle_in_transaction_session_timeout = {idle}"))
        .ctx("setting idle_in_transaction_session_timeout")?;
    db.begin().ctx("starting the schema check")?;
    let setup = (|| {
        db.execute("SELECT pg_advisory_xact_lock(?1)", args![SETUP_LOCK])
            .ctx("waiting for the schema lock")?;
        match found(db)? {
            Some(SCHEMA_VERSION) => Ok(()),
            Some(from) => {
                for (to, sql) in MIGRATIONS.iter().filter(|(to, _)| *to > from) {
                    db.simple(sql)
                        .ctx(&format!("migrating the ledger schema to version {to}"))?;
                }
                db.execute(
                    "UPDATE brood_meta SET value = ?1 WHERE key = 'version'",
                    args![SCHEMA_VERSION.to_string().as_str()],
                )
                .ctx("recording the schema version")
                .map(|_| ())
            }
            None => {
                db.simple(SCHEMA).ctx("creating the ledger schema")?;
                for (_, sql) in MIGRATIONS {
                    db.simple(sql).ctx("creating the ledger schema")?;
                }
                db.execute(
                    "INSERT INTO brood_meta (key, value) VALUES ('schema', ?1), ('version', ?2)",
                    args![MARKER, SCHEMA_VERSION.to_string().as_str()],
                )
                .ctx("recording the schema version")
                .map(|_| ())
            }
        }
    })();
    match setup {
        Ok(()) => db.commit().ctx("committing the schema"),
        Err(e) => {
            let _ = db.rollback();
            Err(e)
        }
    }
}

/// Connect to an existing ledger (readers, maintenance): [`LedgerError::Missing`]
/// when the database has no ledger yet; nothing is created.
pub(crate) fn open_existing(target: &Arc<PgTarget>) -> Result<Box<dyn Db + Send>, LedgerError> {
    let db = PgDb::connect(target)?;
    match found(&db)? {
        Some(_) => Ok(Box::new(db)),
        None => Err(LedgerError::Missing {
            path: PathBuf::from(target.shown()),
        }),
    }
}

/// The schema version of the ledger at `url` (`brood doctor`), `None` when the
/// database has none yet; connects, creates nothing.
pub(crate) fn inspect(target: &Arc<PgTarget>) -> Result<Option<i64>, LedgerError> {
    found(&PgDb::connect(target)?)
}

/// The schema version of the ledger in the database, `None` when it has none yet.
/// Another program's tables, or a version this build does not know, are refused.
fn found(db: &PgDb) -> Result<Option<i64>, LedgerError> {
    let place = || PathBuf::from(db.target.shown());
    let has_meta = query_one(
        db,
        "SELECT to_regclass('brood_meta') IS NOT NULL",
        &[],
        |r| r.bool(0),
    )
    .ctx("looking for the ledger's tables")?;
    if !has_meta {
        let tables = super::db::query_vec(
            db,
            "SELECT CAST(table_name AS TEXT) FROM information_schema.tables
             WHERE table_schema = current_schema() ORDER BY table_name LIMIT 8",
            &[],
            |r| r.string(0),
        )
        .ctx("listing the database's tables")?;
        if tables.is_empty() {
            return Ok(None);
        }
        return Err(LedgerError::NotALedger {
            path: place(),
            reason: format!(
                "a PostgreSQL database of another program (tables: {})",
                tables.join(", ")
            ),
        });
    }
    let meta = super::db::query_vec(
        db,
        "SELECT key, value FROM brood_meta WHERE key IN ('schema', 'version')",
        &[],
        |r| Ok((r.string(0)?, r.string(1)?)),
    )
    .ctx("reading brood_meta")?;
    let get = |k: &str| {
        meta.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    if get("schema") != Some(MARKER) {
        return Err(LedgerError::NotALedger {
            path: place(),
            reason: "its brood_meta table lacks the brood.ledger marker".into(),
        });
    }
    let version: i64 = get("version").and_then(|v| v.parse().ok()).unwrap_or(0);
    if version > SCHEMA_VERSION {
        return Err(LedgerError::SchemaTooNew {
            path: place(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < 5 {
        // PostgreSQL ledgers started at version 5; there is nothing older to migrate.
        return Err(LedgerError::NotALedger {
            path: place(),
            reason: format!("it records schema version {version}, which no PostgreSQL ledger had"),
        });
    }
    Ok(Some(version))
}

impl PgDb {
    fn connect(target: &Arc<PgTarget>) -> Result<PgDb, LedgerError> {
        Ok(PgDb::with_client(target, target.connect()?))
    }

    fn with_client(target: &Arc<PgTarget>, client: Conn) -> PgDb {
        PgDb {
            client: RefCell::new(Some(client)),
            statements: RefCell::new(HashMap::new()),
            in_tx: StdCell::new(false),
            target: target.clone(),
            lost: StdCell::new(false),
            lost_to: RefCell::new(None),
            track: None,
        }
    }

    /// A DbError from the client's, noting whether the connection went with it.
    fn fail_pg(&self, e: tokio_postgres::Error) -> DbError {
        if is_lost(&e) {
            self.lost.set(true);
        }
        from_pg(e)
    }

    /// A DbError from a statement's failure: one that went unanswered, or found the
    /// connection broken by one before, lost the connection.
    fn fail(&self, f: StatementFailure) -> DbError {
        let secs = match f {
            StatementFailure::Pg(e) => return self.fail_pg(e),
            StatementFailure::Broken => {
                self.lost.set(true);
                return closed();
            }
            StatementFailure::TimedOut(limit) => limit.as_secs(),
        };
        self.lost.set(true);
        let host = self.target.host().to_string();
        let detail = format!("{host} did not answer a statement within {secs} s (query_timeout)");
        *self.lost_to.borrow_mut() = Some(detail.clone());
        DbError {
            kind: DbErrorKind::Other,
            detail,
            unanswered: Some(Box::new(Unanswered {
                url: self.target.shown(),
                host,
                secs,
            })),
        }
    }

    /// Statements without arguments, by the simple protocol (one round trip).
    fn simple(&self, sql: &str) -> Result<(), DbError> {
        let mut guard = self.client.borrow_mut();
        let client: &mut Conn = guard.as_mut().ok_or_else(closed)?;
        off_runtime(move || client.batch_execute(sql)).map_err(|e| self.fail(e))
    }

    /// A session setting, run now and again on every new connection.
    fn setting(&self, sql: &str) -> Result<(), DbError> {
        self.simple(sql)?;
        if let Some(t) = &self.track {
            t.settings.borrow_mut().push(sql.to_string());
        }
        Ok(())
    }

    /// Remember this connection's backend (pid and start), to end it should it
    /// outlive the connection.
    fn note_backend(&self) -> Result<(), DbError> {
        let Some(t) = &self.track else { return Ok(()) };
        let backend = query_one(
            self,
            "SELECT CAST(pg_backend_pid() AS BIGINT), CAST(backend_start AS TEXT)
             FROM pg_stat_activity WHERE pid = pg_backend_pid()",
            &[],
            |r| Ok((r.i64(0)?, r.string(1)?)),
        )?;
        *t.backend.borrow_mut() = Some(backend);
        Ok(())
    }

    fn prepared(&self, sql: &str) -> Result<Statement, DbError> {
        if let Some(st) = self.statements.borrow().get(sql) {
            return Ok(st.clone());
        }
        let text = placeholders(sql);
        let st = {
            let mut guard = self.client.borrow_mut();
            let client: &mut Conn = guard.as_mut().ok_or_else(closed)?;
            off_runtime(move || client.prepare(&text)).map_err(|e| self.fail(e))?
        };
        let mut cache = self.statements.borrow_mut();
        // Listings with dead boots write their ids into the text: keep the cache bounded.
        if cache.len() >= 256 {
            cache.clear();
        }
        cache.insert(sql.to_string(), st.clone());
        Ok(st)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        // Closing the connection blocks on the client's runtime too.
        if let Some(client) = self.client.get_mut().take() {
            off_runtime(move || drop(client));
        }
    }
}

fn closed() -> DbError {
    DbError::other("the connection is closed")
}

/// Run `f` where the `postgres` client may block: on this thread, or on a scoped
/// helper thread when this one is inside a Tokio runtime (the client's own runtime
/// cannot be entered from there).
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// `?N` placeholders (the ledger's one dialect) as PostgreSQL's `$N`, outside quotes.
fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted: Option<char> = None;
    for c in sql.chars() {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quoted = Some(c),
            (None, '?') => {
                out.push('$');
                continue;
            }
            (None, _) => {}
        }
        out.push(c);
    }
    out
}

/// A PostgreSQL error with what the server said (SQLSTATE and message).
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match e.source() {
            Some(src) => format!("{e}: {src}"),
            None => e.to_string(),
        },
    }
}

fn from_pg(e: tokio_postgres::Error) -> DbError {
    use tokio_postgres::error::SqlState;
    let kind = match e.code() {
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => DbErrorKind::Duplicate,
        _ => DbErrorKind::Other,
    };
    DbError {
        kind,
        detail: describe(&e),
        unanswered: None,
    }
}

/// A 64-bit advisory lock key for a boot id (FNV-1a of a namespaced id: stable
/// across builds and machines).
fn boot_key(boot_id: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "brood.boot:".bytes().chain(boot_id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h as i64
}

impl ToSql for Arg<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match *self {
            Arg::Null => Ok(IsNull::Yes),
            Arg::Int(n) => match *ty {
                Type::INT8 => n.to_sql(ty, out),
                Type::INT4 => i32::try_from(n)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(n)?.to_sql(ty, out),
                Type::FLOAT8 => (n as f64).to_sql(ty, out),
                Type::BOOL => (n != 0).to_sql(ty, out),
                _ => n.to_string().as_str().to_sql(ty, out),
            },
            Arg::Real(f) => match *ty {
                Type::FLOAT4 => (f as f32).to_sql(ty, out),
                _ => f.to_sql(ty, out),
            },
            // PostgreSQL text cannot hold NUL; SQLite can. Shown as U+2400 (␀).
            Arg::Text(s) if s.contains('\0') => s.replace('\0', "\u{2400}").to_sql(ty, out),
            Arg::Text(s) => s.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

struct PgRow<'a>(&'a tokio_postgres::Row);

impl Row for PgRow<'_> {
    fn cell(&self, i: usize) -> Result<Cell<'_>, DbError> {
        let row = self.0;
        let ty = row
            .columns()
            .get(i)
            .map(|c| c.type_().clone())
            .ok_or_else(|| DbError::column(i, "no such column".into()))?;
        let bad = |e: tokio_postgres::Error| DbError::column(i, describe(&e));
        let int = |n: Option<i64>| n.map_or(Cell::Null, Cell::Int);
        Ok(match ty {
            Type::INT8 => int(row.try_get::<_, Option<i64>>(i).map_err(bad)?),
            Type::INT4 => int(row
                .try_get::<_, Option<i32>>(i)
                .map_err(bad)?
                .map(i64::from)),
            Type::INT2 => int(row
                .try_get::<_, Option<i16>>(i)
                .map_err(bad)?
                .map(i64::from)),
            Type::BOOL => int(row
                .try_get::<_, Option<bool>>(i)
                .map_err(bad)?
                .map(i64::from)),
            Type::FLOAT8 => row
                .try_get::<_, Option<f64>>(i)
                .map_err(bad)?
                .map_or(Cell::Null, Cell::Real),
            Type::FLOAT4 => row
                .try_get::<_, Option<f32>>(i)
                .map_err(bad)?
                .map_or(Cell::Null, |f| Cell::Real(f64::from(f))),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => row
                .try_get::<_, Option<&str>>(i)
                .map_err(bad)?
                .map_or(Cell::Null, Cell::Text),
            _ => Cell::Other("value of another type", 0),
        })
    }
}

impl Db for PgDb {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64, DbError> {
        if args.is_empty() && is_control(sql) {
            self.simple(sql)?;
            return Ok(0);
        }
        let st = self.prepared(sql)?;
        let params: Vec<&(dyn ToSql + Sync)> =
            args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
        let mut guard = self.client.borrow_mut();
        let client: &mut Conn = guard.as_mut().ok_or_else(closed)?;
        off_runtime(move || client.execute(&st, &params)).map_err(|e| self.fail(e))
    }

    fn query(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        each: &mut dyn FnMut(&dyn Row) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        let st = self.prepared(sql)?;
        let params: Vec<&(dyn ToSql + Sync)> =
            args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
        let rows = {
            let mut guard = self.client.borrow_mut();
            let client: &mut Conn = guard.as_mut().ok_or_else(closed)?;
            off_runtime(move || client.query(&st, &params)).map_err(|e| self.fail(e))?
        };
        for row in &rows {
            each(&PgRow(row))?;
        }
        Ok(())
    }

    fn begin(&self) -> Result<(), DbError> {
        let Some(t) = &self.track else {
            self.simple("BEGIN")?;
            self.in_tx.set(true);
            return Ok(());
        };
        // The writer's: with the transaction's id, in the same round trip, so that
        // after a lost connection its fate can be read (`reconnect`).
        t.xid.set(None);
        let xid = {
            let mut guard = self.client.borrow_mut();
            let client: &mut Conn = guard.as_mut().ok_or_else(closed)?;
            let answer = off_runtime(move || client.simple_query("BEGIN; SELECT txid_current()"))
                .map_err(|e| self.fail(e))?;
            answer.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse().ok()),
                _ => None,
            })
        };
        self.in_tx.set(true);
        t.xid.set(xid);
        Ok(())
    }

    fn commit(&self) -> Result<(), DbError> {
        // A COMMIT ends the transaction whatever it answers.
        self.in_tx.set(false);
        self.simple("COMMIT")
    }

    fn rollback(&self) -> Result<(), DbError> {
        if !self.in_tx.replace(false) {
            return Ok(());
        }
        self.simple("ROLLBACK")
    }

    fn in_transaction(&self) -> bool {
        self.in_tx.get()
    }

    fn statement_atomic(&self) -> bool {
        false
    }

    fn probe_boot(&self, boot_id: &str) -> Result<Liveness, LedgerError> {
        let key = boot_key(boot_id);
        let taken = query_one(self, "SELECT pg_try_advisory_lock(?1)", args![key], |r| {
            r.bool(0)
        })
        .ctx("probing a boot's lock")?;
        if !taken {
            return Ok(Liveness::Alive);
        }
        self.execute("SELECT pg_advisory_unlock(?1)", args![key])
            .ctx("releasing a dead boot's lock")?;
        Ok(Liveness::Dead(DeadBoot::without_file()))
    }

    fn hold_boot(&self, boot_id: &str) -> Result<Option<BootLock>, LedgerError> {
        let taken = query_one(
            self,
            "SELECT pg_try_advisory_lock(?1)",
            args![boot_key(boot_id)],
            |r| r.bool(0),
        )
        .ctx("taking this boot's lock")?;
        if !taken {
            return Err(LedgerError::Lock {
                path: PathBuf::from(format!("advisory lock of boot {boot_id}")),
                detail: "a fresh boot's lock is already held".into(),
            });
        }
        // Held by this connection until it closes (after the writer's last commit),
        // and taken again by a new connection should this one be lost.
        if let Some(t) = &self.track {
            *t.boot.borrow_mut() = Some(boot_id.to_string());
        }
        Ok(None)
    }

    fn connection_lost(&self) -> bool {
        self.lost.get() || self.client.borrow().as_ref().is_none_or(|c| c.is_closed())
    }

    fn reconnect(&self) -> Result<bool, LedgerError> {
        reconnect::reconnect(self)
    }
}

/// Transaction control and savepoints: sent by the simple protocol, never prepared.
fn is_control(sql: &str) -> bool {
    let word = sql.split_whitespace().next().unwrap_or("");
    ["BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"]
        .iter()
        .any(|w| word.eq_ignore_ascii_case(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_rewritten_outside_quotes_only() {
        assert_eq!(
            placeholders("SELECT '?1', \"a?\" FROM t WHERE a = ?1 AND b = ?12"),
            "SELECT '?1', \"a?\" FROM t WHERE a = $1 AND b = $12"
        );
    }

    #[test]
    fn the_migrations_end_at_the_schema_version() {
        assert_eq!(MIGRATIONS.last().map(|(v, _)| *v), Some(SCHEMA_VERSION));
    }

    #[test]
    fn boot_keys_are_stable_and_distinct() {
        assert_eq!(boot_key("a"), boot_key("a"));
        assert_ne!(boot_key("a"), boot_key("b"));
    }
}
