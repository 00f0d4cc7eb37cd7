//! Making the writer's connection again after it was lost (a server restart,
//! `pg_terminate_backend`, a network drop; docs/LEDGER.md "Lost connections"):
//! connect with a backoff for up to `reconnect_for`, replay the session's settings,
//! end the old backend if it outlived its connection (its open transaction is then
//! rolled back and its advisory locks freed), read the fate of the transaction last
//! begun by its id (`txid_status`: a COMMIT whose answer was lost is found committed,
//! so the writer does not apply its batch again), and take this boot's advisory lock
//! again.

use std::cell::{Cell as StdCell, RefCell};
use std::error::Error;
use std::time::{Duration, Instant};

use super::super::db::{args, query_one, Db, RowExt};
use super::super::error::{LedgerError, SqlContext};
use super::{boot_key, off_runtime, PgDb};

/// Longest pause between two tries to connect again.
pub(super) const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(2);

/// What the writer's connection keeps to be made again as it was.
pub(super) struct Track {
    /// Session settings, replayed on a new connection.
    pub settings: RefCell<Vec<String>>,
    /// The boot whose advisory lock this connection holds.
    pub boot: RefCell<Option<String>>,
    /// This connection's backend: its pid and start time (so a reused pid is not
    /// mistaken for it).
    pub backend: RefCell<Option<(i64, String)>>,
    /// The id of the transaction last begun.
    pub xid: StdCell<Option<i64>>,
    pub reconnect_for: Duration,
}

impl PgDb {
    /// One try at [`Db::reconnect`]'s work; the last transaction's fate.
    pub(super) fn reconnect_once(
        &self,
        t: &Track,
        old: Option<&(i64, String)>,
        xid: Option<i64>,
        deadline: Instant,
    ) -> Result<bool, LedgerError> {
        if let Some(c) = self.client.borrow_mut().take() {
            off_runtime(move || drop(c));
        }
        self.statements.borrow_mut().clear();
        self.in_tx.set(false);
        let client = self.target.connect()?;
        *self.client.borrow_mut() = Some(client);
        self.lost.set(false);
        self.lost_to.borrow_mut().take();
        for sql in t.settings.borrow().iter() {
            self.simple(sql).ctx("restoring the session's settings")?;
        }
        // The old backend may outlive its connection (a network drop the server has
        // not noticed): end it, so its transaction is rolled back and its locks freed.
        if let Some((pid, started)) = old {
            let gone = || {
                query_one(
                    self,
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE pid = ?1 AND CAST(backend_start AS TEXT) = ?2",
                    args![*pid, started.as_str()],
                    |r| r.i64(0),
                )
                .map(|n| n == 0)
                .ctx("looking for the lost connection's backend")
            };
            if !gone()? {
                // Refused when another role owns it: then wait for it to end.
                let _ = self.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE pid = ?1 AND CAST(backend_start AS TEXT) = ?2",
                    args![*pid, started.as_str()],
                );
                wait_until(deadline, "the lost connection's backend to end", gone)?;
            }
        }
        let committed = match xid {
            None => false,
            Some(xid) => {
                let status = || {
                    query_one(self, "SELECT txid_status(?1)", args![xid], |r| {
                        r.opt_string(0)
                    })
                    .ctx("reading the fate of the last transaction")
                };
                let mut fate = status()?;
                if fate.as_deref() == Some("in progress") {
                    wait_until(deadline, "the last transaction to end", || {
                        fate = status()?;
                        Ok(fate.as_deref() != Some("in progress"))
                    })?;
                }
                fate.as_deref() == Some("committed")
            }
        };
        if let Some(boot) = t.boot.borrow().as_deref() {
            let key = boot_key(boot);
            wait_until(deadline, "this boot's advisory lock", || {
                query_one(self, "SELECT pg_try_advisory_lock(?1)", args![key], |r| {
                    r.bool(0)
                })
                .ctx("taking this boot's lock again")
            })?;
        }
        self.note_backend()
            .ctx("reading this connection's backend")?;
        Ok(committed)
    }
}

pub(super) fn reconnect(db: &PgDb) -> Result<bool, LedgerError> {
    let Some(t) = &db.track else {
        return Err(LedgerError::WriterStopped);
    };
    let xid = t.xid.take();
    let old = t.backend.borrow_mut().take();
    let lost_to = db.lost_to.borrow().clone();
    let done = with_backoff(&db.target.shown(), t.reconnect_for, |deadline| {
        db.reconnect_once(t, old.as_ref(), xid, deadline)
    })
    .map_err(|e| match (e, lost_to) {
        // Say why the connection was dropped: the server went silent.
        (
            LedgerError::Disconnected {
                url,
                tried_secs,
                detail,
            },
            Some(why),
        ) => LedgerError::Disconnected {
            url,
            tried_secs,
            detail: format!("{why}; connecting again: {detail}"),
        },
        (e, _) => e,
    });
    if done.is_err() {
        // The old backend may still have to be ended by the next try.
        *t.backend.borrow_mut() = old;
        db.lost.set(true);
    }
    done
}

/// Call `attempt` (given the deadline) until it succeeds, pausing 50 ms, doubling
/// up to [`MAX_RECONNECT_PAUSE`], between tries, for up to `within`; past that, the
/// last error as [`LedgerError::Disconnected`] naming `shown_url` (the URL with its
/// password hidden).
/// The one backoff of the writer's and the listeners' connections.
pub(super) fn with_backoff<T>(
    shown_url: &str,
    within: Duration,
    attempt: impl FnMut(Instant) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    with_backoff_while(shown_url, within, || true, attempt)
}

/// [`with_backoff`], trying again only while `retry` says the last failure was the
/// server out of reach; another failure is returned as it is, at once.
pub(super) fn with_backoff_while<T>(
    shown_url: &str,
    within: Duration,
    retry: impl Fn() -> bool,
    mut attempt: impl FnMut(Instant) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    let deadline = super::super::types::deadline_after(within);
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt(deadline) {
            Ok(v) => return Ok(v),
            Err(e) if !retry() => return Err(e),
            Err(_) if Instant::now() + pause < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_RECONNECT_PAUSE);
            }
            Err(e) => {
                return Err(LedgerError::Disconnected {
                    url: shown_url.to_string(),
                    tried_secs: within.as_secs(),
                    detail: e.to_string(),
                })
            }
        }
    }
}

/// Poll `done` until it says so, or fail once `deadline` passed.
fn wait_until(
    deadline: Instant,
    what: &str,
    mut done: impl FnMut() -> Result<bool, LedgerError>,
) -> Result<(), LedgerError> {
    let mut pause = Duration::from_millis(5);
    loop {
        if done()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LedgerError::Sqlite {
                context: format!("waiting for {what}"),
                detail: "it did not happen in time".into(),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Whether an error means the connection is gone: the client saw it close, an I/O
/// failure, or the server said so (connection exceptions, SQLSTATE class 08; the
/// server shutting down or ending this backend, 57P01–57P03).
pub(super) fn is_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
        }
        // Not the server's answer: the socket failed.
        None => e.source().is_some_and(|s| s.is::<std::io::Error>()),
    }
}
