//! One HTTP/2 connection, driven with the `h2` crate (docs/ARCHITECTURE.md
//! "Decisions": brood's own HTTP/2 pool, over h2).
//!
//! A request on it is sent in the caller's own task: its head (with
//! `Content-Length`), then its one buffer of body with `END_STREAM`. What the caller
//! then awaits ([`Waiting`]) is h2's handle on the stream and a counter's guard — a
//! few words — where hyper's HTTP/2 client spawned a task per request (boxed to the
//! size of hyper's largest task, the connection's own: ~2.5 KiB per waiting request,
//! BENCHMARKS.md section 9, seventh round). The answer's body ([`H2Body`]) gives its
//! flow-control window back as it is read, so a long streamed answer never stalls
//! on a full window. Dropping either before the end resets the stream
//! (`RST_STREAM CANCEL`, sent by h2 when its last handle on the stream goes).
//!
//! The connection's task (spawned on Tokio) drives h2's connection and, while
//! requests are in flight, PINGs the server every [`PING_EVERY`] and closes the
//! connection when a PING is not answered within [`PING_ANSWER_WITHIN`] (an idle
//! connection is never PINGed). It ends when the server closes the connection, or
//! once the pool let go of it ([`Conn`] dropped) and its streams are done.

use bytes::Bytes;
use futures::channel::oneshot;
use h2::client::{Builder, Connection, ResponseFuture, SendRequest};
use h2::{Ping, PingPong, RecvStream};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};

/// The error of one exchange (`model::http`'s).
type HttpError = Box<dyn std::error::Error + Send + Sync>;

/// While requests are in flight, the connection is PINGed this often...
pub(crate) const PING_EVERY: Duration = Duration::from_secs(10);

/// ...and closed when a PING is not answered within this: a network that started
/// dropping the traffic (no reset, so the connection still looks open) would
/// otherwise hold every request of the tree, each until the step's timeout, and
/// be handed to every later one. A PING is answered by the server's HTTP/2 layer
/// whatever its model is doing, so a slow answer never trips it; an idle
/// connection is not PINGed (some servers call frequent PINGs abuse).
pub(crate) const PING_ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The settings, hyper's HTTP/2 client defaults (what brood's connection had
/// when hyper drove it): windows of 2 MiB per stream and 5 MiB per connection
/// (the protocol's 64 KiB would throttle a streamed answer to a window per round
/// trip), fixed (hyper's adaptive window stays off by default), 16 KiB frames, at
/// most 16 KiB of answer headers, up to 1 MiB of request buffered per stream, 100
/// streams opened before the server's own limit is known, at most 1024 streams
/// reset for the server's errors, no server push.
fn builder() -> Builder {
    let mut builder = Builder::new();
    builder
        .initial_window_size(2 * 1024 * 1024)
        .initial_connection_window_size(5 * 1024 * 1024)
        .max_frame_size(16 * 1024)
        .max_header_list_size(16 * 1024)
        .max_send_buffer_size(1024 * 1024)
        .initial_max_send_streams(100)
        .max_local_error_reset_streams(Some(1024))
        .enable_push(false);
    builder
}

/// HTTP/2's handshake on `io` (TLS done, ALPN `h2`); the connection's task spawned.
pub(crate) async fn handshake<T>(io: T) -> Result<Conn, h2::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, mut connection) = builder().handshake::<T, Bytes>(io).await?;
    let pings = connection.ping_pong();
    let shared = Arc::new(Shared::default());
    let (held, let_go) = oneshot::channel();
    tokio::spawn(drive(connection, pings, shared.clone(), let_go));
    Ok(Conn {
        handle: Handle { send, shared },
        _held: held,
    })
}

/// The pool's hold on an open connection.
pub(crate) struct Conn {
    handle: Handle,
    /// Dropped with this (after the handle): wakes the connection's task, which
    /// closes the connection once its streams are done (h2 does not wake a parked
    /// connection when its last sender is dropped).
    _held: oneshot::Sender<Infallible>,
}

