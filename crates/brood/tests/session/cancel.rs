//! `brood agents cancel` from another process reaches a live session's run: the
//! request row is picked up by the owning session, which cancels the run. And
//! dropping the future of `Session::run` stops the run it started.

use brood::events::RunEventKind;
use brood::ledger::{CancelOutcome, Ledger, RunId};
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::session::{ModelSource, Session, SessionOptions};
use futures::StreamExt;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_from_outside_cancels_a_live_child() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let model = ScriptedModel::new()
        .on(
            "slow child",
            // Tell the test the step began; `HangAfter` then never answers it.
            vec![ScriptStep::func(move |_req| {
                let _ = tx.send(());
                Err(brood::model::ModelError::Script("unreachable".into()))
            })],
        )
        .on(
            "parent",
            vec![
                ScriptStep::tool_call(
                    "agent_open",
                    json!({"prompt": "slow child", "name": "sleeper"}),
                ),
                ScriptStep::text("opened"),
                ScriptStep::text("saw the result"),
            ],
        );
    let session = open_with(dir.path(), Arc::new(HangAfter { inner: model })).await;
    let run = {
        let s = &session;
        async move { s.run_with("parent", None, CancellationToken::new()).await }
    };
    let cancel_from_outside = async {
        rx.recv().await.expect("the child's first step began");
        let child = session
            .supervisor()
            .snapshot()
            .into_iter()
            .find(|r| r.name == "sleeper")
            .expect("child registered")
            .agent_id;
        // The child's first request can leave while its spawn record commits
        // (docs/ARCHITECTURE.md "What a spawn waits for"); another process finds
        // the run only once it is on disk.
        session.ledger().flush().await.unwrap();
        // Another process: no boot, just the maintenance handle.
        let root = dir.path().to_path_buf();
        let id = child.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            Ledger::open_maintenance(&root)
                .unwrap()
                .request_cancel(&RunId::from_string(&id))
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            matches!(outcome, CancelOutcome::Requested { .. }),
            "{outcome:?}"
        );
        child
    };
    let (report, child) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(run, cancel_from_outside)
    })
    .await
    .expect("the cancel request must reach the live session");
    let report = report.unwrap();
    assert_eq!(
        report.final_text, "saw the result",
        "the cancelled child's completion gave the parent a turn"
    );
    let detail = session
        .ledger()
        .get_run(&RunId::from_string(&child))
        .await
        .unwrap();
    assert_eq!(detail.run.status.as_str(), "cancelled");
    assert!(
        detail
            .run
            .status_reason
            .as_deref()
            .unwrap_or("")
            .contains("brood agents cancel"),
        "{:?}",
        detail.run.status_reason
    );
    session.close().await;
}

/// A session on workspace `ws` with its default config and `model` for every run.
async fn open_with(ws: &std::path::Path, model: Arc<dyn brood::model::Model>) -> Session {
    let paths = ConfigPaths {
        user_dir: None,
        workspace: ws.to_path_buf(),
    };
    let config = Config::load(
        &paths,
        &BTreeMap::new(),
        &Overrides {
            // The test's own workspace sets the endpoint.
            trust_workspace: true,
            ..Overrides::default()
        },
    )
    .unwrap();
    let mut opts = SessionOptions::new(ws, config);
    opts.models = ModelSource::Fixed(model);
    Session::open(opts).await.unwrap()
}

/// Wraps the scripted model: a request whose script step errors with "unreachable"
/// hangs instead (after the step told the test it started).
struct HangAfter {
    inner: ScriptedModel,
}

