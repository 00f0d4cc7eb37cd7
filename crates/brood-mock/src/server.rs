//! The HTTP side: an axum router served by hyper on loopback — plain HTTP/1.1, or
//! TLS with HTTP/2 or HTTP/1.1 as ALPN settles it ([`crate::tls`]) — on its own
//! thread and runtime, counting the connections it accepts, capturing every request
//! and turning the handler's [`MockReply`] into bytes on the wire.

use crate::clock::Clock;
use crate::request::MockRequest;
use crate::tls::{Alpn, MockTls};
use crate::MockReply;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::{oneshot, watch};

/// Pending connections the listener holds (the benchmarks open up to 1000 at once).
const LISTEN_BACKLOG: u32 = 4096;

/// Streams one HTTP/2 connection may carry at once (a tree of 1024 children and
/// their parents).
const MAX_STREAMS: u32 = 4096;

/// Decides the reply to each chat-completions request. Called on the server's thread;
/// keep it quick (use [`MockReply::Delay`] for latency, never a blocking sleep).
pub type Handler = Arc<dyn Fn(&MockRequest) -> MockReply + Send + Sync>;

struct Inner {
    handler: Handler,
    /// Shared, not copied: a request is parsed once and kept as it is.
    captured: Mutex<Vec<Arc<MockRequest>>>,
    clock: Clock,
    /// The entries of `GET /v1/models`.
    models: Mutex<Vec<Value>>,
    count: watch::Sender<usize>,
    in_flight: watch::Sender<usize>,
    max_in_flight: AtomicUsize,
    /// Serve one request per connection, then close it under the next one.
    idle_close: AtomicBool,
    /// Connections closed that way.
    idle_closed: AtomicUsize,
    /// Connections accepted (TCP; a TLS handshake follows on each in TLS mode).
    connections: AtomicUsize,
    /// Of those, the ones whose TLS handshake settled on `h2`.
    h2_connections: AtomicUsize,
    /// Bumped by [`MockServer::go_away`] and [`MockServer::drop_connections`]: every
    /// connection open at that moment closes.
    closing: watch::Sender<Closing>,
    /// Connections open now.
    open: watch::Sender<usize>,
    /// Requests still to refuse unprocessed ([`MockServer::refuse_next`]), and those
    /// refused so far.
    refuse: AtomicUsize,
    refused: AtomicUsize,
}

/// Why a request got no answer (the service's error: hyper drops an HTTP/1.1
/// connection, and resets an HTTP/2 stream with the h2 reason in the error's source).
#[derive(Debug)]
enum NoAnswer {
    IdleClosed,
    Refused(h2::Error),
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAnswer::IdleClosed => {
                f.write_str("brood-mock: idle connection closed under a request")
            }
            NoAnswer::Refused(_) => f.write_str("brood-mock: request refused unprocessed"),
        }
    }
}

impl std::error::Error for NoAnswer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NoAnswer::IdleClosed => None,
            NoAnswer::Refused(e) => Some(e),
        }
    }
}

/// Counts a connection as open until dropped.
struct OpenGuard(Arc<Inner>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// How many times the test closed the open connections, each way.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Closing {
    go_away: u64,
    dropped: u64,
}

/// Poisoning only means a handler panicked mid-request; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a request as in flight until dropped.
struct FlightGuard(Arc<Inner>);

