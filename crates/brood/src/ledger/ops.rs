//! The writes that change runs, each a few statements meant to run inside a caller's
//! transaction (the writer's group commit, or a maintenance transaction): create a
//! run, validate and apply a status transition, append an event, a transcript message
//! or usage. Every state change appends its event in the same transaction.
//!
//! The writer passes what it already knows of a run ([`RunFacts`] from its memo) so
//! an op can skip its lookups; `None` reads them from the database. Each op returns
//! the run's facts after it, for the memo.

use std::sync::Arc;

use serde_json::Value;

use super::db::{args, query_one, query_row, query_vec, Db, DbErrorKind, RowExt};
use super::error::{LedgerError, SqlContext};
use super::memo::RunFacts;
use super::paths::LedgerPaths;
use super::shared::{self, SpillDir};
use super::spill;
use super::types::{EventKind, NewRun, RunId, RunStatus, Transition, UsageDelta};

/// Terminal statuses as an SQL list (for `status IN (...)`).
pub(crate) const NON_TERMINAL_SQL: &str = "('pending', 'queued', 'running')";

/// The statements the writer runs for every run, in the order a run makes them:
/// what [`Db::hold`] keeps prepared on the writer's connection.
pub(crate) const WRITER_STATEMENTS: [&str; 6] = [
    INSERT_RUN,
    INSERT_EVENT,
    UPDATE_STATUS,
    INSERT_MESSAGE,
    ADD_USAGE,
    STORE_RESULT,
];

/// A new run, `pending`.
const INSERT_RUN: &str = "INSERT INTO runs (id, parent_id, root_id, depth, session_id, session_boot_id, name, role,
             agent_type, objective, model, provider, workspace, git_branch, status, created_at,
             priced_steps, unpriced)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 'pending', ?15, 0, ?16)";

/// An event.
const INSERT_EVENT: &str =
    "INSERT INTO events (run_id, seq, at, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5)";

/// A run's status change.
const UPDATE_STATUS: &str = "UPDATE runs SET status = ?2, status_reason = ?3,
             started_at = COALESCE(?4, started_at), ended_at = COALESCE(?5, ended_at),
             error = COALESCE(?6, error)
         WHERE id = ?1";

/// A transcript message.
const INSERT_MESSAGE: &str =
    "INSERT INTO transcripts (run_id, seq, at, role, content, truncated, full_bytes, spill_path)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Usage added to a run's counters (saturating sums: SQLite turns an overflowing
/// integer `+` into a REAL, which would make the row unreadable as a count).
const ADD_USAGE: &str = "UPDATE runs SET
                 steps = CASE WHEN steps > 9223372036854775807 - ?2
                     THEN 9223372036854775807 ELSE steps + ?2 END,
                 input_tokens = CASE WHEN input_tokens > 9223372036854775807 - ?3
                     THEN 9223372036854775807 ELSE input_tokens + ?3 END,
                 output_tokens = CASE WHEN output_tokens > 9223372036854775807 - ?4
                     THEN 9223372036854775807 ELSE output_tokens + ?4 END,
                 cached_input_tokens = CASE WHEN cached_input_tokens > 9223372036854775807 - ?5
                     THEN 9223372036854775807 ELSE cached_input_tokens + ?5 END,
                 cost_usd = cost_usd + ?6,
                 priced_steps = CASE WHEN priced_steps > 9223372036854775807 - ?7
                     THEN 9223372036854775807 ELSE priced_steps + ?7 END
             WHERE id = ?1";

/// A run's result.
const STORE_RESULT: &str = "INSERT INTO run_results (run_id, result) VALUES (?1, ?2)
             ON CONFLICT (run_id) DO UPDATE SET result = excluded.result";

/// Who is writing: stamped on new runs.
pub(crate) struct Author<'a> {
    pub session_id: &'a str,
    pub boot_id: &'a str,
    pub workspace: &'a str,
}

