//! A PostgreSQL ledger whose server takes the connection and never answers (a
//! firewall that drops traffic after the TCP handshake, a wedged server): every
//! connect is bounded by the URL's `connect_timeout` (libpq's meaning: seconds, 1
//! means 2) and fails with an error naming the host and the timeout, instead of
//! waiting forever (docs/FLEET.md "Unreachable servers"). All connections — the
//! writer's at `Ledger::open` and its reconnections, the listeners', readers' and
//! `brood doctor`'s — are made by the one `PgTarget::try_connect`; this covers a
//! reader, `inspect_at` (`brood doctor`) and `Ledger::open`.
//!
//! No PostgreSQL is needed: the "server" is a loopback listener nobody accepts on —
//! the kernel completes the TCP handshake for its backlog, so the client's TLS
//! request (loopback gets `sslmode=prefer`) or startup message is taken and never
//! answered.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use brood::ledger::{Ledger, LedgerError, LedgerOptions};

/// A loopback port that takes connections and never answers, and the URL of a
/// ledger there with `connect_timeout=1` (2 s, as libpq).
fn blackhole() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = format!("postgres://brood:hunter2@127.0.0.1:{port}/brood?connect_timeout=1");
    (listener, url)
}

/// `err` is the connect timeout, names the host and `connect_timeout` and what to
/// check, and not the password; it came after the 2 s bound, not long after.
fn assert_timed_out(err: &LedgerError, took: Duration) {
    let text = err.to_string();
    assert!(
        matches!(err, LedgerError::ConnectTimeout { secs: 2, .. }),
        "{err:?}"
    );
    assert!(
        text.contains("127.0.0.1") && text.contains("connect_timeout") && text.contains("firewall"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "the bound is 2 s; took {took:?}"
    );
}

#[test]
fn a_reader_and_doctor_give_up_on_a_server_that_never_answers() {
    let (_held, url) = blackhole();
    let ws = tempfile::tempdir().unwrap();

    let asked = Instant::now();
    let Err(err) = Ledger::open_reader_at(ws.path(), Some(&url)) else {
        panic!("a reader opened on a server that never answers");
    };
    assert_timed_out(&err, asked.elapsed());

    let asked = Instant::now();
    let err = Ledger::inspect_at(ws.path(), Some(&url)).unwrap_err();
    assert_timed_out(&err, asked.elapsed());
}

#[test]
fn opening_a_ledger_on_a_server_that_never_answers_fails_naming_the_timeout() {
    let (_held, url) = blackhole();
    let ws = tempfile::tempdir().unwrap();
    // A timeout is the server out of reach: tried again within `reconnect_for`
    // (zero here: once), then reported with the timeout as the last failure.
    let asked = Instant::now();
    let err = Ledger::open(
        ws.path(),
        LedgerOptions {
            url: Some(url),
            reconnect_for: Duration::ZERO,
            ..LedgerOptions::default()
        },
    )
    .unwrap_err();
    let took = asked.elapsed();
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Disconnected { .. }), "{err:?}");
    assert!(
        text.contains("127.0.0.1") && text.contains("within 2 s (connect_timeout)"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

#[test]
fn a_connect_timeout_that_is_not_a_whole_number_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let Err(err) = Ledger::open_reader_at(
        ws.path(),
        Some("postgres://brood:hunter2@127.0.0.1:1/brood?connect_timeout=soon"),
    ) else {
        panic!("a URL with a bad connect_timeout was taken");
    };
    let text = err.to_string();
    assert!(matches!(err, LedgerError::BadUrl { .. }), "{err:?}");
    assert!(text.contains("connect_timeout=soon"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// A huge `connect_timeout` (the URL is outside input) bounds nothing, rather than
/// overflowing: the bound is per host the URL names, and multiplying `i64::MAX`
/// seconds by three hosts panicked the reader (a worker, `brood doctor`). Every host
/// refuses at once here, so the error is the refusal.
#[test]
fn a_huge_connect_timeout_over_several_hosts_is_not_a_panic() {
    // Three: two times `i64::MAX` seconds still fits a `Duration`.
    let ws = tempfile::tempdir().unwrap();
    let port = closed_port();
    let url = format!(
        "postgres://brood:hunter2@127.0.0.1:{port},127.0.0.1:{port},127.0.0.1:{port}/brood\
         ?sslmode=disable&connect_timeout={}",
        i64::MAX
    );
    let Err(err) = Ledger::open_reader_at(ws.path(), Some(&url)) else {
        panic!("a reader opened on a closed port");
    };
    let text = err.to_string();
    assert!(
        !matches!(err, LedgerError::ConnectTimeout { .. }),
        "{err:?}"
    );
    assert!(text.contains("127.0.0.1"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// The password is hidden in a connect's error whatever it holds: tokio-postgres
/// takes everything up to the first `@` as the credentials, so an unencoded `/` (a
/// generated or base64 password) is part of the password — and was shown whole,
/// the redaction having stopped the user info at that `/`. A `password` parameter
/// whose key is percent-encoded is hidden too.
#[test]
fn a_password_with_a_slash_or_an_encoded_key_is_hidden_in_errors() {
    let ws = tempfile::tempdir().unwrap();
    let port = closed_port();
    for (url, secret) in [
        (
            format!("postgres://brood:Zx9/kq+T4w==@127.0.0.1:{port}/brood?sslmode=disable"),
            "Zx9/kq+T4w",
        ),
        (
            format!("postgres://brood@127.0.0.1:{port}/brood?sslmode=disable&passw%6Frd=hunter2"),
            "hunter2",
        ),
    ] {
        let Err(err) = Ledger::open_reader_at(ws.path(), Some(&url)) else {
            panic!("a reader opened on a closed port");
        };
        let text = err.to_string();
        assert!(text.contains("127.0.0.1"), "{text}");
        assert!(!text.contains(secret), "{text}");
        let text = format!("{err:?}");
        assert!(!text.contains(secret), "{text}");
    }
}

/// A loopback port nothing listens on (bound, then let go): a connect is refused.
fn closed_port() -> u16 {
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    refused.local_addr().unwrap().port()
}
