//! One MCP server's connection, shared by every run of a session: started once
//! (concurrent first users wait on the same start), its calls multiplexed over
//! it, and started again on the next use after it died. Every start lists the
//! server's tools (`tools/list`) within the start-up timeout, so a server that
//! comes back with other tools is known by its new list (its generation counts
//! the listings). Every failure is a
//! [`ToolError::Mcp`] naming the server.
//!
//! A stdio server is the user's command run as it is (not in the shell sandbox:
//! see docs/ARCHITECTURE.md "Decisions"), with the session's environment minus the
//! provider key variables, plus its own `env`; its stderr is kept (the last
//! [`STDERR_TAIL_BYTES`]) for the error when it fails to start. A `url` server
//! is reached over streamable HTTP (the `http` module); "started again" is then a
//! new connection and MCP session. The variables a server's table names (its
//! bearer token, `env_http_headers`, a `.mcp.json`'s `${VAR}`) are read from the
//! same environment a stdio server gets, so a provider key reaches no server.

use super::dot_json::expand;
use super::http::{self, HttpTarget};
use super::spec::{Launch, McpServerSpec};
use crate::tool::ToolError;
use futures::future::{BoxFuture, FutureExt, Shared};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// Bytes of a server's stderr kept for error messages.
pub const STDERR_TAIL_BYTES: usize = 2048;

type Client = RunningService<RoleClient, ()>;

/// A server's tool list as of its last start, each entry MCP's `Tool` as JSON,
/// with its generation (how many listings there were), set together.
#[derive(Default)]
struct Listing(Mutex<(u64, Arc<Vec<Value>>)>);

impl Listing {
    fn set(&self, tools: Vec<Value>) {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *l = (l.0 + 1, Arc::new(tools));
    }

    fn get(&self) -> (u64, Arc<Vec<Value>>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
type Starting = Shared<BoxFuture<'static, Result<Arc<Client>, String>>>;

enum State {
    Down,
    Starting(Starting),
    Up(Arc<Client>),
}

/// Where and with what a server's process starts.
#[derive(Debug, Clone)]
pub struct LaunchEnv {
    /// The variables it gets (the session's, provider keys removed).
    pub env: BTreeMap<String, String>,
    /// The workspace root (its default working directory).
    pub root: PathBuf,
    /// Variables of the session withheld from every server (provider keys),
    /// named when a server's table asks for one.
    pub withheld: BTreeSet<String>,
}

impl LaunchEnv {
    /// The value of variable `name` a server may be given, or why not.
    fn var(&self, name: &str) -> Result<String, String> {
        match self.env.get(name) {
            Some(v) => Ok(v.clone()),
            None if self.withheld.contains(name) => Err(format!(
                "{name} is a provider key variable, which no MCP server is given"
            )),
            None => Err(format!("{name} is not set")),
        }
    }

    /// `text` with `${VAR}` expanded when `on` (a `.mcp.json` entry).
    fn expand(&self, text: &str, on: bool) -> Result<String, String> {
        if !on {
            return Ok(text.to_string());
        }
        expand(text, |n| self.var(n).ok())
    }
}

/// One configured server and its (possibly absent) connection.
pub struct Server {
    spec: McpServerSpec,
    launch_env: Arc<LaunchEnv>,
    state: Mutex<State>,
    stderr: Arc<Mutex<String>>,
    listing: Arc<Listing>,
}

impl Server {
    /// A server not started yet.
    pub fn new(spec: McpServerSpec, launch_env: Arc<LaunchEnv>) -> Server {
        Server {
            spec,
            launch_env,
            state: Mutex::new(State::Down),
            stderr: Arc::new(Mutex::new(String::new())),
            listing: Arc::default(),
        }
    }

    /// Its tools as of its last start (empty before one succeeded), and that
    /// listing's generation.
    pub fn listed(&self) -> (u64, Arc<Vec<Value>>) {
        self.listing.get()
    }

    /// How many times it was listed (a start that succeeded lists it).
    pub fn generation(&self) -> u64 {
        self.listing.get().0
    }

    fn offers(&self, tool: &str) -> bool {
        self.listed()
            .1
            .iter()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(tool))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its checked configuration.
    pub fn spec(&self) -> &McpServerSpec {
        &self.spec
    }

    fn error(&self, detail: impl Into<String>) -> ToolError {
        ToolError::Mcp {
            server: self.spec.name.clone(),
            detail: detail.into(),
        }
    }

    /// The live connection, started (or restarted) if there is none.
    async fn client(&self) -> Result<Arc<Client>, String> {
        let starting = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match &*state {
                State::Up(c) if !closed(c) => return Ok(c.clone()),
                State::Starting(f) => f.clone(),
                State::Up(_) | State::Down => {
                    let f = bounded_launch(
                        self.spec.clone(),
                        self.launch_env.clone(),
                        self.stderr.clone(),
                        self.listing.clone(),
                    )
                    .boxed()
                    .shared();
                    *state = State::Starting(f.clone());
                    f
                }
            }
        };
        let r = starting.clone().await;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let State::Starting(f) = &*state {
            if f.ptr_eq(&starting) {
                *state = match &r {
                    Ok(c) => State::Up(c.clone()),
                    Err(_) => State::Down,
                };
            }
        }
        r
    }

    /// Forget `client` if it is still the current connection (it died).
    fn drop_client(&self, client: &Arc<Client>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let State::Up(c) = &*state {
            if Arc::ptr_eq(c, client) {
                *state = State::Down;
            }
        }
    }

    /// Start it (if needed), which lists its tools ([`Server::listed`]), within
    /// the start-up timeout.
    pub(crate) async fn start_and_list(&self) -> Result<(), String> {
        let secs = self.spec.startup_timeout.as_secs();
        match tokio::time::timeout(self.spec.startup_timeout, self.client()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.with_stderr(e)),
            Err(_) => {
                self.stop();
                Err(self.with_stderr(format!(
                    "did not start and list its tools within startup_timeout_secs = {secs}"
                )))
            }
        }
    }

