//! How to open a session ([`SessionOptions`]) and where its model answers come
//! from ([`ModelSource`]).

use super::config::Config;
use crate::model::Model;
use crate::tool;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where model answers come from.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum ModelSource {
    /// The configured providers, over the network.
    #[default]
    Live,
    /// Live, and every request and response appended to this JSON-lines file.
    Record(PathBuf),
    /// Answers from a recording; no network at all.
    Replay(PathBuf),
    /// This model for every run (tests, benchmarks, embedding programs).
    Fixed(Arc<dyn Model>),
    /// This model for the main route — the parent, and children routed to the main
    /// provider — while children routed to another provider (`[subagents]
    /// subagent_provider`, quick models, …) get it built from the config
    /// (`[providers.<preset>]`) as in [`ModelSource::Live`]. Hybrid runs: a scripted
    /// or embedded parent with children on a real endpoint.
    FixedMain(Arc<dyn Model>),
}

/// How to open a session.
#[derive(Clone)]
pub struct SessionOptions {
    /// The workspace root (an existing directory).
    pub workspace: PathBuf,
    /// The configuration, already loaded.
    pub config: Config,
    /// The process environment (API keys, `BROOD_MEMORY`); passed in, never read globally.
    pub env: BTreeMap<String, String>,
    /// Where model answers come from.
    pub models: ModelSource,
    /// Build children's providers for routes other than the main one; defaults to
    /// the configured presets. Tests use it to send children to another server.
    pub route_builder: Option<crate::subagent::RouteBuilder>,
    /// Overrides the supervisor limits derived from the config (tests).
    pub limits: Option<crate::subagent::Limits>,
    /// The embedder's own tools, offered to the parent with the built-in ones and
    /// to children that are granted them by name.
    pub tools: Vec<Arc<dyn tool::Tool>>,
    /// Tools (by name) whose every call the approver decides first.
    pub ask_before: std::collections::BTreeSet<String>,
    /// Who decides calls of `ask_before` tools; `None`: they are refused.
    pub approver: Option<Arc<dyn super::approval::Approver>>,
    /// The directory the user works in. When it lies inside the workspace, the
    /// `AGENTS.md` (else `CLAUDE.md`) of every directory from the workspace root
    /// down to it is read (Codex's rule); `None`: the root's only.
    pub working_dir: Option<PathBuf>,
}

impl SessionOptions {
    /// Options for `workspace` with `config`: live providers, no extra tools.
    pub fn new(workspace: impl Into<PathBuf>, config: Config) -> Self {
        SessionOptions {
            workspace: workspace.into(),
            config,
            env: BTreeMap::new(),
            models: ModelSource::Live,
            route_builder: None,
            limits: None,
            tools: Vec::new(),
            ask_before: Default::default(),
            approver: None,
            working_dir: None,
        }
    }
}
