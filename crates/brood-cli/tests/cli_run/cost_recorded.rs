//! Cost is recorded when each answer is (issue 19): the ledger keeps what every run
//! cost at the prices in force when it ran, so changing `[pricing]` later leaves old
//! runs' cost alone; a run recorded before costs were is priced at today's prices and
//! marked so. Through the `brood` binary against brood-mock.

use brood_mock::{Answer, MockServer};
use serde_json::json;

use crate::common::{outcome, run_local, stderr, Fixture};

/// The user's `[pricing]` for model `m`, in USD per million tokens.
fn set_price(f: &Fixture, input: f64, output: f64) {
    f.user_config(&format!(
        "[pricing.\"m\"]\ninput_per_mtok = {input:?}\noutput_per_mtok = {output:?}\n"
    ));
}

/// A parent that answers at once: 1000 input and 100 output tokens.
fn server() -> MockServer {
    MockServer::start(|_| {
        Answer::text("done")
            .usage(json!({"prompt_tokens": 1000, "completion_tokens": 100}))
            .into()
    })
}

/// `brood run --json PROMPT` against `server`, which must succeed.
fn run_once(f: &Fixture, server: &MockServer, prompt: &str) {
    let out = run_local(f, server, &["--json", prompt]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12
}

#[test]
fn a_runs_cost_stays_what_it_was_when_prices_change_later() {
    let f = Fixture::new();
    let server = server();
    // $2 in, $8 out per million: 1000 × 2 + 100 × 8 = $0.0028.
    set_price(&f, 2.0, 8.0);
    run_once(&f, &server, "first");
    // The price goes up tenfold; the second run pays the new price.
    set_price(&f, 20.0, 80.0);
    run_once(&f, &server, "second");

    let listed = f.runs();
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
    let (code, out, err) = outcome(&f.output(&["agents", "show", id]));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("cost       $0.0028 (priced as recorded)"),
        "{out}"
    );
    let shown = f.show(id);
    assert!(
        close(shown["cost_usd"].as_f64().unwrap(), 0.0028),
        "{shown}"
    );
}

#[test]
fn a_run_recorded_before_costs_were_is_priced_now_and_marked() {
    let f = Fixture::new();
    let server = server();
    set_price(&f, 2.0, 8.0);
    run_once(&f, &server, "old");
    // What an older brood leaves: the row without a recorded cost.
    let db = f.ws.path().join(".brood/state/brood.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE runs SET priced_steps = NULL, cost_usd = 0", [])
        .unwrap();
    drop(conn);
    set_price(&f, 20.0, 80.0);

    let listed = f.runs();
    let r = &listed[0];
    assert_eq!(r["cost_priced_at_read"], true, "{r}");
    assert!(close(r["cost_usd"].as_f64().unwrap(), 0.028), "{r}");
    let id = r["id"].as_str().unwrap();
    let (_, out, _) = outcome(&f.output(&["agents", "show", id]));
    assert!(
        out.contains("$0.0280 (at today's [pricing]: recorded before costs were)"),
        "{out}"
    );
}
