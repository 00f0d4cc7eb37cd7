//! The `bash` tool: one `bash -c` command in the workspace, bounded in time and
//! output, in its own process group.
//!
//! The command runs in a new session (`setsid`), so its process group holds every
//! process it starts. When the command returns, times out, or the call is cancelled
//! (or its future dropped), the whole group gets `SIGKILL` — background jobs do not
//! outlive the call — and the leader is reaped. stdout and stderr share one pipe so
//! their lines stay in order; the output keeps its head and tail within a cap.
//!
//! The caller's [`ShellPolicy`] decides: `None` refuses, `Full` runs plainly,
//! `ReadOnly` runs under the landlock [`Sandbox`] (read-only file system, a private
//! `TMPDIR`), or is refused where landlock is unavailable.

use super::sandbox::{enter, EnvPolicy, PreparedSandbox, Sandbox, ShellMode};
use super::{
    blocking, parse_args, schema_of, Capability, ShellPolicy, Tool, ToolContext, ToolError,
};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// Timeout when the call gives none.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Longest timeout a call may ask for.
pub(crate) const MAX_TIMEOUT_SECS: u64 = 600;
/// Bytes of output kept from the start and from the end (each).
pub(crate) const OUTPUT_HEAD_BYTES: usize = 32 * 1024;
/// Bytes of output kept from the end (see [`OUTPUT_HEAD_BYTES`]).
pub(crate) const OUTPUT_TAIL_BYTES: usize = 32 * 1024;
/// How long to keep reading after the command returned, for output still in flight
/// from processes that left the group.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// The `bash` tool. Holds the [`Sandbox`] whose availability probe it caches.
#[derive(Debug, Clone, Default)]
pub struct Bash {
    sandbox: Arc<Sandbox>,
}

impl Bash {
    /// The tool, running every command in `sandbox`.
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Bash { sandbox }
    }

    /// The sandbox its commands run in.
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }
}

/// Arguments of `bash`.
// Fields undocumented on purpose: schemars would send doc comments to the model
// in the tool's schema (every request pays for them); the tool's description says it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BashArgs {
    pub command: String,
    /// Default 120, max 600.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    #[serde(default)]
    pub cwd: Option<String>,
}

#[async_trait]
impl Tool for Bash {
    fn name(&self) -> &str {
        "bash"
    }
    fn description(&self) -> &str {
        "Run `bash -c command` in the workspace: stdout+stderr (middle cut past 64 KiB) and exit code. It and all it started are killed at timeout_secs or when it returns. Read-only shells write only $TMPDIR."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<BashArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Shell
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: BashArgs = parse_args(self.name(), args)?;
        let policy = ctx.permissions.shell;
        if policy == ShellPolicy::None {
            return Err(ToolError::NotGranted {
                tool: self.name().into(),
                holder: ctx.permissions.holder.clone(),
                reason: "no shell is granted".into(),
            });
        }
        if a.command.trim().is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: "command is empty".into(),
            });
        }
        let secs = match a.timeout_secs {
            None | Some(0) => DEFAULT_TIMEOUT_SECS,
            Some(s) => s.min(MAX_TIMEOUT_SECS),
        };
        let ws = ctx.workspace.clone();
        let cwd_arg = a.cwd.clone();
        let sandbox = self.sandbox.clone();
        let network = ctx.permissions.network;
        let (cwd, prepared) = blocking(move || {
            let cwd = ws.resolve(cwd_arg.as_deref().unwrap_or(""))?;
            if !cwd.is_dir() {
                return Err(ToolError::Io {
                    path: ws.display(&cwd),
                    detail: "cwd is not an existing directory".into(),
                });
            }
            let mode = if policy == ShellPolicy::ReadOnly {
                ShellMode::ReadOnly
            } else {
                ShellMode::Writer
            };
            let prepared =
                sandbox
                    .prepare(mode, ws.root(), network)
                    .map_err(|why| ToolError::Sandbox {
                        detail: if mode == ShellMode::ReadOnly {
                            format!(
                        "read-only shells need the landlock sandbox, which is unavailable here \
                         ({why}); read-only roles get no shell on this machine — use read_file, \
                         grep and find_files instead"
                    )
                        } else {
                            format!("the shell sandbox could not be set up: {why}")
                        },
                    })?;
            Ok((cwd, prepared))
        })
        .await?;
        let result = run(
            &a.command,
            &cwd,
            secs,
            &prepared,
            &self.sandbox.options().env,
            ctx,
        )
        .await;
        {
            let p = prepared;
            // Remove the private temp dir off the async threads.
            let _ = blocking(move || {
                drop(p);
                Ok(())
            })
            .await;
        }
        result
    }
}

/// How a run ended, before the output is attached.
enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

