//! Smoke: a scripted parent fans out with `task`; children answer in the contract.
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::runtime::config::{Config, ConfigPaths, Overrides};
use brood::runtime::session::{ModelSource, Session, SessionOptions};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

const REPORT: &str = "SUMMARY: looked.\nCHANGES: None.\nEVIDENCE:\n- a.txt:1-1 the line\nRISKS: None.\nBLOCKERS: None.";

#[tokio::test]
async fn task_fans_out_and_returns_in_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let model = ScriptedModel::new()
        .on("child one", vec![ScriptStep::text(REPORT)])
        .on("child two", vec![ScriptStep::text(REPORT)])
        .on(
            "parent",
            vec![
                ScriptStep::tool_call(
                    "task",
                    json!({"prompts": ["child one", "child two"], "agent_type": "explore"}),
                ),
                ScriptStep::text("done"),
            ],
        );
    let paths = ConfigPaths {
        user_dir: None,
        workspace: dir.path().to_path_buf(),
    };
    let config = Config::load(&paths, &BTreeMap::new(), &Overrides::default()).unwrap();
    let mut opts = SessionOptions::new(dir.path(), config);
    opts.models = ModelSource::Fixed(Arc::new(model));
    let session = Session::open(opts).await.unwrap();
    let report = session
        .run("parent", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.final_text, "done", "{report:?}");
    let runs = session.supervisor().snapshot();
    assert_eq!(runs.len(), 2);
    session.close().await;
}