impl Conn {
    /// What a request sends with.
    pub(crate) fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Whether the connection takes no more requests: closed, failed, or told by
    /// the server to go away (`GOAWAY`).
    pub(crate) fn is_closed(&self) -> bool {
        let mut send = self.handle.send.clone();
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        // A sender with no stream of its own pending is ready unless the
        // connection failed or went away (or ran out of stream ids).
        matches!(send.poll_ready(&mut cx), Poll::Ready(Err(_)))
    }
}

/// A request's way onto the connection.
#[derive(Clone)]
pub(crate) struct Handle {
    send: SendRequest<Bytes>,
    shared: Arc<Shared>,
}

impl Handle {
    /// Send `request` (its head, then its body with `END_STREAM`): the answer's
    /// head to await. An error means the connection did not take the request — it
    /// closed, failed or went away before h2 opened its stream — so it may be sent
    /// again elsewhere.
    ///
    /// The body is handed to h2 whole without reserving window first: h2 buffers
    /// it (the one `Bytes`, no copy) and writes it as the server's windows allow,
    /// in the connection's task; nothing here waits for that.
    pub(crate) fn start(self, request: &Request<Bytes>) -> Result<Waiting, h2::Error> {
        let body = request.body().clone();
        let mut head = Request::new(());
        *head.method_mut() = request.method().clone();
        *head.uri_mut() = request.uri().clone();
        *head.headers_mut() = request.headers().clone();
        strip_connection_headers(head.headers_mut());
        if !body.is_empty() || request.method() == Method::POST {
            head.headers_mut()
                .entry(header::CONTENT_LENGTH)
                .or_insert_with(|| HeaderValue::from(body.len()));
        }
        let flight = InFlight::new(&self.shared);
        let mut send = self.send;
        let end = body.is_empty();
        let (answer, mut stream) = send.send_request(head, end)?;
        if !end {
            // The head is on its way: the request was taken. The body fails only
            // if the stream ended first — the server reset it (`REFUSED_STREAM`,
            // retried as such), answered it whole, or the connection failed — and
            // then the answer's future says which; a resend here would send a
            // refused request twice.
            let _ = stream.send_data(body, true);
        }
        Ok(Waiting {
            answer,
            flight: Some(flight),
        })
    }
}

/// Headers that are the HTTP/1.1 connection's and that HTTP/2 forbids (h2 refuses
/// a request carrying them): dropped, as hyper did (an `extra_headers` entry such
/// as `Connection: keep-alive` would otherwise fail every request).
fn strip_connection_headers(headers: &mut HeaderMap) {
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
    if headers.get(header::TE).is_some_and(|te| te != "trailers") {
        headers.remove(header::TE);
    }
}

/// A request sent, its answer's head awaited: h2's handle on the stream and the
/// request's place among those in flight.
pub(crate) struct Waiting {
    answer: ResponseFuture,
    flight: Option<InFlight>,
}

impl Future for Waiting {
    type Output = Result<Response<H2Body>, HttpError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let answer = ready!(Pin::new(&mut this.answer).poll(cx));
        let Some(flight) = this.flight.take() else {
            return Poll::Ready(Err("an HTTP/2 answer polled after it came".into()));
        };
        Poll::Ready(match answer {
            Ok(response) => Ok(response.map(|stream| H2Body { stream, flight })),
            Err(e) => Err(flight.error(e)),
        })
    }
}

/// An answer's body on the connection: h2's stream, its window given back as it
/// is read.
pub(crate) struct H2Body {
    stream: RecvStream,
    flight: InFlight,
}

impl H2Body {
    /// The next piece of the body, `None` at its end.
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, HttpError>>> {
        match ready!(self.stream.poll_data(cx)) {
            Some(Ok(data)) => {
                // Read, so its room in the windows is the server's again. An error
                // here is the stream's or connection's, met again at the next read.
                let _ = self.stream.flow_control().release_capacity(data.len());
                Poll::Ready(Some(Ok(data)))
            }
            // The server ended its side with a reset saying nothing went wrong
            // (the answer was whole): the end of the body, as hyper read it.
            Some(Err(e))
                if matches!(e.reason(), Some(h2::Reason::NO_ERROR | h2::Reason::CANCEL)) =>
            {
                Poll::Ready(None)
            }
            Some(Err(e)) => Poll::Ready(Some(Err(self.flight.error(e)))),
            None => Poll::Ready(None),
        }
    }
}

