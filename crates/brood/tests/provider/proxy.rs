//! The provider honours the environment's proxies, as curl does: `HTTPS_PROXY` for
//! an `https://` endpoint (a `CONNECT` tunnel, TLS to the endpoint inside it),
//! `HTTP_PROXY` for an `http://` one (the request sent to the proxy in absolute
//! form), the proxy's `user:password` as `Proxy-Authorization`, and `NO_PROXY`
//! exempting a host. The proxy is a tiny one in the test, on loopback, counting what
//! goes through it. The environment is the process's, read when the provider is
//! made, so each case runs one step in a child process (this test binary again,
//! running [`proxied_step`]) with the variables set for it alone.

use brood::model::openai::{OpenAiProvider, ProviderConfig};
use brood::model::{Message, ModelRequest, Sampling};
use brood_mock::{Alpn, MockReply, MockServer};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every proxy variable a child could inherit.
const PROXY_VARS: [&str; 8] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// What went through the proxy: each connection's first request line, and its
/// `Proxy-Authorization` if any.
#[derive(Default)]
struct Seen(Mutex<Vec<(String, Option<String>)>>);

impl Seen {
    fn take(&self) -> Vec<(String, Option<String>)> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// A minimal HTTP proxy on loopback: `CONNECT host:port` opens a tunnel; any other
/// request (absolute form, `http://host:port/…`) is passed on to that host as it
/// came. Each connection then relays bytes both ways until either end closes.
async fn start_proxy() -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(relay(conn, record.clone()));
        }
    });
    (addr, seen)
}

async fn relay(mut client: TcpStream, seen: Arc<Seen>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let line = text.lines().next().unwrap_or("").to_string();
    let auth = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("proxy-authorization: ")
                .or_else(|| l.strip_prefix("Proxy-Authorization: "))
        })
        .map(str::to_string);
    seen.0.lock().unwrap().push((line.clone(), auth));
    let target = line.split(' ').nth(1).unwrap_or("");
    let connect = line.starts_with("CONNECT ");
    let host = if connect {
        target.to_string()
    } else {
        let rest = target.strip_prefix("http://").unwrap_or(target);
        rest.split('/').next().unwrap_or("").to_string()
    };
    let Ok(mut upstream) = TcpStream::connect(&host).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if connect {
        let _ = client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await;
    } else if upstream.write_all(&head).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Run [`proxied_step`] in a child process against `url`, with `env` as its only
