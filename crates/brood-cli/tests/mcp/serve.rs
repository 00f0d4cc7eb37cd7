//! `brood mcp` against a real MCP peer nobody here wrote: the official Python `mcp`
//! SDK's client (tests/mcp/client.py) drives the real binary over stdio while
//! brood's children run against the in-process mock model; then the ledger is
//! checked for what the host did.
//!
//! Interpreters: `BROOD_MCP_PYTHON` (a `:`-separated list, e.g. one venv with
//! `mcp` 1.x and one with 2.x; `.ci/run` sets it), else `python3`. Without the
//! `mcp` package the test is skipped with a note — unless `BROOD_MCP_REQUIRE=1`,
//! which makes a missing package a failure (CI).

use brood_mock::{Answer, MockReply, MockServer};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

use crate::python::interpreters;

/// Children answer with the output contract naming their prompt, each answer
/// 1000 input and 100 output tokens; a prompt starting with HANG never gets an
/// answer (the cancellation case).
fn mock() -> MockServer {
    MockServer::start(|req| {
        let prompt = req.first_user_text().unwrap_or_default().to_string();
        if prompt.starts_with("HANG") {
            return MockReply::Hang;
        }
        Answer::text(format!(
            "SUMMARY: answered {prompt}\nCHANGES: None.\nEVIDENCE:\n- notes.txt:1-1 alpha\nRISKS: None.\nBLOCKERS: None."
        ))
        .usage(serde_json::json!({"prompt_tokens": 1000, "completion_tokens": 100}))
        .into()
    })
}

/// What one answer of [`mock`] costs at the price the full test sets ($2 in, $8
/// out per million), computed here.
const ANSWER_USD: f64 = (1000.0 * 2.0 + 100.0 * 8.0) / 1e6;

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
        let config = home.path().join(".config/brood");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.toml"),
            "[pricing.\"m\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n",
        )
        .unwrap();
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

        // Each finished child carries its usage and cost; the call its total.
        let close = |v: &Value, want: f64| v.as_f64().is_some_and(|c| (c - want).abs() < 1e-12);
        let costs = report["task_costs"].as_array().expect("task costs");
        assert_eq!(costs.len(), 3, "{report}");
        assert!(costs.iter().all(|c| close(c, ANSWER_USD)), "{report}");
        for t in report["task_tree_usage"].as_array().unwrap() {
            assert_eq!(t["requests"], 1, "{t}");
            assert_eq!(t["input_tokens"], 1000, "{t}");
            assert!(close(&t["cost_usd"], ANSWER_USD), "{t}");
        }
        let call = &report["task_usage"];
        assert_eq!(
            (
                &call["requests"],
                &call["input_tokens"],
                &call["output_tokens"]
            ),
            (&3.into(), &3000.into(), &300.into()),
            "{call}"
        );
        assert!(close(&call["cost_usd"], 3.0 * ANSWER_USD), "{call}");
        assert!(close(&report["eval_cost"], ANSWER_USD), "{report}");

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

/// Run the client script in `mode` (see client.py) without waiting.
fn spawn_client(
    py: &str,
    server: &MockServer,
    ws: &Path,
    home: &Path,
    mode: &[&str],
) -> std::process::Child {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    Command::new(py)
        .arg(&client)
        .arg(env!("CARGO_BIN_EXE_brood"))
        .arg(server.base_url())
        .arg(ws)
        .arg(home)
        .args(mode)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the python client")
}

