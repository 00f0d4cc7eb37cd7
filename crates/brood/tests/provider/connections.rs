//! Connection reuse (issue 17): every run of a tree that talks to one endpoint
//! shares one HTTP client. Over HTTP/1.1 the tree reuses its connections: their
//! number follows the requests in flight (`max_concurrent` for its children), not
//! the requests sent — hyper's pool takes a connection back a moment after its
//! response ended, and a request starting in that moment opens another, so the
//! bound checked is twice the cap;
//! over TLS with HTTP/2 offered through ALPN, the whole tree multiplexes over one
//! connection. The TLS endpoint is brood-mock's, with a CA made for the test and
//! trusted only through `[providers.local] ca_cert` — verification is never off.

use crate::common::{mock_session, report, workspace};
use brood::subagent::Limits;
use brood_mock::{Alpn, MockReply, MockServer};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A parent that calls `task` with `n` prompts, then answers `done`; each child
/// answers in the contract after `delay`.
fn tree(n: usize, delay: Duration) -> impl Fn(&brood_mock::MockRequest) -> MockReply {
    let prompts: Vec<String> = (0..n).map(|i| format!("child {i}")).collect();
    let args = json!({ "prompts": prompts });
    move |req| {
        let first = req.first_user_text().unwrap_or("").to_string();
        if first.starts_with("parent:") {
            return match req.assistant_turns() {
                0 => MockReply::tool_call("task", args.clone()),
                _ => MockReply::text("done"),
            };
        }
        MockReply::text(report(&first)).after(delay)
    }
}

fn lim(cap: usize, total: usize) -> Limits {
    Limits {
        max_total: total,
        ..crate::common::limits(cap, cap)
    }
}

/// Runs the parent on `session` and checks the tree completed.
async fn run_tree(session: &brood::runtime::Session, n: usize) {
    let out = crate::common::within(
        "the tree",
        session.run_with("parent: fan out", None, CancellationToken::new()),
    )
    .await
    .unwrap();
    assert_eq!(out.final_text, "done", "{out:?}");
    let completed = session
        .supervisor()
        .snapshot()
        .iter()
        .filter(|r| r.status.as_str() == "completed")
        .count();
    assert_eq!(completed, n);
}

