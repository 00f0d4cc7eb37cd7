//! Cost you can see and cap (issue 19), through the `brood` binary against
//! brood-mock: budgets that hold, prices, what the parent's requests name, request
//! sizes per role, the status line.

use brood_mock::{Answer, MockServer};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

use crate::common::{is_child, json_of, run_local, text, Fixture};

/// A workspace with `notes.txt`, and a home with `user_config` as its brood config.
fn fixture(user_config: &str) -> Fixture {
    let f = Fixture::with_notes("alpha\nbeta\n");
    f.user_config(user_config);
    f
}

/// The JSON of the last tool result in a request.
fn last_tool_result(req: &Value) -> Value {
    let msgs = req["messages"].as_array().unwrap();
    let tool = msgs.iter().rev().find(|m| m["role"] == "tool").unwrap();
    serde_json::from_str(tool["content"].as_str().unwrap()).unwrap()
}

/// The issue's reproduction: one slot, a 60-token tree budget, ten `task`
/// children, 15 tokens an answer. Once the budget is spent no child starts (each
/// is recorded cancelled naming the budget), the running one makes no repair
/// request past it, and the parent's tool result names the budget.
#[test]
fn a_tree_token_budget_holds_with_ten_children() {
    let f = fixture("[subagents]\nmax_concurrent = 1\ntree_token_budget = 60\n");
    let server = MockServer::start(|req| {
        let answer = if is_child(req) {
            // Missing sections: a child under budget would be asked to repair.
            Answer::text("SUMMARY: looked")
        } else if req.assistant_turns() == 0 {
            let prompts: Vec<String> = (0..10).map(|i| format!("child {i}")).collect();
            Answer::new().tool_call("task", json!({ "prompts": prompts }))
        } else {
            Answer::text("parent done")
        };
        answer
            .usage(json!({"prompt_tokens": 10, "completion_tokens": 5}))
            .into()
    });
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let reqs = server.requests();
    // Parent 1 + children until 60 tokens + the parent's one final report.
    assert!(
        reqs.len() <= 6,
        "the model got {} requests for a 60-token budget",
        reqs.len()
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["usage"]["requests"], reqs.len() as u64);
    // The parent's last request carries the task result.
    let last_parent = reqs
        .iter()
        .rev()
        .find(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "tool")
        })
        .expect("the parent saw its task result");
    let task = last_tool_result(last_parent);
    assert!(
        task["budget"]
            .as_str()
            .is_some_and(|b| b.contains("tree_token_budget = 60")),
        "{task}"
    );
    let results = task["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    let cancelled: Vec<&Value> = results
        .iter()
        .filter(|r| r["status"] == "cancelled")
        .collect();
    assert!(cancelled.len() >= 7, "{task}");
    for r in &cancelled {
        assert!(
            r["result"]
                .as_str()
                .is_some_and(|t| t.contains("tree_token_budget = 60")),
            "{r}"
        );
    }
    // The ledger says the same: the cancelled children never made a request.
    let list = f
        .command()
        .args(["agents", "list", "--json"])
        .output()
        .unwrap();
    let (listed, err) = text(&list);
    assert_eq!(list.status.code(), Some(0), "{err}");
    let runs: Value = serde_json::from_str(listed.trim()).unwrap();
    let runs = runs.as_array().or(runs["runs"].as_array()).unwrap().clone();
    let n_cancelled = runs.iter().filter(|r| r["status"] == "cancelled").count();
    assert_eq!(n_cancelled, cancelled.len(), "{runs:?}");
    // `m` has no price: no run has a cost, not even those that made no request.
    assert!(runs.iter().all(|r| r["cost_usd"].is_null()), "{runs:?}");
}

/// A parent that fans out to three children; every answer has distinct usage
/// (with cached tokens). Returns the server and, per answer, (is_child, input,
/// cached, output).
type Answered = std::sync::Arc<std::sync::Mutex<Vec<(bool, u64, u64, u64)>>>;

