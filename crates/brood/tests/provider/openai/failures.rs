//! Provider failures: rate limits and Retry-After, server errors retried up to
//! max_attempts, cut and stalled streams, step timeouts, an idle connection closed
//! under a request, and the typed errors (key, model, context length, bad request,
//! unreachable endpoint, a redirect, error objects inside a stream).

use super::*;

#[tokio::test]
async fn too_many_requests_waits_for_retry_after_then_succeeds() {
    let server = MockServer::start_sequence(vec![
        MockReply::status(429, "rate limited").retry_after("1"),
        MockReply::text("after the wait"),
    ]);
    let started = Instant::now();
    let (r, events) = step(&provider(&server), &request("x")).await;
    let elapsed = started.elapsed();
    assert_eq!(r.unwrap().message.content, "after the wait");
    assert_eq!(server.request_count(), 2);
    assert!(elapsed >= Duration::from_secs(1), "waited only {elapsed:?}");
    let retrying: Vec<&StreamEvent> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Retrying { .. }))
        .collect();
    match retrying.as_slice() {
        [StreamEvent::Retrying {
            attempt: 1,
            delay_ms: 1000,
            error,
        }] => {
            assert!(
                error.contains("429") && error.contains("rate limited"),
                "{error}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_retry_after_past_the_step_budget_fails_at_once_naming_it() {
    // 3600 s, and a value no Duration can hold (it used to panic): both are longer
    // than the 10 s step, so the step ends at once with the 429 and the wait named.
    for value in [
        "3600",
        "99999999999999999999",
        "1e308",
        "inf",
        "Fri, 31 Dec 9999 23:59:59 GMT",
    ] {
        let server =
            MockServer::start(move |_| MockReply::status(429, "slow down").retry_after(value));
        let mut c = config(&server);
        c.api_timeout_secs = 10;
        let started = Instant::now();
        let (r, events) = step(&OpenAiProvider::new(c).unwrap(), &request("x")).await;
        assert!(started.elapsed() < Duration::from_secs(5), "{value}");
        let e = r.unwrap_err();
        match &e {
            ModelError::StepBudget {
                secs: 10,
                attempts: 1,
                retry_after_ms: Some(ms),
                last,
            } => {
                assert!(*ms >= 3_600_000, "{ms}");
                assert!(
                    matches!(**last, ModelError::Status { status: 429, .. }),
                    "{last:?}"
                );
            }
            other => panic!("{value}: {other:?}"),
        }
        let text = e.to_string();
        for part in [
            "after 1 attempt:",
            "429",
            "slow down",
            "Retry-After",
            "api_timeout_secs",
        ] {
            assert!(text.contains(part), "{part} missing in: {text}");
        }
        assert!(!text.contains("1 attempts"), "{text}");
        assert_eq!(server.request_count(), 1, "{value}");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Retrying { .. })),
            "{events:?}"
        );
    }
}

#[tokio::test]
async fn a_negative_or_nonsense_retry_after_is_plain_backoff() {
    // Not a wait at all: the step retries with its own backoff and succeeds.
    for value in ["-5", "NaN", "soon", ""] {
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = hits.clone();
        let server = MockServer::start(move |_| {
            if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                MockReply::status(429, "slow down").retry_after(value)
            } else {
                MockReply::text("ok")
            }
        });
        let (r, _) = step(&provider(&server), &request("x")).await;
        assert_eq!(r.unwrap().message.content, "ok", "{value}");
        assert_eq!(server.request_count(), 2, "{value}");
    }
}

#[tokio::test]
async fn a_step_that_runs_out_of_budget_while_retrying_names_the_last_provider_error() {
    // A 503, then a server that hangs: the budget ends during attempt 2, and the
    // error still names the 503 (not just "timed out").
    let server = MockServer::start_sequence(vec![
        MockReply::status(503, "overloaded, try later"),
        MockReply::Hang,
    ]);
    let mut c = config(&server);
    c.api_timeout_secs = 1;
    let (r, events) = step(&OpenAiProvider::new(c).unwrap(), &request("x")).await;
    let e = r.unwrap_err();
    match &e {
        ModelError::StepBudget {
            secs: 1,
            attempts: 2,
            retry_after_ms: None,
            last,
        } => assert!(
            matches!(**last, ModelError::Status { status: 503, .. }),
            "{last:?}"
        ),
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("503") && text.contains("overloaded") && text.contains("2 attempts"),
        "{text}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Retrying { .. }))
            .count(),
        1
    );
}

