//! The connection that never changes the database, for readers and for the check
//! that a file is a brood ledger before anything writes to it.

use std::path::Path;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

/// A connection that never changes the database: `query_only`, and no checkpoint when
/// it closes. It is opened read-write (without create) when the file permits, because
/// a strictly read-only connection cannot rebuild the WAL index after a writer was
/// killed (`SQLITE_READONLY_RECOVERY`) — exactly when someone wants to look.
pub(super) fn open_query_only(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .or_else(|_| {
        Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    })?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}
