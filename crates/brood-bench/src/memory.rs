//! Scenario 3, memory per running child: N children are opened with `task` (cap N)
//! against a mock that never answers them, so all N are running at once, each with
//! a model request in flight. The figure is (RSS while all N are in flight and running − RSS
//! before) / N.
//!
//! The mock runs in a child process (this binary, `__mock-hold N`), so its own
//! buffers and its copy of every request do not count against brood. It prints
//! `url …` when it listens and `inflight N` once N requests are in flight, and exits
//! when its stdin closes. The baseline is taken after a warm-up fan-out in the
//! same session (runtime threads, HTTP client, ledger already up).
//!
//! Two figures: over plain HTTP/1.1 (each child in flight holds a connection of its
//! own, with hyper's buffers and dispatch channel), measured in this process, and
//! over HTTP/2 (TLS, `h2` offered by ALPN, as hosted providers do: every child's
//! request is a stream of one connection), measured in a fresh helper process
//! (`__memory-h2 N`) so that it reuses no heap the first measurement freed.

use crate::harness::{self, child_prompts, open_session_trusting, vm_rss_kib, Who, REPORT};
use crate::report::{Figure, Goal};
use brood_mock::{Alpn, MockReply, MockServer};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Children in the warm-up fan-out.
const WARM: usize = 8;

/// The child process: serve the hold script for `n` children until stdin closes;
/// over TLS offering HTTP/2 when `h2` (its CA is written to a file named by a
/// `ca PATH` line after the `url …` line).
pub fn serve_hold(n: usize, h2: bool) -> i32 {
    let warm = json!({ "prompts": child_prompts("warm", WARM) });
    let hold = json!({ "prompts": child_prompts("hold", n) });
    let handler = move |req: &brood_mock::MockRequest| match harness::who(req) {
        Who::Parent { tag, step: 0 } if tag == "warm" => MockReply::tool_call("task", warm.clone()),
        Who::Parent { tag, step: 0 } if tag == "hold" => MockReply::tool_call("task", hold.clone()),
        Who::Parent { .. } => MockReply::text("done"),
        Who::Child { tag } if tag.starts_with("warm") => MockReply::text(REPORT),
        Who::Child { .. } => MockReply::Hang,
        Who::Unknown => MockReply::status(400, "brood-bench: unexpected request"),
    };
    let mock = if h2 {
        MockServer::start_tls(Alpn::H2, handler)
    } else {
        MockServer::start(handler)
    };
    println!("url {}", mock.base_url());
    // Kept until this process exits.
    let ca_file = match mock.ca_cert_pem().map(write_ca) {
        Some(Err(e)) => {
            eprintln!("brood-bench mock-hold: cannot write the CA: {e}");
            return 1;
        }
        Some(Ok(f)) => {
            println!("ca {}", f.path().display());
            Some(f)
        }
        None => None,
    };
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
    drop(ca_file);
    0
}

fn write_ca(pem: &str) -> std::io::Result<tempfile::NamedTempFile> {
    let mut f = tempfile::NamedTempFile::new()?;
    f.write_all(pem.as_bytes())?;
    f.flush()?;
    Ok(f)
}

/// The helper process of the HTTP/2 figure: measure it, print `held BASE HELD
/// RUNNING` (KiB, KiB, children). With `keep` (`__memory-h2 N keep`), the line is
/// printed while the children still wait, and they wait until the process is
/// killed: a heap profiler's "leaked" bytes at a SIGKILL then are exactly what
/// the waiting tree holds (`heaptrack brood-bench __memory-h2 1000 keep`, built
/// with `--features system-alloc`).
pub fn serve_h2_measure(n: usize, keep: bool) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("brood-bench memory-h2: no runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(hold(n, true, keep)) {
        Ok((base, held, running)) => {
            println!("held {base} {held} {running}");
            0
        }
        Err(e) => {
            eprintln!("brood-bench memory-h2: {e}");
            1
        }
    }
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
    let h1 = hold(n, false, false).await?;
    let h2 = h2_in_helper(n)?;
    // The goal is held over HTTP/2, the transport a tree of hundreds of children
    // is carried on (issue 17.2): one connection for all. Over HTTP/1.1 every
    // waiting child holds a connection of its own and hyper's buffers for it (an
    // 8 KiB read buffer answer heads are read into, an 8 KiB write buffer), so the
    // figure is shown beside the goal (BENCHMARKS.md section 3).
    Ok(vec![
        figure(n, "", h1),
        figure(n, ", HTTP/2 over TLS", h2).goal(Goal::AtMost(32.0)), // issue 17 (was 256 KiB)
    ])
}