/// Check an id that will name rows and files.
pub(crate) fn validate_id(what: &'static str, id: &str) -> Result<(), LedgerError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(LedgerError::InvalidId {
            what,
            id: id.to_string(),
        })
    }
}

/// The current status of `run`, or `UnknownRun`.
pub(crate) fn status_of(db: &dyn Db, run: &str) -> Result<RunStatus, LedgerError> {
    let text: Option<String> = query_row(
        db,
        "SELECT status FROM runs WHERE id = ?1",
        args![run],
        |r| r.string(0),
    )
    .ctx("reading a run's status")?;
    let text = text.ok_or_else(|| LedgerError::UnknownRun {
        id: run.to_string(),
    })?;
    text.parse().map_err(|detail| LedgerError::Sqlite {
        context: format!("reading the status of run {run}"),
        detail,
    })
}

/// Insert a run in `Pending` with its `spawned` event (seq 0). `parent` is what the
/// caller knows of the run's parent, if anything.
pub(crate) fn insert_run(
    db: &dyn Db,
    author: &Author<'_>,
    id: &RunId,
    run: &NewRun,
    at: i64,
    parent_facts: Option<&RunFacts>,
) -> Result<RunFacts, LedgerError> {
    let (root_id, depth) = match (&run.parent_id, parent_facts) {
        (None, _) => (Arc::from(id.as_str()), 0u32),
        (Some(_), Some(p)) => (p.root_id.clone(), p.depth + 1),
        (Some(parent), None) => {
            let row: Option<(String, u32)> = query_row(
                db,
                "SELECT root_id, depth FROM runs WHERE id = ?1",
                args![parent.as_str()],
                |r| Ok((r.string(0)?, r.u32(1)?)),
            )
            .ctx("reading the parent run")?;
            let (root, depth) = row.ok_or_else(|| LedgerError::UnknownRun {
                id: parent.to_string(),
            })?;
            (Arc::from(root), depth + 1)
        }
    };
    let workspace = run.workspace.as_deref().unwrap_or(author.workspace);
    db.execute(
        INSERT_RUN,
        args![
            id.as_str(),
            run.parent_id.as_ref().map(RunId::as_str),
            &*root_id,
            depth,
            author.session_id,
            author.boot_id,
            &run.name,
            &run.role,
            &run.agent_type,
            &run.objective,
            &run.model,
            &run.provider,
            workspace,
            &run.git_branch,
            at,
            run.unpriced,
        ],
    )
    .map_err(|e| match e.kind {
        // The primary key: a run with this id is already recorded.
        DbErrorKind::Duplicate => LedgerError::DuplicateRun { id: id.to_string() },
        _ => LedgerError::Sqlite {
            context: "inserting a run".into(),
            detail: e.detail,
        },
    })?;
    let payload = spawned_payload(run, depth)?;
    insert_event_at(db, id.as_str(), 0, EventKind::Spawned, &payload, at)?;
    Ok(RunFacts {
        status: RunStatus::Pending,
        next_event: 1,
        next_message: 0,
        root_id,
        depth,
    })
}

/// The `spawned` event's payload as JSON text: `depth`, then the fields of `run`
/// that are set, then its `grant` as it was encoded by the layer that made it.
/// Written straight to text (no `Value` tree, no copy of the grant).
fn spawned_payload(run: &NewRun, depth: u32) -> Result<String, LedgerError> {
    #[derive(serde::Serialize)]
    struct Spawned<'a> {
        depth: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        role: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_type: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        provider: Option<&'a str>,
    }
    let mut text = serde_json::to_string(&Spawned {
        depth,
        parent_id: run.parent_id.as_ref().map(RunId::as_str),
        name: run.name.as_deref(),
        role: run.role.as_deref(),
        agent_type: run.agent_type.as_deref(),
        model: run.model.as_deref(),
        provider: run.provider.as_deref(),
    })
    .map_err(|e| LedgerError::json("encoding an event payload", e))?;
    if let Some(grant) = &run.grant {
        // `{…}` ends in `}`: the grant goes in as the last member.
        text.pop();
        text.push_str(",\"grant\":");
        text.push_str(grant.as_str());
        text.push('}');
    }
    Ok(text)
}

