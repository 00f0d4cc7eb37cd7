//! Certificate files: the PEM bundles a user names for a TLS peer — a provider's
//! `ca_cert`, the ledger's `sslrootcert` and `sslcert` — read one way for every
//! caller, which wraps the error in its own type naming the setting.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::path::Path;

/// Every certificate of the PEM file at `path`, in order. The error says what is
/// wrong with the file (not readable, not PEM, no certificate in it); the caller
/// names the file and the setting.
pub(crate) fn read_pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file: {e}"))?;
    if certs.is_empty() {
        return Err("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certs)
}
