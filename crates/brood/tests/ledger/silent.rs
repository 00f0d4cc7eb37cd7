//! A PostgreSQL server that answered the connect and then goes silent (a wedged or
//! stopped backend, a firewall that starts dropping the traffic: the kernel still
//! acknowledges, so keepalives and `tcp_user_timeout` never fire) holds no
//! statement past the URL's `query_timeout` (docs/FLEET.md "Unreachable servers"):
//! a reader and `brood doctor` fail naming the host and the timeout; the writer
//! drops the connection and connects again, and every record lands once — a COMMIT
//! whose answer never came included; a listener, which waits unbounded for
//! notifications, checks its quiet connection and listens again.
//!
//! The silence is a loopback proxy in front of the test server (`common/proxy.rs`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use brood::ledger::{EventKind, FleetChannel, Ledger, LedgerError, LedgerOptions};
use serde_json::json;

use crate::common::pg::{hears_an_enqueue, listening, socket_and_db};
use crate::common::proxy::Proxy;
use crate::common::{named, progress, Place, Store};

/// A proxy in front of the store's database and a URL through it with `params`
/// (after `sslmode=disable`: the proxy follows the plain protocol).
fn proxied(ws: &Store, params: &str) -> (Proxy, String, String) {
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let proxy = Proxy::start(socket);
    let url = format!(
        "postgresql://brood:hunter2@127.0.0.1:{}/{db}?sslmode=disable&{params}",
        proxy.port
    );
    (proxy, url, db)
}

fn open(ws: &Store, url: &str) -> Ledger {
    Ledger::open(
        ws.path(),
        LedgerOptions {
            url: Some(url.to_string()),
            ..LedgerOptions::default()
        },
    )
    .unwrap()
}

