//! TLS to a PostgreSQL ledger (docs/LEDGER.md "TLS"), on the real test server. Its
//! build has no TLS, so a TLS terminator of the test's stands in front of it: it
//! reads the client's SSLRequest, answers `S` and accepts TLS with a certificate
//! from a certificate authority made here (or answers `N`, a server without TLS),
//! then pipes to the server's Unix socket. It counts the sessions it carried over
//! TLS and in clear, so a test sees which one a connection took.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brood::ledger::{FleetChannel, Ledger, LedgerError, LedgerOptions, Placement, RunStatus};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

use crate::common::pg::{brood_backends, socket_and_db, terminate};
use crate::common::{named, Place, Store};

/// A certificate authority made for one test.
struct Authority {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).unwrap();
        Authority { cert, key }
    }

    /// Its certificate as a PEM file in `dir` (what `sslrootcert` names).
    fn pem_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("root.pem");
        std::fs::write(&path, self.cert.pem()).unwrap();
        path
    }

    /// A client certificate this authority signed, and its key, as PEM files in
    /// `dir` (what `sslcert` and `sslkey` name); the key readable by its owner only.
    fn client_files(&self, dir: &Path) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "brood");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (cert_file, key_file) = (dir.join("client.pem"), dir.join("client.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        (cert_file, key_file)
    }

    /// [`Authority::server`] that asks every client for a certificate signed by
    /// `clients` and refuses a client without one.
    fn server_requiring_clients(
        &self,
        host: &str,
        clients: &Authority,
    ) -> Arc<rustls::ServerConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(clients.cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        self.server_with(host, verifier)
    }

    /// A server configuration with a certificate for `host` this authority signed.
    fn server(&self, host: &str) -> Arc<rustls::ServerConfig> {
        self.server_with(
            host,
            Arc::new(rustls::server::NoClientAuth)
                as Arc<dyn rustls::server::danger::ClientCertVerifier>,
        )
    }

    fn server_with(
        &self,
        host: &str,
        clients: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    ) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![host.to_string()]).unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let private = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(clients)
                .with_single_cert(vec![cert.der().clone()], private)
                .unwrap(),
        )
    }
}

/// The TLS terminator in front of the test server.
struct Front {
    port: u16,
    over_tls: Arc<AtomicUsize>,
    in_clear: Arc<AtomicUsize>,
}

/// The SSLRequest's code (PostgreSQL's protocol: 1234 in the high 16 bits, 5679 in
/// the low).
const SSL_REQUEST: [u8; 4] = [0x04, 0xd2, 0x16, 0x2f];

impl Front {
    /// Accept TLS with `tls`, or, when `None`, answer `N` (no TLS here) and go on in
    /// clear. A client that starts without an SSLRequest is carried in clear.
    fn start(socket: PathBuf, tls: Option<Arc<rustls::ServerConfig>>) -> Front {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (over_tls, in_clear) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (t, c) = (over_tls.clone(), in_clear.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    let (socket, tls, t, c) = (socket.clone(), tls.clone(), t.clone(), c.clone());
                    tokio::spawn(async move {
                        let _ = carry(client, &socket, tls, &t, &c).await;
                    });
                }
            });
        });
        Front {
            port,
            over_tls,
            in_clear,
        }
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.over_tls.load(Ordering::SeqCst),
            self.in_clear.load(Ordering::SeqCst),
        )
    }
}

async fn carry(
    mut client: tokio::net::TcpStream,
    socket: &Path,
    tls: Option<Arc<rustls::ServerConfig>>,
    over_tls: &AtomicUsize,
    in_clear: &AtomicUsize,
) -> std::io::Result<()> {
    let mut first = [0u8; 8];
    client.read_exact(&mut first).await?;
    let mut server = tokio::net::UnixStream::connect(socket).await?;
    if first[4..] != SSL_REQUEST {
        in_clear.fetch_add(1, Ordering::SeqCst);
        server.write_all(&first).await?;
        tokio::io::copy_bidirectional(&mut client, &mut server).await?;
        return Ok(());
    }
    match tls {
        None => {
            client.write_all(b"N").await?;
            // A client that refuses to go on in clear closes here.
            if client.peek(&mut [0u8; 1]).await? == 0 {
                return Ok(());
            }
            in_clear.fetch_add(1, Ordering::SeqCst);
            tokio::io::copy_bidirectional(&mut client, &mut server).await?;
        }
        Some(config) => {
            client.write_all(b"S").await?;
            let mut tls = tokio_rustls::TlsAcceptor::from(config)
                .accept(client)
                .await?;
            over_tls.fetch_add(1, Ordering::SeqCst);
            tokio::io::copy_bidirectional(&mut tls, &mut server).await?;
        }
    }
    Ok(())
}

