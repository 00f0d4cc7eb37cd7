//! The database file: creation from nothing or an empty file, migration from the
//! first schema version (a frozen v1 fixture) and from the second (v1 plus the frozen
//! v2 migration), and refusal — without touching the
//! file — of garbage, other programs' SQLite databases and newer schemas.

use std::path::{Path, PathBuf};

use brood::ledger::{
    Ledger, LedgerError, LedgerOptions, ListFilter, NewRun, RunId, RunStatus, UsageDelta,
    SCHEMA_VERSION,
};
use rusqlite::Connection;
use serde_json::json;
use tempfile::TempDir;

const V1_FIXTURE: &str = include_str!("fixtures/ledger_v1.sql");
const V1_TO_V2: &str = include_str!("fixtures/ledger_v1_to_v2.sql");

fn db_path(ws: &Path) -> PathBuf {
    ws.canonicalize()
        .unwrap()
        .join(".brood")
        .join("state")
        .join("brood.db")
}

fn place(ws: &Path, bytes: &[u8]) -> PathBuf {
    let db = db_path(ws);
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    std::fs::write(&db, bytes).unwrap();
    db
}

fn user_version(db: &Path) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_fresh_workspace_and_an_empty_file_both_become_current_ledgers() {
    for pre_create in [false, true] {
        let ws = TempDir::new().unwrap();
        if pre_create {
            place(ws.path(), b"");
        }
        let ledger = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
        let id = ledger.create_run(NewRun::new("x")).await.unwrap();
        drop(ledger);
        let db = db_path(ws.path());
        assert_eq!(user_version(&db), SCHEMA_VERSION);
        let conn = Connection::open(&db).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let marker: String = conn
            .query_row(
                "SELECT value FROM brood_meta WHERE key = 'schema'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(marker, "brood.ledger");
        let reader = Ledger::open_reader(ws.path()).unwrap();
        assert_eq!(reader.run(&id).unwrap().objective, "x");
    }
}

#[tokio::test]
async fn a_version_1_ledger_is_migrated_with_its_data() {
    let ws = TempDir::new().unwrap();
    let db = db_path(ws.path());
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    Connection::open(&db)
        .unwrap()
        .execute_batch(V1_FIXTURE)
        .unwrap();
    assert_eq!(user_version(&db), 1);

    let ledger = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
    assert_eq!(user_version(&db), SCHEMA_VERSION);
    let finished = RunId::from_string("11111111-aaaa-4aaa-8aaa-000000000001");
    let running = RunId::from_string("22222222-bbbb-4bbb-8bbb-000000000002");
    // The v1 boot has no lock file and no process: its running run was interrupted.
    assert_eq!(ledger.recovery().interrupted, vec![running.clone()]);
    assert_eq!(
        ledger.recovery().dead_boots,
        vec!["0190a0b0-0000-7000-8000-000000000001".to_string()]
    );

    let reader = ledger.reader().unwrap();
    let done = reader.get_run(&finished).unwrap();
    assert!(done.from_prior_session);
    assert_eq!(done.run.status, RunStatus::Completed);
    assert_eq!(done.run.result, Some(json!({"summary": "two parsers"})));
    assert_eq!(
        (
            done.run.steps,
            done.run.input_tokens,
            done.run.cached_input_tokens
        ),
        (3, 1200, 800)
    );
    assert_eq!(done.run.git_branch.as_deref(), Some("main"));
    // Its cost was never recorded (schema 4 records it): unknown, and said so.
    assert_eq!((done.run.cost_usd, done.run.cost_recorded), (None, false));
    assert_eq!(done.events.len(), 3);
    let child = reader.get_run(&running).unwrap();
    assert_eq!(child.run.status, RunStatus::Interrupted);
    assert_eq!(child.run.status_reason.as_deref(), Some("process exited"));
    assert_eq!(child.run.depth, 1);
    assert_eq!(child.events.last().unwrap().seq, 2);

    // v1 transcripts gain the v2 columns with sensible values.
    let t = reader.transcript(&finished, 0, 10).unwrap();
    assert_eq!(t.total, 2);
    assert_eq!(t.entries[1].content, json!("two parsers"));
    assert!(!t.entries[1].truncated);
    assert_eq!(t.entries[1].full_bytes, "\"two parsers\"".len() as u64);

    // v2 features work on the migrated database.
    let new = ledger
        .create_run(NewRun {
            parent_id: Some(finished.clone()),
            ..NewRun::new("follow up")
        })
        .await
        .unwrap();
    ledger.mark_running(&new).await.unwrap();
    // A run opened after the upgrade records its cost step by step: priced steps
    // add up; one unpriced step makes it unknown.
    let priced = UsageDelta {
        steps: 1,
        input_tokens: 10,
        cost_usd: Some(0.25),
        ..UsageDelta::default()
    };
    ledger.add_usage(&new, priced).unwrap();
    ledger.add_usage(&new, priced).unwrap();
    ledger.flush().await.unwrap();
    let r = reader.run(&new).unwrap();
    assert_eq!((r.cost_usd, r.cost_recorded), (Some(0.5), true));
    let unpriced = UsageDelta {
        cost_usd: None,
        ..priced
    };
    ledger.add_usage(&new, unpriced).unwrap();
    ledger.flush().await.unwrap();
    let r = reader.run(&new).unwrap();
    assert_eq!((r.steps, r.cost_usd, r.cost_recorded), (3, None, true));
    let mut cli = Ledger::open_maintenance(ws.path()).unwrap();
    cli.request_cancel(&new).unwrap();
    assert_eq!(ledger.take_cancel_requests().await.unwrap(), vec![new]);
    let all = reader
        .list_runs(ListFilter {
            include_archived: true,
        })
        .unwrap();
    assert_eq!(all.len(), 3);
    reader.integrity_check().unwrap();
}

/// The indexes of `runs`, by name.
fn run_indexes(db: &Path) -> Vec<String> {
    let conn = Connection::open(db).unwrap();
    let mut st = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' AND sql IS NOT NULL ORDER BY name")
        .unwrap();
    let names = st.query_map([], |r| r.get(0)).unwrap();
    names.collect::<Result<Vec<String>, _>>().unwrap()
}

#[tokio::test]
async fn a_version_2_ledger_moves_results_out_gains_the_listing_index_and_keeps_its_data() {
    let ws = TempDir::new().unwrap();
    let db = db_path(ws.path());
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let conn = Connection::open(&db).unwrap();
    conn.execute_batch(V1_FIXTURE).unwrap();
    conn.execute_batch(V1_TO_V2).unwrap();
    drop(conn);
    assert_eq!(user_version(&db), 2);
    assert!(run_indexes(&db).contains(&"runs_by_session".to_string()));

    let ledger = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
    assert_eq!(user_version(&db), SCHEMA_VERSION);
    let indexes = run_indexes(&db);
    assert!(indexes.contains(&"runs_by_session_order".to_string()));
    assert!(!indexes.contains(&"runs_by_session".to_string()));
    // Results moved out of the runs rows.
    {
        let conn = Connection::open(&db).unwrap();
        let inline: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM runs WHERE result IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(inline, 0);
        let moved: (String, String) = conn
            .query_row("SELECT run_id, result FROM run_results", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(
            moved,
            (
                "11111111-aaaa-4aaa-8aaa-000000000001".to_string(),
                r#"{"summary":"two parsers"}"#.to_string()
            )
        );
    }
    // The listing of a session is read in index order, not sorted afterwards.
    let plan: Vec<String> = {
        let conn = Connection::open(&db).unwrap();
        let mut st = conn
            .prepare(
                "EXPLAIN QUERY PLAN SELECT id FROM runs WHERE session_id = 'v1-session'
                 ORDER BY created_at, id",
            )
            .unwrap();
        let rows = st.query_map([], |r| r.get::<_, String>(3)).unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    };
    assert!(
        plan.iter().any(|p| p.contains("runs_by_session_order")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|p| p.contains("TEMP B-TREE")), "{plan:?}");

    // The data survived and the v2 run still recovers.
    let finished = RunId::from_string("11111111-aaaa-4aaa-8aaa-000000000001");
    let running = RunId::from_string("22222222-bbbb-4bbb-8bbb-000000000002");
    assert_eq!(ledger.recovery().interrupted, vec![running.clone()]);
    let reader = ledger.reader().unwrap();
    let all = reader
        .list_runs(ListFilter {
            include_archived: true,
        })
        .unwrap();
    assert_eq!(
        all.iter().map(|r| r.run.id.clone()).collect::<Vec<_>>(),
        vec![finished.clone(), running.clone()]
    );
    assert_eq!(all[0].run.status, RunStatus::Completed);
    assert_eq!(all[0].run.result, None, "listings leave results out");
    assert_eq!(
        reader.run(&finished).unwrap().result,
        Some(json!({"summary": "two parsers"}))
    );
    let child = reader.get_run(&running).unwrap();
    assert_eq!(child.run.status, RunStatus::Interrupted);
    assert_eq!(child.events.last().unwrap().seq, 2);
    assert_eq!(
        child.events.last().unwrap().payload,
        json!({"from": "running", "reason": "process exited"})
    );
    reader.integrity_check().unwrap();
}

#[test]
fn a_reader_never_migrates_an_old_ledger() {
    let ws = TempDir::new().unwrap();
    let db = db_path(ws.path());
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    Connection::open(&db)
        .unwrap()
        .execute_batch(V1_FIXTURE)
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    match Ledger::open_reader(ws.path()) {
        Err(err @ LedgerError::NeedsUpgrade { .. }) => {
            assert!(err.to_string().contains("run brood once"), "{err}")
        }
        other => panic!("expected NeedsUpgrade, got {:?}", other.map(|_| ())),
    }
    assert_eq!(user_version(&db), 1);
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

fn assert_refused(ws: &Path, db: &Path, original: &[u8], reason_part: &str) {
    for err in [
        Ledger::open(ws, LedgerOptions::default()).unwrap_err(),
        Ledger::open_reader(ws).map(|_| ()).unwrap_err(),
        Ledger::open_maintenance(ws).map(|_| ()).unwrap_err(),
    ] {
        match &err {
            LedgerError::NotALedger { path, reason } => {
                assert_eq!(path, db);
                assert!(reason.contains(reason_part), "reason: {reason}");
            }
            other => panic!("expected NotALedger, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("not a brood ledger"), "{msg}");
        assert!(msg.contains("will not overwrite"), "{msg}");
    }
    assert_eq!(
        std::fs::read(db).unwrap(),
        original,
        "the file was modified"
    );
    // No boot was started against it.
    let boots = ws.join(".brood/state/boots");
    let locks = std::fs::read_dir(&boots).map(|d| d.count()).unwrap_or(0);
    assert_eq!(locks, 0);
}

#[test]
fn garbage_at_the_database_path_is_refused_and_left_alone() {
    let ws = TempDir::new().unwrap();
    let garbage: Vec<u8> = (0..10_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let db = place(ws.path(), &garbage);
    assert_refused(ws.path(), &db, &garbage, "not an SQLite database");

    let ws = TempDir::new().unwrap();
    let db = place(ws.path(), b"hello, I am a text file\n");
    assert_refused(
        ws.path(),
        &db,
        b"hello, I am a text file\n",
        "not an SQLite database",
    );
}

#[test]
fn another_programs_sqlite_database_is_refused_and_left_alone() {
    let ws = TempDir::new().unwrap();
    let db = db_path(ws.path());
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    {
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO users (name) VALUES ('ada');",
        )
        .unwrap();
    }
    let original = std::fs::read(&db).unwrap();
    assert_refused(ws.path(), &db, &original, "tables: users");

    // A brood_meta table without our marker is not ours either.
    let ws = TempDir::new().unwrap();
    let db = db_path(ws.path());
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    {
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE brood_meta (key TEXT PRIMARY KEY, value TEXT);
             INSERT INTO brood_meta VALUES ('schema', 'something.else');",
        )
        .unwrap();
    }
    let original = std::fs::read(&db).unwrap();
    assert_refused(ws.path(), &db, &original, "marker");
}

#[test]
fn a_ledger_from_a_newer_brood_is_refused() {
    let ws = TempDir::new().unwrap();
    drop(Ledger::open(ws.path(), LedgerOptions::default()).unwrap());
    let db = db_path(ws.path());
    Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let err = Ledger::open(ws.path(), LedgerOptions::default()).unwrap_err();
    assert_eq!(
        err,
        LedgerError::SchemaTooNew {
            path: db.clone(),
            found: 99,
            supported: SCHEMA_VERSION
        }
    );
    assert!(matches!(
        Ledger::open_reader(ws.path()),
        Err(LedgerError::SchemaTooNew { found: 99, .. })
    ));
    assert_eq!(user_version(&db), 99);
}

#[test]
fn reading_a_workspace_without_a_ledger_creates_nothing() {
    let ws = TempDir::new().unwrap();
    assert!(matches!(
        Ledger::open_reader(ws.path()),
        Err(LedgerError::Missing { .. })
    ));
    assert!(matches!(
        Ledger::open_maintenance(ws.path()),
        Err(LedgerError::Missing { .. })
    ));
    assert!(!ws.path().join(".brood").exists());
}

#[test]
fn a_hot_rollback_journal_left_by_a_crash_is_rolled_back_not_refused() {
    // Build a crashed state: a ledger (in rollback-journal mode, as a database is
    // before its first switch to WAL) captured mid-transaction with a hot journal.
    let scratch = TempDir::new().unwrap();
    drop(Ledger::open(scratch.path(), LedgerOptions::default()).unwrap());
    let src = db_path(scratch.path());
    let journal = src.with_extension("db-journal");
    let conn = Connection::open(&src).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    conn.execute_batch("PRAGMA cache_size = 10; BEGIN;")
        .unwrap();
    let blob = "x".repeat(4000);
    for i in 0..2000 {
        conn.execute(
            "INSERT INTO brood_meta (key, value) VALUES (?1, ?2)",
            rusqlite::params![format!("junk-{i}"), blob],
        )
        .unwrap();
    }
    assert!(journal.exists(), "the transaction should have spilled");
    let crashed_db = std::fs::read(&src).unwrap();
    let crashed_journal = std::fs::read(&journal).unwrap();
    conn.execute_batch("ROLLBACK").unwrap();
    drop(conn);

    let ws = TempDir::new().unwrap();
    let db = place(ws.path(), &crashed_db);
    std::fs::write(db.with_extension("db-journal"), &crashed_journal).unwrap();

    let reader = Ledger::open_reader(ws.path()).unwrap();
    reader.integrity_check().unwrap();
    assert!(reader.list_runs(ListFilter::default()).unwrap().is_empty());
    let ledger = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
    drop(ledger);
    let junk: i64 = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM brood_meta WHERE key LIKE 'junk-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(junk, 0, "the unfinished transaction was rolled back");
}

#[tokio::test]
async fn a_run_without_a_price_has_no_cost_even_before_its_first_request() {
    let ws = TempDir::new().unwrap();
    let ledger = Ledger::open(ws.path(), LedgerOptions::default()).unwrap();
    let unpriced = ledger
        .create_run(NewRun {
            unpriced: true,
            ..NewRun::new("no price")
        })
        .await
        .unwrap();
    let priced = ledger.create_run(NewRun::new("priced")).await.unwrap();
    let reader = ledger.reader().unwrap();
    let cost = |id: &RunId| {
        let r = reader.run(id).unwrap();
        (r.steps, r.cost_usd, r.cost_recorded)
    };
    assert_eq!(cost(&unpriced), (0, None, true));
    assert_eq!(cost(&priced), (0, Some(0.0), true));
    // Its steps carry no cost either; it stays unknown, never 0.
    ledger
        .add_usage(
            &unpriced,
            UsageDelta {
                steps: 1,
                input_tokens: 5,
                ..UsageDelta::default()
            },
        )
        .unwrap();
    ledger.flush().await.unwrap();
    assert_eq!(cost(&unpriced), (1, None, true));
}
