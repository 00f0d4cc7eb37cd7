//! A PostgreSQL ledger that loses its connection (docs/LEDGER.md, "Lost
//! connections"): the writer connects again and commits the batch it held once —
//! not lost, not twice, even when the connection went with a COMMIT's answer; the
//! fleet's listener listens again and says so; a server out of reach past
//! `reconnect_for` fails the writes with an error naming the URL without its
//! password, and the next write goes through once it is back.

use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brood::ledger::{EventKind, FleetChannel, Ledger, LedgerError, LedgerOptions, RunId};
use serde_json::json;

use crate::common::pg::{
    brood_backends, hears_an_enqueue, listening, socket_and_db, sql, terminate,
};
use crate::common::proxy::{forward, Proxy};
use crate::common::{named, progress, Place, Store};

/// Wait until the database has a brood connection not in `old` (the writer came
/// back).
fn wait_for_new_backend(url: &str, old: &std::collections::BTreeSet<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while brood_backends(url).difference(old).next().is_none() {
        assert!(
            Instant::now() < deadline,
            "the ledger never connected again"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn backends_ended_mid_run_lose_no_record_and_write_none_twice() {
    let Some(ws) = Store::postgres("backends_ended_mid_run") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let ledger = Arc::new(ws.open_with(ws.options()));
    let runs: Vec<RunId> = {
        let mut v = Vec::new();
        for i in 0..4 {
            let run = ledger.create_run(named(&format!("r{i}"))).await.unwrap();
            ledger.mark_running(&run).await.unwrap();
            v.push(run);
        }
        v
    };
    // Writers: progress without waiting, a flush (an awaited op) every 25, until
    // the server has ended the ledger's connection four times.
    let stop = Arc::new(AtomicBool::new(false));
    let writing: Vec<_> = runs
        .iter()
        .map(|run| {
            let (ledger, run, stop) = (ledger.clone(), run.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    ledger.ready().await;
                    ledger
                        .append_event(&run, EventKind::Warning, json!({ "i": i }))
                        .unwrap();
                    if i % 25 == 24 {
                        ledger.flush().await.unwrap();
                    }
                    i += 1;
                }
                i
            })
        })
        .collect();
    // Meanwhile the server ends the ledger's connections, again and again, each
    // time once the writer is back.
    let killer = {
        let (url, stop) = (url.clone(), stop.clone());
        std::thread::spawn(move || {
            for _ in 0..4 {
                std::thread::sleep(Duration::from_millis(30));
                let now: Vec<String> = brood_backends(&url).into_iter().collect();
                terminate(&url, &now);
                wait_for_new_backend(&url, &now.into_iter().collect());
            }
            stop.store(true, Ordering::SeqCst);
        })
    };
    let mut written = Vec::new();
    for w in writing {
        written.push(w.await.unwrap());
    }
    tokio::task::spawn_blocking(move || killer.join().unwrap())
        .await
        .unwrap();
    for run in &runs {
        ledger.complete(run, json!("done")).await.unwrap();
    }
    let stats = ledger.stats();
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert_eq!(stats.ops_failed, 0, "{stats:?}");
    for (run, n) in runs.iter().zip(written) {
        assert!(n > 0);
        assert_eq!(
            progress(&ws, run),
            (0..n).collect::<Vec<_>>(),
            "every record once, in order"
        );
    }
    Arc::into_inner(ledger).unwrap().close().await.unwrap();
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_not_written_again() {
    let Some(ws) = Store::postgres("a_commit_whose_answer_was_lost") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let (socket, db) = socket_and_db(&url);
    let eater = Proxy::start(socket);
    let proxied = format!("postgresql://brood@127.0.0.1:{}/{db}", eater.port);
    a_commit_answer_is_lost(&ws, &eater, &proxied, false).await;
}

/// A batch's COMMIT reaches the server through `proxy` (at `url`) and its answer
/// never reaches the writer — the connection dropped with it, or (`silently`) left
/// open and silent until the statement times out: the writer connects again, reads
/// that the transaction committed, and writes nothing twice. The time the batch's
/// awaited transition took.
pub(crate) async fn a_commit_answer_is_lost(
    ws: &Store,
    proxy: &Proxy,
    url: &str,
    silently: bool,
) -> Duration {
    let ledger = Ledger::open(
        ws.path(),
        LedgerOptions {
            url: Some(url.to_string()),
            ..LedgerOptions::default()
        },
    )
    .unwrap();
    let run = ledger.create_run(named("r")).await.unwrap();
    for i in 0..3 {
        ledger
            .append_event(&run, EventKind::Warning, json!({ "i": i }))
            .unwrap();
    }
    proxy.eat_silently.store(silently, Ordering::SeqCst);
    proxy.armed.store(true, Ordering::SeqCst);
    // The batch: three events and this awaited transition. Its COMMIT reaches the
    // server; the answer does not reach the writer.
    let asked = Instant::now();
    ledger.mark_running(&run).await.unwrap();
    let took = asked.elapsed();
    assert!(
        proxy.ate.load(Ordering::SeqCst),
        "the proxy never ate a COMMIT"
    );
    assert_eq!(progress(ws, &run), [0, 1, 2], "written once, not again");
    let kinds: Vec<EventKind> = ws
        .reader()
        .events(&run)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| *k != EventKind::Warning)
        .collect();
    assert_eq!(kinds, [EventKind::Spawned, EventKind::Started]);
    let stats = ledger.stats();
    assert_eq!(stats.ops_failed, 0, "{stats:?}");
    if silently {
        assert!(stats.reconnects >= 1, "{stats:?}");
    } else {
        assert_eq!(stats.reconnects, 1, "{stats:?}");
    }
    // And the ledger goes on.
    ledger.complete(&run, json!("done")).await.unwrap();
    ledger.close().await.unwrap();
    took
}

#[tokio::test]
async fn a_listener_listens_again_after_its_connection_is_ended() {
    let Some(ws) = Store::postgres("a_listener_listens_again") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let parent = ws.open_with(ws.options());
    let before = brood_backends(&url);
    let mut queued = listening(&parent, FleetChannel::Queued).await;
    let mine: Vec<String> = brood_backends(&url).difference(&before).cloned().collect();
    assert_eq!(mine.len(), 1);
    terminate(&url, &mine);
    let heard = tokio::task::spawn_blocking(move || {
        let first = queued.wait(Duration::from_secs(10)).unwrap();
        (first, queued)
    })
    .await
    .unwrap();
    let (first, queued) = heard;
    assert!(first.reconnected, "{first:?}");
    // Listening again: an enqueue made now is heard.
    hears_an_enqueue(&parent, queued, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn a_server_out_of_reach_fails_the_writes_naming_the_url_without_its_password() {
    let Some(ws) = Store::postgres("a_server_out_of_reach") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    let db = url["postgresql:///".len()..]
        .split('?')
        .next()
        .unwrap()
        .to_string();
    // The test server trusts every connection; the password only has to be hidden.
    let with_password = format!("{url}&password=hunter2");
    let ledger = Ledger::open(
        ws.path(),
        LedgerOptions {
            url: Some(with_password),
            reconnect_for: Duration::from_millis(600),
            ..LedgerOptions::default()
        },
    )
    .unwrap();
    let run = ledger.create_run(named("r")).await.unwrap();
    let admin = url.replacen(&format!("///{db}?"), "///postgres?", 1);
    let writer: Vec<String> = brood_backends(&url).into_iter().collect();
    sql(
        &admin,
        &[&format!("ALTER DATABASE {db} ALLOW_CONNECTIONS false")],
    );
    terminate(&admin, &writer);
    let err = ledger.mark_running(&run).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Disconnected { .. }), "{err:?}");
    assert!(
        text.contains(&db) && text.contains("password=***"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    // Back: the next write connects again and goes through.
    sql(
        &admin,
        &[&format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true")],
    );
    ledger.mark_running(&run).await.unwrap();
    ledger.complete(&run, json!("done")).await.unwrap();
    assert_eq!(
        ws.reader().run(&run).unwrap().status,
        brood::ledger::RunStatus::Completed
    );
    // The one write lost to the outage is counted, as `close` reports.
    assert!(matches!(
        ledger.close().await,
        Err(LedgerError::Unwritten { failed: 1 })
    ));
}

/// A TCP front for the test server whose new connections can be made to fail: each
/// is accepted and then held, unanswered, for `hold` before it is dropped (a server
/// out of reach behind a slow network, or, with no hold, one restarting); connections
/// made before keep working.
struct Stall {
    port: u16,
    stalled: Arc<AtomicBool>,
    /// How many connections it dropped.
    dropped: Arc<std::sync::atomic::AtomicUsize>,
}

impl Stall {
    const HOLD: Duration = Duration::from_secs(5);

    fn start(socket: std::path::PathBuf) -> Stall {
        Stall::holding(socket, Stall::HOLD)
    }

    fn holding(socket: std::path::PathBuf, hold: Duration) -> Stall {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s, d) = (stalled.clone(), dropped.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if s.load(Ordering::SeqCst) {
                    let d = d.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(hold);
                        drop(client);
                        d.fetch_add(1, Ordering::SeqCst);
                    });
                    continue;
                }
                let server = UnixStream::connect(&socket).unwrap();
                forward(client, server);
            }
        });
        Stall {
            port,
            stalled,
            dropped,
        }
    }
}

