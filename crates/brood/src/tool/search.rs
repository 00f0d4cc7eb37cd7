//! Search tools: `find_files` (glob) and `grep` (regex), both over a walk of the
//! workspace that respects `.gitignore`/`.ignore` (the `ignore` crate, as ripgrep).
//!
//! Hidden files are searched, `.git` is not; symlinks are not followed, so a walk
//! never leaves the workspace. Results are workspace-relative and capped with a
//! marker; the walk runs on a blocking thread and stops when the call is cancelled.

use super::walk::{check_ancestors, walk};
use super::{
    blocking, clip, parse_args, schema_of, Capability, Tool, ToolContext, ToolError, Workspace,
};
use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkFinish, SinkMatch};
use rustix::fs::FileType;
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Most paths `find_files` lists.
pub(crate) const FIND_MAX_RESULTS: usize = 500;
/// Most matching lines `grep` returns.
pub(crate) const GREP_MAX_MATCHES: usize = 300;
/// Most bytes of `grep` output.
pub(crate) const GREP_MAX_BYTES: usize = 64 * 1024;
/// Files larger than this are not searched by `grep` (it says how many).
pub(crate) const GREP_MAX_FILE_BYTES: u64 = 256 << 20;
/// Longest line `grep` holds in memory; a file with a longer one is not searched.
const GREP_MAX_LINE_BUFFER: usize = 1 << 20;
/// Longest glob or regex pattern, in bytes.
pub(crate) const PATTERN_MAX_BYTES: usize = 4096;
/// Matching lines are cut to this many bytes.
const GREP_MAX_LINE_BYTES: usize = 400;

/// The builtin search tools, fresh instances.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(FindFiles), Arc::new(Grep)]
}

/// A glob as the tools use it: a pattern without `/` matches a file name at any
/// depth (`*.rs`); a pattern with `/` matches the path relative to the searched
/// directory (`src/**/*.rs`). `*` never crosses `/`, `**` does.
struct PathGlob {
    matcher: GlobMatcher,
    by_name: bool,
}

/// Refuse a pattern longer than [`PATTERN_MAX_BYTES`] before compiling it.
fn check_pattern(tool: &str, pattern: &str) -> Result<(), ToolError> {
    if pattern.len() > PATTERN_MAX_BYTES {
        return Err(ToolError::InvalidArguments {
            tool: tool.into(),
            detail: format!(
                "the pattern '{}' is {} bytes, longer than {PATTERN_MAX_BYTES}; use a shorter one",
                clip(pattern),
                pattern.len()
            ),
        });
    }
    Ok(())
}

impl PathGlob {
    fn new(tool: &str, pattern: &str) -> Result<Self, ToolError> {
        check_pattern(tool, pattern)?;
        let pattern = pattern.trim().trim_start_matches("./");
        if pattern.is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: tool.into(),
                detail: "the glob pattern is empty; e.g. '*.rs' or 'src/**/*.toml'".into(),
            });
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::InvalidArguments {
                tool: tool.into(),
                detail: format!("bad glob '{}': {e}", clip(pattern)),
            })?;
        Ok(PathGlob {
            matcher: glob.compile_matcher(),
            by_name: !pattern.contains('/'),
        })
    }

    fn matches(&self, rel: &Path) -> bool {
        if self.by_name {
            rel.file_name()
                .is_some_and(|n| self.matcher.is_match(Path::new(n)))
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// The path a glob is matched against: relative to the searched directory, or the
/// file name when a single file was given as `path`.
fn glob_path<'a>(entry: &'a ignore::DirEntry, dir: &Path) -> &'a Path {
    match entry.path().strip_prefix(dir) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel,
        _ => Path::new(entry.file_name()),
    }
}

/// Resolve the optional `path` argument to a directory or file to search.
fn search_root(ws: &Workspace, path: Option<&str>) -> Result<std::path::PathBuf, ToolError> {
    let shown = path.unwrap_or(".");
    let abs = ws.resolve(path.unwrap_or(""))?;
    if !abs.exists() {
        return Err(ToolError::NotFound { path: clip(shown) });
    }
    check_ancestors(ws, &abs)?;
    Ok(abs)
}

// ---------------------------------------------------------------- find_files

/// `find_files`: paths matching a glob.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FindFiles;