/// The test CA's certificate, written where the config can name it.
fn ca_file(server: &MockServer, dir: &std::path::Path) -> String {
    let path = dir.join("mock-ca.pem");
    std::fs::write(&path, server.ca_cert_pem().expect("a TLS server")).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http11_connections_follow_the_cap_not_the_requests() {
    let n = 300;
    let server = MockServer::start(tree(n, Duration::from_millis(2)));
    let ws = workspace("");
    let session = mock_session(ws.path(), &server.base_url(), "", Some(lim(8, n))).await;
    run_tree(&session, n).await;
    session.close().await;
    assert_eq!(server.request_count(), n + 2);
    assert_eq!(server.max_in_flight(), 8);
    // A connection per request would be 302; kept alive and reused, about one per
    // child running at once.
    let conns = server.connections();
    assert!(
        (1..=16).contains(&conns),
        "{conns} connections for {} requests",
        n + 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_on_another_provider_share_one_pool() {
    // The parent talks to one endpoint; its children to another (`vllm`): each
    // child used to get its own HTTP client, so its own connection.
    let n = 40;
    let parent = MockServer::start(tree(n, Duration::ZERO));
    let children = MockServer::start(|req| {
        MockReply::text(report(req.first_user_text().unwrap_or(""))).after(Duration::from_millis(2))
    });
    let ws = workspace("");
    let extra = format!(
        "[providers.vllm]\nbase_url = \"{}\"\n[subagents]\nsubagent_provider = \"vllm\"\nsubagent_model = \"mock-model\"\n",
        children.base_url()
    );
    let session = mock_session(ws.path(), &parent.base_url(), &extra, Some(lim(4, n))).await;
    run_tree(&session, n).await;
    session.close().await;
    assert_eq!(children.request_count(), n);
    let conns = children.connections();

    assert!(
        (1..=8).contains(&conns),
        "{conns} connections for {n} children"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_the_whole_tree_shares_one_connection() {
    let n = 998; // + the parent's two steps: 1,000 requests
    let server = MockServer::start_tls(Alpn::H2, tree(n, Duration::from_millis(20)));
    let ws = workspace("");
    let extra = format!(
        "[providers.local]\nca_cert = \"{}\"\n",
        ca_file(&server, ws.path())
    );
    let session = mock_session(ws.path(), &server.base_url(), &extra, Some(lim(200, n))).await;
    run_tree(&session, n).await;
    session.close().await;
    assert_eq!(server.request_count(), 1000);
    // Many requests were in flight at once, all on one connection: HTTP/2 streams.
    assert!(server.max_in_flight() > 1, "{}", server.max_in_flight());
    assert_eq!(server.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_without_h2_a_tree_keeps_http11_connections_alive() {
    let n = 60;
    let server = MockServer::start_tls(Alpn::Http11, tree(n, Duration::from_millis(5)));
    let ws = workspace("");
    let extra = format!(
        "[providers.local]\nca_cert = \"{}\"\n",
        ca_file(&server, ws.path())
    );
    let session = mock_session(ws.path(), &server.base_url(), &extra, Some(lim(6, n))).await;
    run_tree(&session, n).await;
    session.close().await;
    assert_eq!(server.max_in_flight(), 6);
    let conns = server.connections();
    assert!((2..=12).contains(&conns), "{conns} connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_endpoint_is_refused_unless_its_ca_is_configured() {
    let server = MockServer::start_tls(Alpn::H2, tree(1, Duration::ZERO));
    let ws = workspace("");
    let session = mock_session(ws.path(), &server.base_url(), "", Some(lim(2, 2))).await;
    let out = session
        .run_with("parent: fan out", None, CancellationToken::new())
        .await;
    session.close().await;
    let text = match out {
        Ok(r) => format!("{:?} {:?}", r.final_text, r.error),
        Err(e) => e.to_string(),
    };
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_ca_cert_that_cannot_be_used_is_named_with_its_provider() {
    use brood::model::openai::{OpenAiProvider, ProviderConfig};
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.pem");
    let not_pem = dir.path().join("empty.pem");
    std::fs::write(&not_pem, "no certificate here\n").unwrap();
    for (path, says) in [(&missing, "cannot read"), (&not_pem, "no PEM certificate")] {
        let mut cfg = ProviderConfig::new("vllm", "https://127.0.0.1:1/v1");
        cfg.ca_cert = Some(path.clone());
        let e = OpenAiProvider::new(cfg).unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("vllm") && e.contains(says),
            "{e}"
        );
    }
}

/// An HTTP/1.1 server on loopback that answers every request with a complete
/// completion whose head carries `extra` bytes of headers (a CDN's cookies and
/// tracing headers, as real providers send), then closes the connection.
async fn large_head_server(extra: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let body = json!({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "big head"}}],
    })
    .to_string();
    let mut head = String::from("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n");
    let mut i = 0;
    while head.len() < extra {
        head.push_str(&format!(
            "set-cookie: __cdn_{i}={}; Path=/; Secure\r\n",
            "x".repeat(180)
        ));
        i += 1;
    }
    let answer = format!(
        "{head}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                // Read the request's head and its Content-Length bytes of body.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map(|v| v.trim().parse().unwrap())
                            .unwrap_or(0);
                        if buf.len() >= p + 4 + len {
                            break;
                        }
                    }
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let _ = sock.write_all(answer.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    url
}

/// An HTTP/1.1 answer whose head is larger than the connection's first read (here
/// 6 KiB of headers; real providers behind a CDN send 1.5–3 KiB, an error page of a
/// gateway more) is read whole: the read buffer grows for the head as it does for a
/// body. A read buffer of a fixed 2 KiB failed this step with "message head is too
/// large" before the answer's first byte reached brood.
#[tokio::test]
async fn an_answer_with_a_large_head_is_read_over_http1() {
    use brood::model::openai::{OpenAiProvider, ProviderConfig};
    use brood::model::{Message, ModelRequest, Sampling};
    for extra in [3 * 1024, 6 * 1024] {
        let url = large_head_server(extra).await;
        let mut cfg = ProviderConfig::new("cdn", url);
        cfg.stream = false;
        cfg.max_attempts = 1;
        let provider = OpenAiProvider::new(cfg).unwrap();
        let req = ModelRequest {
            model: "m".into(),
            system: "s".into(),
            messages: vec![Message::user("hello")],
            tools: Default::default(),
            tool_choice: None,
            sampling: Sampling::default(),
        };
        let (answer, _) = crate::step(&provider, &req).await;
        assert_eq!(
            answer.map(|a| a.message.content),
            Ok("big head".to_string()),
            "a {extra}-byte head"
        );
    }
}
