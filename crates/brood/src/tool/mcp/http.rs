//! The streamable HTTP transport of a `url` server: rmcp's client worker over
//! its reqwest 0.13 client, with TLS through rustls on *ring* handed to reqwest
//! ready-made (no process-wide crypto provider is installed, no aws-lc is
//! built: docs/ARCHITECTURE.md "Decisions", the MCP client).
//!
//! What the user's token and headers may reach: only the configured origin.
//! Redirects are followed only to the same origin and only when they keep the
//! method and body (307, 308); proxies from the environment are not used; the
//! token is marked sensitive and never part of an error brood writes.

use super::spec::McpServerSpec;
use reqwest_mcp::header::{HeaderName, HeaderValue};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Redirects followed for one request (same origin, 307/308 only).
const MAX_REDIRECTS: usize = 5;

/// What one HTTP server is reached with, its variables resolved.
pub(super) struct HttpTarget {
    /// The URL.
    pub url: String,
    /// The bearer token (`Authorization: Bearer …`), if any.
    pub token: Option<String>,
    /// Headers to send (name → value), already resolved.
    pub headers: BTreeMap<String, String>,
}

/// The transport for `target`, bounded by the server's start-up timeout for
/// connecting.
pub(super) fn transport(
    spec: &McpServerSpec,
    target: HttpTarget,
) -> Result<StreamableHttpClientTransport<reqwest_mcp::Client>, String> {
    let mut custom = HashMap::new();
    for (name, value) in &target.headers {
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header {name:?} is not a valid HTTP header name"))?;
        // The value is not quoted in the error: it may be a secret.
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            format!("the value of header {name:?} holds characters a header cannot carry")
        })?;
        v.set_sensitive(true);
        custom.insert(n, v);
    }
    let client = client(spec)?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(target.url.as_str())
        .custom_headers(custom)
        .reinit_on_expired_session(true);
    if let Some(token) = target.token {
        config = config.auth_header(token);
    }
    Ok(StreamableHttpClientTransport::with_client(client, config))
}

/// A reqwest client for one server: rustls on ring with the platform's roots,
/// no proxy, same-origin redirects only, a connect timeout of the server's
/// start-up timeout.
fn client(spec: &McpServerSpec) -> Result<reqwest_mcp::Client, String> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up failed: {e}"))?
        .with_platform_verifier()
        .map_err(|e| format!("cannot read the system's TLS roots: {e}"))?
        .with_no_client_auth();
    reqwest_mcp::Client::builder()
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .connect_timeout(spec.startup_timeout)
        // rmcp's own client does the same: a pooled connection whose last
        // response was not read to its end stalls the next request.
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Follow a redirect only to the same scheme, host and port, and only one that
/// keeps the method and body (a POST turned into a GET would lose the message).
fn same_origin_redirects() -> reqwest_mcp::redirect::Policy {
    reqwest_mcp::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

type HttpError = rmcp::transport::streamable_http_client::StreamableHttpError<reqwest_mcp::Error>;

/// Why the handshake with a `url` server failed, in words (never the URL's
/// query, never a header).
pub(super) fn handshake_failure(e: &rmcp::service::ClientInitializeError) -> String {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::TransportError { error, .. } => transport_failure(error.error.as_ref()),
        E::ConnectionClosed(_) => "the server closed the connection during the handshake".into(),
        other => format!("the MCP handshake failed: {other}"),
    }
}

/// Why a call over HTTP failed, in words, when the transport is at fault.
pub(super) fn call_failure(e: &rmcp::ServiceError) -> Option<String> {
    match e {
        rmcp::ServiceError::TransportSend(error) => Some(transport_failure(error.error.as_ref())),
        _ => None,
    }
}

fn transport_failure(e: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    let Some(h) = e.downcast_ref::<HttpError>() else {
        return e.to_string();
    };
    match h {
        HttpError::AuthRequired(_) => "the server answered 401 Unauthorized: it wants a token \
             (set bearer_token_env to the variable holding it, or check the variable's value)"
            .into(),
        HttpError::InsufficientScope(_) => {
            "the server answered 403 Forbidden: the token lacks a scope it needs".into()
        }
        HttpError::Client(r) if r.is_timeout() => {
            format!("no answer in time ({})", root_cause(r))
        }
        HttpError::Client(r) if r.is_connect() => {
            format!("cannot connect: {}", root_cause(r))
        }
        HttpError::Client(r) => root_cause(r),
        other => other.to_string(),
    }
}

/// The innermost error under `e` (reqwest's own text names the URL).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}
