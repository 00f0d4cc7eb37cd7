//! Where a PostgreSQL ledger is and how to reach it: its URL parsed once — the TLS
//! settings (`sslmode`, `sslrootcert`) taken out and checked, the root certificates
//! read — so that every connection of a ledger (the writer's and its reconnections,
//! the listeners', the readers') uses the same TLS: a reconnection never downgrades.
//! The connection-time parameters get libpq's meanings too: `connect_timeout` bounds
//! the whole connect (default 10 s), and TCP keepalives (`keepalives`,
//! `keepalives_idle`, `keepalives_interval`, `keepalives_count`) and
//! `tcp_user_timeout` notice a server that vanished without closing the connection,
//! and `query_timeout` (brood's, seconds, default 60 s) bounds every statement, so a
//! server that answered the connect and then went silent is noticed too.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use tokio_postgres::config::Host;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::super::error::LedgerError;
use super::super::pg_url::redact;
use super::client::{Conn, ConnectFailure};
use super::reconnect::is_lost;
use super::tls::{client_config, tls_failure, BadTls, ClientCert, Roots, SslMode};
use super::{describe, off_runtime};

/// How long connecting (to each host the URL names) may take without
/// `connect_timeout` in the URL.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keepalives without the URL's: a probe after 10 s without traffic, every 5 s,
/// the connection given up after 3 unanswered — a server gone without a word is
/// noticed within about 25 s, not the system's two hours and more.
const KEEPALIVES_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVES_COUNT: u32 = 3;
/// How long sent data may stay unacknowledged before the connection is given up
/// (`TCP_USER_TIMEOUT`), without the URL's `tcp_user_timeout`: a write to a server
/// that vanished fails in 30 s rather than after the kernel's ~15 minutes of
/// retransmissions.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a statement may wait for its answer without the URL's `query_timeout`:
/// far above any statement of brood's (a group commit, a claim, a listing of a large
/// ledger take milliseconds to seconds), so only a server that stopped answering
/// reaches it.
pub(crate) const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// A PostgreSQL ledger's address and connection settings.
pub(crate) struct PgTarget {
    /// The URL as given (shown only through [`redact`]).
    url: String,
    config: tokio_postgres::Config,
    /// The whole connect's bound (`connect_timeout`; `None`: wait indefinitely, as
    /// libpq with `connect_timeout=0`), per host the URL names.
    connect_timeout: Option<Duration>,
    /// Each statement's bound (`query_timeout`; `None`: unbounded).
    query_timeout: Option<Duration>,
    mode: SslMode,
    /// Why `mode` is what it is, when the URL did not say.
    implied: Option<&'static str>,
    roots: Roots,
    roots_given: bool,
    /// The client certificate file presented (`sslcert`), for messages.
    client_cert: Option<PathBuf>,
    /// `None` when `mode` is `Disable`.
    tls: Option<MakeRustlsConnect>,
    /// The (first) host, for messages.
    host: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.url))
    }
}

impl PartialEq for PgTarget {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
    }
}

impl Eq for PgTarget {}

