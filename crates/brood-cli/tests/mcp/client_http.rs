//! brood as an MCP client over streamable HTTP, end to end: `url` servers with
//! their bearer token and headers (brood's own `config.toml` and a workspace's
//! `.mcp.json`), a server dying mid-call, the token kept out of every output — against
//! the same Python SDK test server (tests/mcp/server.py) served over HTTP.

use brood_mock::{MockReply, MockServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::stderr;
use crate::python::interpreters;

use super::client::*;
/// The test server serving streamable HTTP on a loopback port (killed on drop).
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    /// `py server.py --http <port>` (0: any) with `env`, once it listens.
    fn start(py: &str, port: u16, env: &[(&str, &Path)], token: Option<&str>) -> HttpServer {
        use std::io::BufRead;
        let mut cmd = Command::new(py);
        cmd.arg(server_script())
            .args(["--http", &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(t) = token {
            cmd.env("BROOD_TEST_TOKEN", t);
        }
        let mut child = cmd.spawn().expect("start the HTTP test server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("LISTENING ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{py}: the HTTP server said {line:?}"));
        HttpServer { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every file under `dir`, read whole (lossy), with its path.
fn all_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(all_files(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out
}

const TOKEN: &str = "tok-7f3a-SECRET-91c2";

#[test]
fn an_http_server_gets_its_token_and_headers_and_its_tools_are_granted_like_stdio_ones() {
    for py in interpreters() {
        let home = tempfile::tempdir().unwrap();
        let seen = home.path().join("headers.jsonl");
        let starts = home.path().join("starts.txt");
        let http = HttpServer::start(
            &py,
            0,
            &[
                ("BROOD_TEST_HEADERS", seen.as_path()),
                ("BROOD_TEST_STARTS", starts.as_path()),
            ],
            Some(TOKEN),
        );
        let f = fixture(
            &py,
            &format!(
                "[mcp_servers.h]\nurl = {url:?}\nbearer_token_env_var = \"H_TOKEN\"\n\
                 http_headers = {{ \"X-Brood-Test\" = \"static-1\" }}\n\
                 env_http_headers = {{ \"X-From-Env\" = \"H_HDR\", \"X-Unset\" = \"H_NONE\" }}\n\
                 [mcp_servers.nokey]\nurl = {url:?}\n\
                 [mcp_servers.down]\nurl = \"http://127.0.0.1:{down}/mcp\"\nstartup_timeout_secs = 5\n",
                url = http.url(),
                down = closed_port(),
            ),
        );
        let server = MockServer::start(|req| {
            let first = req.first_user_text().unwrap_or_default();
            let step = req.assistant_turns();
            if first.contains("EXPLORE-JOB") {
                return match step {
                    0 => MockReply::tool_calls([
                        ("mcp__h__lookup", json!({"key": "k9"})),
                        ("mcp__h__deploy", json!({"target": "prod"})),
                    ]),
                    _ => MockReply::text(CONTRACT),
                };
            }
            match step {
                0 => MockReply::tool_call(
                    "task",
                    json!({"description": "EXPLORE-JOB look k9 up", "agent_type": "explore"}),
                ),
                1 => MockReply::tool_call("mcp__h__deploy", json!({"target": "staging"})),
                _ => MockReply::text("PARENT-DONE"),
            }
        });
        let base = server.base_url();
        let out = f
            .command()
            .env("H_TOKEN", TOKEN)
            .env("H_HDR", "from-env-2")
            .args(["run", "--provider", "local", "--base-url", &base])
            .args(["--model", "m", "--json", "parent: use the HTTP server"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{py}: {err}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["final"], "PARENT-DONE", "{py}");

        // The server without a token and the one not listening: one warning
        // each, naming the server; the run went on.
        let line = |name: &str| {
            err.lines()
                .find(|l| l.contains(&format!("MCP server '{name}' is not available")))
                .unwrap_or_else(|| panic!("{py}: no warning for {name}: {err}"))
                .to_string()
        };
        assert!(
            line("nokey").contains("401") || line("nokey").contains("uth"),
            "{py}: {err}"
        );
        assert!(line("down").contains("127.0.0.1"), "{py}: {err}");

        let reqs = server.captured();
        let of = |needle: &str, step: usize| {
            reqs.iter()
                .find(|r| {
                    r.first_user_text().unwrap_or_default().contains(needle)
                        && r.assistant_turns() == step
                })
                .unwrap_or_else(|| panic!("{py}: no step {step} request for {needle}"))
        };
        let parent_tools = offered(of("parent: use", 0));
        assert!(
            parent_tools.contains(&"mcp__h__deploy".into()),
            "{py}: {parent_tools:?}"
        );
        assert!(
            !parent_tools.iter().any(|t| t.starts_with("mcp__nokey__")),
            "{py}"
        );
        let explore = tool_results(of("EXPLORE-JOB", 1));
        assert!(
            explore[0].starts_with("LOOKUP k9 from pid "),
            "{py}: {explore:?}"
        );
        assert!(
            explore[1].contains("mcp__h__deploy") && explore[1].contains("not allowed for explore"),
            "{py}: {explore:?}"
        );
        let parent = tool_results(of("parent: use", 2));
        assert_eq!(
            parent.last().map(String::as_str),
            Some("DEPLOYED staging"),
            "{py}"
        );

        // What the server saw: every request of `h` carried the token and both
        // headers (not the one whose variable is unset); `nokey`'s none. One MCP
        // session served the whole tree.
        let seen: Vec<Value> = std::fs::read_to_string(&seen)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let with_token: Vec<&Value> = seen
            .iter()
            .filter(|h| h["authorization"] == format!("Bearer {TOKEN}"))
            .collect();
        assert!(with_token.len() >= 4, "{py}: {seen:?}");
        for h in &with_token {
            assert_eq!(h["x-brood-test"], "static-1", "{py}: {h}");
            assert_eq!(h["x-from-env"], "from-env-2", "{py}: {h}");
            assert!(h.get("x-unset").is_none(), "{py}: {h}");
        }
        assert!(
            seen.iter().any(|h| h.get("authorization").is_none()),
            "{py}: nokey's requests: {seen:?}"
        );
        let sessions: std::collections::BTreeSet<&str> = with_token
            .iter()
            .filter_map(|h| h["mcp-session-id"].as_str())
            .collect();
        assert_eq!(sessions.len(), 1, "{py}: {seen:?}");

        // The token is nowhere brood writes: output, ledger, transcripts, config show.
        let shown = f.output(&["config", "show"]);
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        assert!(
            shown.contains(&format!(
                "# mcp server h: enabled, http {}, token from $H_TOKEN, headers X-Brood-Test X-From-Env X-Unset",
                http.url()
            )),
            "{py}: {shown}"
        );
        for (what, text) in [
            (
                "stdout".into(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            ),
            ("stderr".into(), err.clone()),
            ("config show".into(), shown),
        ]
        .into_iter()
        .chain(
            all_files(&f.ws.path().join(".brood"))
                .into_iter()
                .map(|(p, t)| (p.display().to_string(), t)),
        ) {
            assert!(!text.contains(TOKEN), "{py}: the token is in {what}");
        }
        let runs = f.runs();
        let explore_run = runs.iter().find(|r| r["role"] == "explore").unwrap();
        let mut done = finished_tools(&f, explore_run["id"].as_str().unwrap());
        done.sort();
        assert_eq!(
            done,
            [
                ("mcp__h__deploy".to_string(), false),
                ("mcp__h__lookup".to_string(), true)
            ],
            "{py}"
        );
        if std::env::var_os("BROOD_TEST_SHOW").is_some() {
            eprintln!("{err}");
        }
    }
}

#[test]
fn an_http_server_that_dies_mid_call_is_a_tool_error_and_is_connected_again_on_next_use() {
    let Some(py) = interpreters().into_iter().next() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let starts = home.path().join("http-starts.txt");
    let first = HttpServer::start(&py, 0, &[("BROOD_TEST_STARTS", starts.as_path())], None);
    let port = first.port;
    let f = fixture(
        &py,
        &format!(
            "[mcp_servers.h]\nurl = {:?}\ntool_timeout_secs = 20\n",
            first.url()
        ),
    );
    let live = std::sync::Arc::new(std::sync::Mutex::new(Some(first)));
    let (slot, py2, starts2) = (live.clone(), py.clone(), starts.clone());
    let server = MockServer::start(move |req| match req.assistant_turns() {
        0 => MockReply::tool_call("mcp__h__crash", json!({"why": "test"})),
        1 => {
            // The server died in the call; start it again on its port, as a
            // supervisor (systemd, a container) would.
            let again = HttpServer::start(
                &py2,
                port,
                &[("BROOD_TEST_STARTS", starts2.as_path())],
                None,
            );
            *slot.lock().unwrap() = Some(again);
            MockReply::tool_call("mcp__h__lookup", json!({"key": "after"}))
        }
        _ => MockReply::text("PARENT-DONE"),
    });
    let out = run(&f, &server, &[], "crash it over http");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let reqs = server.captured();
    assert_eq!(reqs.len(), 3);
    let crashed = tool_results(&reqs[1]);
    assert!(
        crashed[0].contains("MCP server 'h'") && crashed[0].contains("connects again"),
        "{crashed:?}"
    );
    if std::env::var_os("BROOD_TEST_SHOW").is_some() {
        eprintln!("{crashed:?}");
    }
    let after = tool_results(&reqs[2]);
    let pids: Vec<String> = std::fs::read_to_string(&starts)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(
        after[1].starts_with("LOOKUP after from pid ") && after[1].ends_with(&pids[1]),
        "{after:?} {pids:?}"
    );
    let runs = f.runs();
    let done = finished_tools(&f, runs[0]["id"].as_str().unwrap());
    assert_eq!(
        done,
        [
            ("mcp__h__crash".to_string(), false),
            ("mcp__h__lookup".to_string(), true)
        ]
    );
    drop(live);
}

#[test]
fn a_trusted_mcp_json_connects_http_servers_with_headers_and_expands_variables() {
    let Some(py) = interpreters().into_iter().next() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let seen = home.path().join("headers.jsonl");
    let http = HttpServer::start(
        &py,
        0,
        &[("BROOD_TEST_HEADERS", seen.as_path())],
        Some(TOKEN),
    );
    let f = fixture(&py, "");
    let local_starts = home.path().join("local-starts.txt");
    std::fs::write(
        f.ws.path().join(".mcp.json"),
        serde_json::to_string_pretty(&json!({"mcpServers": {
            "web": {
                "type": "http",
                "url": "http://127.0.0.1:${WEB_PORT}/mcp",
                "headers": {"Authorization": "Bearer ${WEB_TOKEN}", "X-Team": "${TEAM:-core}"}
            },
            "local": {
                "command": py,
                "args": ["${SCRIPTS}/server.py"],
                "env": {"BROOD_TEST_STARTS": "${LOCAL_STARTS}"}
            },
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "unset": {"command": "${NOPE_NOT_SET}"}
        }}))
        .unwrap(),
    )
    .unwrap();
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 if req
            .first_user_text()
            .unwrap_or_default()
            .contains("trusted") =>
        {
            MockReply::tool_calls([
                ("mcp__web__lookup", json!({"key": "w1"})),
                ("mcp__local__lookup", json!({"key": "l1"})),
            ])
        }
        _ => MockReply::text("PARENT-DONE"),
    });
    let run_with = |extra: &[&str], prompt: &str| {
        let base = server.base_url();
        f.command()
            .env("WEB_PORT", http.port.to_string())
            .env("WEB_TOKEN", TOKEN)
            .env("SCRIPTS", server_script().parent().unwrap())
            .env("LOCAL_STARTS", &local_starts)
            .args([
                "run",
                "--provider",
                "local",
                "--base-url",
                &base,
                "--model",
                "m",
                "--json",
            ])
            .args(extra)
            .arg(prompt)
            .output()
            .unwrap()
    };

    // Untrusted: the file is not used at all; nothing reaches its servers.
    let out = run_with(&[], "untrusted run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ignoring mcpServers in"),
        "{}",
        stderr(&out)
    );
    assert!(
        !seen.exists(),
        "an untrusted .mcp.json's server was contacted"
    );
    assert!(
        !local_starts.exists(),
        "an untrusted .mcp.json's command ran"
    );

    let out = run_with(&["--trust"], "trusted run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("mcpServers.old")
            && err.contains("SSE transport")
            && err.contains("not supported"),
        "{err}"
    );
    assert!(
        err.contains("MCP server 'unset' is not available")
            && err.contains("${NOPE_NOT_SET} is not set"),
        "{err}"
    );
    let results = tool_results(server.captured().last().unwrap());
    assert!(results[0].starts_with("LOOKUP w1 from pid "), "{results:?}");
    assert!(results[1].starts_with("LOOKUP l1 from pid "), "{results:?}");
    assert_eq!(
        std::fs::read_to_string(&local_starts)
            .unwrap()
            .lines()
            .count(),
        1
    );
    let seen: Vec<Value> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!seen.is_empty());
    for h in &seen {
        assert_eq!(h["authorization"], format!("Bearer {TOKEN}"), "{h}");
        assert_eq!(h["x-team"], "core", "{h}");
    }

    // config show (the workspace trusted by the user's config) prints the
    // file's text, never an expanded value.
    let user = f.home.path().join(".config/brood/config.toml");
    let before = std::fs::read_to_string(&user).unwrap();
    let ws = f.ws.path().canonicalize().unwrap();
    std::fs::write(
        &user,
        format!(
            "trusted_workspaces = [{:?}]\n{before}",
            ws.display().to_string()
        ),
    )
    .unwrap();
    let shown = f
        .command()
        .env("WEB_TOKEN", TOKEN)
        .args(["config", "show"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("# mcp server web: enabled, http http://127.0.0.1:${WEB_PORT}/mcp"),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "{text}");
}