/// `Ledger::listen` is called from async code (a parent's first fleet child, a
/// session's start): it must not connect there. While every new connection hangs,
/// `listen` returns at once, the parent's runtime (one thread) goes on recording its
/// children's runs while the listener tries on its blocking thread, the listener
/// reports the server out of reach, and connects once it is back.
#[tokio::test(flavor = "current_thread")]
async fn listening_never_stalls_the_callers_runtime_while_the_database_is_out_of_reach() {
    let Some(ws) = Store::postgres("listening_never_stalls") else {
        return;
    };
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let front = Stall::start(socket);
    let ledger = Ledger::open(
        ws.path(),
        LedgerOptions {
            url: Some(format!(
                "postgresql://brood@127.0.0.1:{}/{db}?sslmode=disable",
                front.port
            )),
            reconnect_for: Duration::from_millis(300),
            ..LedgerOptions::default()
        },
    )
    .unwrap();
    front.stalled.store(true, Ordering::SeqCst);

    let asked = Instant::now();
    let mut done = ledger.listen(FleetChannel::Done).unwrap();
    assert!(
        asked.elapsed() < Stall::HOLD / 4,
        "listen connected on the caller's thread: {:?}",
        asked.elapsed()
    );
    let trying = tokio::task::spawn_blocking(move || {
        let heard = done.wait(Duration::from_secs(10));
        (heard, done)
    });
    // Meanwhile the parent's children go on: their runs are recorded on the
    // writer's connection, made before the outage, by this same one-thread runtime.
    for i in 0..5 {
        let run = ledger
            .create_run(named(&format!("child{i}")))
            .await
            .unwrap();
        ledger.mark_running(&run).await.unwrap();
        ledger.complete(&run, json!(i)).await.unwrap();
    }
    assert!(
        !trying.is_finished(),
        "the children were recorded while the listener was still trying"
    );
    let (heard, mut done) = trying.await.unwrap();
    let err = heard.unwrap_err();
    assert!(matches!(err, LedgerError::Disconnected { .. }), "{err:?}");
    assert!(err.to_string().contains(&db), "{err}");
    // The server is reachable again: the next wait connects, and says so.
    front.stalled.store(false, Ordering::SeqCst);
    let heard = tokio::task::spawn_blocking(move || done.wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert!(heard.reconnected, "{heard:?}");
    ledger.close().await.unwrap();
}

/// A worker started while the database restarts waits for it: `Ledger::open`
/// tries a server that drops every new connection again, with the reconnections'
/// backoff, for up to `reconnect_for`, and opens once it answers; a failure that is
/// not the server out of reach (here TLS refused) is returned at once.
#[tokio::test]
async fn opening_while_the_database_restarts_waits_for_it() {
    let Some(ws) = Store::postgres("opening_while_the_database_restarts") else {
        return;
    };
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let front = Stall::holding(socket, Duration::ZERO);
    front.stalled.store(true, Ordering::SeqCst);
    let url = format!(
        "postgresql://brood@127.0.0.1:{}/{db}?sslmode=disable",
        front.port
    );
    let path = ws.path().to_path_buf();
    let (u, p) = (url.clone(), path.clone());
    let opening = tokio::task::spawn_blocking(move || {
        Ledger::open(
            &p,
            LedgerOptions {
                url: Some(u),
                reconnect_for: Duration::from_secs(30),
                ..LedgerOptions::default()
            },
        )
    });
    // The server is back once the open has been turned away twice.
    let deadline = Instant::now() + Duration::from_secs(20);
    while front.dropped.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the open never tried");
        assert!(!opening.is_finished(), "the open gave up at once");
        std::thread::sleep(Duration::from_millis(5));
    }
    front.stalled.store(false, Ordering::SeqCst);
    let ledger = opening.await.unwrap().unwrap();
    let run = ledger.create_run(named("after the restart")).await.unwrap();
    ledger.mark_running(&run).await.unwrap();
    ledger.complete(&run, json!("done")).await.unwrap();
    ledger.close().await.unwrap();
    assert_eq!(
        ws.reader().run(&run).unwrap().status,
        brood::ledger::RunStatus::Completed
    );

    // Not the server out of reach: refused at once, not after 30 s.
    let asked = Instant::now();
    let err = Ledger::open(
        &path,
        LedgerOptions {
            url: Some(url.replace("sslmode=disable", "sslmode=require")),
            reconnect_for: Duration::from_secs(30),
            ..LedgerOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, LedgerError::Tls { .. }), "{err:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
}

/// `Ledger::open`'s boot registration and recovery are tried again when the
/// connection is lost on the way (the database restarting), and nothing is done
/// twice: the answer to the recovery's COMMIT is lost — the server committed it — and
/// the open goes on on a new connection; the dead boot's run is interrupted once and
/// reported, and the new boot is registered once.
#[tokio::test]
async fn an_open_whose_recovery_commit_went_unanswered_recovers_and_registers_once() {
    let Some(ws) = Store::postgres("an_open_whose_recovery_commit_went_unanswered") else {
        return;
    };
    let url = ws.url().unwrap().to_string();
    // A run left running by a boot that died (its advisory lock is free).
    let first = ws.open_with(ws.options());
    let run = first.create_run(named("orphan")).await.unwrap();
    first.mark_running(&run).await.unwrap();
    sql(
        &url,
        &[
            "INSERT INTO boots (boot_id, session_id, pid, started_at) VALUES ('dead-boot', 's', 1, 0)",
            &format!("UPDATE runs SET session_boot_id = 'dead-boot' WHERE id = '{run}'"),
        ],
    );
    first.close().await.unwrap();

    let (socket, db) = socket_and_db(&url);
    let eater = Proxy::start(socket);
    // The schema check's COMMIT goes through; the recovery's answer is eaten.
    eater.pass.store(1, Ordering::SeqCst);
    eater.armed.store(true, Ordering::SeqCst);
    let proxied = format!("postgresql://brood@127.0.0.1:{}/{db}", eater.port);
    let path = ws.path().to_path_buf();
    let ledger = tokio::task::spawn_blocking(move || {
        Ledger::open(
            &path,
            LedgerOptions {
                url: Some(proxied),
                ..LedgerOptions::default()
            },
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        eater.ate.load(Ordering::SeqCst),
        "the proxy never ate the recovery's COMMIT answer"
    );
    let report = ledger.recovery();
    assert_eq!(report.interrupted, std::slice::from_ref(&run), "{report:?}");
    assert_eq!(report.dead_boots, ["dead-boot"], "{report:?}");
    let kinds: Vec<EventKind> = ws
        .reader()
        .events(&run)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            EventKind::Spawned,
            EventKind::Started,
            EventKind::Interrupted
        ],
        "recovered once"
    );
    let mine = sql(
        &url,
        &[&format!(
            "SELECT count(*) FROM boots WHERE boot_id = '{}'",
            ledger.boot_id()
        )],
    );
    assert_eq!(mine, [["1"]], "registered once");
    // And the ledger goes on.
    let next = ledger.create_run(named("after")).await.unwrap();
    ledger.mark_running(&next).await.unwrap();
    ledger.complete(&next, json!("done")).await.unwrap();
    ledger.close().await.unwrap();
}
