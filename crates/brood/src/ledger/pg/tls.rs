//! TLS to a PostgreSQL ledger (docs/LEDGER.md "TLS"): the URL's `sslmode` and
//! `sslrootcert` with libpq's meanings, rustls on ring underneath
//! (`tokio-postgres-rustls`), no openssl.
//!
//! | `sslmode`     | TLS                          | certificate checked                       |
//! |---------------|------------------------------|-------------------------------------------|
//! | `disable`     | never                        | —                                         |
//! | `prefer`      | if the server offers it      | no (against `sslrootcert` if given)       |
//! | `require`     | always, never plaintext      | no (against `sslrootcert` if given)       |
//! | `verify-ca`   | always                       | signed by a trusted authority             |
//! | `verify-full` | always                       | trusted authority **and** the host name   |
//!
//! Without `sslmode` a remote host gets `verify-full` (who asks for nothing gets the
//! safe choice, and a server without TLS is refused, never silently spoken to in
//! clear) and a loopback host libpq's `prefer`; a Unix socket never uses TLS (as
//! libpq). The trusted authorities are the PEM file `sslrootcert` names, or the
//! platform's (`rustls-platform-verifier`) when it is absent or `system`. A client
//! certificate is presented when the URL names one (`sslcert` and `sslkey`, PEM; the
//! key file readable by its owner only, as libpq requires).

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// How a connection uses TLS: libpq's `sslmode` values (`allow` is not offered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub(crate) fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err("sslmode=allow (plaintext first) is not supported: use \
                            sslmode=prefer, or require / verify-full to refuse plaintext"
                    .into())
            }
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, prefer, require, verify-ca, \
                     verify-full (libpq's meanings; docs/LEDGER.md \"TLS\")"
                ))
            }
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the trusted certificate authorities come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    /// The platform's (`sslrootcert` absent or `system`).
    Platform,
    /// The PEM file `sslrootcert` names.
    File(PathBuf),
}

/// Why a root certificate file cannot be used (the caller names the URL).
pub(crate) struct BadRoots {
    pub path: PathBuf,
    pub detail: String,
}

/// The client's certificate (its chain) and private key, from `sslcert` and `sslkey`.
pub(crate) struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why a client certificate cannot be used (the caller names the URL).
pub(crate) struct BadClientCert {
    /// `sslcert` or `sslkey`.
    pub param: &'static str,
    pub path: PathBuf,
    pub detail: String,
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

impl ClientCert {
    /// Read the certificate chain and the key. The key file must not be readable by
    /// group or others (libpq's rule: `0600` or less, or `0640` or less when owned
    /// by root), since it is what proves who this client is.
    fn load(&self) -> Result<Identity, BadClientCert> {
        let bad = |param, path: &PathBuf, detail: String| BadClientCert {
            param,
            path: path.clone(),
            detail,
        };
        let chain = crate::certs::read_pem_certificates(&self.cert)
            .map_err(|why| bad("sslcert", &self.cert, why))?;
        key_file_private(&self.key).map_err(|why| bad("sslkey", &self.key, why))?;
        let pem = std::fs::read(&self.key).map_err(|e| bad("sslkey", &self.key, e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
            bad(
                "sslkey",
                &self.key,
                format!("no PEM private key (PKCS#8, RSA or EC) in it: {e}"),
            )
        })?;
        Ok((chain, key))
    }
}

/// libpq's check of a private key file's permissions.
fn key_file_private(path: &PathBuf) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    let mode = meta.mode() & 0o777;
    let allowed = if meta.uid() == 0 { 0o640 } else { 0o600 };
    if mode & !allowed != 0 {
        return Err(format!(
            "it has group or world access (mode {mode:o}); make it readable by its owner only (chmod 600)"
        ));
    }
    Ok(())
}

/// What [`client_config`] could not use.
pub(crate) enum BadTls {
    Roots(BadRoots),
    ClientCert(BadClientCert),
}