/// The test's database through `front`, as host `localhost` (its address given,
/// so the name is the certificate's business only), with `params`. The password
/// is one the test server ignores (it trusts every connection): it must never be
/// shown.
fn through(front: &Front, db: &str, params: &str) -> String {
    format!(
        "postgresql://brood:hunter2@localhost:{}/{db}?hostaddr=127.0.0.1&{params}",
        front.port
    )
}

fn open(ws: &Store, url: &str) -> Result<Ledger, LedgerError> {
    Ledger::open(
        ws.path(),
        LedgerOptions {
            url: Some(url.to_string()),
            ..LedgerOptions::default()
        },
    )
}

/// Nothing was written: the database has no ledger.
fn nothing_written(ws: &Store) {
    assert!(
        matches!(
            Ledger::open_reader_at(ws.path(), ws.url()),
            Err(LedgerError::Missing { .. })
        ),
        "a refused connection wrote nothing"
    );
}

#[tokio::test]
async fn records_are_written_and_read_back_over_verified_tls_and_a_reconnection_keeps_it() {
    let Some(ws) = Store::postgres("tls_records") else {
        return;
    };
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let ca = Authority::new("brood test CA");
    let dir = tempfile::tempdir().unwrap();
    let front = Front::start(socket, Some(ca.server("localhost")));
    let url = through(
        &front,
        &db,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            ca.pem_file(dir.path()).display()
        ),
    );
    let ledger = open(&ws, &url).unwrap();
    let run = ledger.create_run(named("r")).await.unwrap();
    ledger.mark_running(&run).await.unwrap();
    // The server ends the writer's connection: the next write connects again,
    // over TLS again.
    let direct = ws.url().unwrap().to_string();
    let writer: Vec<String> = brood_backends(&direct).into_iter().collect();
    terminate(&direct, &writer);
    ledger.complete(&run, json!({"over": "tls"})).await.unwrap();
    assert_eq!(ledger.stats().reconnects, 1);
    let read = Ledger::open_reader_at(ws.path(), Some(&url)).unwrap();
    let record = read.run(&run).unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.result, Some(json!({"over": "tls"})));
    ledger.close().await.unwrap();
    let (tls, clear) = front.counts();
    assert_eq!(clear, 0, "no connection in clear");
    assert!(
        tls >= 3,
        "the writer, its reconnection and the reader: {tls}"
    );
}

