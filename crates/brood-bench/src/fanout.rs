//! Scenario 1, fan-out overhead: a parent calls `task` with N prompts, each child
//! makes one model step, the parent answers. Every model request (the parent's two
//! steps and each child's step) takes `d` at the mock, so the critical path is
//! parent step → child step → parent step and the ideal wall time is `3·d`; the
//! figure is wall time / ideal. [`run_fanout`] is also the engine of scenario 6.

use crate::harness::{self, child_prompts, open_session, Who, REPORT};
use crate::report::{ms, quantile, Figure, Goal};
use brood_mock::{MockReply, MockServer};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One fan-out run's measurements.
#[derive(Debug, Clone)]
pub struct FanoutRun {
    pub wall: Duration,
    /// From the first child's request at the mock to the last one's.
    pub child_spread: Duration,
    /// From the end of the parent's first step (its reply handed to the wire) to the
    /// first child's request at the mock.
    pub first_child_after: Duration,
    pub max_in_flight: usize,
    pub requests: usize,
}

/// Run one parent with `n` children under a cap of `cap`, every request taking `d`.
/// Errors when the run did not go as scripted (not when it was slow).
pub async fn run_fanout(n: usize, cap: usize, d: Duration) -> Result<FanoutRun, String> {
    let prompts = json!({ "prompts": child_prompts("fan", n) });
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let parent_done: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let (arr, pd) = (arrivals.clone(), parent_done.clone());
    let mock = MockServer::start(move |req| match harness::who(req) {
        Who::Parent { step: 0, .. } => {
            // The reply leaves after `d`; note when, for the spawn offset.
            *pd.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + d);
            MockReply::tool_call("task", prompts.clone()).after(d)
        }
        Who::Parent { .. } => MockReply::text("done").after(d),
        Who::Child { .. } => {
            arr.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Instant::now());
            MockReply::text(REPORT).after(d)
        }
        Who::Unknown => MockReply::status(400, "brood-bench: unexpected request"),
    });
    let ws = harness::workspace()?;
    let session = open_session(ws.path(), &mock.base_url(), harness::limits(cap, n), 8).await?;
    let t0 = Instant::now();
    let report = session
        .run("PARENT fan-out", None, CancellationToken::new())
        .await
        .map_err(|e| format!("the parent run failed: {e}"));
    let wall = t0.elapsed();
    let counts = harness::status_counts(&session);
    session.close().await;
    let report = report?;
    if report.final_text != "done" {
        return Err(format!(
            "N={n}: the parent ended with {:?} ({:?}), not \"done\"",
            report.final_text, report.error
        ));
    }
    let completed = counts.get("completed").copied().unwrap_or(0);
    if completed != n {
        return Err(format!(
            "N={n}: {completed} children completed, expected {n} ({counts:?})"
        ));
    }
    let requests = mock.request_count();
    if requests != n + 2 {
        return Err(format!(
            "N={n}: the mock saw {requests} requests, expected {} (a repair turn or a retry?)",
            n + 2
        ));
    }
    let arrivals = arrivals.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let first = arrivals.iter().min().copied();
    let last = arrivals.iter().max().copied();
    let parent_done = *parent_done.lock().unwrap_or_else(|p| p.into_inner());
    Ok(FanoutRun {
        wall,
        child_spread: match (first, last) {
            (Some(a), Some(b)) => b - a,
            _ => Duration::ZERO,
        },
        first_child_after: match (parent_done, first) {
            (Some(p), Some(f)) => f.saturating_duration_since(p),
            _ => Duration::ZERO,
        },
        max_in_flight: mock.max_in_flight(),
        requests,
    })
}

/// The scenario: every N in `ns` × every `(latency, repeats)` in `ds`; the figure
/// is the median ratio of the repeats.
pub async fn scenario(ns: &[usize], ds: &[(Duration, usize)]) -> Result<Vec<Figure>, String> {
    let mut figures = Vec::new();
    for &(d, repeats) in ds {
        for &n in ns {
            let mut runs = Vec::new();
            for _ in 0..repeats.max(1) {
                runs.push(run_fanout(n, n, d).await?);
            }
            let ideal = 3.0 * ms(d);
            let ratios: Vec<f64> = runs.iter().map(|r| ms(r.wall) / ideal).collect();
            let ratio = quantile(&ratios, 0.5);
            let overhead: Vec<f64> = runs.iter().map(|r| ms(r.wall) - ideal).collect();
            let name = format!("N={n}, d={}: wall / ideal", show_d(d));
            let mut f = Figure::new("fan-out", name, ratio, "×").detail(json!({
                "n": n,
                "d_ms": ms(d),
                "ideal_ms": ideal,
                "wall_ms": runs.iter().map(|r| ms(r.wall)).collect::<Vec<_>>(),
                "ratios": ratios,
                "overhead_ms": overhead,
                "child_spread_ms": runs.iter().map(|r| ms(r.child_spread)).collect::<Vec<_>>(),
                "first_child_after_parent_step_ms":
                    runs.iter().map(|r| ms(r.first_child_after)).collect::<Vec<_>>(),
                "max_in_flight": runs.iter().map(|r| r.max_in_flight).collect::<Vec<_>>(),
            }));
            match n {
                20 => f = f.goal(Goal::AtMost(1.10)),
                200 => f = f.goal(Goal::AtMost(1.20)),
                _ => {}
            }
            eprintln!(
                "  fan-out N={n:>3} d={:>6}: wall/ideal {ratio:.3} (median of {}; overhead {:.1} ms; children's requests spread over {:.1} ms)",
                show_d(d),
                runs.len(),
                quantile(&overhead, 0.5),
                quantile(&runs.iter().map(|r| ms(r.child_spread)).collect::<Vec<_>>(), 0.5),
            );
            figures.push(f);
        }
    }
    Ok(figures)
}

/// `50 ms`, `1 s`.
pub fn show_d(d: Duration) -> String {
    if d.as_millis() >= 1000 && d.as_millis() % 1000 == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