    /// Drop the connection (its process is killed with it).
    pub fn stop(&self) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = State::Down;
    }

    fn with_stderr(&self, detail: String) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        let tail = tail.trim();
        if tail.is_empty() {
            detail
        } else {
            format!("{detail}; its stderr ends: {tail}")
        }
    }

    /// Call its tool `tool` with `args`; the result as MCP's `CallToolResult` JSON.
    pub async fn call(
        &self,
        tool: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let client = tokio::select! {
            c = self.client() => c.map_err(|e| self.error(format!(
                "is not running and could not be started: {}", self.with_stderr(e)
            )))?,
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        if !self.offers(tool) {
            return Err(self.error(format!(
                "no longer offers {tool}: its tool list changed when it started again \
                 (runs opened from now on get the new list)"
            )));
        }
        let arguments = match args {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let secs = self.spec.tool_timeout.as_secs();
        let answer = tokio::select! {
            r = tokio::time::timeout(self.spec.tool_timeout, client.call_tool(params)) => r,
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        match answer {
            Err(_) => Err(self.error(format!(
                "{tool} did not answer within tool_timeout_secs = {secs}"
            ))),
            Ok(Err(e)) if closed(&client) || is_transport_error(&e) => {
                self.drop_client(&client);
                let why = http::call_failure(&e).unwrap_or_else(|| e.to_string());
                let again = match self.spec.launch {
                    Launch::Stdio { .. } => "it is started again on the next call",
                    Launch::Http { .. } => "brood connects again on the next call",
                };
                Err(self.error(format!(
                    "stopped during the call of {tool} ({why}); {again}"
                )))
            }
            Ok(Err(e)) => Err(self.error(format!("{tool} failed: {e}"))),
            Ok(Ok(result)) => serde_json::to_value(result)
                .map_err(|e| self.error(format!("{tool}: unreadable result: {e}"))),
        }
    }
}

fn closed(c: &Client) -> bool {
    c.is_closed() || c.peer().is_transport_closed()
}

fn is_transport_error(e: &rmcp::ServiceError) -> bool {
    matches!(
        e,
        rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)
    )
}

/// [`launch`] within the server's start-up timeout.
async fn bounded_launch(
    spec: McpServerSpec,
    launch_env: Arc<LaunchEnv>,
    stderr_tail: Arc<Mutex<String>>,
    listing: Arc<Listing>,
) -> Result<Arc<Client>, String> {
    let limit = spec.startup_timeout;
    tokio::time::timeout(limit, async move {
        let client = launch(spec, launch_env, stderr_tail).await?;
        let tools = client
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        listing.set(
            tools
                .into_iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .collect(),
        );
        Ok(client)
    })
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "did not start and list its tools within startup_timeout_secs = {}",
            limit.as_secs()
        ))
    })
}

