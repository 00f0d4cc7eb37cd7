//! The HTTP client of an OpenAI-compatible provider: brood's own HTTP/2 connection
//! ([`super::h2`]) for an `https://` endpoint that takes `h2`, hyper-util's pooled
//! client driven directly for the rest (docs/ARCHITECTURE.md "Decisions": the
//! provider drives hyper; brood's own HTTP/2 pool).
//!
//! One [`HttpClient`] per provider, shared by every run of the tree that talks to it:
//! one pool. Over TLS (rustls on *ring*, the webpki roots plus the provider's
//! `ca_cert`), ALPN offers HTTP/2 first, and a server that takes it carries every
//! request of the tree as streams of one connection; otherwise HTTP/1.1 keeps its
//! connections alive for reuse (hyper-util's pool; `http://` endpoints always). TCP
//! connects time out after 10 s, with `TCP_NODELAY`. Both clients open their
//! connections with the one connector here.
//!
//! What a general client does for its caller and brood does here instead:
//! - **proxies**, from `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (curl's
//!   rules, read once when the provider is made): an `https://` endpoint behind a
//!   proxy is reached through a `CONNECT` tunnel, an `http://` one by sending the
//!   request to the proxy in absolute form; the proxy's own `user:password` goes as
//!   `Proxy-Authorization`. Only `http://` proxies are supported;
//! - **redirects** are never followed (the caller types a 3xx as an error);
//! - no retry layer, no copy of the request kept for one: the body is a one-shot
//!   buffer, dropped once written. A request is sent again by the client only when
//!   its connection was found closed before the request left.

use super::h2::{H2Pool, Sent};
use super::h2conn::H2Body;
use super::ModelError;
use bytes::Bytes;
use futures::future::{FutureExt, TryFutureExt};
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderValue, PROXY_AUTHORIZATION};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Response;
use hyper::{Request, Uri};
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::CertificateDer;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;

/// How long a TCP connect (to the endpoint or to its proxy) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request's body is: one buffer of known length, sent as `Content-Length`
/// and dropped once written.
pub(crate) type RequestBody = Bytes;

/// The error of one exchange (its [`std::error::Error::source`] chain names the
/// cause: a refused connect, a certificate, a closed connection).
pub(crate) type HttpError = Box<dyn std::error::Error + Send + Sync>;

/// The connector both clients open connections with: TLS when the endpoint is
/// `https://` over brood's [`Connector`].
pub(crate) type HttpsConnector = hyper_rustls::HttpsConnector<Connector>;

/// The future of an answer's head ([`HttpClient::send`]).
pub(crate) type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<AnswerBody>, HttpError>> + Send>>;

/// An answer's body, whichever way it came: a stream of its data (trailers are
/// skipped).
pub(crate) enum AnswerBody {
    /// From hyper-util's pooled client (HTTP/1.1).
    Http1(Incoming),
    /// From brood's HTTP/2 connection.
    H2(H2Body),
}

impl futures::Stream for AnswerBody {
    type Item = Result<Bytes, HttpError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.get_mut() {
            AnswerBody::H2(body) => body.poll_chunk(cx),
            AnswerBody::Http1(body) => loop {
                match std::task::ready!(Pin::new(&mut *body).poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Poll::Ready(Some(Ok(data)));
                        }
                    }
                    Some(Err(e)) => return Poll::Ready(Some(Err(Box::new(e)))),
                    None => return Poll::Ready(None),
                }
            },
        }
    }
}

/// A provider's HTTP client (clones share it).
#[derive(Clone)]
pub(crate) struct HttpClient {
    inner: Arc<Clients>,
}