/// `err` is the statement timeout of 1 s, naming the host, `query_timeout` and what
/// to check, not the password; it came after the bound, not long after.
fn assert_unanswered(err: &LedgerError, took: Duration) {
    let text = err.to_string();
    assert!(
        matches!(err, LedgerError::QueryTimeout { secs: 1, .. }),
        "{err:?}"
    );
    assert!(
        text.contains("127.0.0.1")
            && text.contains("within 1 s (query_timeout)")
            && text.contains("pg_stat_activity"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(6),
        "the bound is 1 s; took {took:?}"
    );
}

/// `brood agents list` and `brood doctor` read through a reader and `inspect_at`:
/// connected, then no answer — each fails within `query_timeout` (without it they
/// waited until killed).
#[test]
fn a_reader_and_doctor_give_up_on_a_server_that_goes_silent_after_the_connect() {
    let Some(ws) = Store::postgres("a_reader_and_doctor_give_up_on_a_silent_server") else {
        return;
    };
    // A ledger there, so the reader has something to read.
    let ledger = ws.open_with(ws.options());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(ledger.close()).unwrap();
    let (proxy, url, _) = proxied(&ws, "query_timeout=1");
    proxy.silent_after_connect.store(true, Ordering::SeqCst);

    let asked = Instant::now();
    let Err(err) = Ledger::open_reader_at(ws.path(), Some(&url)) else {
        panic!("a reader read from a server that stopped answering");
    };
    assert_unanswered(&err, asked.elapsed());

    let asked = Instant::now();
    let err = Ledger::inspect_at(ws.path(), Some(&url)).unwrap_err();
    assert_unanswered(&err, asked.elapsed());
    assert_eq!(proxy.connections(), 2, "each connected, then waited");
}

/// The writer's server goes silent mid-run: the awaited write's statement times
/// out, the connection is dropped, the writer tries to connect again (each try
/// bounded by `connect_timeout`) and, once the server answers again, ends the old
/// backend (it still holds the boot's lock and maybe a transaction), and commits
/// the batch: every record once, in order.
#[tokio::test]
async fn a_writer_whose_server_goes_silent_connects_again_and_loses_nothing() {
    let Some(ws) = Store::postgres("a_writer_whose_server_goes_silent") else {
        return;
    };
    let (proxy, url, _) = proxied(&ws, "query_timeout=1&connect_timeout=1");
    let ledger = open(&ws, &url);
    let run = ledger.create_run(named("r")).await.unwrap();
    ledger.mark_running(&run).await.unwrap();
    for i in 0..3 {
        ledger
            .append_event(&run, EventKind::Warning, json!({ "i": i }))
            .unwrap();
    }
    ledger.flush().await.unwrap();
    proxy.silent.store(true, Ordering::SeqCst);
    for i in 3..6 {
        ledger
            .append_event(&run, EventKind::Warning, json!({ "i": i }))
            .unwrap();
    }
    let flushed = {
        let ledger_stats = ledger.stats();
        assert_eq!(ledger_stats.reconnects, 0, "{ledger_stats:?}");
        ledger.flush()
    };
    let flushing = tokio::spawn(flushed);
    // The server answers again once the writer has given up on its connection.
    let deadline = Instant::now() + Duration::from_secs(20);
    while ledger.stats().reconnects == 0 {
        assert!(
            Instant::now() < deadline,
            "the writer never gave up its connection"
        );
        assert!(
            !flushing.is_finished(),
            "the flush ended on a silent server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.silent.store(false, Ordering::SeqCst);
    flushing.await.unwrap().unwrap();
    ledger.complete(&run, json!("done")).await.unwrap();
    assert_eq!(
        progress(&ws, &run),
        (0..6).collect::<Vec<_>>(),
        "every record once"
    );
    let stats = ledger.stats();
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert_eq!(stats.ops_failed, 0, "{stats:?}");
    ledger.close().await.unwrap();
}

/// The server stays silent past `reconnect_for`: the write fails with an error that
/// names the URL (no password) and says the server stopped answering
/// (`query_timeout`), in bounded time, and the next write goes through once it
/// answers again.
#[tokio::test]
async fn a_server_silent_for_good_fails_the_write_naming_the_query_timeout() {
    let Some(ws) = Store::postgres("a_server_silent_for_good") else {
        return;
    };
    let (proxy, url, db) = proxied(&ws, "query_timeout=1&connect_timeout=1");
    let ledger = Ledger::open(
        ws.path(),
        LedgerOptions {
            url: Some(url),
            reconnect_for: Duration::from_millis(500),
            ..LedgerOptions::default()
        },
    )
    .unwrap();
    let run = ledger.create_run(named("r")).await.unwrap();
    proxy.silent.store(true, Ordering::SeqCst);
    let asked = Instant::now();
    let err = ledger.mark_running(&run).await.unwrap_err();
    let took = asked.elapsed();
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Disconnected { .. }), "{err:?}");
    assert!(
        text.contains(&db) && text.contains("within 1 s (query_timeout)"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    // 1 s for the statement, a 2 s connect (or two) within the 0.5 s of
    // reconnect_for, for each of the batch's reconnections: never unbounded.
    assert!(took < Duration::from_secs(40), "{took:?}");
    proxy.silent.store(false, Ordering::SeqCst);
    ledger.mark_running(&run).await.unwrap();
    ledger.complete(&run, json!("done")).await.unwrap();
    assert_eq!(
        ws.reader().run(&run).unwrap().status,
        brood::ledger::RunStatus::Completed
    );
    assert!(matches!(
        ledger.close().await,
        Err(LedgerError::Unwritten { failed: 1 })
    ));
}

/// The server commits a batch and its answer never comes (the connection stays
/// open, silent): the COMMIT times out, the writer connects again, reads that the
/// transaction committed, and does not write the batch again.
#[tokio::test]
async fn a_commit_that_goes_unanswered_is_not_written_again() {
    let Some(ws) = Store::postgres("a_commit_that_goes_unanswered") else {
        return;
    };
    let (proxy, url, _) = proxied(&ws, "query_timeout=1");
    let took = crate::reconnect::a_commit_answer_is_lost(&ws, &proxy, &url, true).await;
    assert!(
        took >= Duration::from_secs(1),
        "answered before the timeout: {took:?}"
    );
}

/// A listener (a worker's idle wait, a parent's wait for its children) whose
/// connection goes silent notices within `keepalives_idle` + `query_timeout`, not at
/// the end of its wait, connects again and says so; what is enqueued afterwards is
/// heard.
#[tokio::test]
async fn a_listener_whose_server_goes_silent_listens_again() {
    let Some(ws) = Store::postgres("a_listener_whose_server_goes_silent") else {
        return;
    };
    let (proxy, url, _) = proxied(&ws, "query_timeout=1&keepalives_idle=1");
    let parent = open(&ws, &url);
    let before = proxy.connections();
    let queued = listening(&parent, FleetChannel::Queued).await;
    assert_eq!(
        proxy.connections(),
        before + 1,
        "the listener's own connection"
    );
    proxy.silence_last();
    let (first, took, queued) = tokio::task::spawn_blocking(move || {
        let mut queued = queued;
        let asked = Instant::now();
        let first = queued.wait(Duration::from_secs(30)).unwrap();
        (first, asked.elapsed(), queued)
    })
    .await
    .unwrap();
    assert!(first.reconnected, "{first:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "noticed after 1 s quiet + 1 s unanswered, not at the wait's end: {took:?}"
    );
    assert_eq!(proxy.connections(), before + 2, "connected again");
    hears_an_enqueue(&parent, queued, Duration::from_secs(10)).await;
    parent.close().await.unwrap();
}

/// `keepalives_idle` is also how long a listener's connection may stay quiet before
/// it is checked. tokio-postgres takes any positive number of seconds and ignores
/// it on a Unix socket (or with `keepalives=0`), so the URL's largest value reaches
/// the listener: its wait must neither panic (the check's time overflowing the
/// clock) nor check; it hears what is enqueued — as a wait without end does.
#[tokio::test]
async fn a_listener_with_the_largest_keepalives_idle_waits_and_hears() {
    let Some(ws) = Store::postgres("a_listener_with_the_largest_keepalives_idle") else {
        return;
    };
    let url = format!("{}&keepalives_idle={}", ws.url().unwrap(), i64::MAX);
    let parent = open(&ws, &url);
    let queued = listening(&parent, FleetChannel::Queued).await;
    let (quiet, queued) = tokio::task::spawn_blocking(move || {
        let mut queued = queued;
        let quiet = queued.wait(Duration::from_millis(200)).unwrap();
        (quiet, queued)
    })
    .await
    .unwrap();
    assert_eq!((quiet.runs.len(), quiet.reconnected), (0, false));
    // And a wait without end (past the clock's too) that hears it.
    hears_an_enqueue(&parent, queued, Duration::MAX).await;
    parent.close().await.unwrap();
}
