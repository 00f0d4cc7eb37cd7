//! Memory tools: notes that outlive a run, in two Markdown files — the workspace's
//! `<workspace>/.brood/memory.md` and the user's (normally
//! `~/.config/brood/memory.md`).
//!
//! `memory_read` shows both with line numbers, `memory_search` finds lines in them
//! (`file:line: text`), `remember` appends one dated line (`- 2026-11-22: note`) to
//! the workspace file. Appends take an exclusive `flock` on the file and write the
//! whole line with one `O_APPEND` write, so any number of children and processes can
//! remember at once without interleaving or losing notes. All three tools have
//! [`Capability::Memory`]; which of them a role gets is decided by its allowed tools.

use super::{
    blocking, clip, parse_args, schema_of, Capability, Tool, ToolContext, ToolError, Workspace,
};
use async_trait::async_trait;
use grep_matcher::Matcher;
use grep_regex::RegexMatcherBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Most bytes `memory_read` shows per file (the newest lines are kept).
pub(crate) const READ_MAX_BYTES: usize = 64 * 1024;
/// Most lines `memory_search` returns.
pub(crate) const SEARCH_MAX_RESULTS: usize = 200;
/// Largest memory file the tools read (a larger one is reported, not read).
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// Longest note, in characters.
pub(crate) const MAX_NOTE_CHARS: usize = 1000;

/// The two memory files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryFiles {
    /// The workspace's file; `remember` appends here.
    pub workspace_file: PathBuf,
    /// The user's file, read and searched but not written by tools.
    pub user_file: Option<PathBuf>,
}

impl MemoryFiles {
    /// `<root>/.brood/memory.md` plus the given user file.
    pub fn for_workspace(root: &Path, user_file: Option<PathBuf>) -> Self {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        MemoryFiles {
            workspace_file: root.join(".brood").join("memory.md"),
            user_file,
        }
    }

    /// `$XDG_CONFIG_HOME/brood/memory.md`, else `$HOME/.config/brood/memory.md`.
    pub fn default_user_file() -> Option<PathBuf> {
        let base = match std::env::var_os("XDG_CONFIG_HOME") {
            Some(x) if !x.is_empty() => PathBuf::from(x),
            _ => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
        };
        Some(base.join("brood").join("memory.md"))
    }

    /// Both files, each with its label and the name shown to the model. A file
    /// inside the workspace goes through the jail, so a symlink planted at
    /// `.brood/memory.md` cannot redirect reads or appends out of the workspace.
    fn labelled(&self, ws: &Workspace) -> Result<Vec<(&'static str, PathBuf, String)>, ToolError> {
        let mut v = vec![(
            "workspace memory",
            jailed(ws, &self.workspace_file)?,
            shown(ws, &self.workspace_file),
        )];
        if let Some(u) = &self.user_file {
            v.push(("user memory", jailed(ws, u)?, shown(ws, u)))
        }
        Ok(v)
    }
}

/// `path` resolved through the workspace jail when it is relative or lies in the
/// workspace; a file elsewhere (the user's) is used as configured.
fn jailed(ws: &Workspace, path: &Path) -> Result<PathBuf, ToolError> {
    jailed_with(ws, path, Workspace::resolve)
}

/// [`jailed`] with the jail's `resolve` given (reads or appends).
fn jailed_with(
    ws: &Workspace,
    path: &Path,
    resolve: fn(&Workspace, &str) -> Result<PathBuf, ToolError>,
) -> Result<PathBuf, ToolError> {
    let root = ws.root();
    let rel = if path.is_absolute() {
        match path.strip_prefix(root) {
            Ok(rel) => rel,
            Err(_) => return Ok(path.to_path_buf()),
        }
    } else {
        path
    };
    resolve(ws, &rel.to_string_lossy())
}

/// A memory file's name for output: workspace-relative if inside it.
fn shown(ws: &Workspace, path: &Path) -> String {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        ws.root().join(path)
    };
    match abs.strip_prefix(ws.root()) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => abs.display().to_string(),
    }
}

/// The three memory tools sharing `files`.
pub(crate) fn memory_tools(files: MemoryFiles) -> Vec<Arc<dyn Tool>> {
    let files = Arc::new(files);
    vec![
        Arc::new(MemoryRead {
            files: files.clone(),
        }),
        Arc::new(MemorySearch {
            files: files.clone(),
        }),
        Arc::new(Remember { files }),
    ]
}

