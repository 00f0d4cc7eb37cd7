//! The provider's one HTTP/2 connection (issue 17): opened once for requests that
//! come together (a single flight), opened again — once — when the server closes
//! it, a stream the server refused unprocessed sent once more, and HTTP/1.1 with
//! kept-alive connections when the server's ALPN offers only that. Against
//! brood-mock's TLS mode, its CA trusted through `ca_cert` (verification on).

use crate::step;
use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::{Message, ModelError, ModelRequest, Sampling};
use brood_mock::{Alpn, Gate, MockReply, MockServer};
use futures::future::join_all;
use std::path::Path;

/// A provider for `server`, its CA written into `dir`; `attempts` per step.
fn provider(server: &MockServer, dir: &Path, attempts: u32) -> OpenAiProvider {
    let cfg = config_via(server, dir, &server.base_url(), attempts, 20);
    OpenAiProvider::new(cfg).unwrap()
}

/// The configuration of a provider reaching `server` at `base_url` (its own, or a
/// relay's in front of it), its CA written into `dir`; `attempts` per step of at
/// most `timeout_secs`, retried after 10–20 ms.
fn config_via(
    server: &MockServer,
    dir: &Path,
    base_url: &str,
    attempts: u32,
    timeout_secs: u64,
) -> ProviderConfig {
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, server.ca_cert_pem().expect("a TLS server")).unwrap();
    let mut cfg = ProviderConfig::new("h2", base_url);
    cfg.ca_cert = Some(ca);
    cfg.max_attempts = attempts;
    cfg.api_timeout_secs = timeout_secs;
    cfg.backoff_base_ms = 10;
    cfg.backoff_max_ms = 20;
    cfg
}

fn request(text: &str) -> ModelRequest {
    ModelRequest {
        model: "mock-model".into(),
        system: "s".into(),
        messages: vec![Message::user(text)],
        tools: Default::default(),
        tool_choice: None,
        sampling: Sampling::default(),
    }
}

/// `n` steps of `provider` started together; each one's answer text.
async fn steps(provider: &OpenAiProvider, n: usize) -> Vec<Result<String, ModelError>> {
    let reqs: Vec<ModelRequest> = (0..n).map(|i| request(&format!("request {i}"))).collect();
    answers(provider, &reqs).await
}

/// A step of `provider` for each of `reqs`, started together; each one's answer text.
async fn answers(
    provider: &OpenAiProvider,
    reqs: &[ModelRequest],
) -> Vec<Result<String, ModelError>> {
    join_all(reqs.iter().map(|r| async move {
        let (answer, _) = step(provider, r).await;
        answer.map(|a| a.message.content)
    }))
    .await
}

/// `n` steps of `provider` in a task of their own, handed back once `server` has
/// all `n` in flight.
async fn in_flight(
    provider: &OpenAiProvider,
    server: &MockServer,
    n: usize,
) -> tokio::task::JoinHandle<Vec<Result<String, ModelError>>> {
    let waiting = tokio::spawn({
        let p = provider.clone();
        async move { steps(&p, n).await }
    });
    server.wait_for_in_flight(n).await;
    waiting
}

