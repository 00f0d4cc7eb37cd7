//! Scenario 5, fork prefix: the parent reads a file, then calls `task` with
//! `fork_context: true`; the forked child's first request should repeat the
//! parent's last request (the one that asked for the fork) byte for byte up to the
//! end of its last message, then append the fork tail.
//!
//! Request bodies put `messages` last, so the parent's body ends `…last message}]}`.
//! The figure is the share of the parent body up to and including its last message
//! (the body minus its closing `]}`) that the child's body repeats as an identical
//! prefix. The raw whole-body share (over every byte, closing `]}` included, which
//! a longer conversation can never repeat) is reported beside it.

use crate::harness::{self, open_session, Who, REPORT};
use crate::report::{Figure, Goal};
use brood_mock::{MockReply, MockServer};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub async fn scenario() -> Result<Vec<Figure>, String> {
    let mock = MockServer::start(|req| match harness::who(req) {
        Who::Parent { step: 0, .. } => {
            MockReply::tool_call("read_file", json!({"path": "notes.md"}))
        }
        Who::Parent { step: 1, .. } => MockReply::tool_call(
            "task",
            json!({"prompts": ["CHILD fork 0"], "agent_type": "explore", "fork_context": true}),
        ),
        Who::Parent { .. } => MockReply::text("done"),
        Who::Child { .. } => MockReply::text(REPORT),
        Who::Unknown => MockReply::status(400, "brood-bench: unexpected request"),
    });
    let ws = harness::workspace()?;
    std::fs::write(
        ws.path().join("notes.md"),
        "# notes\nThe parser lives in src/config.rs.\n",
    )
    .map_err(|e| format!("cannot write the workspace: {e}"))?;
    let session = open_session(ws.path(), &mock.base_url(), harness::limits(4, 8), 8).await?;
    let report = session
        .run_with(
            "PARENT fork: find where config is parsed, then fork a child to check it",
            None,
            CancellationToken::new(),
        )
        .await
        .map_err(|e| format!("the parent run failed: {e}"));
    session.close().await;
    let report = report?;
    if report.final_text != "done" {
        return Err(format!("the parent ended with {:?}", report.final_text));
    }
    let captured = mock.captured();
    let parent = captured
        .iter()
        .find(|r| matches!(harness::who(r), Who::Parent { step: 1, .. }))
        .ok_or("the parent's forking request never reached the mock")?;
    let child = captured
        .iter()
        .find(|r| matches!(harness::who(r), Who::Child { .. }))
        .ok_or("the forked child's request never reached the mock")?;
    if parent
        .body()
        .as_object()
        .and_then(|o| o.keys().next_back())
        .map(String::as_str)
        != Some("messages")
    {
        return Err("the parent's request body does not end with `messages`".into());
    }
    let (p, c) = (&parent.raw, &child.raw);
    if !p.ends_with(b"]}") {
        return Err("the parent's raw body does not end with `]}`".into());
    }
    let common = p.iter().zip(c.iter()).take_while(|(a, b)| a == b).count();
    let through_last_message = p.len() - 2;
    let share = common.min(through_last_message) as f64 / through_last_message as f64 * 100.0;
    let raw_share = common as f64 / p.len() as f64 * 100.0;
    let child_messages = child.messages().len();
    let parent_messages = parent.messages().len();
    eprintln!(
        "  fork: parent body {} B, child body {} B, identical prefix {common} B: {share:.2} % of the parent through its last message ({raw_share:.2} % of the whole body)",
        p.len(),
        c.len()
    );
    let detail = json!({
        "parent_body_bytes": p.len(),
        "child_body_bytes": c.len(),
        "identical_prefix_bytes": common,
        "parent_through_last_message_bytes": through_last_message,
        "parent_messages": parent_messages,
        "child_messages": child_messages,
        "first_difference": c.get(common..(common + 24).min(c.len()))
            .map(|b| Value::String(String::from_utf8_lossy(b).into_owned())),
    });
    Ok(vec![
        Figure::new(
            "fork",
            "parent request repeated as prefix (through its last message)",
            share,
            "%",
        )
        .goal(Goal::AtLeast(100.0))
        .detail(detail.clone()),
        Figure::new(
            "fork",
            "parent request repeated as prefix (whole body)",
            raw_share,
            "%",
        )
        .detail(detail),
    ])
}
