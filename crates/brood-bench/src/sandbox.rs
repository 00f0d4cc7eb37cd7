//! Scenario 7, sandbox cost: what the shell sandbox adds to one `bash` call. The
//! baseline is a plain `bash -c true` in its own session (what an unsandboxed shell
//! call costs: fork, exec, wait); the measured call is brood's `bash` tool running
//! `true` for a writer and for a read-only role (landlock ruleset, namespaces,
//! mounts, a fresh /proc, capabilities dropped, the private temp dir). The figure
//! is the p99 of the sandboxed call minus the baseline's p99.

use crate::report::{Figure, Goal};
use brood::tool::shell::Bash;
use brood::tool::{Permissions, ShellPolicy, Tool, ToolContext, Workspace};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

fn p(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples.get(i).copied().unwrap_or(f64::NAN)
}

pub async fn scenario(calls: usize) -> Result<Vec<Figure>, String> {
    let ws = tempfile::tempdir().map_err(|e| format!("cannot make a workspace: {e}"))?;
    let workspace =
        Arc::new(Workspace::open(ws.path()).map_err(|e| format!("cannot open it: {e}"))?);
    let mut baseline = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c").arg("true").current_dir(ws.path());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let st = cmd
            .status()
            .await
            .map_err(|e| format!("bash did not run: {e}"))?;
        if !st.success() {
            return Err(format!("bash -c true failed: {st}"));
        }
        baseline.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let bash = Bash::default();
    let mut figures = Vec::new();
    let base_p99 = p(&mut baseline, 0.99);
    figures.push(
        Figure::new("sandbox", "unsandboxed bash -c true, p99", base_p99, "ms").detail(json!({
            "p50_ms": p(&mut baseline, 0.5),
        })),
    );
    for (label, policy) in [
        ("writer", ShellPolicy::Full),
        ("read-only", ShellPolicy::ReadOnly),
    ] {
        let mut perms = Permissions::full("bench");
        perms.shell = policy;
        let ctx = ToolContext {
            workspace: workspace.clone(),
            permissions: Arc::new(perms),
            cancel: CancellationToken::new(),
            run_id: "bench".into(),
        };
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let out = bash
                .call(json!({"command": "true"}), &ctx)
                .await
                .map_err(|e| format!("the sandboxed call failed: {e}"))?;
            if !out.ends_with("[exit code: 0]") {
                return Err(format!("the sandboxed call ended {out:?}"));
            }
            samples.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let p99 = p(&mut samples, 0.99);
        figures.push(
            Figure::new(
                "sandbox",
                format!("{label} shell: sandbox cost per call (p99 over unsandboxed)"),
                p99 - base_p99,
                "ms",
            )
            .goal(Goal::AtMost(5.0))
            .detail(json!({
                "calls": calls,
                "p50_ms": p(&mut samples, 0.5),
                "p99_ms": p99,
                "baseline_p99_ms": base_p99,
            })),
        );
    }
    Ok(figures)
}
