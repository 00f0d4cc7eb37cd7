//! brood-mock used from plain (non-async) tests with raw HTTP/1.1, as the CLI tests do
//! when they run the `brood` binary against it.

use brood_mock::{Answer, MockReply, MockServer};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;

/// POST `body` to `path`, return (status line, headers+body text).
fn post(server: &MockServer, path: &str, body: &Value) -> (String, String) {
    post_text(server, path, &body.to_string())
}

/// POST these exact body bytes (JSON or not).
fn post_text(server: &MockServer, path: &str, body: &str) -> (String, String) {
    let mut s = TcpStream::connect(server.addr()).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer k\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (status, rest) = out.split_once("\r\n").unwrap();
    (status.to_string(), rest.to_string())
}

#[test]
fn answers_follow_the_stream_flag_and_requests_are_captured() {
    let server = MockServer::start(|_| MockReply::text("hi there"));
    let (status, rest) = post(
        &server,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [], "stream": false}),
    );
    assert!(status.contains("200"), "{status}");
    assert!(rest.contains("application/json"));
    assert!(rest.contains(r#""content":"hi there""#), "{rest}");

    let (_, rest) = post(
        &server,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [], "stream": true}),
    );
    assert!(rest.contains("text/event-stream"), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    assert!(rest.contains(r#""finish_reason":"stop""#), "{rest}");

    assert_eq!(server.request_count(), 2);
    let captured = server.captured();
    assert_eq!(captured[1].seq, 1);
    assert!(captured[1].stream());
    assert_eq!(captured[0].header("Authorization"), Some("Bearer k"));
    assert_eq!(
        server.raw_requests()[0],
        json!({"model": "m", "messages": [], "stream": false})
            .to_string()
            .into_bytes()
    );
    assert_eq!(server.in_flight(), 0);
}

#[test]
fn status_replies_carry_retry_after_and_sequences_run_out_with_a_400() {
    let server = MockServer::start_sequence(vec![MockReply::status(429, "slow").retry_after("2")]);
    let body = json!({"model": "m", "messages": []});
    let (status, rest) = post(&server, "/v1/chat/completions", &body);
    assert!(status.contains("429"), "{status}");
    assert!(
        rest.to_ascii_lowercase().contains("retry-after: 2"),
        "{rest}"
    );
    let (status, rest) = post(&server, "/v1/chat/completions", &body);
    assert!(status.contains("400"), "{status}");
    assert!(rest.contains("no reply scripted for request #1"), "{rest}");
}

#[test]
fn llama_style_chunks_repeat_id_and_name() {
    let chunks = Answer::new()
        .tool_call_with_id("id7", "grep", r#"{"pattern":"abc"}"#)
        .fragment(4)
        .llama_style()
        .stream_chunks("m");
    let fragments: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0"))
        .collect();
    assert!(fragments.len() > 2);
    assert!(fragments
        .iter()
        .all(|f| f["id"] == json!("id7") && f["function"]["name"] == json!("grep")));
    let args: String = fragments
        .iter()
        .map(|f| f["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"pattern":"abc"}"#);
}

#[test]
fn models_route_lists_configured_ids_and_stop_releases_the_port() {
    let mut server = MockServer::start(|_| MockReply::Hang);
    server.set_models(["a", "b"]);
    let mut s = TcpStream::connect(server.addr()).unwrap();
    write!(
        s,
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(
        out.contains(r#""id":"a""#) && out.contains(r#""id":"b""#),
        "{out}"
    );

    // A request left hanging does not keep stop() from returning.
    let mut hanging = TcpStream::connect(server.addr()).unwrap();
    let body = r#"{"model":"m","messages":[]}"#;
    write!(
        hanging,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(server.wait_for_in_flight(1));
    let addr = server.addr();
    server.stop();
    assert!(
        TcpStream::connect(addr).is_err(),
        "port still open after stop"
    );
    let mut rest = Vec::new();
    // The hanging connection was closed by the server.
    assert_eq!(hanging.read_to_end(&mut rest).unwrap_or(0), 0);
}

#[test]
fn delays_count_from_arrival_and_add_up() {
    // Two delays in a row: the reply may not leave before arrival + 30 ms + 20 ms.
    let server = MockServer::start(|_| {
        MockReply::text("late")
            .after(std::time::Duration::from_millis(20))
            .after(std::time::Duration::from_millis(30))
    });
    let (status, rest) = post(
        &server,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [], "stream": false}),
    );
    let answered = std::time::Instant::now();
    assert!(status.contains("200"), "{status}");
    assert!(rest.contains(r#""content":"late""#), "{rest}");
    let arrived = server.captured()[0].arrived;
    let waited = answered.duration_since(arrived);
    assert!(
        waited >= std::time::Duration::from_millis(50),
        "answered {waited:?} after arrival"
    );
}

#[test]
fn a_shorter_delay_is_not_held_behind_a_longer_one_already_waiting() {
    // The first request waits 3 s; the second, sent while the clock sleeps towards
    // that deadline, waits 50 ms and must be answered then, not at the 3 s alarm.
    let server = MockServer::start(|req| {
        let ms = if req.seq == 0 { 3000 } else { 50 };
        MockReply::text("ok").after(std::time::Duration::from_millis(ms))
    });
    let body = json!({"model": "m", "messages": [], "stream": false});
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| post(&server, "/v1/chat/completions", &body));
        while server.request_count() == 0 {
            std::thread::yield_now();
        }
        let (status, _) = post(&server, "/v1/chat/completions", &body);
        let answered = std::time::Instant::now();
        assert!(status.contains("200"), "{status}");
        let second = server.captured()[1].arrived;
        let waited = answered.duration_since(second);
        assert!(
            waited >= std::time::Duration::from_millis(50)
                && waited < std::time::Duration::from_millis(1500),
            "the 50 ms reply came {waited:?} after its arrival"
        );
        assert!(slow.join().unwrap().0.contains("200"));
    });
}

#[test]
fn the_quick_fields_agree_with_the_whole_body_and_bad_json_gets_a_400() {
    let server = MockServer::start(|req| {
        // A handler reads the quick fields before anyone parsed the whole body.
        let turns = req.assistant_turns();
        MockReply::text(format!(
            "model={} stream={} messages={} turns={turns} first={:?}",
            req.model(),
            req.stream(),
            req.messages().len(),
            req.first_user_text()
        ))
    });
    let body = json!({
        "model": "m1", "stream": false,
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "", "tool_calls": []},
        ]
    });
    let (_, rest) = post(&server, "/v1/chat/completions", &body);
    assert!(
        rest.contains(r#"model=m1 stream=false messages=3 turns=1 first=Some(\"hello\")"#),
        "{rest}"
    );
    let captured = server.captured();
    assert_eq!(captured[0].body(), &body);
    assert_eq!(
        captured[0].messages(),
        body["messages"].as_array().unwrap().as_slice()
    );

    let (status, rest) = post_text(&server, "/v1/chat/completions", "{nop");
    assert!(status.contains("400"), "{status}");
    assert!(rest.contains("not JSON"), "{rest}");
    assert_eq!(server.captured()[1].body(), &Value::Null);
}