/// Spawn the command and drive it to its end: exit, timeout or cancellation.
async fn run(
    command: &str,
    cwd: &std::path::Path,
    secs: u64,
    sandbox: &PreparedSandbox,
    policy_env: &EnvPolicy,
    ctx: &ToolContext,
) -> Result<String, ToolError> {
    let spawn_error = |e: io::Error| ToolError::Failed(format!("could not start bash: {e}"));
    let (reader, writer) = pipe().map_err(spawn_error)?;
    let writer2 = writer.try_clone().map_err(spawn_error)?;

    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2));
    // Only allowed variables pass (keys, tokens and passwords never do).
    cmd.env_clear();
    cmd.envs(policy_env.filter(std::env::vars_os()));
    cmd.env("PAGER", "cat")
        .env("GIT_PAGER", "cat")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("BROOD_RUN_ID", &ctx.run_id);
    for var in ["TMPDIR", "TMP", "TEMP", "TEMPDIR"] {
        cmd.env(var, sandbox.tmpdir());
    }
    let plan = sandbox.plan().clone();
    // SAFETY: runs in the forked child before exec; `enter` makes raw syscalls only,
    // on buffers the parent built (see sandbox/child.rs).
    unsafe {
        cmd.pre_exec(move || enter(&plan));
    }
    let spawned = cmd.spawn();
    // The parent's copies of the pipe's write end live in `cmd`; close them so the
    // reader sees end-of-file once the group is gone.
    drop(cmd);
    let mut child = spawned.map_err(|e| ToolError::Sandbox {
        detail: format!("could not start bash in its sandbox: {e}"),
    })?;
    // After setsid the child's pid is its process group id.
    let group = ProcessGroup(child.id().map(|p| p as libc::pid_t));
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader).map_err(spawn_error)?;

    let mut out = CappedOutput::default();
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut ending: Option<Ending> = None;
    let mut status: Option<ExitStatus> = None;
    let mut eof = false;
    let mut drain_until: Option<Instant> = None;
    loop {
        if eof && status.is_some() {
            break;
        }
        tokio::select! {
            r = pipe.read(&mut buf), if !eof => match r {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => out.push(buf.get(..n).unwrap_or_default()),
            },
            st = child.wait(), if status.is_none() => {
                let st = st.map_err(|e| ToolError::Failed(format!("waiting for bash: {e}")))?;
                status = Some(st);
                // Background jobs die with the command.
                group.kill();
                drain_until = Some(Instant::now() + DRAIN_GRACE);
                if ending.is_none() {
                    ending = Some(Ending::Exited(st));
                }
            },
            _ = tokio::time::sleep_until(deadline), if ending.is_none() => {
                ending = Some(Ending::TimedOut);
                group.kill();
            },
            _ = ctx.cancel.cancelled(), if ending.is_none() => {
                ending = Some(Ending::Cancelled);
                group.kill();
            },
            _ = tokio::time::sleep_until(drain_until.unwrap_or(deadline)), if drain_until.is_some() => {
                // Something that left the group still holds the pipe; stop reading.
                break;
            },
        }
    }
    let output = out.render();
    match ending {
        Some(Ending::TimedOut) => Err(ToolError::ShellTimeout { secs, output }),
        Some(Ending::Cancelled) => Err(ToolError::Cancelled),
        Some(Ending::Exited(st)) => Ok(with_status(output, st)),
        None => Err(ToolError::Failed("bash ended without a status".into())),
    }
}

/// The output followed by how the command ended.
fn with_status(mut output: String, st: ExitStatus) -> String {
    if output.is_empty() {
        output.push_str("(no output)\n");
    } else if !output.ends_with('\n') {
        output.push('\n');
    }
    match (st.code(), st.signal()) {
        (Some(code), _) => output.push_str(&format!("[exit code: {code}]")),
        (None, Some(sig)) => output.push_str(&format!("[killed by signal {sig}]")),
        (None, None) => output.push_str(&format!("[ended: {st}]")),
    }
    output
}

/// A process group that is sent `SIGKILL` on [`kill`](Self::kill) and on drop (so a
/// dropped call leaves nothing running). Killing an empty group is harmless.
struct ProcessGroup(Option<libc::pid_t>);

impl ProcessGroup {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            if pgid > 1 {
                // SAFETY: plain syscall; a negative pid addresses the process group.
                unsafe {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A pipe whose ends are close-on-exec (the child gets them as fds 1 and 2 only).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are fresh descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Output within a cap: the first and the last bytes, and how many were dropped
/// in between.
#[derive(Default)]
struct CappedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

impl CappedOutput {
    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < OUTPUT_HEAD_BYTES {
            let room = OUTPUT_HEAD_BYTES - self.head.len();
            let (head, rest) = bytes.split_at_checked(room).unwrap_or((bytes, &[]));
            self.head.extend_from_slice(head);
            bytes = rest;
        }
        self.tail.extend(bytes);
        if self.tail.len() > OUTPUT_TAIL_BYTES {
            let extra = self.tail.len() - OUTPUT_TAIL_BYTES;
            self.tail.drain(..extra);
            self.dropped += extra as u64;
        }
    }

    fn render(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!(
                "\n[... {} bytes of output omitted ...]\n",
                self.dropped
            ));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_output_keeps_head_and_tail() {
        let mut o = CappedOutput::default();
        o.push(&vec![b'a'; OUTPUT_HEAD_BYTES]);
        o.push(&vec![b'b'; 1000]);
        o.push(&vec![b'c'; OUTPUT_TAIL_BYTES]);
        let s = o.render();
        assert!(s.starts_with(&"a".repeat(OUTPUT_HEAD_BYTES)));
        assert!(s.contains("[... 1000 bytes of output omitted ...]"));
        assert!(s.ends_with(&"c".repeat(OUTPUT_TAIL_BYTES)));
        assert!(!s.contains("bb"));
    }
}
