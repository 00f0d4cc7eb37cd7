//! The fleet's listener connection (docs/FLEET.md): `LISTEN` on its channels, hand
//! over what was notified, and when the connection is lost make it again and listen
//! again, saying so (what was notified meanwhile is lost: callers read the ledger).
//! Waiting for a notification is not a statement and is not bounded; but a
//! connection that heard nothing for the URL's `keepalives_idle` sends an empty
//! statement, bounded by `query_timeout`, so a server that went silent (a stopped
//! backend: the kernel still answers TCP's keepalives) is noticed as lost.
//! The connection is made by the first [`PgListener::wait`], never by [`listen`]:
//! `wait` runs on the caller's blocking thread, `listen` is called from async code
//! (a parent's first fleet child, a session's start), whose runtime a connect to a
//! slow or unreachable server would stall.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::db::Db;
use super::super::error::{LedgerError, SqlContext};
use super::client::{Conn, NotesFailure};
use super::reconnect::with_backoff;
use super::{closed, off_runtime, PgDb, PgTarget};

/// A connection of its own that `LISTEN`s on the fleet's channels (docs/FLEET.md),
/// made again (and listening again) when it is lost.
pub(crate) struct PgListener {
    db: Option<PgDb>,
    target: Arc<PgTarget>,
    channels: Vec<String>,
    reconnect_for: Duration,
    /// When the connection last showed it was alive (connected, notified, or
    /// answered a check).
    heard_at: Instant,
}

/// What one [`PgListener::wait`] heard.
pub(crate) struct Heard {
    /// `(channel, payload)` of each notification.
    pub notes: Vec<(String, String)>,
    /// The connection was lost and made again: notifications sent meanwhile are lost.
    pub reconnected: bool,
}

/// A listener for `channels` (names from this crate only) of the ledger at
/// `target`. Connects nothing: its first [`PgListener::wait`] does.
pub(crate) fn listen(
    target: &Arc<PgTarget>,
    channels: &[&str],
    reconnect_for: Duration,
) -> PgListener {
    PgListener {
        db: None,
        target: target.clone(),
        channels: channels.iter().map(|c| c.to_string()).collect(),
        reconnect_for,
        heard_at: Instant::now(),
    }
}

impl PgListener {
    fn connect(&self) -> Result<PgDb, LedgerError> {
        let db = PgDb::connect(&self.target)?;
        for channel in &self.channels {
            db.simple(&format!("LISTEN {channel}"))
                .ctx("listening for the fleet's notifications")?;
        }
        Ok(db)
    }

    /// The notifications that arrive within `timeout` (at least one unless it passed
    /// first). Blocking. The connection — the first one, or again after it was lost
    /// — is made at once (for up to `reconnect_for`, with a backoff) and the call
    /// returns with `reconnected`; [`LedgerError::Disconnected`] when it could not
    /// be (the next call tries again).
    pub(crate) fn wait(&mut self, timeout: Duration) -> Result<Heard, LedgerError> {
        if self.db.is_none() {
            return self.reconnect();
        }
        match self.listen_checked(timeout) {
            Ok(notes) => Ok(Heard {
                notes,
                reconnected: false,
            }),
            Err(_) if self.db.as_ref().is_some_and(|db| db.connection_lost()) => {
                self.db = None;
                self.reconnect()
            }
            Err(e) => Err(e),
        }
    }

    /// The notifications within `timeout`; the connection checked with an empty
    /// statement whenever it was quiet for `keepalives_idle`.
    fn listen_checked(&mut self, timeout: Duration) -> Result<Vec<(String, String)>, LedgerError> {
        // Past the clock's end (a caller's `Duration::MAX`, or the URL's
        // keepalives_idle, which may be any positive number of seconds and is
        // ignored on a Unix socket): no deadline, no check.
        let deadline = Instant::now().checked_add(timeout);
        // At least a second apart, whatever the URL says.
        let every = self.target.listen_check().max(Duration::from_secs(1));
        loop {
            let now = Instant::now();
            let check_at = self.heard_at.checked_add(every);
            if check_at.is_some_and(|at| now >= at) {
                let db = self.db.as_ref().ok_or_else(closed).ctx("listening")?;
                db.simple("")
                    .ctx("checking the fleet's listening connection")?;
                self.heard_at = Instant::now();
                continue;
            }
            let wait = match (deadline, check_at) {
                (Some(d), Some(c)) => d.min(c).saturating_duration_since(now),
                (Some(until), None) | (None, Some(until)) => until.saturating_duration_since(now),
                (None, None) => timeout,
            };
            let notes = self.listen_once(wait)?;
            if !notes.is_empty() {
                self.heard_at = Instant::now();
                return Ok(notes);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(notes);
            }
        }
    }

    fn listen_once(&mut self, timeout: Duration) -> Result<Vec<(String, String)>, LedgerError> {
        let db = self.db.as_ref().ok_or_else(closed).ctx("listening")?;
        let mut guard = db.client.borrow_mut();
        let client: &mut Conn = guard.as_mut().ok_or_else(closed).ctx("listening")?;
        off_runtime(move || client.notifications(timeout))
            .map_err(|NotesFailure::Lost(e)| {
                db.lost.set(true);
                match e {
                    Some(e) => db.fail_pg(e),
                    None => closed(),
                }
            })
            .ctx("waiting for the fleet's notifications")
    }

    fn reconnect(&mut self) -> Result<Heard, LedgerError> {
        let db = with_backoff(&self.target.shown(), self.reconnect_for, |_| self.connect())?;
        self.db = Some(db);
        self.heard_at = Instant::now();
        Ok(Heard {
            notes: Vec::new(),
            reconnected: true,
        })
    }
}