/// The clients of one provider.
struct Clients {
    /// HTTP/1.1 with keep-alive (and `http://` endpoints).
    pooled: Client<HttpsConnector, Full<Bytes>>,
    /// An `https://` endpoint's HTTP/2 connection (which finds out whether the
    /// endpoint takes `h2`).
    h2: Option<H2Pool<HttpsConnector>>,
    /// `Proxy-Authorization` for a request sent to a forwarding proxy.
    forward_auth: Option<HeaderValue>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("h2", &self.inner.h2.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// The client for requests to `endpoint` (any path of its host), its proxy
    /// chosen by the environment's `*_PROXY` variables. Errors
    /// ([`ModelError::Config`]): a `ca_cert` that cannot be read or holds no
    /// certificate, a proxy that is not `http://`.
    pub(crate) fn new(
        endpoint: &Uri,
        ca_cert: Option<&Path>,
        provider: &str,
    ) -> Result<HttpClient, ModelError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let route = Route::for_endpoint(endpoint, &Matcher::from_env(), &http, provider)?;
        if matches!(route, Route::Direct) {
            refuse_unusable_proxy(endpoint, provider)?;
        }
        let forward_auth = match &route {
            Route::Forward { auth, .. } => auth.clone(),
            _ => None,
        };
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(ca_cert, provider)?)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(Connector {
                http,
                route: Arc::new(route),
            });
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new());
        // The HTTP/1.1 read buffer stays hyper's adaptive one (8 KiB at the first
        // read, grown up to ~400 KiB for a head): an exact size would also be the
        // largest answer head read — a fixed 2 KiB failed real answers whose CDN
        // headers and cookies run past it ("message head is too large").
        let h2 =
            (endpoint.scheme_str() == Some("https")).then(|| H2Pool::new(endpoint, https.clone()));
        let pooled = builder.build(https);
        Ok(HttpClient {
            inner: Arc::new(Clients {
                pooled,
                h2,
                forward_auth,
            }),
        })
    }

    /// Send `request`: a future of the answer's head, its body still to read.
    ///
    /// Over HTTP/2, once the connection is open (every request but the first few),
    /// the request is sent here, and the future holds only h2's handle on its
    /// stream (`model::h2conn`): the long way — waiting for a connection being
    /// opened, sending again a request the connection did not take, HTTP/1.1 — is
    /// a future of its own, boxed when taken, so its states do not size the one a
    /// waiting child holds.
    pub(crate) fn send(&self, request: Request<RequestBody>) -> ResponseFuture {
        let Some(h2) = &self.inner.h2 else {
            return self.inner.pooled(request);
        };
        if h2.speaks_http1() {
            return self.inner.pooled(request);
        }
        let clients = self.inner.clone();
        let resent = match h2.open_handle().map(|handle| handle.start(&request)) {
            Some(Ok(waiting)) => return Box::pin(waiting.map_ok(|a| a.map(AnswerBody::H2))),
            // Not taken (the connection closed, failed or went away just now): once
            // more, on a new one.
            Some(Err(_)) => true,
            None => false,
        };
        Box::pin(async move { clients.send(request, resent).await })
    }
}

impl Clients {
    /// The long way: over HTTP/2 (waiting for the connection to open if it is
    /// being opened; `resent` when the request was given back once already), or
    /// hyper-util's pooled client.
    async fn send(
        &self,
        mut request: Request<RequestBody>,
        resent: bool,
    ) -> Result<Response<AnswerBody>, HttpError> {
        if let Some(h2) = &self.h2 {
            match h2.send(request, resent).await {
                Sent::Done(answer) => return answer.map(|a| a.map(AnswerBody::H2)),
                Sent::Http1(back) => request = back,
            }
        }
        self.pooled(request).await
    }

    /// Through hyper-util's pooled client (HTTP/1.1, or an `http://` endpoint): its
    /// own boxed future, in a box of a few bytes that maps its answer and error.
    fn pooled(&self, mut request: Request<RequestBody>) -> ResponseFuture {
        if let Some(auth) = &self.forward_auth {
            request
                .headers_mut()
                .insert(PROXY_AUTHORIZATION, auth.clone());
        }
        Box::pin(
            self.pooled
                .request(request.map(Full::new))
                .map(|answer| match answer {
                    Ok(answer) => Ok(answer.map(AnswerBody::Http1)),
                    Err(e) => Err(HttpError::from(e)),
                }),
        )
    }
}