impl PgTarget {
    /// Parse `url` (`postgres://…` or `postgresql://…`) and set up its TLS:
    /// [`LedgerError::BadUrl`] for what cannot be parsed (a bad `sslmode`),
    /// [`LedgerError::TlsRootCert`] for a root certificate file that cannot be used.
    pub(crate) fn parse(url: &str) -> Result<PgTarget, LedgerError> {
        let bad = |why: String| LedgerError::BadUrl {
            url: redact(url),
            why,
        };
        let rest = url.split_once('#').map_or(url, |(u, _)| u);
        let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut kept = Vec::new();
        let mut mode = None;
        let mut rootcert = None;
        let (mut sslcert, mut sslkey) = (None, None);
        let mut connect_timeout = Some(DEFAULT_CONNECT_TIMEOUT);
        let mut keepalives_count = None;
        let mut tcp_user_timeout = Some(TCP_USER_TIMEOUT);
        let mut query_timeout = Some(DEFAULT_QUERY_TIMEOUT);
        let said = |key: &str| query.split('&').any(|p| p.split('=').next() == Some(key));
        let seconds = |key: &str, value: String| {
            value.trim().parse::<i64>().map_err(|_| {
                bad(format!(
                    "{key}={value} is not a whole number (libpq's meaning; docs/FLEET.md \"Unreachable servers\")"
                ))
            })
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = || {
                percent_decode_str(value)
                    .decode_utf8()
                    .map(|v| v.into_owned())
                    .map_err(|_| bad(format!("the value of {key} is not UTF-8")))
            };
            match key {
                "sslmode" => mode = Some(SslMode::parse(&decoded()?).map_err(bad)?),
                "sslrootcert" => rootcert = Some(decoded()?),
                "sslcert" => sslcert = Some(PathBuf::from(decoded()?)),
                "sslkey" => sslkey = Some(PathBuf::from(decoded()?)),
                // As libpq: seconds; zero or less waits indefinitely; 1 means 2.
                "connect_timeout" => {
                    connect_timeout = match seconds(key, decoded()?)? {
                        n if n <= 0 => None,
                        n => Some(Duration::from_secs(n.max(2) as u64)),
                    }
                }
                // Brood's (libpq has none): seconds, as connect_timeout; zero or
                // less: unbounded.
                "query_timeout" => {
                    query_timeout = match seconds(key, decoded()?)? {
                        n if n <= 0 => None,
                        n => Some(Duration::from_secs(n as u64)),
                    }
                }
                // libpq's name for what tokio-postgres calls keepalives_retries.
                "keepalives_count" => {
                    keepalives_count =
                        Some(u32::try_from(seconds(key, decoded()?)?.max(0)).unwrap_or(u32::MAX))
                }
                // As libpq: milliseconds (tokio-postgres reads seconds); 0: the system's.
                "tcp_user_timeout" => {
                    tcp_user_timeout = match seconds(key, decoded()?)? {
                        n if n <= 0 => None,
                        n => Some(Duration::from_millis(n as u64)),
                    }
                }
                _ => kept.push(pair),
            }
        }
        let plain = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config: tokio_postgres::Config = plain.parse().map_err(|e| bad(format!("{e}")))?;
        config.application_name("brood");
        // A peer that vanished without a word (a network partition) is noticed; the
        // URL's own keepalive settings (tokio-postgres reads them) win.
        if !said("keepalives_idle") {
            config.keepalives_idle(KEEPALIVES_IDLE);
        }
        if !said("keepalives_interval") {
            config.keepalives_interval(KEEPALIVES_INTERVAL);
        }
        match keepalives_count {
            Some(n) => config.keepalives_retries(n),
            None if !said("keepalives_retries") => config.keepalives_retries(KEEPALIVES_COUNT),
            None => &mut config,
        };
        if let Some(t) = tcp_user_timeout {
            config.tcp_user_timeout(t);
        }

        let hosts = config.get_hosts();
        let unix = !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_)));
        let loopback = !hosts.is_empty()
            && hosts.iter().all(|h| match h {
                Host::Tcp(name) => {
                    name.eq_ignore_ascii_case("localhost")
                        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
                }
                Host::Unix(_) => true,
            });
        let host = match hosts.first() {
            Some(Host::Tcp(name)) => name.clone(),
            Some(Host::Unix(path)) => path.display().to_string(),
            None => String::new(),
        };
        let (mode, implied) = match (unix, mode) {
            // As libpq: a Unix socket never uses TLS, whatever sslmode says.
            (true, _) => (SslMode::Disable, Some("a Unix socket")),
            (false, Some(m)) => (m, None),
            (false, None) if loopback => (SslMode::Prefer, Some("the default for a loopback host")),
            (false, None) => (SslMode::VerifyFull, Some("the default for a remote host")),
        };
        let roots_given = rootcert.is_some();
        let roots = match rootcert.as_deref() {
            None | Some("system") => Roots::Platform,
            Some(path) => Roots::File(PathBuf::from(path)),
        };
        // As libpq, both or neither (libpq's default files under ~/.postgresql/ are
        // not read: the URL says it).
        let client = match (sslcert, sslkey) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(ClientCert { cert, key }),
            (Some(_), None) | (None, Some(_)) => {
                return Err(bad("sslcert and sslkey go together: name the client \
                     certificate's file and its key's"
                    .into()))
            }
        };
        let client_cert = client.as_ref().map(|c| c.cert.clone());
        let tls = match mode {
            SslMode::Disable => None,
            _ => Some(MakeRustlsConnect::new(
                client_config(mode, &roots, roots_given, client.as_ref()).map_err(|b| match b {
                    BadTls::Roots(b) => LedgerError::TlsRootCert {
                        url: redact(url),
                        path: b.path,
                        detail: b.detail,
                    },
                    BadTls::ClientCert(b) => LedgerError::TlsClientCert {
                        url: redact(url),
                        param: b.param.to_string(),
                        path: b.path,
                        detail: b.detail,
                    },
                })?,
            )),
        };
        config.ssl_mode(match mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        Ok(PgTarget {
            url: url.to_string(),
            config,
            connect_timeout,
            query_timeout,
            mode,
            implied,
            roots,
            roots_given,
            client_cert,
            tls,
            host,
        })
    }

    /// The URL with its password hidden.
    pub(crate) fn shown(&self) -> String {
        redact(&self.url)
    }

    /// The (first) host the URL names, for messages.
    pub(super) fn host(&self) -> &str {
        &self.host
    }

    /// How long a `LISTEN` connection may hear nothing before it checks that its
    /// server still answers (a statement, bounded by `query_timeout`): the URL's
    /// `keepalives_idle` (default 10 s), the same "idle before a probe" as TCP's.
    pub(super) fn listen_check(&self) -> Duration {
        self.config.get_keepalives_idle()
    }

    /// A new client, with this target's TLS. A failure that TLS explains is
    /// [`LedgerError::Tls`] (what to do included), others name the URL.
    pub(super) fn connect(&self) -> Result<Conn, LedgerError> {
        self.try_connect().map_err(|(e, _)| e)
    }

    /// [`PgTarget::connect`], a failure with whether it means the server was out of
    /// reach (refused, dropped, starting up or shutting down, not answering within
    /// `connect_timeout`: worth trying again) rather than refusing this client (TLS,
    /// authentication, no such database).
    pub(super) fn try_connect(&self) -> Result<Conn, (LedgerError, bool)> {
        let hosts = self.config.get_hosts().len().max(1) as u32;
        // Saturating: the URL's `connect_timeout` may be up to `i64::MAX` seconds.
        let within = self.connect_timeout.map(|t| t.saturating_mul(hosts));
        let done = off_runtime(|| match &self.tls {
            None => Conn::connect(&self.config, NoTls, within, self.query_timeout),
            Some(tls) => Conn::connect(&self.config, tls.clone(), within, self.query_timeout),
        });
        done.map_err(|failure| match failure {
            ConnectFailure::TimedOut => (
                LedgerError::ConnectTimeout {
                    url: self.shown(),
                    host: self.host.clone(),
                    secs: within.unwrap_or_default().as_secs(),
                },
                true,
            ),
            ConnectFailure::Runtime(e) => (
                LedgerError::Sqlite {
                    context: format!("connecting to {}", self.shown()),
                    detail: format!("cannot start the connection's runtime: {e}"),
                },
                false,
            ),
            ConnectFailure::Pg(e) => self.failed(e),
        })
    }

    fn failed(&self, e: tokio_postgres::Error) -> (LedgerError, bool) {
        match tls_failure(&e, self.mode, &self.host) {
            Some(what) => (
                LedgerError::Tls {
                    url: self.shown(),
                    sslmode: self.mode.name().to_string(),
                    detail: what,
                },
                false,
            ),
            None => (
                LedgerError::Sqlite {
                    context: format!("connecting to {}", self.shown()),
                    detail: describe(&e),
                },
                is_lost(&e),
            ),
        }
    }

    /// How this target's connections use TLS, in words (`brood doctor`).
    pub(crate) fn tls_state(&self) -> String {
        let against = match &self.roots {
            Roots::Platform => "the platform's roots".to_string(),
            Roots::File(p) => p.display().to_string(),
        };
        let what = match self.mode {
            SslMode::Disable => "no TLS".to_string(),
            SslMode::Prefer | SslMode::Require => {
                let when = if self.mode == SslMode::Prefer {
                    "TLS if the server offers it"
                } else {
                    "TLS"
                };
                if self.roots_given {
                    format!("{when}, its authority checked against {against}")
                } else {
                    format!("{when}, its certificate not checked")
                }
            }
            SslMode::VerifyCa => format!("TLS, its authority checked against {against}"),
            SslMode::VerifyFull => {
                format!("TLS, its authority and host name checked against {against}")
            }
        };
        let what = match &self.client_cert {
            Some(cert) if self.mode != SslMode::Disable => {
                format!(
                    "{what}, presenting the client certificate {}",
                    cert.display()
                )
            }
            _ => what,
        };
        match self.implied {
            Some(why) => format!("{what} (sslmode={}: {why})", self.mode.name()),
            None => format!("{what} (sslmode={})", self.mode.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_time_parameters_have_libpqs_meanings_and_defaults() {
        let t = PgTarget::parse("postgres://me@db.example/brood").unwrap();
        assert_eq!(t.connect_timeout, Some(DEFAULT_CONNECT_TIMEOUT));
        assert!(t.config.get_keepalives());
        assert_eq!(t.config.get_keepalives_idle(), KEEPALIVES_IDLE);
        assert_eq!(
            t.config.get_keepalives_interval(),
            Some(KEEPALIVES_INTERVAL)
        );
        assert_eq!(t.config.get_keepalives_retries(), Some(KEEPALIVES_COUNT));
        assert_eq!(t.config.get_tcp_user_timeout(), Some(&TCP_USER_TIMEOUT));
        assert_eq!(t.query_timeout, Some(DEFAULT_QUERY_TIMEOUT));

        let t = PgTarget::parse(
            "postgres://me@db.example/brood?connect_timeout=1&keepalives_idle=42\
             &keepalives_interval=7&keepalives_count=9&tcp_user_timeout=1500&query_timeout=1",
        )
        .unwrap();
        assert_eq!(t.connect_timeout, Some(Duration::from_secs(2)), "1 means 2");
        assert_eq!(t.config.get_keepalives_idle(), Duration::from_secs(42));
        assert_eq!(
            t.config.get_keepalives_interval(),
            Some(Duration::from_secs(7))
        );
        assert_eq!(t.config.get_keepalives_retries(), Some(9));
        assert_eq!(
            t.config.get_tcp_user_timeout(),
            Some(&Duration::from_millis(1500)),
            "milliseconds, as libpq"
        );
        assert_eq!(t.query_timeout, Some(Duration::from_secs(1)), "seconds");
        assert_eq!(t.listen_check(), Duration::from_secs(42));

        let t = PgTarget::parse(
            "postgres://me@db.example/brood?connect_timeout=0&keepalives=0&tcp_user_timeout=0\
             &query_timeout=0",
        )
        .unwrap();
        assert_eq!(t.connect_timeout, None, "0 waits indefinitely, as libpq");
        assert!(!t.config.get_keepalives());
        assert_eq!(t.config.get_tcp_user_timeout(), None);
        assert_eq!(t.query_timeout, None, "0: unbounded");
        assert!(matches!(
            PgTarget::parse("postgres://me@db.example/brood?query_timeout=1m"),
            Err(LedgerError::BadUrl { .. })
        ));
    }

    #[test]
    fn tls_settings_are_taken_out_of_the_url_and_defaults_depend_on_the_host() {
        let t =
            PgTarget::parse("postgres://me:pw@db.example/brood?sslmode=disable&user=x").unwrap();
        assert_eq!(t.mode, SslMode::Disable);
        assert_eq!(t.config.get_user(), Some("x"));
        let t = PgTarget::parse("postgres://me@db.example/brood").unwrap();
        assert_eq!(t.mode, SslMode::VerifyFull);
        let t = PgTarget::parse("postgres://me@127.0.0.1:5/brood").unwrap();
        assert_eq!(t.mode, SslMode::Prefer);
        let t = PgTarget::parse("postgres:///brood?host=/tmp&sslmode=verify-full").unwrap();
        assert_eq!(t.mode, SslMode::Disable, "a Unix socket never uses TLS");
        let err =
            PgTarget::parse("postgres://me:hunter2@db/brood?sslmode=verify_full").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LedgerError::BadUrl { .. }), "{err:?}");
        assert!(
            text.contains("sslmode=verify_full") && text.contains("verify-full"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        let err = PgTarget::parse("postgres://me:hunter2@db/brood?sslrootcert=%2Fno%2Fsuch.pem")
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LedgerError::TlsRootCert { .. }), "{err:?}");
        assert!(
            text.contains("/no/such.pem") && !text.contains("hunter2"),
            "{text}"
        );
    }
}
