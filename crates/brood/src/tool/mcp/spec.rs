//! `[mcp_servers.<name>]`: how one MCP server is reached and bounded — Codex's
//! shape (`command`/`args`/`env`/`cwd` for stdio, `url` + `bearer_token_env` +
//! `http_headers` + `env_http_headers` for streamable HTTP), so users can copy
//! blocks; Codex's spellings `startup_timeout_sec`, `tool_timeout_sec` and
//! `bearer_token_env_var` are accepted too. [`McpServerConfig::check`] is the one semantic check (the config
//! layer names the file around its [`SpecProblem`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Seconds a server has to start and answer `initialize` + `tools/list` (default).
pub(crate) const DEFAULT_STARTUP_TIMEOUT_SECS: u64 = 30;
/// Seconds one tool call may take (default).
pub(crate) const DEFAULT_TOOL_TIMEOUT_SECS: u64 = 120;

/// One `[mcp_servers.<name>]` table (or one `.mcp.json` `mcpServers` entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program of a stdio server.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Option<Vec<String>>,
    /// Variables set for it (on top of the session's environment minus provider keys).
    pub env: Option<BTreeMap<String, String>>,
    /// Its working directory (relative: to the workspace root; default the root).
    pub cwd: Option<PathBuf>,
    /// The endpoint of a streamable HTTP server.
    pub url: Option<String>,
    /// The variable whose value is sent as `Authorization: Bearer …` (HTTP only).
    #[serde(alias = "bearer_token_env_var")]
    pub bearer_token_env: Option<String>,
    /// Headers sent with every request as written (HTTP only).
    pub http_headers: Option<BTreeMap<String, String>>,
    /// Headers whose values are read from variables: header name → variable name
    /// (HTTP only; an unset or empty variable sends no header, as in Codex).
    pub env_http_headers: Option<BTreeMap<String, String>>,
    /// Seconds to start and list tools (1..=600, default 30).
    #[serde(alias = "startup_timeout_sec")]
    pub startup_timeout_secs: Option<u64>,
    /// Seconds one call may take (1..=3600, default 120).
    #[serde(alias = "tool_timeout_sec")]
    pub tool_timeout_secs: Option<u64>,
    /// Tools (the server's own names) read-only roles may use even without the
    /// server's `readOnlyHint`.
    pub read_only_tools: Option<Vec<String>>,
    /// `false` keeps the server configured but not started.
    pub enabled: Option<bool>,
    /// `${VAR}` and `${VAR:-default}` in `command`, `args`, `env`, `url` and
    /// headers are expanded when the server starts (a `.mcp.json` entry, as
    /// Claude Code does; never a key of a brood config).
    #[serde(skip)]
    pub expand_vars: bool,
}

/// What is wrong with a server's table: the key (inside the table) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// The key inside `[mcp_servers.<name>]` (empty: the table, or its name).
    pub key: &'static str,
    /// What is wrong and what to write instead.
    pub detail: String,
}

/// How a checked server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launch {
    /// A child process speaking MCP on its stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it.
        env: BTreeMap<String, String>,
        /// Its working directory, if not the workspace root.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The URL.
        url: String,
        /// The variable holding the bearer token.
        bearer_token_env: Option<String>,
        /// Headers sent as written.
        headers: BTreeMap<String, String>,
        /// Headers whose values are variables' (header → variable).
        env_headers: BTreeMap<String, String>,
    },
}

/// A server after [`McpServerConfig::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    /// Its name (the `<server>` of `mcp__<server>__<tool>`).
    pub name: String,
    /// How it is reached.
    pub launch: Launch,
    /// Bound on start-up (spawn, `initialize`, `tools/list`).
    pub startup_timeout: Duration,
    /// Bound on one call.
    pub tool_timeout: Duration,
    /// Its tools read-only roles may use whatever the server says.
    pub read_only_tools: Vec<String>,
    /// `${VAR}` expansion at start (`.mcp.json` entries).
    pub expand_vars: bool,
}

