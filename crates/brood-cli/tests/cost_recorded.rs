//! Cost is recorded when each answer is (issue 19): the ledger keeps what every run
//! cost at the prices in force when it ran, so changing `[pricing]` later leaves old
//! runs' cost alone; a run recorded before costs were is priced at today's prices and
//! marked so. Through the `brood` binary against brood-mock.

use brood_mock::{Answer, MockServer};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// The brood binary in `ws` with only `HOME` and `PATH` set.
fn brood(home: &Path, ws: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_brood"))
        .current_dir(ws)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(args)
        .output()
        .expect("run brood");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn set_price(home: &Path, input: f64, output: f64) {
    let dir = home.join(".config/brood");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!("[pricing.\"m\"]\ninput_per_mtok = {input:?}\noutput_per_mtok = {output:?}\n"),
    )
    .unwrap();
}

/// A parent that answers at once: 1000 input and 100 output tokens.
fn server() -> MockServer {
    MockServer::start(|_| {
        Answer::text("done")
            .usage(json!({"prompt_tokens": 1000, "completion_tokens": 100}))
            .into()
    })
}

fn runs(home: &Path, ws: &Path) -> Vec<Value> {
    let (code, out, err) = brood(home, ws, &["agents", "list", "--all", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(out.trim())
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn run_once(home: &Path, ws: &Path, server: &MockServer, prompt: &str) {
    let base = server.base_url();
    let (code, _, err) = brood(
        home,
        ws,
        &[
            "run",
            "--provider",
            "local",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
            prompt,
        ],
    );
    assert_eq!(code, 0, "{err}");
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12
}

#[test]
fn a_runs_cost_stays_what_it_was_when_prices_change_later() {
    let (home, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let server = server();
    // $2 in, $8 out per million: 1000 × 2 + 100 × 8 = $0.0028.
    set_price(home.path(), 2.0, 8.0);
    run_once(home.path(), ws.path(), &server, "first");
    // The price goes up tenfold; the second run pays the new price.
    set_price(home.path(), 20.0, 80.0);
    run_once(home.path(), ws.path(), &server, "second");

    let listed = runs(home.path(), ws.path());
    assert_eq!(listed.len(), 2, "{listed:?}");
    let cost = |objective: &str| {
        let r = listed
            .iter()
            .find(|r| r["objective"] == objective)
            .unwrap_or_else(|| panic!("no run {objective}: {listed:?}"));
        assert!(r.get("cost_priced_at_read").is_none(), "{r}");
        r["cost_usd"].as_f64().expect("a recorded cost")
    };
    assert!(close(cost("first"), 0.0028), "{}", cost("first"));
    assert!(close(cost("second"), 0.028), "{}", cost("second"));

    let first = listed.iter().find(|r| r["objective"] == "first").unwrap();
    let id = first["id"].as_str().unwrap();
    let (code, out, err) = brood(home.path(), ws.path(), &["agents", "show", id]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("cost       $0.0028 (priced as recorded)"),
        "{out}"
    );
    let (_, out, _) = brood(home.path(), ws.path(), &["agents", "show", id, "--json"]);
    let shown: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        close(shown["cost_usd"].as_f64().unwrap(), 0.0028),
        "{shown}"
    );
}

#[test]
fn a_run_recorded_before_costs_were_is_priced_now_and_marked() {
    let (home, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let server = server();
    set_price(home.path(), 2.0, 8.0);
    run_once(home.path(), ws.path(), &server, "old");
    // What an older brood leaves: the row without a recorded cost.
    let db = ws.path().join(".brood/state/brood.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE runs SET priced_steps = NULL, cost_usd = 0", [])
        .unwrap();
    drop(conn);
    set_price(home.path(), 20.0, 80.0);

    let listed = runs(home.path(), ws.path());
    let r = &listed[0];
    assert_eq!(r["cost_priced_at_read"], true, "{r}");
    assert!(close(r["cost_usd"].as_f64().unwrap(), 0.028), "{r}");
    let id = r["id"].as_str().unwrap();
    let (_, out, _) = brood(home.path(), ws.path(), &["agents", "show", id]);
    assert!(
        out.contains("$0.0280 (at today's [pricing]: recorded before costs were)"),
        "{out}"
    );
}
