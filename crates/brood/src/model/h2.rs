//! A provider's one HTTP/2 connection (docs/ARCHITECTURE.md "Decisions": brood's own
//! HTTP/2 pool, over the h2 crate).
//!
//! An `https://` endpoint whose server takes `h2` through ALPN carries every request
//! of the tree as a stream of one connection, driven with the `h2` crate
//! ([`super::h2conn`]): a request is sent in its caller's task and the caller awaits
//! h2's handle on the stream, a few words — hyper's HTTP/2 client spawned a task per
//! request (~2.5 KiB boxed), and hyper-util's pooled client kept ~3.6 KiB per waiting
//! request before that (BENCHMARKS.md section 9, fifth to seventh rounds).
//!
//! The connection:
//! - is opened with the provider's connector ([`super::http`]: the same TLS roots and
//!   `ca_cert`, ALPN `h2` then `http/1.1`, the 10 s TCP connect, `TCP_NODELAY`, the
//!   `HTTPS_PROXY` tunnel and `NO_PROXY`) and h2's handshake with hyper's client
//!   settings (windows of 2 and 5 MiB, [`super::h2conn`] lists them) plus PINGs
//!   while requests are in flight, its task spawned on Tokio; the task ends once
//!   the pool and every request let go of the connection;
//! - is opened once under a single flight: requests that find none open wait for the
//!   one being opened (one at a time, never two), and all get its error if it fails;
//!   the pool holds the opening only weakly, so one that every request gave up on
//!   (each timed out or was cancelled: an endpoint that accepted and never
//!   answered) is dropped with the last of them, and the next request opens anew
//!   instead of waiting for that stuck one again; and an opening not open within
//!   20 s ([`OPEN_WITHIN`]) fails by itself, whoever still waits for it;
//! - is opened again by the first request that finds it closed (a `GOAWAY`, the
//!   server hanging up, an error, or PINGs unanswered while requests are in
//!   flight: traffic dropped without a reset): the next request opens a new one;
//! - is not HTTP/2 when the server's ALPN picks `http/1.1`: the pool remembers it and
//!   every request of the provider goes to hyper-util's pooled client from then on
//!   (keep-alive, a connection per request in flight). The probing connection is
//!   dropped; the pooled client opens its own.
//!
//! A request the connection did not take (h2 refused to open its stream: the
//! connection had closed, failed or been told to go away) is sent once more on a
//! fresh connection, as hyper-util did; a request refused by the server unprocessed
//! (its stream above a `GOAWAY`'s last stream, or reset with `REFUSED_STREAM`) fails
//! with h2's error, and the provider retries it once (`openai::closed_before_answer`,
//! one implementation for both protocols).

