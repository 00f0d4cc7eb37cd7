//! What every scenario shares: a throwaway workspace, a session pointed at the mock
//! (provider `local`, base URL on loopback), the scripted conversation the mock
//! plays (who is asking: the parent at which step, or which child), the child's
//! contract-shaped answer, and reading the process's resident memory.

use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::session::{Session, SessionOptions};
use brood::subagent::Limits;
use brood_mock::MockRequest;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tempfile::TempDir;

/// A child's answer in the SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS contract, with a
/// citation that checks out in [`workspace`], so no repair turn is ever asked for.
pub const REPORT: &str = "SUMMARY: looked at the file.\nCHANGES: None.\nEVIDENCE:\n- a.txt:1-1 the line\nRISKS: None.\nBLOCKERS: None.";

/// The parent's prompts start with this; the rest is the scenario's tag.
pub const PARENT: &str = "PARENT ";
/// Children's prompts start with this; the rest is the child's tag.
pub const CHILD: &str = "CHILD ";

/// Heartbeat window of the bench sessions: long enough never to fire.
const HEARTBEAT: Duration = Duration::from_secs(3600);

/// A fresh workspace holding `a.txt` (what [`REPORT`] cites).
pub fn workspace() -> Result<TempDir, String> {
    let dir = tempfile::Builder::new()
        .prefix("brood-bench-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary workspace: {e}"))?;
    std::fs::write(dir.path().join("a.txt"), "hello\n")
        .map_err(|e| format!("cannot write the workspace file: {e}"))?;
    Ok(dir)
}

/// Supervisor limits with the cap (and launch concurrency) at `cap` and room for
/// `total` spawns in the session.
pub fn limits(cap: usize, total: usize) -> Limits {
    Limits {
        max_concurrent: cap.max(1),
        launch_concurrency: cap.max(1),
        max_depth: 3,
        max_total: total.max(1),
        heartbeat: HEARTBEAT,
    }
}

/// A session on `dir` whose every model request goes to the mock at `base_url`.
pub async fn open_session(
    dir: &Path,
    base_url: &str,
    limits: Limits,
    max_turns: u32,
) -> Result<Session, String> {
    open_session_trusting(dir, base_url, limits, max_turns, None).await
}

/// [`open_session`], trusting a TLS mock's CA (`ca_pem`) through a user config
/// in `dir/.bench-user` with `[providers.local] ca_cert` — as a user would.
pub async fn open_session_trusting(
    dir: &Path,
    base_url: &str,
    limits: Limits,
    max_turns: u32,
    ca_pem: Option<&str>,
) -> Result<Session, String> {
    let user_dir = match ca_pem {
        None => None,
        Some(pem) => {
            let user = dir.join(".bench-user");
            let ca = user.join("mock-ca.pem");
            std::fs::create_dir_all(&user)
                .and_then(|()| std::fs::write(&ca, pem))
                .and_then(|()| {
                    std::fs::write(
                        user.join("config.toml"),
                        format!("[providers.local]\nca_cert = \"{}\"\n", ca.display()),
                    )
                })
                .map_err(|e| format!("cannot write the bench's user config: {e}"))?;
            Some(user)
        }
    };
    let paths = ConfigPaths {
        user_dir,
        workspace: dir.to_path_buf(),
    };
    let flags = Overrides {
        provider: Some("local".into()),
        base_url: Some(base_url.to_string()),
        model: Some("mock-model".into()),
        api_key_env: None,
        max_turns: Some(max_turns),
        trust_workspace: false,
        ledger_url: None,
    };
    let config =
        Config::load(&paths, &BTreeMap::new(), &flags).map_err(|e| format!("bench config: {e}"))?;
    let mut opts = SessionOptions::new(dir, config);
    opts.limits = Some(limits);
    Session::open(opts)
        .await
        .map_err(|e| format!("opening the session: {e}"))
}

/// Who sent a request to the mock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// The parent (root) run; `step` counts its earlier model answers.
    Parent { tag: String, step: usize },
    /// A child; `tag` is its prompt without [`CHILD`].
    Child { tag: String },
    /// Neither (a bug in the scenario).
    Unknown,
}