#[async_trait::async_trait]
impl brood::model::Model for HangAfter {
    fn provider_name(&self) -> &str {
        "scripted"
    }
    async fn step(
        &self,
        request: &brood::model::ModelRequest,
        on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, brood::model::ModelError> {
        match self.inner.step(request, on_event).await {
            Err(brood::model::ModelError::Script(s)) if s == "unreachable" => {
                std::future::pending().await
            }
            other => other,
        }
    }
}

/// A model whose every step tells the test it began, then never answers; the
/// step's future says when it is dropped.
struct Stuck {
    began: tokio::sync::mpsc::UnboundedSender<()>,
    dropped: Arc<tokio::sync::Notify>,
}

struct OnDrop(Arc<tokio::sync::Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

#[async_trait::async_trait]
impl brood::model::Model for Stuck {
    fn provider_name(&self) -> &str {
        "stuck"
    }
    async fn step(
        &self,
        _request: &brood::model::ModelRequest,
        _on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, brood::model::ModelError> {
        let _guard = OnDrop(self.dropped.clone());
        let _ = self.began.send(());
        std::future::pending().await
    }
}

#[tokio::test]
async fn dropping_a_run_future_stops_the_run() {
    // The root runs as a task of the runtime; dropping the caller's future must
    // still stop it (not leave it running detached).
    let dir = tempfile::tempdir().unwrap();
    let (began_tx, mut began) = tokio::sync::mpsc::unbounded_channel();
    let dropped = Arc::new(tokio::sync::Notify::new());
    let model = Stuck {
        began: began_tx,
        dropped: dropped.clone(),
    };
    let session = open_with(dir.path(), Arc::new(model)).await;
    {
        let run = session.run_with("parent", None, CancellationToken::new());
        tokio::select! {
            _ = run => panic!("a stuck run cannot end"),
            _ = began.recv() => {}
        }
        // `run` is dropped here, mid-step.
    }
    tokio::time::timeout(Duration::from_secs(10), dropped.notified())
        .await
        .expect("the step in progress was dropped with the run");
    session.close().await;
}

/// Dropping the future of `Session::run` cancels its whole tree: a `task` child in
/// the middle of a model step stops and is recorded `cancelled` without anyone
/// closing the session, and the root records its own end `cancelled` (closing the
/// session waits for that record) — neither is left `running` or `interrupted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_run_future_cancels_its_task_children() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut child_began) = tokio::sync::mpsc::unbounded_channel::<()>();
    let model = ScriptedModel::new()
        .on(
            "stuck child",
            vec![ScriptStep::func(move |_req| {
                let _ = tx.send(());
                Err(brood::model::ModelError::Script("unreachable".into()))
            })],
        )
        .on(
            "parent",
            vec![
                ScriptStep::tool_call("task", json!({"description": "stuck child"})),
                ScriptStep::text("never reached"),
            ],
        );
    let session = open_with(dir.path(), Arc::new(HangAfter { inner: model })).await;
    let mut changes = session.supervisor().subscribe();
    {
        let run = session.run_with("parent", None, CancellationToken::new());
        tokio::select! {
            _ = run => panic!("the parent waits on a stuck child"),
            began = child_began.recv() => began.expect("the child's step began"),
        }
        // `run` is dropped here, while its `task` waits on the child.
    }
    let child = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let settled = session
                .supervisor()
                .snapshot()
                .into_iter()
                .find(|r| r.status.is_terminal());
            if let Some(r) = settled {
                return r;
            }
            changes.changed().await.expect("supervisor alive");
        }
    })
    .await
    .expect("dropping the run must cancel its task child");
    assert_eq!(child.status.as_str(), "cancelled");

    let ledger = session.ledger().clone();
    session.close().await;
    let runs = ledger
        .list_runs(brood::ledger::ListFilter::default())
        .await
        .unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in &runs {
        assert_eq!(r.run.status.as_str(), "cancelled", "{:?}", r.run);
    }
}

