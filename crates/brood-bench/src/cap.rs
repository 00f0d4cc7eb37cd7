//! Scenario 6, cap fidelity: a parent fans out to N children under a
//! `max_concurrent` cap well below N. The mock counts the requests in flight; the
//! most ever seen must not exceed the cap (and, for throughput, should reach it).
//! Wall time is also compared with its ideal: the parent's two steps plus
//! ⌈N / cap⌉ waves of children, each request taking `d`.

use crate::fanout::{run_fanout, show_d};
use crate::report::{ms, Figure, Goal};
use serde_json::json;
use std::time::Duration;

pub async fn scenario(n: usize, cap: usize, d: Duration) -> Result<Vec<Figure>, String> {
    let run = run_fanout(n, cap, d).await?;
    let waves = n.div_ceil(cap.max(1));
    let ideal = ms(d) * (2 + waves) as f64;
    eprintln!(
        "  cap N={n} cap={cap} d={}: max in flight {} ; wall {:.0} ms vs ideal {ideal:.0} ms",
        show_d(d),
        run.max_in_flight,
        ms(run.wall)
    );
    let detail = json!({
        "n": n, "cap": cap, "d_ms": ms(d), "requests": run.requests,
        "wall_ms": ms(run.wall), "ideal_ms": ideal, "waves": waves,
    });
    Ok(vec![
        Figure::new(
            "cap fidelity",
            format!("N={n}, cap={cap}: max requests in flight"),
            run.max_in_flight as f64,
            "",
        )
        .goal(Goal::AtMost(cap as f64))
        .detail(detail.clone()),
        Figure::new(
            "cap fidelity",
            format!("N={n}, cap={cap}, d={}: wall / ideal", show_d(d)),
            ms(run.wall) / ideal,
            "×",
        )
        .detail(detail),
    ])
}