/// The facts of `run` as the database has them (`UnknownRun` when absent).
pub(crate) fn read_facts(db: &dyn Db, run: &str) -> Result<RunFacts, LedgerError> {
    let row: Option<(String, String, u32)> = query_row(
        db,
        "SELECT status, root_id, depth FROM runs WHERE id = ?1",
        args![run],
        |r| Ok((r.string(0)?, r.string(1)?, r.u32(2)?)),
    )
    .ctx("reading a run")?;
    let (status, root_id, depth) = row.ok_or_else(|| LedgerError::UnknownRun {
        id: run.to_string(),
    })?;
    let status = status.parse().map_err(|detail| LedgerError::Sqlite {
        context: format!("reading the status of run {run}"),
        detail,
    })?;
    Ok(RunFacts {
        status,
        next_event: next_seq(db, Numbered::Events, run)?,
        next_message: next_seq(db, Numbered::Transcripts, run)?,
        root_id: Arc::from(root_id),
        depth,
    })
}

/// The facts of `run`: `known` when given, else read.
fn facts_of(db: &dyn Db, run: &str, known: Option<&RunFacts>) -> Result<RunFacts, LedgerError> {
    match known {
        Some(f) => Ok(f.clone()),
        None => read_facts(db, run),
    }
}

/// Validate `change` against the run's current status, apply it and append its event.
/// With `spill`, a result's long strings already in the run's last spill file are
/// stored as references to it ([`shared`]).
pub(crate) fn transition(
    db: &dyn Db,
    spill: Option<&SpillDir<'_>>,
    run: &str,
    change: &Transition,
    at: i64,
    known: Option<&RunFacts>,
) -> Result<RunFacts, LedgerError> {
    let mut facts = facts_of(db, run, known)?;
    let from = facts.status;
    let to = change.target();
    if !from.can_transition_to(to) {
        return Err(LedgerError::InvalidTransition {
            run: run.to_string(),
            from,
            to,
        });
    }
    let (reason, result, error) = match change {
        Transition::Queued | Transition::Running => (None, None, None),
        Transition::Completed { result } => (None, Some(result), None),
        Transition::Failed { error, result } => (Some(error), result.as_ref(), Some(error)),
        Transition::Cancelled { reason } | Transition::Interrupted { reason } => {
            (Some(reason), None, None)
        }
    };
    // The result is encoded once, for its row; the event only says it has one (21.3:
    // a child's answer stored once, not again inside its `completed` event).
    let result_text = match result {
        Some(v) => Some(shared::store(db, spill, run, v)?),
        None => None,
    };
    let payload = transition_payload(from, change, result_text.as_deref())?;
    let started = (to == RunStatus::Running).then_some(at);
    let ended = to.is_terminal().then_some(at);
    db.execute(
        UPDATE_STATUS,
        args![
            run,
            to.as_str(),
            reason.map(String::as_str),
            started,
            ended,
            error.map(String::as_str)
        ],
    )
    .ctx("updating a run's status")?;
    if let Some(text) = &result_text {
        db.execute(STORE_RESULT, args![run, text])
            .ctx("storing a run's result")?;
    }
    insert_event_at(
        db,
        run,
        facts.next_event,
        EventKind::for_status(to),
        &payload,
        at,
    )?;
    facts.status = to;
    facts.next_event += 1;
    Ok(facts)
}