/// Arguments of `find_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FindFilesArgs {
    /// '*.rs' matches names at any depth; with '/' it matches paths ('src/**/*.rs').
    pub pattern: String,
    /// Directory (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
}

#[async_trait]
impl Tool for FindFiles {
    fn name(&self) -> &str {
        "find_files"
    }
    fn description(&self) -> &str {
        "Find files by glob, recursively, honoring .gitignore (at most 500)."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<FindFilesArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: FindFilesArgs = parse_args(self.name(), args)?;
        let glob = PathGlob::new(self.name(), &a.pattern)?;
        let ws = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let dir = search_root(&ws, a.path.as_deref())?;
            find(&ws, &dir, &glob, &a.pattern, &cancel)
        })
        .await
    }
}

fn find(
    ws: &Workspace,
    dir: &Path,
    glob: &PathGlob,
    pattern: &str,
    cancel: &CancellationToken,
) -> Result<String, ToolError> {
    let mut out = String::new();
    let mut total = 0usize;
    let (entries, skipped_dirs) = walk(ws, dir);
    for entry in entries {
        if cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if !glob.matches(glob_path(&entry, dir)) {
            continue;
        }
        total += 1;
        if total <= FIND_MAX_RESULTS {
            out.push_str(&ws.display(entry.path()));
            out.push('\n');
        }
    }
    let note = skipped_dirs.note();
    if total == 0 {
        return Ok(format!(
            "no files match '{}' under {}{}",
            clip(pattern),
            ws.display(dir),
            note.map(|n| format!(" ({n})")).unwrap_or_default()
        ));
    }
    if total > FIND_MAX_RESULTS {
        out.push_str(&format!(
            "[{} more of {total} matches not shown; narrow the pattern or path]\n",
            total - FIND_MAX_RESULTS
        ));
    }
    if let Some(n) = note {
        out.push_str(&format!("[{n}]\n"));
    }
    Ok(out)
}

// ---------------------------------------------------------------- grep

/// `grep`: lines matching a regex.
#[derive(Debug, Default, Clone, Copy)]
pub struct Grep;

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrepArgs {
    /// Regex, e.g. 'fn\s+main'.
    pub pattern: String,
    /// File or directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching it.
    #[serde(default)]
    pub glob: Option<String>,
    /// Ignore case.
    #[serde(default)]
    pub case_insensitive: Option<bool>,
}

#[async_trait]
impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }
    fn description(&self) -> &str {
        "Regex search of file contents (ripgrep), honoring .gitignore: `path:line: text` lines, at most 300."
    }
    fn schema(&self) -> serde_json::Value {
        schema_of::<GrepArgs>()
    }
    fn capability(&self) -> Capability {
        Capability::Read
    }
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: GrepArgs = parse_args(self.name(), args)?;
        check_pattern(self.name(), &a.pattern)?;
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(a.case_insensitive.unwrap_or(false))
            .line_terminator(Some(b'\n'))
            .build(&a.pattern)
            .map_err(|e| ToolError::InvalidArguments {
                tool: self.name().into(),
                detail: format!("bad regex: {}", clip(&e.to_string())),
            })?;
        let glob = a
            .glob
            .as_deref()
            .map(|g| PathGlob::new(self.name(), g))
            .transpose()?;
        let ws = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let dir = search_root(&ws, a.path.as_deref())?;
            grep(&ws, &dir, &matcher, glob.as_ref(), &a.pattern, &cancel)
        })
        .await
    }
}