/// The TLS settings: rustls on *ring*, the webpki roots (Mozilla's, as reqwest's
/// `rustls-tls` trusted before) plus the provider's `ca_cert`; verification stays on.
fn tls_config(ca_cert: Option<&Path>, provider: &str) -> Result<rustls::ClientConfig, ModelError> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = ca_cert {
        for cert in read_ca_certs(path, provider)? {
            roots.add(cert).map_err(|e| {
                ModelError::Config(format!(
                    "ca_cert '{}' of provider '{provider}': a certificate cannot be used: {e}",
                    path.display()
                ))
            })?;
        }
    }
    let crypto = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(crypto)
        .with_safe_default_protocol_versions()
        .map_err(|e| ModelError::Config(format!("TLS set-up failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The certificates of a `ca_cert` PEM file, or an error naming the file and the
/// provider.
fn read_ca_certs(path: &Path, provider: &str) -> Result<Vec<CertificateDer<'static>>, ModelError> {
    crate::certs::read_pem_certificates(path).map_err(|detail| {
        ModelError::Config(format!(
            "ca_cert '{}' of provider '{provider}': {detail}",
            path.display()
        ))
    })
}

/// How the endpoint's host is reached.
#[derive(Clone, Debug)]
enum Route {
    /// Straight to it.
    Direct,
    /// Through a `CONNECT` tunnel opened by an HTTP proxy (an `https://` endpoint).
    Tunnel(Tunnel<HttpConnector>),
    /// To an HTTP proxy that forwards the request (an `http://` endpoint).
    Forward {
        proxy: Uri,
        auth: Option<HeaderValue>,
    },
}

impl Route {
    /// The route `proxies` give `endpoint` (`NO_PROXY` included); `tcp` opens the
    /// connection to the proxy.
    fn for_endpoint(
        endpoint: &Uri,
        proxies: &Matcher,
        tcp: &HttpConnector,
        provider: &str,
    ) -> Result<Route, ModelError> {
        let Some(intercept) = proxies.intercept(endpoint) else {
            return Ok(Route::Direct);
        };
        let proxy = intercept.uri().clone();
        if proxy.scheme_str() != Some("http") {
            return Err(ModelError::Config(format!(
                "the proxy set for provider '{provider}' by HTTPS_PROXY, HTTP_PROXY or \
                 ALL_PROXY is a {}:// proxy at {}: brood reaches a model endpoint only \
                 through an http:// proxy; set an http:// one, or name the endpoint's host \
                 in NO_PROXY",
                proxy.scheme_str().unwrap_or("schemeless"),
                proxy.host().unwrap_or("?"),
            )));
        }
        let auth = intercept.basic_auth().cloned();
        if endpoint.scheme_str() != Some("https") {
            return Ok(Route::Forward { proxy, auth });
        }
        let tunnel = Tunnel::new(proxy, tcp.clone());
        Ok(Route::Tunnel(match auth {
            Some(auth) => tunnel.with_auth(auth),
            None => tunnel,
        }))
    }
}

/// The error when the environment sets a proxy for `endpoint` (its scheme's
/// variable or `ALL_PROXY`, not exempted by `NO_PROXY`) that hyper-util's matcher
/// could not use — not a URL (a stray space), or a scheme it does not know — and so
/// left the route direct: the request would go straight to the endpoint, past the
/// proxy the environment asked for. The value is not shown (it may hold the proxy's
/// password). Under CGI (`REQUEST_METHOD` set) the matcher ignores every proxy
/// variable on purpose (httpoxy), and so does this.
fn refuse_unusable_proxy(endpoint: &Uri, provider: &str) -> Result<(), ModelError> {
    if std::env::var_os("REQUEST_METHOD").is_some() {
        return Ok(());
    }
    let first = |names: [&'static str; 2]| {
        names
            .into_iter()
            .find_map(|n| std::env::var(n).ok().map(|v| (n, v)))
    };
    let scheme = match endpoint.scheme_str() {
        Some("https") => ["HTTPS_PROXY", "https_proxy"],
        _ => ["HTTP_PROXY", "http_proxy"],
    };
    let set: Vec<&str> = [first(scheme), first(["ALL_PROXY", "all_proxy"])]
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(n, _)| n)
        .collect();
    if set.is_empty() {
        return Ok(());
    }
    let no_proxy = first(["NO_PROXY", "no_proxy"]).map_or(String::new(), |(_, v)| v);
    let exempt = Matcher::builder()
        .all("http://127.0.0.1:9")
        .no(no_proxy)
        .build()
        .intercept(endpoint)
        .is_none();
    if exempt {
        return Ok(());
    }
    Err(ModelError::Config(format!(
        "{} is set for provider '{provider}' but is not a proxy brood can use (an \
         http:// URL such as http://user:password@proxy.example:3128, without spaces): \
         fix or unset it, or name the endpoint's host in NO_PROXY; brood does not go \
         around a proxy the environment asks for",
        set.join(" / ")
    )))
}

/// Opens the TCP connection a request goes over, by its [`Route`] (TLS, when the
/// endpoint is `https://`, is layered on it by hyper-rustls).
#[derive(Clone, Debug)]
pub(crate) struct Connector {
    http: HttpConnector,
    /// Shared: the client clones its connector into every request's future.
    route: Arc<Route>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for Connector {
    type Response = Tcp;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Tcp, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // `HttpConnector` and `Tunnel` over it are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match &*self.route {
            Route::Direct => {
                let connecting = self.http.call(dst);
                Box::pin(async move { Ok(Tcp::new(connecting.await?, false)) })
            }
            Route::Tunnel(tunnel) => {
                let connecting = tunnel.clone().call(dst);
                Box::pin(async move { Ok(Tcp::new(connecting.await?, false)) })
            }
            Route::Forward { proxy, .. } => {
                let connecting = self.http.call(proxy.clone());
                Box::pin(async move { Ok(Tcp::new(connecting.await?, true)) })
            }
        }
    }
}

