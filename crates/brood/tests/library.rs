//! brood as a library: what an embedding program writes, through the crate root only.

use async_trait::async_trait;
use brood::model::scripted::{ScriptStep, ScriptedModel};
use brood::{Capability, Session, Tool, ToolContext, ToolError};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// The embedder's tool: answers the weather and remembers which run asked.
struct Weather(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "weather"
    }
    fn description(&self) -> &str {
        "The weather in a city."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        self.0.lock().unwrap().push(ctx.run_id.clone());
        Ok(format!("sunny in {}", args["city"].as_str().unwrap_or("?")))
    }
}

fn report(summary: &str) -> String {
    format!("SUMMARY: {summary}\nCHANGES: None.\nEVIDENCE: None.\nRISKS: None.\nBLOCKERS: None.")
}

#[tokio::test]
async fn an_embedder_adds_a_tool_and_a_model_and_both_parent_and_child_call_the_tool() {
    let model = ScriptedModel::new()
        .on(
            "CHILD",
            vec![
                ScriptStep::tool_call("weather", json!({"city": "Bergen"})),
                ScriptStep::text(report("Bergen is sunny.")),
            ],
        )
        .otherwise(vec![
            ScriptStep::tool_call("weather", json!({"city": "Oslo"})),
            ScriptStep::tool_call(
                "task",
                json!({"prompts": ["CHILD: check Bergen"], "agent_type": "forecaster"}),
            ),
            ScriptStep::text("Both are sunny."),
        ]);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let dir = tempfile::tempdir().unwrap();
    // A child definition granted the embedder's tool by name.
    std::fs::create_dir_all(dir.path().join(".brood/agents")).unwrap();
    std::fs::write(
        dir.path().join(".brood/agents/forecaster.md"),
        "---\ndescription: Checks the weather.\ntools: weather\nrole: custom\n---\nForecast.\n",
    )
    .unwrap();

    // The embedding program: this is all it takes.
    let session = Session::builder(dir.path())
        .model(model)
        .tool(Weather(calls.clone()))
        .build()
        .await
        .unwrap();
    let report = session
        .ask("PARENT: weather in Oslo and Bergen")
        .await
        .unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(report.final_text, "Both are sunny.");

    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls.len(),
        2,
        "parent and child each call the tool: {calls:?}"
    );
    assert_eq!(calls[0], report.run_id, "the parent called it first");
    assert_ne!(
        calls[1], report.run_id,
        "the child called it from its own run"
    );
    session.close().await;
}

#[tokio::test]
async fn a_tool_that_shadows_a_built_in_name_is_refused_with_its_name() {
    struct Shadow;
    #[async_trait]
    impl Tool for Shadow {
        fn name(&self) -> &str {
            "read_file"
        }
        fn description(&self) -> &str {
            "not the real one"
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn capability(&self) -> Capability {
            Capability::Read
        }
        async fn call(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let err = match Session::builder(dir.path())
        .model(ScriptedModel::new())
        .tool(Shadow)
        .build()
        .await
    {
        Ok(_) => panic!("a shadowing tool was accepted"),
        Err(e) => e,
    };
    assert!(
        matches!(err, brood::Error::ToolName { ref name } if name == "read_file"),
        "{err}"
    );
    assert!(err.is_usage());
}