#[tokio::test]
async fn a_listener_reconnects_over_tls() {
    let Some(ws) = Store::postgres("tls_listener") else {
        return;
    };
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let ca = Authority::new("brood test CA");
    let dir = tempfile::tempdir().unwrap();
    let front = Front::start(socket, Some(ca.server("localhost")));
    let url = through(
        &front,
        &db,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            ca.pem_file(dir.path()).display()
        ),
    );
    let parent = open(&ws, &url).unwrap();
    let direct = ws.url().unwrap().to_string();
    let before = brood_backends(&direct);
    let mut queued = parent.listen(FleetChannel::Queued).unwrap();
    let first = tokio::task::spawn_blocking(move || {
        let heard = queued.wait(Duration::from_millis(200)).unwrap();
        (heard, queued)
    })
    .await
    .unwrap();
    let (_, mut queued) = first;
    let mine: Vec<String> = brood_backends(&direct)
        .difference(&before)
        .cloned()
        .collect();
    assert_eq!(mine.len(), 1, "the listener's connection");
    let tls_before = front.counts().0;
    terminate(&direct, &mine);
    let (heard, mut queued) = tokio::task::spawn_blocking(move || {
        let heard = queued.wait(Duration::from_secs(10)).unwrap();
        (heard, queued)
    })
    .await
    .unwrap();
    assert!(heard.reconnected, "{heard:?}");
    assert_eq!(
        front.counts(),
        (tls_before + 1, 0),
        "listening again over TLS"
    );
    // And it hears an enqueue.
    let run = parent.create_run(named("q")).await.unwrap();
    let placement = Placement {
        repo: "/srv/repo.git".into(),
        rev: None,
        max_attempts: 3,
    };
    parent.enqueue(&run, placement).await.unwrap();
    let next = tokio::task::spawn_blocking(move || queued.wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.runs, vec![run]);
    parent.close().await.unwrap();
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_for_another_host_or_from_an_untrusted_authority() {
    let Some(ws) = Store::postgres("tls_refused") else {
        return;
    };
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let ca = Authority::new("brood test CA");
    let dir = tempfile::tempdir().unwrap();
    let root = ca.pem_file(dir.path());
    let verify = |mode: &str| format!("sslmode={mode}&sslrootcert={}", root.display());

    // Trusted, but for another host.
    let elsewhere = Front::start(socket.clone(), Some(ca.server("db.example")));
    let err = open(&ws, &through(&elsewhere, &db, &verify("verify-full"))).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Tls { .. }), "{err:?}");
    assert!(
        text.contains("not for host localhost") && text.contains("verify-ca"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    nothing_written(&ws);
    // verify-ca checks the authority only: the same server is accepted.
    let ledger = open(&ws, &through(&elsewhere, &db, &verify("verify-ca"))).unwrap();
    ledger.close().await.unwrap();

    // For this host, from an authority nobody trusts.
    let other = Authority::new("someone else's CA");
    let stranger = Front::start(socket, Some(other.server("localhost")));
    for mode in ["verify-full", "verify-ca", "require"] {
        let err = open(&ws, &through(&stranger, &db, &verify(mode))).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LedgerError::Tls { .. }), "{mode}: {err:?}");
        assert!(
            text.contains("sslrootcert") && text.contains(mode),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
    }
    // Without sslrootcert the platform's roots are asked, and they do not know it.
    let err = open(&ws, &through(&stranger, &db, "sslmode=verify-full")).unwrap_err();
    assert!(matches!(err, LedgerError::Tls { .. }), "{err:?}");
    assert_eq!(stranger.counts().1, 0, "never in clear");
}

#[tokio::test]
async fn require_never_falls_back_to_plaintext_while_prefer_and_disable_do_as_documented() {
    let Some(ws) = Store::postgres("tls_require") else {
        return;
    };
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let no_tls = Front::start(socket.clone(), None);
    for mode in ["require", "verify-ca", "verify-full"] {
        let err = open(&ws, &through(&no_tls, &db, &format!("sslmode={mode}"))).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LedgerError::Tls { .. }), "{mode}: {err:?}");
        assert!(
            text.contains("does not offer TLS") && text.contains("sslmode=disable"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
    }
    assert_eq!(
        no_tls.counts(),
        (0, 0),
        "no session carried on after the 'N'"
    );
    nothing_written(&ws);
    // prefer: in clear when the server has no TLS.
    let ledger = open(&ws, &through(&no_tls, &db, "sslmode=prefer")).unwrap();
    ledger.close().await.unwrap();
    assert_eq!(no_tls.counts().0, 0);
    assert!(no_tls.counts().1 >= 1);

    // A server with TLS, from an authority nobody here knows: prefer and require
    // encrypt without checking it (libpq's meaning), as does a loopback host's
    // default; disable never asks.
    let stranger = Authority::new("someone else's CA");
    let front = Front::start(socket, Some(stranger.server("localhost")));
    for params in ["sslmode=prefer", "sslmode=require", "connect_timeout=10"] {
        let ledger = open(&ws, &through(&front, &db, params)).unwrap();
        ledger.close().await.unwrap();
    }
    assert_eq!(front.counts(), (3, 0));
    let ledger = open(&ws, &through(&front, &db, "sslmode=disable")).unwrap();
    ledger.close().await.unwrap();
    assert_eq!(front.counts(), (3, 1));
}