/// What the connection's task and the requests on it share.
#[derive(Default)]
struct Shared {
    /// Requests whose answer is awaited or being read.
    in_flight: AtomicUsize,
    /// Set when the task closed the connection for a PING not answered.
    unanswered: AtomicBool,
}

/// A request counted in flight until dropped.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(shared: &Arc<Shared>) -> InFlight {
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(shared.clone())
    }

    /// `e`, or — when the connection was closed for a PING not answered — why.
    fn error(&self, e: h2::Error) -> HttpError {
        if self.0.unanswered.load(Ordering::SeqCst) {
            Box::new(Unanswered(e))
        } else {
            Box::new(e)
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The connection was closed because a PING went unanswered.
#[derive(Debug)]
struct Unanswered(h2::Error);

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server did not answer an HTTP/2 PING within {} s; the connection was closed",
            PING_ANSWER_WITHIN.as_secs()
        )
    }
}

impl std::error::Error for Unanswered {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The connection's task: h2's connection driven until it ends — or until a PING
/// goes unanswered, when it is dropped (every stream on it then fails).
async fn drive<T>(
    mut connection: Connection<T, Bytes>,
    pings: Option<PingPong>,
    shared: Arc<Shared>,
    mut let_go: oneshot::Receiver<Infallible>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut keep_alive = KeepAlive {
        pings,
        timer: Box::pin(tokio::time::sleep(PING_EVERY)),
        state: PingState::Idle,
    };
    let mut held = true;
    std::future::poll_fn(|cx| {
        // Once the pool let go, polling the connection lets it close when its
        // streams are done.
        if held && Pin::new(&mut let_go).poll(cx).is_ready() {
            held = false;
        }
        if keep_alive
            .poll(cx, shared.in_flight.load(Ordering::SeqCst))
            .is_ready()
        {
            shared.unanswered.store(true, Ordering::SeqCst);
            return Poll::Ready(());
        }
        Pin::new(&mut connection).poll(cx).map(|_| ())
    })
    .await;
}

/// PINGs while requests are in flight.
struct KeepAlive {
    /// `None` only if h2 gave its PINGs out already (never: taken once, here).
    pings: Option<PingPong>,
    timer: Pin<Box<Sleep>>,
    state: PingState,
}

#[derive(Clone, Copy)]
enum PingState {
    /// No request in flight when last looked: no PING due.
    Idle,
    /// A PING is sent when the timer fires, if requests are still in flight.
    Due,
    /// A PING sent; the connection is closed if the timer fires first.
    Sent,
}

impl KeepAlive {
    /// `Ready` when a PING went unanswered: the connection is to be closed.
    /// Registers for the timer and the PONG; a request sent while `Idle` wakes the
    /// task anyway (its headers are the task's to write).
    fn poll(&mut self, cx: &mut Context<'_>, in_flight: usize) -> Poll<()> {
        let Some(pings) = &mut self.pings else {
            return Poll::Pending;
        };
        loop {
            match self.state {
                PingState::Idle => {
                    if in_flight == 0 {
                        return Poll::Pending;
                    }
                    self.timer.as_mut().reset(Instant::now() + PING_EVERY);
                    self.state = PingState::Due;
                }
                PingState::Due => {
                    ready!(self.timer.as_mut().poll(cx));
                    if in_flight == 0 {
                        self.state = PingState::Idle;
                        return Poll::Pending;
                    }
                    if pings.send_ping(Ping::opaque()).is_err() {
                        // The connection is failing; it ends by itself.
                        return Poll::Pending;
                    }
                    self.timer
                        .as_mut()
                        .reset(Instant::now() + PING_ANSWER_WITHIN);
                    self.state = PingState::Sent;
                }
                PingState::Sent => {
                    match pings.poll_pong(cx) {
                        Poll::Ready(Ok(_)) => {
                            self.state = PingState::Idle;
                            continue;
                        }
                        Poll::Ready(Err(_)) => return Poll::Pending,
                        Poll::Pending => {}
                    }
                    ready!(self.timer.as_mut().poll(cx));
                    return Poll::Ready(());
                }
            }
        }
    }
}