#[tokio::test]
async fn server_errors_are_retried_until_max_attempts() {
    let server = MockServer::start(|_| MockReply::status(500, "internal kaboom"));
    let mut c = config(&server);
    c.max_attempts = 3;
    let (r, events) = step(&OpenAiProvider::new(c).unwrap(), &request("x")).await;
    match r.unwrap_err() {
        ModelError::RetriesExhausted { attempts, last } => {
            assert_eq!(attempts, 3);
            assert!(
                ModelError::RetriesExhausted {
                    attempts: 1,
                    last: last.clone()
                }
                .to_string()
                .starts_with("gave up after 1 attempt: server answered 500"),
                "singular"
            );
            assert_eq!(
                *last,
                ModelError::Status {
                    status: 500,
                    message: "internal kaboom".into(),
                    retry_after_ms: None
                }
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.request_count(), 3);
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Retrying { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, vec![1, 2]);
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_retried() {
    let full = Answer::text("a complete answer that arrives in many pieces");
    let cut = full.stream_chunks("mock-model")[..3].to_vec();
    // The first answer is cut after 3 chunks (role + 2 pieces of text).
    let server =
        MockServer::start_sequence(vec![full.clone().cut_after(3), MockReply::Answer(full)]);
    let (r, events) = step(&provider(&server), &request("x")).await;
    assert_eq!(
        r.unwrap().message.content,
        "a complete answer that arrives in many pieces"
    );
    assert_eq!(server.request_count(), 2);
    let retried: Vec<&StreamEvent> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Retrying { .. }))
        .collect();
    assert!(
        matches!(retried.as_slice(), [StreamEvent::Retrying { error, .. }] if error.contains("stream cut")),
        "{retried:?}"
    );

    // Cut every time: the step gives up with the cut as the last error.
    let server = MockServer::start(move |_| MockReply::Cut {
        chunks: cut.clone(),
    });
    let (r, _) = step(&provider(&server), &request("x")).await;
    match r.unwrap_err() {
        ModelError::RetriesExhausted { attempts: 4, last } => {
            assert!(matches!(*last, ModelError::StreamCut { .. }), "{last:?}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.request_count(), 4);
}

#[tokio::test]
async fn a_stream_closed_without_finish_or_done_is_an_error_not_an_empty_answer() {
    let chunks = Answer::text("partial").stream_chunks("mock-model");
    let without_finish = chunks[..chunks.len() - 1].to_vec();
    let server = MockServer::start(move |_| MockReply::Sse {
        chunks: without_finish.clone(),
        done: false,
    });
    let mut c = config(&server);
    c.max_attempts = 2;
    let (r, _) = step(&OpenAiProvider::new(c).unwrap(), &request("x")).await;
    match r.unwrap_err() {
        ModelError::RetriesExhausted { attempts: 2, last } => match *last {
            ModelError::StreamCut { detail } => {
                assert!(detail.contains("without a finish"), "{detail}")
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    // A finish reason without [DONE] is a complete answer.
    let server = MockServer::start(move |_| MockReply::Sse {
        chunks: chunks.clone(),
        done: false,
    });
    assert_eq!(
        step(&provider(&server), &request("x"))
            .await
            .0
            .unwrap()
            .message
            .content,
        "partial"
    );
}

#[tokio::test]
async fn a_hanging_server_hits_the_step_timeout() {
    let server = MockServer::start(|_| MockReply::Hang);
    let mut c = config(&server);
    c.api_timeout_secs = 1;
    let started = Instant::now();
    let (r, _) = step(&OpenAiProvider::new(c).unwrap(), &request("x")).await;
    let elapsed = started.elapsed();
    assert_eq!(r.unwrap_err(), ModelError::Timeout { secs: 1 });
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn a_stalled_stream_reports_its_deltas_as_they_arrive_then_times_out() {
    let chunks = Answer::text("first")
        .fragment(0)
        .stream_chunks("mock-model");
    let server = MockServer::start(move |_| MockReply::Stall {
        chunks: chunks[..2].to_vec(),
    });
    let mut c = config(&server);
    c.api_timeout_secs = 1;
    let (r, events) = step(&OpenAiProvider::new(c).unwrap(), &request("x")).await;
    assert_eq!(r.unwrap_err(), ModelError::Timeout { secs: 1 });
    // The step never finished, so the delta can only have been reported on arrival.
    assert_eq!(
        events,
        vec![StreamEvent::TextDelta {
            text: "first".into()
        }]
    );
}

#[tokio::test]
async fn unauthorized_names_the_key_variable_and_is_not_retried() {
    let server =
        MockServer::start(|_| MockReply::status(401, "Authentication Fails (invalid key)"));
    let (r, _) = step(&provider(&server), &request("x")).await;
    let e = r.unwrap_err();
    match &e {
        ModelError::Auth {
            status: 401,
            env_var,
            message,
            url,
        } => {
            assert_eq!(env_var, "MOCK_API_KEY");
            assert_eq!(message, "Authentication Fails (invalid key)");
            assert!(url.ends_with("/v1/chat/completions"), "{url}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("$MOCK_API_KEY"), "{e}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_missing_key_names_the_variable_before_any_request() {
    let mut c = ProviderConfig::new("deepseek", "https://api.deepseek.com");
    c.api_key_env = Some("DEEPSEEK_API_KEY".into());
    let e = OpenAiProvider::new(c).unwrap_err();
    assert_eq!(
        e,
        ModelError::MissingKey {
            env_var: "DEEPSEEK_API_KEY".into()
        }
    );
    assert!(e.to_string().contains("DEEPSEEK_API_KEY"));
    let bad = ProviderConfig::new("x", "ftp://example.com");
    assert!(matches!(OpenAiProvider::new(bad), Err(ModelError::Config(m)) if m.contains("ftp://")));
}

#[tokio::test]
async fn unknown_model_context_length_and_bad_request_are_typed() {
    type Check = fn(&ModelError) -> bool;
    let cases: Vec<(MockReply, Check)> = vec![
        (
            MockReply::Status {
                status: 404,
                body: json!({"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}).to_string(),
                retry_after: None,
            },
            |e| matches!(e, ModelError::UnknownModel { model, message } if model == "nope" && message.contains("does not exist")),
        ),
        (
            MockReply::status(400, "Model Not Exist"),
            |e| matches!(e, ModelError::UnknownModel { model, .. } if model == "nope"),
        ),
        (
            MockReply::status(400, "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens."),
            |e| matches!(e, ModelError::ContextLength { message } if message.contains("65536")),
        ),
        (
            MockReply::status(400, "the request exceeds the available context size, try increasing it"),
            |e| matches!(e, ModelError::ContextLength { .. }),
        ),
        (
            MockReply::status(422, "messages[1].content: invalid type"),
            |e| matches!(e, ModelError::BadRequest { status: 422, message } if message == "messages[1].content: invalid type"),
        ),
        (
            MockReply::status_raw(400, "plain text complaint"),
            |e| matches!(e, ModelError::BadRequest { status: 400, message } if message == "plain text complaint"),
        ),
    ];
    for (reply, ok) in cases {
        let server = MockServer::start(move |_| reply.clone());
        let req = ModelRequest {
            model: "nope".into(),
            ..request("x")
        };
        let e = step(&provider(&server), &req).await.0.unwrap_err();
        assert!(ok(&e), "unexpected {e:?}");
        assert!(!e.is_transient());
        assert_eq!(server.request_count(), 1, "{e:?} must not be retried");
    }
}

/// A model endpoint that redirects is not followed: a 302 would be replayed as a
/// body-less GET at the new address, a 307 would send the conversation and the key
/// there. The step fails at once with the status and the `Location` named.
#[tokio::test]
async fn a_redirect_is_not_followed_but_named() {
    let elsewhere = MockServer::start(|_| MockReply::text("followed"));
    for status in [301, 302, 303, 307, 308] {
        let target = format!("{}/chat/completions", elsewhere.base_url());
        let server = MockServer::start(move |_| MockReply::redirect(status, target.clone()));
        let e = step(&provider(&server), &request("x")).await.0.unwrap_err();
        match &e {
            ModelError::BadRequest { status: s, message } => {
                assert_eq!(*s, status);
                assert!(
                    message.contains(&server.base_url())
                        && message.contains(&elsewhere.base_url())
                        && message.contains("base_url"),
                    "{message}"
                );
            }
            other => panic!("{status}: {other:?}"),
        }
        assert!(!e.is_transient());
        assert_eq!(server.request_count(), 1, "{status} must not be retried");
    }
    assert_eq!(elsewhere.request_count(), 0, "a redirect was followed");
}

#[tokio::test]
async fn an_unreachable_endpoint_gives_up_naming_the_url() {
    let mut server = MockServer::start(|_| MockReply::text("never"));
    let p = provider(&server);
    server.stop();
    let e = step(&p, &request("x")).await.0.unwrap_err();
    match &e {
        ModelError::RetriesExhausted { attempts: 4, last } => {
            assert!(
                matches!(&**last, ModelError::Connect { url, .. } if url == p.endpoint()),
                "{last:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains(p.endpoint()), "{e}");
}

#[tokio::test]
async fn error_objects_inside_a_stream_are_typed_and_retried() {
    let server = MockServer::start_sequence(vec![
        MockReply::Sse {
            chunks: vec![json!({"error": {"message": "Upstream overloaded", "code": 503}})],
            done: false,
        },
        MockReply::text("recovered"),
    ]);
    let (r, events) = step(&provider(&server), &request("x")).await;
    assert_eq!(r.unwrap().message.content, "recovered");
    assert!(events.iter().any(|e| matches!(
        e,
        StreamEvent::Retrying { error, .. } if error.contains("Upstream overloaded")
    )));
}

/// A bare HTTP/1.1 server that answers the first request on each connection with a
/// complete completion and keeps the connection open (no `Connection: close`), then
/// closes it — without a byte of answer — when a second request comes on it: what
/// uvicorn and nginx do to a connection they let idle. Returns its URL and a count of
/// the connections it accepted.
async fn idle_closing_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut served = 0;
                let mut buf = Vec::new();
                loop {
                    // Read one request: headers, then Content-Length bytes of body.
                    let head_end = loop {
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break p + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map(|v| v.trim().parse().unwrap())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        let mut chunk = [0u8; 4096];
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + len);
                    if served == 1 {
                        return; // the idle connection is closed under the request
                    }
                    served += 1;
                    let body = json!({
                        "id": "c", "object": "chat.completion", "model": "m",
                        "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "pong"}}],
                    })
                    .to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if sock.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, conns)
}

#[tokio::test]
async fn a_kept_alive_connection_closed_by_the_server_is_retried_without_spending_an_attempt() {
    let (url, conns) = idle_closing_server().await;
    let mut c = ProviderConfig::new("idle", url);
    c.max_attempts = 1;
    c.stream = false;
    c.api_timeout_secs = 20;
    let p = OpenAiProvider::new(c).unwrap();
    for turn in 0..3 {
        let (r, events) = step(&p, &request("ping")).await;
        let r = r.unwrap_or_else(|e| panic!("step {turn} failed: {e}"));
        assert_eq!(r.message.content, "pong");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Retrying { .. })),
            "the stale connection costs no attempt and no retry: {events:?}"
        );
    }
    // Steps 2 and 3 each met the closed connection, then went on a fresh one.
    assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 3);
}