/// The lines of `path` (none if it does not exist), or `None` when the file is
/// larger than [`MAX_FILE_BYTES`] (it is then not read at all).
fn read_lines(ws: &Workspace, path: &Path, shown: &str) -> Result<Option<Vec<String>>, ToolError> {
    let Some(file) = open_memory(ws, path, shown)? else {
        return Ok(Some(Vec::new()));
    };
    let bytes = read_capped(&file, MAX_FILE_BYTES).map_err(|e| ToolError::Io {
        path: clip(shown),
        detail: e.to_string(),
    })?;
    Ok(bytes.map(|b| {
        String::from_utf8_lossy(&b)
            .lines()
            .map(str::to_string)
            .collect()
    }))
}

/// Open a memory file for reading (`None` if it does not exist): a file in the
/// workspace beneath its root (no symlink, no hard link), the user's as
/// configured. Either must be a regular file (a FIFO would block).
fn open_memory(ws: &Workspace, path: &Path, shown: &str) -> Result<Option<File>, ToolError> {
    let file = if path.starts_with(ws.root()) {
        match ws.open_read(path, shown) {
            Ok(o) => o.file,
            Err(ToolError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
    } else {
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(ToolError::Io {
                    path: clip(shown),
                    detail: e.to_string(),
                })
            }
        }
    };
    check_regular(&file, shown)?;
    Ok(Some(file))
}

/// All of `file` if it holds at most `cap` bytes, else `None`. Never reads more
/// than `cap + 1` bytes, whatever the file's size says or becomes.
pub(crate) fn read_capped(file: &File, cap: u64) -> io::Result<Option<Vec<u8>>> {
    let len = file.metadata()?.len();
    if len > cap {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(cap + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= cap).then_some(bytes))
}

/// The note that stands for a memory file too large to read.
fn too_large(shown: &str) -> String {
    format!(
        "[{shown} is larger than {} MiB and was not read; trim it (keep the notes that \
         still matter)]\n",
        MAX_FILE_BYTES >> 20
    )
}

