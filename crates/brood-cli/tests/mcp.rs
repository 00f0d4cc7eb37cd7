//! `brood mcp` against a real MCP peer nobody here wrote: the official Python `mcp`
//! SDK's client (tests/mcp/client.py) drives the real binary over stdio while
//! brood's children run against the in-process mock model; then the ledger is
//! checked for what the host did.
//!
//! Interpreters: `BROOD_MCP_PYTHON` (a `:`-separated list, e.g. one venv with
//! `mcp` 1.x and one with 2.x; `.ci/run` sets it), else `python3`. Without the
//! `mcp` package the test is skipped with a note — unless `BROOD_MCP_REQUIRE=1`,
//! which makes a missing package a failure (CI).

use brood_mock::{MockReply, MockServer};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The interpreters to run the client with; an empty list means skip.
fn interpreters() -> Vec<String> {
    let require = std::env::var("BROOD_MCP_REQUIRE").is_ok_and(|v| v == "1");
    let wanted: Vec<String> = match std::env::var("BROOD_MCP_PYTHON") {
        Ok(list) if !list.is_empty() => list.split(':').map(str::to_string).collect(),
        _ => vec!["python3".into()],
    };
    let mut usable = Vec::new();
    for py in wanted {
        let ok = Command::new(&py)
            .args(["-c", "import mcp"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            usable.push(py);
        } else if require {
            panic!(
                "{py} cannot import the Python `mcp` package and BROOD_MCP_REQUIRE=1; \
                 install it (`python3 -m venv v && v/bin/pip install mcp`) and set BROOD_MCP_PYTHON"
            );
        } else {
            eprintln!("skipping with {py}: no Python `mcp` package (set BROOD_MCP_REQUIRE=1 to fail instead)");
        }
    }
    usable
}

/// Children answer with the output contract naming their prompt; a prompt
/// starting with HANG never gets an answer (the cancellation case).
fn mock() -> MockServer {
    MockServer::start(|req| {
        let prompt = req.first_user_text().unwrap_or_default().to_string();
        if prompt.starts_with("HANG") {
            return MockReply::Hang;
        }
        MockReply::text(format!(
            "SUMMARY: answered {prompt}\nCHANGES: None.\nEVIDENCE:\n- notes.txt:1-1 alpha\nRISKS: None.\nBLOCKERS: None."
        ))
    })
}

fn ledger_runs(ws: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_brood"))
        .args(["agents", "list", "--all", "--json", "--workspace"])
        .arg(ws)
        .output()
        .expect("run brood agents list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("agents list --json")
}

fn run_of<'a>(runs: &'a [Value], id: &str) -> &'a Value {
    runs.iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("run {id} is in the ledger: {runs:?}"))
}

#[test]
fn a_python_mcp_client_drives_brood_mcp_and_the_ledger_records_it() {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    for py in interpreters() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
        let server = mock();
        let out = Command::new(&py)
            .arg(&client)
            .arg(env!("CARGO_BIN_EXE_brood"))
            .arg(server.base_url())
            .arg(ws.path())
            .arg(home.path())
            .output()
            .expect("run the python client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{py} client.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let report: Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("client report: {e}\n{stdout}\n{stderr}"));

        // The host is a root run; every child hangs off it, as under `brood run`.
        let runs = ledger_runs(ws.path());
        let bg = report["open_id"].as_str().expect("open id");
        let host = run_of(
            &runs,
            run_of(&runs, bg)["parent_id"].as_str().expect("parent"),
        );
        assert_eq!(host["agent_type"], "host", "{host}");
        assert_eq!(
            host["status"], "completed",
            "the host run ends when the host leaves"
        );
        let host_id = host["id"].as_str().unwrap();
        for id in report["task_ids"].as_array().unwrap() {
            let r = run_of(&runs, id.as_str().unwrap());
            assert_eq!(r["status"], "completed", "{r}");
            assert_eq!(r["role"], "explore", "{r}");
            assert_eq!(r["parent_id"], host_id, "{r}");
        }
        // The cancelled `task`'s child is recorded cancelled, with why.
        let hung: Vec<&Value> = runs
            .iter()
            .filter(|r| {
                r["objective"]
                    .as_str()
                    .is_some_and(|o| o.starts_with("HANG"))
            })
            .collect();
        assert_eq!(hung.len(), 1, "one hanging child: {runs:?}");
        assert_eq!(hung[0]["status"], "cancelled", "{}", hung[0]);
        // By the host's notifications/cancelled, not by brood mcp's exit.
        let reason = hung[0]["status_reason"].as_str().unwrap_or_default();
        assert!(
            !reason.contains("disconnected"),
            "cancelled by the request's cancellation: {reason}"
        );
        assert_eq!(
            runs.iter().filter(|r| r["parent_id"] == host_id).count(),
            5,
            "three task children, one background, one cancelled: {runs:?}"
        );
    }
}
