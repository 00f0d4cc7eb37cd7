//! The TLS mode ([`crate::MockServer::start_tls`]): a test certificate authority and
//! a server certificate for `127.0.0.1` and `localhost`, both made at start (rcgen,
//! fresh keys every time, nothing on disk unless a test writes the CA out), served
//! with rustls. What the server offers through ALPN is the test's choice
//! ([`Alpn`]): `h2` and `http/1.1` (a client that speaks HTTP/2 multiplexes every
//! request over one connection), or `http/1.1` alone (it keeps a connection per
//! request in flight). A client trusts the server only by adding [`MockTls::ca_pem`]
//! to its roots — never by turning verification off.

use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

/// What the TLS server offers through ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// `h2`, then `http/1.1`: an HTTP/2 client multiplexes over one connection.
    H2,
    /// `http/1.1` only.
    Http11,
}

/// The server's certificate authority and acceptor.
pub(crate) struct MockTls {
    /// The CA certificate (PEM) a client adds to its roots.
    pub ca_pem: String,
    /// The same in DER.
    pub ca_der: Vec<u8>,
    pub acceptor: TlsAcceptor,
}

impl MockTls {
    /// A new CA, a server certificate it signed for 127.0.0.1/localhost, and an
    /// acceptor offering `alpn`.
    pub fn new(alpn: Alpn) -> std::io::Result<MockTls> {
        let err = |what: &str, e: &dyn std::fmt::Display| {
            std::io::Error::other(format!("brood-mock TLS: {what}: {e}"))
        };
        let ca_key = rcgen::KeyPair::generate().map_err(|e| err("CA key", &e))?;
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())
            .map_err(|e| err("CA params", &e))?;
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "brood-mock test CA");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(|e| err("CA cert", &e))?;
        let key = rcgen::KeyPair::generate().map_err(|e| err("server key", &e))?;
        let mut leaf =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .map_err(|e| err("server params", &e))?;
        leaf.distinguished_name
            .push(rcgen::DnType::CommonName, "brood-mock");
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_cert = leaf
            .signed_by(&key, &ca_cert, &ca_key)
            .map_err(|e| err("server cert", &e))?;
        let chain = vec![leaf_cert.der().clone()];
        let private = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| err("protocol versions", &e))?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| err("server config", &e))?;
        config.alpn_protocols = match alpn {
            Alpn::H2 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Alpn::Http11 => vec![b"http/1.1".to_vec()],
        };
        Ok(MockTls {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}