/// Start the server and run MCP's `initialize` handshake.
async fn launch(
    spec: McpServerSpec,
    launch_env: Arc<LaunchEnv>,
    stderr_tail: Arc<Mutex<String>>,
) -> Result<Arc<Client>, String> {
    match &spec.launch {
        Launch::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let x = |t: &str| launch_env.expand(t, spec.expand_vars);
            let command = x(command)?;
            let args = args.iter().map(|a| x(a)).collect::<Result<Vec<_>, _>>()?;
            let env = env
                .iter()
                .map(|(k, v)| Ok((k.clone(), x(v)?)))
                .collect::<Result<BTreeMap<_, _>, String>>()?;
            let mut cmd = tokio::process::Command::new(&command);
            cmd.args(&args)
                .env_clear()
                .envs(&launch_env.env)
                .envs(&env)
                .current_dir(match cwd {
                    Some(c) => launch_env.root.join(c),
                    None => launch_env.root.clone(),
                })
                .kill_on_drop(true);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {command:?}: {e}"))?;
            stderr_tail
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            if let Some(mut stderr) = stderr {
                let tail = stderr_tail.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stderr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                        t.push_str(&String::from_utf8_lossy(buf.get(..n).unwrap_or_default()));
                        if t.len() > STDERR_TAIL_BYTES {
                            let mut cut = t.len() - STDERR_TAIL_BYTES;
                            while !t.is_char_boundary(cut) {
                                cut += 1;
                            }
                            t.drain(..cut);
                        }
                    }
                });
            }
            let client =
                ().serve(transport)
                    .await
                    .map_err(|e| format!("the MCP handshake failed: {e}"))?;
            Ok(Arc::new(client))
        }
        Launch::Http {
            url,
            bearer_token_env,
            headers,
            env_headers,
        } => {
            let target = http_target(
                &spec,
                &launch_env,
                url,
                bearer_token_env,
                headers,
                env_headers,
            )?;
            let transport = http::transport(&spec, target)?;
            let client = ()
                .serve(transport)
                .await
                .map_err(|e| format!("{}: {}", shown_url(url), http::handshake_failure(&e)))?;
            Ok(Arc::new(client))
        }
    }
}

/// A `url` server's URL, token and headers with their variables read.
fn http_target(
    spec: &McpServerSpec,
    launch_env: &LaunchEnv,
    url: &str,
    bearer_token_env: &Option<String>,
    headers: &BTreeMap<String, String>,
    env_headers: &BTreeMap<String, String>,
) -> Result<HttpTarget, String> {
    let x = |t: &str| launch_env.expand(t, spec.expand_vars);
    let token = match bearer_token_env {
        Some(name) => {
            let v = launch_env
                .var(name)
                .map_err(|why| format!("bearer_token_env: {why}"))?;
            if v.trim().is_empty() {
                return Err(format!("bearer_token_env: {name} is empty"));
            }
            Some(v)
        }
        None => None,
    };
    let mut resolved = BTreeMap::new();
    for (name, value) in headers {
        resolved.insert(
            name.clone(),
            x(value).map_err(|why| format!("header {name}: {why}"))?,
        );
    }
    // Codex's rule: an unset or empty variable sends no header.
    for (name, var) in env_headers {
        if let Some(v) = launch_env.env.get(var).filter(|v| !v.is_empty()) {
            resolved.insert(name.clone(), v.clone());
        }
    }
    Ok(HttpTarget {
        url: x(url)?,
        token,
        headers: resolved,
    })
}

/// A URL as errors show it: scheme, host, port and path (a query or user
/// info may carry credentials).
fn shown_url(url: &str) -> String {
    match reqwest_mcp::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default(),
            u.path()
        ),
        Err(_) => "the server's url".to_string(),
    }
}