/// The endpoint and detail of a step's `Connect` error (its one attempt's).
fn connect_error(answer: &Result<String, ModelError>) -> (&str, &str) {
    match answer {
        Err(ModelError::RetriesExhausted { last, .. }) => match &**last {
            ModelError::Connect { url, detail } => (url, detail),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn all_ok(answers: &[Result<String, ModelError>], text: &str) {
    for a in answers {
        assert_eq!(
            a.as_deref().map_err(|e| e.to_string()),
            Ok(text),
            "{answers:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_first_requests_at_once_open_one_connection() {
    let gate = Gate::new();
    let held = gate.clone();
    let server = MockServer::start_tls(Alpn::H2, move |_| MockReply::text("ok").until(&held));
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&server, dir.path(), 1);
    // All fifty find no connection and wait for the one being opened: one TCP
    // connect, one TLS handshake (a connect each would be fifty accepts, even if
    // all but one were dropped once ALPN said h2). Held until all fifty are in.
    let waiting = in_flight(&p, &server, 50).await;
    gate.open();
    all_ok(&waiting.await.unwrap(), "ok");
    assert_eq!(server.request_count(), 50);
    assert_eq!(server.connections(), 1);
    assert_eq!(server.h2_connections(), 1);
    // And the next ones reuse it.
    all_ok(&steps(&p, 20).await, "ok");
    assert_eq!(server.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_closed_between_requests_is_opened_again_once() {
    let server = MockServer::start_tls(Alpn::H2, |_| MockReply::text("ok"));
    let dir = tempfile::tempdir().unwrap();
    // One attempt: a request sent on the closed connection would fail the step.
    let p = provider(&server, dir.path(), 1);
    all_ok(&steps(&p, 1).await, "ok");
    assert_eq!(server.connections(), 1);

    // The server goes away (GOAWAY, then closes) between requests.
    server.go_away();
    server.wait_for_open_connections_at_most(0).await;
    all_ok(&steps(&p, 1).await, "ok");
    assert_eq!(server.connections(), 2);

    // Again, with ten requests finding the connection closed together: one new one.
    server.go_away();
    server.wait_for_open_connections_at_most(0).await;
    all_ok(&steps(&p, 10).await, "ok");
    assert_eq!(server.connections(), 3);
    assert_eq!(server.h2_connections(), 3);
    assert_eq!(server.request_count(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_when_the_server_goes_away_are_answered_once() {
    let gate = Gate::new();
    let held = gate.clone();
    let server = MockServer::start_tls(Alpn::H2, move |_| MockReply::text("late").until(&held));
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&server, dir.path(), 1);
    let waiting = in_flight(&p, &server, 10).await;
    // A GOAWAY while ten streams wait: the server had them all, so they are
    // answered on the closing connection, none sent twice.
    server.go_away();
    gate.open();
    all_ok(&waiting.await.unwrap(), "late");
    assert_eq!(server.request_count(), 10);
    assert_eq!(server.connections(), 1);
    server.wait_for_open_connections_at_most(0).await;
    all_ok(&steps(&p, 3).await, "late");
    assert_eq!(server.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refused_unprocessed_is_sent_once_more_then_typed() {
    let server = MockServer::start_tls(Alpn::H2, |_| MockReply::text("ok"));
    let dir = tempfile::tempdir().unwrap();
    // One attempt: the resend is not an attempt of the retry policy.
    let p = provider(&server, dir.path(), 1);
    server.refuse_next(1);
    all_ok(&steps(&p, 1).await, "ok");
    assert_eq!(server.refused(), 1);
    assert_eq!(server.request_count(), 1);
    // A reset stream leaves the connection as it was.
    assert_eq!(server.connections(), 1);

    // Refused twice: sent once more only, then a typed error naming the endpoint.
    server.refuse_next(2);
    let answers = steps(&p, 1).await;
    let (url, detail) = connect_error(&answers[0]);
    assert_eq!(url, p.endpoint());
    assert!(
        detail.contains("refused the request") && detail.contains("refused stream"),
        "{detail}"
    );
    assert_eq!(server.refused(), 3);
    assert_eq!(server.request_count(), 1);
}

/// The server drops the connection (no GOAWAY, no TLS close) under waiting
/// requests it had received: they may have been processed, so none is sent again
/// by the client — each step gets a typed `Connect` error (the step's retry policy
/// decides, here one attempt), as with hyper-util's client before; the next request
/// opens one new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_when_the_server_drops_the_connection_get_a_typed_error() {
    let gate = Gate::new();
    let held = gate.clone();
    let server = MockServer::start_tls(Alpn::H2, move |req| {
        if req.seq < 5 {
            MockReply::text("late").until(&held)
        } else {
            MockReply::text("again")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&server, dir.path(), 1);
    let waiting = in_flight(&p, &server, 5).await;
    server.drop_connections();
    for answer in waiting.await.unwrap() {
        let (url, detail) = connect_error(&answer);
        assert_eq!(url, p.endpoint());
        assert!(detail.contains("close_notify"), "{detail}");
    }
    assert_eq!(server.request_count(), 5);
    all_ok(&steps(&p, 4).await, "again");
    assert_eq!(server.connections(), 2);
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_offering_only_http11_keeps_its_connections_alive() {
    let server = MockServer::start_tls(Alpn::Http11, |_| MockReply::text("ok"));
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&server, dir.path(), 1);
    for _ in 0..20 {
        all_ok(&steps(&p, 1).await, "ok");
    }
    // The probing connection (ALPN said http/1.1; dropped), then connections kept
    // alive for the twenty requests one after another: one, and now and then one
    // more when a request starts in the moment before hyper-util's pool takes the
    // last one back (connections.rs); a connection per request would be 21.
    assert_eq!(server.h2_connections(), 0);
    let conns = server.connections();
    assert!((2..=6).contains(&conns), "{conns}");
    // Requests at once: a connection each, as HTTP/1.1 needs.
    all_ok(&steps(&p, 4).await, "ok");
    assert!(
        server.connections() <= conns + 4,
        "{}",
        server.connections()
    );
    assert_eq!(server.request_count(), 24);
}

/// The first connection is accepted and never answered (a TLS handshake that never
/// finishes: a wedged endpoint, a blackholing middlebox); the connections after it
/// reach the server. The step that waited for the stuck opening times out; the one
/// after it must not wait for that same opening again (nobody waits for it any
/// more): it opens a new connection and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opening_nobody_waits_for_any_more_is_not_waited_for_again() {
    let server = MockServer::start_tls(Alpn::H2, |_| MockReply::text("ok"));
    let (relay, accepted) = first_connection_held_silent(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let relayed = format!("https://{relay}/v1");
    let p = OpenAiProvider::new(config_via(&server, dir.path(), &relayed, 1, 1)).unwrap();

    let first = steps(&p, 1).await;
    assert!(
        matches!(first[0], Err(ModelError::Timeout { secs: 1 })),
        "{first:?}"
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    all_ok(&steps(&p, 1).await, "ok");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(server.connections(), 1);
}

/// An opening that never finishes is given up on by itself (20 s), whoever waits
/// for it: a step with a long timeout is not held by it until its own end — its
/// connect fails, the step's retry opens anew and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opening_that_never_finishes_is_given_up_within_its_own_bound() {
    let server = MockServer::start_tls(Alpn::H2, |_| MockReply::text("ok"));
    let (relay, accepted) = first_connection_held_silent(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let relayed = format!("https://{relay}/v1");
    let p = OpenAiProvider::new(config_via(&server, dir.path(), &relayed, 2, 60)).unwrap();

    let asked = std::time::Instant::now();
    all_ok(&steps(&p, 1).await, "ok");
    let took = asked.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(20) && took < std::time::Duration::from_secs(60),
        "answered after {took:?}"
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(server.connections(), 1);
}

/// A TCP relay on loopback to `server` whose first connection is accepted and held
/// open, unread and unanswered (a wedged endpoint, a blackholing middlebox); the
/// connections after it reach the server. Its address and the count of
/// connections it accepted.
async fn first_connection_held_silent(
    server: &MockServer,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay = listener.local_addr().unwrap();
    let target = server.addr();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        // Held open, unread and unanswered, for as long as the relay runs.
        let (_silent, _) = listener.accept().await.unwrap();
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        while let Ok((mut client, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut upstream = TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (relay, accepted)
}

/// A TCP relay on loopback to `target`: every connection forwarded both ways until
/// the returned switch is thrown, after which the connections open then forward
/// nothing more (what they are sent vanishes, nothing comes back, neither end is
/// closed: a network that started dropping the traffic). Connections made after
/// the switch are forwarded.
async fn blackholing_relay(
    target: std::net::SocketAddr,
) -> (std::net::SocketAddr, impl Fn() + Send + Sync) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    async fn pump<R, W>(mut from: R, mut to: W, cut: Arc<AtomicBool>)
    where
        R: AsyncReadExt + Unpin,
        W: AsyncWriteExt + Unpin,
    {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if !cut.load(Ordering::SeqCst) && to.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        // Closed by its sender: hold the other end open, as a dropped route does.
        std::future::pending::<()>().await;
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cuts: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
    let known = cuts.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = TcpStream::connect(target).await.unwrap();
            let cut = Arc::new(AtomicBool::new(false));
            known.lock().unwrap().push(cut.clone());
            let (cr, cw) = client.into_split();
            let (ur, uw) = upstream.into_split();
            tokio::spawn(pump(cr, uw, cut.clone()));
            tokio::spawn(pump(ur, cw, cut));
        }
    });
    let cut_all = move || {
        for c in cuts.lock().unwrap().iter() {
            c.store(true, Ordering::SeqCst);
        }
    };
    (addr, cut_all)
}

/// The network drops the connection's traffic without closing it (the kernel of
/// neither end sees a reset): the connection still looks open. A request sent on
/// it must not wait for the step's whole timeout and hand the dead connection to
/// every later request: HTTP/2 PINGs unanswered close it, the request fails and
/// its retry opens a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_traffic_vanishes_is_closed_and_opened_again() {
    let server = MockServer::start_tls(Alpn::H2, |_| MockReply::text("ok"));
    let (relay, cut) = blackholing_relay(server.addr()).await;
    let dir = tempfile::tempdir().unwrap();
    let relayed = format!("https://{relay}/v1");
    let p = OpenAiProvider::new(config_via(&server, dir.path(), &relayed, 2, 45)).unwrap();
    all_ok(&steps(&p, 1).await, "ok");
    assert_eq!(server.connections(), 1);

    cut();
    let started = std::time::Instant::now();
    all_ok(&steps(&p, 3).await, "ok");
    assert_eq!(server.request_count(), 4);
    assert_eq!(server.connections(), 2);
    // Well within the step's timeout: noticed by the PINGs, not by giving up.
    assert!(started.elapsed() < std::time::Duration::from_secs(40));
}

/// Requests larger than the server's windows (a long conversation: 3 MiB each,
/// against the 64 KiB a stream may send before the server's first window update)
/// go whole, three at once on the one connection: the client sends each body as the
/// server's windows open, or a request stalls at its first window and the step
/// times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_larger_than_the_windows_are_sent_whole() {
    let server = MockServer::start_tls(Alpn::H2, |req| {
        MockReply::text(format!("got {}", req.first_user_text().map_or(0, str::len)))
    });
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&server, dir.path(), 1);
    let big: Vec<ModelRequest> = (0..3)
        .map(|i| request(&format!("{i}").repeat(3 * 1024 * 1024)))
        .collect();
    all_ok(
        &answers(&p, &big).await,
        &format!("got {}", 3 * 1024 * 1024),
    );
    assert_eq!(server.h2_connections(), 1);
}

/// Steps given up on (their task dropped: a timeout, a cancelled child) reset
/// their streams: the server stops answering them at once — it does not hold
/// them until it would have answered — and the connection stays open for the
/// next requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_given_up_on_reset_their_streams_and_keep_the_connection() {
    let gate = Gate::new();
    let held = gate.clone();
    let server = MockServer::start_tls(Alpn::H2, move |req| {
        if req.seq < 3 {
            MockReply::text("late").until(&held)
        } else {
            MockReply::text("ok")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&server, dir.path(), 1);
    let waiting = in_flight(&p, &server, 3).await;
    waiting.abort();
    let reset = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        server.wait_for_in_flight_at_most(0),
    )
    .await;
    assert!(reset.is_ok(), "still in flight: {}", server.in_flight());
    all_ok(&steps(&p, 2).await, "ok");
    assert_eq!(server.connections(), 1);
    assert_eq!(server.request_count(), 5);
    gate.open();
}

/// Streamed answers larger than HTTP/2's windows (2 MiB per stream, 5 MiB per
/// connection): the client gives the window back as it reads, or the first
/// answer stalls at 2 MiB and the connection's window runs dry for every later
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_larger_than_the_windows_are_read_whole() {
    let big = "x".repeat(3 * 1024 * 1024);
    let reply = big.clone();
    let server = MockServer::start_tls(Alpn::H2, move |_| {
        MockReply::Answer(brood_mock::Answer::text(reply.clone()).fragment(64 * 1024))
    });
    let dir = tempfile::tempdir().unwrap();
    let p = provider(&server, dir.path(), 1);
    for _ in 0..2 {
        let answers = steps(&p, 1).await;
        assert_eq!(answers[0].as_deref().map(str::len).ok(), Some(big.len()));
    }
    assert_eq!(server.connections(), 1);
    assert_eq!(server.h2_connections(), 1);
}
