//! The database schema, its migrations, and the check that a file at the ledger path
//! really is a brood ledger before anything writes to it.
//!
//! The schema version lives in SQLite's `user_version`; the table `brood_meta` holds
//! the marker row `('schema', 'brood.ledger')` that tells our database apart from
//! any other SQLite file. Migration `n` (1-based) takes the schema from version
//! `n - 1` to `n`; all of them run in one `BEGIN IMMEDIATE` transaction that
//! re-checks the version, so two processes opening a fresh workspace at once migrate
//! it exactly once.

use std::io::Read;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::error::{LedgerError, SqlContext};

/// The marker value in `brood_meta` under key `schema`.
pub(crate) const MARKER: &str = "brood.ledger";

/// Version 1: runs, events, transcripts (without spill columns), boots.
const V1: &str = r#"
CREATE TABLE brood_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO brood_meta (key, value) VALUES ('schema', 'brood.ledger');

CREATE TABLE boots (
    boot_id    TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at INTEGER NOT NULL
);

CREATE TABLE runs (
    id                  TEXT PRIMARY KEY,
    parent_id           TEXT,
    root_id             TEXT NOT NULL,
    depth               INTEGER NOT NULL,
    session_id          TEXT NOT NULL,
    session_boot_id     TEXT NOT NULL,
    name                TEXT,
    role                TEXT,
    agent_type          TEXT,
    objective           TEXT NOT NULL,
    model               TEXT,
    provider            TEXT,
    workspace           TEXT NOT NULL,
    git_branch          TEXT,
    status              TEXT NOT NULL,
    status_reason       TEXT,
    created_at          INTEGER NOT NULL,
    started_at          INTEGER,
    ended_at            INTEGER,
    steps               INTEGER NOT NULL DEFAULT 0,
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    result              TEXT,
    error               TEXT
);
CREATE INDEX runs_by_session ON runs (session_id, created_at);
CREATE INDEX runs_by_boot_status ON runs (session_boot_id, status);
CREATE INDEX runs_by_parent ON runs (parent_id);
CREATE INDEX runs_by_root ON runs (root_id);

CREATE TABLE events (
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TABLE transcripts (
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    role    TEXT NOT NULL,
    content TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"#;

/// Version 2: transcript spill columns, boot end markers and host, cancel requests.
const V2: &str = r#"
ALTER TABLE transcripts ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE transcripts ADD COLUMN full_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE transcripts ADD COLUMN spill_path TEXT;
UPDATE transcripts SET full_bytes = length(CAST(content AS BLOB));

ALTER TABLE boots ADD COLUMN ended_at INTEGER;
ALTER TABLE boots ADD COLUMN host TEXT;

CREATE TABLE cancel_requests (
    run_id       TEXT PRIMARY KEY,
    boot_id      TEXT NOT NULL,
    requested_at INTEGER NOT NULL
);
CREATE INDEX cancel_requests_by_boot ON cancel_requests (boot_id);
"#;

/// Version 3: results move out of `runs` into `run_results` (a result is kilobytes;
/// inline, it made every scan of `runs` read them), and the per-session index also
/// holds `id`, so a listing's `ORDER BY created_at, id` is read in index order.
/// `runs.result` stays, always NULL: `ALTER TABLE … DROP COLUMN` would rewrite the
/// table, and in a measurement every later commit on such a database was ~10× slower
/// (0.4 → 4 ms per awaited commit).
const V3: &str = r#"
CREATE TABLE run_results (
    run_id TEXT PRIMARY KEY,
    result TEXT NOT NULL
);
INSERT INTO run_results (run_id, result) SELECT id, result FROM runs WHERE result IS NOT NULL;
UPDATE runs SET result = NULL WHERE result IS NOT NULL;

CREATE INDEX runs_by_session_order ON runs (session_id, created_at, id);
DROP INDEX runs_by_session;
"#;

/// Version 4: each run's cost, priced as each model answer is recorded (a later
/// change of prices leaves it as it was). `cost_usd` sums the priced answers;
/// `priced_steps` counts them, so a run whose every step was priced has
/// `priced_steps = steps`, and fewer means some answer had no price (its cost is
/// unknown). Rows from before this version keep `priced_steps` NULL (their cost was
/// never recorded; NULL stays NULL as later steps add to it): a reader may price
/// them at today's prices and must say so.
const V4: &str = r#"
ALTER TABLE runs ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN priced_steps INTEGER;
"#;

/// Version 5: `unpriced` marks a run whose model had no price when it was opened,
/// so its cost is unknown even before (or without) any answer: a run that made no
/// request shows no cost rather than 0.
const V5: &str = r#"
ALTER TABLE runs ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0;
"#;

/// Version 6: the fleet's leases (docs/FLEET.md). A row exists for each run placed in
/// the fleet (enqueued for a worker, `brood worker`): where it runs (`repo`, `rev`),
/// which worker boot holds it until `expires_at` (NULL while queued or released), and
/// how many times it was claimed. Only a PostgreSQL ledger has rows in it (the fleet
/// needs one); an SQLite ledger carries the empty table so both backends keep one
/// schema, and nothing on its write path reads it.
pub(crate) const V6: &str = r#"
CREATE TABLE run_leases (
    run_id         TEXT PRIMARY KEY,
    worker_boot_id TEXT,
    claimed_at     INTEGER,
    expires_at     INTEGER,
    attempt        INTEGER NOT NULL DEFAULT 0,
    max_attempts   INTEGER NOT NULL,
    repo           TEXT NOT NULL,
    rev            TEXT,
    enqueued_at    INTEGER NOT NULL
);
"#;

/// Version 7: spilled text kept in the database (`spill.rs`): the full text of each
/// transcript message over the cap, by run and seq. Only a PostgreSQL ledger has rows
/// in it (machines sharing it do not share a spill directory); an SQLite ledger keeps
/// its spill files and carries the empty table so both backends keep one schema.
const V7: &str = r#"
CREATE TABLE spills (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    text   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"#;

const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What sits at the database path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No file.
    Absent,
    /// A zero-length file or an SQLite database without any table: ready to be created.
    Empty,
    /// Our ledger at this schema version (1..=SCHEMA_VERSION).
    Ledger(i64),
}

const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Look at the file at `path` without writing to it.
pub(crate) fn inspect(path: &Path) -> Result<Found, LedgerError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Absent),
        Err(e) => return Err(LedgerError::io(path, e)),
    };
    if !meta.is_file() {
        return Err(not_ours(path, "it is not a regular file"));
    }
    if meta.len() == 0 {
        return Ok(Found::Empty);
    }
    let mut header = [0u8; 16];
    let mut file = std::fs::File::open(path).map_err(|e| LedgerError::io(path, e))?;
    let n = read_up_to(&mut file, &mut header).map_err(|e| LedgerError::io(path, e))?;
    if n < header.len() || &header != SQLITE_HEADER {
        return Err(not_ours(path, "it is not an SQLite database"));
    }
    drop(file);
    let conn = super::query_only::open_query_only(path)
        .map_err(|e| not_ours(path, &format!("SQLite cannot open it: {e}")))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .ctx("setting the busy timeout")?;
    classify(&conn, path)
}