/// Refuse a memory file that is not a regular file.
fn check_regular(file: &File, shown: &str) -> Result<(), ToolError> {
    match file.metadata() {
        Ok(m) if !m.is_file() => Err(ToolError::Io {
            path: shown.to_string(),
            detail: "is not a regular file; the memory file must be a plain Markdown file".into(),
        }),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------- memory_read

/// `memory_read`.
#[derive(Debug, Clone)]
pub(crate) struct MemoryRead {
    files: Arc<MemoryFiles>,
}

/// Arguments of `memory_read` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemoryReadArgs {}

#[async_trait]
impl Tool for MemoryRead {
    fn name(&self) -> &str {
        "memory_read"
    }
    fn description(&self) -> &str {
        "Read the memory files: notes kept across runs about this workspace and about the user. \
         Lines are numbered; cite them as file:line."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<MemoryReadArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Memory
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let _: MemoryReadArgs = parse_args(self.name(), args)?;
        let (files, ws) = (self.files.clone(), ctx.workspace.clone());
        blocking(move || {
            let files = files.labelled(&ws)?;
            let mut out = String::new();
            for (label, path, shown) in files {
                out.push_str(&format!("## {label} ({shown})\n"));
                let Some(lines) = read_lines(&ws, &path, &shown)? else {
                    out.push_str(&too_large(&shown));
                    out.push('\n');
                    continue;
                };
                if lines.is_empty() {
                    out.push_str("(empty)\n\n");
                    continue;
                }
                // Keep the newest lines within the cap.
                let mut first = lines.len();
                let mut bytes = 0usize;
                for line in lines.iter().rev() {
                    if bytes + line.len() + 8 > READ_MAX_BYTES {
                        break;
                    }
                    first -= 1;
                    bytes += line.len() + 8;
                }
                if first > 0 {
                    out.push_str(&format!(
                        "[lines 1-{first} not shown; use memory_search to find older notes]\n"
                    ));
                }
                for (i, line) in lines.iter().enumerate().skip(first) {
                    out.push_str(&format!("{:>6}\t{line}\n", i + 1));
                }
                out.push('\n');
            }
            Ok(out.trim_end().to_string())
        })
        .await
    }
}

// ---------------------------------------------------------------- memory_search

/// `memory_search`.
#[derive(Debug, Clone)]
pub(crate) struct MemorySearch {
    files: Arc<MemoryFiles>,
}

/// Arguments of `memory_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemorySearchArgs {
    /// Text to look for, case-insensitive. A plain substring unless `regex` is true.
    pub query: String,
    /// Treat `query` as a regular expression (default false).
    #[serde(default)]
    pub regex: Option<bool>,
}

#[async_trait]
impl Tool for MemorySearch {
    fn name(&self) -> &str {
        "memory_search"
    }
    fn description(&self) -> &str {
        "Search the memory files (workspace and user notes kept across runs) for lines \
         containing `query`, case-insensitive. Returns 'file:line: text' lines."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<MemorySearchArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Memory
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: MemorySearchArgs = parse_args(self.name(), args)?;
        if a.query.len() > MAX_NOTE_CHARS * 4 {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: format!(
                    "query '{}' is {} bytes; a note has at most {MAX_NOTE_CHARS} characters",
                    clip(&a.query),
                    a.query.len()
                ),
            });
        }
        if a.query.trim().is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: "query is empty".into(),
            });
        }
        let is_match: Box<dyn Fn(&str) -> bool + Send> = if a.regex.unwrap_or(false) {
            let m = RegexMatcherBuilder::new()
                .case_insensitive(true)
                .build(&a.query)
                .map_err(|e| ToolError::InvalidArguments {
                    tool: self.name().into(),
                    detail: format!("bad regex: {}", clip(&e.to_string())),
                })?;
            Box::new(move |line: &str| m.is_match(line.as_bytes()).unwrap_or(false))
        } else {
            let q = a.query.to_lowercase();
            Box::new(move |line: &str| line.to_lowercase().contains(&q))
        };
        let (files, ws) = (self.files.clone(), ctx.workspace.clone());
        let query = a.query;
        blocking(move || {
            let files = files.labelled(&ws)?;
            let mut out = String::new();
            let mut count = 0usize;
            let mut notes = String::new();
            for (_, path, shown) in files {
                let Some(lines) = read_lines(&ws, &path, &shown)? else {
                    notes.push_str(&too_large(&shown));
                    continue;
                };
                for (i, line) in lines.iter().enumerate() {
                    if is_match(line) {
                        count += 1;
                        if count <= SEARCH_MAX_RESULTS {
                            out.push_str(&format!("{shown}:{}: {line}\n", i + 1));
                        }
                    }
                }
            }
            if count == 0 {
                return Ok(format!("{notes}no memory lines match '{}'", clip(&query)));
            }
            if count > SEARCH_MAX_RESULTS {
                out.push_str(&format!(
                    "[{} more matches not shown; use a narrower query]\n",
                    count - SEARCH_MAX_RESULTS
                ));
            }
            out.push_str(&notes);
            Ok(out)
        })
        .await
    }
}

// ---------------------------------------------------------------- remember

/// `remember`.
#[derive(Debug, Clone)]
pub struct Remember {
    files: Arc<MemoryFiles>,
}

/// Arguments of `remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RememberArgs {
    /// One self-contained fact worth knowing in later runs (a convention, a command that
    /// works, a pitfall). Stored as one line; newlines become spaces.
    pub note: String,
}