fn client_report(py: &str, child: std::process::Child) -> Value {
    let out = child.wait_with_output().expect("wait for the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{py} client.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    serde_json::from_str(stdout.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("client report: {e}\n{stdout}\n{stderr}"))
}

/// Two hosts on one workspace at once — one over streamable HTTP (`brood mcp
/// --http`), one over stdio — each with its own `brood mcp` process: both fan-outs
/// complete, each child hangs off its own host in the one ledger, the hosts heard
/// progress (client.py checks it), and SIGTERM stops the HTTP server with its host
/// run recorded cancelled.
#[test]
fn several_hosts_on_one_workspace_keep_each_others_runs() {
    use std::io::BufRead;
    for py in interpreters() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
        let server = mock();
        let mut http = Command::new(env!("CARGO_BIN_EXE_brood"))
            .args([
                "mcp",
                "--http",
                "127.0.0.1:0",
                "--provider",
                "local",
                "--model",
                "m",
            ])
            .arg("--base-url")
            .arg(server.base_url())
            .arg("--workspace")
            .arg(ws.path())
            .env("HOME", home.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start brood mcp --http");
        let mut lines = std::io::BufReader::new(http.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("brood mcp --http says where it serves before ending")
                .unwrap();
            if let Some(at) = line.split("serving MCP at ").nth(1) {
                break at.trim().to_string();
            }
        };
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
            "{url}"
        );
        let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

        let a = spawn_client(
            &py,
            &server,
            ws.path(),
            home.path(),
            &["http", &url, "hostA"],
        );
        let b = spawn_client(&py, &server, ws.path(), home.path(), &["stdio", "hostB"]);
        let (a, b) = (client_report(&py, a), client_report(&py, b));

        let status = Command::new("kill")
            .args(["-TERM", &http.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        let code = http.wait().expect("brood mcp --http exits on SIGTERM");
        let stderr = rest.join().unwrap().join("\n");
        assert_eq!(code.code(), Some(1), "SIGTERM exits 1: {stderr}");

        let runs = ledger_runs(ws.path());
        let mut hosts = Vec::new();
        for (report, label) in [(&a, "hostA"), (&b, "hostB")] {
            let ids = report["task_ids"].as_array().expect("task ids");
            assert_eq!(ids.len(), 2, "{report}");
            let parent = run_of(&runs, ids[0].as_str().unwrap())["parent_id"].clone();
            for id in ids {
                let r = run_of(&runs, id.as_str().unwrap());
                assert_eq!(r["status"], "completed", "{r}");
                assert_eq!(r["parent_id"], parent, "one host's children share it: {r}");
                assert!(
                    r["objective"].as_str().unwrap().starts_with(label),
                    "{label}'s child: {r}"
                );
            }
            let host = run_of(&runs, parent.as_str().unwrap());
            assert_eq!(host["agent_type"], "host", "{host}");
            assert_eq!(
                runs.iter().filter(|r| r["parent_id"] == parent).count(),
                2,
                "{label}'s host has exactly its own two children: {runs:?}"
            );
            hosts.push(host.clone());
        }
        assert_ne!(hosts[0]["id"], hosts[1]["id"], "one host run per brood mcp");
        assert_eq!(
            hosts[0]["status"], "cancelled",
            "the HTTP host ended by SIGTERM: {}",
            hosts[0]
        );
        assert!(
            hosts[0]["status_reason"]
                .as_str()
                .unwrap_or_default()
                .contains("SIGTERM"),
            "{}",
            hosts[0]
        );
        assert_eq!(
            hosts[1]["status"], "completed",
            "the stdio host left: {}",
            hosts[1]
        );
    }
}

/// The real-model MCP round trip (`scripts/e2e-local` runs it, with the other
/// real-model tests): the official Python client calls `task` on `brood mcp`, whose
/// explore child runs on the local llama.cpp server; the child ends `completed` and
/// the ledger shows it under the host, with its steps made against that server.
#[test]
#[ignore = "needs the local LLM server: run scripts/e2e-local"]
fn e2e_a_python_host_runs_a_child_on_the_local_llm() {
    let url = crate::local_llm_url();
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    for py in interpreters() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(
            ws.path().join("README.md"),
            "# Demo\nThis project prints the current date.\n",
        )
        .unwrap();
        // Short answers and few steps keep a tiny model's child within a minute.
        let cfg = home.path().join(".config/brood");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(
            cfg.join("config.toml"),
            "max_tokens = 64\ntemperature = 0.0\napi_timeout_secs = 120\n[subagents]\nmax_turns = 3\n",
        )
        .unwrap();
        let out = Command::new(&py)
            .arg(&client)
            .arg(env!("CARGO_BIN_EXE_brood"))
            .arg(&url)
            .arg(ws.path())
            .arg(home.path())
            .arg("e2e")
            .output()
            .expect("run the python client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{py} client.py e2e failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let report: Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("client report: {e}\n{stdout}\n{stderr}"));
        let runs = ledger_runs(ws.path());
        let id = report["task_ids"][0].as_str().expect("the child's id");
        let child = run_of(&runs, id);
        assert_eq!(child["status"], "completed", "{child}");
        assert!(child["steps"].as_u64().unwrap_or(0) >= 1, "{child}");
        let host = run_of(&runs, child["parent_id"].as_str().expect("parent"));
        assert_eq!(host["agent_type"], "host", "{host}");
    }
}
