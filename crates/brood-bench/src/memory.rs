//! Scenario 3, memory per running child: N children are opened with `task` (cap N)
//! against a mock that never answers them, so all N are running at once, each with
//! a model request in flight. The figure is (RSS while all N are in flight − RSS
//! before) / N.
//!
//! The mock runs in a child process (this binary, `__mock-hold N`), so its own
//! buffers and its copy of every request do not count against brood. It prints
//! `url …` when it listens and `inflight N` once N requests are in flight, and exits
//! when its stdin closes. The baseline is taken after a warm-up fan-out in the
//! same session (runtime threads, HTTP client, ledger already up).

use crate::harness::{self, child_prompts, open_session, vm_rss_kib, Who, REPORT};
use crate::report::{Figure, Goal};
use brood_mock::{MockReply, MockServer};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Children in the warm-up fan-out.
const WARM: usize = 8;

/// The child process: serve the hold script for `n` children until stdin closes.
pub fn serve_hold(n: usize) -> i32 {
    let warm = json!({ "prompts": child_prompts("warm", WARM) });
    let hold = json!({ "prompts": child_prompts("hold", n) });
    let mock = MockServer::start(move |req| match harness::who(req) {
        Who::Parent { tag, step: 0 } if tag == "warm" => MockReply::tool_call("task", warm.clone()),
        Who::Parent { tag, step: 0 } if tag == "hold" => MockReply::tool_call("task", hold.clone()),
        Who::Parent { .. } => MockReply::text("done"),
        Who::Child { tag } if tag.starts_with("warm") => MockReply::text(REPORT),
        Who::Child { .. } => MockReply::Hang,
        Who::Unknown => MockReply::status(400, "brood-bench: unexpected request"),
    });
    println!("url {}", mock.base_url());
    let _ = std::io::stdout().flush();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("brood-bench mock-hold: no runtime: {e}");
            return 1;
        }
    };
    // Report once all n are in flight; stop when the parent closes our stdin.
    rt.block_on(async {
        let mut stdin_closed = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin()
                .read_line(&mut sink)
                .map(|k| k > 0)
                .unwrap_or(false)
            {
                sink.clear();
            }
        });
        tokio::select! {
            _ = mock.wait_for_in_flight(n) => {
                println!("inflight {}", mock.in_flight());
                let _ = std::io::stdout().flush();
                let _ = stdin_closed.await;
            }
            _ = &mut stdin_closed => {}
        }
    });
    0
}

/// Lines the mock process prints, forwarded from a reader thread.
fn read_lines(stdout: std::process::ChildStdout) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    rx
}

async fn next_line(
    rx: &mut mpsc::UnboundedReceiver<String>,
    prefix: &str,
    within: Duration,
) -> Result<String, String> {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Some(l)) => l
            .strip_prefix(prefix)
            .map(str::to_string)
            .ok_or_else(|| format!("the mock process said {l:?}, expected `{prefix}…`")),
        Ok(None) => Err("the mock process exited early".into()),
        Err(_) => Err(format!(
            "no `{prefix}…` line from the mock process within {} s",
            within.as_secs()
        )),
    }
}

pub async fn scenario(n: usize) -> Result<Vec<Figure>, String> {
    let files = harness::raise_open_files();
    if files < (n + 256) as libc::rlim_t {
        return Err(format!(
            "the open-file limit is {files}; holding {n} children needs about {} (raise `ulimit -n`)",
            n + 256
        ));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut child = Command::new(exe)
        .arg("__mock-hold")
        .arg(n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the mock process: {e}"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or("no stdout from the mock process")?;
    let mut lines = read_lines(stdout);
    let result = measure(n, &mut lines).await;
    drop(child.stdin.take()); // the mock process exits on EOF
    let _ = child.wait();
    let (base, held, running) = result?;
    let per_child = (held.saturating_sub(base)) as f64 / n as f64;
    eprintln!(
        "  memory: {n} children running, RSS {base} KiB → {held} KiB: {per_child:.1} KiB per child"
    );
    Ok(vec![Figure::new(
        "memory",
        format!("RSS growth per running child ({n} children)"),
        per_child,
        "KiB",
    )
    .goal(Goal::AtMost(32.0)) // issue 17 (was 256 KiB)
    .detail(json!({
        "children": n, "running": running, "rss_before_kib": base, "rss_held_kib": held,
    }))])
}

/// (baseline RSS, RSS with all `n` in flight, children running) in KiB.
async fn measure(
    n: usize,
    lines: &mut mpsc::UnboundedReceiver<String>,
) -> Result<(u64, u64, usize), String> {
    let url = next_line(lines, "url ", Duration::from_secs(30)).await?;
    let ws = harness::workspace()?;
    let session = open_session(ws.path(), &url, harness::limits(n, n + WARM + 4), 8).await?;
    let warm = session
        .run_with("PARENT warm", None, CancellationToken::new())
        .await
        .map_err(|e| format!("warm-up run failed: {e}"))?;
    if warm.final_text != "done" {
        session.close().await;
        return Err(format!("warm-up run ended with {:?}", warm.final_text));
    }
    // Let the warm-up's connections and records settle before the baseline.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = vm_rss_kib()?;
    let turn = CancellationToken::new();
    let held = async {
        let r = async {
            next_line(lines, "inflight ", Duration::from_secs(300)).await?;
            let first = vm_rss_kib()?;
            let running = session.supervisor().running();
            tokio::time::sleep(Duration::from_millis(500)).await;
            let second = vm_rss_kib()?;
            Ok::<_, String>((first.max(second), running))
        }
        .await;
        turn.cancel();
        r
    };
    let (run, held) = tokio::join!(session.run_with("PARENT hold", None, turn.clone()), held);
    session.close().await;
    let (held, running) = held?;
    if let Err(e) = run {
        return Err(format!("the holding parent run failed: {e}"));
    }
    if running != n {
        return Err(format!(
            "{running} children were running when the mock saw {n} requests in flight"
        ));
    }
    Ok((base, held, running))
}