/// A transition's event payload, as JSON text: `{"from"}`, plus `"result":
/// "run_results"` for `completed`, `"error"` and `"result"` (`"run_results"` or
/// `null`) for `failed`, `"reason"` for `cancelled`/`interrupted`. The result itself
/// lives once, in `run_results` (read with the run: `brood agents show`, export);
/// copying it into the event stored a child's whole answer twice (issue 21.3).
fn transition_payload(
    from: RunStatus,
    change: &Transition,
    result_text: Option<&str>,
) -> Result<String, LedgerError> {
    let text = |s: &str| {
        serde_json::to_string(s).map_err(|e| LedgerError::json("encoding an event payload", e))
    };
    let where_result = if result_text.is_some() {
        "\"run_results\""
    } else {
        "null"
    };
    let mut p = String::with_capacity(64);
    p.push_str("{\"from\":\"");
    p.push_str(from.as_str());
    p.push('"');
    match change {
        Transition::Queued | Transition::Running => {}
        Transition::Completed { .. } => {
            p.push_str(",\"result\":");
            p.push_str(where_result);
        }
        Transition::Failed { error, .. } => {
            p.push_str(",\"error\":");
            p.push_str(&text(error)?);
            p.push_str(",\"result\":");
            p.push_str(where_result);
        }
        Transition::Cancelled { reason } | Transition::Interrupted { reason } => {
            p.push_str(",\"reason\":");
            p.push_str(&text(reason)?);
        }
    }
    p.push('}');
    Ok(p)
}

/// Append a progress event (lifecycle kinds are refused: they come with transitions).
pub(crate) fn append_event(
    db: &dyn Db,
    run: &str,
    kind: EventKind,
    payload: &Value,
    at: i64,
    known: Option<&RunFacts>,
) -> Result<RunFacts, LedgerError> {
    if kind.is_lifecycle() {
        return Err(LedgerError::ReservedEventKind {
            kind: kind.as_str().to_string(),
        });
    }
    let mut facts = facts_of(db, run, known)?;
    insert_event_value(db, run, facts.next_event, kind, payload, at)?;
    facts.next_event += 1;
    Ok(facts)
}

/// Add usage to a run's counters and append a `usage` event carrying the delta.
pub(crate) fn add_usage(
    db: &dyn Db,
    run: &str,
    delta: &UsageDelta,
    at: i64,
    known: Option<&RunFacts>,
) -> Result<RunFacts, LedgerError> {
    // A cost that is not a finite, non-negative number is no price: those steps
    // leave the run's cost unknown rather than poison the sum.
    let (cost, priced_steps) = match delta.cost_usd {
        Some(c) if c.is_finite() && c >= 0.0 => (c, delta.steps),
        _ => (0.0, 0),
    };
    let changed = db
        .execute(
            ADD_USAGE,
            args![
                run,
                clamp_i64(delta.steps),
                clamp_i64(delta.input_tokens),
                clamp_i64(delta.output_tokens),
                clamp_i64(delta.cached_input_tokens),
                cost,
                clamp_i64(priced_steps)
            ],
        )
        .ctx("adding usage to a run")?;
    if changed == 0 {
        return Err(LedgerError::UnknownRun {
            id: run.to_string(),
        });
    }
    let payload =
        serde_json::to_value(delta).map_err(|e| LedgerError::json("encoding usage", e))?;
    let mut facts = facts_of(db, run, known)?;
    insert_event_value(db, run, facts.next_event, EventKind::Usage, &payload, at)?;
    facts.next_event += 1;
    Ok(facts)
}

/// Where oversized transcript contents go: spill files under `paths`, past `cap_bytes`.
pub(crate) struct SpillTo<'a> {
    pub paths: &'a LedgerPaths,
    pub cap_bytes: usize,
    /// Every spill file written, in order, so the writer can remove those whose
    /// row was rolled back (the file is written before its row is inserted).
    pub written: &'a std::cell::RefCell<Vec<std::path::PathBuf>>,
}

