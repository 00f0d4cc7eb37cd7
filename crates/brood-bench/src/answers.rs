//! Scenario `answers`, big answers (issue 21): what one huge model answer costs the
//! `brood` process in memory and its ledger on disk. A real `brood run --json` (the
//! release binary built next to the bench) in a fresh workspace, against an
//! in-process mock whose children (or parent) answer tens of MB as SSE in 16 KiB
//! fragments. Peak memory is the kernel's high-water mark of the reaped process
//! (`wait4`'s `ru_maxrss`: nothing between two samples is missed), taken by a small
//! helper process (`brood-bench __peak-rss …`) that starts `brood` and reaps it: a
//! process started straight from this one would inherit this process's high-water
//! mark (the kernel carries the starter's pages into `ru_maxrss` across `exec`), and
//! this one holds the answers and the mock's buffers. Disk is the bytes under
//! `.brood/` after the run over the bytes of answer text the ledger recorded.

use crate::report::{Figure, Goal};
use brood_mock::{Answer, MockReply, MockRequest, MockServer};
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The figures, taken before the answer cap and the stored-once ledger, MB:
/// one child answering 50 MB, three at once, the parent answering 100 MB; and the
/// disk a 20 MB child answer took, per byte of answer.
const BEFORE_ONE: f64 = 790.0;
const BEFORE_THREE: f64 = 1380.0;
const BEFORE_PARENT: f64 = 930.0;
const BEFORE_DISK: f64 = 5.0;

const MB: usize = 1_000_000;
/// SSE fragment size of the mock's answers.
const FRAGMENT: usize = 16 << 10;
/// Children's prompts start with this (the parent's with anything else).
const CHILD: &str = "CHILD ";

/// One `brood run`, measured.
struct Measured {
    code: Option<i32>,
    peak_mb: f64,
    disk: u64,
    /// Big answers the mock served.
    answers: usize,
    stderr: String,
}

/// The `brood` binary built next to this one.
fn brood_binary() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("brood")))
        .filter(|p| p.is_file())
}

fn is_child(req: &MockRequest) -> bool {
    req.first_user_text().is_some_and(|t| t.starts_with(CHILD))
}

/// What the mock serves: `children` children each answering `child`, or the parent
/// answering `parent` at its first step.
#[derive(Clone)]
struct Script {
    children: usize,
    child: Option<String>,
    parent: Option<String>,
}

fn run(brood: &Path, script: Script, env: &[(&str, &str)]) -> Result<Measured, String> {
    let ws = tempfile::tempdir().map_err(|e| format!("no temporary workspace: {e}"))?;
    let home = tempfile::tempdir().map_err(|e| format!("no temporary home: {e}"))?;
    let prompts: Vec<String> = (0..script.children)
        .map(|i| format!("{CHILD}big {i}"))
        .collect();
    let s = script.clone();
    let server = MockServer::start(move |req| {
        if is_child(req) {
            return match &s.child {
                Some(text) => MockReply::Answer(Answer::text(text.clone()).fragment(FRAGMENT)),
                None => MockReply::text("SUMMARY: nothing"),
            };
        }
        match (req.assistant_turns(), &s.parent) {
            (0, Some(text)) => MockReply::Answer(Answer::text(text.clone()).fragment(FRAGMENT)),
            (0, None) => MockReply::tool_call("task", json!({ "prompts": prompts })),
            _ => MockReply::text("done"),
        }
    });
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(ws.path())
        .arg("__peak-rss")
        .arg(brood)
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("BROOD_API_TIMEOUT_SECS", "300")
        .args(["run", "--provider", "local", "--base-url"])
        .arg(server.base_url())
        .args(["--model", "m", "--json", "PARENT big answers"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut helper = cmd
        .spawn()
        .map_err(|e| format!("cannot start the peak-rss helper: {e}"))?;
    let mut err = helper.stderr.take().ok_or("no stderr from brood")?;
    let drain = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    });
    let mut said = String::new();
    if let Some(mut out) = helper.stdout.take() {
        let _ = out.read_to_string(&mut said);
    }
    let _ = helper.wait();
    let stderr = drain.join().unwrap_or_default();
    // `peak_kib N exit C` (C is -1 when brood did not exit normally).
    let words: Vec<&str> = said.split_whitespace().collect();
    let (peak_kib, code) = match words.as_slice() {
        ["peak_kib", kib, "exit", code] => (
            kib.parse::<u64>()
                .map_err(|e| format!("helper said {said:?}: {e}"))?,
            code.parse::<i32>().ok().filter(|c| *c >= 0),
        ),
        _ => {
            return Err(format!(
                "the peak-rss helper said {said:?}; stderr: {stderr}"
            ))
        }
    };
    let answers = server
        .captured()
        .iter()
        .filter(|r| {
            if script.parent.is_some() {
                !is_child(r) && r.assistant_turns() == 0
            } else {
                is_child(r)
            }
        })
        .count();
    Ok(Measured {
        code,
        peak_mb: peak_kib as f64 * 1024.0 / MB as f64,
        disk: disk_bytes(&ws.path().join(".brood")),
        answers,
        stderr,
    })
}

/// Size of everything under `dir`, recursively.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn expect_code(m: &Measured, code: i32, what: &str) -> Result<(), String> {
    if m.code == Some(code) {
        Ok(())
    } else {
        Err(format!(
            "{what}: brood exited {:?}, expected {code}: {}",
            m.code,
            m.stderr
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        ))
    }
}

