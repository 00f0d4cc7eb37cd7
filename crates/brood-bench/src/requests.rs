//! Scenario 8, requests (issue 19): what a tree sends the model, in bytes and time.
//!
//! - First request bytes per role: the parent opens one `explore`, one `review` and
//!   one `general` child with a one-line prompt each; each figure is the body of
//!   that run's first request as the mock received it (the parent's too).
//! - Bytes re-sent per child step: an explore child lists the directory, then
//!   answers; its second request repeats its first byte for byte before adding the
//!   step's messages. The figure is that shared prefix (what a provider's prompt
//!   cache can serve; about 4 bytes a token).
//! - Fan-out to the last child: a `task` with 64 prompts, from the parent's `task`
//!   call (`ToolStarted`) to the mock having the 64th child's whole first request;
//!   the median of `repeats` runs.

use crate::harness::{self, child_prompts, open_session, Who, REPORT};
use crate::report::{ms, quantile, Figure, Goal};
use brood::agent::{AgentEvent, EventSink};
use brood_mock::{MockReply, MockServer};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

const SCENARIO: &str = "requests";

/// Bytes of each role's first request, and the explore child's re-sent prefix.
async fn sizes() -> Result<Vec<Figure>, String> {
    let mock = MockServer::start(|req| match harness::who(req) {
        Who::Parent { step: 0, .. } => MockReply::tool_calls([
            (
                "task",
                json!({"prompts": ["CHILD explore"], "agent_type": "explore"}),
            ),
            (
                "task",
                json!({"prompts": ["CHILD review"], "agent_type": "review"}),
            ),
            ("task", json!({"prompts": ["CHILD general"]})),
        ]),
        Who::Parent { .. } => MockReply::text("done"),
        Who::Child { tag } if tag == "explore" && req.assistant_turns() == 0 => {
            MockReply::tool_call("list_dir", json!({}))
        }
        Who::Child { .. } => MockReply::text(REPORT),
        Who::Unknown => MockReply::status(400, "brood-bench: unexpected request"),
    });
    let ws = harness::workspace()?;
    let session = open_session(ws.path(), &mock.base_url(), harness::limits(8, 16), 8).await?;
    let report = session
        .run_with("PARENT sizes", None, CancellationToken::new())
        .await
        .map_err(|e| format!("the parent failed: {e}"))?;
    session.close().await;
    if report.final_text != "done" {
        return Err(format!("the parent ended with {:?}", report.final_text));
    }
    let captured = mock.captured();
    let of = |who: &str| -> Vec<&[u8]> {
        captured
            .iter()
            .filter(|r| r.first_user_text() == Some(who))
            .map(|r| &r.raw[..])
            .collect()
    };
    let first = |who: &str| {
        of(who)
            .first()
            .map(|b| b.len())
            .ok_or_else(|| format!("no request of {who:?} reached the mock"))
    };
    let mut figures = Vec::new();
    for (role, who, goal) in [
        ("explore", "CHILD explore", 4096.0),
        ("review", "CHILD review", 4096.0),
        ("general", "CHILD general", 8192.0),
        ("parent", "PARENT sizes", 8192.0),
    ] {
        let bytes = first(who)? as f64;
        eprintln!("  first request, {role}: {bytes} bytes");
        figures.push(
            Figure::new(SCENARIO, format!("first request bytes: {role}"), bytes, "B")
                .goal(Goal::AtMost(goal)),
        );
    }
    let explore = of("CHILD explore");
    let [one, two, ..] = explore.as_slice() else {
        return Err("the explore child made fewer than two requests".into());
    };
    let shared = one
        .iter()
        .zip(two.iter())
        .take_while(|(a, b)| a == b)
        .count();
    eprintln!(
        "  explore step 2 re-sends {shared} of its {} bytes",
        two.len()
    );
    figures.push(
        Figure::new(
            SCENARIO,
            "explore step 2: bytes re-sent (prefix of step 1)",
            shared as f64,
            "B",
        )
        .detail(json!({"step_1_bytes": one.len(), "step_2_bytes": two.len()})),
    );
    Ok(figures)
}

/// Milliseconds from the parent's `task` call to the last child's first request.
async fn fan_out_once(n: usize) -> Result<f64, String> {
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let arr = arrivals.clone();
    let mock = MockServer::start(move |req| match harness::who(req) {
        Who::Parent { tag, step: 0 } => {
            MockReply::tool_call("task", json!({ "prompts": child_prompts(&tag, n) }))
        }
        Who::Parent { .. } => MockReply::text("done"),
        Who::Child { .. } => {
            if req.assistant_turns() == 0 {
                arr.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(req.arrived);
            }
            MockReply::text(REPORT)
        }
        Who::Unknown => MockReply::status(400, "brood-bench: unexpected request"),
    });
    let ws = harness::workspace()?;
    let session = open_session(ws.path(), &mock.base_url(), harness::limits(n, n + 8), 8).await?;
    let started: Arc<Mutex<Option<Instant>>> = Arc::default();
    let st = started.clone();
    let sink: EventSink = Arc::new(move |e: &AgentEvent| {
        if let AgentEvent::ToolStarted { call } = e {
            if call.name == "task" {
                *st.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            }
        }
    });
    let report = session
        .run_with("PARENT fan", Some(sink), CancellationToken::new())
        .await
        .map_err(|e| format!("the parent failed: {e}"))?;
    session.close().await;
    if report.final_text != "done" {
        return Err(format!("the parent ended with {:?}", report.final_text));
    }
    let started = (*started.lock().unwrap_or_else(|p| p.into_inner()))
        .ok_or("the parent never called task")?;
    let arrivals = arrivals.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if arrivals.len() != n {
        return Err(format!(
            "{} of {n} children reached the mock",
            arrivals.len()
        ));
    }
    let last = arrivals.iter().max().copied().unwrap_or(started);
    Ok(ms(last.saturating_duration_since(started)))
}

pub async fn scenario(fan_out: usize, repeats: usize) -> Result<Vec<Figure>, String> {
    let mut figures = sizes().await?;
    let mut runs = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        runs.push(fan_out_once(fan_out).await?);
    }
    let median = quantile(&runs, 0.5);
    eprintln!(
        "  task of {fan_out}: last child's first request after {median:.2} ms (median of {})",
        runs.len()
    );
    figures.push(
        Figure::new(
            SCENARIO,
            format!("task of {fan_out}: to the last child's first request (median)"),
            median,
            "ms",
        )
        .goal(Goal::AtMost(20.0))
        .detail(json!({ "runs_ms": runs })),
    );
    Ok(figures)
}