/// Append a transcript message, capping (and spilling) an oversized content.
pub(crate) fn append_message(
    db: &dyn Db,
    spill_to: &SpillTo<'_>,
    run: &str,
    role: &str,
    content: &Value,
    at: i64,
    known: Option<&RunFacts>,
) -> Result<RunFacts, LedgerError> {
    let mut facts = facts_of(db, run, known)?;
    let seq = facts.next_message;
    // Spilled text goes to the database on PostgreSQL, to a file on SQLite
    // (`spill.rs`); the name is made only for a content that is cut.
    let in_ledger = spill::keeps_in_ledger(db);
    let capped = spill::cap(content, spill_to.cap_bytes, || match in_ledger {
        true => spill::ledger_name(run, seq),
        false => spill_to.paths.spill_file(run, seq).1,
    });
    let spill_path = match &capped.spill_text {
        Some(text) if in_ledger => {
            spill::insert(db, run, seq, text)?;
            Some(spill::ledger_name(run, seq))
        }
        Some(text) => {
            let (spill_abs, spill_rel) = spill_to.paths.spill_file(run, seq);
            spill_to.written.borrow_mut().push(spill_abs.clone());
            spill::write(&spill_abs, text)?;
            Some(spill_rel)
        }
        None => None,
    };
    // Kept whole and already encoded to be measured: stored as encoded.
    let content_text = match capped.encoded {
        Some(text) => text,
        None => serde_json::to_string(&*capped.content)
            .map_err(|e| LedgerError::json("encoding a transcript message", e))?,
    };
    db.execute(
        INSERT_MESSAGE,
        args![
            run,
            seq,
            at,
            role,
            &content_text,
            capped.truncated,
            capped.full_bytes,
            &spill_path
        ],
    )
    .ctx("appending a transcript message")?;
    facts.next_message += 1;
    Ok(facts)
}

/// Mark every non-terminal run of `boot_id` interrupted with `reason` (and its event).
///
/// Set-based: one `INSERT … SELECT` appends every run's `interrupted` event (seq = the
/// run's last seq + 1, payload `{"from": <old status>, "reason": …}` as
/// [`transition`] writes it) and one `UPDATE` moves the runs, so recovering a boot of
/// thousands of runs costs two statements rather than four per run (the `UPDATE`
/// returns the ids, reported oldest first as before). Every run
/// selected here may go to `interrupted` (`pending | queued | running → interrupted`).
pub(crate) fn interrupt_boot(
    db: &dyn Db,
    boot_id: &str,
    reason: &str,
    at: i64,
) -> Result<Vec<RunId>, LedgerError> {
    let to = RunStatus::Interrupted;
    // Events first: they read each run's status before the UPDATE changes it.
    let payload = db
        .dialect()
        .json_object("'from', r.status, 'reason', CAST(?4 AS TEXT)");
    db.execute(
        &format!(
            "INSERT INTO events (run_id, seq, at, kind, payload)
             SELECT r.id,
                    COALESCE((SELECT MAX(e.seq) + 1 FROM events e WHERE e.run_id = r.id), 0),
                    CAST(?2 AS BIGINT), CAST(?3 AS TEXT), {payload}
             FROM runs r
             WHERE r.session_boot_id = ?1 AND r.status IN {NON_TERMINAL_SQL}"
        ),
        args![boot_id, at, EventKind::for_status(to).as_str(), reason],
    )
    .ctx("appending the interrupted events of a boot's runs")?;
    let mut runs: Vec<(i64, String)> = query_vec(
        db,
        &format!(
            "UPDATE runs SET status = ?2, status_reason = ?3, ended_at = ?4
             WHERE session_boot_id = ?1 AND status IN {NON_TERMINAL_SQL}
             RETURNING created_at, id"
        ),
        args![boot_id, to.as_str(), reason, at],
        |r| Ok((r.i64(0)?, r.string(1)?)),
    )
    .ctx("marking a boot's runs interrupted")?;
    runs.sort_unstable();
    db.execute(
        "UPDATE boots SET ended_at = ?2 WHERE boot_id = ?1 AND ended_at IS NULL",
        args![boot_id, at],
    )
    .ctx("marking a boot ended")?;
    Ok(runs
        .into_iter()
        .map(|(_, id)| RunId::from_string(id))
        .collect())
}

/// The tables whose rows are numbered per run.
#[derive(Clone, Copy)]
pub(crate) enum Numbered {
    Events,
    Transcripts,
}

