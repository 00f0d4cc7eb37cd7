//! A blocking connection to PostgreSQL: tokio-postgres's client driven by a small
//! current-thread runtime of its own (as the `postgres` crate does), so that the
//! ledger's writer thread, readers and listeners call it like rusqlite. Brood's own
//! rather than `postgres::Client` for one reason: **connecting is bounded as a
//! whole** — resolving the host, TCP, the TLS request and handshake, authentication
//! — the way libpq's `connect_timeout` bounds it. tokio-postgres bounds only the TCP
//! connect, so a server that accepts the connection and never answers (a firewall
//! that blackholes after the handshake, a wedged server, a full backlog) held the
//! connect, and the worker, parent or `brood doctor` behind it, forever.
//!
//! And **every statement is bounded** by the URL's `query_timeout` (default 60 s): a
//! server that answered the connect and then stops answering (a wedged or stopped
//! backend, a firewall that starts dropping the traffic — the kernel still
//! acknowledges, so keepalives and `tcp_user_timeout` never fire) no longer holds a
//! statement forever. A statement that timed out leaves the connection mid-protocol:
//! it is marked broken and never used again (it counts as lost, and the writer's
//! reconnection takes over).
//!
//! The connection itself runs as a task on that runtime; it makes progress only
//! inside a call (every call is a `block_on`), and hands the notifications it reads
//! (`LISTEN`) to [`Conn::notifications`] — a wait that is not a statement, so not
//! bounded.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::ToSql;
use tokio_postgres::{
    AsyncMessage, Client, Config, Error, Row, SimpleQueryMessage, Socket, Statement,
};

/// How long closing a connection waits for its goodbye (`Terminate`) to be sent.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// Why [`Conn::connect`] failed.
pub(super) enum ConnectFailure {
    /// The client's error (refused, TLS, authentication, …).
    Pg(Error),
    /// Not connected within the time allowed.
    TimedOut,
    /// This process could not make the runtime the connection runs on.
    Runtime(std::io::Error),
}

/// Why a statement failed.
pub(super) enum StatementFailure {
    /// The client's error (the server's answer, or the connection failing).
    Pg(Error),
    /// No answer within the connection's `query_timeout`: the connection is broken
    /// now.
    TimedOut(Duration),
    /// The connection broke before (a statement timed out on it): not used again.
    Broken,
}

/// What ended a wait for notifications without any.
pub(super) enum NotesFailure {
    /// The connection is gone; the client's error when it gave one.
    Lost(Option<Error>),
}

/// One connection: its runtime, its client, and the task driving it.
pub(super) struct Conn {
    rt: Runtime,
    /// `None` only while dropping.
    client: Option<Client>,
    driver: Option<tokio::task::JoinHandle<()>>,
    notes: UnboundedReceiver<Result<(String, String), Error>>,
    /// Each statement's bound (`None`: unbounded, `query_timeout=0`).
    query_timeout: Option<Duration>,
    /// A statement timed out: the protocol is at an unknown point, so the
    /// connection is never used again.
    broken: Cell<bool>,
}