impl FlightGuard {
    fn new(inner: &Arc<Inner>) -> FlightGuard {
        let mut now = 0;
        inner.in_flight.send_modify(|n| {
            *n += 1;
            now = *n;
        });
        inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
        FlightGuard(inner.clone())
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A running mock server. Dropping it stops it.
pub struct MockServer {
    addr: SocketAddr,
    /// In TLS mode, the test CA's certificate (PEM, DER).
    ca_pem: Option<String>,
    ca_der: Option<Vec<u8>>,
    inner: Arc<Inner>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockServer {
    /// Start a server answering with `handler`. Panics when no loopback port or
    /// runtime can be had (test infrastructure); see [`MockServer::try_start`].
    pub fn start<F>(handler: F) -> MockServer
    where
        F: Fn(&MockRequest) -> MockReply + Send + Sync + 'static,
    {
        match MockServer::try_start(Arc::new(handler)) {
            Ok(s) => s,
            Err(e) => panic!("brood-mock: cannot start the server on 127.0.0.1: {e}"),
        }
    }

    /// Start a server that gives `replies[i]` to request number `i`, and a `400`
    /// naming the request number once they run out.
    pub fn start_sequence(replies: Vec<MockReply>) -> MockServer {
        MockServer::start(move |req| match replies.get(req.seq) {
            Some(r) => r.clone(),
            None => MockReply::status(
                400,
                format!(
                    "brood-mock: no reply scripted for request #{} ({} scripted)",
                    req.seq,
                    replies.len()
                ),
            ),
        })
    }

    /// Start a TLS server (`https://127.0.0.1:PORT/v1`) answering with `handler`,
    /// offering `alpn`; its certificate is signed by a CA made for it, whose PEM
    /// [`MockServer::ca_cert_pem`] gives. Panics like [`MockServer::start`].
    pub fn start_tls<F>(alpn: Alpn, handler: F) -> MockServer
    where
        F: Fn(&MockRequest) -> MockReply + Send + Sync + 'static,
    {
        match MockServer::try_start_with(Arc::new(handler), Some(alpn)) {
            Ok(s) => s,
            Err(e) => panic!("brood-mock: cannot start the TLS server on 127.0.0.1: {e}"),
        }
    }

    /// Start a server answering with a shared handler.
    pub fn try_start(handler: Handler) -> std::io::Result<MockServer> {
        MockServer::try_start_with(handler, None)
    }

    /// Start a server answering with a shared handler: plain HTTP/1.1 with `tls`
    /// `None`, TLS offering that ALPN otherwise.
    pub fn try_start_with(handler: Handler, tls: Option<Alpn>) -> std::io::Result<MockServer> {
        let tls = tls.map(MockTls::new).transpose()?;
        // Two workers: a fan-out's requests arrive together, and one thread parsing
        // them one after another spread their arrival times (what the benchmarks
        // measure) by the mock's own work.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("brood-mock")
            .enable_all()
            .build()?;
        // A backlog for a fan-out's worth of simultaneous connections: std's 128
        // overflowed now and then under 200 children, and a dropped handshake
        // waits for a retransmission (tens of milliseconds or more) — a stall of the
        // apparatus, not of what it measures. The kernel caps it at somaxconn.
        let listener = {
            let _in_runtime = runtime.enter();
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
            socket.listen(LISTEN_BACKLOG)?
        };
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            handler,
            captured: Mutex::new(Vec::new()),
            clock: Clock::start(format!("brood-mock-clock-{}", addr.port()))?,
            models: Mutex::new(vec![model_entry("mock-model")]),
            count: watch::channel(0).0,
            in_flight: watch::channel(0).0,
            max_in_flight: AtomicUsize::new(0),
            idle_close: AtomicBool::new(false),
            idle_closed: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            h2_connections: AtomicUsize::new(0),
            closing: watch::channel(Closing::default()).0,
            open: watch::channel(0).0,
            refuse: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        });
        let ca_pem = tls.as_ref().map(|t| t.ca_pem.clone());
        let ca_der = tls.as_ref().map(|t| t.ca_der.clone());
        let acceptor = tls.map(|t| t.acceptor);
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .route("/models", get(models))
            .fallback(not_found)
            .layer(DefaultBodyLimit::disable())
            .with_state(inner.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let served_by = inner.clone();
        let thread = std::thread::Builder::new()
            .name(format!("brood-mock-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        () = serve(listener, app, served_by, acceptor) => {}
                        _ = rx => {}
                    }
                });
                // Dropping the runtime cancels every connection task and closes the
                // listener, so the port is free once `stop` returns.
                drop(runtime);
            })?;
        Ok(MockServer {
            addr,
            ca_pem,
            ca_der,
            inner,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT/v1` (`https://…` in TLS mode).
    pub fn base_url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}/v1", self.addr)
    }