/// proxy variables; whether it succeeded, and its output.
async fn step_in_child(
    url: &str,
    ca: Option<&std::path::Path>,
    env: &[(&str, String)],
) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["proxy::proxied_step", "--exact", "--ignored", "--nocapture"])
        .env("BROOD_PROXY_TEST_URL", url);
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    if let Some(ca) = ca {
        cmd.env("BROOD_PROXY_TEST_CA", ca);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The child's half: one step against `$BROOD_PROXY_TEST_URL` (its CA in
/// `$BROOD_PROXY_TEST_CA`), with whatever proxy the environment sets — or
/// `$BROOD_PROXY_TEST_STEPS` steps at once.
#[tokio::test]
#[ignore = "run by the proxy tests in a child process, with the proxy's environment"]
async fn proxied_step() {
    let url = std::env::var("BROOD_PROXY_TEST_URL").expect("BROOD_PROXY_TEST_URL");
    let mut cfg = ProviderConfig::new("proxied", url);
    cfg.ca_cert = std::env::var_os("BROOD_PROXY_TEST_CA").map(Into::into);
    cfg.api_timeout_secs = 20;
    cfg.max_attempts = 1;
    let provider = OpenAiProvider::new(cfg).unwrap();
    let req = ModelRequest {
        model: "mock-model".into(),
        system: "s".into(),
        messages: vec![Message::user("through the proxy?")],
        tools: Default::default(),
        tool_choice: None,
        sampling: Sampling::default(),
    };
    let n: usize = std::env::var("BROOD_PROXY_TEST_STEPS").map_or(1, |v| v.parse().unwrap());
    let answers = futures::future::join_all((0..n).map(|_| crate::step(&provider, &req))).await;
    for (answer, _) in answers {
        assert_eq!(answer.unwrap().message.content, "through");
    }
}

/// Through the tunnel, an HTTP/2 endpoint carries requests that come together on
/// one connection: one `CONNECT` for all of them (HTTP/1.1 would need a tunnel
/// each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_endpoint_behind_the_proxy_takes_one_tunnel_for_requests_at_once() {
    let (server, _dir, ca) = tls_endpoint();
    let (proxy, seen) = start_proxy().await;
    let env = [
        ("HTTPS_PROXY", format!("http://{proxy}")),
        ("BROOD_PROXY_TEST_STEPS", "8".to_string()),
    ];
    let (ok, out) = step_in_child(&server.base_url(), Some(&ca), &env).await;
    assert!(ok, "{out}");
    assert_eq!(
        seen.take(),
        [(format!("CONNECT {} HTTP/1.1", server.addr()), None)]
    );
    assert_eq!(server.request_count(), 8);
    assert_eq!(server.connections(), 1);
    assert_eq!(server.h2_connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_reached_through_the_proxys_tunnel_unless_no_proxy_names_it() {
    let (server, _dir, ca) = tls_endpoint();
    let (proxy, seen) = start_proxy().await;
    let url = server.base_url();

    let with_auth = format!("http://brood:s3cret@{proxy}");
    let (ok, out) = step_in_child(&url, Some(&ca), &[("HTTPS_PROXY", with_auth.clone())]).await;
    assert!(ok, "{out}");
    assert_eq!(
        seen.take(),
        [(
            format!("CONNECT {} HTTP/1.1", server.addr()),
            // base64("brood:s3cret")
            Some("Basic YnJvb2Q6czNjcmV0".to_string())
        )]
    );
    assert_eq!(server.request_count(), 1);
    // The proxy's credentials went in the CONNECT only, never inside the tunnel to
    // the endpoint.
    let inside = server.captured();
    assert!(
        inside[0].header("proxy-authorization").is_none(),
        "{:?}",
        inside[0].header("proxy-authorization")
    );

    // ALL_PROXY serves too; NO_PROXY naming the host sends it straight there.
    let plain = format!("http://{proxy}");
    let (ok, out) = step_in_child(&url, Some(&ca), &[("ALL_PROXY", plain.clone())]).await;
    assert!(ok, "{out}");
    assert_eq!(seen.take().len(), 1);
    let exempt = [
        ("HTTPS_PROXY", plain),
        ("NO_PROXY", "127.0.0.1".to_string()),
    ];
    let (ok, out) = step_in_child(&url, Some(&ca), &exempt).await;
    assert!(ok, "{out}");
    assert_eq!(seen.take(), []);
    assert_eq!(server.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_endpoint_is_sent_to_the_proxy_in_absolute_form() {
    let server = MockServer::start(|_| MockReply::text("through"));
    let (proxy, seen) = start_proxy().await;
    let url = server.base_url();
    // HTTPS_PROXY does not apply to an http:// endpoint.
    let only_https = [("HTTPS_PROXY", format!("http://{proxy}"))];
    let (ok, out) = step_in_child(&url, None, &only_https).await;
    assert!(ok, "{out}");
    assert_eq!(seen.take(), []);

    let (ok, out) =
        step_in_child(&url, None, &[("HTTP_PROXY", format!("http://u:p@{proxy}"))]).await;
    assert!(ok, "{out}");
    assert_eq!(
        seen.take(),
        [(
            format!("POST {url}/chat/completions HTTP/1.1"),
            Some("Basic dTpw".to_string())
        )]
    );
    assert_eq!(server.request_count(), 2);
}

/// A proxy variable whose value is not a proxy brood can use — not a URL (here a
/// stray space), or a scheme it does not know — is an error naming the variable, not a silent direct connection
/// past the proxy the environment asked for; the value (credentials) is not shown.
/// `NO_PROXY` naming the host still exempts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_variable_that_cannot_be_used_is_an_error_not_a_direct_connection() {
    let (server, _dir, ca) = tls_endpoint();
    let (proxy, seen) = start_proxy().await;
    let url = server.base_url();
    for (var, value) in [
        ("HTTPS_PROXY", format!("http://brood:s3cret@{proxy} ")),
        ("ALL_PROXY", format!("ftp://brood:s3cret@{proxy}")),
    ] {
        let (ok, out) = step_in_child(&url, Some(&ca), &[(var, value)]).await;
        assert!(!ok, "{var}: went straight to the endpoint: {out}");
        assert!(out.contains(var) && out.contains("NO_PROXY"), "{out}");
        assert!(!out.contains("s3cret"), "{out}");
    }
    assert_eq!(seen.take(), []);
    assert_eq!(server.request_count(), 0);
    let exempt = [
        ("HTTPS_PROXY", format!("http://brood:s3cret@{proxy} ")),
        ("NO_PROXY", "127.0.0.1".to_string()),
    ];
    let (ok, out) = step_in_child(&url, Some(&ca), &exempt).await;
    assert!(ok, "{out}");
    assert_eq!(server.request_count(), 1);
}

/// A TLS endpoint (HTTP/2) answering "through", its CA written to a file in the
/// returned directory (kept alive by the caller) for `ca_cert`.
fn tls_endpoint() -> (MockServer, tempfile::TempDir, std::path::PathBuf) {
    let server = MockServer::start_tls(Alpn::H2, |_| MockReply::text("through"));
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, server.ca_cert_pem().unwrap()).unwrap();
    (server, dir, ca)
}