/// Classify a request: a fresh child's first user message is its prompt; a forked
/// child carries its parent's messages and then the fork tail (which ends with the
/// task); everything else is the parent.
pub fn who(req: &MockRequest) -> Who {
    let users: Vec<&str> = req
        .messages()
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .collect();
    if let Some(tag) = users.first().and_then(|u| u.strip_prefix(CHILD)) {
        return Who::Child {
            tag: tag.to_string(),
        };
    }
    if let Some(tail) = users.iter().find(|u| u.starts_with("--- fork:")) {
        let task = tail.rsplit("Task:\n").next().unwrap_or("");
        return Who::Child {
            tag: task.strip_prefix(CHILD).unwrap_or(task).to_string(),
        };
    }
    match users.first().and_then(|u| u.strip_prefix(PARENT)) {
        Some(tag) => Who::Parent {
            tag: tag.to_string(),
            step: req.assistant_turns(),
        },
        None => Who::Unknown,
    }
}

/// `n` child prompts tagged `{tag} {i}`.
pub fn child_prompts(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{CHILD}{tag} {i}")).collect()
}

/// This process's resident set size in KiB (`VmRSS` of `/proc/self/status`).
pub fn vm_rss_kib() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "no VmRSS line in /proc/self/status".to_string())
}

/// Raise this process's open-file limit to its hard limit (the memory scenario holds
/// a connection per child, its mock process another). Returns the soft limit now in
/// force.
pub fn raise_open_files() -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let wanted = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
                lim = wanted;
            }
        }
    }
    lim.rlim_cur
}

/// Runs recorded as completed in the ledger of workspace `dir`, read from disk by
/// a fresh reader (after the session closed): every record a run made is durable.
pub fn ledger_completed(dir: &Path) -> Result<usize, String> {
    let reader = brood::ledger::Ledger::open_reader(dir)
        .map_err(|e| format!("cannot open the ledger to check it: {e}"))?;
    let runs = reader
        .list_runs(brood::ledger::ListFilter {
            include_archived: true,
        })
        .map_err(|e| format!("cannot list the ledger's runs: {e}"))?;
    Ok(runs
        .iter()
        .filter(|r| r.run.status.as_str() == "completed")
        .count())
}

/// Count of `snapshot` runs in each status, e.g. `{"completed": 20}`.
pub fn status_counts(session: &Session) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for r in session.supervisor().snapshot() {
        *out.entry(r.status.as_str()).or_insert(0) += 1;
    }
    out
}

/// CPU time used so far by this process's live threads, split into the mock's
/// (threads named `brood-mock…`) and everyone else's (brood, the bench), from each
/// thread's `/proc/self/task/TID/schedstat` (nanoseconds on the CPU). Threads that
/// have exited are not counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSplit {
    pub mock: Duration,
    pub other: Duration,
}

impl CpuSplit {
    pub fn now() -> Result<CpuSplit, String> {
        let tasks = std::fs::read_dir("/proc/self/task")
            .map_err(|e| format!("cannot list /proc/self/task: {e}"))?;
        let mut split = CpuSplit::default();
        for task in tasks.flatten() {
            let dir = task.path();
            // A thread may end between the listing and the reads: skip it.
            let (Ok(comm), Ok(stat)) = (
                std::fs::read_to_string(dir.join("comm")),
                std::fs::read_to_string(dir.join("schedstat")),
            ) else {
                continue;
            };
            let ns: u64 = stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if comm.starts_with("brood-mock") {
                split.mock += Duration::from_nanos(ns);
            } else {
                split.other += Duration::from_nanos(ns);
            }
        }
        Ok(split)
    }

    /// What was used since `earlier`.
    pub fn since(&self, earlier: &CpuSplit) -> CpuSplit {
        CpuSplit {
            mock: self.mock.saturating_sub(earlier.mock),
            other: self.other.saturating_sub(earlier.other),
        }
    }
}