fn grep(
    ws: &Workspace,
    dir: &Path,
    matcher: &grep_regex::RegexMatcher,
    glob: Option<&PathGlob>,
    pattern: &str,
    cancel: &CancellationToken,
) -> Result<String, ToolError> {
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .heap_limit(Some(GREP_MAX_LINE_BUFFER))
        .build();
    let mut out = Collect::default();
    let mut skipped = Skipped::default();
    let (entries, skipped_dirs) = walk(ws, dir);
    for entry in entries {
        if cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        if out.capped {
            break;
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if let Some(g) = glob {
            if !g.matches(glob_path(&entry, dir)) {
                continue;
            }
        }
        out.shown = ws.display(entry.path());
        let file = match ws.open_read(entry.path(), &out.shown) {
            Ok(o) if o.kind != FileType::RegularFile => continue,
            Ok(o) if o.len > GREP_MAX_FILE_BYTES => {
                skipped.large += 1;
                continue;
            }
            Ok(o) => o.file,
            Err(ToolError::HardLinked { .. }) => {
                skipped.linked += 1;
                continue;
            }
            Err(_) => {
                skipped.unreadable += 1;
                continue;
            }
        };
        out.binary = false;
        if searcher.search_file(matcher, &file, &mut out).is_err() {
            skipped.unreadable += 1;
        }
        if out.binary {
            skipped.binary += 1;
        }
    }
    let mut notes = skipped.notes();
    if let Some(n) = skipped_dirs.note() {
        if !notes.is_empty() {
            notes.push_str("; ");
        }
        notes.push_str(&n);
    }
    if out.count == 0 {
        return Ok(format!(
            "no matches for /{}/ under {}{}",
            clip(pattern),
            ws.display(dir),
            if notes.is_empty() {
                String::new()
            } else {
                format!(" ({notes})")
            }
        ));
    }
    let mut text = out.text;
    if out.capped {
        text.push_str(&format!(
            "[stopped after {} matching lines; narrow the pattern, path or glob to see the rest]\n",
            out.count
        ));
    }
    if !notes.is_empty() {
        text.push_str(&format!("[{notes}]\n"));
    }
    Ok(text)
}

/// Files `grep` did not search, by why.
#[derive(Default)]
struct Skipped {
    binary: usize,
    large: usize,
    linked: usize,
    unreadable: usize,
}

impl Skipped {
    /// `N binary file(s) skipped; …`, or nothing when none were skipped.
    fn notes(&self) -> String {
        let mut parts = Vec::new();
        if self.binary > 0 {
            parts.push(format!(
                "{} binary file(s) skipped (a NUL byte found)",
                self.binary
            ));
        }
        if self.large > 0 {
            parts.push(format!(
                "{} file(s) over {} MiB skipped (use bash to search them)",
                self.large,
                GREP_MAX_FILE_BYTES >> 20
            ));
        }
        if self.linked > 0 {
            parts.push(format!(
                "{} hard-linked file(s) skipped (another name may be outside the workspace)",
                self.linked
            ));
        }
        if self.unreadable > 0 {
            parts.push(format!(
                "{} file(s) could not be read or have a line over {} MiB",
                self.unreadable,
                GREP_MAX_LINE_BUFFER >> 20
            ));
        }
        parts.join("; ")
    }
}

/// The sink of `grep`'s searcher: matching lines as `path:line: text`, capped.
#[derive(Default)]
struct Collect {
    /// The file being searched, as shown.
    shown: String,
    text: String,
    count: usize,
    capped: bool,
    /// The file being searched turned out to be binary.
    binary: bool,
}

impl Sink for Collect {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.count >= GREP_MAX_MATCHES || self.text.len() >= GREP_MAX_BYTES {
            self.capped = true;
            return Ok(false);
        }
        let line = String::from_utf8_lossy(mat.bytes());
        let line = cut(line.trim_end_matches(['\n', '\r']), GREP_MAX_LINE_BYTES);
        let no = mat.line_number().unwrap_or(0);
        self.text
            .push_str(&format!("{}:{no}: {line}\n", self.shown));
        self.count += 1;
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }

    fn finish(&mut self, _: &Searcher, finish: &SinkFinish) -> Result<(), Self::Error> {
        self.binary |= finish.binary_byte_offset().is_some();
        Ok(())
    }
}

/// `s` cut to at most `max` bytes on a char boundary, with a marker when cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [line cut]", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_without_slash_matches_names_at_any_depth() {
        let g = PathGlob::new("t", "*.rs").unwrap();
        assert!(g.matches(Path::new("a/b/c.rs")));
        assert!(!g.matches(Path::new("a/b/c.rsx")));
        let g = PathGlob::new("t", "src/*.rs").unwrap();
        assert!(g.matches(Path::new("src/x.rs")));
        assert!(!g.matches(Path::new("src/deep/x.rs")));
        let g = PathGlob::new("t", "src/**/*.rs").unwrap();
        assert!(g.matches(Path::new("src/deep/x.rs")));
    }

    #[test]
    fn cut_respects_char_boundaries() {
        let s = "ééé";
        assert_eq!(cut(s, 3), "é [line cut]");
        assert_eq!(cut(s, 6), "ééé");
    }
}