    /// In TLS mode, the PEM certificate of the CA that signed the server's
    /// certificate: what a client adds to its roots to trust this server.
    pub fn ca_cert_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// In TLS mode, the same CA certificate in DER.
    pub fn ca_cert_der(&self) -> Option<Vec<u8>> {
        self.ca_der.clone()
    }

    /// Connections accepted so far (each one a TCP handshake, and a TLS one in TLS
    /// mode): how well a client reuses its connections.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Connections that settled on HTTP/2 through ALPN (TLS mode).
    pub fn h2_connections(&self) -> usize {
        self.inner.h2_connections.load(Ordering::SeqCst)
    }

    /// Close every connection open now, gracefully: over HTTP/2 a `GOAWAY` (the
    /// requests already received are still answered, then the connection closes),
    /// over HTTP/1.1 once the request in progress is answered. What a server
    /// restarting or rotating its connections does.
    pub fn go_away(&self) {
        self.inner.closing.send_modify(|c| c.go_away += 1);
    }

    /// Close every connection open now at once, without a `GOAWAY` nor an answer to
    /// the requests in progress on it (their handlers are left to finish unseen):
    /// a server crashing, a proxy hanging up.
    pub fn drop_connections(&self) {
        self.inner.closing.send_modify(|c| c.dropped += 1);
    }

    /// Connections open now (accepted and not yet closed by either end).
    pub fn open_connections(&self) -> usize {
        *self.inner.open.borrow()
    }

    /// Wait until at most `n` connections are open.
    pub async fn wait_for_open_connections_at_most(&self, n: usize) {
        let mut rx = self.inner.open.subscribe();
        let _ = rx.wait_for(|c| *c <= n).await;
    }

    /// Refuse the next `n` requests unprocessed: over HTTP/2 each stream is reset
    /// with `REFUSED_STREAM` (the request was not handled, a client may send it
    /// again), over HTTP/1.1 the connection is closed without an answer. A refused
    /// request is neither captured nor counted.
    pub fn refuse_next(&self, n: usize) {
        self.inner.refuse.store(n, Ordering::SeqCst);
    }

