//! `brood mcp --http ADDR`: the same server over MCP's streamable HTTP transport
//! (rmcp's `StreamableHttpService`, served by axum at `/mcp`). Every MCP session
//! that connects talks to the one brood session and its one host run, exactly as
//! over stdio. Only loopback addresses are accepted: the endpoint has no
//! authentication, and anyone who can reach it can run agents in the workspace
//! (rmcp also refuses `Host` headers other than localhost, against DNS rebinding).

use super::server::BroodServer;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// Parse and bind `--http ADDR` (`HOST:PORT`, or a bare `PORT` on 127.0.0.1;
/// port 0 picks a free one). A non-loopback address is refused with the reason.
pub async fn bind(addr: &str) -> Result<TcpListener, String> {
    let parsed: SocketAddr = match addr.parse::<u16>() {
        Ok(port) => SocketAddr::from(([127, 0, 0, 1], port)),
        Err(_) => addr.parse().map_err(|_| {
            format!(
                "--http '{addr}' is not an address: give HOST:PORT with a loopback IP \
                 (127.0.0.1:8765, [::1]:8765) or a port"
            )
        })?,
    };
    if !parsed.ip().is_loopback() {
        return Err(format!(
            "--http {parsed}: brood mcp serves loopback addresses only (the endpoint has no \
             authentication and runs agents in your workspace); use 127.0.0.1:{port} and put \
             an authenticating proxy in front for remote hosts",
            port = parsed.port()
        ));
    }
    TcpListener::bind(parsed)
        .await
        .map_err(|e| format!("--http {parsed}: cannot listen: {e}"))
}

/// Serve until `stop` is cancelled (every MCP session is then closed).
pub async fn serve(
    listener: TcpListener,
    handler: BroodServer,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let config = StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new().nest_service(PATH, service);
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}