fn peak_figure(name: &str, m: &Measured, before: Option<f64>, goal: Option<Goal>) -> Figure {
    let mut f = Figure::new("answers", name, m.peak_mb, "MB").detail(json!({
        "peak_rss_mb": m.peak_mb, "before_mb": before, "answers_served": m.answers,
        "ratio_to_before": before.map(|b| m.peak_mb / b),
    }));
    if let Some(g) = goal {
        f = f.goal(g);
    }
    f
}

pub async fn scenario() -> Result<Vec<Figure>, String> {
    tokio::task::spawn_blocking(measure_all)
        .await
        .map_err(|e| format!("the answers scenario panicked: {e}"))?
}

fn measure_all() -> Result<Vec<Figure>, String> {
    let Some(brood) = brood_binary() else {
        eprintln!("  answers: (no `brood` binary next to brood-bench: build it with `cargo build --release -p brood-cli` to measure big answers)");
        return Ok(Vec::new());
    };
    let huge = "z".repeat(50 * MB);
    let mut figures = Vec::new();

    // One child, then three at once, answering 50 MB (refused at the default cap).
    let one = run(
        &brood,
        Script {
            children: 1,
            child: Some(huge.clone()),
            parent: None,
        },
        &[],
    )?;
    expect_code(&one, 0, "one child answering 50 MB")?;
    eprintln!(
        "  answers: one child 50 MB: peak {:.0} MB (before {BEFORE_ONE} MB)",
        one.peak_mb
    );
    figures.push(peak_figure(
        "one child answers 50 MB: brood's peak RSS",
        &one,
        Some(BEFORE_ONE),
        Some(Goal::AtMost(200.0)),
    ));
    let three = run(
        &brood,
        Script {
            children: 3,
            child: Some(huge.clone()),
            parent: None,
        },
        &[],
    )?;
    expect_code(&three, 0, "three children answering 50 MB")?;
    eprintln!(
        "  answers: three children 50 MB each: peak {:.0} MB (before {BEFORE_THREE} MB; 3 × one = {:.0} MB)",
        three.peak_mb,
        3.0 * one.peak_mb
    );
    figures.push(peak_figure(
        "three children answer 50 MB at once: peak RSS (goal: under 3 × one)",
        &three,
        Some(BEFORE_THREE),
        Some(Goal::AtMost(3.0 * one.peak_mb)),
    ));
    drop(huge);

    // The parent answering 100 MB (its run fails at the cap).
    let parent = run(
        &brood,
        Script {
            children: 0,
            child: None,
            parent: Some("p".repeat(100 * MB)),
        },
        &[],
    )?;
    // An answer over max_answer_bytes is a provider-class failure: exit 3 (the
    // README's table of exit codes).
    expect_code(&parent, 3, "the parent answering 100 MB")?;
    eprintln!(
        "  answers: parent 100 MB: peak {:.0} MB (before {BEFORE_PARENT} MB)",
        parent.peak_mb
    );
    figures.push(peak_figure(
        "the parent answers 100 MB: peak RSS",
        &parent,
        Some(BEFORE_PARENT),
        None,
    ));

    // A 20 MB child answer the cap lets through (raised to 32 MiB): memory while it
    // is held, and the ledger's disk per byte of answer recorded.
    let size = 20 * MB;
    let text = format!(
        "SUMMARY: {}\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: None.\n",
        "x".repeat(size)
    );
    let kept = run(
        &brood,
        Script {
            children: 1,
            child: Some(text.clone()),
            parent: None,
        },
        &[("BROOD_MAX_ANSWER_BYTES", "33554432")],
    )?;
    expect_code(&kept, 0, "one child answering 20 MB under a 32 MiB cap")?;
    let recorded = (kept.answers * text.len()) as f64;
    let per_byte = kept.disk as f64 / recorded.max(1.0);
    eprintln!(
        "  answers: one child 20 MB kept: peak {:.0} MB; .brood/ {} B for {} answer(s) of {} B: {per_byte:.2}× the text (ideal 1×, before {BEFORE_DISK}×)",
        kept.peak_mb,
        kept.disk,
        kept.answers,
        text.len()
    );
    figures.push(peak_figure(
        "one child's 20 MB answer kept (cap raised to 32 MiB): peak RSS",
        &kept,
        None,
        None,
    ));
    figures.push(
        Figure::new(
            "answers",
            "disk: .brood/ bytes per byte of answer recorded (20 MB child answer)",
            per_byte,
            "×",
        )
        .goal(Goal::AtMost(2.0))
        .detail(json!({
            "brood_dir_bytes": kept.disk, "answers_recorded": kept.answers,
            "answer_bytes": text.len(), "before_ratio": BEFORE_DISK, "ideal_ratio": 1.0,
        })),
    );
    Ok(figures)
}

/// Helper mode `__peak-rss PROG ARGS…`: run PROG (its stdout discarded, stderr and
/// environment inherited), reap it, and print `peak_kib N exit C` — PROG's own peak
/// RSS, this helper being a fresh small process. Returns this process's exit code.
pub fn serve_peak_rss(args: &[String]) -> i32 {
    let Some((prog, rest)) = args.split_first() else {
        eprintln!("brood-bench __peak-rss: no program");
        return 2;
    };
    let child = match Command::new(prog).args(rest).stdout(Stdio::null()).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("brood-bench __peak-rss: cannot run {prog}: {e}");
            return 1;
        }
    };
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of that plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own child, never waited on through std; both
        // pointers are to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            eprintln!("brood-bench __peak-rss: wait4: {e}");
            return 1;
        }
    }
    drop(child);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    println!("peak_kib {} exit {code}", usage.ru_maxrss);
    0
}