    /// How many requests were refused ([`MockServer::refuse_next`]).
    pub fn refused(&self) -> usize {
        self.inner.refused.load(Ordering::SeqCst)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The JSON bodies of all chat-completions requests so far, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.inner.captured)
            .iter()
            .map(|r| r.body().clone())
            .collect()
    }

    /// The raw body bytes of all chat-completions requests so far.
    pub fn raw_requests(&self) -> Vec<Vec<u8>> {
        lock(&self.inner.captured)
            .iter()
            .map(|r| r.raw.to_vec())
            .collect()
    }

    /// Everything captured (body, bytes, headers, sequence number).
    pub fn captured(&self) -> Vec<MockRequest> {
        lock(&self.inner.captured)
            .iter()
            .map(|r| MockRequest::clone(r))
            .collect()
    }

    /// How many chat-completions requests arrived.
    pub fn request_count(&self) -> usize {
        *self.inner.count.borrow()
    }

    /// Requests being answered right now (a stream counts until its last byte).
    pub fn in_flight(&self) -> usize {
        *self.inner.in_flight.borrow()
    }

    /// The most requests ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    /// Wait until at least `n` chat-completions requests have arrived.
    pub async fn wait_for_requests(&self, n: usize) {
        let mut rx = self.inner.count.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }

    /// Wait until at least `n` requests are in flight at once.
    pub async fn wait_for_in_flight(&self, n: usize) {
        let mut rx = self.inner.in_flight.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }

    /// Wait until at most `n` requests are in flight (a request the client gave
    /// up on leaves once the server drops its answer: over HTTP/2, when the
    /// client resets the stream).
    pub async fn wait_for_in_flight_at_most(&self, n: usize) {
        let mut rx = self.inner.in_flight.subscribe();
        let _ = rx.wait_for(|c| *c <= n).await;
    }

    /// From now on, answer one request per connection and keep the connection open
    /// (no `Connection: close`), then close it — without a byte of answer — when a
    /// second request comes on it: what uvicorn and nginx do to a kept-alive
    /// connection they let idle. The closing request is not captured nor counted.
    pub fn set_idle_close(&self, on: bool) {
        self.inner.idle_close.store(on, Ordering::SeqCst);
    }

    /// How many kept-alive connections were closed under a request
    /// ([`MockServer::set_idle_close`]).
    pub fn idle_closed(&self) -> usize {
        self.inner.idle_closed.load(Ordering::SeqCst)
    }

    /// The ids listed by `GET /v1/models`.
    pub fn set_models<S: Into<String>>(&self, ids: impl IntoIterator<Item = S>) {
        *lock(&self.inner.models) = ids.into_iter().map(|id| model_entry(&id.into())).collect();
    }

    /// Whole entries for `GET /v1/models` (e.g. with OpenRouter's `pricing`).
    pub fn set_model_entries(&self, entries: impl IntoIterator<Item = Value>) {
        *lock(&self.inner.models) = entries.into_iter().collect();
    }

    /// Stop serving: close every connection and release the port before returning.
    pub fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .field("requests", &self.request_count())
            .finish()
    }
}