/// Decide what an open connection holds (also used inside the migration transaction).
fn classify(conn: &Connection, path: &Path) -> Result<Found, LedgerError> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| not_ours(path, &format!("its schema cannot be read: {e}")))?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .ctx("reading the schema version")?;
    if tables.is_empty() {
        if version == 0 {
            return Ok(Found::Empty);
        }
        return Err(not_ours(
            path,
            &format!("an SQLite database with user_version {version} but no tables"),
        ));
    }
    if !tables.iter().any(|t| t == "brood_meta") {
        let shown: Vec<&str> = tables.iter().take(8).map(String::as_str).collect();
        return Err(not_ours(
            path,
            &format!(
                "an SQLite database of another program (tables: {})",
                shown.join(", ")
            ),
        ));
    }
    let marker: Option<String> = conn
        .query_row(
            "SELECT value FROM brood_meta WHERE key = 'schema'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| not_ours(path, &format!("its brood_meta table is unreadable: {e}")))?;
    if marker.as_deref() != Some(MARKER) {
        return Err(not_ours(
            path,
            "its brood_meta table lacks the brood.ledger marker",
        ));
    }
    if version > SCHEMA_VERSION {
        return Err(LedgerError::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < 1 {
        return Err(not_ours(
            path,
            "it has the brood marker but no schema version",
        ));
    }
    Ok(Found::Ledger(version))
}

/// Bring the database on `conn` (opened read-write, WAL already set) to
/// [`SCHEMA_VERSION`]. Re-checks what the file holds inside the write transaction.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), LedgerError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .ctx("starting the migration transaction")?;
    let from = match classify(&tx, path)? {
        Found::Absent | Found::Empty => 0,
        Found::Ledger(v) => v,
    };
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        let to = i + 1;
        tx.execute_batch(sql)
            .ctx(&format!("migrating the ledger schema to version {to}"))?;
    }
    if from < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .ctx("recording the schema version")?;
    }
    tx.commit().ctx("committing the migration")
}

fn not_ours(path: &Path, reason: &str) -> LedgerError {
    LedgerError::NotALedger {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|r| !r.is_empty()) {
        match file.read(rest)? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}