/// The rustls client configuration for `mode` (not `Disable`) and `roots`.
/// `roots_given` is whether `sslrootcert` was in the URL: then `prefer` and
/// `require` check the authority too, as libpq does when it has a root file.
/// With `client`, the client certificate is presented when the server asks.
pub(crate) fn client_config(
    mode: SslMode,
    roots: &Roots,
    roots_given: bool,
    client: Option<&ClientCert>,
) -> Result<rustls::ClientConfig, BadTls> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require if !roots_given => None,
        SslMode::VerifyFull => Some(true),
        _ => Some(false),
    };
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        None => Arc::new(Unchecked(provider.clone())),
        Some(name_too) => {
            let full = trusted(roots, &provider).map_err(BadTls::Roots)?;
            if name_too {
                full
            } else {
                Arc::new(AuthorityOnly(full))
            }
        }
    };
    let tls_err = |e: rustls::Error| {
        BadTls::Roots(BadRoots {
            path: PathBuf::new(),
            detail: format!("TLS set-up failed: {e}"),
        })
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some(c) => {
            let (chain, key) = c.load().map_err(BadTls::ClientCert)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                BadTls::ClientCert(BadClientCert {
                    param: "sslkey",
                    path: c.key.clone(),
                    detail: format!(
                        "it does not go with the certificate in {}: {e}",
                        c.cert.display()
                    ),
                })
            })
        }
    }
}

/// A verifier of the chain and the host name against `roots`.
fn trusted(
    roots: &Roots,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, BadRoots> {
    match roots {
        Roots::Platform => rustls_platform_verifier::Verifier::new(provider.clone())
            .map(|v| Arc::new(v) as Arc<dyn ServerCertVerifier>)
            .map_err(|e| BadRoots {
                path: PathBuf::from("system"),
                detail: format!("cannot read the system's TLS roots: {e}"),
            }),
        Roots::File(path) => {
            let bad = |detail: String| BadRoots {
                path: path.clone(),
                detail,
            };
            let mut store = rustls::RootCertStore::empty();
            for cert in crate::certs::read_pem_certificates(path).map_err(bad)? {
                store
                    .add(cert)
                    .map_err(|e| bad(format!("a certificate in it cannot be used: {e}")))?;
            }
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(store),
                provider.clone(),
            )
            .build()
            .map(|v| v as Arc<dyn ServerCertVerifier>)
            .map_err(|e| bad(e.to_string()))
        }
    }
}

/// `verify-ca`: the chain must lead to a trusted authority; the name is not checked
/// (the chain is checked before the name, so a name error means the chain passed).
#[derive(Debug)]
struct AuthorityOnly(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for AuthorityOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without `sslrootcert` (libpq's meaning): encrypted, but
/// who answers is not checked — the handshake's signatures still are.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What to do about a failed connection when TLS is why, `None` when it is not.
pub(crate) fn tls_failure(e: &tokio_postgres::Error, mode: SslMode, host: &str) -> Option<String> {
    let mut cause: Option<&(dyn Error + 'static)> = e.source();
    while let Some(c) = cause {
        if c.to_string() == "server does not support TLS" {
            return Some(format!(
                "the server does not offer TLS and sslmode={} refuses plaintext: turn on \
                 ssl in the server's postgresql.conf, or, on a private network, set \
                 sslmode=disable",
                mode.name()
            ));
        }
        if let Some(r) = c.downcast_ref::<rustls::Error>() {
            return Some(match r {
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                ) => format!(
                    "the server's certificate is not for host {host} ({r}): connect by a name \
                     the certificate holds, or check the authority only with sslmode=verify-ca"
                ),
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
                    "the server's certificate is not signed by a trusted authority ({r}): give \
                     the authority that signed it with sslrootcert=PATH (a PEM file)"
                ),
                rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired) => {
                    format!(
                        "the server asks for a client certificate ({r}): name one with \
                         sslcert=PATH and its key with sslkey=PATH (PEM files)"
                    )
                }
                rustls::Error::AlertReceived(
                    rustls::AlertDescription::BadCertificate
                    | rustls::AlertDescription::UnknownCA
                    | rustls::AlertDescription::CertificateUnknown
                    | rustls::AlertDescription::AccessDenied,
                ) => format!(
                    "the server refused the client certificate ({r}): it must be signed by an \
                     authority the server trusts (its ssl_ca_file) and allowed for this user"
                ),
                _ => format!("the TLS handshake failed: {r}"),
            });
        }
        // tokio-rustls reports rustls' error inside an io::Error.
        if let Some(inner) = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            cause = Some(inner);
            continue;
        }
        cause = c.source();
    }
    None
}