/// Takes the ledger's write lock from another connection when the first parent
/// asks its model, and holds it until the test sends on `release`: the spawn
/// record of the child it opens waits for the ledger.
struct LockOnFirstStep {
    inner: ScriptedModel,
    db: std::path::PathBuf,
    release: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

#[async_trait::async_trait]
impl brood::model::Model for LockOnFirstStep {
    fn provider_name(&self) -> &str {
        "scripted"
    }
    async fn step(
        &self,
        request: &brood::model::ModelRequest,
        on_event: brood::model::EventFn<'_>,
    ) -> Result<brood::model::ModelResponse, brood::model::ModelError> {
        let first = request.messages.first().map(|m| m.content.as_str());
        let release = if first.is_some_and(|t| t.contains("FIRSTPARENT")) {
            self.release.lock().unwrap().take()
        } else {
            None
        };
        if let Some(release) = release {
            let (locked_tx, locked_rx) = std::sync::mpsc::channel();
            let db = self.db.clone();
            std::thread::spawn(move || {
                let conn = rusqlite::Connection::open(db).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                locked_tx.send(()).unwrap();
                let _ = release.recv();
                conn.execute_batch("ROLLBACK").unwrap();
            });
            locked_rx.recv().unwrap();
        }
        self.inner.step(request, on_event).await
    }
}

/// A turn cancelled while the spawn record of the child it opens waits for the
/// ledger: the child is recorded `cancelled` (in the registry and in the ledger,
/// once the record can be written) and gives back its name and slot — it is not
/// left `pending` for the rest of the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_cancelled_while_its_record_waits_settles_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let db = brood::ledger::Ledger::open(dir.path(), Default::default())
        .unwrap()
        .db_path()
        .to_path_buf();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    let model = ScriptedModel::new()
        .on(
            "FIRSTPARENT",
            vec![
                ScriptStep::tool_call("agent_open", json!({"prompt": "FIRSTKID", "name": "kid"})),
                ScriptStep::text("never reached"),
            ],
        )
        .on(
            "AGAINPARENT",
            vec![
                ScriptStep::tool_call("agent_open", json!({"prompt": "SECONDKID", "name": "kid"})),
                ScriptStep::text("opened again"),
                ScriptStep::text("opened again"),
            ],
        )
        .on(
            "SECONDKID",
            vec![ScriptStep::text("done"), ScriptStep::text("done")],
        );
    let model = LockOnFirstStep {
        inner: model,
        db,
        release: std::sync::Mutex::new(Some(release_rx)),
    };
    let session = open_with(dir.path(), Arc::new(model)).await;
    let mut changes = session.supervisor().subscribe();
    let mut events = session.events();
    let turn = CancellationToken::new();
    let run = session.run_with("FIRSTPARENT", None, turn.clone());
    let cancel_then_release = async {
        // The child is admitted (its spawn record queued behind the lock): cancel
        // the turn, and let the ledger go only once the `agent_open` call has
        // ended (its wait for the record dropped).
        let kid = loop {
            if let Some(r) = session.supervisor().snapshot().into_iter().next() {
                break r;
            }
            changes.changed().await.expect("supervisor alive");
        };
        turn.cancel();
        loop {
            match events.next().await.expect("session alive") {
                brood::Event::Run(e) if matches!(e.kind, RunEventKind::ToolResult { .. }) => break,
                _ => {}
            }
        }
        release_tx.send(()).unwrap();
        kid
    };
    let (_, kid) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(run, cancel_then_release)
    })
    .await
    .expect("a cancelled turn ends although the ledger is locked");

    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let now = session
                .supervisor()
                .snapshot()
                .into_iter()
                .find(|r| r.agent_id == kid.agent_id && r.status.is_terminal());
            if let Some(r) = now {
                return r;
            }
            changes.changed().await.expect("supervisor alive");
        }
    })
    .await
    .expect("the child whose spawn was cancelled must settle, not stay pending");
    assert_eq!(settled.status.as_str(), "cancelled");

    // Its name is free again (and its slot given back): a new child may take it.
    let again = session
        .run_with("AGAINPARENT", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(again.final_text, "opened again", "{again:?}");
    let second = session
        .supervisor()
        .snapshot()
        .into_iter()
        .find(|r| r.agent_id != kid.agent_id)
        .expect("the second child");
    assert_eq!(
        second.name, "kid",
        "the cancelled child still holds its name"
    );

    let ledger = session.ledger().clone();
    session.close().await;
    let detail = ledger
        .get_run(&RunId::from_string(&kid.agent_id))
        .await
        .unwrap();
    assert_eq!(detail.run.status.as_str(), "cancelled", "{:?}", detail.run);
    assert!(
        detail
            .run
            .status_reason
            .as_deref()
            .unwrap_or("")
            .contains("spawn record waited"),
        "{:?}",
        detail.run.status_reason
    );
}

/// A `Session` dropped without `close` ends: its cancel poller stops and the ledger
/// closes, so its boot lock goes and other processes no longer see the boot live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_session_closes_its_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().on("hello", vec![ScriptStep::text("hi")]);
    let session = open_with(dir.path(), Arc::new(model)).await;
    let report = session
        .run_with("hello", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.final_text, "hi");
    let lock = dir
        .path()
        .canonicalize()
        .unwrap()
        .join(".brood/state/boots")
        .join(format!("{}.lock", session.ledger().boot_id()));
    assert!(lock.exists(), "a live session holds {lock:?}");
    drop(session);
    // The tasks that held the ledger end on the session's token; the lock file goes
    // with the ledger (watched, bounded: nothing to await from a drop).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while lock.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped session still holds its boot lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ledger = Ledger::open(dir.path(), Default::default()).unwrap();
    assert!(
        ledger.recovery().live_boots.is_empty(),
        "{:?}",
        ledger.recovery()
    );
}