fn figure(n: usize, transport: &str, (base, held, running): (u64, u64, usize)) -> Figure {
    let per_child = (held.saturating_sub(base)) as f64 / n as f64;
    eprintln!(
        "  memory{transport}: {n} children running, RSS {base} KiB → {held} KiB: {per_child:.1} KiB per child"
    );
    Figure::new(
        "memory",
        format!("RSS growth per running child ({n} children{transport})"),
        per_child,
        "KiB",
    )
    .detail(json!({
        "children": n, "running": running, "rss_before_kib": base, "rss_held_kib": held,
    }))
}

/// The HTTP/2 measurement in a fresh process of this binary.
fn h2_in_helper(n: usize) -> Result<(u64, u64, usize), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let out = Command::new(exe)
        .arg("__memory-h2")
        .arg(n.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run the HTTP/2 memory helper: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("held "))
        .ok_or_else(|| format!("the HTTP/2 memory helper failed ({})", out.status))?;
    let v: Vec<u64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
    match v.as_slice() {
        [base, held, running] => Ok((*base, *held, *running as usize)),
        _ => Err(format!("the HTTP/2 memory helper said {line:?}")),
    }
}

/// Hold `n` children against a mock process (over TLS with HTTP/2 when `h2`):
/// (baseline RSS, RSS with all in flight, children running). With `keep`, print
/// them and hold the children until the process is killed.
async fn hold(n: usize, h2: bool, keep: bool) -> Result<(u64, u64, usize), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__mock-hold").arg(n.to_string());
    if h2 {
        cmd.arg("h2");
    }
    let mut child = cmd
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
    let result = measure(n, h2, keep, &mut lines).await;
    drop(child.stdin.take()); // the mock process exits on EOF
    let _ = child.wait();
    result
}

/// (baseline RSS, RSS with all `n` in flight, children running) in KiB.
async fn measure(
    n: usize,
    h2: bool,
    keep: bool,
    lines: &mut mpsc::UnboundedReceiver<String>,
) -> Result<(u64, u64, usize), String> {
    let url = next_line(lines, "url ", Duration::from_secs(30)).await?;
    let ca = if h2 {
        let path = next_line(lines, "ca ", Duration::from_secs(30)).await?;
        Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read the mock's CA {path}: {e}"))?,
        )
    } else {
        None
    };
    let ws = harness::workspace()?;
    let limits = harness::limits(n, n + WARM + 4);
    let session = open_session_trusting(ws.path(), &url, limits, 8, ca.as_deref()).await?;
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
            // A child's first request leaves while its spawn record commits, and it
            // turns `running` once the record is on disk (ARCHITECTURE, "What a
            // spawn waits for"): the figure is taken when all n are both.
            let running = all_running(&session, n, Duration::from_secs(60)).await;
            let first = vm_rss_kib()?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let second = vm_rss_kib()?;
            if keep {
                println!("held {base} {} {running}", first.max(second));
                let _ = std::io::stdout().flush();
                std::future::pending::<()>().await;
            }
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
            "{running} children were running 60 s after the mock saw {n} requests in flight"
        ));
    }
    Ok((base, held, running))
}

/// Wait until `n` children are running in `session` (their spawn records on disk),
/// checking every 5 ms for at most `limit`; the count last seen.
async fn all_running(session: &brood::Session, n: usize, limit: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let running = session.supervisor().running();
        if running >= n || tokio::time::Instant::now() >= deadline {
            return running;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