async fn models(State(inner): State<Arc<Inner>>) -> Response {
    let data: Vec<Value> = lock(&inner.models).clone();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

fn model_entry(id: &str) -> Value {
    json!({"id": id, "object": "model", "owned_by": "brood-mock"})
}

async fn not_found(uri: axum::http::Uri) -> Response {
    let body = json!({"error": {"message": format!("brood-mock: no route for {}", uri.path())}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

async fn chat(
    State(inner): State<Arc<Inner>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    // A reply's latency counts from here, the moment the whole request is in.
    let arrived = Instant::now();
    let headers = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let path = uri.path().to_string();
    // Only the arrival number and the push happen under the lock.
    let request = {
        let mut captured = lock(&inner.captured);
        let request = Arc::new(MockRequest::new(
            captured.len(),
            path,
            headers,
            raw,
            arrived,
        ));
        captured.push(request.clone());
        request
    };
    // Checked (with the common fields parsed in the same pass) outside the lock.
    let not_json = request.check_json();
    inner.count.send_modify(|c| *c += 1);
    // In flight once counted and captured: a test that saw N in flight sees N
    // counted even if it then drops the connection (which drops this handler).
    let guard = FlightGuard::new(&inner);
    if let Some(e) = not_json {
        let body = json!({"error": {"message": format!("brood-mock: body is not JSON: {e}")}});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let reply = (inner.handler)(&request);
    respond(reply, &request, arrived, &inner.clock, guard).await
}

/// Serve the hyper connection `conn` (HTTP/1.1 or HTTP/2) until it ends, or until
/// the test closes it through `closing` ([`MockServer::go_away`]: a graceful
/// shutdown, [`MockServer::drop_connections`]: dropped where it stands).
macro_rules! serve_until_closed {
    ($conn:expr, $closing:expr) => {{
        let conn = $conn;
        tokio::pin!(conn);
        let mut closing: watch::Receiver<Closing> = $closing;
        let start = *closing.borrow();
        let mut graceful = false;
        loop {
            tokio::select! {
                _ = conn.as_mut() => break,
                changed = closing.changed() => {
                    if changed.is_err() {
                        let _ = conn.as_mut().await;
                        break;
                    }
                    let now = *closing.borrow_and_update();
                    if now.dropped != start.dropped {
                        break;
                    }
                    if now.go_away != start.go_away && !graceful {
                        graceful = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }};
}

/// Accept connections and serve each with HTTP/1.1 — or, with `tls`, HTTP/2 or
/// HTTP/1.1 as the handshake's ALPN settled — one task per connection. Not
/// `axum::serve`: that rebuilds the router's state for every connection and sniffs
/// each one for HTTP/2 — per-request work in a fan-out of fresh connections, done
/// on the cores the benchmarks share with what they measure.
async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    inner: Arc<Inner>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of descriptors and the like: back off a moment, keep serving.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        inner.connections.fetch_add(1, Ordering::SeqCst);
        let router = hyper_util::service::TowerToHyperService::new(app.clone());
        let served = AtomicUsize::new(0);
        let by = inner.clone();
        // A second request on an idle-closing connection gets no answer: the service
        // fails, and hyper drops the connection without writing a byte. A refused
        // request fails the same way over HTTP/1.1; over HTTP/2 hyper resets its
        // stream with the reason the error carries (`REFUSED_STREAM`).
        let service = hyper::service::service_fn(move |req| {
            let reused = served.fetch_add(1, Ordering::SeqCst) > 0;
            let close = reused && by.idle_close.load(Ordering::SeqCst);
            if close {
                by.idle_closed.fetch_add(1, Ordering::SeqCst);
            }
            let refuse = !close
                && by
                    .refuse
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            if refuse {
                by.refused.fetch_add(1, Ordering::SeqCst);
            }
            let answer = (!close && !refuse).then(|| hyper::service::Service::call(&router, req));
            async move {
                match answer {
                    Some(answer) => answer.await.map_err(|never| match never {}),
                    None if refuse => Err(NoAnswer::Refused(h2::Error::from(
                        h2::Reason::REFUSED_STREAM,
                    ))),
                    None => Err(NoAnswer::IdleClosed),
                }
            }
        });
        let tls = tls.clone();
        let inner = inner.clone();
        let mut closing = inner.closing.subscribe();
        closing.borrow_and_update();
        tokio::spawn(async move {
            inner.open.send_modify(|n| *n += 1);
            let _open = OpenGuard(inner.clone());
            let Some(acceptor) = tls else {
                let io = hyper_util::rt::TokioIo::new(stream);
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
                serve_until_closed!(conn, closing);
                return;
            };
            // A failed handshake (a client that does not trust the CA) just ends.
            let Ok(conn) = acceptor.accept(stream).await else {
                return;
            };
            let h2 = conn.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
            let io = hyper_util::rt::TokioIo::new(conn);
            if h2 {
                inner.h2_connections.fetch_add(1, Ordering::SeqCst);
                // Room for a whole tree's requests on the one connection (hyper's
                // default is 200 streams; a client past it waits for a free one).
                let conn =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .max_concurrent_streams(MAX_STREAMS)
                        .serve_connection(io, service);
                serve_until_closed!(conn, closing);
            } else {
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
                serve_until_closed!(conn, closing);
            }
        });
    }
}

/// Turn `reply` into a response. Delays count from `arrived` and are kept by the
/// server's precise [`Clock`].
async fn respond(
    mut reply: MockReply,
    req: &MockRequest,
    arrived: Instant,
    clock: &Clock,
    guard: FlightGuard,
) -> Response {
    let mut due = arrived;
    loop {
        match reply {
            MockReply::Delay(d, next) => {
                due += d;
                clock.sleep_until(due).await;
                reply = *next;
            }
            MockReply::Gated(gate, next) => {
                gate.opened().await;
                reply = *next;
            }
            MockReply::Hang => {
                std::future::pending::<()>().await;
            }
            MockReply::Answer(a) => {
                if !req.stream() {
                    return axum::Json(a.to_json(req.model())).into_response();
                }
                // Rendered straight to bytes (the same events as `stream_chunks`).
                let mut body = crate::render::sse_body(&a, req.model());
                body.extend_from_slice(b"data: [DONE]\n\n");
                let s = stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(body)) });
                return sse(s, guard);
            }
            MockReply::Json(v) => return axum::Json(v).into_response(),
            MockReply::Status {
                status,
                body,
                retry_after,
            } => {
                let code =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
                    "application/json"
                } else {
                    "text/plain"
                };
                let mut resp = (code, body).into_response();
                resp.headers_mut()
                    .insert("content-type", HeaderValue::from_static(content_type));
                if let Some(ra) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
                    resp.headers_mut().insert("retry-after", ra);
                }
                return resp;
            }
            MockReply::Redirect { status, location } => {
                let code = StatusCode::from_u16(status).unwrap_or(StatusCode::TEMPORARY_REDIRECT);
                let mut resp = code.into_response();
                if let Ok(v) = HeaderValue::from_str(&location) {
                    resp.headers_mut().insert("location", v);
                }
                return resp;
            }
            MockReply::Sse { chunks, done } => {
                // The whole answer is ready: one piece, as a server that has it all
                // sends it (one write, not one per event; the client still parses
                // every event). `Raw` keeps each piece apart.
                let mut body = Vec::new();
                for chunk in &chunks {
                    body.extend_from_slice(&event(chunk));
                }
                if done {
                    body.extend_from_slice(b"data: [DONE]\n\n");
                }
                let s = stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(body)) });
                return sse(s, guard);
            }
            MockReply::Raw { parts } => {
                let s = stream::iter(
                    parts
                        .into_iter()
                        .map(|p| Ok::<_, std::io::Error>(Bytes::from(p))),
                );
                return sse(s, guard);
            }
            MockReply::Cut { chunks } => {
                let parts: Vec<Bytes> = chunks.iter().map(event).collect();
                // The pause makes the server flush what it has (headers and chunks)
                // before the abort, so the client sees a stream cut mid-way.
                let s = stream::iter(parts.into_iter().map(Ok)).chain(stream::once(async {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "brood-mock: connection cut",
                    ))
                }));
                return sse(s, guard);
            }
            MockReply::Body {
                status,
                content_type,
                body,
            } => {
                let code =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut resp = (code, body).into_response();
                if let Ok(ct) = HeaderValue::from_str(&content_type) {
                    resp.headers_mut().insert("content-type", ct);
                }
                return resp;
            }
            MockReply::Endless { chunk, every } => {
                let piece = event(&chunk);
                // Whole-chunk batches when not dripping: one write per ~64 KiB, not
                // per event, so the client is what limits the rate.
                let batch = if every.is_zero() {
                    piece.repeat((65536 / piece.len().max(1)).max(1))
                } else {
                    piece.to_vec()
                };
                let batch = Bytes::from(batch);
                let s = stream::unfold((), move |()| {
                    let batch = batch.clone();
                    async move {
                        if !every.is_zero() {
                            tokio::time::sleep(every).await;
                        }
                        Some((Ok::<_, std::io::Error>(batch), ()))
                    }
                });
                return sse(s, guard);
            }
            MockReply::Stall { chunks } => {
                let parts: Vec<Bytes> = chunks.iter().map(event).collect();
                let s = stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>))
                    .chain(stream::pending());
                return sse(s, guard);
            }
        }
    }
}

fn event(chunk: &Value) -> Bytes {
    Bytes::from(format!("data: {chunk}\n\n"))
}

/// A `text/event-stream` response that keeps the request in flight until the body ends.
fn sse<S>(s: S, guard: FlightGuard) -> Response
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let s = s.map(move |item| {
        let _in_flight = &guard;
        item
    });
    let mut resp = Response::new(Body::from_stream(s));
    let h = resp.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    resp
}
