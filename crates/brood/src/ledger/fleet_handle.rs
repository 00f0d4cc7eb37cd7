//! The fleet's methods on [`Ledger`] (docs/FLEET.md): enqueue, claim and lease
//! renewal queued to the writer thread as `Op::Fleet` (applied by `super::fleet`), and
//! [`FleetListener`], a connection of its own that `LISTEN`s on a fleet channel.

use std::time::Duration;

use super::error::LedgerError;
use super::fleet::{
    Claimed, FleetAnswer, FleetChannel, FleetOp, FleetReply, Placement, CANCEL_CHANNEL,
    DONE_CHANNEL, QUEUED_CHANNEL,
};
use super::op::{Op, Reply};
use super::store::now_ms;
use super::types::RunId;
use super::{Durable, Ledger};

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Ledger {
    /// Place `run` (recorded `pending` by [`Ledger::create_run`]) in the fleet: it
    /// goes to `queued` with its lease row and placement, and idle workers are
    /// notified. A PostgreSQL ledger only ([`LedgerError::FleetNeedsPostgres`]).
    pub fn enqueue(&self, run: &RunId, placement: Placement) -> Durable<()> {
        let run = run.clone();
        self.durable(|reply| Op::Fleet {
            op: FleetOp::Enqueue { run, placement },
            at: now_ms(),
            reply: wrap(reply, |a| match a {
                FleetAnswer::Enqueued => Some(()),
                _ => None,
            }),
        })
    }

    /// Claim one fleet run for this boot (a worker) with a lease of `lease`; `None`
    /// when there is none to claim. See the module doc for which runs are claimable.
    pub fn claim(&self, lease: Duration) -> Durable<Option<Claimed>> {
        self.durable(|reply| Op::Fleet {
            op: FleetOp::Claim {
                lease_ms: millis(lease),
            },
            at: now_ms(),
            reply: wrap(reply, |a| match a {
                FleetAnswer::Claimed(c) => Some(c),
                _ => None,
            }),
        })
    }

    /// Heartbeat: extend every lease this boot holds to `now + lease`. Resolves with
    /// the runs it holds: a run this boot claimed (and has not ended) missing from
    /// them was taken over by another worker after its lease expired — stop it
    /// (nothing more this boot writes into it is recorded).
    pub fn renew_leases(&self, lease: Duration) -> Durable<Vec<RunId>> {
        self.durable(|reply| Op::Fleet {
            op: FleetOp::Renew {
                lease_ms: millis(lease),
            },
            at: now_ms(),
            reply: wrap(reply, |a| match a {
                FleetAnswer::Renewed(held) => Some(held),
                _ => None,
            }),
        })
    }
}

/// A connection of its own listening on the fleet's channels ([`Ledger::listen`]):
/// notifications are wake-ups; the ledger stays the truth (read it after each, and
/// after a timeout, since a notification sent while nobody listened is lost).
pub struct FleetListener {
    #[cfg(feature = "postgres")]
    inner: super::pg::PgListener,
}

impl std::fmt::Debug for FleetListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetListener")
    }
}

/// What one [`FleetListener::wait`] heard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heard {
    /// The run ids notified, in order (empty when the wait timed out).
    pub runs: Vec<RunId>,
    /// The listener's connection was made during this wait — its first (a
    /// listener connects on its first wait), or again after it was lost: what was
    /// notified before is not heard, so read the ledger for everything this
    /// listener stands for (the runs waited on, the queue).
    pub reconnected: bool,
}

impl FleetListener {
    /// The run ids notified within `timeout` on the channels listened to (none when
    /// it passed without any). The connection — on the first call, or again after
    /// it was lost — is made within the call (for up to
    /// `LedgerOptions::reconnect_for`), which then returns at once with
    /// `reconnected`; [`LedgerError::Disconnected`] when it could not be — the next
    /// call tries again. Blocking: from async code, call it on a blocking thread.
    pub fn wait(&mut self, timeout: Duration) -> Result<Heard, LedgerError> {
        #[cfg(feature = "postgres")]
        {
            let heard = self.inner.wait(timeout)?;
            Ok(Heard {
                runs: heard
                    .notes
                    .into_iter()
                    .map(|(_, run)| RunId::from_string(run))
                    .collect(),
                reconnected: heard.reconnected,
            })
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = timeout;
            Ok(Heard::default())
        }
    }
}

impl Ledger {
    /// A listener on `channel`, on a connection of its own. A PostgreSQL ledger
    /// only. It connects on its first [`FleetListener::wait`] (which says
    /// `reconnected`), not here: this call never blocks, so async code may make it
    /// even while the database is out of reach.
    pub fn listen(&self, channel: FleetChannel) -> Result<FleetListener, LedgerError> {
        let channel = match channel {
            FleetChannel::Queued => QUEUED_CHANNEL,
            FleetChannel::Done => DONE_CHANNEL,
            FleetChannel::Cancel => CANCEL_CHANNEL,
        };
        match &self.location {
            #[cfg(feature = "postgres")]
            super::store::Location::Postgres(url) => Ok(FleetListener {
                inner: super::pg::listen(url, &[channel], self.options.reconnect_for),
            }),
            super::store::Location::Workspace => Err(LedgerError::FleetNeedsPostgres {
                what: "listening for the fleet's notifications".into(),
            }),
        }
    }
}

fn wrap<T: Send + 'static>(
    reply: Reply<T>,
    pick: impl FnOnce(FleetAnswer) -> Option<T> + Send + 'static,
) -> FleetReply {
    Box::new(move |answer| {
        let Some(tx) = reply else { return };
        let _ = tx.send(answer.and_then(|a| {
            pick(a).ok_or_else(|| LedgerError::Sqlite {
                context: "a fleet operation".into(),
                detail: "the writer gave another operation's answer".into(),
            })
        }));
    })
}