/// A TCP connection, and whether it goes to a forwarding proxy (then hyper-util
/// sends each request's URI in absolute form).
#[derive(Debug)]
pub(crate) struct Tcp {
    io: TokioIo<TcpStream>,
    forwarding: bool,
}

impl Tcp {
    fn new(io: TokioIo<TcpStream>, forwarding: bool) -> Tcp {
        Tcp { io, forwarding }
    }
}

impl Connection for Tcp {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.forwarding)
    }
}

impl Read for Tcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl Write for Tcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(endpoint: &str, proxies: Matcher) -> Result<Route, ModelError> {
        Route::for_endpoint(
            &endpoint.parse().unwrap(),
            &proxies,
            &HttpConnector::new(),
            "vllm",
        )
    }

    #[test]
    fn the_proxy_route_follows_the_scheme_and_no_proxy() {
        let proxies = || {
            Matcher::builder()
                .https("http://u:p@10.0.0.1:3128")
                .http("http://10.0.0.2:3128")
                .no("internal.example, 192.168.0.0/16")
                .build()
        };
        assert!(matches!(
            route("https://api.example.com/v1", proxies()),
            Ok(Route::Tunnel(_))
        ));
        match route("http://api.example.com/v1", proxies()) {
            Ok(Route::Forward { proxy, auth }) => {
                assert_eq!(proxy.host(), Some("10.0.0.2"));
                assert!(auth.is_none());
            }
            other => panic!("{other:?}"),
        }
        for direct in [
            "https://gpu.internal.example:8000/v1",
            "http://192.168.1.9:8080/v1",
        ] {
            assert!(
                matches!(route(direct, proxies()), Ok(Route::Direct)),
                "{direct}"
            );
        }
        assert!(matches!(
            route("https://api.example.com/v1", Matcher::builder().build()),
            Ok(Route::Direct)
        ));
    }

    #[test]
    fn a_proxy_that_is_not_http_is_refused_naming_it() {
        for proxy in ["socks5://10.0.0.1:1080", "https://10.0.0.1:3128"] {
            let e = route(
                "https://api.example.com/v1",
                Matcher::builder().all(proxy).build(),
            )
            .unwrap_err()
            .to_string();
            let scheme = proxy.split(':').next().unwrap();
            assert!(
                e.contains(&format!("{scheme}://")) && e.contains("vllm") && e.contains("NO_PROXY"),
                "{e}"
            );
        }
    }
}