#[async_trait]
impl Tool for Remember {
    fn name(&self) -> &str {
        "remember"
    }
    fn description(&self) -> &str {
        "Save a short note to the workspace memory so later runs know it (for example how to \
         run the tests, a project convention, a pitfall you hit). It is appended as a dated \
         line; keep it to one self-contained sentence. Do not store secrets."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<RememberArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Memory
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: RememberArgs = parse_args(self.name(), args)?;
        let note = a.note.split_whitespace().collect::<Vec<_>>().join(" ");
        if note.is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: "note is empty".into(),
            });
        }
        if note.chars().count() > MAX_NOTE_CHARS {
            return Err(ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: format!(
                    "note is longer than {MAX_NOTE_CHARS} characters; save one short fact per note"
                ),
            });
        }
        let line = format!("- {}: {note}", chrono::Local::now().format("%Y-%m-%d"));
        let (files, ws) = (self.files.clone(), ctx.workspace.clone());
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let shown = shown(&ws, &files.workspace_file);
            let path = jailed_with(&ws, &files.workspace_file, Workspace::resolve_for_append)?;
            let file = if path.starts_with(ws.root()) {
                ws.open_append(&path, &shown)?
            } else {
                open_append(&path).map_err(|e| ToolError::Io {
                    path: clip(&shown),
                    detail: e.to_string(),
                })?
            };
            check_regular(&file, &shown)?;
            let n = append_to(&file, &line, Some(&cancel)).map_err(|e| {
                if cancel.is_cancelled() {
                    ToolError::Cancelled
                } else {
                    ToolError::Io {
                        path: clip(&shown),
                        detail: e.to_string(),
                    }
                }
            })?;
            Ok(match n {
                Some(n) => format!("remembered at {shown}:{n}: {line}"),
                None => format!("remembered at the end of {shown}: {line}"),
            })
        })
        .await
    }
}

/// Append `line` to `path` under an exclusive `flock`, in one `O_APPEND` write,
/// starting on a fresh line. Returns the new line's number, or `None` when the file
/// is larger than [`MAX_FILE_BYTES`] (its lines are not counted).
pub fn append_line(path: &Path, line: &str) -> io::Result<Option<usize>> {
    append_to(&open_append(path)?, line, None)
}

/// `path` opened for appending, created with its parent directories if missing.
fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// [`append_line`] on an open file; waiting for the lock stops when `cancel` is
/// cancelled.
fn append_to(
    file: &File,
    line: &str,
    cancel: Option<&CancellationToken>,
) -> io::Result<Option<usize>> {
    let _lock = FileLock::exclusive(file, cancel)?;
    let len = file.metadata()?.len();
    let mut buf = String::with_capacity(line.len() + 2);
    let ends_open = len > 0 && last_byte(file, len)? != b'\n';
    if ends_open {
        buf.push('\n');
    }
    buf.push_str(line);
    buf.push('\n');
    // Count the lines before appending (bounded: a file over the cap gets none).
    let before = if len <= MAX_FILE_BYTES {
        Some(count_newlines(file, MAX_FILE_BYTES)? + usize::from(ends_open))
    } else {
        None
    };
    let mut writer = file;
    writer.write_all(buf.as_bytes())?;
    file.sync_data()?;
    Ok(before.map(|n| n + 1))
}

/// The byte at `len - 1` of `file`.
fn last_byte(file: &File, len: u64) -> io::Result<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, len.saturating_sub(1))?;
    let [byte] = b;
    Ok(byte)
}

/// How many `\n` the first `cap` bytes of `file` hold, read in small pieces.
fn count_newlines(file: &File, cap: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut at, mut n) = (0u64, 0usize);
    while at < cap {
        let got = file.read_at(&mut buf, at)?;
        if got == 0 {
            break;
        }
        n += buf
            .get(..got)
            .unwrap_or_default()
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        at += got as u64;
    }
    Ok(n)
}

/// An exclusive advisory lock on an open file, released on drop (and on close).
struct FileLock<'a> {
    file: &'a File,
}

impl<'a> FileLock<'a> {
    /// Wait for the lock. With `cancel`, the wait polls (`LOCK_NB`, backing off to
    /// 50 ms) and gives up with `ErrorKind::Interrupted` once it is cancelled, so a
    /// lock held by another process never keeps a cancelled call's thread.
    fn exclusive(file: &'a File, cancel: Option<&CancellationToken>) -> io::Result<Self> {
        let how = if cancel.is_some() {
            libc::LOCK_EX | libc::LOCK_NB
        } else {
            libc::LOCK_EX
        };
        let mut backoff = Duration::from_millis(1);
        loop {
            // SAFETY: flock on a descriptor we hold open.
            if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
                return Ok(FileLock { file });
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => {}
                _ => return Err(e),
            }
            if cancel.is_some_and(CancellationToken::is_cancelled) {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "cancelled while waiting for the memory file's lock",
                ));
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(LOCK_POLL_MAX);
        }
    }
}

/// Longest pause between two tries of a contended memory-file lock.
const LOCK_POLL_MAX: Duration = Duration::from_millis(50);

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: unlock the descriptor we locked.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}