/// Whether `name` may name a server: ASCII letters, digits, `-` and `_`, no `__`
/// (it separates server and tool in `mcp__<server>__<tool>`), 1..=32 bytes.
pub(crate) fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl McpServerConfig {
    /// Whether it is to be started (`enabled` unset means yes).
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// Check the table of server `name`: exactly one of `command` and `url`, keys
    /// of the other transport absent, timeouts in range, names well formed.
    pub fn check(&self, name: &str) -> Result<McpServerSpec, SpecProblem> {
        let bad = |key: &'static str, detail: String| SpecProblem { key, detail };
        if !valid_server_name(name) {
            return Err(bad(
                "",
                format!(
                    "server name {name:?} must be 1..=32 ASCII letters, digits, '-' or '_' \
                     without '__' (tools are named mcp__<server>__<tool>)"
                ),
            ));
        }
        let launch = match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "url",
                    "set either command (a stdio server) or url (streamable HTTP), not both".into(),
                ))
            }
            (None, None) => {
                return Err(bad(
                    "command",
                    "set command (a stdio server) or url (streamable HTTP)".into(),
                ))
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(bad("command", "is empty; name the program to run".into()));
                }
                for (key, set) in [
                    ("bearer_token_env", self.bearer_token_env.is_some()),
                    ("http_headers", self.http_headers.is_some()),
                    ("env_http_headers", self.env_http_headers.is_some()),
                ] {
                    if set {
                        return Err(bad(
                            key,
                            "applies to url servers only; pass a stdio server what it needs in env"
                                .to_string(),
                        ));
                    }
                }
                Launch::Stdio {
                    command: command.clone(),
                    args: self.args.clone().unwrap_or_default(),
                    env: self.env.clone().unwrap_or_default(),
                    cwd: self.cwd.clone(),
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(bad("url", "must start with http:// or https://".into()));
                }
                for (key, set) in [
                    ("args", self.args.is_some()),
                    ("env", self.env.is_some()),
                    ("cwd", self.cwd.is_some()),
                ] {
                    if set {
                        return Err(bad(
                            key,
                            format!("applies to command (stdio) servers only; remove {key}"),
                        ));
                    }
                }
                if let Some(v) = &self.bearer_token_env {
                    if v.trim().is_empty() {
                        return Err(bad(
                            "bearer_token_env",
                            "is empty; name the variable holding the token".into(),
                        ));
                    }
                }
                let headers = self.http_headers.clone().unwrap_or_default();
                let env_headers = self.env_http_headers.clone().unwrap_or_default();
                for (key, names) in [
                    ("http_headers", &headers),
                    ("env_http_headers", &env_headers),
                ] {
                    if let Some(h) = names.keys().find(|h| !valid_header_name(h)) {
                        return Err(bad(
                            key,
                            format!("{h:?} is not an HTTP header name (letters, digits, '-')"),
                        ));
                    }
                    if let Some(h) = names.keys().find(|h| reserved_header(h)) {
                        return Err(bad(
                            key,
                            format!(
                                "{h:?} is set by the MCP transport itself; remove it (a token goes in bearer_token_env)"
                            ),
                        ));
                    }
                }
                Launch::Http {
                    url: url.clone(),
                    bearer_token_env: self.bearer_token_env.clone(),
                    headers,
                    env_headers,
                }
            }
        };
        let secs = |key: &'static str, v: Option<u64>, default: u64, max: u64| match v {
            None => Ok(Duration::from_secs(default)),
            Some(s) if (1..=max).contains(&s) => Ok(Duration::from_secs(s)),
            Some(s) => Err(bad(
                key,
                format!("{s} is out of range; use 1..={max} seconds"),
            )),
        };
        let startup_timeout = secs(
            "startup_timeout_secs",
            self.startup_timeout_secs,
            DEFAULT_STARTUP_TIMEOUT_SECS,
            600,
        )?;
        let tool_timeout = secs(
            "tool_timeout_secs",
            self.tool_timeout_secs,
            DEFAULT_TOOL_TIMEOUT_SECS,
            3600,
        )?;
        let read_only_tools = self.read_only_tools.clone().unwrap_or_default();
        if let Some(t) = read_only_tools.iter().find(|t| t.trim().is_empty()) {
            return Err(bad(
                "read_only_tools",
                format!("{t:?} is not a tool name; list the server's tool names"),
            ));
        }
        Ok(McpServerSpec {
            name: name.to_string(),
            launch,
            startup_timeout,
            tool_timeout,
            read_only_tools,
            expand_vars: self.expand_vars,
        })
    }
}

/// Whether `name` can be an HTTP header's name (RFC 9110 token characters).
fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Headers the streamable HTTP transport sets itself.
fn reserved_header(name: &str) -> bool {
    [
        "accept",
        "content-type",
        "content-length",
        "host",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    ]
    .iter()
    .any(|r| name.eq_ignore_ascii_case(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio() -> McpServerConfig {
        McpServerConfig {
            command: Some("srv".into()),
            ..Default::default()
        }
    }

    #[test]
    fn one_transport_and_its_own_keys() {
        assert!(stdio().check("gh").is_ok());
        let both = McpServerConfig {
            url: Some("http://x".into()),
            ..stdio()
        };
        assert_eq!(both.check("gh").unwrap_err().key, "url");
        assert_eq!(
            McpServerConfig::default().check("gh").unwrap_err().key,
            "command"
        );
        let http_with_args = McpServerConfig {
            url: Some("https://x/mcp".into()),
            args: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(http_with_args.check("gh").unwrap_err().key, "args");
        let token_on_stdio = McpServerConfig {
            bearer_token_env: Some("T".into()),
            ..stdio()
        };
        assert_eq!(
            token_on_stdio.check("gh").unwrap_err().key,
            "bearer_token_env"
        );
    }

    #[test]
    fn names_and_ranges() {
        for bad in ["", "a__b", "a.b", "a b", &"x".repeat(33)] {
            assert!(stdio().check(bad).is_err(), "{bad:?} accepted");
        }
        let slow = McpServerConfig {
            tool_timeout_secs: Some(0),
            ..stdio()
        };
        assert_eq!(slow.check("gh").unwrap_err().key, "tool_timeout_secs");
        let spec = McpServerConfig {
            startup_timeout_secs: Some(5),
            ..stdio()
        }
        .check("g-h_1")
        .unwrap();
        assert_eq!(spec.startup_timeout, Duration::from_secs(5));
        assert_eq!(spec.tool_timeout, Duration::from_secs(120));
    }

    #[test]
    fn codex_spellings_are_read() {
        let c: McpServerConfig = toml::from_str(
            "url = \"https://x/mcp\"\nbearer_token_env_var = \"T\"\nstartup_timeout_sec = 9\ntool_timeout_sec = 7\n",
        )
        .unwrap();
        assert_eq!(c.bearer_token_env.as_deref(), Some("T"));
        assert_eq!(c.startup_timeout_secs, Some(9));
        assert_eq!(c.tool_timeout_secs, Some(7));
    }
}