/// The seq the next row of `run` in `table` gets.
/// A count for an INTEGER column: SQLite integers are i64, so a u64 past `i64::MAX`
/// (an absurd provider usage number) is clamped rather than wrapped to a negative.
fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn next_seq(db: &dyn Db, table: Numbered, run: &str) -> Result<u64, LedgerError> {
    let sql = match table {
        Numbered::Events => "SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE run_id = ?1",
        Numbered::Transcripts => {
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM transcripts WHERE run_id = ?1"
        }
    };
    query_one(db, sql, args![run], |r| r.u64(0)).ctx("numbering a run's rows")
}

/// Insert one event row at `seq` with a payload value.
pub(crate) fn insert_event_value(
    db: &dyn Db,
    run: &str,
    seq: u64,
    kind: EventKind,
    payload: &Value,
    at: i64,
) -> Result<(), LedgerError> {
    let text = serde_json::to_string(payload)
        .map_err(|e| LedgerError::json("encoding an event payload", e))?;
    insert_event_at(db, run, seq, kind, &text, at)
}

/// Insert one event row at `seq` with its payload's JSON text.
fn insert_event_at(
    db: &dyn Db,
    run: &str,
    seq: u64,
    kind: EventKind,
    payload_text: &str,
    at: i64,
) -> Result<(), LedgerError> {
    db.execute(
        INSERT_EVENT,
        args![run, seq, at, kind.as_str(), payload_text],
    )
    .ctx("appending an event")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::JsonText;
    use serde_json::json;

    #[test]
    fn a_spawned_payload_holds_the_set_fields_and_the_grant_as_an_object() {
        let mut run = NewRun::new("look");
        run.parent_id = Some(RunId::from_string("p-1"));
        run.name = Some("explore-2".into());
        run.role = Some("explore".into());
        run.model = Some("m \"quoted\"".into());
        let bare = spawned_payload(&run, 1).unwrap();
        let v: Value = serde_json::from_str(&bare).unwrap();
        assert_eq!(
            v,
            json!({"depth": 1, "parent_id": "p-1", "name": "explore-2", "role": "explore",
                   "model": "m \"quoted\""})
        );
        let grant = json!({"tools": ["grep", "read_file"], "rules": []});
        run.grant = Some(JsonText::of(&grant).unwrap());
        let text = spawned_payload(&run, 1).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["grant"], grant);
        assert_eq!(v["name"], "explore-2");
        // The order a reader sees: depth first, the grant last.
        assert!(text.starts_with("{\"depth\":1,") && text.ends_with("\"rules\":[]}}"));
    }

    #[test]
    fn transition_payloads_read_as_the_objects_they_stand_for() {
        let result = json!({"final_text": "a \"quoted\"\nline ✓", "n": [1, 2]});
        let cases = [
            (Transition::Running, json!({"from": "pending"})),
            (
                Transition::Completed {
                    result: result.clone(),
                },
                json!({"from": "pending", "result": "run_results"}),
            ),
            (
                Transition::Failed {
                    error: "boom \"x\"".into(),
                    result: Some(result.clone()),
                },
                json!({"from": "pending", "error": "boom \"x\"", "result": "run_results"}),
            ),
            (
                Transition::Failed {
                    error: "boom".into(),
                    result: None,
                },
                json!({"from": "pending", "error": "boom", "result": null}),
            ),
            (
                Transition::Cancelled {
                    reason: "by \\ user".into(),
                },
                json!({"from": "pending", "reason": "by \\ user"}),
            ),
        ];
        for (change, want) in cases {
            let text = match &change {
                Transition::Completed { result } => Some(result.to_string()),
                Transition::Failed {
                    result: Some(r), ..
                } => Some(r.to_string()),
                _ => None,
            };
            let got = transition_payload(RunStatus::Pending, &change, text.as_deref()).unwrap();
            // Same object, and the same text the value would encode to (key order kept).
            assert_eq!(serde_json::from_str::<Value>(&got).unwrap(), want);
            assert_eq!(got, want.to_string());
        }
    }
}