use super::h2conn::{self, Conn, H2Body, Handle};
use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A connection not open within this — TCP (bounded alone by the connector's 10 s),
/// the proxy's tunnel, TLS, the HTTP/2 handshake — is given up on: every request
/// waiting for it gets a `Connect` error (retried as any failed connect is) and the
/// next one opens anew. Without it, an endpoint that accepts and never finishes the
/// handshake kept one opening alive for as long as requests kept arriving to wait
/// for it, each until its step's timeout.
const OPEN_WITHIN: Duration = Duration::from_secs(20);

/// A request's body (`model::http`'s: one buffer of known length).
type RequestBody = bytes::Bytes;

/// The error of one exchange (`model::http`'s).
type HttpError = Box<dyn std::error::Error + Send + Sync>;

/// What a request gets from the pool: the connection to send on, or word that the
/// endpoint speaks HTTP/1.1.
type Opened = Result<Option<Arc<Conn>>, ConnectError>;

/// The connection being opened, awaited by every request that needs it.
type Opening = Shared<BoxFuture<'static, Opened>>;

/// The pool's one connection.
enum Slot {
    /// None open: none opened yet, or the last one failed to open.
    Empty,
    /// Being opened (`generation` tells this opening from a later one). Held weakly:
    /// the requests waiting for it keep it alive, and once none does it is dropped.
    Opening {
        generation: u64,
        opening: WeakShared<BoxFuture<'static, Opened>>,
    },
    /// Open (until [`Conn::is_closed`]).
    Open(Arc<Conn>),
    /// The server chose HTTP/1.1 through ALPN: hyper-util's pooled client serves.
    Http1,
}

/// A provider's HTTP/2 connection to an `https://` endpoint, opened with the
/// connector `C` (the provider's: `model::http`).
pub(crate) struct H2Pool<C> {
    connector: C,
    /// `https://host:port/`: where the connection goes.
    origin: Uri,
    slot: Mutex<Slot>,
    /// Openings started, to tell them apart.
    openings: AtomicU64,
}

/// What [`H2Pool::send`] did with a request.
pub(crate) enum Sent {
    /// Sent over HTTP/2: the answer's head, or why there is none.
    Done(Result<Response<H2Body>, HttpError>),
    /// Not sent: the endpoint speaks HTTP/1.1; the request comes back.
    Http1(Request<RequestBody>),
}

impl<C> H2Pool<C>
where
    C: tower_service::Service<Uri> + Clone + Send + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<HttpError>,
{
    /// A pool for `endpoint`'s origin, connecting with `connector`. Nothing is
    /// opened until the first request.
    pub(crate) fn new(endpoint: &Uri, connector: C) -> H2Pool<C> {
        let mut origin = Uri::builder().scheme("https").path_and_query("/");
        if let Some(authority) = endpoint.authority() {
            origin = origin.authority(authority.clone());
        }
        H2Pool {
            connector,
            // An https URL's scheme and authority always make an origin.
            origin: origin.build().unwrap_or_else(|_| endpoint.clone()),
            slot: Mutex::new(Slot::Empty),
            openings: AtomicU64::new(0),
        }
    }

    /// The open connection's handle, when one is open: the way most requests go,
    /// without waiting for anything.
    pub(crate) fn open_handle(&self) -> Option<Handle> {
        match &*lock(&self.slot) {
            Slot::Open(conn) if !conn.is_closed() => Some(conn.handle()),
            _ => None,
        }
    }

    /// Whether the server chose HTTP/1.1 through ALPN (hyper-util's pooled client
    /// serves every request then).
    pub(crate) fn speaks_http1(&self) -> bool {
        matches!(&*lock(&self.slot), Slot::Http1)
    }

    /// Send `request` on the connection (opened first if none is open), unless
    /// the endpoint speaks HTTP/1.1. A request the connection did not take (it
    /// closed, failed or went away first) is sent once more, on a new connection
    /// — unless it was `resent` already.
    pub(crate) async fn send(&self, request: Request<RequestBody>, mut resent: bool) -> Sent {
        loop {
            let conn = match self.connection().await {
                Ok(Some(conn)) => conn,
                Ok(None) => return Sent::Http1(request),
                Err(e) => return Sent::Done(Err(Box::new(e))),
            };
            match conn.handle().start(&request) {
                Ok(waiting) => {
                    drop(conn);
                    return Sent::Done(waiting.await);
                }
                Err(_) if !resent => resent = true,
                Err(e) => return Sent::Done(Err(Box::new(e))),
            }
        }
    }

    /// The open connection, or the one being opened, or a new one — `None` when the
    /// endpoint speaks HTTP/1.1.
    async fn connection(&self) -> Opened {
        let (generation, opening) = {
            let mut slot = lock(&self.slot);
            let joined = match &*slot {
                Slot::Open(conn) if !conn.is_closed() => return Ok(Some(conn.clone())),
                Slot::Http1 => return Ok(None),
                // Alive while a request waits for it; else given up on by all.
                Slot::Opening {
                    generation,
                    opening,
                } => opening.upgrade().map(|o| (*generation, o)),
                Slot::Open(_) | Slot::Empty => None,
            };
            match joined {
                Some(joined) => joined,
                None => {
                    let generation = self.openings.fetch_add(1, Ordering::Relaxed);
                    let opening: Opening = open(self.connector.clone(), self.origin.clone())
                        .boxed()
                        .shared();
                    // Not yet polled, so never `None`.
                    if let Some(weak) = opening.downgrade() {
                        *slot = Slot::Opening {
                            generation,
                            opening: weak,
                        };
                    }
                    (generation, opening)
                }
            }
        };
        let mut opening = opening;
        let opened = (&mut opening).await;
        let mut slot = lock(&self.slot);
        if matches!(&*slot, Slot::Opening { generation: g, .. } if *g == generation) {
            *slot = match &opened {
                Ok(Some(conn)) => Slot::Open(conn.clone()),
                Ok(None) => Slot::Http1,
                Err(_) => Slot::Empty,
            };
        }
        // Held until the slot says what it opened: a request coming between its
        // end and the slot's update still finds it (weakly), not a reason to open
        // a second connection.
        drop(slot);
        drop(opening);
        opened
    }
}

/// Open a connection to `origin`: TCP (or the proxy's tunnel), TLS, and — when ALPN
/// picked `h2` — HTTP/2's handshake, the connection's task spawned. `None` when
/// ALPN picked HTTP/1.1 (the connection is dropped).
async fn open<C>(connector: C, origin: Uri) -> Opened
where
    C: tower_service::Service<Uri>,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
    C::Error: Into<HttpError>,
{
    match tokio::time::timeout(OPEN_WITHIN, open_unbounded(connector, origin)).await {
        Ok(opened) => opened,
        Err(_) => Err(ConnectError(Arc::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the connection was not open within {} s (TCP, TLS and the HTTP/2 handshake)",
                OPEN_WITHIN.as_secs()
            ),
        )))),
    }
}

/// [`open`] without its bound.
async fn open_unbounded<C>(mut connector: C, origin: Uri) -> Opened
where
    C: tower_service::Service<Uri>,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
    C::Error: Into<HttpError>,
{
    let io = connector
        .call(origin)
        .await
        .map_err(|e| ConnectError(Arc::from(e.into())))?;
    if !io.connected().is_negotiated_h2() {
        return Ok(None);
    }
    let conn = h2conn::handshake(TokioIo::new(io))
        .await
        .map_err(|e| ConnectError(Arc::new(e)))?;
    Ok(Some(Arc::new(conn)))
}

/// Why the connection could not be opened (shared by every request that waited for
/// it); its source chain names the cause (a refused connect, a certificate, the
/// proxy's answer).
#[derive(Clone, Debug)]
pub(crate) struct ConnectError(Arc<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // hyper-util's words for the same failure, so messages stay the same
        // whichever client sent the request.
        f.write_str("client error (Connect)")
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// Poisoning only means a thread panicked while holding the lock; the slot is
/// still whole (every change to it is one assignment).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
