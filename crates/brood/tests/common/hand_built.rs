//! A supervisor built by hand (not through a session), so a test can extend the
//! tool set or keep a handle to the ledger, and a root run on it.

use super::within;
use brood::agent::AgentOutcome;
use brood::ledger::{Ledger, LedgerOptions};
use brood::model::{Model, ModelError, Sampling};
use brood::subagent::{
    AgentCatalog, QuickModels, RootRequest, SubagentSettings, Supervisor, SupervisorEnv,
    ToolFactory,
};
use brood::tool::{builtin_tools, BuiltinOptions, Sandbox, Tool, Workspace};
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A supervisor built by hand, so the tool set can be extended.
pub fn supervisor(ws: &Path, model: Arc<dyn Model>, tools: ToolFactory) -> Supervisor {
    supervisor_with(ws, model, tools, LedgerOptions::default())
}

pub fn supervisor_with(
    ws: &Path,
    model: Arc<dyn Model>,
    tools: ToolFactory,
    options: LedgerOptions,
) -> Supervisor {
    supervisor_on(
        ws,
        Arc::new(Ledger::open(ws, options).unwrap()),
        model,
        tools,
    )
}

/// A supervisor on a ledger the test keeps a handle to.
pub fn supervisor_on(
    ws: &Path,
    ledger: Arc<Ledger>,
    model: Arc<dyn Model>,
    tools: ToolFactory,
) -> Supervisor {
    Supervisor::new(SupervisorEnv {
        workspace: Arc::new(Workspace::open(ws).unwrap()),
        session_id: ledger.session_id().to_string(),
        ledger,
        catalog: Arc::new(AgentCatalog::load(ws, &[])),
        settings: SubagentSettings::default(),
        quick_models: QuickModels::default(),
        main_provider: "local".into(),
        main_model_id: "mock-model".into(),
        main_model: model,
        routes: Arc::new(|p: &str, _m: &str| Err(ModelError::Config(format!("no provider {p}")))),
        tools,
        read_only_shell: false,
        sampling: Sampling::default(),
        tool_choice: Default::default(),
        tool_concurrency: brood::agent::DEFAULT_TOOL_CONCURRENCY,
        session_cancel: CancellationToken::new(),
        pricing: Default::default(),
        project_instructions: "".into(),
        mcp: Default::default(),
    })
}

pub fn builtin_plus(extra: impl Fn() -> Vec<Arc<dyn Tool>> + Send + Sync + 'static) -> ToolFactory {
    let sandbox = Arc::new(Sandbox::new());
    Arc::new(move |_run: &str| {
        let mut tools = builtin_tools(&BuiltinOptions {
            memory: None,
            sandbox: Some(sandbox.clone()),
        });
        tools.extend(extra());
        tools
    })
}

pub async fn run_root(sup: &Supervisor, prompt: &str) -> (String, AgentOutcome) {
    let req = RootRequest {
        prompt: prompt.into(),
        system: None,
        max_turns: 10,
        events: None,
        cancel: CancellationToken::new(),
        name: "parent".into(),
        tallies: None,
        history: Vec::new(),
    };
    within("the parent run", sup.run_root(req)).await.unwrap()
}
