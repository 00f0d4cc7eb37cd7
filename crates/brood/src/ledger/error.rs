//! Typed ledger failures. Each names what was wrong and, where the user can act,
//! what to do about it.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::types::RunStatus;

/// Everything the ledger can fail with. `Clone` so that one failed group commit can be
/// reported to every caller whose operation was in it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The file at the database path exists but is not a brood ledger (not SQLite at
    /// all, or an SQLite database of some other program). It is left untouched.
    #[error("{path} is not a brood ledger ({reason}); brood will not overwrite it — move or delete it, then retry")]
    NotALedger {
        /// The database path.
        path: PathBuf,
        /// Why it is not one.
        reason: String,
    },
    /// The database was written by a newer brood with a schema this build does not know.
    #[error("{path} has ledger schema version {found}, this brood supports up to {supported}; upgrade brood")]
    SchemaTooNew {
        /// The database path.
        path: PathBuf,
        /// The schema version found in it.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// There is no ledger in this workspace yet (only returned by read-only opens).
    #[error(
        "no ledger at {path}; runs are recorded there once brood runs an agent in this workspace"
    )]
    Missing {
        /// Where the ledger would be.
        path: PathBuf,
    },
    /// A ledger URL (`ledger_url`, `--ledger`) that brood cannot use.
    #[error("ledger URL {url}: {why}")]
    BadUrl {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// A read-only open found a ledger of an older schema; readers never migrate.
    #[error("{path} has ledger schema version {found}, older than this brood's {supported}; run brood once (e.g. `brood run`) to upgrade it, then retry")]
    NeedsUpgrade {
        /// The database path.
        path: PathBuf,
        /// The schema version found in it.
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// A path read from the database is outside where brood writes it (the database
    /// is untrusted input: a repository can ship a crafted one).
    #[error("{row}: {reason}; brood does not follow it (the ledger may have been tampered with)")]
    UntrustedPath {
        /// Which row held the path.
        row: String,
        /// Why it is refused.
        reason: String,
    },
    /// A run or session id that cannot be used (empty, too long, or with characters
    /// other than ASCII letters, digits, `-` and `_`; ids name files on disk).
    #[error("invalid {what} '{id}': use 1-64 ASCII letters, digits, '-' or '_'")]
    InvalidId {
        /// What the id names (run, session, …).
        what: &'static str,
        /// The id given.
        id: String,
    },
    /// A run with this id is already recorded.
    #[error("a run with id '{id}' already exists")]
    DuplicateRun {
        /// The id.
        id: String,
    },
    /// No run has this id (or id prefix).
    #[error("no run with id '{id}'; `brood agents list --all` shows every run")]
    UnknownRun {
        /// The id or prefix given.
        id: String,
    },
    /// An id prefix matched more than one run.
    #[error("run id prefix '{prefix}' is ambiguous; it matches {}; type more characters", candidates.join(", "))]
    AmbiguousId {
        /// The prefix given.
        prefix: String,
        /// The ids it matches.
        candidates: Vec<String>,
    },
    /// A status change that the run lifecycle does not allow (a bug in the caller).
    #[error("run {run}: invalid status transition {from} -> {to}")]
    InvalidTransition {
        /// The run.
        run: String,
        /// Its recorded status.
        from: RunStatus,
        /// The status asked for.
        to: RunStatus,
    },
    /// A run that cannot be reopened (`Ledger::reopen`): it completed, or it is
    /// still running in a live process. `why` says which and what to do.
    #[error("run {id} cannot be resumed: {why}")]
    NotResumable {
        /// The run.
        id: String,
        /// Why, and what to do.
        why: String,
    },
    /// A fleet operation (enqueue, claim, lease renewal) on a ledger that is not
    /// PostgreSQL: workers on other machines can only share a database server.
    #[error("{what} needs a PostgreSQL ledger (`--ledger postgres://…` or `ledger_url`); this one is the workspace's SQLite file — see docs/FLEET.md")]
    FleetNeedsPostgres {
        /// What was asked.
        what: String,
    },
    /// This worker no longer holds the lease of a fleet run (it expired — the worker
    /// died, or stopped heartbeating while alive — and another worker claimed the
    /// run): its transition of the run (its end, or any other) is not recorded, nor
    /// anything else it writes into the run, so the run ends once, by the holder.
    #[error("run {run} is leased to another worker (boot {holder}): this worker lost its lease, so what it writes into the run — its end included — is not recorded (the holder records the run)")]
    LeaseLost {
        /// The run.
        run: String,
        /// The boot holding its lease now.
        holder: String,
    },
    /// The connection to a PostgreSQL ledger was lost and could not be made again
    /// within `reconnect_for`: the writes it held were not recorded. The next write
    /// tries again.
    #[error("lost the connection to the PostgreSQL ledger at {url} and could not connect again within {tried_secs} s ({detail}); the writes it held are not recorded — check that the server is up and reachable from here (the next write tries again)")]
    Disconnected {
        /// The ledger's URL, its password hidden.
        url: String,
        /// How long reconnecting was tried.
        tried_secs: u64,
        /// The last failure.
        detail: String,
    },
    /// A PostgreSQL ledger's server did not finish connecting within the URL's
    /// `connect_timeout` (default 10 s): it took the connection and never answered
    /// (a firewall that drops traffic after the handshake, a wedged server), or never
    /// took it.
    #[error("connecting to the PostgreSQL ledger at {url}: {host} did not answer within {secs} s (connect_timeout) — check that PostgreSQL is up and answering on that host and port and that no firewall drops the traffic; on a slow network raise connect_timeout in the URL (docs/FLEET.md \"Unreachable servers\")")]
    ConnectTimeout {
        /// The ledger's URL, its password hidden.
        url: String,
        /// The host (the first the URL names).
        host: String,
        /// The bound that passed, in seconds.
        secs: u64,
    },
    /// A PostgreSQL ledger's server answered the connect and then did not answer a
    /// statement within the URL's `query_timeout` (default 60 s): a wedged or
    /// stopped backend, a server out of memory or I/O, a firewall that started
    /// dropping the traffic. The connection is dropped (the writer connects again).
    #[error("the PostgreSQL ledger at {url}: {host} did not answer a statement within {secs} s (query_timeout) while {context} — check that the server is up and not stuck (a stopped or wedged backend, a full disk, a lock held by a stuck session: pg_stat_activity shows them) and that no firewall drops the traffic; a statement that is legitimately this slow needs a larger query_timeout in the URL (docs/FLEET.md \"Unreachable servers\")")]
    QueryTimeout {
        /// The ledger's URL, its password hidden.
        url: String,
        /// The host (the first the URL names).
        host: String,
        /// The bound that passed, in seconds.
        secs: u64,
        /// What the ledger was doing.
        context: String,
    },
    /// A PostgreSQL ledger's server could not be reached the way the URL's `sslmode`
    /// asks (no TLS offered where it is required, a certificate that is not trusted
    /// or not for that host): nothing was sent but the TLS request.
    #[error("TLS to the PostgreSQL ledger at {url} (sslmode={sslmode}): {detail} (docs/LEDGER.md \"TLS\")")]
    Tls {
        /// The ledger's URL, its password hidden.
        url: String,
        /// The `sslmode` in effect.
        sslmode: String,
        /// What went wrong and what to do.
        detail: String,
    },
    /// The `sslrootcert` of a ledger URL cannot be used.
    #[error("ledger URL {url}: cannot use sslrootcert={path} ({detail}); name a readable PEM file holding the certificate authority that signed the server's certificate")]
    TlsRootCert {
        /// The ledger's URL, its password hidden.
        url: String,
        /// The file named.
        path: PathBuf,
        /// Why it cannot be used.
        detail: String,
    },
    /// The client certificate (`sslcert`) or its key (`sslkey`) of a ledger URL
    /// cannot be used.
    #[error("ledger URL {url}: cannot use {param}={path} ({detail}); sslcert names a PEM file with the client's certificate (and its chain), sslkey a PEM file with its private key, readable by this user only (docs/LEDGER.md \"TLS\")")]
    TlsClientCert {
        /// The ledger's URL, its password hidden.
        url: String,
        /// `sslcert` or `sslkey`.
        param: String,
        /// The file named.
        path: PathBuf,
        /// Why it cannot be used.
        detail: String,
    },
    /// Lifecycle event kinds are written by status transitions, not appended directly.
    #[error("event kind '{kind}' is written by the matching status transition; call Ledger::transition instead")]
    ReservedEventKind {
        /// The kind given.
        kind: String,
    },
    /// The writer thread has stopped (the ledger was closed, or its thread died).
    #[error("the ledger writer has stopped; no further writes are possible in this session")]
    WriterStopped,
    /// Writes of this session that never reached the database.
    #[error("{failed} ledger write(s) of this session were rejected or lost to a failed commit; the record in .brood/state is incomplete (the ledger's stats count them)")]
    Unwritten {
        /// How many.
        failed: u64,
    },
    /// Another live process is already using this boot id (should never happen: ids are fresh).
    #[error("could not lock {path}: {detail}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// A blocking read task failed to finish (it panicked or the runtime shut down).
    #[error("ledger read task failed: {detail}")]
    ReadTask {
        /// What went wrong.
        detail: String,
    },
    /// A spilled message's full text is not there: its spill file was deleted or is
    /// on another machine (a ledger from before spills were kept in PostgreSQL), or
    /// the ledger holds no row for it. Its capped text is still in the transcript.
    #[error("{path}: the spilled text is not there (deleted, or kept on another machine); the transcript holds its capped text")]
    SpillMissing {
        /// The spill file's path or the ledger's name for the text.
        path: String,
    },
    /// A file-system operation failed.
    #[error("{path}: {detail}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// SQLite reported an error.
    #[error("ledger database error while {context}: {detail}")]
    Sqlite {
        /// What the ledger was doing.
        context: String,
        /// SQLite's message.
        detail: String,
    },
    /// A stored JSON column could not be encoded or decoded.
    #[error("ledger JSON error while {context}: {detail}")]
    Json {
        /// What the ledger was doing.
        context: String,
        /// What went wrong.
        detail: String,
    },
}

impl LedgerError {
    pub(crate) fn io(path: &Path, err: std::io::Error) -> Self {
        LedgerError::Io {
            path: path.to_path_buf(),
            detail: err.to_string(),
        }
    }

    pub(crate) fn json(context: impl Into<String>, err: serde_json::Error) -> Self {
        LedgerError::Json {
            context: context.into(),
            detail: err.to_string(),
        }
    }
}

/// Attach "while doing X" context to an SQLite error.
pub(crate) trait SqlContext<T> {
    fn ctx(self, context: &str) -> Result<T, LedgerError>;
}

impl<T> SqlContext<T> for Result<T, rusqlite::Error> {
    fn ctx(self, context: &str) -> Result<T, LedgerError> {
        self.map_err(|e| LedgerError::Sqlite {
            context: context.to_string(),
            detail: e.to_string(),
        })
    }
}
