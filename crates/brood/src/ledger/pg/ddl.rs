//! The PostgreSQL ledger's schema: the tables at version 5 (the first a PostgreSQL
//! ledger had, matching SQLite's migrations 1–5 with PostgreSQL types) and the
//! migrations after it, run by `super::set_up_writer` under its set-up lock.

/// The schema at version 5, as SQLite's migrations 1–5 leave it (same tables,
/// columns and indexes; PostgreSQL types); [`MIGRATIONS`] take it to
/// [`SCHEMA_VERSION`](crate::ledger::schema::SCHEMA_VERSION).
pub(super) const SCHEMA: &str = r#"
CREATE TABLE brood_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE boots (
    boot_id    TEXT COLLATE "C" PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL,
    pid        BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at   BIGINT,
    host       TEXT
);
CREATE TABLE runs (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    parent_id           TEXT COLLATE "C",
    root_id             TEXT COLLATE "C" NOT NULL,
    depth               BIGINT NOT NULL,
    session_id          TEXT COLLATE "C" NOT NULL,
    session_boot_id     TEXT COLLATE "C" NOT NULL,
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
    created_at          BIGINT NOT NULL,
    started_at          BIGINT,
    ended_at            BIGINT,
    steps               BIGINT NOT NULL DEFAULT 0,
    input_tokens        BIGINT NOT NULL DEFAULT 0,
    output_tokens       BIGINT NOT NULL DEFAULT 0,
    cached_input_tokens BIGINT NOT NULL DEFAULT 0,
    result              TEXT,
    error               TEXT,
    cost_usd            DOUBLE PRECISION NOT NULL DEFAULT 0,
    priced_steps        BIGINT,
    unpriced            BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_session_order ON runs (session_id, created_at, id);
CREATE INDEX runs_by_boot_status ON runs (session_boot_id, status);
CREATE INDEX runs_by_parent ON runs (parent_id);
CREATE INDEX runs_by_root ON runs (root_id);
CREATE TABLE run_results (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    result TEXT NOT NULL
);
CREATE TABLE events (
    run_id  TEXT COLLATE "C" NOT NULL,
    seq     BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE transcripts (
    run_id     TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,
    at         BIGINT NOT NULL,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    truncated  BIGINT NOT NULL DEFAULT 0,
    full_bytes BIGINT NOT NULL DEFAULT 0,
    spill_path TEXT,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE cancel_requests (
    run_id       TEXT COLLATE "C" PRIMARY KEY,
    boot_id      TEXT COLLATE "C" NOT NULL,
    requested_at BIGINT NOT NULL
);
CREATE INDEX cancel_requests_by_boot ON cancel_requests (boot_id);
"#;

/// Version 6 (docs/FLEET.md): the fleet's leases. Part of a new ledger's schema, and
/// a migration of one created at version 5 (the first a PostgreSQL ledger had).
const V6_LEASES: &str = r#"
CREATE TABLE run_leases (
    run_id         TEXT COLLATE "C" PRIMARY KEY,
    worker_boot_id TEXT COLLATE "C",
    claimed_at     BIGINT,
    expires_at     BIGINT,
    attempt        BIGINT NOT NULL DEFAULT 0,
    max_attempts   BIGINT NOT NULL,
    repo           TEXT NOT NULL,
    rev            TEXT,
    enqueued_at    BIGINT NOT NULL
);
"#;

/// Version 7 (`spill.rs`): spilled text kept in the database, which machines share,
/// rather than in one machine's spill directory.
const V7_SPILLS: &str = r#"
CREATE TABLE spills (
    run_id TEXT COLLATE "C" NOT NULL,
    seq    BIGINT NOT NULL,
    text   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"#;

/// The migrations a PostgreSQL ledger has: (version, SQL), from version 5, the
/// first one it had.
pub(super) const MIGRATIONS: &[(i64, &str)] = &[(6, V6_LEASES), (7, V7_SPILLS)];
