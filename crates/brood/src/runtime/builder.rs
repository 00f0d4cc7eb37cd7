//! The front door for embedding programs: [`SessionBuilder`] opens a [`Session`]
//! on a workspace with an optional configuration, model and tools of the caller's own.

use super::approval::Approver;
use super::config::{Config, ConfigPaths, Overrides};
use super::error::SessionError;
use super::options::{ModelSource, SessionOptions};
use super::root::RunReport;
use super::session::Session;
use crate::model::Model;
use crate::tool::Tool;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

/// Builds a [`Session`]; start with [`Session::builder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), brood::Error> {
/// let session = brood::Session::builder(".").build().await?;
/// let report = session.ask("List the crates of this workspace.").await?;
/// println!("{}", report.final_text);
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct SessionBuilder {
    workspace: PathBuf,
    config: Option<Config>,
    env: BTreeMap<String, String>,
    model: Option<Arc<dyn Model>>,
    tools: Vec<Arc<dyn Tool>>,
    ask_before: BTreeSet<String>,
    approver: Option<Arc<dyn Approver>>,
    working_dir: Option<PathBuf>,
    overrides: Overrides,
}

impl Session {
    /// Start building a session on `workspace` (an existing directory).
    pub fn builder(workspace: impl Into<PathBuf>) -> SessionBuilder {
        SessionBuilder {
            workspace: workspace.into(),
            config: None,
            env: BTreeMap::new(),
            model: None,
            tools: Vec::new(),
            ask_before: BTreeSet::new(),
            approver: None,
            working_dir: None,
            overrides: Overrides::default(),
        }
    }

    /// Run a parent agent on `prompt` to its end, cancelled only with the session
    /// ([`Session::cancel_all`]). [`Session::run`] gives a handle to cancel it and
    /// watch it.
    pub async fn ask(&self, prompt: &str) -> Result<RunReport, SessionError> {
        self.run_with(prompt, None, self.cancel_token().child_token())
            .await
    }
}

impl SessionBuilder {
    /// Use this configuration instead of loading the workspace's
    /// `.brood/config.toml` (plus `BROOD_*` variables of [`SessionBuilder::env`]).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Settings that win over the workspace's config and the environment, as the
    /// command's flags do (`--provider`, `--base-url`, `--model`, `--api-key-env`,
    /// `--max-turns`). Ignored when [`SessionBuilder::config`] gives the whole
    /// configuration.
    pub fn overrides(mut self, overrides: Overrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// The environment the session reads API keys and `BROOD_*` settings from.
    /// Nothing is read from the process unless passed here, e.g.
    /// `.env(std::env::vars())`.
    pub fn env<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// Answer every run (the parent and every child) with `model` instead of the
    /// configured providers.
    pub fn model(mut self, model: impl Model + 'static) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// Offer `tool` to the parent. Children get it by name: through a spawn's
    /// `allowed_tools` or a definition's `tools`, within their role's capabilities.
    /// A tool named like a built-in one is refused at [`SessionBuilder::build`].
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Ask before every call of these tools (built-in ones such as `bash` and
    /// `write_file`, memory tools, or your own), by the parent and by every child:
    /// the session's [`Approver`] decides, and without one the call is refused with
    /// a reason the model reads. A name the session has no tool for is refused at
    /// [`SessionBuilder::build`] ([`SessionError::AskUnknownTool`]).
    pub fn ask_before<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.ask_before.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Who decides calls of the [`SessionBuilder::ask_before`] tools — for the
    /// parent and for every child (the session has one approver).
    pub fn approver(mut self, approver: impl Approver + 'static) -> Self {
        self.approver = Some(Arc::new(approver));
        self
    }

    /// The directory the user works in, inside the workspace: the `AGENTS.md`
    /// files from the workspace root down to it are read (default: the root's only).
    pub fn working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Open the session: load the configuration (unless given), open the ledger,
    /// build the providers and the supervisor.
    pub async fn build(self) -> Result<Session, SessionError> {
        let config = match self.config {
            Some(c) => c,
            None => {
                let paths = ConfigPaths {
                    user_dir: None,
                    workspace: self.workspace.clone(),
                };
                Config::load(&paths, &self.env, &self.overrides)?
            }
        };
        let mut opts = SessionOptions::new(self.workspace, config);
        opts.env = self.env;
        if let Some(m) = self.model {
            opts.models = ModelSource::Fixed(m);
        }
        opts.tools = self.tools;
        opts.ask_before = self.ask_before;
        opts.approver = self.approver;
        opts.working_dir = self.working_dir;
        Session::open(opts).await
    }
}
