//! Where a PostgreSQL ledger is and how to reach it: its URL parsed once — the TLS
//! settings (`sslmode`, `sslrootcert`) taken out and checked, the root certificates
//! read — so that every connection of a ledger (the writer's and its reconnections,
//! the listeners', the readers') uses the same TLS: a reconnection never downgrades.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use postgres::config::Host;
use postgres::{Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::super::error::LedgerError;
use super::super::pg_url::redact;
use super::reconnect::is_lost;
use super::tls::{client_config, tls_failure, Roots, SslMode};
use super::{describe, off_runtime};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A PostgreSQL ledger's address and connection settings.
pub(crate) struct PgTarget {
    /// The URL as given (shown only through [`redact`]).
    url: String,
    config: postgres::Config,
    mode: SslMode,
    /// Why `mode` is what it is, when the URL did not say.
    implied: Option<&'static str>,
    roots: Roots,
    roots_given: bool,
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
                _ => kept.push(pair),
            }
        }
        let plain = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config: postgres::Config = plain.parse().map_err(|e| bad(format!("{e}")))?;
        config.application_name("brood");
        config.connect_timeout(CONNECT_TIMEOUT);
        // A peer that vanished without a word (a network partition) is noticed.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));

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
        let tls = match mode {
            SslMode::Disable => None,
            _ => Some(MakeRustlsConnect::new(
                client_config(mode, &roots, roots_given).map_err(|b| LedgerError::TlsRootCert {
                    url: redact(url),
                    path: b.path,
                    detail: b.detail,
                })?,
            )),
        };
        config.ssl_mode(match mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        Ok(PgTarget {
            url: url.to_string(),
            config,
            mode,
            implied,
            roots,
            roots_given,
            tls,
            host,
        })
    }

    /// The URL with its password hidden.
    pub(crate) fn shown(&self) -> String {
        redact(&self.url)
    }

    /// A new client, with this target's TLS. A failure that TLS explains is
    /// [`LedgerError::Tls`] (what to do included), others name the URL.
    pub(crate) fn connect(&self) -> Result<Client, LedgerError> {
        self.try_connect().map_err(|(e, _)| e)
    }

    /// [`PgTarget::connect`], a failure with whether it means the server was out of
    /// reach (refused, dropped, starting up or shutting down: worth trying again)
    /// rather than refusing this client (TLS, authentication, no such database).
    pub(crate) fn try_connect(&self) -> Result<Client, (LedgerError, bool)> {
        let done = off_runtime(|| match &self.tls {
            None => self.config.connect(NoTls),
            Some(tls) => self.config.connect(tls.clone()),
        });
        done.map_err(|e| match tls_failure(&e, self.mode, &self.host) {
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
        })
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