#[test]
fn a_bad_sslmode_or_an_unreadable_root_certificate_is_refused_before_connecting() {
    let ws = Store::sqlite();
    let url = "postgresql://brood:hunter2@db.example/brood?sslmode=verify_full";
    let err = open(&ws, url).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LedgerError::BadUrl { .. }), "{err:?}");
    assert!(
        text.contains("sslmode=verify_full") && text.contains("verify-full"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    let missing = ws.path().join("no-such-ca.pem");
    let url = format!(
        "postgresql://brood:hunter2@db.example/brood?sslmode=verify-full&sslrootcert={}",
        missing.display()
    );
    let err = open(&ws, &url).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LedgerError::TlsRootCert { .. }), "{err:?}");
    assert!(
        text.contains("no-such-ca.pem") && text.contains("PEM"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    let junk = ws.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let url = format!(
        "postgresql://db.example/brood?sslrootcert={}",
        junk.display()
    );
    assert!(matches!(
        open(&ws, &url),
        Err(LedgerError::TlsRootCert { .. })
    ));
}

/// A server that asks for a client certificate (`sslcert`, `sslkey`, as libpq):
/// given, records are written and read back over TLS; without one, the server's
/// refusal says to name one and nothing is written; a key file others may read, or
/// `sslcert` without `sslkey`, is refused before connecting.
#[tokio::test]
async fn a_client_certificate_is_presented_when_the_url_names_one() {
    let Some(ws) = Store::postgres("tls_client_certificate") else {
        return;
    };
    let (socket, db) = socket_and_db(ws.url().unwrap());
    let ca = Authority::new("brood test CA");
    let clients = Authority::new("brood test client CA");
    let dir = tempfile::tempdir().unwrap();
    let root = ca.pem_file(dir.path());
    let (cert, key) = clients.client_files(dir.path());
    let front = Front::start(
        socket,
        Some(ca.server_requiring_clients("localhost", &clients)),
    );
    let verified = format!("sslmode=verify-full&sslrootcert={}", root.display());

    // Without a certificate: refused by the server, and the message says what to do.
    let bare = through(&front, &db, &verified);
    let err = open(&ws, &bare).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Tls { .. }), "{err:?}");
    assert!(
        text.contains("sslcert=PATH") && !text.contains("hunter2"),
        "{text}"
    );
    nothing_written(&ws);

    // With one: written and read back over TLS.
    let url = through(
        &front,
        &db,
        &format!(
            "{verified}&sslcert={}&sslkey={}",
            cert.display(),
            key.display()
        ),
    );
    let ledger = open(&ws, &url).unwrap();
    let run = ledger.create_run(named("r")).await.unwrap();
    ledger.mark_running(&run).await.unwrap();
    ledger
        .complete(&run, json!({"by": "certificate"}))
        .await
        .unwrap();
    let read = Ledger::open_reader_at(ws.path(), Some(&url)).unwrap();
    assert_eq!(
        read.run(&run).unwrap().result,
        Some(json!({"by": "certificate"}))
    );
    ledger.close().await.unwrap();
    let shown = Ledger::tls_at(Some(&url)).unwrap().unwrap();
    assert!(
        shown.contains(&format!(
            "presenting the client certificate {}",
            cert.display()
        )),
        "{shown}"
    );
    let (tls, clear) = front.counts();
    assert_eq!(clear, 0);
    assert!(tls >= 2, "the writer and the reader: {tls}");

    // A key file others may read is refused before connecting (libpq's rule).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let err = Ledger::open_reader_at(ws.path(), Some(&url)).err().unwrap();
    let text = err.to_string();
    assert!(
        matches!(&err, LedgerError::TlsClientCert { param, .. } if param == "sslkey"),
        "{err:?}"
    );
    assert!(
        text.contains("group or world access") && !text.contains("hunter2"),
        "{text}"
    );
    assert_eq!(front.counts().0, tls, "it did not connect");

    // One without the other is a bad URL.
    let half = through(
        &front,
        &db,
        &format!("{verified}&sslcert={}", cert.display()),
    );
    let err = Ledger::open_reader_at(ws.path(), Some(&half))
        .err()
        .unwrap();
    assert!(matches!(err, LedgerError::BadUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("sslkey"), "{err}");
}