fn fan_out_server(children: usize) -> (MockServer, Answered) {
    let answered: Answered = Default::default();
    let log = answered.clone();
    let server = MockServer::start(move |req| {
        let mut log = log.lock().unwrap();
        let n = log.len() as u64 + 1;
        let (input, cached, output) = (1000 * n + 7, 100 * n, 10 * n + 3);
        let child = is_child(req);
        log.push((child, input, cached, output));
        let answer = if child {
            Answer::text(
                "SUMMARY: looked\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none",
            )
        } else if req.assistant_turns() == 0 {
            let prompts: Vec<String> = (0..children).map(|i| format!("child {i}")).collect();
            Answer::new().tool_call("task", json!({ "prompts": prompts }))
        } else {
            Answer::text("parent done")
        };
        answer
            .usage(json!({
                "prompt_tokens": input,
                "completion_tokens": output,
                "prompt_tokens_details": {"cached_tokens": cached}
            }))
            .into()
    });
    (server, answered)
}

const PRICED: &str =
    "[pricing.\"m\"]\ninput_per_mtok = 2.0\ncached_input_per_mtok = 0.5\noutput_per_mtok = 8.0\n";

/// The price of one answer at PRICED, computed here independently.
fn priced(input: u64, cached: u64, output: u64) -> f64 {
    ((input - cached) as f64 * 2.0 + cached as f64 * 0.5 + output as f64 * 8.0) / 1e6
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

/// `brood agents list --json`: the runs of the last session.
fn agents_list(f: &Fixture) -> Vec<Value> {
    serde_json::from_value(json_of(&f.output(&["agents", "list", "--json"]))).unwrap()
}

/// `cost_usd` of the tree, of the parent, per model and per recorded run equals the
/// sum over every answer the mock gave, at the user's prices.
#[test]
fn cost_usd_is_the_sum_over_every_answer_at_the_users_prices() {
    let f = fixture(PRICED);
    let (server, answered) = fan_out_server(3);
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let log = answered.lock().unwrap().clone();
    assert_eq!(log.len(), 5, "parent 2 + 3 children");
    let tree: f64 = log.iter().map(|a| priced(a.1, a.2, a.3)).sum();
    let parent: f64 = log
        .iter()
        .filter(|a| !a.0)
        .map(|a| priced(a.1, a.2, a.3))
        .sum();
    let got = v["usage"]["cost_usd"].as_f64().expect("a number");
    assert!(close(got, tree), "tree {got} != {tree}: {v}");
    let got = v["parent_usage"]["cost_usd"].as_f64().unwrap();
    assert!(close(got, parent), "parent {got} != {parent}");
    let per_model = &v["usage"]["models"]["m"];
    assert_eq!(per_model["requests"], 5, "{v}");
    assert!(close(per_model["cost_usd"].as_f64().unwrap(), tree));
    // Per run, from the ledger: the runs' costs add up to the tree's.
    let runs = agents_list(&f);
    assert_eq!(runs.len(), 4);
    let sum: f64 = runs.iter().map(|r| r["cost_usd"].as_f64().unwrap()).sum();
    assert!(close(sum, tree), "runs {sum} != tree {tree}");
    let id = runs[0]["id"].as_str().unwrap();
    let show = f
        .command()
        .args(["agents", "show", id, "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_str(text(&show).0.trim()).unwrap();
    assert_eq!(shown["cost_usd"], runs[0]["cost_usd"]);
    let show = f.command().args(["agents", "show", id]).output().unwrap();
    let want = format!(
        "cost       ${:.4} (priced as recorded)",
        runs[0]["cost_usd"].as_f64().unwrap()
    );
    assert!(
        text(&show).0.contains(&want),
        "no `{want}`: {}",
        text(&show).0
    );
}

/// Without a price, `cost_usd` is null everywhere: never 0, never invented.
#[test]
fn an_unpriced_model_has_a_null_cost_everywhere() {
    let f = fixture("[pricing.\"other-model\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n");
    let (server, _) = fan_out_server(2);
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    for key in ["usage", "parent_usage"] {
        assert!(v[key]["cost_usd"].is_null(), "{key}: {v}");
    }
    assert!(v["usage"]["models"]["m"]["cost_usd"].is_null());
    for r in agents_list(&f) {
        assert!(r.get("cost_usd").is_some_and(Value::is_null), "{r}");
    }
}

/// A workspace config may not set prices (it could hide spending); a bad price in
/// the user's config names the key.
#[test]
fn prices_come_only_from_the_users_config_and_are_checked() {
    let f = fixture(&format!(
        "{PRICED}[subagents]\ntree_cost_budget_usd = 2.5\n"
    ));
    let show = f.command().args(["config", "show"]).output().unwrap();
    let (shown, _) = text(&show);
    assert!(
        shown.contains(
            "pricing.\"m\" = input 2 / cached input 0.5 / output 8 USD per million tokens"
        ) && shown.contains("subagents.tree_cost_budget_usd = 2.5"),
        "{shown}"
    );

    let f = fixture("");
    std::fs::create_dir_all(f.ws.path().join(".brood")).unwrap();
    std::fs::write(
        f.ws.path().join(".brood/config.toml"),
        "[pricing.\"m\"]\ninput_per_mtok = 0.0\noutput_per_mtok = 0.0\n",
    )
    .unwrap();
    let (server, _) = fan_out_server(1);
    let out = run_local(&f, &server, &["--json", "x"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key `pricing`: may only be set in the user's config"),
        "{stderr}"
    );
    assert_eq!(server.request_count(), 0);

    let f = fixture("[pricing.\"gpt-4.1\"]\ninput_per_mtok = -3\noutput_per_mtok = 1\n");
    let out = run_local(&f, &server, &["x"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("pricing.\"gpt-4.1\"") && stderr.contains("input_per_mtok = -3"),
        "{stderr}"
    );
}

/// A tree cost budget of a few answers' worth with ten children: the model is
/// reached a handful of times and the parent is told which budget stopped it.
#[test]
fn a_tree_cost_budget_holds_with_ten_children() {
    // 15 tokens an answer at $1 per million in and out: $0.000015 an answer.
    let f = fixture(
        "[subagents]\nmax_concurrent = 1\ntree_cost_budget_usd = 0.00006\n\
         [pricing.\"m\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n",
    );
    let server = MockServer::start(|req| {
        let answer = if is_child(req) {
            Answer::text("SUMMARY: looked")
        } else if req.assistant_turns() == 0 {
            let prompts: Vec<String> = (0..10).map(|i| format!("child {i}")).collect();
            Answer::new().tool_call("task", json!({ "prompts": prompts }))
        } else {
            Answer::text("parent done")
        };
        answer
            .usage(json!({"prompt_tokens": 10, "completion_tokens": 5}))
            .into()
    });
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let reqs = server.requests();
    assert!(reqs.len() <= 6, "{} requests", reqs.len());
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let cost = v["usage"]["cost_usd"].as_f64().unwrap();
    assert!(close(cost, reqs.len() as f64 * 15e-6), "{v}");
    let task = reqs
        .iter()
        .rev()
        .find(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "tool")
        })
        .map(last_tool_result)
        .unwrap();
    assert!(
        task["budget"]
            .as_str()
            .is_some_and(|b| b.contains("tree_cost_budget_usd = 0.00006")),
        "{task}"
    );
}

/// A definition's `token_budget` lowers the user's, never raises it: each child
/// lists the directory for as long as it is offered tools (15 tokens an answer).
#[test]
fn a_definitions_budget_only_narrows_the_users() {
    let f = fixture("[subagents]\ntoken_budget = 100\n");
    let agents = f.ws.path().join(".brood/agents");
    std::fs::create_dir_all(&agents).unwrap();
    for (name, budget) in [("tight", 20), ("loose", 100000)] {
        std::fs::write(
            agents.join(format!("{name}.md")),
            format!("---\nname: {name}\ndescription: lists\ntoken_budget: {budget}\n---\nList.\n"),
        )
        .unwrap();
    }
    let server = MockServer::start(|req| {
        let tools = req.body()["tools"].as_array().map_or(0, |t| t.len());
        let answer = if is_child(req) {
            if tools > 0 {
                Answer::new().tool_call("list_dir", json!({}))
            } else {
                Answer::text(
                    "SUMMARY: listed\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none",
                )
            }
        } else if req.assistant_turns() == 0 {
            return brood_mock::MockReply::tool_calls([
                (
                    "task",
                    json!({"prompts": ["child tight"], "agent_type": "tight"}),
                ),
                (
                    "task",
                    json!({"prompts": ["child loose"], "agent_type": "loose"}),
                ),
            ]);
        } else {
            Answer::text("parent done")
        };
        answer
            .usage(json!({"prompt_tokens": 10, "completion_tokens": 5}))
            .into()
    });
    let out = run_local(&f, &server, &["--json", "delegate"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let count = |who: &str| {
        server
            .captured()
            .iter()
            .filter(|r| r.first_user_text() == Some(who))
            .count()
    };
    // 15, 30 ≥ 20 → report: 3 requests. 15 … 105 ≥ 100 → report: 8.
    assert_eq!(count("child tight"), 3);
    assert_eq!(count("child loose"), 8);
}

fn define(dir: &Path, name: &str, description: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(format!("{name}.md")),
        format!("---\nname: {name}\ndescription: {description:?}\nrole: review\n---\nReview.\n"),
    )
    .unwrap();
}

/// The `task` tool's description in a captured request.
fn task_description(req: &Value) -> String {
    req["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "task")
        .map(|t| t["function"]["description"].as_str().unwrap().to_string())
        .unwrap()
}

fn tool_names(req: &Value) -> Vec<String> {
    req["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// The parent's first request as sent, with the user's and workspace's definitions.
fn first_parent_request(f: &Fixture) -> (Value, usize) {
    let server = MockServer::start(|_| brood_mock::MockReply::text("ok"));
    let out = run_local(f, &server, &["hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let raw = server.raw_requests();
    (server.requests()[0].clone(), raw[0].len())
}

/// Three definitions are named (with their one-line descriptions) in the parent's
/// request, sorted, workspace before user, next to the built-in roles.
#[test]
fn defined_agents_are_named_in_the_parents_request() {
    let f = fixture("");
    let ws_agents = f.ws.path().join(".brood/agents");
    define(&ws_agents, "zeta-auditor", "Audits unsafe blocks");
    define(
        &ws_agents,
        "beta-checker",
        "Checks licences\nsecond line not shown",
    );
    define(
        &f.home.path().join(".config/brood/agents"),
        "alpha-user",
        "The user's own",
    );
    let (req, _) = first_parent_request(&f);
    let d = task_description(&req);
    let at = |s: &str| d.find(s).unwrap_or_else(|| panic!("{s:?} not in {d}"));
    at("explore (");
    at("review (");
    let (b, z, a) = (
        at("beta-checker (Checks licences)"),
        at("zeta-auditor (Audits unsafe blocks)"),
        at("alpha-user (The user's own)"),
    );
    assert!(b < z && z < a, "sorted, workspace before user: {d}");
    assert!(!d.contains("second line"), "{d}");
    assert!(!tool_names(&req).contains(&"agent_types".to_string()));
}

/// 150 definitions add at most 2 KB to the parent's request; the ones that did not
/// fit are returned by `agent_types`, filterable by a word.
#[test]
fn a_hundred_and_fifty_definitions_stay_within_two_kilobytes() {
    let f = fixture("");
    let (_, bare) = first_parent_request(&f);
    let dir = f.ws.path().join(".brood/agents");
    for i in 0..150 {
        define(
            &dir,
            &format!("agent-{i:03}"),
            &format!("Specialist number {i} for the subsystem called part{i}"),
        );
    }
    let (req, with) = first_parent_request(&f);
    println!("parent request: {bare} bytes bare, {with} with 150 definitions");
    assert!(
        with - bare <= 2048,
        "150 definitions added {} bytes",
        with - bare
    );
    let d = task_description(&req);
    assert!(d.contains("agent-000 ("), "{d}");
    assert!(!d.contains("agent-149"), "{d}");
    assert!(d.contains("more: agent_types lists them"), "{d}");
    assert!(tool_names(&req).contains(&"agent_types".to_string()));

    // The model asks for the rest, then for one word.
    let server = MockServer::start(|req| match req.assistant_turns() {
        0 => brood_mock::MockReply::tool_call("agent_types", json!({})),
        1 => brood_mock::MockReply::tool_call("agent_types", json!({"match": "PART149"})),
        _ => brood_mock::MockReply::text("ok"),
    });
    let out = run_local(&f, &server, &["which agents?"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let reqs = server.requests();
    let rest = last_tool_result(&reqs[1]);
    let names: Vec<&str> = rest["agent_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().split(' ').next().unwrap())
        .collect();
    // The first of the rest, and how many are left past one answer's limit.
    let first_rest = names[0];
    assert!(
        !d.contains(&format!("{first_rest} (")),
        "{first_rest} was listed"
    );
    assert!(
        !names.contains(&"agent-000"),
        "listed ones are not repeated"
    );
    let more = rest["more"].as_str().unwrap_or_default();
    let listed = d.matches("agent-").count();
    assert_eq!(
        names.len()
            + listed
            + more
                .split(' ')
                .next()
                .unwrap()
                .parse::<usize>()
                .unwrap_or(0),
        150,
        "{more}"
    );
    let one = last_tool_result(&reqs[2]);
    assert_eq!(one["agent_types"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(
        one["agent_types"][0],
        "agent-149 [review, workspace]: Specialist number 149 for the subsystem called part149"
    );
}

/// The first request of each role's child with a one-line prompt, and the parent's,
/// measured at the endpoint: (explore, review, general, parent) bytes, plus the
/// bodies of two explore siblings' first requests.
fn first_request_sizes() -> ([usize; 4], Vec<u8>, Vec<u8>) {
    let f = fixture("");
    let server = MockServer::start(|req| {
        if is_child(req) {
            return Answer::text(
                "SUMMARY: ok\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none",
            )
            .into();
        }
        match req.assistant_turns() {
            0 => brood_mock::MockReply::tool_calls([
                (
                    "task",
                    json!({"prompts": ["child e1", "child e2"], "agent_type": "explore"}),
                ),
                (
                    "task",
                    json!({"prompts": ["child r"], "agent_type": "review"}),
                ),
                ("task", json!({"prompts": ["child g"]})),
            ]),
            _ => brood_mock::MockReply::text("done"),
        }
    });
    let out = run_local(&f, &server, &["look around"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let raw = server.raw_requests();
    let captured = server.captured();
    let body = |who: &str| {
        let i = captured
            .iter()
            .position(|r| r.first_user_text() == Some(who))
            .unwrap_or_else(|| panic!("no request of {who}"));
        raw[i].clone()
    };
    let sizes = [
        body("child e1").len(),
        body("child r").len(),
        body("child g").len(),
        body("look around").len(),
    ];
    (sizes, body("child e1"), body("child e2"))
}

/// Per-role first requests stay under the issue's goals, and siblings' requests are
/// byte-identical up to their task (so provider prefix caches hit).
#[test]
fn first_requests_are_lean_per_role_and_siblings_share_their_prefix() {
    let ([explore, review, general, parent], e1, e2) = first_request_sizes();
    println!("first request bytes: explore {explore}, review {review}, general {general}, parent {parent}");
    assert!(explore <= 4096, "explore {explore}");
    assert!(review <= 4096, "review {review}");
    assert!(general <= 8192, "general {general}");
    assert!(parent <= 8192, "parent {parent}");
    let common = e1.iter().zip(&e2).take_while(|(a, b)| a == b).count();
    let tail = String::from_utf8_lossy(&e1[common..]);
    assert!(
        tail.starts_with("1\"") && e1.len() - common < 64,
        "siblings differ before their task: …{}",
        String::from_utf8_lossy(&e1[common.saturating_sub(80)..])
    );
}

/// `brood run ARGS…` inside a pseudo-terminal (`script`): everything it wrote to
/// the terminal.
fn run_in_pty(f: &Fixture, server: &MockServer, args: &[&str]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let mut line = vec![
        quote(env!("CARGO_BIN_EXE_brood")),
        "run --provider local --model m --base-url".into(),
        quote(&server.base_url()),
    ];
    line.extend(args.iter().map(|a| quote(a)));
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
        .current_dir(f.ws.path())
        .env_clear()
        .env("HOME", f.home.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TERM", "xterm")
        .output()
        .expect("script (util-linux) runs brood in a pseudo-terminal");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).0);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Children that answer after a while, so the run lasts past a refresh.
fn slow_fan_out() -> MockServer {
    MockServer::start(|req| {
        let usage = json!({"prompt_tokens": 1000, "completion_tokens": 100});
        if is_child(req) {
            return brood_mock::MockReply::from(
                Answer::text(
                    "SUMMARY: ok\nCHANGES: none\nEVIDENCE: none\nRISKS: none\nBLOCKERS: none",
                )
                .usage(usage),
            )
            .after(std::time::Duration::from_millis(400));
        }
        match req.assistant_turns() {
            0 => Answer::new()
                .tool_call(
                    "task",
                    json!({"prompts": ["child a", "child b", "child c"]}),
                )
                .usage(usage)
                .into(),
            _ => Answer::text("all done").usage(usage).into(),
        }
    })
}

/// In a terminal, `brood run` shows the children as they go and ends with one line
/// of the tree's usage and cost; with `--json`, or without a terminal, neither.
#[test]
fn the_status_line_shows_in_a_terminal_and_not_with_json_or_without_one() {
    let f = fixture(PRICED);
    let server = slow_fan_out();
    let shown = run_in_pty(&f, &server, &["delegate"]);
    assert!(
        shown.contains("children ") && shown.contains(" done, ") && shown.contains(" running · "),
        "no status line: {shown}"
    );
    let n = server.request_count();
    // 5 answers of 1000 in + 100 out at $2 / $8 per million.
    let cost = n as f64 * (1000.0 * 2.0 + 100.0 * 8.0) / 1e6;
    let summary = format!(
        "brood: tree used {n} requests, {} input tokens (0 cached), {} output tokens, ${cost:.4}",
        n * 1000,
        n * 100
    );
    assert!(shown.contains(&summary), "no `{summary}` in: {shown}");
    assert!(shown.contains("all done"), "{shown}");

    let server = slow_fan_out();
    let shown = run_in_pty(&f, &server, &["--json", "delegate"]);
    assert!(
        !shown.contains("children ") && !shown.contains("tree used"),
        "{shown}"
    );
    let shown = run_in_pty(&f, &server, &["--quiet", "delegate"]);
    assert!(
        !shown.contains("children ") && !shown.contains("[tool]"),
        "{shown}"
    );
    assert!(shown.contains("all done"), "{shown}");

    let out = run_local(&f, &server, &["delegate"]);
    let (_, stderr) = text(&out);
    assert!(
        !stderr.contains("children ") && !stderr.contains("tree used"),
        "{stderr}"
    );
}

/// Without a user price, an OpenRouter-style endpoint's published `/models` prices
/// are used (USD per token there); a user's `[pricing]` entry wins over them.
#[test]
fn an_endpoints_published_prices_are_used_unless_the_user_set_one() {
    let run = |f: &Fixture, server: &MockServer| {
        let out = f
            .command()
            .args(["run", "--provider", "openrouter", "--base-url"])
            .arg(server.base_url())
            .args(["--model", "vendor/m", "--json", "delegate"])
            .env("OPENROUTER_API_KEY", "test-key")
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        serde_json::from_str::<Value>(stdout.trim()).unwrap()
    };
    let published = json!({"id": "vendor/m", "pricing": {
        "prompt": "0.000003", "completion": "0.000015", "input_cache_read": "0.0000003"}});
    // At $3 / $0.30 cached / $15 per million.
    let at = |a: &(bool, u64, u64, u64)| {
        ((a.1 - a.2) as f64 * 3.0 + a.2 as f64 * 0.3 + a.3 as f64 * 15.0) / 1e6
    };

    let f = fixture("");
    let (server, answered) = fan_out_server(2);
    server.set_model_entries([published.clone(), json!({"id": "other"})]);
    let v = run(&f, &server);
    let want: f64 = answered.lock().unwrap().iter().map(at).sum();
    let got = v["usage"]["cost_usd"]
        .as_f64()
        .expect("priced from /models");
    assert!(close(got, want), "{got} != {want}: {v}");

    let f = fixture("[pricing.\"vendor/m\"]\ninput_per_mtok = 2.0\ncached_input_per_mtok = 0.5\noutput_per_mtok = 8.0\n");
    let (server, answered) = fan_out_server(2);
    server.set_model_entries([published]);
    let v = run(&f, &server);
    let want: f64 = answered
        .lock()
        .unwrap()
        .iter()
        .map(|a| priced(a.1, a.2, a.3))
        .sum();
    assert!(close(v["usage"]["cost_usd"].as_f64().unwrap(), want), "{v}");
}

/// A cost budget over a model without a price cannot be held: the run stops before
/// its first request, fails, and says which price to set.
#[test]
fn a_cost_budget_without_a_price_stops_before_any_request() {
    let f = fixture("[subagents]\ntree_cost_budget_usd = 1.0\n");
    let (server, _) = fan_out_server(2);
    let out = run_local(&f, &server, &["delegate"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("tree_cost_budget_usd = 1") && stderr.contains("[pricing.\"m\"]"),
        "{stderr}"
    );
    assert_eq!(server.request_count(), 0);
}