impl Conn {
    /// Connect with `config` and `tls`, the whole of it (every host and address the
    /// configuration names, TLS and authentication included) within `within` when
    /// given; each statement on the connection then bounded by `query_timeout`.
    /// Blocking; call it outside any Tokio runtime (`off_runtime`).
    pub(super) fn connect<T>(
        config: &Config,
        tls: T,
        within: Option<Duration>,
        query_timeout: Option<Duration>,
    ) -> Result<Conn, ConnectFailure>
    where
        T: MakeTlsConnect<Socket> + Send + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let rt = Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ConnectFailure::Runtime)?;
        let connecting = config.connect(tls);
        let (client, mut connection) = match within {
            None => rt.block_on(connecting).map_err(ConnectFailure::Pg)?,
            Some(limit) => rt
                .block_on(async { tokio::time::timeout(limit, connecting).await })
                .map_err(|_| ConnectFailure::TimedOut)?
                .map_err(ConnectFailure::Pg)?,
        };
        let (tx, notes) = unbounded_channel();
        let driver = rt.spawn(async move {
            while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        let _ = tx.send(Ok((n.channel().to_string(), n.payload().to_string())));
                    }
                    // Notices (warnings the server sends along) are not the ledger's.
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
        });
        Ok(Conn {
            rt,
            client: Some(client),
            driver: Some(driver),
            notes,
            query_timeout,
            broken: Cell::new(false),
        })
    }

    /// Run one statement's exchange, bounded by `query_timeout`; on a timeout the
    /// connection is broken for good.
    fn bounded<T>(
        &self,
        statement: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, StatementFailure> {
        if self.broken.get() {
            return Err(StatementFailure::Broken);
        }
        let Some(limit) = self.query_timeout else {
            return self.rt.block_on(statement).map_err(StatementFailure::Pg);
        };
        match self
            .rt
            .block_on(async { tokio::time::timeout(limit, statement).await })
        {
            Ok(answer) => answer.map_err(StatementFailure::Pg),
            Err(_elapsed) => {
                self.broken.set(true);
                Err(StatementFailure::TimedOut(limit))
            }
        }
    }

    /// Statements without arguments, by the simple protocol.
    pub(super) fn batch_execute(&self, sql: &str) -> Result<(), StatementFailure> {
        self.bounded(live(&self.client).batch_execute(sql))
    }

    pub(super) fn simple_query(
        &self,
        sql: &str,
    ) -> Result<Vec<SimpleQueryMessage>, StatementFailure> {
        self.bounded(live(&self.client).simple_query(sql))
    }

    pub(super) fn prepare(&self, sql: &str) -> Result<Statement, StatementFailure> {
        self.bounded(live(&self.client).prepare(sql))
    }

    pub(super) fn execute(
        &self,
        st: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StatementFailure> {
        self.bounded(live(&self.client).execute(st, params))
    }

    pub(super) fn query(
        &self,
        st: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StatementFailure> {
        self.bounded(live(&self.client).query(st, params))
    }

    /// Whether the connection is gone (or broken by a statement that timed out).
    pub(super) fn is_closed(&self) -> bool {
        self.broken.get() || live(&self.client).is_closed()
    }

    /// The `(channel, payload)` of the notifications that arrive within `timeout`
    /// (at least one unless it passed first), with those already read after it.
    pub(super) fn notifications(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<(String, String)>, NotesFailure> {
        let notes = &mut self.notes;
        let first = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, notes.recv()).await });
        let mut out = Vec::new();
        match first {
            Err(_elapsed) => return Ok(out),
            Ok(None) => return Err(NotesFailure::Lost(None)),
            Ok(Some(Err(e))) => return Err(NotesFailure::Lost(Some(e))),
            Ok(Some(Ok(n))) => out.push(n),
        }
        // Let the connection read what has already arrived.
        self.rt.block_on(tokio::task::yield_now());
        while let Ok(more) = self.notes.try_recv() {
            match more {
                Ok(n) => out.push(n),
                Err(e) => return Err(NotesFailure::Lost(Some(e))),
            }
        }
        Ok(out)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Dropping the client makes the connection say goodbye and end; give it a
        // moment to, on its runtime (the caller is outside any other: `off_runtime`).
        // A broken connection's server is not answering: no goodbye is waited for.
        drop(self.client.take());
        if let Some(driver) = self.driver.take() {
            if self.broken.get() {
                driver.abort();
                return;
            }
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(CLOSE_WITHIN, driver).await });
        }
    }
}

/// The client of a connection: taken only by its `drop`.
fn live(client: &Option<Client>) -> &Client {
    match client {
        Some(c) => c,
        None => unreachable!("a connection used while it is dropped"),
    }
}
